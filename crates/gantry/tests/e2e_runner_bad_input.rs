//! Bad input at the runner's edges gives clear errors and no panic:
//!
//! * an invalid `config.toml` → `gantry runner run|verify` exit 2 naming every bad key
//!   with its line and column;
//! * an unreachable server → `register` and `verify` exit 3 saying what failed and
//!   where; `run` keeps retrying with back-off, says so, and stops cleanly on SIGTERM;
//! * a job payload with unknown fields everywhere → the job runs normally;
//! * a job payload with a malformed variable → the job fails `runner_system_failure`
//!   with the JSON path in its log, and the runner keeps taking jobs.
//!
//! The payload cases run against our coordinator through a small proxy that edits its
//! job payloads on the way (our coordinator never sends such payloads itself).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Response, StatusCode};
use e2e_runner_support::*;
use gantry_runner::job::{Delivery, JobEnding};
use gantry_runner::poll::PollEvent;
use nix::sys::signal::Signal;
use serde_json::Value;

// ---- config.toml and unreachable servers (the binary) ---------------------------------

/// A loopback URL nobody listens on.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

fn run_gantry(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let child = gantry()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gantry runs");
    let mut child = Child(child);
    let mut stdout = String::new();
    if let Some(mut pipe) = child.0.stdout.take() {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut stdout);
    }
    let (code, stderr) = child.wait(limit);
    (code, stdout, stderr)
}

fn assert_no_panic(stderr: &str) {
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
}

#[test]
fn an_invalid_config_toml_names_every_bad_key_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let config = path.to_str().unwrap();

    // A value of the wrong type.
    std::fs::write(
        &path,
        "concurrent = \"many\"\n\n[[runners]]\nurl = \"http://x\"\ntoken = \"glrt-x\"\nexecutor = \"shell\"\n",
    )
    .unwrap();
    for command in ["run", "verify"] {
        let (code, _, stderr) = run_gantry(
            &["runner", command, "--config", config],
            Duration::from_secs(20),
        );
        assert_eq!(code, Some(2), "runner {command}: {stderr}");
        assert_no_panic(&stderr);
        assert!(
            stderr.contains("`concurrent` (line 1, column 14)"),
            "runner {command}: {stderr}"
        );
        assert!(
            stderr.contains("expected an integer"),
            "runner {command}: {stderr}"
        );
    }

    // Bad values: every one is named at once; unknown keys are warnings.
    std::fs::write(
        &path,
        r#"concurrent = 0
colour = "blue"

[[runners]]
name = "broken"
url = "gitlab.example.com"
token = "glrt-x"
executor = "kubernetes"
limit = -1
"#,
    )
    .unwrap();
    for command in ["run", "verify"] {
        let (code, _, stderr) = run_gantry(
            &["runner", command, "--config", config],
            Duration::from_secs(20),
        );
        assert_eq!(code, Some(2), "runner {command}: {stderr}");
        assert_no_panic(&stderr);
        for needle in [
            "`concurrent` (line 1, column 1)",
            "`runners[0].url` (line 6, column 1)",
            "`runners[0].executor` (line 8, column 1)",
            "`runners[0].limit` (line 9, column 1)",
            "fix the file and try again",
        ] {
            assert!(
                stderr.contains(needle),
                "runner {command}: no {needle:?} in:\n{stderr}"
            );
        }
    }

    std::fs::write(&path, "concurrent = \n[[runners]]\n").unwrap();
    let (code, _, stderr) = run_gantry(
        &["runner", "run", "--config", config],
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("(line 1, column 14)"), "{stderr}");
    assert_no_panic(&stderr);

    let missing = dir.path().join("nowhere/config.toml");
    let (code, _, stderr) = run_gantry(
        &["runner", "run", "--config", missing.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("nowhere/config.toml") && stderr.contains("gantry runner register"),
        "{stderr}"
    );
    assert_no_panic(&stderr);
}

