//! User API, jobs (GitLab API v4 shapes): `GET /projects/:id/jobs/:job_id`, its `trace`
//! and `artifacts`, and `POST …/retry|cancel|play|erase`; `GET /job` (a running job's own, by its
//! token). The admin token is required; the
//! artifacts reads also take the `JOB-TOKEN` of a running job of the same project or of
//! one the project's CI/CD job token allowlist names, as GitLab allows `CI_JOB_TOKEN` there.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::coordinator::{CoordinatorError, JobTokenUse, JobView, TraceSource};

use super::artifacts::{file_response, named_file_response};
use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::{KeyValue, find_project};
use super::{AppState, auth, json_response};

/// The job `:job` of the project `:project`; `404` when it belongs to another.
async fn find_job(state: &AppState, project: &str, job: i64) -> Result<JobView, ApiError> {
    let project = find_project(state, project).await?;
    match state.coordinator.job(job).await {
        Ok(j) if j.project_id == project.id => Ok(j),
        Ok(_) | Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Job")),
        Err(other) => Err(other.into()),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct TokenQuery {
    job_token: Option<String>,
    token: Option<String>,
}

/// `GET /api/v4/job`: the running job whose token is given (`JOB-TOKEN`, or `job_token` /
/// `token`), as GitLab answers a script asking about its own job with `$CI_JOB_TOKEN`;
/// `401` for a token of no running job.
pub(crate) async fn current(
    State(state): State<AppState>,
    Query(query): Query<TokenQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let param = query.job_token.as_deref().or(query.token.as_deref());
    let Some(token) = extract::job_token(param, &headers) else {
        return Err(ApiError::unauthorized());
    };
    let Some(job) = state.coordinator.executing_job_by_token(token).await? else {
        return Err(ApiError::unauthorized());
    };
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.job(job.id).await?,
    ))
}

/// `GET /api/v4/projects/:id/jobs/:job_id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(
        StatusCode::OK,
        &find_job(&state, &project, job).await?,
    ))
}

/// `GET /api/v4/projects/:id/jobs/:job_id/trace`: the log as stored so far, as text.
/// Reading it marks the job as watched, so its runner patches more often (§5.2).
pub(crate) async fn trace(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let job = find_job(&state, &project, job).await?;
    // Streamed from the log file, never read whole. No `Content-Length`: after a machine
    // crash the file may hold fewer bytes than the database committed (see
    // `trace_files.rs`), and the client then gets what there is.
    let body = match state.coordinator.traces().trace_source(job.id).await? {
        TraceSource::Bytes(log) => axum::body::Body::from(log),
        TraceSource::File { file, len } => super::file_body(file, len),
    };
    state.watch(job.id);
    Ok((
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        body,
    )
        .into_response())
}

/// `POST /api/v4/projects/:id/jobs/:job_id/retry` → `201` with the new attempt; `403`
/// when the job cannot be retried.
pub(crate) async fn retry(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: RetryJob = if body.iter().all(u8::is_ascii_whitespace) {
        RetryJob::default()
    } else {
        extract::params(&headers, &body).await?
    };
    let job = find_job(&state, &project, job).await?;
    Ok(json_response(
        StatusCode::CREATED,
        &state
            .coordinator
            .retry_job_with(job.id, req.job_inputs.or(req.inputs))
            .await?,
    ))
}

