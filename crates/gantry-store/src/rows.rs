//! Row types: what the database holds, not the API's or the config file's shape.
//! Times are Unix milliseconds; a job's or pipeline's status is [`JobStatus`] (GitLab's
//! status strings in the database); a deployment's is its own string.

pub use gantry_protocol::JobStatus;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::StoreError;

/// The status in column `col` (`table` names it in the error).
pub(crate) fn status(r: &AnyRow, table: &'static str, col: &str) -> Result<JobStatus, StoreError> {
    let value: String = r.get(col);
    parse_status(table, value)
}

fn parse_status(table: &'static str, value: String) -> Result<JobStatus, StoreError> {
    JobStatus::parse(&value).ok_or(StoreError::Unreadable {
        column: table,
        value,
    })
}

/// A row read by column name, whichever executor ran the query: sqlx's [`AnyRow`] or
/// the in-thread connection's [`crate::direct::Row`] (the hot path's reads on SQLite).
/// A row type read through it (such as [`Job`]) has one `from_row` for both.
pub(crate) trait Fields {
    /// Column `name` as `T`; a value of another type (or a missing column) is
    /// [`StoreError::Unreadable`].
    fn field<T: Field>(&self, name: &'static str) -> Result<T, StoreError>;

    /// An integer column as a flag (SQLite's booleans).
    fn flag(&self, name: &'static str) -> Result<bool, StoreError> {
        Ok(self.field::<i64>(name)? != 0)
    }

    /// A JSON list of strings (a job's or runner's tags); unparseable text is no tags.
    fn tags(&self, name: &'static str) -> Result<Vec<String>, StoreError> {
        Ok(serde_json::from_str(&self.field::<String>(name)?).unwrap_or_default())
    }

    /// A status column, `table` naming it in the error.
    fn status(&self, table: &'static str, name: &'static str) -> Result<JobStatus, StoreError> {
        parse_status(table, self.field(name)?)
    }
}

/// A row type read through [`Fields`] (see [`crate::Store`]'s hot reads).
pub(crate) trait FromFields: Sized {
    fn from_fields<R: Fields>(r: &R) -> Result<Self, StoreError>;
}

/// A column's Rust type, from either executor's value.
pub(crate) trait Field: Sized {
    fn from_any(r: &AnyRow, name: &'static str) -> Result<Self, StoreError>;
    /// `None` when `value` is not of this type.
    fn from_value(value: &rusqlite::types::Value) -> Option<Self>;
}

macro_rules! field_via_sqlx {
    ($($t:ty => $from:expr;)*) => {$(
        impl Field for $t {
            fn from_any(r: &AnyRow, name: &'static str) -> Result<Self, StoreError> {
                r.try_get(name).map_err(|e| StoreError::Unreadable {
                    column: name,
                    value: e.to_string(),
                })
            }
            fn from_value(value: &rusqlite::types::Value) -> Option<Self> {
                use rusqlite::types::Value;
                let from: fn(&Value) -> Option<Self> = $from;
                from(value)
            }
        }
    )*};
}

field_via_sqlx! {
    i64 => |v| match v {
        rusqlite::types::Value::Integer(i) => Some(*i),
        _ => None,
    };
    Option<i64> => |v| match v {
        rusqlite::types::Value::Integer(i) => Some(Some(*i)),
        rusqlite::types::Value::Null => Some(None),
        _ => None,
    };
    String => |v| match v {
        rusqlite::types::Value::Text(t) => Some(t.clone()),
        _ => None,
    };
    Option<String> => |v| match v {
        rusqlite::types::Value::Text(t) => Some(Some(t.clone())),
        rusqlite::types::Value::Null => Some(None),
        _ => None,
    };
    // A REAL column may hold an integer (SQLite keeps `1.0` as `1` on disk).
    Option<f64> => |v| match v {
        rusqlite::types::Value::Real(f) => Some(Some(*f)),
        rusqlite::types::Value::Integer(i) => Some(Some(*i as f64)),
        rusqlite::types::Value::Null => Some(None),
        _ => None,
    };
}

impl Fields for AnyRow {
    fn field<T: Field>(&self, name: &'static str) -> Result<T, StoreError> {
        T::from_any(self, name)
    }
}

pub(crate) fn flag(r: &AnyRow, col: &str) -> bool {
    r.get::<i64, _>(col) != 0
}

fn tags(r: &AnyRow, col: &str) -> Vec<String> {
    serde_json::from_str(&r.get::<String, _>(col)).unwrap_or_default()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewProject {
    pub name: String,
    pub repo_url: String,
    pub default_branch: String,
    pub timeout_secs: i64,
    /// The configuration file's path in the repository (GitLab's `ci_config_path`).
    pub ci_config_path: String,
    /// Branch names or patterns protected from the start (GitLab protects the default
    /// branch); stored with the project, in one transaction.
    pub protected_branches: Vec<String>,
}

/// What [`crate::Store::update_project`] changes: `None` leaves a setting as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectChanges {
    pub default_branch: Option<String>,
    pub ci_config_path: Option<String>,
    pub timeout_secs: Option<i64>,
    pub keep_latest_artifact: Option<bool>,
    pub build_git_strategy: Option<String>,
    /// `Some(None)` unsets it.
    pub ci_default_git_depth: Option<Option<i64>>,
    pub auto_cancel_pending_pipelines: Option<bool>,
    pub ci_separated_caches: Option<bool>,
    pub ci_forward_deployment_enabled: Option<bool>,
    /// GitLab's "Limit access to this project" (migration 0026).
    pub ci_inbound_job_token_scope_enabled: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Project {
    pub id: i64,
    pub name: String,
    pub repo_url: String,
    pub default_branch: String,
    pub timeout_secs: i64,
    pub created_at: i64,
    /// The configuration file's path in the repository (GitLab's `ci_config_path`).
    pub ci_config_path: String,
    /// GitLab's `keep_latest_artifact`: pipelines are created with their artifacts locked
    /// (migration 0016).
    pub keep_latest_artifact: bool,
    /// `fetch` or `clone`.
    pub build_git_strategy: String,
    pub ci_default_git_depth: Option<i64>,
    pub auto_cancel_pending_pipelines: bool,
    pub ci_separated_caches: bool,
    pub ci_forward_deployment_enabled: bool,
    /// GitLab's `ci_inbound_job_token_scope_enabled` ("Limit access to this project"):
    /// only the projects and groups of its job token allowlist reach it with their job
    /// tokens (migration 0026; on for new projects).
    pub ci_inbound_job_token_scope_enabled: bool,
}

impl Project {
    pub(crate) const COLUMNS: &'static str = "id, name, repo_url, default_branch, timeout_secs, created_at, ci_config_path, keep_latest_artifact, \
         build_git_strategy, ci_default_git_depth, auto_cancel_pending_pipelines, ci_separated_caches, ci_forward_deployment_enabled, \
         ci_inbound_job_token_scope_enabled";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            name: r.get("name"),
            repo_url: r.get("repo_url"),
            default_branch: r.get("default_branch"),
            timeout_secs: r.get("timeout_secs"),
            created_at: r.get("created_at"),
            ci_config_path: r.get("ci_config_path"),
            keep_latest_artifact: flag(r, "keep_latest_artifact"),
            build_git_strategy: r.get("build_git_strategy"),
            ci_default_git_depth: r.get("ci_default_git_depth"),
            auto_cancel_pending_pipelines: flag(r, "auto_cancel_pending_pipelines"),
            ci_separated_caches: flag(r, "ci_separated_caches"),
            ci_forward_deployment_enabled: flag(r, "ci_forward_deployment_enabled"),
            ci_inbound_job_token_scope_enabled: flag(r, "ci_inbound_job_token_scope_enabled"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRunner {
    pub token_hash: String,
    pub description: String,
    pub tags: Vec<String>,
    pub run_untagged: bool,
    pub locked: bool,
    /// Only runs jobs of protected refs (`access_level: ref_protected`).
    pub protected_only: bool,
    /// `Some` for a project runner, `None` for an instance or group runner.
    pub project_id: Option<i64>,
    /// `Some` for a group runner: the group's path (`acme`, `acme/platform`).
    pub group_path: Option<String>,
    pub maximum_timeout: Option<i64>,
    /// Created paused: it gets no jobs until resumed.
    pub paused: bool,
    /// Takes every job whatever its tags (`gantry run`'s local runner).
    pub any_tags: bool,
    /// The `info.name` it registered with (registration token); `None` otherwise.
    pub name: Option<String>,
    /// Free text for its administrators (GitLab's `maintenance_note`).
    pub maintenance_note: Option<String>,
}

/// Whose jobs [`crate::Store::jobs_page`] lists (trigger jobs never).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobsOf {
    /// Every job of the project.
    Project(i64),
    /// The jobs the runner took (every project's).
    Runner(i64),
}

/// In which order [`crate::Store::jobs_page`] lists jobs, by id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JobsOrder {
    /// Newest first (GitLab's default).
    #[default]
    NewestFirst,
    /// Oldest first (`GET /runners/:id/jobs?order_by=id&sort=asc`).
    OldestFirst,
}

/// A change of a runner's settings ([`crate::Store::update_runner`]); `None` keeps what is
/// stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerChanges {
    pub description: Option<String>,
    pub tags: Option<Vec<String>>,
    pub run_untagged: Option<bool>,
    pub locked: Option<bool>,
    /// `access_level`: `ref_protected` (`true`) or `not_protected`.
    pub protected_only: Option<bool>,
    /// Seconds (the coordinator requires ≥ 600).
    pub maximum_timeout: Option<i64>,
    /// A paused runner's job requests get no job.
    pub paused: Option<bool>,
    pub maintenance_note: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runner {
    pub id: i64,
    pub description: String,
    pub tags: Vec<String>,
    pub run_untagged: bool,
    pub locked: bool,
    pub protected_only: bool,
    pub project_id: Option<i64>,
    pub maximum_timeout: Option<i64>,
    pub paused: bool,
    pub contacted_at: Option<i64>,
    pub created_at: i64,
    /// A group runner's group path.
    pub group_path: Option<String>,
    /// Takes every job whatever its tags (`gantry run`'s local runner).
    pub any_tags: bool,
    /// The `info.name` it registered with (GitLab's `ci_runners.name`), if any.
    pub name: Option<String>,
    pub maintenance_note: Option<String>,
    /// A project runner's other projects (`runner_projects`), oldest first; empty for
    /// other runners.
    pub enabled_projects: Vec<i64>,
}

impl Runner {
    pub(crate) const COLUMNS: &'static str = "id, description, tags, run_untagged, locked, protected_only, project_id, maximum_timeout, paused, contacted_at, created_at, group_path, any_tags, name, maintenance_note";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            description: r.get("description"),
            tags: tags(r, "tags"),
            run_untagged: flag(r, "run_untagged"),
            locked: flag(r, "locked"),
            protected_only: flag(r, "protected_only"),
            project_id: r.get("project_id"),
            maximum_timeout: r.get("maximum_timeout"),
            paused: flag(r, "paused"),
            contacted_at: r.get("contacted_at"),
            created_at: r.get("created_at"),
            group_path: r.get("group_path"),
            any_tags: flag(r, "any_tags"),
            name: r.get("name"),
            maintenance_note: r.get("maintenance_note"),
            enabled_projects: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewPipeline {
    pub project_id: i64,
    /// From [`crate::Store::allocate_pipeline_iid`].
    pub iid: i64,
    pub ref_name: String,
    pub tag: bool,
    pub sha: String,
    pub before_sha: String,
    pub source: String,
    pub status: JobStatus,
    pub failure_reason: Option<String>,
    /// Configuration errors (JSON array of messages) of a pipeline that failed to compile.
    pub yaml_errors: Option<String>,
    /// Pipeline variables (JSON object).
    pub variables: String,
    pub protected: bool,
    /// The trigger job that creates this pipeline (a downstream pipeline); `None` for a
    /// pipeline created from a ref.
    pub parent_job_id: Option<i64>,
    /// A push pipeline's change of a ref, recorded with the pipeline: if the ref has
    /// moved meanwhile the pipeline is not created ([`crate::StoreError::Stale`]).
    pub push: Option<RefChange>,
    /// The pipeline schedule this pipeline runs for.
    pub schedule: Option<ScheduleRun>,
    /// Its OpenTelemetry trace id (hex), when the coordinator traces.
    pub trace_id: Option<String>,
    /// A merge request pipeline's merge request (written with the pipeline).
    pub merge_request: Option<crate::MergeRequestLink>,
    /// A trigger token pipeline's `CI_TRIGGER_SHORT_TOKEN`.
    pub trigger_short_token: Option<String>,
}

/// A pipeline schedule's run: with `due`, a timed run that moves the schedule's
/// `next_run_at` from `due` to `next` with the pipeline (else [`crate::StoreError::Stale`]:
/// another coordinator ran it); without, a run asked for (`play`), which moves nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRun {
    pub schedule_id: i64,
    pub due: Option<i64>,
    pub next: Option<i64>,
}

/// A pipeline schedule (GitLab's `Ci::PipelineSchedule`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineSchedule {
    pub id: i64,
    pub project_id: i64,
    pub description: String,
    /// `refs/heads/…` or `refs/tags/…`.
    pub ref_name: String,
    pub cron: String,
    pub cron_timezone: String,
    pub active: bool,
    /// Unix ms; `None` while inactive.
    pub next_run_at: Option<i64>,
    /// The variables, sealed (the coordinator seals and opens them).
    pub variables: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl PipelineSchedule {
    pub(crate) const COLUMNS: &'static str = "id, project_id, description, ref_name, cron, cron_timezone, active, next_run_at, variables, created_at, updated_at";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            project_id: r.get("project_id"),
            description: r.get("description"),
            ref_name: r.get("ref_name"),
            cron: r.get("cron"),
            cron_timezone: r.get("cron_timezone"),
            active: flag(r, "active"),
            next_run_at: r.get("next_run_at"),
            variables: r.get("variables"),
            created_at: r.get("created_at"),
            updated_at: r.get("updated_at"),
        }
    }
}

/// A branch or tag moving in a project's repository (push pipelines): from the commit the
/// coordinator last saw to the one it sees now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefChange {
    /// `refs/heads/…` or `refs/tags/…`.
    pub ref_name: String,
    /// `None`: the ref is new.
    pub from: Option<String>,
    /// `None`: the ref was deleted.
    pub to: Option<String>,
}

