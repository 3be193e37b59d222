//! Crash recovery: the real `gantry server` binary is killed with SIGKILL while runners
//! (HTTP clients in this test, behaving as gitlab-runner does: long polls, trace patches
//! with `Content-Range` and `416` resync, final updates with the `202` protocol, retries
//! while the coordinator is away) are in the middle of their jobs, and restarted on the
//! same data directory and port. The running jobs must finish (their trace patches and
//! final updates accepted), the pipeline must complete, no job may be handed out twice,
//! and every log must be whole, in its file under the data directory.

#![allow(clippy::panic, clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

/// How long a runner keeps retrying a request while the server is away.
const AWAY: Duration = Duration::from_secs(60);

struct ServerProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl ServerProcess {
    fn start(data_dir: &Path, port: u16) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gantry"))
            .args([
                "server",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gantry server starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Self {
            child,
            lines,
            log: Vec::new(),
        };
        server.wait_for("gantry server: listening on ");
        server
    }

    fn wait_for(&mut self, prefix: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let found = line.starts_with(prefix);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!(
            "no `{prefix}` line from the server; it said:\n{}",
            self.log.join("\n")
        );
    }

    /// The admin token printed on first start.
    fn admin_token(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(token) = self.log.iter().find_map(|line| {
                let start = line.find("glpat-")?;
                line[start..]
                    .split(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_')
                    .next()
                    .map(str::to_owned)
            }) {
                return token;
            }
            assert!(
                Instant::now() < deadline,
                "no admin token printed:\n{}",
                self.log.join("\n")
            );
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                self.log.push(line);
            }
        }
    }

    /// Everything the server said so far.
    fn said(&mut self) -> String {
        while let Ok(line) = self.lines.try_recv() {
            self.log.push(line);
        }
        self.log.join("\n")
    }

    /// SIGKILL: no shutdown code runs.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn repo(ci: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .current_dir(dir.path())
            .args(args)
            .status()
            .expect("git");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["config", "user.email", "dev@example.com"]);
    git(&["config", "user.name", "Dev"]);
    std::fs::write(dir.path().join(".gitlab-ci.yml"), ci).expect("write");
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "init"]);
    dir
}

const PIPELINE: &str = r#"
stages: [build, test, deploy]
build: {stage: build, parallel: 4, script: [make]}
test: {stage: test, parallel: 3, script: [make test]}
deploy: {stage: deploy, script: [make deploy]}
"#;
const JOBS: usize = 8;
const RUNNERS: usize = 4;
/// Trace chunks per job, one every [`CHUNK_EVERY`].
const CHUNKS: usize = 8;
const CHUNK_EVERY: Duration = Duration::from_millis(250);

/// What the runners saw, shared with the test.
#[derive(Default)]
struct Seen {
    /// Every job id a job request returned, in order.
    handed_out: Mutex<Vec<i64>>,
    /// Jobs with at least one trace patch accepted and no final update yet.
    mid_job: Mutex<HashSet<i64>>,
    /// Jobs whose final update was accepted → the log the runner sent.
    finished: Mutex<HashMap<i64, Vec<u8>>>,
    /// Jobs whose final update got `403` (already finished by a request the kill
    /// interrupted after it was applied).
    forbidden_final: Mutex<HashSet<i64>>,
    errors: Mutex<Vec<String>>,
    stop: AtomicBool,
}

struct Api {
    http: reqwest::Client,
    url: String,
    admin: String,
}

impl Api {
    fn api(&self, path: &str) -> String {
        format!("{}/api/v4/{path}", self.url)
    }

    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method, self.api(path))
            .header("PRIVATE-TOKEN", &self.admin);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("user API");
        let status = response.status();
        let body: Value = response.json().await.expect("JSON");
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    /// Send a request built by `build`, retrying while the server cannot be reached.
    async fn send(
        &self,
        what: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, String> {
        let deadline = Instant::now() + AWAY;
        loop {
            match build().send().await {
                Ok(response) => return Ok(response),
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(format!("{what}: the server stayed away: {e}")),
            }
        }
    }
}

