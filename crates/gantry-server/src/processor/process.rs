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

use std::collections::{BTreeSet, HashMap, HashSet};

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

/// One full pass of the processing loop over every `created` job. Pure: the caller
/// commits the result and persists it; [`PipelineState::advance`] does both the commit and
/// the pass's end (the pipeline and stage statuses move), and visits only what changed
/// since its last pass (`process_changed`), which decides exactly what this full pass
/// would: processing the result of `advance` again with this function decides nothing.
///
/// O(stages × jobs).
pub fn process(state: &PipelineState, now: Timestamp) -> Vec<Transition> {
    let jobs = state.jobs();
    let index = state.index();
    let mut snapshot: Vec<Status> = jobs.iter().map(|j| j.status).collect();
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

        for &i in &index.stage_jobs[stage_idx] {
            if snapshot[i] != Status::Created {
                continue;
            }
            let job = &jobs[i];
            let prev = match &job.needs {
                None => Some((stage_prev, Mode::Stage)),
                Some(_) => dag_prev(state, job, |k| snapshot[k]),
            };
            if let Some(t) = prev.and_then(|(prev, mode)| decide(job, prev, mode, now)) {
                snapshot[i] = t.to;
                out.push(Transition::Status(t));
            }
        }
    }
    out
}

/// The processing pass of [`PipelineState::advance`]: like [`process`], but visiting only
/// the `created` jobs a change since the last pass can affect — the dependents of changed
/// jobs, and the stage-mode jobs of a stage once everything before it is completed — in
/// the same order, so it decides what [`process`] would. O(jobs decided + their
/// dependents + stages²), whatever the pipeline's size; a full pass when the state is
/// new or its set of current jobs changed.
pub(crate) fn process_changed(state: &PipelineState, now: Timestamp) -> Vec<Transition> {
    let journal = state.journal();
    if journal.all {
        return process(state, now);
    }
    let jobs = state.jobs();
    let index = state.index();
    let stages = state.stages().len();
    // Decisions of this pass, over the rows' statuses.
    let mut decided: HashMap<usize, Status> = HashMap::new();
    let status = |decided: &HashMap<usize, Status>, k: usize| -> Status {
        decided.get(&k).copied().unwrap_or(jobs[k].status)
    };
    let mut counts = index.counts.clone();
    let mut queue: BTreeSet<(usize, usize, usize)> = BTreeSet::new();
    let queue_job = |queue: &mut BTreeSet<(usize, usize, usize)>, k: usize| {
        queue.insert((jobs[k].stage_idx, index.place[k], k));
    };
    // Stage mode: the first stage whose `prev` a change may have moved.
    let mut scan = stages;
    for &d in &journal.dirty {
        let j = &jobs[d];
        if j.retried {
            continue;
        }
        scan = scan.min(j.stage_idx);
        if j.status == Status::Created && j.needs.is_some() {
            queue_job(&mut queue, d);
        }
        for &k in &index.dependents[d] {
            if jobs[k].status == Status::Created {
                queue_job(&mut queue, k);
            }
        }
    }
    let mut out = Vec::new();
    loop {
        // Before the first job of a later stage, the stage-mode jobs of the stages
        // passed: all are decided once everything before their stage is completed.
        let next_stage = queue.first().map_or(stages, |&(s, _, _)| s);
        if scan < stages && scan <= next_stage {
            let stage_idx = scan;
            scan += 1;
            if index.created_in_stage_mode[stage_idx] == 0 {
                continue;
            }
            let mut before = crate::processor::composite::KeyCounts::default();
            for c in &counts[..stage_idx] {
                before.absorb(c);
            }
            let prev = before
                .composite(Mode::Stage)
                .map_or(Status::Success, |s| s.status);
            if !prev.is_completed() {
                // Nothing later can be either (an active key stays in every later `prev`).
                scan = stages;
                continue;
            }
            for &k in &index.stage_jobs[stage_idx] {
                if jobs[k].needs.is_none() && status(&decided, k) == Status::Created {
                    queue_job(&mut queue, k);
                }
            }
            continue;
        }
        let Some((stage_idx, _, i)) = queue.pop_first() else {
            break;
        };
        let job = &jobs[i];
        if status(&decided, i) != Status::Created {
            continue;
        }
        let prev = match &job.needs {
            None => {
                let mut before = crate::processor::composite::KeyCounts::default();
                for c in &counts[..stage_idx] {
                    before.absorb(c);
                }
                let prev = before
                    .composite(Mode::Stage)
                    .map_or(Status::Success, |s| s.status);
                Some((prev, Mode::Stage))
            }
            Some(_) => dag_prev(state, job, |k| status(&decided, k)),
        };
        let Some(t) = prev.and_then(|(prev, mode)| decide(job, prev, mode, now)) else {
            continue;
        };
        decided.insert(i, t.to);
        counts[stage_idx].remove(Status::Created, job.allow_failure);
        counts[stage_idx].add(t.to, job.allow_failure);
        for &k in &index.dependents[i] {
            if status(&decided, k) == Status::Created {
                queue_job(&mut queue, k);
            }
        }
        out.push(Transition::Status(t));
    }
    out
}