/// [`crate::Store::pipeline_job_summary`]: what a pipeline's latest jobs add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PipelineJobSummary {
    /// The mean of their coverage, of those that have one.
    pub coverage: Option<f64>,
    /// How many failed or were canceled with `allow_failure`.
    pub warnings: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pipeline {
    pub id: i64,
    pub project_id: i64,
    pub iid: i64,
    pub ref_name: String,
    pub tag: bool,
    pub sha: String,
    pub before_sha: String,
    pub source: String,
    pub status: JobStatus,
    pub failure_reason: Option<String>,
    pub yaml_errors: Option<String>,
    pub variables: String,
    pub protected: bool,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub updated_at: i64,
    pub lock_version: i64,
    /// The trigger job that created this pipeline (downstream pipelines only).
    pub parent_job_id: Option<i64>,
    /// The schedule that created this pipeline (scheduled pipelines only).
    pub schedule_id: Option<i64>,
    /// Its OpenTelemetry trace id (32 hex digits); `None`: not traced.
    pub trace_id: Option<String>,
    /// `CI_TRIGGER_SHORT_TOKEN` of a pipeline a trigger token created.
    pub trigger_short_token: Option<String>,
}

impl Pipeline {
    pub(crate) const COLUMNS: &'static str = "id, project_id, iid, ref_name, tag, sha, before_sha, source, status, failure_reason, yaml_errors, \
         variables, protected, created_at, started_at, finished_at, updated_at, lock_version, parent_job_id, schedule_id, trace_id, trigger_short_token";
    pub(crate) fn from_row(r: &AnyRow) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.get("id"),
            project_id: r.get("project_id"),
            iid: r.get("iid"),
            ref_name: r.get("ref_name"),
            tag: flag(r, "tag"),
            sha: r.get("sha"),
            before_sha: r.get("before_sha"),
            source: r.get("source"),
            status: status(r, "pipelines.status", "status")?,
            failure_reason: r.get("failure_reason"),
            yaml_errors: r.get("yaml_errors"),
            variables: r.get("variables"),
            protected: flag(r, "protected"),
            created_at: r.get("created_at"),
            started_at: r.get("started_at"),
            finished_at: r.get("finished_at"),
            updated_at: r.get("updated_at"),
            lock_version: r.get("lock_version"),
            parent_job_id: r.get("parent_job_id"),
            schedule_id: r.get("schedule_id"),
            trace_id: r.get("trace_id"),
            trigger_short_token: r.get("trigger_short_token"),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJob {
    pub name: String,
    pub stage: String,
    pub stage_idx: i64,
    pub status: JobStatus,
    pub attempt: i64,
    pub allow_failure: bool,
    /// The compiled job (JSON of `gantry_pipeline::Job`).
    pub spec: String,
    pub tags: Vec<String>,
    pub protected: bool,
    /// A trigger job (no runner runs it); lists of a project's jobs leave these out.
    pub bridge: bool,
    /// Why a job created `failed` failed (GitLab's `environment_creation_failure`).
    pub failure_reason: Option<String>,
    /// The job's `environment:`: its environment is found or created with the row.
    pub environment: Option<crate::NewJobEnvironment>,
    /// The job's resource group key (expanded): the group is made with the row.
    pub resource_group: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Job {
    pub id: i64,
    pub pipeline_id: i64,
    pub project_id: i64,
    pub name: String,
    pub stage: String,
    pub stage_idx: i64,
    pub status: JobStatus,
    pub attempt: i64,
    pub retried: bool,
    pub allow_failure: bool,
    pub spec: String,
    pub tags: Vec<String>,
    pub protected: bool,
    pub runner_id: Option<i64>,
    /// The runner process that took it ([`crate::RunnerManager`]; migration 0042).
    pub runner_manager_id: Option<i64>,
    pub exit_code: Option<i64>,
    pub failure_reason: Option<String>,
    pub manual_variables: Option<String>,
    /// A played manual job's job input values (JSON; migration 0036).
    pub input_values: Option<String>,
    pub created_at: i64,
    pub queued_at: Option<i64>,
    pub scheduled_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub last_contact_at: Option<i64>,
    pub timeout_secs: Option<i64>,
    pub trace_size: i64,
    pub trace_checksum: Option<String>,
    /// Percentage found by the job's `coverage` regex in its log, once it finished.
    pub coverage: Option<f64>,
    /// The environment the job names (`None`: none, or it could not be created).
    pub environment_id: Option<i64>,
    /// The job's `environment:action` when it names an environment.
    pub environment_action: Option<String>,
    /// When its log and artifacts were erased (Unix ms).
    pub erased_at: Option<i64>,
}

impl Job {
    pub(crate) const COLUMNS: &'static str = "id, pipeline_id, project_id, name, stage, stage_idx, status, attempt, retried, allow_failure, spec, tags, \
         protected, runner_id, runner_manager_id, exit_code, failure_reason, manual_variables, input_values, created_at, queued_at, scheduled_at, started_at, finished_at, \
         last_contact_at, timeout_secs, trace_size, trace_checksum, coverage, environment_id, environment_action, erased_at";
    /// [`Job::COLUMNS`] with an empty `spec` (the large column), for callers that cache
    /// parsed specs.
    pub(crate) const COLUMNS_WITHOUT_SPEC: &'static str = "id, pipeline_id, project_id, name, stage, stage_idx, status, attempt, retried, allow_failure, '' AS spec, tags, \
         protected, runner_id, runner_manager_id, exit_code, failure_reason, manual_variables, input_values, created_at, queued_at, scheduled_at, started_at, finished_at, \
         last_contact_at, timeout_secs, trace_size, trace_checksum, coverage, environment_id, environment_action, erased_at";
    pub(crate) fn from_row<R: Fields>(r: &R) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.field("id")?,
            pipeline_id: r.field("pipeline_id")?,
            project_id: r.field("project_id")?,
            name: r.field("name")?,
            stage: r.field("stage")?,
            stage_idx: r.field("stage_idx")?,
            status: r.status("jobs.status", "status")?,
            attempt: r.field("attempt")?,
            retried: r.flag("retried")?,
            allow_failure: r.flag("allow_failure")?,
            spec: r.field("spec")?,
            tags: r.tags("tags")?,
            protected: r.flag("protected")?,
            runner_id: r.field("runner_id")?,
            runner_manager_id: r.field("runner_manager_id")?,
            exit_code: r.field("exit_code")?,
            failure_reason: r.field("failure_reason")?,
            manual_variables: r.field("manual_variables")?,
            input_values: r.field("input_values")?,
            created_at: r.field("created_at")?,
            queued_at: r.field("queued_at")?,
            scheduled_at: r.field("scheduled_at")?,
            started_at: r.field("started_at")?,
            finished_at: r.field("finished_at")?,
            last_contact_at: r.field("last_contact_at")?,
            timeout_secs: r.field("timeout_secs")?,
            trace_size: r.field("trace_size")?,
            trace_checksum: r.field("trace_checksum")?,
            coverage: r.field("coverage")?,
            environment_id: r.field("environment_id")?,
            environment_action: r.field("environment_action")?,
            erased_at: r.field("erased_at")?,
        })
    }
}

