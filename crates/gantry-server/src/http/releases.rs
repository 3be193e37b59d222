//! Releases, GitLab's API shapes (admin token): `GET /projects/:id/releases` (paged,
//! newest `released_at` first) and `GET /projects/:id/releases/:tag_name`. Releases are
//! made by `release:` jobs (`coordinator/releases.rs`).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::error::{ApiError, ApiResult};
use super::projects::{Page, admin_project_id, paged};
use super::{AppState, json_response};
use crate::coordinator::CoordinatorError;

/// `GET /projects/:id/releases`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(project): Path<String>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let all = state.coordinator.releases(project).await?;
    let total = i64::try_from(all.len()).unwrap_or(i64::MAX);
    let (offset, limit) = page.window();
    let shown = all
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(0))
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .collect();
    Ok(paged(shown, total, &page))
}

/// `GET /projects/:id/releases/:tag_name`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((project, tag)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    match state.coordinator.release(project, &tag).await {
        Ok(release) => Ok(json_response(StatusCode::OK, &release)),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Release")),
        Err(e) => Err(e.into()),
    }
}
