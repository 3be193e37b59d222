//! Coordinators that share their blobs in object storage are replicas behind one address:
//! a running job's patches may reach any of them. Its log is kept in the database, so any
//! replica takes the next patch and serves the log so far; the finished log is archived in
//! the shared blobs and its rows go. These replicas always use the test S3 server
//! (`scripts/test-s3.sh`, started by `scripts/test` for the whole suite).

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use std::path::Path;
use std::sync::Arc;

use coordinator_support::*;
use gantry_protocol::{JobState, TraceChecksum};
use gantry_server::coordinator::{Coordinator, CoordinatorConfig, CoordinatorError, ObjectBlobs};
use gantry_store::Store;

/// A replica on the test database in `dir`, its data directory `dir/<name>`, its blobs
/// in the one S3 prefix every replica of `dir` shares.
async fn replica(dir: &Path, name: &str) -> Coordinator {
    let store = Store::open(&test_database(dir).await)
        .await
        .expect("store opens");
    let mut cfg = CoordinatorConfig::new(dir.join(name), "http://127.0.0.1:8080");
    cfg.trace_limit = 64 * 1024 * 1024;
    let url = gantry_server::testing::s3_url(dir).unwrap_or_else(|e| panic!("{e}"));
    let blobs = ObjectBlobs::from_url(&url, cfg.data_dir.join("blob-staging")).expect("blobs");
    Coordinator::open_with_blobs(store, cfg, Arc::new(blobs))
        .await
        .expect("replica opens")
}

#[tokio::test]
async fn a_running_log_is_written_and_read_through_any_replica() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(
        &repo,
        &[(".gitlab-ci.yml", "job: {script: [make]}\n")],
        "ci",
    );
    let a = replica(dir.path(), "a").await;
    let b = replica(dir.path(), "b").await;
    let e = Env {
        dir,
        repo,
        coord: a.clone(),
    };
    let project = e.project().await;
    let pipeline = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    e.update(&job, JobState::Running, None).await;

    // Patches alternate between the replicas; each reads what the other took.
    assert_eq!(a.append_trace(job.id, 0, b"one ").await.unwrap(), 4);
    assert_eq!(b.append_trace(job.id, 4, b"two ").await.unwrap(), 8);
    assert_eq!(b.traces().trace(job.id).await.unwrap(), b"one two ");
    assert_eq!(a.traces().trace(job.id).await.unwrap(), b"one two ");
    // An offset the other replica moved past is a 416 with the real size.
    assert!(matches!(
        a.append_trace(job.id, 4, b"late").await,
        Err(CoordinatorError::RangeMismatch { size: 8 })
    ));
    // A patch of several rows (more than 1 MiB), in one transaction.
    let big = vec![b'x'; 3 * 1024 * 1024 + 5];
    let end = 8 + big.len() as u64;
    assert_eq!(a.append_trace(job.id, 8, big.clone()).await.unwrap(), end);
    assert_eq!(
        b.append_trace(job.id, end, b"three\n").await.unwrap(),
        end + 6
    );
    let mut log = b"one two ".to_vec();
    log.extend_from_slice(&big);
    log.extend_from_slice(b"three\n");
    assert_eq!(b.traces().trace(job.id).await.unwrap(), log);
    // More than a replica holds in memory for one patch: refused, nothing written.
    let huge = vec![b'y'; gantry_server::coordinator::SHARED_PATCH_LIMIT + 1];
    let refused = b.append_trace(job.id, end + 6, huge).await;
    assert!(
        matches!(&refused, Err(CoordinatorError::Invalid(m)) if m.contains("at most")),
        "{refused:?}"
    );
    assert_eq!(a.traces().trace(job.id).await.unwrap(), log);

    // The final update through a replica: the log is archived in the shared blobs, its
    // rows go, and both replicas still serve it.
    let mut sum = TraceChecksum::new();
    sum.update(&log);
    let mut req = gantry_protocol::UpdateJobRequest::new(
        job.token.clone(),
        JobState::Success,
        gantry_protocol::VersionInfo::default(),
    );
    req.output = sum.output();
    b.update_job(job.id, req).await.expect("final update");
    assert_eq!(e.statuses(pipeline.id).await["job"], "success");
    assert_eq!(a.traces().trace(job.id).await.unwrap(), log);
    assert_eq!(b.traces().trace(job.id).await.unwrap(), log);
    let store = Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    let snapshot = store.trace_snapshot(job.id).await.unwrap();
    assert_eq!(
        snapshot.in_db, None,
        "the rows went once the log was archived"
    );
    assert_eq!(snapshot.size, log.len() as i64);

    // Deleting the pipeline through either replica deletes the archived log too.
    let key = format!("traces/{}.log", job.id);
    let url = gantry_server::testing::s3_url(e.dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let blobs = Arc::new(ObjectBlobs::from_url(&url, e.dir.path().join("check")).unwrap());
    let archived = |blobs: Arc<ObjectBlobs>, key: String| async move {
        tokio::task::spawn_blocking(move || {
            gantry_server::coordinator::BlobStore::get(blobs.as_ref(), &key)
        })
        .await
        .unwrap()
        .unwrap()
    };
    assert!(archived(Arc::clone(&blobs), key.clone()).await.is_some());
    a.delete_pipeline(pipeline.id).await.expect("deleted");
    assert!(
        archived(blobs, key).await.is_none(),
        "the archived log is gone"
    );
    assert!(b.traces().trace(job.id).await.is_err());
}

#[tokio::test]
async fn a_log_begun_before_the_blobs_were_shared_moves_into_the_database() {
    let e = env("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    e.update(&job, JobState::Running, None).await;
    // The first coordinator keeps its blobs locally (or in a prefix of its own):
    // its log is a file in its data directory...
    let local = open_coordinator_with_local_blobs(e.dir.path()).await;
    assert_eq!(local.append_trace(job.id, 0, b"early ").await.unwrap(), 6);
    // ...until it restarts as a replica sharing its blobs (same data directory): the next
    // patch moves the log into the database, where another replica reads it.
    let a = replica(e.dir.path(), "data").await;
    let b = replica(e.dir.path(), "b").await;
    assert_eq!(a.append_trace(job.id, 6, b"later\n").await.unwrap(), 12);
    assert_eq!(b.traces().trace(job.id).await.unwrap(), b"early later\n");
    // A replica without the file cannot move it: a clear error, nothing written.
    let other = env("job: {script: [make]}\n").await;
    let project = other.project().await;
    other.pipeline(project, "main").await;
    let runner = other.any_runner().await;
    let job = other.take_some(&runner).await;
    other.update(&job, JobState::Running, None).await;
    let local = open_coordinator_with_local_blobs(other.dir.path()).await;
    assert_eq!(local.append_trace(job.id, 0, b"early ").await.unwrap(), 6);
    let b = replica(other.dir.path(), "b").await;
    let refused = b.append_trace(job.id, 6, b"later\n").await;
    assert!(
        matches!(&refused, Err(CoordinatorError::Io(m)) if m.to_string().contains("not on this coordinator's disk")),
        "{refused:?}"
    );
    assert_eq!(local.traces().trace(job.id).await.unwrap(), b"early ");
}
