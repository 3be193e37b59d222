//! The trace update interval (§4.6, §5.2): how often the runner sends trace patches,
//! and how long it waits before re-sending a final update answered with `202` (§4.4).
//! The server sets it through
//! [`header::TRACE_UPDATE_INTERVAL`](crate::header::TRACE_UPDATE_INTERVAL).

use std::time::Duration;

/// The runner's interval until the server says otherwise; also what it resets to
/// before the final update (§4.4).
pub const DEFAULT_UPDATE_INTERVAL: Duration = Duration::from_secs(3);

/// The runner clamps server-provided intervals to this (§4.6).
pub const MAX_UPDATE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// Without a successful patch for this long, the runner sends a keep-alive
/// `PUT state=running` (§4.6).
pub const FORCE_SEND_INTERVAL: Duration = Duration::from_secs(30);

/// What GitLab announces while somebody watches the job log (§5.2).
pub const WATCHED_UPDATE_INTERVAL: Duration = Duration::from_secs(3);

/// What current GitLab announces when nobody watches the job log (§5.2).
pub const UNWATCHED_UPDATE_INTERVAL: Duration = Duration::from_secs(60);

/// Reads an `X-GitLab-Trace-Update-Interval` value the way gitlab-runner does (§4.6):
/// integer seconds, clamped to [`MAX_UPDATE_INTERVAL`]; absent, empty, unparsable or
/// ≤ 0 means "keep the current interval" (`None`).
pub fn parse_trace_update_interval(value: Option<&str>) -> Option<Duration> {
    let seconds: i64 = value?.trim().parse().ok()?;
    let seconds = u64::try_from(seconds).ok().filter(|&s| s > 0)?;
    Some(Duration::from_secs(seconds).min(MAX_UPDATE_INTERVAL))
}

/// Formats the header value: whole seconds.
pub fn format_trace_update_interval(interval: Duration) -> String {
    interval.as_secs().to_string()
}
