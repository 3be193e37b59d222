//! Runner benchmarks against our coordinator over loopback, printing their figures:
//!
//! * **overhead** of a trivial job (`script: ["true"]`, `GIT_STRATEGY: none`): pick-up to
//!   final update accepted, as the coordinator recorded them (`started_at` is set when
//!   the job is assigned, `finished_at` when the final update is applied; milliseconds),
//!   minus the time bash takes to run `true` the way the runner starts it (`bash -l`,
//!   with an empty `HOME` for both so this machine's `~/.profile` is not timed);
//! * **trace throughput** of a job printing 100 MB (CI_JOB_TOKEN and the default token
//!   prefixes are masked, so the masker scans every byte): bytes ÷ (pick-up → final
//!   update accepted), every byte stored by the coordinator, and the runner's peak RSS
//!   (`VmHWM`). To tell where the time goes it also prints the runner's CPU time for
//!   the job, the time the job's command takes on its own, and the coordinator's own
//!   ceiling: 1 MiB trace patches sent back to back by a bare HTTP client;
//! * **idle RSS** of `gantry runner run` (`VmRSS` once it is long-polling);
//! * **artifact memory**: a job uploads a 200 MB artifact of random bytes, the next
//!   downloads it; the runner's and the coordinator's peak RSS over their RSS before.
//!
//! The coordinator runs in this process; the runner is the `gantry` binary of the same
//! profile (`cargo bench` builds it in release). Run:
//!
//! ```sh
//! cargo bench -p gantry --bench runner   # BENCH_JOBS=30 BENCH_TRACE_MB=100 BENCH_TRACE_RUNS=3 BENCH_ARTIFACT_MB=200
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/e2e_runner_support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{Child, Repo, Server, ServerOptions, config_text, gantry};

const OVERHEAD_TARGET_MS: f64 = 20.0;
const THROUGHPUT_TARGET_MB_S: f64 = 200.0;
const IDLE_RSS_TARGET_MB: f64 = 20.0;
/// Growth of a process's peak RSS while an artifact of any size passes through it.
const ARTIFACT_RSS_TARGET_MB: f64 = 32.0;

const CI: &str = r#"
trivial:
  rules:
    - if: $BENCH == "trivial"
  variables:
    GIT_STRATEGY: none
  script: ["true"]

held:
  rules:
    - if: $BENCH == "held"
  variables:
    GIT_STRATEGY: none
  script: ["sleep 600"]

big:
  rules:
    - if: $BENCH == "big"
  variables:
    GIT_STRATEGY: none
  script:
    - |
      set +o pipefail  # `head` ends `yes` with SIGPIPE
      yes 'gantry bench: building glibc-2.38 with gcc 12, output line of 64 bytes' | head -c "$BENCH_BYTES"

artifact-make:
  rules:
    - if: $BENCH == "artifact"
  variables:
    GIT_STRATEGY: none
  script:
    - head -c "$BENCH_BYTES" /dev/urandom > blob.bin
  artifacts:
    paths: [blob.bin]

artifact-use:
  rules:
    - if: $BENCH == "artifact"
  needs: [artifact-make]
  variables:
    GIT_STRATEGY: none
  script:
    - test "$(stat -c %s blob.bin)" = "$BENCH_BYTES"
"#;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `2026-11-21T15:18:12.227Z` → milliseconds since the epoch.
fn parse_ms(value: &serde_json::Value) -> i64 {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("not a time: {value}"));
    let num = |range: std::ops::Range<usize>| text[range].parse::<i64>().unwrap();
    let (y, m, d) = (num(0..4), num(5..7), num(8..10));
    let (hh, mm, ss, ms) = (num(11..13), num(14..16), num(17..19), num(20..23));
    let days = gantry_protocol::time::days_from_civil(y, m as u32, d as u32)
        .unwrap_or_else(|| panic!("not a date: {text}"));
    ((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1000) + ms
}

/// `VmRSS`/`VmHWM` of a process, in kB.
fn status_kb(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field}"));
    line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let at = ((values.len() - 1) as f64 * p).round() as usize;
    values[at]
}

