//! The pipeline state the processor decides over: the stage list and every job row
//! (current attempts and retried ones), built from a compiled [`Pipeline`] or loaded by the
//! store with [`PipelineState::from_parts`].

use std::collections::{HashMap, HashSet};
use std::fmt;

use gantry_pipeline::{Job, Pipeline, When};
use serde::{Deserialize, Serialize};

use super::FailureReason;
use super::composite::{KeyCounts, Mode, Summary};
use super::pipeline_machine::{next_pipeline_status, next_stage_status};
use super::process::stage_order;
use super::retry::RetryPolicy;
use super::status::Status;

/// A point in time, in whole seconds since the Unix epoch. The processor never reads a
/// clock: every function that needs "now" takes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// `self + secs`, saturating.
    pub fn plus(self, secs: u64) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(i64::try_from(secs).unwrap_or(i64::MAX)),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A job row's identity within its pipeline (the store keys rows by pipeline and job id).
/// [`PipelineState::from_pipeline`] numbers jobs from 1 in definition order; a retry
/// takes the next free number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobId(pub u32);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// `workflow:auto_cancel:on_new_commit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnNewCommit {
    /// Cancel the whole pipeline if no non-interruptible job has started (the default).
    Conservative,
    /// Cancel only the `interruptible: true` jobs.
    Interruptible,
    /// Never auto-cancel.
    None,
}

/// `workflow:auto_cancel:on_job_failure`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnJobFailure {
    None,
    /// Cancel the pipeline when a job without `allow_failure` fails (and is not auto-retried).
    All,
}

/// The pipeline's `workflow:auto_cancel` after rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoCancel {
    pub on_new_commit: OnNewCommit,
    pub on_job_failure: OnJobFailure,
}

impl Default for AutoCancel {
    fn default() -> Self {
        AutoCancel {
            on_new_commit: OnNewCommit::Conservative,
            on_job_failure: OnJobFailure::None,
        }
    }
}

impl AutoCancel {
    /// From the compiled (validated) strings; anything unexpected keeps the default.
    pub fn from_model(a: &gantry_pipeline::AutoCancel) -> AutoCancel {
        AutoCancel {
            on_new_commit: match a.on_new_commit.as_str() {
                "interruptible" => OnNewCommit::Interruptible,
                "none" => OnNewCommit::None,
                _ => OnNewCommit::Conservative,
            },
            on_job_failure: match a.on_job_failure.as_str() {
                "all" => OnJobFailure::All,
                _ => OnJobFailure::None,
            },
        }
    }
}

/// One job row: configuration the processor needs plus the attempt's runtime state.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobState {
    pub id: JobId,
    pub name: String,
    pub stage_idx: usize,
    pub status: Status,
    pub when: When,
    /// Current value: the configured one, turned true when the job failed with one of
    /// `allow_failure_exit_codes`.
    pub allow_failure: bool,
    /// `allow_failure: {exit_codes}` criteria (only when `allow_failure` was false).
    pub allow_failure_exit_codes: Vec<i64>,
    /// Names of needed jobs; `None` = stage-ordered, `Some([])` = `needs: []`.
    pub needs: Option<Vec<String>>,
    pub retry: RetryPolicy,
    /// `start_in` of a delayed job, in seconds. A delayed job without one becomes manual.
    pub start_in: Option<u64>,
    /// The job's `timeout:` in seconds (see [`super::timeout::effective_timeout`]).
    pub timeout: Option<u64>,
    pub interruptible: bool,
    pub resource_group: Option<String>,
    /// 1 for the first attempt of a name, +1 per retry.
    pub attempt: u32,
    /// A later attempt exists; this row no longer counts for any status.
    pub retried: bool,
    /// Skip the manual/delayed gate when processed (a retried or played actionable job).
    pub enqueue_immediately: bool,
    pub exit_code: Option<i64>,
    pub failure_reason: Option<FailureReason>,
    /// The runner advertised graceful cancel when it picked the job (`canceling` then applies).
    pub graceful_cancel: bool,
    /// The timeout fixed at assignment (seconds).
    pub effective_timeout: Option<u64>,
    pub queued_at: Option<Timestamp>,
    pub scheduled_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// Last transition or runner update.
    pub updated_at: Option<Timestamp>,
}