impl FromFields for Job {
    fn from_fields<R: Fields>(r: &R) -> Result<Self, StoreError> {
        Job::from_row(r)
    }
}

/// A pending job as the queue sees it: a job row without its spec, which the caller
/// usually has parsed already (a row's spec never changes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueuedJob {
    pub id: i64,
    pub pipeline_id: i64,
    pub project_id: i64,
    pub name: String,
    pub stage: String,
    pub stage_idx: i64,
    pub attempt: i64,
    pub allow_failure: bool,
    pub tags: Vec<String>,
    pub protected: bool,
    pub manual_variables: Option<String>,
    pub input_values: Option<String>,
    pub created_at: i64,
    pub queued_at: Option<i64>,
    pub environment_id: Option<i64>,
    /// The project's name (its path, or its path under the default namespace), for
    /// group runners.
    pub project_name: String,
}

impl QueuedJob {
    pub(crate) const COLUMNS: &'static str = "id, pipeline_id, project_id, name, stage, stage_idx, attempt, allow_failure, tags, protected, manual_variables, input_values, created_at, queued_at, environment_id, \
         (SELECT p.name FROM projects p WHERE p.id = jobs.project_id) AS project_name";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            pipeline_id: r.get("pipeline_id"),
            project_id: r.get("project_id"),
            name: r.get("name"),
            stage: r.get("stage"),
            stage_idx: r.get("stage_idx"),
            attempt: r.get("attempt"),
            allow_failure: flag(r, "allow_failure"),
            tags: tags(r, "tags"),
            protected: flag(r, "protected"),
            manual_variables: r.get("manual_variables"),
            input_values: r.get("input_values"),
            created_at: r.get("created_at"),
            queued_at: r.get("queued_at"),
            environment_id: r.get("environment_id"),
            project_name: r.try_get("project_name").unwrap_or_default(),
        }
    }
}

