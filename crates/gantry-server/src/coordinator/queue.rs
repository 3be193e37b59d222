//! The job queue: which pending job a runner gets (runner API §3.4), handed out exactly
//! once, and long polling (§3.3).
//!
//! Selection, for one runner: pending jobs oldest first (at most [`QUEUE_DEPTH`] looked
//! at), keeping those the runner may run — its project's jobs only for a project runner,
//! protected refs only for a `ref_protected` runner, every job tag among the runner's
//! tags, untagged jobs only with `run_untagged` — then fair share across projects: the
//! project with the fewest running jobs first, FIFO within a project. The store hands
//! the job over (`Store::assign_jobs`: pending → running, exactly once, whatever the
//! number of requests or processes); a job another runner took meanwhile is skipped.
//!
//! Every condition is answered by `runner_fit`, the one implementation of the matching
//! rules (`pending.rs` explains a wait with it): a group runner takes the jobs of projects
//! under its group (`runner_may_run`); a project runner also those of the projects it was
//! enabled for (`runner_projects`, `runner_serves`: the scope half); a runner with
//! `any_tags` (`gantry run`'s) takes every job whatever its tags. The assignments of
//! concurrent requests are committed together (`Store::assign_jobs`, behind the
//! coordinator's `assign_gate`), and waiting requests are grouped by what their runners can
//! take, a new job waking only those it fits (`waiters.rs`).
//!
//! The pending jobs are read into a [`Snapshot`] shared by every request of this process:
//! extended when the queue version changes (a job became pending: only the jobs queued
//! since the latest one read are read, O(new jobs) on the `(status, queued_at, id)`
//! index; nothing when the snapshot holds [`QUEUE_DEPTH`] jobs already: new ones queue
//! behind them; nothing either for the jobs this process's own decision made pending
//! when the snapshot was current: they join it with the version change,
//! [`Queue::bump_with`]), read whole after [`SNAPSHOT_TTL`] (jobs queued by another process), after
//! a job was put back (it keeps its place), or when a truncated snapshot runs dry for a
//! runner. A request takes its candidate out of the snapshot before asking the store, so
//! concurrent requests do not fight over one job; taking it is one pass over the jobs held
//! (O(jobs held) ≤ [`QUEUE_DEPTH`], under the snapshot's lock, which serializes this
//! process's pick-ups), which also counts the jobs the runner may run (the payload's
//! `queue_size`). Fair share's running jobs per project are read after a change only when
//! the snapshot holds more than one project's jobs.
//!
//! The service ([`Queue`], `Coordinator::queue()`) owns this process's view of the queue:
//! the queue version, the snapshot, the waiting requests and the assignments waiting for
//! the group commit (with the gate decisions hold too, see `Coordinator::decide`); it
//! calls the store only. The coordinator keeps what needs more: a request's whole answer
//! (the runner's heartbeat, the job's payload, the pipeline's copy brought up to the
//! assignment, a job put back and its pipeline processed again).
//!
//! Long polling: the queue version changes whenever a job becomes pending (`watch`
//! channel, no busy loop). A request whose `last_update` is the current version has seen
//! everything and waits for the next change; any other looks at once, then waits. A
//! change wakes only the waiting requests whose runners the new job fits (their group in
//! `waiters.rs`, with a margin for jobs others take first); a woken request looks again,
//! until `wait` ends.
//!
//! A job goes only to a request that can still receive it. A waiting request is a
//! future of the HTTP connection's task: when its runner hangs up (a restart, `SIGTERM`,
//! `SIGKILL`, a crash — the kernel closes the socket), the server reads the end of the
//! connection and drops the future, so it stops waiting and is never offered a job.
//! A request dropped after winning a job but before its answer is ready puts the job
//! back at once ([`Unsent`], and the group commit for an answer nobody awaits). What no
//! server can see — an answer written to a connection whose peer vanished without
//! closing it (a network drop, a machine that lost power) — is caught by the
//! acknowledgement bound: a job whose runner has not sent its first update within
//! [`super::CoordinatorConfig::job_ack_timeout`] (default
//! [`super::DEFAULT_JOB_ACK_TIMEOUT`], 60 s; the runner sends it as soon as it has the
//! job) goes back to the queue ([`Coordinator::requeue_unacknowledged`], run by the
//! timers every second). Putting back means: the same job `pending` again, no retry
//! attempt counted, its token revoked (a late call with it is `403`) and a fresh one
//! issued with the next assignment — exactly once, by a compare-and-set on the job row.
//! GitLab has the same bound only under its two-phase commit (two minutes, then the job
//! is dropped `runner_provisioning_timeout` and retried if its `retry` allows); without
//! it, a job its runner never received stays `running` until the stuck-job timer (an
//! hour).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_protocol::JobResponse;
use gantry_store::{Assignment, MAX_ASSIGN_BATCH, QueuedJob, RequeuedJob};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::processor::{Event, FailureReason, effective_timeout};

use super::error::{CoordinatorError, Result};
use super::spec::StoredSpec;
use super::state::AssignedJob;
use super::time::{now_ms, to_ts};
use super::views::Runner;
use super::waiters::{NewPending, Waiters};
use super::{Coordinator, token};

/// Pending jobs read per snapshot (GitLab examines 45 per request; a shared snapshot
/// can afford more, so a runner with unusual tags still finds its job).
const QUEUE_DEPTH: i64 = 1000;

/// Longest a snapshot is trusted (it misses jobs other processes queue).
const SNAPSHOT_TTL: Duration = Duration::from_secs(1);

/// How far back before the latest `queued_at` read an extension of the snapshot reads.
const QUEUED_AT_SLACK_MS: i64 = 2_000;

