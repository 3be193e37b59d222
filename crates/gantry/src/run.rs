//! `gantry run`: the checkout's pipeline on this machine, with the real engine.
//!
//! One process holds a coordinator on a temporary SQLite database (served over HTTP on
//! a loopback port) and a runner polling it — the same code as `gantry server` +
//! `gantry runner run`, so pipeline semantics, job payloads, artifacts, caches and
//! dotenv reports are the server's. What is local:
//!
//! * sources: a snapshot of the working tree (see [`snapshot`]) is the project's
//!   repository, and every job gets an exact copy of it (the runner's snapshot mode:
//!   its slot directory synced, see `gantry_runner::sources::sync_tree`);
//! * the cache directory persists between runs of the same checkout:
//!   `$XDG_CACHE_HOME/gantry/run/<hash of the checkout path>/cache` (or
//!   `~/.cache/gantry/…`; `GANTRY_CACHE_DIR` overrides it);
//! * the job directories of a run that ended normally, every job in the shell, are kept
//!   beside it, in `…/<hash>/builds`, and the next run of the checkout takes them over
//!   (as a runner reuses its builds directory: every job still gets an exact copy of the
//!   snapshot), when it can move them into its temporary directory (the same file
//!   system); so are its job log files, emptied (`…/<hash>/traces`), which the next run's jobs of the
//!   same ids write into, and the snapshot directory (`…/<hash>/snapshot`), which the
//!   next run's `git read-tree -u` brings to its commit: files reused instead of created
//!   and deleted (see [`take_kept`]);
//! * project CI/CD variables: `~/.config/gantry/variables.yml`, `.gantry/variables.yml`,
//!   `--variables-file` (see [`crate::variables_file`]);
//! * selection: `JOB...` keeps only those jobs (`--needs` adds what they wait for) and
//!   plays them when they are manual; `--manual NAME` plays other manual jobs;
//! * the terminal: prefixed log lines, a live view, a summary, `--json-report`;
//! * merge requests: `--merge-request[=TARGET]` records merge request `!1` of the run's
//!   branch into TARGET (its target branch written into the snapshot's repository) and
//!   creates its pipeline through `Coordinator::create_merge_request_pipeline`, the
//!   server's own; with `--merged-result` the coordinator makes the merge commit in the
//!   snapshot's repository, and the snapshot directory is checked out at it
//!   (`Snapshot::check_out`) before the runner starts;
//! * tags: the runner takes every job whatever its tags (a runner setting of the
//!   coordinator, `RunnerOptions::any_tags`), unless `--tags` gives it some; a pending
//!   job no runner of the run may take (the coordinator's `PendingReason`) cancels the
//!   run at once instead of waiting for ever.
//!
//! In the code: `run/snapshot.rs` reads the checkout once (`Checkout::read`: four git
//! processes started together); the coordinator runs with the `Profile::LocalRun` profile
//! (the snapshot repository is the project's mirror, nothing fetched, log updates every
//! second, nothing fsynced, no timers), the git user as its `PipelineUser` and `CI_SERVER_URL` from the `origin` remote; the
//! `Poller`'s `PollOptions::snapshot` makes every job's directory a replica of the
//! snapshot, and its `trace_tap` feeds `run/display.rs`, written once per batch of events.
//! The run follows the top pipeline and its downstream pipelines (`progress_tree`,
//! `Coordinator::downstream_progress`), naming a child's jobs `<trigger> -> <job>`, and
//! ends when all of them have. Selection is `PipelineRequest::jobs`
//! (`gantry_pipeline::select`); manual jobs named are played through
//! `Coordinator::play_job`; `--artifacts-dir` reads each job's archive through
//! `Artifacts::job_artifact` and extracts it with the runner's
//! `artifacts::extract_archive`; a job no runner can take is
//! `PendingReason::needs_another_runner`. `gantry run` adds no pipeline, payload, artifact,
//! cache or dotenv code of its own.
//!
//! Exit status: 0 when the pipeline succeeded (warnings included) — or stopped at
//! manual jobs or was skipped, with nothing failed —, 1 when it failed or was canceled,
//! 2 for a configuration or usage error, a job no runner of the run can take included.

pub(crate) mod display;
mod report;
mod snapshot;
mod timeline;

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use gantry_pipeline::{
    Context, Loader, MergeRequestDiff, MergeRequestEventType, MergeRequestInfo, Options,
    PipelineInfo, Source,
};
use gantry_runner::config::Config;
use gantry_runner::job::{JobEnding, JobEvent};
use gantry_runner::poll::{PollEvent, PollOptions, Poller};
use gantry_server::Status;
use gantry_server::coordinator::{
    Coordinator, CoordinatorConfig, CoordinatorError, DefaultBranch, IncludeLoader, JobSelection,
    LocalRun, MergeRequestPipelineRequest, PendingReason, PipelineRequest, PipelineUser, Profile,
    ProjectRequest, RemoteFetches, RunnerOptions,
};
use gantry_store::{ProjectVariable, Store, VariableOwner};
use tokio::sync::mpsc;

use crate::exit::Failure;
use crate::{env, exit, git, includes, lint, variables_file};
use display::{Display, JobLine};
use report::RunReport;
use snapshot::{Checkout, RunRef, Snapshot};

#[derive(Args)]
pub(crate) struct RunArgs {
    /// Jobs to run (default: the whole pipeline). A `parallel` job's name selects all
    /// its instances. Named manual jobs are played.
    #[arg(value_name = "JOB")]
    jobs: Vec<String>,
    /// Also run what the named jobs wait for (their needs, or the earlier stages),
    /// transitively.
    #[arg(long, requires = "jobs")]
    needs: bool,
    /// Pipeline file, relative to the repository root (default: .gitlab-ci.yml).
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Run the pipeline of this branch (default: the current branch). The sources are
    /// still the working tree unless --committed.
    #[arg(long = "ref", value_name = "BRANCH", conflicts_with = "tag")]
    ref_: Option<String>,
    /// Run the pipeline of this tag.
    #[arg(long, value_name = "TAG")]
    tag: Option<String>,
    /// Use the current commit (or the tag's) instead of the working tree.
    #[arg(long)]
    committed: bool,
    /// Run a merge request pipeline (`merge_request_event`) of the current branch (or
    /// --ref) into TARGET (default: the default branch), as GitLab runs one for a merge
    /// request: its CI_MERGE_REQUEST_* variables, no CI_COMMIT_BRANCH, `rules:changes`
    /// against the merge base. Give TARGET as `--merge-request=TARGET`.
    #[arg(
        long = "merge-request",
        value_name = "TARGET",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        conflicts_with = "tag"
    )]
    merge_request: Option<String>,
    /// With --merge-request: run the merged result (the source branch merged into the
    /// target, CI_MERGE_REQUEST_EVENT_TYPE=merged_result) instead of the source branch on
    /// its own (`detached`). Branches that do not merge cleanly run detached, as on GitLab.
    #[arg(long, requires = "merge_request")]
    merged_result: bool,
    /// A pipeline variable (highest precedence, like variables of a triggered pipeline).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = lint::parse_var)]
    vars: Vec<(String, String)>,
    /// A value for the configuration's `spec:inputs` (repeatable), read as the type the
    /// input declares: `--input replicas=3`, `--input dry_run=true`, `--input
    /// 'targets=[linux, mac]'` (GitLab's pipeline inputs).
    #[arg(long = "input", value_name = "NAME=VALUE", value_parser = lint::parse_input)]
    inputs: Vec<(String, String)>,
    /// The project's CI/CD variables, as a YAML file (`KEY: value`, or `KEY: {value, type:
    /// file, masked, protected, raw, environment_scope}`): below --var, above the YAML's
    /// variables, as GitLab's project variables. Repeatable: a later file replaces an
    /// earlier one's variable of the same key and scope. Read after
    /// ~/.config/gantry/variables.yml and .gantry/variables.yml, when those exist.
    #[arg(long = "variables-file", value_name = "PATH")]
    variables_files: Vec<PathBuf>,
    /// Where jobs run: `auto` runs jobs with an `image:` in Docker when an engine is
    /// reachable and the others in the shell; `shell` runs everything on this machine.
    #[arg(long, value_enum, default_value_t = ExecutorFlag::Auto)]
    executor: ExecutorFlag,
    /// Run as a runner with exactly these tags (comma-separated; it also runs untagged
    /// jobs, as gitlab-runner's default): a job whose tags are not all among them can
    /// never run, and the run ends with exit status 2 saying so. Default: the run's
    /// runner takes every job whatever its tags, as gitlab-ci-local does.
    #[arg(long, value_name = "TAG,...", value_delimiter = ',')]
    tags: Option<Vec<String>>,
    /// Jobs running at once (default: the number of CPUs, at least 2).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: Option<u16>,
    /// Play this manual job when it is reached (repeatable).
    #[arg(long = "manual", value_name = "JOB")]
    manual: Vec<String>,
    /// Write a JSON report of the run to this file at the end.
    #[arg(long, value_name = "PATH")]
    json_report: Option<PathBuf>,
    /// At the end, print a timeline of the run after the summary: each job's wait for a
    /// runner, its run and its sections over time, with its CPU time and peak memory.
    #[arg(long)]
    timeline: bool,
    /// At the end, extract each job's artifacts archive into DIR/<job name>/ (a job's
    /// earlier content there is replaced; artifacts otherwise live only for the run).
    #[arg(long, value_name = "DIR")]
    artifacts_dir: Option<PathBuf>,
    /// No colours.
    #[arg(long)]
    no_color: bool,
    /// Write the run's OpenTelemetry spans (pipeline, jobs, sections) to FILE, one OTLP
    /// JSON `ExportTraceServiceRequest` per line, without a collector.
    #[arg(long, value_name = "FILE")]
    trace_file: Option<PathBuf>,
    #[command(flatten)]
    otel: crate::otel::OtelArgs,
}