/// A pending job to hand to a runner ([`crate::Store::assign_jobs`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub job_id: i64,
    pub runner_id: i64,
    /// The runner process (its manager, [`crate::RunnerManager`]) that asked; `None`
    /// when its heartbeat could not be written.
    pub runner_manager_id: Option<i64>,
    /// The hash of the job token issued with it.
    pub token_hash: String,
    pub timeout_secs: i64,
}

/// What [`crate::Store::timer_candidates`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimerCandidates {
    /// Pipelines with a job time may have made due.
    pub pipelines: std::collections::BTreeSet<i64>,
    /// Projects with jobs waiting for a resource.
    pub resource_projects: std::collections::BTreeSet<i64>,
}

/// A job [`crate::Store::assign_jobs`] handed to its runner, and its pipeline as the
/// same transaction left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assigned {
    pub pipeline_id: i64,
    /// The pipeline's status (the assignment does not change it).
    pub pipeline_status: JobStatus,
    /// The pipeline's `lock_version` after the assignment moved it (one step per
    /// pipeline per batch, whatever the number of its jobs assigned): whoever holds the
    /// pipeline's rows as of one step before holds them as of now once it applies the
    /// batch's assignments of this pipeline.
    pub lock_version: i64,
    /// The job's committed log size (a job put back in the queue keeps its log).
    pub trace_size: i64,
    /// Whether that log is in the database (`trace_chunks`) rather than a file.
    pub trace_in_db: bool,
}