/// How often a polling runner's `contacted_at` is written.
const CONTACT_INTERVAL_MS: i64 = 60_000;

/// What a look at the queue for a runner found ([`Coordinator::try_assign`]).
enum Looked {
    /// A job, now the runner's, and its payload (boxed: a held request's future keeps
    /// room for the largest variant).
    Job(Box<JobResponse>),
    /// Nothing the runner may take.
    Nothing,
    /// The runner was deleted or paused since its request read it: no job for it.
    RunnerStopped,
}

/// What the runner said about itself in the job request, beyond its token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `info.features.cancel_gracefully`: a cancel moves its running job to `canceling`.
    pub cancel_gracefully: bool,
    /// `info.features.job_inputs`: it interpolates `${{ job.inputs.* }}`. A job with
    /// `inputs:` handed to a runner without it fails `runner_unsupported` (GitLab's
    /// `Ci::Build::RUNNER_FEATURES`).
    pub job_inputs: bool,
    /// Its version, platform, executor and address, written with `contacted_at`.
    pub runner: gantry_store::RunnerInfo,
    /// The `system_id` of the runner process that asked (its manager); empty when it
    /// sent none ([`gantry_store::LEGACY_SYSTEM_ID`]'s manager then).
    pub system_id: String,
}

/// An assignment waiting for the next group commit ([`Coordinator::assign`]).
pub(crate) struct WaitingAssignment {
    assignment: Assignment,
    /// The runner cancels gracefully (`canceling` applies to the job).
    graceful: bool,
    reply: tokio::sync::oneshot::Sender<std::result::Result<Option<Won>, String>>,
}

/// A job the runner now holds: its pipeline's status, the assignment's time and the
/// job's committed log size when its log is a file.
pub(crate) struct Won {
    pipeline_status: crate::processor::Status,
    at: i64,
    log_size: Option<u64>,
}

/// Pending jobs as last read, shared by this process's requests.
#[derive(Default)]
pub(crate) struct Snapshot {
    version: Option<u64>,
    loaded: Option<Instant>,
    /// The read hit [`QUEUE_DEPTH`]: more jobs wait behind these.
    truncated: bool,
    jobs: Vec<QueuedJob>,
    /// Running jobs per project (fair share), as read since the latest change of the
    /// queue (`running_current`) or before it.
    running: HashMap<i64, i64>,
    /// `running` was read since the snapshot last changed: it is read only when the
    /// snapshot holds more than one project's jobs, the only time fair share orders them.
    running_current: bool,
    /// The latest `queued_at` read: a change of the queue version reads only the jobs
    /// queued since (at or after it, less [`QUEUED_AT_SLACK_MS`]), not the queue whole.
    high: Option<i64>,
    /// Jobs taken out of the snapshot since it was read whole (not read back in by an
    /// extension while their assignment is under way).
    claimed: std::collections::HashSet<i64>,
}

impl Snapshot {
    /// Take the best job for `runner` out of the snapshot: fewest running jobs in its
    /// project first, then oldest. With it, how many of the jobs held `runner` may run
    /// (the claimed one included: the payload's `queue_size`). One pass, O(jobs held).
    fn claim(&mut self, runner: &Runner) -> (Option<QueuedJob>, usize) {
        let mut eligible = 0usize;
        // (running jobs of its project, index): the first of the fewest wins.
        let mut best: Option<(i64, usize)> = None;
        for (i, job) in self.jobs.iter().enumerate() {
            if !runner_may_run(runner, job) {
                continue;
            }
            eligible += 1;
            let running = self.running.get(&job.project_id).copied().unwrap_or(0);
            if best.is_none_or(|(fewest, _)| running < fewest) {
                best = Some((running, i));
            }
        }
        let Some((_, index)) = best else {
            return (None, eligible);
        };
        let job = self.jobs.remove(index);
        self.claimed.insert(job.id);
        (Some(job), eligible)
    }

    /// Whether the snapshot holds the jobs of more than one project. O(jobs held).
    fn spans_projects(&self) -> bool {
        let mut projects = self.jobs.iter().map(|j| j.project_id);
        projects
            .next()
            .is_some_and(|first| projects.any(|p| p != first))
    }

    /// Whether `runner` may run any job held: O(jobs held) at worst, stops at the first.
    fn has_eligible(&self, runner: &Runner) -> bool {
        self.jobs.iter().any(|j| runner_may_run(runner, j))
    }
}

/// The queue service (see the module docs): what this process knows of the pending jobs
/// and of the requests waiting for them.
pub(crate) struct Queue {
    store: gantry_store::Store,
    /// Bumped whenever a job becomes pending; long polls watch it.
    version: watch::Sender<u64>,
    /// Random per process, so versions of a restarted server never repeat.
    boot: u64,
    /// Pending jobs as last read.
    snapshot: tokio::sync::Mutex<Snapshot>,
    /// A job went back to the queue at its old place: the snapshot is read whole next.
    reread: AtomicBool,
    /// The job requests waiting in this process, by what their runners can take.
    waiters: Waiters,
    /// Serializes this process's job assignments (one database writer at a time); a
    /// decision holds it from its read to its commit.
    gate: tokio::sync::Mutex<()>,
    /// Assignments waiting for the gate; its holder commits them all (group commit).
    waiting: Mutex<Vec<WaitingAssignment>>,
    /// Reads of what joined the queue since the snapshot ([`Queue::extension_reads`]).
    extension_reads: std::sync::atomic::AtomicU64,
}

