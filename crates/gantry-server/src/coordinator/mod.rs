//! The coordinator service: turns commits into pipelines, persists the processor's
//! decisions through `gantry-store`, queues jobs for runners and receives their updates,
//! traces and artifacts. No HTTP here (that is [`crate::http`]); the clock is read only
//! here, at the edge, and passed into the processor.
//!
//! Every state change takes one path (the `Processing` service, `processing.rs`, over
//! `state`): take the pipeline's
//! [`PipelineState`] (this process's copy when its
//! `lock_version` is the store's, else built from the rows), let the processor decide (an
//! event, then a processing pass over what changed), and persist the jobs it changed with
//! `store.apply` under the pipeline's optimistic lock, retrying when another writer got
//! there first. Job assignment is the exception the store makes atomic by itself
//! (`assign_jobs`: pending → running exactly once, moving the pipeline's lock; the
//! assigning process applies it to its copy), followed by the same path for the
//! pipeline's status. Cost per event: O(jobs it changes + their dependents + stages²);
//! O(jobs) only when a copy is read (first decision, another process's change, a retry).
//!
//! Services that own their state, reached through the coordinator: `settings.rs`
//! ([`Settings`]: CI/CD variables, protected refs, encryption at rest;
//! [`Coordinator::settings`]), `sources.rs` ([`Sources`]: mirrors, commit facts,
//! include sources; [`Coordinator::sources`]), `facts.rs` (`Facts`: the project, group
//! and pipeline rows kept, a pipeline's predefined facts), `processing.rs` (pipeline
//! locks, copies, parsed specs, the decision loop), `queue.rs`, `executing.rs`,
//! `traces.rs`, `artifacts.rs`, `schedules.rs`, `triggers.rs`, `environments.rs` (see
//! ARCHITECTURE.md). Each calls the store (and git) only, or a service its caller passes;
//! the coordinator wires one to another.
//!
//! Files: `creation.rs` (a pipeline's creation: read, compile, the pure
//! `creation/plan.rs`, store and wire), `projects.rs`, `pipelines.rs` (views; cancel,
//! retry, play), `queue.rs` (job selection, long polling), `payload.rs` (the §3.5 job
//! payload: a read step, then the pure `payload/assemble.rs`), `jobs.rs` (updates),
//! `traces.rs` (job logs, with `trace_files.rs`), `artifacts.rs` (+ `blob.rs`),
//! `runners.rs`, `timers.rs` (tick, resume), `git.rs`, `views.rs` (what callers get),
//! `spec.rs` (what a job row stores).

mod access_tokens;
mod artifacts;
mod blob;
mod codequality;
mod copies;
mod coverage;
pub mod coverage_reports;
mod creation;
mod detailed_status;
mod downstream;
mod environment;
mod environments;
mod error;
mod executing;
mod facts;
mod forge_hooks;
mod git;
mod groups;
mod id_tokens;
mod includes;
pub mod instance_variables;
mod job_inputs;
mod job_secrets;
mod job_token_scope;
mod jobs;
mod lint;
mod merge_requests;
mod metrics;
pub mod object_blob;
mod pages;
mod payload;
mod pending;
mod pipelines;
mod processing;
mod projects;
pub mod protected;
mod pushes;
mod queue;
mod releases;
mod repository;
mod resource_groups;
mod runners;
mod schedules;
pub mod secrets;
mod sessions;
mod settings;
mod sources;
mod spec;
mod state;
mod telemetry;
pub mod test_reports;
mod time;
mod timeline;
mod timers;
mod token;
mod trace_files;
mod traces;
mod triggers;
pub mod variables;
mod views;
mod waiters;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gantry_store::Store;

use crate::processor::{PipelineState, Watchdog};

