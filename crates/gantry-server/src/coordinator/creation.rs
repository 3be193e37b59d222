//! Pipeline creation: a ref (or a trigger job, a merge request, a schedule, a push) in,
//! a stored pipeline out, processed once. The steps, each its own place:
//!
//! 1. **read** — the commit and the mirror (`Sources`), whether the ref is protected
//!    (`Settings`), the pipeline's predefined facts (`Facts`: project, group, merge
//!    request, upstream, schedule), the instance, group and project variables its
//!    `rules:` see ([`Coordinator::compile_scope`], shared with the CI lint);
//! 2. **compile** — `gantry_pipeline::compile` on a blocking thread, with the commit's
//!    files (`ChildFiles`: a child pipeline's root and `include:artifact` files too) and
//!    the include sources; a job selection (`gantry run JOB...`) narrows the result;
//! 3. **plan** — `creation/plan.rs`, pure: the deployments limit, each job's row and
//!    spec (environments, Pages prefixes, resource groups expanded; a job whose
//!    environment cannot be created made `failed`), snapshot-tested without a database;
//! 4. **store and wire** — the rows in one transaction (`Store::create_pipeline`: the
//!    pipeline, its jobs, environments, resource groups, its push or schedule move, its
//!    merge request link), the pipeline's persistent ref, the refused jobs' log notes,
//!    auto-cancel of the ref's older pipelines, then the first processing pass
//!    (`Processing`, through `Coordinator::mutate`). The iid is taken before compiling
//!    (rules see `CI_PIPELINE_IID`, GitLab's `ensure_project_iid!`) and given back when no
//!    pipeline is stored.
//!
//! A configuration error is stored as a `failed` pipeline with its errors, a `[skip ci]`
//! push as a `skipped` one (both without jobs); `workflow:rules` filtering it out, no
//! job, a missing configuration file or an unknown selected job store nothing
//! (`Invalid`, `UnknownJob`). Cost: O(jobs) for the plan and the rows, plus git reads of
//! `cache:key:files` and the compile's includes; auto-cancel reads the ref's cancelable
//! pipelines by index.

use std::collections::HashMap;

use gantry_pipeline::{
    ArtifactError, Context, Loader as _, Options, PipelineInfo, PipelineInputs, Source,
};
use gantry_store::{NewPipeline, PipelineChange};

use crate::processor::{CancelCause, Event, PipelineFacts, Status, apply, on_new_commit};

use super::error::{CoordinatorError, Result};
use super::git::{CommitInfo, CommitLoader, Mirror, ResolvedRef};
use super::includes::{IncludeLoader, IncludeSources};
use super::merge_requests::MergeRequestFacts;
use super::state::pipeline_variables_json;
use super::time::{now_ms, to_ts};
use super::views::PipelineView;
use super::{Coordinator, token};

pub(crate) mod plan;

pub use plan::MAX_DEPLOYMENTS_PER_PIPELINE;

/// What compiling a configuration gave.
enum Compiled {
    /// No `.gitlab-ci.yml` at the commit (GitLab does not persist such a pipeline).
    Missing(String),
    Errors(Vec<String>),
    /// `workflow:rules` filtered it, or no job remained (not persisted either).
    NotCreated(String),
    /// A job selection named a job the pipeline does not have.
    Selection(gantry_pipeline::SelectError),
    /// A push of a commit whose message asks to skip CI (`[skip ci]`): persisted as a
    /// `skipped` pipeline without jobs, as GitLab's `Chain::Skip` does.
    Skipped,
    Pipeline(gantry_pipeline::Pipeline),
}

/// A pipeline to create.
#[derive(Clone, Debug)]
pub struct PipelineRequest {
    /// A branch or tag of the project.
    pub ref_name: String,
    /// Pipeline variables (highest precedence).
    pub variables: Vec<(String, String)>,
    /// The keys of `variables` that are file variables (API `variable_type: file`): the
    /// runner writes the value to a file and the variable holds its path.
    pub file_variables: Vec<String>,
    /// The keys of `variables` whose values are never expanded (GitLab's `raw`: the
    /// trigger API's `TRIGGER_PAYLOAD`).
    pub raw_variables: Vec<String>,
    /// `CI_PIPELINE_SOURCE`.
    pub source: Source,
    /// Only some jobs (`gantry run JOB...`); `None` = the whole pipeline.
    pub jobs: Option<JobSelection>,
    /// Values for the configuration's `spec:inputs`.
    pub inputs: PipelineInputs,
}