impl Queue {
    pub(crate) fn new(store: gantry_store::Store) -> Self {
        let boot = {
            use rand::RngCore;
            rand::rng().next_u64()
        };
        Self {
            store,
            version: watch::Sender::new(0),
            boot,
            snapshot: tokio::sync::Mutex::new(Snapshot::default()),
            reread: AtomicBool::new(false),
            waiters: Waiters::default(),
            gate: tokio::sync::Mutex::new(()),
            waiting: Mutex::new(Vec::new()),
            extension_reads: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many times the snapshot read what joined the queue since it was read: jobs
    /// this process's decisions made pending join it without one ([`Queue::bump_with`]).
    pub(crate) fn extension_reads(&self) -> u64 {
        self.extension_reads.load(Ordering::Relaxed)
    }

    /// The current queue version, as runners see it (`X-GitLab-Last-Update`).
    pub(crate) fn version(&self) -> String {
        format!("{:016x}{:016x}", self.boot, *self.version.borrow())
    }

    /// Jobs became pending, which ones is not known here (a job put back, a restart):
    /// a new queue version, and every waiting job request wakes.
    pub(crate) fn bump(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
        self.waiters.wake_all();
    }

    /// `jobs` became pending: a new queue version, and only requests whose runners can
    /// take one of them wake (`waiters.rs`).
    pub(crate) fn bump_for(&self, jobs: &[NewPending]) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
        self.waiters.wake_for(jobs);
    }

    /// [`Queue::bump_for`] with the jobs' queue rows (`queued`, committed by this
    /// process's decision): when the snapshot held everything up to the version before
    /// this one, they join it at once and it is current, so the requests they wake take
    /// them without reading the queue. Otherwise (another change came between, the
    /// snapshot is full, or a request holds it: a decision never waits for a queue read)
    /// the next request reads what is new, as after `bump_for`. O(jobs held + jobs new).
    pub(crate) fn bump_with(&self, jobs: &[NewPending], queued: Vec<QueuedJob>) {
        let Ok(mut snap) = self.snapshot.try_lock() else {
            self.bump_for(jobs);
            return;
        };
        let (mut before, mut after) = (0, 0);
        self.version.send_modify(|v| {
            before = *v;
            *v = v.wrapping_add(1);
            after = *v;
        });
        let fits = usize::try_from(QUEUE_DEPTH)
            .is_ok_and(|depth| snap.jobs.len().saturating_add(queued.len()) <= depth);
        if snap.version == Some(before) && !snap.truncated && fits {
            for job in queued {
                let held =
                    snap.claimed.contains(&job.id) || snap.jobs.iter().any(|j| j.id == job.id);
                if !held {
                    snap.high = snap.high.max(job.queued_at);
                    snap.jobs.push(job);
                }
            }
            snap.jobs.sort_by_key(|j| (j.queued_at, j.id));
            snap.version = Some(after);
            snap.running_current = false;
        }
        drop(snap);
        self.waiters.wake_for(jobs);
    }

    /// The requests waiting in this process.
    pub(crate) fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    /// Jobs went back to the queue at their old place (their `queued_at`): the snapshot
    /// is read whole next.
    pub(crate) fn reread(&self) {
        self.reread.store(true, Ordering::SeqCst);
    }

    /// The gate of this process's assignments, which a decision holds from its read of a
    /// pipeline to its commit.
    pub(crate) fn gate(&self) -> &tokio::sync::Mutex<()> {
        &self.gate
    }

    /// Queue `assignment` for the next group commit.
    fn wait_for_commit(&self, assignment: WaitingAssignment) {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(assignment);
    }

    /// Up to [`MAX_ASSIGN_BATCH`] assignments waiting for the gate's holder to commit.
    fn take_waiting(&self) -> Vec<WaitingAssignment> {
        let mut queue = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = queue.len().min(MAX_ASSIGN_BATCH);
        queue.drain(..n).collect()
    }

    /// A job of `project_id` was handed out: it counts among the project's running jobs
    /// for fair share until the snapshot is read again.
    async fn started(&self, project_id: i64) {
        *self
            .snapshot
            .lock()
            .await
            .running
            .entry(project_id)
            .or_insert(0) += 1;
    }

    /// Take the next candidate for `runner` out of the (fresh enough) snapshot.
    pub(crate) async fn next_candidate(
        &self,
        runner: &Runner,
    ) -> Result<Option<(QueuedJob, i64, i64)>> {
        let mut snap = self.snapshot.lock().await;
        let version = *self.version.borrow();
        let behind = snap.version != Some(version);
        let whole = snap.loaded.is_none_or(|t| t.elapsed() > SNAPSHOT_TTL)
            || (snap.truncated && !snap.has_eligible(runner))
            || self.reread.swap(false, Ordering::SeqCst)
            || (behind && snap.high.is_none());
        if whole {
            let jobs = self.store.pending_queue(QUEUE_DEPTH).await?;
            snap.truncated = i64::try_from(jobs.len()).unwrap_or(i64::MAX) >= QUEUE_DEPTH;
            snap.high = jobs.last().and_then(|j| j.queued_at);
            snap.jobs = jobs;
            snap.claimed.clear();
            snap.loaded = Some(Instant::now());
        } else if behind && snap.truncated {
            // New jobs queue behind the ones held, which are enough for now: they are
            // read when the snapshot runs dry for a runner (above).
        } else if behind {
            // What joined the queue since: O(jobs new), whatever the queue's length.
            let room = QUEUE_DEPTH.saturating_sub(i64::try_from(snap.jobs.len()).unwrap_or(0));
            // A decision's `queued_at` is its start: one that waited for its pipeline's
            // lock may commit a time older than the latest read. Read back
            // `QUEUED_AT_SLACK_MS` (what was read already is skipped below).
            let since = snap.high.unwrap_or(0).saturating_sub(QUEUED_AT_SLACK_MS);
            self.extension_reads.fetch_add(1, Ordering::Relaxed);
            let new = self
                .store
                .pending_queue_after((since, -1), room.max(1))
                .await?;
            snap.truncated = i64::try_from(new.len()).unwrap_or(i64::MAX) >= room.max(1);
            let held: std::collections::HashSet<i64> = snap
                .jobs
                .iter()
                .map(|j| j.id)
                .chain(snap.claimed.iter().copied())
                .collect();
            if let Some(last) = new.last().and_then(|j| j.queued_at) {
                snap.high = snap.high.max(Some(last));
            }
            let mut fresh: Vec<QueuedJob> =
                new.into_iter().filter(|j| !held.contains(&j.id)).collect();
            // Older times first, as a whole read orders them.
            snap.jobs.append(&mut fresh);
            snap.jobs.sort_by_key(|j| (j.queued_at, j.id));
        }
        if whole || behind {
            snap.version = Some(version);
            snap.running_current = false;
        }
        // Fair share orders the jobs of different projects; one project's jobs go
        // oldest first whatever it runs, so the counts (a read of every running job's
        // row) wait until a second project queues.
        if !snap.running_current && snap.spans_projects() {
            snap.running = self
                .store
                .running_jobs_per_project()
                .await?
                .into_iter()
                .collect();
            snap.running_current = true;
        }
        let (claimed, eligible) = snap.claim(runner);
        let size = i64::try_from(eligible).unwrap_or(i64::MAX);
        Ok(claimed.map(|j| (j, size, 1)))
    }
}

impl Coordinator {
    /// Hand a pending job to `runner`, holding the request up to `wait` until one it may
    /// run becomes pending. `None` when none came in time (answer `204` with
    /// [`Coordinator::queue_version`]). `last_update`: the version the runner last saw;
    /// when it is current nothing changed since, so the request waits first.
    pub async fn request_job(
        &self,
        runner: &Runner,
        last_update: Option<&str>,
        wait: Duration,
    ) -> std::result::Result<Option<JobResponse>, CoordinatorError> {
        self.request_job_with(runner, last_update, wait, &RequestInfo::default())
            .await
    }