/// A runner: long-poll for jobs, run each (trace chunks, then the final update).
async fn run_runner(api: Arc<Api>, token: String, seen: Arc<Seen>) {
    let mut last_update = String::new();
    while !seen.stop.load(Ordering::SeqCst) {
        let body = json!({
            "token": token,
            "last_update": last_update,
            "info": { "name": "crash-test", "features": { "trace_reset": true, "trace_checksum": true, "trace_size": true } },
        });
        let response = match api
            .send("job request", || {
                api.http.post(api.api("jobs/request")).json(&body)
            })
            .await
        {
            Ok(r) => r,
            Err(e) => return seen.errors.lock().unwrap().push(e),
        };
        match response.status() {
            StatusCode::CREATED => {
                let Ok(payload) = response.json::<Value>().await else {
                    // The server died while sending the payload: nothing was handed over.
                    continue;
                };
                let id = payload["id"].as_i64().expect("job id");
                let job_token = payload["token"].as_str().expect("job token").to_owned();
                seen.handed_out.lock().unwrap().push(id);
                if let Err(e) = run_job(&api, id, &job_token, &seen).await {
                    seen.errors.lock().unwrap().push(format!("job {id}: {e}"));
                }
            }
            StatusCode::NO_CONTENT => {
                if let Some(v) = response
                    .headers()
                    .get("x-gitlab-last-update")
                    .and_then(|v| v.to_str().ok())
                {
                    last_update = v.to_owned();
                }
            }
            other => {
                let text = response.text().await.unwrap_or_default();
                seen.errors
                    .lock()
                    .unwrap()
                    .push(format!("job request: {other}: {text}"));
                return;
            }
        }
    }
}

/// `Range: 0-<length>` → length.
fn range_length(response: &reqwest::Response) -> Option<usize> {
    let range = response.headers().get("range")?.to_str().ok()?;
    range.split_once('-')?.1.parse().ok()
}

async fn run_job(api: &Api, id: i64, token: &str, seen: &Seen) -> Result<(), String> {
    let mut log = Vec::new();
    let mut sent = 0usize;
    for chunk in 0..CHUNKS {
        log.extend_from_slice(format!("job {id}: step {chunk} of {CHUNKS}\n").as_bytes());
        // Send everything from the first byte the server lacks (§5: resync on 416).
        let mut attempts = 0;
        while sent < log.len() {
            attempts += 1;
            if attempts > 50 {
                return Err(format!("trace patch at {sent} never accepted"));
            }
            let body = log[sent..].to_vec();
            let range = format!("{sent}-{}", log.len() - 1);
            let response = api
                .send("trace patch", || {
                    api.http
                        .patch(api.api(&format!("jobs/{id}/trace")))
                        .header("JOB-TOKEN", token)
                        .header("Content-Range", &range)
                        .body(body.clone())
                })
                .await?;
            match response.status() {
                StatusCode::ACCEPTED => {
                    sent = range_length(&response).ok_or("a 202 without Range")?;
                    seen.mid_job.lock().unwrap().insert(id);
                }
                StatusCode::RANGE_NOT_SATISFIABLE => {
                    sent = range_length(&response).ok_or("a 416 without Range")?;
                }
                other => {
                    let text = response.text().await.unwrap_or_default();
                    return Err(format!("trace patch answered {other}: {text}"));
                }
            }
        }
        tokio::time::sleep(CHUNK_EVERY).await;
    }
    let body = json!({
        "token": token,
        "state": "success",
        "exit_code": 0,
        "checksum": format!("crc32:{:08x}", crc32(&log)),
        "output": { "checksum": format!("crc32:{:08x}", crc32(&log)), "bytesize": log.len() },
    });
    let deadline = Instant::now() + AWAY;
    loop {
        let response = api
            .send("final update", || {
                api.http.put(api.api(&format!("jobs/{id}"))).json(&body)
            })
            .await?;
        match response.status() {
            StatusCode::OK => break,
            StatusCode::ACCEPTED if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            StatusCode::FORBIDDEN => {
                // Applied by an earlier attempt whose answer the kill swallowed; the test
                // checks the job's status through the user API.
                seen.forbidden_final.lock().unwrap().insert(id);
                break;
            }
            other => {
                let text = response.text().await.unwrap_or_default();
                return Err(format!("final update answered {other}: {text}"));
            }
        }
    }
    seen.mid_job.lock().unwrap().remove(&id);
    seen.finished.lock().unwrap().insert(id, log);
    Ok(())
}

