//! `gantry pipeline …`: pipelines on a running server through its GitLab-shaped API
//! (`/api/v4`, with a token), shaped like `glab ci`.
//!
//! - `create --project NAME --ref REF [--var K=V]... [--input NAME=VALUE]... [--watch]`:
//!   `POST /projects/:id/pipeline`, as GitLab's API, form-encoded (inputs are text the
//!   server reads as their declared types). Prints the pipeline as JSON on stdout; with
//!   `--watch`, watches it instead, as `watch` does (`glab ci run` then `glab ci status
//!   --live`).
//! - `list --project NAME [--status S] [--ref REF] [--limit N]`: the newest pipelines, a
//!   line each (`glab ci list`).
//! - `show --project NAME ID`: the pipeline and its jobs (trigger jobs included) as a table —
//!   stage, name, status, and why a waiting job waits (the job API's `pending_reason`) or
//!   why one failed (`glab ci view`, as text).
//! - `watch --project NAME [ID | --ref REF]`: a live stage view until the pipeline ends
//!   (`glab ci status --live`); without an id, the newest pipeline of the ref (default: the
//!   project's default branch, `GET …/pipelines/latest`). On a terminal the view is redrawn
//!   in place (`run/display.rs`, the view `gantry run` draws); otherwise each change of a
//!   job's status is a line. Exit status: `0` the pipeline succeeded, `1` it failed, was
//!   canceled or skipped, or waits for a manual job (the message names the failed jobs
//!   and the `gantry job log` that shows why), `3` the server failed.
//! - `cancel`, `retry --project NAME ID`: `POST …/pipelines/:id/cancel|retry`; the
//!   pipeline's line after it.
//!
//! Watching polls the pipeline and its jobs once a second ([`POLL`]): two or three
//! requests per second, each O(jobs of the pipeline) on both sides.

use clap::{Args, Subcommand};
use gantry_server::Status;
use serde_json::Value;

use crate::client::{ApiClient, ServerArgs, block_on, encode_segment};
use crate::exit::Failure;
use crate::lint::{parse_input, parse_var};
use crate::run::display::{Display, JobLine};

/// How often `watch` asks the server (and `gantry job log -f`).
pub(crate) const POLL: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Subcommand)]
pub(crate) enum PipelineCommand {
    /// Create a pipeline for a ref of a project.
    Create(CreateArgs),
    /// List a project's newest pipelines.
    List(ListArgs),
    /// Show a pipeline's jobs: their status, and why a pending job waits.
    Show(ShowArgs),
    /// Follow a pipeline until it ends, with a live stage view; the exit status is its
    /// result (0 success, 1 not a success).
    Watch(WatchArgs),
    /// Cancel a pipeline's unfinished jobs.
    Cancel(ShowArgs),
    /// Retry a pipeline's failed and canceled jobs.
    Retry(ShowArgs),
}

