//! A pipeline's inputs over HTTP (GitLab's pipeline inputs): `inputs` of
//! `POST /projects/:id/pipeline` (typed JSON) and of the trigger API (typed JSON, or
//! `inputs[NAME]=value` form fields read as each input's declared type), reaching the
//! job through the configuration's `spec:inputs`; and how bad inputs are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_support;

use http_support::*;
use reqwest::Method;
use reqwest::StatusCode;
use reqwest::multipart::Form;
use serde_json::{Value, json};

const CI: &str = r#"spec:
  inputs:
    environment:
      options: [staging, production]
      default: staging
    replicas:
      type: number
    canary:
      type: boolean
      default: false
---
deploy:
  script: ["echo $[[ inputs.environment ]] x$[[ inputs.replicas ]] canary=$[[ inputs.canary ]]"]
"#;

fn script(payload: &Value) -> &str {
    payload["steps"][0]["script"][0]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn the_pipeline_api_takes_typed_inputs_and_refuses_bad_ones() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let path = format!("projects/{project}/pipeline");

    let (status, pipeline) = server
        .admin(
            Method::POST,
            &path,
            Some(json!({"ref": "main", "inputs": {"environment": "production", "replicas": 3, "canary": true}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{pipeline}");
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(script(&payload), "echo production x3 canary=true");

    // An input the configuration needs and did not get, or gets with the wrong type: the
    // pipeline is created failed with the error, as a configuration error always is.
    for (inputs, error) in [
        (
            json!(null),
            "`replicas` input: required value has not been provided",
        ),
        (
            json!({"replicas": "3"}),
            "`replicas` input: provided value is not a number",
        ),
        (
            json!({"replicas": 1, "region": "eu"}),
            "unknown input arguments: region",
        ),
    ] {
        let (status, pipeline) = server
            .admin(
                Method::POST,
                &path,
                Some(json!({"ref": "main", "inputs": inputs})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{pipeline}");
        assert_eq!(pipeline["status"], "failed", "{pipeline}");
        assert_eq!(pipeline["yaml_errors"], error, "{pipeline}");
    }

    // Not an object, or over the limit: refused before any pipeline exists.
    let many: serde_json::Map<String, Value> =
        (0..21).map(|i| (format!("i{i}"), json!(i))).collect();
    for (inputs, needle) in [
        (
            json!(["replicas", 3]),
            "inputs: inputs must be an object of input names and values",
        ),
        (
            Value::Object(many),
            "inputs: 21 inputs given: a pipeline takes at most 20",
        ),
    ] {
        let (status, refused) = server
            .admin(
                Method::POST,
                &path,
                Some(json!({"ref": "main", "inputs": inputs})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(refused.to_string().contains(needle), "{refused}");
    }
}

#[tokio::test]
async fn the_trigger_api_reads_form_inputs_as_their_declared_types() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let (_, created) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/triggers"),
            Some(json!({"description": "release"})),
        )
        .await;
    let token = created["token"].as_str().unwrap().to_owned();
    let url = server.api(&format!("projects/{project}/trigger/pipeline"));

    // `curl -F token=… -F ref=main -F "inputs[replicas]=2" -F "inputs[canary]=true"`.
    let form = Form::new()
        .text("token", token.clone())
        .text("ref", "main")
        .text("inputs[replicas]", "2")
        .text("inputs[canary]", "true");
    let response = server.http.post(&url).multipart(form).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(script(&payload), "echo staging x2 canary=true");

    // JSON: typed.
    let response = server
        .http
        .post(&url)
        .json(&json!({"token": token, "ref": "main", "inputs": {"replicas": 5, "environment": "production"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(script(&payload), "echo production x5 canary=false");

    // Text that is not the declared type: the pipeline fails with the input named.
    let response = server
        .http
        .post(format!(
            "{url}?token={token}&ref=main&inputs[replicas]=many"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let pipeline: Value = response.json().await.unwrap();
    assert_eq!(
        pipeline["yaml_errors"],
        "`replicas` input: provided value is not a number"
    );
    let response = server
        .http
        .post(&url)
        .json(&json!({"token": token, "ref": "main", "inputs": "replicas=3"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let refused: Value = response.json().await.unwrap();
    assert!(refused.to_string().contains("got a string"), "{refused}");
}

#[tokio::test]
async fn the_pipeline_api_reads_a_form_as_rack_does() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    // `curl --data ref=main --data "variables[][key]=A" …`: a repeated field starts the
    // next variable; `inputs[NAME]` are text, read as the declared types.
    let form = [
        ("ref", "main"),
        ("variables[][key]", "A"),
        ("variables[][value]", "1"),
        ("variables[][key]", "CONF"),
        ("variables[][variable_type]", "file"),
        ("variables[][value]", "x=y"),
        ("variables[][key]", "EMPTY"),
        ("variables[][value]", ""),
        ("inputs[replicas]", "4"),
        ("inputs[canary]", "true"),
    ];
    let response = server
        .http
        .post(server.api(&format!("projects/{project}/pipeline")))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let (_, _, payload) = server.take_job(&runner).await;
    assert_eq!(script(&payload), "echo staging x4 canary=true");
    let var = |key: &str| {
        payload["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["key"] == key)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(var("A")["value"], "1");
    assert_eq!(var("CONF")["value"], "x=y");
    assert_eq!(var("CONF")["file"], true);
    assert_eq!(var("EMPTY")["value"], "");

    // Too many inputs in a form: refused before any pipeline exists.
    let many: Vec<(String, String)> = (0..21)
        .map(|i| (format!("inputs[i{i}]"), "1".to_owned()))
        .chain([("ref".to_owned(), "main".to_owned())])
        .collect();
    let response = server
        .http
        .post(server.api(&format!("projects/{project}/pipeline")))
        .header("PRIVATE-TOKEN", &server.admin)
        .form(&many)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let refused: Value = response.json().await.unwrap();
    assert!(
        refused.to_string().contains("a pipeline takes at most 20"),
        "{refused}"
    );
}
