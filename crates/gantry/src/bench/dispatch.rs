//! `gantry bench dispatch`: how fast the coordinator hands pending jobs to waiting runners.
//!
//! A real server (the coordinator and its HTTP API, in this process) on a loopback port
//! over a fresh SQLite database in a temporary directory (or the new, empty database of
//! `--database-url`, PostgreSQL), and `--pollers` runners, each an
//! HTTP client long-polling `POST /api/v4/jobs/request` as gitlab-runner does (sending back
//! `X-GitLab-Last-Update`). Two measurements:
//!
//! - **pick-up latency**: `--samples` pipelines of two jobs in two stages, one pipeline
//!   at a time. A runner that gets a job finishes it at once (`PUT /jobs/:id`), which
//!   makes the second job pending while the other pollers wait. Latency = the moment a
//!   poller has the second job's payload − the job's `queued_at` as the server recorded
//!   it (milliseconds, so figures are up to 1 ms high). Two more figures bracket the
//!   moment the job became pending (the commit of the first job's final state, which
//!   nothing outside the server sees) in microseconds: from the later of `queued_at` and
//!   the moment that final update was sent (an upper bound: it includes the update's own
//!   request and decision), and from the moment its answer arrived (a lower bound; a
//!   pick-up before the answer counts 0). The targets are judged on the first figure.
//! - **assignment throughput**: one pipeline of `--jobs` jobs that all become pending at
//!   once; the pollers take them (and hold them). Throughput = jobs ÷ (last job held −
//!   the jobs' `queued_at`).
//!
//! Every job must be handed out exactly once; a job seen twice fails the command.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use gantry_server::coordinator::{Coordinator, CoordinatorConfig};
use gantry_store::Store;
use serde::Deserialize;
use serde_json::json;

use super::{Api, make_repo, now_us, percentile, queued_at, verdict};

#[derive(Args)]
pub(crate) struct DispatchArgs {
    /// Runners long-polling for jobs at the same time.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pollers: usize,
    /// Latency samples: stages of a pipeline whose jobs become pending one at a time.
    #[arg(long, value_name = "N", default_value_t = 200)]
    samples: usize,
    /// Jobs of the throughput pipeline, all pending at once.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    jobs: usize,
    /// The database, as `gantry server --database-url` takes it
    /// (postgres://user:password@host/database): a new, empty database [default: SQLite
    /// in a temporary directory].
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// Trace the server's pipelines and jobs into FILE (OTLP JSON lines, as `gantry run
    /// --trace-file`): tracing's cost without a collector. The `--otel-*` flags and
    /// `OTEL_*` variables send them to a collector instead (or as well).
    #[arg(long, value_name = "FILE")]
    trace_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    otel: crate::otel::OtelArgs,
}

/// Issue 36's targets, for 50 pollers on SQLite.
const TARGET_P50_MS: f64 = 1.0;
const TARGET_P99_MS: f64 = 10.0;
const TARGET_JOBS_PER_S: f64 = 5000.0;

/// Longest a phase may take before the command gives up.
const PHASE_TIMEOUT: Duration = Duration::from_secs(300);

