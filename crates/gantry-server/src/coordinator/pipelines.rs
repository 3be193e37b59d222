//! Pipelines and jobs as users see and act on them: their views and pages (with why a
//! waiting job waits), cancel, retry, play, delete. Creation is `creation.rs`, projects
//! `projects.rs`.

use std::collections::HashMap;

use gantry_store::{JobsOf, JobsOrder};

use crate::processor::{CancelCause, CancelScope, Event, Rejected, Status, apply};

use super::Coordinator;
use super::detailed_status::pipeline_detailed_status;
use super::error::{CoordinatorError, Result};
use super::git::ResolvedRef;
use super::pending::RunnerPool;
use super::projects::full_path;
use super::spec::StoredSpec;
use super::time::{now_ms, to_ts};
use super::views::{
    Artifact, ArtifactsFile, CommitView, JobPipeline, JobProgress, JobProject, JobRunner, JobView,
    PipelineDetail, PipelineView, ResourcesView, Runner, RunnerManagerView, UserBasic,
};

/// The most rows one page of a list holds (GitLab's `per_page` bound).
const MAX_PAGE: i64 = 100;

impl Coordinator {
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
            detail: None,
        })
    }

    /// `view` with what GitLab shows of one pipeline besides a list's row
    /// ([`PipelineView::detail`]): one read of its latest jobs' coverage and warnings.
    pub async fn with_detail(
        &self,
        mut view: PipelineView,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let project = self.facts().project(view.project_id).await?;
        let summary = self.inner.store.pipeline_job_summary(view.id).await?;
        let queued_duration = view
            .started_at
            .map(|started| (started - view.created_at) / 1000)
            .filter(|seconds| *seconds != 0);
        view.detail = Some(PipelineDetail {
            user: self.user_basic(),
            committed_at: None,
            queued_duration,
            coverage: summary.coverage.map(|c| format!("{c:.2}")),
            detailed_status: pipeline_detailed_status(
                view.status,
                summary.warnings > 0,
                format!("/{}/-/pipelines/{}", full_path(&project.name), view.id),
            ),
            archived: false,
        });
        Ok(view)
    }

    /// Gantry's one user as GitLab's `UserBasic` shows a user.
    pub(crate) fn user_basic(&self) -> UserBasic {
        let user = &self.inner.cfg.user;
        UserBasic {
            id: self.admin_user_id(),
            username: user.login.clone(),
            name: user.name.clone(),
            state: "active",
            locked: false,
            avatar_url: None,
            web_url: format!("{}/{}", self.external_url(), user.login),
        }
    }

    pub async fn pipeline(&self, id: i64) -> std::result::Result<PipelineView, CoordinatorError> {
        let p = self.inner.store.pipeline(id).await?;
        self.pipeline_view(&p).await
    }

    /// A project's newest pipelines, newest first: the first page of
    /// [`Coordinator::pipelines_page`], at most 100 (GitLab's largest `per_page`).
    pub async fn pipelines(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<PipelineView>, CoordinatorError> {
        let filter = gantry_store::PipelineFilter::default();
        Ok(self
            .pipelines_page(project_id, &filter, 0, MAX_PAGE)
            .await?
            .0)
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
        let mut runners = HashMap::new();
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
            view.commit = self.commit_view(p, project).await;
            view.runner = self.job_runner(j.runner_id, &mut runners).await?;
            view.resources = store
                .job_resources(j.id)
                .await?
                .as_ref()
                .map(ResourcesView::from_row);
            out.push(view);
        }
        let managers: Vec<Option<i64>> = rows.iter().map(|j| j.runner_manager_id).collect();
        self.with_runner_managers(&mut out, &managers).await?;
        Ok((out, total))
    }

    /// Fills each view's `runner_manager` (`managers[i]` is the manager of `views[i]`'s
    /// job): one read for the page, a deleted manager none.
    async fn with_runner_managers(
        &self,
        views: &mut [JobView],
        managers: &[Option<i64>],
    ) -> Result<()> {
        let ids: std::collections::BTreeSet<i64> = managers.iter().flatten().copied().collect();
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = ids.into_iter().collect();
        let found = self.inner.store.runner_managers_by_id(&ids).await?;
        let now = now_ms();
        for (view, id) in views.iter_mut().zip(managers) {
            view.runner_manager = id
                .and_then(|id| found.get(&id))
                .map(|m| RunnerManagerView::of(m, now));
        }
        Ok(())
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
            failure_reason: j
                .failure_reason
                .clone()
                .filter(|_| j.status == Status::Failed),
            pending_reason: pool.and_then(|pool| pool.reason(j, &project.name, spec.as_ref())),
            exit_code: j.exit_code,
            tag_list: j.tags.clone(),
            pipeline_id: j.pipeline_id,
            project_id: j.project_id,
            pipeline: self.pipeline_basic(p, &project.name),
            user: self.user_basic(),
            commit: None,
            runner_id: j.runner_id,
            runner: None,
            runner_manager: None,
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
            project: JobProject::default(),
            archived: false,
            downstream_pipeline: None,
            bridge,
            resources: None,
        }
    }

    /// The runner `id` as a job's JSON shows it (`None`: no runner, or a deleted one);
    /// `seen` keeps those a page of jobs already read.
    async fn job_runner(
        &self,
        id: Option<i64>,
        seen: &mut HashMap<i64, Option<JobRunner>>,
    ) -> Result<Option<JobRunner>> {
        let Some(id) = id else { return Ok(None) };
        if let Some(known) = seen.get(&id) {
            return Ok(known.clone());
        }
        let runner = match self.inner.store.runner(id).await {
            Ok(row) => Some(JobRunner::of(&Runner::from_row(&row))),
            Err(gantry_store::StoreError::NotFound(_)) => None,
            Err(other) => return Err(other.into()),
        };
        seen.insert(id, runner.clone());
        Ok(runner)
    }

    /// A pipeline as embedded in a job's JSON; `project_name` is its project's.
    pub(crate) fn pipeline_basic(
        &self,
        p: &gantry_store::Pipeline,
        project_name: &str,
    ) -> JobPipeline {
        JobPipeline {
            id: p.id,
            iid: p.iid,
            project_id: p.project_id,
            sha: p.sha.clone(),
            ref_name: p.ref_name.clone(),
            status: p.status,
            source: p.source.clone(),
            created_at: p.created_at,
            updated_at: p.updated_at,
            web_url: format!(
                "{}/{}/-/pipelines/{}",
                self.external_url(),
                full_path(project_name),
                p.id
            ),
        }
    }

    /// A downstream pipeline as embedded in its trigger job's JSON (its project may be
    /// another).
    async fn downstream_basic(&self, p: &gantry_store::Pipeline) -> Result<JobPipeline> {
        let project = self.facts().project(p.project_id).await?;
        Ok(self.pipeline_basic(p, &project.name))
    }

    /// The commit pipeline `p` ran, as a job's JSON shows it (its facts are cached by
    /// the sources service); `None` when the repository does not have it.
    async fn commit_view(
        &self,
        p: &gantry_store::Pipeline,
        project: &gantry_store::Project,
    ) -> Option<CommitView> {
        let r = ResolvedRef {
            name: p.ref_name.clone(),
            tag: p.tag,
            sha: p.sha.clone(),
        };
        let info = self.sources().commit_facts(project.id, &r).await;
        if info.author.is_empty() && info.committer.is_empty() {
            return None;
        }
        Some(CommitView::from_info(
            &p.sha,
            &info,
            format!(
                "{}/{}/-/commit/{}",
                self.external_url(),
                full_path(&project.name),
                p.sha
            ),
        ))
    }

    pub(crate) async fn job_view_by_id(&self, id: i64) -> Result<JobView> {
        let j = self.inner.store.job(id).await?;
        let p = self.inner.store.pipeline(j.pipeline_id).await?;
        let project = self.inner.store.project(p.project_id).await?;
        let artifacts = self.inner.store.artifacts(j.id).await?;
        let pool = self.pool_for(std::slice::from_ref(&j)).await?;
        let mut view = self.job_view(&j, &p, &project, &artifacts, pool.as_ref());
        view.commit = self.commit_view(&p, &project).await;
        view.runner = self.job_runner(j.runner_id, &mut HashMap::new()).await?;
        self.with_runner_managers(std::slice::from_mut(&mut view), &[j.runner_manager_id])
            .await?;
        view.resources = self
            .inner
            .store
            .job_resources(j.id)
            .await?
            .as_ref()
            .map(ResourcesView::from_row);
        if view.bridge {
            view.downstream_pipeline = match self.inner.store.pipeline_by_parent_job(j.id).await? {
                Some(d) => Some(self.downstream_basic(&d).await?),
                None => None,
            };
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
        let commit = self.commit_view(&p, &project).await;
        let mut runners = HashMap::new();
        let managers: Vec<Option<i64>> = rows.iter().map(|j| j.runner_manager_id).collect();
        for j in rows {
            let start = artifacts.partition_point(|a| a.job_id < j.id);
            let end = artifacts.partition_point(|a| a.job_id <= j.id);
            let mut view = self.job_view(&j, &p, &project, &artifacts[start..end], pool.as_ref());
            view.commit = commit.clone();
            view.runner = self.job_runner(j.runner_id, &mut runners).await?;
            view.downstream_pipeline =
                match downstream.iter().find(|d| d.parent_job_id == Some(j.id)) {
                    Some(d) => Some(self.downstream_basic(d).await?),
                    None => None,
                };
            view.resources = resources.get(&j.id).map(ResourcesView::from_row);
            out.push(view);
        }
        self.with_runner_managers(&mut out, &managers).await?;
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
