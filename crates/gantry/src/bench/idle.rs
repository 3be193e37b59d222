//! `gantry bench idle-runners`: many runners waiting on one server at once.
//!
//! A `gantry server` child process (`server_process.rs`; SQLite in a temporary data
//! directory, or `--database-url`), `--runners` K runners registered through the API
//! (`POST /user/runners`, one runner per connection as each gitlab-runner holds one
//! request at a time), and K long-polling `POST /jobs/request` connections, one per
//! runner, sending back `X-GitLab-Last-Update` as gitlab-runner does. The open-files limit
//! of this process is raised to its hard limit first, and the server inherits it.
//!
//! Measured:
//!
//! - **server RSS** (`VmRSS`) before the connections, with all K open once the server is
//!   idle again, and its peak (`VmHWM`) at the end of the run;
//! - **pick-up latency** while the K runners wait: `--jobs` pipelines of one job, one at a
//!   time; latency = the moment a runner has the job's payload − the job's `queued_at` as
//!   the server recorded it (ms, so up to 1 ms high). The runner that got it reports
//!   `success` at once and long-polls again; the next pipeline is created once it did.
//!
//! A job handed out twice fails the command.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use gantry_protocol::{JobState, UpdateJobRequest, UpdateOutcome};
use gantry_runner::client::{Client, ClientError, JobRequestOutcome};
use gantry_store::Store;

use super::server_process::{ServerOptions, ServerProcess};
use super::{Api, make_repo, now_us, percentile, verdict};

#[derive(Args)]
pub(crate) struct IdleArgs {
    /// Runners long-polling at once, each on its own connection.
    #[arg(long, value_name = "K", default_value_t = 10_000)]
    runners: usize,
    /// Latency samples: jobs made pending one at a time while the runners wait.
    #[arg(long, value_name = "N", default_value_t = 200)]
    jobs: usize,
    /// The server's database, as `gantry server --database-url` takes it: a new, empty
    /// database [default: SQLite in a temporary directory].
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
}

impl IdleArgs {
    pub(super) fn check(&self) -> Result<(), String> {
        if self.runners == 0 || self.jobs == 0 {
            return Err("--runners and --jobs must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// The targets, for 10,000 runners.
const TARGET_RSS_MB: f64 = 300.0;
const TARGET_P99_MS: f64 = 10.0;

/// Runners registered at the same time.
const REGISTER_CONCURRENCY: usize = 16;
/// Connections opened at the same time, so the server's accept queue never overflows.
const CONNECT_BATCH: usize = 500;
/// Longest wait for the connections to open, for a job to be picked and for the server
/// to settle.
const PHASE_TIMEOUT: Duration = Duration::from_secs(300);
/// File descriptors besides the connections: the database, logs, the runtime.
const SPARE_FILES: u64 = 512;
/// File descriptors the server needs free to create a pipeline (git processes and their
/// pipes, the database).
const FILES_TO_CREATE: u64 = 64;

pub(super) struct Report {
    runners: usize,
    database: &'static str,
    open_files_limit: u64,
    /// The server's open files with every connection open.
    server_files: usize,
    /// Connections the server held (fewer than `runners` when it ran out of files).
    connected: usize,
    register: Duration,
    rss_before: u64,
    rss_open: u64,
    peak_rss: u64,
    latency: Latency,
}

/// The pick-up latency phase.
enum Latency {
    /// One sample a job, ms.
    Measured(Vec<f64>),
    /// Not run: the server had no file descriptors left to create a pipeline; it held
    /// `connected` connections (the others could not connect).
    OutOfFiles { limit: u64, connected: usize },
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let connected = self.connected.max(1) as f64;
        let per_connection_kb =
            self.rss_open.saturating_sub(self.rss_before) as f64 / 1024.0 / connected;
        writeln!(
            f,
            "idle-runners: {} runners long-polling, one connection each, {}, HTTP over loopback (open files limit {})",
            self.runners, self.database, self.open_files_limit
        )?;
        writeln!(
            f,
            "registration: {} runners in {:.1} s (POST /user/runners, {REGISTER_CONCURRENCY} at a time)",
            self.runners,
            self.register.as_secs_f64()
        )?;
        writeln!(
            f,
            "server RSS: {:.0} MB before the connections, {:.0} MB with {} open ({per_connection_kb:.1} KB each), peak {:.0} MB",
            mb(self.rss_before),
            mb(self.rss_open),
            self.connected,
            mb(self.peak_rss)
        )?;
        writeln!(
            f,
            "server open files with the connections open: {} ({:.1} per connection)",
            self.server_files,
            self.server_files as f64 / connected
        )?;
        let rss = verdict(mb(self.peak_rss) <= TARGET_RSS_MB);
        match &self.latency {
            Latency::Measured(latencies_ms) => {
                let p50 = percentile(latencies_ms, 50.0);
                let p99 = percentile(latencies_ms, 99.0);
                let max = latencies_ms.iter().copied().fold(0.0, f64::max);
                writeln!(
                    f,
                    "pick-up latency ({} jobs, each pending alone while the runners wait): p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms",
                    latencies_ms.len()
                )?;
                writeln!(
                    f,
                    "targets (10000 runners): peak RSS <= {TARGET_RSS_MB} MB {rss}; p99 < {TARGET_P99_MS} ms {}",
                    verdict(p99 < TARGET_P99_MS)
                )
            }
            Latency::OutOfFiles { limit, connected } => {
                writeln!(
                    f,
                    "pick-up latency: not measured, the server reached its limit of {limit} open files with {connected} of {} connections and cannot start git to create a pipeline",
                    self.runners
                )?;
                writeln!(
                    f,
                    "targets (10000 runners): peak RSS <= {TARGET_RSS_MB} MB {rss}; p99 < {TARGET_P99_MS} ms not measured"
                )
            }
        }
    }
}

/// Raise this process's soft limit of open files to its hard limit (the server started
/// afterwards inherits it); the limit now. An error when even the hard limit is below
/// `needed`.
fn raise_open_files(needed: u64) -> anyhow::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) =
        getrlimit(Resource::RLIMIT_NOFILE).context("read the limit of open files")?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
            .with_context(|| format!("raise the limit of open files from {soft} to {hard}"))?;
    }
    if hard < needed {
        bail!(
            "the hard limit of open files is {hard}, and this process and the server need about {needed} each\n  hint: raise it (`ulimit -Hn` as root, `LimitNOFILE=` for a service, /etc/security/limits.conf) or pass fewer --runners"
        );
    }
    eprintln!("idle-runners: open files limit {soft} -> {hard}");
    Ok(hard)
}

