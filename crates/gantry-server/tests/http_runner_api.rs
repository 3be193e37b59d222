//! Runner API protocol details over real HTTP (`runner-api.md`): legacy registration and
//! verify, the `202` accept protocol of final updates (§4.4), cancellation through
//! `Job-Status` (§4.5), dependency artifact downloads (§6.4), and exactly-once
//! assignment under concurrent job requests.

use crate::http_support;

use std::collections::HashSet;
use std::time::Duration;

use http_support::{Options, Repo, TWO_STAGES, TestServer, expect_client_error};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_registration_verify_and_unregister() {
    let server = TestServer::start().await;
    let registered = server
        .http
        .post(server.api("runners"))
        .json(&json!({ "token": server.registration, "description": "legacy", "tag_list": "linux, docker", "run_untagged": false, "locked": true, "info": { "name": "gitlab-runner" } }))
        .send()
        .await
        .expect("register");
    assert_eq!(registered.status(), StatusCode::CREATED);
    assert_eq!(
        header(&registered, "content-type").as_deref(),
        Some("application/json")
    );
    let body: Value = registered.json().await.expect("JSON");
    let token = body["token"].as_str().expect("token").to_owned();
    assert!(token.starts_with("glrtr-"), "{token}");
    assert_eq!(body["token_expires_at"], Value::Null);

    let verified = server
        .http
        .post(server.api("runners/verify"))
        .json(&json!({ "token": token, "system_id": "s_0123456789ab" }))
        .send()
        .await
        .expect("verify");
    assert_eq!(verified.status(), StatusCode::OK);
    assert_eq!(
        header(&verified, "content-type").as_deref(),
        Some("application/json")
    );
    let verified: Value = verified.json().await.expect("JSON");
    assert_eq!(verified["id"], body["id"]);

    let (status, runner) = server
        .admin(Method::GET, &format!("runners/{}", body["id"]), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(runner["tag_list"], json!(["linux", "docker"]));
    assert_eq!(runner["run_untagged"], false);

    // No tags and no untagged jobs: Rails' validation error.
    let invalid = server
        .http
        .post(server.api("runners"))
        .json(&json!({ "token": server.registration, "run_untagged": false }))
        .send()
        .await
        .expect("register");
    assert_eq!(
        expect_client_error(invalid, "no tags").await.0,
        StatusCode::BAD_REQUEST
    );

    let deleted = server
        .http
        .delete(server.api("runners"))
        .json(&json!({ "token": token }))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let gone = server
        .http
        .post(server.api("runners/verify"))
        .json(&json!({ "token": token }))
        .send()
        .await
        .expect("verify");
    assert_eq!(
        expect_client_error(gone, "deleted runner").await.0,
        StatusCode::FORBIDDEN
    );
}

async fn put(server: &TestServer, job_id: i64, body: Value) -> reqwest::Response {
    server
        .http
        .put(server.api(&format!("jobs/{job_id}")))
        .json(&body)
        .send()
        .await
        .expect("update")
}

async fn patch(
    server: &TestServer,
    job_id: i64,
    token: &str,
    start: usize,
    data: &[u8],
) -> reqwest::Response {
    server
        .http
        .patch(server.api(&format!("jobs/{job_id}/trace?debug_trace=false")))
        .header("JOB-TOKEN", token)
        .header(
            "Content-Range",
            format!("{start}-{}", start + data.len() - 1),
        )
        .header("content-type", "text/plain")
        .body(data.to_vec())
        .send()
        .await
        .expect("patch")
}

/// A server whose project `demo` has one job (`build`), taken by a runner: the server,
/// the project's id, the job's id and its token.
async fn one_running_job() -> (TestServer, i64, i64, String) {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let project_id = server.create_project("demo", &repo).await["id"]
        .as_i64()
        .expect("id");
    server.create_pipeline(project_id, "main").await;
    let (_, runner) = server.create_runner(json!({})).await;
    let (job_id, token, _) = server.take_job(&runner).await;
    (server, project_id, job_id, token)
}

/// A runner's call proves its job token with one lookup at most: the HTTP gate's (a token
/// in the headers) is passed on to the handler, which would otherwise look it up again,
/// and a keep-alive with its token in the body (the acknowledgement first of all) is
/// checked by its own write and looks nothing up — unless that write matched nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_call_looks_its_job_token_up_once() {
    let (server, project_id, job_id, token) = one_running_job().await;
    let lookups = || server.coordinator.job_token_lookups();
    let before = lookups();
    let body = json!({ "token": token, "state": "running" });
    let ack = put(&server, job_id, body.clone()).await;
    assert_eq!(ack.status(), StatusCode::OK);
    assert_eq!(header(&ack, "job-status").as_deref(), Some("running"));
    assert_eq!(lookups() - before, 0, "the acknowledgement");
    let before = lookups();
    assert_eq!(
        patch(&server, job_id, &token, 0, b"hello").await.status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(lookups() - before, 1, "a trace patch");
    let before = lookups();
    let with_header = server
        .http
        .put(server.api(&format!("jobs/{job_id}")))
        .header("JOB-TOKEN", &token)
        .json(&body)
        .send()
        .await
        .expect("update");
    assert_eq!(with_header.status(), StatusCode::OK);
    assert_eq!(
        lookups() - before,
        1,
        "an update with its token in a header too"
    );
    // Within a second of the last contact the write matches nothing (nothing to record)
    // and the token is looked up instead.
    let before = lookups();
    let again = put(&server, job_id, body.clone()).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert!(lookups() - before <= 1, "a keep-alive right after another");

    // A token that is not the job's: refused as before.
    let wrong = json!({ "token": format!("{token}x"), "state": "running" });
    assert_eq!(
        put(&server, job_id, wrong).await.status(),
        StatusCode::FORBIDDEN
    );
    // The final update of a job this server handed out, its log complete: checked where
    // the job's end is stored.
    let before = lookups();
    let done = json!({ "token": token, "state": "success", "output": { "bytesize": 5 } });
    let done = put(&server, job_id, done).await;
    assert_eq!(done.status(), StatusCode::OK);
    assert_eq!(header(&done, "job-status").as_deref(), Some("success"));
    // (With shared blobs, `GANTRY_TEST_BLOBS=s3`, the log's size is in the database and
    // the final update goes the checked way: one lookup.)
    let checked =
        u64::from(std::env::var(gantry_server::testing::TEST_BLOBS).as_deref() == Ok("s3"));
    assert_eq!(lookups() - before, checked, "the final update");
    assert_eq!(server.job(project_id, job_id).await["status"], "success");
    // The token of the ended job: refused, with the job's status.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let late = put(&server, job_id, body).await;
    assert_eq!(late.status(), StatusCode::FORBIDDEN);
    assert_eq!(header(&late, "job-status").as_deref(), Some("success"));
}

/// A runner's log patches of a job this server handed out read no job row beyond their
/// token check: the log's committed size is the one the assignment returned, then the
/// one each append committed. A patch at another offset reads the store for its `416`.
/// (With shared blobs, `GANTRY_TEST_BLOBS=s3`, logs are in the database and each patch
/// reads its size there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_patch_reads_the_log_size_kept_since_the_assignment() {
    let (server, _, job_id, token) = one_running_job().await;
    let reads = || server.coordinator.trace_state_reads();
    let per_patch =
        u64::from(std::env::var(gantry_server::testing::TEST_BLOBS).as_deref() == Ok("s3"));
    let before = reads();
    for (offset, part) in [(0, &b"hello "[..]), (6, b"world")] {
        assert_eq!(
            patch(&server, job_id, &token, offset, part).await.status(),
            StatusCode::ACCEPTED
        );
    }
    assert_eq!(reads() - before, 2 * per_patch, "two patches in sequence");
    let wrong = patch(&server, job_id, &token, 3, b"again").await;
    assert_eq!(wrong.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(header(&wrong, "range").as_deref(), Some("0-11"));
    assert_eq!(
        reads() - before,
        2 * per_patch + 1,
        "a patch at another offset"
    );
    assert_eq!(
        patch(&server, job_id, &token, 11, b"!").await.status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(reads() - before, 3 * per_patch + 1);
    assert_eq!(
        server
            .coordinator
            .traces()
            .trace(job_id)
            .await
            .expect("log"),
        b"hello world!"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_update_waits_for_the_whole_trace() {
    let (server, project_id, job_id, token) = one_running_job().await;

    let running = put(
        &server,
        job_id,
        json!({ "token": token, "state": "running" }),
    )
    .await;
    assert_eq!(running.status(), StatusCode::OK);
    assert_eq!(header(&running, "job-status").as_deref(), Some("running"));

    assert_eq!(
        patch(&server, job_id, &token, 0, b"hello").await.status(),
        StatusCode::ACCEPTED
    );
    // The runner produced 11 bytes but only 5 arrived: not final yet.
    let final_update = json!({ "token": token, "state": "success", "output": { "checksum": "crc32:0d4a1185", "bytesize": 11 } });
    let early = put(&server, job_id, final_update.clone()).await;
    assert_eq!(early.status(), StatusCode::ACCEPTED);
    assert_eq!(
        header(&early, "x-gitlab-trace-update-interval").as_deref(),
        Some("1")
    );
    assert_eq!(header(&early, "job-status").as_deref(), Some("running"));
    assert_eq!(server.job(project_id, job_id).await["status"], "running");

    assert_eq!(
        patch(&server, job_id, &token, 5, b" world").await.status(),
        StatusCode::ACCEPTED
    );
    let done = put(&server, job_id, final_update).await;
    assert_eq!(done.status(), StatusCode::OK);
    assert_eq!(header(&done, "job-status").as_deref(), Some("success"));
    assert_eq!(server.job(project_id, job_id).await["status"], "success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_job_is_told_through_job_status() {
    let (server, project_id, job_id, token) = one_running_job().await;

    let (status, job) = server
        .admin(
            Method::POST,
            &format!("projects/{project_id}/jobs/{job_id}/cancel"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        job["status"], "canceled",
        "no graceful cancel advertised: hard cancel"
    );

    let response = patch(&server, job_id, &token, 0, b"still going\n").await;
    assert_eq!(header(&response, "job-status").as_deref(), Some("canceled"));
    assert_eq!(
        expect_client_error(response, "trace of a canceled job")
            .await
            .0,
        StatusCode::FORBIDDEN
    );
    let response = put(
        &server,
        job_id,
        json!({ "token": token, "state": "failed", "failure_reason": "script_failure" }),
    )
    .await;
    assert_eq!(header(&response, "job-status").as_deref(), Some("canceled"));
    assert_eq!(
        expect_client_error(response, "update of a canceled job")
            .await
            .0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dependent_jobs_download_artifacts_with_their_own_token() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", TWO_STAGES)]);
    let project_id = server.create_project("demo", &repo).await["id"]
        .as_i64()
        .expect("id");
    server.create_pipeline(project_id, "main").await;
    let (_, runner) = server.create_runner(json!({})).await;
    let (build_id, build_token, payload) = server.take_job(&runner).await;
    assert_eq!(payload["artifacts"][0]["artifact_type"], "archive");

    // Several of the coordinator's write and read chunks, streamed both ways.
    let archive: Vec<u8> = (0..(600u32 << 10) + 7)
        .map(|i| (i * 31 % 251) as u8)
        .collect();
    let uploaded = server
        .http
        .post(server.api(&format!(
            "jobs/{build_id}/artifacts?artifact_format=zip&artifact_type=archive&expire_in=1+week"
        )))
        .header("JOB-TOKEN", &build_token)
        .multipart(Form::new().part(
            "file",
            Part::bytes(archive.clone()).file_name("artifacts.zip"),
        ))
        .send()
        .await
        .expect("upload");
    assert_eq!(uploaded.status(), StatusCode::CREATED);
    let done = put(
        &server,
        build_id,
        json!({ "token": build_token, "state": "success" }),
    )
    .await;
    assert_eq!(done.status(), StatusCode::OK);

    let (test_id, test_token, payload) = server.take_job(&runner).await;
    let dependency = &payload["dependencies"][0];
    assert_eq!(dependency["id"], build_id);
    assert_eq!(dependency["artifacts_file"]["filename"], "artifacts.zip");
    assert_eq!(dependency["artifacts_file"]["size"], archive.len());
    let downloaded = server
        .http
        .get(server.api(&format!("jobs/{build_id}/artifacts?direct_download=true")))
        .header("JOB-TOKEN", dependency["token"].as_str().expect("token"))
        .send()
        .await
        .expect("download");
    assert_eq!(downloaded.status(), StatusCode::OK);
    assert_eq!(downloaded.content_length(), Some(archive.len() as u64));
    assert!(downloaded.bytes().await.expect("bytes").to_vec() == archive);

    // The finished build job's own token is revoked.
    let stale = server
        .http
        .get(server.api(&format!("jobs/{build_id}/artifacts")))
        .header("JOB-TOKEN", &build_token)
        .send()
        .await
        .expect("download");
    assert_eq!(
        expect_client_error(stale, "revoked token").await.0,
        StatusCode::FORBIDDEN
    );
    let none = server
        .http
        .get(server.api(&format!("jobs/{test_id}/artifacts")))
        .header("JOB-TOKEN", &test_token)
        .send()
        .await
        .expect("download");
    assert_eq!(
        expect_client_error(none, "no archive").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_get_each_job_exactly_once() {
    let server = TestServer::start_with(Options {
        long_poll: Duration::from_millis(500),
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "build:\n  parallel: 30\n  script: [make]\n",
    )]);
    let project_id = server.create_project("demo", &repo).await["id"]
        .as_i64()
        .expect("id");
    server.create_pipeline(project_id, "main").await;
    let mut runners = Vec::new();
    for _ in 0..8 {
        runners.push(server.create_runner(json!({})).await.1);
    }
    let mut tasks = Vec::new();
    for runner in runners {
        let http = server.http.clone();
        let url = server.api("jobs/request");
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let response = http
                    .post(&url)
                    .json(&json!({ "token": runner }))
                    .send()
                    .await
                    .expect("request");
                match response.status() {
                    StatusCode::CREATED => {
                        let payload: Value = response.json().await.expect("payload");
                        got.push(payload["id"].as_i64().expect("id"));
                    }
                    StatusCode::NO_CONTENT => return got,
                    other => panic!("unexpected {other}"),
                }
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("task"));
    }
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 30, "every job handed out: {all:?}");
    assert_eq!(unique.len(), 30, "no job handed out twice: {all:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_runner_is_asked_to_cancel_then_finishes() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  script: [make]\n")]);
    let project_id = server.create_project("demo", &repo).await["id"]
        .as_i64()
        .expect("id");
    server.create_pipeline(project_id, "main").await;
    let (_, runner) = server.create_runner(json!({})).await;
    let response = server
        .http
        .post(server.api("jobs/request"))
        .json(&json!({ "token": runner, "info": { "features": { "cancel_gracefully": true, "refspecs": true } } }))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::CREATED);
    let payload: Value = response.json().await.expect("payload");
    let (job_id, token) = (
        payload["id"].as_i64().expect("id"),
        payload["token"].as_str().expect("token").to_owned(),
    );

    let (_, job) = server
        .admin(
            Method::POST,
            &format!("projects/{project_id}/jobs/{job_id}/cancel"),
            None,
        )
        .await;
    assert_eq!(job["status"], "canceling");
    let response = patch(&server, job_id, &token, 0, b"cleaning up\n").await;
    assert_eq!(
        response.status(),
        StatusCode::ACCEPTED,
        "after_script output still arrives"
    );
    assert_eq!(
        header(&response, "job-status").as_deref(),
        Some("canceling")
    );
    let response = put(
        &server,
        job_id,
        json!({ "token": token, "state": "running" }),
    )
    .await;
    assert_eq!(
        header(&response, "job-status").as_deref(),
        Some("canceling")
    );
    let response = put(
        &server,
        job_id,
        json!({ "token": token, "state": "failed", "failure_reason": "unknown_failure" }),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "job-status").as_deref(), Some("canceled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_api_takes_form_parameters_like_gitlab() {
    let server = TestServer::start().await;
    let created = server
        .http
        .post(server.api("user/runners"))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&[
            ("runner_type", "instance_type"),
            ("tag_list", "linux,docker"),
            ("run_untagged", "false"),
        ])
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), StatusCode::CREATED);
    let body: Value = created.json().await.expect("JSON");
    let (_, runner) = server
        .admin(Method::GET, &format!("runners/{}", body["id"]), None)
        .await;
    assert_eq!(runner["tag_list"], json!(["linux", "docker"]));
    assert_eq!(runner["run_untagged"], false);
    let bad = server
        .http
        .post(server.api("user/runners"))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&[
            ("runner_type", "instance_type"),
            ("run_untagged", "sometimes"),
        ])
        .send()
        .await
        .expect("create");
    assert_eq!(
        expect_client_error(bad, "bad boolean").await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_jobs_are_listed_as_bridges_with_their_downstream_pipeline() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[
        (
            ".gitlab-ci.yml",
            "build: {script: [make]}\nchild:\n  trigger:\n    include: child.yml\n",
        ),
        ("child.yml", "inner: {script: [echo]}\n"),
    ]);
    let project = server.create_project("bridges", &repo).await["id"]
        .as_i64()
        .unwrap();
    let pipeline = server.create_pipeline(project, "main").await["id"]
        .as_i64()
        .unwrap();
    let names = |list: &[Value]| -> Vec<String> {
        list.iter()
            .map(|j| j["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(
        names(&server.pipeline_jobs(project, pipeline).await),
        ["build"]
    );
    let path = format!("projects/{project}/pipelines/{pipeline}/bridges");
    let start = std::time::Instant::now();
    let bridge = loop {
        let (status, body) = server.admin(Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let list = body.as_array().cloned().unwrap_or_default();
        assert_eq!(names(&list), ["child"]);
        if list[0]["status"] == "success" {
            break list[0].clone();
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let child = bridge["downstream_pipeline"]["id"]
        .as_i64()
        .expect("downstream_pipeline");
    let (status, body) = server
        .admin(
            Method::GET,
            &format!("projects/{project}/pipelines/{child}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["source"], "parent_pipeline");
    assert_eq!(body["parent_job_id"], bridge["id"]);
    assert_eq!(
        names(&server.pipeline_jobs(project, child).await),
        ["inner"]
    );
}

/// A JUnit report as gitlab-runner uploads it: one gzip member per file.
fn junit_gzip(files: &[&str]) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::new();
    for file in files {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(file.as_bytes()).expect("gzip");
        out.extend(e.finish().expect("gzip"));
    }
    out
}

/// Uploads `files` as the job's JUnit report, then ends the job `state`.
async fn report_and_end(
    server: &TestServer,
    job_id: i64,
    token: &str,
    files: &[&str],
    state: &str,
) {
    let uploaded = server
        .http
        .post(server.api(&format!(
            "jobs/{job_id}/artifacts?artifact_format=gzip&artifact_type=junit"
        )))
        .header("JOB-TOKEN", token)
        .multipart(Form::new().part(
            "file",
            Part::bytes(junit_gzip(files)).file_name("junit.xml.gz"),
        ))
        .send()
        .await
        .expect("upload");
    assert_eq!(uploaded.status(), StatusCode::CREATED);
    let mut body = json!({ "token": token, "state": state });
    if state == "failed" {
        body["failure_reason"] = json!("script_failure");
        body["exit_code"] = json!(1);
    }
    assert_eq!(put(server, job_id, body).await.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_test_report_reads_the_jobs_junit_reports() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", TWO_STAGES)]);
    let project_id = server.create_project("demo", &repo).await["id"]
        .as_i64()
        .expect("id");
    let pipeline_id = server.create_pipeline(project_id, "main").await["id"]
        .as_i64()
        .expect("id");
    let (_, runner) = server.create_runner(json!({})).await;
    let unit = r#"<testsuites><testsuite name="unit"><testcase classname="a" name="passes" time="0.5"/><testcase classname="a" name="fails" time="0.25" file="a_test.rs"><failure message="expected 1">left: 2</failure><system-out>out</system-out></testcase></testsuite></testsuites>"#;

    // build fails with two files; its retry (which replaces its report) succeeds with one.
    let (build, token, _) = server.take_job(&runner).await;
    let more = r#"<?xml version="1.0"?><testsuite name="more"><testcase classname="b" name="skips"><skipped/></testcase></testsuite>"#;
    report_and_end(&server, build, &token, &[unit, more], "failed").await;
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{project_id}/jobs/{build}/retry"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (retry, token, _) = server.take_job(&runner).await;
    report_and_end(&server, retry, &token, &[unit], "success").await;
    // test's report is not XML.
    let (test, token, _) = server.take_job(&runner).await;
    report_and_end(
        &server,
        test,
        &token,
        &["<testsuite><testcase name=\"broken\""],
        "success",
    )
    .await;

    let (status, full) = server
        .admin(
            Method::GET,
            &format!("projects/{project_id}/pipelines/{pipeline_id}/test_report"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, summary) = server
        .admin(
            Method::GET,
            &format!("projects/{project_id}/pipelines/{pipeline_id}/test_report_summary"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // Job ids differ from run to run only in value; name them.
    let mut shown = json!({ "test_report": full, "test_report_summary": summary });
    for key in ["test_report", "test_report_summary"] {
        for suite in shown[key]["test_suites"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            suite["build_ids"] = json!(suite["build_ids"].as_array().map_or(0, Vec::len));
        }
    }
    insta::assert_json_snapshot!(shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_api_streams_a_jobs_log_as_committed() {
    let (server, project_id, job_id, token) = one_running_job().await;
    let log = |server: &TestServer| {
        let request = server
            .http
            .get(server.api(&format!("projects/{project_id}/jobs/{job_id}/trace")))
            .header("PRIVATE-TOKEN", &server.admin)
            .send();
        async move {
            let response = request.await.expect("trace");
            assert_eq!(response.status(), StatusCode::OK);
            response.bytes().await.expect("body").to_vec()
        }
    };
    assert!(log(&server).await.is_empty(), "no log yet");
    // Larger than the chunks a download is read in, in two patches.
    let text: Vec<u8> = (0..700 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
    let (first, second) = text.split_at(400 * 1024);
    assert_eq!(
        patch(&server, job_id, &token, 0, first).await.status(),
        StatusCode::ACCEPTED
    );
    assert!(log(&server).await == first);
    assert_eq!(
        patch(&server, job_id, &token, first.len(), second)
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    // A patch at a wrong offset is refused and adds nothing.
    assert_eq!(
        patch(&server, job_id, &token, 5, b"stray").await.status(),
        StatusCode::RANGE_NOT_SATISFIABLE
    );
    assert!(log(&server).await == text);
}

/// GitLab's Grape reads the Runner API's parameters from a form as well as from JSON,
/// matches its routes with a trailing slash, and treats `state` of `PUT /jobs/:id` as
/// optional: a runner written against GitLab that relies on any of these works unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_api_takes_forms_trailing_slashes_and_updates_without_state() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  tags: [py]\n  script: [make]\n")]);
    let project_id = server.create_project("demo", &repo).await["id"]
        .as_i64()
        .expect("id");
    server.create_pipeline(project_id, "main").await;

    // Register with a form (as Python's `requests.post(data=…)` sends it) at `runners/`.
    let form = [
        ("token", server.registration.as_str()),
        ("description", "python runner"),
        ("tag_list", "py,linux"),
        ("run_untagged", "False"),
        ("info[name]", "gitlab-python-runner"),
        ("info[features][trace_checksum]", "true"),
    ];
    let registered = server
        .http
        .post(server.api("runners/"))
        .form(&form)
        .send()
        .await
        .expect("register");
    assert_eq!(registered.status(), StatusCode::CREATED);
    let body: Value = registered.json().await.expect("JSON");
    let token = body["token"].as_str().expect("token").to_owned();
    let (_, runner) = server
        .admin(Method::GET, &format!("runners/{}", body["id"]), None)
        .await;
    assert_eq!(runner["description"], "python runner");
    assert_eq!(runner["tag_list"], json!(["py", "linux"]));
    assert_eq!(runner["run_untagged"], false);

    // A bad form value names its key.
    let bad = server
        .http
        .post(server.api("runners"))
        .form(&[("token", server.registration.as_str()), ("locked", "maybe")])
        .send()
        .await
        .expect("register");
    let (status, error) = expect_client_error(bad, "a form with a bad boolean").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|e| e.contains("form parameter `locked`")),
        "{error}"
    );

    let verified = server
        .http
        .post(server.api("runners/verify/"))
        .form(&[("token", token.as_str())])
        .send()
        .await
        .expect("verify");
    assert_eq!(verified.status(), StatusCode::OK);

    // A job request as a form, at `jobs/request/`.
    let taken = server
        .http
        .post(server.api("jobs/request/"))
        .form(&[("token", token.as_str()), ("info[name]", "py")])
        .send()
        .await
        .expect("job request");
    assert_eq!(taken.status(), StatusCode::CREATED);
    let payload: Value = taken.json().await.expect("payload");
    let job_id = payload["id"].as_i64().expect("id");
    let job_token = payload["token"].as_str().expect("token").to_owned();

    // Without `state`: a keep-alive that acknowledges the job, which keeps running.
    let keep_alive = put(&server, job_id, json!({ "token": job_token })).await;
    assert_eq!(keep_alive.status(), StatusCode::OK);
    assert_eq!(
        header(&keep_alive, "job-status").as_deref(),
        Some("running")
    );
    let only_checksum = server
        .http
        .put(server.api(&format!("jobs/{job_id}/")))
        .form(&[
            ("token", job_token.as_str()),
            ("output[checksum]", "crc32:00000000"),
            ("exit_code", "0"),
        ])
        .send()
        .await
        .expect("update");
    assert_eq!(only_checksum.status(), StatusCode::OK);
    assert_eq!(server.job(project_id, job_id).await["status"], "running");

    assert_eq!(
        patch(&server, job_id, &job_token, 0, b"hello\n")
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    // The whole log in `trace`, as GitLab 13 read it: what extends the stored log is
    // appended; a log that does not begin with it changes nothing.
    for (trace, expected) in [
        ("hello\nworld\n", "hello\nworld\n"),
        ("another log\n", "hello\nworld\n"),
        ("hello\n", "hello\nworld\n"),
    ] {
        let update = put(
            &server,
            job_id,
            json!({ "token": job_token, "trace": trace }),
        )
        .await;
        assert_eq!(update.status(), StatusCode::OK);
        let log = server
            .http
            .get(server.api(&format!("projects/{project_id}/jobs/{job_id}/trace")))
            .header("PRIVATE-TOKEN", &server.admin)
            .send()
            .await
            .expect("log")
            .text()
            .await
            .expect("text");
        assert_eq!(log, expected, "after a trace of {trace:?}");
    }
    let done = server
        .http
        .put(server.api(&format!("jobs/{job_id}")))
        .form(&[
            ("token", job_token.as_str()),
            ("state", "failed"),
            ("failure_reason", "script_failure"),
            ("exit_code", "3"),
        ])
        .send()
        .await
        .expect("final update");
    assert_eq!(done.status(), StatusCode::OK);
    let job = server.job(project_id, job_id).await;
    assert_eq!(job["status"], "failed");
    assert_eq!(job["failure_reason"], "script_failure");

    // The user API takes a trailing slash too; the web UI and git paths are untouched.
    let (status, projects) = server.admin(Method::GET, "projects/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(projects.as_array().map(Vec::len), Some(1));

    let unregistered = server
        .http
        .delete(server.api("runners/"))
        .form(&[("token", token.as_str())])
        .send()
        .await
        .expect("unregister");
    assert_eq!(unregistered.status(), StatusCode::NO_CONTENT);
}
