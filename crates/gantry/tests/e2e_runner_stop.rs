//! Jobs that do not end by themselves, against our coordinator: a cancel through the
//! user API while the job prints (the runner hears `Job-Status: canceling`, kills the
//! script's process group, runs `after_script` with `CI_JOB_STATUS=canceled`, and the
//! job ends `canceled`), and a job that runs past its `timeout:` (killed, reported
//! `job_execution_timeout`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::time::{Duration, Instant};

use e2e_runner_support::*;
use gantry_runner::job::{Delivery, JobEnding};

/// The pid the script printed as `background pid <pid>`.
fn background_pid(log: &str) -> u32 {
    let line = log
        .lines()
        .find(|l| l.starts_with("background pid "))
        .unwrap_or_else(|| panic!("no background pid in:\n{log}"));
    line["background pid ".len()..].trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_canceled_through_the_api_runs_after_script_and_ends_canceled() {
    let ci = r#"
job:
  variables:
    GIT_STRATEGY: none
  script:
    - sleep 600 & echo "background pid $!"
    - for i in $(seq 1 600); do echo "tick $i"; sleep 0.2; done
    - echo "the script completed"
  after_script:
    - echo "after_script saw CI_JOB_STATUS=$CI_JOB_STATUS"
"#;
    let setup = Setup::new(ci, &[]).await;
    let server = &setup.server;
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "");
    let job = server
        .wait_job_status(
            setup.project,
            pipeline,
            "job",
            "running",
            Duration::from_secs(30),
        )
        .await;
    let id = job["id"].as_i64().unwrap();
    let log = server
        .wait_trace(setup.project, id, "tick 5\n", Duration::from_secs(30))
        .await;
    let pid = background_pid(&log);
    assert!(alive(pid), "the job's background process runs");

    let canceled_at = Instant::now();
    let answer = server.cancel_job(setup.project, id).await;
    assert_eq!(
        answer["status"], "canceling",
        "our runner cancels gracefully: {answer}"
    );
    let job = server
        .wait_job_status(
            setup.project,
            pipeline,
            "job",
            "canceled",
            Duration::from_secs(60),
        )
        .await;
    let took = canceled_at.elapsed();
    let summary = runner.stop(Duration::from_secs(30)).await;

    assert!(took < Duration::from_secs(20), "canceling took {took:?}");
    assert_eq!(
        server.pipeline(setup.project, pipeline).await["status"],
        "canceled"
    );
    assert_eq!(job["failure_reason"], serde_json::Value::Null, "{job}");
    let log = server.trace(setup.project, id).await;
    assert!(log.contains("Job-Status: canceling"), "{log}");
    assert!(
        log.contains("after_script saw CI_JOB_STATUS=canceled"),
        "{log}"
    );
    assert!(
        !log.contains("tick 600") && !log.contains("the script completed"),
        "{log}"
    );
    assert!(sections(&log).iter().any(|s| s == "after_script"), "{log}");
    assert!(!alive(pid), "the script's process group was killed");

    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Canceled);
    assert_eq!(report.delivery, Delivery::Accepted);
    let stored = server.trace_bytes(setup.project, id).await;
    assert_eq!(
        (report.trace_bytes, report.trace_checksum.clone()),
        (stored.len() as u64, checksum(&stored))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_past_its_timeout_is_killed_and_fails_with_job_execution_timeout() {
    let ci = r#"
job:
  timeout: 4s
  variables:
    GIT_STRATEGY: none
  script:
    - sleep 600 & echo "background pid $!"
    - echo "sleeping past the timeout"
    - sleep 120
    - echo "woke up"
  after_script:
    - echo "after_script ran"
"#;
    let setup = Setup::new(ci, &[]).await;
    let server = &setup.server;
    let pipeline = server.create_pipeline(setup.project).await;
    let started = Instant::now();
    let runner = setup.runner("", "");
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    let took = started.elapsed();
    let summary = runner.stop(Duration::from_secs(30)).await;

    assert_eq!(done["status"], "failed", "{done}");
    assert!(took < Duration::from_secs(30), "the job took {took:?}");
    let job = server.job_named(setup.project, pipeline, "job").await;
    assert_eq!(job["failure_reason"], "job_execution_timeout", "{job}");
    assert_eq!(job["timeout"], 4, "{job}");
    let log = server
        .trace(setup.project, job["id"].as_i64().unwrap())
        .await;
    assert!(log.contains("sleeping past the timeout"), "{log}");
    assert!(!log.contains("woke up"), "{log}");
    assert!(
        log.contains("ERROR: Job failed: execution took longer than 4s"),
        "{log}"
    );
    // gitlab-runner's default: no after_script after a timeout.
    assert!(!log.contains("after_script ran"), "{log}");
    assert!(
        !alive(background_pid(&log)),
        "the script's process group was killed"
    );
    assert!(
        matches!(summary.jobs[0].ending, JobEnding::Timeout { .. }),
        "{:?}",
        summary.jobs[0].ending
    );
    assert_eq!(summary.jobs[0].delivery, Delivery::Accepted);
}
