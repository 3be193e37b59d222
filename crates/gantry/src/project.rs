//! `gantry project create NAME --repo PATH_OR_URL`: register a repository with a
//! running server (`POST /api/v4/projects`). Prints the project as JSON on stdout.
//! `gantry project pull NAME`: look for pushes now (`POST …/mirror/pull`).
//! `gantry project delete NAME --yes`: delete it and all it owns (`DELETE /projects/:id`).
//! `gantry project protect|unprotect NAME PATTERN [--tag]` and `gantry project protected
//! NAME`: the project's protected branches and tags (`…/protected_branches`,
//! `…/protected_tags`).

use std::path::Path;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::client::{ApiClient, ServerArgs, block_on, encode_segment};
use crate::exit::Failure;

#[derive(Subcommand)]
pub(crate) enum ProjectCommand {
    /// Create a project that builds a git repository.
    Create(CreateArgs),
    /// List the server's projects.
    List(ListArgs),
    /// Fetch a project's repository now and create a push pipeline for each branch or
    /// tag that moved (what the server also does every --poll-interval).
    Pull(PullArgs),
    /// Protect a branch (or, with --tag, a tag) name or `*` pattern: its pipelines see
    /// protected variables and run on `ref_protected` runners.
    Protect(ProtectArgs),
    /// Remove a protection (the default branch's too).
    Unprotect(ProtectArgs),
    /// List the project's protected branches and tags as JSON.
    Protected(PullArgs),
    /// Change a project's settings (GitLab's `PUT /projects/:id`); prints the project.
    Update(UpdateArgs),
    /// Delete a project with its pipelines, jobs, logs, artifacts, environments, variables,
    /// schedules, trigger tokens and project runners (GitLab's `DELETE /projects/:id`).
    Delete(DeleteArgs),
}

