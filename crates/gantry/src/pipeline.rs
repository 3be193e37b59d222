//! `gantry pipeline create --project NAME --ref REF [--var K=V]... [--input NAME=VALUE]...`:
//! trigger a pipeline on a running server (`POST /api/v4/projects/:id/pipeline`, as
//! GitLab's API, form-encoded: inputs are text the server reads as their declared types).
//! Prints the pipeline as JSON on stdout.
//!
//! `gantry pipeline show --project NAME ID`: the pipeline and its jobs (trigger jobs
//! included) as a table on stdout — stage, name, status, and why a waiting job waits (the
//! job API's `pending_reason`) or why one failed.

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{ApiClient, ClientError, ServerArgs, block_on, encode_segment};
use crate::lint::{parse_input, parse_var};

#[derive(Subcommand)]
pub(crate) enum PipelineCommand {
    /// Create a pipeline for a ref of a project.
    Create(CreateArgs),
    /// Show a pipeline's jobs: their status, and why a pending job waits.
    Show(ShowArgs),
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
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(command: &PipelineCommand) -> Result<(), ClientError> {
    match command {
        PipelineCommand::Create(args) => create(args),
        PipelineCommand::Show(args) => show(args),
    }
}

fn show(args: &ShowArgs) -> Result<(), ClientError> {
    let client = ApiClient::new(&args.server)?;
    let base = format!(
        "projects/{}/pipelines/{}",
        encode_segment(&args.project),
        args.id
    );
    let (pipeline, jobs, bridges) = block_on(async {
        let pipeline: Value = client.get(&base).await?;
        let jobs = client.get_all(&format!("{base}/jobs")).await?;
        let bridges = client.get_all(&format!("{base}/bridges")).await?;
        Ok::<_, ClientError>((pipeline, jobs, bridges))
    })??;
    let mut jobs = jobs;
    jobs.extend(bridges);
    jobs.sort_by_key(|j| j["id"].as_i64().unwrap_or(0));
    crate::out_line(render(&pipeline, &jobs).trim_end());
    Ok(())
}

/// The pipeline's line, then a table of its jobs in creation order: stage, name, status,
/// and a note (why it waits, or its failure reason).
fn render(pipeline: &Value, jobs: &[Value]) -> String {
    use std::fmt::Write as _;
    let text = |v: &Value| v.as_str().unwrap_or("?").to_owned();
    let sha = text(&pipeline["sha"]);
    let mut out = format!(
        "pipeline {} (#{}) for `{}` at {}: {}\n",
        pipeline["id"],
        pipeline["iid"],
        text(&pipeline["ref"]),
        &sha[..sha.len().min(8)],
        text(&pipeline["status"]),
    );
    let rows: Vec<[String; 4]> = jobs
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
            [text(&j["stage"]), text(&j["name"]), status, note]
        })
        .collect();
    let headers = ["stage", "job", "status", ""].map(str::to_owned);
    let mut widths = [0; 3];
    for row in std::iter::once(&headers).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for [stage, name, status, note] in std::iter::once(&headers).chain(&rows) {
        let [a, b, c] = widths;
        let line = format!("{stage:<a$}  {name:<b$}  {status:<c$}  {note}");
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

fn create(args: &CreateArgs) -> Result<(), ClientError> {
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
    crate::out_line(&serde_json::to_string_pretty(&pipeline).unwrap_or_default());
    Ok(())
}
