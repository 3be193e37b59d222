//! `GET /-/metrics`: the coordinator's Prometheus metrics (OpenMetrics text) for an admin
//! token — the queue by status, online runners, this process's job requests and created
//! pipelines, the CI/CD semantic conventions' `cicd_*` metrics (active and finished
//! pipeline runs, runners by state), queue waits, job durations and failure reasons —
//! and `401` without one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

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
        // The conventions' names: the run executes, the runner is busy.
        "cicd_pipeline_run_active{cicd_pipeline_name=\"gantry/metered\",cicd_pipeline_run_state=\"executing\"} 1",
        "cicd_worker_count{cicd_worker_state=\"busy\"} 1",
        "cicd_worker_count{cicd_worker_state=\"available\"} 0",
        "cicd_worker_count{cicd_worker_state=\"offline\"} 0",
        "gantry_job_queue_duration_seconds_count 1",
        "# TYPE cicd_pipeline_run_duration_seconds histogram",
        "# UNIT cicd_pipeline_run_duration_seconds seconds",
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
        "gantry_job_failures_total{failure_reason=\"script_failure\"} 1",
        "gantry_job_duration_seconds_count{status=\"failed\"} 1",
        "cicd_worker_count{cicd_worker_state=\"available\"} 1",
    ] {
        assert!(text.contains(needle), "missing {needle:?}:\n{text}");
    }

    // The other job succeeds: the pipeline ends failed, one run of each state observed
    // (the result on `executing`, where it was reached), one run error, none active.
    let (second, second_token, _) = server.take_job(&runner).await;
    server.end_job(second, &second_token, "success").await;
    let (_, _, text) = scrape(&server, Some(&server.admin)).await;
    for needle in [
        "cicd_pipeline_run_duration_seconds_count{cicd_pipeline_name=\"gantry/metered\",cicd_pipeline_run_state=\"pending\",cicd_pipeline_result=\"\",error_type=\"\"} 1",
        "cicd_pipeline_run_duration_seconds_count{cicd_pipeline_name=\"gantry/metered\",cicd_pipeline_run_state=\"executing\",cicd_pipeline_result=\"failure\",error_type=\"_OTHER\"} 1",
        "cicd_pipeline_run_errors_total{cicd_pipeline_name=\"gantry/metered\",error_type=\"_OTHER\"} 1",
        "gantry_job_duration_seconds_count{status=\"success\"} 1",
        "gantry_job_queue_duration_seconds_count 2",
    ] {
        assert!(text.contains(needle), "missing {needle:?}:\n{text}");
    }
    assert!(
        !text.contains("cicd_pipeline_run_active{"),
        "no run is active:\n{text}"
    );
}

/// The series names PromQL `queries` read that start with one of `prefixes`. Label
/// names are left out: selectors' `{…}` and `by (…)` groupings are cut first.
fn metric_names(queries: &str, prefixes: &[&str]) -> std::collections::BTreeSet<String> {
    let mut text = String::new();
    let mut depth = 0;
    for c in queries.replace("by (", "{").chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ')' if depth > 0 => depth -= 1,
            _ if depth == 0 => text.push(c),
            _ => {}
        }
    }
    let text = text.as_str();
    let mut names = std::collections::BTreeSet::new();
    let bytes = text.as_bytes();
    for (i, _) in text.char_indices() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if !starts_word || !prefixes.iter().any(|p| text[i..].starts_with(p)) {
            continue;
        }
        let end = text[i..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .map_or(text.len(), |n| i + n);
        let name = &text[i..end];
        if !prefixes.contains(&name) && !name.ends_with('_') {
            names.insert(name.to_owned());
        }
    }
    names
}

/// Every server metric the example Grafana dashboard queries is one the server serves
/// (the runner's are checked by the runner's own tests).
#[tokio::test]
async fn the_example_dashboard_queries_metrics_the_server_has() {
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../../examples/grafana/gantry-cicd.json"))
            .expect("the dashboard is JSON");
    let mut queries = String::new();
    let mut stack = vec![&dashboard];
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    if key == "expr" && v.is_string() {
                        queries.push_str(v.as_str().unwrap());
                        queries.push('\n');
                    } else {
                        stack.push(v);
                    }
                }
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    let names = metric_names(&queries, &["cicd_", "gantry_"]);
    let server_names: Vec<_> = names
        .iter()
        .filter(|n| !n.starts_with("gantry_runner_"))
        .collect();
    assert!(server_names.len() >= 6, "{names:?}");
    let server = TestServer::start().await;
    let (_, _, text) = scrape(&server, Some(&server.admin)).await;
    for name in server_names {
        // A series of a histogram or counter family ends in a suffix the family's
        // `# TYPE` line has not (`cicd_worker_count` is a gauge of that whole name).
        let family = ["_bucket", "_count", "_sum", "_total"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix));
        assert!(
            text.contains(&format!("# TYPE {name} "))
                || family.is_some_and(|f| text.contains(&format!("# TYPE {f} "))),
            "the dashboard queries `{name}`, which the server does not serve:\n{text}"
        );
    }
}
