//! Malformed requests over real HTTP: bad JSON, wrong types, oversized bodies, wrong
//! `Content-Range`, bad multipart, unknown routes. Each gets a 4xx with a JSON error
//! (never a 5xx, a panic or a dropped connection), and nothing is half-written.
//!
//! Hostile and stalled clients at the connection layer (`http/edge.rs`, `http/gate.rs`):
//! unfinished heads, stalled bodies, idle connections and bodies sent without a
//! credential are answered with JSON and closed, connection caps hold, and the admin is
//! answered meanwhile.

#![allow(clippy::panic)]

use crate::http_support;

use http_support::{Options, Repo, TestServer, expect_client_error};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, StatusCode};
use serde_json::json;

const LIMIT: u64 = 64 * 1024;
const ONE_JOB: &str = "build:\n  script: [make]\n  artifacts:\n    paths: [out]\n";

struct Fixture {
    server: TestServer,
    project_id: i64,
    runner: String,
    job_id: i64,
    job_token: String,
    _repo: Repo,
}

async fn fixture() -> Fixture {
    fixture_with(LIMIT).await
}

/// [`fixture`] with another limit on a job's whole log.
async fn fixture_with(trace_limit: u64) -> Fixture {
    fixture_from(Options {
        trace_limit,
        artifact_limit: LIMIT,
        ..Options::default()
    })
    .await
}

/// A server started with `options`, a project, a runner and its running job.
async fn fixture_from(options: Options) -> Fixture {
    let server = TestServer::start_with(options).await;
    let repo = Repo::new(&[(".gitlab-ci.yml", ONE_JOB)]);
    let project = server.create_project("demo", &repo).await;
    let project_id = project["id"].as_i64().expect("id");
    server.create_pipeline(project_id, "main").await;
    let (_, runner) = server.create_runner(json!({})).await;
    let (job_id, job_token, _) = server.take_job(&runner).await;
    Fixture {
        server,
        project_id,
        runner,
        job_id,
        job_token,
        _repo: repo,
    }
}

