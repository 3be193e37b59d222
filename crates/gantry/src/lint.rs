//! `gantry lint`: compile the checkout's pipeline configuration for a ref and report.
//!
//! Git facts (`git.rs`, the `git` CLI) become a `PipelineInfo`; with `--source
//! merge_request_event` the two branches' commits and merge base go into its
//! `MergeRequestInfo` and the merge request's diff comes from `coordinator::changes_since`.
//! The configuration's files come from the working tree (this module's `Loader`), other
//! projects' and remote ones from `includes.rs`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use gantry_pipeline::report::{LintReport, render_text};
use gantry_pipeline::{
    Context, InputValue, Loader, MergeRequestDiff, MergeRequestEventType, MergeRequestInfo,
    Options, PipelineInfo, PipelineInputs, Source,
};

use crate::{exit, git, includes, variables_file};
use gantry_server::coordinator::IncludeLoader;

#[derive(Args)]
pub(crate) struct LintArgs {
    /// Pipeline file, relative to the repository root (default: .gitlab-ci.yml).
    file: Option<PathBuf>,
    /// Evaluate rules for a pipeline on this branch (default: the current branch).
    #[arg(long = "ref", value_name = "BRANCH", conflicts_with = "tag")]
    ref_: Option<String>,
    /// Evaluate rules for a pipeline on this tag.
    #[arg(long, value_name = "TAG")]
    tag: Option<String>,
    /// The pipeline source (CI_PIPELINE_SOURCE). `merge_request_event` lints a merge
    /// request pipeline: GitLab's CI_MERGE_REQUEST_* variables, no CI_COMMIT_BRANCH, and
    /// `rules:changes` over the merge request's diff.
    #[arg(long, default_value = "push", value_parser = parse_source)]
    source: Source,
    /// With `--source merge_request_event`: the merge request's source branch (default:
    /// the current branch).
    #[arg(long, value_name = "BRANCH", conflicts_with_all = ["ref_", "tag"])]
    source_branch: Option<String>,
    /// With `--source merge_request_event`: the merge request's target branch (default:
    /// the default branch).
    #[arg(long, value_name = "BRANCH", conflicts_with = "tag")]
    target_branch: Option<String>,
    /// With `--source merge_request_event`: lint the merged result (the source branch
    /// merged into the target, CI_MERGE_REQUEST_EVENT_TYPE=merged_result with both heads'
    /// SHAs) instead of a `detached` pipeline. Branches that do not merge cleanly lint as
    /// detached, as GitLab falls back.
    #[arg(long)]
    merged_result: bool,
    /// Lint as if no branch were protected. Without it the default branch is, as GitLab
    /// protects it by default (CI_COMMIT_REF_PROTECTED, and a merge request's
    /// CI_MERGE_REQUEST_{SOURCE,TARGET}_BRANCH_PROTECTED).
    #[arg(long)]
    unprotected: bool,
    /// A pipeline variable, as given when running a pipeline (highest precedence).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = parse_var)]
    vars: Vec<(String, String)>,
    /// A value for the configuration's `spec:inputs` (repeatable), read as the type the
    /// input declares: `--input replicas=3`, `--input dry_run=true`, `--input
    /// 'targets=[linux, mac]'`.
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = parse_input)]
    inputs: Vec<(String, String)>,
    /// The project's CI/CD variables, as a YAML file (the format of `gantry run
    /// --variables-file`): rules see them below --var. Repeatable, and read after the
    /// same default files, as for `gantry run`.
    #[arg(long = "variables-file", value_name = "PATH")]
    variables_files: Vec<PathBuf>,
    /// A changed file for rules:changes (repeatable). Without any, changes are unknown
    /// and `rules:changes` matches, as on GitLab for new branches, tags and API pipelines.
    #[arg(long = "changed", value_name = "PATH")]
    changed: Vec<String>,
    /// Lint a file meant to be included elsewhere: check every keyword's structure, but
    /// do not resolve includes or require jobs, stages or files defined elsewhere.
    #[arg(long)]
    fragment: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// The stages and jobs, or the errors with their lines.
    Text,
    /// The report as JSON (a stable contract).
    Json,
    /// The configuration after `include:`, `extends:` and `!reference`, as YAML
    /// (GitLab's `merged_yaml`); errors as with `text`.
    Merged,
}

fn parse_source(s: &str) -> Result<Source, String> {
    Source::parse(s).ok_or_else(|| {
        let all: Vec<&str> = Source::ALL.iter().map(|s| s.as_str()).collect();
        format!(
            "unknown pipeline source `{s}`; expected one of: {}",
            all.join(", ")
        )
    })
}

