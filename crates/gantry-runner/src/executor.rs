//! `Executor`: where a job's scripts run, chosen per job. The job lifecycle asks the
//! executor of the job's kind to prepare itself in `prepare_executor`
//! (`Executor::prepare`, `Executor::resume` for a job taken over; the seam is in
//! the `prepare` submodule), runs every script stage through `Executor::run` (hooks,
//! `step_script`, `after_script`; `Executor::reattach` for a detached stage a dead
//! runner left) and calls `Executor::cleanup` at the end, whatever happened. It
//! knows no executor's internals. Everything else (sources, cache, artifacts) the
//! lifecycle does on the host, for every executor.
//!
//! | executor | chosen when | stages run |
//! |---|---|---|
//! | shell | `executor = "shell"`; or `"docker"` with `shell_without_image = true` and a job without `image:` | in bash (or sh) on this machine, one process group per stage |
//! | docker | `executor = "docker"` | in the job's build container, made from its image once and started again per stage ([`crate::executor::docker`]) |
//! | custom | `executor = "custom"` | by the `[runners.custom]` driver's `run_exec`, in the environment its `prepare_exec` made ([`crate::executor::custom`]) |
//! | instance | `executor = "instance"` | over SSH on an instance of the `[runners.autoscaler]` fleet, the build directory moved there and back ([`crate::executor::instance`]) |
//! | docker-autoscaler | `executor = "docker-autoscaler"` | in the job's build container on the Docker engine of an instance of the fleet, reached through the SSH session; the build directory moved as for `instance` ([`crate::executor::docker_autoscaler`]) |

pub mod custom;
pub mod docker;
pub mod docker_autoscaler;
pub mod instance;
pub(crate) mod prepare;
mod quote;
pub mod shell;
mod stage;
mod variables;

pub use prepare::DriverLog;
pub(crate) use prepare::{CancelSource, Placer, Preparation, PrepareError, Prepared};
pub use quote::{is_variable_name, quote};
pub use stage::{CancelReason, CiJobStatus, DEFAULT_KILL_GRACE, Stage, StageError, StageOutcome};
pub use variables::{PreparedVariables, prepare_variables, prepare_variables_seen_at};
pub(crate) use variables::{variable, variable_flag};

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use gantry_protocol::JobResponse;

use self::custom::CustomExecutor;
use self::docker::DockerExecutor;
use self::docker_autoscaler::DockerAutoscalerExecutor;
use self::instance::InstanceExecutor;
use self::shell::ShellExecutor;
use crate::config::{ExecutorKind, RunnerConfig};
use crate::journal::{DetachedStage, RunningJob};
use crate::trace::Trace;

/// Which executor runs a job: the entry's, except a Docker entry with
/// `shell_without_image = true` runs a job without `image:` in the shell.
impl ExecutorKind {
    /// The executor for `job` on `runner`: its `executor`, except that a Docker entry
    /// with `shell_without_image = true` runs jobs without `image:` in the shell.
    pub fn for_job(runner: &RunnerConfig, job: &JobResponse) -> Self {
        match runner.executor {
            ExecutorKind::Docker => {
                let has_image = job
                    .image
                    .as_ref()
                    .is_some_and(|image| !image.name.trim().is_empty());
                let shell_without_image = runner
                    .docker
                    .as_ref()
                    .is_some_and(|d| d.shell_without_image);
                if !has_image && shell_without_image {
                    Self::Shell
                } else {
                    Self::Docker
                }
            }
            other => other,
        }
    }

    /// gitlab-runner's `FeaturesInfo.Shared`: the job runs where other jobs ran and will
    /// run (shell, custom, instance) — `CI_SHARED_ENVIRONMENT=true` — rather than in
    /// something made for it alone (`CI_DISPOSABLE_ENVIRONMENT=true`).
    pub fn is_shared(self) -> bool {
        matches!(self, Self::Shell | Self::Custom | Self::Instance)
    }
}

/// A prepared executor of one job.
pub(crate) enum Executor {
    Shell(ShellExecutor),
    Docker(Box<DockerExecutor>),
    Custom(Box<CustomExecutor>),
    Instance(Box<InstanceExecutor>),
    DockerAutoscaler(Box<DockerAutoscalerExecutor>),
}