/// `--executor`: what the user asked for; [`executors`] resolves it against the machine
/// into the run's [`Executors`] (`config.toml` speaks `gantry_runner`'s `ExecutorKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ExecutorFlag {
    Auto,
    Shell,
    Docker,
}

pub(crate) fn run(args: &RunArgs) -> u8 {
    let runtime =
        match crate::exit::runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)) {
            Ok(runtime) => runtime,
            Err(failure) => return failure.report(),
        };
    // Tracing: `--trace-file` and the `--otel-*` flags over the `OTEL_*` variables.
    let tracing = args
        .otel
        .settings()
        .map(|mut flags| {
            flags.trace_file.clone_from(&args.trace_file);
            flags
        })
        .and_then(crate::otel::resolve);
    let telemetry = match tracing.map_err(|e| e.to_string()).and_then(|settings| {
        runtime.block_on(async { crate::otel::start(&settings, "gantry-run") })
    }) {
        Ok(telemetry) => telemetry,
        Err(message) => return Failure::usage(message).report(),
    };
    let ran = runtime.block_on(run_pipeline(args, telemetry.clone()));
    // Every span is written before the exit (the runtime still serves gRPC exports).
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    match ran {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

/// Everything the run holds until it ends.
struct Setup {
    root: PathBuf,
    config_path: String,
    run_ref: RunRef,
    default_branch: String,
    _tmp: tempfile::TempDir,
    tmp: PathBuf,
    snapshot: Snapshot,
    checkout: Checkout,
}

/// The run's temporary directory (its snapshot, job directories and store).
fn temporary_dir() -> Result<tempfile::TempDir, Failure> {
    tempfile::Builder::new()
        .prefix("gantry-run-")
        .tempdir()
        .map_err(|e| Failure::invalid(format!("failed to create a temporary directory: {e}")))
}

fn setup(args: &RunArgs, tmp: tempfile::TempDir) -> Result<Setup, Failure> {
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::usage(format!("cannot read the current directory: {e}")))?;
    let not_a_checkout = || {
        Failure::usage(
            "not inside a git checkout\n  hint: run `gantry run` from a git repository (`git init` creates one)",
        )
    };
    let checkout = Checkout::read(&cwd, args.tag.as_deref())
        .map_err(|e| Failure::invalid(format!("failed to read the git checkout: {e}")))?
        .ok_or_else(not_a_checkout)?;
    let root = checkout.root.clone();
    let config_path =
        lint::config_path(&root, &cwd, args.file.as_deref()).map_err(|(msg, hint)| {
            Failure::usage(if hint.is_empty() {
                msg
            } else {
                format!("{msg}\n  hint: {hint}")
            })
        })?;
    let run_ref = match (&args.tag, &args.ref_) {
        (Some(tag), _) => RunRef::Tag(tag.clone()),
        (None, Some(branch)) => RunRef::Branch(branch.clone()),
        (None, None) => RunRef::Branch(checkout.branch.clone().ok_or_else(|| {
            Failure::usage("HEAD is detached, so there is no current branch to run the pipeline for\n  hint: pass --ref BRANCH (or --tag TAG)")
        })?),
    };
    let default_branch = checkout.default_branch();
    let tmp_path = tmp.path().to_owned();
    // The last run's snapshot directory, when kept: `git read-tree -u` brings it to this
    // run's commit, rewriting only what differs (see `take_kept`).
    let reused = take_kept(&kept_dir(&root, "snapshot"), &tmp_path.join("snapshot"));
    let prepared = match snapshot::prepare(&checkout, &tmp_path, &run_ref, args.committed) {
        // Whatever a kept directory did to it, a new one is made.
        Err(e) if reused && !matches!(e, snapshot::SnapshotError::Usage(_)) => {
            let _ = std::fs::remove_dir_all(tmp_path.join("snapshot"));
            snapshot::prepare(&checkout, &tmp_path, &run_ref, args.committed)
        }
        other => other,
    };
    let snapshot = prepared.map_err(|e| match e {
        snapshot::SnapshotError::Usage(m) => Failure::usage(m),
        other => Failure::invalid(format!("failed to snapshot the working tree: {other}")),
    })?;
    if !snapshot.dir.join(&config_path).is_file() {
        return Err(Failure::usage(format!(
            "{config_path} does not exist in {}{}\n  hint: create it, or name another file with --file PATH",
            root.display(),
            if args.committed {
                " at the current commit"
            } else {
                ""
            }
        )));
    }
    Ok(Setup {
        root,
        config_path,
        run_ref,
        default_branch,
        _tmp: tmp,
        tmp: tmp_path,
        snapshot,
        checkout,
    })
}

/// The merge request `--merge-request` runs: the run's branch into `target`.
struct MergeRequestPlan {
    target: String,
    target_sha: String,
    /// The merge base of the snapshot's commit and the target's.
    base_sha: Option<String>,
    title: String,
    description: String,
}

/// The merge request of `--merge-request`, its target branch written into the
/// snapshot's repository; `None` without the flag.
fn merge_request_plan(s: &Setup, args: &RunArgs) -> Result<Option<MergeRequestPlan>, Failure> {
    let Some(target) = &args.merge_request else {
        return Ok(None);
    };
    let target = if target.is_empty() {
        s.default_branch.clone()
    } else {
        target.clone()
    };
    if target == s.run_ref.name() {
        return Err(Failure::usage(format!(
            "a merge request needs two branches, and `{target}` is both its source and its target\n  hint: run it from another branch, or name the target: --merge-request=BRANCH"
        )));
    }
    let target_sha = s
        .snapshot
        .add_branch(&s.checkout, &target)
        .map_err(|e| Failure::invalid(format!("failed to add the target branch to the snapshot: {e}")))?
        .ok_or_else(|| {
            Failure::usage(format!(
                "the target branch `{target}` does not exist in this repository\n  hint: fetch it (`git fetch origin {target}:{target}`), or name another: --merge-request=BRANCH"
            ))
        })?;
    let sha = s.snapshot.sha.as_str();
    let g = |a: &[&str]| git::git(&s.root, a).unwrap_or_default();
    Ok(Some(MergeRequestPlan {
        base_sha: git::merge_base(&s.root, &target_sha, sha),
        target,
        target_sha,
        // GitLab's title and description of a new merge request of one commit.
        title: g(&["log", "-1", "--format=%s", sha]),
        description: g(&["log", "-1", "--format=%b", sha]),
    }))
}

