//! `runner_info` of the job payload (§3.5.3).

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;

/// `runner_info` (§3.5.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunnerInfo {
    /// Newer GitLab only; logged as `runner_uuid` (semantics unconfirmed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Effective job timeout in seconds (§9); the runner uses
    /// [`DEFAULT_JOB_TIMEOUT_SECS`] when ≤ 0.
    #[serde(deserialize_with = "zero_if_null")]
    pub timeout: i64,
    /// Interactive session URL, when the runner sent `session`.
    pub runner_session_url: Option<String>,
}

/// The job timeout gitlab-runner applies when `runner_info.timeout` ≤ 0 (§3.5.3, §9).
pub const DEFAULT_JOB_TIMEOUT_SECS: i64 = 7200;

impl RunnerInfo {
    /// The timeout the runner enforces: `timeout`, or 7200 s when it is ≤ 0.
    pub fn effective_timeout_secs(&self) -> i64 {
        if self.timeout > 0 {
            self.timeout
        } else {
            DEFAULT_JOB_TIMEOUT_SECS
        }
    }
}
