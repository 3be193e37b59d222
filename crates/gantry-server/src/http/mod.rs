//! HTTP over the [`Coordinator`]: the GitLab Runner API (`runner-api.md`), the user
//! API shaped like GitLab's API v4, and git smart HTTP for the runners' clone URLs.
//!
//! No business logic here: handlers authenticate, decode, call one coordinator method
//! and shape its answer (status code, GitLab's headers, JSON). Every failure is JSON
//! (`error`); client mistakes are 4xx, and a panicking handler becomes a JSON `500`
//! instead of a dropped connection.
//!
//! Files: `runners.rs` (runner registration, verify, delete), `job_request.rs` (long
//! polling), `job_update.rs` (`PUT /jobs/:id`, `PATCH /jobs/:id/trace`), `artifacts.rs`
//! (runner uploads and downloads), `projects.rs`, `protected.rs` (protected branches and tags), `job_token_scope.rs` (a project's CI/CD job token allowlist), `mirror.rs` (pushes on demand), `schedules.rs`, `variables.rs`, `instance_variables.rs`,
//! `jobs.rs` and `user_runners.rs` (user API), `users.rs` (`/user`, `/version`, personal access
//! tokens), `git.rs` + `git_backend.rs` (clones), `auth.rs` (who is calling, what a `read_api`
//! token may do), `extract.rs` (bodies — JSON or forms, for both APIs — and tokens), `gate.rs`
//! (no body read before a credential is known), `error.rs`, `edge.rs` (connections: timeouts,
//! caps, the shutdown deadline), `peer.rs` (whether a request's client is still there).
//! API paths match with a trailing slash too, as GitLab's do.
//!
//! Also: `lint.rs` (the CI Lint API), `triggers.rs` (trigger tokens and
//! `trigger/pipeline`), `environments.rs`, `resource_groups.rs`, `groups.rs`, `oidc.rs`
//! (the ID tokens' discovery document and keys), `metrics.rs` (`/-/metrics`), `ui/` (the
//! web UI). Routes are set in `build`; [`router`] and [`serve`]/[`serve_with`] are the
//! entry points. The trailing slash is dropped before routing (`without_trailing_slash`); a
//! `read_api` token only reads (`auth::read_only_scope`).

mod artifacts;
mod auth;
mod edge;
mod environments;
mod error;
mod extract;
mod gate;
mod git;
mod git_backend;
mod groups;
mod instance_variables;
mod job_request;
mod job_token_scope;
mod job_update;
mod jobs;
mod lint;
mod merge_requests;
mod metrics;
mod mirror;
mod oidc;
mod pages;
mod peer;
mod projects;
mod protected;
mod releases;
mod reports;
mod repository;
mod resource_groups;
mod runners;
mod schedules;
mod triggers;
mod ui;
mod user_runners;
mod users;
mod variables;

/// Where GitLab's REST API is mounted: the runner and user APIs are nested here, so their
/// handlers see the path below it.
pub(crate) const API_ROOT: &str = "/api/v4";

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::coordinator::Coordinator;
pub use edge::Limits;
use error::ApiError;

/// Largest JSON body of the user API and of job updates.
const MAX_JSON_BODY: usize = 1024 * 1024;

/// Largest trace patch: twice what gitlab-runner sends (§5.1); larger is `413`
/// (`job_update::patch_trace` counts, the body is streamed).
const MAX_TRACE_PATCH: usize = 2 * gantry_protocol::trace::patch::MAX_PATCH_BYTES;

/// Size of the reads a file download (artifact, job log) is streamed in.
const DOWNLOAD_CHUNK: usize = 256 * 1024;