/// `POST /api/v4/projects/:id/jobs/:job_id/cancel` → `201`.
pub(crate) async fn cancel(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let job = find_job(&state, &project, job).await?;
    Ok(json_response(
        StatusCode::CREATED,
        &state.coordinator.cancel_job(job.id).await?,
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PlayJob {
    job_variables_attributes: Vec<KeyValue>,
    /// Job input values (GitLab 18.10), name → value.
    job_inputs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// The body of a retry: job input values, as `job_inputs` (GitLab 18.10's documented
/// name) or `inputs` (the name GitLab's API code read before).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RetryJob {
    job_inputs: Option<serde_json::Map<String, serde_json::Value>>,
    inputs: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `POST /api/v4/projects/:id/jobs/:job_id/play` (body
/// `{"job_variables_attributes": [{"key", "value"}]}`) → `200` with the job that runs;
/// `400` when the job is not playable.
pub(crate) async fn play(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: PlayJob = extract::params(&headers, &body).await?;
    let job = find_job(&state, &project, job).await?;
    let variables = req
        .job_variables_attributes
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    let played = state
        .coordinator
        .play_job_with(job.id, variables, req.job_inputs)
        .await
        .map_err(|e| match e {
            CoordinatorError::Invalid(why) => {
                ApiError::bad_request(format!("Unplayable Job: {why}"))
            }
            other => other.into(),
        })?;
    Ok(json_response(StatusCode::OK, &played))
}

/// The project `:project` for a reader of its artifacts: the admin token, or the job
/// token of a running job of the same project or of one `:project`'s CI/CD job token
/// allowlist names (GitLab allows `CI_JOB_TOKEN` there; `coordinator/job_token_scope.rs`).
async fn artifacts_reader(
    state: &AppState,
    headers: &HeaderMap,
    project: &str,
) -> ApiResult<crate::coordinator::Project> {
    match auth::require_admin(&state.coordinator, headers).await {
        Ok(()) => find_project(state, project).await,
        Err(unauthorized) => {
            let Some(token) = extract::job_token(None, headers) else {
                return Err(unauthorized);
            };
            let Some(caller) = state.coordinator.job_by_token(token).await? else {
                return Err(unauthorized);
            };
            let project = find_project(state, project).await?;
            if let Some(why) = state
                .coordinator
                .job_token_refusal(caller.project_id, project.id, JobTokenUse::Api)
                .await?
            {
                return Err(ApiError::forbidden_because(why));
            }
            Ok(project)
        }
    }
}

/// A missing archive or file is `404 Artifact Not Found` / `404 File Not Found`.
fn not_found_as(what: &'static str) -> impl Fn(CoordinatorError) -> ApiError {
    move |e| match e {
        CoordinatorError::NotFound(_) => ApiError::not_found(what),
        other => other.into(),
    }
}

/// `GET /api/v4/projects/:id/jobs/:job_id/artifacts`: the archive (`404` without one).
pub(crate) async fn artifacts(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = artifacts_reader(&state, &headers, &project).await?;
    let job = find_job(&state, &project.id.to_string(), job).await?;
    let (artifact, blob) = state
        .coordinator
        .artifacts()
        .job_artifact(job.id)
        .await
        .map_err(not_found_as("Artifact"))?;
    Ok(file_response(&artifact, blob))
}

/// `POST /api/v4/projects/:id/jobs/:job_id/artifacts/keep` → `200` with the job: its
/// artifacts never expire.
pub(crate) async fn keep_artifacts(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let job = find_job(&state, &project, job).await?;
    state.coordinator.artifacts().keep_artifacts(job.id).await?;
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.job(job.id).await?,
    ))
}

/// `DELETE /api/v4/projects/:id/jobs/:job_id/artifacts` → `204`: the finished job's
/// artifacts are gone (its log stays); `409` while it runs.
pub(crate) async fn delete_artifacts(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let job = find_job(&state, &project, job).await?;
    let removed = state
        .coordinator
        .artifacts()
        .delete_job_artifacts(job.id)
        .await?;
    removed.report_left_over();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /api/v4/projects/:id/jobs/:job_id/erase` → `201` with the job: its log and
/// artifacts are gone (`erased_at` set); `403` for a job that has not finished or has
/// nothing to erase.
pub(crate) async fn erase(
    State(state): State<AppState>,
    Path((project, job)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let job = find_job(&state, &project, job).await?;
    let erased = state.coordinator.erase_job(job.id).await?;
    Ok(json_response(StatusCode::CREATED, &erased))
}

/// `DELETE /api/v4/projects/:id/artifacts` → `202` (GitLab's answer; Gantry has done it
/// when it answers): the artifacts of every finished job of the project are gone.
pub(crate) async fn delete_project_artifacts(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let removed = state
        .coordinator
        .artifacts()
        .delete_project_artifacts(project.id)
        .await?;
    removed.report_left_over();
    Ok(StatusCode::ACCEPTED.into_response())
}

/// `GET /api/v4/projects/:id/jobs/:job_id/artifacts/*artifact_path`: one file of the
/// job's (zip) archive.
pub(crate) async fn artifact_file(
    State(state): State<AppState>,
    Path((project, job, path)): Path<(String, i64, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = artifacts_reader(&state, &headers, &project).await?;
    let job = find_job(&state, &project.id.to_string(), job).await?;
    let (name, blob) = state
        .coordinator
        .artifacts()
        .artifact_file(job.id, &path)
        .await
        .map_err(not_found_as("File"))?;
    Ok(named_file_response(&name, blob))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct JobNameQuery {
    job: Option<String>,
}

/// The latest successful job named `?job=` on `ref_name` (`404` when there is none).
async fn latest_job(
    state: &AppState,
    project: &crate::coordinator::Project,
    ref_name: &str,
    query: JobNameQuery,
) -> ApiResult<i64> {
    let name = query
        .job
        .filter(|j| !j.trim().is_empty())
        .ok_or_else(|| ApiError::param("job is missing"))?;
    state
        .coordinator
        .latest_successful_job_id(project.id, ref_name, &name)
        .await
        .map_err(not_found_as("Job"))
}

/// `GET /api/v4/projects/:id/jobs/artifacts/:ref_name/download?job=NAME`: the archive of
/// the latest successful job of that name on the ref.
pub(crate) async fn latest_artifacts(
    State(state): State<AppState>,
    Path((project, ref_name)): Path<(String, String)>,
    Query(query): Query<JobNameQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = artifacts_reader(&state, &headers, &project).await?;
    let job = latest_job(&state, &project, &ref_name, query).await?;
    let (artifact, blob) = state
        .coordinator
        .artifacts()
        .job_artifact(job)
        .await
        .map_err(not_found_as("Artifact"))?;
    Ok(file_response(&artifact, blob))
}

/// `GET /api/v4/projects/:id/jobs/artifacts/:ref_name/raw/*artifact_path?job=NAME`: one
/// file of that archive.
pub(crate) async fn latest_artifact_file(
    State(state): State<AppState>,
    Path((project, ref_name, path)): Path<(String, String, String)>,
    Query(query): Query<JobNameQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = artifacts_reader(&state, &headers, &project).await?;
    let job = latest_job(&state, &project, &ref_name, query).await?;
    let (name, blob) = state
        .coordinator
        .artifacts()
        .artifact_file(job, &path)
        .await
        .map_err(not_found_as("File"))?;
    Ok(named_file_response(&name, blob))
}
