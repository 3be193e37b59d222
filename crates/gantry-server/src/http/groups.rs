//! Groups, GitLab's API shapes (admin token): `GET /groups` (paged) and `GET /groups/:id`,
//! `:id` the group's id or URL-encoded full path. Groups are the namespaces of project
//! paths: `coordinator/groups.rs`.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use crate::coordinator::CoordinatorError;

use super::error::{ApiError, ApiResult};
use super::projects::{Page, page_of};
use super::{AppState, auth, json_response};

/// `GET /groups`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Query(page): Query<Page>,
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
