//! The job lifecycle: from a job payload (§3.5) to a final status on the coordinator.
//!
//! [`run_job`] takes one job picked by the poll loop and runs it in its executor,
//! with gitlab-runner's stage and section names:
//!
//! | section | what happens | a failure ends the job as |
//! |---|---|---|
//! | `prepare_executor` | the job's executor prepares itself (`Executor::prepare`: bash or sh; the image, services; the custom driver's `config_exec`/`prepare_exec`; a fleet instance) | `runner_system_failure` (`image_pull_failure`, `runner_configuration_error`, `script_failure` as the executor says) |
//! | `prepare_script` | create the directories, write file-type variables | `runner_system_failure` |
//! | `get_sources` | `pre_get_sources_script`, git fetch/checkout ([`crate::sources`]), `post_get_sources_script` | `runner_system_failure` (`runner_configuration_error` for a bad `GIT_STRATEGY`; `script_failure` for a failing hook) |
//! | `restore_cache` | local cache, key then fallbacks ([`crate::cache`]) | `runner_configuration_error` (bad policy) |
//! | `download_artifacts` | dependencies' archives, extracted safely | `runner_system_failure` |
//! | `step_script` | `before_script` + `script` in one shell (also `step_release`) | `script_failure` + exit code, `job_execution_timeout` |
//! | `after_script` | own shell, own timeout (`RUNNER_AFTER_SCRIPT_TIMEOUT`, default 5 min), sees `CI_JOB_STATUS` | never (a warning) |
//! | `archive_cache` / `archive_cache_on_failure` | save the cache per `when` | never (a warning) |
//! | `upload_artifacts_on_success` / `_on_failure` | archives and reports per `when` | `runner_system_failure` if the job had succeeded |
//! | `cleanup_file_variables` | remove file variables and empty `<project dir>.tmp` (the emptied stage scripts stay for the next job) | never |
//!
//! Sections without work (no cache, no dependencies, no artifacts) are left out, as
//! gitlab-runner does. Markers are written only when the payload's
//! `features.trace_sections` is true. The log ends with `Job succeeded` or
//! `ERROR: Job failed: …`.
//!
//! # Directories and variables
//!
//! See [`BuildDirs`] for the layout (`<builds_dir>/<short token>/<concurrent
//! id>/<project path>`; a job in containers sees `/builds/<project path>`,
//! [`BuildDirs::in_container`]) and the `variables` submodule for the order and runner-side
//! expansion of variables (`CI_PROJECT_DIR`, `CI_BUILDS_DIR`, `CI_CONCURRENT_ID`, …;
//! `CI_JOB_STATUS` is `running` in the script and `success`/`failed`/`canceled` in
//! `after_script`).
//!
//! # Time
//!
//! The job's deadline is `runner_info.timeout` (7200 s when ≤ 0) from pick-up; every
//! stage before the script and the script itself stop at it. `RUNNER_SCRIPT_TIMEOUT`
//! (a Go duration) shortens the script stage. After a timeout `after_script` is skipped
//! (gitlab-runner's default); cache and artifacts `on_failure` are still saved.
//!
//! # Stopping
//!
//! A [`StopSignal`] per job, raised by the coordinator's answers and by the runner:
//!
//! * `Job-Status: canceling` → [`StopRequest::Cancel`]: the script is killed (process
//!   group, SIGTERM then SIGKILL), `after_script` runs with `CI_JOB_STATUS=canceled`,
//!   cache and artifacts are skipped, the job is reported `failed` (`unknown_failure`,
//!   gitlab-runner's `job_canceled`);
//! * SIGTERM/SIGINT to the runner → [`StopRequest::Interrupt`]: the same, reported as
//!   `runner_interrupted`;
//! * `403`, `Job-Status: canceled|failed` → [`StopRequest::Abort`]: everything is killed
//!   at once, no `after_script`, no final update (the coordinator has decided).
//!
//! The coordinator's word arrives with the answers to trace patches, sent every update
//! interval while the job prints; a silent job hears it with the keep-alive update,
//! at most 30 s later (gitlab-runner's force-send interval).
//!
//! # Talking to the coordinator
//!
//! The `uplink` submodule: acceptance (`PUT state=running`), the trace streamed with
//! `PATCH` + `Content-Range` at the server's update interval with `416` resync,
//! keep-alives, back-off with jitter while the coordinator is unreachable (the job keeps
//! running and the trace is delivered byte for byte when it is back), and the final
//! update with checksum and size, re-sent on `202` until accepted.
//!
//! When the log passes `output_limit` the trace says so where it happens, the last
//! lines say how many bytes were not collected, and [`JobReport::output_limit_exceeded`]
//! is set: never a silent truncation.
//!
//! # Runner scripts and the build directory
//!
//! An entry's own scripts (`RunnerScripts`: `pre_`/`post_get_sources_script`,
//! `pre_`/`post_build_script`) are spliced into the job's stages by the lifecycle (`hook`,
//! `steps`). A job's `GIT_CLONE_PATH` below `$CI_BUILDS_DIR`, where
//! `[runners.custom_build_dir]` allows it, is checked by `Placement::place` and moved to by
//! `BuildDirs::with_clone_path`; the slot directory is a field of `BuildDirs`, not derived
//! from the project path. `Uplink` (the `uplink` submodule) is the job's link to the
//! coordinator.