impl JobState {
    /// A `created` first attempt of a compiled job.
    pub fn from_model(id: JobId, job: &Job) -> JobState {
        JobState {
            id,
            name: job.name.clone(),
            stage_idx: job.stage_idx,
            status: Status::Created,
            when: job.when,
            allow_failure: job.allow_failure,
            allow_failure_exit_codes: if job.allow_failure {
                Vec::new()
            } else {
                job.allow_failure_exit_codes.clone()
            },
            needs: job
                .needs
                .as_ref()
                .map(|ns| ns.iter().map(|n| n.job.clone()).collect()),
            retry: RetryPolicy::from_model(&job.retry),
            start_in: job
                .start_in
                .as_deref()
                .and_then(gantry_pipeline::duration::parse_duration),
            timeout: job.timeout,
            interruptible: job.interruptible.unwrap_or(false),
            resource_group: job.resource_group.clone(),
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
        }
    }

    /// The next attempt of this job: same configuration, fresh runtime state. The
    /// configured `allow_failure` comes back (an exit-code flip belongs to one attempt).
    pub fn next_attempt(&self, id: JobId, enqueue_immediately: bool) -> JobState {
        JobState {
            id,
            status: Status::Created,
            allow_failure: self.allow_failure && self.allow_failure_exit_codes.is_empty(),
            attempt: self.attempt + 1,
            retried: false,
            enqueue_immediately,
            exit_code: None,
            failure_reason: None,
            graceful_cancel: false,
            effective_timeout: None,
            queued_at: None,
            scheduled_at: None,
            started_at: None,
            finished_at: None,
            updated_at: None,
            ..self.clone()
        }
    }

    /// DAG-scheduled (has `needs`, even `[]`).
    pub fn is_dag(&self) -> bool {
        self.needs.is_some()
    }

    /// A manual or delayed job (GitLab `action?`).
    pub fn is_action(&self) -> bool {
        matches!(self.when, When::Manual | When::Delayed)
    }

    /// A manual job that does not block: `manual` with `allow_failure`.
    pub fn is_optional_manual(&self) -> bool {
        self.status == Status::Manual && self.allow_failure
    }

    /// A manual job that blocks later stages and its dependents.
    pub fn is_blocking_manual(&self) -> bool {
        self.status == Status::Manual && !self.allow_failure
    }
}

/// The store handed over rows that cannot form a pipeline.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidState {
    #[error("load pipeline state: job id {0} appears twice")]
    DuplicateId(JobId),
    #[error("load pipeline state: two current (not retried) jobs are named `{0}`")]
    DuplicateName(String),
    #[error(
        "load pipeline state: job `{name}` has stage index {stage_idx}, but there are {stages} stages"
    )]
    StageOutOfRange {
        name: String,
        stage_idx: usize,
        stages: usize,
    },
}

/// A pipeline: stages in order, every job row, and the pipeline's own status.
///
/// Besides the rows it keeps an index (derived from them, never persisted) so that an
/// event costs work in proportion to the jobs it touches, not to the pipeline: jobs by
/// position and current name, each job's dependents, each stage's processing order, and
/// each stage's jobs counted by COMPOSITE key (stage and pipeline statuses in O(keys)).
/// Every change of a job goes through `PipelineState::modify`, which keeps the index
/// current and journals the change: the next processing pass starts from the changed jobs
/// ([`PipelineState::advance`]), and the coordinator persists only them
/// ([`PipelineState::take_originals`]).
#[derive(Clone, Debug, Serialize)]
pub struct PipelineState {
    stages: Vec<String>,
    jobs: Vec<JobState>,
    auto_cancel: AutoCancel,
    /// The pipeline status as the last processing pass left it (GitLab's stored
    /// `ci_pipelines.status`): the memory of [`next_pipeline_status`].
    status: Status,
    /// Each stage's status as the last pass left it (GitLab's `ci_stages.status`), by
    /// stage index: the memory of [`next_stage_status`].
    stage_statuses: Vec<Status>,
    #[serde(skip)]
    index: Index,
    #[serde(skip)]
    journal: Journal,
}

