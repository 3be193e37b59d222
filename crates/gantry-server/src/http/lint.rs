//! The CI Lint API: `POST /projects/:id/ci/lint` checks the `content` given,
//! `GET /projects/:id/ci/lint` the project's own configuration file at `content_ref`;
//! both statically or as a dry run (`dry_run`, `dry_run_ref`), with the jobs when asked
//! (`include_jobs`). GitLab's parameters and answer; see [`Coordinator::lint`].
//!
//! [`Coordinator::lint`]: crate::coordinator::Coordinator::lint

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use crate::coordinator::LintRequest;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::find_project;
use super::{AppState, auth, json_response};

/// `POST`'s parameters (`ref`: the dry run's branch or tag).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LintBody {
    content: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    dry_run: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    include_jobs: Option<bool>,
    #[serde(rename = "ref")]
    ref_name: Option<String>,
}

/// `GET`'s parameters, with GitLab's deprecated names (`sha` for `content_ref`, `ref`
/// for `dry_run_ref`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct LintQuery {
    content_ref: Option<String>,
    sha: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    dry_run: Option<bool>,
    dry_run_ref: Option<String>,
    #[serde(rename = "ref")]
    ref_name: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    include_jobs: Option<bool>,
}

/// `POST /api/v4/projects/:id/ci/lint` → `200 {"valid", "errors", "warnings",
/// "merged_yaml", "includes"[, "jobs"]}`.
pub(crate) async fn lint_content(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: LintBody = extract::params(&headers, &body).await?;
    let content = params
        .content
        .ok_or_else(|| ApiError::param("content is missing"))?;
    let project = find_project(&state, &project).await?;
    let request = LintRequest {
        content: Some(content),
        content_ref: None,
        dry_run: params.dry_run.unwrap_or(false),
        dry_run_ref: nonempty(params.ref_name),
        include_jobs: params.include_jobs.unwrap_or(false),
    };
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.lint(project.id, &request).await?,
    ))
}

/// `GET /api/v4/projects/:id/ci/lint`: the project's configuration file.
pub(crate) async fn lint_project(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<LintQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let request = LintRequest {
        content: None,
        content_ref: nonempty(query.content_ref).or(nonempty(query.sha)),
        dry_run: query.dry_run.unwrap_or(false),
        dry_run_ref: nonempty(query.dry_run_ref).or(nonempty(query.ref_name)),
        include_jobs: query.include_jobs.unwrap_or(false),
    };
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.lint(project.id, &request).await?,
    ))
}

fn nonempty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}
