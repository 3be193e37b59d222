//! Events from runners, users and timers, and what they change (spec §5.2, §5.7, §5.11,
//! §5.13). [`apply`] validates an event against the state, decides every consequence
//! (the `allow_failure:exit_codes` flip, an automatic retry, `on_job_failure` cancel,
//! resetting skipped dependents), commits it, and returns the transitions to persist. It
//! does not run the processing loop: call [`super::process`] (or
//! [`PipelineState::advance`]) afterwards, as GitLab re-processes after every transition.

use std::collections::HashSet;

use serde::Serialize;

use super::FailureReason;
use super::process::enqueue_target;
use super::state::{JobId, JobState, OnJobFailure, PipelineState, Timestamp};
use super::status::Status;
use super::transition::{Attempt, CancelCause, Change, JobEvent, RetryCause, Transition};

/// Which jobs a pipeline cancel touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelScope {
    /// Every cancelable job, manual jobs included.
    All,
    /// Only jobs with `interruptible: true` ("safe" cancel, `on_new_commit: interruptible`).
    InterruptibleOnly,
}

/// Something that happened to a pipeline.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A runner picked the job (pending → running). `timeout` is the effective timeout
    /// fixed at assignment; `graceful_cancel`: the runner advertised `cancel_gracefully`.
    JobStarted {
        job: JobId,
        timeout: Option<u64>,
        graceful_cancel: bool,
    },
    /// A runner sent a trace or keep-alive for a running (or canceling) job.
    JobTouched { job: JobId },
    /// The runner's final update said `success`.
    JobSucceeded { job: JobId },
    /// The runner's final update said `failed`, or the coordinator drops the job.
    JobFailed {
        job: JobId,
        reason: FailureReason,
        exit_code: Option<i64>,
    },
    /// The runner holding the job is gone: `runner_system_failure`.
    RunnerLost { job: JobId },
    /// The job ran past its effective timeout: `job_execution_timeout`.
    JobTimedOut { job: JobId },
    /// The job stopped getting updates, or waited too long in the queue:
    /// `stuck_or_timeout_failure`.
    JobStuck { job: JobId },
    /// The job's resource group assigned it the resource (waiting_for_resource → pending).
    ResourceAssigned { job: JobId },
    /// A delayed job's `scheduled_at` has come (scheduled → pending).
    ScheduledTimeReached { job: JobId },
    /// A user cancels one job.
    CancelJob { job: JobId },
    /// A user (admin) force-cancels a `canceling` job.
    ForceCancelJob { job: JobId },
    /// Cancel the pipeline's jobs (a user, or `on_new_commit` auto-cancel).
    CancelPipeline {
        scope: CancelScope,
        cause: CancelCause,
    },
    /// A user plays a manual job, or starts a delayed job now. A finished manual job is
    /// played again as a new attempt.
    PlayJob { job: JobId },
    /// A user retries a finished job.
    RetryJob { job: JobId },
    /// A user retries every failed or canceled job of the pipeline.
    RetryPipeline,
    /// A user stops a delayed job's timer (scheduled → manual).
    UnscheduleJob { job: JobId },
}

/// An event that does not apply to the current state (the caller answers with an error;
/// the state is unchanged). Messages read after "failed to".
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Rejected {
    #[error("find job {0}: no such job in this pipeline")]
    UnknownJob(JobId),
    #[error("{action} job `{name}` {job}: it was retried; act on its latest attempt")]
    Retried {
        action: &'static str,
        name: String,
        job: JobId,
    },
    #[error("{action} job `{name}` {job}: it is {status}")]
    Status {
        action: &'static str,
        name: String,
        job: JobId,
        status: Status,
    },
    #[error("play job `{name}` {job}: it is not a manual or delayed job")]
    NotPlayable { name: String, job: JobId },
    #[error("start delayed job `{name}` {job}: it is due at {due}, not yet")]
    NotDue {
        name: String,
        job: JobId,
        due: Timestamp,
    },
    #[error("cancel pipeline: no job can be canceled")]
    NothingToCancel,
    #[error("retry pipeline: no job failed or was canceled")]
    NothingToRetry,
}

