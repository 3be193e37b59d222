//! Resilience against our coordinator: it is stopped for 10 s (HTTP server down,
//! database closed; the data dir stays) in the middle of a job that keeps printing,
//! then started again on the same port. The job keeps running, the runner keeps its
//! log and retries with back-off, and when the coordinator is back the whole trace
//! arrives byte for byte, then the final status.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e_runner_support::*;
use gantry_runner::job::{Delivery, JobEnding, JobEvent};
use gantry_runner::poll::PollEvent;

const PRINTING: &str = r#"
printing:
  variables:
    GIT_STRATEGY: none
  script:
    - for i in $(seq 1 250); do echo "line $i at $(date +%s.%N)"; sleep 0.1; done
  after_script:
    - echo "after_script done"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_10_second_coordinator_outage_mid_job_loses_nothing() {
    let mut setup = Setup::new(PRINTING, &[]).await;
    let pipeline = setup.server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "");
    let project = setup.project;
    let job = setup
        .server
        .wait_job_status(
            project,
            pipeline,
            "printing",
            "running",
            Duration::from_secs(30),
        )
        .await;
    let id = job["id"].as_i64().unwrap();
    setup
        .server
        .wait_trace(project, id, "line 20 ", Duration::from_secs(30))
        .await;

    setup.server.stop().await;
    let down_at = Instant::now();
    let down_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        reqwest::get(format!("{}/api/v4/version", setup.server.url))
            .await
            .is_err(),
        "the coordinator must refuse connections while it is down"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    setup.server.restart().await;
    let up_at = Instant::now();

    let done = setup
        .server
        .wait_pipeline(project, pipeline, Duration::from_secs(120))
        .await;
    let events = runner.events.clone();
    let summary = runner.stop(Duration::from_secs(30)).await;
    assert!(up_at.duration_since(down_at) >= Duration::from_secs(10));

    // The coordinator has the final status…
    assert_eq!(done["status"], "success", "{done}");
    let job = setup.server.job(project, id).await;
    assert_eq!(job["status"], "success", "{job}");
    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Success);
    assert_eq!(report.delivery, Delivery::Accepted);

    // …and the whole log, byte for byte.
    let stored = setup.server.trace_bytes(project, id).await;
    assert_eq!(report.trace_bytes, stored.len() as u64);
    assert_eq!(report.trace_checksum, checksum(&stored));
    let log = String::from_utf8(stored).unwrap();
    let mut last = 0;
    for i in 1..=250 {
        let needle = format!("\nline {i} at ");
        let at = log
            .find(&needle)
            .unwrap_or_else(|| panic!("line {i} is missing:\n{log}"));
        assert!(at > last, "line {i} is out of order");
        assert_eq!(log.matches(&needle).count(), 1, "line {i} is duplicated");
        last = at;
    }
    assert!(
        log.contains("after_script done") && log.contains("Job succeeded"),
        "{log}"
    );
    // The job printed while the coordinator was away.
    let during = log
        .lines()
        .filter_map(|line| line.split(" at ").nth(1)?.trim().parse::<f64>().ok())
        .filter(|t| *t > down_unix + 1.0 && *t < down_unix + 9.0)
        .count();
    assert!(
        during >= 40,
        "only {during} lines were printed during the outage"
    );

    // The runner noticed, backed off, and saw the coordinator come back.
    let events = job_events(&events.all());
    assert!(
        events
            .iter()
            .any(|e| matches!(e, JobEvent::CoordinatorUnreachable { .. })),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(e, JobEvent::CoordinatorBack { after, .. } if *after >= Duration::from_secs(6))),
        "{events:?}"
    );
    let retries = events
        .iter()
        .filter(|e| matches!(e, JobEvent::CoordinatorUnreachable { .. }))
        .count();
    assert!(
        retries <= 8,
        "{retries} attempts in a 10 s outage: no back-off?"
    );
}

fn job_events(events: &[PollEvent]) -> Vec<JobEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            PollEvent::Job { event, .. } => Some(event.clone()),
            _ => None,
        })
        .collect()
}
