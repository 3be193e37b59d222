//! Where job logs live: one file per job under `data_dir/traces`, the committed size in
//! the database. A log survives a restart; bytes a crash left past the committed size
//! are never shown and are overwritten by the next append; logs written by a version
//! that kept them in the database stay readable and move to a file when appended to;
//! concurrent copies of one patch store it once. (Coordinators that share their blobs keep
//! running logs in the database instead: `coordinator_shared_traces.rs`.)

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use coordinator_support::*;
use gantry_protocol::JobState;
use gantry_server::coordinator::{AppendError, CoordinatorError};

fn log_file(e: &Env, job_id: i64) -> std::path::PathBuf {
    e.dir.path().join(format!("data/traces/{job_id}.log"))
}

#[tokio::test]
async fn a_log_survives_a_restart_and_a_torn_append_stays_invisible() {
    let e = env_with_local_blobs("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    e.update(&job, JobState::Running, None).await;
    assert_eq!(e.coord.append_trace(job.id, 0, b"hello ").await.unwrap(), 6);
    assert_eq!(
        e.coord.append_trace(job.id, 6, b"world\n").await.unwrap(),
        12
    );

    // The server dies between writing a patch's bytes and committing its size.
    let path = log_file(&e, job.id);
    let mut torn = std::fs::read(&path).unwrap();
    torn.extend_from_slice(b"half of a patch that was never comm");
    std::fs::write(&path, &torn).unwrap();

    let restarted = open_coordinator_with_local_blobs(e.dir.path()).await;
    assert_eq!(
        restarted.traces().trace(job.id).await.unwrap(),
        b"hello world\n"
    );
    assert_eq!(
        restarted.job(job.id).await.unwrap().status.as_str(),
        "running"
    );
    // The runner resends from the committed size; the torn bytes are overwritten.
    let err = restarted.append_trace(job.id, 47, b"x").await.unwrap_err();
    assert!(
        matches!(err, CoordinatorError::RangeMismatch { size: 12 }),
        "{err}"
    );
    assert_eq!(
        restarted.append_trace(job.id, 12, b"done\n").await.unwrap(),
        17
    );
    assert_eq!(
        restarted.traces().trace(job.id).await.unwrap(),
        b"hello world\ndone\n"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"hello world\ndone\n");
}

#[tokio::test]
async fn a_log_kept_in_the_database_is_read_there_and_moved_by_the_next_append() {
    let e = env_with_local_blobs("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    e.update(&job, JobState::Running, None).await;

    // What migration 0004 finds in a database written before it: the bytes in
    // `trace_chunks`, the job flagged, no file.
    let url = test_database(e.dir.path()).await;
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    sqlx::query("INSERT INTO trace_chunks (job_id, seq, data) VALUES ($1, 0, $2), ($1, 1, $3)")
        .bind(job.id)
        .bind(b"old ".to_vec())
        .bind(b"log\n".to_vec())
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE jobs SET trace_size = 8, trace_in_db = 1 WHERE id = $1")
        .bind(job.id)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(e.coord.traces().trace(job.id).await.unwrap(), b"old log\n");
    assert!(!log_file(&e, job.id).exists());

    let err = e.coord.append_trace(job.id, 0, b"x").await.unwrap_err();
    assert!(
        matches!(err, CoordinatorError::RangeMismatch { size: 8 }),
        "{err}"
    );
    assert_eq!(e.coord.append_trace(job.id, 8, b"new\n").await.unwrap(), 12);
    assert_eq!(
        e.coord.traces().trace(job.id).await.unwrap(),
        b"old log\nnew\n"
    );
    assert_eq!(
        std::fs::read(log_file(&e, job.id)).unwrap(),
        b"old log\nnew\n"
    );
    let left: i64 = sqlx::query_scalar(
        format!(
            "SELECT COUNT(*) FROM trace_chunks WHERE job_id = {}",
            job.id
        )
        .as_str(),
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "the chunks left the database");
    pool.close().await;
}

/// The size a coordinator keeps for the jobs it handed out is used only while the job's
/// file is that long: another process sharing the data directory that appended is
/// noticed, its bytes are left alone and the patch is answered with the stored size.
#[tokio::test]
async fn a_log_another_process_appended_to_is_not_overwritten() {
    let e = env_with_local_blobs("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    let running = gantry_protocol::JobStatus::Running;
    let append = |coord: gantry_server::coordinator::Coordinator, at: u64, data: &'static [u8]| async move {
        coord
            .begin_checked_trace_append(job.id, running, at, Some(data.len() as u64))
            .await?
            .write(futures_util::stream::once(async move {
                Ok::<_, std::convert::Infallible>(data)
            }))
            .await
            .map_err(AppendError::into_refusal)
    };
    let other = open_coordinator_with_local_blobs(e.dir.path()).await;
    assert_eq!(other.append_trace(job.id, 0, b"theirs ").await.unwrap(), 7);
    let err = append(e.coord.clone(), 0, b"mine").await.unwrap_err();
    assert!(
        matches!(err, CoordinatorError::RangeMismatch { size: 7 }),
        "{err}"
    );
    assert_eq!(append(e.coord.clone(), 7, b"mine").await.unwrap(), 11);
    assert_eq!(append(e.coord.clone(), 11, b"!").await.unwrap(), 12);
    assert_eq!(
        e.coord.traces().trace(job.id).await.unwrap(),
        b"theirs mine!"
    );
    assert_eq!(
        std::fs::read(log_file(&e, job.id)).unwrap(),
        b"theirs mine!"
    );
}

#[tokio::test]
async fn copies_of_one_patch_sent_at_once_are_stored_once() {
    let e = env_with_local_blobs("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    e.update(&job, JobState::Running, None).await;
    let patch: Vec<u8> = (0..32 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (coord, patch) = (e.coord.clone(), patch.clone());
            tokio::spawn(async move { coord.append_trace(job.id, 0, patch).await })
        })
        .collect();
    let mut taken = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(size) => {
                assert_eq!(size, patch.len() as u64);
                taken += 1;
            }
            Err(CoordinatorError::RangeMismatch { size }) => assert_eq!(size, patch.len() as u64),
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(taken, 1);
    assert_eq!(e.coord.traces().trace(job.id).await.unwrap(), patch);
}

#[tokio::test]
async fn a_patch_past_the_limit_writes_nothing() {
    let e = env_with_local_blobs("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    // The harness's limit is 64 KiB.
    let first = vec![b'y'; 60 * 1024];
    e.coord
        .append_trace(job.id, 0, first.clone())
        .await
        .unwrap();
    let err = e
        .coord
        .append_trace(job.id, first.len() as u64, vec![b'z'; 8 * 1024])
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::Forbidden(_)), "{err}");
    assert_eq!(e.coord.traces().trace(job.id).await.unwrap(), first);
    assert_eq!(std::fs::read(log_file(&e, job.id)).unwrap(), first);
    let j = e.coord.job(job.id).await.unwrap();
    assert_eq!(j.failure_reason.as_deref(), Some("trace_size_exceeded"));
}

/// A patch whose body stops arriving (its runner's host vanished, the connection never
/// closes) is given up after `trace_body_idle_timeout` of silence (500 ms in these tests,
/// 30 s by default): nothing is committed and the job's next patch is not blocked behind it.
#[tokio::test]
async fn a_patch_whose_body_stalls_is_given_up() {
    let e = env_with_local_blobs("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    e.update(&job, JobState::Running, None).await;
    assert_eq!(
        e.coord.append_trace(job.id, 0, b"hello\n").await.unwrap(),
        6
    );

    let stalled = e.coord.begin_trace_append(job.id, 6, None).await.unwrap();
    let first =
        futures_util::stream::iter([Ok::<_, std::convert::Infallible>(b"half of a".to_vec())]);
    let body = futures_util::StreamExt::chain(first, futures_util::stream::pending());
    let err = stalled.write(body).await.unwrap_err().into_refusal();
    assert!(matches!(err, CoordinatorError::Invalid(_)), "{err}");
    assert_eq!(e.coord.traces().trace(job.id).await.unwrap(), b"hello\n");
    assert_eq!(
        e.coord.append_trace(job.id, 6, b"world\n").await.unwrap(),
        12
    );
    assert_eq!(
        e.coord.traces().trace(job.id).await.unwrap(),
        b"hello\nworld\n"
    );

    // A body that fails with its own error gets it back as it is (the HTTP layer answers
    // a stalled client 408, an oversized patch 413), and nothing is committed.
    let failing = e.coord.begin_trace_append(job.id, 12, None).await.unwrap();
    let body = futures_util::stream::iter([Ok(b"lost".to_vec()), Err(7_u8)]);
    assert!(matches!(
        failing.write(body).await,
        Err(AppendError::Body(7))
    ));
    assert_eq!(
        e.coord.traces().trace(job.id).await.unwrap(),
        b"hello\nworld\n"
    );
}
