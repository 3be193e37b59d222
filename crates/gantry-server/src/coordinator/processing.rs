//! The pipelines' processing service ([`Processing`], `Coordinator::processing()`): the
//! one path every state change takes — a pipeline's copy (or its rows) → the processor's
//! decision → `Store::apply` under the pipeline's `lock_version`, decided again when
//! another process got there first.
//!
//! It owns what that path keeps: the per-pipeline locks (one decision per pipeline at a
//! time in this process), the active pipelines' copies ([`Copies`]), the parsed job specs
//! by job id (a row's spec never changes; at most [`MAX_CACHED_SPECS`]), and two counters
//! (pipelines read whole, decisions refused as stale). It calls the store and the
//! processor only; what it needs of the rest of the coordinator — the queue's assignment
//! gate, which runners cancel gracefully, the project's name, observing a stored
//! decision — comes through [`Surroundings`]. A stored decision comes back as
//! [`Stored`]: the coordinator then wires its consequences (waking job requests, ended
//! jobs' tokens and logs, trigger jobs, a parent's bridge, resource groups).
//!
//! Cost per decision: O(jobs it changes + their dependents + stages²) over a kept copy;
//! O(jobs) when a copy is read (first decision, another process's change). Its locks:
//! `copies` and `specs` are held for a few map operations, never across an `await`; a
//! pipeline's lock is held across its decision.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use gantry_store::{PipelineChange, Store};

use crate::processor::{PipelineState, Status, Timestamp};

use super::copies::{self, Copies};
use super::error::Result;
use super::spec::StoredSpec;
use super::state::{Extras, Loaded, StatusChange, diff};
use super::{STRIPES, stripe, time, waiters};

/// Most parsed job specs kept; past it the cache starts again empty.
const MAX_CACHED_SPECS: usize = 100_000;

/// Most attempts of one decision the store refuses as stale before the error is returned.
const MAX_STALE_ATTEMPTS: u32 = 50;

/// What a decision needs of the rest of the coordinator.
pub(crate) trait Surroundings {
    /// The queue's assignment gate: held from a decision's read to its commit, so this
    /// process's assignments cannot make the decision stale.
    fn assignment_gate(&self) -> &tokio::sync::Mutex<()>;
    /// The jobs among `job_ids` whose runners cancel gracefully.
    fn graceful_among(&self, job_ids: &mut dyn Iterator<Item = i64>) -> HashSet<i64>;
    /// The project's name as job matching reads it (empty when unknown).
    fn project_name(&self, project_id: i64) -> String;
    /// A decision over `loaded` was stored as `change` (its traces and metrics).
    fn observe(&self, loaded: &Loaded, change: &PipelineChange, now_ms: i64);
}

/// A decision's outcome: the event's own result, whether it created new attempts (to be
/// processed in another decision: the store numbers new rows), and what was stored.
pub(crate) struct Decided<T> {
    pub out: T,
    pub again: bool,
    pub stored: Option<Stored>,
}

/// What a stored decision changed, for the coordinator to act on.
pub(crate) struct Stored {
    pub project_id: i64,
    /// Every job whose status moved.
    pub changes: Vec<StatusChange>,
    /// The existing jobs that became pending, as waking reads them.
    pub pending: Vec<waiters::NewPending>,
    /// The same jobs as the queue reads them, when every one is known (its project's
    /// name too): the queue's snapshot takes them without reading them back.
    pub queued: Option<Vec<gantry_store::QueuedJob>>,
    /// Trigger jobs that started: their downstream pipelines are to be created.
    pub bridges: Vec<i64>,
    /// A child pipeline completed: its parent's trigger job is to follow.
    pub sync_parent: bool,
    /// The pipeline got new rows (retries).
    pub new_rows: bool,
}

/// See the module docs.
pub(crate) struct Processing {
    store: Store,
    locks: Vec<tokio::sync::Mutex<()>>,
    copies: Mutex<Copies>,
    specs: Mutex<HashMap<i64, Arc<StoredSpec>>>,
    read_whole: AtomicU64,
    stale: AtomicU64,
}

impl Processing {
    pub(crate) fn new(store: Store) -> Self {
        Processing {
            store,
            locks: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            copies: Mutex::default(),
            specs: Mutex::default(),
            read_whole: AtomicU64::new(0),
            stale: AtomicU64::new(0),
        }
    }