impl MergeRequestPlan {
    /// What the coordinator records (iid 1: the run's store is new).
    fn request(&self, s: &Setup, project_id: i64) -> gantry_store::NewMergeRequest {
        gantry_store::NewMergeRequest {
            project_id,
            iid: 1,
            forge: "local".to_owned(),
            state: "opened".to_owned(),
            title: self.title.clone(),
            description: self.description.clone(),
            source_branch: s.run_ref.name().to_owned(),
            target_branch: self.target.clone(),
            source_sha: s.snapshot.sha.clone(),
            target_sha: self.target_sha.clone(),
            source_repository: String::new(),
            target_repository: String::new(),
            draft: false,
            labels: Vec::new(),
            author: pipeline_user(&s.checkout).login,
            web_url: String::new(),
        }
    }

    /// The facts the configuration check compiles with (as the coordinator will).
    fn info(&self, s: &Setup) -> MergeRequestInfo {
        MergeRequestInfo {
            id: 1,
            iid: 1,
            title: self.title.clone(),
            description: self.description.clone(),
            source_branch: s.run_ref.name().to_owned(),
            target_branch: self.target.clone(),
            source_branch_protected: false,
            target_branch_protected: false,
            event_type: MergeRequestEventType::Detached,
            source_sha: None,
            target_sha: None,
            diff: self
                .base_sha
                .clone()
                .map(|base_sha| MergeRequestDiff { id: 1, base_sha }),
            labels: Vec::new(),
            assignees: Vec::new(),
            milestone: None,
            squash_on_merge: false,
            draft: false,
            external: None,
        }
    }
}

/// Reads configuration files from the snapshot (exactly what the coordinator reads).
struct SnapshotFiles<'a> {
    dir: &'a Path,
    /// The snapshot's repository and commit, and the checkout whose refs
    /// `rules:changes:compare_to` names (as the coordinator compares).
    repo: &'a Path,
    sha: &'a str,
    checkout: &'a Path,
}

impl Loader for SnapshotFiles<'_> {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        match std::fs::read(self.dir.join(path)) {
            Ok(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| {
                gantry_pipeline::ReadError::NotText {
                    path: path.to_owned(),
                }
            }),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(gantry_pipeline::ReadError::Io(e.to_string())),
        }
    }

    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        // `gantry run` works in a checkout: a list git cannot give is an error (an empty
        // one would make `rules:exists` false and wildcard includes empty).
        git::files(self.dir).ok_or_else(|| {
            gantry_pipeline::ReadError::Io(format!(
                "list the files of {} with git ls-files: git failed",
                self.dir.display()
            ))
        })
    }

    fn changed_since(
        &self,
        compare_to: &str,
    ) -> Result<Vec<String>, gantry_pipeline::CompareError> {
        gantry_server::coordinator::changes_since(
            self.repo,
            &[self.checkout.to_path_buf()],
            self.sha,
            compare_to,
        )
    }
}

/// Compiles the configuration first, to report errors with their file:line:column
/// (the coordinator stores messages only) and stop with exit status 2. Returns whether a
/// job names an image or a service, or triggers a pipeline (whose jobs may).
fn check_configuration(
    s: &Setup,
    args: &RunArgs,
    project_vars: &[ProjectVariable],
    project_name: &str,
    server_url: &str,
    fetched: &RemoteFetches,
    merge_request: Option<&MergeRequestPlan>,
) -> Result<bool, Failure> {
    let (namespace, name) = project_name
        .rsplit_once('/')
        .unwrap_or(("local", project_name));
    let info = PipelineInfo {
        ref_name: s.run_ref.name().to_owned(),
        is_tag: matches!(s.run_ref, RunRef::Tag(_)),
        source: if merge_request.is_some() {
            Source::MergeRequestEvent
        } else {
            Source::Push
        },
        merge_request: merge_request.map(|m| m.info(s)),
        sha: s.snapshot.sha.clone(),
        default_branch: s.default_branch.clone(),
        project_name: name.to_owned(),
        project_namespace: namespace.to_owned(),
        config_path: s.config_path.clone(),
        // What the coordinator compiles with (`CI_SERVER_*`, components' host).
        server_url: server_url.to_owned(),
        ..PipelineInfo::default()
    };
    let ctx = variables_file::creation_context(
        Context::new(&info, &args.vars, None),
        &info,
        project_vars,
    );
    let opts = Options {
        config_path: s.config_path.clone(),
        inputs: lint::pipeline_inputs(&args.inputs).map_err(Failure::usage)?,
        every_include_error: true,
        ..Options::default()
    };
    // The coordinator's project repository is the snapshot's: the same sources it uses.
    let sources = includes::sources(
        &s.root,
        server_url,
        project_name,
        s.snapshot.repo.clone(),
        &s.default_branch,
        Some(fetched.clone()),
    )
    .map_err(Failure::usage)?;
    let loader = IncludeLoader {
        files: &SnapshotFiles {
            dir: &s.snapshot.dir,
            repo: &s.snapshot.repo,
            sha: &s.snapshot.sha,
            checkout: &s.root,
        },
        sources: &sources,
    };
    // Called before anything else runs on the runtime; a remote fetch runs on a helper
    // thread of its own (`block_on_side`).
    let compiled = gantry_pipeline::compile(&opts, &ctx, &loader);
    if compiled.errors.is_empty() {
        // A child pipeline's jobs are known only once it is created: a trigger job
        // may bring images.
        return Ok(compiled.pipeline.is_some_and(|p| {
            p.jobs
                .iter()
                .any(|j| j.image.is_some() || !j.services.is_empty() || j.trigger.is_some())
        }));
    }
    Err(Failure::usage(format!(
        "the pipeline configuration is invalid:\n{}",
        gantry_pipeline::report::render_text(&compiled).trim_end()
    )))
}

fn pipeline_user(checkout: &Checkout) -> PipelineUser {
    let email = checkout.user_email.clone().unwrap_or_default();
    let login = email
        .split('@')
        .next()
        .filter(|l| !l.is_empty())
        .unwrap_or("gantry")
        .to_owned();
    PipelineUser {
        name: checkout.user_name.clone().unwrap_or_else(|| login.clone()),
        login,
        email,
        id: 1,
    }
}

/// The cache directory of this checkout (see the module docs).
fn cache_dir(root: &Path) -> PathBuf {
    if let Some(dir) = env::var(env::GANTRY_CACHE_DIR) {
        return PathBuf::from(dir);
    }
    checkout_state_dir(root).join("cache")
}

/// Where `name` (`builds`, `traces`, `snapshot`) of this checkout's last run waits for
/// the next (see the module docs).
fn kept_dir(root: &Path, name: &str) -> PathBuf {
    checkout_state_dir(root).join(name)
}

/// `$XDG_CACHE_HOME/gantry/run/<hash of the checkout path>`.
fn checkout_state_dir(root: &Path) -> PathBuf {
    let base = env::user_dir("XDG_CACHE_HOME", ".cache").unwrap_or_else(std::env::temp_dir);
    let digest = {
        use std::hash::{Hash, Hasher};
        // FNV-1a: stable across Rust versions (DefaultHasher is not).
        struct Fnv(u64);
        impl Hasher for Fnv {
            fn finish(&self) -> u64 {
                self.0
            }
            fn write(&mut self, bytes: &[u8]) {
                for b in bytes {
                    self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
                }
            }
        }
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        root.to_string_lossy().as_bytes().hash(&mut h);
        h.finish()
    };
    base.join("gantry")
        .join("run")
        .join(format!("{digest:016x}"))
}