#[derive(Args)]
pub(crate) struct ListArgs {
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    /// Only pipelines with this status (running, pending, success, failed, canceled, …).
    #[arg(long, value_name = "STATUS")]
    status: Option<String>,
    /// Only pipelines of this branch or tag.
    #[arg(long = "ref", value_name = "REF")]
    ref_: Option<String>,
    /// How many, newest first (1–100).
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u16).range(1..=100))]
    limit: u16,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct WatchArgs {
    /// The pipeline's id [default: the newest pipeline of --ref].
    id: Option<i64>,
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    /// Without an id: watch the newest pipeline of this branch or tag [default: the
    /// project's default branch].
    #[arg(long = "ref", value_name = "REF", conflicts_with = "id")]
    ref_: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct ShowArgs {
    /// The pipeline's id.
    id: i64,
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct CreateArgs {
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    /// Branch or tag to build.
    #[arg(long = "ref", value_name = "REF")]
    ref_: String,
    /// A pipeline variable (repeatable); highest precedence, as in GitLab.
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
    vars: Vec<(String, String)>,
    /// A value for the configuration's `spec:inputs` (repeatable), read as the type the
    /// input declares, as `gantry run --input`.
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = parse_input)]
    inputs: Vec<(String, String)>,
    /// Watch it as `gantry pipeline watch` does instead of printing its JSON (the exit
    /// status is its result).
    #[arg(long)]
    watch: bool,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(command: &PipelineCommand) -> Result<(), Failure> {
    match command {
        PipelineCommand::Create(args) => create(args),
        PipelineCommand::List(args) => list(args),
        PipelineCommand::Show(args) => show(args),
        PipelineCommand::Watch(args) => {
            let client = ApiClient::new(&args.server)?;
            let project = encode_segment(&args.project);
            let id = match args.id {
                Some(id) => id,
                None => {
                    let path = match &args.ref_ {
                        Some(r) => format!(
                            "projects/{project}/pipelines/latest?ref={}",
                            encode_segment(r)
                        ),
                        None => format!("projects/{project}/pipelines/latest"),
                    };
                    let latest: Value = block_on(client.get(&path))??;
                    latest["id"].as_i64().ok_or_else(|| {
                        Failure::Failed(format!("the answer to {path} has no pipeline id"))
                    })?
                }
            };
            watch(&client, &args.project, id)
        }
        PipelineCommand::Cancel(args) => act(args, "cancel"),
        PipelineCommand::Retry(args) => act(args, "retry"),
    }
}

fn list(args: &ListArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let mut path = format!(
        "projects/{}/pipelines?per_page={}",
        encode_segment(&args.project),
        args.limit
    );
    if let Some(status) = &args.status {
        path.push_str(&format!("&status={}", encode_segment(status)));
    }
    if let Some(r) = &args.ref_ {
        path.push_str(&format!("&ref={}", encode_segment(r)));
    }
    let pipelines: Vec<Value> = block_on(client.get(&path))??;
    crate::out_line(render_list(&pipelines).trim_end());
    Ok(())
}

/// One line per pipeline, newest first: id, iid, status, ref, commit, source, creation.
fn render_list(pipelines: &[Value]) -> String {
    let rows: Vec<Vec<String>> = pipelines
        .iter()
        .map(|p| {
            let sha = text(&p["sha"]);
            vec![
                p["id"].to_string(),
                format!("#{}", p["iid"]),
                text(&p["status"]),
                text(&p["ref"]),
                sha[..sha.len().min(8)].to_owned(),
                text(&p["source"]),
                text(&p["created_at"]),
            ]
        })
        .collect();
    let headers = [
        "pipeline", "iid", "status", "ref", "commit", "source", "created",
    ]
    .map(str::to_owned)
    .to_vec();
    table(&headers, &rows)
}

/// Columns padded to their widest cell, two spaces apart, without trailing blanks.
fn table(headers: &[String], rows: &[Vec<String>]) -> String {
    use std::fmt::Write as _;
    let mut widths = vec![0; headers.len()];
    for row in std::iter::once(headers).chain(rows.iter().map(Vec::as_slice)) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(headers).chain(rows.iter().map(Vec::as_slice)) {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<w$}  ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or("?").to_owned()
}

/// The pipeline's one-line summary: `pipeline 7 (#3) for `main` at 1a2b3c4d: running`.
fn headline(pipeline: &Value) -> String {
    let sha = text(&pipeline["sha"]);
    format!(
        "pipeline {} (#{}) for `{}` at {}: {}",
        pipeline["id"],
        pipeline["iid"],
        text(&pipeline["ref"]),
        &sha[..sha.len().min(8)],
        text(&pipeline["status"]),
    )
}

/// `cancel` or `retry`: the pipeline's line after it.
fn act(args: &ShowArgs, action: &str) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let path = format!(
        "projects/{}/pipelines/{}/{action}",
        encode_segment(&args.project),
        args.id
    );
    let pipeline: Value = block_on(client.post(&path, &Value::Object(Default::default())))??;
    crate::out_line(&headline(&pipeline));
    Ok(())
}

/// Whether a pipeline in `status` has ended: nothing more happens without someone
/// acting (a `manual` pipeline waits for a person to play a job).
fn pipeline_ended(status: Status) -> bool {
    status.is_completed() || status == Status::Manual
}

/// A pipeline's jobs and trigger jobs, in creation order.
async fn pipeline_jobs(client: &ApiClient, base: &str) -> Result<Vec<Value>, Failure> {
    let mut jobs = client.get_all(&format!("{base}/jobs")).await?;
    jobs.extend(client.get_all(&format!("{base}/bridges")).await?);
    jobs.sort_by_key(|j| j["id"].as_i64().unwrap_or(0));
    Ok(jobs)
}