    /// The pipeline's lock: one decision (or one whole read for a payload's cache) per
    /// pipeline at a time in this process.
    pub(crate) async fn lock(&self, pipeline_id: i64) -> tokio::sync::MutexGuard<'_, ()> {
        self.locks[stripe(pipeline_id)].lock().await
    }

    /// The active pipelines' copies.
    pub(crate) fn copies(&self) -> MutexGuard<'_, Copies> {
        self.copies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn specs(&self) -> MutexGuard<'_, HashMap<i64, Arc<StoredSpec>>> {
        self.specs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The job's parsed spec when this process has it.
    pub(crate) fn spec(&self, job_id: i64) -> Option<Arc<StoredSpec>> {
        self.specs().get(&job_id).cloned()
    }

    /// Keeps a job's parsed spec.
    pub(crate) fn remember_spec(&self, job_id: i64, spec: Arc<StoredSpec>) {
        self.remember_specs(vec![(job_id, spec)]);
    }

    fn remember_specs(&self, parsed: Vec<(i64, Arc<StoredSpec>)>) {
        if parsed.is_empty() {
            return;
        }
        let mut specs = self.specs();
        if specs.len() + parsed.len() > MAX_CACHED_SPECS {
            specs.clear();
        }
        specs.extend(parsed);
    }

    /// How many times a decision read its pipeline whole from the store (O(jobs) each)
    /// instead of taking the copy kept in memory: once per active pipeline, then only
    /// when another replica changed it.
    pub(crate) fn pipelines_read_whole(&self) -> u64 {
        self.read_whole.load(Ordering::Relaxed)
    }

    /// How many decisions the store refused because their pipeline changed after they
    /// read it (each is decided again): only another process's changes can do that,
    /// since this process's assignments wait for its decisions.
    pub(crate) fn stale_decisions(&self) -> u64 {
        self.stale.load(Ordering::Relaxed)
    }

    /// A pipeline's job rows (in id order) and their parsed specs. The specs are large
    /// and never change: they come from the cache, and are read (and parsed) only when
    /// the cache lacks one; the rows' `spec` text is then empty.
    pub(crate) async fn rows_with_specs(
        &self,
        pipeline_id: i64,
    ) -> Result<(Vec<gantry_store::Job>, Vec<Arc<StoredSpec>>)> {
        let mut rows = self.store.pipeline_jobs_without_spec(pipeline_id).await?;
        let cached = |rows: &[gantry_store::Job]| -> Vec<Option<Arc<StoredSpec>>> {
            let specs = self.specs();
            rows.iter().map(|r| specs.get(&r.id).cloned()).collect()
        };
        let mut found = cached(&rows);
        if found.iter().any(Option::is_none) {
            let texts: HashMap<i64, String> = self
                .store
                .pipeline_job_specs(pipeline_id)
                .await?
                .into_iter()
                .collect();
            for row in &mut rows {
                if let Some(text) = texts.get(&row.id) {
                    row.spec.clone_from(text);
                }
            }
            found = cached(&rows);
        }
        let mut specs = Vec::with_capacity(rows.len());
        let mut parsed = Vec::new();
        for (row, found) in rows.iter().zip(found) {
            match found {
                Some(s) => specs.push(s),
                None => {
                    let s = Arc::new(StoredSpec::parse(&row.spec)?);
                    parsed.push((row.id, Arc::clone(&s)));
                    specs.push(s);
                }
            }
        }
        self.remember_specs(parsed);
        Ok((rows, specs))
    }

    /// A pipeline as the store holds it now, read whole. O(jobs).
    pub(crate) async fn load(
        &self,
        pipeline_id: i64,
        around: &impl Surroundings,
    ) -> Result<Loaded> {
        let pipeline = self.store.pipeline(pipeline_id).await?;
        self.load_rows(pipeline, around).await
    }

    /// [`Processing::load`] once the pipeline's row is read (before its job rows: they
    /// are then at least as new as its `lock_version`).
    async fn load_rows(
        &self,
        pipeline: gantry_store::Pipeline,
        around: &impl Surroundings,
    ) -> Result<Loaded> {
        self.read_whole.fetch_add(1, Ordering::Relaxed);
        let (rows, specs) = self.rows_with_specs(pipeline.id).await?;
        let graceful = around.graceful_among(&mut rows.iter().map(|r| r.id));
        Loaded::build(pipeline, rows, specs, &graceful)
    }

    /// A pipeline to decide over, taken out of the active-pipeline cache when the copy
    /// there is current (one read of the pipeline's row), else read whole.
    /// The copy is then in use (`Copies::take_for_decision`) until given back
    /// (`Copies::keep`) or released. Callers hold the assignment gate.
    ///
    /// With `compare` false, a kept copy is taken as it is (no read; `true` with it: the
    /// caller's apply checks its `lock_version`).
    async fn load_current(
        &self,
        pipeline_id: i64,
        compare: bool,
        around: &impl Surroundings,
    ) -> Result<(Loaded, bool)> {
        // Taken before the row is read: an assignment committed in between waits for
        // this copy (`assigned_meanwhile`) instead of being missed by it.
        let cached = match self.copies().take_for_decision(pipeline_id) {
            // Every assignment this process committed is in it (the caller holds the
            // gate; `take_for_decision` found nothing assigned meanwhile).
            Some(copy) if !compare => return Ok((copy, true)),
            cached => cached,
        };
        let pipeline = match self.store.pipeline(pipeline_id).await {
            Ok(p) => p,
            Err(e) => {
                self.copies().release(pipeline_id);
                return Err(e.into());
            }
        };
        if let Some(mut loaded) = cached {
            let meanwhile = self.copies().release_meanwhile(pipeline_id);
            let mut later = Vec::new();
            // The caller holds the assignment gate: every assignment this process
            // committed is noted (`assigned_meanwhile`); a later `lock_version` is another
            // process's change, and the pipeline is read whole.
            let current =
                copies::catch_up(&mut loaded, meanwhile, pipeline.lock_version, &mut later);
            if current && loaded.pipeline.lock_version == pipeline.lock_version {
                if !later.is_empty() {
                    self.copies().keep_for_later(pipeline_id, later);
                }
                loaded.pipeline = pipeline;
                return Ok((loaded, false));
            }
        }
        let loaded = self.load_rows(pipeline, around).await;
        if loaded.is_err() {
            self.copies().release(pipeline_id);
        }
        loaded.map(|l| (l, false))
    }

    /// Decides and stores, without the pipeline's lock (callers hold it): `f` applies
    /// events to the pipeline's state (it runs again when the pipeline changed
    /// meanwhile), then the processing loop runs and the difference is stored. When `f`
    /// created new attempts they are stored first, unprocessed (`again`).
    pub(crate) async fn decide<T>(
        &self,
        pipeline_id: i64,
        now_ms: i64,
        around: &impl Surroundings,
        f: &mut impl FnMut(&mut PipelineState, &Loaded, &mut Extras) -> Result<T>,
    ) -> Result<Decided<T>> {
        let now = time::to_ts(now_ms);
        let mut attempt = 0;
        // The first attempt decides over the copy kept in memory without reading the
        // pipeline's row: the store's `lock_version` check at apply catches another
        // process's change (`Stale`). An attempt whose event changes nothing or is refused
        // stores nothing to check, so over a copy not compared with the store it is made
        // again over a compared one.
        let mut compare = false;
        loop {
            attempt += 1;
            // This process's assignments wait from the read of the pipeline's row to the
            // decision's commit: one committed in between would move the pipeline's
            // `lock_version` and make the decision stale (it was, for most job ends of a
            // busy pipeline: a rollback and a second decision each). Other processes'
            // assignments still can; `Stale` below takes care of them.
            let gate = around.assignment_gate().lock().await;
            let (mut loaded, trusted) = self.load_current(pipeline_id, compare, around).await?;
            compare = true;
            let mut state = std::mem::replace(&mut loaded.state, PipelineState::empty());
            let mark = state.mark();
            let mut extras = Extras::default();
            let out = match f(&mut state, &loaded, &mut extras) {
                Ok(out) => out,
                Err(e) => {
                    // A refused event changes nothing: the copy stays good.
                    if state.has_changes() {
                        self.copies().release(pipeline_id);
                    } else {
                        loaded.state = state;
                        self.copies().keep(loaded);
                    }
                    if trusted {
                        drop(gate);
                        continue;
                    }
                    return Err(e);
                }
            };
            let unchanged = |out| Decided {
                out,
                again: false,
                stored: None,
            };
            if loaded.rows.is_empty() {
                self.copies().release(pipeline_id);
                return Ok(unchanged(out));
            }
            let has_new = state.jobs().len() > loaded.rows.len();
            let mut bridges = Vec::new();
            if !has_new {
                state.advance(now);
                bridges = start_bridges(&mut state, &loaded, now);
            }
            let originals = state.take_originals();
            let (change, changes, positions) = diff(&loaded, &state, &originals, now_ms, &extras);
            if change.jobs.is_empty()
                && change.new_jobs.is_empty()
                && change.status == loaded.pipeline.status
            {
                loaded.state = state;
                loaded.fresh = false;
                self.copies().keep(loaded);
                if trusted {
                    drop(gate);
                    continue;
                }
                return Ok(unchanged(out));
            }
            match self
                .store
                .apply(pipeline_id, loaded.pipeline.lock_version, &change, now_ms)
                .await
            {
                Ok(()) => {
                    around.observe(&loaded, &change, now_ms);
                    let project_id = loaded.pipeline.project_id;
                    let project_name = around.project_name(project_id);
                    let pending = new_pending(&loaded, &changes, &project_name);
                    let queued = queued_rows(&loaded, &change, &changes, &project_name);
                    let sync_parent = loaded.pipeline.parent_job_id.is_some()
                        && change.status.is_completed()
                        && !loaded.pipeline.status.is_completed();
                    match loaded.applied(state, &change, &positions, now_ms) {
                        Some(next) => self.copies().keep(next),
                        None => drop(self.copies().release(pipeline_id)),
                    }
                    drop(gate);
                    return Ok(Decided {
                        out,
                        again: has_new,
                        stored: Some(Stored {
                            project_id,
                            changes,
                            pending,
                            queued,
                            bridges,
                            sync_parent,
                            new_rows: !change.new_jobs.is_empty(),
                        }),
                    });
                }
                Err(gantry_store::StoreError::Stale) if attempt < MAX_STALE_ATTEMPTS => {
                    self.stale.fetch_add(1, Ordering::Relaxed);
                    // Another process changed the pipeline first (an assignment, most
                    // often): undo this decision on the copy and decide again over what
                    // the store holds.
                    if state.rollback(mark, originals) {
                        loaded.state = state;
                        self.copies().keep(loaded);
                    } else {
                        self.copies().release(pipeline_id);
                    }
                    drop(gate);
                    tokio::task::yield_now().await;
                    continue;
                }
                Err(e) => {
                    self.copies().release(pipeline_id);
                    return Err(e.into());
                }
            }
        }
    }
}