    /// [`Coordinator::request_job`] with what the runner advertised (graceful cancel).
    pub async fn request_job_with(
        &self,
        runner: &Runner,
        last_update: Option<&str>,
        wait: Duration,
        info: &RequestInfo,
    ) -> std::result::Result<Option<JobResponse>, CoordinatorError> {
        let answer = self
            .answer_job_request(runner, last_update, wait, info)
            .await;
        if let Ok(job) = &answer {
            self.inner.metrics.job_request(job.is_some());
        }
        answer
    }

    async fn answer_job_request(
        &self,
        runner: &Runner,
        last_update: Option<&str>,
        wait: Duration,
        info: &RequestInfo,
    ) -> std::result::Result<Option<JobResponse>, CoordinatorError> {
        let deadline = Instant::now() + wait;
        let manager = self.runner_contact(runner, info).await;
        if runner.paused {
            return Ok(None);
        }
        // Registered before the version is read and the queue looked at: a job that
        // becomes pending meanwhile wakes this request (`waiters.rs`).
        let mut ticket = self.queue().waiters().register(runner);
        let current = self.queue().version();
        let mut look_now = last_update != Some(current.as_str());
        loop {
            if look_now {
                // A wake not used because this request went away is handed on.
                let mut woken = self.queue().waiters().woken(runner);
                // Boxed: the assignment's future (payload included) is many kilobytes,
                // and a held request would carry its room all the while it waits.
                let looked = Box::pin(self.try_assign(runner, info, manager)).await?;
                woken.used();
                match looked {
                    Looked::Job(job) => return Ok(Some(*job)),
                    // Deleted or paused while this request was held: it ends now.
                    Looked::RunnerStopped => return Ok(None),
                    Looked::Nothing => {}
                }
            }
            look_now = true;
            if tokio::time::timeout_at(deadline, ticket.woken())
                .await
                .is_err()
            {
                return Ok(None);
            }
            // Woken: the ticket has left the waiters; wait again on a new one, taken
            // before looking.
            ticket = self.queue().waiters().register(runner);
        }
    }

    /// Hand a job to a runner ([`gantry_store::Store::assign_jobs`]), in one commit with
    /// the assignments other requests of this process make at the same moment. SQLite
    /// takes one writer at a time: the request holding the gate commits every assignment
    /// queued behind it in one statement, so a burst of requests costs a few commits,
    /// not one each.
    async fn assign(&self, assignment: Assignment, graceful: bool) -> Result<Option<Won>> {
        let (reply, mut answer) = tokio::sync::oneshot::channel();
        self.queue().wait_for_commit(WaitingAssignment {
            assignment,
            graceful,
            reply,
        });
        let lost = || CoordinatorError::Batch("hand the job to the runner: no answer".into());
        // Another request's commit may answer this one first.
        let gate = tokio::select! {
            done = &mut answer => return done.map_err(|_| lost())?.map_err(CoordinatorError::Batch),
            gate = self.queue().gate().lock() => gate,
        };
        loop {
            if let Ok(done) = answer.try_recv() {
                return done.map_err(CoordinatorError::Batch);
            }
            // In a task of its own: a request dropped meanwhile (its runner hung up) must
            // not drop the answers of the others, or leave a committed assignment unsaid.
            let this = self.clone();
            let committed = tokio::spawn(async move { this.commit_waiting().await }).await;
            if !committed.unwrap_or(false) {
                drop(gate);
                return Err(lost());
            }
        }
    }

