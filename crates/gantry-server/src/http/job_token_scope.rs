//! A project's CI/CD job token scope, GitLab's API shapes (`API::ProjectJobTokenScope`;
//! admin token, as GitLab asks a maintainer; a `read_api` token reads):
//!
//! * `GET /projects/:id/job_token_scope` → `{"inbound_enabled", "outbound_enabled"}`;
//!   `PATCH` with `enabled` → `204`;
//! * `GET /projects/:id/job_token_scope/allowlist` → the projects (the project itself
//!   and those added, by id, `BasicProjectDetails`, paged); `POST` with
//!   `target_project_id` → `201 {"source_project_id", "target_project_id"}`;
//!   `DELETE …/allowlist/:target_project_id` → `204`;
//! * `…/groups_allowlist` the same for groups (`target_group_id`; `BasicGroupDetails`).
//!
//! As on GitLab, the `POST` and `DELETE` routes take the project's numeric id only (a
//! path is `400 {"error": "id is invalid"}`). What the scope decides:
//! `coordinator/job_token_scope.rs`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::coordinator::CoordinatorError;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::{Page, admin_project_id, find_project, page_of, simple_project};
use super::{AppState, auth, json_response};

/// An integer path parameter, as Grape's `type: Integer` reads it.
fn integer(name: &str, text: &str) -> ApiResult<i64> {
    text.trim()
        .parse()
        .map_err(|_| ApiError::param(format!("{name} is invalid")))
}

/// The project of a `POST`/`DELETE` route (the caller is the admin): its numeric id
/// only, as GitLab's. Grape's order: the parameters (`id`, then the others, which
/// `params` checks), then the project.
async fn numeric_project<T>(
    state: &AppState,
    project: &str,
    params: impl FnOnce() -> ApiResult<T>,
) -> ApiResult<(i64, T)> {
    let id = integer("id", project)?;
    let params = params()?;
    Ok((find_project(state, &id.to_string()).await?.id, params))
}

/// `GET /projects/:id/job_token_scope`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = admin_project_id(&state, &headers, &project).await?;
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.job_token_scope(id).await?,
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ScopeParams {
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    enabled: Option<bool>,
}

/// `PATCH /projects/:id/job_token_scope` (`enabled`) → `204`.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: ScopeParams = extract::params(&headers, &body).await?;
    let Some(enabled) = params.enabled else {
        return Err(ApiError::param("enabled is missing"));
    };
    let id = find_project(&state, &project).await?.id;
    state.coordinator.set_job_token_scope(id, enabled).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /projects/:id/job_token_scope/allowlist`.
pub(crate) async fn allowlist(
    State(state): State<AppState>,
    Path(project): Path<String>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = admin_project_id(&state, &headers, &project).await?;
    let projects = state.coordinator.job_token_allowlist(id).await?;
    let simple = projects
        .iter()
        .map(simple_project)
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(page_of(simple, &page))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AddProject {
    #[serde(deserialize_with = "extract::grape::opt_i64")]
    target_project_id: Option<i64>,
}

/// `POST /projects/:id/job_token_scope/allowlist` (`target_project_id`) → `201`.
pub(crate) async fn add_project(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: AddProject = extract::params(&headers, &body).await?;
    let (id, target) = numeric_project(&state, &project, || {
        params
            .target_project_id
            .ok_or_else(|| ApiError::param("target_project_id is missing"))
    })
    .await?;
    match state.coordinator.allow_job_token_project(id, target).await {
        Ok(link) => Ok(json_response(StatusCode::CREATED, &link)),
        Err(CoordinatorError::NotFound("target_project_id")) => {
            Err(ApiError::not_found("target_project_id not found"))
        }
        Err(other) => Err(other.into()),
    }
}

/// `DELETE /projects/:id/job_token_scope/allowlist/:target_project_id` → `204`.
pub(crate) async fn remove_project(
    State(state): State<AppState>,
    Path((project, target)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let (id, target) =
        numeric_project(&state, &project, || integer("target_project_id", &target)).await?;
    state
        .coordinator
        .disallow_job_token_project(id, target)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /projects/:id/job_token_scope/groups_allowlist`.
pub(crate) async fn groups_allowlist(
    State(state): State<AppState>,
    Path(project): Path<String>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = admin_project_id(&state, &headers, &project).await?;
    Ok(page_of(
        state.coordinator.job_token_groups_allowlist(id).await?,
        &page,
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AddGroup {
    #[serde(deserialize_with = "extract::grape::opt_i64")]
    target_group_id: Option<i64>,
}

/// `POST /projects/:id/job_token_scope/groups_allowlist` (`target_group_id`) → `201`.
pub(crate) async fn add_group(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: AddGroup = extract::params(&headers, &body).await?;
    let (id, group) = numeric_project(&state, &project, || {
        params
            .target_group_id
            .ok_or_else(|| ApiError::param("target_group_id is missing"))
    })
    .await?;
    match state.coordinator.allow_job_token_group(id, group).await {
        Ok(link) => Ok(json_response(StatusCode::CREATED, &link)),
        Err(CoordinatorError::NotFound("target_group_id")) => {
            Err(ApiError::not_found("target_group_id not found"))
        }
        Err(other) => Err(other.into()),
    }
}

/// `DELETE /projects/:id/job_token_scope/groups_allowlist/:target_group_id` → `204`.
pub(crate) async fn remove_group(
    State(state): State<AppState>,
    Path((project, group)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let (id, group) =
        numeric_project(&state, &project, || integer("target_group_id", &group)).await?;
    match state.coordinator.disallow_job_token_group(id, group).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(CoordinatorError::NotFound("target_group_id")) => {
            Err(ApiError::not_found("target_group_id not found"))
        }
        Err(other) => Err(other.into()),
    }
}
