//! `PATCH /api/v4/jobs/:id/trace` (§5.1, §5.2): query parameters, limits, and what
//! the answers mean.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::job_status::JobStatus;
use crate::trace::range::TraceRange;
use crate::update_interval::parse_trace_update_interval;

/// Largest patch gitlab-runner sends (`DefaultTracePatchLimit`); longer backlogs go as
/// consecutive patches (§5.1).
pub const MAX_PATCH_BYTES: usize = 1024 * 1024;

/// GitLab's default `ci_jobs_trace_size_limit` (100 MB): beyond it the job is dropped
/// with `trace_size_exceeded` and the patch answered `403` (§5.2).
pub const DEFAULT_TRACE_SIZE_LIMIT: u64 = 100 * 1024 * 1024;

/// gitlab-runner's default `output_limit` (4096 KiB); output beyond it is dropped
/// after a notice, the job keeps running (§5.4).
pub const DEFAULT_OUTPUT_LIMIT: u64 = 4096 * 1024;

/// `Content-Type` of a trace patch.
pub const TRACE_CONTENT_TYPE: &str = "text/plain";

/// Query parameters of a trace patch (§5.1). `debug_trace` is always sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PatchTraceParams {
    /// `true` when `CI_DEBUG_TRACE` is enabled for the job; the server marks the job as
    /// having a debug trace on the first chunk (offset 0) that says so.
    pub debug_trace: bool,
}

impl PatchTraceParams {
    /// `debug_trace=true` or `debug_trace=false`.
    pub fn to_query(&self) -> String {
        format!("debug_trace={}", self.debug_trace)
    }
}

/// What the runner does with an answer to a trace patch (§5.2), in gitlab-runner's
/// decision order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchOutcome {
    /// `202`: sent offset := start + body length.
    Succeeded,
    /// `416`: the server holds `resume_at` bytes; continue from there after the update
    /// interval (0 when the `Range` header is missing or unparsable).
    RangeMismatch {
        /// The server's log length.
        resume_at: u64,
    },
    /// `404`: try again next tick; during the final flush, stop flushing.
    NotFound,
    /// `403` or `Job-Status` `canceled`/`failed`: abort the job.
    Aborted,
    /// Anything else: keep the offset, retry next tick.
    Failed,
}

/// An answer to a trace patch, classified (§5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchTraceResponse {
    /// What to do next.
    pub outcome: PatchOutcome,
    /// `Job-Status: canceling`: start graceful cancellation (§4.5).
    pub cancel_requested: bool,
    /// A new trace update interval, if the server sent a usable one.
    pub update_interval: Option<Duration>,
}

impl PatchTraceResponse {
    /// Classifies an answer from its HTTP status and the `Job-Status`, `Range` and
    /// `X-GitLab-Trace-Update-Interval` header values.
    pub fn classify(
        status: u16,
        job_status: Option<&str>,
        range: Option<&str>,
        update_interval: Option<&str>,
    ) -> Self {
        let job_status = JobStatus::from_header(job_status);
        let outcome = if job_status.is_some_and(JobStatus::aborts_job) || status == 403 {
            PatchOutcome::Aborted
        } else {
            match status {
                202 => PatchOutcome::Succeeded,
                404 => PatchOutcome::NotFound,
                416 => PatchOutcome::RangeMismatch {
                    resume_at: range
                        .and_then(|range| TraceRange::parse(range).ok())
                        .map_or(0, |range| range.length),
                },
                _ => PatchOutcome::Failed,
            }
        };
        Self {
            outcome,
            cancel_requested: job_status.is_some_and(JobStatus::requests_cancel),
            update_interval: parse_trace_update_interval(update_interval),
        }
    }
}
