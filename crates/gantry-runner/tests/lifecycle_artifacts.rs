//! Dependency artifacts are extracted safely: an archive whose entries try to leave
//! the project directory fails the job with a message naming the entry, and nothing is
//! written outside.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

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

/// The link chain of issue 35 (`d/l → .`, `u1 → d/l/..`, `u2 → u1/..`, …): every link's
/// text alone stays inside, together they reached `/`.
fn link_chain_zip() -> Vec<u8> {
    let mut bytes = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut bytes);
        let options = zip::write::SimpleFileOptions::default();
        zip.add_directory("d/", options).unwrap();
        zip.add_symlink("d/l", ".", options).unwrap();
        zip.add_symlink("u1", "d/l/..", options).unwrap();
        for i in 2..=9 {
            zip.add_symlink(format!("u{i}"), format!("u{}/..", i - 1), options)
                .unwrap();
        }
        zip.finish().unwrap();
    }
    bytes.into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_link_chain_in_a_dependency_fails_the_job() {
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
    let consumer = enqueue_with(&mock, "consumer", &["readlink -f u9"], &[], &[], |b| {
        b.dependency(producer.clone())
    });
    front.serve_artifact_downloads(link_chain_zip());
    run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        2,
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(consumer.state(), MockJobState::Failed);
    let log = log_text(&consumer);
    assert!(
        log.contains(
            "extract `u1`: the symbolic link's target `d/l/..` has a `..` after the symbolic link `d/l`"
        ),
        "{log}"
    );
    assert!(!log.contains("$ readlink"), "{log}");
    assert_eq!(
        front.final_update(consumer.id())["failure_reason"],
        "runner_system_failure"
    );
}

/// A tar.zst with a fifo and hard links next to a file: the file arrives, the others
/// are skipped with gitlab-runner's `File ignored` warning, and the job goes on.
fn tar_zst_with_special_entries() -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut file = tar::Header::new_gnu();
    file.set_path("ok.txt").unwrap();
    file.set_size(3);
    file.set_mode(0o644);
    file.set_cksum();
    tar.append(&file, &b"ok\n"[..]).unwrap();
    for (name, kind, link) in [
        ("pipe", tar::EntryType::Fifo, None),
        ("shadow", tar::EntryType::Link, Some("/etc/shadow")),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_path(name).unwrap();
        header.set_entry_type(kind);
        header.set_size(0);
        header.set_mode(0o644);
        if let Some(link) = link {
            header.set_link_name_literal(link).unwrap();
        }
        header.set_cksum();
        tar.append(&header, std::io::empty()).unwrap();
    }
    zstd::encode_all(&tar.into_inner().unwrap()[..], 1).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn special_entries_in_a_dependency_are_skipped_with_a_warning() {
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
    let consumer = enqueue_with(
        &mock,
        "consumer",
        &[
            "cat ok.txt",
            "test ! -e pipe && test ! -e shadow && echo none-made",
        ],
        &[],
        &[],
        |b| b.dependency(producer.clone()),
    );
    front.serve_artifact_downloads(tar_zst_with_special_entries());
    run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        2,
        Duration::from_secs(60),
    )
    .await;

    let log = log_text(&consumer);
    assert_eq!(consumer.state(), MockJobState::Success, "{log}");
    assert!(
        log.contains(
            "WARNING: File ignored: \"pipe\" (a fifo; only files, directories and symbolic links are extracted)"
        ),
        "{log}"
    );
    assert!(
        log.contains("WARNING: File ignored: \"shadow\" (a hard link;"),
        "{log}"
    );
    assert!(
        log.contains("\nok\n") && log.contains("\nnone-made\n"),
        "{log}"
    );
}