mod backoff;
mod dependencies;
mod ending;
mod event;
mod functions;
mod inputs;
mod lifecycle;
mod post;
pub(crate) mod secrets;
mod stop;
mod telemetry;
mod uplink;
mod variables;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_protocol::{JobResponse, PatchTraceParams};
use tokio::time::Instant;

pub use crate::journal::TakeoverAt;
pub(crate) use backoff::Backoff;
pub use ending::JobEnding;
pub use event::{Delivery, JobEvent, JobEvents, ignore_events};
pub use stop::{StopRequest, StopSignal};
pub use uplink::MAX_FINAL_RANGE_MISMATCHES;

use crate::client::Client;
use crate::config::{RunnerConfig, short_token};
use crate::dirs::{BuildDirs, Layout};
use crate::executor::DEFAULT_KILL_GRACE;
use crate::trace::{
    ANSI_BOLD_GREEN, ANSI_BOLD_RED, ANSI_RESET, MaskSet, MaskSetBuilder, Trace, TraceOptions,
};
use lifecycle::Lifecycle;
use uplink::{Acceptance, Uplink};
use variables::{DirFacts, RunnerFacts, get_bool, job_variables};

/// Everything a job needs from the runner that picked it.
#[derive(Clone)]
pub struct JobContext {
    /// The API client of the runner entry (its URL and `info`).
    pub client: Client,
    /// The `[[runners]]` entry.
    pub runner: Arc<RunnerConfig>,
    /// This runner process's `system_id` (§1.3).
    pub system_id: String,
    /// The job's slot in its entry (`CI_CONCURRENT_ID`), 0-based.
    pub concurrent_id: usize,
    /// The job's slot among the entry's running jobs of the same project
    /// (`CI_CONCURRENT_PROJECT_ID`).
    pub concurrent_project_id: usize,
    /// The resolved `builds_dir`.
    pub builds_dir: PathBuf,
    /// The resolved `cache_dir`.
    pub cache_dir: PathBuf,
    /// The job's stop request; the poll loop raises it on shutdown.
    pub stop: StopSignal,
    /// Where events go.
    pub events: JobEvents,
    /// Time between SIGTERM and SIGKILL when a stage is stopped.
    pub kill_grace: Duration,
    /// Copy this directory instead of fetching with git (`gantry run`; see
    /// [`crate::sources`]).
    pub snapshot: Option<PathBuf>,
    /// Sees every byte of the log as it is appended (after masking).
    pub trace_tap: Option<TraceTap>,
    /// Run the shell executor's scripts in a login shell (`bash -l`, gitlab-runner's
    /// default). `gantry run` turns it off: the environment is the one it was started
    /// from, and profile scripts do not run for every stage.
    pub login_shell: bool,
    /// The entry's fleet and the reservation taken for this job (the instance
    /// executor's; set by the poll loop).
    pub fleet: Option<crate::fleet::FleetLease>,
    /// The job's record in the runner's journal ([`crate::journal`]): its stages'
    /// process groups are written there while they run.
    pub journal: Option<Arc<crate::journal::RunningJob>>,
    /// The process's tracer (`None`: tracing off): a span for the job and one for each
    /// of its sections (`telemetry`).
    pub telemetry: Option<gantry_telemetry::Telemetry>,
}

