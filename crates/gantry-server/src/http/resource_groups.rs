//! Resource groups, GitLab's API shapes (admin token): `GET /projects/:id/resource_groups`,
//! `GET/PUT …/resource_groups/:key` (`process_mode`) and `GET …/:key/upcoming_jobs`. A key
//! with `/` is URL-encoded (`deploy%2Fprod`). Rules: `coordinator/resource_groups.rs`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::error::ApiResult;
use super::extract::{self, Body};
use super::projects::admin_project_id;
use super::{AppState, json_response};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ResourceGroupParams {
    process_mode: Option<String>,
}

/// `GET /projects/:id/resource_groups`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let groups = state
        .coordinator
        .environments()
        .resource_groups(project)
        .await?;
    Ok(json_response(StatusCode::OK, &groups))
}

/// `GET /projects/:id/resource_groups/:key`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((project, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let group = state
        .coordinator
        .environments()
        .resource_group(project, &key)
        .await?;
    Ok(json_response(StatusCode::OK, &group))
}

/// `PUT /projects/:id/resource_groups/:key`: `process_mode`.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path((project, key)): Path<(String, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let params: ResourceGroupParams = extract::params(&headers, &body).await?;
    let group = state
        .coordinator
        .update_resource_group(project, &key, params.process_mode.as_deref())
        .await?;
    Ok(json_response(StatusCode::OK, &group))
}

/// `GET /projects/:id/resource_groups/:key/upcoming_jobs`: the waiting jobs, in the order
/// they will get the resource.
pub(crate) async fn upcoming_jobs(
    State(state): State<AppState>,
    Path((project, key)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let jobs = state.coordinator.upcoming_jobs(project, &key).await?;
    Ok(json_response(StatusCode::OK, &jobs))
}