/// The first `len` bytes of `file` as a response body, read as the client takes them: an
/// artifact or a job log is never held whole in memory. A read error ends the body early
/// (the client sees fewer bytes than `Content-Length`).
pub(crate) fn file_body(file: std::fs::File, len: u64) -> axum::body::Body {
    use tokio::io::AsyncReadExt as _;
    let file = tokio::fs::File::from_std(file).take(len);
    let chunks = futures_util::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = vec![0u8; DOWNLOAD_CHUNK];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(axum::body::Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    axum::body::Body::from_stream(chunks)
}

/// Multipart framing allowed on top of the artifact limit.
const MULTIPART_OVERHEAD: u64 = 1024 * 1024;
/// An upload over the artifact limit is read (and dropped) up to this much further before
/// the `413` is sent, so a client still sending gets the answer rather than a connection
/// reset; past it the connection is cut.
pub(crate) const OVERSIZE_DRAIN: u64 = 16 * 1024 * 1024;

/// How long a `GET …/trace` (or the web UI's job page and its log requests) marks a job's
/// log as watched (GitLab: 10 s); meanwhile trace patches are answered with the short
/// update interval (§5.2).
const WATCH_TTL: Duration = Duration::from_secs(10);

/// The update interval announced for a job nobody watches: 10 s, where GitLab announces
/// 60 s (`UNWATCHED_UPDATE_INTERVAL`). A runner learns that somebody started watching
/// only from the answer to its next patch or keep-alive; told 60 s, it would not come
/// back for a minute, so a reader who arrived after the first patch saw nothing new for
/// a minute (or until a short job ended). With 10 s the first new lines reach a late
/// reader within about 10 s, then every 3 s; the price is six patches a minute per
/// running job instead of one.
const UNWATCHED_INTERVAL: Duration = Duration::from_secs(10);

/// The update interval announced while somebody watches a job's log: 1 s, where GitLab
/// announces 3 s (`WATCHED_UPDATE_INTERVAL`), so a line reaches the job page within about
/// 2 s of being printed (1 s to the coordinator, at most 0.5 s to the page's next poll).
/// Watched jobs are few: the cost is small.
const WATCHED_INTERVAL: Duration = Duration::from_secs(1);

/// Shared by every handler.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) coordinator: Coordinator,
    /// Flips to `true` when the server shuts down: held job requests answer at once.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Jobs whose log somebody read recently (job id → when).
    watched: Arc<Mutex<HashMap<i64, Instant>>>,
}

impl AppState {
    /// Resolves when the server starts shutting down; never for a bare [`router`].
    pub(crate) async fn shutting_down(&self) {
        let mut rx = self.shutdown.clone();
        if rx.wait_for(|down| *down).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Mark a job's log as watched (a user read it).
    pub(crate) fn watch(&self, job_id: i64) {
        let mut watched = self
            .watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        watched.retain(|_, at| now.duration_since(*at) < WATCH_TTL);
        watched.insert(job_id, now);
    }

    /// `X-GitLab-Trace-Update-Interval` for a job (§5.2): [`WATCHED_INTERVAL`] while
    /// watched, else [`UNWATCHED_INTERVAL`].
    pub(crate) fn trace_update_interval(&self, job_id: i64) -> Duration {
        if let Some(interval) = self.coordinator.config().trace_update_interval() {
            return interval;
        }
        let watched = self
            .watched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match watched.get(&job_id) {
            Some(at) if at.elapsed() < WATCH_TTL => WATCHED_INTERVAL,
            _ => UNWATCHED_INTERVAL,
        }
    }
}

/// The whole HTTP surface over `coordinator`. Held job requests end when the server's
/// shutdown begins only through [`serve`]; a router used on its own holds them for the
/// full long-poll duration.
pub fn router(coordinator: Coordinator) -> Router {
    // Without a sender nobody ever signals shutdown (see `AppState::shutting_down`).
    let (_, rx) = watch::channel(false);
    build(coordinator, rx)
}

/// Serve `coordinator` on `listener` until `shutdown` resolves, under the default
/// [`Limits`]; see [`serve_with`].
pub async fn serve(
    listener: TcpListener,
    coordinator: Coordinator,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, coordinator, Limits::default(), shutdown).await
}

/// Serve `coordinator` on `listener` under `limits` (`edge.rs`) until `shutdown`
/// resolves; then held job requests are answered `204`, requests in flight get
/// `limits.shutdown_timeout` to finish, and the function returns.
pub async fn serve_with(
    listener: TcpListener,
    coordinator: Coordinator,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (tx, rx) = watch::channel(false);
    let app = build(coordinator, rx);
    edge::serve(listener, app, limits, shutdown, tx).await
}

