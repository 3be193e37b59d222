//! Runners: creation (admin API, `glrt-` tokens), legacy registration (registration token,
//! `glrtr-` tokens), lookup by token, deletion. Tokens are random (160 bits) and stored
//! only as SHA-256 hashes.
//!
//! A project runner enabled for more projects (`POST /projects/:id/runners`) keeps them in
//! `runner_projects` (`Runner::enabled_projects`), read by the queue's `runner_serves`.
//!
//! A job request's runner comes from [`RunnerCache`]: a runner asking again within
//! [`RUNNER_CACHE_TTL`] is not read again (a busy runner asks once per job). A change made
//! through this process (settings, projects, deletion, a project's deletion) empties
//! the cache at once; one made by another replica is seen within the bound, as the
//! project rows' cache is. Whatever the cache holds, a job goes only to a runner that
//! exists and is not paused: `Store::assign_jobs` checks it in the assignment itself,
//! which also covers a request held while its runner was deleted or paused.
//!
//! Why a job waits is decided over every runner (`pending.rs`): the same cache keeps them
//! all (the roster) for [`RUNNER_CACHE_TTL`], so views of waiting jobs polled by their
//! readers read the runners once per bound, not once per view; it is emptied with the
//! rest, and when a runner's heartbeat brings it online.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gantry_store::{NewRunner, RunnerChanges};

use crate::processor::Event;

use super::error::{CoordinatorError, Result};
use super::metrics::ONLINE_WINDOW_MS;
use super::time::now_ms;
use super::views::{Runner, RunnerDetails, RunnerManagerView, RunnerOptions, RunnerUpdate};
use super::{Coordinator, token};

/// GitLab's lower bound for `maximum_timeout`.
const MIN_MAXIMUM_TIMEOUT: i64 = 600;

/// How long a runner row read for a job request answers that runner's next requests.
pub(crate) const RUNNER_CACHE_TTL: Duration = Duration::from_secs(10);

/// Most runners [`RunnerCache`] keeps; past it, it starts again empty.
const MAX_CACHED_RUNNERS: usize = 100_000;

/// The runners of recent job requests, by token hash, and every runner for why jobs wait
/// (see the module docs). Its own lock, never held across an `await`.
#[derive(Default)]
pub(crate) struct RunnerCache {
    inner: Mutex<CachedRunners>,
    /// Runners read from the store for job requests ([`Coordinator::runner_reads`]).
    reads: std::sync::atomic::AtomicU64,
    /// Times every runner was read for why jobs wait ([`Coordinator::runner_roster_reads`]).
    roster_reads: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct CachedRunners {
    /// Token hash → when it was read, the runner.
    by_hash: HashMap<String, (Instant, Runner)>,
    /// Runner id → its token hash (a heartbeat names the runner, not its token).
    hashes: HashMap<i64, String>,
    /// Every runner, when read (`Coordinator::runner_pool`): what a waiting job's reason
    /// is decided over, so a page of waiting jobs polled by its viewers does not read
    /// every runner each time. Dropped with the rest at any change of runners here, and
    /// when a runner's contact brings it online (offline → waiting must show at once);
    /// another replica's changes are seen within [`RUNNER_CACHE_TTL`].
    roster: Option<(Instant, Arc<Vec<Runner>>)>,
    /// Bumped by every change: a read begun before a change is not kept.
    generation: u64,
    /// (runner id, `system_id`) → its manager's id and when its heartbeat was written
    /// (ms): a job request's manager without a read, its heartbeat due from then.
    managers: HashMap<(i64, String), (i64, i64)>,
}

impl RunnerCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CachedRunners> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The runner of `hash` when read within [`RUNNER_CACHE_TTL`]; else the generation
    /// to give [`RunnerCache::keep`] with what the store says.
    fn get(&self, hash: &str) -> Result<Runner, u64> {
        let cached = self.lock();
        match cached.by_hash.get(hash) {
            Some((at, runner)) if at.elapsed() < RUNNER_CACHE_TTL => Ok(runner.clone()),
            _ => Err(cached.generation),
        }
    }

