//! Projects and pipelines: projects' rows and settings, user actions on pipelines and
//! jobs (cancel, retry, play, delete), and the views users get. Creation is
//! `creation.rs`.

use std::collections::HashMap;
use std::path::PathBuf;

use gantry_store::{JobsOf, JobsOrder, NewProject};

use crate::processor::{CancelCause, CancelScope, Event, Rejected, Status, apply};

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::pending::RunnerPool;
use super::spec::StoredSpec;
use super::time::{now_ms, to_ts};
use super::views::{
    Artifact, ArtifactsFile, JobPipeline, JobProgress, JobView, Namespace, PipelineView, Project,
    ResourcesView,
};

/// Namespace of projects whose name has no `/`.
pub(crate) const DEFAULT_NAMESPACE: &str = "gantry";
/// Default job timeout of a new project (GitLab's default: 60 minutes).
const DEFAULT_PROJECT_TIMEOUT: i64 = 3600;

/// `(namespace, path)` of a project name: `acme/widget` → (`acme`, `widget`);
/// `widget` → (`gantry`, `widget`).
pub(crate) fn project_path(name: &str) -> (String, String) {
    match name.rsplit_once('/') {
        Some((ns, path)) => (ns.to_owned(), path.to_owned()),
        None => (DEFAULT_NAMESPACE.to_owned(), name.to_owned()),
    }
}

pub(crate) fn full_path(name: &str) -> String {
    let (ns, path) = project_path(name);
    format!("{ns}/{path}")
}

/// Whether the project named `name` is under the group whose full path is `group` (its
/// [`full_path`] starts with `group/`), without building that path: the queue asks it of
/// every held job a group runner's pick-up looks at.
pub(crate) fn under_group(name: &str, group: &str) -> bool {
    let namespace = name
        .rsplit_once('/')
        .map_or(DEFAULT_NAMESPACE, |(ns, _)| ns);
    namespace
        .strip_prefix(group)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn valid_project_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with(".git")
        && name.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && !seg.starts_with('-')
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// A local path (not a URL nor `host:path` scp syntax).
pub(crate) fn is_local_path(repo: &str) -> bool {
    if repo.contains("://") {
        return false;
    }
    match repo.split_once(':') {
        // `C:\…` style or a plain path with a colon after a slash
        Some((before, _)) => before.contains('/') || before.len() == 1,
        None => true,
    }
}

/// Settings of a project to change ([`Coordinator::update_project`]); `None` leaves one
/// as it is.
#[derive(Clone, Debug, Default)]
pub struct ProjectSettings {
    pub default_branch: Option<String>,
    /// Empty: back to `.gitlab-ci.yml`.
    pub ci_config_path: Option<String>,
    /// The default job timeout, seconds.
    pub build_timeout: Option<i64>,
    pub keep_latest_artifact: Option<bool>,
    /// `fetch` or `clone`: what runners do without `GIT_STRATEGY`.
    pub build_git_strategy: Option<String>,
    /// The project's `GIT_DEPTH` (0 to 1000); `Some(None)` unsets it.
    pub ci_default_git_depth: Option<Option<i64>>,
    /// Auto-cancel redundant pipelines (`workflow:auto_cancel:on_new_commit`).
    pub auto_cancel_pending_pipelines: Option<bool>,
    /// Cache keys of protected and other refs kept apart.
    pub ci_separated_caches: Option<bool>,
    /// Outdated deployment jobs fail instead of deploying.
    pub ci_forward_deployment_enabled: Option<bool>,
}

/// GitLab's bounds of a project's default clone depth.
const MAX_GIT_DEPTH: i64 = 1000;

/// GitLab's bounds of a project's job timeout: at least 10 minutes, under a month
/// (Rails' `1.month`).
const MIN_BUILD_TIMEOUT: i64 = 600;
const MAX_BUILD_TIMEOUT: i64 = 2_629_746;

/// A project's CI configuration path: relative to the repository root, `.gitlab-ci.yml`
/// when not given or empty.
fn config_path(path: Option<&str>) -> std::result::Result<String, String> {
    match path {
        None | Some("") => Ok(".gitlab-ci.yml".to_owned()),
        Some(path) if path.starts_with('/') || path.split('/').any(|part| part == "..") => Err(
            format!("the CI configuration path `{path}` must be relative to the repository root"),
        ),
        Some(path) if path.len() > 255 => Err(format!(
            "the CI configuration path is {} bytes long; at most 255 are allowed",
            path.len()
        )),
        Some(path) => Ok(path.to_owned()),
    }
}

/// The default branch of a project to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DefaultBranch {
    /// The repository's `HEAD` (`main` when it has none).
    #[default]
    Head,
    /// This branch, which must be one of the repository's when it has branches (a
    /// repository without any may get its first branch pushed later).
    Branch(String),
    /// This branch, not checked: the repository holds only some of the project's refs
    /// (`gantry run`'s snapshot of one ref).
    Declared(String),
}