/// Everything a pipeline is created from, once its commit is known.
pub(crate) struct Creation {
    pub project: gantry_store::Project,
    pub mirror: Mirror,
    pub r: ResolvedRef,
    pub commit: CommitInfo,
    pub protected: bool,
    /// Pipeline variables (highest precedence).
    pub variables: Vec<(String, String)>,
    /// The keys of `variables` that are file variables.
    pub file_variables: Vec<String>,
    /// The keys of `variables` that are never expanded.
    pub raw_variables: Vec<String>,
    pub source: Source,
    pub selection: Option<JobSelection>,
    /// The trigger job of a downstream pipeline.
    pub parent_job_id: Option<i64>,
    /// Values for the root configuration's `spec:inputs`.
    pub inputs: PipelineInputs,
    /// A child pipeline's configuration (`None`: the project's configuration file).
    pub child: Option<ChildConfig>,
    /// A push pipeline's ref change (recorded with the pipeline) and changed files.
    pub push: Option<PushFacts>,
    /// The schedule a `schedule` pipeline runs for (its next run moved with the pipeline).
    pub schedule: Option<gantry_store::ScheduleRun>,
    /// When the commit was fetched for it (its `fetch commit` span), when the caller did.
    pub fetched: Option<(std::time::SystemTime, std::time::SystemTime)>,
    /// A merge request pipeline's merge request (`merge_requests.rs`), or the one a
    /// child pipeline's parent ran for.
    pub merge_request: Option<MergeRequestFacts>,
    /// `CI_TRIGGER_SHORT_TOKEN` of a trigger token pipeline (`triggers.rs`).
    pub trigger_short_token: Option<String>,
}

/// What a push pipeline is created from beyond its commit (see `pushes.rs`).
pub(crate) struct PushFacts {
    pub change: gantry_store::RefChange,
    /// The paths the push changed, for `rules:changes` (a branch that moved); `None`
    /// for a new branch or a tag: unknown, so `rules:changes` holds, as on GitLab.
    pub changed_files: Option<Vec<String>>,
}

/// GitLab's `Chain::Skip::SKIP_PATTERN`: `[ci skip]`, `[skip ci]`, `[ci-skip]`, `[skip_ci]`,
/// … in any case, anywhere in the commit message.
pub(crate) fn skips_ci(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    ["ci", "skip"].iter().any(|first| {
        let second = if *first == "ci" { "skip" } else { "ci" };
        [' ', '_', '-']
            .iter()
            .any(|sep| lower.contains(&format!("[{first}{sep}{second}]")))
    })
}

/// The configuration of a child pipeline: its trigger job's `include:` as the root file,
/// and the `include:artifact` files read from the parent pipeline beforehand.
pub(crate) struct ChildConfig {
    /// The root file's name (for messages) and text.
    pub root: (String, String),
    /// `(job, path)` → the file, or why there is none.
    pub artifacts: HashMap<(String, String), std::result::Result<String, ArtifactError>>,
}

/// See [`Coordinator::compile_scope`].
pub(crate) struct CompileScope {
    pub info: PipelineInfo,
    pub settings_vars: Vec<gantry_pipeline::context::SettingsVariable>,
    pub instance_vars: Vec<(String, String)>,
    pub includes: IncludeSources,
    /// Where the files compiling reads are logged, with their times (a traced
    /// creation's `include` spans); `None`: not logged.
    pub reads: Option<super::telemetry::ReadLog>,
    /// Predefined variables the server knows beyond [`PipelineInfo`]'s: the project's
    /// Pages site (`CI_PAGES_*`) and a trigger token pipeline's `CI_TRIGGER_SHORT_TOKEN`,
    /// visible to `rules:` and `workflow:rules` as on GitLab.
    pub server_predefined: Vec<(String, String)>,
}

