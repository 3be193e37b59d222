//! The custom executor: gitlab-runner's `[runners.custom]` driver protocol. The
//! administrator's programs (the *driver*) make a job's environment, run its stages in
//! it and remove it:
//!
//! | stage | program | when | its output goes to |
//! |---|---|---|---|
//! | config | `config_exec <config_args>` | first, once | stdout: a JSON object ([`DriverConfig`]); stderr: the job log |
//! | prepare | `prepare_exec <prepare_args>` | once | the job log |
//! | run | `run_exec <run_args> <script> <stage>` | once per stage that runs job code | the job log |
//! | cleanup | `cleanup_exec <cleanup_args>` | last, whatever happened | the runner's log ([`JobEvent::DriverCleanup`](crate::job::JobEvent::DriverCleanup)); a failure is a warning in the job log |
//!
//! Every program gets the runner's environment, then `job_env` from `config_exec`,
//! then every job variable as `CUSTOM_ENV_<KEY>` (and `CUSTOM_ENV_CI_JOB_SERVICES`,
//! the job's services as JSON), `BUILD_FAILURE_EXIT_CODE` ([`BUILD_FAILURE_EXIT_CODE`]),
//! `SYSTEM_FAILURE_EXIT_CODE` ([`SYSTEM_FAILURE_EXIT_CODE`]), `BUILD_EXIT_CODE_FILE` and
//! `JOB_RESPONSE_FILE` (the job payload as JSON, mode 0600). Each runs in the job's
//! private temporary directory (`custom-executor*` under `$TMPDIR`, removed at the end),
//! alone in a new process group.
//!
//! How a program's exit reads: 0 is success; `$BUILD_FAILURE_EXIT_CODE` means the job's
//! own script failed (its exit code is the number the driver wrote into
//! `$BUILD_EXIT_CODE_FILE`, else 1) — a `script_failure`; `$SYSTEM_FAILURE_EXIT_CODE`,
//! any other code or a signal is a `runner_system_failure`. The config and prepare
//! stages are tried up to [`PREPARATION_ATTEMPTS`] times, [`PREPARATION_RETRY_INTERVAL`]
//! apart, after a system failure (with the cleanup program run in between), as
//! gitlab-runner retries preparing an executor.
//!
//! A program past its timeout (`config_exec_timeout`, `prepare_exec_timeout`,
//! `cleanup_exec_timeout`; the job's own timeout for `run_exec`), or running when the
//! job is canceled, gets SIGTERM (its whole process group), then SIGKILL after
//! `graceful_kill_timeout`, and is abandoned after `force_kill_timeout` more. A program
//! that ends normally is not signalled: what it started in the background (the VM, the
//! container) stays for the next stage.
//!
//! **Where Gantry differs from gitlab-runner.** The runner itself fetches sources,
//! restores and archives cache, downloads and uploads artifacts — on this machine, in the
//! job's build directory, as for the shell and Docker executors (one implementation of
//! each, no `git` or `gitlab-runner` binary needed in the environment). So `run_exec` is
//! called for the stages that run the job's code: `prepare_script` (prints where the
//! job runs), the `pre_`/`post_get_sources_script` hooks, `build_script` (the
//! `before_script` + `script` stage, under the name gitlab-runner still passes), other
//! `step_*` stages and `after_script`; and the driver's environment must see the build
//! directory (`$CUSTOM_ENV_CI_BUILDS_DIR`) and cache directory at the same paths — the
//! same machine, a bind mount, a shared folder. The build directory layout is the shared
//! one (`<builds_dir>/<short token>/<concurrent id>/<project path>`) unless `config_exec`
//! says `"builds_dir_is_shared": false` (then `<builds_dir>/<project path>`, and the
//! driver must give concurrent jobs different `builds_dir`s).
//!
//! In the code: `preparation.rs` runs the config and prepare attempts; a new `builds_dir`
//! re-places the job through the lifecycle's `Placer` (`job::Placement`, the one place
//! directories and the variables naming them are computed). Programs run through
//! `shell::process::spawn_command` (their own process group; `Sink`s for the job log,
//! captured stdout or the runner's log), are ended with `terminate_within(graceful,
//! force)`, and after a normal exit `Running::release` leaves what they started alone.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use gantry_protocol::{JobResponse, JobVariable, Service};
use serde::{Deserialize, Serialize};
use tokio::process::Command;

mod preparation;

pub(crate) use preparation::{prepare, resume};

use crate::config::format_duration;
use crate::config::{CustomConfig, CustomProgram, ShellKind};
use crate::executor::shell::detached::Detached;
use crate::executor::shell::process::{self, Captured, Ended, Sink, Stop};
use crate::executor::shell::{
    ShellError, clear_script, stage_script, warn_on_timeout, write_stage_script,
};
use crate::executor::{CancelReason, DriverLog, Stage, StageOutcome};
use crate::journal::RunningJob;
use crate::trace::Trace;

