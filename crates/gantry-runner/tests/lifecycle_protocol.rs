//! The parts of the trace and update protocol the mock does not produce by itself,
//! made by the front: the `202` accept protocol of final updates (§4.4), and the `416`
//! resync after a patch answer was lost (§5.2); a slow acceptance (§4.6), which the
//! runner does not wait for before it prepares the job.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gantry_runner::job::{Delivery, JobEnding, MAX_FINAL_RANGE_MISMATCHES};
use gitlab_runner_mock::MockJobState;
use mock_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_final_update_answered_202_is_sent_again_until_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.accept_final_updates_later(2);
    let job = enqueue(&mock, "quick", &["echo done"], &[], &[]);
    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(summary.jobs[0].delivery, Delivery::Accepted);
    assert_eq!(job.state(), MockJobState::Success);
    let finals: Vec<_> = front
        .exchanges()
        .into_iter()
        .filter(|e| e.is_job_update() && e.json()["state"] == "success")
        .collect();
    assert_eq!(
        finals.iter().map(|e| e.status).collect::<Vec<_>>(),
        [202, 202, 200]
    );
    // The same update each time.
    assert!(finals.windows(2).all(|w| w[0].json() == w[1].json()));
    assert_eq!(finals[2].json()["output"]["checksum"], checksum(&job.log()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_patch_answer_is_recovered_with_the_416_range() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    {
        let mock = mock.clone();
        front.add_range_to_416(move |id| mock.get_job(id).map(|job| job.log().len() as u64));
    }
    let job = enqueue(
        &mock,
        "printing",
        &["for i in $(seq 1 80); do echo \"line $i\"; sleep 0.1; done"],
        &[],
        &[],
    );
    let (options, _) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    wait_for(Duration::from_secs(20), "a first patch", || {
        job.log_patches() >= 1
    })
    .await;
    front.lose_patch_answers(1);
    let summary = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    let report = &summary.jobs[0];
    assert_eq!(report.delivery, Delivery::Accepted);
    let statuses: Vec<u16> = front
        .exchanges()
        .iter()
        .filter(|e| e.is_trace_patch())
        .map(|e| e.status)
        .collect();
    assert!(
        statuses.contains(&502) && statuses.contains(&416),
        "{statuses:?}"
    );
    // Byte for byte: the coordinator has the runner's log, once.
    assert_eq!(report.trace_checksum, checksum(&job.log()));
    assert_eq!(report.trace_bytes, job.log().len() as u64);
    let log = log_text(&job);
    for i in 1..=80 {
        assert_eq!(
            log.matches(&format!("line {i}\n")).count(),
            1,
            "line {i} in:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_416_without_range_cannot_make_the_final_flush_loop_forever() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    // The mock answers 416 without `Range` (real GitLab sends it); the runner then
    // starts over from byte 0, which this server keeps refusing.
    let job = enqueue(
        &mock,
        "printing",
        &["for i in $(seq 1 80); do echo \"line $i\"; sleep 0.1; done"],
        &[],
        &[],
    );
    let (options, _) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    wait_for(Duration::from_secs(20), "a first patch", || {
        job.log_patches() >= 1
    })
    .await;
    front.lose_patch_answers(1);
    let summary = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Success);
    assert_eq!(
        report.delivery,
        Delivery::Accepted,
        "the final update still goes out"
    );
    let update = front.final_update(job.id());
    // It tells the coordinator what the whole log is, so the loss is detectable.
    assert_eq!(update["output"]["bytesize"], report.trace_bytes);
    assert!(report.trace_bytes > job.log().len() as u64);
    let final_416s = front
        .exchanges()
        .iter()
        .filter(|e| e.is_trace_patch() && e.status == 416)
        .count();
    assert!(
        final_416s >= MAX_FINAL_RANGE_MISMATCHES as usize,
        "{final_416s}"
    );
}

/// A log growing faster than a patch per update interval is uploaded while the job runs:
/// each whole 1 MiB patch goes as soon as it is waiting, not at the next tick (here a
/// minute away), and the tick sends the rest as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn whole_patches_go_without_waiting_for_the_update_interval() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    mock.set_update_interval(60);
    let go = dir.path().join("go");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display());
    let job = enqueue(
        &mock,
        "printing",
        &[
            "head -c 3500000 /dev/zero | tr '\\0' x",
            wait.as_str(),
            "echo done",
        ],
        &[],
        &[],
    );
    let (options, _) = options(dir.path(), Some(1));
    let (_handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    wait_for(
        Duration::from_secs(30),
        "3 patches while the job runs",
        || job.log_patches() >= 3,
    )
    .await;
    // Whole patches only: the rest waits for the tick (or the end of the job).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(job.log().len(), 3 << 20);
    std::fs::write(&go, "").unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    let report = &summary.jobs[0];
    assert_eq!(report.delivery, Delivery::Accepted);
    assert_eq!(report.trace_checksum, checksum(&job.log()));
    assert!(log_text(&job).contains("\ndone\n"));
    let sizes: Vec<usize> = front
        .exchanges()
        .iter()
        .filter(|e| e.is_trace_patch())
        .map(|e| e.body.len())
        .collect();
    assert!(sizes[..3].iter().all(|&n| n == 1 << 20), "{sizes:?}");
}

/// Whether the job's `prepare_script` stage made its `<project dir>.tmp` directory
/// under `parent`.
fn prepared_in(parent: &std::path::Path) -> bool {
    std::fs::read_dir(parent).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
    })
}