pub use access_tokens::{
    ACCESS_TOKEN_SCOPES, AccessTokenRequest, AccessTokenView, TokenAccess, new_admin_token,
};
pub use artifacts::{
    ArtifactBlob, ArtifactEntry, Artifacts, EXPIRED_PER_PASS, MAX_ARTIFACT_ENTRIES,
    RemovedArtifacts, StageError, StagedUpload,
};
pub use blob::{BlobStore, LocalDir};
pub use codequality::{CodequalityReport, CodequalitySummary, Degradation};
pub use creation::{JobSelection, MAX_DEPLOYMENTS_PER_PIPELINE, PipelineRequest};
pub use detailed_status::DetailedStatus;
pub use environment::JobEnvironment;
pub use environments::{
    AUTO_STOP_BATCH, DeploymentRequest, DeploymentView, EnvironmentBasic, EnvironmentRequest,
    EnvironmentView,
};
pub use error::CoordinatorError;
pub use forge_hooks::{ForgeHook, HookOutcome, sign as forge_hook_signature};
pub use git::{CommitSummary, changes_since};
pub use groups::{GroupView, NamespaceView};
pub use includes::{
    GITLAB_TEMPLATES_URL, IncludeCache, IncludeLoader, IncludeSources, ProjectRepo,
    REMOTE_CONNECT_TIMEOUT, REMOTE_MAX_BYTES, REMOTE_TIMEOUT, RemoteFetches, RemoteLimits,
    UrlRewrite, block_on_side, fetch_remote,
};
pub(crate) use job_token_scope::JobTokenUse;
pub use job_token_scope::{
    AllowedGroup, GroupScopeLink, JobTokenScopeView, MAX_ALLOWLIST_GROUPS, MAX_ALLOWLIST_PROJECTS,
    ProjectScopeLink,
};
pub use lint::{LintInclude, LintJob, LintNeed, LintRequest, LintResult};
pub use merge_requests::{
    MAX_OPEN_MERGE_REQUESTS_REFS, MergeRequestAuthor, MergeRequestPipelineRequest,
    MergeRequestReferences, MergeRequestView,
};
pub use metrics::CONTENT_TYPE as METRICS_CONTENT_TYPE;
pub use object_blob::ObjectBlobs;
pub use pages::{PagesAnswer, PagesDeploymentView, PagesSettings};
pub use pending::PendingReason;
pub use projects::{DefaultBranch, ProjectRequest, ProjectSettings, project_name_in};
pub use pushes::{PUSH_PIPELINE_LIMIT, PushedRef};
pub use queue::RequestInfo;
pub use releases::ReleaseView;
pub use repository::{
    Branch, CommitDetail, CommitsQuery, MAX_FILE_BYTES, RepositoryFile, Tag, TagRelease,
};
pub use resource_groups::{PROCESS_MODES, ResourceGroupView};
pub use schedules::{
    LastPipeline, MAX_SCHEDULE_VARIABLES, MAX_SCHEDULES_PER_PROJECT, ScheduleOwner,
    ScheduleRequest, ScheduleVariable, ScheduleView,
};
pub use sessions::{SESSION_TTL, csrf_token};
pub use settings::{Settings, SettingsError};
pub use sources::Sources;
pub use time::iso8601;
pub use timeline::{Timeline, TimelineJob, TimelineSection, human_bytes};
pub use traces::{AppendError, SHARED_PATCH_LIMIT, TraceAppend, TraceSource, TraceWindow, Traces};
pub use triggers::TRIGGER_TOKEN_PREFIX;
pub use views::{
    Artifact, ArtifactsFile, Bootstrap, JobPipeline, JobProgress, JobView, Namespace,
    PipelineDetail, PipelineView, Project, ResourcesView, Runner, RunnerDetails, RunnerOptions,
    RunnerUpdate, TriggerView, UpdateResult, UserBasic,
};

use error::Result;
use state::{Extras, Loaded, StatusChange};

