//! User API, where GitLab's clients start: `GET /user` (the token's user: the
//! administrator, Gantry's one user), `GET /users[/:id]`, `GET /version` and
//! `GET /metadata`, and personal
//! access tokens — `POST /users/:id/personal_access_tokens` and
//! `POST /user/personal_access_tokens` (make one), `GET /personal_access_tokens[/:id]`,
//! `GET /personal_access_tokens/self`, `DELETE /personal_access_tokens/:id` (revoke;
//! `self`: the calling token). Any valid token; see `auth.rs` for what `read_api` allows.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::coordinator::{AccessTokenRequest, CoordinatorError};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::{AppState, auth, json_response};

/// The GitLab version whose API Gantry answers (`GET /version`): clients that check a
/// version before a call see one that has every call Gantry serves.
pub(crate) const GITLAB_API_VERSION: &str = gantry_pipeline::GITLAB_VERSION;

/// `GET /user`'s answer: GitLab's `UserPublic` entity with `is_admin`, for the
/// administrator.
#[derive(Debug, Serialize)]
struct UserView {
    id: i64,
    username: String,
    name: String,
    state: &'static str,
    locked: bool,
    avatar_url: Option<String>,
    web_url: String,
    created_at: Option<String>,
    bio: &'static str,
    location: &'static str,
    public_email: Option<String>,
    organization: &'static str,
    job_title: &'static str,
    bot: bool,
    last_sign_in_at: Option<String>,
    confirmed_at: Option<String>,
    last_activity_on: Option<String>,
    email: String,
    theme_id: i64,
    color_scheme_id: i64,
    projects_limit: i64,
    current_sign_in_at: Option<String>,
    identities: [(); 0],
    can_create_group: bool,
    can_create_project: bool,
    two_factor_enabled: bool,
    external: bool,
    private_profile: bool,
    commit_email: String,
    is_admin: bool,
}

fn admin_user(state: &AppState) -> UserView {
    let config = state.coordinator.config();
    let user = &config.user;
    UserView {
        id: state.coordinator.admin_user_id(),
        username: user.login.clone(),
        name: user.name.clone(),
        state: "active",
        locked: false,
        avatar_url: None,
        web_url: format!(
            "{}/{}",
            config.external_url.trim_end_matches('/'),
            user.login
        ),
        created_at: None,
        bio: "",
        location: "",
        public_email: None,
        organization: "",
        job_title: "",
        bot: false,
        last_sign_in_at: None,
        confirmed_at: None,
        last_activity_on: None,
        email: user.email.clone(),
        theme_id: 1,
        color_scheme_id: 1,
        projects_limit: 0,
        current_sign_in_at: None,
        identities: [],
        can_create_group: true,
        can_create_project: true,
        two_factor_enabled: false,
        external: false,
        private_profile: false,
        commit_email: user.email.clone(),
        is_admin: true,
    }
}

/// `GET /api/v4/user`: the user the token belongs to (every token is the
/// administrator's).
pub(crate) async fn current(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(StatusCode::OK, &admin_user(&state)))
}

/// `GET /users`'s filters (GitLab's `UsersFinder`): `username` (exact, in any case) and
/// `search` (part of the name, username or email, in any case). Others are not told
/// apart: Gantry has one user, active, human and an administrator.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct UsersFilter {
    username: Option<String>,
    search: Option<String>,
}

/// `GET /api/v4/users[?username=&search=]`: the users, Gantry's one (the administrator)
/// when it matches — as python-gitlab's `users.list(username=…)` finds a user's id.
pub(crate) async fn list(
    State(state): State<AppState>,
    Query(filter): Query<UsersFilter>,
    page: super::projects::Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let user = admin_user(&state);
    let named = filter
        .username
        .as_deref()
        .is_none_or(|name| name.eq_ignore_ascii_case(&user.username));
    let found = filter.search.as_deref().is_none_or(|text| {
        let text = text.to_lowercase();
        [&user.username, &user.name, &user.email]
            .iter()
            .any(|field| field.to_lowercase().contains(&text))
    });
    let users = if named && found {
        vec![user]
    } else {
        Vec::new()
    };
    Ok(super::projects::page_of(users, &page))
}

/// `GET /api/v4/users/:id`: the administrator; `404` for any other id.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    user_id(&state, &id)?;
    Ok(json_response(StatusCode::OK, &admin_user(&state)))
}