/// The exit code a driver uses when the job's script failed (gitlab-runner's value).
pub const BUILD_FAILURE_EXIT_CODE: i32 = 1;
/// The exit code a driver uses for a failure of its own (gitlab-runner's value).
pub const SYSTEM_FAILURE_EXIT_CODE: i32 = 2;
/// Tries of the config and prepare stages (gitlab-runner's `PreparationRetries`).
pub const PREPARATION_ATTEMPTS: u32 = 3;
/// The wait between them (gitlab-runner's `PreparationRetryInterval`).
pub const PREPARATION_RETRY_INTERVAL: Duration = Duration::from_secs(3);
/// The most `config_exec` may print on stdout.
pub const MAX_CONFIG_OUTPUT: usize = 1024 * 1024;
/// How long the output of a program that exited is still read when something it left
/// running holds its pipes open.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// What `config_exec` printed: gitlab-runner's `ConfigExecOutput`. Every key is
/// optional; unknown keys are ignored; an empty output means "no changes".
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DriverConfig {
    /// The base build directory (absolute).
    pub builds_dir: Option<String>,
    /// The base directory of the local cache (absolute).
    pub cache_dir: Option<String>,
    /// Whether concurrent jobs share `builds_dir` (the layout with the runner's short
    /// token and the job's concurrent id).
    pub builds_dir_is_shared: Option<bool>,
    /// The host name of the environment (gitlab-runner keeps it as job metadata).
    pub hostname: Option<String>,
    /// The driver's name and version, for the `Using Custom executor…` line.
    pub driver: Option<DriverInfo>,
    /// Variables for the later driver programs (not for the job).
    pub job_env: Option<BTreeMap<String, String>>,
}

/// `driver` in [`DriverConfig`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct DriverInfo {
    /// Name.
    pub name: Option<String>,
    /// Version.
    pub version: Option<String>,
}

impl DriverConfig {
    /// Reads `config_exec`'s stdout. Whitespace only is no configuration.
    pub fn parse(program: &str, stdout: &[u8]) -> Result<Option<Self>, CustomError> {
        let invalid = |detail: String| CustomError::ConfigOutput {
            program: program.to_owned(),
            detail,
        };
        if stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let config: Self = serde_json::from_slice(stdout).map_err(|error| {
            invalid(format!(
                "{error}; expected a JSON object such as {{\"builds_dir\": \"/builds\", \"driver\": {{\"name\": \"my driver\"}}}}"
            ))
        })?;
        for (key, value) in [
            ("builds_dir", &config.builds_dir),
            ("cache_dir", &config.cache_dir),
        ] {
            if let Some(value) = value
                && (value.is_empty() || value.contains('\0') || !Path::new(value).is_absolute())
            {
                return Err(invalid(format!(
                    "`{key}` is {value:?}; it must be an absolute path"
                )));
            }
        }
        for key in config.job_env.iter().flat_map(BTreeMap::keys) {
            if !is_env_name(key) {
                return Err(invalid(format!(
                    "`job_env` has the name {key:?}, which cannot be an environment variable name (empty, or holds `=` or NUL)"
                )));
            }
        }
        Ok(Some(config))
    }

    /// gitlab-runner's start-up line: `Using Custom executor with driver NAME VERSION...`.
    pub fn startup_message(config: Option<&Self>) -> String {
        let driver = config.and_then(|c| c.driver.as_ref());
        match driver.map(|d| (&d.name, &d.version)) {
            Some((Some(name), Some(version))) => {
                format!("Using Custom executor with driver {name} {version}...")
            }
            Some((Some(name), None)) => format!("Using Custom executor with driver {name}..."),
            _ => "Using Custom executor...".to_owned(),
        }
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// Why a driver program failed the job (a system failure).
#[derive(Debug, thiserror::Error)]
pub enum CustomError {
    /// The job's temporary directory could not be made.
    #[error("create the custom executor's temporary directory: {0}")]
    TempDir(#[source] std::io::Error),
    /// The environment a lost job's programs got could not be read back
    /// ([`CustomExecutor::after_crash`]).
    #[error("read the environment of the lost job's driver programs from `{}`: {detail}", path.display())]
    SavedEnvironment {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// `JOB_RESPONSE_FILE` could not be written.
    #[error("write the job response file `{}`: {source}", path.display())]
    ResponseFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A stage's script could not be written.
    #[error(transparent)]
    Script(#[from] ShellError),
    /// The program could not be started.
    #[error("start {stage} program `{program}`: {source}")]
    Spawn {
        /// `config_exec`, `run_exec (build_script)`, …
        stage: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for it failed.
    #[error("wait for {stage} program `{program}`: {source}")]
    Wait {
        /// Which program.
        stage: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It exited with `SYSTEM_FAILURE_EXIT_CODE`.
    #[error(
        "{stage} program `{program}` exited with SYSTEM_FAILURE_EXIT_CODE ({code}): the driver reports a failure of its own"
    )]
    SystemFailure {
        /// Which program.
        stage: String,
        /// The program.
        program: String,
        /// The code.
        code: i32,
    },
    /// It exited with a code the protocol does not know.
    #[error(
        "{stage} program `{program}` exited with {code}; a driver exits with 0, $BUILD_FAILURE_EXIT_CODE ({BUILD_FAILURE_EXIT_CODE}) when the job's script failed, or $SYSTEM_FAILURE_EXIT_CODE ({SYSTEM_FAILURE_EXIT_CODE})"
    )]
    UnknownExit {
        /// Which program.
        stage: String,
        /// The program.
        program: String,
        /// The code.
        code: i32,
    },
    /// It was killed by a signal it did not get from us.
    #[error("{stage} program `{program}` was killed by signal {signal}")]
    Signal {
        /// Which program.
        stage: String,
        /// The program.
        program: String,
        /// The signal.
        signal: i32,
    },
    /// It ran past its own timeout.
    #[error(
        "{stage} program `{program}` did not finish within {timeout} ({key} in [runners.custom]); it was stopped"
    )]
    TimedOut {
        /// Which program.
        stage: String,
        /// The program.
        program: String,
        /// The configuration key.
        key: &'static str,
        /// The timeout, as gitlab-runner prints durations.
        timeout: String,
    },
    /// `config_exec`'s `builds_dir` would change a masked variable's value.
    #[error(
        "config_exec program `{program}` moved the job to another builds_dir, which changes the value of the masked variable {variable}: the new value could not be masked in the job log; keep $CI_BUILDS_DIR and $CI_PROJECT_DIR out of masked variables"
    )]
    UnmaskableVariable {
        /// The program.
        program: String,
        /// The variable.
        variable: String,
    },
    /// `config_exec` printed something that is not its JSON object.
    #[error(
        "config_exec program `{program}` printed on stdout what is not its configuration: {detail}"
    )]
    ConfigOutput {
        /// The program.
        program: String,
        /// What is wrong.
        detail: String,
    },
}

