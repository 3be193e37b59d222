//! Time and restarts: [`Coordinator::tick`] turns the passing of time into events (jobs
//! their runner never acknowledged put back in the queue, delayed jobs due, job timeouts,
//! jobs without updates, stale schedules), resource groups hand out their resource, and
//! [`Coordinator::resume`] re-processes every active pipeline after a restart. The
//! background task also starts due schedules and, every minute, removes expired
//! artifacts.
//!
//! What may be due is read from the jobs' status index (`Store::timer_candidates`), not by
//! visiting every active pipeline.

use std::time::Duration;

use crate::processor::{Event, Status, apply, due_events};

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::time::{now_ms, to_ts};

/// How often the background task ticks.
pub(crate) const TICK_INTERVAL: Duration = Duration::from_secs(1);
/// Expired artifacts are removed every this many ticks (a minute), the first time at the
/// first tick.
const EXPIRED_ARTIFACTS_EVERY_TICKS: u64 = 60;

/// Environments whose `auto_stop_in` has passed are stopped every this many ticks (a
/// minute; GitLab's worker runs hourly), from the first tick.
const AUTO_STOP_EVERY_TICKS: u64 = 60;

impl Coordinator {
    /// Apply what time makes due at `now_ms` (Unix ms): jobs their runner did not
    /// acknowledge within the bound go back to the queue
    /// ([`Coordinator::requeue_unacknowledged`]), delayed jobs start, running jobs
    /// past their timeout (+ grace) fail `job_execution_timeout`, running jobs without
    /// updates for an hour fail `stuck_or_timeout_failure` (canceling ones become
    /// canceled), jobs pending for a day fail likewise, schedules missed by an hour fail
    /// `stale_schedule` (thresholds: [`Coordinator::set_watchdog`]).
    pub async fn tick(&self, now_ms: i64) -> std::result::Result<(), CoordinatorError> {
        let watchdog = self.watchdog();
        let now = to_ts(now_ms);
        // Jobs queued by another process (whose wakes do not reach this one), or left by
        // a lost wake: the oldest waiter of each group looks once a second.
        self.queue().waiters().wake_each_group();
        // One pipeline's failure does not stop the others; the first error is returned.
        let mut first_error = None;
        match self.requeue_unacknowledged(now_ms).await {
            Ok(requeued) => {
                for job in requeued {
                    eprintln!(
                        "gantry: job {} went back to the queue: runner {} did not acknowledge it within {:?} (its request was cut, or the runner died)",
                        job.id, job.runner_id, self.inner.cfg.job_ack_timeout
                    );
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        // What may be due, from the jobs' status index: no visit of every active
        // pipeline (see `Store::timer_candidates`).
        let secs = |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
        let ms = |s: u64| secs(s).saturating_mul(1000);
        let candidates = self
            .inner
            .store
            .timer_candidates(
                now_ms,
                secs(watchdog.timeout_grace),
                now_ms.saturating_sub(ms(watchdog.running_without_update)),
                now_ms.saturating_sub(ms(watchdog.pending_outdated)),
            )
            .await?;
        let projects = candidates.resource_projects;
        for pipeline in candidates.pipelines {
            // Decided over the rows as stored: this process's copy may hold a runner's
            // last contact older than the store's (trace patches do not move the
            // pipeline's lock), and a job must not be taken for silent on its word.
            self.copies().read_fresh(pipeline);
            let done = self
                .mutate(pipeline, now_ms, |state, loaded, _| {
                    for event in due(state, loaded, now, &watchdog) {
                        let _ = apply(state, &event, now);
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = done {
                first_error.get_or_insert(e);
            }
        }
        for project in projects {
            if let Err(e) = self.assign_resources(project).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Call [`Coordinator::tick`] every second, and start the pipeline schedules that
    /// are due, until the returned task is aborted.
    pub fn spawn_background(&self) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(TICK_INTERVAL);
            let mut ticks: u64 = 0;
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if let Err(e) = this.tick(now_ms()).await {
                    eprintln!("gantry: failed to run the coordinator's timers: {e}");
                    this.inner.metrics.system_error("scheduler", "timers");
                }
                if this.inner.cfg.run_schedules() {
                    this.spawn_due_schedules();
                }
                ticks += 1;
                if ticks % super::metrics::GAUGE_REFRESH_TICKS == 1 {
                    this.refresh_exported_gauges().await;
                }
                if this.inner.cfg.remove_expired_artifacts()
                    && ticks % EXPIRED_ARTIFACTS_EVERY_TICKS == 1
                {
                    this.spawn_expired_artifacts_removal();
                }
                if ticks % AUTO_STOP_EVERY_TICKS == 1 {
                    if let Err(e) = this.stop_due_environments(now_ms()).await {
                        eprintln!(
                            "gantry: failed to stop environments whose auto_stop_in passed: {e}"
                        );
                        this.inner.metrics.system_error("scheduler", "auto_stop");
                    }
                }
            }
        })
    }

    /// [`Artifacts::remove_expired_artifacts`] in a task of its own (deleting blobs may
    /// take a while), one pass at a time.
    fn spawn_expired_artifacts_removal(&self) {
        use std::sync::atomic::Ordering;
        if self
            .artifacts()
            .removal_running
            .swap(true, Ordering::SeqCst)
        {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            match this.artifacts().remove_expired_artifacts(now_ms()).await {
                Ok(removed) => removed.report_left_over(),
                Err(e) => eprintln!("gantry: failed to remove expired artifacts: {e}"),
            }
            this.artifacts()
                .removal_running
                .store(false, Ordering::SeqCst);
        });
    }

    /// [`Coordinator::run_due_schedules`] in a task of its own (creating a pipeline
    /// fetches a repository: the timers do not wait for it), one pass at a time.
    fn spawn_due_schedules(&self) {
        use std::sync::atomic::Ordering;
        if self.inner.schedules_running.swap(true, Ordering::SeqCst) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.run_due_schedules(now_ms()).await {
                eprintln!("gantry: failed to run the pipeline schedules: {e}");
            }
            this.inner.schedules_running.store(false, Ordering::SeqCst);
        });
    }

    /// After a restart: process every active pipeline again (jobs whose turn came while
    /// the server was down are queued; assigned jobs stay with their runner, whose job
    /// tokens stay valid; running trigger jobs create the downstream pipeline they have
    /// not created yet, or take its status) and wake job requests.
    pub async fn resume(&self) -> std::result::Result<(), CoordinatorError> {
        let now = now_ms();
        let mut first_error = None;
        for p in self.inner.store.active_pipelines().await? {
            if let Err(e) = self.mutate(p.id, now, |_, _, _| Ok(())).await {
                first_error.get_or_insert(e);
            }
            let bridges = self.load(p.id).await.map(|loaded| {
                loaded
                    .rows
                    .iter()
                    .zip(&loaded.specs)
                    .filter(|(r, s)| r.status == Status::Running && s.is_bridge())
                    .map(|(r, _)| r.id)
                    .collect::<Vec<_>>()
            });
            match bridges {
                Ok(bridges) => self.spawn_triggers(bridges),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        self.queue().bump();
        let ticked = self.tick(now).await;
        first_error.map_or(ticked, Err)
    }

    /// Resource groups (`ci-yaml.md` §5.10): a group of a project is free when none of its
    /// jobs is pending, running or canceling; then the first job in the group's
    /// `process_mode` order (`resource_groups::order_candidates`) gets the resource if it
    /// is waiting for it — an upcoming job first in line (`oldest_first`,
    /// `newest_first`) keeps it free until it is ready, as on GitLab.
    pub(crate) async fn assign_resources(&self, project_id: i64) -> Result<()> {
        let (candidates, mut held) = self.resource_use(project_id).await?;
        let modes: std::collections::HashMap<String, String> = self
            .inner
            .store
            .resource_groups(project_id)
            .await?
            .into_iter()
            .map(|g| (g.key, g.process_mode))
            .collect();
        let now = now_ms();
        for candidate in super::resource_groups::order_candidates(candidates, &modes) {
            if !held.insert(candidate.group) || !candidate.ready {
                continue;
            }
            let _ = self
                .job_event(candidate.job, now, |job| Event::ResourceAssigned { job })
                .await;
        }
        Ok(())
    }
}

/// What time makes due in a pipeline, without the timeouts of trigger jobs: a bridge
/// runs no script and gets no updates; it waits for its downstream pipeline as long as
/// that runs.
fn due(
    state: &crate::processor::PipelineState,
    loaded: &super::state::Loaded,
    now: crate::processor::Timestamp,
    watchdog: &crate::processor::Watchdog,
) -> Vec<Event> {
    due_events(state, now, watchdog)
        .into_iter()
        .filter(|e| match e {
            Event::JobStuck { job } | Event::JobTimedOut { job } => state
                .job(*job)
                .and_then(|j| loaded.spec_of(j))
                .is_none_or(|s| !s.is_bridge()),
            _ => true,
        })
        .collect()
}
