//! Long polling of `POST /api/v4/jobs/request` (`runner-api.md` §3.3) over real HTTP: a
//! held request is released the moment a job becomes pending, answers `204` with
//! `X-GitLab-Last-Update` when the hold ends, and is released at once on shutdown.

mod http_support;

use std::time::{Duration, Instant};

use http_support::{Options, Repo, TestServer};
use reqwest::StatusCode;

const ONE_JOB: &str = "build:\n  script: [make]\n";

fn last_update(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-gitlab-last-update")
        .and_then(|v| v.to_str().ok())
        .expect("204 carries X-GitLab-Last-Update")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_request_is_held_for_the_configured_time_then_204() {
    let hold = Duration::from_millis(1500);
    let server = TestServer::start_with(Options {
        long_poll: hold,
        ..Options::default()
    })
    .await;
    let (_, runner) = server.create_runner(serde_json::json!({})).await;

    let first = server.request_job(&runner, None).await;
    assert_eq!(first.status(), StatusCode::NO_CONTENT);
    let version = last_update(&first);
    assert!(!version.is_empty());

    // Nothing changed: the echoed version is held the full duration.
    let started = Instant::now();
    let second = server.request_job(&runner, Some(&version)).await;
    let elapsed = started.elapsed();
    assert_eq!(second.status(), StatusCode::NO_CONTENT);
    assert_eq!(last_update(&second), version, "the queue did not change");
    assert!(
        elapsed >= hold - Duration::from_millis(100),
        "held {elapsed:?}"
    );
    assert!(
        elapsed < hold + Duration::from_secs(3),
        "held too long: {elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_wakes_when_a_job_is_queued() {
    let hold = Duration::from_secs(20);
    let server = TestServer::start_with(Options {
        long_poll: hold,
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(".gitlab-ci.yml", ONE_JOB)]);
    let project = server.create_project("demo", &repo).await;
    let project_id = project["id"].as_i64().expect("id");
    let (_, runner) = server.create_runner(serde_json::json!({})).await;
    let version = server.coordinator.queue_version();

    let waiting = {
        let http = server.http.clone();
        let url = server.api("jobs/request");
        let body = serde_json::json!({ "token": runner, "last_update": version });
        tokio::spawn(async move {
            let started = Instant::now();
            let response = http
                .post(url)
                .json(&body)
                .send()
                .await
                .expect("job request");
            (response, started)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "the request is held while nothing is pending"
    );
    let queued_at = Instant::now();
    server.create_pipeline(project_id, "main").await;

    let (response, started) = waiting.await.expect("request task");
    assert_eq!(response.status(), StatusCode::CREATED);
    let woke_after = queued_at.elapsed();
    assert!(
        started.elapsed() < hold / 2,
        "released long before the hold ended"
    );
    assert!(
        woke_after < Duration::from_secs(3),
        "picked up {woke_after:?} after queueing"
    );
    let payload: serde_json::Value = response.json().await.expect("payload");
    assert_eq!(payload["job_info"]["name"], "build");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_other_tags_stays_held() {
    let hold = Duration::from_millis(1500);
    let server = TestServer::start_with(Options {
        long_poll: hold,
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "build:\n  tags: [gpu]\n  script: [make]\n",
    )]);
    let project = server.create_project("demo", &repo).await;
    let project_id = project["id"].as_i64().expect("id");
    let (_, runner) = server
        .create_runner(serde_json::json!({ "tag_list": ["linux"], "run_untagged": false }))
        .await;
    let version = server.coordinator.queue_version();
    let started = Instant::now();
    let request = server.request_job(&runner, Some(&version));
    let queue = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.create_pipeline(project_id, "main").await;
    };
    let (response, ()) = tokio::join!(request, queue);
    assert_eq!(
        response.status(),
        StatusCode::NO_CONTENT,
        "a gpu job is not for a linux runner"
    );
    assert!(started.elapsed() >= hold - Duration::from_millis(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_held_requests() {
    let mut server = TestServer::start_with(Options {
        long_poll: Duration::from_secs(30),
        ..Options::default()
    })
    .await;
    let (_, runner) = server.create_runner(serde_json::json!({})).await;
    let version = server.coordinator.queue_version();
    let http = server.http.clone();
    let url = server.api("jobs/request");
    let waiting = tokio::spawn(async move {
        http.post(url)
            .json(&serde_json::json!({ "token": runner, "last_update": version }))
            .send()
            .await
            .expect("job request")
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let task = server.begin_shutdown();
    let response = waiting.await.expect("request task");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server stops promptly")
        .expect("server task")
        .expect("serve");
    assert!(started.elapsed() < Duration::from_secs(5));
}
