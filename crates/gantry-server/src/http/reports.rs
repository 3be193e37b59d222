//! A pipeline's code reports besides JUnit (`projects.rs` has the test report), admin
//! token: `GET /projects/:id/pipelines/:pipeline_id/coverage_report` (Cobertura and JaCoCo,
//! `coordinator/coverage_reports.rs`) and `…/codequality_report` (Code Climate,
//! `coordinator/codequality.rs`).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::error::ApiResult;
use super::projects::find_pipeline;
use super::{AppState, auth, json_response};

/// `GET /projects/:id/pipelines/:pipeline_id/coverage_report`.
pub(crate) async fn coverage_report(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let pipeline = find_pipeline(&state, &project, pipeline).await?;
    let report = state.coordinator.coverage_report(pipeline.id).await?;
    Ok(json_response(StatusCode::OK, &report))
}

/// `GET /projects/:id/pipelines/:pipeline_id/codequality_report`.
pub(crate) async fn codequality_report(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let pipeline = find_pipeline(&state, &project, pipeline).await?;
    let report = state.coordinator.codequality_report(pipeline.id).await?;
    Ok(json_response(StatusCode::OK, &report))
}
