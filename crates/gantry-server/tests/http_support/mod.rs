//! Shared harness of the HTTP tests: a real server on an ephemeral loopback port over a
//! fresh SQLite database in a temp dir, real git repositories, and a reqwest client.

#![allow(dead_code, clippy::panic)]

use std::time::Duration;

use gantry_server::coordinator::{Coordinator, CoordinatorConfig, IncludeCache};
use gantry_server::processor::Watchdog;
use gantry_store::Store;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What to change from the defaults.
#[derive(Clone, Debug)]
pub struct Options {
    pub long_poll: Duration,
    pub trace_limit: u64,
    pub artifact_limit: u64,
    /// `Some`: the coordinator's timers run (every second, on the real clock, as in
    /// `gantry server`) with these thresholds; `None`: no timers.
    pub timers: Option<Watchdog>,
    /// How long an assigned job waits for its runner's first update (needs `timers`).
    pub job_ack_timeout: Duration,
    /// The HTTP server's timeouts and connection caps.
    pub limits: gantry_server::http::Limits,
    /// The offline include cache (`GANTRY_INCLUDE_CACHE` of `gantry server`): remote
    /// includes and templates are read from `<dir>/<host>/<path>` before any fetch.
    pub include_cache: Option<std::path::PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            long_poll: Duration::from_secs(2),
            trace_limit: 1024 * 1024,
            artifact_limit: 1024 * 1024,
            timers: None,
            job_ack_timeout: gantry_server::coordinator::DEFAULT_JOB_ACK_TIMEOUT,
            limits: gantry_server::http::Limits::default(),
            include_cache: None,
        }
    }
}

pub struct TestServer {
    pub url: String,
    pub admin: String,
    pub registration: String,
    pub coordinator: Coordinator,
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
    timers: Option<JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl TestServer {
    /// The coordinator's `data_dir`.
    #[allow(dead_code)]
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    pub async fn start() -> Self {
        Self::start_with(Options::default()).await
    }

    pub async fn start_with(options: Options) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = gantry_store::testing::database_url(&dir.path().join("gantry.db"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let store = Store::open(&url).await.expect("open the store");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let mut config = CoordinatorConfig::new(dir.path().join("data"), url.clone());
        config.long_poll = options.long_poll;
        config.trace_limit = options.trace_limit;
        config.artifact_limit = options.artifact_limit;
        config.job_ack_timeout = options.job_ack_timeout;
        config.include_cache = options.include_cache.map(|dir| IncludeCache {
            dir,
            // As `gantry server` names it: the external URL's host and port.
            host: url.trim_start_matches("http://").to_owned(),
        });
        let coordinator = gantry_server::testing::open_coordinator(store, config)
            .await
            .expect("open the coordinator");
        let tokens = coordinator.bootstrap().await.expect("bootstrap");
        let timers = options.timers.map(|watchdog| {
            coordinator.set_watchdog(watchdog);
            coordinator.spawn_background()
        });
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(gantry_server::http::serve_with(
            listener,
            coordinator.clone(),
            options.limits.clone(),
            async move {
                let _ = rx.await;
            },
        ));
        Self {
            url,
            admin: tokens
                .admin_token
                .expect("first start creates an admin token"),
            registration: tokens
                .registration_token
                .expect("first start creates a registration token"),
            coordinator,
            http: reqwest::Client::new(),
            shutdown: Some(tx),
            task: Some(task),
            timers,
            dir,
        }
    }

    /// Begin the graceful shutdown; returns the server task to await.
    pub fn begin_shutdown(&mut self) -> JoinHandle<std::io::Result<()>> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.take().expect("server task")
    }

    pub fn api(&self, path: &str) -> String {
        format!("{}/api/v4/{}", self.url, path.trim_start_matches('/'))
    }

    /// A user API call with the admin token; the answer's status and JSON body.
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
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        (status, value)
    }

    pub async fn create_project(&self, name: &str, repo: &Repo) -> Value {
        let (status, body) = self
            .admin(
                Method::POST,
                "projects",
                Some(json!({ "name": name, "repo_url": repo.path() })),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "create project {name}: {body}");
        body
    }