/// Receives a job's log bytes as they are appended: `(job id, bytes)`. Called with the
/// log locked, so calls arrive in log order; keep it quick (send to a channel).
pub type TraceTap = Arc<dyn Fn(i64, &[u8]) + Send + Sync>;

impl JobContext {
    /// A context with the default kill grace period, no concurrency, events dropped.
    pub fn new(
        client: Client,
        runner: Arc<RunnerConfig>,
        system_id: impl Into<String>,
        builds_dir: PathBuf,
        cache_dir: PathBuf,
    ) -> Self {
        Self {
            client,
            runner,
            system_id: system_id.into(),
            concurrent_id: 0,
            concurrent_project_id: 0,
            builds_dir,
            cache_dir,
            stop: StopSignal::new(),
            events: ignore_events(),
            kill_grace: DEFAULT_KILL_GRACE,
            snapshot: None,
            trace_tap: None,
            login_shell: true,
            fleet: None,
            journal: None,
            telemetry: None,
        }
    }
}

/// How a job went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReport {
    /// The job id.
    pub job_id: i64,
    /// How it ended.
    pub ending: JobEnding,
    /// What became of the final update.
    pub delivery: Delivery,
    /// Bytes in the log (`output.bytesize`).
    pub trace_bytes: u64,
    /// `crc32:…` of the log (`output.checksum`).
    pub trace_checksum: String,
    /// Whether the log passed `output_limit`.
    pub output_limit_exceeded: bool,
    /// Bytes of output not collected because of `output_limit`.
    pub dropped_bytes: u64,
}

/// `linux/amd64`: the OS and Go-style architecture.
pub(crate) fn platform() -> String {
    format!("{}/{}", std::env::consts::OS, go_arch())
}

/// Go's `GOARCH` for this machine (`amd64`, `arm64`, …).
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// Everything that must not reach the log: the job's masks (masked variables, before
/// and after expansion, the job token, `glpat-` tokens, sensitive URL parameters), plus
/// the runner token, dependency tokens and registry passwords.
fn masks(
    job: &JobResponse,
    variables: &[gantry_protocol::JobVariable],
    runner_token: &str,
) -> MaskSetBuilder {
    let all_default_tokens = get_bool(variables, "FF_MASK_ALL_DEFAULT_TOKENS").unwrap_or(false);
    MaskSetBuilder::for_job(job, all_default_tokens)
        .values(variables.iter().filter(|v| v.masked).map(|v| &v.value))
        .value(runner_token)
        .values(job.dependencies.iter().map(|d| &d.token))
        .values(job.credentials.iter().map(|c| &c.password))
}

/// Where a job runs and the variables that follow from it: the build directories for
/// a base directory and a [`Layout`], and the job's variables with `CI_BUILDS_DIR` and
/// `CI_PROJECT_DIR` pointing there. The custom executor's `config_exec` may move the
/// job after it started, so the lifecycle keeps this to place it again.
pub(crate) struct Placement<'a> {
    pub(crate) runner: &'a RunnerConfig,
    pub(crate) job: &'a JobResponse,
    pub(crate) short_token: String,
    pub(crate) job_timeout_secs: u64,
    pub(crate) concurrent_id: usize,
    pub(crate) concurrent_project_id: usize,
}