/// Equal rows and statuses (the index and the journal are derived).
impl PartialEq for PipelineState {
    fn eq(&self, other: &Self) -> bool {
        self.stages == other.stages
            && self.jobs == other.jobs
            && self.auto_cancel == other.auto_cancel
            && self.status == other.status
            && self.stage_statuses == other.stage_statuses
    }
}

/// A state's statuses and row count before a decision ([`PipelineState::mark`]).
#[derive(Clone, Debug)]
pub struct Mark {
    status: Status,
    stage_statuses: Vec<Status>,
    jobs: usize,
}

/// What [`PipelineState`] derives from its rows (positions are indexes into `jobs`).
/// Rebuilt whole ([`PipelineState::reindex`], O(jobs)) only when the set of current jobs
/// changes (a new attempt); kept current per change otherwise.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    /// The position of the current job of each name.
    pub(crate) current: HashMap<String, usize>,
    /// Per position (of a current job): the current jobs that `need` it.
    pub(crate) dependents: Vec<Vec<usize>>,
    /// Per stage: its current jobs in processing order (needed jobs of the same stage
    /// first, row order otherwise).
    pub(crate) stage_jobs: Vec<Vec<usize>>,
    /// Per position (of a current job): its place in its stage's processing order.
    pub(crate) place: Vec<usize>,
    /// Per stage: its current jobs counted by COMPOSITE key.
    pub(crate) counts: Vec<KeyCounts>,
    /// Per stage: its current `created` jobs without `needs` (processed in stage mode).
    pub(crate) created_in_stage_mode: Vec<u32>,
}

/// Changes since the last processing pass and since the last [`PipelineState::take_originals`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Journal {
    /// Positions changed since the last processing pass: where the next one starts.
    pub(crate) dirty: Vec<usize>,
    /// The next pass considers every `created` job (a state not processed here yet, or
    /// whose set of current jobs changed).
    pub(crate) all: bool,
    /// Each changed job as it was before its first change since the last
    /// [`PipelineState::take_originals`].
    originals: Vec<(usize, JobState)>,
    /// Per position: [`DIRTY`] and [`JOURNALED`] bits.
    marks: Vec<u8>,
}

const DIRTY: u8 = 1;
const JOURNALED: u8 = 2;

impl PipelineState {
    /// A new pipeline, `created`: every job `created`, numbered from 1 in definition order.
    pub fn from_pipeline(p: &Pipeline) -> PipelineState {
        let jobs = p
            .jobs
            .iter()
            .zip(1u32..)
            .map(|(job, n)| JobState::from_model(JobId(n), job))
            .collect();
        let mut state = PipelineState {
            stages: p.stages.clone(),
            jobs,
            auto_cancel: AutoCancel::from_model(&p.auto_cancel),
            status: Status::Created,
            stage_statuses: vec![Status::Created; p.stages.len()],
            index: Index::default(),
            journal: Journal::default(),
        };
        state.reindex();
        state
    }

