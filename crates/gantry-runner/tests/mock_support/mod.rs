//! Shared harness of the runner's end-to-end tests: `gitlab-runner-mock` (a third-party,
//! wiremock-based GitLab job API) behind [`Front`], a small HTTP proxy of ours that
//! records every exchange and can misbehave the way a real coordinator or network
//! does, where the mock cannot (spec `runner-api.md` §11.1):
//!
//! * **outages**: while [`Front::set_down`] is on, every new connection is accepted and
//!   closed at once (every answer carries `Connection: close`, so each request needs a
//!   new connection and an exchange is either whole or never forwarded; turning the
//!   outage on waits for the exchanges already under way, so what the mock stored is
//!   settled when it returns);
//! * `Job-Status: canceling` on trace and update answers (graceful cancellation, which
//!   the mock lacks);
//! * `202` to final updates (the accept protocol, §4.4);
//! * lost answers to trace patches that the mock did store, and the `Range` header the
//!   mock leaves out of its `416` answers (the resync, §5.2);
//! * `X-GitLab-Last-Update` on `204` answers (long polling, §3.3);
//! * a slow acceptance: each job's first `PUT state=running` held until the test lets
//!   it through ([`Front::hold_acceptance`]);
//! * rewriting the job payload: a real git repository over `file://` instead of the
//!   mock's fixed `https://bla/dummy.git`, a short job timeout, cache entries, GitLab's
//!   current `failure_reasons` list.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, Response, StatusCode};
use gantry_runner::config::Config;
use gantry_runner::poll::{PollEvent, PollHandle, PollOptions, PollSummary, Poller};
use gitlab_runner_mock::{
    GitlabRunnerMock, MockJob, MockJobBuilder, MockJobStepName, MockJobStepWhen,
};
use serde_json::Value;

/// The system id every test runner uses (the mock checks its shape).
pub const SYSTEM_ID: &str = "s_0123456789ab";

/// One request and the answer the runner got.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    pub query: String,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub status: u16,
}

impl Exchange {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn is_trace_patch(&self) -> bool {
        self.method == "PATCH" && self.path.ends_with("/trace")
    }

    pub fn is_job_update(&self) -> bool {
        self.method == "PUT" && self.path.starts_with("/api/v4/jobs/")
    }
}

type Rewrite = Arc<dyn Fn(&mut Value) + Send + Sync>;
type TraceLength = Arc<dyn Fn(u64) -> Option<u64> + Send + Sync>;

#[derive(Default)]
struct Knobs {
    rewrite: Option<Rewrite>,
    artifact_download: Option<Vec<u8>>,
    trace_length: Option<TraceLength>,
    last_update: Option<String>,
}

struct FrontState {
    upstream: String,
    http: reqwest::Client,
    exchanges: Mutex<Vec<Exchange>>,
    knobs: Mutex<Knobs>,
    canceling: AtomicBool,
    final_202: AtomicU32,
    lose_patches: AtomicU32,
    /// `Some(false)`: acceptances are held; `Some(true)`: let through.
    acceptance: tokio::sync::watch::Sender<Option<bool>>,
    /// Acceptances that arrived while held.
    held: AtomicU32,
}

/// The proxy in front of the mock.
#[derive(Clone)]
pub struct Front {
    url: String,
    down: Arc<AtomicBool>,
    open: Arc<AtomicU32>,
    state: Arc<FrontState>,
}

struct OutageListener {
    inner: tokio::net::TcpListener,
    down: Arc<AtomicBool>,
    open: Arc<AtomicU32>,
}