impl CompileScope {
    /// Compile the configuration `files` hold, with the pipeline `variables` (highest
    /// precedence) and the paths a push changed (`None`: unknown).
    pub(crate) fn compile(
        &self,
        opts: &Options,
        variables: &[(String, String)],
        changed_files: Option<Vec<String>>,
        files: &dyn gantry_pipeline::Loader,
    ) -> gantry_pipeline::Compiled {
        let mut ctx = Context::new(&self.info, variables, changed_files)
            .with_settings_variables(&self.settings_vars)
            .with_instance_variables(&self.instance_vars);
        for (k, v) in &self.server_predefined {
            ctx.predefined.insert(k.clone(), v.clone());
        }
        let loader = IncludeLoader {
            files,
            sources: &self.includes,
        };
        match &self.reads {
            Some(log) => gantry_pipeline::compile(
                opts,
                &ctx,
                &super::telemetry::TimedLoader {
                    inner: &loader,
                    log,
                },
            ),
            None => gantry_pipeline::compile(opts, &ctx, &loader),
        }
    }
}

/// The project's files at the pipeline's commit; for a child pipeline also its root file
/// and its `include:artifact` files.
pub(crate) struct ChildFiles {
    pub commit: CommitLoader,
    pub child: Option<ChildConfig>,
}

impl gantry_pipeline::Loader for ChildFiles {
    fn read(&self, path: &str) -> std::result::Result<Option<String>, gantry_pipeline::ReadError> {
        match &self.child {
            Some(c) if c.root.0 == path => Ok(Some(c.root.1.clone())),
            _ => self.commit.read(path),
        }
    }

    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        self.commit.files()
    }

    fn changed_since(
        &self,
        compare_to: &str,
    ) -> std::result::Result<Vec<String>, gantry_pipeline::CompareError> {
        self.commit.changed_since(compare_to)
    }

    fn artifact(&self, job: &str, path: &str) -> std::result::Result<String, ArtifactError> {
        let Some(c) = &self.child else {
            return Err(ArtifactError::NotChild);
        };
        c.artifacts
            .get(&(job.to_owned(), path.to_owned()))
            .cloned()
            .unwrap_or_else(|| {
                Err(ArtifactError::Io(
                    "only the trigger job's own `include:artifact` entries are read".to_owned(),
                ))
            })
    }
}

/// Which jobs of a pipeline to keep (see [`gantry_pipeline::select`]).
#[derive(Clone, Debug, Default)]
pub struct JobSelection {
    /// Job names; a `parallel` job's name as written selects all its instances.
    pub names: Vec<String>,
    /// Also keep what the named jobs wait for, transitively.
    pub with_needs: bool,
}

impl Coordinator {
    /// Create a pipeline for `ref_name` (a branch or tag) of the project: resolve the ref
    /// in the project's mirror, read `.gitlab-ci.yml` and its local includes at that
    /// commit, compile with the predefined variables and `variables` (pipeline variables),
    /// persist, and process. A configuration error persists a `failed` pipeline carrying
    /// the errors (`config_error`), as GitLab does; a pipeline filtered out by
    /// `workflow:rules` or without jobs is not created (`Invalid`, GitLab's message).
    pub async fn create_pipeline(
        &self,
        project_id: i64,
        ref_name: &str,
        variables: Vec<(String, String)>,
        source: Source,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        self.create_pipeline_with(
            project_id,
            PipelineRequest {
                ref_name: ref_name.to_owned(),
                variables,
                file_variables: Vec::new(),
                raw_variables: Vec::new(),
                source,
                jobs: None,
                inputs: PipelineInputs::default(),
            },
        )
        .await
    }

    /// [`Coordinator::create_pipeline`] with every option: a selection of jobs keeps
    /// only those (see [`gantry_pipeline::select`]); an unknown job name is `Invalid`
    /// and nothing is persisted.
    pub async fn create_pipeline_with(
        &self,
        project_id: i64,
        request: PipelineRequest,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        self.create_pipeline_of(project_id, request, None).await
    }