fn build(coordinator: Coordinator, shutdown: watch::Receiver<bool>) -> Router {
    let artifact_limit = coordinator
        .config()
        .artifact_limit
        .saturating_add(MULTIPART_OVERHEAD)
        .saturating_add(OVERSIZE_DRAIN);
    let artifact_limit = usize::try_from(artifact_limit).unwrap_or(usize::MAX);
    let state = AppState {
        coordinator,
        shutdown,
        watched: Arc::new(Mutex::new(HashMap::new())),
    };
    let runner_api = Router::new()
        // `GET /runners` is the user API's list of owned runners (admin token).
        .route(
            "/runners",
            post(runners::register)
                .delete(runners::unregister)
                .get(user_runners::owned),
        )
        .route("/runners/verify", post(runners::verify))
        .route("/runners/managers", delete(runners::unregister_manager))
        .route("/runners/router/discovery", get(runners::router_discovery))
        .route(
            "/jobs/request",
            post(job_request::request).layer(DefaultBodyLimit::max(
                gantry_protocol::long_poll::MAX_REQUEST_BODY_BYTES,
            )),
        )
        .route(
            "/jobs/{id}",
            put(job_update::update).layer(DefaultBodyLimit::max(MAX_JSON_BODY)),
        )
        .route("/jobs/{id}/trace", patch(job_update::patch_trace))
        .route(
            "/jobs/{id}/artifacts",
            post(artifacts::upload)
                .layer(DefaultBodyLimit::max(artifact_limit))
                .get(artifacts::download),
        );
    let user_api = Router::new()
        .route("/projects", post(projects::create).get(projects::list))
        .route(
            "/projects/{project}",
            get(projects::show)
                .put(projects::update)
                .delete(projects::delete),
        )
        .route(
            "/projects/{project}/pipeline",
            post(projects::create_pipeline),
        )
        .route("/projects/{project}/pipelines", get(projects::pipelines))
        .route(
            "/projects/{project}/pipelines/latest",
            get(projects::latest_pipeline),
        )
        .route(
            "/projects/{project}/repository/files/{file_path}",
            get(repository::file),
        )
        .route(
            "/projects/{project}/repository/files/{file_path}/raw",
            get(repository::raw_file),
        )
        .route(
            "/projects/{project}/repository/commits",
            get(repository::commits),
        )
        .route(
            "/projects/{project}/repository/commits/{sha}",
            get(repository::commit),
        )
        .route("/projects/{project}/repository/tags", get(repository::tags))
        .route(
            "/projects/{project}/repository/tags/{tag}",
            get(repository::tag),
        )
        .route(
            "/projects/{project}/repository/branches",
            get(repository::branches),
        )
        .route(
            "/projects/{project}/repository/branches/{branch}",
            get(repository::branch),
        )
        .route("/job", get(jobs::current))
        .route("/projects/{project}/mirror/pull", post(mirror::pull))
        .route(
            "/projects/{project}/forge_hook",
            post(merge_requests::receive)
                .put(merge_requests::set_secret)
                .delete(merge_requests::remove_secret),
        )
        .route(
            "/projects/{project}/merge_requests",
            get(merge_requests::list),
        )
        .route(
            "/projects/{project}/merge_requests/{iid}",
            get(merge_requests::show),
        )
        .route(
            "/projects/{project}/merge_requests/{iid}/pipelines",
            get(merge_requests::pipelines),
        )
        .route(
            "/projects/{project}/ci/lint",
            get(lint::lint_project).post(lint::lint_content),
        )
        .route(
            "/projects/{project}/pipeline_schedules",
            get(schedules::list).post(schedules::create),
        )
        .route(
            "/projects/{project}/pipeline_schedules/{schedule}",
            get(schedules::show)
                .put(schedules::update)
                .delete(schedules::delete),
        )
        .route(
            "/projects/{project}/pipeline_schedules/{schedule}/pipelines",
            get(schedules::pipelines),
        )
        .route(
            "/projects/{project}/pipeline_schedules/{schedule}/play",
            post(schedules::play),
        )
        .route(
            "/projects/{project}/pipeline_schedules/{schedule}/take_ownership",
            post(schedules::take_ownership),
        )
        .route(
            "/projects/{project}/pipeline_schedules/{schedule}/variables",
            post(schedules::create_variable),
        )
        .route(
            "/projects/{project}/pipeline_schedules/{schedule}/variables/{key}",
            put(schedules::update_variable).delete(schedules::delete_variable),
        )
        .route(
            "/projects/{project}/triggers",
            post(triggers::create).get(triggers::list),
        )
        .route(
            "/projects/{project}/triggers/{trigger}",
            get(triggers::show)
                .put(triggers::update)
                .delete(triggers::delete),
        )
        .route(
            "/projects/{project}/trigger/pipeline",
            post(triggers::trigger),
        )
        .route(
            "/projects/{project}/ref/{ref}/trigger/pipeline",
            post(triggers::trigger_ref),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}",
            get(projects::pipeline).delete(projects::delete_pipeline),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/jobs",
            get(projects::pipeline_jobs),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/variables",
            get(projects::pipeline_variables),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/bridges",
            get(projects::pipeline_bridges),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/test_report",
            get(projects::test_report),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/test_report_summary",
            get(projects::test_report_summary),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/coverage_report",
            get(reports::coverage_report),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/codequality_report",
            get(reports::codequality_report),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/cancel",
            post(projects::cancel_pipeline),
        )
        .route(
            "/projects/{project}/pipelines/{pipeline}/retry",
            post(projects::retry_pipeline),
        )
        .route(
            "/projects/{project}/variables",
            get(variables::list).post(variables::create),
        )
        .route(
            "/projects/{project}/variables/{key}",
            get(variables::show)
                .put(variables::update)
                .delete(variables::delete),
        )
        .route("/projects/{project}/pages", get(pages::settings))
        .route("/projects/{project}/releases", get(releases::list))
        .route("/projects/{project}/releases/{tag}", get(releases::show))
        .route(
            "/projects/{project}/environments",
            get(environments::list).post(environments::create),
        )
        .route(
            "/projects/{project}/environments/{environment}",
            get(environments::show)
                .put(environments::update)
                .delete(environments::delete),
        )
        .route(
            "/projects/{project}/environments/stop_stale",
            post(environments::stop_stale),
        )
        .route(
            "/projects/{project}/environments/{environment}/stop",
            post(environments::stop),
        )
        .route(
            "/projects/{project}/deployments",
            get(environments::deployments).post(environments::create_deployment),
        )
        .route(
            "/projects/{project}/deployments/{deployment}",
            get(environments::deployment).put(environments::update_deployment),
        )
        .route(
            "/projects/{project}/resource_groups",
            get(resource_groups::list),
        )
        .route(
            "/projects/{project}/resource_groups/{key}",
            get(resource_groups::show).put(resource_groups::update),
        )
        .route(
            "/projects/{project}/resource_groups/{key}/upcoming_jobs",
            get(resource_groups::upcoming_jobs),
        )
        .route("/projects/{project}/jobs", get(projects::project_jobs))
        .route("/projects/{project}/jobs/{job}", get(jobs::show))
        .route("/projects/{project}/jobs/{job}/trace", get(jobs::trace))
        .route("/projects/{project}/jobs/{job}/retry", post(jobs::retry))
        .route("/projects/{project}/jobs/{job}/cancel", post(jobs::cancel))
        .route("/projects/{project}/jobs/{job}/play", post(jobs::play))
        .route("/projects/{project}/jobs/{job}/erase", post(jobs::erase))
        .route(
            "/projects/{project}/jobs/{job}/artifacts",
            get(jobs::artifacts).delete(jobs::delete_artifacts),
        )
        .route(
            "/projects/{project}/jobs/{job}/artifacts/keep",
            post(jobs::keep_artifacts),
        )
        .route(
            "/projects/{project}/artifacts",
            delete(jobs::delete_project_artifacts),
        )
        .route(
            "/projects/{project}/jobs/{job}/artifacts/{*path}",
            get(jobs::artifact_file),
        )
        .route(
            "/projects/{project}/jobs/artifacts/{ref}/download",
            get(jobs::latest_artifacts),
        )
        .route(
            "/projects/{project}/jobs/artifacts/{ref}/raw/{*path}",
            get(jobs::latest_artifact_file),
        )
        .route(
            "/projects/{project}/job_token_scope",
            get(job_token_scope::show).patch(job_token_scope::update),
        )
        .route(
            "/projects/{project}/job_token_scope/allowlist",
            get(job_token_scope::allowlist).post(job_token_scope::add_project),
        )
        .route(
            "/projects/{project}/job_token_scope/allowlist/{target}",
            delete(job_token_scope::remove_project),
        )
        .route(
            "/projects/{project}/job_token_scope/groups_allowlist",
            get(job_token_scope::groups_allowlist).post(job_token_scope::add_group),
        )
        .route(
            "/projects/{project}/job_token_scope/groups_allowlist/{target}",
            delete(job_token_scope::remove_group),
        )
        .route(
            "/projects/{project}/protected_branches",
            get(protected::list).post(protected::create),
        )
        .route(
            "/projects/{project}/protected_branches/{name}",
            get(protected::show).delete(protected::delete),
        )
        .route(
            "/projects/{project}/protected_tags",
            get(protected::list).post(protected::create),
        )
        .route(
            "/projects/{project}/protected_tags/{name}",
            get(protected::show).delete(protected::delete),
        )
        .route("/groups", get(groups::list).post(groups::create))
        .route("/groups/{group}", get(groups::show).delete(groups::delete))
        .route("/namespaces", get(groups::namespaces))
        .route("/namespaces/{namespace}", get(groups::namespace))
        .route(
            "/namespaces/{namespace}/exists",
            get(groups::namespace_exists),
        )
        .route(
            "/groups/{group}/variables",
            get(variables::list).post(variables::create),
        )
        .route(
            "/groups/{group}/variables/{key}",
            get(variables::show)
                .put(variables::update)
                .delete(variables::delete),
        )
        .route(
            "/admin/ci/variables",
            get(instance_variables::list).post(instance_variables::create),
        )
        .route(
            "/admin/ci/variables/{key}",
            get(instance_variables::show)
                .put(instance_variables::update)
                .delete(instance_variables::delete),
        )
        .route("/user/runners", post(user_runners::create))
        .route("/user", get(users::current))
        .route("/users", get(users::list))
        .route("/users/{user}", get(users::show))
        .route("/version", get(users::version))
        .route("/metadata", get(users::show_metadata))
        .route("/user/personal_access_tokens", post(users::create_for_self))
        .route(
            "/users/{user}/personal_access_tokens",
            post(users::create_for_user),
        )
        .route("/personal_access_tokens", get(users::list_tokens))
        .route(
            "/personal_access_tokens/{token}",
            get(users::show_token).delete(users::revoke_token),
        )
        .route(
            "/projects/{project}/runners",
            get(user_runners::project_list).post(user_runners::project_enable),
        )
        .route(
            "/projects/{project}/runners/{runner}",
            delete(user_runners::project_disable),
        )
        .route("/runners/all", get(user_runners::list))
        .route("/runners/{runner}/jobs", get(user_runners::jobs))
        .route("/runners/{runner}/managers", get(user_runners::managers))
        .route(
            "/runners/{runner}",
            get(user_runners::show)
                .put(user_runners::update)
                .delete(user_runners::delete),
        )
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::read_only_scope,
        ));
    let app = Router::new()
        .nest(API_ROOT, runner_api.merge(user_api))
        .route("/-/metrics", get(metrics::metrics))
        .route(
            "/.well-known/openid-configuration",
            get(oidc::configuration),
        )
        .route("/oauth/discovery/keys", get(oidc::keys))
        .route("/-/jwks", get(oidc::keys))
        .fallback(git::fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            gate::credentials_first,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), guard_panics))
        .with_state(state);
    // Routing happens inside `app`, so the path is rewritten before it sees the request.
    Router::new().fallback_service(tower::ServiceExt::map_request(app, without_trailing_slash))
}