/// `prev` of a DAG job: COMPOSITE_dag of its needed jobs present in the pipeline (an
/// empty set is `success`), with `status` giving each one's status in the pass.
fn dag_prev(
    state: &PipelineState,
    job: &JobState,
    status: impl Fn(usize) -> Status,
) -> Option<(Status, Mode)> {
    let jobs = state.jobs();
    let index = state.index();
    let needed = job
        .needs
        .iter()
        .flatten()
        .filter_map(|n| index.current.get(n.as_str()))
        .map(|&k| (status(k), jobs[k].allow_failure));
    let prev = composite(needed, Mode::Dag).map_or(Status::Success, |s| s.status);
    Some((prev, Mode::Dag))
}

/// The decision for a `created` job after `prev`: none while `prev` is not completed.
fn decide(job: &JobState, prev: Status, mode: Mode, now: Timestamp) -> Option<Change> {
    if !prev.is_completed() {
        return None;
    }
    let (event, to) = if valid_prev(job.when, prev, mode) {
        processed(job, now)
    } else {
        (JobEvent::Skip, Status::Skipped)
    };
    Some(Change {
        job: job.id,
        event,
        from: Status::Created,
        to,
        at: now,
    })
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

/// Positions of the current jobs of one stage in processing order: a job after the jobs
/// of the same stage it needs, row order otherwise (the lowest ready position first;
/// should loaded rows form a cycle, the lowest remaining one). O(k log k + needs).
pub(crate) fn stage_order(
    jobs: &[JobState],
    stage_idx: usize,
    current: &HashMap<String, usize>,
) -> Vec<usize> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let members: Vec<usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, j)| !j.retried && j.stage_idx == stage_idx)
        .map(|(i, _)| i)
        .collect();
    // Unplaced same-stage needs of each member, and who waits for whom.
    let mut waiting_on: HashMap<usize, usize> = HashMap::with_capacity(members.len());
    let mut waiters: HashMap<usize, Vec<usize>> = HashMap::new();
    for &i in &members {
        let mut n = 0;
        let mut seen = HashSet::new();
        for need in jobs[i].needs.iter().flatten() {
            if let Some(&k) = current.get(need.as_str()) {
                if k != i && jobs[k].stage_idx == stage_idx && seen.insert(k) {
                    n += 1;
                    waiters.entry(k).or_default().push(i);
                }
            }
        }
        waiting_on.insert(i, n);
    }
    let mut ready: BinaryHeap<Reverse<usize>> = members
        .iter()
        .filter(|i| waiting_on.get(i) == Some(&0))
        .map(|&i| Reverse(i))
        .collect();
    let mut placed = HashSet::with_capacity(members.len());
    let mut order = Vec::with_capacity(members.len());
    while order.len() < members.len() {
        let i = match ready.pop() {
            Some(Reverse(i)) => i,
            // A cycle (never in a compiled pipeline): the lowest unplaced position.
            None => match members.iter().find(|i| !placed.contains(*i)) {
                Some(&i) => i,
                None => break,
            },
        };
        if !placed.insert(i) {
            continue;
        }
        order.push(i);
        for &w in waiters.get(&i).into_iter().flatten() {
            if let Some(n) = waiting_on.get_mut(&w) {
                *n = n.saturating_sub(1);
                if *n == 0 && !placed.contains(&w) {
                    ready.push(Reverse(w));
                }
            }
        }
    }
    order
}