async fn send_raw(
    server: &TestServer,
    method: Method,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> reqwest::Response {
    server
        .http
        .request(method, server.api(path))
        .header("content-type", content_type)
        .header("PRIVATE-TOKEN", &server.admin)
        .body(body)
        .send()
        .await
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_json_is_400_with_a_json_error() {
    let f = fixture().await;
    let s = &f.server;
    let token = &f.job_token;
    let cases: Vec<(Method, String, String)> = vec![
        (Method::POST, "jobs/request".into(), "{not json".into()),
        (
            Method::POST,
            "jobs/request".into(),
            r#"{"token": 5}"#.into(),
        ),
        (Method::POST, "jobs/request".into(), "[1, 2".into()),
        (Method::POST, "runners".into(), r#"{"token": ["x"]}"#.into()),
        (Method::POST, "runners/verify".into(), "\u{0}\u{1}".into()),
        (Method::DELETE, "runners".into(), "{".into()),
        (Method::PUT, format!("jobs/{}", f.job_id), "{".into()),
        (
            Method::PUT,
            format!("jobs/{}", f.job_id),
            format!(r#"{{"token": "{token}", "state": "exploded"}}"#),
        ),
        // (`state` is optional, as in GitLab's API definition: without it the update is
        // a keep-alive; `http_runner_api` tests that.)
        (
            Method::PUT,
            format!("jobs/{}", f.job_id),
            format!(r#"{{"token": "{token}", "state": 7}}"#),
        ),
        (
            Method::PUT,
            format!("jobs/{}", f.job_id),
            format!(r#"{{"token": "{token}", "state": "failed", "exit_code": "one"}}"#),
        ),
        (Method::POST, "projects".into(), "{\"name\": }".into()),
        (
            Method::POST,
            "projects".into(),
            r#"{"name": 1, "repo_url": "/tmp"}"#.into(),
        ),
        (
            Method::POST,
            format!("projects/{}/pipeline", f.project_id),
            r#"{"ref": "main", "variables": {"A": "b"}}"#.into(),
        ),
        (
            Method::POST,
            "user/runners".into(),
            r#"{"runner_type": "galaxy_type"}"#.into(),
        ),
        (
            Method::POST,
            "user/runners".into(),
            r#"{"runner_type": "instance_type", "tag_list": 7}"#.into(),
        ),
    ];
    for (method, path, body) in cases {
        let response = send_raw(
            s,
            method.clone(),
            &path,
            "application/json",
            body.as_bytes().to_vec(),
        )
        .await;
        let (status, _) = expect_client_error(response, &format!("{method} {path} {body:?}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path} {body:?}");
    }
    // The job is untouched by the bad updates.
    let job = s.job(f.project_id, f.job_id).await;
    assert_eq!(job["status"], "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_chunked_trace_patch_is_413_not_a_reset() {
    // A job whose whole log may be larger than one patch (2 MiB), so the patch limit is
    // what a 3 MiB patch meets.
    let f = fixture_with(8 * 1024 * 1024).await;
    let s = &f.server;
    // A 3 MiB patch sent chunked (no Content-Length to refuse it early): read and dropped
    // past the limit, then the 413 — several times, as a reset would show under load.
    for round in 0..3 {
        let chunks = (0..48).map(|_| Ok::<_, std::io::Error>(vec![b'c'; 64 * 1024]));
        let response = s
            .http
            .patch(s.api(&format!("jobs/{}/trace", f.job_id)))
            .header("JOB-TOKEN", &f.job_token)
            .header("Content-Range", "0-3145727")
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .unwrap_or_else(|e| panic!("chunked patch {round}: {e}"));
        assert_eq!(
            expect_client_error(response, "big chunked patch").await.0,
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }

    // Nothing of the refused patches was kept.
    let log = s
        .http
        .get(s.api(&format!(
            "projects/{}/jobs/{}/trace",
            f.project_id, f.job_id
        )))
        .header("PRIVATE-TOKEN", &s.admin)
        .send()
        .await
        .expect("trace");
    assert_eq!(log.bytes().await.expect("body").len(), 0);
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let f = fixture().await;
    let s = &f.server;
    // Workhorse's 32 KiB limit on job requests.
    let big = format!(
        r#"{{"token": "{}", "info": {{"name": "{}"}}}}"#,
        f.runner,
        "x".repeat(40 * 1024)
    );
    let response = send_raw(
        s,
        Method::POST,
        "jobs/request",
        "application/json",
        big.into_bytes(),
    )
    .await;
    assert_eq!(
        expect_client_error(response, "big job request").await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );

    // A user API body over 1 MiB.
    let big = format!(r#"{{"name": "{}"}}"#, "x".repeat(2 * 1024 * 1024));
    let response = send_raw(
        s,
        Method::POST,
        "projects",
        "application/json",
        big.into_bytes(),
    )
    .await;
    assert_eq!(
        expect_client_error(response, "big project").await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );

    // One trace patch over 2 MiB.
    let response = s
        .http
        .patch(s.api(&format!("jobs/{}/trace", f.job_id)))
        .header("JOB-TOKEN", &f.job_token)
        .header("Content-Range", format!("0-{}", 3 * 1024 * 1024 - 1))
        .body(vec![b'a'; 3 * 1024 * 1024])
        .send()
        .await
        .expect("patch");
    assert_eq!(
        expect_client_error(response, "big patch").await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );

    // An artifact well over the limit: the rest of the body is read and dropped (up to
    // `OVERSIZE_DRAIN` more), then the answer is 413, never a connection reset.
    let form = Form::new().part(
        "file",
        Part::bytes(vec![0u8; 3 * 1024 * 1024]).file_name("big.zip"),
    );
    let response = s
        .http
        .post(s.api(&format!("jobs/{}/artifacts", f.job_id)))
        .header("JOB-TOKEN", &f.job_token)
        .multipart(form)
        .send()
        .await
        .expect("upload");
    assert_eq!(
        expect_client_error(response, "big artifact").await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );

    // Over the artifact limit but within the body slack: the coordinator's limit.
    let form = Form::new().part(
        "file",
        Part::bytes(vec![0u8; LIMIT as usize + 1]).file_name("big.zip"),
    );
    let response = s
        .http
        .post(s.api(&format!("jobs/{}/artifacts", f.job_id)))
        .header("JOB-TOKEN", &f.job_token)
        .multipart(form)
        .send()
        .await
        .expect("upload");
    assert_eq!(
        expect_client_error(response, "artifact over limit").await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );

    let job = s.job(f.project_id, f.job_id).await;
    assert_eq!(
        job["status"], "running",
        "oversized requests change nothing"
    );
    assert_eq!(job["artifacts_file"], serde_json::Value::Null);
    // Nothing of the refused uploads is left on disk.
    let staging = s.coordinator.blob_staging_dir().to_owned();
    let left: Vec<_> = std::fs::read_dir(&staging)
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in {}: {left:?}", staging.display());
}

async fn patch(f: &Fixture, range: Option<&str>, body: &[u8]) -> reqwest::Response {
    let mut request = f
        .server
        .http
        .patch(f.server.api(&format!("jobs/{}/trace", f.job_id)))
        .header("JOB-TOKEN", &f.job_token)
        .header("content-type", "text/plain")
        .body(body.to_vec());
    if let Some(range) = range {
        request = request.header("Content-Range", range);
    }
    request.send().await.expect("patch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_content_range_is_4xx_and_writes_nothing() {
    let f = fixture().await;
    let ok = patch(&f, Some("0-4"), b"hello").await;
    assert_eq!(ok.status(), StatusCode::ACCEPTED);
    assert_eq!(ok.headers()["range"], "0-5");
    assert_eq!(ok.headers()["job-status"], "running");
    assert!(ok.headers().contains_key("x-gitlab-trace-update-interval"));

    let missing = patch(&f, None, b"x").await;
    let (status, body) = expect_client_error(missing, "no Content-Range").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["message"], "400 Missing header Content-Range");

    for range in ["abc", "bytes 5-9", "-1-3", "99999999999999999999999-1", ""] {
        let response = patch(&f, Some(range), b"xyz").await;
        let (status, _) = expect_client_error(response, &format!("Content-Range {range:?}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{range:?}");
    }
    for (range, what) in [
        ("0-2", "rewrite from 0"),
        ("9-11", "a gap"),
        ("3-5", "an overlap"),
    ] {
        let response = patch(&f, Some(range), b"xyz").await;
        let range_header = response
            .headers()
            .get("range")
            .map(|v| v.to_str().unwrap_or("").to_owned());
        let (status, _) = expect_client_error(response, what).await;
        assert_eq!(status, StatusCode::RANGE_NOT_SATISFIABLE, "{what}");
        assert_eq!(
            range_header.as_deref(),
            Some("0-5"),
            "{what}: the runner resumes from the stored length"
        );
    }
    let ok = patch(&f, Some("5-10"), b" world").await;
    assert_eq!(ok.status(), StatusCode::ACCEPTED);
    assert_eq!(ok.headers()["range"], "0-11");

    let trace = f
        .server
        .coordinator
        .traces()
        .trace(f.job_id)
        .await
        .expect("trace");
    assert_eq!(trace, b"hello world", "rejected patches wrote nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_over_the_limit_fails_the_job_with_403() {
    let f = fixture().await;
    let chunk = vec![b'a'; 40 * 1024];
    assert_eq!(
        patch(&f, Some(&format!("0-{}", chunk.len() - 1)), &chunk)
            .await
            .status(),
        StatusCode::ACCEPTED
    );
    let response = patch(
        &f,
        Some(&format!("{}-{}", chunk.len(), 2 * chunk.len() - 1)),
        &chunk,
    )
    .await;
    let job_status = response
        .headers()
        .get("job-status")
        .map(|v| v.to_str().unwrap_or("").to_owned());
    let (status, _) = expect_client_error(response, "trace over the limit").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(job_status.as_deref(), Some("failed"));
    let job = f.server.job(f.project_id, f.job_id).await;
    assert_eq!(job["status"], "failed");
    assert_eq!(job["failure_reason"], "trace_size_exceeded");
}

async fn upload(f: &Fixture, query: &str, form: Form) -> reqwest::Response {
    f.server
        .http
        .post(f.server.api(&format!("jobs/{}/artifacts{query}", f.job_id)))
        .header("JOB-TOKEN", &f.job_token)
        .multipart(form)
        .send()
        .await
        .expect("upload")
}

fn file(name: &str) -> Part {
    Part::bytes(b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec())
        .file_name(name.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_artifact_uploads_are_400() {
    let f = fixture().await;
    let s = &f.server;
    let cases: Vec<(&str, Form, &str)> = vec![
        (
            "",
            Form::new().text("artifact_type", "archive"),
            "no file part",
        ),
        (
            "?artifact_type=spreadsheet",
            Form::new().part("file", file("a.zip")),
            "unknown type",
        ),
        (
            "?artifact_format=rar",
            Form::new().part("file", file("a.zip")),
            "unknown format",
        ),
        (
            "?artifact_type=junit&artifact_format=zip",
            Form::new().part("file", file("a.zip")),
            "type/format mismatch",
        ),
        (
            "",
            Form::new()
                .part("file", file("a.zip"))
                .text("expire_in", "soonish"),
            "bad expire_in",
        ),
        (
            "",
            Form::new()
                .part("file", file("a.zip"))
                .part("file", file("b.zip")),
            "two files",
        ),
        (
            "?artifact_type=dotenv&artifact_format=gzip",
            Form::new().part(
                "file",
                Part::bytes(b"not a dotenv".to_vec()).file_name("d.env"),
            ),
            "bad dotenv",
        ),
    ];
    for (query, form, what) in cases {
        let (status, _) = expect_client_error(upload(&f, query, form).await, what).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}");
    }
    // Not multipart at all.
    let response = s
        .http
        .post(s.api(&format!("jobs/{}/artifacts", f.job_id)))
        .header("JOB-TOKEN", &f.job_token)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("upload");
    expect_client_error(response, "not multipart").await;
    // A broken multipart body.
    let response = s
        .http
        .post(s.api(&format!("jobs/{}/artifacts", f.job_id)))
        .header("JOB-TOKEN", &f.job_token)
        .header("content-type", "multipart/form-data; boundary=XYZ")
        .body("--XYZ\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc")
        .send()
        .await
        .expect("upload");
    expect_client_error(response, "truncated multipart").await;

    let job = s.job(f.project_id, f.job_id).await;
    assert_eq!(job["artifacts"], json!([]), "no artifact was recorded");

    // Form fields work as well as the query string.
    let form = Form::new()
        .part("file", file("out.zip"))
        .text("artifact_type", "archive")
        .text("artifact_format", "zip")
        .text("expire_in", "1 week");
    assert_eq!(upload(&f, "", form).await.status(), StatusCode::CREATED);
    let job = s.job(f.project_id, f.job_id).await;
    assert_eq!(job["artifacts_file"]["filename"], "out.zip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_api_mistakes_are_4xx() {
    let f = fixture().await;
    let s = &f.server;
    let not_a_repo = tempfile::tempdir().expect("dir");
    let cases: Vec<(Method, String, Option<serde_json::Value>, StatusCode)> = vec![
        (
            Method::POST,
            "projects".into(),
            Some(json!({ "repo_url": "/tmp" })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "projects".into(),
            Some(json!({ "name": "x" })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "projects".into(),
            Some(json!({ "name": "../evil", "repo_url": f._repo.path() })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "projects".into(),
            Some(json!({ "name": "nogit", "repo_url": not_a_repo.path() })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "projects".into(),
            Some(json!({ "name": "demo", "repo_url": f._repo.path() })),
            StatusCode::CONFLICT,
        ),
        (
            Method::POST,
            format!("projects/{}/pipeline", f.project_id),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            format!("projects/{}/pipeline?ref=nope", f.project_id),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            format!("projects/{}/pipeline", f.project_id),
            Some(json!({ "ref": "main", "variables": [{ "key": "A B", "value": "x" }] })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "projects/999".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "projects/nobody%2Fnothing".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            format!("projects/{}/pipelines/abc", f.project_id),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            format!("projects/{}/pipelines/999", f.project_id),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            format!(
                "projects/{}/pipelines/1/jobs?include_retried=perhaps",
                f.project_id
            ),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            format!("projects/{}/jobs/999", f.project_id),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            format!("projects/{}/jobs/99999999999999999999999", f.project_id),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            format!("projects/{}/jobs/{}/artifacts", f.project_id, f.job_id),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            format!("projects/{}/jobs/{}/play", f.project_id, f.job_id),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            format!("projects/{}/jobs/{}/retry", f.project_id, f.job_id),
            None,
            StatusCode::FORBIDDEN,
        ),
        (
            Method::POST,
            "user/runners".into(),
            Some(json!({})),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "user/runners".into(),
            Some(json!({ "runner_type": "group_type", "group_id": 99999 })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "user/runners".into(),
            Some(json!({ "runner_type": "project_type" })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "user/runners".into(),
            Some(json!({ "runner_type": "project_type", "project_id": 999 })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "user/runners".into(),
            Some(json!({ "runner_type": "instance_type", "maximum_timeout": 10 })),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::DELETE,
            "runners/999".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "no/such/route".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::PATCH,
            "projects".into(),
            None,
            StatusCode::METHOD_NOT_ALLOWED,
        ),
    ];
    for (method, path, body, expected) in cases {
        let mut request = s
            .http
            .request(method.clone(), s.api(&path))
            .header("PRIVATE-TOKEN", &s.admin);
        if let Some(body) = &body {
            request = request.json(body);
        }
        let response = request.send().await.expect("request");
        let (status, error) = expect_client_error(response, &format!("{method} {path}")).await;
        assert_eq!(status, expected, "{method} {path}: {error}");
    }
    let not_api = s
        .http
        .get(format!("{}/favicon.ico", s.url))
        .send()
        .await
        .expect("request");
    expect_client_error(not_api, "a path outside the API").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_token_ends_with_the_job() {
    let f = fixture().await;
    let s = &f.server;
    let done = s
        .http
        .put(s.api(&format!("jobs/{}", f.job_id)))
        .json(&json!({ "token": f.job_token, "state": "success" }))
        .send()
        .await
        .expect("update");
    assert_eq!(done.status(), StatusCode::OK);
    assert_eq!(done.headers()["job-status"], "success");
    // The runner re-sends: 403 with the final Job-Status, so it stops.
    let again = s
        .http
        .put(s.api(&format!("jobs/{}", f.job_id)))
        .json(&json!({ "token": f.job_token, "state": "success" }))
        .send()
        .await
        .expect("update");
    assert_eq!(
        again
            .headers()
            .get("job-status")
            .map(|v| v.to_str().unwrap_or("")),
        Some("success")
    );
    assert_eq!(
        expect_client_error(again, "update after the end").await.0,
        StatusCode::FORBIDDEN
    );
    let late = patch(&f, Some("0-2"), b"abc").await;
    assert_eq!(
        expect_client_error(late, "trace after the end").await.0,
        StatusCode::FORBIDDEN
    );
    let nobody = s
        .http
        .put(s.api("jobs/424242"))
        .json(&json!({ "token": f.job_token, "state": "running" }))
        .send()
        .await
        .expect("update");
    assert_eq!(
        expect_client_error(nobody, "unknown job").await.0,
        StatusCode::NOT_FOUND
    );
}

/// Deterministic garbage (xorshift), so a failure reproduces.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = usize::try_from(self.next() % max as u64).unwrap_or(0);
        (0..len).map(|_| (self.next() & 0xff) as u8).collect()
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[usize::try_from(self.next() % items.len() as u64).unwrap_or(0)]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_every_route_is_never_a_5xx() {
    let f = fixture().await;
    let s = &f.server;
    let (job, project) = (f.job_id, f.project_id);
    let routes: Vec<(Method, String)> = vec![
        (Method::POST, "runners".into()),
        (Method::DELETE, "runners".into()),
        (Method::POST, "runners/verify".into()),
        (Method::DELETE, "runners/managers".into()),
        (Method::POST, "jobs/request".into()),
        (Method::PUT, format!("jobs/{job}")),
        (Method::PATCH, format!("jobs/{job}/trace")),
        (Method::POST, format!("jobs/{job}/artifacts")),
        (Method::GET, format!("jobs/{job}/artifacts")),
        (Method::POST, "projects".into()),
        (Method::POST, format!("projects/{project}/pipeline")),
        (Method::POST, format!("projects/{project}/jobs/{job}/play")),
        (Method::POST, "user/runners".into()),
        (Method::GET, format!("projects/{project}/pipelines/%00")),
        (Method::GET, "projects/%ff%fe".into()),
    ];
    let content_types = [
        "application/json",
        "text/plain",
        "multipart/form-data; boundary=x",
        "multipart/form-data",
        "application/x-www-form-urlencoded",
        "",
    ];
    let tokens = [
        f.job_token.as_str(),
        f.runner.as_str(),
        s.admin.as_str(),
        "",
        "\u{7f}",
    ];
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    for (method, path) in &routes {
        for _ in 0..12 {
            let mut body = noise.bytes(2048);
            if noise.next() % 3 == 0 {
                // Mostly-valid JSON with a wrong twist.
                body = format!(
                    r#"{{"token": "{}", "state": {}, "ref": [{}]}}"#,
                    noise.pick(&tokens),
                    noise.next() % 7,
                    noise.next()
                )
                .into_bytes();
            }
            let mut request = s.http.request(method.clone(), s.api(path)).body(body);
            let content_type = noise.pick(&content_types);
            if !content_type.is_empty() {
                request = request.header("content-type", content_type);
            }
            let token = noise.pick(&tokens);
            if let Ok(value) = reqwest::header::HeaderValue::from_str(token) {
                request = request
                    .header("JOB-TOKEN", value.clone())
                    .header("PRIVATE-TOKEN", value);
            }
            if noise.next() % 2 == 0 {
                request = request.header(
                    "Content-Range",
                    format!("{}-{}", noise.next() % 100, noise.next() % 100),
                );
            }
            let response = request.send().await.expect("the server answers");
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            assert!(
                !status.is_server_error(),
                "{method} {path}: {status} {text}"
            );
        }
    }
}

// ---- The connection layer: timeouts, caps, credentials before bodies ----

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A connection to `server` from the loopback address `127.0.0.<from>`.
async fn connect_from(server: &TestServer, from: u8) -> TcpStream {
    let addr: SocketAddr = server
        .url
        .trim_start_matches("http://")
        .parse()
        .expect("server address");
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, from)),
            0,
        ))
        .expect("bind a loopback source address");
    socket.connect(addr).await.expect("connect")
}

/// Everything the server sends until it closes the connection (at most `wait`).
async fn read_to_close(stream: &mut TcpStream, wait: Duration) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(wait, stream.read_to_end(&mut out)).await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past {wait:?}; it sent: {}",
        String::from_utf8_lossy(&out)
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code and JSON body of a raw HTTP/1.1 answer.
fn parse_answer(raw: &str) -> (u16, serde_json::Value) {
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw:?}"));
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no body in {raw:?}"));
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "not JSON: {raw}"
    );
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"));
    (status, body)
}

/// Raise the open-file limit of this test process to what `wanted` needs (sockets on
/// both ends live in it).
fn raise_open_files(wanted: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft < wanted {
        assert!(
            hard >= wanted,
            "this test needs {wanted} open files; the hard limit is {hard}"
        );
        setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).expect("setrlimit");
    }
}

fn edge_limits() -> gantry_server::http::Limits {
    gantry_server::http::Limits {
        header_timeout: Duration::from_secs(1),
        body_timeout: Duration::from_secs(1),
        keepalive_timeout: Duration::from_secs(1),
        ..gantry_server::http::Limits::default()
    }
}

/// Files in the blob store's staging directory (uploads not yet moved in): the local
/// store's, or object storage's (`GANTRY_TEST_BLOBS`).
fn staged_files(server: &TestServer) -> usize {
    [
        server.data_dir().join("blobs").join(".staging"),
        server.data_dir().join("blob-staging"),
    ]
    .iter()
    .map(|dir| {
        std::fs::read_dir(dir)
            .map(|entries| entries.count())
            .unwrap_or(0)
    })
    .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_stalled_anonymous_uploads_leave_the_admin_answered() {
    raise_open_files(8192);
    let f = fixture().await;
    let s = &f.server;
    // 1,000 connections that never finish their request head, from ten addresses.
    let mut slow = Vec::new();
    for i in 0..1000u16 {
        let mut stream = connect_from(s, 2 + u8::try_from(i % 10).unwrap_or(0)).await;
        stream
            .write_all(b"GET /api/v4/projects HTTP/1.1\r\nHost: gantry\r\nX-Slow: ")
            .await
            .expect("write");
        slow.push(stream);
    }
    // 100 anonymous uploads that announce 10 MiB and stall after 64 KiB: each is
    // refused before a byte of it is read, let alone staged.
    let mut uploads = Vec::new();
    for i in 0..100 {
        let mut stream = connect_from(s, 20).await;
        let job = if i % 2 == 0 { 999_999 } else { f.job_id };
        let head = format!(
            "POST /api/v4/jobs/{job}/artifacts?artifact_type=archive HTTP/1.1\r\nHost: gantry\r\n\
             Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 10485760\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        let mut part =
            b"--XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.zip\"\r\n\r\n"
                .to_vec();
        part.resize(64 * 1024, b'z');
        // The server may answer and close before the part is written.
        let _ = stream.write_all(&part).await;
        uploads.push((job, stream));
    }
    // The admin is answered within a second, every time.
    for round in 0..5 {
        let started = Instant::now();
        let (status, _) = s.admin(Method::GET, "projects", None).await;
        assert_eq!(status, StatusCode::OK);
        let (status, _) = s
            .admin(
                Method::GET,
                &format!("projects/{}/jobs", f.project_id),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let took = started.elapsed();
        eprintln!("admin round {round}: {took:?}");
        assert!(took < Duration::from_secs(1), "round {round}: {took:?}");
    }
    for (job, stream) in &mut uploads {
        let raw = read_to_close(stream, Duration::from_secs(5)).await;
        let (status, body) = parse_answer(&raw);
        let want = if *job == 999_999 { 404 } else { 403 };
        assert_eq!(status, want, "{body}");
    }
    assert_eq!(staged_files(s), 0, "an anonymous upload was staged");
    drop(slow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_heads_bodies_and_idle_connections_are_closed_with_json() {
    let server = TestServer::start_with(Options {
        limits: edge_limits(),
        ..Options::default()
    })
    .await;

    // An unfinished head: 408 after the header timeout, then the connection closes.
    let mut head = connect_from(&server, 1).await;
    head.write_all(b"GET /api/v4/projects HTTP/1.1\r\nHost: g")
        .await
        .expect("write");
    let started = Instant::now();
    let raw = read_to_close(&mut head, Duration::from_secs(5)).await;
    let (status, body) = parse_answer(&raw);
    assert_eq!(status, 408, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("--header-timeout"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));

    // A connection that sends nothing is closed after the keep-alive timeout.
    let mut idle = connect_from(&server, 1).await;
    let raw = read_to_close(&mut idle, Duration::from_secs(5)).await;
    assert_eq!(raw, "", "an idle connection is closed without an answer");

    // A body that stalls: the request fails with JSON once the body timeout passes.
    let mut body = connect_from(&server, 1).await;
    let request = format!(
        "POST /api/v4/projects HTTP/1.1\r\nHost: g\r\nPRIVATE-TOKEN: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"name\":",
        server.admin
    );
    body.write_all(request.as_bytes()).await.expect("write");
    let raw = read_to_close(&mut body, Duration::from_secs(5)).await;
    let (status, answer) = parse_answer(&raw);
    assert_eq!(status, 408, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("408 Request Timeout - read the request body")
            && answer.to_string().contains("--body-timeout"),
        "the answer says which limit: {answer}"
    );
    assert!(
        raw.to_ascii_lowercase().contains("connection: close"),
        "{raw}"
    );

    // A keep-alive connection is closed after the keep-alive timeout once its answers
    // are out: small and large (the job list, the 404 of a missing route).
    for path in ["/api/v4/projects", "/api/v4/nothing-here"] {
        let mut used = connect_from(&server, 1).await;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: g\r\nPRIVATE-TOKEN: {}\r\n\r\n",
            server.admin
        );
        used.write_all(request.as_bytes()).await.expect("write");
        let started = Instant::now();
        let raw = read_to_close(&mut used, Duration::from_secs(5)).await;
        assert!(raw.starts_with("HTTP/1.1 "), "{raw}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "closed {took:?} after the request"
        );
    }
    // A keep-alive connection that is used is not cut by those timeouts.
    let (status, _) = server.admin(Method::GET, "projects", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_caps_refuse_with_json_and_make_room_for_the_admin() {
    let server = TestServer::start_with(Options {
        limits: gantry_server::http::Limits {
            max_connections: 6,
            max_connections_per_ip: 3,
            ..gantry_server::http::Limits::default()
        },
        ..Options::default()
    })
    .await;
    // Three idle connections from one address; the fourth is refused.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from(&server, 7).await);
    }
    let mut fourth = connect_from(&server, 7).await;
    let raw = read_to_close(&mut fourth, Duration::from_secs(5)).await;
    let (status, body) = parse_answer(&raw);
    assert_eq!(status, 503, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or("")
            .contains("--max-connections-per-ip"),
        "{body}"
    );
    // Six held in all, from two addresses: the admin still gets in, in place of the
    // connection that waited longest without a request.
    for _ in 0..3 {
        held.push(connect_from(&server, 8).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, _) = server.admin(Method::GET, "projects", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(1));
    let raw = read_to_close(&mut held[0], Duration::from_secs(5)).await;
    assert_eq!(raw, "", "the oldest idle connection made room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_body_is_read_before_its_credential_is_known() {
    let f = fixture().await;
    let s = &f.server;
    // The user API without a token: 401 at once, while the 1 MiB body is not sent.
    for (token, want) in [(None, 401), (Some("glpat-unknown"), 401)] {
        let mut stream = connect_from(s, 1).await;
        let mut head = String::from(
            "POST /api/v4/projects HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n",
        );
        if let Some(token) = token {
            head.push_str(&format!("PRIVATE-TOKEN: {token}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.expect("write");
        let raw = read_to_close(&mut stream, Duration::from_secs(5)).await;
        let (status, body) = parse_answer(&raw);
        assert_eq!(status, want, "{body}");
    }
    // A runner API route whose token is in the body reads a small body only.
    let mut stream = connect_from(s, 1).await;
    stream
        .write_all(
            b"POST /api/v4/runners/verify HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n",
        )
        .await
        .expect("write");
    let raw = read_to_close(&mut stream, Duration::from_secs(5)).await;
    let (status, body) = parse_answer(&raw);
    assert_eq!(status, 413, "{body}");
    // The same routes with their credentials still work.
    let verified = s
        .http
        .post(s.api("runners/verify"))
        .json(&json!({ "token": f.runner }))
        .send()
        .await
        .expect("verify");
    assert_eq!(verified.status(), StatusCode::OK);
    let (status, _) = s
        .admin(
            Method::POST,
            "projects",
            Some(json!({ "name": "other", "repo_url": "/nonexistent" })),
        )
        .await;
    assert_ne!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hyper_cannot_read_are_answered_with_json() {
    let server = TestServer::start().await;
    let many_headers: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let cases: Vec<(String, u16, &str)> = vec![
        (
            "POST /api/v4/projects HTTP/1.1\r\nHost: g\r\nContent-Length: ten\r\n\r\n".to_owned(),
            400,
            "Content-Length `ten` is not a number of bytes",
        ),
        (
            "POST /api/v4/projects HTTP/1.1\r\nHost: g\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd".to_owned(),
            400,
            "two different Content-Lengths",
        ),
        (
            "POST /api/v4/jobs/request HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: gzip\r\n\r\n".to_owned(),
            400,
            "Transfer-Encoding `gzip`",
        ),
        (
            format!("GET /api/v4/projects HTTP/1.1\r\nHost: g\r\n{many_headers}\r\n"),
            431,
            "more than 100 headers",
        ),
        (
            format!(
                "GET /api/v4/projects HTTP/1.1\r\nHost: g\r\nX-Big: {}\r\n\r\n",
                "b".repeat(512 * 1024)
            ),
            431,
            "longer than 408 KiB",
        ),
        (
            format!("GET /{} HTTP/1.1\r\nHost: g\r\n\r\n", "a".repeat(1 << 20)),
            414,
            "URL is longer",
        ),
        (
            format!("GET /{} HTTP/1.1\r\nHost: g\r\n\r\n", "a".repeat(70_000)),
            414,
            "URL is longer",
        ),
        (
            "GET /api/v4/version\r\nHost: g\r\n\r\n".to_owned(),
            400,
            "the request line `GET /api/v4/version` is not `<method> <path> HTTP/1.1`",
        ),
        (
            "G{T /api/v4/version HTTP/1.1\r\nHost: g\r\n\r\n".to_owned(),
            400,
            "method `G{T`",
        ),
        (
            "GET /api/v4/version HTTP/1.1\r\nHost g\r\n\r\n".to_owned(),
            400,
            "header line `Host g` has no `:`",
        ),
        (
            "GET /api/v4/version HTTP/2.0\r\nHost: g\r\n\r\n".to_owned(),
            505,
            "the request is `HTTP/2.0`; the server speaks HTTP/1.1",
        ),
        (
            "GET /api/v4/version HTTP/1.2\r\nHost: g\r\n\r\n".to_owned(),
            505,
            "`HTTP/1.2`",
        ),
        // An HTTP/2 client with prior knowledge: hyper closes without a word.
        (
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_owned(),
            505,
            "the request is HTTP/2 (its connection preface)",
        ),
    ];
    for (request, want, says) in cases {
        let mut stream = connect_from(&server, 1).await;
        // hyper may answer before the whole request is written.
        let _ = stream.write_all(request.as_bytes()).await;
        let raw = read_to_close(&mut stream, Duration::from_secs(5)).await;
        let (status, body) = parse_answer(&raw);
        let shown = &request[..request.len().min(60)];
        assert_eq!(status, want, "{shown:?}: {body}");
        let message = body["message"].as_str().unwrap_or("");
        assert!(
            message.starts_with(&format!("{status} ")) && message.contains(says),
            "{shown:?}: {body}"
        );
    }
    // The connection layer's rewriting leaves ordinary answers alone.
    let (status, _) = server.admin(Method::GET, "projects", None).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_trace_patches_and_uploads_are_408() {
    let f = fixture_from(Options {
        limits: edge_limits(),
        artifact_limit: LIMIT,
        ..Options::default()
    })
    .await;
    let s = &f.server;
    let requests = [
        (
            "trace patch",
            format!(
                "PATCH /api/v4/jobs/{}/trace HTTP/1.1\r\nHost: g\r\nJOB-TOKEN: {}\r\n\
                 Content-Range: 0-99\r\nContent-Length: 100\r\n\r\nhalf a log",
                f.job_id, f.job_token
            ),
        ),
        (
            "artifact upload",
            format!(
                "POST /api/v4/jobs/{}/artifacts HTTP/1.1\r\nHost: g\r\nJOB-TOKEN: {}\r\n\
                 Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 100000\r\n\r\n\
                 --XX\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.zip\"\r\n\r\nPK",
                f.job_id, f.job_token
            ),
        ),
        (
            "runner registration form",
            "POST /api/v4/runners/verify HTTP/1.1\r\nHost: g\r\n\
             Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: 1000\r\n\r\n\
             --XX\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\nglrt-"
                .to_owned(),
        ),
        (
            "git push",
            format!(
                "POST /demo.git/git-upload-pack HTTP/1.1\r\nHost: g\r\n\
                 Authorization: Basic {}\r\nContent-Length: 1000\r\n\r\n0032want",
                basic("gitlab-ci-token", &f.job_token)
            ),
        ),
    ];
    for (what, request) in requests {
        let mut stream = connect_from(s, 1).await;
        stream.write_all(request.as_bytes()).await.expect("write");
        let started = Instant::now();
        let raw = read_to_close(&mut stream, Duration::from_secs(5)).await;
        let (status, body) = parse_answer(&raw);
        assert_eq!(status, 408, "{what}: {body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap_or("")
                .contains("(--body-timeout)"),
            "{what}: {body}"
        );
        assert!(started.elapsed() < Duration::from_secs(4), "{what}");
    }
    // Nothing of the stalled patch or upload was kept.
    let trace = s.coordinator.traces().trace(f.job_id).await.expect("trace");
    assert!(trace.is_empty(), "{trace:?}");
    assert_eq!(staged_files(s), 0, "a stalled upload was left staged");
    let job = s.job(f.project_id, f.job_id).await;
    assert_eq!(job["status"], "running");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_without_credentials_is_cut_at_the_small_cap() {
    let f = fixture().await;
    let s = &f.server;
    // The runner API's token is in the body: without one in the headers, a chunked body
    // (no Content-Length to refuse early) is read up to the small cap, then 413.
    for path in ["runners", "runners/verify", "jobs/request"] {
        let chunks = (0..20).map(|_| Ok::<_, std::io::Error>(vec![b' '; 8 * 1024]));
        let response = s
            .http
            .post(s.api(path))
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let (status, _) = expect_client_error(response, path).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{path}");
    }
    // Within the cap the token in the body is read as always.
    let body = format!(r#"{{"token": "{}"}}{}"#, f.runner, " ".repeat(16 * 1024));
    let verified = s
        .http
        .post(s.api("runners/verify"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("verify");
    assert_eq!(verified.status(), StatusCode::OK);
}

/// `user:password` as an `Authorization: Basic` value.
fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}