/// A connection the front accepted, counted in `open` until it is closed.
struct Counted {
    stream: tokio::net::TcpStream,
    open: Arc<AtomicU32>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl tokio::io::AsyncRead for Counted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Counted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl axum::serve::Listener for OutageListener {
    type Io = Counted;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    // Counted before the flag is read: `set_down` stores the flag, then
                    // waits for the count, so a connection is either refused or waited for.
                    self.open.fetch_add(1, Ordering::SeqCst);
                    let stream = Counted {
                        stream,
                        open: Arc::clone(&self.open),
                    };
                    if self.down.load(Ordering::SeqCst) {
                        drop(stream);
                        continue;
                    }
                    return (stream, addr);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl Front {
    /// A proxy on a free loopback port forwarding to `upstream`.
    pub async fn start(upstream: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let down = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicU32::new(0));
        let state = Arc::new(FrontState {
            upstream: upstream.trim_end_matches('/').to_owned(),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            exchanges: Mutex::new(Vec::new()),
            knobs: Mutex::new(Knobs::default()),
            canceling: AtomicBool::new(false),
            final_202: AtomicU32::new(0),
            lose_patches: AtomicU32::new(0),
            acceptance: tokio::sync::watch::Sender::new(None),
            held: AtomicU32::new(0),
        });
        let app = axum::Router::new()
            .fallback(proxy)
            .with_state(Arc::clone(&state));
        let listener = OutageListener {
            inner: listener,
            down: Arc::clone(&down),
            open: Arc::clone(&open),
        };
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            down,
            open,
            state,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Drop every new connection while `down`. Going down returns once the connections
    /// accepted before have closed: their exchanges are whole, what the mock stored for
    /// them is stored, and nothing more gets through until the outage ends.
    pub async fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
        if down {
            wait_for(Duration::from_secs(30), "the open exchanges to end", || {
                self.open.load(Ordering::SeqCst) == 0
            })
            .await;
        }
    }

    /// Add `Job-Status: canceling` to trace and update answers from now on.
    pub fn set_canceling(&self, on: bool) {
        self.state.canceling.store(on, Ordering::SeqCst);
    }

    /// Answer the next `n` final updates with `202` (not forwarded).
    pub fn accept_final_updates_later(&self, n: u32) {
        self.state.final_202.store(n, Ordering::SeqCst);
    }

    /// Forward the next `n` trace patches but answer them `502` (the answer is "lost").
    pub fn lose_patch_answers(&self, n: u32) {
        self.state.lose_patches.store(n, Ordering::SeqCst);
    }

    /// Hold each job's first `PUT state=running` (its acceptance) until
    /// [`Front::release_acceptance`]: a coordinator slow to answer it.
    pub fn hold_acceptance(&self) {
        self.state.acceptance.send_replace(Some(false));
    }

    /// Let the held acceptances through (forwarded to the mock now).
    pub fn release_acceptance(&self) {
        self.state.acceptance.send_replace(Some(true));
    }

    /// How many acceptances arrived while held.
    pub fn held_acceptances(&self) -> u32 {
        self.state.held.load(Ordering::SeqCst)
    }

    /// On `416` answers, add `Range: 0-<length>` with the length `length(job_id)` gives.
    pub fn add_range_to_416(&self, length: impl Fn(u64) -> Option<u64> + Send + Sync + 'static) {
        self.state.knobs.lock().unwrap().trace_length = Some(Arc::new(length));
    }

    /// Rewrite every job payload (`201` to `POST /jobs/request`).
    pub fn rewrite_payload(&self, rewrite: impl Fn(&mut Value) + Send + Sync + 'static) {
        self.state.knobs.lock().unwrap().rewrite = Some(Arc::new(rewrite));
    }

    /// Answer every `GET /jobs/:id/artifacts` with `bytes` instead of the mock's file.
    pub fn serve_artifact_downloads(&self, bytes: Vec<u8>) {
        self.state.knobs.lock().unwrap().artifact_download = Some(bytes);
    }

    /// Add `X-GitLab-Last-Update: value` to `204` answers to job requests.
    pub fn set_last_update(&self, value: &str) {
        self.state.knobs.lock().unwrap().last_update = Some(value.to_owned());
    }

    pub fn exchanges(&self) -> Vec<Exchange> {
        self.state.exchanges.lock().unwrap().clone()
    }

    /// Bodies of the `PUT /jobs/:id` requests, as JSON.
    pub fn updates(&self, job_id: u64) -> Vec<Value> {
        let path = format!("/api/v4/jobs/{job_id}");
        self.exchanges()
            .into_iter()
            .filter(|e| e.method == "PUT" && e.path == path)
            .map(|e| e.json())
            .collect()
    }

    /// The last final update (state success or failed) that the mock answered `200`.
    pub fn final_update(&self, job_id: u64) -> Value {
        let path = format!("/api/v4/jobs/{job_id}");
        self.exchanges()
            .into_iter()
            .rev()
            .find(|e| {
                e.method == "PUT"
                    && e.path == path
                    && e.status == 200
                    && matches!(e.json()["state"].as_str(), Some("success" | "failed"))
            })
            .map(|e| e.json())
            .unwrap_or_else(|| panic!("no accepted final update for job {job_id}"))
    }
}

fn is_final_update(method: &str, path: &str, body: &[u8]) -> bool {
    method == "PUT"
        && path.starts_with("/api/v4/jobs/")
        && !path.ends_with("/trace")
        && serde_json::from_slice::<Value>(body)
            .ok()
            .is_some_and(|v| matches!(v["state"].as_str(), Some("success" | "failed")))
}

fn job_id_of(path: &str) -> Option<u64> {
    path.strip_prefix("/api/v4/jobs/")?
        .split('/')
        .next()?
        .parse()
        .ok()
}

async fn proxy(
    State(front): State<Arc<FrontState>>,
    request: axum::extract::Request,
) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 512 << 20)
        .await
        .unwrap_or_default()
        .to_vec();
    let method = parts.method.as_str().to_owned();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let headers: HashMap<String, String> = parts
        .headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let record = |status: u16| Exchange {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        headers: headers.clone(),
        body: body.clone(),
        status,
    };

    if is_final_update(&method, &path, &body)
        && front
            .final_202
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        front.exchanges.lock().unwrap().push(record(202));
        return Response::builder()
            .status(202)
            .header("x-gitlab-trace-update-interval", "1")
            .header("connection", "close")
            .body(Body::from("202"))
            .unwrap();
    }

    let first_running_update = method == "PUT"
        && job_id_of(&path).is_some()
        && !path.ends_with("/trace")
        && serde_json::from_slice::<Value>(&body)
            .ok()
            .is_some_and(|v| v["state"] == "running")
        && !front
            .exchanges
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.method == "PUT" && e.path == path);
    if first_running_update && *front.acceptance.borrow() == Some(false) {
        front.held.fetch_add(1, Ordering::SeqCst);
        let mut released = front.acceptance.subscribe();
        let _ = released.wait_for(|state| *state != Some(false)).await;
    }

    if method == "GET" && path.ends_with("/artifacts") {
        let replacement = front.knobs.lock().unwrap().artifact_download.clone();
        if let Some(bytes) = replacement {
            front.exchanges.lock().unwrap().push(record(200));
            return Response::builder()
                .status(200)
                .header("connection", "close")
                .body(Body::from(bytes))
                .unwrap();
        }
    }

    let target = format!(
        "{}{}",
        front.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut forward = front
        .http
        .request(parts.method.clone(), target)
        .body(body.clone());
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding"
        ) {
            forward = forward.header(name, value);
        }
    }
    let answer = match forward.send().await {
        Ok(answer) => answer,
        Err(_) => {
            front.exchanges.lock().unwrap().push(record(502));
            return Response::builder()
                .status(502)
                .header("connection", "close")
                .body(Body::empty())
                .unwrap();
        }
    };
    let mut status = answer.status().as_u16();
    let mut out_headers = answer.headers().clone();
    let mut out_body = answer.bytes().await.unwrap_or_default().to_vec();
    for name in ["transfer-encoding", "connection", "content-length"] {
        out_headers.remove(name);
    }
    let knobs = {
        let knobs = front.knobs.lock().unwrap();
        (
            knobs.rewrite.clone(),
            knobs.trace_length.clone(),
            knobs.last_update.clone(),
        )
    };
    let is_patch = method == "PATCH" && path.ends_with("/trace");
    if is_patch
        && status == 202
        && front
            .lose_patches
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        status = 502;
        out_body.clear();
        out_headers.clear();
    }
    if is_patch && status == 416 && !out_headers.contains_key("range") {
        if let (Some(length), Some(id)) = (knobs.1, job_id_of(&path)) {
            if let Some(length) = length(id) {
                out_headers.insert(
                    "range",
                    HeaderValue::from_str(&format!("0-{length}")).unwrap(),
                );
            }
        }
    }
    if path == "/api/v4/jobs/request" && status == 201 {
        if let Some(rewrite) = knobs.0 {
            let mut payload: Value = serde_json::from_slice(&out_body).unwrap();
            rewrite(&mut payload);
            out_body = serde_json::to_vec(&payload).unwrap();
        }
    }
    if path == "/api/v4/jobs/request" && status == 204 {
        if let Some(value) = knobs.2 {
            out_headers.insert(
                "x-gitlab-last-update",
                HeaderValue::from_str(&value).unwrap(),
            );
        }
    }
    if front.canceling.load(Ordering::SeqCst)
        && (is_patch || (method == "PUT" && path.starts_with("/api/v4/jobs/")))
        && matches!(status, 200 | 202)
    {
        out_headers.insert("job-status", HeaderValue::from_static("canceling"));
    }
    front.exchanges.lock().unwrap().push(record(status));
    let mut response = Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .body(Body::from(out_body))
        .unwrap();
    *response.headers_mut() = out_headers;
    response
        .headers_mut()
        .insert("connection", HeaderValue::from_static("close"));
    response
}

