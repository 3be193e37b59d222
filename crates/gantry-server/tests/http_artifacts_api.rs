//! Users' artifact reads, GitLab's API shapes: the latest successful job's archive of a
//! ref (`GET /projects/:id/jobs/artifacts/:ref/download?job=`), one file of a job's
//! archive (`GET /projects/:id/jobs/:job_id/artifacts/*path`) and of the latest one
//! (`…/jobs/artifacts/:ref/raw/*path?job=`), with the admin token or a job token of the
//! same project; past `expire_in`, only the latest pipelines' of a ref.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use std::io::Write as _;

use http_support::*;
use reqwest::StatusCode;
use reqwest::multipart::{Form, Part};
use serde_json::json;

const CI: &str = "build:\n  script: [make]\n  artifacts:\n    paths: [out/]\n";

fn zip_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in files {
        archive
            .start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        archive.write_all(content.as_bytes()).unwrap();
    }
    archive.finish().unwrap().into_inner()
}

/// Runs the project's next job: uploads `archive`, ends it in `state`; returns its id.
async fn run_build(server: &TestServer, runner: &str, archive: Vec<u8>, state: &str) -> i64 {
    run_build_expiring(server, runner, archive, state, None).await
}

/// [`run_build`] with the archive's `expire_in` (else the job's `artifacts:expire_in`).
async fn run_build_expiring(
    server: &TestServer,
    runner: &str,
    archive: Vec<u8>,
    state: &str,
    expire_in: Option<&str>,
) -> i64 {
    let (id, token, _) = server.take_job(runner).await;
    let expire_in = expire_in
        .map(|e| format!("&expire_in={e}"))
        .unwrap_or_default();
    let uploaded = server
        .http
        .post(server.api(&format!(
            "jobs/{id}/artifacts?artifact_format=zip&artifact_type=archive{expire_in}"
        )))
        .header("JOB-TOKEN", &token)
        .multipart(Form::new().part("file", Part::bytes(archive).file_name("artifacts.zip")))
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), StatusCode::CREATED);
    server.end_job(id, &token, state).await;
    id
}