/// How long a job handed to a runner may go without the runner's first update before it
/// is put back in the queue. The runner sends that update (`PUT state=running`, §4.6) as
/// soon as it has the job, and retries it with back-off (1, 2, 4, 8, 16 s) when the
/// coordinator cannot be reached: a minute leaves room for that and is half of GitLab's
/// own bound for an unacknowledged job (`RUNNER_ACK_QUEUE_EXPIRY_TIME`, two minutes, of
/// its two-phase commit).
pub const DEFAULT_JOB_ACK_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings the coordinator runs with.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Blobs go under `data_dir/blobs`, job logs under `data_dir/traces`, repository
    /// mirrors under `data_dir/repos`.
    pub data_dir: PathBuf,
    /// How runners and users reach this server (`http://127.0.0.1:8080`); the base of
    /// clone URLs, `CI_SERVER_URL`, job and pipeline URLs.
    pub external_url: String,
    /// How long a job request is held when no job is available (default 50 s).
    pub long_poll: Duration,
    /// How long a job handed to a runner may wait for the runner's first update before
    /// it goes back to the queue (default [`DEFAULT_JOB_ACK_TIMEOUT`]; see
    /// `timers.rs`, [`Coordinator::requeue_unacknowledged`]).
    pub job_ack_timeout: Duration,
    /// Largest job log, bytes (default 100 MiB); past it the job fails `trace_size_exceeded`.
    pub trace_limit: u64,
    /// How long a trace patch's body may send nothing before the patch is given up
    /// (default 30 s; the job's append lock is held while a body arrives).
    pub trace_body_idle_timeout: Duration,
    /// Largest artifact upload, bytes (default 100 MiB).
    pub artifact_limit: u64,
    /// Who pipelines are attributed to (`GITLAB_USER_*`).
    pub user: PipelineUser,
    /// The offline include cache for `include:project` and `include:remote` (`gantry
    /// run`); `None` on a server.
    pub include_cache: Option<IncludeCache>,
    /// Mirrors remote includes are fetched from instead of their URL.
    pub remote_include_rewrites: Vec<UrlRewrite>,
    /// An external container registry jobs push to (`host[:port][/path]`, `gantry server
    /// --registry-url`): `CI_REGISTRY` and `CI_REGISTRY_IMAGE` name it. Gantry issues no
    /// registry tokens: the payload carries no registry credentials, and
    /// `CI_REGISTRY_USER`/`_PASSWORD` are GitLab's always-set `gitlab-ci-token` and job
    /// token, so jobs log in with their own (`DOCKER_AUTH_CONFIG`, or project variables
    /// of those names).
    pub registry: Option<String>,
    /// The key project variable values are encrypted with (see [`secrets`]); `None`:
    /// the key in `data_dir/db_key`, made on first start.
    pub db_key: Option<secrets::DbKey>,
    /// A server (the default), or `gantry run`'s engine for one run on a checkout.
    pub profile: Profile,
    /// The process's tracer (`None`, the default: no spans; see `telemetry.rs`).
    pub telemetry: Option<gantry_telemetry::Telemetry>,
    /// The process's meters (`None`, the default: metrics only as Prometheus text at
    /// `/-/metrics`; see `metrics.rs`).
    pub meters: Option<gantry_telemetry::Meters>,
    /// Where Pages sites are served (`gantry server --pages-url`, e.g.
    /// `https://pages.example.com`): requests for that host are Pages requests; `None`:
    /// `<external_url>/-/pages` (see `pages.rs`).
    pub pages_url: Option<String>,
}

/// How a coordinator is used: what differs between a server and `gantry run`'s engine,
/// in one place.
#[derive(Clone, Debug, Default)]
pub enum Profile {
    /// A server: every pipeline gets its persistent ref, timers run schedules and remove
    /// expired artifacts, blobs and logs are `fsync`ed before the commits that make
    /// them visible, log update intervals are GitLab's.
    #[default]
    Server,
    /// `gantry run`: one run on a checkout, with a store thrown away at its end.
    LocalRun(LocalRun),
}

/// What `gantry run`'s engine needs beyond a server's settings.
#[derive(Clone, Debug)]
pub struct LocalRun {
    /// The checkout: the refs `rules:changes:compare_to` also resolves in when the
    /// project's repository (the run's snapshot, one branch borrowing the checkout's
    /// objects) lacks them.
    pub checkout: PathBuf,
    /// Remote includes fetched once for the run (its configuration check shares them);
    /// a server fetches anew for every pipeline, as GitLab does.
    pub remote_fetches: RemoteFetches,
}