// ---- the mock ----------------------------------------------------------------------

/// The mock with a 1 s trace update interval and a front.
pub async fn mock_and_front() -> (GitlabRunnerMock, Front) {
    let mock = GitlabRunnerMock::start().await;
    mock.set_update_interval(1);
    let front = Front::start(mock.uri().as_str()).await;
    (mock, front)
}

/// A job with a `script` step (and an `after_script` step when given) and variables
/// (`(key, value, masked)`), queued on the mock.
pub fn enqueue(
    mock: &GitlabRunnerMock,
    name: &str,
    script: &[&str],
    after_script: &[&str],
    variables: &[(&str, &str, bool)],
) -> MockJob {
    enqueue_with(mock, name, script, after_script, variables, |_| {})
}

/// [`enqueue`], with `customize` applied to the builder (artifacts, dependencies).
pub fn enqueue_with(
    mock: &GitlabRunnerMock,
    name: &str,
    script: &[&str],
    after_script: &[&str],
    variables: &[(&str, &str, bool)],
    customize: impl FnOnce(&mut MockJobBuilder),
) -> MockJob {
    let mut builder = mock.job_builder(name.to_owned());
    builder.add_step(
        MockJobStepName::Script,
        script.iter().map(|s| (*s).to_owned()).collect(),
        3600,
        MockJobStepWhen::OnSuccess,
        false,
    );
    if !after_script.is_empty() {
        builder.add_step(
            MockJobStepName::AfterScript,
            after_script.iter().map(|s| (*s).to_owned()).collect(),
            3600,
            MockJobStepWhen::Always,
            true,
        );
    }
    // The mock's payload points at a repository that does not exist; jobs that need a
    // real one get it through `Front::rewrite_payload` and override this.
    builder.add_variable("GIT_STRATEGY".to_owned(), "none".to_owned(), true, false);
    for (key, value, masked) in variables {
        builder.add_variable((*key).to_owned(), (*value).to_owned(), !masked, *masked);
    }
    customize(&mut builder);
    let job = builder.build();
    mock.enqueue_job(job.clone());
    job
}

