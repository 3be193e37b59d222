//! Decisions: what the store persists. Every change to a [`PipelineState`] is a
//! [`Transition`], and [`PipelineState::commit`] is the only code that applies one, so the
//! store can persist exactly the list the processor returned (in order) and reload the
//! same state.

use std::fmt;

use serde::Serialize;

use super::FailureReason;
use super::state::{JobId, JobState, PipelineState, Timestamp};
use super::status::Status;

/// A change to one pipeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Transition {
    /// A job changes status (a §5.2 event).
    Status(Change),
    /// A new attempt of `old`: `old` is flagged `retried`, `new` is inserted `created`.
    Retry(Box<Attempt>),
    /// A runner reported progress on a running or canceling job (refreshes `updated_at`).
    Touch { job: JobId, at: Timestamp },
}

/// One job's status change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    pub job: JobId,
    pub event: JobEvent,
    pub from: Status,
    pub to: Status,
    pub at: Timestamp,
}

/// The new attempt created by a retry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Attempt {
    pub old: JobId,
    pub new: JobState,
    pub cause: RetryCause,
    pub at: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryCause {
    /// `retry:` allowed it (§5.7).
    Automatic,
    /// A user retried the job, or played a finished manual job.
    User,
    /// A user retried the pipeline.
    Pipeline,
}

/// Why a job is canceled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelCause {
    /// A user canceled the job or the pipeline.
    User,
    /// `auto_cancel:on_job_failure: all` after job `0` failed.
    JobFailure(JobId),
    /// `auto_cancel:on_new_commit` (a newer pipeline on the same ref).
    NewCommit,
}

/// The §5.2 event behind a status change, with what it records.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JobEvent {
    /// created/skipped/manual/scheduled → pending or waiting_for_resource. Also a played
    /// manual job and a delayed job whose time came.
    Enqueue,
    /// waiting_for_resource → pending: the job got its resource.
    AssignResource,
    /// created → manual.
    Actionize,
    /// created → scheduled, due at `at`.
    Schedule { at: Timestamp },
    /// scheduled → manual: a user stopped the timer.
    Unschedule,
    /// pending → running: a runner picked the job.
    Run {
        timeout: Option<u64>,
        graceful_cancel: bool,
    },
    /// → success (or canceling → canceled).
    Succeed,
    /// → failed (or canceling → canceled). `allow_failure_flipped`: the exit code is one of
    /// `allow_failure:exit_codes`, so the job now counts as allowed to fail.
    Drop {
        reason: FailureReason,
        exit_code: Option<i64>,
        allow_failure_flipped: bool,
    },
    /// → canceling (running, graceful runner) or canceled.
    Cancel { cause: CancelCause },
    /// canceling → canceled without waiting for the runner.
    ForceCancel,
    /// created → skipped: `prev` is not in the job's VALID set.
    Skip,
    /// skipped (or manual) → created: re-evaluate (after a play or a retry).
    Reset,
}

impl JobEvent {
    pub fn name(&self) -> &'static str {
        match self {
            JobEvent::Enqueue => "enqueue",
            JobEvent::AssignResource => "assign_resource",
            JobEvent::Actionize => "actionize",
            JobEvent::Schedule { .. } => "schedule",
            JobEvent::Unschedule => "unschedule",
            JobEvent::Run { .. } => "run",
            JobEvent::Succeed => "succeed",
            JobEvent::Drop { .. } => "drop",
            JobEvent::Cancel { .. } => "cancel",
            JobEvent::ForceCancel => "force_cancel",
            JobEvent::Skip => "skip",
            JobEvent::Reset => "reset",
        }
    }
}

impl Transition {
    /// The job the transition is about (for a retry: the old attempt).
    pub fn job(&self) -> JobId {
        match self {
            Transition::Status(c) => c.job,
            Transition::Retry(a) => a.old,
            Transition::Touch { job, .. } => *job,
        }
    }