impl CoordinatorConfig {
    fn local_run(&self) -> Option<&LocalRun> {
        match &self.profile {
            Profile::Server => None,
            Profile::LocalRun(run) => Some(run),
        }
    }

    /// A project whose repository is a local path is its own mirror (a symbolic link to
    /// it, nothing fetched or copied, pipeline refs written into it): `gantry run`'s
    /// snapshot, made for the coordinator and living for one run.
    pub fn local_repos_in_place(&self) -> bool {
        self.local_run().is_some()
    }

    /// `X-GitLab-Trace-Update-Interval` for every job; `None` = GitLab's (3 s while
    /// somebody reads the log, else 60 s). `gantry run` asks for 1 s so a cancel
    /// reaches the runner at once.
    pub fn trace_update_interval(&self) -> Option<Duration> {
        self.local_run().map(|_| Duration::from_secs(1))
    }

    /// Remote includes fetched once for every pipeline (`gantry run`).
    pub fn remote_fetches(&self) -> Option<&RemoteFetches> {
        self.local_run().map(|run| &run.remote_fetches)
    }

    /// Whether blobs (artifact archives) are `fsync`ed before the commit that makes
    /// them visible (`coordinator/blob.rs`), and a job's log before its final state
    /// (`trace_files.rs`): not for `gantry run`'s store, thrown away at its end.
    pub fn durable_blobs(&self) -> bool {
        self.local_run().is_none()
    }

    /// Repositories whose refs `rules:changes:compare_to` also resolves in: `gantry
    /// run`'s checkout; none on a server.
    pub fn compare_refs(&self) -> Vec<PathBuf> {
        self.local_run()
            .map(|run| vec![run.checkout.clone()])
            .unwrap_or_default()
    }

    /// Whether the timers start due pipeline schedules (`schedules.rs`); `gantry run`'s
    /// store has none.
    pub fn run_schedules(&self) -> bool {
        self.local_run().is_none()
    }

    /// Whether each pipeline gets its persistent ref `refs/pipelines/<id>` (what a
    /// runner's first refspec fetches); `gantry run`'s runner copies the snapshot and
    /// fetches nothing (one `git update-ref` less per pipeline).
    pub fn pipeline_refs(&self) -> bool {
        self.local_run().is_none()
    }

    /// Whether the timers remove expired artifacts every minute
    /// (`Artifacts::remove_expired_artifacts`); `gantry run`'s store is thrown away.
    pub fn remove_expired_artifacts(&self) -> bool {
        self.local_run().is_none()
    }
}

/// Who pipelines are attributed to: the `GITLAB_USER_*` variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineUser {
    pub login: String,
    pub name: String,
    pub email: String,
    pub id: u64,
}

impl Default for PipelineUser {
    /// The server's only user: the administrator.
    fn default() -> Self {
        PipelineUser {
            login: "root".to_owned(),
            name: "Administrator".to_owned(),
            email: "admin@localhost".to_owned(),
            id: 1,
        }
    }
}

impl CoordinatorConfig {
    /// Defaults for everything but where data lives and how the server is reached.
    pub fn new(data_dir: impl Into<PathBuf>, external_url: impl Into<String>) -> CoordinatorConfig {
        CoordinatorConfig {
            data_dir: data_dir.into(),
            external_url: external_url.into(),
            long_poll: gantry_protocol::long_poll::DEFAULT_HOLD,
            job_ack_timeout: DEFAULT_JOB_ACK_TIMEOUT,
            trace_limit: 100 * 1024 * 1024,
            trace_body_idle_timeout: Duration::from_secs(30),
            artifact_limit: 100 * 1024 * 1024,
            user: PipelineUser::default(),
            include_cache: None,
            remote_include_rewrites: Vec::new(),
            registry: None,
            db_key: None,
            profile: Profile::Server,
            telemetry: None,
            meters: None,
            pages_url: None,
        }
    }
}

