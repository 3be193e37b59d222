//! What the coordinator hands out: API-shaped values (GitLab API v4 field names, ISO 8601
//! times), separate from the store's rows and from the runner wire types.

use serde::{Serialize, Serializer};

use super::environment::JobEnvironment;
use super::time::iso8601;
use crate::processor::Status;

fn iso<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&iso8601(*ms))
}

fn iso_opt<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
    match ms {
        Some(ms) => s.serialize_str(&iso8601(*ms)),
        None => s.serialize_none(),
    }
}

/// GitLab's `yaml_errors`: one string (messages joined with `, `) or `null`.
fn joined_or_null<S: Serializer>(errors: &[String], s: S) -> Result<S::Ok, S::Error> {
    if errors.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(&errors.join(", "))
    }
}

/// A project (GitLab `GET /projects/:id` subset).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Project {
    pub id: i64,
    /// The group it is in (GitLab's `namespace`).
    pub namespace: Namespace,
    /// Its own name, without its namespace (GitLab's): the last part of its path.
    pub name: String,
    /// Its groups' names from the top and its own, joined by ` / ` (GitLab's).
    pub name_with_namespace: String,
    /// Last path component.
    pub path: String,
    /// `namespace/name`: `name` itself when it contains a `/`, else `gantry/<name>`.
    pub path_with_namespace: String,
    pub default_branch: String,
    /// Where runners clone from: `{external_url}/{path_with_namespace}.git`.
    pub http_url_to_repo: String,
    pub web_url: String,
    /// The repository the project mirrors (a local path or URL).
    pub repo_url: String,
    /// Default job timeout, seconds.
    pub build_timeout: i64,
    /// The CI configuration file's path in the repository.
    pub ci_config_path: String,
    /// New pipelines keep their latest artifacts past `expire_in`.
    pub keep_latest_artifact: bool,
    /// `fetch` or `clone`: what runners do without `GIT_STRATEGY`.
    pub build_git_strategy: String,
    /// The project's `GIT_DEPTH`, when set.
    pub ci_default_git_depth: Option<i64>,
    /// `enabled` or `disabled` (GitLab's words).
    pub auto_cancel_pending_pipelines: &'static str,
    pub ci_separated_caches: bool,
    pub ci_forward_deployment_enabled: bool,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
}

/// A project's group, as GitLab's project shows its `namespace`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Namespace {
    pub id: i64,
    pub name: String,
    pub path: String,
    /// Always `group` (Gantry has no user namespaces).
    pub kind: &'static str,
    pub full_path: String,
    pub web_url: String,
}

/// What to create a runner with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerOptions {
    pub description: String,
    pub tags: Vec<String>,
    pub run_untagged: bool,
    /// A locked runner cannot be used by other projects (meaningful for project runners).
    pub locked: bool,
    /// `access_level: ref_protected`: only jobs of protected refs.
    pub protected_only: bool,
    /// `Some` for a project runner.
    pub project_id: Option<i64>,
    /// Seconds; caps job timeouts (GitLab requires ≥ 600).
    pub maximum_timeout: Option<i64>,
    /// Created paused: it gets no jobs until resumed.
    pub paused: bool,
    /// `Some` for a group runner: the group's path (`acme`, `acme/platform`); it runs the
    /// jobs of every project under it.
    pub group_path: Option<String>,
    /// Gantry's: it takes every job whatever its tags (`gantry run`'s local runner, as
    /// gitlab-ci-local runs every job); `tags` and `run_untagged` are then not asked.
    pub any_tags: bool,
    /// Free text for its administrators; `None` for none.
    pub maintenance_note: Option<String>,
}

/// What to change of a runner (GitLab's `PUT /runners/:id`); `None` keeps it. The
/// store's type: the coordinator only checks and normalizes it.
pub use gantry_store::RunnerChanges as RunnerUpdate;