/// GitLab's API routes match with a trailing slash too (`POST /api/v4/runners/` is
/// `POST /api/v4/runners`): an API path's trailing slashes are dropped before routing.
/// Other paths (git, the web UI) are left as they are.
fn without_trailing_slash(mut request: Request) -> Request {
    let path = request.uri().path();
    let trimmed = path.trim_end_matches('/');
    if !path.starts_with("/api/v4/") || trimmed.len() == path.len() || trimmed == "/api/v4" {
        return request;
    }
    let rewritten = match request.uri().query() {
        Some(query) => format!("{trimmed}?{query}"),
        None => trimmed.to_owned(),
    };
    let mut parts = request.uri().clone().into_parts();
    match rewritten.parse() {
        Ok(path_and_query) => parts.path_and_query = Some(path_and_query),
        Err(_) => return request,
    }
    if let Ok(uri) = axum::http::Uri::from_parts(parts) {
        *request.uri_mut() = uri;
    }
    request
}

async fn method_not_allowed() -> ApiError {
    ApiError::message(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

/// Runs each request in its own task: a panic becomes a JSON `500` (the connection
/// survives), and a client that disconnects does not cut a handler off halfway (a job
/// request that assigned a job still completes its bookkeeping). Error answers that
/// are not JSON yet (axum's own rejections: a bad path or query parameter, a malformed
/// multipart body) are rewritten as `{"message": "<code> <text>"}`. Every `5xx` answer
/// is counted as the coordinator's own error (`cicd_system_errors_total`).
async fn guard_panics(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = match tokio::spawn(next.run(request)).await {
        Ok(response) => response,
        Err(error) => {
            state.coordinator.count_server_error(500);
            return ApiError::internal(&format!("the handler of {method} {path} failed: {error}"))
                .into_response();
        }
    };
    let status = response.status();
    if status.is_server_error() {
        state.coordinator.count_server_error(status.as_u16());
    }
    // JSON, and the web UI's pages (HTML for a browser), are answers already.
    let is_answer = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_answer {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let mut rewritten = ApiError::message(status, text.trim()).into_response();
    for (name, value) in &parts.headers {
        if name != axum::http::header::CONTENT_TYPE && name != axum::http::header::CONTENT_LENGTH {
            rewritten.headers_mut().insert(name.clone(), value.clone());
        }
    }
    rewritten
}

/// A JSON success answer.
pub(crate) fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => ApiError::internal(&format!("encode the answer: {e}")).into_response(),
    }
}