async fn get(server: &TestServer, path: &str) -> (StatusCode, Vec<u8>) {
    let response = server
        .http
        .get(server.api(path))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .unwrap();
    (response.status(), response.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_successful_archive_of_a_ref_and_single_files_are_served() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;

    let good = zip_of(&[
        ("out/app.bin", "build one"),
        ("out/notes/README.txt", "read me"),
    ]);
    server.create_pipeline(project, "main").await;
    let first = run_build(&server, &runner, good.clone(), "success").await;
    // A newer pipeline whose build failed: the latest *successful* one still answers.
    server.create_pipeline(project, "main").await;
    run_build(
        &server,
        &runner,
        zip_of(&[("out/app.bin", "broken")]),
        "failed",
    )
    .await;

    let (status, body) = get(
        &server,
        &format!("projects/{project}/jobs/artifacts/main/download?job=build"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body == good, "the archive of job {first}");
    let (status, body) = get(
        &server,
        &format!("projects/{project}/jobs/{first}/artifacts/out/notes/README.txt"),
    )
    .await;
    assert_eq!(
        (status, body.as_slice()),
        (StatusCode::OK, b"read me".as_slice())
    );
    let (status, body) = get(
        &server,
        &format!("projects/{project}/jobs/artifacts/main/raw/out/app.bin?job=build"),
    )
    .await;
    assert_eq!(
        (status, body.as_slice()),
        (StatusCode::OK, b"build one".as_slice())
    );

    // What is not there is a 404 naming it; a missing `job` parameter a 400.
    for (path, status, needle) in [
        (
            format!("projects/{project}/jobs/{first}/artifacts/out/missing.txt"),
            StatusCode::NOT_FOUND,
            "File Not Found",
        ),
        (
            format!("projects/{project}/jobs/{first}/artifacts/out"),
            StatusCode::NOT_FOUND,
            "File Not Found",
        ),
        (
            format!("projects/{project}/jobs/artifacts/main/download?job=deploy"),
            StatusCode::NOT_FOUND,
            "Job Not Found",
        ),
        (
            format!("projects/{project}/jobs/artifacts/other-branch/download?job=build"),
            StatusCode::NOT_FOUND,
            "Job Not Found",
        ),
        (
            format!("projects/{project}/jobs/artifacts/main/download"),
            StatusCode::BAD_REQUEST,
            "job is missing",
        ),
    ] {
        let response = server
            .http
            .get(server.api(&path))
            .header("PRIVATE-TOKEN", &server.admin)
            .send()
            .await
            .unwrap();
        let (got, error) = expect_client_error(response, &path).await;
        assert_eq!(got, status, "{path}: {error}");
        assert!(error.to_string().contains(needle), "{path}: {error}");
    }

    // A running job of the project reads them with its token; no credential, nothing.
    server.create_pipeline(project, "main").await;
    let (_, token, _) = server.take_job(&runner).await;
    let response = server
        .http
        .get(server.api(&format!(
            "projects/{project}/jobs/artifacts/main/raw/out/app.bin?job=build"
        )))
        .header("JOB-TOKEN", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let anonymous = server
        .http
        .get(server.api(&format!(
            "projects/{project}/jobs/artifacts/main/download?job=build"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

/// GitLab's "keep artifacts from the most recent successful jobs": past `expire_in`, the
/// newest pipeline of a ref and its newest successful one still serve their archives, until
/// a newer pipeline of the ref ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_archives_of_a_ref_outlive_their_expiry() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let build = |content: &'static str, state: &'static str| {
        let (server, runner) = (&server, &runner);
        async move {
            server.create_pipeline(project, "main").await;
            let archive = zip_of(&[("out/app.bin", content)]);
            let id = run_build_expiring(server, runner, archive.clone(), state, Some("1%20second"))
                .await;
            (id, archive)
        }
    };
    let job_archive = |job: i64| {
        let server = &server;
        async move { get(server, &format!("projects/{project}/jobs/{job}/artifacts")).await }
    };
    let latest = format!("projects/{project}/jobs/artifacts/main/download?job=build");

    let (good, good_archive) = build("one", "success").await;
    let (broken, broken_archive) = build("broken", "failed").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(get(&server, &latest).await, (StatusCode::OK, good_archive));
    assert_eq!(job_archive(broken).await, (StatusCode::OK, broken_archive));

    let (newest, newest_archive) = build("two", "success").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(
        get(&server, &latest).await,
        (StatusCode::OK, newest_archive)
    );
    for job in [good, broken] {
        assert_eq!(job_archive(job).await.0, StatusCode::NOT_FOUND, "job {job}");
    }
    assert_eq!(job_archive(newest).await.0, StatusCode::OK);
}

/// The project setting `keep_latest_artifact` (`PUT /projects/:id`, here as a form): while
/// it is off, new pipelines lock nothing and their latest archive expires like any other;
/// turned on again, the next pipeline's archive outlives its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keep_latest_artifact_the_latest_archive_expires() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let keep = |on: bool| {
        let server = &server;
        async move {
            let response = server
                .http
                .put(server.api(&format!("projects/{project}")))
                .header("PRIVATE-TOKEN", &server.admin)
                .form(&[("keep_latest_artifact", on.to_string())])
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body["keep_latest_artifact"], on, "{body}");
        }
    };
    let build = |content: &'static str| {
        let (server, runner) = (&server, &runner);
        async move {
            server.create_pipeline(project, "main").await;
            let archive = zip_of(&[("out/app.bin", content)]);
            let id = run_build_expiring(
                server,
                runner,
                archive.clone(),
                "success",
                Some("1%20second"),
            )
            .await;
            (id, archive)
        }
    };
    let latest = format!("projects/{project}/jobs/artifacts/main/download?job=build");

    keep(false).await;
    let (off, _) = build("off").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(get(&server, &latest).await.0, StatusCode::NOT_FOUND);
    let job_archive = format!("projects/{project}/jobs/{off}/artifacts");
    assert_eq!(get(&server, &job_archive).await.0, StatusCode::NOT_FOUND);

    keep(true).await;
    let (_, on_archive) = build("on").await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(get(&server, &latest).await, (StatusCode::OK, on_archive));
}

/// `POST …/jobs/:id/artifacts/keep`, `DELETE …/jobs/:id/artifacts` and
/// `DELETE /projects/:id/artifacts`, GitLab's answers: a kept artifact loses its expiry, a
/// deleted one is gone (the log stays), a running job keeps its own (`409`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_are_kept_and_deleted_by_job_and_by_project() {
    let server = TestServer::start().await;
    let ci = "build:\n  script: [make]\n  artifacts:\n    paths: [out/]\n    expire_in: 1 hour\n";
    let repo = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let archive = zip_of(&[("out/app.bin", "built")]);
    let mut built = Vec::new();
    for _ in 0..3 {
        server.create_pipeline(project, "main").await;
        built.push(run_build(&server, &runner, archive.clone(), "success").await);
    }
    let job_path = |id: i64| format!("projects/{project}/jobs/{id}");

    // Keep: the expiry goes, the job is answered.
    let (status, job) = server
        .admin(
            reqwest::Method::POST,
            &format!("{}/artifacts/keep", job_path(built[0])),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["id"], built[0]);
    assert_eq!(job["artifacts_expire_at"], serde_json::Value::Null, "{job}");
    let (_, other) = server
        .admin(reqwest::Method::GET, &job_path(built[1]), None)
        .await;
    assert!(other["artifacts_expire_at"].is_string(), "{other}");

    // Delete one job's: its archive is gone, its log is not.
    let (status, _) = server
        .admin(
            reqwest::Method::DELETE,
            &format!("{}/artifacts", job_path(built[1])),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = get(&server, &format!("{}/artifacts", job_path(built[1]))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = get(&server, &format!("{}/trace", job_path(built[1]))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = get(&server, &format!("{}/artifacts", job_path(built[0]))).await;
    assert_eq!(status, StatusCode::OK);

    // A running job keeps its artifacts.
    server.create_pipeline(project, "main").await;
    let (running, _, _) = server.take_job(&runner).await;
    let (status, body) = server
        .admin(
            reqwest::Method::DELETE,
            &format!("{}/artifacts", job_path(running)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.to_string().contains("once it has finished"), "{body}");

    // The whole project's: every finished job's archive goes.
    let (status, _) = server
        .admin(
            reqwest::Method::DELETE,
            &format!("projects/{project}/artifacts"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    for id in [built[0], built[2]] {
        let (status, _) = get(&server, &format!("{}/artifacts", job_path(id))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "job {id}");
    }
    let (status, _) = server
        .admin(reqwest::Method::DELETE, "projects/999/artifacts", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A deleted pipeline takes its jobs along.
    let (_, job) = server
        .admin(reqwest::Method::GET, &job_path(built[0]), None)
        .await;
    let pipeline = format!("projects/{project}/pipelines/{}", job["pipeline"]["id"]);
    let (status, _) = server.admin(reqwest::Method::DELETE, &pipeline, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    for path in [pipeline.clone(), job_path(built[0])] {
        let (status, _) = server.admin(reqwest::Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
    }
    let (status, body) = server.admin(reqwest::Method::DELETE, &pipeline, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"message": "404 Pipeline Not Found"}));
}

/// `POST /projects/:id/jobs/:job_id/erase`: a finished job's log and artifacts go,
/// `erased_at` is set; a running job, or one with nothing left, is not erasable (`403`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_is_erased_with_its_log_and_artifacts() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    server.create_pipeline(project, "main").await;
    let (id, token, _) = server.take_job(&runner).await;
    let log = "building\n";
    assert_eq!(
        server.patch_log(id, &token, 0, log).await,
        StatusCode::ACCEPTED
    );
    let erase = |job: i64| {
        server
            .http
            .post(server.api(&format!("projects/{project}/jobs/{job}/erase")))
            .header("PRIVATE-TOKEN", &server.admin)
            .send()
    };
    let (status, body) = expect_client_error(erase(id).await.unwrap(), "erase a running job").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let uploaded = server
        .http
        .post(server.api(&format!(
            "jobs/{id}/artifacts?artifact_format=zip&artifact_type=archive"
        )))
        .header("JOB-TOKEN", &token)
        .multipart(Form::new().part(
            "file",
            Part::bytes(zip_of(&[("out/a.txt", "a")])).file_name("artifacts.zip"),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), StatusCode::CREATED);
    server.end_job(id, &token, "success").await;
    let (status, log_now) = get(&server, &format!("projects/{project}/jobs/{id}/trace")).await;
    assert_eq!(
        (status, log_now.as_slice()),
        (StatusCode::OK, log.as_bytes())
    );

    let erased = erase(id).await.unwrap();
    assert_eq!(erased.status(), StatusCode::CREATED);
    let erased: serde_json::Value = erased.json().await.unwrap();
    assert!(erased["erased_at"].is_string(), "{erased}");
    assert_eq!(erased["artifacts"], json!([]));
    let (status, log_now) = get(&server, &format!("projects/{project}/jobs/{id}/trace")).await;
    assert_eq!((status, log_now.len()), (StatusCode::OK, 0));
    let (status, _) = get(&server, &format!("projects/{project}/jobs/{id}/artifacts")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let log_file = server.data_dir().join(format!("traces/{id}.log"));
    assert!(!log_file.exists(), "{}", log_file.display());
    let (status, body) = expect_client_error(erase(id).await.unwrap(), "erase twice").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
}