#[test]
fn an_unreachable_server_is_a_clear_error_for_register_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let url = closed_url();
    let config = dir.path().join("config.toml");
    let config = config.to_str().unwrap();

    let (code, _, stderr) = run_gantry(
        &[
            "runner",
            "register",
            "--url",
            &url,
            "--token",
            "glrt-abcdefghijklmnopqrst",
            "--config",
            config,
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("error: failed to"), "{stderr}");
    assert!(
        stderr.contains("Connection refused"),
        "the error says why: {stderr}"
    );
    assert!(
        stderr.contains(url.trim_start_matches("http://")),
        "the error names the server: {stderr}"
    );
    assert!(
        !stderr.contains("glrt-abcdefghijklmnopqrst"),
        "the token must not be printed: {stderr}"
    );
    assert!(
        !std::path::Path::new(config).exists(),
        "nothing was registered"
    );
    assert_no_panic(&stderr);

    std::fs::write(
        config,
        config_text(&url, "glrt-abcdefghijklmnopqrst", dir.path(), "", ""),
    )
    .unwrap();
    let (code, _, stderr) = run_gantry(
        &["runner", "verify", "--config", config],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("e2e-runner") && stderr.contains("failed to"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("glrt-abcdefghijklmnopqrst"),
        "the token must not be printed: {stderr}"
    );
    assert_no_panic(&stderr);
}

#[test]
fn run_against_an_unreachable_server_retries_with_back_off_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let url = closed_url();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        config_text(&url, "glrt-abcdefghijklmnopqrst", dir.path(), "", ""),
    )
    .unwrap();
    let child = gantry()
        .args(["runner", "run", "--config", config.to_str().unwrap()])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("gantry runs");
    let child = Child(child);
    std::thread::sleep(Duration::from_secs(5));
    child.signal(Signal::SIGTERM);
    let (code, stderr) = child.wait(Duration::from_secs(20));
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_panic(&stderr);
    let failures: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("job request failed"))
        .collect();
    // check_interval 1 s doubling: 1, 2 (…) — a few attempts in 5 s, not dozens.
    assert!((1..=5).contains(&failures.len()), "{stderr}");
    assert!(
        failures[0].contains(url.trim_start_matches("http://")),
        "the error names the server: {stderr}"
    );
    assert!(
        failures[0].contains("Connection refused"),
        "the error says why: {stderr}"
    );
    assert!(failures[0].contains("asking again in"), "{stderr}");
    assert!(
        !stderr.contains("glrt-abcdefghijklmnopqrst"),
        "the token must not be printed: {stderr}"
    );
}

// ---- job payloads (our coordinator, through an editing proxy) -------------------------

const NORMAL: u8 = 0;
const UNKNOWN_FIELDS: u8 = 1;
const MALFORMED_VARIABLE: u8 = 2;

struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    mode: AtomicU8,
    edited: Mutex<Vec<Value>>,
}

/// Adds unknown fields to every object, and unknown values of unknown types.
fn add_unknown_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for child in map.values_mut() {
                add_unknown_fields(child);
            }
            map.insert(
                "a_field_from_the_future".into(),
                serde_json::json!({"nested": [1, "two", null]}),
            );
            map.insert("another_one".into(), Value::Bool(true));
        }
        Value::Array(items) => items.iter_mut().for_each(add_unknown_fields),
        _ => {}
    }
}