/// User + system CPU time of a process, seconds (`/proc/<pid>/stat`, 100 Hz ticks).
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// The job's command on its own (`bash -c`, output to /dev/null), ms.
fn print_alone_ms(bytes: u64) -> f64 {
    let command = format!(
        "yes 'gantry bench: building glibc-2.38 with gcc 12, output line of 64 bytes' | head -c {bytes} > /dev/null"
    );
    let started = Instant::now();
    let status = std::process::Command::new("bash")
        .args(["-c", &command])
        .status()
        .unwrap();
    assert!(status.success());
    started.elapsed().as_secs_f64() * 1000.0
}

/// The coordinator's ceiling: takes a job as a bare HTTP client would (no runner), sends
/// `bytes` of trace in 1 MiB patches back to back, finishes the job. MB/s.
async fn coordinator_ceiling(server: &Server, project: i64, token: &str, bytes: u64) -> f64 {
    let body = serde_json::json!({"ref": "main", "variables": [{"key": "BENCH", "value": "held"}]});
    let (status, pipeline) = server
        .call(
            reqwest::Method::POST,
            &format!("projects/{project}/pipeline"),
            Some(body),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{pipeline}");
    let request = serde_json::json!({"token": token, "system_id": support::SYSTEM_ID});
    let answer = server
        .http
        .post(server.api("jobs/request"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::CREATED);
    let payload: serde_json::Value = answer.json().await.unwrap();
    let (id, job_token) = (
        payload["id"].as_i64().unwrap(),
        payload["token"].as_str().unwrap().to_owned(),
    );
    let chunk = vec![b'x'; 1 << 20];
    let mut checksum = gantry_protocol::TraceChecksum::new();
    let started = Instant::now();
    let mut offset = 0u64;
    while offset < bytes {
        let len = (bytes - offset).min(1 << 20);
        let data = chunk[..len as usize].to_vec();
        checksum.update(&data);
        let answer = server
            .http
            .patch(server.api(&format!("jobs/{id}/trace")))
            .header("JOB-TOKEN", &job_token)
            .header("Content-Range", format!("{offset}-{}", offset + len - 1))
            .body(data)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), reqwest::StatusCode::ACCEPTED);
        offset += len;
    }
    let update = serde_json::json!({
        "token": job_token, "state": "success",
        "output": {"checksum": checksum.to_wire(), "bytesize": bytes},
    });
    let answer = server
        .http
        .put(server.api(&format!("jobs/{id}")))
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), reqwest::StatusCode::OK);
    bytes as f64 / 1e6 / started.elapsed().as_secs_f64()
}