/// The user `id` names: the administrator's id, else `404 User Not Found`.
fn user_id(state: &AppState, id: &str) -> Result<i64, ApiError> {
    let admin = state.coordinator.admin_user_id();
    match id.trim().parse::<i64>() {
        Ok(id) if id == admin => Ok(id),
        _ => Err(ApiError::not_found("User")),
    }
}

#[derive(Serialize)]
struct Kas {
    enabled: bool,
    #[serde(rename = "externalUrl")]
    external_url: Option<String>,
    #[serde(rename = "externalK8sProxyUrl")]
    external_k8s_proxy_url: Option<String>,
    version: Option<String>,
}

#[derive(Serialize)]
struct Metadata {
    version: &'static str,
    revision: String,
    kas: Kas,
    enterprise: bool,
}

fn metadata() -> Metadata {
    Metadata {
        version: GITLAB_API_VERSION,
        revision: gantry_pipeline::context::server_revision(),
        kas: Kas {
            enabled: false,
            external_url: None,
            external_k8s_proxy_url: None,
            version: None,
        },
        enterprise: false,
    }
}

/// `GET /api/v4/metadata`: GitLab's instance metadata (version, revision, no KAS).
pub(crate) async fn show_metadata(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(StatusCode::OK, &metadata()))
}

/// `GET /api/v4/version`: `{"version", "revision"}` (and the metadata's other keys, as
/// GitLab answers this deprecated alias).
pub(crate) async fn version(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(StatusCode::OK, &metadata()))
}

/// The body of `POST …/personal_access_tokens`: `scopes` as a JSON list or form
/// `scopes[]=api`, or a comma list.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CreateToken {
    name: Option<String>,
    scopes: Option<gantry_protocol::registration::TagList>,
    expires_at: Option<String>,
}

async fn create_for(
    state: &AppState,
    user_id: i64,
    headers: &HeaderMap,
    body: &axum::body::Bytes,
) -> ApiResult<Response> {
    let req: CreateToken = extract::params(headers, body).await?;
    let request = AccessTokenRequest {
        name: req.name.unwrap_or_default(),
        scopes: req.scopes.map(|s| s.0).unwrap_or_default(),
        expires_at: req.expires_at,
    };
    let token = state
        .coordinator
        .create_access_token(user_id, &request)
        .await
        .map_err(|e| match e {
            CoordinatorError::NotFound(_) => ApiError::not_found("User"),
            CoordinatorError::Invalid(why) => ApiError::param(why),
            other => other.into(),
        })?;
    Ok(json_response(StatusCode::CREATED, &token))
}

/// `POST /api/v4/users/:id/personal_access_tokens` (`name`, `scopes`, `expires_at`) →
/// `201` with the token and its secret `token`, shown this once.
pub(crate) async fn create_for_user(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let user_id = user_id(&state, &id)?;
    create_for(&state, user_id, &headers, &body).await
}

/// `POST /api/v4/user/personal_access_tokens`: a token of the calling user.
pub(crate) async fn create_for_self(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let user_id = state.coordinator.admin_user_id();
    create_for(&state, user_id, &headers, &body).await
}

/// `GET /api/v4/personal_access_tokens`: every token, without secrets.
pub(crate) async fn list_tokens(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.access_tokens().await?,
    ))
}

/// The token `id` names: its number, or `self` — the calling token (`404` when the
/// caller used the admin token, which is no personal access token).
async fn token_id(state: &AppState, headers: &HeaderMap, id: &str) -> ApiResult<i64> {
    if id == "self" {
        let token = extract::private_token(headers).unwrap_or("");
        return match state.coordinator.access_token_of(token).await? {
            Some(view) => Ok(view.id),
            None => Err(ApiError::not_found("Personal access token")),
        };
    }
    id.parse()
        .map_err(|_| ApiError::not_found("Personal access token"))
}

/// `GET /api/v4/personal_access_tokens/:id` (or `self`).
pub(crate) async fn show_token(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let id = token_id(&state, &headers, &id).await?;
    let token = state
        .coordinator
        .access_token(id)
        .await
        .map_err(|e| match e {
            CoordinatorError::NotFound(_) => ApiError::not_found("Personal access token"),
            other => other.into(),
        })?;
    Ok(json_response(StatusCode::OK, &token))
}

/// `DELETE /api/v4/personal_access_tokens/:id` (or `self`) → `204`: the token stops
/// working at once.
pub(crate) async fn revoke_token(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let id = token_id(&state, &headers, &id).await?;
    state
        .coordinator
        .revoke_access_token(id)
        .await
        .map_err(|e| match e {
            CoordinatorError::NotFound(_) => ApiError::not_found("Personal access token"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