/// The coordinator. Cheap to clone (an `Arc` inside); every clone is the same service.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

/// Striped in-process locks: pipeline decisions and repository fetches of one process do
/// not race each other (the optimistic lock still guards against other processes).
const STRIPES: usize = 64;

struct Inner {
    store: Store,
    /// CI/CD variables, protected refs, encryption at rest (`settings.rs`).
    settings: settings::Settings,
    cfg: CoordinatorConfig,
    blobs: Arc<dyn BlobStore>,
    /// Job logs, `data_dir/traces` (`traces.rs`).
    traces: traces::Traces,
    /// The pending jobs, who waits for them, assignments (`queue.rs`).
    queue: queue::Queue,
    /// When this process opened the coordinator: unacknowledged jobs are put back in
    /// the queue only once it has been up for the acknowledgement bound.
    opened: std::time::Instant,
    /// Uploads, their blobs, expiry and removal (`artifacts.rs`).
    artifacts: artifacts::Artifacts,
    /// Mirrors, commit facts, include sources (`sources.rs`).
    sources: sources::Sources,
    /// One look for pushes at a time per project (`pushes.rs`).
    push_locks: Vec<tokio::sync::Mutex<()>>,
    /// A pass over the due pipeline schedules is under way (`timers.rs`).
    schedules_running: std::sync::atomic::AtomicBool,
    /// Thresholds of the timers (`timers.rs`).
    watchdog: Mutex<Watchdog>,
    /// Project, group and pipeline rows kept, predefined facts (`facts.rs`).
    facts: facts::Facts,
    /// What dependency resolution needs of a pipeline's rows (`payload.rs`).
    dep_rows: facts::Kept<i64, Arc<payload::DepRows>>,
    /// Pipeline locks, copies, parsed specs: the decision path (`processing.rs`).
    processing: processing::Processing,
    /// What this process remembers of executing jobs: tokens, graceful cancel (`executing.rs`).
    executing: Mutex<executing::Executing>,
    /// This process's metrics (`metrics.rs`).
    metrics: metrics::Metrics,
    /// The key ID tokens are signed with, once read or made (`id_tokens.rs`).
    oidc_key: tokio::sync::OnceCell<Arc<id_tokens::SigningKey>>,
    /// The runners of recent job requests (`runners.rs`).
    runner_cache: runners::RunnerCache,
}

fn stripe(id: i64) -> usize {
    usize::try_from(id.rem_euclid(STRIPES as i64)).unwrap_or(0)
}

impl Coordinator {
    /// Start the coordinator over an opened store: blobs in `data_dir/blobs`.
    pub async fn open(
        store: Store,
        cfg: CoordinatorConfig,
    ) -> std::result::Result<Self, CoordinatorError> {
        let blobs = LocalDir::new(cfg.data_dir.join("blobs")).durable(cfg.durable_blobs());
        tokio::fs::create_dir_all(blobs.root()).await?;
        Self::open_with_blobs(store, cfg, Arc::new(blobs)).await
    }