/// A project to create.
#[derive(Clone, Debug, Default)]
pub struct ProjectRequest {
    /// `name` or `namespace/name`.
    pub name: String,
    /// A local path or a URL git can fetch.
    pub repo: String,
    /// The default branch.
    pub default_branch: DefaultBranch,
    /// The configuration file's path in the repository; `.gitlab-ci.yml` when `None`.
    pub ci_config_path: Option<String>,
}

impl Coordinator {
    /// The bare repository runners clone for `project` (`namespace/name`, with or without
    /// `.git`, or just the name). Serve it over smart HTTP (`git http-backend`). An
    /// unknown project gives a path that does not exist.
    pub async fn git_repo_path(&self, project: &str) -> PathBuf {
        match self.project_by_path(project).await {
            Ok(p) => self.sources().mirror(p.id).path,
            Err(_) => self
                .inner
                .cfg
                .data_dir
                .join("repos")
                .join("unknown-project.git"),
        }
    }

    /// A project by its path (`gantry/demo`, `gantry/demo.git`, `acme/widget`) or name.
    pub async fn project_by_path(
        &self,
        path: &str,
    ) -> std::result::Result<Project, CoordinatorError> {
        let path = path.trim_matches('/');
        let path = path.strip_suffix(".git").unwrap_or(path);
        match self.project_by_name(path).await {
            Err(CoordinatorError::NotFound(_)) => {
                let short = path
                    .strip_prefix(&format!("{DEFAULT_NAMESPACE}/"))
                    .filter(|s| !s.contains('/'));
                match short {
                    Some(name) => self.project_by_name(name).await,
                    None => Err(CoordinatorError::NotFound("project")),
                }
            }
            other => other,
        }
    }

    pub(crate) async fn project_view(&self, p: &gantry_store::Project) -> Result<Project> {
        let full = full_path(&p.name);
        let base = self.external_url();
        let (ns, path) = project_path(&p.name);
        let namespace = Namespace {
            id: self.facts().group_id(&ns).await?,
            name: ns.rsplit('/').next().unwrap_or(&ns).to_owned(),
            path: ns.rsplit('/').next().unwrap_or(&ns).to_owned(),
            kind: "group",
            web_url: format!("{base}/groups/{ns}"),
            full_path: ns,
        };
        Ok(Project {
            namespace,
            id: p.id,
            name: p.name.clone(),
            path,
            path_with_namespace: full.clone(),
            default_branch: p.default_branch.clone(),
            http_url_to_repo: format!("{base}/{full}.git"),
            web_url: format!("{base}/{full}"),
            repo_url: p.repo_url.clone(),
            build_timeout: p.timeout_secs,
            ci_config_path: p.ci_config_path.clone(),
            keep_latest_artifact: p.keep_latest_artifact,
            build_git_strategy: p.build_git_strategy.clone(),
            ci_default_git_depth: p.ci_default_git_depth,
            auto_cancel_pending_pipelines: if p.auto_cancel_pending_pipelines {
                "enabled"
            } else {
                "disabled"
            },
            ci_separated_caches: p.ci_separated_caches,
            ci_forward_deployment_enabled: p.ci_forward_deployment_enabled,
            created_at: p.created_at,
        })
    }

    /// Create a project that mirrors `repo` (a local path or a URL git can fetch). The
    /// default branch is read with `git ls-remote --symref REPO HEAD`.
    pub async fn create_project(
        &self,
        name: &str,
        repo: &str,
    ) -> std::result::Result<Project, CoordinatorError> {
        self.create_project_with(&ProjectRequest {
            name: name.to_owned(),
            repo: repo.to_owned(),
            ..ProjectRequest::default()
        })
        .await
    }

    /// Create a project with settings beyond its name and repository.
    pub async fn create_project_with(
        &self,
        request: &ProjectRequest,
    ) -> std::result::Result<Project, CoordinatorError> {
        let (name, repo) = (request.name.as_str(), request.repo.as_str());
        if !valid_project_name(name) {
            return Err(CoordinatorError::Invalid(format!(
                "create project `{name}`: a name is 1-255 characters of letters, digits, `.`, `_`, `-`, in `/`-separated parts (not ending in `.git`)"
            )));
        }
        let ci_config_path = config_path(request.ci_config_path.as_deref())
            .map_err(|e| CoordinatorError::Invalid(format!("create project `{name}`: {e}")))?;
        let repo_url = if is_local_path(repo) {
            let abs = std::fs::canonicalize(repo).map_err(|e| {
                CoordinatorError::Invalid(format!(
                    "create project `{name}`: the repository {repo} cannot be read: {e}"
                ))
            })?;
            abs.to_string_lossy().into_owned()
        } else {
            repo.to_owned()
        };
        let unreadable = |e: CoordinatorError| {
            CoordinatorError::Invalid(format!(
                "create project `{name}`: {repo} is not a git repository git can read ({e})"
            ))
        };
        let default_branch = match &request.default_branch {
            DefaultBranch::Declared(branch) => branch.clone(),
            DefaultBranch::Head => super::git::default_branch(&repo_url)
                .await
                .map_err(unreadable)?,
            DefaultBranch::Branch(branch) => {
                let refs = super::git::list_refs(&repo_url).await.map_err(unreadable)?;
                let branches: Vec<&str> = refs
                    .iter()
                    .filter_map(|(r, _)| r.strip_prefix("refs/heads/"))
                    .collect();
                if !branches.is_empty() && !branches.contains(&branch.as_str()) {
                    return Err(CoordinatorError::Invalid(format!(
                        "create project `{name}`: the default branch `{branch}` is no branch of {repo}"
                    )));
                }
                branch.clone()
            }
        };
        let p = self
            .inner
            .store
            .create_project(
                &NewProject {
                    name: name.to_owned(),
                    repo_url,
                    // GitLab's default branch protection: the default branch starts protected.
                    protected_branches: vec![default_branch.clone()],
                    default_branch,
                    timeout_secs: DEFAULT_PROJECT_TIMEOUT,
                    ci_config_path,
                },
                now_ms(),
            )
            .await?;
        // Pushes from now on create pipelines. Should the repository not answer now,
        // the first look records what it holds then.
        if let Err(e) = self.record_first_refs(&p).await {
            eprintln!("gantry: project {name}: could not record its branches and tags yet: {e}");
        }
        self.project_view(&p).await
    }