pub(crate) fn parse_input(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!(
            "`{s}` is not NAME=VALUE (an input of the configuration's `spec:inputs`)"
        )),
    }
}

/// The pipeline's inputs from `--input NAME=VALUE` options (a later one replaces an
/// earlier one of the same name), within GitLab's limits.
pub(crate) fn pipeline_inputs(pairs: &[(String, String)]) -> Result<PipelineInputs, String> {
    let mut inputs = PipelineInputs::new();
    for (name, value) in pairs {
        inputs.insert(name.clone(), InputValue::Text(value.clone()));
    }
    inputs.check().map_err(|e| format!("--input: {e}"))?;
    Ok(inputs)
}

pub(crate) fn parse_var(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

/// Reads configuration files from the working tree.
struct WorkTree {
    root: PathBuf,
}

impl Loader for WorkTree {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        let full = self.root.join(path);
        match std::fs::read(&full) {
            Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
                gantry_pipeline::ReadError::NotText {
                    path: path.to_owned(),
                }
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => Ok(None),
            Err(e) => Err(gantry_pipeline::ReadError::Io(e.to_string())),
        }
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        // Outside a git work tree lint sees no files (it lints a file, not a checkout).
        Ok(git::files(&self.root).unwrap_or_default())
    }
    /// Against the commit checked out (`HEAD`): uncommitted changes are not compared.
    fn changed_since(
        &self,
        compare_to: &str,
    ) -> Result<Vec<String>, gantry_pipeline::CompareError> {
        gantry_server::coordinator::changes_since(&self.root, &[], "HEAD", compare_to)
    }
}

/// A usage failure with its hint on a line of its own, reported.
fn usage(msg: &str, hint: &str) -> u8 {
    let message = if hint.is_empty() {
        msg.to_owned()
    } else {
        format!("{msg}\n  hint: {hint}")
    };
    crate::exit::Failure::usage(message).report()
}

pub(crate) fn run(args: &LintArgs) -> u8 {
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return usage(&format!("cannot read the current directory: {e}"), ""),
    };
    let Some(root) = git::toplevel(&cwd) else {
        return usage(
            "not inside a git checkout",
            "run `gantry lint` from a git repository (`git init` creates one)",
        );
    };
    let config_path = match config_path(&root, &cwd, args.file.as_deref()) {
        Ok(path) => path,
        Err((msg, hint)) => return usage(&msg, &hint),
    };
    if !root.join(&config_path).is_file() {
        return usage(
            &format!("{config_path} does not exist in {}", root.display()),
            "create it, or name another file: gantry lint FILE",
        );
    }
    // The server and project the `origin` remote names, as `gantry run` has them.
    let origin_url = git::git(&root, &["remote", "get-url", "origin"]);
    let (server_url, project_path) = crate::git::origin(&root, origin_url.as_deref());
    let target = match merge_request_target(&root, args) {
        Ok(t) => t,
        Err((msg, hint)) => return usage(&msg, &hint),
    };
    let info = pipeline_info(
        &root,
        args,
        &config_path,
        &server_url,
        &project_path,
        target.as_ref(),
    );
    let changed = if !args.changed.is_empty() {
        Some(args.changed.clone())
    } else if let Some(t) = &target {
        // A merge request pipeline's `rules:changes` read the merge request's diff: from
        // the merge base of the two branches to the source branch (GitLab's
        // `MergeRequest#modified_paths`).
        gantry_server::coordinator::changes_since(&root, &[], &t.source_sha, &t.target_sha).ok()
    } else {
        None
    };
    let project_vars = match variables_file::read_all(&variables_file::with_defaults(
        &root,
        &args.variables_files,
    )) {
        Ok(vars) => vars,
        Err(e) => return usage(&e, ""),
    };
    let ctx = variables_file::creation_context(
        Context::new(&info, &args.vars, changed),
        &info,
        &project_vars,
    );
    let inputs = match pipeline_inputs(&args.inputs) {
        Ok(inputs) => inputs,
        Err(e) => return usage(&e, ""),
    };
    let opts = Options {
        config_path,
        fragment: args.fragment,
        inputs,
        keep_merged: args.format == Format::Merged,
        every_include_error: true,
        ..Options::default()
    };
    let git_dir = git::git(&root, &["rev-parse", "--absolute-git-dir"])
        .map_or_else(|| root.join(".git"), PathBuf::from);
    let sources = match includes::sources(
        &root,
        &server_url,
        &project_path,
        git_dir,
        &info.default_branch,
        None,
    ) {
        Ok(s) => s,
        Err(e) => return usage(&e, ""),
    };
    let loader = IncludeLoader {
        files: &WorkTree { root },
        sources: &sources,
    };
    let compiled = gantry_pipeline::compile(&opts, &ctx, &loader);
    let mut stdout = std::io::stdout().lock();
    let written = match args.format {
        Format::Json => serde_json::to_string_pretty(&LintReport::new(&compiled))
            .map_err(std::io::Error::other)
            .and_then(|s| writeln!(stdout, "{s}")),
        Format::Merged => match (&compiled.merged, compiled.errors.is_empty()) {
            (Some(merged), true) => write!(stdout, "{}", gantry_pipeline::emit::to_yaml(merged)),
            _ => write!(stdout, "{}", render_text(&compiled)),
        },
        Format::Text => write!(stdout, "{}", render_text(&compiled)),
    };
    if written.is_err() {
        return exit::USAGE;
    }
    if compiled.errors.is_empty() {
        exit::OK
    } else {
        exit::INVALID
    }
}