/// Follows pipeline `id` until it ends (module docs); `Unsuccessful` when it did not
/// succeed.
pub(crate) fn watch(client: &ApiClient, project: &str, id: i64) -> Result<(), Failure> {
    use std::io::IsTerminal as _;
    let base = format!("projects/{}/pipelines/{id}", encode_segment(project));
    let terminal = std::io::stdout().is_terminal();
    let color = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let mut display = Display::new(color, terminal);
    let mut seen: std::collections::HashMap<i64, Status> = std::collections::HashMap::new();
    let (pipeline, jobs) = block_on(async {
        let mut first = true;
        loop {
            if !first {
                tokio::time::sleep(POLL).await;
            }
            first = false;
            let pipeline: Value = client.get(&base).await?;
            let jobs = pipeline_jobs(client, &base).await?;
            let mut stages: Vec<String> = Vec::new();
            let mut lines = Vec::new();
            for job in jobs.iter().filter(|j| j["retried"].as_bool() != Some(true)) {
                let job_id = job["id"].as_i64().unwrap_or(0);
                let name = text(&job["name"]);
                let stage = text(&job["stage"]);
                // GitLab's thirteen statuses; one this client does not know shows as
                // `created` (nothing has happened yet that it can name).
                let status = Status::parse(&text(&job["status"])).unwrap_or_default();
                if !stages.contains(&stage) {
                    stages.push(stage.clone());
                }
                display.job_name(job_id, &name);
                let waiting = (status == Status::Pending)
                    .then(|| job["pending_reason"]["message"].as_str().map(str::to_owned))
                    .flatten();
                if seen.get(&job_id) != Some(&status) {
                    let first_sight = !seen.contains_key(&job_id);
                    seen.insert(job_id, status);
                    if !(first_sight && status == Status::Created) {
                        let note = match job["failure_reason"].as_str() {
                            Some(reason) if status == Status::Failed => {
                                format!("{status} ({reason})")
                            }
                            _ => status.to_string(),
                        };
                        display.note(job_id, &note);
                    }
                }
                lines.push(JobLine {
                    id: job_id,
                    name,
                    stage,
                    status,
                    duration: job["duration"].as_f64(),
                    waiting,
                });
            }
            display.set_stages(stages);
            display.update_jobs(lines);
            display.flush();
            if Status::parse(pipeline["status"].as_str().unwrap_or("")).is_some_and(pipeline_ended)
            {
                return Ok::<_, Failure>((pipeline, jobs));
            }
        }
    })??;
    display.finish();
    drop(display);
    crate::out_line(&headline(&pipeline));
    let status = text(&pipeline["status"]);
    if status == "success" {
        return Ok(());
    }
    let failed: Vec<&Value> = jobs
        .iter()
        .filter(|j| j["status"] == "failed" && j["retried"].as_bool() != Some(true))
        .filter(|j| j["allow_failure"].as_bool() != Some(true))
        .collect();
    let mut message = match status.as_str() {
        "failed" => format!("pipeline {id} failed"),
        "manual" => format!("pipeline {id} waits for a manual job to be played"),
        other => format!("pipeline {id} was {other}"),
    };
    for job in &failed {
        message.push_str(&format!(
            "\njob `{}` failed{}: see its log with `gantry job log --project {project} {}`",
            text(&job["name"]),
            job["failure_reason"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            job["id"],
        ));
    }
    Err(Failure::Invalid(message))
}

fn show(args: &ShowArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let base = format!(
        "projects/{}/pipelines/{}",
        encode_segment(&args.project),
        args.id
    );
    let (pipeline, jobs) = block_on(async {
        let pipeline: Value = client.get(&base).await?;
        let jobs = pipeline_jobs(&client, &base).await?;
        Ok::<_, Failure>((pipeline, jobs))
    })??;
    crate::out_line(render(&pipeline, &jobs).trim_end());
    Ok(())
}

/// The pipeline's line, then a table of its jobs in creation order: stage, name, status,
/// and a note (why it waits, or its failure reason).
fn render(pipeline: &Value, jobs: &[Value]) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let note = match (&j["pending_reason"]["message"], &j["failure_reason"]) {
                (Value::String(why), _) => why.clone(),
                (_, Value::String(reason)) => reason.clone(),
                _ => String::new(),
            };
            let status = if j["retried"].as_bool() == Some(true) {
                format!("{} (retried)", text(&j["status"]))
            } else {
                text(&j["status"])
            };
            vec![text(&j["stage"]), text(&j["name"]), status, note]
        })
        .collect();
    let headers = ["stage", "job", "status", ""].map(str::to_owned).to_vec();
    format!("{}\n{}", headline(pipeline), table(&headers, &rows))
}

fn create(args: &CreateArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let mut fields = vec![("ref".to_owned(), args.ref_.clone())];
    for (key, value) in &args.vars {
        fields.push(("variables[][key]".to_owned(), key.clone()));
        fields.push(("variables[][value]".to_owned(), value.clone()));
    }
    for (name, value) in &args.inputs {
        fields.push((format!("inputs[{name}]"), value.clone()));
    }
    let path = format!("projects/{}/pipeline", encode_segment(&args.project));
    let pipeline: Value = block_on(client.post_form(&path, &fields))??;
    eprintln!(
        "created pipeline {} (#{}) for `{}` at {}: {}",
        pipeline["id"],
        pipeline["iid"],
        pipeline["ref"].as_str().unwrap_or(&args.ref_),
        pipeline["sha"]
            .as_str()
            .map_or("?", |sha| &sha[..sha.len().min(8)]),
        pipeline["status"].as_str().unwrap_or("?"),
    );
    if !args.watch {
        crate::out_line(&serde_json::to_string_pretty(&pipeline).unwrap_or_default());
    }
    match (args.watch, pipeline["id"].as_i64()) {
        (false, _) => Ok(()),
        (true, Some(id)) => watch(&client, &args.project, id),
        (true, None) => Err(Failure::Failed(format!(
            "the answer to {path} has no pipeline id to watch"
        ))),
    }
}
