//! Time-driven decisions: the effective job timeout (runner API §9) and the watchdog that
//! turns the passing of time into [`Event`]s (delayed jobs coming due, stale schedules,
//! jobs past their timeout, stuck jobs). Time is always a parameter.

use serde::Serialize;

use super::FailureReason;
use super::events::Event;
use super::state::{PipelineState, Timestamp};
use super::status::Status;

/// Where the effective timeout came from (`job_timeout_source` & co.).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutSource {
    /// The job's `timeout:` keyword.
    Job,
    /// The project's default timeout.
    Project,
    /// The runner's `maximum_timeout`.
    Runner,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct EffectiveTimeout {
    pub seconds: u64,
    pub source: TimeoutSource,
}

/// The timeout fixed when a runner picks a job: the job's `timeout:` if set, else the
/// project timeout; capped by the runner's `maximum_timeout` when that is set and
/// positive. On a tie the job (or project) value is the recorded source. The job value
/// may exceed the project timeout.
pub fn effective_timeout(
    job: Option<u64>,
    project: u64,
    runner_maximum: Option<u64>,
) -> EffectiveTimeout {
    let base = match job {
        Some(seconds) => EffectiveTimeout {
            seconds,
            source: TimeoutSource::Job,
        },
        None => EffectiveTimeout {
            seconds: project,
            source: TimeoutSource::Project,
        },
    };
    match runner_maximum.filter(|m| *m > 0) {
        Some(max) if max < base.seconds => EffectiveTimeout {
            seconds: max,
            source: TimeoutSource::Runner,
        },
        _ => base,
    }
}

/// Watchdog thresholds, in seconds. The defaults are GitLab's where it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Watchdog {
    /// Extra time a running job gets past its effective timeout before the coordinator
    /// drops it (`job_execution_timeout`); the runner normally reports the timeout itself
    /// first. GitLab's grace is unconfirmed; we give the runner's default
    /// `after_script` timeout (5 min).
    pub timeout_grace: u64,
    /// A running job without any update for this long is dropped as
    /// `stuck_or_timeout_failure` (GitLab: 1 hour); a canceling one becomes canceled.
    pub running_without_update: u64,
    /// A pending job queued this long is dropped as `stuck_or_timeout_failure`
    /// (GitLab: 1 day).
    pub pending_outdated: u64,
    /// A delayed job still not started this long after its `scheduled_at` is dropped as
    /// `stale_schedule` (GitLab: 1 hour).
    pub scheduled_outdated: u64,
}

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog {
            timeout_grace: 5 * 60,
            running_without_update: 60 * 60,
            pending_outdated: 24 * 60 * 60,
            scheduled_outdated: 60 * 60,
        }
    }
}

/// The events time makes due at `now`, one per job at most, in row order. Apply them
/// with [`super::apply`]. Running and canceling rows are watched even when retried (a
/// runner may still be finishing them); everything else only for current jobs.
pub fn due_events(state: &PipelineState, now: Timestamp, limits: &Watchdog) -> Vec<Event> {
    let past = |t: Option<Timestamp>, secs: u64| t.is_some_and(|t| now >= t.plus(secs));
    let mut out = Vec::new();
    for j in state.jobs() {
        let job = j.id;
        let event = match j.status {
            Status::Running
                if j.effective_timeout.is_some_and(|t| {
                    past(j.started_at, t.saturating_add(limits.timeout_grace))
                }) =>
            {
                Some(Event::JobTimedOut { job })
            }
            Status::Running | Status::Canceling
                if past(j.updated_at, limits.running_without_update) =>
            {
                Some(Event::JobStuck { job })
            }
            _ if j.retried => None,
            Status::Scheduled if past(j.scheduled_at, limits.scheduled_outdated) => {
                Some(Event::JobFailed {
                    job,
                    reason: FailureReason::StaleSchedule,
                    exit_code: None,
                })
            }
            Status::Scheduled if past(j.scheduled_at, 0) => {
                Some(Event::ScheduledTimeReached { job })
            }
            Status::Pending if past(j.queued_at, limits.pending_outdated) => {
                Some(Event::JobStuck { job })
            }
            _ => None,
        };
        out.extend(event);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_timeout_rules() {
        use TimeoutSource::*;
        let t = |job, project, runner| {
            let e = effective_timeout(job, project, runner);
            (e.seconds, e.source)
        };
        // job timeout wins over the project's, even when longer
        assert_eq!(t(Some(7200), 3600, None), (7200, Job));
        assert_eq!(t(Some(600), 3600, None), (600, Job));
        // no job timeout: the project's
        assert_eq!(t(None, 3600, None), (3600, Project));
        // the runner caps either
        assert_eq!(t(Some(7200), 3600, Some(1800)), (1800, Runner));
        assert_eq!(t(None, 3600, Some(1800)), (1800, Runner));
        // a larger runner maximum does not raise it; a tie keeps the job as source
        assert_eq!(t(None, 3600, Some(7200)), (3600, Project));
        assert_eq!(t(Some(1800), 3600, Some(1800)), (1800, Job));
        // maximum_timeout 0 = unset
        assert_eq!(t(None, 3600, Some(0)), (3600, Project));
    }
}
