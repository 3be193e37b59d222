//! `gantry bench scale`: what a pipeline costs the coordinator as it grows.
//!
//! For each size N of `--jobs` (100, 1,000 and 10,000 by default): a fresh `gantry server`
//! child process (`server_process.rs`; SQLite in a new data directory, or the
//! `--database-url` database), a project whose `.gitlab-ci.yml` is the DAG of `dag.rs`
//! (10 stages, each job needing two of the stage before), one pipeline of it, and
//! `--runners` runner clients (8; the runner's own HTTP client, `gantry_runner::client`)
//! that take its jobs over the Runner API as gitlab-runner does: `POST /jobs/request`
//! (long poll), `PUT /jobs/:id` `running`, one trace `PATCH /jobs/:id/trace`, `PUT
//! /jobs/:id` `success`. Measured per N, from just before `POST …/pipeline` to the last
//! job's `success` answered:
//!
//! - **wall time**, and jobs/s = N ÷ wall;
//! - **server CPU per job**: user + system time of the server process over the run ÷ N
//!   (its whole life: creation, processing, the four calls, its timers meanwhile);
//! - **peak RSS** of the server process (`VmHWM`; the server is new for each N).
//!
//! A pipeline not done in `--timeout` seconds is reported as "did not finish", with the
//! jobs done by then. Every job must end `success`: a job handed out twice, a refused
//! update or a pipeline that ends otherwise fails the command.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use gantry_protocol::{
    JobResponse, JobState, PatchOutcome, PatchTraceParams, UpdateJobRequest, UpdateOutcome,
};
use gantry_runner::client::{Client, JobRequestOutcome};

use super::dag::{STAGES, dag_config};
use super::server_process::{ServerOptions, ServerProcess, Usage};
use super::{Api, make_repo, verdict};

#[derive(Args)]
pub(crate) struct ScaleArgs {
    /// Pipeline sizes, one pipeline (on a new server) each: jobs, at least 10.
    #[arg(long, value_name = "N,…", value_delimiter = ',', default_values_t = [100, 1000, 10000])]
    jobs: Vec<usize>,
    /// Runner clients taking the jobs at the same time.
    #[arg(long, value_name = "N", default_value_t = 8)]
    runners: usize,
    /// The server's database, as `gantry server --database-url` takes it
    /// (postgres://user:password@host/database): a new, empty database, which every
    /// size then shares [default: SQLite in a temporary directory, new for each size].
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// Give up on a pipeline not done this many seconds after its creation began: it
    /// "did not finish" (the jobs done by then are reported).
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,
}

