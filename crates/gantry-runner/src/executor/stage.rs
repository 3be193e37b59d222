//! The stage vocabulary every executor speaks: a [`Stage`] to run (its commands,
//! variables, directory, timeout), how it ended ([`StageOutcome`], which maps to GitLab's
//! `failure_reason` and to the `CI_JOB_STATUS` the next stage sees), why an executor could
//! not run it ([`StageError`]) and why it was stopped from outside ([`CancelReason`]).

use std::fmt;
use std::path::Path;
use std::time::Duration;

use gantry_protocol::FailureReason;

/// Default time between SIGTERM and SIGKILL when a stage is stopped.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(10);

use super::shell::ShellError;
use super::variables::PreparedVariables;

/// Why a running stage was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The job was canceled (GitLab said `canceled`/`canceling`, §4.5).
    JobCanceled,
    /// The runner is shutting down (SIGTERM/SIGINT to the runner).
    RunnerInterrupted,
}

/// How a stage ended.
#[derive(Debug)]
pub enum StageOutcome {
    /// Every command succeeded.
    Success,
    /// A command failed; the shell exited with this code (128 + n when killed by
    /// signal n).
    ScriptFailure {
        /// Exit code.
        exit_code: i32,
    },
    /// The stage ran past its timeout and was killed.
    Timeout {
        /// The timeout.
        after: Duration,
    },
    /// The stage was stopped from outside and killed.
    Canceled {
        /// Why.
        reason: CancelReason,
    },
    /// The stage could not be run (no shell, disk full, the Docker engine failed, …).
    SystemFailure {
        /// What went wrong.
        error: StageError,
    },
}

/// Why an executor could not run a stage.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The shell executor's problem.
    #[error(transparent)]
    Shell(#[from] ShellError),
    /// The Docker executor's problem.
    #[error(transparent)]
    Docker(#[from] crate::executor::docker::DockerError),
    /// The custom executor's problem (its driver failed, or could not be run).
    #[error(transparent)]
    Custom(#[from] crate::executor::custom::CustomError),
    /// The instance executor's problem (SSH, a lost instance).
    #[error(transparent)]
    Instance(#[from] crate::executor::instance::InstanceError),
}

impl StageOutcome {
    /// Whether every command succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Success)
    }

    /// The shell's exit code, when a command failed.
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Self::ScriptFailure { exit_code } => Some(*exit_code),
            _ => None,
        }
    }

    /// GitLab's `failure_reason` (§4.3) before negotiation with the server's list;
    /// `None` on success. A canceled job is gitlab-runner's internal `job_canceled`,
    /// which is sent as `unknown_failure`.
    pub fn failure_reason(&self) -> Option<FailureReason> {
        match self {
            Self::Success => None,
            Self::ScriptFailure { .. } => Some(FailureReason::ScriptFailure),
            Self::Timeout { .. } => Some(FailureReason::JobExecutionTimeout),
            Self::Canceled {
                reason: CancelReason::JobCanceled,
            } => Some(FailureReason::UnknownFailure),
            Self::Canceled {
                reason: CancelReason::RunnerInterrupted,
            } => Some(FailureReason::RunnerInterrupted),
            Self::SystemFailure { .. } => Some(FailureReason::RunnerSystemFailure),
        }
    }

    /// The `CI_JOB_STATUS` the following `after_script` sees.
    pub fn ci_job_status(&self) -> CiJobStatus {
        match self {
            Self::Success => CiJobStatus::Success,
            Self::Canceled { .. } => CiJobStatus::Canceled,
            Self::ScriptFailure { .. } | Self::Timeout { .. } | Self::SystemFailure { .. } => {
                CiJobStatus::Failed
            }
        }
    }
}

/// `CI_JOB_STATUS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CiJobStatus {
    /// During `before_script` and `script`.
    Running,
    /// `after_script` after a successful script.
    Success,
    /// `after_script` after a failed (or timed-out) script.
    Failed,
    /// `after_script` after a graceful cancellation.
    Canceled,
}

impl CiJobStatus {
    /// The value of the variable.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Success => "success",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }
}

impl fmt::Display for CiJobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One stage to run.
#[derive(Debug, Clone, Copy)]
pub struct Stage<'a> {
    /// Stage name (`step_script`, `after_script`): names the script file and messages.
    pub name: &'a str,
    /// Commands, in order.
    pub commands: &'a [String],
    /// Variables to export.
    pub variables: &'a PreparedVariables,
    /// Directory the commands run in (must exist).
    pub work_dir: &'a Path,
    /// Time the stage may take.
    pub timeout: Duration,
    /// `CI_JOB_STATUS` for this stage.
    pub job_status: CiJobStatus,
    /// Print each command (`$ make test`) before running it, as job scripts do; off for
    /// the programs of `run:` steps, which the step runner announces itself.
    pub echo: bool,
    /// Run detached from the runner process, as this place of the job, when the job's
    /// record lets a restarted runner take it over (the shell executor only; see
    /// `super::shell::detached`).
    pub detach: Option<&'a crate::journal::StagePlace>,
    /// The job's resource meter; `None`: not measured.
    pub meter: Option<&'a crate::resources::JobMeter>,
}
