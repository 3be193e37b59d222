//! `gantry variable list|import|delete --project NAME` (or `--group PATH`, `--instance`): a
//! project's CI/CD variables on a running server, through GitLab's API
//! (`/api/v4/projects/:id/variables`), a group's (`/api/v4/groups/:id/variables`, which
//! the pipelines of every project in the group and its subgroups see) or the instance's
//! (`/api/v4/admin/ci/variables`, which every project's pipelines see). `import` reads the
//! file format of `gantry run --variables-file` (see [`crate::variables_file`]), so one
//! file serves a local run and the server; instance variables have no
//! `environment_scope`.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::client::{ApiClient, ServerArgs, block_on, encode_segment};
use crate::exit::Failure;
use crate::variables_file;

#[derive(Subcommand)]
pub(crate) enum VariableCommand {
    /// Print the project's (or the group's, or the instance's) variables as JSON (values
    /// included, except hidden ones).
    List(ListArgs),
    /// Create or replace every variable of a variables file (the `gantry run
    /// --variables-file` format); variables the file does not name are left alone.
    Import(ImportArgs),
    /// Delete a variable.
    Delete(DeleteArgs),
}

/// Whose variables: a project's, a group's, or the instance's.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub(crate) struct OwnerArgs {
    /// The project's name (or numeric id).
    #[arg(long, value_name = "NAME")]
    project: Option<String>,
    /// A group's full path (`acme`, `acme/platform`): a namespace of projects, whose
    /// pipelines (and those of its subgroups' projects) see its variables.
    #[arg(long, value_name = "PATH")]
    group: Option<String>,
    /// The instance's variables (Admin Area › CI/CD › Variables), which every pipeline of
    /// every project sees, instead of a project's.
    #[arg(long)]
    instance: bool,
}

#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    owner: OwnerArgs,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct ImportArgs {
    #[command(flatten)]
    owner: OwnerArgs,
    /// The variables file (YAML: `KEY: value`, or `KEY: {value, type, masked, protected,
    /// raw, environment_scope, description}`; no `environment_scope` with `--instance`).
    file: PathBuf,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct DeleteArgs {
    #[command(flatten)]
    owner: OwnerArgs,
    /// The variable's key.
    key: String,
    /// Its environment scope, when the key exists for several (project and group
    /// variables only).
    #[arg(long, value_name = "SCOPE", conflicts_with = "instance")]
    scope: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

/// Whose variables a command is about, resolved from [`OwnerArgs`].
enum Owner<'a> {
    Project(&'a str),
    Group(&'a str),
    Instance,
}

impl<'a> Owner<'a> {
    fn of(args: &'a OwnerArgs) -> Self {
        match (&args.project, &args.group) {
            (Some(project), _) => Owner::Project(project),
            (None, Some(group)) => Owner::Group(group),
            (None, None) => Owner::Instance,
        }
    }

    /// What messages call it.
    fn label(&self) -> String {
        match self {
            Owner::Project(project) => (*project).to_owned(),
            Owner::Group(group) => format!("group {group}"),
            Owner::Instance => "instance".to_owned(),
        }
    }

    /// The list (and create) path.
    fn base(&self) -> String {
        match self {
            Owner::Project(project) => format!("projects/{}/variables", encode_segment(project)),
            Owner::Group(group) => format!(
                "groups/{}/variables",
                encode_segment(group.trim_matches('/'))
            ),
            Owner::Instance => "admin/ci/variables".to_owned(),
        }
    }

    /// `…/variables/:key`, with `?filter[environment_scope]=<scope>` for a project's or
    /// group's.
    fn one(&self, key: &str, scope: Option<&str>) -> String {
        let path = format!("{}/{}", self.base(), encode_segment(key));
        match scope {
            Some(scope) => format!(
                "{path}?filter%5Benvironment_scope%5D={}",
                encode_segment(scope)
            ),
            None => path,
        }
    }
}

pub(crate) fn run(command: &VariableCommand) -> Result<(), Failure> {
    match command {
        VariableCommand::List(args) => list(args),
        VariableCommand::Import(args) => import(args),
        VariableCommand::Delete(args) => delete(args),
    }
}

fn list(args: &ListArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let vars = Value::Array(block_on(client.get_all(&Owner::of(&args.owner).base()))??);
    crate::out_line(&serde_json::to_string_pretty(&vars).unwrap_or_default());
    Ok(())
}

/// A variable to send: its API body, key, (project variables) scope and whether it is
/// hidden (set when it is created: `masked_and_hidden`).
struct Upload {
    body: Value,
    key: String,
    scope: Option<String>,
    hidden: bool,
}

fn import(args: &ImportArgs) -> Result<(), Failure> {
    let owner = Owner::of(&args.owner);
    let uploads: Vec<Upload> = match owner {
        Owner::Project(_) | Owner::Group(_) => variables_file::read(&args.file)
            .map_err(Failure::Usage)?
            .into_iter()
            .map(|v| Upload {
                body: json!({
                    "key": v.key,
                    "value": v.value,
                    "variable_type": v.variable_type,
                    "protected": v.protected,
                    "masked": v.masked,
                    "raw": v.raw,
                    "environment_scope": v.environment_scope,
                    "description": v.description,
                }),
                key: v.key,
                scope: Some(v.environment_scope),
                hidden: v.hidden,
            })
            .collect(),
        Owner::Instance => variables_file::read_instance(&args.file)
            .map_err(Failure::Usage)?
            .into_iter()
            .map(|v| Upload {
                body: json!({
                    "key": v.key,
                    "value": v.value,
                    "variable_type": v.variable_type,
                    "protected": v.protected,
                    "masked": v.masked,
                    "raw": v.raw,
                    "description": v.description,
                }),
                key: v.key,
                scope: None,
                hidden: false,
            })
            .collect(),
    };
    let client = ApiClient::new(&args.server)?;
    block_on(async {
        let existing = Value::Array(client.get_all(&owner.base()).await?);
        let current = |u: &Upload| {
            existing.as_array().and_then(|all| {
                all.iter().find(|v| {
                    v["key"] == u.key.as_str()
                        && u.scope
                            .as_ref()
                            .is_none_or(|s| v["environment_scope"] == s.as_str())
                })
            })
        };
        let (mut created, mut updated) = (0, 0);
        for u in &uploads {
            if let Some(current) = current(u) {
                if current["hidden"].as_bool().unwrap_or(false) != u.hidden {
                    return Err(Failure::Usage(format!(
                        "`{}` is {} on the server but {} in {}: whether a variable is hidden is chosen when it is created; delete it (gantry variable delete) and import again",
                        u.key,
                        if u.hidden { "not hidden" } else { "hidden" },
                        if u.hidden { "hidden" } else { "not hidden" },
                        args.file.display()
                    )));
                }
                let _: Value = client
                    .put(&owner.one(&u.key, u.scope.as_deref()), &u.body)
                    .await?;
                updated += 1;
            } else {
                let mut body = u.body.clone();
                if u.hidden {
                    body["masked_and_hidden"] = Value::Bool(true);
                }
                let _: Value = client.post(&owner.base(), &body).await?;
                created += 1;
            }
        }
        eprintln!(
            "{}: {created} variable(s) created, {updated} replaced",
            owner.label()
        );
        Ok(())
    })?
}

fn delete(args: &DeleteArgs) -> Result<(), Failure> {
    let owner = Owner::of(&args.owner);
    let client = ApiClient::new(&args.server)?;
    block_on(client.delete(&owner.one(&args.key, args.scope.as_deref())))??;
    eprintln!("{}: deleted `{}`", owner.label(), args.key);
    Ok(())
}
