//! Resource groups over HTTP, GitLab's API shapes: the group a key (expanded with the
//! job's variables) names is made with the pipeline, jobs wait for it one at a time, and
//! `process_mode` decides which waiting job gets it next (`upcoming_jobs` shows the order).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use http_support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const CI: &str = r#"
workflow:
  auto_cancel:
    on_new_commit: none
deploy:
  script: [deploy]
  resource_group: production-$CI_COMMIT_REF_SLUG
"#;

fn ids(jobs: &Value) -> Vec<i64> {
    jobs.as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn waiting_jobs_get_the_resource_in_the_groups_process_mode() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        let pipeline = server.create_pipeline(project, "main").await;
        let id = pipeline["id"].as_i64().unwrap();
        jobs.push(
            server.pipeline_jobs(project, id).await[0]["id"]
                .as_i64()
                .unwrap(),
        );
    }
    // Why each waits (the job API's `pending_reason`): the holder for a runner that
    // never asked yet, the others for the resource, in GitLab's words.
    let held = server.job(project, jobs[0]).await;
    assert_eq!(held["pending_reason"]["code"], "runners_offline", "{held}");
    let waiting = server.job(project, jobs[1]).await;
    assert_eq!(waiting["status"], "waiting_for_resource");
    assert_eq!(
        waiting["pending_reason"],
        json!({"code": "resource_group_held", "message": "This job is waiting for resource: production-main"})
    );
    let base = format!("projects/{project}/resource_groups");
    let (status, groups) = server.admin(Method::GET, &base, None).await;
    assert_eq!(status, StatusCode::OK, "{groups}");
    assert_eq!(groups.as_array().unwrap().len(), 1, "{groups}");
    assert_eq!(groups[0]["key"], "production-main", "the key is expanded");
    assert_eq!(groups[0]["process_mode"], "unordered");
    let group = format!("{base}/production-main");
    let (_, upcoming) = server
        .admin(Method::GET, &format!("{group}/upcoming_jobs"), None)
        .await;
    assert_eq!(ids(&upcoming), [jobs[1], jobs[2]], "the first holds it");

    let (status, changed) = server
        .admin(
            Method::PUT,
            &group,
            Some(json!({"process_mode": "newest_first"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["process_mode"], "newest_first");
    let (_, upcoming) = server
        .admin(Method::GET, &format!("{group}/upcoming_jobs"), None)
        .await;
    assert_eq!(ids(&upcoming), [jobs[2], jobs[1]]);

    let (first, token, _) = server.take_job(&runner).await;
    assert_eq!(first, jobs[0]);
    server.end_job(first, &token, "success").await;
    let (next, token, _) = server.take_job(&runner).await;
    assert_eq!(next, jobs[2], "the newest pipeline's job goes next");
    server.end_job(next, &token, "success").await;
    let (last, _, _) = server.take_job(&runner).await;
    assert_eq!(last, jobs[1]);

    let (status, body) = server
        .admin(Method::PUT, &group, Some(json!({"process_mode": "random"})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = server
        .admin(Method::GET, &format!("{base}/staging"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

const STAGED: &str = r#"
workflow:
  auto_cancel:
    on_new_commit: none
stages: [build, deploy]
build:
  stage: build
  script: [make]
deploy:
  stage: deploy
  script: [deploy]
  resource_group: production
"#;

/// `(build, deploy)` job ids of `pipeline`.
async fn build_and_deploy(server: &TestServer, project: i64, pipeline: i64) -> (i64, i64) {
    let jobs = server.pipeline_jobs(project, pipeline).await;
    let id = |name: &str| {
        jobs.iter()
            .find(|j| j["name"] == name)
            .and_then(|j| j["id"].as_i64())
            .unwrap()
    };
    (id("build"), id("deploy"))
}

/// GitLab's `oldest_first` and `newest_first` count the jobs still to come (`created`):
/// an older pipeline whose deploy is not ready yet keeps the resource from a newer
/// one's ready deploy. `newest_ready_first` (and `unordered`) look at ready jobs only.
#[tokio::test]
async fn ordered_modes_wait_for_upcoming_jobs_and_newest_ready_first_does_not() {
    for (mode, newer_goes_first) in [("oldest_first", false), ("newest_ready_first", true)] {
        let server = TestServer::start().await;
        let repo = Repo::new(&[(".gitlab-ci.yml", STAGED)]);
        let project = server.create_project("app", &repo).await["id"]
            .as_i64()
            .unwrap();
        let (_, runner) = server.create_runner(json!({})).await;
        let older = server.create_pipeline(project, "main").await["id"]
            .as_i64()
            .unwrap();
        let group = format!("projects/{project}/resource_groups/production");
        let (status, body) = server
            .admin(Method::PUT, &group, Some(json!({ "process_mode": mode })))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let newer = server.create_pipeline(project, "main").await["id"]
            .as_i64()
            .unwrap();
        let (older_build, older_deploy) = build_and_deploy(&server, project, older).await;
        let (newer_build, newer_deploy) = build_and_deploy(&server, project, newer).await;

        // Both builds run; the newer one ends first: its deploy is ready, the older
        // pipeline's deploy is still to come.
        let (a, a_token, _) = server.take_job(&runner).await;
        let (b, b_token, _) = server.take_job(&runner).await;
        let tokens: std::collections::HashMap<i64, String> = [(a, a_token), (b, b_token)].into();
        server
            .end_job(newer_build, &tokens[&newer_build], "success")
            .await;
        let (_, upcoming) = server
            .admin(Method::GET, &format!("{group}/upcoming_jobs"), None)
            .await;
        let status = server.job(project, newer_deploy).await["status"].clone();
        if newer_goes_first {
            assert_eq!(status, "pending", "{mode}: the ready deploy goes");
            assert!(ids(&upcoming).is_empty(), "{mode}: {upcoming}");
            let (deploy, token, _) = server.take_job(&runner).await;
            assert_eq!(deploy, newer_deploy);
            server.end_job(deploy, &token, "success").await;
            server
                .end_job(older_build, &tokens[&older_build], "success")
                .await;
            let (deploy, _, _) = server.take_job(&runner).await;
            assert_eq!(deploy, older_deploy, "{mode}");
        } else {
            assert_eq!(status, "waiting_for_resource", "{mode}: it waits its turn");
            assert_eq!(
                ids(&upcoming),
                [older_deploy, newer_deploy],
                "{mode}: the older pipeline's deploy is first in line"
            );
            let queued = server.request_job(&runner, None).await;
            assert_eq!(queued.status(), StatusCode::NO_CONTENT, "{mode}");
            server
                .end_job(older_build, &tokens[&older_build], "success")
                .await;
            let (deploy, token, _) = server.take_job(&runner).await;
            assert_eq!(deploy, older_deploy, "{mode}");
            server.end_job(deploy, &token, "success").await;
            let (deploy, _, _) = server.take_job(&runner).await;
            assert_eq!(deploy, newer_deploy, "{mode}");
        }
    }
}