    /// Keep `runner`, read by token hash `hash` since generation `generation`.
    fn keep(&self, hash: String, runner: Runner, generation: u64) {
        let mut cached = self.lock();
        if cached.generation != generation {
            return;
        }
        if cached.by_hash.len() >= MAX_CACHED_RUNNERS && !cached.by_hash.contains_key(&hash) {
            cached.by_hash.clear();
            cached.hashes.clear();
        }
        cached.hashes.insert(runner.id, hash.clone());
        cached.by_hash.insert(hash, (Instant::now(), runner));
    }

    /// The runner's contact was recorded at `at` (its next heartbeat is due from then).
    /// When that brings it online (no contact before, or none within
    /// [`ONLINE_WINDOW_MS`]), or its row is not kept, the roster is read again.
    pub(crate) fn contacted(&self, runner_id: i64, at: i64) {
        let mut cached = self.lock();
        let kept = cached
            .hashes
            .get(&runner_id)
            .cloned()
            .and_then(|hash| cached.by_hash.get_mut(&hash));
        let came_online = match kept {
            Some((_, runner)) => {
                let before = runner.contacted_at.replace(at);
                before.is_none_or(|t| at - t >= ONLINE_WINDOW_MS)
            }
            None => true,
        };
        // Also when no roster is kept: a read begun before this contact was stored must
        // not be kept either.
        if came_online {
            cached.roster = None;
            cached.generation += 1;
        }
    }

    /// The manager of runner `runner_id`'s process `system_id` and when its heartbeat
    /// was last written, if known.
    pub(crate) fn manager(&self, runner_id: i64, system_id: &str) -> Option<(i64, i64)> {
        // A borrowed key would need an owned tuple anyway: the map is small per runner.
        self.lock()
            .managers
            .get(&(runner_id, system_id.to_owned()))
            .copied()
    }

    /// The heartbeat of manager `id` (runner `runner_id`, process `system_id`) was
    /// written at `at`.
    pub(crate) fn manager_contacted(&self, runner_id: i64, system_id: &str, id: i64, at: i64) {
        let mut cached = self.lock();
        if cached.managers.len() >= MAX_CACHED_RUNNERS {
            cached.managers.clear();
        }
        cached
            .managers
            .insert((runner_id, system_id.to_owned()), (id, at));
    }

    /// Runners changed: read each again.
    pub(crate) fn forget_all(&self) {
        let mut cached = self.lock();
        cached.by_hash.clear();
        cached.hashes.clear();
        cached.managers.clear();
        cached.roster = None;
        cached.generation += 1;
    }

    /// A runner was added: the roster is read again (the runners of job requests kept
    /// are still right).
    fn forget_roster(&self) {
        let mut cached = self.lock();
        cached.roster = None;
        cached.generation += 1;
    }

    /// Every runner, when read within [`RUNNER_CACHE_TTL`]; else the generation to give
    /// [`RunnerCache::keep_roster`] with what the store says.
    fn roster(&self) -> Result<Arc<Vec<Runner>>, u64> {
        let cached = self.lock();
        match &cached.roster {
            Some((at, roster)) if at.elapsed() < RUNNER_CACHE_TTL => Ok(Arc::clone(roster)),
            _ => Err(cached.generation),
        }
    }

    /// Keep `roster`, read since generation `generation`.
    fn keep_roster(&self, roster: Arc<Vec<Runner>>, generation: u64) {
        let mut cached = self.lock();
        if cached.generation == generation {
            cached.roster = Some((Instant::now(), roster));
        }
    }
}

