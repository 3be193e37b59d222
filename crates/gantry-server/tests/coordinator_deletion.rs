//! What leaves the database and the blobs together: expired artifacts
//! (`remove_expired_artifacts`, run by the background timers every minute — the archive and
//! the dotenv report with its parsed variables, of finished jobs only; artifacts that have
//! not expired, never expire, or belong to the newest or newest successful pipeline of
//! their ref, stay), deleted projects (`delete_project`: everything they own) and deleted
//! pipelines (`delete_pipeline`: jobs,
//! logs, artifacts; the pipelines they triggered stay).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::coordinator_support;

use coordinator_support::*;
use gantry_protocol::{ArtifactFormat, ArtifactType, ArtifactUploadParams};
use gantry_server::coordinator::RunnerOptions;

const HOUR_MS: i64 = 3_600_000;

fn params(kind: ArtifactType, format: ArtifactFormat, expire_in: &str) -> ArtifactUploadParams {
    ArtifactUploadParams {
        artifact_type: Some(kind),
        artifact_format: Some(format),
        expire_in: Some(expire_in.to_owned()),
    }
}

fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

/// A zip archive holding one file.
fn zip_archive() -> Vec<u8> {
    use std::io::Write as _;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file("out.txt", zip::write::SimpleFileOptions::default())
        .unwrap();
    zip.write_all(b"built\n").unwrap();
    zip.finish().unwrap().into_inner()
}

#[tokio::test]
async fn expired_artifacts_of_finished_jobs_are_removed_with_their_blobs() {
    let e = env_with_local_blobs(
        "build:\n  script: [make]\nkeep:\n  script: [make]\nslow:\n  script: [make]\n",
    )
    .await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(e.take_some(&runner).await);
    }
    let id = |name: &str| {
        jobs.iter()
            .find(|j| j.job_info.name == name)
            .map(|j| j.id)
            .unwrap()
    };
    let (build, keep, slow) = (id("build"), id("keep"), id("slow"));
    let upload =
        |job: i64, kind, format, expire_in: &'static str, name: &'static str, bytes: Vec<u8>| {
            let coord = e.coord.clone();
            async move {
                coord
                    .upload_artifact(job, params(kind, format, expire_in), name, &bytes)
                    .await
                    .unwrap();
            }
        };
    upload(
        build,
        ArtifactType::Archive,
        ArtifactFormat::Zip,
        "1 hour",
        "artifacts.zip",
        zip_archive(),
    )
    .await;
    upload(
        build,
        ArtifactType::Dotenv,
        ArtifactFormat::Gzip,
        "1 hour",
        "build.env.gz",
        gzip("A=1\n"),
    )
    .await;
    upload(
        keep,
        ArtifactType::Archive,
        ArtifactFormat::Zip,
        "never",
        "artifacts.zip",
        zip_archive(),
    )
    .await;
    upload(
        slow,
        ArtifactType::Archive,
        ArtifactFormat::Zip,
        "1 hour",
        "artifacts.zip",
        zip_archive(),
    )
    .await;
    let blobs = e.dir.path().join("data").join("blobs");
    let archive = |job: i64| blobs.join(format!("artifacts/{job}/archive"));
    let dotenv = blobs.join(format!("dotenv/{build}.json"));
    assert!(archive(build).is_file() && dotenv.is_file() && archive(slow).is_file());
    for job in [&jobs[0], &jobs[1], &jobs[2]] {
        if job.id != slow {
            e.run(job, true).await;
        }
    }

    // Not expired yet: nothing goes.
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let artifacts = e.coord.artifacts();
    let removed = artifacts.remove_expired_artifacts(now).await.unwrap();
    assert_eq!(removed.artifacts, 0);
    // Expired, but the newest pipeline of `main` keeps its artifacts ...
    let later = now + 2 * HOUR_MS;
    let removed = artifacts.remove_expired_artifacts(later).await.unwrap();
    assert_eq!(removed.artifacts, 0, "{removed:?}");
    // ... until a newer pipeline of the ref ends (this one, still running, is no
    // successful one either).
    let newer = e.pipeline(project, "main").await;
    e.coord.cancel_pipeline(newer.id).await.unwrap();

    // Two hours later: the finished job's archive and dotenv report go, the running
    // job's stays until it ends, the one that never expires stays.
    let removed = artifacts.remove_expired_artifacts(later).await.unwrap();
    assert_eq!(removed.artifacts, 2, "{removed:?}");
    assert!(removed.left_over.is_empty(), "{removed:?}");
    assert!(!archive(build).exists() && !dotenv.exists());
    assert!(archive(keep).is_file(), "`never` never expires");
    assert!(archive(slow).is_file(), "the job still runs");
    let view = e.coord.job(build).await.unwrap();
    assert!(view.artifacts.is_empty(), "{:?}", view.artifacts);
    assert_eq!(e.coord.job(keep).await.unwrap().artifacts.len(), 1);

    let slow_job = jobs.iter().find(|j| j.id == slow).unwrap();
    e.run(slow_job, true).await;
    let removed = artifacts.remove_expired_artifacts(later).await.unwrap();
    assert_eq!(removed.artifacts, 1);
    assert!(!archive(slow).exists());
    assert_eq!(
        artifacts
            .remove_expired_artifacts(later)
            .await
            .unwrap()
            .artifacts,
        0,
        "each artifact once"
    );
}