/// Apply `event` at `now`: validate it, decide and commit its consequences, and return
/// them in order. On `Err` the state is unchanged.
pub fn apply(
    state: &mut PipelineState,
    event: &Event,
    now: Timestamp,
) -> Result<Vec<Transition>, Rejected> {
    let mut d = Decider {
        state,
        now,
        out: Vec::new(),
    };
    d.event(event)?;
    Ok(d.out)
}

/// Validates first, then emits; every emitted transition is committed at once so later
/// decisions see it.
struct Decider<'a> {
    state: &'a mut PipelineState,
    now: Timestamp,
    out: Vec<Transition>,
}

impl Decider<'_> {
    fn event(&mut self, event: &Event) -> Result<(), Rejected> {
        match *event {
            Event::JobStarted {
                job,
                timeout,
                graceful_cancel,
            } => {
                let j = self.row(job)?;
                self.expect(j, "start", &[Status::Pending])?;
                self.change(
                    job,
                    JobEvent::Run {
                        timeout,
                        graceful_cancel,
                    },
                    Status::Running,
                );
            }
            Event::JobTouched { job } => {
                let j = self.row(job)?;
                self.expect(j, "update", &[Status::Running, Status::Canceling])?;
                self.emit(Transition::Touch { job, at: self.now });
            }
            Event::JobSucceeded { job } => {
                let j = self.row(job)?;
                let to = match j.status {
                    Status::Created
                    | Status::WaitingForResource
                    | Status::Preparing
                    | Status::WaitingForCallback
                    | Status::Pending
                    | Status::Running => Status::Success,
                    Status::Canceling => Status::Canceled,
                    Status::Success
                    | Status::Failed
                    | Status::Canceled
                    | Status::Skipped
                    | Status::Manual
                    | Status::Scheduled => return Err(status_error("succeed", j)),
                };
                self.change(job, JobEvent::Succeed, to);
            }
            Event::JobFailed {
                job,
                reason,
                exit_code,
            } => self.drop(job, reason, exit_code)?,
            Event::RunnerLost { job } => {
                self.drop(job, FailureReason::RunnerSystemFailure, None)?
            }
            Event::JobTimedOut { job } => {
                self.drop(job, FailureReason::JobExecutionTimeout, None)?
            }
            Event::JobStuck { job } => {
                self.drop(job, FailureReason::StuckOrTimeoutFailure, None)?
            }
            Event::ResourceAssigned { job } => {
                let j = self.current(job, "assign a resource to")?;
                self.expect(j, "assign a resource to", &[Status::WaitingForResource])?;
                self.change(job, JobEvent::AssignResource, Status::Pending);
            }
            Event::ScheduledTimeReached { job } => {
                let j = self.current(job, "start delayed")?;
                self.expect(j, "start delayed", &[Status::Scheduled])?;
                if let Some(due) = j.scheduled_at.filter(|due| *due > self.now) {
                    return Err(Rejected::NotDue {
                        name: j.name.clone(),
                        job,
                        due,
                    });
                }
                let to = enqueue_target(j);
                self.change(job, JobEvent::Enqueue, to);
            }
            Event::CancelJob { job } => {
                let j = self.current(job, "cancel")?;
                if !j.status.accepts_cancel() {
                    return Err(status_error("cancel", j));
                }
                self.cancel(job, CancelCause::User);
            }
            Event::ForceCancelJob { job } => {
                let j = self.row(job)?;
                self.expect(j, "force-cancel", &[Status::Canceling])?;
                self.change(job, JobEvent::ForceCancel, Status::Canceled);
            }
            Event::CancelPipeline { scope, cause } => {
                if self.cancel_pipeline(scope, cause) == 0 {
                    return Err(Rejected::NothingToCancel);
                }
            }
            Event::PlayJob { job } => {
                let j = self.current(job, "play")?;
                if !j.is_action() {
                    return Err(Rejected::NotPlayable {
                        name: j.name.clone(),
                        job,
                    });
                }
                match j.status {
                    Status::Manual | Status::Scheduled => {
                        let to = enqueue_target(j);
                        self.change(job, JobEvent::Enqueue, to);
                        self.reset_skipped_dependents(&[job]);
                    }
                    s if s.is_retryable() => self.retry(job, RetryCause::User, true),
                    _ => return Err(status_error("play", j)),
                }
            }
            Event::RetryJob { job } => {
                let j = self.current(job, "retry")?;
                if !j.status.is_retryable() {
                    return Err(status_error("retry", j));
                }
                self.retry(job, RetryCause::User, true);
            }
            Event::RetryPipeline => {
                let failed: Vec<JobId> = self
                    .state
                    .current_jobs()
                    .filter(|j| matches!(j.status, Status::Failed | Status::Canceled))
                    .map(|j| j.id)
                    .collect();
                if failed.is_empty() {
                    return Err(Rejected::NothingToRetry);
                }
                for job in failed {
                    self.clone_attempt(job, RetryCause::Pipeline, false);
                }
                let skipped: Vec<JobId> = self
                    .state
                    .current_jobs()
                    .filter(|j| j.status == Status::Skipped)
                    .map(|j| j.id)
                    .collect();
                for job in skipped {
                    self.change(job, JobEvent::Reset, Status::Created);
                }
            }
            Event::UnscheduleJob { job } => {
                let j = self.current(job, "unschedule")?;
                self.expect(j, "unschedule", &[Status::Scheduled])?;
                self.change(job, JobEvent::Unschedule, Status::Manual);
            }
        }
        Ok(())
    }

    /// Any row, retried attempts included: a runner may still finish an attempt that was
    /// retried while it was `canceling`.
    fn row(&self, job: JobId) -> Result<&JobState, Rejected> {
        self.state.job(job).ok_or(Rejected::UnknownJob(job))
    }

    /// The job, if it exists and is its name's latest attempt (what users act on).
    fn current(&self, job: JobId, action: &'static str) -> Result<&JobState, Rejected> {
        let j = self.state.job(job).ok_or(Rejected::UnknownJob(job))?;
        if j.retried {
            return Err(Rejected::Retried {
                action,
                name: j.name.clone(),
                job,
            });
        }
        Ok(j)
    }

    fn expect(&self, j: &JobState, action: &'static str, from: &[Status]) -> Result<(), Rejected> {
        if from.contains(&j.status) {
            Ok(())
        } else {
            Err(status_error(action, j))
        }
    }

    fn emit(&mut self, t: Transition) {
        self.state.commit(&t);
        self.out.push(t);
    }

    fn change(&mut self, job: JobId, event: JobEvent, to: Status) {
        let Some(from) = self.state.job(job).map(|j| j.status) else {
            return;
        };
        self.emit(Transition::Status(Change {
            job,
            event,
            from,
            to,
            at: self.now,
        }));
    }

    /// `drop(reason)` (§5.2): → failed, or canceling → canceled. Then the exit-code
    /// allow_failure flip, automatic retry (§5.7), `on_job_failure` cancel (§5.11).
    fn drop(
        &mut self,
        job: JobId,
        reason: FailureReason,
        exit_code: Option<i64>,
    ) -> Result<(), Rejected> {
        let j = self.row(job)?;
        let to = match j.status {
            Status::Created
            | Status::WaitingForResource
            | Status::Preparing
            | Status::WaitingForCallback
            | Status::Pending
            | Status::Running
            | Status::Manual
            | Status::Scheduled => Status::Failed,
            Status::Canceling => Status::Canceled,
            Status::Success | Status::Failed | Status::Canceled | Status::Skipped => {
                return Err(status_error("fail", j));
            }
        };
        let flipped = to == Status::Failed
            && !j.allow_failure
            && exit_code.is_some_and(|c| j.allow_failure_exit_codes.contains(&c));
        let retry = to == Status::Failed
            && j.retry
                .allows(reason, exit_code, self.state.retries_count(&j.name));
        let allowed_to_fail = j.allow_failure || flipped;
        let superseded = j.retried;
        self.change(
            job,
            JobEvent::Drop {
                reason,
                exit_code,
                allow_failure_flipped: flipped,
            },
            to,
        );
        if to != Status::Failed || superseded {
            return Ok(());
        }
        if retry {
            self.retry(job, RetryCause::Automatic, true);
        } else if !allowed_to_fail && self.state.auto_cancel().on_job_failure == OnJobFailure::All {
            self.cancel_pipeline(CancelScope::All, CancelCause::JobFailure(job));
        }
        Ok(())
    }

    /// `cancel`: a running job on a graceful runner → canceling, else → canceled.
    fn cancel(&mut self, job: JobId, cause: CancelCause) {
        let Some(j) = self.state.job(job) else { return };
        let to = if j.status == Status::Running && j.graceful_cancel {
            Status::Canceling
        } else {
            Status::Canceled
        };
        self.change(job, JobEvent::Cancel { cause }, to);
    }

    /// Cancel every current job that accepts `cancel` (CANCELABLE ∪ {manual}) in scope.
    /// Returns how many were canceled.
    fn cancel_pipeline(&mut self, scope: CancelScope, cause: CancelCause) -> usize {
        let targets: Vec<JobId> = self
            .state
            .current_jobs()
            .filter(|j| j.status.accepts_cancel())
            .filter(|j| scope == CancelScope::All || j.interruptible)
            .map(|j| j.id)
            .collect();
        for &job in &targets {
            self.cancel(job, cause);
        }
        targets.len()
    }

    /// A new attempt of `job`, then its skipped dependents are reset.
    fn retry(&mut self, job: JobId, cause: RetryCause, enqueue_if_actionable: bool) {
        let new = self.clone_attempt(job, cause, enqueue_if_actionable);
        self.reset_skipped_dependents(&[new]);
    }

    fn clone_attempt(
        &mut self,
        job: JobId,
        cause: RetryCause,
        enqueue_if_actionable: bool,
    ) -> JobId {
        let id = self.state.next_id();
        let Some(old) = self.state.job(job) else {
            return id;
        };
        let new = old.next_attempt(id, enqueue_if_actionable && old.is_action());
        self.emit(Transition::Retry(Box::new(Attempt {
            old: job,
            new,
            cause,
            at: self.now,
        })));
        id
    }

    /// GitLab `ResetSkippedJobsService`: every skipped job in a stage after the earliest
    /// stage of `origins`, and every skipped job that needs an origin (transitively), goes
    /// back to `created` so processing evaluates it again.
    fn reset_skipped_dependents(&mut self, origins: &[JobId]) {
        let origin_jobs: Vec<&JobState> = origins
            .iter()
            .filter_map(|id| self.state.job(*id))
            .collect();
        let Some(min_stage) = origin_jobs.iter().map(|j| j.stage_idx).min() else {
            return;
        };
        // Names reachable through `needs` from the origins.
        let mut reached: HashSet<&str> = origin_jobs.iter().map(|j| j.name.as_str()).collect();
        let current: Vec<&JobState> = self.state.current_jobs().collect();
        loop {
            let before = reached.len();
            for j in &current {
                if j.needs
                    .iter()
                    .flatten()
                    .any(|n| reached.contains(n.as_str()))
                {
                    reached.insert(j.name.as_str());
                }
            }
            if reached.len() == before {
                break;
            }
        }
        let targets: Vec<JobId> = current
            .iter()
            .filter(|j| j.status == Status::Skipped)
            .filter(|j| j.stage_idx > min_stage || reached.contains(j.name.as_str()))
            .map(|j| j.id)
            .collect();
        for job in targets {
            self.change(job, JobEvent::Reset, Status::Created);
        }
    }
}

fn status_error(action: &'static str, j: &JobState) -> Rejected {
    Rejected::Status {
        action,
        name: j.name.clone(),
        job: j.id,
        status: j.status,
    }
}
