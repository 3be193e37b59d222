//! A runner process that goes away while it asks for jobs — killed (`SIGKILL`: a crash,
//! the OOM killer) or stopped (`SIGTERM`, what `systemctl restart` sends), while its job
//! request is held by the coordinator (long polling) or between two requests (idle) —
//! takes no job with it: the job created right after stays `pending` and the next runner
//! process runs it within seconds, instead of it sitting `running` on a request nobody
//! reads until the stuck-job timer ends it an hour later.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::time::{Duration, Instant};

use e2e_runner_support::*;
use nix::sys::signal::Signal;
use reqwest::Method;

const PIPELINE: &str = "build:\n  script:\n    - echo built by the next runner\n";

/// Waits until a runner of the coordinator has asked for a job.
async fn wait_for_a_request(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, runners) = server.call(Method::GET, "runners/all", None).await;
        let asked = runners
            .as_array()
            .is_some_and(|all| all.iter().any(|r| !r["contacted_at"].is_null()));
        if asked {
            return;
        }
        assert!(Instant::now() < deadline, "no job request: {runners}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn a_runner_that_goes_away_takes_no_job(signal: Signal, long_poll: Duration) {
    let options = ServerOptions {
        long_poll,
        ..ServerOptions::default()
    };
    let setup = Setup::with(options, PIPELINE, &[]).await;
    let server = &setup.server;

    let gone = tempfile::tempdir().unwrap();
    let config = gone.path().join("config.toml");
    let text = config_text(&server.url, &setup.runner_token, gone.path(), "", "");
    std::fs::write(&config, text).unwrap();
    let runner = start_run(&config, gone.path());
    wait_for_a_request(server).await;
    // Held by the coordinator (long polling), or waiting `check_interval` (idle).
    tokio::time::sleep(Duration::from_millis(500)).await;
    runner.signal(signal);
    let (code, stderr) = runner.wait(Duration::from_secs(10));
    if signal == Signal::SIGTERM {
        assert_eq!(code, Some(0), "a clean exit:\n{stderr}");
    }

    let created = Instant::now();
    let pipeline = server.create_pipeline(setup.project).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let job = server.job_named(setup.project, pipeline, "build").await;
    assert_eq!(
        job["status"], "pending",
        "no request of the runner that went away holds the job: {job}"
    );

    let next = tempfile::tempdir().unwrap();
    let config = next.path().join("config.toml");
    let text = config_text(&server.url, &setup.runner_token, next.path(), "", "");
    std::fs::write(&config, text).unwrap();
    let runner = start_run(&config, next.path());
    let job = server
        .wait_job_status(
            setup.project,
            pipeline,
            "build",
            "success",
            Duration::from_secs(30),
        )
        .await;
    let ran_after = created.elapsed();
    assert!(
        ran_after < Duration::from_secs(20),
        "ran {ran_after:?} after it was created"
    );
    let id = job["id"].as_i64().unwrap();
    let log = server.trace(setup.project, id).await;
    assert!(log.contains("built by the next runner"), "{log}");
    runner.quit();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_while_long_polling_takes_no_job() {
    a_runner_that_goes_away_takes_no_job(Signal::SIGKILL, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_stopped_with_sigterm_while_long_polling_takes_no_job() {
    a_runner_that_goes_away_takes_no_job(Signal::SIGTERM, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_while_idle_takes_no_job() {
    a_runner_that_goes_away_takes_no_job(Signal::SIGKILL, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_stopped_with_sigterm_while_idle_takes_no_job() {
    a_runner_that_goes_away_takes_no_job(Signal::SIGTERM, Duration::ZERO).await;
}