impl Placement<'_> {
    /// The job's directories under `builds_dir` and its variables, moved to the job's
    /// `GIT_CLONE_PATH` where it sets one ([`Placement::clone_path`]; `choice` runs the
    /// job). The third value says why that path cannot be used (the directories are then
    /// the default ones, and the job must not run).
    pub(crate) fn place(
        &self,
        builds_dir: &std::path::Path,
        layout: Layout,
        choice: crate::config::ExecutorKind,
    ) -> (BuildDirs, Vec<gantry_protocol::JobVariable>, Option<String>) {
        let dirs = BuildDirs::new(
            builds_dir,
            &self.runner.token,
            self.concurrent_id,
            &self.job.git_info.repo_url,
            self.job.job_info.project_id,
        );
        let dirs = match layout {
            Layout::Shared => dirs,
            Layout::Unshared => dirs.unshared(),
            Layout::Container => dirs.in_container(),
        };
        let variables = self.variables(&dirs);
        match self.clone_path(&dirs, &variables, choice) {
            Ok(None) => (dirs, variables, None),
            Ok(Some(moved)) => {
                let variables = self.variables(&moved);
                (moved, variables, None)
            }
            Err(refused) => (dirs, variables, Some(refused)),
        }
    }

    /// The job's checkout moved to its `GIT_CLONE_PATH` (in `variables`, expanded), when it
    /// sets one: `Ok(None)` when it does not, an error (why the job cannot run) when the
    /// entry does not allow it (`[runners.custom_build_dir]`), it is not below
    /// `$CI_BUILDS_DIR`, or the job runs on a fleet instance (not built yet).
    fn clone_path(
        &self,
        dirs: &BuildDirs,
        variables: &[gantry_protocol::JobVariable],
        choice: crate::config::ExecutorKind,
    ) -> Result<Option<BuildDirs>, String> {
        use crate::config::ExecutorKind;
        let Some(path) = variables::get(variables, "GIT_CLONE_PATH").filter(|p| !p.is_empty())
        else {
            return Ok(None);
        };
        let in_docker = matches!(
            choice,
            ExecutorKind::Docker | ExecutorKind::DockerAutoscaler
        );
        if !self.runner.custom_build_dir_enabled(in_docker) {
            return Err(
                "setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature"
                    .to_owned(),
            );
        }
        if matches!(
            choice,
            ExecutorKind::Instance | ExecutorKind::DockerAutoscaler
        ) {
            return Err(format!(
                "GIT_CLONE_PATH is not supported by gantry's {} executor yet",
                choice.as_str()
            ));
        }
        dirs.clone().with_clone_path(path).map(Some)
    }

    /// The job's variables for `dirs` (`CI_BUILDS_DIR`, `CI_PROJECT_DIR` as its scripts
    /// see them).
    pub(crate) fn variables(&self, dirs: &BuildDirs) -> Vec<gantry_protocol::JobVariable> {
        let builds = dirs.seen.builds_dir.to_string_lossy().into_owned();
        let project = dirs.seen.project_dir.to_string_lossy().into_owned();
        let arch = platform();
        let mut variables = job_variables(
            &RunnerFacts {
                version: env!("CARGO_PKG_VERSION"),
                revision: option_env!("GANTRY_REVISION").unwrap_or("unknown"),
                arch: &arch,
                short_token: &self.short_token,
                job_timeout_secs: self.job_timeout_secs,
                shared: crate::config::ExecutorKind::for_job(self.runner, self.job).is_shared(),
                feature_flags: &self.runner.feature_flags,
            },
            &self.runner.environment,
            &self.job.variables,
            &DirFacts {
                builds_dir: &builds,
                project_dir: &project,
                concurrent_id: self.concurrent_id,
                concurrent_project_id: self.concurrent_project_id,
            },
        );
        // gitlab-runner hands the entry's TLS files to the job as file variables, so
        // its own calls to the server (git, the API) can use them.
        let tls = &self.runner.tls;
        for (key, path) in [
            ("CI_SERVER_TLS_CA_FILE", &tls.ca_file),
            ("CI_SERVER_TLS_CERT_FILE", &tls.cert_file),
            ("CI_SERVER_TLS_KEY_FILE", &tls.key_file),
        ] {
            if let Some(content) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok()) {
                variables.retain(|v| v.key != key);
                variables.push(gantry_protocol::JobVariable {
                    key: key.to_owned(),
                    value: content,
                    public: true,
                    file: true,
                    raw: true,
                    ..gantry_protocol::JobVariable::default()
                });
            }
        }
        variables
    }
}