/// Most assignments [`crate::Store::assign_jobs`] makes in one statement (4 bound values
/// each, well within SQLite's limit of 32,766).
pub const MAX_ASSIGN_BATCH: usize = 256;

/// A decided change to one job row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobUpdate {
    pub id: i64,
    pub status: JobStatus,
    pub retried: bool,
    pub allow_failure: bool,
    pub exit_code: Option<i64>,
    pub failure_reason: Option<String>,
    pub queued_at: Option<i64>,
    pub scheduled_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub manual_variables: Option<String>,
    /// What the job's new status does to its environment.
    pub environment_event: Option<crate::EnvironmentEvent>,
    /// A played manual job's job input values (JSON); `None` keeps them.
    pub input_values: Option<String>,
}

/// Everything decided for one pipeline in one step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineChange {
    pub status: JobStatus,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub jobs: Vec<JobUpdate>,
    pub new_jobs: Vec<NewJob>,
    /// The pipeline enters an end state (success, failed, canceled, skipped, or manual:
    /// blocked): the older pipeline families of its ref give up their artifact lock, but
    /// for the newest successful one (GitLab's unlock on pipeline stop).
    pub ended: bool,
    /// Applied only while this job holds this token (a runner's final update checked by
    /// the change's own write instead of a lookup before it); else
    /// [`crate::StoreError::TokenRevoked`].
    pub guard: Option<JobTokenGuard>,
}