    pub async fn create_pipeline(&self, project_id: i64, ref_name: &str) -> Value {
        let (status, body) = self
            .admin(
                Method::POST,
                &format!("projects/{project_id}/pipeline?ref={ref_name}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "create pipeline: {body}");
        body
    }

    /// An instance runner (or with `body` fields merged in); its id and `glrt-` token.
    pub async fn create_runner(&self, extra: Value) -> (i64, String) {
        let mut body = json!({ "runner_type": "instance_type" });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        let (status, body) = self.admin(Method::POST, "user/runners", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "create runner: {body}");
        let token = body["token"].as_str().expect("token").to_owned();
        assert!(token.starts_with("glrt-"), "{token}");
        (body["id"].as_i64().expect("id"), token)
    }

    pub async fn request_job(
        &self,
        runner_token: &str,
        last_update: Option<&str>,
    ) -> reqwest::Response {
        let mut body = json!({ "token": runner_token, "system_id": "s_0123456789ab", "info": { "features": { "refspecs": true } } });
        if let Some(v) = last_update {
            body["last_update"] = json!(v);
        }
        self.http
            .post(self.api("jobs/request"))
            .json(&body)
            .send()
            .await
            .expect("job request")
    }

    /// Request a job that must be there: `(id, token, payload)`.
    pub async fn take_job(&self, runner_token: &str) -> (i64, String, Value) {
        let response = self.request_job(runner_token, None).await;
        assert_eq!(response.status(), StatusCode::CREATED, "a job is pending");
        let payload: Value = response.json().await.expect("payload");
        let id = payload["id"].as_i64().expect("id");
        let token = payload["token"].as_str().expect("token").to_owned();
        (id, token, payload)
    }

    /// Ends job `id` (its `token`) in `state` (`success` or `failed`, a script failure).
    pub async fn end_job(&self, id: i64, token: &str, state: &str) {
        let mut body = json!({ "token": token, "state": state });
        if state == "failed" {
            body["failure_reason"] = json!("script_failure");
        }
        let done = self
            .http
            .put(self.api(&format!("jobs/{id}")))
            .json(&body)
            .send()
            .await
            .expect("update");
        assert_eq!(done.status(), StatusCode::OK, "end job {id}");
    }

    /// Appends `log` at byte `offset` of job `id`'s log, as a runner streams it
    /// (`PATCH /jobs/:id/trace` with the job's `token`): the answer's status.
    pub async fn patch_log(&self, id: i64, token: &str, offset: usize, log: &str) -> StatusCode {
        self.http
            .patch(self.api(&format!("jobs/{id}/trace")))
            .header("JOB-TOKEN", token)
            .header(
                "Content-Range",
                format!("{offset}-{}", offset + log.len() - 1),
            )
            .body(log.to_owned())
            .send()
            .await
            .expect("log patch")
            .status()
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

    /// A job's log as the API gives it (`GET …/jobs/:id/trace`, `200`).
    pub async fn job_log(&self, project_id: i64, job_id: i64) -> String {
        let response = self
            .http
            .get(self.api(&format!("projects/{project_id}/jobs/{job_id}/trace")))
            .header("PRIVATE-TOKEN", &self.admin)
            .send()
            .await
            .expect("the log");
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.expect("the log's text")
    }

    pub async fn pipeline_jobs(&self, project_id: i64, pipeline_id: i64) -> Vec<Value> {
        let (status, body) = self
            .admin(
                Method::GET,
                &format!("projects/{project_id}/pipelines/{pipeline_id}/jobs"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body.as_array().cloned().unwrap_or_default()
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
        if let Some(timers) = self.timers.take() {
            timers.abort();
        }
    }
}

pub use gantry_test_support::Repo;

/// A 4xx answer must be JSON with a `message` or `error`, never a 5xx. Returns the
/// status and the body.
pub async fn expect_client_error(response: reqwest::Response, what: &str) -> (StatusCode, Value) {
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = response.bytes().await.expect("body");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert!(
        status.is_client_error(),
        "{what}: expected a 4xx, got {status}: {text}"
    );
    assert!(
        content_type.starts_with("application/json"),
        "{what}: {status} is not JSON ({content_type}): {text}"
    );
    let body: Value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{what}: body is not JSON ({e}): {text}"));
    assert!(
        body.get("message").is_some() || body.get("error").is_some(),
        "{what}: no message or error: {body}"
    );
    (status, body)
}

/// A pipeline of one job per stage (`build`, then `test`), the first with artifacts.
pub const TWO_STAGES: &str = r#"
stages: [build, test]
build:
  stage: build
  script: [make]
  artifacts:
    paths: [out.txt]
test:
  stage: test
  script: [make test]
"#;

/// The entry of `key` in a job payload's `variables`.
pub fn job_variable<'a>(payload: &'a Value, key: &str) -> Option<&'a Value> {
    payload["variables"]
        .as_array()
        .and_then(|all| all.iter().find(|v| v["key"] == key))
}

/// The value of `key` in a job payload's `variables`.
pub fn job_variable_value<'a>(payload: &'a Value, key: &str) -> Option<&'a str> {
    job_variable(payload, key).and_then(|v| v["value"].as_str())
}
