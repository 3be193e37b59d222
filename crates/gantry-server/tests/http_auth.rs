//! The authorization matrix: every endpoint called with no token, a wrong token, another
//! project's job token, and the right credential. The first three must be 4xx with a
//! JSON error and change nothing; the right one succeeds. The table of statuses is a
//! snapshot, so a change in who may call what shows up in review.

#![allow(clippy::panic)]

use crate::http_support;

use std::fmt::Write as _;
use std::time::Duration;

use http_support::{Options, Repo, TestServer, expect_client_error};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const PIPELINE: &str = r#"
build:
  script: [make]
  artifacts:
    paths: [out]
deploy:
  script: [deploy]
  when: manual
"#;

/// How a credential travels.
#[derive(Clone, Copy, Debug)]
enum Transport {
    /// Runner-level: `token` in the JSON body (§1.2).
    BodyToken,
    /// `RUNNER-TOKEN` header (router discovery).
    RunnerHeader,
    /// Job-level: `JOB-TOKEN` header.
    JobHeader,
    /// Job-level: `token` in the JSON body (job update).
    JobBody,
    /// Job-level: `JOB-TOKEN` header on a multipart artifact upload.
    JobMultipart,
    /// User API: `PRIVATE-TOKEN`.
    Private,
    /// User API: `Authorization: Bearer`.
    Bearer,
    /// Git over HTTP: basic auth as `gitlab-ci-token`.
    GitBasic,
}

struct Row {
    name: String,
    method: Method,
    path: String,
    transport: Transport,
    body: Value,
    /// The credential that works.
    right: String,
    /// A wrong credential of the right kind.
    wrong: &'static str,
}

impl Row {
    fn new(
        name: &str,
        method: Method,
        path: String,
        transport: Transport,
        body: Value,
        right: &str,
    ) -> Self {
        let wrong = match transport {
            Transport::BodyToken | Transport::RunnerHeader => {
                "glrt-t1_00000000000000000000000000000000deadbeef"
            }
            Transport::JobHeader
            | Transport::JobBody
            | Transport::JobMultipart
            | Transport::GitBasic => "glcbt-00000000000000000000000000000000deadbeef",
            Transport::Private | Transport::Bearer => {
                "glpat-00000000000000000000000000000000deadbeef"
            }
        };
        Self {
            name: name.to_owned(),
            method,
            path,
            transport,
            body,
            right: right.to_owned(),
            wrong,
        }
    }
}