impl Coordinator {
    async fn insert_runner(
        &self,
        opts: RunnerOptions,
        plaintext: String,
        name: Option<String>,
    ) -> Result<(Runner, String)> {
        check_maximum_timeout("create the runner", opts.maximum_timeout)?;
        if let Some(p) = opts.project_id {
            self.inner.store.project(p).await?;
        }
        if let Some(group) = &opts.group_path {
            check_group_path(group)?;
        }
        let tags = normalized_tags(&opts.tags);
        let row = self
            .inner
            .store
            .create_runner(
                &NewRunner {
                    token_hash: token::hash(&plaintext),
                    description: opts.description,
                    // GitLab: a runner without tags always runs untagged jobs.
                    run_untagged: opts.run_untagged || tags.is_empty(),
                    tags,
                    locked: opts.locked,
                    protected_only: opts.protected_only,
                    project_id: opts.project_id,
                    group_path: opts.group_path,
                    maximum_timeout: opts.maximum_timeout,
                    paused: opts.paused,
                    any_tags: opts.any_tags,
                    name,
                    maintenance_note: opts.maintenance_note,
                },
                now_ms(),
            )
            .await?;
        self.inner.runner_cache.forget_roster();
        Ok((Runner::from_row(&row), plaintext))
    }

    /// Create a runner (admin `POST /user/runners`): returns it and its `glrt-` token,
    /// shown this once.
    pub async fn create_runner(
        &self,
        opts: RunnerOptions,
    ) -> std::result::Result<(Runner, String), CoordinatorError> {
        let t = token::runner_token(opts.project_id.is_some());
        self.insert_runner(opts, t, None).await
    }

    /// Legacy registration (`POST /runners` with the registration token); `name` is
    /// the runner's `info.name`, if it sent one. A wrong token is `Forbidden`.
    pub async fn register_runner(
        &self,
        registration_token: &str,
        opts: RunnerOptions,
        name: Option<String>,
    ) -> std::result::Result<(Runner, String), CoordinatorError> {
        let expected = self.inner.store.setting("registration_token_hash").await?;
        if registration_token.is_empty()
            || expected.as_deref() != Some(token::hash(registration_token).as_str())
        {
            return Err(CoordinatorError::Forbidden(
                "register the runner: the registration token is not valid".to_owned(),
            ));
        }
        self.insert_runner(opts, token::registered_runner_token(), name)
            .await
    }

    /// The runner a job request's token belongs to: [`Coordinator::runner_by_token`],
    /// through `RunnerCache`.
    pub async fn job_request_runner(
        &self,
        token: &str,
    ) -> std::result::Result<Option<Runner>, CoordinatorError> {
        if token.is_empty() {
            return Ok(None);
        }
        let hash = token::hash(token);
        let generation = match self.inner.runner_cache.get(&hash) {
            Ok(runner) => return Ok(Some(runner)),
            Err(generation) => generation,
        };
        self.inner
            .runner_cache
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let runner = self.runner_by_hash(&hash).await?;
        if let Some(r) = &runner {
            self.inner.runner_cache.keep(hash, r.clone(), generation);
        }
        Ok(runner)
    }

