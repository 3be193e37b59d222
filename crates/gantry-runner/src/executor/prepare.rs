//! The `prepare_executor` seam: what the job lifecycle hands an executor to prepare
//! itself ([`Preparation`]), what comes back ([`Prepared`]) and how preparing fails
//! ([`PrepareError`]). Each executor prepares itself in its own module — `shell`,
//! `docker`, `custom`, `instance`, `docker_autoscaler`, each with `prepare` (a new job)
//! and `resume` (a job a restarted runner takes over) — and the lifecycle knows none
//! of them: it calls [`Executor::prepare`] or [`Executor::resume`] with the job's
//! executor kind.
//!
//! # Moving the job
//!
//! Two executors move the job's directories while preparing: the instance executor
//! runs it under `$HOME/builds` on a fleet instance, and the custom driver's
//! `config_exec` may name another builds directory, layout and cache directory. The
//! executor asks the lifecycle's [`Placer`] where the directories and the variables
//! that name them (`CI_PROJECT_DIR`, …) then are, and returns the new place as
//! [`Placed`], which the lifecycle adopts. A move that would change a masked
//! variable's value is refused ([`Preparation::move_to`]): the log is masked with the
//! value the job started with.
//!
//! # Stopping
//!
//! Every wait of a preparation (the fleet's acquisition, SSH, the Docker engine, the
//! custom driver's programs) ends at the job's deadline ([`PrepareError::Timeout`]) or
//! when the job is canceled or the runner stops ([`PrepareError::Canceled`]), through
//! [`Preparation::guarded`] or the driver's own cancel handling.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use gantry_protocol::{JobResponse, JobVariable};
use tokio::time::Instant;

use super::{CancelReason, Executor};
use crate::config::{ExecutorKind, RunnerConfig, short_token};
use crate::dirs::{BuildDirs, Layout};
use crate::fleet::FleetLease;
use crate::journal::RunningJob;
use crate::trace::Trace;

/// A future that completes when the job is canceled or the runner stops.
pub(crate) type CancelFuture = Pin<Box<dyn Future<Output = CancelReason> + Send>>;

/// Makes a [`CancelFuture`] each time it is called.
pub(crate) type CancelSource = Arc<dyn Fn() -> CancelFuture + Send + Sync>;

/// Where the custom driver's `cleanup_exec` output goes: `(stream, line)`.
pub type DriverLog = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// Everything an executor needs from the job to prepare itself.
pub(crate) struct Preparation<'a> {
    /// The `[[runners]]` entry.
    pub runner: &'a RunnerConfig,
    /// The job's payload.
    pub job: &'a JobResponse,
    /// The job's log.
    pub trace: &'a Trace,
    /// The job's directories where the job starts.
    pub dirs: &'a BuildDirs,
    /// The job's expanded variables for those directories.
    pub variables: &'a [JobVariable],
    /// The local cache's base directory.
    pub cache_dir: &'a Path,
    /// Time between SIGTERM and SIGKILL when a stage is stopped.
    pub kill_grace: Duration,
    /// Run the shell executor's stages in a login shell.
    pub login_shell: bool,
    /// The job's record in the runner's journal (`None`: not kept, as in `gantry run`).
    pub journal: Option<&'a Arc<RunningJob>>,
    /// The entry's fleet and this job's reservation (the executors on fleet instances).
    pub fleet: Option<&'a FleetLease>,
    /// When the job's time is up.
    pub deadline: Instant,
    /// Makes a future that completes when the job is canceled or the runner stops.
    pub cancel: CancelSource,
    /// Where the job goes when the executor moves it.
    pub placer: &'a dyn Placer,
    /// Where the custom driver's cleanup output goes (a failed try's cleanup).
    pub driver_log: DriverLog,
}

/// The job's directories and variables for a place an executor moves it to; the
/// lifecycle's placement implements it.
pub(crate) trait Placer: Send + Sync {
    /// The job's directories under `builds_dir` laid out as `layout`, moved to its
    /// `GIT_CLONE_PATH` where it sets one, and its variables for them. `Err` says why
    /// the job cannot run there (its `GIT_CLONE_PATH` is not allowed or not below the
    /// builds directory).
    fn place(
        &self,
        builds_dir: &Path,
        layout: Layout,
    ) -> Result<(BuildDirs, Vec<JobVariable>), String>;

    /// The job's variables for `dirs` (`CI_BUILDS_DIR`, `CI_PROJECT_DIR`, …).
    fn variables(&self, dirs: &BuildDirs) -> Vec<JobVariable>;
}

/// Where an executor moved the job.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    /// The job's directories.
    pub dirs: BuildDirs,
    /// The job's variables for them.
    pub variables: Vec<JobVariable>,
    /// The local cache's base directory.
    pub cache_dir: PathBuf,
}

/// A masked variable whose value a move would change (it names the job's
/// directories): the log is masked with the old value, so the move is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnmaskableVariable(pub String);