/// The mock job's log as text.
pub fn log_text(job: &MockJob) -> String {
    String::from_utf8_lossy(&job.log()).into_owned()
}

// ---- the runner ---------------------------------------------------------------------

/// A configuration with one shell entry pointing at `url` (the mock's runner token),
/// builds and cache under `dir`; `global` replaces the default global keys it names
/// (`concurrent = 1`, `check_interval = 1`, `shutdown_timeout = 30`), `extra` is
/// appended to the `[[runners]]` table.
pub fn config(url: &str, dir: &Path, global: &str, extra: &str) -> Config {
    let defaults: String = [
        ("concurrent", "1"),
        ("check_interval", "1"),
        ("shutdown_timeout", "30"),
    ]
    .iter()
    .filter(|(key, _)| !global.contains(key))
    .map(|(key, value)| format!("{key} = {value}\n"))
    .collect();
    let text = format!(
        "{defaults}{global}\n\n[[runners]]\nname = \"test-runner\"\nurl = \"{url}\"\ntoken = \"fakerunnertoken\"\nexecutor = \"shell\"\nbuilds_dir = \"{}\"\ncache_dir = \"{}\"\n{extra}\n",
        dir.join("builds").display(),
        dir.join("cache").display(),
    );
    let (config, warnings) = Config::from_toml(&text, Path::new("config.toml")).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    config
}

