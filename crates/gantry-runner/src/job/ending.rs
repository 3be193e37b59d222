//! [`JobEnding`]: every way a job can end, and what each one tells the coordinator.

use std::fmt;
use std::time::Duration;

use gantry_protocol::{FailureReason, JobState};

use crate::config::format_duration;
use crate::executor::CiJobStatus;
use crate::journal::RecordedEnding;

/// How a job ended. Each case maps to GitLab's final `state` and `failure_reason`
/// (§4.3); [`JobEnding::Aborted`] sends nothing, the coordinator having already
/// decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEnding {
    /// Every step succeeded → `success`.
    Success,
    /// A command of a step failed → `failed`, `script_failure`, with the exit code.
    ScriptFailure {
        /// The shell's exit code (128 + n when killed by signal n).
        exit_code: i32,
    },
    /// The job (or `RUNNER_SCRIPT_TIMEOUT`) ran out of time → `failed`,
    /// `job_execution_timeout`.
    Timeout {
        /// The limit that was exceeded.
        after: Duration,
    },
    /// The coordinator asked for a graceful cancellation (`Job-Status: canceling`) →
    /// `failed`, gitlab-runner's internal `job_canceled`, sent as `unknown_failure`.
    Canceled,
    /// The runner was told to shut down (SIGTERM/SIGINT) → `failed`,
    /// `runner_interrupted` (`unknown_failure` on servers without it).
    Interrupted,
    /// The runner could not do its part (no shell, disk full, git or artifact transfer
    /// failed) → `failed`, `runner_system_failure`.
    SystemFailure {
        /// The stage that failed (`get_sources`, `upload_artifacts_on_success`, …).
        stage: &'static str,
        /// What went wrong.
        message: String,
    },
    /// An image the job needs could not be pulled (or is missing with `pull_policy:
    /// never`) → `failed`, `image_pull_failure` (`runner_system_failure` on servers
    /// without it).
    ImagePullFailure {
        /// What went wrong, naming the image and the policies.
        message: String,
    },
    /// The job asks for something this runner's configuration cannot give (an unknown
    /// `GIT_STRATEGY`, a bad cache policy) → `failed`, `runner_configuration_error`
    /// (`script_failure` on servers without it).
    ConfigurationError {
        /// What is wrong.
        message: String,
    },
    /// The job needs a feature this runner lacks (CI Steps `run:`) → `failed`,
    /// `runner_unsupported`.
    Unsupported {
        /// What is missing.
        message: String,
    },
    /// A service the job needs failed (a secrets provider's 5xx) → `failed`,
    /// `runner_external_dependency_failure` (`runner_system_failure` on servers without
    /// it).
    ExternalDependencyFailure {
        /// What went wrong.
        message: String,
    },
    /// The coordinator no longer wants the job (`403`, `Job-Status: canceled`/`failed`,
    /// `404`): everything was stopped at once and no final update is sent.
    Aborted,
}

/// The stage names a [`JobEnding::SystemFailure`] may carry, for reading one back from
/// a job record.
const STAGES: &[&str] = &[
    "resolve_secrets",
    "prepare_executor",
    "prepare_script",
    "get_sources",
    "restore_cache",
    "download_artifacts",
    "step_script",
    "step_release",
    "step_run",
    "after_script",
    "archive_cache",
    "upload_artifacts_on_success",
    "upload_artifacts_on_failure",
    "config_exec",
    "prepare_exec",
    "cleanup_exec",
];

