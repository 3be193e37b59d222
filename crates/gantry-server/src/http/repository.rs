//! GitLab's repository API, read-only (`coordinator/repository.rs`):
//! `GET /projects/:id/repository/files/:file_path?ref=` (base64 content) and `…/raw`
//! (the bytes; `ref` defaults to the default branch), `GET …/repository/commits/:sha`,
//! `GET …/repository/commits[?ref_name=&path=]` (paged as GitLab pages),
//! `GET …/repository/branches[/:branch]`, `GET …/repository/tags[/:tag]`. A path or a branch with `/` comes URL-encoded
//! (`app%2Fmain.rs`), as GitLab's clients send it. Any valid token.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use super::projects::{Page, find_project, paged};
use super::{AppState, auth, json_response};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RefQuery {
    #[serde(rename = "ref")]
    ref_name: Option<String>,
}

/// `GET /projects/:id/repository/files/:file_path?ref=REF`.
pub(crate) async fn file(
    State(state): State<AppState>,
    Path((project, path)): Path<(String, String)>,
    Query(query): Query<RefQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let rev = query
        .ref_name
        .filter(|r| !r.is_empty())
        .ok_or_else(|| ApiError::param("ref is missing"))?;
    let (file, _) = state
        .coordinator
        .repository_file(project.id, &path, &rev)
        .await?;
    Ok(json_response(StatusCode::OK, &file))
}

/// `GET /projects/:id/repository/files/:file_path/raw[?ref=REF]`: the file's bytes.
pub(crate) async fn raw_file(
    State(state): State<AppState>,
    Path((project, path)): Path<(String, String)>,
    Query(query): Query<RefQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let rev = query
        .ref_name
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| project.default_branch.clone());
    let (file, bytes) = state
        .coordinator
        .repository_file(project.id, &path, &rev)
        .await?;
    let mut response = (StatusCode::OK, bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    for (name, value) in [
        ("x-gitlab-blob-id", file.blob_id.as_str()),
        ("x-gitlab-commit-id", file.commit_id.as_str()),
        ("x-gitlab-last-commit-id", file.last_commit_id.as_str()),
        ("x-gitlab-content-sha256", file.content_sha256.as_str()),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    Ok(response)
}

/// `GET /projects/:id/repository/commits/:sha` (a commit, a branch or a tag).
pub(crate) async fn commit(
    State(state): State<AppState>,
    Path((project, sha)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let commit = state
        .coordinator
        .repository_commit(project.id, &sha)
        .await?;
    Ok(json_response(StatusCode::OK, &commit))
}

/// `GET /projects/:id/repository/branches`, by name.
pub(crate) async fn branches(
    State(state): State<AppState>,
    Path(project): Path<String>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let branches = state.coordinator.branches(project.id).await?;
    Ok(super::projects::page_of(branches, &page))
}

/// `GET /projects/:id/repository/branches/:branch`.
pub(crate) async fn branch(
    State(state): State<AppState>,
    Path((project, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let branch = state.coordinator.branch(project.id, &name).await?;
    Ok(json_response(StatusCode::OK, &branch))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct CommitsFilter {
    ref_name: Option<String>,
    path: Option<String>,
}

/// `GET /projects/:id/repository/commits[?ref_name=REF&path=PATH]`: newest first.
pub(crate) async fn commits(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(filter): Query<CommitsFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let query = crate::coordinator::CommitsQuery {
        ref_name: filter.ref_name.filter(|r| !r.is_empty()),
        path: filter.path,
    };
    let (offset, limit) = page.window();
    let (shown, total) = state
        .coordinator
        .repository_commits(project.id, &query, offset, limit)
        .await?;
    Ok(paged(shown, total, &page))
}

/// `GET /projects/:id/repository/tags`, by name.
pub(crate) async fn tags(
    State(state): State<AppState>,
    Path(project): Path<String>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let tags = state.coordinator.tags(project.id).await?;
    Ok(super::projects::page_of(tags, &page))
}

/// `GET /projects/:id/repository/tags/:tag`.
pub(crate) async fn tag(
    State(state): State<AppState>,
    Path((project, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let tag = state.coordinator.tag(project.id, &name).await?;
    Ok(json_response(StatusCode::OK, &tag))
}
