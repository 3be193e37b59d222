//! GitLab's statuses (`Ci::HasStatus`, spec §5.1) — the one status type of Gantry: the
//! coordinator's processor, its store rows, its API and UI, `gantry run`'s report and the
//! `Job-Status` response header (§4.2, §4.5, §5.2) a runner reads all use [`JobStatus`].
//!
//! Jobs, stages and pipelines share one set of values, as in GitLab: a stage or a
//! pipeline status is the COMPOSITE of its jobs and can be any of them.

use crate::wire_enum::wire_enum;

wire_enum! {
    /// A job's, stage's or pipeline's status as GitLab names it (`CommitStatus` state
    /// machine), in GitLab's declaration order. Only `pending`, `running`, `success`,
    /// `failed`, `canceling` and `canceled` occur on the runner link.
    pub enum JobStatus ("job status") {
        /// Created, not yet processed.
        Created = "created",
        /// Waiting for a resource group.
        WaitingForResource = "waiting_for_resource",
        /// Preparing (e.g. environment).
        Preparing = "preparing",
        /// Waiting for an external callback.
        WaitingForCallback = "waiting_for_callback",
        /// Queued; also an assigned job awaiting two-phase acceptance (§3.7).
        Pending = "pending",
        /// Running on a runner.
        Running = "running",
        /// Succeeded.
        Success = "success",
        /// Failed.
        Failed = "failed",
        /// Graceful cancellation requested (§4.5).
        Canceling = "canceling",
        /// Canceled.
        Canceled = "canceled",
        /// Skipped.
        Skipped = "skipped",
        /// Waiting for a manual action.
        Manual = "manual",
        /// Delayed.
        Scheduled = "scheduled",
    }
}

impl Default for JobStatus {
    /// GitLab's first state of a job and a pipeline.
    fn default() -> Self {
        Self::Created
    }
}

impl JobStatus {
    /// The status named `value`; `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        value.parse().ok()
    }

    /// ACTIVE = {waiting_for_resource, preparing, waiting_for_callback, pending, running}.
    pub const fn is_active(self) -> bool {
        match self {
            Self::WaitingForResource
            | Self::Preparing
            | Self::WaitingForCallback
            | Self::Pending
            | Self::Running => true,
            Self::Created
            | Self::Success
            | Self::Failed
            | Self::Canceling
            | Self::Canceled
            | Self::Skipped
            | Self::Manual
            | Self::Scheduled => false,
        }
    }

    /// Moves on without a user's action: ACTIVE ∪ {canceling, scheduled} (a `created` job
    /// waits for other jobs, a `manual` one for a user). `gantry run` runs while one is.
    pub const fn is_underway(self) -> bool {
        self.is_active() || matches!(self, Self::Canceling | Self::Scheduled)
    }

    /// COMPLETED = {success, failed, canceled, skipped}.
    pub const fn is_completed(self) -> bool {
        match self {
            Self::Success | Self::Failed | Self::Canceled | Self::Skipped => true,
            Self::Created
            | Self::WaitingForResource
            | Self::Preparing
            | Self::WaitingForCallback
            | Self::Pending
            | Self::Running
            | Self::Canceling
            | Self::Manual
            | Self::Scheduled => false,
        }
    }

    /// BLOCKED = {manual, scheduled}.
    pub const fn is_blocked(self) -> bool {
        matches!(self, Self::Manual | Self::Scheduled)
    }

    /// STOPPED = COMPLETED ∪ BLOCKED.
    pub const fn is_stopped(self) -> bool {
        self.is_completed() || self.is_blocked()
    }

    /// CANCELABLE = {created, waiting_for_resource, preparing, waiting_for_callback, pending,
    /// running, scheduled}. (`manual` jobs can be canceled too, see [`Self::accepts_cancel`].)
    pub const fn is_cancelable(self) -> bool {
        match self {
            Self::Created
            | Self::WaitingForResource
            | Self::Preparing
            | Self::WaitingForCallback
            | Self::Pending
            | Self::Running
            | Self::Scheduled => true,
            Self::Success
            | Self::Failed
            | Self::Canceling
            | Self::Canceled
            | Self::Skipped
            | Self::Manual => false,
        }
    }

    /// The `cancel` event applies: CANCELABLE ∪ {manual} (§5.2).
    pub const fn accepts_cancel(self) -> bool {
        self.is_cancelable() || matches!(self, Self::Manual)
    }

    /// EXECUTING = {running, canceling}.
    pub const fn is_executing(self) -> bool {
        matches!(self, Self::Running | Self::Canceling)
    }

    /// A job in this status may be retried (GitLab `retryable?`: success, failed, canceled,
    /// canceling; the caller also checks that the job is its name's latest attempt).
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::Success | Self::Failed | Self::Canceled | Self::Canceling
        )
    }

    /// `canceled` or `failed`: whatever the HTTP status, the runner aborts the job
    /// (kills it, no `after_script`) and stops sending updates (§4.2, §4.5).
    pub const fn aborts_job(self) -> bool {
        matches!(self, Self::Canceled | Self::Failed)
    }

    /// `canceling`: the runner cancels the script but still runs `after_script`, then
    /// sends its final update (§4.5).
    pub const fn requests_cancel(self) -> bool {
        matches!(self, Self::Canceling)
    }

    /// Parses a `Job-Status` header value; `None` when absent or unknown.
    pub fn from_header(value: Option<&str>) -> Option<Self> {
        value.and_then(|value| value.trim().parse().ok())
    }
}

#[cfg(test)]
mod group_tests {
    use super::JobStatus as Status;

    #[test]
    fn names_round_trip() {
        for &s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
        }
        assert_eq!(Status::parse("blocked"), None);
    }

    #[test]
    fn groups_match_the_spec() {
        let names = |f: fn(Status) -> bool| -> Vec<&str> {
            Status::ALL
                .iter()
                .filter(|s| f(**s))
                .map(|s| s.as_str())
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
