//! The poll loop's requests: what they carry, `check_interval`, `X-GitLab-Last-Update`,
//! `concurrent` / `limit` / `request_concurrency`, and back-off on errors.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gantry_runner::poll::PollEvent;
use gitlab_runner_mock::{MockJob, MockJobState};
use mock_support::*;

fn job_requests(front: &Front) -> Vec<serde_json::Value> {
    front
        .exchanges()
        .into_iter()
        .filter(|e| e.method == "POST" && e.path == "/api/v4/jobs/request")
        .map(|e| e.json())
        .collect()
}

/// The waits the failed job requests announced, in order.
fn request_delays(events: &Events) -> Vec<Duration> {
    events
        .all()
        .iter()
        .filter_map(|e| match e {
            PollEvent::RequestFailed { retry_in, .. } => Some(*retry_in),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_runner_asks_once_per_check_interval_and_echoes_last_update_and_labels() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.set_last_update("queue-version-1");
    let (options, events) = options(dir.path(), None);
    // Labels: the global ones, the entry's own over them.
    let config = config(
        front.url(),
        dir.path(),
        "labels = { zone = \"eu-1\", team = \"ci\" }",
        "labels = { zone = \"us-2\" }",
    );
    let (handle, task) = start(config, options);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    handle.stop_taking_jobs();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();

    let requests = job_requests(&front);
    assert!(
        (3..=5).contains(&requests.len()),
        "{} requests in 3.5 s",
        requests.len()
    );
    assert_eq!(mock.n_requests().await, requests.len());
    let first = &requests[0];
    assert_eq!(first["token"], "fakerunnertoken");
    assert_eq!(first["system_id"], SYSTEM_ID);
    assert_eq!(first["info"]["executor"], "shell");
    assert_eq!(first["info"]["features"]["refspecs"], true);
    assert_eq!(first["info"]["features"]["image"], false);
    assert_eq!(
        first["info"]["labels"],
        serde_json::json!({"team": "ci", "zone": "us-2"})
    );
    assert!(first.get("last_update").is_none());
    assert!(
        requests[1..]
            .iter()
            .all(|r| r["last_update"] == "queue-version-1")
    );
    assert!(
        events
            .texts()
            .iter()
            .any(|t| t.contains("not taking new jobs"))
    );
}

/// Samples how many of `jobs` run at once until all are finished.
async fn max_running(jobs: &[MockJob], limit: Duration) -> usize {
    let mut max = 0;
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let running = jobs
            .iter()
            .filter(|j| j.state() == MockJobState::Running)
            .count();
        max = max.max(running);
        if jobs.iter().all(|j| j.finished()) {
            return max;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "jobs did not finish"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_bounds_running_jobs_and_slots_get_concurrent_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let jobs: Vec<_> = (0..4)
        .map(|n| {
            enqueue(
                &mock,
                &format!("job{n}"),
                &["echo \"slot $CI_CONCURRENT_ID\"", "sleep 2"],
                &[],
                &[],
            )
        })
        .collect();
    let config = config(
        front.url(),
        dir.path(),
        "concurrent = 2",
        "request_concurrency = 2",
    );
    let (options, _) = options(dir.path(), Some(4));
    let (_handle, task) = start(config, options);
    let max = max_running(&jobs, Duration::from_secs(60)).await;
    let summary = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(max, 2);
    assert_eq!(summary.jobs.len(), 4);
    let slots: Vec<bool> = ["slot 0", "slot 1"]
        .iter()
        .map(|slot| jobs.iter().any(|j| log_text(j).contains(slot)))
        .collect();
    assert_eq!(slots, [true, true]);
    assert!(jobs.iter().all(|j| j.state() == MockJobState::Success));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limit_bounds_an_entry_below_concurrent() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let jobs: Vec<_> = (0..3)
        .map(|n| enqueue(&mock, &format!("job{n}"), &["sleep 1"], &[], &[]))
        .collect();
    let config = config(
        front.url(),
        dir.path(),
        "concurrent = 4",
        "limit = 1\nrequest_concurrency = 4",
    );
    let (options, _) = options(dir.path(), Some(3));
    let (_handle, task) = start(config, options);
    let max = max_running(&jobs, Duration::from_secs(60)).await;
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(max, 1);
    // A request holds a slot: with limit 1 no request is made while a job runs.
    let exchanges = front.exchanges();
    let mut running = 0i32;
    for exchange in &exchanges {
        if exchange.method == "POST"
            && exchange.path == "/api/v4/jobs/request"
            && exchange.status == 201
        {
            running += 1;
            assert!(running <= 1);
        }
        if exchange.is_job_update()
            && exchange.status == 200
            && exchange.json()["state"] == "success"
        {
            running -= 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_requests_back_off_with_jitter_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.set_down(true).await;
    let job = enqueue(&mock, "after-outage", &["echo ran"], &[], &[]);
    let (options, events) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    tokio::time::sleep(Duration::from_secs(8)).await;
    front.set_down(false).await;
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(job.state(), MockJobState::Success);
    let delays = request_delays(&events);
    // 1 s, 2 s, 4 s (each ±25 %): three or four failures in 8 s, growing.
    assert!((2..=5).contains(&delays.len()), "{delays:?}");
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
}

/// gitlab-runner's health check: after `unhealthy_requests_limit` failed requests in a
/// row the entry waits `unhealthy_interval`, then counts again from zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unhealthy_runner_waits_the_unhealthy_interval_then_counts_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.set_down(true).await;
    let job = enqueue(&mock, "after-outage", &["echo ran"], &[], &[]);
    let (options, events) = options(dir.path(), Some(1));
    let entry = "unhealthy_requests_limit = 2\nunhealthy_interval = \"4s\"\n";
    let (_handle, task) = start(config(front.url(), dir.path(), "", entry), options);
    let unhealthy = || {
        events
            .all()
            .iter()
            .filter(|e| matches!(e, PollEvent::RunnerUnhealthy { .. }))
            .count()
    };
    wait_for(
        Duration::from_secs(10),
        "the runner to turn unhealthy",
        || unhealthy() == 1,
    )
    .await;
    // Down for the whole interval: a check after it fails, and the count starts again.
    tokio::time::sleep(Duration::from_secs(5)).await;
    front.set_down(false).await;
    tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.state(), MockJobState::Success);

    let failed = request_delays(&events);
    // 1 s (±25 %), then the limit: 4 s; after it, 1 s again.
    assert!(failed.len() >= 3, "{failed:?}");
    assert!(failed[0] < Duration::from_secs(2), "{failed:?}");
    assert_eq!(failed[1], Duration::from_secs(4), "{failed:?}");
    assert!(
        failed[2] < Duration::from_secs(2),
        "counted again: {failed:?}"
    );
    let text = events
        .texts()
        .into_iter()
        .find(|t| t.contains("is not healthy"))
        .unwrap();
    assert!(
        text.contains("will be disabled for 4s: 2 job requests failed in a row"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_token_is_reported_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let (_mock, front) = mock_and_front().await;
    let config = {
        let mut config = config(front.url(), dir.path(), "", "");
        config.runners[0].token = "glrt-not-the-right-one".to_owned();
        config
    };
    let (options, events) = options(dir.path(), None);
    let (handle, task) = start(config, options);
    wait_for(Duration::from_secs(10), "a failed request", || {
        events
            .all()
            .iter()
            .any(|e| matches!(e, PollEvent::RequestFailed { .. }))
    })
    .await;
    handle.interrupt();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    let text = events
        .texts()
        .into_iter()
        .find(|t| t.contains("job request failed"))
        .unwrap();
    assert!(text.contains("403"), "{text}");
    assert!(text.contains("gantry runner verify"), "{text}");
    assert!(
        !text.contains("glrt-not-the-right-one"),
        "the token must not be printed: {text}"
    );
}
