//! Shared harness of the runner ⇄ coordinator end-to-end tests: our coordinator
//! (`gantry-server`, in-process) serving the Runner API, the user API and git smart HTTP
//! on a loopback port over SQLite in a temp dir, real git repositories made in temp
//! dirs, and our runner's poll loop (`gantry-runner`, in-process) or the `gantry`
//! binary. Nothing is mocked: assertions read what the coordinator stored, through the
//! user API.
//!
//! Everything cleans up: temp dirs are removed on drop, the server stops when its
//! [`Server`] is dropped, a runner's task is aborted (its job processes are killed with
//! their process group when the runtime drops them), child processes are killed.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_runner::config::Config;
use gantry_runner::poll::{PollEvent, PollHandle, PollOptions, PollSummary, Poller};
use gantry_server::coordinator::{Coordinator, CoordinatorConfig};
use gantry_store::Store;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The system id of in-process test runners.
pub const SYSTEM_ID: &str = "s_e2e0123456ab";

// ---- the coordinator ------------------------------------------------------------------

/// Coordinator settings a test changes.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// How long a job request is held when there is no job.
    pub long_poll: Duration,
    /// Largest job log the coordinator accepts.
    pub trace_limit: u64,
    /// Largest artifact upload.
    pub artifact_limit: u64,
    /// The URL the coordinator puts in job payloads (repository URL, …), when it is not
    /// the one it listens on.
    pub external_url: Option<String>,
    /// How long an assigned job waits for its runner's first update.
    pub job_ack_timeout: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            long_poll: Duration::from_secs(5),
            trace_limit: 100 * 1024 * 1024,
            artifact_limit: 20 * 1024 * 1024,
            external_url: None,
            job_ack_timeout: gantry_server::coordinator::DEFAULT_JOB_ACK_TIMEOUT,
        }
    }
}

/// The coordinator while it serves.
struct Live {
    coordinator: Coordinator,
    shutdown: Option<oneshot::Sender<()>>,
    serve: JoinHandle<std::io::Result<()>>,
    timers: JoinHandle<()>,
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.serve.abort();
        self.timers.abort();
    }
}

/// Our coordinator on a loopback port, with its data in a temp dir that outlives
/// [`Server::stop`] (so [`Server::restart`] finds the same database, blobs and mirrors).
pub struct Server {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    addr: SocketAddr,
    /// The admin token (`glpat-…`) for the user API.
    pub admin: String,
    /// The legacy runner registration token.
    pub registration: String,
    pub http: reqwest::Client,
    options: ServerOptions,
    data: tempfile::TempDir,
    live: Option<Live>,
}

