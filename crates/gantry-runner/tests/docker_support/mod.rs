//! Harness of the Docker executor's end-to-end tests: our coordinator in-process on a
//! loopback port (SQLite in a temp dir), a real git repository, our runner's poll loop
//! with `executor = "docker"`, and the real Docker engine with the images of
//! `scripts/test-images.sh`. A test that cannot reach an engine fails, saying why.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_runner::config::Config;
use gantry_runner::config::short_token;
use gantry_runner::poll::{PollEvent, PollHandle, PollOptions, PollSummary, Poller};
use gantry_server::coordinator::{Coordinator, CoordinatorConfig};
use gantry_store::Store;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const BUSYBOX: &str = "gantry-test/busybox:latest";
pub const ENTRYPOINT: &str = "gantry-test/entrypoint:latest";
pub const HTTP: &str = "gantry-test/http:latest";

/// Fails the test unless a Docker engine answers and the test images exist.
pub async fn require_docker() {
    if let Err(error) = gantry_runner::executor::docker::docker_available().await {
        panic!("this test needs a Docker engine, and none answers: failed to {error}");
    }
    for image in [BUSYBOX, ENTRYPOINT, HTTP] {
        let found = Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", image])
            .output()
            .is_ok_and(|out| out.status.success());
        assert!(
            found,
            "this test needs the image {image}; build the test images with scripts/test-images.sh"
        );
    }
}