    /// A pipeline loaded from rows, with its stored status. Rows keep the order given (it
    /// breaks ties when processing); ids must be unique, and so must the names of current
    /// jobs. Stage statuses are not stored: each stage starts at its jobs' COMPOSITE.
    pub fn from_parts(
        stages: Vec<String>,
        jobs: Vec<JobState>,
        auto_cancel: AutoCancel,
        status: Status,
    ) -> Result<PipelineState, InvalidState> {
        let mut ids = HashSet::new();
        let mut names = HashSet::new();
        for j in &jobs {
            if !ids.insert(j.id) {
                return Err(InvalidState::DuplicateId(j.id));
            }
            if !j.retried && !names.insert(j.name.as_str()) {
                return Err(InvalidState::DuplicateName(j.name.clone()));
            }
            if j.stage_idx >= stages.len() {
                return Err(InvalidState::StageOutOfRange {
                    name: j.name.clone(),
                    stage_idx: j.stage_idx,
                    stages: stages.len(),
                });
            }
        }
        let mut state = PipelineState {
            stage_statuses: Vec::new(),
            stages,
            jobs,
            auto_cancel,
            status,
            index: Index::default(),
            journal: Journal::default(),
        };
        state.reindex();
        state.stage_statuses = state
            .stage_composites()
            .into_iter()
            .map(|c| c.map_or(Status::Created, |c| c.status))
            .collect();
        Ok(state)
    }

    /// Rebuild the index from the rows (O(jobs + needs)); the next processing pass then
    /// considers every `created` job.
    fn reindex(&mut self) {
        let stages = self.stages.len();
        let n = self.jobs.len();
        let mut index = Index {
            current: HashMap::with_capacity(n),
            dependents: vec![Vec::new(); n],
            stage_jobs: vec![Vec::new(); stages],
            place: vec![0; n],
            counts: vec![KeyCounts::default(); stages],
            created_in_stage_mode: vec![0; stages],
        };
        for (i, j) in self.jobs.iter().enumerate() {
            if !j.retried {
                index.current.insert(j.name.clone(), i);
            }
        }
        for (i, j) in self.jobs.iter().enumerate() {
            if j.retried {
                continue;
            }
            for need in j.needs.iter().flatten() {
                if let Some(&k) = index.current.get(need.as_str()) {
                    if k != i && !index.dependents[k].contains(&i) {
                        index.dependents[k].push(i);
                    }
                }
            }
        }
        for stage_idx in 0..stages {
            let order = stage_order(&self.jobs, stage_idx, &index.current);
            for (place, &i) in order.iter().enumerate() {
                index.place[i] = place;
            }
            index.stage_jobs[stage_idx] = order;
        }
        self.index = index;
        for i in 0..n {
            self.count(i, true);
        }
        self.journal.marks.resize(n, 0);
        self.journal.all = true;
    }

    /// Count job `i` into (or out of) its stage's counts.
    fn count(&mut self, i: usize, add: bool) {
        let j = &self.jobs[i];
        if j.retried {
            return;
        }
        let Some(counts) = self.index.counts.get_mut(j.stage_idx) else {
            return;
        };
        if add {
            counts.add(j.status, j.allow_failure);
        } else {
            counts.remove(j.status, j.allow_failure);
        }
        if j.status == Status::Created && j.needs.is_none() {
            let n = &mut self.index.created_in_stage_mode[j.stage_idx];
            *n = if add {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            };
        }
    }

    /// The position of job `id` (O(1) when ids are positions + 1, as the coordinator and
    /// [`PipelineState::from_pipeline`] number them).
    pub(crate) fn position(&self, id: JobId) -> Option<usize> {
        let guess = usize::try_from(id.0).ok().and_then(|n| n.checked_sub(1));
        match guess.and_then(|i| self.jobs.get(i).map(|j| (i, j))) {
            Some((i, j)) if j.id == id => Some(i),
            _ => self.jobs.iter().position(|j| j.id == id),
        }
    }

