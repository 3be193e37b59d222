//! `gantry variable list|import|delete --project NAME`: a project's CI/CD variables on a
//! running server, through GitLab's API (`/api/v4/projects/:id/variables`). `import` reads
//! the file format of `gantry run --variables-file` (see [`crate::variables_file`]), so one
//! file serves a local run and the server.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::client::{ApiClient, ClientError, ServerArgs, block_on, encode_segment};
use crate::variables_file;

#[derive(Subcommand)]
pub(crate) enum VariableCommand {
    /// Print the project's variables as JSON (values included).
    List(ListArgs),
    /// Create or replace every variable of a variables file (the `gantry run
    /// --variables-file` format); variables the file does not name are left alone.
    Import(ImportArgs),
    /// Delete a variable.
    Delete(DeleteArgs),
}

#[derive(Args)]
pub(crate) struct ListArgs {
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct ImportArgs {
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    /// The variables file (YAML: `KEY: value`, or `KEY: {value, type, masked, protected,
    /// raw, environment_scope, description}`).
    file: PathBuf,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct DeleteArgs {
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: String,
    /// The variable's key.
    key: String,
    /// Its environment scope, when the key exists for several.
    #[arg(long, value_name = "SCOPE")]
    scope: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(command: &VariableCommand) -> Result<(), ClientError> {
    match command {
        VariableCommand::List(args) => list(args),
        VariableCommand::Import(args) => import(args),
        VariableCommand::Delete(args) => delete(args),
    }
}

fn base(project: &str) -> String {
    format!("projects/{}/variables", encode_segment(project))
}

/// `…/variables/:key?filter[environment_scope]=<scope>`.
fn one(project: &str, key: &str, scope: Option<&str>) -> String {
    let path = format!("{}/{}", base(project), encode_segment(key));
    match scope {
        Some(scope) => format!(
            "{path}?filter%5Benvironment_scope%5D={}",
            encode_segment(scope)
        ),
        None => path,
    }
}

fn list(args: &ListArgs) -> Result<(), ClientError> {
    let client = ApiClient::new(&args.server)?;
    let vars: Value = block_on(client.get(&base(&args.project)))??;
    crate::out_line(&serde_json::to_string_pretty(&vars).unwrap_or_default());
    Ok(())
}

fn import(args: &ImportArgs) -> Result<(), ClientError> {
    let vars = variables_file::read(&args.file).map_err(ClientError::Usage)?;
    let client = ApiClient::new(&args.server)?;
    block_on(async {
        let existing: Value = client.get(&base(&args.project)).await?;
        let exists = |key: &str, scope: &str| {
            existing.as_array().is_some_and(|all| {
                all.iter()
                    .any(|v| v["key"] == key && v["environment_scope"] == scope)
            })
        };
        let (mut created, mut updated) = (0, 0);
        for v in &vars {
            let body = json!({
                "key": v.key,
                "value": v.value,
                "variable_type": v.variable_type,
                "protected": v.protected,
                "masked": v.masked,
                "raw": v.raw,
                "environment_scope": v.environment_scope,
                "description": v.description,
            });
            if exists(&v.key, &v.environment_scope) {
                let path = one(&args.project, &v.key, Some(&v.environment_scope));
                let _: Value = client.put(&path, &body).await?;
                updated += 1;
            } else {
                let _: Value = client.post(&base(&args.project), &body).await?;
                created += 1;
            }
        }
        eprintln!(
            "{}: {created} variable(s) created, {updated} replaced",
            args.project
        );
        Ok(())
    })?
}

fn delete(args: &DeleteArgs) -> Result<(), ClientError> {
    let client = ApiClient::new(&args.server)?;
    let path = one(&args.project, &args.key, args.scope.as_deref());
    block_on(client.delete(&path))??;
    eprintln!("{}: deleted `{}`", args.project, args.key);
    Ok(())
}
