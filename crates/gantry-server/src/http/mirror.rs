//! `POST /api/v4/projects/:id/mirror/pull` (GitLab's "start the pull mirroring process"):
//! fetch the project's repository now and create a push pipeline for each branch or tag
//! that moved (see `coordinator/pushes.rs`). A forge's push webhook points here, so the
//! admin token may also come as `?private_token=` (GitLab accepts it on every API call;
//! GitHub's webhooks cannot send a header).
//!
//! `200` with what was found: `[{"ref", "before", "after", "pipeline_id", "reason"}]`.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use super::projects::find_project;
use super::{AppState, auth, json_response};

#[derive(Debug, Default, Deserialize)]
pub(crate) struct TokenQuery {
    private_token: Option<String>,
}

pub(crate) async fn pull(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<TokenQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    match &query.private_token {
        Some(token) if !state.coordinator.is_admin(token).await? => {
            return Err(ApiError::unauthorized());
        }
        Some(_) => {}
        None => auth::require_admin(&state.coordinator, &headers).await?,
    }
    let project = find_project(&state, &project).await?;
    let pushed = state.coordinator.pull_mirror(project.id).await?;
    Ok(json_response(StatusCode::OK, &pushed))
}