/// What waking needs of the existing jobs that became pending in a decision.
fn new_pending(
    loaded: &Loaded,
    changes: &[StatusChange],
    project_name: &str,
) -> Vec<waiters::NewPending> {
    changes
        .iter()
        .filter(|c| c.to == Status::Pending)
        .filter_map(|c| {
            let row = loaded.row(loaded.job_id(c.db_id?)?)?;
            Some(waiters::NewPending {
                project_id: row.project_id,
                project_name: project_name.to_owned(),
                protected: row.protected,
                tags: row.tags.clone(),
            })
        })
        .collect()
}

/// The existing jobs that became pending in a stored decision, as the queue would read
/// them back: each row with the decision's update applied as `Store::apply` wrote it.
/// `None` when one is missing (a new row, a job whose update is not in `change`) or the
/// project's name is unknown. O(jobs changed).
fn queued_rows(
    loaded: &Loaded,
    change: &PipelineChange,
    changes: &[StatusChange],
    project_name: &str,
) -> Option<Vec<gantry_store::QueuedJob>> {
    if project_name.is_empty() {
        return None;
    }
    let updates: HashMap<i64, &gantry_store::JobUpdate> = change
        .jobs
        .iter()
        .filter(|u| u.status == Status::Pending)
        .map(|u| (u.id, u))
        .collect();
    changes
        .iter()
        .filter(|c| c.to == Status::Pending)
        .map(|c| {
            let id = c.db_id?;
            let row = loaded.row(loaded.job_id(id)?)?;
            let update = updates.get(&id)?;
            Some(gantry_store::QueuedJob {
                id,
                pipeline_id: row.pipeline_id,
                project_id: row.project_id,
                name: row.name.clone(),
                stage: row.stage.clone(),
                stage_idx: row.stage_idx,
                attempt: row.attempt,
                allow_failure: update.allow_failure,
                tags: row.tags.clone(),
                protected: row.protected,
                manual_variables: update
                    .manual_variables
                    .clone()
                    .or_else(|| row.manual_variables.clone()),
                input_values: update
                    .input_values
                    .clone()
                    .or_else(|| row.input_values.clone()),
                created_at: row.created_at,
                queued_at: update.queued_at.or(row.queued_at),
                environment_id: row.environment_id,
                project_name: project_name.to_owned(),
            })
        })
        .collect()
}

