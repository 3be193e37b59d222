//! The runners' clone URL, `{external_url}/{namespace}/{name}.git`: every path that is
//! not an API route lands here; read-only git smart HTTP requests are served from the
//! project's mirror; the web UI's pages (`ui/`) and Pages sites (`pages.rs`) are served
//! from here too; anything else is a JSON `404`.
//!
//! Credentials (HTTP basic): user `gitlab-ci-token` with the job token of a running job
//! of this project (what `git_info.repo_url` embeds) or of a project this project's CI/CD
//! job token allowlist names (`coordinator/job_token_scope.rs`), or any user with the
//! admin token.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};

use crate::coordinator::{CoordinatorError, JobTokenUse};

use super::AppState;
use super::error::ApiError;
use super::extract;
use super::git_backend::{self, JOB_TOKEN_USER};

/// Git requests carry wants and haves, not packs: a few MiB is plenty.
const MAX_GIT_REQUEST: usize = 8 * 1024 * 1024;

pub(crate) async fn fallback(State(state): State<AppState>, request: Request) -> Response {
    if let Some(path) = super::pages::pages_path(&state, &request).map(str::to_owned) {
        return super::pages::serve(&state, request, &path).await;
    }
    if super::ui::is_page(request.uri().path()) {
        if let Some(page) = super::ui::serve(&state, request).await {
            return page;
        }
        return ApiError::message(
            axum::http::StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed",
        )
        .into_response();
    }
    match serve(&state, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn serve(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let path = request.uri().path().to_owned();
    let Some((repo, service)) = git_backend::parse_git_path(&path) else {
        return Err(ApiError::message(
            axum::http::StatusCode::NOT_FOUND,
            "Not Found",
        ));
    };
    let project = match state.coordinator.project_by_path(repo).await {
        Ok(project) => project,
        Err(CoordinatorError::NotFound(_)) => return Err(ApiError::not_found("Project")),
        Err(other) => return Err(other.into()),
    };
    let headers = request.headers().clone();
    let Some((user, password)) = extract::basic_auth(&headers) else {
        return Ok(git_backend::challenge());
    };
    let allowed = if user == JOB_TOKEN_USER {
        match state.coordinator.job_by_token(&password).await? {
            Some(job) => state
                .coordinator
                .job_token_refusal(job.project_id, project.id, JobTokenUse::Api)
                .await?
                .is_none(),
            None => state.coordinator.is_admin(&password).await?,
        }
    } else {
        state.coordinator.is_admin(&password).await?
    };
    if !allowed {
        return Err(ApiError::forbidden_because(
            "the credentials do not open this repository",
        ));
    }
    let method = request.method().clone();
    let query = request.uri().query().map(str::to_owned);
    let body: Bytes = axum::body::to_bytes(request.into_body(), MAX_GIT_REQUEST)
        .await
        .map_err(|e| extract::read_error(&e, "git request", MAX_GIT_REQUEST))?;
    let repo_path = state
        .coordinator
        .git_repo_path(&project.path_with_namespace)
        .await;
    if !repo_path.join("HEAD").exists() {
        return Err(ApiError::not_found("Repository"));
    }
    git_backend::serve(
        &repo_path,
        service,
        &method,
        query.as_deref(),
        &headers,
        body,
        &user,
    )
    .await
}