impl DispatchArgs {
    pub(super) fn check(&self) -> Result<(), String> {
        if self.pollers == 0 || self.samples == 0 || self.jobs == 0 {
            return Err("--pollers, --samples and --jobs must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// What the command measured.
pub(super) struct Report {
    pollers: usize,
    database: &'static str,
    /// Whether the server traced (`--trace-file`, `--otel-*`, `OTEL_*`).
    traced: bool,
    latencies_ms: Vec<f64>,
    /// The same pick-ups measured from the later of `queued_at` and the moment the
    /// first job's final update (which makes the second job pending) was sent: an upper
    /// bound without `queued_at`'s millisecond rounding.
    tight_latencies_ms: Vec<f64>,
    /// Measured from the moment that update's answer arrived (the job was pending by
    /// then; a pick-up before it counts 0): a lower bound.
    floor_latencies_ms: Vec<f64>,
    jobs: usize,
    burst_secs: f64,
    /// How long `POST …/pipeline` of the throughput pipeline took: compiling it, storing
    /// its jobs and making them all pending.
    create_secs: f64,
}

impl Report {
    fn jobs_per_s(&self) -> f64 {
        self.jobs as f64 / self.burst_secs.max(1e-6)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p50 = percentile(&self.latencies_ms, 50.0);
        let p99 = percentile(&self.latencies_ms, 99.0);
        let max = self.latencies_ms.iter().copied().fold(0.0, f64::max);
        let tight_p50 = percentile(&self.tight_latencies_ms, 50.0);
        let tight_p99 = percentile(&self.tight_latencies_ms, 99.0);
        let floor_p50 = percentile(&self.floor_latencies_ms, 50.0);
        let floor_p99 = percentile(&self.floor_latencies_ms, 99.0);
        let rate = self.jobs_per_s();
        writeln!(
            f,
            "dispatch: {} pollers, {}, HTTP over loopback{}",
            self.pollers,
            self.database,
            if self.traced { ", traced" } else { "" }
        )?;
        writeln!(
            f,
            "pick-up latency ({} jobs, each pending alone while the pollers wait): p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms",
            self.latencies_ms.len()
        )?;
        writeln!(
            f,
            "  from the later of queued_at and the moment the update that made the job pending was sent (µs): p50 {tight_p50:.2} ms, p99 {tight_p99:.2} ms"
        )?;
        writeln!(
            f,
            "  from the moment that update's answer arrived (a lower bound): p50 {floor_p50:.2} ms, p99 {floor_p99:.2} ms"
        )?;
        writeln!(
            f,
            "assignment throughput ({} jobs pending at once): {rate:.0} jobs/s ({:.3} s from pending to the last one held)",
            self.jobs, self.burst_secs
        )?;
        writeln!(
            f,
            "pipeline creation ({} jobs, compiled, stored and all pending before the API answers): {:.1} ms",
            self.jobs,
            self.create_secs * 1000.0
        )?;
        writeln!(
            f,
            "targets: p50 < {TARGET_P50_MS} ms {}; p99 < {TARGET_P99_MS} ms {}; >= {TARGET_JOBS_PER_S} jobs/s {}",
            verdict(p50 < TARGET_P50_MS),
            verdict(p99 < TARGET_P99_MS),
            verdict(rate >= TARGET_JOBS_PER_S),
        )
    }
}

/// A job as a poller received it.
#[derive(Clone, Copy, Debug)]
struct Pick {
    job: i64,
    /// Unix µs when the payload was in hand.
    at_us: i64,
}

/// What the pollers share with the command.
#[derive(Default)]
struct Shared {
    picks: Mutex<Vec<Pick>>,
    /// Jobs a poller finished (latency phase).
    finished: Mutex<HashSet<i64>>,
    /// When the final update of each job finished in the latency phase was sent and when
    /// its answer arrived, Unix µs.
    finish_sent: Mutex<HashMap<i64, (i64, i64)>>,
    /// Finish every job at once (latency phase) instead of holding it.
    finish: AtomicBool,
    stop: AtomicBool,
}

impl Shared {
    fn is_finished(&self, job: i64) -> bool {
        self.finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&job)
    }

    fn picked(&self) -> Vec<Pick> {
        self.picks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The server in this process, an admin client for it, and its store.
struct Server {
    api: Api,
    store: Store,
    /// Whether it traces.
    traced: bool,
}

pub(super) async fn dispatch(args: &DispatchArgs) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let data_dir = dir.path().join("data");
    std::fs::create_dir_all(&data_dir).with_context(|| format!("create {}", data_dir.display()))?;
    let database_url = match &args.database_url {
        Some(url) => url.clone(),
        None => crate::server::database_url(&data_dir),
    };
    let store = Store::open(&database_url)
        .await
        .context("open the database")?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("listen on loopback")?;
    let url = format!(
        "http://{}",
        listener
            .local_addr()
            .context("read the listening address")?
    );
    let tracing = args
        .otel
        .settings()
        .map(|mut flags| {
            flags.trace_file.clone_from(&args.trace_file);
            flags
        })
        .and_then(crate::otel::resolve)
        .map_err(|e| anyhow!("{e}"))?;
    let mut cfg = CoordinatorConfig::new(&data_dir, url.clone());
    cfg.telemetry = crate::otel::start(&tracing, "gantry-server").map_err(|e| anyhow!("{e}"))?;
    // With a collector, the server's metrics go over OTLP too (`coordinator/metrics.rs`).
    cfg.meters =
        crate::otel::start_meters(&tracing, "gantry-server").map_err(|e| anyhow!("{e}"))?;
    let traced = cfg.telemetry.is_some();
    let coordinator = Coordinator::open(store.clone(), cfg)
        .await
        .context("start the coordinator")?;
    let tokens = coordinator
        .bootstrap()
        .await
        .context("create the admin token")?;
    let admin = tokens
        .admin_token
        .ok_or_else(|| {
            anyhow!(
                "the database has an admin token already: it is not new\n  hint: pass --database-url with a new, empty database (createdb NAME)"
            )
        })?;
    let timers = coordinator.spawn_background();
    let (stop_server, stopped) = tokio::sync::oneshot::channel::<()>();
    // Every poller connects from this machine: the caps must not count them against it.
    let connections = args.pollers.saturating_mul(2).saturating_add(64);
    let limits = gantry_server::http::Limits {
        max_connections: connections.max(1024),
        max_connections_per_ip: connections,
        ..gantry_server::http::Limits::default()
    };
    let serving = tokio::spawn(gantry_server::http::serve_with(
        listener,
        coordinator,
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.pollers + 8)
        .build()
        .context("create the HTTP client")?;
    let server = Server {
        api: Api { url, admin, http },
        store,
        traced,
    };
    eprintln!(
        "gantry bench dispatch: server on {}, data in {}",
        server.api.url,
        data_dir.display()
    );

    let outcome = measure(&server, args).await;
    let _ = stop_server.send(());
    timers.abort();
    match tokio::time::timeout(Duration::from_secs(10), serving).await {
        Ok(Ok(Ok(()))) | Err(_) => {}
        Ok(Ok(Err(e))) => eprintln!("warning: the server stopped with an error: {e}"),
        Ok(Err(e)) => eprintln!("warning: the server task failed: {e}"),
    }
    outcome
}

async fn measure(server: &Server, args: &DispatchArgs) -> anyhow::Result<Report> {
    let repos = tempfile::tempdir().context("create a temporary directory")?;
    let chain = repos.path().join("latency");
    let ci = "stages: [first, second]\n\
              first: {stage: first, script: [\"true\"]}\n\
              second: {stage: second, script: [\"true\"]}\n";
    make_repo(&chain, ci)?;
    let burst = repos.path().join("throughput");
    make_repo(&burst, &burst_config(args.jobs))?;
    let latency_project = server.api.create_project("bench-latency", &chain).await?;
    let burst_project = server
        .api
        .create_project("bench-throughput", &burst)
        .await?;

    let shared = Arc::new(Shared::default());
    let mut pollers = Vec::with_capacity(args.pollers);
    for i in 0..args.pollers {
        let token = server.api.create_runner(&format!("poller {i}")).await?;
        pollers.push(tokio::spawn(poll(
            Arc::clone(&shared),
            server.api.http.clone(),
            server.api.api("jobs/request"),
            server.api.api("jobs"),
            token,
        )));
    }
    // Let every poller reach its long poll (one empty answer first).
    tokio::time::sleep(Duration::from_millis(200)).await;

    let result = async {
        eprintln!(
            "latency: {} pipelines of two jobs, one after another",
            args.samples
        );
        shared.finish.store(true, Ordering::SeqCst);
        let mut latencies_ms = Vec::with_capacity(args.samples);
        let mut tight_latencies_ms = Vec::with_capacity(args.samples);
        let mut floor_latencies_ms = Vec::with_capacity(args.samples);
        for _ in 0..args.samples {
            let pipeline = server.api.create_pipeline(latency_project).await?;
            let jobs = server
                .store
                .pipeline_jobs(pipeline)
                .await
                .context("read the pipeline's jobs")?;
            let id_of = |name: &str| {
                jobs.iter()
                    .find(|j| j.name == name)
                    .map(|j| j.id)
                    .ok_or_else(|| anyhow!("pipeline {pipeline} has no job `{name}`"))
            };
            let (first, second) = (id_of("first")?, id_of("second")?);
            let deadline = Instant::now() + PHASE_TIMEOUT;
            while !(shared.is_finished(first) && shared.is_finished(second)) {
                if pollers.iter().any(tokio::task::JoinHandle::is_finished) {
                    bail!("a poller stopped early (see the error above)");
                }
                if Instant::now() > deadline {
                    bail!(
                        "job {second} was not picked up and finished in {} s",
                        PHASE_TIMEOUT.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let queued = queued_at(&server.store, pipeline).await?;
            let held = shared
                .picked()
                .iter()
                .find(|p| p.job == second)
                .map(|p| p.at_us)
                .ok_or_else(|| anyhow!("job {second} finished but was never picked"))?;
            let pending = queued
                .get(&second)
                .ok_or_else(|| anyhow!("job {second} has no queued_at"))?;
            latencies_ms.push((held - pending * 1000) as f64 / 1000.0);
            let (sent, answered) = shared
                .finish_sent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&first)
                .copied()
                .ok_or_else(|| anyhow!("job {first} was never finished"))?;
            tight_latencies_ms.push((held - sent.max(pending * 1000)) as f64 / 1000.0);
            floor_latencies_ms.push((held - answered).max(0) as f64 / 1000.0);
        }
        // Let the last finished job settle before the burst.
        tokio::time::sleep(Duration::from_millis(200)).await;

        eprintln!("throughput: {} jobs at once", args.jobs);
        shared.finish.store(false, Ordering::SeqCst);
        let before = shared.picked().len();
        let started = Instant::now();
        let pipeline = server.api.create_pipeline(burst_project).await?;
        let create_secs = started.elapsed().as_secs_f64();
        let queued = wait_for(server, &shared, pipeline, before, args.jobs, &pollers).await?;
        let picks = shared.picked();
        let burst: Vec<&Pick> = picks[before..]
            .iter()
            .filter(|p| queued.contains_key(&p.job))
            .collect();
        let first_pending = queued.values().copied().min().unwrap_or(0) * 1000;
        let last_held = burst.iter().map(|p| p.at_us).max().unwrap_or(first_pending);
        let burst_secs = (last_held - first_pending) as f64 / 1e6;
        anyhow::Ok(Report {
            pollers: args.pollers,
            database: if args.database_url.is_some() {
                "PostgreSQL"
            } else {
                "SQLite"
            },
            traced: server.traced,
            latencies_ms,
            tight_latencies_ms,
            floor_latencies_ms,
            jobs: args.jobs,
            burst_secs,
            create_secs,
        })
    }
    .await;

    shared.stop.store(true, Ordering::SeqCst);
    for poller in pollers {
        poller.abort();
    }
    let report = result?;
    let picks = shared.picked();
    let mut seen = HashSet::new();
    if let Some(twice) = picks.iter().find(|p| !seen.insert(p.job)) {
        bail!("job {} was handed out twice", twice.job);
    }
    Ok(report)
}

/// Wait until `expected` jobs of `pipeline` were picked (counting the pollers' picks
/// after the first `before`, in memory, so the wait does not load the server), then
/// until the store has them all running; their `queued_at`.
async fn wait_for(
    server: &Server,
    shared: &Shared,
    pipeline: i64,
    before: usize,
    expected: usize,
    pollers: &[tokio::task::JoinHandle<anyhow::Result<()>>],
) -> anyhow::Result<HashMap<i64, i64>> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let picked = shared.picked().len().saturating_sub(before);
        if picked >= expected {
            let rows = server
                .store
                .pipeline_jobs(pipeline)
                .await
                .context("read the pipeline's jobs")?;
            if rows.iter().all(|j| j.status.as_str() == "running") {
                return queued_at(&server.store, pipeline).await;
            }
        }
        if pollers.iter().any(tokio::task::JoinHandle::is_finished) {
            bail!("a poller stopped early (see the error above)");
        }
        if Instant::now() > deadline {
            bail!(
                "only {picked} of {expected} jobs were picked up in {} s",
                PHASE_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `jobs` jobs in one stage: groups of `parallel: 200`, and single jobs for the rest.
fn burst_config(jobs: usize) -> String {
    let mut ci = String::new();
    let (groups, rest) = (jobs / 200, jobs % 200);
    for g in 0..groups {
        ci.push_str(&format!(
            "group-{g}: {{script: [\"true\"], parallel: 200}}\n"
        ));
    }
    for i in 0..rest {
        ci.push_str(&format!("single-{i}: {{script: [\"true\"]}}\n"));
    }
    ci
}

#[derive(Deserialize)]
struct Payload {
    id: i64,
    token: String,
}

/// One runner: long-poll, record each job, finish it at once in the latency phase.
async fn poll(
    shared: Arc<Shared>,
    http: reqwest::Client,
    request_url: String,
    jobs_url: String,
    token: String,
) -> anyhow::Result<()> {
    let mut last_update = String::new();
    while !shared.stop.load(Ordering::SeqCst) {
        let body = json!({
            "token": token,
            "last_update": last_update,
            "info": { "name": "gantry-bench", "features": { "refspecs": true } },
        });
        let response = http
            .post(&request_url)
            .json(&body)
            .send()
            .await
            .context("job request")?;
        match response.status().as_u16() {
            201 => {
                let bytes = response.bytes().await.context("read the job payload")?;
                let at_us = now_us();
                let job: Payload =
                    serde_json::from_slice(&bytes).context("decode the job payload")?;
                shared
                    .picks
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Pick { job: job.id, at_us });
                if shared.finish.load(Ordering::SeqCst) {
                    let sent = now_us();
                    finish(&http, &jobs_url, &job).await?;
                    shared
                        .finish_sent
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(job.id, (sent, now_us()));
                    shared
                        .finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(job.id);
                }
            }
            204 => {
                if let Some(v) = response
                    .headers()
                    .get("x-gitlab-last-update")
                    .and_then(|v| v.to_str().ok())
                {
                    v.clone_into(&mut last_update);
                }
            }
            status => {
                let text = response.text().await.unwrap_or_default();
                bail!("job request answered {status}: {text}");
            }
        }
    }
    Ok(())
}

async fn finish(http: &reqwest::Client, jobs_url: &str, job: &Payload) -> anyhow::Result<()> {
    let body = json!({ "token": job.token, "state": "success", "exit_code": 0, "output": { "bytesize": 0 } });
    let response = http
        .put(format!("{jobs_url}/{}", job.id))
        .json(&body)
        .send()
        .await
        .with_context(|| format!("finish job {}", job.id))?;
    if response.status() != reqwest::StatusCode::OK {
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        bail!("finishing job {} answered {status}: {text}", job.id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_config_counts_jobs() {
        assert_eq!(burst_config(450).lines().count(), 2 + 50);
        assert_eq!(burst_config(3).lines().count(), 3);
    }
}
