//! `gantry bench`: measurements of the coordinator over its real HTTP API.
//!
//! - `dispatch.rs` — `gantry bench dispatch`: pick-up latency and assignment throughput,
//!   the server in this process.
//! - `scale.rs` — `gantry bench scale`: DAG pipelines of 100 to 10,000 jobs completed by
//!   runner clients; wall time, the server's CPU per job and peak RSS.
//! - `idle.rs` — `gantry bench idle-runners`: thousands of idle long-polling runners; the
//!   server's memory and the pick-up latency of jobs meanwhile.
//! - `server_process.rs` — a `gantry server` child process (for `scale` and `idle-runners`,
//!   so its CPU time and memory are its own, read from `/proc`).
//! - `dag.rs` — the scale benchmark's `.gitlab-ci.yml` (pure).
//!
//! What they share is here: the admin API client ([`Api`]), the project repositories
//! ([`make_repo`]), percentiles and verdicts.

mod dag;
mod dispatch;
mod idle;
mod scale;
mod server_process;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use clap::Subcommand;
use gantry_store::Store;
use serde_json::{Value, json};

use crate::exit;
use crate::exit::Failure;

#[derive(Subcommand)]
pub(crate) enum BenchCommand {
    /// Job pick-up latency and assignment throughput of the coordinator over HTTP.
    Dispatch(dispatch::DispatchArgs),
    /// DAG pipelines of 100 to 10,000 jobs run by 8 runner clients: wall time, server CPU
    /// per job, peak RSS (a `gantry server` child process).
    Scale(scale::ScaleArgs),
    /// Thousands of idle long-polling runners: server RSS, and the pick-up latency of
    /// jobs that become pending meanwhile (a `gantry server` child process).
    IdleRunners(idle::IdleArgs),
}

pub(crate) fn run(command: &BenchCommand) -> u8 {
    let usage = match command {
        BenchCommand::Dispatch(args) => args.check(),
        BenchCommand::Scale(args) => args.check(),
        BenchCommand::IdleRunners(args) => args.check(),
    };
    if let Err(message) = usage {
        return Failure::usage(message).report();
    }
    let runtime = match crate::exit::runtime(&mut tokio::runtime::Builder::new_multi_thread()) {
        Ok(runtime) => runtime,
        Err(failure) => return failure.report(),
    };
    let report = runtime.block_on(async {
        match command {
            BenchCommand::Dispatch(args) => dispatch::dispatch(args).await.map(|r| r.to_string()),
            BenchCommand::Scale(args) => scale::scale(args).await.map(|r| r.to_string()),
            BenchCommand::IdleRunners(args) => {
                idle::idle_runners(args).await.map(|r| r.to_string())
            }
        }
    });
    // Pollers still long-polling are dropped with the runtime, not awaited.
    runtime.shutdown_background();
    match report {
        Ok(report) => {
            print!("{report}");
            exit::OK
        }
        Err(e) => Failure::failed(format!("{e:#}")).report(),
    }
}

/// Nearest-rank percentile of unsorted samples (0 for none).
fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A server's API as its admin calls it (`PRIVATE-TOKEN`).
#[derive(Clone)]
struct Api {
    url: String,
    admin: String,
    http: reqwest::Client,
}

impl Api {
    fn api(&self, path: &str) -> String {
        format!("{}/api/v4/{path}", self.url)
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(self.api(path))
            .header("PRIVATE-TOKEN", &self.admin)
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        Self::answer("POST", path, response).await
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self
            .http
            .get(self.api(path))
            .header("PRIVATE-TOKEN", &self.admin)
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        Self::answer("GET", path, response).await
    }

    async fn answer(
        method: &str,
        path: &str,
        response: reqwest::Response,
    ) -> anyhow::Result<Value> {
        let status = response.status();
        let text = response
            .text()
            .await
            .with_context(|| format!("{method} {path}: read the answer"))?;
        if !status.is_success() {
            bail!("{method} {path} answered {status}: {text}");
        }
        serde_json::from_str(&text)
            .with_context(|| format!("{method} {path}: the answer is not JSON: {text}"))
    }

    async fn create_project(&self, name: &str, repo: &Path) -> anyhow::Result<i64> {
        let project = self
            .post("projects", json!({ "name": name, "repo_url": repo }))
            .await?;
        project["id"]
            .as_i64()
            .ok_or_else(|| anyhow!("create project {name}: no id in {project}"))
    }

    /// A pipeline of `project` on `main`; its id. A pipeline the server creates as
    /// `failed` (its configuration is wrong, or over a limit) is an error naming why.
    async fn create_pipeline(&self, project: i64) -> anyhow::Result<i64> {
        let pipeline = self
            .post(&format!("projects/{project}/pipeline?ref=main"), json!({}))
            .await?;
        if pipeline["status"] == "failed" {
            bail!(
                "the pipeline failed to be created: {}",
                pipeline["yaml_errors"]
            );
        }
        pipeline["id"]
            .as_i64()
            .ok_or_else(|| anyhow!("create pipeline: no id in {pipeline}"))
    }

    /// A pipeline's status (`running`, `success`, …).
    async fn pipeline_status(&self, project: i64, pipeline: i64) -> anyhow::Result<String> {
        let view = self
            .get(&format!("projects/{project}/pipelines/{pipeline}"))
            .await?;
        view["status"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("pipeline {pipeline}: no status in {view}"))
    }

    /// A new instance runner that runs untagged jobs (`POST /user/runners`); its token.
    async fn create_runner(&self, description: &str) -> anyhow::Result<String> {
        let runner = self
            .post(
                "user/runners",
                json!({ "runner_type": "instance_type", "description": description, "run_untagged": true }),
            )
            .await?;
        runner["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("create runner: no token in {runner}"))
    }
}

/// `job id → queued_at` (Unix ms) of a pipeline's jobs, as stored.
async fn queued_at(store: &Store, pipeline: i64) -> anyhow::Result<HashMap<i64, i64>> {
    let jobs = store
        .pipeline_jobs(pipeline)
        .await
        .context("read the pipeline's jobs")?;
    jobs.iter()
        .map(|j| {
            j.queued_at
                .map(|q| (j.id, q))
                .ok_or_else(|| anyhow!("job {} ({}) was never queued", j.id, j.name))
        })
        .collect()
}

/// A git repository at `dir` whose `main` has one commit: `.gitlab-ci.yml` = `ci`.
fn make_repo(dir: &Path, ci: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::write(dir.join(".gitlab-ci.yml"), ci)
        .with_context(|| format!("write {}/.gitlab-ci.yml", dir.display()))?;
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", ".gitlab-ci.yml"],
        &[
            "-c",
            "user.name=Gantry Bench",
            "-c",
            "user.email=bench@localhost",
            "commit",
            "-q",
            "-m",
            "bench",
        ],
    ] {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .context("run git")?;
        if !out.status.success() {
            bail!(
                "git {} in {}: {}",
                args.join(" "),
                dir.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), 50.0);
        assert_eq!(percentile(&samples, 99.0), 99.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        // Unsorted input, and a rank that falls between samples rounds up.
        assert_eq!(percentile(&[5.0, 1.0, 4.0, 2.0, 3.0], 50.0), 3.0);
        assert_eq!(percentile(&[5.0, 1.0, 4.0, 2.0, 3.0], 99.0), 5.0);
    }
}