impl Executor {
    /// Runs `stage` until it ends, its timeout passes, or `cancel` completes; all its
    /// output is in `trace` when this returns.
    pub(crate) async fn run(
        &self,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        match self {
            Self::Shell(shell) => shell.run(stage, trace, cancel).await,
            Self::Docker(docker) => docker.run(stage, trace, cancel).await,
            Self::Custom(custom) => custom.run(stage, trace, cancel).await,
            Self::Instance(instance) => instance.run(stage, trace, cancel).await,
            Self::DockerAutoscaler(docker) => docker.run(stage, trace, cancel).await,
        }
    }

    /// Watches again the detached stage `detached` a runner process that died left
    /// running (`stage`: how it was started), until it ends as [`Executor::run`] would.
    pub(crate) async fn reattach(
        &self,
        detached: &DetachedStage,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        match self {
            Self::Shell(shell) => shell.reattach(detached, trace, cancel).await,
            Self::Custom(custom) => custom.reattach(detached, trace, cancel).await,
            Self::Docker(docker) => docker.reattach(detached, stage, trace, cancel).await,
            Self::Instance(instance) => instance.reattach(detached, stage, trace, cancel).await,
            Self::DockerAutoscaler(docker) => docker.reattach(detached, stage, trace, cancel).await,
        }
    }

    /// Whether the executor's environment says where the job runs in the
    /// `prepare_script` stage ([`Executor::prepare_script`]: the custom driver's does);
    /// for the others the lifecycle names this machine.
    pub(crate) fn names_its_host(&self) -> bool {
        matches!(self, Self::Custom(_))
    }

    /// The executor's part of gitlab-runner's `prepare_script` stage: the custom
    /// driver's environment runs a script printing where it is (`Running on <its host>
    /// via <runner_host>...`), which also shows it can run a script at all; the others
    /// have nothing to do.
    pub(crate) async fn prepare_script(
        &self,
        runner_host: &str,
        trace: &Trace,
        timeout: std::time::Duration,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        match self {
            Self::Custom(custom) => {
                custom
                    .run_prepare_script(runner_host, trace, timeout, cancel)
                    .await
            }
            Self::Shell(_) | Self::Docker(_) | Self::Instance(_) | Self::DockerAutoscaler(_) => {
                StageOutcome::Success
            }
        }
    }

    /// Releases what a job taken over before its script had made at its first start
    /// (the Docker executor's containers), as the job starts again from the beginning.
    pub(crate) async fn forget_first_start(
        runner: &RunnerConfig,
        journal: Option<&Arc<RunningJob>>,
        trace: &Trace,
    ) {
        docker::forget_first_start(runner, journal, trace).await;
    }

    /// Makes the build directory here current before the runner works on it (cache,
    /// artifacts): the executors on fleet instances bring back what their stages
    /// changed. The others run where the directory is.
    pub(crate) async fn to_host(&self) -> Result<(), instance::InstanceError> {
        match self {
            Self::Instance(instance) => instance.to_host().await,
            Self::DockerAutoscaler(docker) => docker.to_host().await,
            Self::Shell(_) | Self::Docker(_) | Self::Custom(_) => Ok(()),
        }
    }

    /// Readies a fresh checkout for the executor's stages. The Docker executor gives it
    /// the modes gitlab-runner's helper leaves (it fetches with umask 0000), so whatever
    /// user the image runs as can write it.
    pub(crate) fn prepare_checkout(&self, project_dir: &Path) -> std::io::Result<()> {
        match self {
            Self::Shell(_) | Self::Custom(_) | Self::Instance(_) => Ok(()),
            Self::Docker(_) | Self::DockerAutoscaler(_) => {
                crate::executor::docker::share_owner_bits(project_dir)
            }
        }
    }

    /// Releases what the executor created (containers, networks, volumes; the custom
    /// driver's environment, whose cleanup output goes to `driver_log` as `(stream,
    /// line)`); problems become warnings in the log.
    pub(crate) async fn cleanup(&self, trace: &Trace, driver_log: DriverLog) {
        match self {
            Self::Shell(_) => {}
            Self::Instance(instance) => instance.cleanup(trace).await,
            Self::DockerAutoscaler(docker) => docker.cleanup(trace).await,
            Self::Custom(custom) => {
                if let Err(error) = custom.cleanup(trace, driver_log).await {
                    trace.warning(&format!("Cleanup script failed: {error}"));
                }
            }
            Self::Docker(docker) => docker.cleanup_logged(trace).await,
        }
    }
}