/// Collected poll events.
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<PollEvent>>>);

impl Events {
    pub fn all(&self) -> Vec<PollEvent> {
        self.0.lock().unwrap().clone()
    }

    pub fn texts(&self) -> Vec<String> {
        self.all().iter().map(ToString::to_string).collect()
    }
}

/// Options for tests: the fixed system id, short kill grace, events collected.
pub fn options(dir: &Path, max_jobs: Option<usize>) -> (PollOptions, Events) {
    let events = Events::default();
    let mut options = PollOptions::new(SYSTEM_ID);
    options.max_jobs = max_jobs;
    options.work_dir = dir.to_owned();
    options.kill_grace = Duration::from_secs(2);
    let sink = events.clone();
    options.events = Arc::new(move |event: &PollEvent| {
        eprintln!("[runner] {event}");
        sink.0.lock().unwrap().push(event.clone());
    });
    (options, events)
}

/// Starts a poller in the background.
pub fn start(
    config: Config,
    options: PollOptions,
) -> (PollHandle, tokio::task::JoinHandle<PollSummary>) {
    let (poller, handle) = Poller::new(config, options).unwrap();
    (handle, tokio::spawn(poller.run()))
}

/// Runs `jobs` jobs and returns what happened (fails after `limit`).
pub async fn run_jobs(
    config: Config,
    dir: &Path,
    jobs: usize,
    limit: Duration,
) -> (PollSummary, Events) {
    let (options, events) = options(dir, Some(jobs));
    let (_handle, task) = start(config, options);
    let summary = tokio::time::timeout(limit, task)
        .await
        .unwrap_or_else(|_| panic!("the runner did not finish {jobs} job(s) within {limit:?}"))
        .unwrap();
    (summary, events)
}

/// Polls `condition` every 50 ms for up to `limit`.
pub async fn wait_for(limit: Duration, what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- git ---------------------------------------------------------------------------

pub use gantry_test_support::git;

/// A repository with `files` committed on `main`; returns its path and the commit.
pub fn repository(dir: &Path, files: &[(&str, &str)]) -> (PathBuf, String) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    for (path, content) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "initial"]);
    let sha = git(dir, &["rev-parse", "HEAD"]);
    (dir.to_owned(), sha)
}

/// A payload rewrite pointing `git_info` at a local repository (full clone).
pub fn use_repository(repo: &Path, sha: &str) -> impl Fn(&mut Value) + Send + Sync + 'static {
    let url = format!("file://{}", repo.display());
    let sha = sha.to_owned();
    move |payload: &mut Value| {
        payload["git_info"] = serde_json::json!({
            "repo_url": url,
            "ref": "main",
            "sha": sha,
            "before_sha": "0000000000000000000000000000000000000000",
            "ref_type": "branch",
            "refspecs": ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"],
            "depth": 0
        });
        // Drop the mock's GIT_STRATEGY=none: clone the repository.
        if let Some(variables) = payload["variables"].as_array_mut() {
            variables.retain(|v| v["key"] != "GIT_STRATEGY");
            variables.push(serde_json::json!({"key": "GIT_STRATEGY", "value": "clone", "public": true, "masked": false}));
        }
    }
}

/// GitLab's current `failure_reasons` (the mock sends an old list without
/// `runner_interrupted`, `runner_configuration_error`, …).
pub fn current_failure_reasons(payload: &mut Value) {
    payload["features"]["failure_reasons"] = serde_json::json!([
        "unknown_failure",
        "script_failure",
        "api_failure",
        "stuck_or_timeout_failure",
        "runner_system_failure",
        "missing_dependency_failure",
        "runner_unsupported",
        "job_execution_timeout",
        "runner_configuration_error",
        "runner_external_dependency_failure",
        "runner_interrupted",
        "trace_size_exceeded"
    ]);
}

/// CRC-32 of `bytes` as `crc32:%08x`.
pub fn checksum(bytes: &[u8]) -> String {
    let mut checksum = gantry_protocol::TraceChecksum::new();
    checksum.update(bytes);
    checksum.to_wire()
}