/// A runner (GitLab `GET /runners/:id` subset, plus what job selection needs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Runner {
    pub id: i64,
    pub description: String,
    /// `instance_type`, `group_type` or `project_type`.
    pub runner_type: &'static str,
    /// The `info.name` it registered with (a registration token); `null` otherwise.
    pub name: Option<String>,
    pub is_shared: bool,
    pub active: bool,
    pub paused: bool,
    /// GitLab's: `online` (contact in the last 2 hours), `offline`, `stale` (no contact
    /// for 7 days, or never in the 7 days since it was created) or `never_contacted`.
    pub status: &'static str,
    /// `status == "online"`.
    pub online: bool,
    pub tag_list: Vec<String>,
    pub run_untagged: bool,
    /// Gantry's: takes every job whatever its tags ([`RunnerOptions::any_tags`]); shown
    /// only when true (GitLab's runner JSON has no such key).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub any_tags: bool,
    pub locked: bool,
    /// `not_protected` or `ref_protected`.
    pub access_level: &'static str,
    pub maximum_timeout: Option<i64>,
    pub project_id: Option<i64>,
    /// A project runner's other projects (`POST /projects/:id/runners`), beside
    /// `project_id`.
    #[serde(skip)]
    pub enabled_projects: Vec<i64>,
    /// A group runner's group (GitLab's `groups`, by path: Gantry's groups have no ids).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<RunnerGroup>,
    #[serde(serialize_with = "iso_opt")]
    pub contacted_at: Option<i64>,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
}

/// One runner as `GET /runners/:id` and `PUT /runners/:id` show it (GitLab's
/// `RunnerDetails`): the list's entity, what its most recently seen process said about
/// itself, and its maintenance note.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunnerDetails {
    #[serde(flatten)]
    pub runner: Runner,
    /// Always `null`, as on GitLab (the address is its managers').
    pub ip_address: Option<String>,
    /// Of the manager last in contact; `null` before any.
    pub version: Option<String>,
    pub revision: Option<String>,
    pub platform: Option<String>,
    pub architecture: Option<String>,
    pub maintenance_note: Option<String>,
    /// The projects a project runner runs the jobs of (GitLab's `runner.projects`, as
    /// `BasicProjectDetails`): its owner first, then those it was enabled in, oldest
    /// first; empty for an instance or group runner.
    pub projects: Vec<Project>,
}

/// A group of a group runner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunnerGroup {
    pub name: String,
    pub full_path: String,
}

#[cfg(test)]
impl Runner {
    /// For unit tests: an online instance runner `id` with `tags`, which takes untagged
    /// jobs when it has none.
    pub(crate) fn online_instance(id: i64, tags: &[&str]) -> Runner {
        Runner {
            id,
            description: format!("runner {id}"),
            runner_type: "instance_type",
            name: None,
            is_shared: true,
            active: true,
            paused: false,
            status: "online",
            online: true,
            tag_list: tags.iter().map(|t| (*t).to_owned()).collect(),
            run_untagged: tags.is_empty(),
            any_tags: false,
            locked: false,
            access_level: "not_protected",
            maximum_timeout: None,
            project_id: None,
            enabled_projects: Vec::new(),
            groups: Vec::new(),
            contacted_at: Some(0),
            created_at: 0,
        }
    }
}

impl Runner {
    pub(crate) fn from_row(r: &gantry_store::Runner) -> Runner {
        let status = runner_status(r.contacted_at, r.created_at, super::time::now_ms());
        Runner {
            id: r.id,
            description: r.description.clone(),
            runner_type: if r.project_id.is_some() {
                "project_type"
            } else if r.group_path.is_some() {
                "group_type"
            } else {
                "instance_type"
            },
            name: r.name.clone(),
            is_shared: r.project_id.is_none() && r.group_path.is_none(),
            active: !r.paused,
            paused: r.paused,
            status,
            online: status == "online",
            tag_list: r.tags.clone(),
            run_untagged: r.run_untagged,
            any_tags: r.any_tags,
            locked: r.locked,
            access_level: if r.protected_only {
                "ref_protected"
            } else {
                "not_protected"
            },
            maximum_timeout: r.maximum_timeout,
            project_id: r.project_id,
            enabled_projects: r.enabled_projects.clone(),
            groups: r
                .group_path
                .iter()
                .map(|g| RunnerGroup {
                    name: g.rsplit('/').next().unwrap_or(g).to_owned(),
                    full_path: g.clone(),
                })
                .collect(),
            contacted_at: r.contacted_at,
            created_at: r.created_at,
        }
    }

    pub fn protected_only(&self) -> bool {
        self.access_level == "ref_protected"
    }
}