    /// [`Coordinator::create_pipeline_with`], for a trigger token whose
    /// `CI_TRIGGER_SHORT_TOKEN` is `trigger_short_token`.
    pub(crate) async fn create_pipeline_of(
        &self,
        project_id: i64,
        request: PipelineRequest,
        trigger_short_token: Option<String>,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let PipelineRequest {
            ref_name,
            variables,
            file_variables,
            raw_variables,
            source,
            jobs: selection,
            inputs,
        } = request;
        let ref_name = ref_name.as_str();
        let project = self.inner.store.project(project_id).await?;
        let fetch_started = std::time::SystemTime::now();
        let mirror = self.sources().sync_mirror(&project).await?;
        let resolved = mirror.resolve(ref_name).await?;
        let fetched = Some((fetch_started, std::time::SystemTime::now()));
        let Some((r, commit)) = resolved else {
            return Err(CoordinatorError::Invalid(format!(
                "create a pipeline: Reference not found: `{ref_name}` is no branch or tag of {}",
                project.name
            )));
        };
        self.sources().remember_commit(project_id, &r, &commit);
        let protected = self.settings().ref_protected(project_id, &r).await?;
        self.create_at(Creation {
            project,
            mirror,
            r,
            commit,
            protected,
            variables,
            file_variables,
            raw_variables,
            source,
            selection,
            parent_job_id: None,
            child: None,
            inputs,
            push: None,
            schedule: None,
            fetched,
            merge_request: None,
            trigger_short_token,
        })
        .await
    }

    /// Compile the configuration at a resolved commit and persist the pipeline (see
    /// [`Coordinator::create_pipeline`]); a downstream pipeline compiles its trigger's
    /// `include:` instead of the project's configuration file.
    pub(crate) async fn create_at(
        &self,
        c: Creation,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let created = self.persist_creation(c).await;
        if created.is_ok() {
            self.inner.metrics.pipeline_created();
        }
        created
    }