#[derive(Args)]
pub(crate) struct DeleteArgs {
    /// Project name or id.
    name: String,
    /// Yes, delete it: nothing of it can be restored.
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct UpdateArgs {
    /// Project name or id.
    name: String,
    /// The default branch (a branch of the repository): `CI_DEFAULT_BRANCH`, and the
    /// branch `include:project` reads without `ref`.
    #[arg(long, value_name = "BRANCH")]
    default_branch: Option<String>,
    /// The CI configuration file's path in the repository (empty: `.gitlab-ci.yml`).
    #[arg(long, value_name = "PATH")]
    ci_config_path: Option<String>,
    /// The default job timeout in seconds (600 to 2629745), for jobs without `timeout:`.
    #[arg(long, value_name = "SECONDS")]
    build_timeout: Option<i64>,
    /// Whether new pipelines keep the artifacts of a ref's latest jobs past `expire_in`.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    keep_latest_artifact: Option<bool>,
    /// What runners do without `GIT_STRATEGY`: `fetch` (reuse the last checkout) or `clone`.
    #[arg(long, value_name = "fetch|clone")]
    git_strategy: Option<String>,
    /// The project's `GIT_DEPTH` (0 to 1000; 0 clones everything).
    #[arg(long, value_name = "COMMITS")]
    git_depth: Option<i64>,
    /// Auto-cancel redundant pipelines (`workflow:auto_cancel:on_new_commit`).
    #[arg(long, value_name = "enabled|disabled")]
    auto_cancel: Option<String>,
    /// Keep the caches of protected and other refs apart.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    separated_caches: Option<bool>,
    /// Fail deployment jobs older than the environment's last successful deployment.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    forward_deployment: Option<bool>,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct ProtectArgs {
    /// Project name or id.
    name: String,
    /// A branch or tag name, or a pattern with `*` (`release/*`, `v*`).
    pattern: String,
    /// A tag name or pattern instead of a branch.
    #[arg(long)]
    tag: bool,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct PullArgs {
    /// Project name or id.
    name: String,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct CreateArgs {
    /// Project name (unique on the server; used as its path, e.g. in clone URLs).
    name: String,
    /// The git repository: a local path (made absolute here) or a URL the server can
    /// fetch.
    #[arg(long, value_name = "PATH_OR_URL")]
    repo: String,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(command: &ProjectCommand) -> Result<(), Failure> {
    match command {
        ProjectCommand::Create(args) => create(args),
        ProjectCommand::List(args) => list(args),
        ProjectCommand::Pull(args) => pull(args),
        ProjectCommand::Protect(args) => protect(args, true),
        ProjectCommand::Unprotect(args) => protect(args, false),
        ProjectCommand::Protected(args) => protected(args),
        ProjectCommand::Update(args) => update(args),
        ProjectCommand::Delete(args) => delete(args),
    }
}

fn delete(args: &DeleteArgs) -> Result<(), Failure> {
    if !args.yes {
        return Err(Failure::Usage(format!(
            "deleting project `{}` deletes its pipelines, jobs, logs, artifacts, environments and settings for good\n  hint: add --yes to delete it",
            args.name
        )));
    }
    let client = ApiClient::new(&args.server)?;
    block_on(client.delete(&format!("projects/{}", encode_segment(&args.name))))??;
    eprintln!("deleted project `{}`", args.name);
    Ok(())
}

fn update(args: &UpdateArgs) -> Result<(), Failure> {
    let mut body = serde_json::Map::new();
    if let Some(branch) = &args.default_branch {
        body.insert("default_branch".into(), json!(branch));
    }
    if let Some(path) = &args.ci_config_path {
        body.insert("ci_config_path".into(), json!(path));
    }
    if let Some(secs) = args.build_timeout {
        body.insert("build_timeout".into(), json!(secs));
    }
    if let Some(keep) = args.keep_latest_artifact {
        body.insert("keep_latest_artifact".into(), json!(keep));
    }
    if let Some(strategy) = &args.git_strategy {
        body.insert("build_git_strategy".into(), json!(strategy));
    }
    if let Some(depth) = args.git_depth {
        body.insert("ci_default_git_depth".into(), json!(depth));
    }
    if let Some(auto_cancel) = &args.auto_cancel {
        body.insert("auto_cancel_pending_pipelines".into(), json!(auto_cancel));
    }
    if let Some(separated) = args.separated_caches {
        body.insert("ci_separated_caches".into(), json!(separated));
    }
    if let Some(forward) = args.forward_deployment {
        body.insert("ci_forward_deployment_enabled".into(), json!(forward));
    }
    if body.is_empty() {
        return Err(Failure::Usage(
            "nothing to change\n  hint: pass --default-branch, --ci-config-path, --build-timeout, --keep-latest-artifact, --git-strategy, --git-depth, --auto-cancel, --separated-caches or --forward-deployment".to_owned(),
        ));
    }
    let client = ApiClient::new(&args.server)?;
    let path = format!("projects/{}", encode_segment(&args.name));
    let project: Value = block_on(client.put(&path, &Value::Object(body)))??;
    eprintln!("updated project `{}`", args.name);
    crate::out_line(&serde_json::to_string_pretty(&project).unwrap_or_default());
    Ok(())
}

/// `…/protected_branches` or `…/protected_tags` of project `name`.
fn protections(name: &str, tag: bool) -> String {
    format!(
        "projects/{}/protected_{}",
        encode_segment(name),
        if tag { "tags" } else { "branches" }
    )
}

fn protect(args: &ProtectArgs, on: bool) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let base = protections(&args.name, args.tag);
    let kind = if args.tag { "tag" } else { "branch" };
    if on {
        let body = json!({ "name": args.pattern });
        let created: Value = block_on(client.post(&base, &body))??;
        eprintln!("{}: protected {kind} `{}`", args.name, args.pattern);
        crate::out_line(&serde_json::to_string_pretty(&created).unwrap_or_default());
    } else {
        let path = format!("{base}/{}", encode_segment(&args.pattern));
        block_on(client.delete(&path))??;
        eprintln!("{}: unprotected {kind} `{}`", args.name, args.pattern);
    }
    Ok(())
}

fn protected(args: &PullArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let (branches, tags): (Value, Value) = block_on(async {
        Ok::<_, Failure>((
            client.get(&protections(&args.name, false)).await?,
            client.get(&protections(&args.name, true)).await?,
        ))
    })??;
    let out = json!({ "branches": branches, "tags": tags });
    crate::out_line(&serde_json::to_string_pretty(&out).unwrap_or_default());
    Ok(())
}

fn pull(args: &PullArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let path = format!("projects/{}/mirror/pull", encode_segment(&args.name));
    let pushed: Value = block_on(client.post(&path, &json!({})))??;
    let refs = pushed.as_array().map(Vec::as_slice).unwrap_or_default();
    if refs.is_empty() {
        eprintln!("nothing moved in {}", args.name);
    }
    for r in refs {
        let name = r["ref"].as_str().unwrap_or_default();
        match (r["pipeline_id"].as_i64(), r["reason"].as_str()) {
            (Some(id), _) => eprintln!("{name}: pipeline {id}"),
            (None, Some(reason)) => eprintln!("{name}: no pipeline: {reason}"),
            (None, None) => eprintln!("{name}: no pipeline"),
        }
    }
    crate::out_line(&serde_json::to_string_pretty(&pushed).unwrap_or_default());
    Ok(())
}

fn create(args: &CreateArgs) -> Result<(), Failure> {
    let repo = resolve_repo(&args.repo)?;
    let client = ApiClient::new(&args.server)?;
    let body = json!({ "name": args.name, "repo_url": repo });
    let project: Value = block_on(client.post("projects", &body))??;
    eprintln!(
        "created project `{}` (id {}) building {}",
        project["path_with_namespace"]
            .as_str()
            .unwrap_or(&args.name),
        project["id"],
        repo
    );
    eprintln!(
        "next: gantry pipeline create --project {} --ref <branch>",
        args.name
    );
    crate::out_line(&serde_json::to_string_pretty(&project).unwrap_or_default());
    Ok(())
}

fn list(args: &ListArgs) -> Result<(), Failure> {
    let client = ApiClient::new(&args.server)?;
    let projects: Value = block_on(client.get("projects"))??;
    crate::out_line(&serde_json::to_string_pretty(&projects).unwrap_or_default());
    Ok(())
}

/// A URL (`scheme://…` or scp-like `user@host:path`) is passed on as is; anything else
/// is a local path, which must exist and is made absolute so the server finds it
/// whatever its working directory.
fn resolve_repo(repo: &str) -> Result<String, Failure> {
    if repo.contains("://") || looks_like_scp(repo) {
        return Ok(repo.to_owned());
    }
    let path = Path::new(repo);
    let absolute = path.canonicalize().map_err(|e| {
        Failure::Usage(format!(
            "the repository `{repo}` is neither a URL nor an existing directory: {e}\n\
             pass --repo with a git URL or the path of a local git repository"
        ))
    })?;
    Ok(absolute.to_string_lossy().into_owned())
}

fn looks_like_scp(repo: &str) -> bool {
    match repo.split_once(':') {
        Some((host, _)) => host.contains('@') && !host.contains('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_pass_through() {
        assert_eq!(
            resolve_repo("https://example.com/a.git").ok().as_deref(),
            Some("https://example.com/a.git")
        );
        assert_eq!(
            resolve_repo("git@example.com:a/b.git").ok().as_deref(),
            Some("git@example.com:a/b.git")
        );
        assert!(resolve_repo("/no/such/dir/anywhere").is_err());
    }
}
