//! `listen_address`: `gantry runner run` serves Prometheus metrics at `/metrics`, under
//! gitlab-runner's names, counting what the runner did: jobs received, running, failed
//! by reason, their durations, `concurrent`, and what jobs used (CPU, memory, I/O); a
//! job's resource use in the job API while it runs and at its end, on the shell and the
//! Docker executor.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

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
        // Each job's resource use (shell stages run detached here: a job journal).
        "gantry_runner_job_peak_memory_bytes_count{runner=\"metered\"} 2",
        "gantry_runner_job_cpu_seconds_total{runner=\"metered\",mode=\"user\"}",
        "gantry_runner_job_io_bytes_total{runner=\"metered\",direction=\"written\"}",
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

// ---- a job's resource use ------------------------------------------------------------

/// About 2 s of CPU while holding 200 MiB, then a pause with the figures settled: the
/// script prints what it used itself (`getrusage`: CPU seconds, peak RSS in bytes). A
/// job's figure is all its stages' (fetching the sources, the shells), which the
/// script's own `getrusage` does not see: `baseline`, a job with nothing to do, runs
/// first and measures that part (0.1–0.2 s on a loaded development machine).
const BURN: &str = r#"
baseline:
  stage: .pre
  script: ["true"]

burn:
  script:
    - |
      python3 -c "
      import resource, time
      block = bytearray(b'\x01') * (200 << 20)
      start = time.process_time()
      while time.process_time() - start < 2.0:
          pass
      used = resource.getrusage(resource.RUSAGE_SELF)
      print('burned', used.ru_utime + used.ru_stime, used.ru_maxrss * 1024, flush=True)
      time.sleep(10)
      "
"#;

/// The job's `resources` from the job API.
async fn resources(server: &Server, project: i64, job: i64) -> (String, serde_json::Value) {
    let job = server.job(project, job).await;
    (
        job["status"].as_str().unwrap_or_default().to_owned(),
        job["resources"].clone(),
    )
}

fn cpu(resources: &serde_json::Value) -> f64 {
    resources["cpu_user_seconds"].as_f64().unwrap_or(0.0)
        + resources["cpu_system_seconds"].as_f64().unwrap_or(0.0)
}

fn peak(resources: &serde_json::Value) -> f64 {
    resources["peak_memory_bytes"].as_f64().unwrap_or(0.0)
}

fn within(value: f64, expected: f64, what: &str) {
    assert!(
        (value - expected).abs() <= expected * 0.2,
        "{what}: {value} is not within 20% of {expected}"
    );
}