async fn forward(
    State(state): State<Arc<ProxyState>>,
    request: axum::extract::Request,
) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20).await.unwrap();
    let target = format!(
        "{}{}",
        state.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut upstream = state.http.request(parts.method.clone(), target).body(body);
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding"
        ) {
            upstream = upstream.header(name, value);
        }
    }
    let answer = match upstream.send().await {
        Ok(answer) => answer,
        Err(_) => {
            return Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Body::empty())
                .unwrap();
        }
    };
    let status = answer.status();
    let mut headers = answer.headers().clone();
    let mut bytes = answer.bytes().await.unwrap_or_default().to_vec();
    for name in ["transfer-encoding", "connection", "content-length"] {
        headers.remove(name);
    }
    if parts.uri.path() == "/api/v4/jobs/request" && status == StatusCode::CREATED {
        let mut payload: Value = serde_json::from_slice(&bytes).unwrap();
        match state.mode.load(Ordering::SeqCst) {
            UNKNOWN_FIELDS => add_unknown_fields(&mut payload),
            MALFORMED_VARIABLE => {
                let variables = payload["variables"].as_array_mut().unwrap();
                let at = variables
                    .iter()
                    .position(|v| v["key"] == "CI_JOB_NAME")
                    .unwrap();
                variables[at]["masked"] = "sometimes".into();
            }
            _ => {}
        }
        state.edited.lock().unwrap().push(payload.clone());
        bytes = serde_json::to_vec(&payload).unwrap();
    }
    let mut response = Response::builder()
        .status(status)
        .body(Body::from(bytes))
        .unwrap();
    *response.headers_mut() = headers;
    response
}

/// The proxy's URL.
async fn start_proxy(state: Arc<ProxyState>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(forward).with_state(state);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

const ONE_JOB: &str = r#"
job:
  variables:
    GIT_STRATEGY: none
  script:
    - echo "the job ran as $CI_JOB_NAME"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payloads_with_unknown_fields_run_and_a_malformed_variable_fails_the_job_clearly() {
    let setup = Setup::new(ONE_JOB, &[]).await;
    let server = &setup.server;
    let state = Arc::new(ProxyState {
        upstream: server.url.clone(),
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
        mode: AtomicU8::new(UNKNOWN_FIELDS),
        edited: Mutex::new(Vec::new()),
    });
    let proxy = start_proxy(Arc::clone(&state)).await;
    let runner = Runner::start(&proxy, &setup.runner_token, "", "");

    // Unknown fields in every object: ignored.
    let first = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, first, Duration::from_secs(60))
        .await;
    assert_eq!(done["status"], "success", "{done}");
    let job = server.job_named(setup.project, first, "job").await;
    let log = server
        .trace(setup.project, job["id"].as_i64().unwrap())
        .await;
    assert!(log.contains("the job ran as job"), "{log}");
    assert_eq!(
        state.edited.lock().unwrap()[0]["job_info"]["a_field_from_the_future"]["nested"][1],
        "two"
    );

    // A malformed variable: the job fails with the JSON path, nothing panics.
    state.mode.store(MALFORMED_VARIABLE, Ordering::SeqCst);
    let second = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, second, Duration::from_secs(60))
        .await;
    assert_eq!(done["status"], "failed", "{done}");
    let job = server.job_named(setup.project, second, "job").await;
    assert_eq!(job["failure_reason"], "runner_system_failure", "{job}");
    let log = server
        .trace(setup.project, job["id"].as_i64().unwrap())
        .await;
    let index = state.edited.lock().unwrap()[1]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .position(|v| v["key"] == "CI_JOB_NAME")
        .unwrap();
    assert!(
        log.contains(&format!(
            "failed to decode job payload: at `variables[{index}].masked`"
        )),
        "{log}"
    );
    assert!(
        log.contains("The coordinator sent a job this runner cannot read; it was not run."),
        "{log}"
    );
    assert!(!log.contains("the job ran as"), "{log}");

    // The runner is still there and takes the next job.
    state.mode.store(NORMAL, Ordering::SeqCst);
    let third = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, third, Duration::from_secs(60))
        .await;
    assert_eq!(done["status"], "success", "{done}");

    let events = runner.events.clone();
    let summary = runner.stop(Duration::from_secs(30)).await;
    let endings: Vec<&JobEnding> = summary.jobs.iter().map(|r| &r.ending).collect();
    assert!(
        matches!(
            endings[..],
            [
                JobEnding::Success,
                JobEnding::SystemFailure { .. },
                JobEnding::Success
            ]
        ),
        "{endings:?}"
    );
    assert!(
        summary
            .jobs
            .iter()
            .all(|r| r.delivery == Delivery::Accepted)
    );
    assert!(
        events
            .all()
            .iter()
            .any(|e| matches!(e, PollEvent::UndecodableJob { .. }))
    );
}
