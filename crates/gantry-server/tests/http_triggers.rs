//! Pipeline trigger tokens over HTTP, as another system's CI uses them: create one with
//! the admin token, start pipelines with it (multipart form, JSON, the webhook form),
//! variables reaching the job, `CI_PIPELINE_SOURCE=trigger` seen by `rules`, and every
//! way a trigger is refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_support;

use http_support::*;
use reqwest::Method;
use reqwest::StatusCode;
use reqwest::multipart::Form;
use serde_json::{Value, json};

const CI: &str = r#"
deploy:
  rules:
    - if: $CI_PIPELINE_SOURCE == "trigger"
  script: [echo "deploying to $DEPLOY_TARGET"]
"#;

fn var<'a>(payload: &'a Value, key: &str) -> Option<&'a str> {
    payload["variables"]
        .as_array()?
        .iter()
        .find(|v| v["key"] == key)
        .and_then(|v| v["value"].as_str())
}

#[tokio::test]
async fn a_trigger_token_starts_pipelines_with_variables_until_it_is_deleted() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let other = server.create_project("other", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;

    let (status, refused) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/triggers"),
            Some(json!({"description": " "})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(refused.to_string().contains("description"), "{refused}");
    let (status, created) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/triggers"),
            Some(json!({"description": "nightly from the release repo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let token = created["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("glptt-") && token.len() == 46, "{token}");
    let trigger_id = created["id"].as_i64().unwrap();

    // Lists show the token's first characters only; without the admin token, nothing.
    let (status, listed) = server
        .admin(Method::GET, &format!("projects/{project}/triggers"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed[0]["description"], "nightly from the release repo");
    let shown = listed[0]["token"].as_str().unwrap();
    assert!(token.starts_with(shown.trim_end_matches('…')) && shown.len() < token.len());
    let anonymous = server
        .http
        .get(server.api(&format!("projects/{project}/triggers")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);

    // `curl -F token=… -F ref=main -F "variables[DEPLOY_TARGET]=staging"`: no user token.
    let form = Form::new()
        .text("token", token.clone())
        .text("ref", "main")
        .text("variables[DEPLOY_TARGET]", "staging");
    let response = server
        .http
        .post(server.api(&format!("projects/{project}/trigger/pipeline")))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let pipeline: Value = response.json().await.unwrap();
    assert_eq!(pipeline["source"], "trigger", "{pipeline}");
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "DEPLOY_TARGET"), Some("staging"));
    assert_eq!(var(&payload, "CI_PIPELINE_SOURCE"), Some("trigger"));
    assert_eq!(var(&payload, "CI_PIPELINE_TRIGGERED"), Some("true"));

    // JSON, and the webhook form with the token in the query.
    let response = server
        .http
        .post(server.api(&format!("projects/{project}/trigger/pipeline")))
        .json(&json!({"token": token, "ref": "main", "variables": {"DEPLOY_TARGET": "prod"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "DEPLOY_TARGET"), Some("prod"));
    let response = server
        .http
        .post(server.api(&format!(
            "projects/{project}/ref/main/trigger/pipeline?token={token}&variables[DEPLOY_TARGET]=hook"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(var(&payload, "DEPLOY_TARGET"), Some("hook"));
    let (_, listed) = server
        .admin(Method::GET, &format!("projects/{project}/triggers"), None)
        .await;
    assert!(listed[0]["last_used"].is_string(), "{listed}");

    // Refusals: each a 4xx naming what is wrong.
    let post = |project: i64, body: Value| {
        server
            .http
            .post(server.api(&format!("projects/{project}/trigger/pipeline")))
            .json(&body)
            .send()
    };
    for (project, body, status, needle) in [
        (
            project,
            json!({"token": "glptt-nope", "ref": "main"}),
            StatusCode::NOT_FOUND,
            "Not Found",
        ),
        (
            other,
            json!({"token": token, "ref": "main"}),
            StatusCode::NOT_FOUND,
            "Not Found",
        ),
        (
            project,
            json!({"ref": "main"}),
            StatusCode::BAD_REQUEST,
            "token is missing",
        ),
        (
            project,
            json!({"token": token}),
            StatusCode::BAD_REQUEST,
            "ref is missing",
        ),
        (
            project,
            json!({"token": token, "ref": "main", "variables": {"NOT-A-NAME": "x"}}),
            StatusCode::BAD_REQUEST,
            "is not a variable name",
        ),
        (
            project,
            json!({"token": token, "ref": "main", "variables": ["x"]}),
            StatusCode::BAD_REQUEST,
            "variables must be an object",
        ),
        (
            project,
            json!({"token": token, "ref": "no-such-branch"}),
            StatusCode::BAD_REQUEST,
            "no-such-branch",
        ),
    ] {
        let response = post(project, body.clone()).await.unwrap();
        let (got, error) = expect_client_error(response, "trigger").await;
        assert_eq!(got, status, "{body}: {error}");
        assert!(error.to_string().contains(needle), "{body}: {error}");
    }

    // Deleted: the token starts nothing any more.
    let (status, _) = server
        .admin(
            Method::DELETE,
            &format!("projects/{project}/triggers/{trigger_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let response = post(project, json!({"token": token, "ref": "main"}))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let (status, _) = server
        .admin(
            Method::DELETE,
            &format!("projects/{project}/triggers/{trigger_id}"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
