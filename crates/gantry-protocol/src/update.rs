//! Job update: `PUT /api/v4/jobs/:id` (§4). The body ([`UpdateJobRequest`]), and what
//! its answers mean ([`UpdateJobResponse`]): the `202` accept protocol of final updates
//! (§4.4) and cancellation through `Job-Status` (§4.5).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::failure_reason::FailureReason;
use crate::info::VersionInfo;
use crate::job_status::JobStatus;
use crate::json::{is_zero_i64, is_zero_u64, zero_if_null};
use crate::resources::JobResources;
use crate::update_interval::parse_trace_update_interval;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `state` of a job update (§4.1). Anything else gets `400`.
    pub enum JobState ("job state") {
        /// Two-phase commit keep-alive only (§3.7).
        Pending = "pending",
        /// Heartbeat, or acceptance right after pick-up (§3.7, §4.6).
        Running = "running",
        /// Final: the job succeeded.
        Success = "success",
        /// Final: the job failed (with `failure_reason`).
        Failed = "failed",
    }
}

impl JobState {
    /// `success` or `failed`: a final update, subject to the `202` accept protocol.
    pub const fn is_final(self) -> bool {
        matches!(self, Self::Success | Self::Failed)
    }
}

/// Body of `PUT /api/v4/jobs/:id` (§4.1). Headers: `JOB-TOKEN`, no `Accept`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateJobRequest {
    /// §2.8.
    #[serde(default, deserialize_with = "zero_if_null")]
    pub info: VersionInfo,
    /// Job token; required by Rails (sent in the body and the header).
    #[serde(default, deserialize_with = "zero_if_null")]
    pub token: String,
    /// Optional, as GitLab declares it: an update without a state is a keep-alive (the
    /// runner always sends one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    /// Only with `failed`; omitted when empty. Decoded as Rails does: an unknown value
    /// becomes `unknown_failure` rather than an error (§4.3).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "failure_reason_lenient"
    )]
    pub failure_reason: Option<FailureReason>,
    /// Deprecated duplicate of `output.checksum`; omitted when empty.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub checksum: String,
    /// Always present, possibly `{}`.
    #[serde(default, deserialize_with = "zero_if_null")]
    pub output: JobTraceOutput,
    /// Script exit code; omitted when 0.
    #[serde(
        default,
        skip_serializing_if = "is_zero_i64",
        deserialize_with = "zero_if_null"
    )]
    pub exit_code: i64,
    /// The whole log so far: GitLab before 14.0 read it here (current runners never send
    /// it; runners of that era still do, and resend the log this way after a `416`).
    /// The coordinator appends what extends the stored log and ignores the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Experimental (§3.5.17); omitted when empty.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub runtime_environment_key: String,
    /// Gantry's extension: the job's resource use so far ([`JobResources`]); omitted when
    /// not measured. GitLab ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<JobResources>,
}

impl UpdateJobRequest {
    /// A bare update in `state` (e.g. the `running` acceptance right after pick-up).
    pub fn new(token: impl Into<String>, state: JobState, info: VersionInfo) -> Self {
        Self {
            info,
            token: token.into(),
            state: Some(state),
            failure_reason: None,
            checksum: String::new(),
            output: JobTraceOutput::default(),
            exit_code: 0,
            trace: None,
            runtime_environment_key: String::new(),
            resources: None,
        }
    }

    /// The checksum to validate: `output.checksum`, else the deprecated `checksum`.
    pub fn trace_checksum(&self) -> Option<&str> {
        [self.output.checksum.as_str(), self.checksum.as_str()]
            .into_iter()
            .find(|c| !c.is_empty())
    }
}

/// `output` of a job update (§4.1, §5.3); fields omitted when zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobTraceOutput {
    /// `crc32:` + 8 lowercase hex digits over every trace byte so far; see
    /// [`TraceChecksum`](crate::TraceChecksum).
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub checksum: String,
    /// Trace bytes produced so far.
    #[serde(skip_serializing_if = "is_zero_u64", deserialize_with = "zero_if_null")]
    pub bytesize: u64,
}

fn failure_reason_lenient<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<FailureReason>, D::Error> {
    let value = Option::<String>::deserialize(deserializer)?;
    Ok(value.as_deref().and_then(FailureReason::from_wire_lenient))
}

/// What the runner does with an answer to `PUT /jobs/:id` (§4.2), in gitlab-runner's
/// decision order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// `200`: applied.
    Succeeded,
    /// `202`: final state stored as pending while the trace is finalised; re-send the
    /// same final update after the trace update interval (§4.4).
    AcceptedButNotCompleted,
    /// `412`: re-send the whole trace from byte 0, then the update again.
    TraceValidationFailed,
    /// `403`, `404`, or `Job-Status` `canceled`/`failed`: abort the job and stop
    /// sending updates. (gitlab-runner also aborts when the request could not be made
    /// at all, its "client error"; that is no HTTP status and is the caller's to map.)
    Aborted,
    /// Anything else (`400`, `409`, `429` after retries, 5xx…): retry later.
    Failed,
}

/// An answer to `PUT /jobs/:id`, classified (§4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateJobResponse {
    /// What to do next.
    pub outcome: UpdateOutcome,
    /// `Job-Status: canceling`: start graceful cancellation (§4.5).
    pub cancel_requested: bool,
    /// A new trace update interval, if the server sent a usable one.
    pub update_interval: Option<Duration>,
}

impl UpdateJobResponse {
    /// Classifies an answer from its HTTP status and the `Job-Status` and
    /// `X-GitLab-Trace-Update-Interval` header values (§4.2): `Job-Status`
    /// `canceled`/`failed` or `403` → abort; then `200`, `202`, `412`; `404` → abort;
    /// anything else → failed.
    pub fn classify(status: u16, job_status: Option<&str>, update_interval: Option<&str>) -> Self {
        let job_status = JobStatus::from_header(job_status);
        let outcome = if job_status.is_some_and(JobStatus::aborts_job) || status == 403 {
            UpdateOutcome::Aborted
        } else {
            match status {
                200 => UpdateOutcome::Succeeded,
                202 => UpdateOutcome::AcceptedButNotCompleted,
                412 => UpdateOutcome::TraceValidationFailed,
                404 => UpdateOutcome::Aborted,
                _ => UpdateOutcome::Failed,
            }
        };
        Self {
            outcome,
            cancel_requested: job_status.is_some_and(JobStatus::requests_cancel),
            update_interval: parse_trace_update_interval(update_interval),
        }
    }
}

/// Server side of §4.4: while live trace chunks are pending and the pending state is
/// younger than this, a final update is answered `202`; after it, pending chunks are
/// discarded and the state applied.
pub const PENDING_STATE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// How many times gitlab-runner retries a failed final update
/// (`job_status_final_update_retry_limit` default, §4.4).
pub const FINAL_UPDATE_RETRY_LIMIT: u32 = 10;

/// The `X-GitLab-Trace-Update-Interval` GitLab sends with a `202` to a final update,
/// from the age of the pending state (§4.4): 0–3 s → 1 s, 4–7 s → 2 s, 8–15 s → 4 s, …,
/// ≥ 128 s → 64 s.
pub fn accept_backoff(pending_state_age: Duration) -> Duration {
    let age = pending_state_age.as_secs();
    if age < 4 {
        return Duration::from_secs(1);
    }
    let exponent = age.ilog2() - 1;
    Duration::from_secs((1u64 << exponent.min(6)).min(64))
}