    /// Commit up to [`MAX_ASSIGN_BATCH`] waiting assignments in one statement and answer
    /// each; false when none was waiting.
    async fn commit_waiting(&self) -> bool {
        let waiting = self.queue().take_waiting();
        if waiting.is_empty() {
            return false;
        }
        let batch: Vec<Assignment> = waiting.iter().map(|w| w.assignment.clone()).collect();
        let at = now_ms();
        let outcome = self.inner.store.assign_jobs(&batch, at).await;
        if let Ok(won) = &outcome {
            self.note_assigned(&waiting, won, at);
        }
        let mut granted = std::collections::HashSet::new();
        for w in waiting {
            let answer = match &outcome {
                // The store gives a job named twice to its first assignment.
                Ok(won) => Ok(won
                    .get(&w.assignment.job_id)
                    .filter(|_| granted.insert(w.assignment.job_id))
                    .map(|a| Won {
                        pipeline_status: a.pipeline_status,
                        at,
                        log_size: (!a.trace_in_db)
                            .then(|| u64::try_from(a.trace_size).ok())
                            .flatten(),
                    })),
                Err(e) => Err(format!("hand the job to the runner: {e}")),
            };
            if let Err(Ok(Some(_))) = w.reply.send(answer) {
                // Its request was dropped (the runner hung up) while the commit ran.
                self.spawn_put_back(w.assignment.job_id, w.assignment.token_hash);
            }
        }
        true
    }

    /// Bring this process's copies of the pipelines of assigned jobs up to the store
    /// (`state::Loaded::assigned`; a copy that was not current is dropped). O(jobs
    /// assigned).
    fn note_assigned(
        &self,
        waiting: &[WaitingAssignment],
        won: &HashMap<i64, gantry_store::Assigned>,
        at: i64,
    ) {
        let mut by_pipeline: HashMap<i64, (i64, Vec<AssignedJob>)> = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        for w in waiting {
            let a = &w.assignment;
            let Some(got) = won.get(&a.job_id) else {
                continue;
            };
            if !seen.insert(a.job_id) {
                continue;
            }
            by_pipeline
                .entry(got.pipeline_id)
                .or_insert_with(|| (got.lock_version, Vec::new()))
                .1
                .push(AssignedJob {
                    job_id: a.job_id,
                    runner_id: a.runner_id,
                    runner_manager_id: a.runner_manager_id,
                    timeout_secs: a.timeout_secs,
                    graceful: w.graceful,
                });
        }
        let mut copies = self.copies();
        for (pipeline_id, (lock_version, jobs)) in by_pipeline {
            copies.assigned(pipeline_id, lock_version, jobs, at);
        }
    }

    /// Record that `runner`'s process (`info.system_id`) asked for a job: its heartbeat
    /// (the runner's row and its manager's, created the first time) when the last one is
    /// [`CONTACT_INTERVAL_MS`] old or unknown to this process. Returns the manager's id
    /// (`None` when its heartbeat could not be written: the job request goes on).
    async fn runner_contact(&self, runner: &Runner, info: &RequestInfo) -> Option<i64> {
        let now = now_ms();
        let system_id = match info.system_id.as_str() {
            "" => gantry_store::LEGACY_SYSTEM_ID,
            id => id,
        };
        let cache = &self.inner.runner_cache;
        let known = cache.manager(runner.id, system_id);
        let due = |at: Option<i64>| at.is_none_or(|t| now - t >= CONTACT_INTERVAL_MS);
        if !due(runner.contacted_at) && !due(known.map(|(_, at)| at)) {
            return known.map(|(id, _)| id);
        }
        // Boxed, as the assignment: not room kept while the request waits.
        let beat = Box::pin(self.inner.store.runner_heartbeat(
            runner.id,
            system_id,
            now,
            &info.runner,
        ))
        .await;
        match beat {
            Ok(id) => {
                cache.contacted(runner.id, now);
                cache.manager_contacted(runner.id, system_id, id, now);
                Some(id)
            }
            Err(_) => known.map(|(id, _)| id),
        }
    }