    /// Change job `id` with `f`, keeping the index current and journaling the change
    /// (O(1), or O(jobs) when the job stops or starts being current). The only way jobs
    /// change after construction.
    pub(crate) fn modify(&mut self, id: JobId, f: impl FnOnce(&mut JobState)) {
        let Some(i) = self.position(id) else { return };
        let marks = &mut self.journal.marks[i];
        if *marks & JOURNALED == 0 {
            *marks |= JOURNALED;
            self.journal.originals.push((i, self.jobs[i].clone()));
        }
        if *marks & DIRTY == 0 {
            *marks |= DIRTY;
            self.journal.dirty.push(i);
        }
        let retried = self.jobs[i].retried;
        self.count(i, false);
        f(&mut self.jobs[i]);
        self.count(i, true);
        if self.jobs[i].retried != retried {
            self.reindex();
        }
    }

    /// Replace job `id` with what the database now says of it (a change made outside
    /// this state, e.g. an assignment): indexed as [`PipelineState::modify`], but not
    /// journaled as a change to persist.
    pub(crate) fn refresh(&mut self, job: JobState) {
        let Some(i) = self.position(job.id) else {
            return;
        };
        let retried = self.jobs[i].retried;
        self.count(i, false);
        let marks = &mut self.journal.marks[i];
        if *marks & DIRTY == 0 {
            *marks |= DIRTY;
            self.journal.dirty.push(i);
        }
        self.jobs[i] = job;
        self.count(i, true);
        if self.jobs[i].retried != retried {
            self.reindex();
        }
    }

    /// The jobs changed since the last call, each with what it was before (positions
    /// into [`PipelineState::jobs`]); new rows (beyond the ones there were) are not
    /// listed: they are all new.
    pub fn take_originals(&mut self) -> Vec<(usize, JobState)> {
        let originals = std::mem::take(&mut self.journal.originals);
        for (i, _) in &originals {
            if let Some(m) = self.journal.marks.get_mut(*i) {
                *m &= !JOURNALED;
            }
        }
        originals
    }

    /// A processing pass is done: nothing changed since.
    pub(crate) fn end_pass(&mut self) {
        for i in std::mem::take(&mut self.journal.dirty) {
            if let Some(m) = self.journal.marks.get_mut(i) {
                *m &= !DIRTY;
            }
        }
        self.journal.all = false;
    }

    /// Whether a job changed since the last [`PipelineState::take_originals`].
    pub fn has_changes(&self) -> bool {
        !self.journal.originals.is_empty()
    }

