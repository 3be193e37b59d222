//! A pipeline's inputs over HTTP (GitLab's pipeline inputs): `inputs` of
//! `POST /projects/:id/pipeline` (typed JSON) and of the trigger API (typed JSON, or
//! `inputs[NAME]=value` form fields read as each input's declared type), reaching the
//! job through the configuration's `spec:inputs`; and how bad inputs are refused. Also
//! job inputs (a job's `inputs:`, GitLab 18.10): values given on play and retry
//! (`job_inputs`), checked, stored per attempt, and sent in the payload's `inputs` to a
//! runner that announces `job_inputs` (others fail the job `runner_unsupported`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

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

const JOB_INPUTS_CI: &str = r#"
deploy:
  when: manual
  inputs:
    target:
      default: staging
      options: [staging, production]
    replicas:
      type: number
      default: 1
  script: ['echo ${{ job.inputs.target }} x${{ job.inputs.replicas }}']
"#;

/// A job request from a runner announcing `job_inputs` (or not).
async fn request(server: &TestServer, runner: &str, job_inputs: bool) -> reqwest::Response {
    server
        .http
        .post(server.api("jobs/request"))
        .json(&json!({"token": runner, "info": {"features": {"refspecs": true, "job_inputs": job_inputs}}}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn job_inputs_are_given_on_play_and_retry_and_reach_the_runner() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", JOB_INPUTS_CI)]);
    let project = server.create_project("inputs", &repo).await;
    let pid = project["id"].as_i64().unwrap();
    let pipeline = server.create_pipeline(pid, "main").await;
    let (status, jobs) = server
        .admin(
            Method::GET,
            &format!("projects/{pid}/pipelines/{}/jobs", pipeline["id"]),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{jobs}");
    let job = jobs[0]["id"].as_i64().unwrap();
    let play = |body: Value| {
        let server = &server;
        async move {
            server
                .admin(
                    Method::POST,
                    &format!("projects/{pid}/jobs/{job}/play"),
                    Some(body),
                )
                .await
        }
    };
    // Values that do not fit are refused with GitLab's messages; the job stays manual.
    let (status, body) = play(json!({"job_inputs": {"nope": 1}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("Unknown input: nope"),
        "{body}"
    );
    let (status, body) = play(json!({"job_inputs": {"target": "qa", "replicas": "many"}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(
            "`target` input: `qa` cannot be used because it is not in the list of allowed options"
        ) && message.contains("`replicas` input: provided value is not a number"),
        "{body}"
    );
    // Played with values (a number given as text is taken as the number).
    let (status, body) =
        play(json!({"job_inputs": {"target": "production", "replicas": "3"}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, runner) = server.create_runner(json!({})).await;
    let response = request(&server, &runner, true).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let payload: Value = response.json().await.unwrap();
    assert_eq!(
        payload["inputs"],
        json!([
            {"key": "target", "value": {"type": "string", "content": "production"}},
            {"key": "replicas", "value": {"type": "number", "content": 3}}
        ])
    );
    // The runner interpolates; the script arrives as written.
    assert_eq!(
        payload["steps"][0]["script"][0],
        "echo ${{ job.inputs.target }} x${{ job.inputs.replicas }}"
    );
    let token = payload["token"].as_str().unwrap().to_owned();
    server.end_job(job, &token, "success").await;

    // A retry without values keeps them; with values, they replace the set (an input
    // not given goes back to its default).
    let retry = |id: i64, body: Option<Value>| {
        let server = &server;
        async move {
            server
                .admin(
                    Method::POST,
                    &format!("projects/{pid}/jobs/{id}/retry"),
                    body,
                )
                .await
        }
    };
    let (status, second) = retry(job, None).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    let payload: Value = request(&server, &runner, true).await.json().await.unwrap();
    assert_eq!(
        payload["inputs"][0]["value"]["content"], "production",
        "{payload}"
    );
    assert_eq!(payload["inputs"][1]["value"]["content"], 3, "{payload}");
    let second_id = payload["id"].as_i64().unwrap();
    server
        .end_job(second_id, payload["token"].as_str().unwrap(), "success")
        .await;
    let (status, third) = retry(second_id, Some(json!({"job_inputs": {"replicas": 5}}))).await;
    assert_eq!(status, StatusCode::CREATED, "{third}");
    // A runner without the feature cannot run it: the job fails `runner_unsupported`.
    let response = request(&server, &runner, false).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let third_id = third["id"].as_i64().unwrap();
    let third = server.job(pid, third_id).await;
    assert_eq!(third["status"], "failed", "{third}");
    assert_eq!(third["failure_reason"], "runner_unsupported", "{third}");
    // Its retry (values kept from the third attempt) goes to a runner that has it.
    let (status, fourth) = retry(third_id, None).await;
    assert_eq!(status, StatusCode::CREATED, "{fourth}");
    let payload: Value = request(&server, &runner, true).await.json().await.unwrap();
    assert_eq!(
        payload["inputs"],
        json!([
            {"key": "target", "value": {"type": "string", "content": "staging"}},
            {"key": "replicas", "value": {"type": "number", "content": 5}}
        ])
    );
}