async fn send(server: &TestServer, row: &Row, credential: Option<&str>) -> reqwest::Response {
    let url = if matches!(row.transport, Transport::GitBasic) {
        format!("{}/{}", server.url, row.path)
    } else {
        server.api(&row.path)
    };
    let mut request = server.http.request(row.method.clone(), url);
    let mut body = row.body.clone();
    match (row.transport, credential) {
        (_, None) => {}
        (Transport::BodyToken | Transport::JobBody, Some(token)) => body["token"] = json!(token),
        (Transport::RunnerHeader, Some(token)) => request = request.header("RUNNER-TOKEN", token),
        (Transport::JobHeader | Transport::JobMultipart, Some(token)) => {
            request = request.header("JOB-TOKEN", token)
        }
        (Transport::Private, Some(token)) => request = request.header("PRIVATE-TOKEN", token),
        (Transport::Bearer, Some(token)) => request = request.bearer_auth(token),
        (Transport::GitBasic, Some(token)) => {
            request = request.basic_auth("gitlab-ci-token", Some(token))
        }
    }
    request = match row.transport {
        Transport::JobMultipart => request.multipart(
            Form::new()
                .part(
                    "file",
                    Part::bytes(b"PK\x05\x06\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec())
                        .file_name("out.zip"),
                )
                .text("artifact_type", "archive"),
        ),
        Transport::GitBasic => request,
        Transport::JobHeader if row.method == Method::PATCH => request
            .header("Content-Range", "0-4")
            .header("content-type", "text/plain")
            .body("hello"),
        _ if body.is_null() => request,
        _ => request.json(&body),
    };
    request.send().await.expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_checks_its_caller() {
    let server = TestServer::start_with(Options {
        long_poll: Duration::from_millis(300),
        ..Options::default()
    })
    .await;
    let repo_a = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let repo_b = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let a = server.create_project("alpha", &repo_a).await["id"]
        .as_i64()
        .expect("id");
    let b = server.create_project("beta", &repo_b).await["id"]
        .as_i64()
        .expect("id");
    let pipeline_a = server.create_pipeline(a, "main").await["id"]
        .as_i64()
        .expect("id");
    server.create_pipeline(b, "main").await;
    let (runner_id, runner) = server.create_runner(json!({})).await;
    let (_, doomed_runner) = server
        .create_runner(json!({ "description": "to unregister" }))
        .await;
    let (deletable_id, _) = server
        .create_runner(json!({ "description": "to delete" }))
        .await;

    let (first, first_token, first_payload) = server.take_job(&runner).await;
    let (second, second_token, _) = server.take_job(&runner).await;
    let (job_a, token_a, token_b) = if first_payload["job_info"]["project_id"] == a {
        (first, first_token, second_token)
    } else {
        (second, second_token, first_token)
    };
    // A pipeline to delete, whose job no runner here takes.
    let repo_c = Repo::new(&[(
        ".gitlab-ci.yml",
        "untaken:\n  tags: [no-such-runner]\n  script: [echo]\n",
    )]);
    let c = server.create_project("doomed", &repo_c).await["id"]
        .as_i64()
        .expect("id");
    let doomed_pipeline = server.create_pipeline(c, "main").await["id"]
        .as_i64()
        .expect("id");
    let deploy_a = server
        .pipeline_jobs(a, pipeline_a)
        .await
        .iter()
        .find(|j| j["name"] == "deploy")
        .and_then(|j| j["id"].as_i64())
        .expect("deploy job");
    let admin = server.admin.clone();
    let registration = server.registration.clone();
    let (_, trigger) = server
        .admin(
            Method::POST,
            &format!("projects/{a}/triggers"),
            Some(json!({ "description": "to delete" })),
        )
        .await;
    let trigger_id = trigger["id"].as_i64().expect("trigger id");
    let (_, namespace) = server.admin(Method::GET, "groups/gantry", None).await;
    let namespace = namespace["id"].as_i64().expect("group id");

    use Transport::*;
    // In the order the right credentials run: reads and job-scoped calls first, then the
    // user actions that end job A (which revokes its token).
    let rows = vec![
        Row::new(
            "POST /runners/verify",
            Method::POST,
            "runners/verify".into(),
            BodyToken,
            json!({}),
            &runner,
        ),
        Row::new(
            "POST /jobs/request",
            Method::POST,
            "jobs/request".into(),
            BodyToken,
            json!({}),
            &runner,
        ),
        Row::new(
            "POST /runners (registration token)",
            Method::POST,
            "runners".into(),
            BodyToken,
            json!({ "description": "legacy" }),
            &registration,
        ),
        Row::new(
            "DELETE /runners/managers",
            Method::DELETE,
            "runners/managers".into(),
            BodyToken,
            json!({ "system_id": "s_0123456789ab" }),
            &runner,
        ),
        Row::new(
            "GET /runners/router/discovery",
            Method::GET,
            "runners/router/discovery".into(),
            RunnerHeader,
            Value::Null,
            &runner,
        ),
        Row::new(
            "PUT /jobs/:id",
            Method::PUT,
            format!("jobs/{job_a}"),
            JobBody,
            json!({ "state": "running" }),
            &token_a,
        ),
        Row::new(
            "PATCH /jobs/:id/trace",
            Method::PATCH,
            format!("jobs/{job_a}/trace"),
            JobHeader,
            Value::Null,
            &token_a,
        ),
        Row::new(
            "POST /jobs/:id/artifacts",
            Method::POST,
            format!("jobs/{job_a}/artifacts"),
            JobMultipart,
            Value::Null,
            &token_a,
        ),
        Row::new(
            "GET /jobs/:id/artifacts",
            Method::GET,
            format!("jobs/{job_a}/artifacts"),
            JobHeader,
            Value::Null,
            &token_a,
        ),
        Row::new(
            "git clone (info/refs)",
            Method::GET,
            "gantry/alpha.git/info/refs?service=git-upload-pack".into(),
            GitBasic,
            Value::Null,
            &token_a,
        ),
        Row::new(
            "GET /projects",
            Method::GET,
            "projects".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects (Bearer)",
            Method::GET,
            "projects".into(),
            Bearer,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id",
            Method::GET,
            format!("projects/{a}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/variables",
            Method::POST,
            format!("projects/{a}/variables"),
            Private,
            json!({ "key": "AUTH_VAR", "value": "x" }),
            &admin,
        ),
        Row::new(
            "GET /projects/:id/variables",
            Method::GET,
            format!("projects/{a}/variables"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "PUT /projects/:id/variables/:key",
            Method::PUT,
            format!("projects/{a}/variables/AUTH_VAR"),
            Private,
            json!({ "value": "y" }),
            &admin,
        ),
        Row::new(
            "GET /projects/:id/variables/:key",
            Method::GET,
            format!("projects/{a}/variables/AUTH_VAR"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/variables/:key",
            Method::DELETE,
            format!("projects/{a}/variables/AUTH_VAR"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/protected_branches",
            Method::POST,
            format!("projects/{a}/protected_branches?name=auth-*"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/protected_branches",
            Method::GET,
            format!("projects/{a}/protected_branches"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/protected_branches/:name",
            Method::GET,
            format!("projects/{a}/protected_branches/auth-*"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/protected_branches/:name",
            Method::DELETE,
            format!("projects/{a}/protected_branches/auth-*"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/protected_tags",
            Method::POST,
            format!("projects/{a}/protected_tags?name=auth-*"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/protected_tags",
            Method::GET,
            format!("projects/{a}/protected_tags"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/protected_tags/:name",
            Method::GET,
            format!("projects/{a}/protected_tags/auth-*"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/protected_tags/:name",
            Method::DELETE,
            format!("projects/{a}/protected_tags/auth-*"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/job_token_scope",
            Method::GET,
            format!("projects/{a}/job_token_scope"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "PATCH /projects/:id/job_token_scope",
            Method::PATCH,
            format!("projects/{a}/job_token_scope"),
            Private,
            json!({ "enabled": true }),
            &admin,
        ),
        Row::new(
            "POST /projects/:id/job_token_scope/allowlist",
            Method::POST,
            format!("projects/{a}/job_token_scope/allowlist"),
            Private,
            json!({ "target_project_id": b }),
            &admin,
        ),
        Row::new(
            "GET /projects/:id/job_token_scope/allowlist",
            Method::GET,
            format!("projects/{a}/job_token_scope/allowlist"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/job_token_scope/allowlist/:target",
            Method::DELETE,
            format!("projects/{a}/job_token_scope/allowlist/{b}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/job_token_scope/groups_allowlist",
            Method::POST,
            format!("projects/{a}/job_token_scope/groups_allowlist"),
            Private,
            json!({ "target_group_id": namespace }),
            &admin,
        ),
        Row::new(
            "GET /projects/:id/job_token_scope/groups_allowlist",
            Method::GET,
            format!("projects/{a}/job_token_scope/groups_allowlist"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/job_token_scope/groups_allowlist/:g",
            Method::DELETE,
            format!("projects/{a}/job_token_scope/groups_allowlist/{namespace}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/pipelines/:pipeline_id",
            Method::DELETE,
            format!("projects/{c}/pipelines/{doomed_pipeline}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/pipelines/:pipeline_id/variables",
            Method::GET,
            format!("projects/{a}/pipelines/{pipeline_a}/variables"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/jobs/:job_id/artifacts/keep",
            Method::POST,
            format!("projects/{a}/jobs/{job_a}/artifacts/keep"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/jobs/:job_id/artifacts",
            Method::DELETE,
            format!("projects/{a}/jobs/{job_a}/artifacts"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/artifacts",
            Method::DELETE,
            format!("projects/{a}/artifacts"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /groups/:id/variables",
            Method::POST,
            "groups/gantry/variables".into(),
            Private,
            json!({ "key": "AUTH_GROUP_VAR", "value": "x" }),
            &admin,
        ),
        Row::new(
            "GET /groups/:id/variables",
            Method::GET,
            "groups/gantry/variables".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "PUT /groups/:id/variables/:key",
            Method::PUT,
            "groups/gantry/variables/AUTH_GROUP_VAR".into(),
            Private,
            json!({ "value": "y" }),
            &admin,
        ),
        Row::new(
            "GET /groups/:id/variables/:key",
            Method::GET,
            "groups/gantry/variables/AUTH_GROUP_VAR".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /groups/:id/variables/:key",
            Method::DELETE,
            "groups/gantry/variables/AUTH_GROUP_VAR".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /admin/ci/variables",
            Method::POST,
            "admin/ci/variables".into(),
            Private,
            json!({ "key": "AUTH_INSTANCE_VAR", "value": "x" }),
            &admin,
        ),
        Row::new(
            "GET /admin/ci/variables",
            Method::GET,
            "admin/ci/variables".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "PUT /admin/ci/variables/:key",
            Method::PUT,
            "admin/ci/variables/AUTH_INSTANCE_VAR".into(),
            Private,
            json!({ "value": "y" }),
            &admin,
        ),
        Row::new(
            "GET /admin/ci/variables/:key",
            Method::GET,
            "admin/ci/variables/AUTH_INSTANCE_VAR".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /admin/ci/variables/:key",
            Method::DELETE,
            "admin/ci/variables/AUTH_INSTANCE_VAR".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/triggers",
            Method::POST,
            format!("projects/{a}/triggers"),
            Private,
            json!({ "description": "auth" }),
            &admin,
        ),
        Row::new(
            "GET /projects/:id/triggers",
            Method::GET,
            format!("projects/{a}/triggers"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /projects/:id/triggers/:trigger_id",
            Method::DELETE,
            format!("projects/{a}/triggers/{trigger_id}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/jobs",
            Method::GET,
            format!("projects/{a}/jobs"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/pipelines",
            Method::GET,
            format!("projects/{a}/pipelines"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/pipelines/:pid",
            Method::GET,
            format!("projects/{a}/pipelines/{pipeline_a}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/pipelines/:pid/jobs",
            Method::GET,
            format!("projects/{a}/pipelines/{pipeline_a}/jobs"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/pipelines/:pid/bridges",
            Method::GET,
            format!("projects/{a}/pipelines/{pipeline_a}/bridges"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/pipelines/:pid/test_report",
            Method::GET,
            format!("projects/{a}/pipelines/{pipeline_a}/test_report"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/pipelines/:pid/test_report_summary",
            Method::GET,
            format!("projects/{a}/pipelines/{pipeline_a}/test_report_summary"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/jobs/:job_id",
            Method::GET,
            format!("projects/{a}/jobs/{job_a}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/jobs/:job_id/trace",
            Method::GET,
            format!("projects/{a}/jobs/{job_a}/trace"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/jobs/:job_id/artifacts",
            Method::GET,
            format!("projects/{a}/jobs/{job_a}/artifacts"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/jobs/:job_id/artifacts (JOB-TOKEN)",
            Method::GET,
            format!("projects/{a}/jobs/{job_a}/artifacts"),
            JobHeader,
            Value::Null,
            &token_a,
        ),
        Row::new(
            "GET /runners/all",
            Method::GET,
            "runners/all".into(),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /runners/:id",
            Method::GET,
            format!("runners/{runner_id}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "GET /projects/:id/ci/lint",
            Method::GET,
            format!("projects/{a}/ci/lint"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/ci/lint",
            Method::POST,
            format!("projects/{a}/ci/lint"),
            Private,
            json!({ "content": "x:\n  script: [a]\n" }),
            &admin,
        ),
        Row::new(
            "GET /runners/:id/jobs",
            Method::GET,
            format!("runners/{runner_id}/jobs"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "PUT /runners/:id",
            Method::PUT,
            format!("runners/{runner_id}"),
            Private,
            json!({ "description": "renamed" }),
            &admin,
        ),
        Row::new(
            "POST /projects",
            Method::POST,
            "projects".into(),
            Private,
            json!({ "name": "gamma", "repo_url": repo_a.path() }),
            &admin,
        ),
        Row::new(
            "POST /projects/:id/pipeline",
            Method::POST,
            format!("projects/{a}/pipeline?ref=main"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/jobs/:job_id/play",
            Method::POST,
            format!("projects/{a}/jobs/{deploy_a}/play"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/jobs/:job_id/cancel",
            Method::POST,
            format!("projects/{a}/jobs/{job_a}/cancel"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/jobs/:job_id/retry",
            Method::POST,
            format!("projects/{a}/jobs/{job_a}/retry"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/pipelines/:pid/cancel",
            Method::POST,
            format!("projects/{a}/pipelines/{pipeline_a}/cancel"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /projects/:id/pipelines/:pid/retry",
            Method::POST,
            format!("projects/{a}/pipelines/{pipeline_a}/retry"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "POST /user/runners",
            Method::POST,
            "user/runners".into(),
            Private,
            json!({ "runner_type": "instance_type" }),
            &admin,
        ),
        Row::new(
            "DELETE /runners/:id",
            Method::DELETE,
            format!("runners/{deletable_id}"),
            Private,
            Value::Null,
            &admin,
        ),
        Row::new(
            "DELETE /runners",
            Method::DELETE,
            "runners".into(),
            BodyToken,
            json!({}),
            &doomed_runner,
        ),
    ];

    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<56} {:>5} {:>5} {:>5} {:>5}",
        "endpoint", "none", "wrong", "other", "right"
    );
    let mut denied = Vec::new();
    for row in &rows {
        let mut codes = Vec::new();
        for (label, credential) in [
            ("none", None),
            ("wrong", Some(row.wrong)),
            ("other", Some(token_b.as_str())),
        ] {
            let response = send(&server, row, credential).await;
            let (status, _) =
                expect_client_error(response, &format!("{} with {label}", row.name)).await;
            codes.push(status.as_u16());
        }
        denied.push(codes);
    }
    // Nothing the denied calls did is visible: job A still runs with an empty log and no
    // artifact, and the runners are all there.
    let job = server.job(a, job_a).await;
    assert_eq!(job["status"], "running", "{job}");
    assert_eq!(job["artifacts"], json!([]), "{job}");
    assert!(
        server
            .coordinator
            .traces()
            .trace(job_a)
            .await
            .expect("trace")
            .is_empty()
    );
    let (_, runners) = server.admin(Method::GET, "runners/all", None).await;
    assert_eq!(runners.as_array().map(Vec::len), Some(3), "{runners}");

    for (row, codes) in rows.iter().zip(denied) {
        let response = send(&server, row, Some(&row.right)).await;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert!(
            status.is_success()
                || (row.name.contains("discovery") && status == StatusCode::NOT_IMPLEMENTED)
                // The job still runs: past the credential check, its artifacts are kept.
                || (row.name == "DELETE /projects/:id/jobs/:job_id/artifacts"
                    && status == StatusCode::CONFLICT),
            "{} with the right credential: {status} {text}",
            row.name
        );
        let _ = writeln!(
            table,
            "{:<56} {:>5} {:>5} {:>5} {:>5}",
            row.name,
            codes[0],
            codes[1],
            codes[2],
            status.as_u16()
        );
    }
    insta::assert_snapshot!(table);
}