/// Opens the store and the coordinator over `data` and serves it on `listener`, as
/// `gantry server` does (bootstrap, resume the active pipelines, timers).
async fn serve(
    listener: tokio::net::TcpListener,
    data: &Path,
    url: &str,
    options: &ServerOptions,
) -> (Live, gantry_server::coordinator::Bootstrap) {
    let store = Store::open(&format!("sqlite://{}", data.join("gantry.db").display()))
        .await
        .expect("open the store");
    let external = options
        .external_url
        .clone()
        .unwrap_or_else(|| url.to_owned());
    let mut config = CoordinatorConfig::new(data.join("data"), external);
    config.long_poll = options.long_poll;
    config.trace_limit = options.trace_limit;
    config.artifact_limit = options.artifact_limit;
    config.job_ack_timeout = options.job_ack_timeout;
    let coordinator = Coordinator::open(store, config)
        .await
        .expect("open the coordinator");
    let tokens = coordinator.bootstrap().await.expect("bootstrap");
    coordinator
        .resume()
        .await
        .expect("resume the active pipelines");
    let timers = coordinator.spawn_background();
    let (tx, rx) = oneshot::channel::<()>();
    let serve = tokio::spawn(gantry_server::http::serve(
        listener,
        coordinator.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    (
        Live {
            coordinator,
            shutdown: Some(tx),
            serve,
            timers,
        },
        tokens,
    )
}

impl Server {
    pub async fn start() -> Self {
        Self::start_with(ServerOptions::default()).await
    }

    pub async fn start_with(options: ServerOptions) -> Self {
        let data = tempfile::tempdir().expect("temp dir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let url = format!("http://{addr}");
        let (live, tokens) = serve(listener, data.path(), &url, &options).await;
        Self {
            url,
            addr,
            admin: tokens
                .admin_token
                .expect("the first start creates an admin token"),
            registration: tokens
                .registration_token
                .expect("the first start creates a registration token"),
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("http client"),
            options,
            data,
            live: Some(live),
        }
    }

    /// The coordinator service (for facts the user API does not show).
    pub fn coordinator(&self) -> &Coordinator {
        &self
            .live
            .as_ref()
            .expect("the server is running")
            .coordinator
    }

    /// Stops the HTTP server (requests in flight finish, held job requests get `204`)
    /// and closes the coordinator and its database; the data dir stays. New
    /// connections are refused until [`Server::restart`].
    pub async fn stop(&mut self) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        if let Some(tx) = live.shutdown.take() {
            let _ = tx.send(());
        }
        let serve = &mut live.serve;
        match tokio::time::timeout(Duration::from_secs(30), serve).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => panic!("the server failed: {error}"),
            Ok(Err(join)) => panic!("the server task failed: {join}"),
            Err(_) => panic!("the server did not stop within 30 s"),
        }
        live.timers.abort();
        drop(live);
    }

    /// Starts the coordinator again on the same port over the same data dir.
    pub async fn restart(&mut self) {
        assert!(self.live.is_none(), "stop the server first");
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(error) if Instant::now() < deadline => {
                    eprintln!("[server] rebinding {}: {error}; retrying", self.addr);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("rebinding {}: {error}", self.addr),
            }
        };
        let (live, tokens) = serve(listener, self.data.path(), &self.url, &self.options).await;
        assert!(
            tokens.admin_token.is_none(),
            "a restart must not create a new admin token"
        );
        self.live = Some(live);
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v4/{}", self.url, path.trim_start_matches('/'))
    }

    /// A user API call with the admin token: the status and the body (JSON, or a JSON
    /// string for text).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, self.api(path))
            .header("PRIVATE-TOKEN", &self.admin);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status();
        let bytes = response.bytes().await.expect("body");
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    async fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        want: StatusCode,
    ) -> Value {
        let (status, value) = self.call(method.clone(), path, body).await;
        assert_eq!(status, want, "{method} {path}: {value}");
        value
    }

    /// A project mirroring `repo`; its id.
    pub async fn create_project(&self, name: &str, repo: &Repo) -> i64 {
        let body = json!({ "name": name, "repo_url": repo.path().display().to_string() });
        let project = self
            .expect(Method::POST, "projects", Some(body), StatusCode::CREATED)
            .await;
        project["id"].as_i64().expect("project id")
    }

    /// A pipeline for `main`; its id.
    pub async fn create_pipeline(&self, project: i64) -> i64 {
        let pipeline = self
            .expect(
                Method::POST,
                &format!("projects/{project}/pipeline?ref=main"),
                None,
                StatusCode::CREATED,
            )
            .await;
        assert_eq!(pipeline["yaml_errors"], Value::Null, "{pipeline}");
        pipeline["id"].as_i64().expect("pipeline id")
    }

    /// An instance runner that runs untagged jobs; its `glrt-` token.
    pub async fn create_runner(&self) -> String {
        let body =
            json!({ "runner_type": "instance_type", "run_untagged": true, "description": "e2e" });
        let runner = self
            .expect(
                Method::POST,
                "user/runners",
                Some(body),
                StatusCode::CREATED,
            )
            .await;
        let token = runner["token"].as_str().expect("runner token").to_owned();
        assert!(token.starts_with("glrt-"), "{token}");
        token
    }

    pub async fn pipeline(&self, project: i64, pipeline: i64) -> Value {
        self.expect(
            Method::GET,
            &format!("projects/{project}/pipelines/{pipeline}"),
            None,
            StatusCode::OK,
        )
        .await
    }

    pub async fn jobs(&self, project: i64, pipeline: i64) -> Vec<Value> {
        let jobs = self
            .expect(
                Method::GET,
                &format!("projects/{project}/pipelines/{pipeline}/jobs"),
                None,
                StatusCode::OK,
            )
            .await;
        jobs.as_array().cloned().unwrap_or_default()
    }

    /// The latest attempt of the job called `name`.
    pub async fn job_named(&self, project: i64, pipeline: i64, name: &str) -> Value {
        self.jobs(project, pipeline)
            .await
            .into_iter()
            .filter(|j| j["name"] == name)
            .max_by_key(|j| j["id"].as_i64())
            .unwrap_or_else(|| panic!("no job {name} in pipeline {pipeline}"))
    }

    pub async fn job(&self, project: i64, job: i64) -> Value {
        self.expect(
            Method::GET,
            &format!("projects/{project}/jobs/{job}"),
            None,
            StatusCode::OK,
        )
        .await
    }

    /// The job's log as the coordinator stored it (raw bytes).
    pub async fn trace_bytes(&self, project: i64, job: i64) -> Vec<u8> {
        let response = self
            .http
            .get(self.api(&format!("projects/{project}/jobs/{job}/trace")))
            .header("PRIVATE-TOKEN", &self.admin)
            .send()
            .await
            .expect("trace request");
        assert_eq!(response.status(), StatusCode::OK, "trace of job {job}");
        response.bytes().await.expect("trace body").to_vec()
    }

    /// The job's log as the coordinator stored it.
    pub async fn trace(&self, project: i64, job: i64) -> String {
        String::from_utf8_lossy(&self.trace_bytes(project, job).await).into_owned()
    }

    pub async fn cancel_job(&self, project: i64, job: i64) -> Value {
        self.expect(
            Method::POST,
            &format!("projects/{project}/jobs/{job}/cancel"),
            None,
            StatusCode::CREATED,
        )
        .await
    }

    /// The job's artifacts archive, downloaded through the user API.
    pub async fn artifacts_archive(&self, project: i64, job: i64) -> Vec<u8> {
        let response = self
            .http
            .get(self.api(&format!("projects/{project}/jobs/{job}/artifacts")))
            .header("PRIVATE-TOKEN", &self.admin)
            .send()
            .await
            .expect("artifacts request");
        assert_eq!(response.status(), StatusCode::OK, "artifacts of job {job}");
        response.bytes().await.expect("artifacts body").to_vec()
    }

    /// Waits until the pipeline is finished (success, failed, canceled, skipped);
    /// returns it.
    pub async fn wait_pipeline(&self, project: i64, pipeline: i64, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let value = self.pipeline(project, pipeline).await;
            if matches!(
                value["status"].as_str(),
                Some("success" | "failed" | "canceled" | "skipped")
            ) {
                return value;
            }
            if Instant::now() > deadline {
                let jobs = self.jobs(project, pipeline).await;
                let summary: Vec<String> = jobs
                    .iter()
                    .map(|j| format!("{}={}", j["name"], j["status"]))
                    .collect();
                panic!(
                    "pipeline {pipeline} still {} after {limit:?}: {summary:?}",
                    value["status"]
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the job named `name` has `status`; returns it.
    pub async fn wait_job_status(
        &self,
        project: i64,
        pipeline: i64,
        name: &str,
        status: &str,
        limit: Duration,
    ) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let job = self.job_named(project, pipeline, name).await;
            if job["status"] == status {
                return job;
            }
            assert!(
                Instant::now() < deadline,
                "job {name} is {} after {limit:?}, not {status}",
                job["status"]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Reads the job's log until it contains `needle` (reading it marks the job as
    /// watched, so the runner sends its log every second); returns it.
    pub async fn wait_trace(
        &self,
        project: i64,
        job: i64,
        needle: &str,
        limit: Duration,
    ) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let trace = self.trace(project, job).await;
            if trace.contains(needle) {
                return trace;
            }
            assert!(
                Instant::now() < deadline,
                "job {job}'s log has no {needle:?} after {limit:?}:\n{trace}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the job `name` of `pipeline` runs and its log shows `line`: its id
    /// and the log.
    pub async fn wait_running(
        &self,
        project: i64,
        pipeline: i64,
        name: &str,
        line: &str,
    ) -> (i64, String) {
        let job = self
            .wait_job_status(project, pipeline, name, "running", Duration::from_secs(60))
            .await;
        let id = job["id"].as_i64().expect("a job id");
        let log = self
            .wait_trace(project, id, line, Duration::from_secs(30))
            .await;
        (id, log)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.live.take();
    }
}

// ---- git ------------------------------------------------------------------------------

/// A real git repository in a temp dir with one commit on `main` (`gantry_test_support`'s),
/// and that commit.
pub struct Repo {
    repo: gantry_test_support::Repo,
    /// The commit.
    pub sha: String,
}

impl Repo {
    /// `.gitlab-ci.yml` = `ci`, plus `files`.
    pub fn new(ci: &str, files: &[(&str, &str)]) -> Self {
        let repo = gantry_test_support::Repo::with_ci(ci, files);
        let sha = repo.head();
        Self { repo, sha }
    }

    pub fn path(&self) -> &Path {
        self.repo.path()
    }
}

/// A coordinator with a project of `ci` (+ `files`) and a runner token: what most
/// tests start from.
pub struct Setup {
    pub server: Server,
    pub repo: Repo,
    pub project: i64,
    pub runner_token: String,
}

impl Setup {
    pub async fn new(ci: &str, files: &[(&str, &str)]) -> Self {
        Self::with(ServerOptions::default(), ci, files).await
    }

    pub async fn with(options: ServerOptions, ci: &str, files: &[(&str, &str)]) -> Self {
        let server = Server::start_with(options).await;
        let repo = Repo::new(ci, files);
        let project = server.create_project("e2e", &repo).await;
        let runner_token = server.create_runner().await;
        Self {
            server,
            repo,
            project,
            runner_token,
        }
    }

    /// A runner (poll loop in this process) for this coordinator.
    pub fn runner(&self, global: &str, extra: &str) -> Runner {
        Runner::start(&self.server.url, &self.runner_token, global, extra)
    }
}

// ---- the runner (in process) ----------------------------------------------------------

/// Poll events as they came, with when.
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<(Instant, PollEvent)>>>);

impl Events {
    pub fn all(&self) -> Vec<PollEvent> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, e)| e.clone())
            .collect()
    }

    pub fn timed(&self) -> Vec<(Instant, PollEvent)> {
        self.0.lock().unwrap().clone()
    }

    pub fn texts(&self) -> Vec<String> {
        self.all().iter().map(ToString::to_string).collect()
    }
}