impl crate::executor::Placer for Placement<'_> {
    fn place(
        &self,
        builds_dir: &std::path::Path,
        layout: Layout,
    ) -> Result<(BuildDirs, Vec<gantry_protocol::JobVariable>), String> {
        let kind = crate::config::ExecutorKind::for_job(self.runner, self.job);
        match Placement::place(self, builds_dir, layout, kind) {
            (dirs, variables, None) => Ok((dirs, variables)),
            (_, _, Some(refused)) => Err(refused),
        }
    }

    fn variables(&self, dirs: &BuildDirs) -> Vec<gantry_protocol::JobVariable> {
        Placement::variables(self, dirs)
    }
}

/// Runs `job` through its lifecycle and reports the final status (see the module docs).
/// Never panics on any payload; every problem ends in a [`JobEnding`].
pub async fn run_job(job: JobResponse, cx: JobContext) -> JobReport {
    run(job, cx, None).await
}

/// A job a runner process that died left running in a detached stage, taken over by
/// this one (`crate::executor::shell::detached`).
#[derive(Debug, Clone)]
pub struct Takeover {
    /// Where the job goes on.
    pub at: TakeoverAt,
    /// The coordinator's log: its length and, when known, its CRC-32.
    pub log: (u64, Option<u32>),
    /// When the job was received (Unix time, ms).
    pub received_unix_ms: u64,
    /// The coordinator asked for the job to be canceled.
    pub cancel_requested: bool,
}

/// Goes on with the job `takeover` describes, from its detached stage to the final
/// status, as [`run_job`] would have.
pub async fn resume_job(job: JobResponse, cx: JobContext, takeover: Takeover) -> JobReport {
    run(job, cx, Some(takeover)).await
}