impl JobEnding {
    /// The ending as a job record keeps it (`None` for [`JobEnding::Aborted`]).
    pub(crate) fn to_record(&self) -> Option<RecordedEnding> {
        Some(match self {
            Self::Success => RecordedEnding::Success,
            Self::ScriptFailure { exit_code } => RecordedEnding::ScriptFailure {
                exit_code: *exit_code,
            },
            Self::Timeout { after } => RecordedEnding::Timeout {
                after_secs: after.as_secs(),
            },
            Self::Canceled => RecordedEnding::Canceled,
            Self::Interrupted => RecordedEnding::Interrupted,
            Self::SystemFailure { stage, message } => RecordedEnding::SystemFailure {
                stage: (*stage).to_owned(),
                message: message.clone(),
            },
            Self::ImagePullFailure { message } => RecordedEnding::ImagePullFailure {
                message: message.clone(),
            },
            Self::ConfigurationError { message } => RecordedEnding::ConfigurationError {
                message: message.clone(),
            },
            Self::Unsupported { message } => RecordedEnding::Unsupported {
                message: message.clone(),
            },
            Self::ExternalDependencyFailure { message } => {
                RecordedEnding::ExternalDependencyFailure {
                    message: message.clone(),
                }
            }
            Self::Aborted => return None,
        })
    }

    /// The ending a job record kept.
    pub(crate) fn from_record(record: &RecordedEnding) -> Self {
        match record {
            RecordedEnding::Success => Self::Success,
            RecordedEnding::ScriptFailure { exit_code } => Self::ScriptFailure {
                exit_code: *exit_code,
            },
            RecordedEnding::Timeout { after_secs } => Self::Timeout {
                after: Duration::from_secs(*after_secs),
            },
            RecordedEnding::Canceled => Self::Canceled,
            RecordedEnding::Interrupted => Self::Interrupted,
            RecordedEnding::SystemFailure { stage, message } => Self::SystemFailure {
                stage: STAGES
                    .iter()
                    .find(|name| **name == stage.as_str())
                    .copied()
                    .unwrap_or("step_script"),
                message: message.clone(),
            },
            RecordedEnding::ImagePullFailure { message } => Self::ImagePullFailure {
                message: message.clone(),
            },
            RecordedEnding::ConfigurationError { message } => Self::ConfigurationError {
                message: message.clone(),
            },
            RecordedEnding::Unsupported { message } => Self::Unsupported {
                message: message.clone(),
            },
            RecordedEnding::ExternalDependencyFailure { message } => {
                Self::ExternalDependencyFailure {
                    message: message.clone(),
                }
            }
        }
    }

    /// Whether the job succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Success)
    }

    /// The final `state` to send; `None` for [`JobEnding::Aborted`].
    pub fn state(&self) -> Option<JobState> {
        match self {
            Self::Success => Some(JobState::Success),
            Self::Aborted => None,
            _ => Some(JobState::Failed),
        }
    }

    /// GitLab's `failure_reason` before negotiation with the server's list (§4.3).
    pub fn failure_reason(&self) -> Option<FailureReason> {
        match self {
            Self::Success | Self::Aborted => None,
            Self::ScriptFailure { .. } => Some(FailureReason::ScriptFailure),
            Self::Timeout { .. } => Some(FailureReason::JobExecutionTimeout),
            Self::Canceled => Some(FailureReason::UnknownFailure),
            Self::Interrupted => Some(FailureReason::RunnerInterrupted),
            Self::SystemFailure { .. } => Some(FailureReason::RunnerSystemFailure),
            Self::ImagePullFailure { .. } => Some(FailureReason::ImagePullFailure),
            Self::ConfigurationError { .. } => Some(FailureReason::RunnerConfigurationError),
            Self::Unsupported { .. } => Some(FailureReason::RunnerUnsupported),
            Self::ExternalDependencyFailure { .. } => {
                Some(FailureReason::RunnerExternalDependencyFailure)
            }
        }
    }

    /// The script's exit code, sent as `exit_code` (omitted when 0).
    pub fn exit_code(&self) -> Option<i32> {
        match self {
            Self::ScriptFailure { exit_code } => Some(*exit_code),
            _ => None,
        }
    }

    /// The `CI_JOB_STATUS` `after_script` sees after this ending.
    pub fn ci_job_status(&self) -> CiJobStatus {
        match self {
            Self::Success => CiJobStatus::Success,
            Self::Canceled | Self::Interrupted | Self::Aborted => CiJobStatus::Canceled,
            _ => CiJobStatus::Failed,
        }
    }
}