    /// Look at the queue for `runner` until a job is assigned or none is left; the job
    /// records `manager` as the process that took it.
    async fn try_assign(
        &self,
        runner: &Runner,
        info: &RequestInfo,
        manager: Option<i64>,
    ) -> Result<Looked> {
        while let Some((queued, queue_size, depth)) = self.queue().next_candidate(runner).await? {
            let Some((mut job, spec)) = self.queued_job(&queued).await? else {
                continue;
            };
            if spec.is_bridge() {
                continue;
            }
            let project = self.facts().project(job.project_id).await?;
            let timeout = effective_timeout(
                spec.job.timeout,
                u64::try_from(project.timeout_secs).unwrap_or(3600),
                runner.maximum_timeout.and_then(|m| u64::try_from(m).ok()),
            );
            let job_token = token::new_token(token::JOB_TOKEN_PREFIX);
            let hash = token::hash(&job_token);
            let secs = i64::try_from(timeout.seconds).unwrap_or(i64::MAX);
            let assignment = Assignment {
                job_id: job.id,
                runner_id: runner.id,
                runner_manager_id: manager,
                token_hash: hash.clone(),
                timeout_secs: secs,
            };
            let Some(Won {
                pipeline_status,
                at: now,
                log_size,
            }) = self.assign(assignment, info.cancel_gracefully).await?
            else {
                // Another runner took it, or it is no longer pending; or this runner may
                // no longer take jobs (deleted or paused since it was read): the job is
                // still pending, back in the queue for the others.
                if !self.runner_still_takes_jobs(runner).await? {
                    self.queue().reread();
                    return Ok(Looked::RunnerStopped);
                }
                continue;
            };
            self.inner
                .metrics
                .job_picked(now - job.queued_at.unwrap_or(now));
            // From here until the payload is returned, a dropped request (its runner hung
            // up) puts the job back in the queue.
            let mut unsent = Unsent {
                coordinator: self,
                job: Some((job.id, hash.clone())),
            };
            self.executing()
                .handed_out((job.id, job.pipeline_id), hash, info.cancel_gracefully);
            if let Some(size) = log_size {
                self.traces().handed_out(job.id, size);
            }
            self.queue().started(job.project_id).await;
            // The pipeline's status follows (pending → running) through the usual path;
            // a running pipeline stays running, so skip the work then.
            if pipeline_status != crate::processor::Status::Running {
                self.refresh_running(job.pipeline_id, now).await?;
            }
            let pipeline = self.facts().pipeline(job.pipeline_id).await?;
            // What `assign_job` wrote.
            job.status = crate::processor::Status::Running;
            job.runner_id = Some(runner.id);
            job.started_at = Some(now);
            job.timeout_secs = Some(secs);
            let assigned = super::payload::Assigned {
                job: &job,
                spec: &spec,
                pipeline: &pipeline,
                project: &project,
                token: &job_token,
                queue: super::payload::QueueFacts {
                    size: queue_size,
                    depth,
                },
            };
            // The runner never sees a job whose payload fails: do not leave it running.
            let fail = |reason| {
                self.job_event(job.id, now_ms(), move |job| Event::JobFailed {
                    job,
                    reason,
                    exit_code: None,
                })
            };
            // A new attempt of a job whose environment could not be created fails again,
            // as its first attempt did (GitLab creates the environment for each attempt).
            let unnamed = spec
                .environment
                .as_ref()
                .filter(|_| job.environment_id.is_none())
                .and_then(|e| super::environment::check_name(&e.name).err());
            if let Some(why) = unnamed {
                unsent.settle();
                self.note_on_job(job.id, &format!("ERROR: the job could not start: {why}\n"))
                    .await;
                let _ = fail(FailureReason::EnvironmentCreationFailure).await;
                continue;
            }
            if spec.job.inputs.as_ref().is_some_and(|i| !i.is_empty()) && !info.job_inputs {
                unsent.settle();
                self.note_on_job(
                    job.id,
                    "ERROR: the job could not start: its runner does not support job inputs \
                     (`inputs:`); it needs a runner that announces the `job_inputs` feature\n",
                )
                .await;
                let _ = fail(FailureReason::RunnerUnsupported).await;
                continue;
            }
            // GitLab's "Prevent outdated deployment jobs" (`ci_forward_deployment_enabled`).
            if let Some(why) = self.outdated_deployment(&job, &project).await? {
                unsent.settle();
                self.note_on_job(job.id, &format!("ERROR: the job could not start: {why}\n"))
                    .await;
                let _ = fail(FailureReason::FailedOutdatedDeploymentJob).await;
                continue;
            }
            let built = self.build_payload(&assigned, runner, now).await;
            unsent.settle();
            match built {
                Ok(Ok(p)) => {
                    // A deploy job's URL naming a CI/CD variable (GitLab expands it with
                    // the job's variables). The job is the runner's whatever this does.
                    if let Err(e) = self.keep_deployment_url(&assigned, &p, &[]).await {
                        eprintln!(
                            "gantry: the environment URL of job {} is left as created: {e}",
                            job.id
                        );
                    }
                    return Ok(Looked::Job(Box::new(p)));
                }
                // §3.4: a dependency's artifacts expired, or (EE) no secrets provider;
                // the search goes on.
                Ok(Err(refusal)) => {
                    self.note_on_job(
                        job.id,
                        &format!("ERROR: the job could not start: {refusal}\n"),
                    )
                    .await;
                    let _ = fail(refusal.reason()).await;
                }
                Err(e) => {
                    // Why, for whoever reads the job's log (e.g. a project variable that
                    // does not decrypt with the server's key).
                    self.note_on_job(job.id, &format!("ERROR: the job could not start: {e}\n"))
                        .await;
                    let _ = fail(FailureReason::DataIntegrityFailure).await;
                    return Err(e);
                }
            }
        }
        Ok(Looked::Nothing)
    }

    /// Put back in the queue the jobs handed to a runner at least
    /// [`super::CoordinatorConfig::job_ack_timeout`] before `now_ms` that the runner never
    /// acknowledged (no update, no trace patch): their runner never received them or died
    /// at once. Each becomes `pending` again — the same job, no attempt counted, its token
    /// revoked (a new one comes with the next assignment) — exactly once whatever the
    /// number of coordinators ([`gantry_store::Store::requeue_unacknowledged`]); its
    /// pipeline is processed again (it stays `running`, as GitLab's pipeline machine keeps
    /// a running pipeline whose jobs are all queued) and held requests wake. Nothing is
    /// put back until this process has been up for the bound: runners whose first update
    /// failed while the coordinator was away get that long to deliver it.
    pub async fn requeue_unacknowledged(
        &self,
        now_ms: i64,
    ) -> std::result::Result<Vec<RequeuedJob>, CoordinatorError> {
        let bound = self.inner.cfg.job_ack_timeout;
        if self.inner.opened.elapsed() < bound {
            return Ok(Vec::new());
        }
        let bound_ms = i64::try_from(bound.as_millis()).unwrap_or(i64::MAX);
        let requeued = self
            .inner
            .store
            .requeue_unacknowledged(now_ms.saturating_sub(bound_ms))
            .await?;
        self.requeued(&requeued, now_ms).await?;
        Ok(requeued)
    }