/// GitLab's runner status at `now` (see [`Runner::status`]); all times in ms.
pub(crate) fn runner_status(contacted_at: Option<i64>, created_at: i64, now: i64) -> &'static str {
    const STALE_MS: i64 = 7 * 24 * 60 * 60 * 1000;
    match contacted_at {
        Some(t) if now - t < super::metrics::ONLINE_WINDOW_MS => "online",
        Some(t) if now - t >= STALE_MS => "stale",
        Some(_) => "offline",
        None if now - created_at >= STALE_MS => "stale",
        None => "never_contacted",
    }
}

#[cfg(test)]
mod tests {
    use super::runner_status;

    #[test]
    fn a_runner_is_online_for_two_hours_after_contact_and_stale_after_a_week() {
        let hour = 60 * 60 * 1000;
        let now = 1_000 * hour;
        assert_eq!(runner_status(Some(now - hour), 0, now), "online");
        assert_eq!(runner_status(Some(now - 2 * hour), 0, now), "offline");
        assert_eq!(runner_status(Some(now - 7 * 24 * hour), 0, now), "stale");
        assert_eq!(runner_status(None, now - hour, now), "never_contacted");
        assert_eq!(runner_status(None, now - 7 * 24 * hour, now), "stale");
    }
}

/// What the first start created: plaintext tokens, shown once (the store keeps hashes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bootstrap {
    /// An admin token (`glpat-…`) for the user API; `None` when one existed already.
    pub admin_token: Option<String>,
    /// The legacy runner registration token; `None` when one existed already.
    pub registration_token: Option<String>,
}

/// A pipeline, shaped like GitLab's `GET /projects/:id/pipelines/:pipeline_id`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PipelineView {
    pub id: i64,
    pub iid: i64,
    pub project_id: i64,
    /// `workflow:name`.
    pub name: Option<String>,
    pub status: Status,
    pub source: String,
    #[serde(rename = "ref")]
    pub ref_name: String,
    pub sha: String,
    pub before_sha: String,
    pub tag: bool,
    /// Configuration errors of a pipeline that failed to compile (serialized as GitLab's
    /// single string, or `null`).
    #[serde(serialize_with = "joined_or_null")]
    pub yaml_errors: Vec<String>,
    /// `config_error` for a configuration error.
    pub failure_reason: Option<String>,
    /// Pipeline variables given at creation.
    #[serde(skip)]
    pub variables: Vec<(String, String)>,
    pub protected: bool,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
    #[serde(serialize_with = "iso")]
    pub updated_at: i64,
    #[serde(serialize_with = "iso_opt")]
    pub started_at: Option<i64>,
    #[serde(serialize_with = "iso_opt")]
    pub finished_at: Option<i64>,
    /// Seconds from start to finish (or until now while running).
    pub duration: Option<i64>,
    pub web_url: String,
    /// The trigger job that created this downstream pipeline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_job_id: Option<i64>,
    /// What GitLab shows of one pipeline (`GET …/pipelines/:id`, and the answers of
    /// create, retry and cancel) beyond a list's rows: absent from lists, as GitLab's
    /// `PipelineBasic` rows lack it.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub detail: Option<PipelineDetail>,
}

/// GitLab's `Ci::Pipeline` entity's fields beyond `PipelineBasic` that Gantry's
/// pipeline rows do not hold.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PipelineDetail {
    /// Who made it: Gantry's one user.
    pub user: UserBasic,
    /// GitLab's column is set by no creation path of its own: `null`.
    pub committed_at: Option<String>,
    /// Whole seconds from creation to start; `null` before the start, and when it
    /// started within the second it was created (GitLab's `Ci::Pipeline#queued_duration`).
    pub queued_duration: Option<i64>,
    /// The mean coverage of its latest jobs that have one, as text with two decimals
    /// (`"83.33"`, GitLab's presenter), `null` when none has.
    pub coverage: Option<String>,
    pub detailed_status: super::detailed_status::DetailedStatus,
    /// Whether its jobs are archived (a project archived, or older than an instance
    /// setting): Gantry archives none.
    pub archived: bool,
}

/// GitLab's `UserBasic` entity: who made a pipeline or ran a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UserBasic {
    pub id: i64,
    pub username: String,
    pub name: String,
    pub state: &'static str,
    pub locked: bool,
    pub avatar_url: Option<String>,
    pub web_url: String,
}