impl ScaleArgs {
    pub(super) fn check(&self) -> Result<(), String> {
        if let Some(small) = self.jobs.iter().find(|&&n| n < STAGES) {
            return Err(format!(
                "--jobs {small}: a pipeline has {STAGES} stages, so at least {STAGES} jobs"
            ));
        }
        if self.jobs.is_empty() || self.runners == 0 || self.timeout == 0 {
            return Err("--jobs, --runners and --timeout must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// The targets on SQLite.
const TARGET_RATIO: f64 = 1.5;
const TARGET_WALL_1000_S: f64 = 2.0;
const TARGET_CPU_1000_MS: f64 = 1.0;

/// The trace each job sends, in one patch.
const TRACE: &[u8] = b"$ true\nJob succeeded\n";

/// One pipeline's figures.
struct Run {
    jobs: usize,
    /// `POST …/pipeline`: compiled, stored, first stage pending.
    create: Duration,
    outcome: Outcome,
    /// Server CPU and memory over the run (CPU: the difference; memory: at its end).
    cpu: Duration,
    usage: Usage,
}

enum Outcome {
    /// Every job succeeded, the last one `wall` after creation began.
    Done { wall: Duration },
    /// `done` jobs had succeeded when the timeout came.
    TimedOut { after: Duration, done: usize },
}

impl Run {
    /// Server CPU per job done, ms; `None` when no job was done.
    fn cpu_per_job_ms(&self) -> Option<f64> {
        let done = match self.outcome {
            Outcome::Done { .. } => self.jobs,
            Outcome::TimedOut { done, .. } => done,
        };
        (done > 0).then(|| self.cpu.as_secs_f64() * 1000.0 / done as f64)
    }

    fn finished(&self) -> Option<Duration> {
        match self.outcome {
            Outcome::Done { wall } => Some(wall),
            Outcome::TimedOut { .. } => None,
        }
    }
}

pub(super) struct Report {
    runners: usize,
    database: &'static str,
    runs: Vec<Run>,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "scale: DAG pipelines of {STAGES} stages (each job needs two of the stage before), {} runners, {}, HTTP over loopback",
            self.runners, self.database
        )?;
        for run in &self.runs {
            let cpu = run
                .cpu_per_job_ms()
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.2}"));
            match run.outcome {
                Outcome::Done { wall } => writeln!(
                    f,
                    "{} jobs: wall {:.2} s, {:.0} jobs/s; server CPU {cpu} ms/job ({:.2} s); peak RSS {:.0} MB; creation {:.0} ms",
                    run.jobs,
                    wall.as_secs_f64(),
                    run.jobs as f64 / wall.as_secs_f64().max(1e-6),
                    run.cpu.as_secs_f64(),
                    mb(run.usage.peak_rss),
                    run.create.as_secs_f64() * 1000.0,
                )?,
                Outcome::TimedOut { after, done } => writeln!(
                    f,
                    "{} jobs: did not finish in {} s ({done} jobs done, {:.1} jobs/s); server CPU {cpu} ms per job done ({:.2} s); peak RSS {:.0} MB; creation {:.0} ms",
                    run.jobs,
                    after.as_secs(),
                    done as f64 / after.as_secs_f64().max(1e-6),
                    run.cpu.as_secs_f64(),
                    mb(run.usage.peak_rss),
                    run.create.as_secs_f64() * 1000.0,
                )?,
            }
        }
        // A size's wall time and CPU per job, when its pipeline finished.
        let finished = |n: usize| {
            self.runs
                .iter()
                .filter(|r| r.jobs == n)
                .find_map(|r| Some((r.finished()?.as_secs_f64(), r.cpu_per_job_ms()?)))
        };
        // 10,000 jobs that did not finish: the ratio of the jobs done by then, said as such.
        let partial = self
            .runs
            .iter()
            .find(|r| r.jobs == 10_000 && r.finished().is_none())
            .and_then(Run::cpu_per_job_ms);
        let ratio = match (finished(100), finished(10_000), partial) {
            (Some((_, small)), Some((_, large)), _) => {
                let ratio = large / small.max(1e-9);
                format!("{ratio:.2}x {}", verdict(ratio <= TARGET_RATIO))
            }
            (Some((_, small)), None, Some(large)) => format!(
                "not measured, 10000 jobs did not finish ({:.2}x over the jobs done)",
                large / small.max(1e-9)
            ),
            _ => "not measured".to_owned(),
        };
        let (wall, cpu) = match finished(1000) {
            Some((wall, cpu)) => (
                format!("{wall:.2} s {}", verdict(wall <= TARGET_WALL_1000_S)),
                format!("{cpu:.2} ms {}", verdict(cpu <= TARGET_CPU_1000_MS)),
            ),
            None => ("not measured".to_owned(), "not measured".to_owned()),
        };
        writeln!(
            f,
            "targets: CPU per job 10000 / 100 <= {TARGET_RATIO}x: {ratio}; 1000 jobs wall <= {TARGET_WALL_1000_S} s: {wall}; 1000 jobs CPU per job <= {TARGET_CPU_1000_MS} ms: {cpu}"
        )
    }
}

pub(super) async fn scale(args: &ScaleArgs) -> anyhow::Result<Report> {
    let dir = tempfile::tempdir().context("create a temporary directory")?;
    let mut admin: Option<String> = None;
    let mut runs = Vec::with_capacity(args.jobs.len());
    for &jobs in &args.jobs {
        let run = run_size(args, dir.path(), jobs, &mut admin)
            .await
            .with_context(|| format!("the pipeline of {jobs} jobs"))?;
        runs.push(run);
    }
    Ok(Report {
        runners: args.runners,
        database: if args.database_url.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        },
        runs,
    })
}

/// What the runner clients share with the command.
#[derive(Default)]
struct Progress {
    done: AtomicUsize,
    /// When the last job's `success` was answered.
    last_done: Mutex<Option<Instant>>,
    /// Every job handed out, to find one handed out twice.
    seen: Mutex<HashSet<i64>>,
}