/// Trigger (bridge) jobs that became pending start at once (no runner takes them):
/// returns their database ids, whose downstream pipelines are created once the decision
/// is stored (`downstream.rs`).
fn start_bridges(state: &mut PipelineState, loaded: &Loaded, now: Timestamp) -> Vec<i64> {
    // Jobs that became pending in this decision (every pending one when the rows were
    // just read: a bridge left pending by a crash starts too).
    let candidates: Vec<usize> = if loaded.fresh {
        (0..state.jobs().len()).collect()
    } else {
        state.changed_positions().collect()
    };
    let bridges: Vec<_> = candidates
        .into_iter()
        .filter_map(|i| state.jobs().get(i))
        .filter(|j| !j.retried && j.status == Status::Pending)
        .filter(|j| loaded.spec_of(j).is_some_and(StoredSpec::is_bridge))
        .filter_map(|j| Some((j.id, loaded.row(j.id)?.id)))
        .collect();
    for (job, _) in &bridges {
        let _ = crate::processor::apply(
            state,
            &crate::processor::Event::JobStarted {
                job: *job,
                timeout: None,
                graceful_cancel: false,
            },
            now,
        );
    }
    if !bridges.is_empty() {
        state.advance(now);
    }
    bridges.into_iter().map(|(_, id)| id).collect()
}