    /// Put a job back in the queue at once: the answer handing it over (token hash
    /// `token_hash`) will never reach its runner, whose request was dropped.
    async fn put_back(&self, job_id: i64, token_hash: &str) -> Result<()> {
        if let Some(job) = self.inner.store.requeue_job(job_id, token_hash).await? {
            self.requeued(std::slice::from_ref(&job), now_ms()).await?;
        }
        Ok(())
    }

    /// [`Coordinator::put_back`] from a task of its own (the request's future is gone).
    fn spawn_put_back(&self, job_id: i64, token_hash: String) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime any more: the acknowledgement bound puts it back
        };
        let this = self.clone();
        runtime.spawn(async move {
            if let Err(e) = this.put_back(job_id, &token_hash).await {
                eprintln!(
                    "gantry: failed to put job {job_id} back in the queue after its runner hung up: {e}\nthe job goes back once the acknowledgement bound has passed"
                );
            }
        });
    }

    /// What follows jobs put back in the queue: their tokens are forgotten, their
    /// pipelines processed again, held requests woken.
    async fn requeued(&self, jobs: &[RequeuedJob], now_ms: i64) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        // They keep their place (their `queued_at`): the queue is read whole next.
        self.queue().reread();
        {
            // A late call with the old token is answered `403` with the job's status.
            let mut executing = self.executing();
            for job in jobs {
                executing.stopped(job.id);
            }
        }
        for job in jobs {
            self.traces().stopped(job.id);
        }
        let mut first_error = None;
        let mut pipelines: Vec<i64> = jobs.iter().map(|j| j.pipeline_id).collect();
        pipelines.sort_unstable();
        pipelines.dedup();
        for pipeline in pipelines {
            if let Err(e) = self.mutate(pipeline, now_ms, |_, _, _| Ok(())).await {
                first_error.get_or_insert(e);
            }
        }
        self.queue().bump();
        first_error.map_or(Ok(()), Err)
    }

    /// The row and spec of a queued job: from the snapshot and the spec cache when the
    /// spec was parsed before (the usual case: processing parsed it), else from the store.
    async fn queued_job(
        &self,
        q: &QueuedJob,
    ) -> Result<Option<(gantry_store::Job, Arc<StoredSpec>)>> {
        let cached = self.processing().spec(q.id);
        if let Some(spec) = cached {
            let job = gantry_store::Job {
                id: q.id,
                pipeline_id: q.pipeline_id,
                project_id: q.project_id,
                name: q.name.clone(),
                stage: q.stage.clone(),
                stage_idx: q.stage_idx,
                status: crate::processor::Status::Pending,
                attempt: q.attempt,
                retried: false,
                allow_failure: q.allow_failure,
                spec: String::new(),
                tags: q.tags.clone(),
                protected: q.protected,
                runner_id: None,
                runner_manager_id: None,
                exit_code: None,
                failure_reason: None,
                manual_variables: q.manual_variables.clone(),
                input_values: q.input_values.clone(),
                created_at: q.created_at,
                queued_at: q.queued_at,
                scheduled_at: None,
                started_at: None,
                finished_at: None,
                last_contact_at: None,
                timeout_secs: None,
                trace_size: 0,
                trace_checksum: None,
                coverage: None,
                environment_id: q.environment_id,
                environment_action: spec.job.environment.as_ref().map(|e| e.action().to_owned()),
                erased_at: None,
            };
            return Ok(Some((job, spec)));
        }
        let job = match self.inner.store.job(q.id).await {
            Ok(j) => j,
            Err(gantry_store::StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Ok(spec) = StoredSpec::parse(&job.spec) else {
            return Ok(None);
        };
        let spec = Arc::new(spec);
        self.processing().remember_spec(q.id, Arc::clone(&spec));
        Ok(Some((job, spec)))
    }

    /// Apply one event about a job (by database id) through the decision path.
    pub(crate) async fn job_event(
        &self,
        job_id: i64,
        now: i64,
        event: impl Fn(crate::processor::JobId) -> Event,
    ) -> Result<()> {
        let j = self.inner.store.job_without_spec(job_id).await?;
        self.job_event_in(j.pipeline_id, job_id, now, None, event)
            .await
            .map(drop)
    }

    /// [`Coordinator::job_event`] when the job's pipeline is known.
    pub(crate) async fn job_event_in(
        &self,
        pipeline_id: i64,
        job_id: i64,
        now: i64,
        guard: Option<gantry_store::JobTokenGuard>,
        event: impl Fn(crate::processor::JobId) -> Event,
    ) -> Result<Option<crate::processor::Status>> {
        self.mutate(pipeline_id, now, |state, loaded, extras| {
            extras.token_guard.clone_from(&guard);
            let id = loaded
                .job_id(job_id)
                .ok_or(CoordinatorError::NotFound("job"))?;
            crate::processor::apply(state, &event(id), to_ts(now))
                .map_err(|e| CoordinatorError::Conflict(e.to_string()))?;
            // What the event made of the job (processing the rest of the pipeline
            // afterwards does not touch it again).
            Ok(state.job(id).map(|j| j.status))
        })
        .await
    }
}

/// A job assigned to a request whose answer is not ready yet: dropped unsettled (the
/// request's future went with its connection), it puts the job back in the queue.
struct Unsent<'a> {
    coordinator: &'a Coordinator,
    /// The job's id and its token's hash.
    job: Option<(i64, String)>,
}