/// CRC-32 (IEEE), as gitlab-runner's trace checksum.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_mid_job_restarts_and_the_pipeline_completes() {
    let data = tempfile::tempdir().expect("dir");
    let data_dir = data.path().join("data");
    let port = free_port();
    let mut first = tokio::task::block_in_place(|| ServerProcess::start(&data_dir, port));
    let admin = tokio::task::block_in_place(|| first.admin_token());
    let api = Arc::new(Api {
        http: reqwest::Client::new(),
        url: format!("http://127.0.0.1:{port}"),
        admin,
    });

    let repo = repo(PIPELINE);
    let project = api
        .admin(
            reqwest::Method::POST,
            "projects",
            Some(json!({ "name": "crash", "repo_url": repo.path() })),
        )
        .await;
    let project = project["id"].as_i64().expect("project id");
    let seen = Arc::new(Seen::default());
    let mut runners = Vec::new();
    for i in 0..RUNNERS {
        let runner = api
            .admin(
                reqwest::Method::POST,
                "user/runners",
                Some(
                    json!({ "runner_type": "instance_type", "description": format!("runner {i}") }),
                ),
            )
            .await;
        let token = runner["token"].as_str().expect("runner token").to_owned();
        runners.push(tokio::spawn(run_runner(
            Arc::clone(&api),
            token,
            Arc::clone(&seen),
        )));
    }
    let pipeline = api
        .admin(
            reqwest::Method::POST,
            &format!("projects/{project}/pipeline?ref=main"),
            None,
        )
        .await;
    let pipeline = pipeline["id"].as_i64().expect("pipeline id");

    // Kill the server while every build job is running and has sent part of its log.
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.mid_job.lock().unwrap().len() < RUNNERS {
        assert!(
            Instant::now() < deadline && seen.errors.lock().unwrap().is_empty(),
            "the runners never got going: {:?}\nthe server said:\n{}",
            seen.errors.lock().unwrap(),
            first.said()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let interrupted: HashSet<i64> = seen.mid_job.lock().unwrap().clone();
    tokio::task::block_in_place(|| first.kill());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        seen.finished.lock().unwrap().is_empty(),
        "a job finished while the server was dead"
    );
    let second = tokio::task::block_in_place(|| ServerProcess::start(&data_dir, port));

    // The pipeline completes.
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        let p = api
            .admin(
                reqwest::Method::GET,
                &format!("projects/{project}/pipelines/{pipeline}"),
                None,
            )
            .await;
        let status = p["status"].as_str().unwrap_or_default().to_owned();
        if ["success", "failed", "canceled", "skipped"].contains(&status.as_str()) {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the pipeline is stuck in `{status}` after the restart; runner errors: {:?}",
            seen.errors.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    seen.stop.store(true, Ordering::SeqCst);
    for r in runners {
        r.abort();
    }
    assert_eq!(
        *seen.errors.lock().unwrap(),
        Vec::<String>::new(),
        "runner errors"
    );
    assert_eq!(status, "success");

    // No job was handed out twice, and every job was handed out.
    let handed_out = seen.handed_out.lock().unwrap().clone();
    let unique: HashSet<i64> = handed_out.iter().copied().collect();
    assert_eq!(
        unique.len(),
        handed_out.len(),
        "a job was handed out twice: {handed_out:?}"
    );
    assert_eq!(unique.len(), JOBS, "{handed_out:?}");

    // The interrupted jobs finished, and every log is whole, byte for byte.
    let finished = seen.finished.lock().unwrap().clone();
    for id in &interrupted {
        assert!(
            finished.contains_key(id),
            "job {id} (running when the server was killed) did not finish"
        );
    }
    let jobs = api
        .admin(
            reqwest::Method::GET,
            &format!("projects/{project}/pipelines/{pipeline}/jobs?include_retried=true"),
            None,
        )
        .await;
    let jobs = jobs.as_array().expect("jobs").clone();
    assert_eq!(
        jobs.len(),
        JOBS,
        "no job was retried or recreated: {jobs:?}"
    );
    for job in &jobs {
        let id = job["id"].as_i64().expect("id");
        assert_eq!(job["status"], "success", "{job}");
        let trace = api
            .http
            .get(api.api(&format!("projects/{project}/jobs/{id}/trace")))
            .header("PRIVATE-TOKEN", &api.admin)
            .send()
            .await
            .expect("trace")
            .bytes()
            .await
            .expect("trace body");
        assert_eq!(
            String::from_utf8_lossy(&trace),
            String::from_utf8_lossy(&finished[&id]),
            "the stored log of job {id} is what its runner sent"
        );
        assert_eq!(
            std::fs::read(data_dir.join(format!("traces/{id}.log"))).expect("the job's log file"),
            trace.as_ref(),
            "job {id}'s log is its file under the data directory"
        );
    }
    drop(second);
}
