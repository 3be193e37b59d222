//! Groups, GitLab's API shapes (admin token): `GET /groups` (paged), `POST /groups`,
//! `GET /groups/:id` and `DELETE /groups/:id`, `:id` the group's id or URL-encoded full
//! path. Groups are the namespaces of project paths and the groups made here:
//! `coordinator/groups.rs`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use serde::Deserialize;

use crate::coordinator::CoordinatorError;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::{Page, page_of};
use super::{AppState, auth, json_response};

/// `GET /groups`.
pub(crate) async fn list(
    State(state): State<AppState>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(page_of(state.coordinator.groups().await?, &page))
}

/// `GET /groups/:id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    match state.coordinator.group(&group).await {
        Ok(g) => Ok(json_response(StatusCode::OK, &g)),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Group")),
        Err(other) => Err(other.into()),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GroupParams {
    name: Option<String>,
    path: Option<String>,
    parent_id: Option<serde_json::Value>,
    description: Option<String>,
}

/// `POST /groups` (`name`, `path`, `parent_id`, `description`): `201` with the group.
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: GroupParams = extract::params(&headers, &body).await?;
    let (Some(name), Some(path)) = (params.name, params.path) else {
        return Err(ApiError::bad_request("name, path are missing"));
    };
    let parent = match params.parent_id {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) if s.is_empty() => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    match state
        .coordinator
        .create_group(
            &name,
            &path,
            parent.as_deref(),
            params.description.as_deref().unwrap_or_default(),
        )
        .await
    {
        Ok(group) => Ok(json_response(StatusCode::CREATED, &group)),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Parent group")),
        Err(other) => Err(other.into()),
    }
}

/// `DELETE /groups/:id`: `202`, as GitLab answers (the group is gone when it does).
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    match state.coordinator.delete_group(&group).await {
        Ok(()) => Ok(json_response(
            StatusCode::ACCEPTED,
            &serde_json::json!({ "message": "202 Accepted" }),
        )),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Group")),
        Err(other) => Err(other.into()),
    }
}
