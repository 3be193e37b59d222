//! Cancellation (§4.5): hard (`403` + `Job-Status: canceled`, the mock's `cancel()`)
//! kills everything at once and sends nothing more; graceful (`Job-Status: canceling`)
//! stops the script, runs `after_script` with `CI_JOB_STATUS=canceled` and reports the
//! job as failed. The scripts keep printing: a runner learns about cancellation from
//! the answers to its trace patches (or, for a silent job, from the keep-alive update
//! every 30 s, as gitlab-runner).

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::{Duration, Instant};

use gantry_runner::job::{Delivery, JobEnding};
use gitlab_runner_mock::MockJobState;
use mock_support::*;

/// Whether `pid` is a live (not zombie) `sleep` process.
fn alive_sleep(pid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state …`
    let Some((comm, rest)) = stat
        .split_once(") ")
        .and_then(|(head, rest)| Some((head.split_once(" (")?.1, rest)))
    else {
        return false;
    };
    comm == "sleep" && !rest.starts_with('Z') && !rest.starts_with('X')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_canceled_on_the_coordinator_is_killed_at_once_without_after_script() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "long",
        &[
            "sleep 60 & echo $! > ../sleep.pid",
            "echo started",
            "for i in $(seq 1 300); do echo tick $i; sleep 0.1; done",
            "touch ../script-finished",
        ],
        &["touch ../after-script-ran"],
        &[],
    );
    let (options, _events) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);

    wait_for(Duration::from_secs(20), "the script to start", || {
        log_text(&job).contains("started")
    })
    .await;
    let canceled_at = Instant::now();
    job.cancel();
    let summary = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        canceled_at.elapsed() < Duration::from_secs(10),
        "took {:?}",
        canceled_at.elapsed()
    );

    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Aborted);
    assert_eq!(report.delivery, Delivery::NotSent);
    let project_parent = dir.path().join("builds/fakerunne/0");
    assert!(!project_parent.join("script-finished").exists());
    assert!(
        !project_parent.join("after-script-ran").exists(),
        "after_script must not run after a hard cancel"
    );
    // The whole process group is gone, background `sleep` included (a zombie waiting to
    // be reaped by init counts as gone).
    let pid = std::fs::read_to_string(project_parent.join("sleep.pid")).unwrap();
    let pid = pid.trim().to_owned();
    wait_for(
        Duration::from_secs(5),
        "the background sleep to die",
        || !alive_sleep(&pid),
    )
    .await;
    // No final update after the 403.
    assert!(
        front
            .updates(job.id())
            .iter()
            .all(|u| u["state"] == "running")
    );
    assert_eq!(job.state(), MockJobState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_cancel_runs_after_script_and_reports_the_job_as_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "long",
        &[
            "echo started",
            "for i in $(seq 1 300); do echo tick $i; sleep 0.1; done",
            "echo not-reached",
        ],
        &["echo \"after_script sees $CI_JOB_STATUS\""],
        &[],
    );
    let (options, _events) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);

    wait_for(Duration::from_secs(20), "the script to start", || {
        log_text(&job).contains("started")
    })
    .await;
    let canceled_at = Instant::now();
    front.set_canceling(true);
    let summary = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        canceled_at.elapsed() < Duration::from_secs(10),
        "took {:?}",
        canceled_at.elapsed()
    );

    let log = log_text(&job);
    assert!(log.contains("Job-Status: canceling"), "{log}");
    assert!(log.contains("after_script sees canceled"), "{log}");
    assert!(!log.contains("\nnot-reached"), "{log}");
    assert!(log.contains("ERROR: Job failed: canceled"), "{log}");
    assert_eq!(summary.jobs[0].ending, JobEnding::Canceled);
    assert_eq!(summary.jobs[0].delivery, Delivery::Accepted);
    let update = front.final_update(job.id());
    assert_eq!(update["state"], "failed");
    // gitlab-runner's internal `job_canceled` is sent as `unknown_failure`.
    assert_eq!(update["failure_reason"], "unknown_failure");
    assert_eq!(update["output"]["checksum"], checksum(&job.log()));
    assert_eq!(job.state(), MockJobState::Failed);
}
