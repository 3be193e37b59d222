//! Long polling of `POST /api/v4/jobs/request` (`runner-api.md` §3.3) over real HTTP: a
//! held request is released the moment a job becomes pending, answers `204` with
//! `X-GitLab-Last-Update` when the hold ends, and is released at once on shutdown. A job
//! goes only to a request that can still receive it: a held request whose client hung up
//! is never given one, and a job its runner does not acknowledge (first update) within
//! the bound goes back to the queue, with a new token for its next runner.

use crate::http_support;

use std::time::{Duration, Instant};

use gantry_server::processor::Watchdog;
use http_support::{Options, Repo, TestServer};
use reqwest::StatusCode;
use tokio::io::AsyncWriteExt;

const ONE_JOB: &str = "build:\n  script: [make]\n";

fn last_update(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-gitlab-last-update")
        .and_then(|v| v.to_str().ok())
        .expect("204 carries X-GitLab-Last-Update")
        .to_owned()
}

/// A job request of `runner` sent with `version` (held while the queue is that version),
/// in a task: its answer and when it was sent.
fn held_request(
    server: &TestServer,
    runner: &str,
    version: &str,
) -> tokio::task::JoinHandle<(reqwest::Response, Instant)> {
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

    let waiting = held_request(&server, &runner, &version);
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

/// A held request whose runner is paused, or deleted, while it waits gets no job: the
/// job that wakes it stays pending and goes to the next runner that asks (the
/// assignment checks the runner; before, a deleted runner's assignment failed the batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_paused_or_deleted_while_held_gets_no_job() {
    let hold = Duration::from_secs(20);
    let server = TestServer::start_with(Options {
        long_poll: hold,
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(".gitlab-ci.yml", ONE_JOB)]);
    let project = server.create_project("demo", &repo).await;
    let project_id = project["id"].as_i64().expect("id");
    let (_, other) = server.create_runner(serde_json::json!({})).await;
    for how in ["paused", "deleted"] {
        let (id, runner) = server.create_runner(serde_json::json!({})).await;
        // The held request reads its runner before the change.
        let version = server.coordinator.queue_version();
        let waiting = held_request(&server, &runner, &version);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "{how}: held while nothing is pending"
        );
        let path = format!("runners/{id}");
        let (status, body) = if how == "paused" {
            server
                .admin(
                    reqwest::Method::PUT,
                    &path,
                    Some(serde_json::json!({ "paused": true })),
                )
                .await
        } else {
            server.admin(reqwest::Method::DELETE, &path, None).await
        };
        assert!(status.is_success(), "{how}: {status} {body}");
        let queued_at = Instant::now();
        server.create_pipeline(project_id, "main").await;
        let (held, _) = waiting.await.expect("request task");
        assert_eq!(held.status(), StatusCode::NO_CONTENT, "{how}");
        assert!(
            queued_at.elapsed() < hold / 2,
            "{how}: released when the job came, not at the end of the hold"
        );
        let taken = server.request_job(&other, None).await;
        assert_eq!(
            taken.status(),
            StatusCode::CREATED,
            "{how}: the job is still pending"
        );
        // And the changed runner is refused or given nothing from now on.
        let again = server.request_job(&runner, None).await.status();
        let expected = if how == "paused" {
            StatusCode::NO_CONTENT
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(again, expected, "{how}");
    }
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

/// A held job request on a raw connection, closed (as a runner's process exit closes
/// it) once it is held.
async fn hang_up_held_request(server: &TestServer, runner: &str) {
    let body = serde_json::json!({
        "token": runner,
        "last_update": server.coordinator.queue_version(),
    })
    .to_string();
    let address = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let request = format!(
        "POST /api/v4/jobs/request HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    // Held: nothing comes back while the queue does not change.
    let mut answer = [0u8; 1];
    let read = tokio::time::timeout(
        Duration::from_millis(500),
        tokio::io::AsyncReadExt::read(&mut stream, &mut answer),
    )
    .await;
    assert!(read.is_err(), "the request is held");
    drop(stream);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_hung_up_is_not_given_the_next_job() {
    let server = TestServer::start_with(Options {
        long_poll: Duration::from_secs(30),
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(".gitlab-ci.yml", ONE_JOB)]);
    let project = server.create_project("demo", &repo).await;
    let project_id = project["id"].as_i64().expect("id");
    let (_, runner) = server.create_runner(serde_json::json!({})).await;

    hang_up_held_request(&server, &runner).await;
    // The server reads the end of the connection and drops the request.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pipeline = server.create_pipeline(project_id, "main").await;
    let pipeline_id = pipeline["id"].as_i64().expect("id");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let jobs = server.pipeline_jobs(project_id, pipeline_id).await;
    assert_eq!(jobs[0]["status"], "pending", "nobody holds it: {jobs:?}");

    let started = Instant::now();
    let (id, _, payload) = server.take_job(&runner).await;
    assert_eq!(id, jobs[0]["id"].as_i64().expect("id"));
    assert_eq!(payload["job_info"]["name"], "build");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_its_runner_never_acknowledges_goes_back_to_the_queue() {
    let bound = Duration::from_secs(2);
    let server = TestServer::start_with(Options {
        long_poll: Duration::from_secs(20),
        timers: Some(Watchdog::default()),
        job_ack_timeout: bound,
        ..Options::default()
    })
    .await;
    let repo = Repo::new(&[(".gitlab-ci.yml", ONE_JOB)]);
    let project = server.create_project("demo", &repo).await;
    let project_id = project["id"].as_i64().expect("id");
    let (_, lost) = server.create_runner(serde_json::json!({})).await;
    let (other_id, other) = server.create_runner(serde_json::json!({})).await;
    let pipeline = server.create_pipeline(project_id, "main").await;
    let pipeline_id = pipeline["id"].as_i64().expect("id");

    // The answer reaches nobody: no `PUT state=running` follows.
    let (id, first_token, _) = server.take_job(&lost).await;
    let assigned = Instant::now();
    assert_eq!(server.job(project_id, id).await["status"], "running");

    // Another runner's held request gets the job once the bound has passed.
    let version = server.coordinator.queue_version();
    let response = server.request_job(&other, Some(&version)).await;
    let waited = assigned.elapsed();
    assert_eq!(response.status(), StatusCode::CREATED);
    let payload: serde_json::Value = response.json().await.expect("payload");
    assert_eq!(
        payload["id"].as_i64(),
        Some(id),
        "the same job, not a retry"
    );
    let second_token = payload["token"].as_str().expect("token").to_owned();
    assert_ne!(second_token, first_token, "a fresh token");
    assert!(
        waited >= bound,
        "put back after {waited:?}, before the bound"
    );
    assert!(
        waited < bound + Duration::from_secs(4),
        "put back only after {waited:?}"
    );
    let jobs = server.pipeline_jobs(project_id, pipeline_id).await;
    assert_eq!(jobs.len(), 1, "no retry attempt: {jobs:?}");
    assert_eq!(jobs[0]["pipeline"]["status"], "running", "{jobs:?}");
    assert_eq!(jobs[0]["runner_id"].as_i64(), Some(other_id));

    // The first runner's token is dead; the second runner acknowledges and keeps the job.
    let late = server
        .http
        .put(server.api(&format!("jobs/{id}")))
        .json(&serde_json::json!({ "token": first_token, "state": "running" }))
        .send()
        .await
        .expect("update");
    assert_eq!(late.status(), StatusCode::FORBIDDEN);
    let ack = server
        .http
        .put(server.api(&format!("jobs/{id}")))
        .json(&serde_json::json!({ "token": second_token, "state": "running" }))
        .send()
        .await
        .expect("update");
    assert_eq!(ack.status(), StatusCode::OK);
    tokio::time::sleep(bound + Duration::from_secs(2)).await;
    assert_eq!(
        server.job(project_id, id).await["status"],
        "running",
        "an acknowledged job stays with its runner"
    );
    server.end_job(id, &second_token, "success").await;
    assert_eq!(server.job(project_id, id).await["status"], "success");
}

/// Descriptors of this process open on the server's side of its connections: sockets
/// whose local port is `port` (from `/proc/net/tcp*`), each descriptor counted (a
/// duplicate of a socket is another descriptor of the same inode). Database connections
/// (PostgreSQL's pool grows as it likes) and the client ends are not counted.
fn server_side_fds(port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                if let Some(inode) = fields.get(9) {
                    inodes.insert(format!("socket:[{inode}]"));
                }
            }
        }
    }
    std::fs::read_dir("/proc/self/fd")
        .expect("read /proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|link| inodes.contains(&link.to_string_lossy().into_owned()))
        .count()
}

/// A held request costs the server one descriptor, its connection's socket (`peer.rs`
/// shares it rather than duplicating it): 10,000 waiting runners fit under a limit of
/// 20,000 open files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_costs_the_server_one_file_descriptor() {
    const HELD: usize = 40;
    let server = TestServer::start_with(Options {
        long_poll: Duration::from_secs(5),
        ..Options::default()
    })
    .await;
    let (_, runner) = server.create_runner(serde_json::json!({})).await;
    // Warm: the pools' connections and the runner's first request are open before counting.
    let first = server.request_job(&runner, None).await;
    assert_eq!(first.status(), StatusCode::NO_CONTENT);
    let address = server.url.trim_start_matches("http://").to_owned();
    let port: u16 = address
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the server's port");
    let before = server_side_fds(port);
    let body = serde_json::json!({
        "token": runner,
        "last_update": server.coordinator.queue_version(),
    })
    .to_string();
    let mut held = Vec::new();
    for _ in 0..HELD {
        let mut stream = tokio::net::TcpStream::connect(&address)
            .await
            .expect("connect");
        let request = format!(
            "POST /api/v4/jobs/request HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send the request");
        held.push(stream);
    }
    // Every request is read and waiting (the hang-up watch is running for each).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut answer = [0u8; 1];
    let read = tokio::time::timeout(
        Duration::from_millis(100),
        tokio::io::AsyncReadExt::read(&mut held[0], &mut answer),
    )
    .await;
    assert!(read.is_err(), "the requests are held");
    let grown = server_side_fds(port) - before;
    assert_eq!(
        grown, HELD,
        "{HELD} held requests opened {grown} descriptors on the server's side"
    );
    drop(held);
}