async fn run(job: JobResponse, cx: JobContext, takeover: Option<Takeover>) -> JobReport {
    let started = match &takeover {
        None => Instant::now(),
        Some(takeover) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let ago = now.saturating_sub(Duration::from_millis(takeover.received_unix_ms));
            Instant::now().checked_sub(ago).unwrap_or_else(Instant::now)
        }
    };
    let runner = Arc::clone(&cx.runner);
    // `${{ job.inputs.* }}` first: the image's name may hold one (`job/inputs.rs`).
    let mut job = job;
    let inputs_error = if inputs::enabled(&runner.feature_flags, &job.variables) {
        inputs::interpolate(&mut job).err()
    } else {
        None
    };
    let timeout_secs = u64::try_from(job.runner_info.effective_timeout_secs())
        .unwrap_or(1)
        .max(1);
    let timeout = Duration::from_secs(timeout_secs);
    let short = short_token(&runner.token);
    let placement = Placement {
        runner: &runner,
        job: &job,
        short_token: short.clone(),
        job_timeout_secs: timeout_secs,
        concurrent_id: cx.concurrent_id,
        concurrent_project_id: cx.concurrent_project_id,
    };
    // In containers the job sees gitlab-runner's Docker paths (`/builds/…`).
    let choice = crate::config::ExecutorKind::for_job(&runner, &job);
    let layout = match choice {
        crate::config::ExecutorKind::Docker | crate::config::ExecutorKind::DockerAutoscaler => {
            Layout::Container
        }
        _ => Layout::Shared,
    };
    let (dirs, variables, clone_path_error) = placement.place(&cx.builds_dir, layout, choice);
    let project_dir = dirs.seen.project_dir.to_string_lossy().into_owned();
    let (mask_set, mask_error) = match masks(&job, &variables, &runner.token).build() {
        Ok(set) => (set, None),
        Err(error) => (MaskSet::empty(), Some(error.to_string())),
    };
    let trace = Trace::new(
        mask_set,
        TraceOptions {
            output_limit: runner.output_limit_bytes(),
            timestamps: get_bool(&variables, "FF_TIMESTAMPS").unwrap_or(false),
            tap: cx.trace_tap.as_ref().map(|tap| {
                let (tap, job_id) = (Arc::clone(tap), job.id);
                Arc::new(move |bytes: &[u8]| tap(job_id, bytes)) as crate::trace::Tap
            }),
            continues: takeover.as_ref().map(|t| t.log),
            ..TraceOptions::default()
        },
    );
    // CI_DEBUG_TRACE: the scripts trace every command (`set -o xtrace`), unless the
    // entry says `debug_trace_disabled` (gitlab-runner's `IsDebugTraceEnabled`).
    let debug_requested = get_bool(&variables, "CI_DEBUG_TRACE").unwrap_or(false);
    let debug_trace = debug_requested && !runner.debug_trace_disabled;
    let params = PatchTraceParams { debug_trace };
    let meter = crate::resources::JobMeter::default();
    let uplink = Arc::new(Uplink::new(
        cx.client.clone(),
        job.id,
        job.token.clone(),
        trace.clone(),
        cx.stop.clone(),
        params,
        Arc::clone(&cx.events),
        meter.clone(),
    ));

    let job_span = telemetry::job_span(&cx, &job, choice, &variables);
    // Acceptance goes beside the preparation (a job taken over sends it again: a
    // runner that died before sending it would otherwise never acknowledge the job).
    let accepting = uplink.accept_beside();
    if takeover.as_ref().is_some_and(|t| t.cancel_requested) {
        cx.stop.request(StopRequest::Cancel);
    }
    (cx.events)(JobEvent::Started {
        job_id: job.id,
        project_dir: project_dir.clone(),
    });
    if takeover.is_none() {
        header(&trace, &runner, &short, &cx.system_id);
    }
    let ending = match (mask_error, clone_path_error.or(inputs_error)) {
        (Some(message), _) => JobEnding::SystemFailure {
            stage: "prepare_executor",
            message,
        },
        (None, Some(message)) => JobEnding::ConfigurationError { message },
        (None, None) => {
            if debug_requested && !debug_trace {
                trace.warning("CI_DEBUG_TRACE: usage is disabled on this runner (debug_trace_disabled = true)");
            }
            let mut lifecycle = Lifecycle {
                span: job_span.context(),
                debug_trace,
                job: &job,
                cx: &cx,
                trace: &trace,
                placement: &placement,
                cache_dir: cx.cache_dir.clone(),
                dirs,
                variables,
                deadline: started + timeout,
                timeout,
                executor: None,
                prepared: None,
                meter: meter.clone(),
                accepted: accepting.gate(),
            };
            match takeover {
                None => lifecycle.run().await,
                Some(takeover) => lifecycle.resume(takeover.at).await,
            }
        }
    };
    let (acceptance, streaming) = accepting.finish().await;
    // A coordinator that does not want the job hears nothing more about it, whatever
    // its preparation came to.
    let ending = match acceptance {
        Acceptance::Dropped => JobEnding::Aborted,
        Acceptance::Run | Acceptance::Canceled => ending,
    };
    write_ending(&trace, &ending);
    if let Some(streaming) = streaming {
        streaming.stop().await;
    }
    let resources = meter.snapshot();
    telemetry::end_job_span(job_span, &ending, resources.as_ref());
    let delivery = uplink.finish(&ending, &job.features).await;
    let (trace_bytes, trace_checksum, exceeded, dropped) = {
        let buffer = trace.buffer();
        (
            buffer.len(),
            buffer.checksum(),
            buffer.limit_exceeded(),
            buffer.dropped_bytes(),
        )
    };
    (cx.events)(JobEvent::Finished {
        job_id: job.id,
        ending: ending.clone(),
        delivery: delivery.clone(),
        resources,
    });
    JobReport {
        job_id: job.id,
        ending,
        delivery,
        trace_bytes,
        trace_checksum,
        output_limit_exceeded: exceeded,
        dropped_bytes: dropped,
    }
}

