//! This process's copies of its active pipelines as last decided over ([`Loaded`]: valid
//! while their `lock_version` is the store's): a decision takes its pipeline's copy out
//! ([`Copies::take_for_decision`]) and gives it back once stored ([`Copies::keep`]), so an
//! event costs work in proportion to what it changes, not a read of the whole pipeline.
//!
//! Assignments committed while a decision holds a copy wait here (with the lock version
//! they moved the pipeline to, and their time) and are applied when the copy comes back;
//! otherwise they are applied to the kept copy at once ([`Copies::assigned`]). A copy that
//! cannot take an assignment, or that the timers want read fresh, is dropped and read
//! again at its next decision. At most [`MAX_ACTIVE_JOBS`] job rows are kept in all.
//!
//! Its own lock (not the coordinator's `Runtime`): taken briefly by decisions and
//! assignments only, never across an `await`.

use std::collections::{HashMap, HashSet};

use super::state::{self, Loaded};

/// Most job rows of active pipelines kept decided in memory (about 2 KiB each with their
/// index; the specs are shared with `Processing`'s parsed specs). Past it the copies are dropped
/// and read again on their next decision.
const MAX_ACTIVE_JOBS: usize = 200_000;

/// Assignments a held copy has yet to take: (the lock version they moved the pipeline to,
/// the jobs, their time).
type Meanwhile = Vec<(i64, Vec<state::AssignedJob>, i64)>;

/// See the module docs.
#[derive(Default)]
pub(crate) struct Copies {
    /// Pipelines as last decided over, by id.
    active: HashMap<i64, Loaded>,
    /// Job rows in `active`.
    active_jobs: usize,
    /// Pipelines whose copy a decision holds (taken out of `active`).
    in_use: HashSet<i64>,
    /// Assignments made while a decision held the copy.
    assigned_meanwhile: HashMap<i64, Meanwhile>,
    /// Pipelines whose next decision reads the rows as stored, not the copy (the timers:
    /// a copy's times of a runner's last contact may be older than the store's).
    read_fresh: HashSet<i64>,
}

impl Copies {
    /// Keep a pipeline as decided over for the next decision (not once it ended: events
    /// are rare then), with what was assigned while a decision held it.
    pub(crate) fn keep(&mut self, mut loaded: Loaded) {
        let id = loaded.pipeline.id;
        let meanwhile = self.release(id);
        let ended = loaded.pipeline.status.is_completed();
        self.forget(id);
        if ended {
            return;
        }
        for (lock_version, jobs, at) in meanwhile {
            // Already in the copy when it was read after the assignment.
            if lock_version <= loaded.pipeline.lock_version {
                continue;
            }
            if !loaded.assigned(lock_version, &jobs, at) {
                return;
            }
        }
        if self.active_jobs + loaded.rows.len() > MAX_ACTIVE_JOBS {
            self.active.clear();
            self.active_jobs = 0;
        }
        self.active_jobs += loaded.rows.len();
        self.active.insert(loaded.pipeline.id, loaded);
    }

    /// A decision takes the pipeline's copy (or reads one): assignments made until it
    /// comes back ([`Copies::keep`]) or is dropped ([`Copies::release`]) are
    /// kept for it.
    pub(crate) fn take_for_decision(&mut self, pipeline_id: i64) -> Option<Loaded> {
        self.in_use.insert(pipeline_id);
        self.assigned_meanwhile.remove(&pipeline_id);
        let copy = self.forget(pipeline_id);
        if self.read_fresh.remove(&pipeline_id) {
            return None;
        }
        copy
    }

    /// The decision holding the pipeline's copy is done with it: what was assigned
    /// meanwhile, in lock order.
    pub(crate) fn release(&mut self, pipeline_id: i64) -> Meanwhile {
        self.in_use.remove(&pipeline_id);
        self.release_meanwhile(pipeline_id)
    }

    /// What was assigned since the decision holding the pipeline's copy took it, in lock
    /// order (the copy stays in use).
    pub(crate) fn release_meanwhile(&mut self, pipeline_id: i64) -> Meanwhile {
        let mut meanwhile = self
            .assigned_meanwhile
            .remove(&pipeline_id)
            .unwrap_or_default();
        meanwhile.sort_by_key(|(lock_version, _, _)| *lock_version);
        meanwhile
    }

    /// Drop this process's copy of a pipeline (read again at its next decision).
    pub(crate) fn forget(&mut self, pipeline_id: i64) -> Option<Loaded> {
        let gone = self.active.remove(&pipeline_id);
        if let Some(l) = &gone {
            self.active_jobs = self.active_jobs.saturating_sub(l.rows.len());
        }
        gone
    }

    /// The next decision over `pipeline_id` reads its rows as stored.
    pub(crate) fn read_fresh(&mut self, pipeline_id: i64) {
        self.read_fresh.insert(pipeline_id);
    }

    /// Assignments committed after the held copy's row was read: the copy takes them when
    /// it comes back.
    pub(crate) fn keep_for_later(&mut self, pipeline_id: i64, later: Meanwhile) {
        self.assigned_meanwhile
            .entry(pipeline_id)
            .or_default()
            .extend(later);
    }

    /// `jobs` of `pipeline_id` were assigned, moving it to `lock_version` at `at`: a held
    /// copy takes them when it comes back, a kept one at once (dropped when it cannot).
    /// O(jobs assigned).
    pub(crate) fn assigned(
        &mut self,
        pipeline_id: i64,
        lock_version: i64,
        jobs: Vec<state::AssignedJob>,
        at: i64,
    ) {
        if self.in_use.contains(&pipeline_id) {
            self.assigned_meanwhile
                .entry(pipeline_id)
                .or_default()
                .push((lock_version, jobs, at));
            return;
        }
        let current = self
            .active
            .get_mut(&pipeline_id)
            .is_some_and(|l| l.assigned(lock_version, &jobs, at));
        if !current {
            self.forget(pipeline_id);
        }
    }
}

/// Applies to `loaded` the assignments `meanwhile` (in lock order) that the store's
/// `lock_version` as read (`stored`) already holds; false when one cannot be applied (the
/// copy missed a change: it is read again). Those committed after the row was read are
/// left in `later`, for [`Copies::keep`] to apply when the copy comes back:
/// dropping them would leave the copy behind the store, and the next decision would read
/// the whole pipeline again.
pub(crate) fn catch_up(
    loaded: &mut Loaded,
    meanwhile: Meanwhile,
    stored: i64,
    later: &mut Meanwhile,
) -> bool {
    let mut current = true;
    for (lock_version, jobs, at) in meanwhile {
        if lock_version > stored {
            later.push((lock_version, jobs, at));
        } else if lock_version > loaded.pipeline.lock_version {
            current &= loaded.assigned(lock_version, &jobs, at);
        }
    }
    current
}