/// Takes over what the checkout's last run kept at `kept` (its job directories, its log
/// files, its snapshot directory) as `into`, and says whether it did: the directories
/// and files are reused, as a runner reuses its builds directory (each job's sources are
/// still synced to an exact copy of the snapshot, a log file is cut where its job's log
/// starts, the snapshot is checked out anew by `git read-tree -u`). On a disk file
/// system that spares most of the files a run would otherwise create and delete: ext4
/// without a journal scans past every inode deleted in the last minute when it
/// allocates one. A rename moves the whole
/// tree at once, so of two runs of one checkout at the same time one gets it and the
/// other starts empty. Nothing kept, or another file system (`EXDEV`): `into` is made
/// as before.
fn take_kept(kept: &Path, into: &Path) -> bool {
    into.parent()
        .is_some_and(|parent| std::fs::create_dir_all(parent).is_ok())
        && std::fs::rename(kept, into).is_ok()
}

/// Hands `dir` to the next run of the checkout (see [`take_kept`]); it stays in the
/// run's temporary directory, which goes, when it cannot be moved (another run kept its
/// own first, another file system).
fn keep(dir: &Path, kept: &Path) {
    if dir.is_dir() {
        let _ = take_kept(dir, kept);
    }
}

/// [`keep`] for the job logs: every file emptied first (the inodes are what the next run
/// reuses; no log outlives its run).
fn keep_logs(dir: &Path, kept: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let emptied = entry.and_then(|e| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(e.path())
                .and_then(|f| f.set_len(0))
        });
        if emptied.is_err() {
            return;
        }
    }
    keep(dir, kept);
}

fn concurrency(args: &RunArgs) -> usize {
    args.concurrency.map(usize::from).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(std::num::NonZeroUsize::get)
            .unwrap_or(2)
            .max(2)
    })
}

/// Whether `job` is one of `names` (a `parallel` job by its name as written).
fn named(job: &str, names: &[String]) -> bool {
    names.iter().any(|n| {
        job == n
            || job
                .strip_prefix(n.as_str())
                .is_some_and(|rest| rest.starts_with(": [") || is_node_suffix(rest))
    })
}

/// ` 2/5`.
fn is_node_suffix(rest: &str) -> bool {
    rest.strip_prefix(' ')
        .and_then(|r| r.split_once('/'))
        .is_some_and(|(a, b)| {
            !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
        })
}

enum Event {
    Log(i64, Vec<u8>),
    Poll(PollEvent),
}