/// A job and the hash of the token a change was made for ([`PipelineChange::guard`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobTokenGuard {
    pub job_id: i64,
    pub token_hash: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewArtifact {
    pub job_id: i64,
    pub file_type: String,
    pub file_format: String,
    pub filename: String,
    pub size: i64,
    pub sha256: String,
    pub blob_key: String,
    pub expire_at: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Artifact {
    pub id: i64,
    pub job_id: i64,
    pub file_type: String,
    pub file_format: String,
    pub filename: String,
    pub size: i64,
    pub sha256: String,
    pub blob_key: String,
    pub expire_at: Option<i64>,
    pub created_at: i64,
    /// Its pipeline's family is the newest of its ref or the newest successful one:
    /// kept past `expire_at` (GitLab's "keep artifacts from the most recent successful
    /// jobs"), see migration 0015.
    pub locked: bool,
}

impl Artifact {
    pub(crate) const COLUMNS: &'static str = "id, job_id, file_type, file_format, filename, size, sha256, blob_key, expire_at, created_at, \
        (SELECT p.locked FROM jobs j JOIN pipelines p ON p.id = j.pipeline_id WHERE j.id = artifacts.job_id) AS locked";

    /// Expired at `now_ms` and not locked: then neither downloadable nor a dependency,
    /// and removed by the next expiry pass (GitLab's `valid_dependency?` and
    /// `available_artifacts?`).
    pub fn expired(&self, now_ms: i64) -> bool {
        !self.locked && self.expire_at.is_some_and(|t| t <= now_ms)
    }

    pub(crate) fn from_row<R: Fields>(r: &R) -> Result<Self, StoreError> {
        Ok(Self {
            id: r.field("id")?,
            job_id: r.field("job_id")?,
            file_type: r.field("file_type")?,
            file_format: r.field("file_format")?,
            filename: r.field("filename")?,
            size: r.field("size")?,
            sha256: r.field("sha256")?,
            blob_key: r.field("blob_key")?,
            expire_at: r.field("expire_at")?,
            created_at: r.field("created_at")?,
            locked: r.field::<Option<i64>>("locked")?.is_some_and(|l| l != 0),
        })
    }
}

impl FromFields for Artifact {
    fn from_fields<R: Fields>(r: &R) -> Result<Self, StoreError> {
        Artifact::from_row(r)
    }
}

/// A pipeline trigger token of a project (the token itself is only hashed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineTrigger {
    pub id: i64,
    pub project_id: i64,
    /// The first characters of the token, for lists.
    pub token_prefix: String,
    pub description: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
}