/// The pipeline a job belongs to, as embedded in GitLab's job JSON (its
/// `PipelineBasic` entity).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobPipeline {
    pub id: i64,
    pub iid: i64,
    pub project_id: i64,
    pub sha: String,
    #[serde(rename = "ref")]
    pub ref_name: String,
    pub status: Status,
    pub source: String,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
    #[serde(serialize_with = "iso")]
    pub updated_at: i64,
    pub web_url: String,
}

/// The commit a job ran, as embedded in GitLab's job JSON (its `Commit` entity, without
/// the parsed `trailers`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommitView {
    pub id: String,
    pub short_id: String,
    /// When it was committed (GitLab's `created_at` is the committed date).
    pub created_at: String,
    pub parent_ids: Vec<String>,
    /// The message's first line.
    pub title: String,
    pub message: String,
    pub author_name: String,
    pub author_email: String,
    pub authored_date: String,
    pub committer_name: String,
    pub committer_email: String,
    pub committed_date: String,
    pub web_url: String,
}

/// The runner that took a job, as embedded in GitLab's job JSON (its `Ci::Runner`
/// entity).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobRunner {
    pub id: i64,
    pub description: String,
    /// Always `null`, as on GitLab.
    pub ip_address: Option<String>,
    pub active: bool,
    pub paused: bool,
    pub is_shared: bool,
    pub runner_type: &'static str,
    pub name: Option<String>,
    pub online: bool,
    pub status: &'static str,
}

impl JobRunner {
    pub(crate) fn of(runner: &Runner) -> JobRunner {
        JobRunner {
            id: runner.id,
            description: runner.description.clone(),
            ip_address: None,
            active: runner.active,
            paused: runner.paused,
            is_shared: runner.is_shared,
            runner_type: runner.runner_type,
            name: runner.name.clone(),
            online: runner.online,
            status: runner.status,
        }
    }
}

/// One process of a runner (GitLab's `Ci::RunnerManager` entity): in
/// `GET /runners/:id/managers` and as the `runner_manager` of a job it took.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunnerManagerView {
    pub id: i64,
    /// The `system_id` the runner process sent (`<legacy>` when it sent none).
    pub system_id: String,
    /// What it said in its last heartbeat; `null` for what it did not say.
    pub version: Option<String>,
    pub revision: Option<String>,
    pub platform: Option<String>,
    pub architecture: Option<String>,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
    #[serde(serialize_with = "iso_opt")]
    pub contacted_at: Option<i64>,
    /// The address it called from.
    pub ip_address: Option<String>,
    /// As a runner's: `online`, `offline`, `stale` or `never_contacted`.
    pub status: &'static str,
    /// `active` while a job it took runs, else `idle`.
    pub job_execution_status: &'static str,
}

impl RunnerManagerView {
    pub(crate) fn of(m: &gantry_store::RunnerManager, now: i64) -> Self {
        let said = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
        RunnerManagerView {
            id: m.id,
            system_id: m.system_id.clone(),
            version: said(&m.info.version),
            revision: said(&m.info.revision),
            platform: said(&m.info.platform),
            architecture: said(&m.info.architecture),
            created_at: m.created_at,
            contacted_at: m.contacted_at,
            ip_address: said(&m.info.ip_address),
            status: runner_status(m.contacted_at, m.created_at, now),
            job_execution_status: if m.busy { "active" } else { "idle" },
        }
    }
}

impl CommitView {
    /// Commit `sha` as its facts (`info`) show it; `web_url` is its page.
    pub(crate) fn from_info(sha: &str, info: &super::git::CommitInfo, web_url: String) -> Self {
        let (author_name, author_email) = split_identity(&info.author);
        let (committer_name, committer_email) = split_identity(&info.committer);
        CommitView {
            id: sha.to_owned(),
            short_id: sha.chars().take(8).collect(),
            created_at: with_millis(&info.timestamp),
            parent_ids: info.parent_ids.clone(),
            title: info.message.lines().next().unwrap_or_default().to_owned(),
            message: info.message.clone(),
            author_name,
            author_email,
            authored_date: with_millis(&info.authored_at),
            committer_name,
            committer_email,
            committed_date: with_millis(&info.timestamp),
            web_url,
        }
    }
}