async fn run_pipeline(
    args: &RunArgs,
    telemetry: Option<gantry_telemetry::Telemetry>,
) -> Result<u8, Failure> {
    // The store is made (a copy of an empty migrated database from the user's cache
    // directory: applying every migration took ≈ 8 ms) while the checkout is read and
    // its snapshot laid out, which wait for git processes.
    let tmp = temporary_dir()?;
    let data_dir = tmp.path().join("data");
    let opening = {
        let data_dir = data_dir.clone();
        tokio::spawn(async move {
            std::fs::create_dir_all(&data_dir).map_err(|e| {
                Failure::invalid(format!("failed to create {}: {e}", data_dir.display()))
            })?;
            let templates = env::user_dir("XDG_CACHE_HOME", ".cache")
                .unwrap_or_else(std::env::temp_dir)
                .join("gantry");
            // Two readers: the run loop and the coordinator seldom read at once.
            Store::create_sqlite_from_template(&data_dir.join("gantry.db"), 2, &templates)
                .await
                .map_err(|e| {
                    Failure::invalid(format!("failed to open the temporary database: {e}"))
                })
        })
    };
    let mut s = match setup(args, tmp) {
        Ok(s) => s,
        Err(stop) => {
            // Its files are in the directory about to be removed.
            let _ = opening.await;
            return Err(stop);
        }
    };
    let (server_url, project_name) = crate::git::origin(&s.root, s.checkout.origin_url.as_deref());
    let (include_cache, rewrites) =
        includes::cache_and_rewrites(&s.root, &server_url).map_err(Failure::usage)?;
    // Remote includes are fetched once: the check and the coordinator compile the same
    // text.
    let fetched = RemoteFetches::default();
    let inputs = lint::pipeline_inputs(&args.inputs).map_err(Failure::usage)?;
    let defaults = variables_file::default_files(&s.root);
    let project_vars = variables_file::read_all(&variables_file::with_defaults(
        &s.root,
        &args.variables_files,
    ))
    .map_err(Failure::usage)?;
    let merge_request = merge_request_plan(&s, args)?;
    let uses_images = check_configuration(
        &s,
        args,
        &project_vars,
        &project_name,
        &server_url,
        &fetched,
        merge_request.as_ref(),
    )?;

    let color = !args.no_color
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && std::io::stdout().is_terminal();
    let live = std::io::stdout().is_terminal();

    // The coordinator, on a temporary database, over loopback HTTP.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| Failure::invalid(format!("failed to listen on a loopback port: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::invalid(format!("failed to read the loopback address: {e}")))?;
    let url = format!("http://{addr}");
    let store = opening
        .await
        .map_err(|e| Failure::invalid(format!("failed to open the temporary database: {e}")))??;
    // The store is new, so its jobs' ids start at 1 again: the last run's log files (its
    // `data/traces/<job id>.log`, emptied) serve jobs of the same ids.
    let traces = data_dir.join("traces");
    let _ = take_kept(&kept_dir(&s.root, "traces"), &traces);
    let mut cfg = CoordinatorConfig::new(&data_dir, server_url);
    // The snapshot is its own mirror, `compare_to: main` names the checkout's branch (the
    // snapshot holds only the run's), and the store is thrown away at the end.
    cfg.profile = Profile::LocalRun(LocalRun {
        checkout: s.root.clone(),
        remote_fetches: fetched,
    });
    cfg.user = pipeline_user(&s.checkout);
    cfg.include_cache = Some(include_cache);
    cfg.remote_include_rewrites = rewrites;
    // The store lives for this run only: its variables need no key that outlives it (and
    // writing a key file would cost an fsync per run).
    cfg.db_key = Some(gantry_server::coordinator::secrets::DbKey::random());
    cfg.telemetry = telemetry.clone();
    let coordinator = Coordinator::open(store, cfg)
        .await
        .map_err(|e| Failure::invalid(format!("failed to start the coordinator: {e}")))?;
    let project = coordinator
        .create_project_with(&ProjectRequest {
            name: project_name.clone(),
            repo: s.snapshot.repo.to_string_lossy().into_owned(),
            default_branch: DefaultBranch::Declared(s.default_branch.clone()),
            ci_config_path: Some(s.config_path.clone()),
        })
        .await
        .map_err(|e| Failure::invalid(format!("failed to {e}")))?;
    for v in &project_vars {
        coordinator
            .settings()
            .create_variable(&VariableOwner::Project(project.id), v)
            .await
            .map_err(|e| Failure::usage(format!("the variables file: {e}")))?;
    }
    // The pipeline is created while the runner is set up (its compilation and git
    // reads overlap the runner's start).
    let creating = {
        let coordinator = coordinator.clone();
        let request = PipelineRequest {
            ref_name: s.run_ref.name().to_owned(),
            variables: args.vars.clone(),
            file_variables: Vec::new(),
            raw_variables: Vec::new(),
            source: Source::Push,
            jobs: (!args.jobs.is_empty()).then(|| JobSelection {
                names: args.jobs.clone(),
                with_needs: args.needs,
            }),
            inputs: inputs.clone(),
        };
        let project_id = project.id;
        let merge_request = merge_request.as_ref().map(|m| m.request(&s, project_id));
        let merged_result = args.merged_result;
        tokio::spawn(async move {
            match merge_request {
                None => coordinator.create_pipeline_with(project_id, request).await,
                Some(m) => {
                    let m = coordinator.upsert_merge_request(&m).await;
                    match m {
                        Ok(m) => {
                            coordinator
                                .create_merge_request_pipeline(
                                    m.id,
                                    MergeRequestPipelineRequest {
                                        merged_result,
                                        variables: request.variables,
                                        jobs: request.jobs,
                                        inputs: request.inputs,
                                    },
                                )
                                .await
                        }
                        Err(e) => Err(e),
                    }
                }
            }
        })
    };
    // A merged result is a commit the coordinator makes: the snapshot every job copies
    // is brought to it before the runner starts.
    let creating = if merge_request.is_some() {
        let created = creating.await.unwrap_or_else(|e| {
            Err(CoordinatorError::Io(std::io::Error::other(format!(
                "create a pipeline: {e}"
            ))))
        });
        if let Ok(p) = &created {
            if p.sha != s.snapshot.sha {
                s.snapshot.check_out(&p.sha).map_err(|e| {
                    Failure::invalid(format!("failed to check the merged result out: {e}"))
                })?;
            }
        }
        tokio::spawn(async move { created })
    } else {
        creating
    };
    let (_, runner_token) = coordinator
        .create_runner(RunnerOptions {
            description: "gantry run".to_owned(),
            tags: runner_tags(args.tags.as_deref()),
            run_untagged: true,
            any_tags: args.tags.is_none(),
            ..RunnerOptions::default()
        })
        .await
        .map_err(|e| Failure::invalid(format!("failed to create the runner: {e}")))?;
    let builds = s.tmp.join("builds");
    let runner_dir = builds.join(gantry_runner::config::short_token(&runner_token));
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(gantry_server::http::serve(
        listener,
        coordinator.clone(),
        async {
            let _ = server_stopped.await;
        },
    ));
    let timers = coordinator.spawn_background();

    // The runner, in-process.
    let concurrency = concurrency(args);
    let cache = cache_dir(&s.root);
    let mut display = Display::new(color, live);
    if !defaults.is_empty() {
        let shown: Vec<String> = defaults.iter().map(|p| p.display().to_string()).collect();
        display.message(&format!("project variables from {}", shown.join(", ")));
    }
    let executors = executors(args.executor, &mut display, uses_images).await?;
    // Jobs in containers may leave files this user cannot remove (a container's root
    // owns them): their directories are not handed to the next run.
    let keep_job_dirs = executors == Executors::Shell;
    if keep_job_dirs {
        let _ = take_kept(&kept_dir(&s.root, "builds"), &runner_dir);
    }
    let config_text = runner_config(&url, &runner_token, &builds, &cache, concurrency, executors);
    let (config, _) = Config::from_toml(&config_text, Path::new("<gantry run>"))
        .map_err(|e| Failure::invalid(format!("failed to configure the runner: {e}")))?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let system_id = gantry_runner::poll::load_or_create_system_id(&s.tmp.join(".runner_system_id"))
        .map_err(|e| Failure::invalid(format!("failed to create the runner's system id: {e}")))?;
    let mut options = PollOptions::new(system_id);
    options.telemetry = telemetry;
    options.work_dir = s.tmp.clone();
    options.snapshot = Some(s.snapshot.dir.clone());
    // Jobs inherit this process's environment, as a terminal's commands do; a login
    // shell would re-run profile scripts for every stage.
    options.login_shell = false;
    options.events = {
        let tx = tx.clone();
        Arc::new(move |event| {
            let _ = tx.send(Event::Poll(event.clone()));
        })
    };
    options.trace_tap = {
        let tx = tx.clone();
        Some(Arc::new(move |job_id, bytes: &[u8]| {
            let _ = tx.send(Event::Log(job_id, bytes.to_vec()));
        }))
    };
    drop(tx);
    let (poller, handle) =
        Poller::new(config, options).map_err(|e| Failure::invalid(format!("failed to {e}")))?;
    let polling = tokio::spawn(poller.run());

    if s.snapshot.uncommitted {
        display.message(&format!(
            "Running the working tree of {} (uncommitted changes included) as {}",
            s.root.display(),
            &s.snapshot.sha[..12.min(s.snapshot.sha.len())]
        ));
    }

    // The pipeline.
    let created = creating.await.unwrap_or_else(|e| {
        Err(CoordinatorError::Io(std::io::Error::other(format!(
            "create a pipeline: {e}"
        ))))
    });
    let pipeline = match created {
        Ok(p) => p,
        Err(error) => {
            shutdown(&handle, stop_server, polling, server, timers, false).await;
            // A job name that is not in the pipeline is the command line's mistake.
            return Err(match error {
                CoordinatorError::UnknownJob(why) => Failure::usage(why.to_string()),
                other => Failure::invalid(format!("the pipeline was not created: {other}")),
            });
        }
    };
    if !pipeline.yaml_errors.is_empty() {
        shutdown(&handle, stop_server, polling, server, timers, false).await;
        return Err(Failure::usage(format!(
            "the pipeline configuration is invalid:\n{}",
            pipeline.yaml_errors.join("\n")
        )));
    }
    let mut play: Vec<String> = args.manual.clone();
    play.extend(args.jobs.iter().cloned());
    let mut played = std::collections::HashSet::new();
    let mut interrupts = 0u32;
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut check = true;
    // Whether the pipeline's status alone tells that the run goes on: no live view, no
    // manual job to play, no downstream pipeline (its jobs and names were read once).
    let mut status_tells = false;
    let mut ctrl_c = Box::pin(tokio::signal::ctrl_c());
    // Why jobs wait, read again at most this often while one waits; the jobs no runner of
    // the run may ever take (the run is canceled at the first).
    let mut reasons_read: Option<std::time::Instant> = None;
    let mut waiting: HashMap<i64, PendingReason> = HashMap::new();
    let mut never: Vec<(String, PendingReason)> = Vec::new();
    // Why the runner could not run a job (an image it could not pull, …), in its words:
    // the summary says this instead of the bare failure reason.
    let mut endings: HashMap<i64, String> = HashMap::new();
    let status = loop {
        if check && status_tells && interrupts == 0 {
            let status = coordinator
                .pipeline_status(pipeline.id)
                .await
                .map_err(|e| Failure::invalid(format!("failed to read the pipeline: {e}")))?;
            // A pipeline without downstream pipelines settles only in these states.
            if !matches!(
                status.as_str(),
                "success" | "failed" | "canceled" | "skipped" | "manual"
            ) {
                check = false;
            }
        }
        if check {
            check = false;
            // Light reads while the pipelines run (status, then job states: never a job
            // still `running` in a pipeline already `failed`); the whole job views once,
            // at the end.
            let tree = progress_tree(&coordinator, pipeline.id)
                .await
                .map_err(|e| Failure::invalid(format!("failed to read the pipeline: {e}")))?;
            if tree.current_jobs().any(|(_, j)| waits(j.status)) {
                if reasons_read.is_none_or(|at| at.elapsed() >= REASONS_EVERY) {
                    reasons_read = Some(std::time::Instant::now());
                    let mut now_waiting = HashMap::new();
                    for node in &tree.nodes {
                        // A job that stopped waiting meanwhile has no reason: harmless.
                        if let Ok(reasons) = coordinator.pending_reasons(node.id).await {
                            now_waiting.extend(reasons);
                        }
                    }
                    for (id, why) in &now_waiting {
                        let known = waiting.get(id).map(PendingReason::code);
                        if known != Some(why.code()) && !live && shown_without_view(why) {
                            display.note(*id, &format!("waiting: {why}"));
                        }
                    }
                    waiting = now_waiting;
                    let hopeless: Vec<(i64, PendingReason)> = waiting
                        .iter()
                        .filter(|(_, why)| why.needs_another_runner())
                        .map(|(id, why)| (*id, why.clone()))
                        .collect();
                    if never.is_empty() && !hopeless.is_empty() && interrupts == 0 {
                        for (id, why) in hopeless {
                            let name = tree
                                .current_jobs()
                                .find(|(_, j)| j.id == id)
                                .map(|(n, j)| format!("{}{}", n.prefix, j.name))
                                .unwrap_or_else(|| format!("job {id}"));
                            display.job_name(id, &name);
                            display.note(id, &format!("cannot run: {why}"));
                            never.push((name, why));
                        }
                        display.message(
                            "Canceling the pipeline: no runner of this run can take a job it waits for",
                        );
                        let _ = coordinator.cancel_pipeline(pipeline.id).await;
                        check = true;
                        continue;
                    }
                }
            } else {
                waiting.clear();
            }
            let mut stages: Vec<String> = Vec::new();
            let mut lines = Vec::new();
            for (node, j) in tree.current_jobs() {
                let stage = format!("{}{}", node.prefix, j.stage);
                if !stages.contains(&stage) {
                    stages.push(stage.clone());
                }
                let name = format!("{}{}", node.prefix, j.name);
                display.job_name(j.id, &name);
                lines.push(JobLine {
                    id: j.id,
                    name,
                    stage,
                    status: j.status,
                    duration: j.duration,
                    waiting: waiting
                        .get(&j.id)
                        .filter(|why| shown_in_view(why))
                        .map(ToString::to_string),
                });
            }
            display.set_stages(stages);
            display.update_jobs(lines);
            let mut played_now = false;
            for (_, j) in tree
                .current_jobs()
                .filter(|(_, j)| j.status == Status::Manual && named(&j.name, &play))
            {
                if played.insert(j.id) {
                    match coordinator.play_job(j.id, Vec::new()).await {
                        Ok(_) => played_now = true,
                        Err(e) => display.note(j.id, &format!("cannot be played: {e}")),
                    }
                }
            }
            if played_now {
                check = true;
                continue;
            }
            let p_status = tree.nodes.first().map(|n| n.status).unwrap_or_default();
            let active = tree.current_jobs().any(|(_, j)| j.status.is_underway());
            status_tells = !live
                && play.is_empty()
                && tree.nodes.len() == 1
                && !tree.current_jobs().any(|(_, j)| j.bridge);
            // The run ends when every pipeline of the tree ended (a child pipeline may
            // run on after its parent finished) or waits for nothing but manual jobs.
            if tree.settled(0) || (interrupts > 0 && !active) {
                // A pipeline still running here waits for a `strategy: depend` trigger
                // job whose child is blocked at a manual job: blocked, as `manual` is.
                break match p_status {
                    Status::Success
                    | Status::Failed
                    | Status::Canceled
                    | Status::Skipped
                    | Status::Manual => p_status,
                    _ if interrupts == 0 => Status::Manual,
                    _ => p_status,
                };
            }
        }
        // Written once the events at hand are handled.
        if rx.is_empty() {
            display.flush();
        }
        tokio::select! {
            event = rx.recv() => match event {
                Some(Event::Log(job_id, bytes)) => display.log(job_id, &bytes),
                Some(Event::Poll(event)) => {
                    // Jobs change state here: read the pipeline again (for the live
                    // view also when a job starts; other events wait for the tick).
                    match event {
                        PollEvent::JobReceived { job_id, job_name, .. } => {
                            // A child pipeline's job is named after its trigger job.
                            if !display.knows(job_id) {
                                if let Ok(tree) = progress_tree(&coordinator, pipeline.id).await {
                                    for (node, j) in tree.current_jobs() {
                                        display.job_name(j.id, &format!("{}{}", node.prefix, j.name));
                                    }
                                }
                            }
                            display.job_name(job_id, &job_name);
                            if live {
                                check = true;
                            } else {
                                display.note(job_id, "started");
                            }
                        }
                        PollEvent::Job { event: JobEvent::Finished { job_id, ending, .. }, .. } => {
                            display.flush_job(job_id);
                            if matches!(
                                ending,
                                JobEnding::ImagePullFailure { .. }
                                    | JobEnding::SystemFailure { .. }
                                    | JobEnding::ConfigurationError { .. }
                                    | JobEnding::Unsupported { .. }
                            ) {
                                endings.insert(job_id, ending.to_string());
                            }
                            if !live {
                                display.note(job_id, &format!("finished: {ending}"));
                            }
                            check = true;
                        }
                        _ => {}
                    }
                }
                None => check = true,
            },
            _ = ticker.tick() => check = true,
            _ = &mut ctrl_c => {
                interrupts += 1;
                ctrl_c = Box::pin(tokio::signal::ctrl_c());
                if interrupts == 1 {
                    display.message("Canceling the pipeline: running jobs are stopped, their after_script runs (Ctrl-C again to stop at once)");
                    let _ = coordinator.cancel_pipeline(pipeline.id).await;
                } else {
                    display.message("Stopping at once");
                    handle.interrupt();
                    handle.interrupt();
                    break Status::Canceled;
                }
                check = true;
            }
        }
    };
    let jobs = tree_jobs(&coordinator, pipeline.id)
        .await
        .map_err(|e| Failure::invalid(format!("failed to read the pipeline's jobs: {e}")))?;
    let timeline = if args.timeline {
        Some(
            coordinator
                .pipeline_timeline(pipeline.id)
                .await
                .map_err(|e| {
                    Failure::invalid(format!("failed to read the pipeline's timeline: {e}"))
                })?,
        )
    } else {
        None
    };
    while let Ok(event) = rx.try_recv() {
        if let Event::Log(job_id, bytes) = event {
            display.log(job_id, &bytes);
        }
    }
    for j in &jobs {
        // No runner streams the log of a trigger job (why its pipeline was not created) or
        // of a job that failed before a runner saw it (a missing dependency: the coordinator
        // fails it at assignment; runners never report that reason).
        let unseen = j.bridge || j.failure_reason.as_deref() == Some("missing_dependency_failure");
        if unseen && j.status.as_str() == "failed" && !j.retried {
            if let Ok(log) = coordinator.traces().trace(j.id).await {
                display.job_name(j.id, &j.name);
                display.log(j.id, &log);
            }
        }
        display.flush_job(j.id);
    }
    display.finish();
    if let Some(dir) = &args.artifacts_dir {
        export_artifacts(&coordinator, &jobs, dir, &s.tmp).await?;
    }
    // A report that cannot be read is the suite's error; a store failure leaves it out.
    let has_reports = jobs
        .iter()
        .any(|j| j.artifacts.iter().any(|a| a.file_type == "junit"));
    let tests = if has_reports {
        coordinator
            .test_report(pipeline.id)
            .await
            .unwrap_or_default()
    } else {
        Default::default()
    };
    // Coverage and code quality reports, as the tests: an unreadable one is the job's
    // error in the report; a store failure leaves it out.
    let uploaded = |types: &[&str]| {
        jobs.iter().any(|j| {
            j.artifacts
                .iter()
                .any(|a| types.contains(&a.file_type.as_str()))
        })
    };
    let code_reports = report::CodeReports {
        coverage: if uploaded(&["cobertura", "jacoco"]) {
            coordinator.coverage_report(pipeline.id).await.ok()
        } else {
            None
        },
        codequality: if uploaded(&["codequality"]) {
            coordinator.codequality_report(pipeline.id).await.ok()
        } else {
            None
        },
    };
    shutdown(
        &handle,
        stop_server,
        polling,
        server,
        timers,
        interrupts > 1,
    )
    .await;
    // Every job ended (a canceled run may leave one stopping).
    if interrupts == 0 {
        if keep_job_dirs {
            keep(&runner_dir, &kept_dir(&s.root, "builds"));
        }
        keep_logs(&traces, &kept_dir(&s.root, "traces"));
        keep(&s.snapshot.dir, &kept_dir(&s.root, "snapshot"));
    }

    let status = if interrupts > 0 && status != Status::Success {
        Status::Canceled
    } else {
        status
    };
    {
        use std::io::Write;
        // A closed pipe (`gantry run | head`) ends the output, not the run.
        let mut out = std::io::stdout().lock();
        let _ = write!(
            out,
            "\n{}{}",
            report::summary(&jobs, status, display.color(), &never, &endings),
            report::tests_summary(&tests, display.color())
        );
        let _ = write!(out, "{}", report::code_reports_summary(&code_reports));
        if let Some(timeline) = &timeline {
            let _ = write!(out, "\n{}", timeline::render(timeline));
        }
        let _ = out.flush();
    }
    if let Some(path) = &args.json_report {
        write_report(path, &RunReport::new(status, &jobs, &tests, &code_reports))?;
    }
    if let Some((name, why)) = never.first() {
        let runner = match &args.tags {
            Some(tags) if runner_tags(Some(tags.as_slice())).is_empty() => {
                "this run's runner has no tags (--tags '')".to_owned()
            }
            Some(tags) => format!(
                "this run's runner has the tags {} (--tags)",
                runner_tags(Some(tags.as_slice())).join(", ")
            ),
            None => "this run has one runner".to_owned(),
        };
        return Err(Failure::usage(format!(
            "job `{name}` can never run: {why}\n  {runner}\n  hint: give --tags every tag the job names, or leave --tags out: the runner then takes every job"
        )));
    }
    Ok(match report::report_status(status) {
        Status::Success | Status::Manual | Status::Skipped => exit::OK,
        _ => exit::INVALID,
    })
}