impl CustomError {
    /// Whether trying the preparation again may help (not when the same job and
    /// configuration must fail the same way).
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::UnmaskableVariable { .. })
    }
}

/// How the config or prepare stage failed.
#[derive(Debug)]
pub enum PrepareFailure {
    /// The driver exited with `BUILD_FAILURE_EXIT_CODE`: the job fails as its script
    /// would (not retried).
    Build {
        /// The exit code the driver reported.
        exit_code: i32,
    },
    /// A system failure (retried).
    System(CustomError),
    /// The job cannot run with the runner's configuration as `config_exec` left it (its
    /// `GIT_CLONE_PATH` is not allowed below the driver's builds directory): fails the job
    /// `runner_configuration_error`, at once.
    Configuration(String),
    /// The job's own timeout passed.
    JobTimeout,
    /// The job was canceled or the runner is stopping.
    Canceled(CancelReason),
}

/// One run of a driver program.
struct Call<'a> {
    /// `config_exec`, `run_exec (build_script)`, … (for messages).
    stage: &'a str,
    program: &'a CustomProgram,
    /// Arguments after the configured ones.
    extra: &'a [&'a OsStr],
    /// Where stdout and stderr go.
    sinks: (Sink, Sink),
    timeout: Duration,
}

/// How one program run ended.
enum Exit {
    Success,
    BuildFailure { exit_code: i32 },
    Failed(CustomError),
    TimedOut,
    Canceled(CancelReason),
}

/// The custom executor of one job: its driver programs, its temporary directory and
/// the environment the programs get.
pub struct CustomExecutor {
    config: CustomConfig,
    shell: ShellKind,
    temp: JobTemp,
    response_file: PathBuf,
    exit_code_file: PathBuf,
    job_env: BTreeMap<String, String>,
    custom_env: Vec<(String, String)>,
    journal: Option<Arc<RunningJob>>,
    /// The entry's short token, for the job's record.
    runner: String,
    /// Where `config_exec` moved the job.
    relocation: Option<Relocation>,
}

/// The job's temporary directory, removed with everything in it when the executor is
/// dropped (a runner that dies leaves it to [`CustomExecutor::after_crash`]).
struct JobTemp {
    path: PathBuf,
    /// The job's record: a job handed over to the next runner process keeps its
    /// directory ([`crate::journal::Journal::hand_over`]).
    journal: Option<Arc<RunningJob>>,
}

impl JobTemp {
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for JobTemp {
    fn drop(&mut self) {
        if self.journal.as_ref().is_some_and(|job| job.handing_over()) {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The environment the driver programs get, saved in the job's temporary directory for
/// a `cleanup_exec` after a crash.
#[derive(Serialize, serde::Deserialize)]
struct SavedEnvironment {
    job_env: BTreeMap<String, String>,
    custom_env: Vec<(String, String)>,
    /// Where `config_exec` moved the job, for a runner that takes the job over.
    #[serde(default)]
    relocation: Option<Relocation>,
}

/// The directories `config_exec` gave (the keys of [`DriverConfig`] that move a job).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Relocation {
    builds_dir: Option<String>,
    builds_dir_is_shared: Option<bool>,
    cache_dir: Option<String>,
}

/// The saved environment's file in the job's temporary directory.
const SAVED_ENVIRONMENT: &str = "cleanup-environment.json";
/// The largest saved environment read back (the job's variables are bounded well
/// below this by the coordinator).
const MAX_SAVED_ENVIRONMENT: u64 = 64 * 1024 * 1024;

impl std::fmt::Debug for CustomExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomExecutor")
            .field("config", &self.config)
            .field("temp", &self.temp.path())
            .finish_non_exhaustive()
    }
}

/// A service as `CUSTOM_ENV_CI_JOB_SERVICES` lists it (gitlab-runner's `jsonService`).
#[derive(Serialize)]
struct JsonService<'a> {
    name: &'a str,
    alias: String,
    entrypoint: &'a Option<Vec<String>>,
    command: &'a Option<Vec<String>>,
}

