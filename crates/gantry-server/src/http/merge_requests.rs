//! Merge requests, GitLab's API shapes (admin token): `GET /projects/:id/merge_requests`
//! (`?state=opened|closed|merged|all`, paged), `GET /projects/:id/merge_requests/:iid`,
//! `GET /projects/:id/merge_requests/:iid/pipelines`; and the forges' webhook:
//! `POST /projects/:id/forge_hook` (the delivery proves the project's secret, see
//! `coordinator/forge_hooks.rs`; `?merged_result=true` asks for merged results
//! pipelines), whose secret `PUT /projects/:id/forge_hook` (`secret`) sets and
//! `DELETE` removes (admin token).

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::{Page, find_project, page_of};
use super::{AppState, auth, json_response};
use crate::coordinator::ForgeHook;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StateFilter {
    state: Option<String>,
}

/// `GET /projects/:id/merge_requests`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(filter): Query<StateFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let wanted = match filter.state.as_deref() {
        None | Some("all") => None,
        Some(s @ ("opened" | "closed" | "merged")) => Some(s),
        Some(other) => {
            return Err(ApiError::param(format!(
                "state does not have a valid value: `{other}` is none of opened, closed, merged, all"
            )));
        }
    };
    let all = state.coordinator.merge_requests(project.id, wanted).await?;
    Ok(page_of(all, &page))
}

/// `GET /projects/:id/merge_requests/:iid`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((project, iid)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let m = state.coordinator.merge_request(project.id, iid).await?;
    Ok(json_response(StatusCode::OK, &m))
}

/// `GET /projects/:id/merge_requests/:iid/pipelines`.
pub(crate) async fn pipelines(
    State(state): State<AppState>,
    Path((project, iid)): Path<(String, i64)>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let all = state
        .coordinator
        .merge_request_pipelines(project.id, iid)
        .await?;
    Ok(page_of(all, &page))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SecretParams {
    secret: Option<String>,
}

/// `PUT /projects/:id/forge_hook` (`secret`) → `200` with the URL to give the forge.
pub(crate) async fn set_secret(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: SecretParams = extract::params(&headers, &body).await?;
    let secret = params
        .secret
        .ok_or_else(|| ApiError::param("secret is missing"))?;
    let project = find_project(&state, &project).await?;
    state
        .coordinator
        .set_forge_hook_secret(project.id, Some(&secret))
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({
            "url": format!(
                "{}/api/v4/projects/{}/forge_hook",
                state.coordinator.external_url(),
                project.id
            ),
        }),
    ))
}

/// `DELETE /projects/:id/forge_hook` → `204`.
pub(crate) async fn remove_secret(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    state
        .coordinator
        .set_forge_hook_secret(project.id, None)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct HookQuery {
    merged_result: Option<String>,
}

/// `POST /projects/:id/forge_hook`: a forge's delivery → `200` with what it did.
pub(crate) async fn receive(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<HookQuery>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = find_project(&state, &project).await?;
    let header = |name: &str| extract::header_str(&headers, name);
    let hook = ForgeHook {
        github_event: header("x-github-event"),
        github_signature: header("x-hub-signature-256"),
        gitea_event: header("x-gitea-event").or_else(|| header("x-forgejo-event")),
        gitea_signature: header("x-gitea-signature").or_else(|| header("x-forgejo-signature")),
        gitlab_event: header("x-gitlab-event"),
        gitlab_token: header("x-gitlab-token"),
        merged_result: matches!(query.merged_result.as_deref(), Some("true" | "1")),
        body: &body,
    };
    let outcome = state
        .coordinator
        .receive_forge_hook(project.id, &hook)
        .await?;
    Ok(json_response(StatusCode::OK, &outcome))
}