/// How often the reasons of waiting jobs are read while one waits: a job no runner of the
/// run can take ends the run within about this time.
const REASONS_EVERY: Duration = Duration::from_millis(500);

/// The runner's tags from `--tags` (blank entries dropped: `--tags ''` is no tag).
fn runner_tags(tags: Option<&[String]>) -> Vec<String> {
    tags.unwrap_or_default()
        .iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

/// A job status that has a [`PendingReason`].
fn waits(status: Status) -> bool {
    matches!(status, Status::Pending | Status::WaitingForResource)
}

/// Whether the live view shows why a job waits: a resource group, or the runner busy
/// with `--concurrency` jobs — not when it is merely next for the runner, or the runner
/// has not asked yet (every job is, for a moment), and the reasons no runner of the run
/// can change end the run instead.
fn shown_in_view(why: &PendingReason) -> bool {
    matches!(
        why,
        PendingReason::ResourceGroupHeld { .. } | PendingReason::RunnersBusy { .. }
    )
}

/// Whether a run without a live view prints why a job waits: a resource group (the
/// others are the runner's concurrency, or end the run).
fn shown_without_view(why: &PendingReason) -> bool {
    matches!(why, PendingReason::ResourceGroupHeld { .. })
}

/// A pipeline of the run: the top one, or a downstream pipeline of one of its trigger
/// jobs (at any depth).
struct Node {
    id: i64,
    status: Status,
    jobs: Vec<gantry_server::coordinator::JobProgress>,
    /// What its jobs' names are shown after: `""` for the top pipeline, `"<trigger> -> "`
    /// for a child (`"<trigger> -> <trigger> -> "` for a grandchild).
    prefix: String,
    /// Its trigger jobs' ids → their downstream pipeline's index in [`Tree::nodes`].
    downstream: Vec<(i64, usize)>,
}

/// The top pipeline and its downstream pipelines, parents before children.
struct Tree {
    nodes: Vec<Node>,
}

impl Tree {
    /// The current attempt of every job of every pipeline.
    fn current_jobs(
        &self,
    ) -> impl Iterator<Item = (&Node, &gantry_server::coordinator::JobProgress)> {
        self.nodes
            .iter()
            .flat_map(|n| n.jobs.iter().filter(|j| !j.retried).map(move |j| (n, j)))
    }

    /// Whether pipeline `i` and everything below it will change no more by themselves:
    /// completed, or `manual` with no job under way, or with nothing under way but
    /// trigger jobs waiting (`strategy: depend`) for a child that is itself blocked at a
    /// manual job.
    ///
    /// A pipeline read as `running` with no job under way is not settled: its status is
    /// read before its jobs, so its last job may have finished in between, and the
    /// pipeline's final status is one read away.
    fn settled(&self, i: usize) -> bool {
        let Some(n) = self.nodes.get(i) else {
            return true;
        };
        let below = n.downstream.iter().all(|(_, c)| self.settled(*c));
        let blocked_trigger = |j: &gantry_server::coordinator::JobProgress| {
            j.status == Status::Running
                && n.downstream.iter().any(|(bridge, c)| {
                    *bridge == j.id
                        && self
                            .nodes
                            .get(*c)
                            .is_some_and(|c| c.status == Status::Manual)
                })
        };
        let mut waiting = n
            .jobs
            .iter()
            .filter(|j| !j.retried && j.status.is_underway())
            .peekable();
        match n.status {
            Status::Success | Status::Failed | Status::Canceled | Status::Skipped => below,
            Status::Manual => below && waiting.all(blocked_trigger),
            Status::Created => false,
            _ => below && waiting.peek().is_some() && waiting.all(blocked_trigger),
        }
    }
}

/// Bound on the pipelines `gantry run` follows (the coordinator allows 1000 per tree).
const MAX_TREE: usize = 1000;

/// The downstream pipelines of the current attempts of `jobs`' trigger jobs: `(trigger
/// job id, pipeline id, the prefix of its jobs' names)`.
async fn children(
    coordinator: &Coordinator,
    pipeline_id: i64,
    jobs: &[(i64, String, bool)],
    prefix: &str,
) -> Result<Vec<(i64, i64, String)>, gantry_server::coordinator::CoordinatorError> {
    Ok(coordinator
        .downstream_progress(pipeline_id)
        .await?
        .into_iter()
        .filter_map(|(bridge, child, _)| {
            let (_, name, _) = jobs
                .iter()
                .find(|(id, _, retried)| *id == bridge && !retried)?;
            Some((bridge, child, format!("{prefix}{name} -> ")))
        })
        .collect())
}

/// The progress of the top pipeline and every downstream pipeline below it.
async fn progress_tree(
    coordinator: &Coordinator,
    top: i64,
) -> Result<Tree, gantry_server::coordinator::CoordinatorError> {
    let mut nodes: Vec<Node> = Vec::new();
    // (pipeline, prefix, the parent node's index and the trigger job's id)
    let mut queue = std::collections::VecDeque::from([(top, String::new(), None)]);
    while let Some((id, prefix, parent)) = queue.pop_front() {
        let (status, jobs) = coordinator.pipeline_progress(id).await?;
        let keys: Vec<(i64, String, bool)> = jobs
            .iter()
            .map(|j| (j.id, j.name.clone(), j.retried))
            .collect();
        let index = nodes.len();
        if let Some((parent, bridge)) = parent {
            if let Some(p) = nodes.get_mut::<usize>(parent) {
                p.downstream.push((bridge, index));
            }
        }
        // Only a pipeline with trigger jobs has downstream pipelines to read.
        if jobs.iter().any(|j| j.bridge) && nodes.len() + queue.len() < MAX_TREE {
            for (bridge, child, prefix) in children(coordinator, id, &keys, &prefix).await? {
                queue.push_back((child, prefix, Some((index, bridge))));
            }
        }
        nodes.push(Node {
            id,
            status,
            jobs,
            prefix,
            downstream: Vec::new(),
        });
    }
    Ok(Tree { nodes })
}

/// Every job of the top pipeline and of its downstream pipelines, a child pipeline's
/// jobs named `<trigger> -> <job>`, parents before children.
async fn tree_jobs(
    coordinator: &Coordinator,
    top: i64,
) -> Result<Vec<gantry_server::coordinator::JobView>, gantry_server::coordinator::CoordinatorError>
{
    let mut out = Vec::new();
    let mut queue = std::collections::VecDeque::from([(top, String::new())]);
    let mut seen = 0;
    while let Some((id, prefix)) = queue.pop_front() {
        seen += 1;
        let mut jobs = coordinator.pipeline_jobs(id).await?;
        let keys: Vec<(i64, String, bool)> = jobs
            .iter()
            .map(|j| (j.id, j.name.clone(), j.retried))
            .collect();
        if jobs.iter().any(|j| j.bridge) && seen + queue.len() < MAX_TREE {
            for (_, child, prefix) in children(coordinator, id, &keys, &prefix).await? {
                queue.push_back((child, prefix));
            }
        }
        for j in &mut jobs {
            j.name = format!("{prefix}{}", j.name);
        }
        out.extend(jobs);
    }
    Ok(out)
}

/// `--artifacts-dir`: each current job's archive, extracted into `dir/<job name>/` (a
/// `/` in a name becomes `_`) with the runner's extraction rules, after the run.
async fn export_artifacts(
    coordinator: &Coordinator,
    jobs: &[gantry_server::coordinator::JobView],
    dir: &Path,
    tmp: &Path,
) -> Result<(), Failure> {
    for j in jobs
        .iter()
        .filter(|j| !j.retried && j.artifacts_file.is_some())
    {
        let (_, mut blob) = coordinator
            .artifacts()
            .job_artifact(j.id)
            .await
            .map_err(|e| {
                Failure::invalid(format!("failed to read the artifacts of {}: {e}", j.name))
            })?;
        let archive = tmp.join(format!("export-{}.archive", j.id));
        std::fs::File::create(&archive)
            .and_then(|mut out| std::io::copy(&mut blob.file, &mut out))
            .map_err(|e| Failure::invalid(format!("failed to write {}: {e}", archive.display())))?;
        let target = dir.join(j.name.replace('/', "_"));
        match std::fs::remove_dir_all(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Failure::invalid(format!(
                    "failed to empty {}: {e}",
                    target.display()
                )));
            }
        }
        std::fs::create_dir_all(&target)
            .map_err(|e| Failure::invalid(format!("failed to create {}: {e}", target.display())))?;
        let summary =
            gantry_runner::artifacts::extract_archive(&archive, &target).map_err(|e| {
                Failure::invalid(format!(
                    "failed to extract the artifacts of {}: {e}",
                    j.name
                ))
            })?;
        for note in summary.notes.iter().filter(|note| note.is_warning()) {
            eprintln!("warning: the artifacts of {}: {}", j.name, note.text());
        }
        let _ = std::fs::remove_file(&archive);
    }
    Ok(())
}