impl CustomExecutor {
    /// The executor of `job`: makes its temporary directory and writes the job
    /// payload there (`JOB_RESPONSE_FILE`). Scripts are written for `shell`.
    pub fn new(
        config: CustomConfig,
        shell: ShellKind,
        job: &JobResponse,
    ) -> Result<Self, CustomError> {
        let temp = JobTemp {
            journal: None,
            path: tempfile::Builder::new()
                .prefix("custom-executor")
                .tempdir()
                .map_err(CustomError::TempDir)?
                .keep(),
        };
        let response_file = temp.path().join("response.json");
        write_private(&response_file, &serde_json::to_vec(job).unwrap_or_default()).map_err(
            |source| CustomError::ResponseFile {
                path: response_file.clone(),
                source,
            },
        )?;
        let exit_code_file = temp.path().join("build_exit_code");
        Ok(Self {
            config,
            shell,
            temp,
            response_file,
            exit_code_file,
            job_env: BTreeMap::new(),
            custom_env: Vec::new(),
            journal: None,
            runner: String::new(),
            relocation: None,
        })
    }

    /// The executor of a job a runner that died left (its record in the journal named
    /// `temp_dir`), only to run `cleanup_exec` there with the environment the job's
    /// programs got. The directory is removed when this is dropped; when its saved
    /// environment cannot be read, it is left as it is and the error says why.
    pub fn after_crash(
        config: CustomConfig,
        shell: ShellKind,
        temp_dir: &Path,
    ) -> Result<Self, CustomError> {
        use std::io::Read as _;
        // Read first: a directory whose environment cannot be read is left as it is.
        let path = temp_dir.join(SAVED_ENVIRONMENT);
        let unreadable = |detail: String| CustomError::SavedEnvironment {
            path: path.clone(),
            detail,
        };
        let mut text = Vec::new();
        std::fs::File::open(&path)
            .and_then(|file| file.take(MAX_SAVED_ENVIRONMENT + 1).read_to_end(&mut text))
            .map_err(|e| unreadable(e.to_string()))?;
        if text.len() as u64 > MAX_SAVED_ENVIRONMENT {
            return Err(unreadable(format!(
                "more than {MAX_SAVED_ENVIRONMENT} bytes"
            )));
        }
        let saved: SavedEnvironment =
            serde_json::from_slice(&text).map_err(|e| unreadable(e.to_string()))?;
        let temp = JobTemp {
            path: temp_dir.to_owned(),
            journal: None,
        };
        Ok(Self {
            config,
            shell,
            response_file: temp.path().join("response.json"),
            exit_code_file: temp.path().join("build_exit_code"),
            temp,
            job_env: saved.job_env,
            custom_env: saved.custom_env,
            journal: None,
            runner: String::new(),
            relocation: saved.relocation,
        })
    }

    /// Where `config_exec` had moved the job (a job taken over after a crash: see
    /// [`CustomExecutor::after_crash`]).
    pub fn relocation(&self) -> Option<DriverConfig> {
        self.relocation.as_ref().map(|r| DriverConfig {
            builds_dir: r.builds_dir.clone(),
            builds_dir_is_shared: r.builds_dir_is_shared,
            cache_dir: r.cache_dir.clone(),
            ..DriverConfig::default()
        })
    }

    /// `config_exec`'s answer, kept for a runner that takes the job over.
    pub fn set_relocation(&mut self, driver: &DriverConfig) {
        self.relocation = Some(Relocation {
            builds_dir: driver.builds_dir.clone(),
            builds_dir_is_shared: driver.builds_dir_is_shared,
            cache_dir: driver.cache_dir.clone(),
        });
    }

    /// Name each running program's process group in the job's record
    /// ([`crate::journal`]), and the environment `cleanup_exec` needs once
    /// `prepare_exec` starts (`runner`: the entry's short token).
    pub fn set_journal(&mut self, job: Option<Arc<RunningJob>>, runner: String) {
        self.temp.journal = job.clone();
        self.journal = job;
        self.runner = runner;
    }

    /// Before the driver may make anything: saves the programs' environment in the
    /// temporary directory and names the directory in the job's record, so that a
    /// runner that finds the job lost can run `cleanup_exec` (when there is one).
    fn record_for_cleanup(&self) {
        let Some(job) = &self.journal else { return };
        if self.config.cleanup.is_none() && !job.resumable() {
            return;
        }
        let saved = SavedEnvironment {
            job_env: self.job_env.clone(),
            custom_env: self.custom_env.clone(),
            relocation: self.relocation.clone(),
        };
        let json = serde_json::to_vec(&saved).unwrap_or_default();
        if write_private(&self.temp.path().join(SAVED_ENVIRONMENT), &json).is_ok() {
            job.custom_prepared(crate::journal::CustomRecord {
                runner: self.runner.clone(),
                temp_dir: self.temp.path().to_owned(),
            });
        }
    }