    /// A line for logs and snapshots, naming jobs through `state`.
    pub fn describe(&self, state: &PipelineState) -> String {
        let name = |id: JobId| {
            state
                .job(id)
                .map_or_else(|| id.to_string(), |j| format!("{}{id}", j.name))
        };
        match self {
            Transition::Status(c) => {
                let detail = match &c.event {
                    JobEvent::Schedule { at } => format!(" (at {at})"),
                    JobEvent::Run { timeout, .. } => timeout
                        .map(|t| format!(" (timeout {t}s)"))
                        .unwrap_or_default(),
                    JobEvent::Drop {
                        reason,
                        exit_code,
                        allow_failure_flipped,
                    } => {
                        let mut s = format!(" ({reason}");
                        if let Some(c) = exit_code {
                            s.push_str(&format!(", exit {c}"));
                        }
                        if *allow_failure_flipped {
                            s.push_str(", allowed by exit code");
                        }
                        s.push(')');
                        s
                    }
                    JobEvent::Cancel {
                        cause: CancelCause::JobFailure(id),
                    } => format!(" (auto-cancel: {} failed)", name(*id)),
                    JobEvent::Cancel {
                        cause: CancelCause::NewCommit,
                    } => " (auto-cancel: new commit)".to_owned(),
                    _ => String::new(),
                };
                format!(
                    "{} {}: {} -> {}{detail}",
                    c.event.name(),
                    name(c.job),
                    c.from,
                    c.to
                )
            }
            Transition::Retry(a) => format!(
                "retry {} -> {}{} attempt {} ({:?})",
                name(a.old),
                a.new.name,
                a.new.id,
                a.new.attempt,
                a.cause
            ),
            Transition::Touch { job, .. } => format!("touch {}", name(*job)),
        }
    }
}

impl fmt::Display for JobEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PipelineState {
    /// Apply one decision. Transitions come from [`super::process`] or
    /// [`super::apply`] for this same state; one about an unknown job is ignored.
    pub fn commit(&mut self, t: &Transition) {
        match t {
            Transition::Status(c) => self.modify(c.job, |j| {
                j.status = c.to;
                j.updated_at = Some(c.at);
                if c.from == Status::Scheduled && c.to != Status::Scheduled {
                    j.scheduled_at = None;
                }
                if c.to == Status::Pending {
                    j.queued_at = Some(c.at);
                }
                if c.to.is_completed() && c.to != Status::Skipped {
                    j.finished_at = Some(c.at);
                }
                match c.event {
                    JobEvent::Enqueue => j.enqueue_immediately = false,
                    JobEvent::Schedule { at } => j.scheduled_at = Some(at),
                    JobEvent::Run {
                        timeout,
                        graceful_cancel,
                    } => {
                        j.started_at = Some(c.at);
                        j.effective_timeout = timeout;
                        j.graceful_cancel = graceful_cancel;
                    }
                    JobEvent::Drop {
                        reason,
                        exit_code,
                        allow_failure_flipped,
                    } => {
                        j.exit_code = exit_code;
                        if c.to == Status::Failed {
                            j.failure_reason = Some(reason);
                        }
                        if allow_failure_flipped {
                            j.allow_failure = true;
                        }
                    }
                    JobEvent::AssignResource
                    | JobEvent::Actionize
                    | JobEvent::Unschedule
                    | JobEvent::Succeed
                    | JobEvent::Cancel { .. }
                    | JobEvent::ForceCancel
                    | JobEvent::Skip
                    | JobEvent::Reset => {}
                }
            }),
            Transition::Retry(a) => {
                self.modify(a.old, |old| old.retried = true);
                self.push(a.new.clone());
            }
            Transition::Touch { job, at } => self.modify(*job, |j| j.updated_at = Some(*at)),
        }
    }

    /// Apply decisions in order.
    pub fn commit_all(&mut self, ts: &[Transition]) {
        for t in ts {
            self.commit(t);
        }
    }
}
