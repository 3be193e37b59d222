//! The CI Lint API (`GET`/`POST /projects/:id/ci/lint`): a configuration checked in the
//! project's context — its `include:local` files, its variables — statically or as a dry
//! run for a ref, answered as GitLab answers (`valid`, `errors`, `warnings`,
//! `merged_yaml`, `includes`, `jobs`), with each error's place besides.
//!
//! [`gitlab_config`]: GitLab's own configuration, linted and created by a push on a server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "gitlab_config/mod.rs"]
mod gitlab_config;
use crate::http_support;

use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const CI: &str = r#"include:
  - local: ci/build.yml
workflow:
  rules:
    - if: $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH
test:
  extends: .base
  stage: test
  needs: [build]
  script: [make test]
deploy:
  stage: deploy
  environment: production
  rules:
    - if: $DEPLOY == "yes"
  script: [make deploy]
"#;

const BUILD: &str = r#".base:
  tags: [linux]
  before_script: [setup]
build:
  extends: .base
  stage: build
  script:
    - make
    - |
      echo two
      echo lines
"#;

async fn project_with_files(server: &TestServer) -> (i64, Repo) {
    let repo = Repo::new(&[(".gitlab-ci.yml", CI), ("ci/build.yml", BUILD)]);
    repo.git(&["branch", "feature"]);
    let id = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    (id, repo)
}

async fn lint_get(server: &TestServer, project: i64, query: &str) -> (StatusCode, Value) {
    server
        .admin(
            Method::GET,
            &format!("projects/{project}/ci/lint{query}"),
            None,
        )
        .await
}

async fn lint_post(server: &TestServer, project: i64, body: Value) -> (StatusCode, Value) {
    server
        .admin(
            Method::POST,
            &format!("projects/{project}/ci/lint"),
            Some(body),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projects_configuration_is_checked_with_its_includes_and_variables() {
    let server = TestServer::start().await;
    let (project, _repo) = project_with_files(&server).await;

    let (status, answer) = lint_get(&server, project, "").await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["valid"], true, "{answer}");
    assert!(
        answer.get("jobs").is_none(),
        "jobs only when asked: {answer}"
    );
    insta::assert_snapshot!(
        "merged_yaml",
        answer["merged_yaml"].as_str().expect("merged_yaml")
    );
    assert_eq!(
        answer["includes"],
        json!([{"type": "local", "location": "ci/build.yml"}])
    );

    // The jobs a push pipeline of the default branch would have: `deploy` waits for the
    // project variable its rule reads.
    let names = |answer: &Value| -> Vec<String> {
        answer["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, answer) = lint_get(&server, project, "?include_jobs=true").await;
    assert_eq!(names(&answer), ["build", "test"], "{answer}");
    let (status, _) = server
        .admin(
            Method::POST,
            &format!("projects/{project}/variables"),
            Some(json!({"key": "DEPLOY", "value": "yes"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, answer) = lint_get(&server, project, "?include_jobs=1").await;
    assert_eq!(names(&answer), ["build", "test", "deploy"], "{answer}");
    insta::assert_json_snapshot!("jobs", answer["jobs"]);

    // A dry run for `feature`: the workflow rules create no pipeline there.
    let (_, answer) = lint_get(&server, project, "?dry_run=true&dry_run_ref=feature").await;
    assert_eq!(answer["valid"], false, "{answer}");
    assert_eq!(
        answer["errors"],
        json!(["Pipeline filtered out by workflow rules."])
    );
    let (_, answer) = lint_get(&server, project, "?dry_run=true").await;
    assert_eq!(answer["valid"], true, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_content_is_checked_against_the_projects_files() {
    let server = TestServer::start().await;
    let (project, _repo) = project_with_files(&server).await;

    // Its local include comes from the repository.
    let content = "include: [{local: ci/build.yml}]\nlint:\n  stage: build\n  script: [lint]\n";
    let (status, answer) = lint_post(
        &server,
        project,
        json!({"content": content, "include_jobs": true}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["valid"], true, "{answer}");
    let jobs: Vec<&str> = answer["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["build", "lint"]);

    // Errors as GitLab words them, and where they are.
    let (status, answer) = lint_post(
        &server,
        project,
        json!({"content": "build:\n  script: [make]\n  scrip: [typo]\n"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["valid"], false);
    assert_eq!(
        answer["errors"],
        json!(["jobs:build config contains unknown keys: scrip"])
    );
    assert_eq!(answer["error_details"][0]["location"], ".gitlab-ci.yml:3:3");
    // The configuration merged, errors and all: the includes and `extends` resolved.
    assert!(
        answer["merged_yaml"].as_str().unwrap().contains("scrip:"),
        "{answer}"
    );

    let (status, answer) = lint_post(
        &server,
        project,
        json!({"content": "include: [{local: ci/missing.yml}]\nx:\n  script: [a]\n"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        answer["errors"][0]
            .as_str()
            .unwrap()
            .contains("ci/missing.yml"),
        "{answer}"
    );
    assert_eq!(answer["merged_yaml"], Value::Null, "not merged: {answer}");

    // Asked wrongly.
    let (status, answer) = lint_post(&server, project, json!({"dry_run": true})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer.to_string().contains("content is missing"),
        "{answer}"
    );
    let (status, answer) = lint_get(&server, project, "?content_ref=nope").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer.to_string().contains("Reference not found"),
        "{answer}"
    );
    let (status, _) = lint_get(&server, 4242, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