    /// [`Coordinator::open`] with blobs in another store (object storage: [`ObjectBlobs`]).
    pub async fn open_with_blobs(
        store: Store,
        cfg: CoordinatorConfig,
        blobs: Arc<dyn BlobStore>,
    ) -> std::result::Result<Self, CoordinatorError> {
        tokio::fs::create_dir_all(cfg.data_dir.join("repos")).await?;
        let mut cfg = cfg;
        if cfg.db_key.is_none() {
            let path = cfg.data_dir.join(secrets::KEY_FILE);
            cfg.db_key = Some(
                tokio::task::spawn_blocking(move || secrets::DbKey::load_or_create(&path))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))??,
            );
        }
        let coordinator = Self::with_blobs(store, cfg, blobs);
        coordinator.settings().encrypt_stored_variables().await?;
        coordinator
            .settings()
            .encrypt_stored_instance_variables()
            .await?;
        Ok(coordinator)
    }

    /// Start the coordinator with another blob store (object storage). Without
    /// `cfg.db_key`, project and instance variables are encrypted with a key of this process only.
    pub fn with_blobs(store: Store, cfg: CoordinatorConfig, blobs: Arc<dyn BlobStore>) -> Self {
        let db_key = cfg.db_key.clone().unwrap_or_else(secrets::DbKey::random);
        let metrics = metrics::Metrics::new(cfg.meters.as_ref());
        Coordinator {
            inner: Arc::new(Inner {
                settings: settings::Settings::new(store.clone(), db_key),
                sources: sources::Sources::new(store.clone(), &cfg),
                traces: traces::Traces::new(
                    store.clone(),
                    trace_files::TraceFiles::new(cfg.data_dir.join("traces")),
                    Arc::clone(&blobs),
                    cfg.durable_blobs(),
                ),
                artifacts: artifacts::Artifacts::new(
                    store.clone(),
                    Arc::clone(&blobs),
                    cfg.artifact_limit,
                ),
                queue: queue::Queue::new(store.clone()),
                processing: processing::Processing::new(store.clone()),
                facts: facts::Facts::new(store.clone(), &cfg),
                store,
                cfg,
                blobs,
                opened: std::time::Instant::now(),
                push_locks: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
                schedules_running: std::sync::atomic::AtomicBool::new(false),
                watchdog: Mutex::new(Watchdog::default()),
                dep_rows: facts::Kept::default(),
                executing: Mutex::new(executing::Executing::default()),
                metrics,
                oidc_key: tokio::sync::OnceCell::new(),
                runner_cache: runners::RunnerCache::default(),
            }),
        }
    }

    pub fn config(&self) -> &CoordinatorConfig {
        &self.inner.cfg
    }

    /// Where uploads are written before they are stored (a local directory, also in
    /// front of object storage).
    pub fn blob_staging_dir(&self) -> &std::path::Path {
        self.inner.blobs.staging_dir()
    }

    /// Thresholds of the timers ([`Coordinator::tick`]): job timeouts' grace, stuck jobs,
    /// stale schedules.
    pub fn set_watchdog(&self, watchdog: Watchdog) {
        *self
            .inner
            .watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = watchdog;
    }

    /// The timers' thresholds.
    fn watchdog(&self) -> Watchdog {
        *self
            .inner
            .watchdog
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pipeline facts service (`facts.rs`).
    pub(crate) fn facts(&self) -> &facts::Facts {
        &self.inner.facts
    }

    fn executing(&self) -> MutexGuard<'_, executing::Executing> {
        self.inner
            .executing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn copies(&self) -> MutexGuard<'_, copies::Copies> {
        self.processing().copies()
    }

    pub(crate) fn external_url(&self) -> &str {
        self.inner.cfg.external_url.trim_end_matches('/')
    }

    /// First start: create an admin token and a legacy registration token. Plaintext is
    /// returned only when created; the store keeps SHA-256 hashes.
    pub async fn bootstrap(&self) -> std::result::Result<Bootstrap, CoordinatorError> {
        let store = &self.inner.store;
        let now = time::now_ms();
        let mut out = Bootstrap::default();
        // Two processes starting at once may both create one; each prints its own.
        if store.admin_token_count().await? == 0 {
            let t = token::new_token(gantry_protocol::token::PERSONAL_ACCESS_TOKEN_PREFIX);
            store.add_admin_token(&token::hash(&t), now).await?;
            out.admin_token = Some(t);
        }
        let reg = token::new_token(gantry_protocol::token::REGISTRATION_TOKEN_PREFIX);
        if store
            .init_setting("registration_token_hash", &token::hash(&reg))
            .await?
        {
            out.registration_token = Some(reg);
        }
        Ok(out)
    }

    /// Whether `token` is an admin token.
    pub async fn is_admin(&self, token: &str) -> std::result::Result<bool, CoordinatorError> {
        if token.is_empty() {
            return Ok(false);
        }
        Ok(self.inner.store.is_admin_token(&token::hash(token)).await?)
    }

    /// The opaque queue version (`X-GitLab-Last-Update`): changes whenever a job becomes
    /// pending.
    pub fn queue_version(&self) -> String {
        self.queue().version()
    }

    /// The queue service (`queue.rs`).
    pub(crate) fn queue(&self) -> &queue::Queue {
        &self.inner.queue
    }

    /// How many times this process read what joined the job queue since its snapshot
    /// (the jobs its own decisions make pending join the snapshot without a read).
    pub fn queue_extension_reads(&self) -> u64 {
        self.queue().extension_reads()
    }

    /// The dependency facts of a pipeline's rows, cached.
    async fn dep_rows(&self, pipeline_id: i64) -> Result<Arc<payload::DepRows>> {
        if let Some(rows) = self.inner.dep_rows.get(&pipeline_id) {
            return Ok(rows);
        }
        // One reader per pipeline: the requests of a burst wait for it instead of each
        // reading every row.
        let _reading = self.processing().lock(pipeline_id).await;
        if let Some(rows) = self.inner.dep_rows.get(&pipeline_id) {
            return Ok(rows);
        }
        let (rows, specs) = self.rows_with_specs(pipeline_id).await?;
        let rows = Arc::new(payload::DepRows::new(
            rows.iter()
                .zip(&specs)
                .map(|(row, spec)| payload::DepRow::new(row, spec))
                .collect(),
        ));
        self.inner.dep_rows.keep(pipeline_id, Arc::clone(&rows));
        Ok(rows)
    }

    // ---- the decision path ----

    /// The pipelines' processing service (`processing.rs`).
    pub(crate) fn processing(&self) -> &processing::Processing {
        &self.inner.processing
    }

    /// How many times a decision read its pipeline whole from the store (O(jobs) each)
    /// instead of taking the copy kept in memory: once per active pipeline, then only
    /// when another replica changed it.
    pub fn pipelines_read_whole(&self) -> u64 {
        self.processing().pipelines_read_whole()
    }

    /// How many decisions the store refused because their pipeline changed after they
    /// read it (each is decided again): only another process's changes can do that,
    /// since this process's assignments wait for its decisions (`decide`).
    pub fn stale_decisions(&self) -> u64 {
        self.processing().stale_decisions()
    }

    /// A pipeline as the store holds it now, read whole. O(jobs).
    async fn load(&self, pipeline_id: i64) -> Result<Loaded> {
        self.processing().load(pipeline_id, self).await
    }

    /// A pipeline's job rows (in id order) and their parsed specs (`Processing`).
    async fn rows_with_specs(
        &self,
        pipeline_id: i64,
    ) -> Result<(Vec<gantry_store::Job>, Vec<Arc<spec::StoredSpec>>)> {
        self.processing().rows_with_specs(pipeline_id).await
    }

    /// After an assignment: move the pipeline to `running` unless it is already (checked
    /// under the pipeline's lock, so a burst of assignments decides once).
    async fn refresh_running(&self, pipeline_id: i64, now_ms: i64) -> Result<()> {
        let guard = self.processing().lock(pipeline_id).await;
        let p = self.inner.store.pipeline(pipeline_id).await?;
        if p.status == crate::processor::Status::Running {
            return Ok(());
        }
        let (_, _, resources) = self
            .decide(pipeline_id, now_ms, &mut |_, _, _| Ok(()))
            .await?;
        drop(guard);
        if let Some(project_id) = resources {
            Box::pin(self.assign_resources(project_id)).await?;
        }
        Ok(())
    }

    /// Decide and persist: `f` applies events to the loaded state (it runs again when the
    /// pipeline changed meanwhile), then the processing loop runs and the difference is
    /// stored. When `f` created new attempts, they are stored first and processed in a
    /// second step (the store numbers new rows).
    async fn mutate<T>(
        &self,
        pipeline_id: i64,
        now_ms: i64,
        mut f: impl FnMut(&mut PipelineState, &Loaded, &mut Extras) -> Result<T>,
    ) -> Result<T> {
        let guard = self.processing().lock(pipeline_id).await;
        let (out, mut again, mut resources) = self.decide(pipeline_id, now_ms, &mut f).await?;
        let mut rounds = 0;
        while again && rounds < 8 {
            rounds += 1;
            let (_, a, r) = self
                .decide(pipeline_id, now_ms, &mut |_, _, _| Ok(()))
                .await?;
            again = a;
            resources = resources.or(r);
        }
        drop(guard);
        if let Some(project_id) = resources {
            Box::pin(self.assign_resources(project_id)).await?;
        }
        Ok(out)
    }

    /// Without the pipeline lock: callers hold it. The decision is the processing
    /// service's; its consequences are wired here.
    async fn decide<T>(
        &self,
        pipeline_id: i64,
        now_ms: i64,
        f: &mut impl FnMut(&mut PipelineState, &Loaded, &mut Extras) -> Result<T>,
    ) -> Result<(T, bool, Option<i64>)> {
        let decided = self
            .processing()
            .decide(pipeline_id, now_ms, self, f)
            .await?;
        let Some(stored) = decided.stored else {
            return Ok((decided.out, decided.again, None));
        };
        if stored.new_rows {
            self.inner.dep_rows.forget(&pipeline_id);
        }
        self.spawn_triggers(stored.bridges);
        if stored.sync_parent {
            self.spawn_sync_bridge(pipeline_id);
        }
        let resources = self
            .after_change(&stored.changes, &stored.pending, stored.queued)
            .then_some(stored.project_id);
        Ok((decided.out, decided.again, resources))
    }

    /// Consequences outside the pipeline's rows: wake job requests, forget per-job runtime
    /// facts (the issued tokens) of jobs that stopped executing. Returns whether a
    /// resource group may need an assignment.
    fn after_change(
        &self,
        changes: &[StatusChange],
        pending: &[waiters::NewPending],
        queued: Option<Vec<gantry_store::QueuedJob>>,
    ) -> bool {
        let mut wake = false;
        let mut resources = false;
        let mut ended = Vec::new();
        for c in changes {
            self.inner.metrics.job_changed(c.from, c.to);
            wake |= c.to == crate::processor::Status::Pending;
            resources |= c.resource_group
                && (c.to == crate::processor::Status::WaitingForResource || c.to.is_completed());
            if let (Some(id), Some(from)) = (c.db_id, c.from) {
                if from.is_executing() && !c.to.is_executing() {
                    ended.push(id);
                }
            }
        }
        // The store cleared their token hashes in the same transaction (`Store::apply`).
        if !ended.is_empty() {
            let mut executing = self.executing();
            for id in &ended {
                executing.stopped(*id);
            }
            drop(executing);
            for id in &ended {
                self.traces().stopped(*id);
            }
            self.traces().spawn_archive_traces(ended);
        }
        if wake {
            // Every job that became pending is described, unless one is a new row.
            if pending.len()
                == changes
                    .iter()
                    .filter(|c| c.to == crate::processor::Status::Pending)
                    .count()
            {
                match queued {
                    Some(queued) => self.queue().bump_with(pending, queued),
                    None => self.queue().bump_for(pending),
                }
            } else {
                self.queue().bump();
            }
        }
        resources
    }
}

impl processing::Surroundings for Coordinator {
    fn assignment_gate(&self) -> &tokio::sync::Mutex<()> {
        self.queue().gate()
    }

    fn graceful_among(
        &self,
        job_ids: &mut dyn Iterator<Item = i64>,
    ) -> std::collections::HashSet<i64> {
        self.executing().graceful_among(job_ids)
    }

    fn project_name(&self, project_id: i64) -> String {
        self.facts().project_name(project_id)
    }

    fn observe(&self, loaded: &Loaded, change: &gantry_store::PipelineChange, now_ms: i64) {
        self.record_decision(loaded, change, now_ms);
        self.observe_decision(loaded, change, now_ms);
    }
}