impl PipelineState {
    /// Run one processing pass over what changed since the last one (`process_changed`)
    /// and commit it, then move the pipeline status as GitLab's `update_pipeline!` does
    /// ([`super::next_pipeline_status`]); returns the job transitions to persist (the
    /// status is [`super::pipeline_status`]). O(what changed + stages²).
    pub fn advance(&mut self, now: Timestamp) -> Vec<Transition> {
        let ts = process_changed(self, now);
        self.commit_all(&ts);
        self.settle_status();
        self.end_pass();
        ts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::{
        AutoCancel, CancelCause, CancelScope, Event, FailureReason, JobId, RetryPolicy, apply,
    };

    /// A small deterministic generator (xorshift), so a failure names its seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % (n.max(1) as u64)).unwrap_or(0)
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.next() % 100 < percent
        }
    }

    /// A random pipeline: stage-mode and DAG jobs (needs in earlier stages or earlier in
    /// the same stage), every `when`, some `allow_failure`, some retries, some resource
    /// groups.
    fn random_pipeline(rng: &mut Rng) -> PipelineState {
        let stages = 1 + rng.below(4);
        let n = 2 + rng.below(10);
        let mut jobs: Vec<JobState> = Vec::new();
        for i in 0..n {
            let stage_idx = (i * stages / n).min(stages - 1);
            let needs = if rng.chance(50) {
                let mut needs = Vec::new();
                for k in 0..i {
                    if rng.chance(30) {
                        needs.push(format!("job{k}"));
                    }
                }
                Some(needs)
            } else {
                None
            };
            let when = match rng.below(8) {
                0 => When::Manual,
                1 => When::OnFailure,
                2 => When::Always,
                3 => When::Delayed,
                _ => When::OnSuccess,
            };
            jobs.push(JobState {
                id: JobId(u32::try_from(i + 1).unwrap_or(0)),
                name: format!("job{i}"),
                stage_idx,
                status: Status::Created,
                when,
                allow_failure: rng.chance(20),
                allow_failure_exit_codes: Vec::new(),
                needs,
                retry: RetryPolicy {
                    max: rng.chance(20).then_some(1),
                    ..RetryPolicy::default()
                },
                start_in: (when == When::Delayed && rng.chance(50)).then_some(30),
                timeout: None,
                interruptible: rng.chance(50),
                resource_group: rng.chance(10).then(|| "deploy".to_owned()),
                attempt: 1,
                retried: false,
                enqueue_immediately: false,
                exit_code: None,
                failure_reason: None,
                graceful_cancel: false,
                effective_timeout: None,
                queued_at: None,
                scheduled_at: None,
                started_at: None,
                finished_at: None,
                updated_at: None,
            });
        }
        let names = (0..stages).map(|s| format!("s{s}")).collect();
        PipelineState::from_parts(names, jobs, AutoCancel::default(), Status::Created)
            .expect("a valid pipeline")
    }

    /// A random event for a random current job (or the pipeline).
    fn random_event(rng: &mut Rng, state: &PipelineState) -> Event {
        let current: Vec<&JobState> = state.current_jobs().collect();
        let j = current[rng.below(current.len())];
        let job = j.id;
        match (j.status, rng.below(10)) {
            (_, 0) => Event::CancelJob { job },
            (_, 1) => Event::RetryPipeline,
            (_, 2) if rng.chance(30) => Event::CancelPipeline {
                scope: CancelScope::All,
                cause: CancelCause::User,
            },
            (Status::Pending, _) => Event::JobStarted {
                job,
                timeout: None,
                graceful_cancel: rng.chance(30),
            },
            (Status::Running | Status::Canceling, k) if k < 7 => Event::JobSucceeded { job },
            (Status::Running | Status::Canceling, _) => Event::JobFailed {
                job,
                reason: FailureReason::ScriptFailure,
                exit_code: Some(1),
            },
            (Status::WaitingForResource, _) => Event::ResourceAssigned { job },
            (Status::Manual | Status::Scheduled, _) => Event::PlayJob { job },
            (Status::Failed | Status::Canceled | Status::Success, _) => Event::RetryJob { job },
            _ => Event::ScheduledTimeReached { job },
        }
    }

    /// The processing pass as it was before it became incremental: a full pass each time.
    fn advance_in_full(state: &mut PipelineState, now: Timestamp) {
        let ts = process(state, now);
        state.commit_all(&ts);
        state.settle_status();
        state.end_pass();
    }

    /// The incremental pass decides exactly what full passes decide: two copies of random
    /// pipelines take the same random events, one advanced incrementally, one in full,
    /// and must stay equal (jobs, pipeline and stage statuses) after every event.
    #[test]
    fn incremental_processing_decides_as_full_passes() {
        for seed in 1..=400u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut incremental = random_pipeline(&mut rng);
            let mut full = incremental.clone();
            let mut now = Timestamp(1_000);
            incremental.advance(now);
            advance_in_full(&mut full, now);
            assert_eq!(incremental, full, "seed {seed}: first pass");
            for step in 0..60 {
                now = now.plus(1 + u64::try_from(rng.below(40)).unwrap_or(0));
                let event = random_event(&mut rng, &incremental);
                let a = apply(&mut incremental, &event, now);
                let b = apply(&mut full, &event, now);
                assert_eq!(a.is_ok(), b.is_ok(), "seed {seed} step {step}: {event:?}");
                incremental.advance(now);
                advance_in_full(&mut full, now);
                assert_eq!(
                    incremental, full,
                    "seed {seed} step {step}: after {event:?}"
                );
                assert!(
                    process(&incremental, now).is_empty(),
                    "seed {seed} step {step}: a full pass still decides something"
                );
            }
        }
    }

    /// A pass after a job ends visits its dependents, not the pipeline: in a 10-stage DAG
    /// of 10,000 jobs each needing two of the stage before, one job's success decides
    /// only the jobs that need it.
    #[test]
    fn a_pass_visits_what_changed() {
        let stages = 10;
        let per_stage = 1_000;
        let mut jobs = Vec::new();
        for s in 0..stages {
            for k in 0..per_stage {
                let i = s * per_stage + k;
                let needs = (s > 0).then(|| {
                    vec![
                        format!("j{}", (s - 1) * per_stage + k),
                        format!("j{}", (s - 1) * per_stage + (k + 1) % per_stage),
                    ]
                });
                let mut j = random_pipeline(&mut Rng(7)).jobs()[0].clone();
                j.id = JobId(u32::try_from(i + 1).unwrap_or(0));
                j.name = format!("j{i}");
                j.stage_idx = s;
                j.when = When::OnSuccess;
                j.allow_failure = false;
                j.needs = needs;
                j.resource_group = None;
                j.start_in = None;
                jobs.push(j);
            }
        }
        let names = (0..stages).map(|s| format!("s{s}")).collect();
        let mut state =
            PipelineState::from_parts(names, jobs, AutoCancel::default(), Status::Created)
                .expect("valid");
        let now = Timestamp(1);
        // The first pass is a full one: the first stage is queued.
        assert_eq!(state.advance(now).len(), per_stage);
        for k in 0..per_stage {
            let job = JobId(u32::try_from(k + 1).unwrap_or(0));
            apply(
                &mut state,
                &Event::JobStarted {
                    job,
                    timeout: None,
                    graceful_cancel: false,
                },
                now,
            )
            .expect("start");
            apply(&mut state, &Event::JobSucceeded { job }, now).expect("success");
            let decided = state.advance(now);
            // The job of the next stage at k - 1 needs jobs k - 1 and k: ready once both
            // are done; the last one needs 999 and 0.
            let expected = match k {
                0 => 0,
                k if k == per_stage - 1 => 2,
                _ => 1,
            };
            assert_eq!(decided.len(), expected, "after job {k}");
            assert!(state.journal().dirty.is_empty());
        }
        assert!(process(&state, now).is_empty());
    }

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
