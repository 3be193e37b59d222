//! `GET /-/metrics`: the coordinator's Prometheus metrics (OpenMetrics text) for an admin
//! token — the queue by status, online runners, this process's job requests and created
//! pipelines — and `401` without one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod http_support;

use http_support::{Repo, TestServer};
use reqwest::StatusCode;

const CI: &str = "
one:
  script: [echo one]
two:
  script: [echo two]
";

async fn scrape(server: &TestServer, token: Option<&str>) -> (StatusCode, String, String) {
    let mut request = server.http.get(format!("{}/-/metrics", server.url));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, response.text().await.unwrap())
}

#[tokio::test]
async fn metrics_show_the_queue_runners_and_requests_to_an_admin() {
    let server = TestServer::start().await;
    let (status, _, body) = scrape(&server, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, _, _) = scrape(&server, Some("glpat-not-a-token")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, content_type, text) = scrape(&server, Some(&server.admin)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    for needle in [
        "gantry_jobs{status=\"pending\"} 0",
        "gantry_runners_online 0",
        "gantry_pipelines_created_total 0",
        "# EOF",
    ] {
        assert!(text.contains(needle), "missing {needle:?}:\n{text}");
    }

    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("metered", &repo).await;
    server
        .create_pipeline(project["id"].as_i64().unwrap(), "main")
        .await;
    let (_, runner) = server.create_runner(serde_json::json!({})).await;
    let (first, first_token, _) = server.take_job(&runner).await;

    let (_, _, text) = scrape(&server, Some(&server.admin)).await;
    for needle in [
        "gantry_jobs{status=\"pending\"} 1",
        "gantry_jobs{status=\"running\"} 1",
        "gantry_runners_online 1",
        "gantry_job_requests_total{result=\"job\"} 1",
        "gantry_job_requests_total{result=\"none\"} 0",
        "gantry_pipelines_created_total 1",
        "gantry_build_info{version=",
        "gantry_jobs_finished_total{status=\"success\"} 0",
    ] {
        assert!(text.contains(needle), "missing {needle:?}:\n{text}");
    }

    // The job ends: it leaves the running ones and counts as finished.
    server.end_job(first, &first_token, "failed").await;
    let (_, _, text) = scrape(&server, Some(&server.admin)).await;
    for needle in [
        "gantry_jobs{status=\"running\"} 0",
        "gantry_jobs_finished_total{status=\"failed\"} 1",
        "gantry_jobs_finished_total{status=\"success\"} 0",
    ] {
        assert!(text.contains(needle), "missing {needle:?}:\n{text}");
    }
}