/// Whether `job`'s log has per-line timestamps (`FF_TIMESTAMPS`).
pub(crate) fn timestamps(job: &JobResponse) -> bool {
    get_bool(&job.variables, "FF_TIMESTAMPS").unwrap_or(false)
}

/// The log's first lines: the runner and its version.
fn header(trace: &Trace, runner: &RunnerConfig, short: &str, system_id: &str) {
    trace.runner_line(&match option_env!("GANTRY_REVISION") {
        Some(revision) => format!(
            "Running with gantry-runner {} ({revision})",
            env!("CARGO_PKG_VERSION")
        ),
        None => format!("Running with gantry-runner {}", env!("CARGO_PKG_VERSION")),
    });
    trace.runner_line(&format!(
        "  on {} {short}, system ID: {system_id}",
        runner.name.as_deref().unwrap_or("gantry-runner"),
    ));
}

/// Fails a job whose payload could not be decoded (the coordinator assigned it to this
/// runner all the same): accepts it, writes the decode error to its log and reports
/// `runner_system_failure`, so it does not wait for a server-side timeout.
pub async fn fail_undecodable_job(
    client: Client,
    job_id: i64,
    token: String,
    error: &str,
    events: JobEvents,
) -> JobReport {
    let masks = MaskSetBuilder::default()
        .value(&token)
        .build()
        .unwrap_or_else(|_| MaskSet::empty());
    let trace = Trace::new(masks, TraceOptions::default());
    let uplink = Uplink::new(
        client,
        job_id,
        token,
        trace.clone(),
        StopSignal::new(),
        PatchTraceParams::default(),
        Arc::clone(&events),
        crate::resources::JobMeter::default(),
    );
    let ending = match uplink.accept().await {
        Acceptance::Dropped => JobEnding::Aborted,
        Acceptance::Canceled | Acceptance::Run => {
            trace.runner_line(&format!(
                "Running with gantry-runner {}",
                env!("CARGO_PKG_VERSION")
            ));
            trace.error(&format!("failed to {error}"));
            trace
                .runner_line("The coordinator sent a job this runner cannot read; it was not run.");
            JobEnding::SystemFailure {
                stage: "prepare_executor",
                message: error.to_owned(),
            }
        }
    };
    write_ending(&trace, &ending);
    let delivery = uplink
        .finish(&ending, &gantry_protocol::JobFeatures::default())
        .await;
    events(JobEvent::Finished {
        job_id,
        ending: ending.clone(),
        delivery: delivery.clone(),
        resources: None,
    });
    let buffer = trace.buffer();
    JobReport {
        job_id,
        ending,
        delivery,
        trace_bytes: buffer.len(),
        trace_checksum: buffer.checksum(),
        output_limit_exceeded: false,
        dropped_bytes: 0,
    }
}

/// The last lines of the log.
fn write_ending(trace: &Trace, ending: &JobEnding) {
    let (exceeded, dropped, limit) = {
        let buffer = trace.buffer();
        (
            buffer.limit_exceeded(),
            buffer.dropped_bytes(),
            buffer.limit(),
        )
    };
    if exceeded {
        trace.warning(&format!(
            "The job log exceeded output_limit ({limit} bytes): {dropped} bytes of output were not collected. \
             Raise output_limit in the runner's config.toml to keep more."
        ));
    }
    match ending {
        JobEnding::Success => {
            trace.runner_line(&format!("{ANSI_BOLD_GREEN}Job succeeded{ANSI_RESET}"))
        }
        JobEnding::Aborted => {}
        other => trace.runner_line(&format!(
            "{ANSI_BOLD_RED}ERROR: Job failed: {other}{ANSI_RESET}"
        )),
    }
}
