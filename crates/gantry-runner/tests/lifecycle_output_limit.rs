//! `output_limit`: past it the log says so where it happens and again at the end, the
//! job keeps running and keeps its result, the report is marked, and the final update
//! describes exactly the bytes the coordinator has.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gantry_runner::job::JobEnding;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn output_past_the_limit_is_reported_never_silently_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "chatty",
        &[
            "for i in $(seq 1 3000); do echo \"line $i of a job that prints a lot\"; done",
            "echo tail-marker",
            "touch ../script-completed",
        ],
        &[],
        &[],
    );
    let config = config(front.url(), dir.path(), "", "output_limit = 1");
    let (summary, _) = run_jobs(config, dir.path(), 1, Duration::from_secs(60)).await;

    assert_eq!(job.state(), MockJobState::Success);
    assert!(
        dir.path()
            .join("builds/fakerunne/0/script-completed")
            .exists(),
        "the job must keep running"
    );
    let log = log_text(&job);
    assert!(
        log.contains("Job's log exceeded limit of 1024 bytes."),
        "{log}"
    );
    assert!(
        log.contains("Job execution will continue but no more output will be collected"),
        "{log}"
    );
    assert!(
        log.contains("The job log exceeded output_limit (1024 bytes):"),
        "{log}"
    );
    assert!(log.contains("Job succeeded"), "{log}");
    assert!(!log.contains("tail-marker"), "{log}");

    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Success);
    assert!(report.output_limit_exceeded);
    assert!(report.dropped_bytes > 90_000, "{}", report.dropped_bytes);
    assert!(
        log.contains(&format!(
            "{} bytes of output were not collected",
            report.dropped_bytes
        )),
        "{log}"
    );
    let update = front.final_update(job.id());
    assert_eq!(update["output"]["bytesize"], job.log().len());
    assert_eq!(update["output"]["checksum"], checksum(&job.log()));
    assert_eq!(report.trace_bytes, job.log().len() as u64);
}