    /// Change a project's settings (GitLab's `PUT /projects/:id`): the default branch (a
    /// branch of its repository), the CI configuration path (empty: `.gitlab-ci.yml`), the
    /// default job timeout (10 minutes to under a month, as GitLab allows), whether new
    /// pipelines keep their latest artifacts, the git strategy and depth, auto-cancel,
    /// separated caches and forward deployments. What is not given stays; nothing changes
    /// when one setting is refused.
    pub async fn update_project(
        &self,
        id: i64,
        settings: &ProjectSettings,
    ) -> std::result::Result<Project, CoordinatorError> {
        let project = self.inner.store.project(id).await?;
        let name = &project.name;
        let invalid =
            |e: String| CoordinatorError::Invalid(format!("update project `{name}`: {e}"));
        let ci_config_path = match settings.ci_config_path.as_deref() {
            Some(path) => Some(config_path(Some(path)).map_err(invalid)?),
            None => None,
        };
        if let Some(secs) = settings.build_timeout
            && !(MIN_BUILD_TIMEOUT..MAX_BUILD_TIMEOUT).contains(&secs)
        {
            return Err(invalid(format!(
                "build_timeout needs to be between 10 minutes and 1 month ({MIN_BUILD_TIMEOUT} to {} seconds), not {secs}",
                MAX_BUILD_TIMEOUT - 1
            )));
        }
        if let Some(strategy) = &settings.build_git_strategy
            && !matches!(strategy.as_str(), "fetch" | "clone")
        {
            return Err(invalid(format!(
                "build_git_strategy does not have a valid value: give fetch or clone, not `{strategy}`"
            )));
        }
        if let Some(Some(depth)) = settings.ci_default_git_depth
            && !(0..=MAX_GIT_DEPTH).contains(&depth)
        {
            return Err(invalid(format!(
                "ci_default_git_depth must be between 0 and {MAX_GIT_DEPTH}, not {depth}"
            )));
        }
        if let Some(branch) = &settings.default_branch {
            let mirror = self.sources().sync_mirror(&project).await?;
            let found = match branch.as_str() {
                "" => None,
                b => mirror.resolve(&format!("refs/heads/{b}")).await?,
            };
            if found.is_none() {
                return Err(invalid(format!(
                    "the default branch `{branch}` is no branch of {}",
                    project.repo_url
                )));
            }
        }
        let p = self
            .inner
            .store
            .update_project(
                id,
                &gantry_store::ProjectChanges {
                    default_branch: settings.default_branch.clone(),
                    ci_config_path,
                    timeout_secs: settings.build_timeout,
                    keep_latest_artifact: settings.keep_latest_artifact,
                    build_git_strategy: settings.build_git_strategy.clone(),
                    ci_default_git_depth: settings.ci_default_git_depth,
                    auto_cancel_pending_pipelines: settings.auto_cancel_pending_pipelines,
                    ci_separated_caches: settings.ci_separated_caches,
                    ci_forward_deployment_enabled: settings.ci_forward_deployment_enabled,
                    ci_inbound_job_token_scope_enabled: None,
                },
            )
            .await?;
        self.facts().forget_project(id);
        self.project_view(&p).await
    }

    pub async fn project(&self, id: i64) -> std::result::Result<Project, CoordinatorError> {
        self.project_view(&self.inner.store.project(id).await?)
            .await
    }

    pub async fn project_by_name(
        &self,
        name: &str,
    ) -> std::result::Result<Project, CoordinatorError> {
        self.project_view(&self.inner.store.project_by_name(name).await?)
            .await
    }

    pub async fn projects(&self) -> std::result::Result<Vec<Project>, CoordinatorError> {
        let rows = self.inner.store.projects().await?;
        let mut out = Vec::with_capacity(rows.len());
        for p in &rows {
            out.push(self.project_view(p).await?);
        }
        Ok(out)
    }

