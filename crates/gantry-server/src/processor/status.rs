//! Statuses and their groups (spec §5.1, GitLab `Ci::HasStatus`).
//!
//! Jobs, stages and pipelines share one set of status values, as in GitLab: a stage or a
//! pipeline status is the COMPOSITE of its jobs ([`super::composite`]) and can be any of
//! them. [`JobStatus`] and [`PipelineStatus`] are therefore the same type; the aliases
//! only say which one a signature means.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A job, stage or pipeline status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Persisted, not yet processed (waiting for earlier stages or needs).
    Created,
    /// Processed; waits for its `resource_group`.
    WaitingForResource,
    /// Processed; waits for prerequisites (never produced by this processor).
    Preparing,
    /// Waits for an external callback (never produced by this processor).
    WaitingForCallback,
    /// Queued for a runner.
    Pending,
    /// A runner is executing it.
    Running,
    Success,
    Failed,
    /// Cancel requested on a runner that cancels gracefully (`after_script` still runs).
    Canceling,
    Canceled,
    Skipped,
    /// A manual job waiting to be played.
    Manual,
    /// A delayed job waiting for its `scheduled_at`.
    Scheduled,
}

/// The status of a job.
pub type JobStatus = Status;
/// The status of a pipeline (or of a stage): the COMPOSITE of its jobs.
pub type PipelineStatus = Status;

impl Status {
    /// Every status, in GitLab's declaration order.
    pub const ALL: [Status; 13] = [
        Status::Created,
        Status::WaitingForResource,
        Status::Preparing,
        Status::WaitingForCallback,
        Status::Pending,
        Status::Running,
        Status::Success,
        Status::Failed,
        Status::Canceling,
        Status::Canceled,
        Status::Skipped,
        Status::Manual,
        Status::Scheduled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::WaitingForResource => "waiting_for_resource",
            Status::Preparing => "preparing",
            Status::WaitingForCallback => "waiting_for_callback",
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Success => "success",
            Status::Failed => "failed",
            Status::Canceling => "canceling",
            Status::Canceled => "canceled",
            Status::Skipped => "skipped",
            Status::Manual => "manual",
            Status::Scheduled => "scheduled",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// ACTIVE = {waiting_for_resource, preparing, waiting_for_callback, pending, running}.
    pub fn is_active(self) -> bool {
        match self {
            Status::WaitingForResource
            | Status::Preparing
            | Status::WaitingForCallback
            | Status::Pending
            | Status::Running => true,
            Status::Created
            | Status::Success
            | Status::Failed
            | Status::Canceling
            | Status::Canceled
            | Status::Skipped
            | Status::Manual
            | Status::Scheduled => false,
        }
    }

    /// Moves on without a user's action: ACTIVE ∪ {canceling, scheduled} (a `created` job
    /// waits for other jobs, a `manual` one for a user). `gantry run` runs while one is.
    pub fn is_underway(self) -> bool {
        self.is_active() || matches!(self, Status::Canceling | Status::Scheduled)
    }

    /// COMPLETED = {success, failed, canceled, skipped}.
    pub fn is_completed(self) -> bool {
        match self {
            Status::Success | Status::Failed | Status::Canceled | Status::Skipped => true,
            Status::Created
            | Status::WaitingForResource
            | Status::Preparing
            | Status::WaitingForCallback
            | Status::Pending
            | Status::Running
            | Status::Canceling
            | Status::Manual
            | Status::Scheduled => false,
        }
    }

    /// BLOCKED = {manual, scheduled}.
    pub fn is_blocked(self) -> bool {
        matches!(self, Status::Manual | Status::Scheduled)
    }

    /// STOPPED = COMPLETED ∪ BLOCKED.
    pub fn is_stopped(self) -> bool {
        self.is_completed() || self.is_blocked()
    }

    /// CANCELABLE = {created, waiting_for_resource, preparing, waiting_for_callback, pending,
    /// running, scheduled}. (`manual` jobs can be canceled too, see [`Status::accepts_cancel`].)
    pub fn is_cancelable(self) -> bool {
        match self {
            Status::Created
            | Status::WaitingForResource
            | Status::Preparing
            | Status::WaitingForCallback
            | Status::Pending
            | Status::Running
            | Status::Scheduled => true,
            Status::Success
            | Status::Failed
            | Status::Canceling
            | Status::Canceled
            | Status::Skipped
            | Status::Manual => false,
        }
    }

    /// The `cancel` event applies: CANCELABLE ∪ {manual} (§5.2).
    pub fn accepts_cancel(self) -> bool {
        self.is_cancelable() || self == Status::Manual
    }

    /// EXECUTING = {running, canceling}.
    pub fn is_executing(self) -> bool {
        matches!(self, Status::Running | Status::Canceling)
    }

    /// A job in this status may be retried (GitLab `retryable?`: success, failed, canceled,
    /// canceling; the caller also checks that the job is its name's latest attempt).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Status::Success | Status::Failed | Status::Canceled | Status::Canceling
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("blocked"), None);
    }

    #[test]
    fn groups_match_the_spec() {
        let names = |f: fn(Status) -> bool| -> Vec<&str> {
            Status::ALL
                .into_iter()
                .filter(|s| f(*s))
                .map(Status::as_str)
                .collect()
        };
        assert_eq!(
            names(Status::is_active),
            [
                "waiting_for_resource",
                "preparing",
                "waiting_for_callback",
                "pending",
                "running"
            ]
        );
        assert_eq!(
            names(Status::is_completed),
            ["success", "failed", "canceled", "skipped"]
        );
        assert_eq!(names(Status::is_blocked), ["manual", "scheduled"]);
        assert_eq!(
            names(Status::is_stopped),
            [
                "success",
                "failed",
                "canceled",
                "skipped",
                "manual",
                "scheduled"
            ]
        );
        assert_eq!(
            names(Status::is_cancelable),
            [
                "created",
                "waiting_for_resource",
                "preparing",
                "waiting_for_callback",
                "pending",
                "running",
                "scheduled"
            ]
        );
        assert_eq!(names(Status::is_executing), ["running", "canceling"]);
    }
}