/// `config.toml` text for one shell runner: defaults `concurrent = 1`,
/// `check_interval = 1`, `shutdown_timeout = 30` unless `global` sets them; `extra` is
/// appended to the `[[runners]]` table.
pub fn config_text(url: &str, token: &str, dir: &Path, global: &str, extra: &str) -> String {
    let defaults: String = [
        ("concurrent", "1"),
        ("check_interval", "1"),
        ("shutdown_timeout", "30"),
    ]
    .iter()
    .filter(|(key, _)| !global.contains(key))
    .map(|(key, value)| format!("{key} = {value}\n"))
    .collect();
    format!(
        "{defaults}{global}\n\n[[runners]]\nname = \"e2e-runner\"\nurl = \"{url}\"\ntoken = \"{token}\"\nexecutor = \"shell\"\nbuilds_dir = \"{}\"\ncache_dir = \"{}\"\n{extra}\n",
        dir.join("builds").display(),
        dir.join("cache").display(),
    )
}

/// Writes a custom executor's driver programs — `config.sh`, `prepare.sh`, `run.sh` and
/// `cleanup.sh`, each `(name, bash body)` — into `dir`, and a `config.toml` there for
/// one custom runner of `setup` that uses them; returns the configuration's path.
pub fn custom_driver_config(setup: &Setup, dir: &Path, programs: &[(&str, String)]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    for (name, body) in programs {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/usr/bin/env bash\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let program = |name: &str| dir.join(name).display().to_string();
    let text = config_text(&setup.server.url, &setup.runner_token, dir, "", "")
        .replace("executor = \"shell\"", "executor = \"custom\"")
        + &format!(
            "[runners.custom]\nconfig_exec = \"{}\"\nprepare_exec = \"{}\"\nrun_exec = \"{}\"\ncleanup_exec = \"{}\"\n",
            program("config.sh"),
            program("prepare.sh"),
            program("run.sh"),
            program("cleanup.sh"),
        );
    let config = dir.join("config.toml");
    std::fs::write(&config, text).unwrap();
    config
}

/// Our runner's poll loop, in this process, with builds and cache in its own temp dir.
pub struct Runner {
    pub dir: tempfile::TempDir,
    pub events: Events,
    pub handle: PollHandle,
    task: Option<JoinHandle<PollSummary>>,
}

impl Runner {
    pub fn start(url: &str, token: &str, global: &str, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = config_text(url, token, dir.path(), global, extra);
        Self::from_text(dir, &text)
    }

    /// A runner of the configuration `text`, working in `dir`.
    pub fn from_text(dir: tempfile::TempDir, text: &str) -> Self {
        let (config, warnings) =
            Config::from_toml(text, Path::new("config.toml")).expect("a valid config");
        assert!(warnings.is_empty(), "{warnings:?}");
        let events = Events::default();
        let mut options = PollOptions::new(SYSTEM_ID);
        options.work_dir = dir.path().to_owned();
        options.kill_grace = Duration::from_secs(2);
        let sink = events.clone();
        options.events = Arc::new(move |event: &PollEvent| {
            eprintln!("[runner] {event}");
            sink.0.lock().unwrap().push((Instant::now(), event.clone()));
        });
        let (poller, handle) = Poller::new(config, options).expect("a poller");
        let task = tokio::spawn(poller.run());
        Self {
            dir,
            events,
            handle,
            task: Some(task),
        }
    }

    /// Stops taking jobs, lets running ones finish and returns every job's report.
    pub async fn stop(mut self, limit: Duration) -> PollSummary {
        self.handle.stop_taking_jobs();
        let task = self.task.take().expect("running");
        tokio::time::timeout(limit, task)
            .await
            .unwrap_or_else(|_| panic!("the runner did not stop within {limit:?}"))
            .expect("the poll loop")
    }

    /// Where the runner's builds are.
    pub fn builds_dir(&self) -> PathBuf {
        self.dir.path().join("builds")
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

// ---- the binary -----------------------------------------------------------------------

/// The `gantry` binary built with these tests.
pub fn gantry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gantry"));
    for name in ["GANTRY_RUNNER_CONFIG", "GANTRY_URL", "GANTRY_TOKEN"] {
        command.env_remove(name);
    }
    command
}

/// `gantry runner run --config CONFIG` in `dir`, in the background, its stderr kept.
pub fn start_run(config: &Path, dir: &Path) -> Child {
    let child = gantry()
        .args(["runner", "run", "--config"])
        .arg(config)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gantry runs");
    Child(child)
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Child(pub std::process::Child);

impl Child {
    pub fn id(&self) -> i32 {
        i32::try_from(self.0.id()).expect("pid")
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.id()), signal).expect("signal");
    }

    /// Stops a `gantry runner run` (SIGQUIT) and checks that it exits cleanly within
    /// 30 s; returns everything it wrote to stderr.
    pub fn quit(self) -> String {
        self.signal(nix::sys::signal::Signal::SIGQUIT);
        let (code, stderr) = self.wait(Duration::from_secs(30));
        assert_eq!(code, Some(0), "{stderr}");
        stderr
    }

    /// Waits for the exit (at most `limit`); the status code and everything written
    /// to stderr.
    pub fn wait(mut self, limit: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                let mut stderr = String::new();
                if let Some(mut pipe) = self.0.stderr.take() {
                    use std::io::Read;
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return (status.code(), stderr);
            }
            assert!(
                Instant::now() < deadline,
                "the process did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---- checks ---------------------------------------------------------------------------

/// Whether the process `pid` still runs (a zombie waiting for its reaper does not).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// The names of the sections the log opens (`section_start:<time>:<name>`), in order.
pub fn sections(log: &str) -> Vec<String> {
    log.split("section_start:")
        .skip(1)
        .filter_map(|rest| {
            let rest = rest.split_once(':')?.1;
            let end = rest.find(['\r', '[', '\n']).unwrap_or(rest.len());
            Some(rest[..end].to_owned())
        })
        .collect()
}

/// CRC-32 of `bytes` as `crc32:%08x`, as the runner reports it.
pub fn checksum(bytes: &[u8]) -> String {
    let mut checksum = gantry_protocol::TraceChecksum::new();
    checksum.update(bytes);
    checksum.to_wire()
}

/// Polls `condition` every 50 ms for up to `limit`.
pub async fn wait_for(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `gantry runner ARGS --config CONFIG`, waited for.
pub fn runner_command(config: &Path, args: &[&str]) -> std::process::Output {
    gantry()
        .arg("runner")
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .expect("gantry runs")
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A `config.toml` whose one entry (`executor`, named after it) runs jobs on a
/// `fleeting-plugin-local` fleet: three instances at most, each removed after its job,
/// made as jobs come, ready when `ready_command` succeeds there. `sections` (such as
/// `[runners.docker]`) go before `[runners.autoscaler]`.
pub fn local_fleet_config(
    url: &str,
    token: &str,
    dir: &Path,
    executor: &str,
    ready_command: &str,
    sections: &str,
) -> String {
    format!(
        r#"concurrent = 3
check_interval = 1
shutdown_timeout = 30

[[runners]]
name = "{executor}"
url = "{url}"
token = "{token}"
executor = "{executor}"
builds_dir = "{builds}"
cache_dir = "{cache}"
{sections}
[runners.autoscaler]
plugin = "{plugin}"
capacity_per_instance = 1
max_use_count = 1
max_instances = 3
instance_ready_command = {ready}
update_interval = "1s"
update_interval_when_expecting = "100ms"
log_internal_ip = true

[runners.autoscaler.plugin_config]
name = "e2e-{executor}"
boot_delay_ms = 200

[[runners.autoscaler.policy]]
idle_count = 0
idle_time = "0s"
"#,
        builds = dir.join("builds").display(),
        cache = dir.join("cache").display(),
        plugin = env!("CARGO_BIN_EXE_fleeting-plugin-local"),
        ready = toml_string(ready_command),
    )
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