    pub(crate) async fn pipeline_view(&self, p: &gantry_store::Pipeline) -> Result<PipelineView> {
        // Cached: a page of a project's pipelines reads its project once.
        let project = self.facts().project(p.project_id).await?;
        // `workflow:name`, as every job's spec carries it: one job's spec is read, not
        // the whole pipeline's (a page of pipelines builds a view of each).
        let name = self
            .inner
            .store
            .first_job_spec(p.id)
            .await?
            .and_then(|spec| StoredSpec::parse(&spec).ok())
            .and_then(|s| s.pipeline_name);
        let yaml_errors = p
            .yaml_errors
            .as_deref()
            .map(|e| serde_json::from_str::<Vec<String>>(e).unwrap_or_else(|_| vec![e.to_owned()]))
            .unwrap_or_default();
        let duration = p
            .started_at
            .map(|s| (p.finished_at.unwrap_or_else(now_ms) - s).max(0) / 1000);
        Ok(PipelineView {
            id: p.id,
            iid: p.iid,
            project_id: p.project_id,
            name,
            status: p.status,
            source: p.source.clone(),
            ref_name: p.ref_name.clone(),
            sha: p.sha.clone(),
            before_sha: p.before_sha.clone(),
            tag: p.tag,
            yaml_errors,
            failure_reason: p.failure_reason.clone(),
            variables: self.settings().pipeline_variables(p)?.values,
            protected: p.protected,
            created_at: p.created_at,
            updated_at: p.updated_at,
            started_at: p.started_at,
            finished_at: p.finished_at,
            duration,
            web_url: format!(
                "{}/{}/-/pipelines/{}",
                self.external_url(),
                full_path(&project.name),
                p.id
            ),
            parent_job_id: p.parent_job_id,
        })
    }

    pub async fn pipeline(&self, id: i64) -> std::result::Result<PipelineView, CoordinatorError> {
        let p = self.inner.store.pipeline(id).await?;
        self.pipeline_view(&p).await
    }