/// Whether anything under `parent` holds a git checkout (`get_sources` ran).
fn fetched_in(parent: &std::path::Path) -> bool {
    std::fs::read_dir(parent).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|entry| entry.path().join(".git").exists())
    })
}

/// One job's runner, its acceptance held by the front ([`a_job_prepared_while_held`]).
struct Held {
    _mock: gitlab_runner_mock::GitlabRunnerMock,
    _handle: gantry_runner::poll::PollHandle,
    job: gitlab_runner_mock::MockJob,
    front: Front,
    task: tokio::task::JoinHandle<gantry_runner::poll::PollSummary>,
    /// Where the job's project directory is.
    parent: std::path::PathBuf,
}

/// A runner started on one job whose acceptance the front holds, over a real repository;
/// returns once the acceptance has arrived and the job is prepared (its directories are
/// made).
async fn a_job_prepared_while_held(
    dir: &std::path::Path,
    repo_dir: &std::path::Path,
    after_script: &[&str],
) -> Held {
    let (mock, front) = mock_and_front().await;
    let (repo, sha) = repository(repo_dir, &[("README", "hello\n")]);
    front.rewrite_payload(use_repository(&repo, &sha));
    front.hold_acceptance();
    let job = enqueue(&mock, "held", &["touch ../script-ran"], after_script, &[]);
    let (options, _events) = options(dir, Some(1));
    let (handle, task) = start(config(front.url(), dir, "", ""), options);
    let parent = dir.join("builds/fakerunne/0");
    // The coordinator has not answered yet, and the job is prepared all the same.
    wait_for(
        Duration::from_secs(20),
        "the job's directories while its acceptance is unanswered",
        || front.held_acceptances() == 1 && prepared_in(&parent),
    )
    .await;
    Held {
        _mock: mock,
        _handle: handle,
        job,
        front,
        task,
        parent,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_job_is_prepared_while_its_acceptance_is_answered() {
    let (dir, repo_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // `_mock` and `_handle` live to the end: the mock serves, the runner polls.
    let Held {
        _mock,
        _handle,
        job,
        front,
        task,
        parent,
    } = a_job_prepared_while_held(dir.path(), repo_dir.path(), &[]).await;
    // None of its own code runs before the answer: no sources, no script, and
    // nothing sent but the acceptance.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!fetched_in(&parent));
    assert!(!parent.join("script-ran").exists());
    assert!(
        front
            .exchanges()
            .iter()
            .all(|e| !e.path.starts_with(&format!("/api/v4/jobs/{}", job.id()))),
        "{:?}",
        front.exchanges()
    );
    front.release_acceptance();
    let summary = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    assert_eq!(summary.jobs[0].ending, JobEnding::Success);
    assert_eq!(summary.jobs[0].delivery, Delivery::Accepted);
    assert!(parent.join("script-ran").exists());
    assert_eq!(job.state(), MockJobState::Success);
    // The acceptance was the job's first request, the preparation's log is all there.
    let first = front
        .exchanges()
        .into_iter()
        .find(|e| e.path.starts_with(&format!("/api/v4/jobs/{}", job.id())))
        .unwrap();
    assert_eq!(
        (first.method.as_str(), first.json()["state"].as_str()),
        ("PUT", Some("running"))
    );
    let log = log_text(&job);
    assert!(log.contains("Preparing the \"shell\" executor"), "{log}");
    assert!(log.contains("Job succeeded"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_refused_at_acceptance_after_its_preparation_runs_none_of_its_code() {
    let (dir, repo_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // `_mock` and `_handle` live to the end: the mock serves, the runner polls.
    let Held {
        _mock,
        _handle,
        job,
        front,
        task,
        parent,
    } = a_job_prepared_while_held(dir.path(), repo_dir.path(), &["touch ../after-script-ran"])
        .await;
    // The coordinator took the job back meanwhile: the acceptance is answered `403`.
    job.cancel();
    front.release_acceptance();
    let summary = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Aborted);
    assert_eq!(report.delivery, Delivery::NotSent);
    assert!(!fetched_in(&parent));
    assert!(!parent.join("script-ran").exists());
    assert!(!parent.join("after-script-ran").exists());
    // One request about the job: the refused acceptance; no trace, no final update.
    let about_job: Vec<_> = front
        .exchanges()
        .into_iter()
        .filter(|e| e.path.starts_with(&format!("/api/v4/jobs/{}", job.id())))
        .collect();
    assert_eq!(about_job.len(), 1, "{about_job:?}");
    assert_eq!(about_job[0].status, 403);
    assert_eq!(job.state(), MockJobState::Cancelled);
}