fn write_report(path: &Path, report: &RunReport) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(report)
        .map_err(|e| Failure::invalid(format!("failed to write the JSON report: {e}")))?;
    std::fs::write(path, format!("{text}\n")).map_err(|e| {
        Failure::invalid(format!(
            "failed to write the JSON report to {}: {e}",
            path.display()
        ))
    })
}

/// Stops the runner and the server. With `wait`, jobs still running (an interrupted
/// run) get the time to stop; without, nothing is running and the tasks just end.
async fn shutdown(
    handle: &gantry_runner::poll::PollHandle,
    stop_server: tokio::sync::oneshot::Sender<()>,
    polling: tokio::task::JoinHandle<gantry_runner::poll::PollSummary>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    timers: tokio::task::JoinHandle<()>,
    wait: bool,
) {
    handle.stop_taking_jobs();
    timers.abort();
    if wait {
        // Held job requests are answered at once when the server shuts down.
        let _ = stop_server.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), polling).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    } else {
        polling.abort();
        server.abort();
    }
}

/// Where jobs run, once the engine was checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Executors {
    /// Everything in the shell.
    Shell,
    /// Jobs with `image:` in Docker; with `shell_without_image`, the others in the shell.
    Docker { shell_without_image: bool },
}

/// `--executor` against what this machine has: `auto` uses Docker when an engine
/// answers (saying so when it does not and a job names an image); a pipeline without
/// images does not ask the engine.
async fn executors(
    choice: ExecutorFlag,
    display: &mut Display,
    uses_images: bool,
) -> Result<Executors, Failure> {
    match choice {
        ExecutorFlag::Shell => Ok(Executors::Shell),
        ExecutorFlag::Auto if !uses_images => Ok(Executors::Shell),
        ExecutorFlag::Docker => match gantry_runner::executor::docker::docker_available().await {
            Ok(()) => Ok(Executors::Docker {
                shell_without_image: false,
            }),
            Err(e) => Err(Failure::usage(format!("--executor docker: {e}"))),
        },
        ExecutorFlag::Auto => match gantry_runner::executor::docker::docker_available().await {
            Ok(()) => Ok(Executors::Docker {
                shell_without_image: true,
            }),
            Err(e) => {
                if uses_images {
                    display.message(&format!(
                        "warning: jobs with an image run in the shell on this machine: no Docker engine is reachable ({e})"
                    ));
                }
                Ok(Executors::Shell)
            }
        },
    }
}

