//! `listen_address`: `gantry runner run` serves Prometheus metrics at `/metrics`, under
//! gitlab-runner's names, counting what the runner did: jobs received, running, failed
//! by reason, their durations, `concurrent`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod e2e_runner_support;

use std::io::BufRead as _;
use std::process::Stdio;
use std::time::Duration;

use e2e_runner_support::*;
use nix::sys::signal::Signal;

const PIPELINE: &str = r#"
passes:
  script: [echo fine]

fails:
  script: [exit 1]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_serves_its_metrics_at_listen_address() {
    let setup = Setup::new(PIPELINE, &[]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"concurrent = 2
check_interval = 1
listen_address = "127.0.0.1:0"

[[runners]]
name = "metered"
url = "{url}"
token = "{token}"
executor = "shell"
builds_dir = "{builds}"
cache_dir = "{cache}"
"#,
            url = server.url,
            token = setup.runner_token,
            builds = dir.path().join("builds").display(),
            cache = dir.path().join("cache").display(),
        ),
    )
    .unwrap();
    let mut child = gantry()
        .args(["runner", "run", "--config"])
        .arg(&config)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map(Child)
        .expect("gantry runs");
    // The runner says where the metrics are; the rest of its log is kept for messages.
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = Vec::new();
    let metrics_url = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("no metrics address announced:\n{}", log.join("\n")));
        if let Some(url) = line.strip_prefix("info: metrics at ") {
            break url.to_owned();
        }
        log.push(line);
    };

    let pipeline = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    assert_eq!(done["status"], "failed", "{done}");
    // The second job's end may still be on its way into the metrics.
    let mut text = String::new();
    for _ in 0..50 {
        let response = server.http.get(&metrics_url).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        text = response.text().await.unwrap();
        if text.contains("gitlab_runner_jobs{runner=\"metered\"} 0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for needle in [
        "gitlab_runner_version_info{name=\"gantry-runner\"",
        "gitlab_runner_concurrent 2",
        "gitlab_runner_jobs{runner=\"metered\"} 0",
        "gantry_runner_jobs_received_total{runner=\"metered\"} 2",
        "gitlab_runner_failed_jobs_total{runner=\"metered\",failure_reason=\"script_failure\"} 1",
        "gitlab_runner_job_duration_seconds_count{runner=\"metered\"} 2",
        // Both jobs were received and accepted (`201`, `200`) and their logs sent.
        "gitlab_runner_api_request_statuses_total{runner=\"metered\",endpoint=\"request_job\",status=\"201\"} 2",
        "gitlab_runner_api_request_statuses_total{runner=\"metered\",endpoint=\"update_job\",status=\"200\"}",
        "gitlab_runner_api_request_statuses_total{runner=\"metered\",endpoint=\"patch_trace\",status=\"202\"}",
        "# EOF",
    ] {
        assert!(text.contains(needle), "missing {needle:?}:\n{text}");
    }

    child.signal(Signal::SIGQUIT);
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        log.push(line);
    }
    assert!(
        log.iter().any(|l| l.contains("stopped after 2 job")),
        "{}",
        log.join("\n")
    );
}