    /// The job's variables (expanded, as the job sees them) and services, given to
    /// every later program as `CUSTOM_ENV_*`. Names an environment cannot hold are
    /// left out; NUL bytes are dropped from values.
    pub fn set_variables(&mut self, variables: &[JobVariable], services: &[Service]) {
        let mut env: Vec<(String, String)> = variables
            .iter()
            .filter(|v| is_env_name(&v.key))
            .map(|v| (format!("CUSTOM_ENV_{}", v.key), v.value.replace('\0', "")))
            .collect();
        let services: Vec<JsonService<'_>> = services
            .iter()
            .map(|s| JsonService {
                name: &s.name,
                alias: s
                    .aliases()
                    .first()
                    .map(|a| (*a).to_owned())
                    .unwrap_or_default(),
                entrypoint: &s.entrypoint,
                command: &s.command,
            })
            .collect();
        let services = if services.is_empty() {
            String::new()
        } else {
            serde_json::to_string(&services).unwrap_or_default()
        };
        env.push(("CUSTOM_ENV_CI_JOB_SERVICES".to_owned(), services));
        self.custom_env = env;
    }

    /// `job_env` from `config_exec`.
    pub fn set_job_env(&mut self, job_env: BTreeMap<String, String>) {
        self.job_env = job_env;
    }

    /// The job's temporary directory (the programs' working directory).
    pub fn temp_dir(&self) -> &Path {
        self.temp.path()
    }

    fn command(&self, program: &CustomProgram, extra: &[&OsStr]) -> Command {
        let mut command = Command::new(&program.exec);
        command
            .args(&program.args)
            .args(extra)
            .current_dir(self.temp.path());
        // job_env first, so that no CI/CD variable is overwritten by it.
        command.envs(&self.job_env);
        command.envs(self.custom_env.iter().map(|(k, v)| (k, v)));
        command
            .env(
                "BUILD_FAILURE_EXIT_CODE",
                BUILD_FAILURE_EXIT_CODE.to_string(),
            )
            .env(
                "SYSTEM_FAILURE_EXIT_CODE",
                SYSTEM_FAILURE_EXIT_CODE.to_string(),
            )
            .env("BUILD_EXIT_CODE_FILE", &self.exit_code_file)
            .env("JOB_RESPONSE_FILE", &self.response_file);
        command
    }

    /// Runs one program until it exits, its timeout passes or `cancel` completes.
    async fn execute(
        &self,
        call: Call<'_>,
        cancel: impl Future<Output = CancelReason>,
        trace: Option<&Trace>,
    ) -> Exit {
        let Call {
            stage,
            program,
            extra,
            sinks: (stdout, stderr),
            timeout,
        } = call;
        let _ = std::fs::remove_file(&self.exit_code_file);
        let command = self.command(program, extra);
        let mut running = match process::spawn_command(command, stdout, stderr) {
            Ok(mut running) => {
                running.record_in(self.journal.as_ref());
                running
            }
            Err(source) => {
                return Exit::Failed(CustomError::Spawn {
                    stage: stage.to_owned(),
                    program: program.exec.clone(),
                    source,
                });
            }
        };
        let stop = running.wait_until(timeout, cancel).await;
        let (exit, ended) = match stop {
            Stop::Ended(ended) => (self.exit(stage, program, ended), true),
            Stop::Timeout | Stop::Canceled(_) => {
                let ended = running
                    .terminate_within(
                        self.config.graceful_kill_timeout,
                        Some(self.config.force_kill_timeout),
                    )
                    .await;
                if ended.is_none()
                    && let Some(trace) = trace
                {
                    trace.warning(&format!(
                        "{stage} program `{}` outlived SIGKILL by force_kill_timeout ({}); it is abandoned",
                        program.exec,
                        format_duration(self.config.force_kill_timeout)
                    ));
                }
                let exit = match stop {
                    Stop::Canceled(reason) => Exit::Canceled(reason),
                    _ => Exit::TimedOut,
                };
                (exit, ended.is_some())
            }
        };
        if matches!(exit, Exit::TimedOut | Exit::Canceled(_)) && ended {
            running.finish(OUTPUT_DRAIN).await;
        } else {
            running.release(OUTPUT_DRAIN).await;
        }
        exit
    }