impl fmt::Display for JobEnding {
    /// The end of gitlab-runner's last log line: `Job succeeded`, or what follows
    /// `ERROR: Job failed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Success => f.write_str("succeeded"),
            Self::ScriptFailure { exit_code } => write!(f, "exit code {exit_code}"),
            Self::Timeout { after } => write!(
                f,
                "execution took longer than {} seconds",
                format_duration(*after)
            ),
            Self::Canceled => f.write_str("canceled"),
            Self::Interrupted => f.write_str("the runner was interrupted (shutting down)"),
            Self::SystemFailure { stage, message } => {
                write!(f, "system failure in {stage}: {message}")
            }
            Self::ImagePullFailure { message } => write!(f, "image pull failure: {message}"),
            Self::ConfigurationError { message } => {
                write!(f, "runner configuration error: {message}")
            }
            Self::Unsupported { message } => write!(f, "unsupported by this runner: {message}"),
            Self::ExternalDependencyFailure { message } => {
                write!(f, "external dependency failure: {message}")
            }
            Self::Aborted => f.write_str("aborted by the coordinator"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endings_survive_a_job_record() {
        let endings = [
            JobEnding::Success,
            JobEnding::ScriptFailure { exit_code: 3 },
            JobEnding::Timeout {
                after: Duration::from_secs(90),
            },
            JobEnding::Canceled,
            JobEnding::Interrupted,
            JobEnding::SystemFailure {
                stage: "download_artifacts",
                message: "gone".into(),
            },
            JobEnding::ImagePullFailure {
                message: "m".into(),
            },
            JobEnding::ConfigurationError {
                message: "c".into(),
            },
            JobEnding::Unsupported {
                message: "u".into(),
            },
            JobEnding::ExternalDependencyFailure {
                message: "e".into(),
            },
            JobEnding::SystemFailure {
                stage: "resolve_secrets",
                message: "s".into(),
            },
        ];
        for ending in endings {
            let record = ending.to_record().unwrap();
            let json = serde_json::to_string(&record).unwrap();
            let back: RecordedEnding = serde_json::from_str(&json).unwrap();
            assert_eq!(JobEnding::from_record(&back), ending, "{json}");
        }
        assert_eq!(JobEnding::Aborted.to_record(), None);
    }

    #[test]
    fn endings_map_to_failure_reasons() {
        let cases = [
            (JobEnding::Success, None, Some(JobState::Success)),
            (
                JobEnding::ScriptFailure { exit_code: 3 },
                Some(FailureReason::ScriptFailure),
                Some(JobState::Failed),
            ),
            (
                JobEnding::Timeout {
                    after: Duration::from_secs(60),
                },
                Some(FailureReason::JobExecutionTimeout),
                Some(JobState::Failed),
            ),
            (
                JobEnding::Canceled,
                Some(FailureReason::UnknownFailure),
                Some(JobState::Failed),
            ),
            (
                JobEnding::Interrupted,
                Some(FailureReason::RunnerInterrupted),
                Some(JobState::Failed),
            ),
            (JobEnding::Aborted, None, None),
        ];
        for (ending, reason, state) in cases {
            assert_eq!(ending.failure_reason(), reason, "{ending:?}");
            assert_eq!(ending.state(), state, "{ending:?}");
        }
        assert_eq!(
            JobEnding::Timeout {
                after: Duration::from_secs(3600)
            }
            .to_string(),
            "execution took longer than 1h0m0s seconds"
        );
        assert_eq!(JobEnding::Canceled.ci_job_status(), CiJobStatus::Canceled);
        assert_eq!(
            JobEnding::ScriptFailure { exit_code: 1 }.ci_job_status(),
            CiJobStatus::Failed
        );
    }
}