/// The runner's configuration, as a `config.toml` would say it (so it goes through the
/// same validation). Images are used as they are when present (`if-not-present`): a
/// local run should not need a registry.
fn runner_config(
    url: &str,
    token: &str,
    builds: &Path,
    cache: &Path,
    concurrency: usize,
    executors: Executors,
) -> String {
    let quote = |s: &str| toml_string(s);
    let mut text = format!(
        "concurrent = {concurrency}\ncheck_interval = 1\nshutdown_timeout = 30\n\n[[runners]]\nname = \"gantry-run\"\nurl = {}\ntoken = {}\nbuilds_dir = {}\ncache_dir = {}\nlimit = {concurrency}\nrequest_concurrency = {concurrency}\n",
        quote(url),
        quote(token),
        quote(&builds.to_string_lossy()),
        quote(&cache.to_string_lossy()),
    );
    match executors {
        Executors::Shell => text.push_str("executor = \"shell\"\n"),
        Executors::Docker { shell_without_image } => text.push_str(&format!(
            "executor = \"docker\"\n[runners.docker]\npull_policy = [\"if-not-present\"]\nshell_without_image = {shell_without_image}\n"
        )),
    }
    // `GIT_CLONE_PATH` works in every executor here (gitlab-runner allows it by default in
    // Docker only): a pipeline that sets it for its Docker runners runs as it is, and the
    // run's builds directory is its own.
    text.push_str("[runners.custom_build_dir]\nenabled = true\n");
    text
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: i64, status: &str, bridge: bool) -> gantry_server::coordinator::JobProgress {
        gantry_server::coordinator::JobProgress {
            id,
            name: format!("job{id}"),
            stage: "test".to_owned(),
            status: Status::parse(status).expect("a status name"),
            retried: false,
            duration: None,
            bridge,
        }
    }

    fn node(
        status: &str,
        jobs: Vec<gantry_server::coordinator::JobProgress>,
        downstream: Vec<(i64, usize)>,
    ) -> Node {
        Node {
            id: 1,
            status: Status::parse(status).expect("a status name"),
            jobs,
            prefix: String::new(),
            downstream,
        }
    }

    #[test]
    fn a_running_pipeline_whose_jobs_all_ended_is_not_settled() {
        // The status is read before the jobs: the last job may end in between.
        let tree = Tree {
            nodes: vec![node(
                "running",
                vec![job(1, "success", false), job(2, "failed", false)],
                vec![],
            )],
        };
        assert!(!tree.settled(0));
        let done = Tree {
            nodes: vec![node("failed", vec![job(1, "success", false)], vec![])],
        };
        assert!(done.settled(0));
    }

    #[test]
    fn manual_pipelines_settle_when_nothing_runs() {
        let waiting = Tree {
            nodes: vec![node(
                "manual",
                vec![job(1, "manual", false), job(2, "pending", false)],
                vec![],
            )],
        };
        assert!(!waiting.settled(0));
        let blocked = Tree {
            nodes: vec![node("manual", vec![job(1, "manual", false)], vec![])],
        };
        assert!(blocked.settled(0));
        let created = Tree {
            nodes: vec![node("created", vec![], vec![])],
        };
        assert!(!created.settled(0));
    }

    #[test]
    fn a_depend_trigger_waiting_on_a_blocked_child_settles_the_tree() {
        let tree = |child: &str, child_jobs| Tree {
            nodes: vec![
                node("running", vec![job(1, "running", true)], vec![(1, 1)]),
                node(child, child_jobs, vec![]),
            ],
        };
        assert!(tree("manual", vec![job(2, "manual", false)]).settled(0));
        assert!(!tree("running", vec![job(2, "running", false)]).settled(0));
        // A child that finished while its trigger job still shows `running`.
        assert!(!tree("success", vec![job(2, "success", false)]).settled(0));
    }

    #[test]
    fn names_select_parallel_instances() {
        let names = vec!["test".to_owned()];
        assert!(named("test", &names));
        assert!(named("test 1/3", &names));
        assert!(named("test: [a, b]", &names));
        assert!(!named("test-2", &names));
        assert!(!named("testing", &names));
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
