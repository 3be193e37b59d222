//! Resilience: the coordinator (the mock, behind the front) drops every connection for
//! 10 s in the middle of a job that keeps printing. The job keeps running, the runner
//! keeps its log and retries with back-off, and when the coordinator is back the whole
//! trace arrives byte for byte, then the final status.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::{Duration, Instant};

use gantry_runner::job::{Delivery, JobEnding, JobEvent};
use gantry_runner::poll::PollEvent;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_10_second_outage_mid_job_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "printing",
        &["for i in $(seq 1 200); do echo \"line $i at $(date +%s.%N)\"; sleep 0.1; done"],
        &["echo after_script done"],
        &[],
    );
    let (options, events) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);

    wait_for(
        Duration::from_secs(30),
        "line 20 at the coordinator",
        || log_text(&job).contains("line 20 "),
    )
    .await;
    front.set_down(true).await;
    let down_at = Instant::now();
    let down_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let stored_before = job.log().len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    // Nothing got through, and the job kept printing.
    assert_eq!(job.log().len(), stored_before);
    front.set_down(false).await;
    let summary = tokio::time::timeout(Duration::from_secs(90), task)
        .await
        .unwrap()
        .unwrap();
    assert!(down_at.elapsed() >= Duration::from_secs(10));

    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Success);
    assert_eq!(report.delivery, Delivery::Accepted);
    assert_eq!(job.state(), MockJobState::Success);
    // Byte for byte.
    assert_eq!(report.trace_bytes, job.log().len() as u64);
    assert_eq!(report.trace_checksum, checksum(&job.log()));
    let update = front.final_update(job.id());
    assert_eq!(update["output"]["checksum"], checksum(&job.log()));
    let log = log_text(&job);
    let mut last = 0;
    for i in 1..=200 {
        let at = log
            .find(&format!("line {i} at "))
            .unwrap_or_else(|| panic!("line {i} missing"));
        assert!(at > last, "line {i} out of order");
        last = at;
        assert_eq!(log.matches(&format!("line {i} at ")).count(), 1);
    }
    assert!(log.contains("after_script done") && log.contains("Job succeeded"));
    // The job printed during the outage: lines stamped inside it exist.
    let during = log
        .lines()
        .filter_map(|line| line.split(" at ").nth(1)?.trim().parse::<f64>().ok())
        .filter(|t| *t > down_unix + 1.0 && *t < down_unix + 9.0)
        .count();
    assert!(
        during >= 50,
        "only {during} lines printed during the outage"
    );
    let all = events.all();
    assert!(all.iter().any(|e| matches!(
        e,
        PollEvent::Job {
            event: JobEvent::CoordinatorUnreachable { .. },
            ..
        }
    )));
    // How long the runner saw the coordinator away: from its first failed call (the next
    // trace patch after the outage began, within about a second) to its first answered one
    // (the next retry after the outage ended). Loose bounds: on a loaded machine the first
    // failure can come seconds late.
    let back: Vec<Duration> = all
        .iter()
        .filter_map(|e| match e {
            PollEvent::Job {
                event: JobEvent::CoordinatorBack { after, .. },
                ..
            } => Some(*after),
            _ => None,
        })
        .collect();
    assert!(
        back.iter()
            .any(|after| *after >= Duration::from_secs(5) && *after <= down_at.elapsed()),
        "CoordinatorBack after {back:?}"
    );
    // Retries backed off: far fewer attempts than one per update interval would make.
    let refused = front
        .exchanges()
        .iter()
        .filter(|e| e.is_trace_patch())
        .count();
    assert!(refused < 60, "{refused} patches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_that_ends_during_an_outage_delivers_its_final_status_afterwards() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "ending",
        &["echo finishing", "sleep 1", "echo last words"],
        &[],
        &[],
    );
    let (options, _) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);

    // Down before the first patch: the whole job, and its end, happen in the outage.
    wait_for(Duration::from_secs(20), "the job to start", || {
        job.state() == MockJobState::Running
    })
    .await;
    front.set_down(true).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        job.state(),
        MockJobState::Running,
        "nothing can have arrived"
    );
    front.set_down(false).await;
    let summary = tokio::time::timeout(Duration::from_secs(90), task)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(summary.jobs[0].delivery, Delivery::Accepted);
    assert_eq!(job.state(), MockJobState::Success);
    let log = log_text(&job);
    assert!(
        log.contains("last words") && log.contains("Job succeeded"),
        "{log}"
    );
    assert_eq!(summary.jobs[0].trace_checksum, checksum(&job.log()));
}
