//! What a running job sends: trace patches (§5: append at the end only, 416 otherwise,
//! size limit), final updates (§4.4: 202 until the trace is complete), artifacts (§6) and
//! dotenv reports reaching dependent jobs, and who may download what.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use std::io::Write as _;

use coordinator_support::*;
use gantry_protocol::{
    ArtifactFormat, ArtifactType, ArtifactUploadParams, JobState, JobTraceOutput, TraceChecksum,
};
use gantry_server::coordinator::CoordinatorError;

fn gzip(text: &str) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

fn params(t: ArtifactType, f: ArtifactFormat, expire_in: Option<&str>) -> ArtifactUploadParams {
    ArtifactUploadParams {
        artifact_type: Some(t),
        artifact_format: Some(f),
        expire_in: expire_in.map(str::to_owned),
    }
}

#[tokio::test]
async fn traces_append_only_at_the_end_and_final_updates_wait_for_them() {
    let e = env("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    e.update(&job, JobState::Running, None).await;
    assert_eq!(e.coord.append_trace(job.id, 0, b"hello ").await.unwrap(), 6);
    // A patch that does not start at the stored length: 416 with the length, nothing written.
    for bad in [0, 3, 7, 100] {
        let err = e.coord.append_trace(job.id, bad, b"xx").await.unwrap_err();
        assert!(
            matches!(err, CoordinatorError::RangeMismatch { size: 6 }),
            "offset {bad}: {err}"
        );
    }
    assert_eq!(
        e.coord.append_trace(job.id, 6, b"world\n").await.unwrap(),
        12
    );
    assert_eq!(
        e.coord.traces().trace(job.id).await.unwrap(),
        b"hello world\n"
    );

    // The runner says it produced 20 bytes but only 12 arrived: 202, not applied yet.
    let mut full = TraceChecksum::new();
    full.update(b"hello world\nthe end\n");
    let r = e.update(&job, JobState::Success, Some(full.output())).await;
    assert!(!r.accepted);
    assert_eq!(r.job_status.as_str(), "running");
    assert_eq!(r.update_interval, Some(std::time::Duration::from_secs(1)));
    assert_eq!(
        e.coord.job(job.id).await.unwrap().status.as_str(),
        "running"
    );
    // The rest arrives; the same final update is then applied.
    e.coord
        .append_trace(job.id, 12, b"the end\n")
        .await
        .unwrap();
    let r = e.update(&job, JobState::Success, Some(full.output())).await;
    assert!(r.accepted);
    assert_eq!(r.job_status.as_str(), "success");
    let err = e.coord.append_trace(job.id, 20, b"late").await.unwrap_err();
    assert!(matches!(err, CoordinatorError::Forbidden(_)), "{err}");
}

/// `coverage:` is read from the complete log when the job finishes, failed jobs included.
#[tokio::test]
async fn coverage_is_read_from_the_log_of_a_finished_job() {
    let e = env(r#"
covered: {script: [test], coverage: '/^Lines: (\d+\.\d+)%/'}
failing: {script: [test], coverage: '/^Lines: (\d+\.\d+)%/'}
plain: {script: [test]}
"#)
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    for _ in 0..3 {
        let job = e.take_some(&runner).await;
        e.update(&job, JobState::Running, None).await;
        let log = b"$ test\nLines: 40.5%\nLines: 78.46%\nJob succeeded\n";
        e.coord.append_trace(job.id, 0, log).await.unwrap();
        let mut sum = TraceChecksum::new();
        sum.update(log);
        let state = if job.job_info.name == "failing" {
            JobState::Failed
        } else {
            JobState::Success
        };
        assert!(e.update(&job, state, Some(sum.output())).await.accepted);
    }
    let coverage: Vec<(String, Option<f64>)> = e
        .coord
        .pipeline_jobs(p.id)
        .await
        .unwrap()
        .into_iter()
        .map(|j| (j.name, j.coverage))
        .collect();
    assert_eq!(
        coverage,
        [
            ("covered".to_owned(), Some(78.46)),
            ("failing".to_owned(), Some(78.46)),
            ("plain".to_owned(), None)
        ]
    );
}

#[tokio::test]
async fn an_oversized_trace_drops_the_job() {
    let e = env("job: {script: [\"yes\"]}\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    let chunk = vec![b'y'; 40 * 1024];
    e.coord
        .append_trace(job.id, 0, chunk.clone())
        .await
        .unwrap();
    let err = e
        .coord
        .append_trace(job.id, chunk.len() as u64, chunk.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::Forbidden(_)), "{err}");
    let j = e.coord.job(job.id).await.unwrap();
    assert_eq!(
        (j.status.as_str(), j.failure_reason.as_deref()),
        ("failed", Some("trace_size_exceeded"))
    );
    assert_eq!(e.status(p.id).await, "failed");
}

#[tokio::test]
async fn artifacts_and_dotenv_reach_dependent_jobs() {
    let e = env(r"
stages: [build, test]
build:
  stage: build
  script: [make]
  artifacts:
    paths: [out/]
    expire_in: 1 week
    reports: {dotenv: build.env, junit: report.xml}
other:
  stage: build
  script: [echo ok]
test:
  stage: test
  script: [make test]
  dependencies: [build]
  variables: {VERSION: from-yaml}
dag:
  stage: test
  needs: [{job: other, artifacts: true}]
  script: [echo]
")
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let mut build = e.take_some(&runner).await;
    let mut other = e.take_some(&runner).await;
    if build.job_info.name != "build" {
        std::mem::swap(&mut build, &mut other);
    }
    let arts = build.artifacts.as_ref().unwrap();
    assert_eq!(arts[0].artifact_type, ArtifactType::Archive);
    assert_eq!(arts[0].paths, ["out/"]);
    assert_eq!(arts[0].expire_in.as_deref(), Some("1 week"));
    let dotenv = arts
        .iter()
        .find(|a| a.artifact_type == ArtifactType::Dotenv)
        .unwrap();
    assert_eq!(
        (dotenv.artifact_format, dotenv.name.as_deref()),
        (ArtifactFormat::Gzip, Some(".env"))
    );

    // Uploads: the format must match the type; a bad dotenv is refused.
    let zip = b"PK\x03\x04 pretend zip".to_vec();
    let err = e
        .coord
        .upload_artifact(
            build.id,
            params(ArtifactType::Archive, ArtifactFormat::Gzip, None),
            "a.zip",
            &zip,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::Invalid(_)), "{err}");
    let err = e
        .coord
        .upload_artifact(
            build.id,
            params(ArtifactType::Archive, ArtifactFormat::Zip, Some("soon")),
            "a.zip",
            &zip,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::Invalid(_)), "{err}");
    let err = e
        .coord
        .upload_artifact(
            build.id,
            params(ArtifactType::Archive, ArtifactFormat::Zip, None),
            "a.zip",
            &vec![0; 2 << 20],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::TooLarge(_)), "{err}");
    let err = e
        .coord
        .upload_artifact(
            build.id,
            params(ArtifactType::Dotenv, ArtifactFormat::Gzip, None),
            "build.env.gz",
            &gzip("NOT VALID\n"),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::Invalid(_)), "{err}");
    let staging = e.coord.blob_staging_dir().to_owned();
    assert_eq!(
        std::fs::read_dir(&staging).unwrap().count(),
        0,
        "refused uploads leave nothing in {}",
        staging.display()
    );
    e.coord
        .upload_artifact(
            build.id,
            params(ArtifactType::Archive, ArtifactFormat::Zip, Some("1 week")),
            "artifacts.zip",
            &zip,
        )
        .await
        .unwrap();
    e.coord
        .upload_artifact(
            build.id,
            params(ArtifactType::Dotenv, ArtifactFormat::Gzip, None),
            "build.env.gz",
            &gzip("VERSION=1.2.3\nCOMMIT_ONLY=yes\n"),
        )
        .await
        .unwrap();
    let view = e.coord.job(build.id).await.unwrap();
    assert_eq!(
        view.artifacts_file
            .as_ref()
            .map(|a| (a.filename.as_str(), a.size)),
        Some(("artifacts.zip", zip.len() as i64))
    );
    assert_eq!(view.artifacts.len(), 2);
    e.run(&build, true).await;
    e.run(&other, true).await;

    let mut test = e.take_some(&runner).await;
    let mut dag = e.take_some(&runner).await;
    if test.job_info.name != "test" {
        std::mem::swap(&mut test, &mut dag);
    }
    // `dependencies: [build]`: build's archive and dotenv, above the YAML variable.
    assert_eq!(test.dependencies.len(), 1);
    let dep = &test.dependencies[0];
    assert_eq!(
        (dep.id, dep.name.as_str(), dep.token.as_str()),
        (build.id, "build", test.token.as_str())
    );
    assert_eq!(
        dep.artifacts_file.as_ref().map(|f| f.size),
        Some(zip.len() as u64)
    );
    assert_eq!(
        var(&test, "VERSION"),
        Some("1.2.3"),
        "dotenv beats job YAML variables"
    );
    assert_eq!(var(&test, "COMMIT_ONLY"), Some("yes"));
    // `needs: [other]`: other only, which has no archive (key omitted).
    assert_eq!(
        dag.dependencies
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["other"]
    );
    assert!(dag.dependencies[0].artifacts_file.is_none());
    assert_eq!(var(&dag, "VERSION"), None);

    // Download with the running dependent job's token.
    let (a, blob) = e
        .coord
        .download_artifact(build.id, &test.token)
        .await
        .unwrap();
    assert_eq!(blob.len, zip.len() as u64);
    assert_eq!(
        (a.filename.as_str(), blob.into_bytes().unwrap()),
        ("artifacts.zip", zip.clone())
    );
    // Not with the finished job's own (revoked) token, nor garbage.
    assert!(matches!(
        e.coord.download_artifact(build.id, &build.token).await,
        Err(CoordinatorError::Forbidden(_))
    ));
    assert!(matches!(
        e.coord.download_artifact(build.id, "glcbt-nope").await,
        Err(CoordinatorError::Forbidden(_))
    ));
    assert!(matches!(
        e.coord.download_artifact(other.id, &test.token).await,
        Err(CoordinatorError::NotFound(_))
    ));

    // Another project's running job may not read it.
    let repo2 = e.dir.path().join("repo2");
    std::fs::create_dir_all(&repo2).unwrap();
    git(&repo2, &["init", "-q", "-b", "main"]);
    commit(
        &repo2,
        &[(".gitlab-ci.yml", "x: {script: [x]}\n")],
        "other project",
    );
    let p2 = e
        .coord
        .create_project("acme/other", repo2.to_str().unwrap())
        .await
        .unwrap();
    assert_eq!(p2.path_with_namespace, "acme/other");
    e.pipeline(p2.id, "main").await;
    let foreign = e.take_some(&runner).await;
    assert_eq!(foreign.job_info.project_full_path, "acme/other");
    assert!(matches!(
        e.coord.download_artifact(build.id, &foreign.token).await,
        Err(CoordinatorError::Forbidden(_))
    ));
    let _ = p;
}

