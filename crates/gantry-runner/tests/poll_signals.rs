//! Shutdown and reload, through the [`PollHandle`] the binary maps signals onto:
//! SIGTERM/SIGINT interrupt running jobs (`runner_interrupted`, `after_script` still
//! runs), a second one stops at once; SIGQUIT stops taking jobs and lets running ones
//! finish; SIGHUP reloads the configuration.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::{Duration, Instant};

use gantry_runner::job::{Delivery, JobEnding};
use gantry_runner::poll::PollEvent;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

const TICKING: &str = "for i in $(seq 1 600); do echo tick $i; sleep 0.1; done";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupt_stops_the_script_runs_after_script_and_reports_runner_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(current_failure_reasons);
    let job = enqueue(
        &mock,
        "long",
        &["echo started", TICKING],
        &["echo \"after_script sees $CI_JOB_STATUS\""],
        &[],
    );
    let waiting = enqueue(&mock, "never-started", &["echo no"], &[], &[]);
    let (options, events) = options(dir.path(), None);
    let (handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    wait_for(Duration::from_secs(20), "the job to start", || {
        log_text(&job).contains("started")
    })
    .await;
    let interrupted_at = Instant::now();
    handle.interrupt();
    let summary = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        interrupted_at.elapsed() < Duration::from_secs(10),
        "{:?}",
        interrupted_at.elapsed()
    );

    assert_eq!(summary.jobs.len(), 1);
    assert_eq!(summary.jobs[0].ending, JobEnding::Interrupted);
    assert_eq!(summary.jobs[0].delivery, Delivery::Accepted);
    let update = front.final_update(job.id());
    assert_eq!(update["state"], "failed");
    assert_eq!(update["failure_reason"], "runner_interrupted");
    let log = log_text(&job);
    assert!(log.contains("after_script sees canceled"), "{log}");
    assert!(
        log.contains("ERROR: Job failed: the runner was interrupted"),
        "{log}"
    );
    assert_eq!(waiting.state(), MockJobState::Pending);
    assert!(
        events
            .texts()
            .iter()
            .any(|t| t.contains("shutting down: interrupting 1 running job"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_interrupt_stops_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "long",
        &["echo started", TICKING],
        &["echo slow after_script", "sleep 60"],
        &[],
    );
    let (options, events) = options(dir.path(), None);
    let (handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    wait_for(Duration::from_secs(20), "the job to start", || {
        log_text(&job).contains("started")
    })
    .await;
    handle.interrupt();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let forced_at = Instant::now();
    handle.interrupt();
    let summary = tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        forced_at.elapsed() < Duration::from_secs(8),
        "{:?}",
        forced_at.elapsed()
    );
    assert!(
        events
            .all()
            .iter()
            .any(|e| matches!(e, PollEvent::Forced { killed: 1 }))
    );
    assert_eq!(
        summary
            .jobs
            .iter()
            .map(|r| r.ending.clone())
            .collect::<Vec<_>>(),
        [JobEnding::Aborted]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stop_taking_jobs_lets_the_running_job_finish() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let first = enqueue(
        &mock,
        "first",
        &["echo started", "sleep 2", "echo finished normally"],
        &[],
        &[],
    );
    let second = enqueue(&mock, "second", &["echo no"], &[], &[]);
    let (options, _) = options(dir.path(), None);
    let (handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    wait_for(Duration::from_secs(20), "the first job", || {
        first.state() == MockJobState::Running
    })
    .await;
    handle.stop_taking_jobs();
    let summary = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(summary.jobs.len(), 1);
    assert_eq!(first.state(), MockJobState::Success);
    assert!(log_text(&first).contains("finished normally"));
    assert_eq!(second.state(), MockJobState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_applies_to_new_requests_and_bad_configurations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "after-reload",
        &["echo \"ran with $FROM_CONFIG\""],
        &[],
        &[],
    );
    let mut wrong = config(front.url(), dir.path(), "", "");
    wrong.runners[0].token = "glrt-wrong".to_owned();
    let (options, events) = options(dir.path(), Some(1));
    let (handle, task) = start(wrong, options);
    wait_for(Duration::from_secs(10), "a refused request", || {
        events
            .all()
            .iter()
            .any(|e| matches!(e, PollEvent::RequestFailed { .. }))
    })
    .await;

    let mut custom = config(front.url(), dir.path(), "", "");
    custom.runners[0].executor = gantry_runner::config::ExecutorKind::Custom;
    handle.reload(custom);
    let right = config(
        front.url(),
        dir.path(),
        "concurrent = 2",
        "environment = [\"FROM_CONFIG=reloaded\"]",
    );
    handle.reload(right);
    let summary = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(summary.jobs.len(), 1);
    assert!(
        log_text(&job).contains("ran with reloaded"),
        "{}",
        log_text(&job)
    );
    let texts = events.texts();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("configuration not reloaded") && t.contains("custom")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.contains("configuration reloaded: 1 runner(s), concurrent = 2")),
        "{texts:?}"
    );
}