    /// How many times this coordinator read a job request's runner from the store (a
    /// runner asking again within `RUNNER_CACHE_TTL` costs none).
    pub fn runner_reads(&self) -> u64 {
        self.inner
            .runner_cache
            .reads
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times this coordinator read every runner to say why jobs wait (once per
    /// `RUNNER_CACHE_TTL` at most, unless runners change or one comes online).
    pub fn runner_roster_reads(&self) -> u64 {
        self.inner
            .runner_cache
            .roster_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every runner, as the roster keeps it (see `CachedRunners::roster`).
    pub(crate) async fn runner_roster(&self) -> Result<Arc<Vec<Runner>>> {
        let generation = match self.inner.runner_cache.roster() {
            Ok(roster) => return Ok(roster),
            Err(generation) => generation,
        };
        self.inner
            .runner_cache
            .roster_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let roster: Arc<Vec<Runner>> = Arc::new(
            self.inner
                .store
                .runners()
                .await?
                .iter()
                .map(Runner::from_row)
                .collect(),
        );
        self.inner
            .runner_cache
            .keep_roster(Arc::clone(&roster), generation);
        Ok(roster)
    }

    /// Whether `runner` may still be given jobs (it exists and is not paused), read from
    /// the store; when not, its cached row is dropped.
    pub(crate) async fn runner_still_takes_jobs(&self, runner: &Runner) -> Result<bool> {
        let takes = match self.inner.store.runner(runner.id).await {
            Ok(row) => !row.paused,
            Err(gantry_store::StoreError::NotFound(_)) => false,
            Err(e) => return Err(e.into()),
        };
        if !takes {
            self.inner.runner_cache.forget_all();
        }
        Ok(takes)
    }

    /// The runner a runner token belongs to.
    pub async fn runner_by_token(
        &self,
        token: &str,
    ) -> std::result::Result<Option<Runner>, CoordinatorError> {
        if token.is_empty() {
            return Ok(None);
        }
        self.runner_by_hash(&token::hash(token)).await
    }

    /// The runner whose token hashes to `hash`, read from the store.
    async fn runner_by_hash(&self, hash: &str) -> Result<Option<Runner>> {
        Ok(self
            .inner
            .store
            .runner_by_token_hash(hash)
            .await?
            .as_ref()
            .map(Runner::from_row))
    }

    /// Change a runner's settings (GitLab's `PUT /runners/:id`): what is given changes,
    /// in one statement; a refused value changes nothing. A runner left with no tags
    /// must run untagged jobs. Pausing takes effect at the runner's next job request.
    pub async fn update_runner(
        &self,
        id: i64,
        update: &RunnerUpdate,
    ) -> std::result::Result<RunnerDetails, CoordinatorError> {
        let what = format!("update runner {id}");
        check_maximum_timeout(&what, update.maximum_timeout)?;
        let changes = RunnerChanges {
            tags: update.tags.as_deref().map(normalized_tags),
            ..update.clone()
        };
        let updated = self.inner.store.update_runner(id, &changes).await;
        self.inner.runner_cache.forget_all();
        match updated {
            Ok(row) => self.details_of(&row).await,
            Err(gantry_store::StoreError::Conflict(why)) => {
                Err(CoordinatorError::Invalid(format!("{what}: {why}")))
            }
            Err(other) => Err(other.into()),
        }
    }

    pub async fn runner(&self, id: i64) -> std::result::Result<Runner, CoordinatorError> {
        Ok(Runner::from_row(&self.inner.store.runner(id).await?))
    }

    /// Runner `id` as GitLab's `GET /runners/:id` shows it ([`RunnerDetails`]).
    pub async fn runner_details(
        &self,
        id: i64,
    ) -> std::result::Result<RunnerDetails, CoordinatorError> {
        let row = self.inner.store.runner(id).await?;
        self.details_of(&row).await
    }

    /// `row` with what its manager last in contact said (GitLab's
    /// `latest_runner_manager`: the newest `contacted_at`, the newest manager on a tie).
    async fn details_of(
        &self,
        row: &gantry_store::Runner,
    ) -> std::result::Result<RunnerDetails, CoordinatorError> {
        let managers = self.inner.store.runner_managers(row.id).await?;
        let latest = managers.iter().max_by_key(|m| (m.contacted_at, m.id));
        let said = |field: fn(&gantry_store::RunnerInfo) -> &String| {
            latest
                .map(|m| field(&m.info).clone())
                .filter(|s| !s.is_empty())
        };
        // O(projects of the runner): one row and one view each (a deleted one is left out).
        let mut projects = Vec::new();
        for id in row.project_id.iter().chain(&row.enabled_projects) {
            match self.inner.store.project(*id).await {
                Ok(project) => projects.push(self.project_view(&project).await?),
                Err(gantry_store::StoreError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(RunnerDetails {
            projects,
            runner: Runner::from_row(row),
            ip_address: None,
            version: said(|i| &i.version),
            revision: said(|i| &i.revision),
            platform: said(|i| &i.platform),
            architecture: said(|i| &i.architecture),
            maintenance_note: row.maintenance_note.clone(),
        })
    }

    /// What each runner said about itself at its last contact (version, platform,
    /// executor, address), by runner id.
    pub async fn runner_infos(
        &self,
    ) -> std::result::Result<
        std::collections::HashMap<i64, gantry_store::RunnerInfo>,
        CoordinatorError,
    > {
        Ok(self.inner.store.runner_infos().await?)
    }

    /// Runner `id`'s processes (GitLab's runner managers), oldest first.
    pub async fn runner_managers(
        &self,
        id: i64,
    ) -> std::result::Result<Vec<RunnerManagerView>, CoordinatorError> {
        let store = &self.inner.store;
        store.runner(id).await?;
        let now = now_ms();
        Ok(store
            .runner_managers(id)
            .await?
            .iter()
            .map(|m| RunnerManagerView::of(m, now))
            .collect())
    }

    /// Every runner's processes (their managers), by runner id, oldest first.
    pub async fn all_runner_managers(
        &self,
    ) -> std::result::Result<
        std::collections::HashMap<i64, Vec<gantry_store::RunnerManager>>,
        CoordinatorError,
    > {
        Ok(self.inner.store.all_runner_managers().await?)
    }

    /// Runner `runner_id`'s process `system_id` verified its token (`POST
    /// /runners/verify`): its manager exists from now on, with `info`; an empty
    /// `system_id` names none.
    pub async fn verified_runner_manager(
        &self,
        runner_id: i64,
        system_id: &str,
        info: &gantry_store::RunnerInfo,
    ) -> std::result::Result<(), CoordinatorError> {
        if system_id.is_empty() {
            return Ok(());
        }
        Ok(self
            .inner
            .store
            .ensure_runner_manager(runner_id, system_id, now_ms(), info)
            .await?)
    }

    /// Delete runner `runner_id`'s process `system_id` (`DELETE /runners/managers`):
    /// `NotFound` when it has none of that id. The runner stays; the jobs the process
    /// took show no manager from now on.
    pub async fn delete_runner_manager(
        &self,
        runner_id: i64,
        system_id: &str,
    ) -> std::result::Result<(), CoordinatorError> {
        let deleted = self
            .inner
            .store
            .delete_runner_manager(runner_id, system_id)
            .await?;
        self.inner.runner_cache.forget_all();
        if deleted {
            Ok(())
        } else {
            Err(CoordinatorError::NotFound("runner manager not found"))
        }
    }

    /// How many jobs each runner runs now, by runner id (absent: none).
    pub async fn running_jobs_by_runner(
        &self,
    ) -> std::result::Result<std::collections::HashMap<i64, i64>, CoordinatorError> {
        Ok(self.inner.store.running_jobs_by_runner().await?)
    }

    pub async fn runners(&self) -> std::result::Result<Vec<Runner>, CoordinatorError> {
        Ok(self
            .inner
            .store
            .runners()
            .await?
            .iter()
            .map(Runner::from_row)
            .collect())
    }

    /// The runners that may run jobs of project `project_id` (GitLab's `GET
    /// /projects/:id/runners`): instance runners, the runners of its groups, its own
    /// project runners and those enabled for it; oldest first.
    pub async fn project_runners(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<Runner>, CoordinatorError> {
        let project = self.inner.store.project(project_id).await?;
        Ok(self
            .runners()
            .await?
            .into_iter()
            .filter(|r| super::queue::runner_serves(r, project.id, &project.name))
            .collect())
    }

    /// Enables the project runner `runner_id` for project `project_id` too (GitLab's
    /// `POST /projects/:id/runners`). `Forbidden` for an instance or group runner or a
    /// locked one, `Invalid` (GitLab's `400`) when it runs the project's jobs already.
    pub async fn enable_project_runner(
        &self,
        project_id: i64,
        runner_id: i64,
    ) -> std::result::Result<Runner, CoordinatorError> {
        let store = &self.inner.store;
        store.project(project_id).await?;
        let runner = store.runner(runner_id).await?;
        let what = format!("enable runner {runner_id} for project {project_id}");
        let Some(own) = runner.project_id else {
            return Err(CoordinatorError::Forbidden(format!(
                "{what}: it is an instance or group runner, which projects do not enable: only project runners are"
            )));
        };
        if runner.locked {
            return Err(CoordinatorError::Forbidden(format!(
                "{what}: the runner is locked to its project; unlock it first (PUT /runners/{runner_id} with locked=false)"
            )));
        }
        let enabled = own != project_id
            && store
                .enable_runner_project(runner_id, project_id, now_ms())
                .await?;
        self.inner.runner_cache.forget_all();
        if !enabled {
            return Err(CoordinatorError::Invalid(format!(
                "{what}: it runs the project's jobs already"
            )));
        }
        self.runner(runner_id).await
    }

    /// Disables the runner `runner_id` for project `project_id` (GitLab's `DELETE
    /// /projects/:id/runners/:runner_id`). `NotFound` when it was not enabled there;
    /// `Forbidden` for the runner's own project (delete the runner instead).
    pub async fn disable_project_runner(
        &self,
        project_id: i64,
        runner_id: i64,
    ) -> std::result::Result<Runner, CoordinatorError> {
        let store = &self.inner.store;
        store.project(project_id).await?;
        let runner = store.runner(runner_id).await?;
        if runner.project_id == Some(project_id) {
            return Err(CoordinatorError::Forbidden(format!(
                "disable runner {runner_id} for project {project_id}: it is the runner's own project; delete the runner instead (DELETE /runners/{runner_id})"
            )));
        }
        let disabled = store.disable_runner_project(runner_id, project_id).await;
        self.inner.runner_cache.forget_all();
        if !disabled? {
            return Err(CoordinatorError::NotFound("runner"));
        }
        Ok(Runner::from_row(&runner))
    }

    /// Delete a runner. Jobs it is still executing fail with `runner_system_failure` (the
    /// runner is gone); finished jobs keep their history.
    pub async fn delete_runner(&self, id: i64) -> std::result::Result<(), CoordinatorError> {
        let store = &self.inner.store;
        store.runner(id).await?;
        let now = now_ms();
        // Its executing jobs by index: O(jobs executing), not every active pipeline read.
        for job_id in store.executing_jobs_of_runner(id).await? {
            let _ = self
                .job_event(job_id, now, |job| Event::RunnerLost { job })
                .await;
        }
        let deleted = store.delete_runner(id).await;
        self.inner.runner_cache.forget_all();
        if deleted? {
            Ok(())
        } else {
            Err(CoordinatorError::NotFound("runner"))
        }
    }
}

/// GitLab's lower bound on a runner's `maximum_timeout`.
fn check_maximum_timeout(what: &str, maximum_timeout: Option<i64>) -> Result<()> {
    match maximum_timeout {
        Some(max) if max < MIN_MAXIMUM_TIMEOUT => Err(CoordinatorError::Invalid(format!(
            "{what}: maximum_timeout must be at least {MIN_MAXIMUM_TIMEOUT} seconds, not {max}"
        ))),
        _ => Ok(()),
    }
}

/// Tags trimmed, without empty ones and repeats, in their order.
fn normalized_tags(given: &[String]) -> Vec<String> {
    let mut tags: Vec<String> = Vec::new();
    for t in given.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        if !tags.iter().any(|x| x == t) {
            tags.push(t.to_owned());
        }
    }
    tags
}

/// A group runner's group: a namespace path (`acme`, `acme/platform`), segments as in a
/// project's path. Gantry's groups are namespaces of project paths; the group need not
/// have projects yet.
fn check_group_path(group: &str) -> Result<()> {
    let valid = !group.is_empty()
        && group.len() <= 255
        && group.split('/').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    if valid {
        Ok(())
    } else {
        Err(CoordinatorError::Invalid(format!(
            "group_id: `{group}` is no group path: give a namespace such as `acme` or `acme/platform`"
        )))
    }
}