/// `2023-11-15T00:13:20+01:00` (git's `%cI`, and `CI_COMMIT_TIMESTAMP`, Ruby's
/// `Time#xmlschema`) → `2023-11-15T00:13:20.000+01:00`: GitLab's JSON renders a commit's
/// times with milliseconds (ActiveSupport's `xmlschema(3)`). Anything else stays as it is.
fn with_millis(time: &str) -> String {
    match time.split_at_checked(19) {
        Some((seconds, zone)) if zone.starts_with(['+', '-']) => format!("{seconds}.000{zone}"),
        _ => time.to_owned(),
    }
}

#[cfg(test)]
mod commit_time_tests {
    #[test]
    fn a_commit_time_gets_gitlab_s_milliseconds() {
        assert_eq!(
            super::with_millis("2023-11-15T00:13:20+01:00"),
            "2023-11-15T00:13:20.000+01:00"
        );
        assert_eq!(
            super::with_millis("2023-11-14T20:43:20-02:30"),
            "2023-11-14T20:43:20.000-02:30"
        );
        assert_eq!(super::with_millis(""), "");
    }
}

/// `Name <email>` → (`Name`, `email`).
fn split_identity(identity: &str) -> (String, String) {
    match identity.rsplit_once('<') {
        Some((name, email)) => (
            name.trim_end().to_owned(),
            email.trim_end_matches('>').to_owned(),
        ),
        None => (identity.trim().to_owned(), String::new()),
    }
}

/// `artifacts_file` of GitLab's job JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArtifactsFile {
    pub filename: String,
    pub size: i64,
}

/// An uploaded artifact (GitLab job JSON `artifacts[]`, plus hash and expiry).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Artifact {
    pub job_id: i64,
    pub file_type: String,
    pub file_format: String,
    pub filename: String,
    pub size: i64,
    pub sha256: String,
    #[serde(serialize_with = "iso_opt")]
    pub expire_at: Option<i64>,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
    /// Kept past `expire_at` (see [`gantry_store::Artifact::locked`]); GitLab's job JSON
    /// does not show it.
    #[serde(skip)]
    pub locked: bool,
}

impl Artifact {
    pub(crate) fn from_row(a: &gantry_store::Artifact) -> Artifact {
        Artifact {
            job_id: a.job_id,
            file_type: a.file_type.clone(),
            file_format: a.file_format.clone(),
            filename: a.filename.clone(),
            size: a.size,
            sha256: a.sha256.clone(),
            expire_at: a.expire_at,
            created_at: a.created_at,
            locked: a.locked,
        }
    }

    /// Expired at `now_ms` and not locked (then neither downloadable nor a dependency).
    pub fn expired(&self, now_ms: i64) -> bool {
        !self.locked && self.expire_at.is_some_and(|t| t <= now_ms)
    }
}

/// Where a job stands, without its specification or artifacts: what a progress view
/// needs, read in one query for a whole pipeline ([`super::Coordinator::pipeline_progress`]).
#[derive(Clone, Debug, PartialEq)]
pub struct JobProgress {
    pub id: i64,
    pub name: String,
    pub stage: String,
    pub status: Status,
    pub retried: bool,
    /// Seconds since it started (until it finished).
    pub duration: Option<f64>,
    /// A trigger job (its downstream pipeline: [`Coordinator::downstream_progress`]).
    ///
    /// [`Coordinator::downstream_progress`]: crate::coordinator::Coordinator::downstream_progress
    pub bridge: bool,
}