/// A new server on `root/<jobs>`, the pipeline of `jobs` jobs run to its end (or the
/// timeout), the server stopped. `admin`: the admin token of the shared database, once
/// its first server printed it.
async fn run_size(
    args: &ScaleArgs,
    root: &Path,
    jobs: usize,
    admin: &mut Option<String>,
) -> anyhow::Result<Run> {
    let data_dir = root.join(format!("server-{jobs}"));
    std::fs::create_dir_all(&data_dir).with_context(|| format!("create {}", data_dir.display()))?;
    let mut server = ServerProcess::start(&ServerOptions {
        data_dir: &data_dir,
        database_url: args.database_url.as_deref(),
        connections: args.runners + 16,
    })?;
    if let Some(token) = server.admin_token.take() {
        *admin = Some(token);
    }
    let admin_token = admin.clone().ok_or_else(|| {
        anyhow!(
            "the server printed no admin token: its database is not new\n  hint: pass --database-url with a new, empty database (createdb NAME)"
        )
    })?;
    let api = Api {
        url: server.url.clone(),
        admin: admin_token,
        http: reqwest::Client::new(),
    };
    let repo = root.join(format!("repo-{jobs}"));
    make_repo(&repo, &dag_config(jobs))?;
    let project = api
        .create_project(&format!("scale-{jobs}-{}", std::process::id()), &repo)
        .await?;

    let client = Client::new(&server.url, gantry_runner::poll::version_info(None))
        .context("create the runners' HTTP client")?;
    let progress = Arc::new(Progress::default());
    let mut runners = tokio::task::JoinSet::new();
    for i in 0..args.runners {
        let token = api.create_runner(&format!("scale runner {i}")).await?;
        runners.spawn(runner(
            client.clone(),
            token,
            format!("s_bench{i:04}"),
            Arc::clone(&progress),
        ));
    }
    // Let every runner reach its long poll.
    tokio::time::sleep(Duration::from_millis(300)).await;

    eprintln!("scale: {jobs} jobs");
    let before = server.usage()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.timeout);
    let pipeline = api.create_pipeline(project).await?;
    let create = started.elapsed();
    let mut last_check = Instant::now();
    let mut last_said = Instant::now();
    let outcome = loop {
        let done = progress.done.load(Ordering::SeqCst);
        if done >= jobs {
            let last = progress
                .last_done
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .unwrap_or_else(Instant::now);
            break Outcome::Done {
                wall: last.duration_since(started),
            };
        }
        if let Some(ended) = runners.try_join_next() {
            ended
                .context("a runner client failed")?
                .context("a runner client stopped")?;
            bail!("a runner client stopped");
        }
        if Instant::now() >= deadline {
            break Outcome::TimedOut {
                after: Duration::from_secs(args.timeout),
                done,
            };
        }
        // A job that failed ends the pipeline early: look once a second.
        if last_check.elapsed() >= Duration::from_secs(1) {
            last_check = Instant::now();
            let status = api.pipeline_status(project, pipeline).await?;
            if !matches!(
                status.as_str(),
                "created" | "pending" | "running" | "success"
            ) {
                bail!("pipeline {pipeline} is {status} after {done} of {jobs} jobs");
            }
        }
        if last_said.elapsed() >= Duration::from_secs(30) {
            last_said = Instant::now();
            eprintln!(
                "scale: {done} of {jobs} jobs done after {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let after = server.usage()?;
    runners.abort_all();
    if let Outcome::Done { .. } = outcome {
        let status = api.pipeline_status(project, pipeline).await?;
        if status != "success" {
            bail!("all {jobs} jobs succeeded but pipeline {pipeline} is {status}");
        }
    }
    server.stop();
    Ok(Run {
        jobs,
        create,
        outcome,
        cpu: after.cpu.saturating_sub(before.cpu),
        usage: after,
    })
}

/// One runner: take a job, run it as gitlab-runner reports one (accept it, one trace
/// patch, success), again, until aborted.
async fn runner(
    client: Client,
    token: String,
    system_id: String,
    progress: Arc<Progress>,
) -> anyhow::Result<()> {
    let mut last_update: Option<String> = None;
    loop {
        match client
            .request_job(&token, &system_id, last_update.as_deref())
            .await
            .context("request a job")?
        {
            JobRequestOutcome::Job(job) => {
                let fresh = progress
                    .seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(job.id);
                if !fresh {
                    bail!("job {} was handed out twice", job.id);
                }
                complete(&client, &job).await?;
                *progress
                    .last_done
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
                progress.done.fetch_add(1, Ordering::SeqCst);
            }
            JobRequestOutcome::NoJob { last_update: seen } => last_update = seen,
            JobRequestOutcome::Undecodable { id, error, .. } => {
                bail!("job {id:?}: the payload does not decode: {error}")
            }
        }
    }
}

/// `running`, the trace, `success` (re-sent while the server answers `202`).
async fn complete(client: &Client, job: &JobResponse) -> anyhow::Result<()> {
    let info = client.info().clone();
    let running = client
        .update_job(
            job.id,
            &UpdateJobRequest::new(&job.token, JobState::Running, info.clone()),
        )
        .await
        .with_context(|| format!("job {}: accept it", job.id))?;
    if running.response.outcome != UpdateOutcome::Succeeded {
        bail!("job {}: `running` answered {}", job.id, running.status);
    }
    let patch = client
        .patch_trace(
            job.id,
            &job.token,
            PatchTraceParams::default(),
            0,
            TRACE.to_vec(),
        )
        .await
        .with_context(|| format!("job {}: send its trace", job.id))?;
    if patch.outcome != PatchOutcome::Succeeded {
        bail!(
            "job {}: the trace patch answered {:?}",
            job.id,
            patch.outcome
        );
    }
    let mut success = UpdateJobRequest::new(&job.token, JobState::Success, info);
    success.output.bytesize = TRACE.len() as u64;
    for _ in 0..gantry_protocol::update::FINAL_UPDATE_RETRY_LIMIT {
        let answer = client
            .update_job(job.id, &success)
            .await
            .with_context(|| format!("job {}: report success", job.id))?;
        match answer.response.outcome {
            UpdateOutcome::Succeeded => return Ok(()),
            UpdateOutcome::AcceptedButNotCompleted => {
                tokio::time::sleep(
                    answer
                        .response
                        .update_interval
                        .unwrap_or(Duration::from_secs(1)),
                )
                .await;
            }
            other => bail!(
                "job {}: `success` answered {} ({other:?})",
                job.id,
                answer.status
            ),
        }
    }
    bail!(
        "job {}: `success` was not applied after {} updates",
        job.id,
        gantry_protocol::update::FINAL_UPDATE_RETRY_LIMIT
    )
}