impl PipelineTrigger {
    pub(crate) const COLUMNS: &'static str =
        "id, project_id, token_prefix, description, created_at, last_used_at";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            project_id: r.get("project_id"),
            token_prefix: r.get("token_prefix"),
            description: r.get("description"),
            created_at: r.get("created_at"),
            last_used_at: r.get("last_used_at"),
        }
    }
}

/// A project CI/CD variable (GitLab's `Ci::Variable`): unique per `(key,
/// environment_scope)` within its project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectVariable {
    pub key: String,
    pub value: String,
    /// `env_var` or `file`.
    pub variable_type: String,
    pub protected: bool,
    pub masked: bool,
    /// Masked and never shown again by the API (GitLab's `masked_and_hidden`); set only
    /// at creation.
    pub hidden: bool,
    pub raw: bool,
    pub environment_scope: String,
    pub description: Option<String>,
}

impl ProjectVariable {
    /// A plain variable with GitLab's defaults: `env_var`, scope `*`, nothing set.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            variable_type: "env_var".to_owned(),
            protected: false,
            masked: false,
            hidden: false,
            raw: false,
            environment_scope: "*".to_owned(),
            description: None,
        }
    }

    pub(crate) const COLUMNS: &'static str =
        "key, value, variable_type, protected, masked, hidden, raw, environment_scope, description";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        Self {
            key: r.get("key"),
            value: r.get("value"),
            variable_type: r.get("variable_type"),
            protected: flag(r, "protected"),
            masked: flag(r, "masked"),
            hidden: flag(r, "hidden"),
            raw: flag(r, "raw"),
            environment_scope: r.get("environment_scope"),
            description: r.get("description"),
        }
    }
}

