//! Who is calling (`runner-api.md` §1.2): the administrator (user API: the admin token or
//! a personal access token), a runner (runner token in
//! the body), or a running job (job token). GitLab answers job-scoped calls with `403`
//! (never `404`) for a bad token so the runner aborts, adding `Job-Status` when the job
//! exists but no longer runs.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::coordinator::{Coordinator, CoordinatorError, Runner, TokenAccess};

use super::AppState;
use super::error::ApiError;
use super::extract;

/// The user API: `PRIVATE-TOKEN` or `Authorization: Bearer` with the admin token or a
/// live personal access token of the administrator (the only user), else `401`. What a
/// `read_api` token may not do is refused before the handler runs ([`read_only_scope`]).
pub(crate) async fn require_admin(
    coordinator: &Coordinator,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let Some(token) = extract::private_token(headers) else {
        return Err(ApiError::unauthorized());
    };
    match coordinator.token_access(token).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::unauthorized()),
    }
}

/// Middleware of the user API: a personal access token with scope `read_api` only reads
/// (`GET`, `HEAD`); anything else it asks is `403`, as GitLab refuses it
/// (`insufficient_scope`).
pub(crate) async fn read_only_scope(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method();
    if method == Method::GET || method == Method::HEAD {
        return next.run(request).await;
    }
    if let Some(token) = extract::private_token(request.headers()) {
        match state.coordinator.token_access(token).await {
            Ok(Some(TokenAccess::ReadOnly)) => {
                return ApiError::forbidden_because(
                    "insufficient_scope: the token's scope is read_api, which only reads; use a token with scope api",
                )
                .into_response();
            }
            Ok(_) => {}
            Err(e) => return ApiError::from(e).into_response(),
        }
    }
    next.run(request).await
}

/// A runner-level call: the runner token from the body; unknown or missing is `403`.
pub(crate) async fn require_runner(
    coordinator: &Coordinator,
    token: &str,
) -> Result<Runner, ApiError> {
    found_runner(token, coordinator.runner_by_token(token)).await
}

/// [`require_runner`] for a job request: the runner may come from the coordinator's
/// cache of recent requests ([`Coordinator::job_request_runner`]).
pub(crate) async fn require_requesting_runner(
    coordinator: &Coordinator,
    token: &str,
) -> Result<Runner, ApiError> {
    found_runner(token, coordinator.job_request_runner(token)).await
}

/// The runner `lookup` finds for `token`: a missing token or an unknown one is `403`.
async fn found_runner(
    token: &str,
    lookup: impl std::future::Future<Output = Result<Option<Runner>, CoordinatorError>>,
) -> Result<Runner, ApiError> {
    if token.trim().is_empty() {
        return Err(ApiError::forbidden_because("the runner token is missing"));
    }
    lookup.await?.ok_or_else(ApiError::forbidden)
}

/// The job a runner's call is about, as its job token proved.
pub(crate) struct TokenJob {
    /// Its row (without `spec`) when the call came: its status is `running` or
    /// `canceling`.
    pub row: gantry_store::Job,
}

/// A job-level call on job `job_id` with `token` (§1.2). The token must belong to this
/// job while it runs. Otherwise: `404` when the job does not exist, `403` with
/// `Job-Status` when the token was this job's and the job ended, plain `403` else.
/// `verified`: what the gate found for this request's token (not looked up again).
pub(crate) async fn require_job(
    coordinator: &Coordinator,
    job_id: i64,
    token: Option<&str>,
    verified: Option<&super::gate::VerifiedJob>,
) -> Result<TokenJob, ApiError> {
    let Some(token) = token else {
        ensure_job_exists(coordinator, job_id).await?;
        return Err(ApiError::forbidden_because("the job token is missing"));
    };
    // The gate looked this token up for this request already.
    let known = verified.filter(|v| v.token == token).map(|v| v.row.clone());
    let row = match known {
        Some(row) => Some(row),
        None => coordinator.executing_job_by_token(token).await?,
    };
    if let Some(row) = row {
        if row.id == job_id {
            return Ok(TokenJob { row });
        }
        ensure_job_exists(coordinator, job_id).await?;
        return Err(ApiError::forbidden_because(
            "the job token belongs to another job",
        ));
    }
    ensure_job_exists(coordinator, job_id).await?;
    match coordinator.job_status_for_token(token).await? {
        Some((id, status)) if id == job_id => Err(ApiError::forbidden().with_job_status(status)),
        _ => Err(ApiError::forbidden()),
    }
}

async fn ensure_job_exists(coordinator: &Coordinator, job_id: i64) -> Result<(), ApiError> {
    match coordinator.job(job_id).await {
        Ok(_) => Ok(()),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Job")),
        Err(other) => Err(other.into()),
    }
}

/// A `403` for a job that stopped running while the call was in flight, carrying its
/// current `Job-Status`.
pub(crate) async fn forbidden_with_status(
    coordinator: &Coordinator,
    job_id: i64,
    why: String,
) -> ApiError {
    let error = ApiError::forbidden_because(why);
    match coordinator.job(job_id).await {
        Ok(job) => error.with_job_status(job.status),
        Err(_) => error,
    }
}
