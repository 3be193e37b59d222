//! Instance CI/CD variables over the user API (`/admin/ci/variables`, GitLab's shapes): every
//! endpoint, who may call them, the errors a user sees (snapshotted), the instance's limit,
//! and what a job of any project then receives.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use std::fmt::Write as _;

use http_support::{Repo, TestServer, expect_client_error, job_variable as var};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const PATH: &str = "admin/ci/variables";

#[tokio::test]
async fn variables_are_created_listed_shown_updated_and_deleted() {
    let server = TestServer::start().await;

    let (status, created) = server
        .admin(
            Method::POST,
            PATH,
            Some(
                json!({"key": "TOKEN", "value": "abc-12345678", "masked": true, "protected": true,
                        "description": "the deploy token"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    // GitLab's `Entities::Ci::Variable` of an instance variable: no scope, no `hidden`; a
    // masked value is shown to the admin, as the project API shows it.
    assert_eq!(
        created,
        json!({"variable_type": "env_var", "key": "TOKEN", "value": "abc-12345678", "protected": true,
               "masked": true, "raw": false, "description": "the deploy token"})
    );
    // `environment_scope` is no parameter of this API: ignored like any unknown one.
    let (status, scoped) = server
        .admin(
            Method::POST,
            PATH,
            Some(
                json!({"key": "API_URL", "value": "https://x", "environment_scope": "production",
                        "variable_type": "file", "raw": true}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{scoped}");
    assert_eq!(
        scoped,
        json!({"variable_type": "file", "key": "API_URL", "value": "https://x", "protected": false,
               "masked": false, "raw": true, "description": null})
    );

    let (status, list) = server.admin(Method::GET, PATH, None).await;
    assert_eq!(status, StatusCode::OK);
    let keys: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["API_URL", "TOKEN"]);
    let (status, shown) = server
        .admin(Method::GET, &format!("{PATH}/TOKEN"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown, created);

    // PUT changes the given fields only; a `key` in its body does not rename (GitLab).
    let (status, updated) = server
        .admin(
            Method::PUT,
            &format!("{PATH}/TOKEN"),
            Some(json!({"key": "RENAMED", "value": "new-value-123", "masked": false, "variable_type": "file"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(
        updated,
        json!({"variable_type": "file", "key": "TOKEN", "value": "new-value-123", "protected": true,
               "masked": false, "raw": false, "description": "the deploy token"})
    );
    let (status, shown) = server
        .admin(Method::GET, &format!("{PATH}/TOKEN"), None)
        .await;
    assert_eq!((status, &shown), (StatusCode::OK, &updated));

    let (status, body) = server
        .admin(Method::DELETE, &format!("{PATH}/TOKEN"), None)
        .await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let (status, _) = server
        .admin(Method::GET, &format!("{PATH}/TOKEN"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = server.admin(Method::GET, PATH, None).await;
    assert_eq!(list.as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_form_encoded_request_creates_a_variable_as_curl_data_does() {
    let server = TestServer::start().await;
    let response = server
        .http
        .post(server.api(PATH))
        .header("PRIVATE-TOKEN", &server.admin)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("key=DEPLOY_TOKEN&value=s3cr3t-t0ken&masked=true&protected=true&variable_type=file")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let created: Value = response.json().await.unwrap();
    assert_eq!(
        (
            &created["masked"],
            &created["protected"],
            &created["variable_type"]
        ),
        (&json!(true), &json!(true), &json!("file"))
    );
}

/// Only the admin token: none, a wrong one, a runner's or a job's token are `401` (as
/// for every admin endpoint of the user API), and change nothing.
#[tokio::test]
async fn only_the_admin_token_may_call_them() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", "job:\n  script: [echo]\n")]);
    let project = server.create_project("group/auth", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    server.create_pipeline(pid, "main").await;
    let (_, runner) = server.create_runner(json!({})).await;
    let (_, job_token, _) = server.take_job(&runner).await;
    let (status, _) = server
        .admin(
            Method::POST,
            PATH,
            Some(json!({"key": "KEEP", "value": "kept"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    let calls = [
        (Method::GET, PATH.to_owned(), Value::Null),
        (
            Method::POST,
            PATH.to_owned(),
            json!({"key": "NEW", "value": "x"}),
        ),
        (Method::GET, format!("{PATH}/KEEP"), Value::Null),
        (
            Method::PUT,
            format!("{PATH}/KEEP"),
            json!({"value": "changed"}),
        ),
        (Method::DELETE, format!("{PATH}/KEEP"), Value::Null),
    ];
    let credentials: [(&str, Option<(&str, &str)>); 5] = [
        ("none", None),
        (
            "wrong",
            Some((
                "PRIVATE-TOKEN",
                "glpat-00000000000000000000000000000000deadbeef",
            )),
        ),
        ("runner", Some(("PRIVATE-TOKEN", runner.as_str()))),
        ("job", Some(("PRIVATE-TOKEN", job_token.as_str()))),
        ("job header", Some(("JOB-TOKEN", job_token.as_str()))),
    ];
    for (method, path, body) in &calls {
        for (label, credential) in &credentials {
            let mut request = server.http.request(method.clone(), server.api(path));
            if let Some((header, token)) = credential {
                request = request.header(*header, *token);
            }
            if !body.is_null() {
                request = request.json(body);
            }
            let response = request.send().await.unwrap();
            let what = format!("{method} {path} with {label}");
            let (status, answer) = expect_client_error(response, &what).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {answer}");
            assert_eq!(answer, json!({"message": "401 Unauthorized"}), "{what}");
        }
    }
    let (_, list) = server.admin(Method::GET, PATH, None).await;
    assert_eq!(
        list,
        json!([{"variable_type": "env_var", "key": "KEEP", "value": "kept", "protected": false,
                "masked": false, "raw": false, "description": null}]),
        "the refused calls changed nothing"
    );
}

/// Every refusal a user can meet, as they see it: the status and the JSON body.
#[tokio::test]
async fn refusals_name_the_field_and_the_fix() {
    let server = TestServer::start().await;
    let (status, _) = server
        .admin(
            Method::POST,
            PATH,
            Some(json!({"key": "TAKEN", "value": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let calls = [
        (
            "no key",
            Method::POST,
            PATH.to_owned(),
            json!({"value": "x"}),
        ),
        (
            "no value",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "A"}),
        ),
        (
            "bad key",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "A-B", "value": "x"}),
        ),
        (
            "long key",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "K".repeat(256), "value": "x"}),
        ),
        (
            "unmaskable",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "S", "value": "short", "masked": true}),
        ),
        (
            "bad type",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "T", "value": "x", "variable_type": "json"}),
        ),
        (
            "long value",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "L", "value": "x".repeat(10_001)}),
        ),
        (
            "bad JSON type",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "P", "value": "x", "protected": "maybe"}),
        ),
        (
            "duplicate",
            Method::POST,
            PATH.to_owned(),
            json!({"key": "TAKEN", "value": "again"}),
        ),
        (
            "unmaskable update",
            Method::PUT,
            format!("{PATH}/TAKEN"),
            json!({"masked": true}),
        ),
        (
            "show unknown",
            Method::GET,
            format!("{PATH}/NOPE"),
            Value::Null,
        ),
        (
            "update unknown",
            Method::PUT,
            format!("{PATH}/NOPE"),
            json!({"value": "x"}),
        ),
        (
            "delete unknown",
            Method::DELETE,
            format!("{PATH}/NOPE"),
            Value::Null,
        ),
    ];
    let mut table = String::new();
    for (name, method, path, body) in calls {
        let mut request = server
            .http
            .request(method, server.api(&path))
            .header("PRIVATE-TOKEN", &server.admin);
        if !body.is_null() {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let (status, answer) = expect_client_error(response, name).await;
        let _ = writeln!(table, "{name}: {} {answer}", status.as_u16());
    }
    let (_, list) = server.admin(Method::GET, PATH, None).await;
    assert_eq!(
        list,
        json!([{"variable_type": "env_var", "key": "TAKEN", "value": "x", "protected": false,
                "masked": false, "raw": false, "description": null}]),
        "nothing was stored or changed"
    );

    // The instance's limit (GitLab's default `ci_instance_level_variables`: 25).
    for i in 1..25 {
        let (status, answer) = server
            .admin(
                Method::POST,
                PATH,
                Some(json!({"key": format!("V{i}"), "value": "x"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    let response = server
        .http
        .post(server.api(PATH))
        .header("PRIVATE-TOKEN", &server.admin)
        .json(&json!({"key": "ONE_TOO_MANY", "value": "x"}))
        .send()
        .await
        .unwrap();
    let (status, answer) = expect_client_error(response, "the 26th").await;
    let _ = writeln!(table, "the 26th: {} {answer}", status.as_u16());
    insta::assert_snapshot!(table);

    // 25 variables: two pages of GitLab's default 20, with its pagination headers.
    let page = |query: &'static str| {
        let request = server
            .http
            .get(format!("{}{query}", server.api(PATH)))
            .header("PRIVATE-TOKEN", &server.admin);
        async move {
            let response = request.send().await.unwrap();
            let header = |name: &str| response.headers()[name].to_str().unwrap().to_owned();
            let headers = [
                header("x-page"),
                header("x-per-page"),
                header("x-next-page"),
                header("x-total"),
            ];
            let body: Value = response.json().await.unwrap();
            (headers, body.as_array().unwrap().len())
        }
    };
    assert_eq!(
        page("").await,
        (["1", "20", "2", "25"].map(String::from), 20)
    );
    assert_eq!(
        page("?page=2").await,
        (["2", "20", "", "25"].map(String::from), 5)
    );
    assert_eq!(
        page("?per_page=100").await,
        (["1", "100", "", "25"].map(String::from), 25)
    );
}

/// Any project's jobs get them, below the project's own variables and the pipeline's,
/// and rules see them when the pipeline is created.
#[tokio::test]
async fn jobs_of_every_project_receive_them() {
    let server = TestServer::start().await;
    let ci = r#"
variables:
  GREETING: from-yaml
build:
  rules:
    - if: $INSTANCE_GATE == "open"
  script: [make]
"#;
    let repo_a = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let repo_b = Repo::new(&[(".gitlab-ci.yml", ci)]);
    let a = server.create_project("group/a", &repo_a).await["id"]
        .as_i64()
        .unwrap();
    let b = server.create_project("group/b", &repo_b).await["id"]
        .as_i64()
        .unwrap();
    for body in [
        json!({"key": "INSTANCE_GATE", "value": "open"}),
        json!({"key": "GREETING", "value": "from-instance"}),
        json!({"key": "SECRET", "value": "s3cr3t-value", "masked": true}),
        json!({"key": "KEY_FILE", "value": "line1\nline2", "variable_type": "file"}),
    ] {
        let (status, answer) = server.admin(Method::POST, PATH, Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{b}/variables"),
            Some(json!({"key": "GREETING", "value": "from-project"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, runner) = server.create_runner(json!({})).await;

    server.create_pipeline(a, "main").await;
    let (_, _, job) = server.take_job(&runner).await;
    assert_eq!(var(&job, "GREETING").unwrap()["value"], "from-instance");
    let secret = var(&job, "SECRET").unwrap();
    assert_eq!(
        (&secret["masked"], &secret["public"], &secret["value"]),
        (&json!(true), &json!(false), &json!("s3cr3t-value"))
    );
    let file = var(&job, "KEY_FILE").unwrap();
    assert_eq!(
        (&file["file"], &file["value"]),
        (&json!(true), &json!("line1\nline2"))
    );

    server.create_pipeline(b, "main").await;
    let (_, _, job) = server.take_job(&runner).await;
    assert_eq!(var(&job, "GREETING").unwrap()["value"], "from-project");
    let (status, pipeline) = server
        .admin(
            Method::POST,
            &format!("projects/{b}/pipeline"),
            Some(json!({"ref": "main", "variables": [{"key": "GREETING", "value": "from-pipeline"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pipeline}");
    let (_, _, job) = server.take_job(&runner).await;
    assert_eq!(var(&job, "GREETING").unwrap()["value"], "from-pipeline");

    // Closed gate: the rules see the change at the next pipeline's creation.
    let (status, _) = server
        .admin(
            Method::PUT,
            &format!("{PATH}/INSTANCE_GATE"),
            Some(json!({"value": "shut"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, answer) = server
        .admin(
            Method::POST,
            &format!("projects/{a}/pipeline?ref=main"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
}