/// How long bash takes to start, run `true` and exit, started as the runner starts job
/// scripts (`bash -l <file>`): the median of `n` runs, ms.
fn bash_true_ms(dir: &Path, home: &Path, n: usize) -> f64 {
    let script = dir.join("true.sh");
    std::fs::write(&script, "true\n").unwrap();
    let mut samples: Vec<f64> = (0..n)
        .map(|_| {
            let started = Instant::now();
            let status = std::process::Command::new("bash")
                .arg("-l")
                .arg(&script)
                .env("HOME", home)
                .status()
                .unwrap();
            assert!(status.success());
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    median(&mut samples)
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

async fn run_pipeline(server: &Server, project: i64, bench: &str, bytes: u64) -> serde_json::Value {
    let jobs = run_pipeline_jobs(server, project, bench, bytes).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    jobs[0].clone()
}

/// Runs the pipeline of `$BENCH == bench` to success; its jobs.
async fn run_pipeline_jobs(
    server: &Server,
    project: i64,
    bench: &str,
    bytes: u64,
) -> Vec<serde_json::Value> {
    let body = serde_json::json!({
        "ref": "main",
        "variables": [
            {"key": "BENCH", "value": bench},
            {"key": "BENCH_BYTES", "value": bytes.to_string()},
        ],
    });
    let (status, pipeline) = server
        .call(
            reqwest::Method::POST,
            &format!("projects/{project}/pipeline"),
            Some(body),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{pipeline}");
    let id = pipeline["id"].as_i64().unwrap();
    let done = server
        .wait_pipeline(project, id, Duration::from_secs(600))
        .await;
    let jobs = server.jobs(project, id).await;
    if done["status"] != "success" {
        if let Some(job) = jobs.iter().find(|j| j["status"] != "success") {
            let log = server.trace(project, job["id"].as_i64().unwrap()).await;
            let tail = &log[log.len().saturating_sub(2000)..];
            panic!("the {bench} pipeline failed at {job}\n…{tail}");
        }
        panic!("the {bench} pipeline ended {}", done["status"]);
    }
    jobs
}

/// Resets a process's `VmHWM` to its current RSS (`/proc/<pid>/clear_refs`, Linux ≥ 4.0).
fn reset_peak(pid: i32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

async fn bench() {
    let jobs = env_number("BENCH_JOBS", 30) as usize;
    let trace_bytes = env_number("BENCH_TRACE_MB", 100) * 1_000_000;
    let artifact_mb = env_number("BENCH_ARTIFACT_MB", 200);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(ServerOptions {
        long_poll: Duration::from_secs(50),
        trace_limit: trace_bytes + 16 * 1024 * 1024,
        artifact_limit: artifact_mb * 1_000_000 + 1024 * 1024,
        ..ServerOptions::default()
    })
    .await;
    let repo = Repo::new(CI, &[]);
    let project = server.create_project("bench", &repo).await;
    let token = server.create_runner().await;
    // Before the runner starts (it would take the held job).
    let ceiling = coordinator_ceiling(&server, project, &token, trace_bytes)
        .await
        .max(coordinator_ceiling(&server, project, &token, trace_bytes).await);
    let alone_ms = print_alone_ms(trace_bytes);
    let config = dir.path().join("config.toml");
    let output_limit_kb = trace_bytes / 1024 + 16 * 1024;
    let global = "log_level = \"warn\"\ncheck_interval = 1";
    std::fs::write(
        &config,
        config_text(
            &server.url,
            &token,
            dir.path(),
            global,
            &format!("output_limit = {output_limit_kb}"),
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("runner.log")).unwrap();
    // An empty home: the login shells of jobs (`bash -l`) read /etc/profile only, not
    // whatever this machine's ~/.profile runs (pyenv, …), which is not the runner's time.
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let runner = Child(
        gantry()
            .args(["runner", "run", "--config", config.to_str().unwrap()])
            .env("HOME", &home)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("gantry runs"),
    );
    let pid = runner.id();
    println!(
        "gantry runner benchmarks: runner = {} (pid {pid}), coordinator in-process on {}",
        env!("CARGO_BIN_EXE_gantry"),
        server.url
    );

    // (c) idle RSS: once the coordinator has seen the runner and holds its job request.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, runners) = server.call(reqwest::Method::GET, "runners/all", None).await;
        if runners
            .as_array()
            .is_some_and(|r| r.iter().any(|r| !r["contacted_at"].is_null()))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the runner never contacted the coordinator"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle_kb = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            status_kb(pid, "VmRSS")
        })
        .max()
        .unwrap();
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.count())
        .unwrap_or(0);

    let idle_mb = idle_kb as f64 / 1024.0;
    println!();
    println!(
        "(c) idle RSS of `gantry runner run` (long-polling, {threads} threads): {idle_mb:.1} MB   target < {IDLE_RSS_TARGET_MB} MB: {}",
        verdict(idle_mb < IDLE_RSS_TARGET_MB)
    );

    // (a) overhead of a trivial job.
    let bash_ms = bash_true_ms(dir.path(), &home, 30);
    run_pipeline(&server, project, "trivial", 0).await; // warm-up
    let mut samples = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        let job = run_pipeline(&server, project, "trivial", 0).await;
        samples.push((parse_ms(&job["finished_at"]) - parse_ms(&job["started_at"])) as f64);
    }
    let job_p50 = median(&mut samples);
    let job_p90 = percentile(&mut samples, 0.9);
    let job_min = samples[0];
    let overhead = job_p50 - bash_ms;
    println!();
    println!(
        "(a) overhead of a trivial `true` job ({jobs} jobs, pick-up → final update accepted, coordinator timestamps)"
    );
    println!("    job: median {job_p50:.1} ms, p90 {job_p90:.1} ms, min {job_min:.1} ms");
    println!("    bash -l running `true`: median {bash_ms:.1} ms");
    println!(
        "    overhead (median job − bash): {overhead:.1} ms   target < {OVERHEAD_TARGET_MS} ms: {}",
        verdict(overhead < OVERHEAD_TARGET_MS)
    );

    // (b) trace throughput.
    let runs = env_number("BENCH_TRACE_RUNS", 3).max(1);
    let mut results = Vec::new();
    let me = std::process::id() as i32;
    for _ in 0..runs {
        let (cpu_before, coordinator_before) = (cpu_seconds(pid), cpu_seconds(me));
        let job = run_pipeline(&server, project, "big", trace_bytes).await;
        let runner_cpu = cpu_seconds(pid) - cpu_before;
        let coordinator_cpu = cpu_seconds(me) - coordinator_before;
        let took_ms = (parse_ms(&job["finished_at"]) - parse_ms(&job["started_at"])) as f64;
        let stored = server
            .coordinator()
            .traces()
            .trace(job["id"].as_i64().unwrap())
            .await
            .unwrap();
        assert!(
            stored.len() as u64 >= trace_bytes,
            "the coordinator stored {} bytes",
            stored.len()
        );
        let payload = stored.len() as f64 / 1e6;
        results.push((
            payload / (took_ms / 1000.0),
            took_ms,
            payload,
            runner_cpu,
            coordinator_cpu,
        ));
    }
    let peak_kb = status_kb(pid, "VmHWM");
    let after_kb = status_kb(pid, "VmRSS");

    // (d) memory while an artifact goes up and comes down again.
    let artifact_bytes = artifact_mb * 1_000_000;
    let runner_base_kb = status_kb(pid, "VmRSS");
    let coordinator_base_kb = status_kb(me, "VmRSS");
    reset_peak(pid);
    reset_peak(me);
    let started = Instant::now();
    let artifact_jobs = run_pipeline_jobs(&server, project, "artifact", artifact_bytes).await;
    let artifact_s = started.elapsed().as_secs_f64();
    assert_eq!(artifact_jobs.len(), 2, "{artifact_jobs:?}");
    let runner_peak_kb = status_kb(pid, "VmHWM");
    let coordinator_peak_kb = status_kb(me, "VmHWM");
    drop(runner);
    results.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (best, took_ms, payload, runner_cpu, coordinator_cpu) = results[0];
    let median = results[results.len() / 2].0;
    println!();
    println!(
        "(b) trace throughput: {payload:.1} MB printed, masking on, all stored by the coordinator ({runs} runs)"
    );
    println!(
        "    pick-up → final update accepted: best {took_ms:.0} ms = {best:.0} MB/s, median {median:.0} MB/s   target ≥ {THROUGHPUT_TARGET_MB_S} MB/s: {}",
        verdict(best >= THROUGHPUT_TARGET_MB_S)
    );
    println!(
        "    runner peak RSS (VmHWM) {:.1} MB over all runs, RSS afterwards {:.1} MB",
        peak_kb as f64 / 1024.0,
        after_kb as f64 / 1024.0
    );
    println!(
        "    where the time goes (best run): the runner used {runner_cpu:.2} s of CPU ({:.0} MB per CPU-second), the coordinator {coordinator_cpu:.2} s ({:.0} MB per CPU-second; this process, its HTTP client included); the job's command alone takes {alone_ms:.0} ms; the coordinator alone ingests {ceiling:.0} MB/s (1 MiB patches back to back from a bare HTTP client, best of 2)",
        payload / runner_cpu.max(0.01),
        payload / coordinator_cpu.max(0.01)
    );
    let mb = |kb: u64| kb as f64 / 1024.0;
    println!();
    println!(
        "(d) a {artifact_mb} MB artifact (random bytes) uploaded by one job and downloaded by the next: {artifact_s:.1} s for the pipeline"
    );
    println!(
        "    runner peak RSS {:.1} MB (+{:.1} MB over its {:.1} MB before)   target +{ARTIFACT_RSS_TARGET_MB} MB at most, whatever the size: {}",
        mb(runner_peak_kb),
        mb(runner_peak_kb.saturating_sub(runner_base_kb)),
        mb(runner_base_kb),
        verdict(mb(runner_peak_kb.saturating_sub(runner_base_kb)) <= ARTIFACT_RSS_TARGET_MB)
    );
    println!(
        "    coordinator peak RSS {:.1} MB (+{:.1} MB over its {:.1} MB before; this process, its HTTP client included)   target +{ARTIFACT_RSS_TARGET_MB} MB at most: {}",
        mb(coordinator_peak_kb),
        mb(coordinator_peak_kb.saturating_sub(coordinator_base_kb)),
        mb(coordinator_base_kb),
        verdict(
            mb(coordinator_peak_kb.saturating_sub(coordinator_base_kb)) <= ARTIFACT_RSS_TARGET_MB
        )
    );
}
