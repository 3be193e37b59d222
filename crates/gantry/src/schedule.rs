//! `gantry schedule`: a project's pipeline schedules on a running server (GitLab's
//! `/projects/:id/pipeline_schedules` API): create (with variables), list, play, delete.
//! Prints the API's JSON on stdout.

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::client::{ApiClient, ServerArgs, block_on, encode_segment};
use crate::exit::Failure;

#[derive(Subcommand)]
pub(crate) enum ScheduleCommand {
    /// Run a ref's pipeline at the times a cron expression names.
    Create(CreateArgs),
    /// List a project's schedules.
    List(ProjectArgs),
    /// Run a schedule's pipeline now (its next run stays).
    Play(IdArgs),
    /// Delete a schedule.
    Delete(IdArgs),
}

#[derive(Args)]
pub(crate) struct CreateArgs {
    /// Project name or id.
    #[arg(long)]
    project: String,
    /// The branch or tag to run.
    #[arg(long = "ref", value_name = "REF")]
    ref_name: String,
    /// Five cron fields (minute hour day-of-month month day-of-week), e.g. "0 3 * * 1-5".
    #[arg(long)]
    cron: String,
    /// An IANA time zone the cron times are in.
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    timezone: String,
    /// What the schedule is for.
    #[arg(long)]
    description: String,
    /// Create it inactive (it runs only when played).
    #[arg(long)]
    inactive: bool,
    /// A variable of the schedule's pipelines (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = crate::lint::parse_var)]
    vars: Vec<(String, String)>,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct ProjectArgs {
    /// Project name or id.
    #[arg(long)]
    project: String,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct IdArgs {
    /// The schedule's id.
    id: i64,
    /// Project name or id.
    #[arg(long)]
    project: String,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(command: &ScheduleCommand) -> Result<(), Failure> {
    match command {
        ScheduleCommand::Create(args) => create(args),
        ScheduleCommand::List(args) => {
            let client = ApiClient::new(&args.server)?;
            let path = format!(
                "projects/{}/pipeline_schedules",
                encode_segment(&args.project)
            );
            let list: Value = block_on(client.get(&path))??;
            print(&list);
            Ok(())
        }
        ScheduleCommand::Play(args) => {
            let client = ApiClient::new(&args.server)?;
            let path = format!("{}/play", schedule_path(args));
            let played: Value = block_on(client.post(&path, &json!({})))??;
            eprintln!("schedule {}: pipeline {}", args.id, played["pipeline_id"]);
            print(&played);
            Ok(())
        }
        ScheduleCommand::Delete(args) => {
            let client = ApiClient::new(&args.server)?;
            block_on(client.delete(&schedule_path(args)))??;
            eprintln!("deleted schedule {}", args.id);
            Ok(())
        }
    }
}

fn schedule_path(args: &IdArgs) -> String {
    format!(
        "projects/{}/pipeline_schedules/{}",
        encode_segment(&args.project),
        args.id
    )
}

fn create(args: &CreateArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let path = format!(
        "projects/{}/pipeline_schedules",
        encode_segment(&args.project)
    );
    let body = json!({
        "description": args.description,
        "ref": args.ref_name,
        "cron": args.cron,
        "cron_timezone": args.timezone,
        "active": !args.inactive,
    });
    let schedule: Value = block_on(client.post(&path, &body))??;
    let id = schedule["id"].as_i64().unwrap_or_default();
    for (key, value) in &args.vars {
        let _: Value = block_on(client.post(
            &format!("{path}/{id}/variables"),
            &json!({"key": key, "value": value}),
        ))??;
    }
    eprintln!(
        "created schedule {id} of {}: next run {}",
        args.project,
        schedule["next_run_at"]
            .as_str()
            .unwrap_or("never (inactive)")
    );
    print(&schedule);
    Ok(())
}

fn print(value: &Value) {
    crate::out_line(&serde_json::to_string_pretty(value).unwrap_or_default());
}