#[tokio::test]
async fn a_final_update_waits_while_trace_bytes_are_missing() {
    // The accept window (5 minutes, GitLab's) is measured from the first final update;
    // meanwhile every repeat is answered 202.
    let e = env("job: {script: [make]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    let r = e
        .update(
            &job,
            JobState::Failed,
            Some(JobTraceOutput {
                checksum: "crc32:00000000".into(),
                bytesize: 10,
            }),
        )
        .await;
    assert!(!r.accepted);
    let r = e
        .update(
            &job,
            JobState::Failed,
            Some(JobTraceOutput {
                checksum: "crc32:00000000".into(),
                bytesize: 10,
            }),
        )
        .await;
    assert!(!r.accepted, "still inside the window");
    assert_eq!(
        e.coord.job(job.id).await.unwrap().status.as_str(),
        "running"
    );
}

/// A final update of a job this process handed out is checked by its own write: no token
/// lookup before it. The token is checked where the job's end is stored, so a job another
/// process put back in the queue and handed out again is not finished by the runner that
/// lost it (the checked way then gives the answer). Not with shared blobs (logs in the
/// database), where the final update goes the checked way.
#[tokio::test]
async fn a_final_update_checks_its_token_where_the_job_ends() {
    let e =
        env("stages: [a, b]\nfirst: {stage: a, script: [x]}\nsecond: {stage: b, script: [x]}\n")
            .await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let success = |token: &str| {
        gantry_protocol::UpdateJobRequest::new(
            token.to_owned(),
            JobState::Success,
            gantry_protocol::VersionInfo::default(),
        )
    };
    let first = e.take_some(&runner).await;
    if std::env::var(gantry_server::testing::TEST_BLOBS).as_deref() == Ok("s3") {
        // Shared blobs: the log's size is in the database and the log is archived before
        // the job ends, so the final update goes the checked way.
        let checked = e
            .coord
            .update_job_by_token(first.id, &first.token, &success(&first.token))
            .await
            .unwrap();
        assert!(checked.is_none(), "{checked:?}");
        return;
    }
    let lookups = e.coord.job_token_lookups();
    let done = e
        .coord
        .update_job_by_token(first.id, &first.token, &success(&first.token))
        .await
        .unwrap()
        .expect("checked by its own write");
    assert_eq!(done.job_status.as_str(), "success");
    assert_eq!(e.coord.job_token_lookups(), lookups, "no lookup");

    // `second` is handed out here; its runner never acknowledges it, another process puts
    // it back in the queue and hands it out again.
    let second = e.take_some(&runner).await;
    assert_eq!(second.job_info.name, "second");
    let store = gantry_store::Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    assert_eq!(
        store.requeue_unacknowledged(i64::MAX).await.unwrap().len(),
        1
    );
    let other = open_coordinator(e.dir.path()).await;
    let again = other
        .request_job(&runner, None, std::time::Duration::ZERO)
        .await
        .unwrap()
        .expect("the job again");
    assert_eq!(again.id, second.id);
    assert_ne!(again.token, second.token);
    let lost = e
        .coord
        .update_job_by_token(second.id, &second.token, &success(&second.token))
        .await
        .unwrap();
    assert!(lost.is_none(), "refused where the job would end: {lost:?}");
    assert_eq!(
        e.coord.job(second.id).await.unwrap().status.as_str(),
        "running"
    );
    let done = other
        .update_job_by_token(again.id, &again.token, &success(&again.token))
        .await
        .unwrap()
        .expect("its runner's final update");
    assert_eq!(done.job_status.as_str(), "success");
    assert_eq!(
        e.coord.job(second.id).await.unwrap().status.as_str(),
        "success"
    );
}
