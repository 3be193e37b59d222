//! `Job-Status` response header values (§4.2, §4.5, §5.2): the job's current status
//! on the coordinator, sent on job update and trace answers.

use crate::wire_enum::wire_enum;

wire_enum! {
    /// A job's status as GitLab names it (`CommitStatus` state machine). Only
    /// `pending`, `running`, `success`, `failed`, `canceling` and `canceled` occur on
    /// the runner link; the others are listed so any GitLab value parses.
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

impl JobStatus {
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