/// An instance CI/CD variable (GitLab's `Ci::InstanceVariable`): every project's pipelines
/// see it; its key is unique instance-wide, and it has no environment scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceVariable {
    pub key: String,
    pub value: String,
    /// `env_var` or `file`.
    pub variable_type: String,
    pub protected: bool,
    pub masked: bool,
    pub raw: bool,
    pub description: Option<String>,
}

impl InstanceVariable {
    /// A plain variable with GitLab's defaults: `env_var`, nothing set.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            variable_type: "env_var".to_owned(),
            protected: false,
            masked: false,
            raw: false,
            description: None,
        }
    }

    pub(crate) const COLUMNS: &'static str =
        "key, value, variable_type, protected, masked, raw, description";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        Self {
            key: r.get("key"),
            value: r.get("value"),
            variable_type: r.get("variable_type"),
            protected: flag(r, "protected"),
            masked: flag(r, "masked"),
            raw: flag(r, "raw"),
            description: r.get("description"),
        }
    }
}

/// Protected branches and protected tags are kept apart, as on GitLab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefKind {
    Branch,
    Tag,
}

impl RefKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Branch => "branch",
            Self::Tag => "tag",
        }
    }
}

/// A protected branch or tag: a name, or a pattern with `*` wildcards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedRef {
    pub id: i64,
    pub kind: RefKind,
    pub name: String,
    pub created_at: i64,
}

impl ProtectedRef {
    pub(crate) const COLUMNS: &'static str = "id, kind, name, created_at";
    pub(crate) fn from_row(r: &AnyRow) -> Self {
        let kind: String = r.get("kind");
        Self {
            id: r.get("id"),
            kind: if kind == "tag" {
                RefKind::Tag
            } else {
                RefKind::Branch
            },
            name: r.get("name"),
            created_at: r.get("created_at"),
        }
    }
}

/// Which artifacts [`crate::Store::take_artifacts`] removes (always of finished jobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArtifactSelection {
    /// Those that expired by this time (Unix ms).
    ExpiredBy(i64),
    /// Those of one job.
    OfJob(i64),
    /// Those of every job of one project.
    OfProject(i64),
}

/// Which of a project's pipelines to list, and in which order (GitLab's
/// `GET /projects/:id/pipelines` parameters; `Default`: all, newest first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineFilter {
    /// The branch or tag name.
    pub ref_name: Option<String>,
    pub status: Option<JobStatus>,
    pub sha: Option<String>,
    pub source: Option<String>,
    pub scope: Option<PipelineScope>,
    /// `true`: only pipelines with configuration errors; `false`: only those without.
    pub yaml_errors: Option<bool>,
    /// Unix ms, inclusive bounds.
    pub created_after: Option<i64>,
    pub created_before: Option<i64>,
    pub updated_after: Option<i64>,
    pub updated_before: Option<i64>,
    pub order: PipelineOrder,
    pub ascending: bool,
}

/// GitLab's pipeline `scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineScope {
    Running,
    Pending,
    /// Success, failed, canceled or skipped.
    Finished,
    /// The newest pipeline of each branch.
    Branches,
    /// The newest pipeline of each tag.
    Tags,
}

/// GitLab's pipeline `order_by` (`user_id` is `id`: Gantry has one user).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PipelineOrder {
    #[default]
    Id,
    Status,
    Ref,
    UpdatedAt,
}

/// What [`crate::Store::delete_pipeline`] or [`crate::Store::delete_project`] deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeletedPipeline {
    /// Its jobs' ids.
    pub jobs: Vec<i64>,
    /// `(job id, file type, blob key)` of their artifacts.
    pub artifacts: Vec<(i64, String, String)>,
}
