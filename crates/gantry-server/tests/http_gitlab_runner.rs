//! Acceptance: the collabora `gitlab-runner` crate (an independent client written against
//! real GitLab) drives our server over HTTP: it requests a job, streams a trace, uploads
//! an artifact and finishes the job; the pipeline advances, and the next job downloads
//! the artifact as its dependency.

#![allow(clippy::panic)]

use crate::http_support;

use std::borrow::Cow;
use std::io::Read as _;
use std::time::Duration;

use gitlab_runner::job::Job;
use gitlab_runner::{GitlabLayer, JobHandler, JobResult, Phase, RunnerBuilder, UploadableFile};
use http_support::{Repo, TWO_STAGES, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// The file the `build` job produces.
struct OutFile;

#[async_trait::async_trait]
impl UploadableFile for OutFile {
    type Data<'a> = &'a [u8];

    fn get_path(&self) -> Cow<'_, str> {
        "out.txt".into()
    }

    async fn get_data(&self) -> Result<&'_ [u8], ()> {
        Ok(b"built by the collabora runner\n")
    }
}

/// Runs each script line by writing it to the job log; the `test` job also checks the
/// artifact it depends on.
struct Handler {
    job: Job,
}

#[async_trait::async_trait]
impl JobHandler<OutFile> for Handler {
    async fn step(&mut self, script: &[String], phase: Phase) -> JobResult {
        for line in script {
            self.job.trace(format!("$ {line}\n"));
        }
        self.job.trace(format!("phase {phase:?} done\n"));
        for dependency in self.job.dependencies() {
            let Ok(Some(artifact)) = dependency.download().await else {
                self.job
                    .trace(format!("no artifact from {}\n", dependency.name()));
                return Err(());
            };
            let mut artifact = artifact;
            let mut file = artifact.file("out.txt").ok_or(())?;
            let mut text = String::new();
            file.read_to_string(&mut text).map_err(|_| ())?;
            self.job
                .trace(format!("dependency {} gave: {text}", dependency.name()));
        }
        Ok(())
    }

    async fn get_uploadable_files(
        &mut self,
    ) -> Result<Box<dyn Iterator<Item = OutFile> + Send>, ()> {
        Ok(Box::new(std::iter::once(OutFile)))
    }
}

async fn wait_for_job_status(server: &TestServer, project: i64, job: i64, status: &str) -> Value {
    for _ in 0..100 {
        let view = server.job(project, job).await;
        if view["status"] == status {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "job {job} never became {status}: {}",
        server.job(project, job).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collabora_runner_runs_a_pipeline() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", TWO_STAGES)]);
    let project = server.create_project("widget", &repo).await;
    let project_id = project["id"].as_i64().expect("project id");
    let pipeline = server.create_pipeline(project_id, "main").await;
    let pipeline_id = pipeline["id"].as_i64().expect("pipeline id");
    let (_, runner_token) = server
        .create_runner(serde_json::json!({ "description": "collabora" }))
        .await;

    let (_layer, jobs) = GitlabLayer::new::<tracing_subscriber::Registry>();
    let build_dir = tempfile::tempdir().expect("build dir");
    let mut runner = RunnerBuilder::new(
        server.url.as_str().try_into().expect("server URL"),
        runner_token,
        build_dir.path(),
        jobs,
    )
    .system_id("s_0123456789ab")
    .version("0.3.2")
    .build()
    .await;

    // build: pick up, trace, artifact, success.
    let got = runner
        .request_job(|job| async move { Ok(Handler { job }) })
        .await
        .expect("request a job");
    assert!(got, "the build job is handed out");
    runner.drain().await;

    let jobs = server.pipeline_jobs(project_id, pipeline_id).await;
    let build = jobs
        .iter()
        .find(|j| j["name"] == "build")
        .expect("build job");
    let build_id = build["id"].as_i64().expect("id");
    let build = wait_for_job_status(&server, project_id, build_id, "success").await;
    assert_eq!(
        build["artifacts_file"]["filename"], "default.zip",
        "{build}"
    );

    let trace = server.job_log(project_id, build_id).await;
    assert!(trace.contains("$ make\n"), "{trace}");
    assert!(trace.contains("phase Script done"), "{trace}");

    // The archive downloads through the user API and holds the file.
    let archive = server
        .http
        .get(server.api(&format!("projects/{project_id}/jobs/{build_id}/artifacts")))
        .header("PRIVATE-TOKEN", &server.admin)
        .send()
        .await
        .expect("artifacts");
    assert_eq!(archive.status(), StatusCode::OK);
    let bytes = archive.bytes().await.expect("archive");
    assert!(bytes.starts_with(b"PK"), "a zip archive");

    // The pipeline advanced: test is pending now.
    let jobs = server.pipeline_jobs(project_id, pipeline_id).await;
    let test = jobs.iter().find(|j| j["name"] == "test").expect("test job");
    assert_eq!(test["status"], "pending", "{jobs:?}");
    let test_id = test["id"].as_i64().expect("id");

    // test: downloads build's artifact as its dependency, then succeeds.
    let got = runner
        .request_job(|job| async move { Ok(Handler { job }) })
        .await
        .expect("request a job");
    assert!(got, "the test job is handed out");
    runner.drain().await;
    wait_for_job_status(&server, project_id, test_id, "success").await;
    let trace = server.job_log(project_id, test_id).await;
    assert!(
        trace.contains("dependency build gave: built by the collabora runner"),
        "{trace}"
    );

    let (status, pipeline) = server
        .admin(
            Method::GET,
            &format!("projects/{project_id}/pipelines/{pipeline_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pipeline["status"], "success", "{pipeline}");
}
