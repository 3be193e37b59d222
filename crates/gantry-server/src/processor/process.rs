//! The processing loop (spec §5.3–§5.5, GitLab `AtomicProcessingService` and
//! `ProcessBuildService`): which `created` jobs to enqueue, actionize, schedule or skip.
//!
//! One pass over a snapshot, stage by stage; within a stage, jobs in topological order of
//! their same-stage `needs`. For each `created` job:
//!
//! - `prev` is, in **stage** mode, COMPOSITE of every current job of earlier stages (DAG
//!   jobs included); in **DAG** mode (the job has `needs`, even `[]`), COMPOSITE_dag of the
//!   needed jobs present in the pipeline. An empty set is `success`.
//! - `prev` not COMPLETED ⇒ the job waits.
//! - `prev` in VALID(job) ([`valid_prev`]) ⇒ processed: enqueue-immediately jobs are
//!   enqueued; `delayed` ⇒ `scheduled` at `now + start_in` (no `start_in` ⇒ `manual`);
//!   `manual` ⇒ `manual`; otherwise enqueued (`waiting_for_resource` with a
//!   `resource_group`, else `pending`).
//! - otherwise ⇒ `skipped`.
//!
//! Each decision updates the snapshot, so one pass reaches a fixed point: processing the
//! committed result again decides nothing.

use std::collections::HashMap;

use gantry_pipeline::When;

use super::composite::{Mode, composite};
use super::state::{JobState, PipelineState, Timestamp};
use super::status::Status;
use super::transition::{Change, JobEvent, Transition};

/// The VALID table (§5.5): may a job with this `when` be processed after `prev`?
/// `prev` = `canceled` is never valid, not even for `when: always`.
pub fn valid_prev(when: When, prev: Status, mode: Mode) -> bool {
    match when {
        When::OnSuccess | When::Manual | When::Delayed => {
            prev == Status::Success || (mode == Mode::Stage && prev == Status::Skipped)
        }
        When::OnFailure => prev == Status::Failed,
        When::Always => matches!(prev, Status::Success | Status::Failed | Status::Skipped),
    }
}

/// One pass of the processing loop. Pure: the caller commits the result and persists it;
/// [`PipelineState::advance`] does both the commit and the pass's end (the pipeline and
/// stage statuses move), so callers use it rather than [`PipelineState::commit_all`].
pub fn process(state: &PipelineState, now: Timestamp) -> Vec<Transition> {
    let jobs = state.jobs();
    let mut snapshot: Vec<Status> = jobs.iter().map(|j| j.status).collect();
    let by_name: HashMap<&str, usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| !j.retried)
        .map(|(i, j)| (j.name.as_str(), i))
        .collect();
    let mut out = Vec::new();

    for stage_idx in 0..state.stages().len() {
        let stage_prev = composite(
            jobs.iter()
                .enumerate()
                .filter(|(_, j)| !j.retried && j.stage_idx < stage_idx)
                .map(|(i, j)| (snapshot[i], j.allow_failure)),
            Mode::Stage,
        )
        .map_or(Status::Success, |s| s.status);

        for i in stage_order(jobs, stage_idx, &by_name) {
            if snapshot[i] != Status::Created {
                continue;
            }
            let job = &jobs[i];
            let (prev, mode) = match &job.needs {
                None => (stage_prev, Mode::Stage),
                Some(needs) => {
                    let needed = needs
                        .iter()
                        .filter_map(|n| by_name.get(n.as_str()))
                        .map(|&k| (snapshot[k], jobs[k].allow_failure));
                    let prev = composite(needed, Mode::Dag).map_or(Status::Success, |s| s.status);
                    (prev, Mode::Dag)
                }
            };
            if !prev.is_completed() {
                continue;
            }
            let (event, to) = if valid_prev(job.when, prev, mode) {
                processed(job, now)
            } else {
                (JobEvent::Skip, Status::Skipped)
            };
            snapshot[i] = to;
            out.push(Transition::Status(Change {
                job: job.id,
                event,
                from: Status::Created,
                to,
                at: now,
            }));
        }
    }
    out
}

/// What processing does to a job whose `prev` is valid.
fn processed(job: &JobState, now: Timestamp) -> (JobEvent, Status) {
    if job.enqueue_immediately {
        return (JobEvent::Enqueue, enqueue_target(job));
    }
    match job.when {
        When::Delayed => match job.start_in {
            Some(secs) => (JobEvent::Schedule { at: now.plus(secs) }, Status::Scheduled),
            None => (JobEvent::Actionize, Status::Manual),
        },
        When::Manual => (JobEvent::Actionize, Status::Manual),
        When::OnSuccess | When::OnFailure | When::Always => {
            (JobEvent::Enqueue, enqueue_target(job))
        }
    }
}

/// Where `enqueue` takes a job: `waiting_for_resource` with a resource group, else
/// `pending`. (`preparing` needs prerequisites this processor does not model.)
pub(crate) fn enqueue_target(job: &JobState) -> Status {
    if job.resource_group.is_some() {
        Status::WaitingForResource
    } else {
        Status::Pending
    }
}

/// Indices of the current jobs of one stage, needed jobs of the same stage first
/// (row order otherwise).
fn stage_order(jobs: &[JobState], stage_idx: usize, by_name: &HashMap<&str, usize>) -> Vec<usize> {
    let mut pending: Vec<usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| !j.retried && j.stage_idx == stage_idx)
        .map(|(i, _)| i)
        .collect();
    let mut order = Vec::with_capacity(pending.len());
    let mut placed = vec![false; jobs.len()];
    while !pending.is_empty() {
        let ready = pending.iter().position(|&i| {
            jobs[i]
                .needs
                .iter()
                .flatten()
                .all(|n| match by_name.get(n.as_str()) {
                    Some(&k) => k == i || jobs[k].stage_idx != stage_idx || placed[k],
                    None => true,
                })
        });
        // Needs never form a cycle in a compiled pipeline; should a loaded one, keep row order.
        let i = pending.remove(ready.unwrap_or(0));
        placed[i] = true;
        order.push(i);
    }
    order
}

impl PipelineState {
    /// Run one processing pass and commit it, then move the pipeline status as GitLab's
    /// `update_pipeline!` does ([`super::next_pipeline_status`]); returns the job
    /// transitions to persist (the status is [`super::pipeline_status`]).
    pub fn advance(&mut self, now: Timestamp) -> Vec<Transition> {
        let ts = process(self, now);
        self.commit_all(&ts);
        self.settle_status();
        ts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_table() {
        use Mode::{Dag, Stage};
        use Status::*;
        // (when, prev, stage mode runs, dag mode runs)
        let rows = [
            (When::OnSuccess, Success, true, true),
            (When::OnSuccess, Skipped, true, false),
            (When::OnSuccess, Failed, false, false),
            (When::Manual, Success, true, true),
            (When::Manual, Skipped, true, false),
            (When::Delayed, Skipped, true, false),
            (When::Delayed, Failed, false, false),
            (When::OnFailure, Failed, true, true),
            (When::OnFailure, Success, false, false),
            (When::OnFailure, Skipped, false, false),
            (When::Always, Success, true, true),
            (When::Always, Failed, true, true),
            (When::Always, Skipped, true, true),
            (When::Always, Canceled, false, false),
            (When::OnFailure, Canceled, false, false),
        ];
        for (when, prev, stage, dag) in rows {
            assert_eq!(
                valid_prev(when, prev, Stage),
                stage,
                "{when:?} after {prev} (stage)"
            );
            assert_eq!(
                valid_prev(when, prev, Dag),
                dag,
                "{when:?} after {prev} (dag)"
            );
        }
    }
}