#[tokio::test]
async fn a_deleted_pipeline_takes_its_jobs_logs_and_artifacts_along() {
    let e = env_with_local_blobs(
        "stages: [build, test]\nbuild:\n  stage: build\n  script: [make]\ntest:\n  stage: test\n  script: [make test]\n",
    )
    .await;
    let project = e.project().await;
    let doomed = e.pipeline(project, "main").await;
    let kept = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let first = e.take_some(&runner).await;
    assert_eq!(first.job_info.pipeline_id, doomed.id);
    e.coord
        .upload_artifact(
            first.id,
            params(ArtifactType::Dotenv, ArtifactFormat::Gzip, "never"),
            "build.env.gz",
            &gzip("A=1\n"),
        )
        .await
        .unwrap();
    e.coord
        .upload_artifact(
            first.id,
            params(ArtifactType::Archive, ArtifactFormat::Zip, "never"),
            "artifacts.zip",
            &zip_archive(),
        )
        .await
        .unwrap();
    e.run(&first, true).await;
    let other = e.take_some(&runner).await;
    assert_eq!(other.job_info.pipeline_id, kept.id);
    let data = e.dir.path().join("data");
    let files = [
        data.join(format!("blobs/artifacts/{}/archive", first.id)),
        data.join(format!("blobs/dotenv/{}.json", first.id)),
        data.join(format!("traces/{}.log", first.id)),
    ];
    for file in &files {
        assert!(file.is_file(), "{}", file.display());
    }
    // (Local blobs: the log stays in its file. With shared blobs it is archived as
    // `traces/<job>.log` and that blob is deleted the same way.)

    // Still active (its test job is waiting): canceled, then deleted.
    e.coord.delete_pipeline(doomed.id).await.unwrap();
    for file in &files {
        assert!(!file.exists(), "{} is left", file.display());
    }
    assert!(e.coord.pipeline(doomed.id).await.is_err());
    assert!(e.coord.job(first.id).await.is_err());
    assert!(matches!(
        e.coord.delete_pipeline(doomed.id).await,
        Err(gantry_server::coordinator::CoordinatorError::NotFound(_))
    ));
    // The other pipeline, and its running job, are untouched.
    assert_eq!(
        e.coord.pipeline(kept.id).await.unwrap().status.as_str(),
        "running"
    );
    e.run(&other, true).await;
}

/// `DELETE /projects/:id`: the project's pipelines (canceled first), jobs, logs,
/// artifacts, environments, deployments, trigger tokens, project runners and mirror go;
/// another project, and its running job, stay.
#[tokio::test]
async fn a_deleted_project_takes_everything_it_owns_along() {
    let e = env_with_local_blobs(
        "stages: [build, deploy]\nbuild:\n  stage: build\n  script: [make]\ndeploy:\n  stage: deploy\n  script: [ship]\n  environment: production\n",
    )
    .await;
    let project = e.project().await;
    let other = e
        .coord
        .create_project("other", e.repo.to_str().unwrap())
        .await
        .unwrap()
        .id;
    let doomed = e.pipeline(project, "main").await;
    let kept = e.pipeline(other, "main").await;
    let runner = e.any_runner().await;
    let project_runner = e
        .runner(RunnerOptions {
            description: "own".into(),
            run_untagged: true,
            project_id: Some(project),
            ..RunnerOptions::default()
        })
        .await;
    e.coord.triggers().create(project, "deploys").await.unwrap();
    let first = e.take_some(&runner).await;
    assert_eq!(first.job_info.pipeline_id, doomed.id);
    e.coord
        .upload_artifact(
            first.id,
            params(ArtifactType::Archive, ArtifactFormat::Zip, "never"),
            "artifacts.zip",
            &zip_archive(),
        )
        .await
        .unwrap();
    e.run(&first, true).await;
    let other_job = e.take_some(&runner).await;
    assert_eq!(other_job.job_info.pipeline_id, kept.id);
    let data = e.dir.path().join("data");
    let files = [
        data.join(format!("blobs/artifacts/{}/archive", first.id)),
        data.join(format!("traces/{}.log", first.id)),
        data.join(format!("repos/{project}.git")),
    ];
    for file in &files {
        assert!(file.exists(), "{}", file.display());
    }
    let filter = gantry_store::EnvironmentFilter::default();
    let (envs, _) = e
        .coord
        .environments()
        .page(project, &filter, 0, 10)
        .await
        .unwrap();
    assert_eq!(envs.len(), 1);

    // Its deploy job is still waiting: the pipeline is canceled, then everything goes.
    e.coord.delete_project(project).await.unwrap();
    for file in &files {
        assert!(!file.exists(), "{} is left", file.display());
    }
    use gantry_server::coordinator::CoordinatorError::NotFound;
    assert!(matches!(e.coord.project(project).await, Err(NotFound(_))));
    assert!(matches!(
        e.coord.pipeline(doomed.id).await,
        Err(NotFound(_))
    ));
    assert!(matches!(e.coord.job(first.id).await, Err(NotFound(_))));
    assert!(matches!(
        e.coord.runner(project_runner.id).await,
        Err(NotFound(_))
    ));
    assert!(matches!(
        e.coord.environments().page(project, &filter, 0, 10).await,
        Err(NotFound(_))
    ));
    assert!(matches!(
        e.coord.delete_project(project).await,
        Err(NotFound(_))
    ));
    // The other project, and its running job, are untouched; the instance runner stays.
    assert_eq!(
        e.coord.pipeline(kept.id).await.unwrap().status.as_str(),
        "running"
    );
    e.run(&other_job, true).await;
    assert!(e.coord.runner(runner.id).await.is_ok());
}