    /// What compiling the project's configuration at `r` sees besides its files: the
    /// pipeline's predefined facts, and the instance, group and project variables its
    /// rules read; the repositories `include:` may read. `iid`: the pipeline's, when one
    /// is being created (a lint's dry run has none).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn compile_scope(
        &self,
        project: &gantry_store::Project,
        r: &ResolvedRef,
        commit: CommitInfo,
        protected: bool,
        source: Source,
        before_sha: Option<String>,
        iid: Option<i64>,
    ) -> std::result::Result<CompileScope, CoordinatorError> {
        let info = self.facts().predefined_info(
            project,
            r,
            commit,
            protected,
            source,
            before_sha,
            iid.and_then(|iid| u64::try_from(iid).ok()).unwrap_or(0),
        );
        let includes = self.sources().include_sources(project).await?;
        let instance_vars = super::instance_variables::for_creation(
            &self.settings().kept_instance_variables().await?,
            protected,
        );
        let settings_vars = super::variables::for_creation(
            &self
                .settings()
                .settings_variables(project.id, &project.name)
                .await?,
            protected,
        );
        Ok(CompileScope {
            info,
            settings_vars,
            instance_vars,
            includes,
            reads: None,
            server_predefined: self.facts().pages_predefined(&project.name),
        })
    }

    async fn persist_creation(
        &self,
        c: Creation,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let Creation {
            project,
            mirror,
            r,
            commit,
            protected,
            variables,
            file_variables,
            raw_variables,
            source,
            selection,
            parent_job_id,
            child,
            inputs,
            push,
            schedule,
            fetched,
            merge_request,
            trigger_short_token,
        } = c;
        let mut times = super::telemetry::CreationTimes::starting(fetched);
        let trace = self.new_trace();
        let store = &self.inner.store;
        let project_id = project.id;
        // Taken before compiling, so rules see CI_PIPELINE_IID (GitLab's
        // `ensure_project_iid!`); given back when no pipeline is created.
        let iid = store.allocate_pipeline_iid(project_id).await?;
        // A branch that moved has the commit it moved from; a new branch or a tag has none.
        let before_sha = push
            .as_ref()
            .filter(|_| !r.tag)
            .and_then(|p| p.change.from.clone());
        let skip_ci = push.is_some() && skips_ci(&commit.message);
        let changed_files = match (&push, &merge_request) {
            (Some(p), _) => p.changed_files.clone(),
            (None, Some(m)) => m.changed_files.clone(),
            (None, None) => None,
        };
        let mut scope = self
            .compile_scope(
                &project,
                &r,
                commit,
                protected,
                source,
                before_sha.clone(),
                Some(iid),
            )
            .await?;
        if let Some(short) = &trigger_short_token {
            scope
                .server_predefined
                .push(("CI_TRIGGER_SHORT_TOKEN".to_owned(), short.clone()));
        }
        self.facts()
            .complete_info(
                &mut scope.info,
                &project,
                parent_job_id,
                schedule.as_ref().map(|s| s.schedule_id),
            )
            .await;
        self.facts()
            .complete_merge_request_info(
                self.settings(),
                &mut scope.info,
                &project,
                merge_request.as_ref().map(|m| (&m.link, &m.request)),
            )
            .await;
        let predefined = scope.info.predefined();
        let loader = ChildFiles {
            commit: CommitLoader::of(&mirror, r.sha.clone())
                .comparing_in(self.inner.cfg.compare_refs()),
            child,
        };
        // Environment names are expanded with the instance variables and the group and
        // project variables of scope `*` too (as the job's rules saw them), in that order,
        // below the pipeline variables.
        let environment_vars: Vec<(String, String)> = scope
            .instance_vars
            .iter()
            .cloned()
            .chain(gantry_pipeline::context::unscoped_in_order(
                &scope.settings_vars,
            ))
            .chain(variables.iter().cloned())
            .collect();
        let vars = variables.clone();
        let config_path = match &loader.child {
            Some(c) => c.root.0.clone(),
            None => project.ci_config_path.clone(),
        };
        if trace.is_some() {
            scope.reads = Some(super::telemetry::ReadLog::default());
        }
        let reads = scope.reads.clone();
        let compile_started = std::time::SystemTime::now();
        let compiled = tokio::task::spawn_blocking(move || {
            let opts = Options {
                config_path,
                inputs,
                ..Options::default()
            };
            match loader.read(&opts.config_path) {
                Ok(Some(_)) => {}
                Ok(None) => return Compiled::Missing("Missing CI config file".to_owned()),
                Err(e) => {
                    return Compiled::Errors(vec![format!(
                        "CI config file could not be read: {e}"
                    )]);
                }
            }
            if skip_ci {
                return Compiled::Skipped;
            }
            let c = scope.compile(&opts, &vars, changed_files, &loader);
            if !c.errors.is_empty() {
                return Compiled::Errors(c.errors.iter().map(|d| d.message.clone()).collect());
            }
            let mut pipeline = c.pipeline;
            if let (Some(p), Some(selection)) = (&mut pipeline, &selection) {
                if p.created {
                    if let Err(e) =
                        gantry_pipeline::select_jobs(p, &selection.names, selection.with_needs)
                    {
                        return Compiled::Selection(e);
                    }
                }
            }
            match pipeline {
                Some(p) if p.created && !p.jobs.is_empty() => Compiled::Pipeline(p),
                Some(p) => Compiled::NotCreated(
                    p.not_created_reason
                        .unwrap_or_else(|| "No stages / jobs for this pipeline.".to_owned()),
                ),
                None => Compiled::NotCreated("No stages / jobs for this pipeline.".to_owned()),
            }
        })
        .await
        .map_err(|e| {
            CoordinatorError::Io(std::io::Error::other(format!("compile the pipeline: {e}")))
        })?;
        times.compiled = Some((compile_started, std::time::SystemTime::now()));
        times.reads = reads.map(|log| log.take()).unwrap_or_default();

        let now = now_ms();
        let mut new = NewPipeline {
            project_id,
            iid,
            ref_name: r.name.clone(),
            tag: r.tag,
            sha: r.sha.clone(),
            before_sha: before_sha.unwrap_or_else(|| "0".repeat(r.sha.len().max(40))),
            source: source.as_str().to_owned(),
            status: Status::Created,
            failure_reason: None,
            yaml_errors: None,
            variables: self.settings().seal_variables(pipeline_variables_json(
                &variables,
                &file_variables,
                &raw_variables,
            )),
            protected,
            parent_job_id,
            push: push.map(|p| p.change),
            schedule,
            trace_id: trace.map(gantry_telemetry::PipelineTrace::to_hex),
            merge_request: merge_request.map(|m| m.link),
            trigger_short_token,
        };
        let pipeline = match compiled {
            Compiled::Missing(m) => {
                store.release_pipeline_iid(project_id, iid).await?;
                return Err(CoordinatorError::Invalid(format!("create a pipeline: {m}")));
            }
            Compiled::NotCreated(m) => {
                store.release_pipeline_iid(project_id, iid).await?;
                return Err(CoordinatorError::Invalid(m));
            }
            Compiled::Selection(e) => {
                store.release_pipeline_iid(project_id, iid).await?;
                return Err(CoordinatorError::UnknownJob(e));
            }
            Compiled::Skipped => {
                new.status = Status::Skipped;
                return self.persist_ended(&new, now, &times).await;
            }
            Compiled::Errors(errors) => {
                new.status = Status::Failed;
                new.failure_reason = Some("config_error".to_owned());
                new.yaml_errors =
                    Some(serde_json::to_string(&errors).unwrap_or_else(|_| "[]".into()));
                return self.persist_ended(&new, now, &times).await;
            }
            Compiled::Pipeline(p) => p,
        };
        if let Some(refusal) = plan::deployments_refusal(&pipeline) {
            new.status = Status::Failed;
            new.failure_reason = Some("deployments_limit_exceeded".to_owned());
            new.yaml_errors =
                Some(serde_json::to_string(&[refusal]).unwrap_or_else(|_| "[]".into()));
            return self.persist_ended(&new, now, &times).await;
        }
        // `cache:key:files`: read from the commit (git) before the rows are planned.
        let mut cache_keys = Vec::with_capacity(pipeline.jobs.len());
        for job in &pipeline.jobs {
            let mut keys = Vec::with_capacity(job.caches.len());
            for c in &job.caches {
                keys.push(cache_key(&mirror, &r.sha, &c.key).await);
            }
            cache_keys.push(keys);
        }
        let plan::Planned {
            jobs,
            refused_environments,
        } = plan::jobs(&plan::Scope {
            pipeline: &pipeline,
            predefined: &predefined,
            environment_variables: &environment_vars,
            cache_keys,
            protected,
        });
        // All or nothing: a pipeline whose ref cannot be written is not created. The
        // mirror is tried first (a read-only or unwritable mirror fails before anything is
        // stored, so a push or a schedule is taken again next time); a write that fails
        // after the pipeline is stored (a full disk) removes the pipeline again.
        if self.inner.cfg.pipeline_refs() {
            if let Err(e) = mirror.check_pipeline_refs(&r.sha).await {
                store.release_pipeline_iid(project_id, iid).await?;
                return Err(e);
            }
        }
        let p = store.create_pipeline(&new, &jobs, now).await?;
        self.record_creation(&p, &times);
        if self.inner.cfg.pipeline_refs() {
            if let Err(e) = mirror.create_pipeline_ref(p.id, &r.sha).await {
                let deleted = store.delete_pipeline(p.id).await?;
                store.release_pipeline_iid(project_id, iid).await?;
                self.remove_files_of(deleted).await?;
                return Err(e);
            }
        }
        if !refused_environments.is_empty() {
            // Why, in the log (GitLab's job page says the environment is invalid).
            for row in store.pipeline_jobs_without_spec(p.id).await? {
                if let Some((_, why)) = refused_environments.iter().find(|(n, _)| *n == row.name) {
                    let note = format!("ERROR: the job could not start: {why}\n");
                    self.note_on_unstarted_job(row.id, &note).await;
                }
            }
        }
        // A child pipeline never auto-cancels (§5.11): it runs the parent's commit.
        if p.parent_job_id.is_none() {
            self.auto_cancel_redundant(&p).await?;
        }
        self.mutate(p.id, now_ms(), |_, _, _| Ok(())).await?;
        self.pipeline(p.id).await
    }

    /// Persist a pipeline without jobs that ends as it is created (`new.status`: a
    /// configuration error, a skipped push).
    async fn persist_ended(
        &self,
        new: &NewPipeline,
        now: i64,
        times: &super::telemetry::CreationTimes,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let store = &self.inner.store;
        let p = store.create_pipeline(new, &[], now).await?;
        self.record_creation(&p, times);
        let finish = PipelineChange {
            status: new.status,
            finished_at: Some(now),
            ended: true,
            ..PipelineChange::default()
        };
        store.apply(p.id, p.lock_version, &finish, now).await?;
        self.record_ended_at_creation(&p, new.status, now);
        self.observe_pipeline_end(&p, new.status, now);
        self.pipeline(p.id).await
    }

    /// `workflow:auto_cancel:on_new_commit` for older pipelines of the same ref (§5.11).
    async fn auto_cancel_redundant(&self, new: &gantry_store::Pipeline) -> Result<()> {
        // GitLab's "Auto-cancel redundant pipelines" project setting.
        if !self
            .facts()
            .project(new.project_id)
            .await?
            .auto_cancel_pending_pipelines
        {
            return Ok(());
        }
        let now = now_ms();
        // The ref's older pipelines in a cancelable status, by an index (not the project's
        // whole history); child pipelines are canceled with their parent, not on their own.
        let older = self
            .inner
            .store
            .cancelable_pipelines_of_ref(new.project_id, &new.ref_name, new.tag, new.id)
            .await?;
        for old in older {
            // The processor compares whole seconds; a lower id is older, even within one.
            let new_facts = PipelineFacts {
                created_at: to_ts(new.created_at).max(to_ts(old.created_at).plus(1)),
                sha: new.sha.clone(),
                ci_source: true,
            };
            let loaded = self.load(old.id).await?;
            let facts = PipelineFacts {
                created_at: to_ts(old.created_at),
                sha: old.sha.clone(),
                ci_source: !matches!(
                    old.source.as_str(),
                    "webide" | "ondemand_dast_scan" | "ondemand_dast_validation"
                ),
            };
            if let Some(scope) =
                on_new_commit(&loaded.state, &facts, &new_facts, &new.sha, to_ts(now))
            {
                self.mutate(old.id, now, |state, _, _| {
                    let _ = apply(
                        state,
                        &Event::CancelPipeline {
                            scope,
                            cause: CancelCause::NewCommit,
                        },
                        to_ts(now),
                    );
                    Ok(())
                })
                .await?;
            }
        }
        Ok(())
    }
}

/// GitLab's `key:files` cache key: a digest of the last commits touching the files,
/// `prefix-digest` with a prefix; `default` when none of the files exists.
async fn cache_key(mirror: &Mirror, sha: &str, key: &gantry_pipeline::CacheKey) -> String {
    let (files, prefix) = match key {
        gantry_pipeline::CacheKey::Literal(k) => {
            return if k.is_empty() {
                "default".to_owned()
            } else {
                k.clone()
            };
        }
        gantry_pipeline::CacheKey::Files { files, prefix }
        | gantry_pipeline::CacheKey::FilesCommits { files, prefix } => (files, prefix),
    };
    let mut commits = Vec::new();
    for f in files {
        if let Some(c) = mirror.last_commit_for(sha, f).await {
            commits.push(c);
        }
    }
    let digest = if commits.is_empty() {
        "default".to_owned()
    } else {
        token::sha256_hex(commits.join("_").as_bytes())[..40].to_owned()
    };
    match prefix {
        Some(p) if !p.is_empty() => format!("{p}-{digest}"),
        _ => digest,
    }
}
