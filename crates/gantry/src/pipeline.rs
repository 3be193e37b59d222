//! `gantry pipeline create --project NAME --ref REF [--var K=V]... [--input NAME=VALUE]...`:
//! trigger a pipeline on a running server (`POST /api/v4/projects/:id/pipeline`, as
//! GitLab's API, form-encoded: inputs are text the server reads as their declared types).
//! Prints the pipeline as JSON on stdout.

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{ApiClient, ClientError, ServerArgs, block_on, encode_segment};
use crate::lint::{parse_input, parse_var};

#[derive(Subcommand)]
pub(crate) enum PipelineCommand {
    /// Create a pipeline for a ref of a project.
    Create(CreateArgs),
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
    }
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