/// Ids of the containers (`ps -a`), networks or volumes carrying `label`.
pub fn labelled(kind: &str, label: &str) -> Vec<String> {
    let args: Vec<&str> = match kind {
        "container" => vec!["ps", "-a", "-q", "--filter"],
        "network" => vec!["network", "ls", "-q", "--filter"],
        "volume" => vec!["volume", "ls", "-q", "--filter"],
        other => panic!("unknown kind {other}"),
    };
    let filter = format!("label={label}");
    let out = Command::new("docker")
        .args(&args)
        .arg(&filter)
        .output()
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker {args:?} {filter}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Everything a runner with `token` created that is still there.
pub fn leftovers(token: &str) -> Vec<String> {
    let label = format!("com.gantry.runner={}", short_token(token));
    let mut all = Vec::new();
    for kind in ["container", "network", "volume"] {
        all.extend(
            labelled(kind, &label)
                .into_iter()
                .map(|id| format!("{kind} {id}")),
        );
    }
    all
}

pub struct TestServer {
    pub url: String,
    pub admin: String,
    pub coordinator: Coordinator,
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    dir: tempfile::TempDir,
}

impl TestServer {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&format!(
            "sqlite://{}",
            dir.path().join("gantry.db").display()
        ))
        .await
        .expect("open the store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let mut config = CoordinatorConfig::new(dir.path().join("data"), url.clone());
        config.long_poll = Duration::from_secs(2);
        let coordinator = Coordinator::open(store, config)
            .await
            .expect("open the coordinator");
        let tokens = coordinator.bootstrap().await.expect("bootstrap");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(gantry_server::http::serve(
            listener,
            coordinator.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Self {
            url,
            admin: tokens
                .admin_token
                .expect("first start creates an admin token"),
            coordinator,
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("http client"),
            shutdown: Some(tx),
            task: Some(task),
            dir,
        }
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v4/{}", self.url, path.trim_start_matches('/'))
    }

    pub async fn admin(
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
        let response = request.send().await.expect("request");
        let status = response.status();
        let bytes = response.bytes().await.expect("body");
        let value = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    /// A project from `repo` with a pipeline on `main`: `(project id, pipeline id)`.
    pub async fn project_with_pipeline(&self, repo: &Repo) -> (i64, i64) {
        let (status, project) = self
            .admin(
                Method::POST,
                "projects",
                Some(json!({ "name": "docker-e2e", "repo_url": repo.path() })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "create project: {project}");
        let project_id = project["id"].as_i64().expect("project id");
        let (status, pipeline) = self
            .admin(
                Method::POST,
                &format!("projects/{project_id}/pipeline?ref=main"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "create pipeline: {pipeline}");
        (project_id, pipeline["id"].as_i64().expect("pipeline id"))
    }

    /// An instance runner's `glrt-` token.
    pub async fn runner_token(&self) -> String {
        let (status, body) = self
            .admin(
                Method::POST,
                "user/runners",
                Some(json!({ "runner_type": "instance_type" })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "create runner: {body}");
        body["token"].as_str().expect("token").to_owned()
    }

    pub async fn trace(&self, project_id: i64, job_id: i64) -> String {
        let response = self
            .http
            .get(self.api(&format!("projects/{project_id}/jobs/{job_id}/trace")))
            .header("PRIVATE-TOKEN", &self.admin)
            .send()
            .await
            .expect("trace request");
        response.text().await.expect("trace body")
    }

    pub async fn job(&self, project_id: i64, job_id: i64) -> Value {
        let (status, body) = self
            .admin(
                Method::GET,
                &format!("projects/{project_id}/jobs/{job_id}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    pub async fn cancel(&self, project_id: i64, job_id: i64) {
        let (status, body) = self
            .admin(
                Method::POST,
                &format!("projects/{project_id}/jobs/{job_id}/cancel"),
                None,
            )
            .await;
        assert!(status.is_success(), "cancel: {status} {body}");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

pub use gantry_test_support::Repo;

/// The runner side: a `config.toml` with one Docker entry, and the poll loop.
pub struct Runner {
    pub token: String,
    pub dir: tempfile::TempDir,
    pub config: Config,
    pub events: Arc<Mutex<Vec<String>>>,
    /// Keep job records, as `gantry runner run` does (script stages then run
    /// detached, see `gantry_runner::journal`).
    pub journal: bool,
}

impl Runner {
    /// `docker` is the body of `[runners.docker]`.
    pub fn new(server: &TestServer, token: &str, docker: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let text = format!(
            "concurrent = 2\ncheck_interval = 1\n\n[[runners]]\nname = \"docker-e2e\"\nurl = \"{}\"\ntoken = \"{token}\"\nexecutor = \"docker\"\nbuilds_dir = \"{}\"\ncache_dir = \"{}\"\n\n[runners.docker]\n{docker}\n",
            server.url,
            dir.path().join("builds").display(),
            dir.path().join("cache").display(),
        );
        let (config, warnings) = Config::from_toml(&text, &dir.path().join("config.toml"))
            .unwrap_or_else(|e| panic!("config: {e}\n{text}"));
        assert!(warnings.is_empty(), "{warnings:?}");
        Self {
            token: token.to_owned(),
            dir,
            config,
            events: Arc::new(Mutex::new(Vec::new())),
            journal: false,
        }
    }

    /// This runner with job records kept ([`Runner::journal`]).
    pub fn with_journal(mut self) -> Self {
        self.journal = true;
        self
    }

    /// Runs the poll loop until `jobs` jobs ended (or `limit` passed).
    pub async fn run(&self, jobs: usize, limit: Duration) -> PollSummary {
        let (summary, _) = self.run_with(jobs, limit, |_| {}).await;
        summary
    }

    /// Like [`Runner::run`], handing the poll handle to `with` first.
    pub async fn run_with(
        &self,
        jobs: usize,
        limit: Duration,
        with: impl FnOnce(PollHandle),
    ) -> (PollSummary, Vec<String>) {
        let mut options = PollOptions::new("s_d0c4e2e0c0de");
        options.max_jobs = Some(jobs);
        options.work_dir = self.dir.path().to_owned();
        options.kill_grace = Duration::from_secs(1);
        if self.journal {
            options.journal = Some(
                gantry_runner::journal::Journal::open(self.dir.path().join(".runner_jobs"))
                    .expect("a journal"),
            );
        }
        let events = Arc::clone(&self.events);
        options.events = Arc::new(move |event: &PollEvent| {
            events.lock().unwrap().push(event.to_string());
        });
        let (poller, handle) = Poller::new(self.config.clone(), options).expect("poller");
        with(handle);
        let summary = tokio::time::timeout(limit, poller.run())
            .await
            .unwrap_or_else(|_| panic!("the runner did not finish {jobs} job(s) in {limit:?}"));
        (summary, self.events.lock().unwrap().clone())
    }
}