impl Unsent<'_> {
    /// The job is the runner's now (its payload is ready), or ended otherwise.
    fn settle(&mut self) {
        self.job = None;
    }
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some((job_id, token_hash)) = self.job.take() {
            self.coordinator.spawn_put_back(job_id, token_hash);
        }
    }
}

/// The runner-side conditions of §3.4 (scope, protection, tags).
pub(crate) fn runner_may_run(runner: &Runner, job: &QueuedJob) -> bool {
    runner_fit(runner, &JobNeeds::of(job)).runs()
}

/// What a job asks of a runner: the facts [`runner_fit`] reads.
pub(crate) struct JobNeeds<'a> {
    pub(crate) project_id: i64,
    /// The project's name (see [`QueuedJob::project_name`]).
    pub(crate) project_name: &'a str,
    /// Its pipeline's ref is protected.
    pub(crate) protected: bool,
    pub(crate) tags: &'a [String],
}

impl<'a> JobNeeds<'a> {
    pub(crate) fn of(job: &'a QueuedJob) -> Self {
        JobNeeds {
            project_id: job.project_id,
            project_name: &job.project_name,
            protected: job.protected,
            tags: &job.tags,
        }
    }
}

/// Each runner-side condition of §3.4, for one runner and one job: the one
/// implementation of the matching rules, read by job selection ([`runner_may_run`]) and
/// by why a job waits (`pending::pending_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fit {
    /// The runner serves the job's project: an instance runner, the project's own runner,
    /// or a runner of a group the project is under.
    pub(crate) scope: bool,
    /// The job's ref is protected, or the runner runs jobs of any ref.
    pub(crate) protection: bool,
    /// Every job tag is among the runner's, or the job is untagged and the runner runs
    /// untagged jobs, or the runner takes any tags.
    pub(crate) tags: bool,
}

impl Fit {
    pub(crate) fn runs(self) -> bool {
        self.scope && self.protection && self.tags
    }
}

/// Whether `runner` may run jobs of the project `project_id` named `project_name`: an
/// instance runner every project's, a group runner those under its group, a project
/// runner its own project's and those it was enabled for.
pub(crate) fn runner_serves(runner: &Runner, project_id: i64, project_name: &str) -> bool {
    runner
        .project_id
        .is_none_or(|p| p == project_id || runner.enabled_projects.contains(&project_id))
        && runner
            .groups
            .first()
            .is_none_or(|group| super::projects::under_group(project_name, &group.full_path))
}

pub(crate) fn runner_fit(runner: &Runner, job: &JobNeeds<'_>) -> Fit {
    let scope = runner_serves(runner, job.project_id, job.project_name);
    let protection = !runner.protected_only() || job.protected;
    let tags = runner.any_tags
        || if job.tags.is_empty() {
            runner.run_untagged
        } else {
            job.tags.iter().all(|t| runner.tag_list.contains(t))
        };
    Fit {
        scope,
        protection,
        tags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(tags: &[&str]) -> Runner {
        Runner::online_instance(1, tags)
    }

    fn job(id: i64, project_id: i64, tags: &[&str]) -> QueuedJob {
        QueuedJob {
            id,
            pipeline_id: 1,
            project_id,
            name: format!("job {id}"),
            stage: "test".into(),
            stage_idx: 0,
            attempt: 1,
            allow_failure: false,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            protected: false,
            manual_variables: None,
            input_values: None,
            created_at: 0,
            queued_at: Some(id),
            environment_id: None,
            project_name: format!("project{project_id}"),
        }
    }

    fn ids(snapshot: &Snapshot) -> Vec<i64> {
        snapshot.jobs.iter().map(|j| j.id).collect()
    }

    #[test]
    fn a_claim_takes_the_oldest_job_of_the_least_busy_project_and_counts_the_runners_jobs() {
        let mut snapshot = Snapshot {
            jobs: vec![
                job(1, 10, &["gpu"]),
                job(2, 10, &[]),
                job(3, 20, &[]),
                job(4, 20, &[]),
                job(5, 30, &["gpu"]),
            ],
            running: HashMap::from([(10, 3), (20, 1)]),
            ..Snapshot::default()
        };
        let untagged = runner(&[]);
        // Untagged jobs 2, 3 and 4 fit; project 20 runs fewer jobs than project 10: its
        // oldest, 3, goes. The count includes the job claimed.
        let (claimed, eligible) = snapshot.claim(&untagged);
        assert_eq!((claimed.map(|j| j.id), eligible), (Some(3), 3));
        assert_eq!(ids(&snapshot), [1, 2, 4, 5]);
        assert!(snapshot.claimed.contains(&3));
        // Project 30 runs nothing: the gpu runner takes its job before project 10's
        // older one.
        let (claimed, eligible) = snapshot.claim(&runner(&["gpu"]));
        assert_eq!((claimed.map(|j| j.id), eligible), (Some(5), 2));
        // Equally busy projects: the oldest job first.
        snapshot.running.clear();
        let (claimed, eligible) = snapshot.claim(&untagged);
        assert_eq!((claimed.map(|j| j.id), eligible), (Some(2), 2));
        assert!(snapshot.has_eligible(&untagged));
        assert_eq!(snapshot.claim(&untagged).0.map(|j| j.id), Some(4));
        // Nothing left for it: nothing claimed, nothing counted, the rest stays.
        assert!(!snapshot.has_eligible(&untagged));
        assert_eq!(snapshot.claim(&untagged), (None, 0));
        assert_eq!(ids(&snapshot), [1]);
    }
}