/// A job, shaped like GitLab's `GET /projects/:id/jobs/:job_id` (plus `when`, `attempt`,
/// `retried`, `exit_code`, `runner_id` which GitLab shows elsewhere).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobView {
    pub id: i64,
    pub name: String,
    pub stage: String,
    pub status: Status,
    #[serde(rename = "ref")]
    pub ref_name: String,
    pub tag: bool,
    pub allow_failure: bool,
    pub when: String,
    pub attempt: i64,
    pub retried: bool,
    /// Why it failed; absent unless it failed (GitLab's `JobBasic`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Gantry's: why a `pending` or `waiting_for_resource` job waits
    /// (`{"code", "message"}`), `null` for any other status (GitLab shows it only on
    /// the job's page).
    pub pending_reason: Option<super::PendingReason>,
    pub exit_code: Option<i64>,
    pub tag_list: Vec<String>,
    pub pipeline_id: i64,
    pub project_id: i64,
    pub pipeline: JobPipeline,
    /// Who made its pipeline: Gantry's one user.
    pub user: UserBasic,
    /// The commit it ran; `null` when the project's repository no longer has it.
    pub commit: Option<CommitView>,
    pub runner_id: Option<i64>,
    /// The runner that took it; `null` before, or once that runner is deleted.
    pub runner: Option<JobRunner>,
    /// The runner process that took it; `null` before, or once it is deleted.
    pub runner_manager: Option<RunnerManagerView>,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
    #[serde(serialize_with = "iso_opt")]
    pub queued_at: Option<i64>,
    #[serde(serialize_with = "iso_opt")]
    pub scheduled_at: Option<i64>,
    #[serde(serialize_with = "iso_opt")]
    pub started_at: Option<i64>,
    #[serde(serialize_with = "iso_opt")]
    pub finished_at: Option<i64>,
    /// Seconds, started → finished (or now).
    pub duration: Option<f64>,
    /// Seconds, queued → started (or now).
    pub queued_duration: Option<f64>,
    /// Seconds, fixed when a runner picked the job.
    pub timeout: Option<i64>,
    pub artifacts_file: Option<ArtifactsFile>,
    pub artifacts: Vec<Artifact>,
    #[serde(serialize_with = "iso_opt")]
    pub artifacts_expire_at: Option<i64>,
    /// Percentage found by the job's `coverage` regex in its log, once it finished.
    pub coverage: Option<f64>,
    /// When its log and artifacts were erased.
    #[serde(serialize_with = "iso_opt")]
    pub erased_at: Option<i64>,
    /// The job's `environment:`, expanded at creation (name and URL).
    pub environment: Option<JobEnvironment>,
    pub web_url: String,
    /// GitLab's `project.ci_job_token_scope_enabled`: the job token's outbound scope,
    /// which Gantry does not have (GitLab 18 removed it), so always `false`.
    pub project: JobProject,
    /// Whether it is archived (no retry, no play): Gantry archives no job.
    pub archived: bool,
    /// A trigger job's downstream pipeline, once created (GitLab's bridge JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downstream_pipeline: Option<JobPipeline>,
    /// A trigger (bridge) job: GitLab lists those under a pipeline's `/bridges`, the
    /// others under `/jobs`.
    #[serde(skip)]
    pub bridge: bool,
    /// Gantry's: what the job used so far, as its runner last reported (absent when it
    /// reported nothing: not started, or an executor that does not measure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesView>,
}

/// The `project` of GitLab's job JSON.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JobProject {
    pub ci_job_token_scope_enabled: bool,
}

/// A job's resource use in the job API (`resources`), from its runner's reports.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ResourcesView {
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub peak_memory_bytes: i64,
    pub read_bytes: i64,
    pub written_bytes: i64,
    /// When the runner reported these figures.
    #[serde(serialize_with = "iso")]
    pub updated_at: i64,
}

impl ResourcesView {
    pub fn from_row(used: &gantry_store::JobResourceUse) -> Self {
        Self {
            cpu_user_seconds: used.cpu_user_seconds,
            cpu_system_seconds: used.cpu_system_seconds,
            peak_memory_bytes: used.peak_memory_bytes,
            read_bytes: used.read_bytes,
            written_bytes: used.written_bytes,
            updated_at: used.updated_at,
        }
    }
}

/// The answer to a job update (`PUT /jobs/:id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateResult {
    /// `false` = answer `202`: the final state is remembered but the trace is not complete
    /// yet; the runner re-sends the same update after `update_interval` (§4.4).
    pub accepted: bool,
    /// The `Job-Status` header: the job's status after the update.
    pub job_status: Status,
    /// `X-GitLab-Trace-Update-Interval` for a `202` (GitLab's backoff by age).
    pub update_interval: Option<std::time::Duration>,
}

/// A pipeline trigger token, shaped like GitLab's `GET /projects/:id/triggers/:trigger_id`.
/// `token` is whole only in the answer that created it (the coordinator keeps a hash);
/// afterwards it is its first characters and `…`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TriggerView {
    pub id: i64,
    pub description: String,
    pub token: String,
    #[serde(serialize_with = "iso")]
    pub created_at: i64,
    #[serde(serialize_with = "iso")]
    pub updated_at: i64,
    #[serde(serialize_with = "iso_opt")]
    pub last_used: Option<i64>,
}