    /// Positions of the jobs changed since the last [`PipelineState::take_originals`].
    pub fn changed_positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.journal.originals.iter().map(|(i, _)| *i)
    }

    /// What a decision may change of the state besides its jobs: taken before it, to
    /// undo it with [`PipelineState::rollback`].
    pub fn mark(&self) -> Mark {
        Mark {
            status: self.status,
            stage_statuses: self.stage_statuses.clone(),
            jobs: self.jobs.len(),
        }
    }

    /// Undo the changes since `mark`, given the jobs' originals
    /// ([`PipelineState::take_originals`]): false (the state is then to be read again)
    /// when rows were added meanwhile. O(jobs changed).
    pub fn rollback(&mut self, mark: Mark, originals: Vec<(usize, JobState)>) -> bool {
        if self.jobs.len() != mark.jobs {
            return false;
        }
        for (_, job) in originals {
            self.refresh(job);
        }
        self.status = mark.status;
        self.stage_statuses = mark.stage_statuses;
        true
    }

    /// A state without stages or jobs (a placeholder while the real one is borrowed out).
    pub(crate) fn empty() -> PipelineState {
        PipelineState {
            stages: Vec::new(),
            jobs: Vec::new(),
            auto_cancel: AutoCancel::default(),
            status: Status::Created,
            stage_statuses: Vec::new(),
            index: Index::default(),
            journal: Journal::default(),
        }
    }

    pub(crate) fn index(&self) -> &Index {
        &self.index
    }

    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }

    pub fn stages(&self) -> &[String] {
        &self.stages
    }

    /// Every row, retried attempts included.
    pub fn jobs(&self) -> &[JobState] {
        &self.jobs
    }

    /// The current (not retried) jobs: the only ones any status counts.
    pub fn current_jobs(&self) -> impl Iterator<Item = &JobState> {
        self.jobs.iter().filter(|j| !j.retried)
    }

    pub fn job(&self, id: JobId) -> Option<&JobState> {
        self.position(id).map(|i| &self.jobs[i])
    }

    /// The current attempt of the job called `name`.
    pub fn current(&self, name: &str) -> Option<&JobState> {
        self.index.current.get(name).map(|&i| &self.jobs[i])
    }

    pub fn auto_cancel(&self) -> AutoCancel {
        self.auto_cancel
    }

    /// Retried attempts of `name` (GitLab `retries_count`).
    pub fn retries_count(&self, name: &str) -> u32 {
        let n = self
            .jobs
            .iter()
            .filter(|j| j.retried && j.name == name)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The id the next new row gets.
    pub fn next_id(&self) -> JobId {
        JobId(self.jobs.iter().map(|j| j.id.0).max().unwrap_or(0) + 1)
    }

    /// Add a row (a new attempt): the index is rebuilt.
    pub(crate) fn push(&mut self, job: JobState) {
        self.jobs.push(job);
        self.reindex();
    }

    /// The pipeline status as the last processing pass left it (see [`pipeline_status`]).
    pub fn status(&self) -> Status {
        self.status
    }

    /// COMPOSITE of all current jobs in stage mode (`None` without jobs); O(stages).
    pub fn composite_status(&self) -> Option<Summary> {
        let mut all = KeyCounts::default();
        for c in &self.index.counts {
            all.absorb(c);
        }
        all.composite(Mode::Stage)
    }

    /// The end of a processing pass: the pipeline and each stage follow their state
    /// machines from where they were to their jobs' COMPOSITE ([`next_pipeline_status`],
    /// [`next_stage_status`]). Without jobs, a status stays.
    pub(crate) fn settle_status(&mut self) {
        if let Some(c) = self.composite_status() {
            self.status = next_pipeline_status(self.status, c.status);
        }
        let composites = self.stage_composites();
        for (s, c) in self.stage_statuses.iter_mut().zip(composites) {
            if let Some(c) = c {
                *s = next_stage_status(*s, c.status);
            }
        }
    }

    /// COMPOSITE of each stage's current jobs, by stage index.
    fn stage_composites(&self) -> Vec<Option<Summary>> {
        self.index
            .counts
            .iter()
            .map(|c| c.composite(Mode::Stage))
            .collect()
    }

    /// COMPOSITE of the current jobs of stage `stage_idx` (`None` if it has none).
    pub fn stage_composite(&self, stage_idx: usize) -> Option<Summary> {
        self.index.counts.get(stage_idx)?.composite(Mode::Stage)
    }

    /// Status of stage `stage_idx` as the last processing pass left it (GitLab's stage
    /// state machine, [`next_stage_status`]); `warnings` from its current jobs. `None` if
    /// the stage has no current jobs.
    pub fn stage_status(&self, stage_idx: usize) -> Option<Summary> {
        let c = self.stage_composite(stage_idx)?;
        Some(Summary {
            status: self
                .stage_statuses
                .get(stage_idx)
                .copied()
                .unwrap_or(c.status),
            warnings: c.warnings,
        })
    }
}

/// The pipeline status, the one the coordinator persists: where GitLab's pipeline state
/// machine took it at the end of the last processing pass
/// ([`PipelineState::advance`], [`next_pipeline_status`] from the previous status to the
/// COMPOSITE of all current jobs in stage mode). A new pipeline, and one without jobs
/// (which the YAML processor never creates), is `created`.
///
/// `warnings`: some current job failed or was canceled with `allow_failure` (GitLab's
/// "passed with warnings" when `status` is `success`).
pub fn pipeline_status(state: &PipelineState) -> Summary {
    Summary {
        status: state.status,
        warnings: state.composite_status().is_some_and(|c| c.warnings),
    }
}