/// The pipeline file's path relative to the repository root: `.gitlab-ci.yml`, or
/// `file` (relative to `cwd`), which must exist inside the repository. The error is
/// `(message, hint)`.
pub(crate) fn config_path(
    root: &Path,
    cwd: &Path,
    file: Option<&Path>,
) -> Result<String, (String, String)> {
    let Some(f) = file else {
        return Ok(".gitlab-ci.yml".to_owned());
    };
    let abs = if f.is_absolute() {
        f.to_owned()
    } else {
        cwd.join(f)
    };
    let abs = abs.canonicalize().map_err(|_| {
        (
            format!("{} does not exist", f.display()),
            "name a file in this repository".to_owned(),
        )
    })?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    abs.strip_prefix(&root)
        .map(|rel| rel.to_string_lossy().into_owned())
        .map_err(|_| {
            (
                format!(
                    "{} is outside the repository {}",
                    f.display(),
                    root.display()
                ),
                String::new(),
            )
        })
}

/// The two branches of a merge request pipeline, resolved to commits.
struct MergeRequestTarget {
    source_branch: String,
    source_sha: String,
    target_branch: String,
    target_sha: String,
    /// The merged result's commit (`--merged-result`, when the branches merge).
    merged: Option<String>,
}

/// The merge request `--source merge_request_event` lints for; `None` for other sources.
/// The error is `(message, hint)`.
fn merge_request_target(
    root: &Path,
    args: &LintArgs,
) -> Result<Option<MergeRequestTarget>, (String, String)> {
    if args.source != Source::MergeRequestEvent {
        if args.source_branch.is_some() || args.target_branch.is_some() || args.merged_result {
            return Err((
                "--source-branch, --target-branch and --merged-result describe a merge request pipeline".into(),
                "add --source merge_request_event".into(),
            ));
        }
        return Ok(None);
    }
    if args.tag.is_some() {
        return Err((
            "a merge request pipeline runs for a branch, not a tag".into(),
            "name its branches with --source-branch and --target-branch".into(),
        ));
    }
    let current = git::current_branch(root);
    let source_branch = match args.source_branch.clone().or_else(|| args.ref_.clone()) {
        Some(b) => b,
        None => current.clone().ok_or_else(|| {
            (
                "HEAD is detached: a merge request pipeline needs its source branch".to_owned(),
                "name it with --source-branch BRANCH".to_owned(),
            )
        })?,
    };
    // The checkout's own branch is its HEAD (what is linted is its working tree).
    let source_sha = if current.as_deref() == Some(source_branch.as_str()) {
        git::git(root, &["rev-parse", "--verify", "--quiet", "HEAD"])
    } else {
        git::branch_commit(root, &source_branch)
    }
    .ok_or_else(|| {
        (
            format!("the source branch `{source_branch}` does not exist in this repository"),
            "name an existing branch with --source-branch".to_owned(),
        )
    })?;
    let target_branch = args
        .target_branch
        .clone()
        .unwrap_or_else(|| git::default_branch(root));
    let target_sha = git::branch_commit(root, &target_branch).ok_or_else(|| {
        (
            format!("the target branch `{target_branch}` does not exist in this repository"),
            format!(
                "fetch it (`git fetch origin {target_branch}`), or name another with --target-branch"
            ),
        )
    })?;
    let merged = if args.merged_result {
        let message = format!("Merge branch '{source_branch}' into '{target_branch}'");
        let merged = git::merge_commit(root, &target_sha, &source_sha, &message);
        if merged.is_none() {
            eprintln!(
                "note: `{source_branch}` does not merge cleanly into `{target_branch}`: linting a detached pipeline, as GitLab runs one"
            );
        }
        merged
    } else {
        None
    };
    Ok(Some(MergeRequestTarget {
        source_branch,
        source_sha,
        target_branch,
        target_sha,
        merged,
    }))
}

