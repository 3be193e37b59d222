//! Dependency artifacts are extracted safely: an archive whose entries try to leave
//! the project directory fails the job with a message naming the entry, and nothing is
//! written outside.

#![allow(clippy::unwrap_used, clippy::panic)]

mod mock_support;

use std::io::Write;
use std::time::Duration;

use gantry_runner::job::JobEnding;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

fn escaping_zip() -> Vec<u8> {
    let mut bytes = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut bytes);
        let options = zip::write::SimpleFileOptions::default();
        zip.start_file("fine.txt", options).unwrap();
        zip.write_all(b"fine\n").unwrap();
        zip.start_file("../../escaped.txt", options).unwrap();
        zip.write_all(b"escaped\n").unwrap();
        zip.finish().unwrap();
    }
    bytes.into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_archive_escaping_the_build_directory_fails_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let producer = enqueue_with(
        &mock,
        "producer",
        &["mkdir out && echo x > out/x"],
        &[],
        &[],
        |b| {
            b.add_artifact_paths(vec!["out/".to_owned()]);
        },
    );
    let consumer = enqueue_with(&mock, "consumer", &["echo never"], &[], &[], |b| {
        b.dependency(producer.clone())
    });
    front.serve_artifact_downloads(escaping_zip());
    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        2,
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(producer.state(), MockJobState::Success);
    assert_eq!(consumer.state(), MockJobState::Failed);
    let log = log_text(&consumer);
    assert!(log.contains("../../escaped.txt"), "{log}");
    assert!(!log.contains("\nnever"), "{log}");
    assert_eq!(
        front.final_update(consumer.id())["failure_reason"],
        "runner_system_failure"
    );
    let outside = dir.path().join("builds/fakerunne/escaped.txt");
    assert!(!outside.exists());
    let report = summary
        .jobs
        .iter()
        .find(|r| r.job_id == consumer.id() as i64)
        .unwrap();
    assert!(
        matches!(
            &report.ending,
            JobEnding::SystemFailure {
                stage: "download_artifacts",
                ..
            }
        ),
        "{report:?}"
    );
    // The download used the dependency's token (the mock's — old GitLab — semantics).
    let download = front
        .exchanges()
        .into_iter()
        .find(|e| e.method == "GET")
        .unwrap();
    assert_eq!(
        download.headers.get("job-token").map(String::as_str),
        Some(producer.token())
    );
}
