//! HTTP header names of the runner link (§0.3, §3.3, §4.2, §5, §7.4).
//!
//! Names are lower-case (HTTP header names are case-insensitive, and lower case is
//! what `http::HeaderName::from_static` accepts); the doc of each gives GitLab's
//! spelling.

/// `RUNNER-TOKEN`: the runner token, sent by recent runners on runner-level calls in
/// addition to the body `token`. Rails reads it only on router discovery (§0.3, §2.7).
pub const RUNNER_TOKEN: &str = "runner-token";

/// `JOB-TOKEN`: the job token on every job-scoped call (§1.2, §4–§6).
pub const JOB_TOKEN: &str = "job-token";

/// `PRIVATE-TOKEN`: a personal access token, on user-scoped calls only (§2.2, §2.6).
pub const PRIVATE_TOKEN: &str = "private-token";

/// `X-Request-Id`: 32 lowercase hex chars, new per request (§0.3).
pub const REQUEST_ID: &str = "x-request-id";

/// `Job-Status`: the job's current status on job update and trace responses; see
/// [`JobStatus`](crate::JobStatus) for the values and what the runner does with them
/// (§4.2, §4.5, §5.2).
pub const JOB_STATUS: &str = "job-status";

/// `X-GitLab-Last-Update`: the opaque queue version on `204` answers to
/// `POST /jobs/request`, echoed back by the runner as `last_update` (§3.3).
pub const LAST_UPDATE: &str = "x-gitlab-last-update";

/// `Gitlab-Ci-Builds-Polling`: set to [`BUILDS_POLLING_YES`] on every answer produced
/// by Workhorse's long polling (§3.3).
pub const BUILDS_POLLING: &str = "gitlab-ci-builds-polling";

/// The value of [`BUILDS_POLLING`].
pub const BUILDS_POLLING_YES: &str = "yes";

/// `X-GitLab-Trace-Update-Interval`: seconds the runner should wait between trace
/// patches, and before re-sending a final update answered with `202` (§4.2, §4.4, §5.2).
/// Parse with [`parse_trace_update_interval`](crate::parse_trace_update_interval).
pub const TRACE_UPDATE_INTERVAL: &str = "x-gitlab-trace-update-interval";

/// `Content-Range`: `start-end` of a trace patch (§5.1); see
/// [`ContentRange`](crate::ContentRange).
pub const CONTENT_RANGE: &str = "content-range";

/// `Range`: `0-<length>` on trace patch answers (§5.2); see
/// [`TraceRange`](crate::TraceRange).
pub const RANGE: &str = "range";

/// `Retry-After`: integer seconds, on `429` answers (§0.4, §7.4).
pub const RETRY_AFTER: &str = "retry-after";

/// `RateLimit-ResetTime`: an RFC 1123 date the runner prefers over `Retry-After` (§7.4).
pub const RATE_LIMIT_RESET_TIME: &str = "ratelimit-resettime";