    /// A project's pipelines, newest first.
    pub async fn pipelines(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<PipelineView>, CoordinatorError> {
        self.inner.store.project(project_id).await?;
        let mut out = Vec::new();
        for p in self.inner.store.pipelines(project_id).await? {
            out.push(self.pipeline_view(&p).await?);
        }
        Ok(out)
    }

    /// One page of a project's pipelines (newest first, `ref_name`/`status` when
    /// given) and how many match: the query pages, so a project's history is never
    /// read whole.
    pub async fn pipelines_page(
        &self,
        project_id: i64,
        filter: &gantry_store::PipelineFilter,
        offset: i64,
        limit: i64,
    ) -> std::result::Result<(Vec<PipelineView>, i64), CoordinatorError> {
        self.inner.store.project(project_id).await?;
        let (rows, total) = self
            .inner
            .store
            .pipelines_page(project_id, filter, offset, limit)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for p in &rows {
            out.push(self.pipeline_view(p).await?);
        }
        Ok((out, total))
    }

    /// One page of a project's jobs (see [`gantry_store::Store::jobs_page`]) as views.
    pub async fn project_jobs_page(
        &self,
        project_id: i64,
        statuses: &[String],
        offset: i64,
        limit: i64,
    ) -> std::result::Result<(Vec<JobView>, i64), CoordinatorError> {
        self.inner.store.project(project_id).await?;
        let order = JobsOrder::NewestFirst;
        self.jobs_page(JobsOf::Project(project_id), statuses, order, offset, limit)
            .await
    }

    /// One page of the jobs runner `runner_id` took (GitLab's `GET /runners/:id/jobs`),
    /// in `order`, of every project.
    pub async fn runner_jobs_page(
        &self,
        runner_id: i64,
        statuses: &[String],
        order: JobsOrder,
        offset: i64,
        limit: i64,
    ) -> std::result::Result<(Vec<JobView>, i64), CoordinatorError> {
        self.inner.store.runner(runner_id).await?;
        self.jobs_page(JobsOf::Runner(runner_id), statuses, order, offset, limit)
            .await
    }

    async fn jobs_page(
        &self,
        of: JobsOf,
        statuses: &[String],
        order: JobsOrder,
        offset: i64,
        limit: i64,
    ) -> std::result::Result<(Vec<JobView>, i64), CoordinatorError> {
        let store = &self.inner.store;
        let (rows, total) = store.jobs_page(of, statuses, order, offset, limit).await?;
        let pool = self.pool_for(&rows).await?;
        let mut pipelines: HashMap<i64, gantry_store::Pipeline> = HashMap::new();
        let mut projects: HashMap<i64, gantry_store::Project> = HashMap::new();
        let mut out = Vec::with_capacity(rows.len());
        for j in &rows {
            let p = match pipelines.entry(j.pipeline_id) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(store.pipeline(j.pipeline_id).await?)
                }
            };
            let project = match projects.entry(j.project_id) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(store.project(j.project_id).await?)
                }
            };
            let artifacts = store.artifacts(j.id).await?;
            let mut view = self.job_view(j, p, project, &artifacts, pool.as_ref());
            view.resources = store
                .job_resources(j.id)
                .await?
                .as_ref()
                .map(ResourcesView::from_row);
            out.push(view);
        }
        Ok((out, total))
    }

    /// The runners, when one of `rows` waits: what its [`JobView::pending_reason`] is
    /// computed from.
    async fn pool_for(&self, rows: &[gantry_store::Job]) -> Result<Option<RunnerPool>> {
        if rows.iter().any(|j| super::pending::waits(j.status)) {
            Ok(Some(self.runner_pool().await?))
        } else {
            Ok(None)
        }
    }

    /// A job's view; `artifacts` are the job's artifact rows (in creation order), `pool`
    /// the runners when the job waits (see [`Coordinator::pool_for`]).
    pub(crate) fn job_view(
        &self,
        j: &gantry_store::Job,
        p: &gantry_store::Pipeline,
        project: &gantry_store::Project,
        artifacts: &[gantry_store::Artifact],
        pool: Option<&RunnerPool>,
    ) -> JobView {
        let now = now_ms();
        let spec = StoredSpec::parse(&j.spec).ok();
        let bridge = spec.as_ref().is_some_and(StoredSpec::is_bridge);
        let when = spec.as_ref().map_or("on_success", |s| s.job.when.as_str());
        let artifacts: Vec<Artifact> = artifacts.iter().map(Artifact::from_row).collect();
        let archive = artifacts
            .iter()
            .find(|a| a.file_type == "archive" && !a.expired(now));
        let secs = |from: i64, to: i64| (to - from).max(0) as f64 / 1000.0;
        JobView {
            id: j.id,
            name: j.name.clone(),
            stage: j.stage.clone(),
            status: j.status,
            ref_name: p.ref_name.clone(),
            tag: p.tag,
            allow_failure: j.allow_failure,
            when: when.to_owned(),
            attempt: j.attempt,
            retried: j.retried,
            failure_reason: j.failure_reason.clone(),
            pending_reason: pool.and_then(|pool| pool.reason(j, &project.name, spec.as_ref())),
            exit_code: j.exit_code,
            tag_list: j.tags.clone(),
            pipeline_id: j.pipeline_id,
            project_id: j.project_id,
            pipeline: JobPipeline {
                id: p.id,
                project_id: p.project_id,
                ref_name: p.ref_name.clone(),
                sha: p.sha.clone(),
                status: p.status,
            },
            runner_id: j.runner_id,
            created_at: j.created_at,
            queued_at: j.queued_at,
            scheduled_at: j.scheduled_at,
            started_at: j.started_at,
            finished_at: j.finished_at,
            duration: j.started_at.map(|s| secs(s, j.finished_at.unwrap_or(now))),
            queued_duration: j.queued_at.map(|q| secs(q, j.started_at.unwrap_or(now))),
            timeout: j.timeout_secs,
            artifacts_file: archive.map(|a| ArtifactsFile {
                filename: a.filename.clone(),
                size: a.size,
            }),
            artifacts_expire_at: archive.and_then(|a| a.expire_at),
            artifacts,
            coverage: j.coverage,
            erased_at: j.erased_at,
            environment: spec.and_then(|s| s.environment),
            web_url: format!(
                "{}/{}/-/jobs/{}",
                self.external_url(),
                full_path(&project.name),
                j.id
            ),
            downstream_pipeline: None,
            bridge,
            resources: None,
        }
    }

    pub(crate) async fn job_view_by_id(&self, id: i64) -> Result<JobView> {
        let j = self.inner.store.job(id).await?;
        let p = self.inner.store.pipeline(j.pipeline_id).await?;
        let project = self.inner.store.project(p.project_id).await?;
        let artifacts = self.inner.store.artifacts(j.id).await?;
        let pool = self.pool_for(std::slice::from_ref(&j)).await?;
        let mut view = self.job_view(&j, &p, &project, &artifacts, pool.as_ref());
        view.resources = self
            .inner
            .store
            .job_resources(j.id)
            .await?
            .as_ref()
            .map(ResourcesView::from_row);
        if view.bridge {
            view.downstream_pipeline = self
                .inner
                .store
                .pipeline_by_parent_job(j.id)
                .await?
                .as_ref()
                .map(job_pipeline);
        }
        Ok(view)
    }

    /// The pipelines the trigger jobs of `pipeline_id` created (every attempt's), oldest
    /// first.
    pub async fn downstream_pipelines(
        &self,
        pipeline_id: i64,
    ) -> std::result::Result<Vec<PipelineView>, CoordinatorError> {
        let mut out = Vec::new();
        for p in self.inner.store.downstream_pipelines(pipeline_id).await? {
            out.push(self.pipeline_view(&p).await?);
        }
        Ok(out)
    }

    /// `(trigger job id, pipeline id, status)` of the pipelines the trigger jobs of
    /// `pipeline_id` created, in one light query: for views that follow a running
    /// pipeline and its children.
    pub async fn downstream_progress(
        &self,
        pipeline_id: i64,
    ) -> std::result::Result<Vec<(i64, i64, Status)>, CoordinatorError> {
        Ok(self
            .inner
            .store
            .downstream_pipelines(pipeline_id)
            .await?
            .into_iter()
            .filter_map(|p| Some((p.parent_job_id?, p.id, p.status)))
            .collect())
    }

    /// Every job row of the pipeline, retried attempts included (`retried: true`), in
    /// creation order.
    pub async fn pipeline_jobs(
        &self,
        pipeline_id: i64,
    ) -> std::result::Result<Vec<JobView>, CoordinatorError> {
        let p = self.inner.store.pipeline(pipeline_id).await?;
        let project = self.inner.store.project(p.project_id).await?;
        let mut out = Vec::new();
        // All the pipeline's artifacts in one query, by job in creation order.
        let artifacts = self.inner.store.pipeline_artifacts(pipeline_id).await?;
        let downstream = self.inner.store.downstream_pipelines(pipeline_id).await?;
        let rows = self.inner.store.pipeline_jobs(pipeline_id).await?;
        let pool = self.pool_for(&rows).await?;
        let resources = self.inner.store.pipeline_job_resources(pipeline_id).await?;
        for j in rows {
            let start = artifacts.partition_point(|a| a.job_id < j.id);
            let end = artifacts.partition_point(|a| a.job_id <= j.id);
            let mut view = self.job_view(&j, &p, &project, &artifacts[start..end], pool.as_ref());
            view.downstream_pipeline = downstream
                .iter()
                .find(|d| d.parent_job_id == Some(j.id))
                .map(job_pipeline);
            view.resources = resources.get(&j.id).map(ResourcesView::from_row);
            out.push(view);
        }
        Ok(out)
    }

    /// The `needs:` of each job of a pipeline (job id → the names it needs, `None`
    /// without `needs:`), for the web UI's graph. One query; O(jobs) spec parses.
    pub async fn pipeline_needs(
        &self,
        pipeline_id: i64,
    ) -> std::result::Result<Vec<(i64, Option<Vec<String>>)>, CoordinatorError> {
        let rows = self.inner.store.pipeline_jobs(pipeline_id).await?;
        rows.iter()
            .map(|j| {
                let spec = StoredSpec::parse(&j.spec)?;
                let needs = spec
                    .job
                    .needs
                    .map(|needs| needs.into_iter().map(|n| n.job).collect());
                Ok((j.id, needs))
            })
            .collect()
    }

    /// A pipeline's status alone (one row): what a watcher that knows the jobs asks while
    /// the pipeline runs.
    pub async fn pipeline_status(
        &self,
        pipeline_id: i64,
    ) -> std::result::Result<Status, CoordinatorError> {
        Ok(self.inner.store.pipeline(pipeline_id).await?.status)
    }

    /// A pipeline's status and its jobs' states, in two light queries (no job
    /// specifications, no artifacts): for views that follow a running pipeline. The
    /// status is read first: it is stored with the job changes that made it, so the jobs
    /// read after it are at least as new.
    pub async fn pipeline_progress(
        &self,
        pipeline_id: i64,
    ) -> std::result::Result<(Status, Vec<JobProgress>), CoordinatorError> {
        let status = self.inner.store.pipeline(pipeline_id).await?.status;
        let now = now_ms();
        let rows = self
            .inner
            .store
            .pipeline_jobs_without_spec(pipeline_id)
            .await?;
        // Whether each is a trigger job, from the specs this process decided with (read
        // when one is not cached).
        let cached = |rows: &[gantry_store::Job]| -> Option<Vec<bool>> {
            rows.iter()
                .map(|r| self.processing().spec(r.id).map(|s| s.is_bridge()))
                .collect()
        };
        let bridges = match cached(&rows) {
            Some(b) => b,
            None => self
                .rows_with_specs(pipeline_id)
                .await?
                .1
                .iter()
                .map(|s| s.is_bridge())
                .chain(std::iter::repeat(false))
                .take(rows.len())
                .collect(),
        };
        let jobs = rows
            .into_iter()
            .zip(bridges)
            .map(|(j, bridge)| {
                let status = j.status;
                Ok(JobProgress {
                    id: j.id,
                    duration: j
                        .started_at
                        .map(|s| (j.finished_at.unwrap_or(now) - s).max(0) as f64 / 1000.0),
                    name: j.name,
                    stage: j.stage,
                    status,
                    retried: j.retried,
                    bridge,
                })
            })
            .collect::<std::result::Result<_, CoordinatorError>>()?;
        Ok((status, jobs))
    }

    pub async fn job(&self, id: i64) -> std::result::Result<JobView, CoordinatorError> {
        self.job_view_by_id(id).await
    }

    /// Cancel every cancelable job of the pipeline (running jobs on runners that cancel
    /// gracefully go `canceling`). A finished pipeline is returned unchanged, as GitLab does.
    pub async fn cancel_pipeline(
        &self,
        id: i64,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let now = now_ms();
        self.mutate(id, now, |state, _, _| {
            match apply(
                state,
                &Event::CancelPipeline {
                    scope: CancelScope::All,
                    cause: CancelCause::User,
                },
                to_ts(now),
            ) {
                Ok(_) | Err(Rejected::NothingToCancel) => Ok(()),
                Err(e) => Err(CoordinatorError::Conflict(e.to_string())),
            }
        })
        .await?;
        // Its downstream pipelines are canceled too (§5.11).
        for child in self.inner.store.downstream_pipelines(id).await? {
            if !child.status.is_completed() {
                Box::pin(self.cancel_pipeline(child.id)).await?;
            }
        }
        self.pipeline(id).await
    }

    /// Deletes a pipeline (GitLab's `DELETE /projects/:id/pipelines/:pipeline_id`): an
    /// active one is canceled first (its downstream pipelines too); then its row, jobs,
    /// artifact rows and log chunks go in one transaction, and after it their artifact
    /// blobs, archived logs and log files. Pipelines it triggered stay. A blob that
    /// cannot be deleted is reported in the server's log and left over.
    pub async fn delete_pipeline(&self, id: i64) -> std::result::Result<(), CoordinatorError> {
        let pipeline = self.inner.store.pipeline(id).await?;
        if !pipeline.status.is_completed() {
            self.cancel_pipeline(id).await?;
        }
        let deleted = self.inner.store.delete_pipeline(id).await?;
        self.remove_files_of(deleted).await
    }

    /// Deletes a project (GitLab's `DELETE /projects/:id`): its active pipelines are
    /// canceled first, then its rows go in one transaction (`Store::delete_project`), and
    /// after it their artifact blobs, archived logs, log files and the project's mirror.
    /// Pipelines of other projects that it triggered stay.
    pub async fn delete_project(&self, id: i64) -> std::result::Result<(), CoordinatorError> {
        self.inner.store.project(id).await?;
        for p in self.inner.store.active_pipelines_of(id).await? {
            self.cancel_pipeline(p.id).await?;
        }
        let pages = self.inner.store.pages_blob_keys(id).await?;
        let deleted = self.inner.store.delete_project(id).await;
        // Its project runners went with it.
        self.inner.runner_cache.forget_all();
        let deleted = deleted?;
        self.settings().forget_kept();
        for (key, why) in self.artifacts().blob_delete(pages).await? {
            eprintln!("gantry: the pages site {key} of deleted project {id} is left over: {why}");
        }
        self.facts().forget_project(id);
        let mirror = self.sources().mirror(id).path;
        if let Err(e) = tokio::fs::remove_dir_all(&mirror).await {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!(
                    "gantry: the mirror {} of deleted project {id} is left over: {e}",
                    mirror.display()
                );
            }
        }
        self.remove_files_of(deleted).await
    }

    /// After deleted rows: their artifact blobs, archived logs and log files. A file that
    /// cannot be deleted is reported in the server's log and left over.
    pub(super) async fn remove_files_of(
        &self,
        deleted: gantry_store::DeletedPipeline,
    ) -> Result<()> {
        let left_over = self
            .artifacts()
            .delete_blobs_of(deleted.artifacts, &deleted.jobs)
            .await?;
        super::RemovedArtifacts {
            artifacts: 0,
            left_over,
        }
        .report_left_over();
        for job in &deleted.jobs {
            if let Err(e) = self.traces().remove(*job) {
                eprintln!("gantry: the log file of deleted job {job} is left over: {e}");
            }
        }
        Ok(())
    }

    /// Retry every failed or canceled job (skipped ones are re-evaluated). Nothing to
    /// retry returns the pipeline unchanged.
    pub async fn retry_pipeline(
        &self,
        id: i64,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let now = now_ms();
        self.mutate(id, now, |state, _, _| {
            match apply(state, &Event::RetryPipeline, to_ts(now)) {
                Ok(_) | Err(Rejected::NothingToRetry) => Ok(()),
                Err(e) => Err(CoordinatorError::Conflict(e.to_string())),
            }
        })
        .await?;
        self.pipeline(id).await
    }

    /// Cancel one job; a `canceling` job is force-canceled. A job that cannot be canceled
    /// is returned unchanged, as GitLab does.
    pub async fn cancel_job(&self, id: i64) -> std::result::Result<JobView, CoordinatorError> {
        let j = self.inner.store.job(id).await?;
        let now = now_ms();
        self.mutate(j.pipeline_id, now, |state, loaded, _| {
            let Some(job) = loaded.job_id(id) else {
                return Ok(());
            };
            let event = match state.job(job).map(|j| j.status) {
                Some(Status::Canceling) => Event::ForceCancelJob { job },
                _ => Event::CancelJob { job },
            };
            let _ = apply(state, &event, to_ts(now));
            Ok(())
        })
        .await?;
        self.job_view_by_id(id).await
    }

    /// The current attempt called `name` in a pipeline.
    async fn latest_attempt(&self, pipeline_id: i64, name: &str) -> Result<JobView> {
        let rows = self.inner.store.pipeline_jobs(pipeline_id).await?;
        let latest = rows
            .iter()
            .filter(|r| r.name == name)
            .max_by_key(|r| (r.attempt, r.id))
            .ok_or(CoordinatorError::NotFound("job"))?;
        self.job_view_by_id(latest.id).await
    }

    /// Retry a finished job: a new attempt (returned) and re-evaluated dependents.
    /// `Forbidden` when the job is not retryable (GitLab's 403).
    pub async fn retry_job(&self, id: i64) -> std::result::Result<JobView, CoordinatorError> {
        self.retry_job_with(id, None).await
    }

    /// [`Coordinator::retry_job`] with job input values (`job_inputs`): they replace the
    /// previous attempt's (`None` keeps them). `Invalid` with GitLab's message when a
    /// value does not fit its input.
    pub async fn retry_job_with(
        &self,
        id: i64,
        inputs: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> std::result::Result<JobView, CoordinatorError> {
        let j = self.inner.store.job(id).await?;
        let now = now_ms();
        self.mutate(j.pipeline_id, now, |state, loaded, extras| {
            let job = loaded.job_id(id).ok_or(CoordinatorError::NotFound("job"))?;
            let values = input_values(loaded, id, inputs.as_ref())?;
            apply(state, &Event::RetryJob { job }, to_ts(now))
                .map_err(|e| CoordinatorError::Forbidden(e.to_string()))?;
            extras.input_values = values.map(|v| (j.name.clone(), v));
            Ok(())
        })
        .await?;
        self.latest_attempt(j.pipeline_id, &j.name).await
    }

    /// Play a manual job (or start a delayed one now) with job variables (highest
    /// precedence); a finished manual job is played as a new attempt. Returns the job that
    /// runs. `Invalid` when the job cannot be played (GitLab's 400 "Unplayable Job").
    pub async fn play_job(
        &self,
        id: i64,
        variables: Vec<(String, String)>,
    ) -> std::result::Result<JobView, CoordinatorError> {
        self.play_job_with(id, variables, None).await
    }

    /// [`Coordinator::play_job`] with job input values (`job_inputs`; see
    /// [`Coordinator::retry_job_with`]).
    pub async fn play_job_with(
        &self,
        id: i64,
        variables: Vec<(String, String)>,
        inputs: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> std::result::Result<JobView, CoordinatorError> {
        let j = self.inner.store.job(id).await?;
        let now = now_ms();
        let sealed = (!variables.is_empty()).then(|| {
            self.settings()
                .seal_variables(super::state::variables_json(&variables))
        });
        self.mutate(j.pipeline_id, now, |state, loaded, extras| {
            let job = loaded.job_id(id).ok_or(CoordinatorError::NotFound("job"))?;
            let values = input_values(loaded, id, inputs.as_ref())?;
            apply(state, &Event::PlayJob { job }, to_ts(now))
                .map_err(|e| CoordinatorError::Invalid(e.to_string()))?;
            if let Some(sealed) = &sealed {
                extras.manual_variables = Some((j.name.clone(), sealed.clone()));
            }
            extras.input_values = values.map(|v| (j.name.clone(), v));
            Ok(())
        })
        .await?;
        self.latest_attempt(j.pipeline_id, &j.name).await
    }
}

/// The input values to store for job row `id` of `loaded` given `inputs` (`None`:
/// none given, keep what is stored).
fn input_values(
    loaded: &super::state::Loaded,
    id: i64,
    inputs: Option<&serde_json::Map<String, serde_json::Value>>,
) -> std::result::Result<Option<serde_json::Map<String, serde_json::Value>>, CoordinatorError> {
    let Some(given) = inputs else {
        return Ok(None);
    };
    let spec = loaded
        .row_index(id)
        .and_then(|i| loaded.specs.get(i))
        .ok_or(CoordinatorError::NotFound("job"))?;
    let declared = spec.job.inputs.as_deref().unwrap_or_default();
    super::job_inputs::overrides(declared, given)
        .map(Some)
        .map_err(CoordinatorError::InvalidInputs)
}

/// A pipeline as embedded in a job's JSON.
fn job_pipeline(p: &gantry_store::Pipeline) -> JobPipeline {
    JobPipeline {
        id: p.id,
        project_id: p.project_id,
        ref_name: p.ref_name.clone(),
        sha: p.sha.clone(),
        status: p.status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `under_group` answers as the full path would: a prefix of whole segments, the
    /// default namespace for a name without one.
    #[test]
    fn a_project_is_under_a_group_by_whole_segments_of_its_full_path() {
        let names = [
            "widget",
            "acme/widget",
            "acme/tools/widget",
            "acmeco/widget",
            "a/b",
        ];
        let groups = [
            "gantry",
            "acme",
            "acme/tools",
            "acme/tool",
            "a",
            "a/b",
            "acme/widget",
        ];
        for name in names {
            for group in groups {
                let full = full_path(name);
                let expected = full
                    .strip_prefix(group)
                    .is_some_and(|rest| rest.starts_with('/'));
                assert_eq!(under_group(name, group), expected, "{name} under {group}");
            }
        }
        assert!(under_group("widget", "gantry"));
        assert!(under_group("acme/tools/widget", "acme"));
        assert!(!under_group("acmeco/widget", "acme"));
        assert!(!under_group("acme/widget", "acme/widget"));
    }
}
