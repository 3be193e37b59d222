//! Time limits: the job's `runner_info.timeout`, `RUNNER_SCRIPT_TIMEOUT`, and
//! `after_script`'s own `RUNNER_AFTER_SCRIPT_TIMEOUT`. A timed-out job fails with
//! `job_execution_timeout` and skips `after_script` (gitlab-runner's default).

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::{Duration, Instant};

use gantry_runner::job::JobEnding;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_job_timeout_kills_the_script_and_skips_after_script() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(|payload| payload["runner_info"]["timeout"] = 3.into());
    let job = enqueue(
        &mock,
        "slow",
        &["echo started", "sleep 60"],
        &["touch ../after-script-ran"],
        &[],
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
            after: Duration::from_secs(3)
        }
    );
    assert_eq!(job.state(), MockJobState::Failed);
    let update = front.final_update(job.id());
    assert_eq!(update["failure_reason"], "job_execution_timeout");
    let log = log_text(&job);
    assert!(
        log.contains("ERROR: Job failed: execution took longer than 3s seconds"),
        "{log}"
    );
    assert!(!log.contains("Running after script"), "{log}");
    assert!(
        !dir.path()
            .join("builds/fakerunne/0/after-script-ran")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runner_script_timeout_shortens_the_script_stage() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "slow",
        &["echo started", "sleep 60"],
        &[],
        &[("RUNNER_SCRIPT_TIMEOUT", "2s", false)],
    );
    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(
        summary.jobs[0].ending,
        JobEnding::Timeout {
            after: Duration::from_secs(2)
        }
    );
    let log = log_text(&job);
    assert!(
        log.contains(
            "step_script could not run to completion because the timeout of 2s was exceeded"
        ),
        "{log}"
    );
    assert!(
        log.contains("execution took longer than 2s seconds"),
        "{log}"
    );
    assert_eq!(
        front.final_update(job.id())["failure_reason"],
        "job_execution_timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_script_has_its_own_timeout_and_cannot_fail_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "quick",
        &["echo fine"],
        &["echo in-after", "sleep 60"],
        &[("RUNNER_AFTER_SCRIPT_TIMEOUT", "1s", false)],
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
        started.elapsed() < Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );

    assert_eq!(summary.jobs[0].ending, JobEnding::Success);
    assert_eq!(job.state(), MockJobState::Success);
    let log = log_text(&job);
    assert!(log.contains("in-after"), "{log}");
    assert!(
        log.contains(
            "after_script could not run to completion because the timeout of 1s was exceeded"
        ),
        "{log}"
    );
    assert!(log.contains("Job succeeded"), "{log}");
}