/// The merge request of a merge request pipeline, as GitLab would have it for a new
/// merge request of one commit: its title and description are the source head's, it is
/// not a draft, and the pipeline is `detached`, or `merged_result` with the merge made.
fn merge_request_info(
    root: &Path,
    t: &MergeRequestTarget,
    protected: &dyn Fn(&str) -> bool,
) -> MergeRequestInfo {
    let g = |a: &[&str]| git::git(root, a).unwrap_or_default();
    MergeRequestInfo {
        id: 1,
        iid: 1,
        title: g(&["log", "-1", "--format=%s", &t.source_sha]),
        description: g(&["log", "-1", "--format=%b", &t.source_sha]),
        source_branch: t.source_branch.clone(),
        target_branch: t.target_branch.clone(),
        source_branch_protected: protected(&t.source_branch),
        target_branch_protected: protected(&t.target_branch),
        event_type: if t.merged.is_some() {
            MergeRequestEventType::MergedResult
        } else {
            MergeRequestEventType::Detached
        },
        source_sha: t.merged.as_ref().map(|_| t.source_sha.clone()),
        target_sha: t.merged.as_ref().map(|_| t.target_sha.clone()),
        diff: git::merge_base(root, &t.target_sha, &t.source_sha)
            .map(|base_sha| MergeRequestDiff { id: 1, base_sha }),
        labels: Vec::new(),
        assignees: Vec::new(),
        milestone: None,
        squash_on_merge: false,
        draft: false,
        external: None,
    }
}

fn pipeline_info(
    root: &Path,
    args: &LintArgs,
    config_path: &str,
    server_url: &str,
    project_path: &str,
    merge_request: Option<&MergeRequestTarget>,
) -> PipelineInfo {
    let g = |a: &[&str]| git::git(root, a);
    let (ref_name, is_tag) = match (merge_request, &args.tag, &args.ref_) {
        (Some(t), _, _) => (t.source_branch.clone(), false),
        (None, Some(t), _) => (t.clone(), true),
        (None, None, Some(r)) => (r.clone(), false),
        (None, None, None) => (
            git::current_branch(root).unwrap_or_else(|| "HEAD".to_owned()),
            false,
        ),
    };
    let (namespace, project_name) = project_path
        .rsplit_once('/')
        .map_or(("local", project_path), |(ns, name)| (ns, name));
    let default_branch = git::default_branch(root);
    // GitLab protects the default branch of a new project; tags are not protected.
    let protected = |branch: &str| !args.unprotected && branch == default_branch;
    // A merged result runs the merge commit; a detached pipeline the source's head.
    let commit = merge_request.map_or("HEAD", |t| t.merged.as_deref().unwrap_or(&t.source_sha));
    let merge_request = merge_request.map(|t| merge_request_info(root, t, &protected));
    PipelineInfo {
        // A merge request pipeline's ref is `refs/merge-requests/<iid>/head`, which no
        // protection covers.
        ref_protected: !is_tag && merge_request.is_none() && protected(&ref_name),
        ref_name,
        is_tag,
        source: args.source,
        sha: g(&["rev-parse", "--verify", "--quiet", commit]).unwrap_or_else(|| "0".repeat(40)),
        before_sha: None,
        commit_message: g(&["log", "-1", "--format=%B", commit]).unwrap_or_default(),
        commit_author: g(&["log", "-1", "--format=%an <%ae>", commit]).unwrap_or_default(),
        commit_timestamp: g(&["log", "-1", "--format=%cI", commit]).unwrap_or_default(),
        // The merge request linted is open (GitLab's `CI_OPEN_MERGE_REQUESTS` of its own
        // pipeline).
        open_merge_requests: merge_request
            .iter()
            .map(|m| format!("{project_path}!{}", m.iid))
            .collect(),
        merge_request,
        default_branch,
        tag_message: None,
        project_name: project_name.to_owned(),
        project_namespace: namespace.to_owned(),
        config_path: config_path.to_owned(),
        server_url: server_url.to_owned(),
        user_login: g(&["config", "user.email"])
            .and_then(|e| e.split('@').next().map(str::to_owned))
            .unwrap_or_else(|| "gantry".into()),
        user_name: g(&["config", "user.name"]).unwrap_or_else(|| "Gantry".into()),
        user_email: g(&["config", "user.email"]).unwrap_or_default(),
        ..PipelineInfo::default()
    }
}
