//! A `run:` job (GitLab Functions) through the runner, its payload as GitLab sends it
//! (`run` a JSON string, no script step), served by the third-party runner mock.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::{Duration, Instant};

use gantry_runner::job::JobEnding;
use mock_support::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_past_runner_script_timeout_is_killed_and_later_steps_do_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(|payload| {
        payload["steps"] = json!([]);
        payload["run"] = json!(
            json!([
                {"name": "slow", "script": "echo started; sleep 60"},
                {"name": "later", "script": "echo never reached"},
            ])
            .to_string()
        );
    });
    let job = enqueue(
        &mock,
        "steps",
        &[],
        &[],
        &[("RUNNER_SCRIPT_TIMEOUT", "2s", false)],
    );
    let started = Instant::now();
    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        summary.jobs[0].ending,
        JobEnding::Timeout {
            after: Duration::from_secs(2)
        }
    );
    let log = log_text(&job);
    assert!(log.contains("Running step name=slow"), "{log}");
    assert!(log.contains("started"), "{log}");
    assert!(!log.contains("never reached"), "{log}");
    assert_eq!(
        front.final_update(job.id())["failure_reason"],
        "job_execution_timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_list_the_runner_cannot_read_fails_the_job_naming_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(|payload| {
        payload["steps"] = json!([]);
        payload["run"] = json!(
            json!([{"name": "ok", "script": "echo fine"}, {"name": "1bad", "func": "./x"}])
                .to_string()
        );
    });
    let job = enqueue(&mock, "steps", &[], &[], &[]);
    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        summary.jobs[0].ending,
        JobEnding::ScriptFailure { exit_code: 1 }
    );
    let log = log_text(&job);
    assert!(
        log.contains("run:1:name: step name \"1bad\" must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
        "{log}"
    );
    assert!(
        !log.contains("fine"),
        "nothing runs from a list with a mistake: {log}"
    );
}