/// What preparing an executor gave.
pub(crate) struct Prepared {
    /// The executor, kept even when preparing it failed afterwards: what it made
    /// (containers, the driver's environment, an instance) is released by its cleanup.
    /// `None` when nothing was made.
    pub executor: Option<Executor>,
    /// Where the executor moved the job (`None`: where it was).
    pub placed: Option<Placed>,
    /// Whether the executor is ready.
    pub result: Result<(), PrepareError>,
}

impl Prepared {
    /// A ready executor.
    pub(crate) fn ready(executor: Executor) -> Self {
        Self {
            executor: Some(executor),
            placed: None,
            result: Ok(()),
        }
    }

    /// A failure before anything was made.
    pub(crate) fn failed(error: PrepareError) -> Self {
        Self {
            executor: None,
            placed: None,
            result: Err(error),
        }
    }

    /// An executor and how preparing it ended.
    pub(crate) fn made(executor: Executor, result: Result<(), PrepareError>) -> Self {
        Self {
            executor: Some(executor),
            placed: None,
            result,
        }
    }

    /// The same, with the job moved to `placed`.
    pub(crate) fn moved(mut self, placed: Option<Placed>) -> Self {
        self.placed = placed;
        self
    }
}

/// How preparing an executor failed; the lifecycle turns it into the job's ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PrepareError {
    /// The environment failed (`runner_system_failure`).
    System(String),
    /// The job cannot run with the runner's configuration
    /// (`runner_configuration_error`).
    Configuration(String),
    /// The job's image could not be pulled (`image_pull_failure`).
    ImagePull(String),
    /// The custom driver said the build failed (`BUILD_FAILURE_EXIT_CODE`): the job
    /// fails as its script would.
    Build {
        /// The exit code the driver reported.
        exit_code: i32,
    },
    /// The job's time was up.
    Timeout,
    /// The job was canceled or the runner is stopping.
    Canceled(CancelReason),
}

impl From<super::docker::DockerError> for PrepareError {
    /// A pull failure is `image_pull_failure`, a refusal by the configuration
    /// `runner_configuration_error`, anything else `runner_system_failure`.
    fn from(error: super::docker::DockerError) -> Self {
        if error.is_pull_failure() {
            Self::ImagePull(error.to_string())
        } else if error.is_configuration() {
            Self::Configuration(error.to_string())
        } else {
            Self::System(error.to_string())
        }
    }
}

impl Preparation<'_> {
    /// Runs `work` until it ends, the job's deadline passes, or the job is stopped.
    pub(crate) async fn guarded<T>(
        &self,
        work: impl Future<Output = Result<T, PrepareError>>,
    ) -> Result<T, PrepareError> {
        tokio::select! {
            result = work => result,
            () = tokio::time::sleep_until(self.deadline) => Err(PrepareError::Timeout),
            reason = (self.cancel)() => Err(PrepareError::Canceled(reason)),
        }
    }

    /// The time left before the job's deadline.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The entry's short token (names of what the executors make).
    pub(crate) fn short_token(&self) -> String {
        short_token(&self.runner.token)
    }

    /// The job's record, when a restarted runner could take the job over.
    pub(crate) fn resumable(&self) -> Option<&Arc<RunningJob>> {
        self.journal.filter(|job| job.resumable())
    }

    /// The job moved to `dirs` with `variables`, refused when a masked variable's
    /// value would change.
    pub(crate) fn move_to(
        &self,
        dirs: BuildDirs,
        variables: Vec<JobVariable>,
        cache_dir: PathBuf,
    ) -> Result<Placed, UnmaskableVariable> {
        for variable in variables.iter().filter(|v| v.masked) {
            if super::variable(self.variables, &variable.key) != Some(variable.value.as_str()) {
                return Err(UnmaskableVariable(variable.key.clone()));
            }
        }
        Ok(Placed {
            dirs,
            variables,
            cache_dir,
        })
    }
}

impl Executor {
    /// Prepares the executor of `kind` for a new job.
    pub(crate) async fn prepare(kind: ExecutorKind, prep: &Preparation<'_>) -> Prepared {
        match kind {
            ExecutorKind::Shell => super::shell::prepare(prep),
            ExecutorKind::Docker => super::docker::prepare(prep).await,
            ExecutorKind::Custom => super::custom::prepare(prep).await,
            ExecutorKind::Instance => super::instance::prepare(prep).await,
            ExecutorKind::DockerAutoscaler => super::docker_autoscaler::prepare(prep).await,
        }
    }

    /// The executor of `kind` of a job a runner process that died left, for the stages
    /// still to run: what it had made (containers, the driver's environment, the
    /// instance) is found again through the job's record.
    pub(crate) async fn resume(kind: ExecutorKind, prep: &Preparation<'_>) -> Prepared {
        match kind {
            ExecutorKind::Shell => super::shell::resume(prep),
            ExecutorKind::Docker => super::docker::resume(prep).await,
            ExecutorKind::Custom => super::custom::resume(prep),
            ExecutorKind::Instance => super::instance::prepare(prep).await,
            ExecutorKind::DockerAutoscaler => super::docker_autoscaler::resume(prep).await,
        }
    }
}
