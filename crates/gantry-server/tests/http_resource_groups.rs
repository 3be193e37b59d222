//! Resource groups over HTTP, GitLab's API shapes: the group a key (expanded with the
//! job's variables) names is made with the pipeline, jobs wait for it one at a time, and
//! `process_mode` decides which waiting job gets it next (`upcoming_jobs` shows the order).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_support;

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