/// What the pollers share with the command.
#[derive(Default)]
struct Shared {
    /// Job id → Unix µs when a runner had its payload.
    picks: Mutex<HashMap<i64, i64>>,
    /// Jobs whose `success` was answered.
    finished: Mutex<HashSet<i64>>,
    /// A job handed out twice.
    twice: Mutex<Option<i64>>,
    stop: AtomicBool,
    /// Runners whose first request could not reach the server (it accepts no more
    /// connections: out of file descriptors).
    unconnected: std::sync::atomic::AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(super) async fn idle_runners(args: &IdleArgs) -> anyhow::Result<Report> {
    let open_files_limit = raise_open_files(args.runners as u64 + SPARE_FILES)?;
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let data_dir = dir.path().join("data");
    std::fs::create_dir_all(&data_dir).with_context(|| format!("create {}", data_dir.display()))?;
    let mut server = ServerProcess::start(&ServerOptions {
        data_dir: &data_dir,
        database_url: args.database_url.as_deref(),
        connections: args.runners + 16,
    })?;
    let admin = server.admin_token.take().ok_or_else(|| {
        anyhow!(
            "the server printed no admin token: its database is not new\n  hint: pass --database-url with a new, empty database (createdb NAME)"
        )
    })?;
    let database_url = match &args.database_url {
        Some(url) => url.clone(),
        None => crate::server::database_url(
            &data_dir
                .canonicalize()
                .with_context(|| format!("resolve {}", data_dir.display()))?,
        ),
    };
    let store = Store::open(&database_url)
        .await
        .context("open the server's database to read the jobs' queued_at")?;
    let api = Api {
        url: server.url.clone(),
        admin,
        http: reqwest::Client::new(),
    };
    let repo = dir.path().join("repo");
    make_repo(&repo, "job: {script: [\"true\"]}\n")?;
    let project = api.create_project("idle-runners", &repo).await?;

    let started = Instant::now();
    let tokens = register(&api, args.runners).await?;
    let register_time = started.elapsed();
    eprintln!(
        "idle-runners: registered {} runners in {:.1} s",
        args.runners,
        register_time.as_secs_f64()
    );
    let rss_before = server.usage()?.rss;

    let client = Client::new(&server.url, gantry_runner::poll::version_info(None))
        .context("create the runners' HTTP client")?;
    let shared = Arc::new(Shared::default());
    let mut pollers = tokio::task::JoinSet::new();
    for (i, token) in tokens.into_iter().enumerate() {
        pollers.spawn(poll(
            client.clone(),
            token,
            format!("s_idle{i:06}"),
            Arc::clone(&shared),
        ));
        if (i + 1) % CONNECT_BATCH == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let outcome = async {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        loop {
            let open = server.connections()?;
            let unconnected = shared.unconnected.load(Ordering::SeqCst);
            if open + unconnected >= args.runners {
                break;
            }
            // A runner ends early only when it could not connect (counted) or failed.
            while let Some(ended) = pollers.try_join_next() {
                ended.context("a runner failed")??;
            }
            if Instant::now() > deadline {
                bail!(
                    "only {open} of {} connections were open after {} s",
                    args.runners,
                    PHASE_TIMEOUT.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        settle(&mut server).await?;
        let rss_open = server.usage()?.rss;
        let files = server.open_files()?;
        let limit = server.open_files_limit()?;
        eprintln!(
            "idle-runners: the server holds {files} open files ({:.1} per connection), its limit {limit}",
            files as f64 / server.connections()?.max(1) as f64
        );
        let connected = server.connections()?;
        if files as u64 + FILES_TO_CREATE > limit || connected < args.runners {
            eprintln!(
                "idle-runners: the server is at its limit of open files: it cannot start git to create a pipeline, so no latency is measured\n  hint: raise the hard limit of open files (`ulimit -Hn` as root, `LimitNOFILE=` for a service) or pass fewer --runners"
            );
            let peak_rss = server.usage()?.peak_rss;
            return anyhow::Ok((
                rss_open,
                peak_rss,
                files,
                connected,
                Latency::OutOfFiles { limit, connected },
            ));
        }
        eprintln!(
            "idle-runners: {} connections open, server RSS {:.0} MB; {} jobs one at a time",
            args.runners,
            mb(rss_open),
            args.jobs
        );
        let mut latencies_ms = Vec::with_capacity(args.jobs);
        for _ in 0..args.jobs {
            let pipeline = api.create_pipeline(project).await?;
            let jobs = super::queued_at(&store, pipeline).await?;
            let (&job, &queued_ms) = jobs
                .iter()
                .next()
                .ok_or_else(|| anyhow!("pipeline {pipeline} has no job"))?;
            let deadline = Instant::now() + PHASE_TIMEOUT;
            while !lock(&shared.finished).contains(&job) {
                while let Some(ended) = pollers.try_join_next() {
                    ended.context("a runner failed")??;
                }
                if Instant::now() > deadline {
                    bail!(
                        "job {job} was not picked up and finished in {} s",
                        PHASE_TIMEOUT.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let held = lock(&shared.picks)
                .get(&job)
                .copied()
                .ok_or_else(|| anyhow!("job {job} finished but was never picked"))?;
            latencies_ms.push((held - queued_ms * 1000) as f64 / 1000.0);
        }
        if let Some(job) = *lock(&shared.twice) {
            bail!("job {job} was handed out twice");
        }
        let peak_rss = server.usage()?.peak_rss;
        anyhow::Ok((
            rss_open,
            peak_rss,
            files,
            connected,
            Latency::Measured(latencies_ms),
        ))
    }
    .await;
    shared.stop.store(true, Ordering::SeqCst);
    pollers.abort_all();
    let (rss_open, peak_rss, server_files, connected, latency) = outcome?;
    server.stop();
    Ok(Report {
        runners: args.runners,
        database: if args.database_url.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        },
        open_files_limit,
        register: register_time,
        rss_before,
        rss_open,
        peak_rss,
        server_files,
        connected,
        latency,
    })
}

/// `count` runners, [`REGISTER_CONCURRENCY`] at a time; their tokens.
async fn register(api: &Api, count: usize) -> anyhow::Result<Vec<String>> {
    let api = Arc::new(api.clone());
    let mut tokens = Vec::with_capacity(count);
    let mut next = 0;
    let mut running = tokio::task::JoinSet::new();
    while tokens.len() < count {
        while next < count && running.len() < REGISTER_CONCURRENCY {
            let api = Arc::clone(&api);
            let description = format!("idle runner {next}");
            running.spawn(async move { api.create_runner(&description).await });
            next += 1;
        }
        match running.join_next().await {
            Some(token) => tokens.push(token.context("register a runner")??),
            None => break,
        }
    }
    Ok(tokens)
}

/// Wait until the server uses less than 5% of a core over half a second: the first
/// request of each connection has looked for a job and is waiting.
async fn settle(server: &mut ServerProcess) -> anyhow::Result<()> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    let mut before = server.usage()?.cpu;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = server.usage()?.cpu;
        if now.saturating_sub(before) < Duration::from_millis(25) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the server was still busy {} s after the connections opened",
                PHASE_TIMEOUT.as_secs()
            );
        }
        before = now;
    }
}

/// One runner: long-poll; a job it gets is recorded and reported `success` at once.
async fn poll(
    client: Client,
    token: String,
    system_id: String,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let mut last_update: Option<String> = None;
    let mut connected = false;
    while !shared.stop.load(Ordering::SeqCst) {
        let answer = match client
            .request_job(&token, &system_id, last_update.as_deref())
            .await
        {
            Err(ClientError::Unreachable { .. }) if !connected => {
                shared.unconnected.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            answer => answer.context("request a job")?,
        };
        connected = true;
        match answer {
            JobRequestOutcome::Job(job) => {
                let at_us = now_us();
                if lock(&shared.picks).insert(job.id, at_us).is_some() {
                    *lock(&shared.twice) = Some(job.id);
                }
                let done =
                    UpdateJobRequest::new(&job.token, JobState::Success, client.info().clone());
                let answer = client
                    .update_job(job.id, &done)
                    .await
                    .with_context(|| format!("job {}: report success", job.id))?;
                if answer.response.outcome != UpdateOutcome::Succeeded {
                    bail!("job {}: `success` answered {}", job.id, answer.status);
                }
                lock(&shared.finished).insert(job.id);
            }
            JobRequestOutcome::NoJob { last_update: seen } => last_update = seen,
            JobRequestOutcome::Undecodable { id, error, .. } => {
                bail!("job {id:?}: the payload does not decode: {error}")
            }
        }
    }
    Ok(())
}