    fn exit(&self, stage: &str, program: &CustomProgram, ended: Ended) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        let (stage, exec) = (stage.to_owned(), program.exec.clone());
        match ended {
            Ended::Exited(status) => match (status.code(), status.signal()) {
                (Some(0), _) => Exit::Success,
                (Some(BUILD_FAILURE_EXIT_CODE), _) => Exit::BuildFailure {
                    exit_code: self.reported_exit_code(),
                },
                (Some(SYSTEM_FAILURE_EXIT_CODE), _) => Exit::Failed(CustomError::SystemFailure {
                    stage,
                    program: exec,
                    code: SYSTEM_FAILURE_EXIT_CODE,
                }),
                (Some(code), _) => Exit::Failed(CustomError::UnknownExit {
                    stage,
                    program: exec,
                    code,
                }),
                (None, Some(signal)) => Exit::Failed(CustomError::Signal {
                    stage,
                    program: exec,
                    signal,
                }),
                (None, None) => Exit::Failed(CustomError::UnknownExit {
                    stage,
                    program: exec,
                    code: -1,
                }),
            },
            Ended::Failed(source) => Exit::Failed(CustomError::Wait {
                stage,
                program: exec,
                source,
            }),
        }
    }

    /// The job script's exit code the driver wrote into `BUILD_EXIT_CODE_FILE`, else
    /// [`BUILD_FAILURE_EXIT_CODE`].
    fn reported_exit_code(&self) -> i32 {
        std::fs::read_to_string(&self.exit_code_file)
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok())
            .filter(|&code| code != 0)
            .unwrap_or(BUILD_FAILURE_EXIT_CODE)
    }

    /// A config or prepare program, with its own timeout bounded by what is left of
    /// the job's (`remaining`).
    async fn prepare_program(
        &self,
        call: Call<'_>,
        key: &'static str,
        trace: &Trace,
        remaining: Duration,
        cancel: impl Future<Output = CancelReason>,
    ) -> Result<(), PrepareFailure> {
        let (stage, program) = (call.stage, call.program);
        let own = program.timeout <= remaining;
        let call = Call {
            timeout: program.timeout.min(remaining),
            ..call
        };
        match self.execute(call, cancel, Some(trace)).await {
            Exit::Success => Ok(()),
            Exit::BuildFailure { exit_code } => Err(PrepareFailure::Build { exit_code }),
            Exit::Failed(error) => Err(PrepareFailure::System(error)),
            Exit::TimedOut if own => Err(PrepareFailure::System(CustomError::TimedOut {
                stage: stage.to_owned(),
                program: program.exec.clone(),
                key,
                timeout: format_duration(program.timeout),
            })),
            Exit::TimedOut => Err(PrepareFailure::JobTimeout),
            Exit::Canceled(reason) => Err(PrepareFailure::Canceled(reason)),
        }
    }

    /// The config stage: runs `config_exec` (when configured) and reads its JSON; its
    /// stderr goes to the job log.
    pub async fn configure(
        &self,
        trace: &Trace,
        remaining: Duration,
        cancel: impl Future<Output = CancelReason>,
    ) -> Result<Option<DriverConfig>, PrepareFailure> {
        let Some(program) = &self.config.config else {
            return Ok(None);
        };
        let captured = Captured::with_limit(MAX_CONFIG_OUTPUT);
        let sinks = (
            Sink::Capture(Arc::clone(&captured)),
            Sink::Trace(Box::new(trace.writer(gantry_protocol::StreamKind::Stderr))),
        );
        let call = Call {
            stage: "config_exec",
            program,
            extra: &[],
            sinks,
            timeout: program.timeout,
        };
        self.prepare_program(call, "config_exec_timeout", trace, remaining, cancel)
            .await?;
        let captured = captured.lock().unwrap_or_else(PoisonError::into_inner);
        if captured.dropped > 0 {
            return Err(PrepareFailure::System(CustomError::ConfigOutput {
                program: program.exec.clone(),
                detail: format!("more than {} bytes (the limit)", MAX_CONFIG_OUTPUT),
            }));
        }
        DriverConfig::parse(&program.exec, &captured.bytes).map_err(PrepareFailure::System)
    }

    /// The prepare stage: runs `prepare_exec` (when configured), its output in the job
    /// log.
    pub async fn prepare(
        &self,
        trace: &Trace,
        remaining: Duration,
        cancel: impl Future<Output = CancelReason>,
    ) -> Result<(), PrepareFailure> {
        self.record_for_cleanup();
        let Some(program) = &self.config.prepare else {
            return Ok(());
        };
        let call = Call {
            stage: "prepare_exec",
            program,
            extra: &[],
            sinks: trace_sinks(trace),
            timeout: program.timeout,
        };
        self.prepare_program(call, "prepare_exec_timeout", trace, remaining, cancel)
            .await
    }

    /// Runs `stage` through `run_exec <run_args> <script> <stage name>`, its output in
    /// `trace`, until it ends, its timeout passes, or `cancel` completes.
    pub async fn run(
        &self,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let script = stage_script(self.shell, stage, trace);
        self.run_script(
            stage.name,
            &script,
            trace,
            stage.timeout,
            stage.detach,
            cancel,
        )
        .await
    }

    /// Reattaches to the detached `run_exec` a runner process that died left running
    /// (or ended meanwhile): see `crate::executor::shell::detached`.
    pub async fn reattach(
        &self,
        stage: &crate::journal::DetachedStage,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let (running, timeout) = match Detached::reattach_with(stage, trace, self.journal.as_ref())
        {
            Ok(reattached) => reattached,
            Err(outcome) => return outcome,
        };
        let name = driver_stage_name(&stage.place.name);
        let label = format!("run_exec ({name})");
        let exit = self
            .watch_detached(running, &label, &self.config.run, timeout, cancel)
            .await;
        clear_script(&crate::executor::shell::script_path(
            self.temp.path(),
            &stage.place.name,
        ));
        self.outcome(&stage.place.name, exit, trace, timeout)
    }

    /// Watches a detached program until it ends, `timeout` passes or `cancel` completes.
    async fn watch_detached(
        &self,
        mut running: Detached,
        label: &str,
        program: &CustomProgram,
        timeout: Duration,
        cancel: impl Future<Output = CancelReason>,
    ) -> Exit {
        let (exit, end_group) = match running.wait_until(timeout, cancel).await {
            Stop::Ended(ended) => (self.exit(label, program, ended), false),
            Stop::Timeout => {
                running.terminate(self.config.graceful_kill_timeout).await;
                (Exit::TimedOut, true)
            }
            Stop::Canceled(reason) => {
                running.terminate(self.config.graceful_kill_timeout).await;
                (Exit::Canceled(reason), true)
            }
        };
        running.finish(OUTPUT_DRAIN, end_group).await;
        exit
    }

    fn outcome(&self, stage: &str, exit: Exit, trace: &Trace, timeout: Duration) -> StageOutcome {
        match exit {
            Exit::Success => StageOutcome::Success,
            Exit::BuildFailure { exit_code } => StageOutcome::ScriptFailure { exit_code },
            Exit::Failed(error) => StageOutcome::SystemFailure {
                error: error.into(),
            },
            Exit::TimedOut => {
                warn_on_timeout(trace, stage, StageOutcome::Timeout { after: timeout })
            }
            Exit::Canceled(reason) => StageOutcome::Canceled { reason },
        }
    }

    /// gitlab-runner's `prepare_script` stage: a script printing where the job runs
    /// (`Running on <environment's host name> via <runner's host name>...`), which also
    /// shows the environment can run a script.
    pub async fn run_prepare_script(
        &self,
        runner_host: &str,
        trace: &Trace,
        timeout: Duration,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let shebang = match self.shell {
            ShellKind::Bash => "#!/usr/bin/env bash",
            ShellKind::Sh => "#!/bin/sh",
        };
        let via = crate::executor::quote(&format!(" via {runner_host}..."));
        let script = format!("{shebang}\n\necho \"Running on $(hostname)\"{via}\n");
        self.run_script("prepare_script", &script, trace, timeout, None, cancel)
            .await
    }

    async fn run_script(
        &self,
        stage: &str,
        script: &str,
        trace: &Trace,
        timeout: Duration,
        detach: Option<&crate::journal::StagePlace>,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let path = match write_stage_script(self.temp.path(), stage, script) {
            Ok(path) => path,
            Err(error) => {
                return StageOutcome::SystemFailure {
                    error: CustomError::from(error).into(),
                };
            }
        };
        let name = driver_stage_name(stage);
        let label = format!("run_exec ({name})");
        let args = [path.as_os_str(), OsStr::new(name)];
        let detach = self
            .journal
            .as_ref()
            .filter(|job| job.resumable())
            .zip(detach.cloned());
        let exit = match detach {
            Some((job, place)) => {
                let _ = std::fs::remove_file(&self.exit_code_file);
                let command = self.command(&self.config.run, &args);
                let files = crate::executor::shell::detached::stage_files(self.temp.path(), stage);
                match Detached::spawn(command.as_std(), files, place, trace, job) {
                    Ok(running) => {
                        self.watch_detached(running, &label, &self.config.run, timeout, cancel)
                            .await
                    }
                    Err(source) => Exit::Failed(CustomError::Spawn {
                        stage: label.clone(),
                        program: self.config.run.exec.clone(),
                        source,
                    }),
                }
            }
            None => {
                let call = Call {
                    stage: &label,
                    program: &self.config.run,
                    extra: &args,
                    sinks: trace_sinks(trace),
                    timeout,
                };
                self.execute(call, cancel, Some(trace)).await
            }
        };
        clear_script(&path);
        self.outcome(stage, exit, trace, timeout)
    }

    /// The cleanup stage: runs `cleanup_exec` (when configured) with its own timeout;
    /// each line of its output goes to `log` as `(stream, line)`. Its failure is the
    /// error returned (a warning in the job log; the job's result stays).
    pub async fn cleanup(&self, trace: &Trace, log: DriverLog) -> Result<(), CustomError> {
        let Some(program) = &self.config.cleanup else {
            return Ok(());
        };
        let (out, err) = (Arc::clone(&log), log);
        let sinks = (
            Sink::Lines(Box::new(move |line| out("stdout", line))),
            Sink::Lines(Box::new(move |line| err("stderr", line))),
        );
        let call = Call {
            stage: "cleanup_exec",
            program,
            extra: &[],
            sinks,
            timeout: program.timeout,
        };
        let exit = self
            .execute(call, std::future::pending(), Some(trace))
            .await;
        if let Some(job) = &self.journal {
            job.custom_cleaned();
        }
        match exit {
            Exit::Success => Ok(()),
            Exit::BuildFailure { exit_code } => Err(CustomError::UnknownExit {
                stage: "cleanup_exec".to_owned(),
                program: program.exec.clone(),
                code: exit_code,
            }),
            Exit::Failed(error) => Err(error),
            Exit::TimedOut | Exit::Canceled(_) => Err(CustomError::TimedOut {
                stage: "cleanup_exec".to_owned(),
                program: program.exec.clone(),
                key: "cleanup_exec_timeout",
                timeout: format_duration(program.timeout),
            }),
        }
    }
}

