//! The basic job loop against `gitlab-runner-mock` (a third party's GitLab job API
//! mock): job request, acceptance, trace patches, status updates, artifact upload, and a
//! dependent job downloading those artifacts — with the real shell executor and a real
//! git repository (served over `file://`; the front rewrites the mock's fixed
//! `https://bla/dummy.git`).

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gantry_runner::job::{Delivery, JobEnding};
use gitlab_runner_mock::MockJobState;
use mock_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_run_end_to_end_with_sources_artifacts_and_dependencies() {
    let dir = tempfile::tempdir().unwrap();
    let (repo, sha) = repository(
        &dir.path().join("origin"),
        &[("hello.txt", "hello from git\n")],
    );
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(use_repository(&repo, &sha));

    let build = enqueue_with(
        &mock,
        "build",
        &[
            "cat hello.txt",
            "git rev-parse HEAD",
            "mkdir -p out && echo \"artifact of $CI_JOB_ID\" > out/result.txt",
            "echo \"dir=$CI_PROJECT_DIR status=$CI_JOB_STATUS concurrent=$CI_CONCURRENT_ID\"",
            "echo \"expanded=$EXPANDED\"",
        ],
        &["echo \"after_script sees $CI_JOB_STATUS\""],
        &[
            ("BASE", "base-value", false),
            ("EXPANDED", "${BASE}/more", false),
        ],
        |builder| builder.add_artifact_paths(vec!["out/".to_owned()]),
    );
    let test = enqueue_with(
        &mock,
        "test",
        &["cat out/result.txt"],
        &[],
        &[],
        |builder| {
            builder.dependency(build.clone());
        },
    );

    let config = config(front.url(), dir.path(), "", "");
    let (summary, events) = run_jobs(config, dir.path(), 2, Duration::from_secs(90)).await;

    assert_eq!(build.state(), MockJobState::Success, "{}", log_text(&build));
    assert_eq!(test.state(), MockJobState::Success, "{}", log_text(&test));
    let log = log_text(&build);
    for needle in [
        "Running with gantry-runner",
        "section_start:",
        ":prepare_executor\r\x1b[0K",
        ":prepare_script\r\x1b[0K",
        ":get_sources\r\x1b[0K",
        ":step_script\r\x1b[0K",
        ":after_script\r\x1b[0K",
        ":upload_artifacts_on_success\r\x1b[0K",
        ":cleanup_file_variables\r\x1b[0K",
        "hello from git",
        &sha,
        "status=running concurrent=0",
        "expanded=base-value/more",
        "after_script sees success",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?} in:\n{log}");
    }
    let project_dir = dir.path().join("builds/fakerunne/0/project-4");
    assert!(
        log.contains(&format!("dir={}", project_dir.display())),
        "{log}"
    );
    assert!(!log.contains(build.token()), "the job token leaked");

    // The artifact went up as an archive (zip) and came down into the next job.
    let uploaded: Vec<_> = build.uploaded_artifacts().collect();
    assert_eq!(uploaded.len(), 1);
    assert_eq!(uploaded[0].artifact_type.as_deref(), Some("archive"));
    assert_eq!(uploaded[0].artifact_format.as_deref(), Some("zip"));
    assert_eq!(uploaded[0].filename.as_deref(), Some("artifacts.zip"));
    let test_log = log_text(&test);
    assert!(
        test_log.contains(":download_artifacts\r\x1b[0K"),
        "{test_log}"
    );
    assert!(
        test_log.contains(&format!("artifact of {}", build.id())),
        "{test_log}"
    );

    // The final update describes exactly what the mock stored.
    for job in [&build, &test] {
        let update = front.final_update(job.id());
        assert_eq!(update["state"], "success");
        assert_eq!(update["output"]["checksum"], checksum(&job.log()));
        assert_eq!(update["output"]["bytesize"], job.log().len());
        assert_eq!(update["token"], job.token());
    }
    // Acceptance came first: PUT state=running before any patch.
    let first = front
        .exchanges()
        .into_iter()
        .find(|e| e.path.starts_with(&format!("/api/v4/jobs/{}", build.id())))
        .unwrap();
    assert_eq!(
        (first.method.as_str(), first.json()["state"].as_str()),
        ("PUT", Some("running"))
    );

    assert_eq!(summary.jobs.len(), 2);
    for report in &summary.jobs {
        assert_eq!(report.ending, JobEnding::Success);
        assert_eq!(report.delivery, Delivery::Accepted);
    }
    let texts = events.texts();
    assert!(
        texts
            .iter()
            .any(|t| t.contains(&format!("received job {} (build)", build.id()))),
        "{texts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_script_reports_script_failure_with_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "fails",
        &["echo before", "exit 3", "echo never"],
        &[],
        &[],
    );
    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(job.state(), MockJobState::Failed);
    let log = log_text(&job);
    assert!(log.contains("before") && !log.contains("\nnever"), "{log}");
    assert!(log.contains("ERROR: Job failed: exit code 3"), "{log}");
    let update = front.final_update(job.id());
    assert_eq!(update["state"], "failed");
    assert_eq!(update["failure_reason"], "script_failure");
    assert_eq!(update["exit_code"], 3);
    assert_eq!(
        summary.jobs[0].ending,
        JobEnding::ScriptFailure { exit_code: 3 }
    );
    // GitLab answers an applied `failed` with 200 + `Job-Status: failed`: delivered.
    assert_eq!(summary.jobs[0].delivery, Delivery::Accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payload_that_cannot_be_decoded_fails_the_job_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    // A malformed variable (and an unknown field, which is fine).
    front.rewrite_payload(|payload| {
        payload["variables"][0]["masked"] = "sometimes".into();
        payload["a_field_from_the_future"] = serde_json::json!({"x": 1});
    });
    let job = enqueue(&mock, "unreadable", &["echo never"], &[], &[]);
    let (options, events) = options(dir.path(), None);
    let (handle, task) = start(config(front.url(), dir.path(), "", ""), options);
    wait_for(Duration::from_secs(20), "the job to be failed", || {
        job.state() == MockJobState::Failed
    })
    .await;
    handle.stop_taking_jobs();
    let summary = tokio::time::timeout(Duration::from_secs(60), task)
        .await
        .unwrap()
        .unwrap();

    let log = log_text(&job);
    assert!(
        log.contains("failed to decode job payload: at `variables[0].masked`"),
        "{log}"
    );
    assert!(!log.contains("\nnever"), "{log}");
    assert_eq!(
        front.final_update(job.id())["failure_reason"],
        "runner_system_failure"
    );
    assert!(matches!(
        summary.jobs[0].ending,
        JobEnding::SystemFailure { .. }
    ));
    assert!(
        events
            .all()
            .iter()
            .any(|e| matches!(e, gantry_runner::poll::PollEvent::UndecodableJob { .. }))
    );
}