/// Waits for the `burned CPU PEAK` line, then reads the figures while the job still runs
/// (they arrive with the runner's keep-alives, every few seconds) and once it ended.
/// `burned` returns (cpu, peak) the script measured; the job's CPU figure is expected
/// to be that plus `overhead` (what the job's other work uses: [`BURN`]'s `baseline`).
async fn check_figures(
    setup: &Setup,
    pipeline: i64,
    overhead: f64,
    burned: impl Fn(&str) -> (f64, f64),
) {
    let server = &setup.server;
    let (job, log) = server
        // The output line, not the command's echo (`$ … echo "burned $total"`), which
        // reaches the log first.
        .wait_running(setup.project, pipeline, "burn", "\nburned ")
        .await;
    let (script_cpu, own_peak) = burned(&log);
    assert!(
        script_cpu >= 1.0,
        "the script burned only {script_cpu}s:\n{log}"
    );
    let own_cpu = script_cpu + overhead;
    // Mid-run: the job API shows the figures before the job ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let live = loop {
        let (status, used) = resources(server, setup.project, job).await;
        assert_eq!(
            status, "running",
            "the job ended before its figures arrived: {used}"
        );
        if cpu(&used) >= own_cpu * 0.8 && peak(&used) >= own_peak * 0.8 {
            break used;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no figures while it ran: {used}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    within(cpu(&live), own_cpu, "CPU seconds while it runs");
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    assert_eq!(done["status"], "success", "{done}");
    let (_, used) = resources(server, setup.project, job).await;
    // Everything a failure needs to be read: both figures and what they are held to.
    within(
        cpu(&used),
        own_cpu,
        &format!(
            "CPU seconds (at the end {used}, while it ran {live}, the script's {script_cpu}, the rest {overhead})"
        ),
    );
    within(peak(&used), own_peak, "peak memory");
    within(
        peak(&used),
        f64::from(200u32 << 20),
        "peak memory against 200 MiB",
    );
    assert!(
        used["read_bytes"].is_u64() && used["written_bytes"].is_u64(),
        "{used}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_jobs_cpu_and_peak_memory_are_reported_while_it_runs_and_at_its_end() {
    let setup = Setup::new(BURN, &[]).await;
    let runner = setup.runner("", "");
    let pipeline = setup.server.create_pipeline(setup.project).await;
    let baseline = setup
        .server
        .wait_job_status(
            setup.project,
            pipeline,
            "baseline",
            "success",
            Duration::from_secs(60),
        )
        .await;
    let (_, used) = resources(
        &setup.server,
        setup.project,
        baseline["id"].as_i64().unwrap(),
    )
    .await;
    let overhead = cpu(&used);
    // Sources, shells and `true`: measured, but a small part of the script's 2 s.
    assert!(
        overhead > 0.0 && overhead < 1.0,
        "a job with nothing to do used {overhead} CPU seconds: {used}"
    );
    check_figures(&setup, pipeline, overhead, |log| {
        let line = log.lines().find(|l| l.starts_with("burned")).unwrap();
        let words: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|w| w.parse().unwrap())
            .collect();
        (words[0], words[1])
    })
    .await;
    let summary = runner.stop(Duration::from_secs(30)).await;
    assert_eq!(summary.jobs.len(), 2);
}

const IMAGE: &str = "gantry-test/busybox:latest";

/// The same in a busybox container: `dd` with a 200 MiB block reads `/dev/zero` into it
/// (system time), again and again until busybox's `time` counted 2 s of CPU.
const BURN_DOCKER: &str = r#"
burn:
  script:
    - total=0; while awk "BEGIN {exit !($total < 2.0)}"; do time -p dd if=/dev/zero of=/dev/null bs=200M count=4 2>/tmp/t; total=$(awk -v t=$total '/^(user|sys)/ {t += $2} END {print t}' /tmp/t); done; echo "burned $total"
    - sleep 10
"#;

/// A project with `ci` and a runner with a Docker entry (the local test image), after
/// checking the engine has the image.
async fn docker_setup(ci: &str) -> (Setup, Runner) {
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "this test needs a Docker engine and the image {IMAGE}: start the engine and run scripts/test-images.sh"
    );
    let setup = Setup::new(ci, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let text = config_text(
        &setup.server.url,
        &setup.runner_token,
        dir.path(),
        "",
        &format!("[runners.docker]\nimage = \"{IMAGE}\"\npull_policy = [\"if-not-present\"]\n"),
    )
    .replace("executor = \"shell\"", "executor = \"docker\"");
    let runner = Runner::from_text(dir, &text);
    (setup, runner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_jobs_cpu_and_peak_memory_are_reported_while_it_runs_and_at_its_end() {
    let (setup, runner) = docker_setup(BURN_DOCKER).await;
    let pipeline = setup.server.create_pipeline(setup.project).await;
    // The build container's figures only: the script's own.
    check_figures(&setup, pipeline, 0.0, |log| {
        let line = log.lines().find(|l| l.starts_with("burned")).unwrap();
        let cpu: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        // dd's one block is the container's memory.
        (cpu, f64::from(200u32 << 20))
    })
    .await;
    runner.stop(Duration::from_secs(30)).await;
}

/// A service's use counts as the job's: the service burns about 2 s of CPU while the
/// job's own container only sleeps.
const BURNING_SERVICE: &str = r#"
burn:
  services:
    - name: gantry-test/busybox:latest
      alias: burner
      command: ["sh", "-c", "timeout 2 sh -c 'while :; do :; done'; sleep 60"]
  script:
    - sleep 6
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_jobs_services_count_in_its_resources() {
    let (setup, runner) = docker_setup(BURNING_SERVICE).await;
    let pipeline = setup.server.create_pipeline(setup.project).await;
    let done = setup
        .server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(90))
        .await;
    assert_eq!(done["status"], "success", "{done}");
    let job = setup
        .server
        .job_named(setup.project, pipeline, "burn")
        .await;
    let used = &job["resources"];
    // At most 2 s (the service's loop), at least most of it; the build container's
    // `sleep` adds next to nothing. A loaded machine may give the loop less.
    let cpu = cpu(used);
    assert!((1.0..=2.6).contains(&cpu), "{cpu} CPU seconds: {used}");
    runner.stop(Duration::from_secs(30)).await;
}