fn trace_sinks(trace: &Trace) -> (Sink, Sink) {
    (
        Sink::Trace(Box::new(trace.writer(gantry_protocol::StreamKind::Stdout))),
        Sink::Trace(Box::new(trace.writer(gantry_protocol::StreamKind::Stderr))),
    )
}

/// The stage name `run_exec` gets: gitlab-runner still passes `build_script` for
/// `step_script`, and drivers match on it.
pub fn driver_stage_name(stage: &str) -> &str {
    match stage {
        "step_script" => "build_script",
        other => other,
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_jobs_directory_without_its_environment_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let config = CustomConfig {
            run: CustomProgram {
                exec: "run".into(),
                args: Vec::new(),
                timeout: Duration::from_secs(1),
            },
            config: None,
            prepare: None,
            cleanup: None,
            graceful_kill_timeout: Duration::from_secs(1),
            force_kill_timeout: Duration::from_secs(1),
        };
        let error = CustomExecutor::after_crash(config.clone(), ShellKind::Bash, dir.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains("cleanup-environment.json"), "{error}");
        assert!(dir.path().is_dir());
        std::fs::write(dir.path().join(SAVED_ENVIRONMENT), "{not json").unwrap();
        assert!(CustomExecutor::after_crash(config.clone(), ShellKind::Bash, dir.path()).is_err());
        std::fs::write(
            dir.path().join(SAVED_ENVIRONMENT),
            r#"{"job_env": {"A": "1"}, "custom_env": [["CUSTOM_ENV_B", "2"]]}"#,
        )
        .unwrap();
        let executor = CustomExecutor::after_crash(config, ShellKind::Bash, dir.path()).unwrap();
        assert_eq!(
            executor.custom_env,
            [("CUSTOM_ENV_B".to_owned(), "2".to_owned())]
        );
        drop(executor);
        assert!(!dir.path().exists(), "removed with the executor");
    }

    #[test]
    fn config_output_reads_gitlab_runner_s_keys() {
        let json = br#"{
          "builds_dir": "/builds/7/acme-widget",
          "cache_dir": "/cache/7",
          "builds_dir_is_shared": false,
          "hostname": "vm-7",
          "driver": {"name": "test driver", "version": "v0.0.1"},
          "job_env": {"CUSTOM_ENVIRONMENT": "example"},
          "ignored": [1, 2]
        }"#;
        let config = DriverConfig::parse("/d/config", json).unwrap().unwrap();
        assert_eq!(config.builds_dir.as_deref(), Some("/builds/7/acme-widget"));
        assert_eq!(config.builds_dir_is_shared, Some(false));
        assert_eq!(
            config
                .job_env
                .unwrap()
                .get("CUSTOM_ENVIRONMENT")
                .map(String::as_str),
            Some("example")
        );
        assert_eq!(DriverConfig::parse("/d/config", b"  \n").unwrap(), None);
    }

    #[test]
    fn the_startup_line_names_the_driver_when_given() {
        let mut config = DriverConfig::default();
        assert_eq!(
            DriverConfig::startup_message(Some(&config)),
            "Using Custom executor..."
        );
        config.driver = Some(DriverInfo {
            name: Some("lxd".to_owned()),
            version: None,
        });
        assert_eq!(
            DriverConfig::startup_message(Some(&config)),
            "Using Custom executor with driver lxd..."
        );
        config.driver = Some(DriverInfo {
            name: Some("lxd".to_owned()),
            version: Some("v2".to_owned()),
        });
        assert_eq!(
            DriverConfig::startup_message(Some(&config)),
            "Using Custom executor with driver lxd v2..."
        );
        assert_eq!(
            DriverConfig::startup_message(None),
            "Using Custom executor..."
        );
    }

    #[test]
    fn bad_config_output_names_the_program_and_the_problem() {
        let cases: [(&[u8], &str); 5] = [
            (b"builds_dir=/x", "expected a JSON object"),
            (b"[1]", "expected a JSON object"),
            (
                br#"{"builds_dir": "relative/dir"}"#,
                "`builds_dir` is \"relative/dir\"; it must be an absolute path",
            ),
            (br#"{"cache_dir": ""}"#, "`cache_dir` is \"\""),
            (
                br#"{"job_env": {"A=B": "x"}}"#,
                "`job_env` has the name \"A=B\"",
            ),
        ];
        for (output, needle) in cases {
            let error = DriverConfig::parse("/d/config.sh", output)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("config_exec program `/d/config.sh`"),
                "{error}"
            );
            assert!(error.contains(needle), "{needle:?} not in {error}");
        }
        // A type mismatch says where.
        let error = DriverConfig::parse("/d/c", br#"{"builds_dir_is_shared": "yes"}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 1 column"), "{error}");
    }

    #[test]
    fn step_script_reaches_the_driver_as_build_script() {
        assert_eq!(driver_stage_name("step_script"), "build_script");
        assert_eq!(driver_stage_name("after_script"), "after_script");
        assert_eq!(driver_stage_name("step_release"), "step_release");
    }
}
