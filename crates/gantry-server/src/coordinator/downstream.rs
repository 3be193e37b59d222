//! Trigger (bridge) jobs and the pipelines they create (`ci-yaml.md` §5.12).
//!
//! No runner runs a bridge. When processing makes one `pending`, the same decision starts
//! it (`running`, see `start_bridges` in `mod.rs`) and, once that is stored, a background
//! task creates its downstream pipeline (GitLab's `CreateDownstreamPipelineWorker`):
//!
//! * `trigger:include` — a **child pipeline** of the same project, commit and ref, source
//!   `parent_pipeline`, compiled from the trigger's `include:` as its root file
//!   (`include:artifact` files are read from the parent pipeline's jobs first);
//! * `trigger:project` — a pipeline of that project of this server on `trigger:branch`
//!   (default: its default branch), source `pipeline`.
//!
//! The bridge's YAML variables (global ones as `inherit:variables` allows, expanded) go
//! down as pipeline variables (`forward:yaml_variables`, default on); the parent's
//! pipeline variables and the dotenv variables of the bridge's dependencies too with
//! `forward:pipeline_variables`. Without `strategy` the bridge succeeds once the pipeline
//! exists; with `strategy: depend` (or `mirror`) it stays running and takes the
//! downstream pipeline's final status when that completes ([`Coordinator::sync_bridge`]).
//! A pipeline that cannot be created fails the bridge with GitLab's reason
//! (`downstream_pipeline_creation_failed`, `reached_max_descendant_pipelines_depth`,
//! `reached_max_pipeline_hierarchy_size`, `pipeline_loop_detected`,
//! `downstream_bridge_project_not_found`), and the messages are written to the bridge's
//! log. A child job's `needs:pipeline:job` (artifacts and dotenv variables from another
//! pipeline of the hierarchy) and any job's `needs:project` (from the latest successful job
//! of a ref of another project, whose CI/CD job token allowlist must let the job's project
//! in: `job_token_scope.rs`) are resolved here too
//! ([`Coordinator::cross_pipeline_dependencies`]).
//!
//! A bridge creates at most one pipeline (`pipelines.parent_job_id` is unique): a trigger
//! that runs again (after a restart, [`Coordinator::resume`]) finds it and only brings
//! the bridge's status up to date.
//!
//! A downstream pipeline is created through the same `create_at` as every other pipeline.
//! Bridges are exempt from the timers' stuck and timeout events (`timers.rs`), and
//! `cancel_pipeline` cascades to downstream pipelines.

use std::collections::HashMap;

use gantry_pipeline::{ArtifactError, PipelineInputs, Source};

use crate::processor::{Event, FailureReason, Status};

use super::Coordinator;
use super::creation::{ChildConfig, Creation};
use super::error::{CoordinatorError, Result};
use super::job_token_scope::JobTokenUse;
use super::payload::{creation_variables, dependency_rows};
use super::projects::full_path;
use super::spec::StoredSpec;
use super::time::now_ms;

/// Child pipelines below the root: a grandchild may not trigger another level (GitLab's
/// `Ci::Pipeline` maximum descendants depth).
pub const MAX_CHILD_DEPTH: usize = 2;
/// Pipelines in one hierarchy, the root included (GitLab's `downstream pipeline tree is
/// too large` limit).
pub const MAX_HIERARCHY_SIZE: usize = 1000;

/// Largest artifacts archive an `include:artifact` is read from (GitLab's
/// `ArtifactFileReader::MAX_ARCHIVE_SIZE`).
pub const MAX_ARTIFACT_ARCHIVE: u64 = 5 * 1024 * 1024;

/// Why no downstream pipeline was created: the bridge's failure reason and the messages
/// for its log.
struct NotCreated {
    reason: FailureReason,
    messages: Vec<String>,
}

impl NotCreated {
    fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        NotCreated {
            reason,
            messages: vec![message.into()],
        }
    }
}

impl Coordinator {
    /// Bridges a stored decision started: create their downstream pipelines one after the
    /// other, in job order, in the background (each is its own decision).
    pub(crate) fn spawn_triggers(&self, bridges: Vec<i64>) {
        if bridges.is_empty() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            for id in bridges {
                if let Err(e) = this.trigger_downstream(id).await {
                    eprintln!("gantry: failed to create the downstream pipeline of job {id}: {e}");
                }
            }
        });
    }

    /// A downstream pipeline completed: its bridge takes the status it waits for.
    pub(crate) fn spawn_sync_bridge(&self, child_pipeline_id: i64) {
        let this = self.clone();
        tokio::spawn(async move {
            let synced = async {
                let child = this.inner.store.pipeline(child_pipeline_id).await?;
                this.sync_bridge(&child).await
            };
            if let Err(e) = synced.await {
                eprintln!(
                    "gantry: failed to update the trigger job of pipeline {child_pipeline_id}: {e}"
                );
            }
        });
    }

    /// Create the downstream pipeline of the running bridge `bridge_id` (nothing when it
    /// stopped running meanwhile), then settle the bridge's status.
    pub(crate) async fn trigger_downstream(&self, bridge_id: i64) -> Result<()> {
        let store = &self.inner.store;
        let job = store.job(bridge_id).await?;
        if job.status != Status::Running {
            return Ok(());
        }
        if let Some(child) = store.pipeline_by_parent_job(bridge_id).await? {
            return self.settle_bridge(bridge_id, &child, false).await;
        }
        let spec = StoredSpec::parse(&job.spec)?;
        let Some(trigger) = &spec.job.trigger else {
            return Ok(());
        };
        match self.create_downstream(&job, &spec, trigger).await {
            Ok(child) => self.settle_bridge(bridge_id, &child, true).await,
            Err(NotCreatedOr::Store(e)) => Err(e),
            Err(NotCreatedOr::NotCreated(n)) => self.fail_bridge(bridge_id, n).await,
        }
    }

    /// The bridge's status from its downstream pipeline: a configuration error fails it
    /// (`downstream_pipeline_creation_failed`, the errors in its log); without `strategy`
    /// it succeeds; with one it follows the pipeline's final status.
    async fn settle_bridge(
        &self,
        bridge_id: i64,
        child: &gantry_store::Pipeline,
        just_created: bool,
    ) -> Result<()> {
        if let Some(errors) = child.yaml_errors.as_deref() {
            let messages = serde_json::from_str::<Vec<String>>(errors)
                .unwrap_or_else(|_| vec![errors.to_owned()]);
            return self
                .fail_bridge(
                    bridge_id,
                    NotCreated {
                        reason: FailureReason::DownstreamPipelineCreationFailed,
                        messages,
                    },
                )
                .await;
        }
        let job = self.inner.store.job(bridge_id).await?;
        let spec = StoredSpec::parse(&job.spec)?;
        let depend = spec
            .job
            .trigger
            .as_ref()
            .is_some_and(|t| t.strategy.is_some());
        if just_created {
            self.note_on_job(
                bridge_id,
                &format!("Created downstream pipeline {}\n", child.id),
            )
            .await;
        }
        if !depend {
            return self
                .bridge_event(bridge_id, |job| Event::JobSucceeded { job })
                .await;
        }
        self.sync_bridge(child).await
    }

    /// `strategy: depend`/`mirror`: a completed downstream pipeline's status becomes its
    /// running bridge's (success → success, failed or skipped → failed, canceled →
    /// canceled); anything else leaves the bridge running.
    pub(crate) async fn sync_bridge(&self, child: &gantry_store::Pipeline) -> Result<()> {
        let Some(bridge_id) = child.parent_job_id else {
            return Ok(());
        };
        match child.status {
            Status::Success => {
                self.bridge_event(bridge_id, |job| Event::JobSucceeded { job })
                    .await
            }
            Status::Failed | Status::Skipped => {
                self.bridge_event(bridge_id, |job| Event::JobFailed {
                    job,
                    reason: FailureReason::UnknownFailure,
                    exit_code: None,
                })
                .await
            }
            Status::Canceled => {
                self.bridge_event(bridge_id, |job| Event::CancelJob { job })
                    .await
            }
            _ => Ok(()),
        }
    }

    /// An event for a bridge that is still running (a bridge canceled or retried
    /// meanwhile keeps its status).
    async fn bridge_event(
        &self,
        bridge_id: i64,
        event: impl Fn(crate::processor::JobId) -> Event,
    ) -> Result<()> {
        let job = self.inner.store.job_without_spec(bridge_id).await?;
        if job.status != Status::Running {
            return Ok(());
        }
        match self
            .job_event_in(job.pipeline_id, bridge_id, now_ms(), None, event)
            .await
        {
            Ok(_) | Err(CoordinatorError::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn fail_bridge(&self, bridge_id: i64, n: NotCreated) -> Result<()> {
        let mut text = String::new();
        for m in &n.messages {
            text.push_str("ERROR: ");
            text.push_str(m);
            text.push('\n');
        }
        self.note_on_job(bridge_id, &text).await;
        let reason = n.reason;
        self.bridge_event(bridge_id, |job| Event::JobFailed {
            job,
            reason,
            exit_code: None,
        })
        .await
    }

    /// Appends `text` to a running job's (or bridge's) log (best effort: the status is what
    /// counts).
    pub(crate) async fn note_on_job(&self, bridge_id: i64, text: &str) {
        let Ok(state) = self.inner.store.trace_state(bridge_id).await else {
            return;
        };
        let at = u64::try_from(state.size).unwrap_or(0);
        let _ = self
            .append_trace(bridge_id, at, text.as_bytes().to_vec())
            .await;
    }

    async fn create_downstream(
        &self,
        job: &gantry_store::Job,
        spec: &StoredSpec,
        trigger: &gantry_pipeline::Trigger,
    ) -> std::result::Result<gantry_store::Pipeline, NotCreatedOr> {
        let store = &self.inner.store;
        let parent = store.pipeline(job.pipeline_id).await?;
        let project = store.project(parent.project_id).await?;
        let variables = self
            .downstream_variables(job, spec, trigger, &parent, &project)
            .await?;
        let creation = match &trigger.project {
            Some(path) => {
                let Ok(target) = self.project_by_path(path).await else {
                    return Err(NotCreatedOr::NotCreated(NotCreated::new(
                        FailureReason::DownstreamBridgeProjectNotFound,
                        format!("Downstream project `{path}` could not be found"),
                    )));
                };
                let target = store.project(target.id).await?;
                self.check_hierarchy(&parent, Some(target.id)).await?;
                let mirror = self.sources().sync_mirror(&target).await?;
                let branch = trigger
                    .branch
                    .clone()
                    .unwrap_or_else(|| target.default_branch.clone());
                let Some((r, commit)) = mirror.resolve(&branch).await? else {
                    return Err(NotCreatedOr::NotCreated(NotCreated::new(
                        FailureReason::DownstreamPipelineCreationFailed,
                        format!(
                            "Reference not found: `{branch}` is no branch or tag of {}",
                            full_path(&target.name)
                        ),
                    )));
                };
                let protected = self
                    .settings()
                    .ref_protected(target.id, &r)
                    .await
                    .map_err(|e| NotCreatedOr::Store(e.into()))?;
                // `trigger:inputs`: the downstream configuration's `spec:inputs`.
                let inputs = match &trigger.inputs {
                    None => PipelineInputs::default(),
                    Some(json) => PipelineInputs::from_json(json).map_err(|e| {
                        NotCreatedOr::NotCreated(NotCreated::new(
                            FailureReason::DownstreamPipelineCreationFailed,
                            format!("trigger:inputs: {e}"),
                        ))
                    })?,
                };
                Creation {
                    project: target,
                    mirror,
                    r,
                    commit,
                    protected,
                    variables,
                    file_variables: Vec::new(),
                    raw_variables: Vec::new(),
                    source: Source::Pipeline,
                    selection: None,
                    parent_job_id: Some(job.id),
                    child: None,
                    inputs,
                    push: None,
                    schedule: None,
                    fetched: None,
                    merge_request: None,
                    trigger_short_token: None,
                }
            }
            None => {
                self.check_hierarchy(&parent, None).await?;
                let r = super::git::ResolvedRef {
                    name: parent.ref_name.clone(),
                    tag: parent.tag,
                    sha: parent.sha.clone(),
                };
                let commit = self.sources().commit_facts(project.id, &r).await;
                let mirror = self.sources().mirror(project.id);
                let artifacts = self.include_artifacts(&parent, &trigger.include).await?;
                let root_text = serde_json::json!({ "include": trigger.include }).to_string();
                // A child pipeline keeps its parent's merge request (GitLab's
                // `Ci::Bridge#downstream_pipeline_params`).
                let merge_request =
                    store
                        .pipeline_merge_request(parent.id)
                        .await?
                        .map(|(link, request)| super::merge_requests::MergeRequestFacts {
                            link,
                            request,
                            changed_files: None,
                        });
                Creation {
                    mirror,
                    r,
                    commit,
                    protected: parent.protected,
                    variables,
                    // Forwarded variables arrive as plain ones (a file variable's value).
                    file_variables: Vec::new(),
                    raw_variables: Vec::new(),
                    source: Source::ParentPipeline,
                    selection: None,
                    parent_job_id: Some(job.id),
                    inputs: PipelineInputs::default(),
                    push: None,
                    schedule: None,
                    child: Some(ChildConfig {
                        root: (format!("jobs:{}:trigger:include", job.name), root_text),
                        artifacts,
                    }),
                    project,
                    fetched: None,
                    merge_request,
                    trigger_short_token: None,
                }
            }
        };
        match self.create_at(creation).await {
            Ok(view) => Ok(store.pipeline(view.id).await?),
            // Created meanwhile by another trigger of the same bridge.
            Err(CoordinatorError::Conflict(_)) => store
                .pipeline_by_parent_job(job.id)
                .await?
                .ok_or(NotCreatedOr::Store(CoordinatorError::NotFound("pipeline"))),
            Err(CoordinatorError::Invalid(message)) => Err(NotCreatedOr::NotCreated(
                NotCreated::new(FailureReason::DownstreamPipelineCreationFailed, message),
            )),
            Err(e) => Err(NotCreatedOr::Store(e)),
        }
    }

    /// GitLab's limits on a pipeline hierarchy: at most [`MAX_CHILD_DEPTH`] levels of
    /// child pipelines (`target: None`), no project triggered a third time along a chain
    /// of multi-project pipelines (`target`: the downstream project; GitLab's cyclical
    /// dependency check, `pipeline_loop_detected`), at most [`MAX_HIERARCHY_SIZE`]
    /// pipelines.
    async fn check_hierarchy(
        &self,
        parent: &gantry_store::Pipeline,
        target: Option<i64>,
    ) -> std::result::Result<(), NotCreatedOr> {
        let store = &self.inner.store;
        let is_child = |p: &gantry_store::Pipeline| p.source == Source::ParentPipeline.as_str();
        let mut child_depth = 0;
        let mut counting_children = true;
        let mut projects = Vec::new();
        let mut root = parent.clone();
        for _ in 0..MAX_HIERARCHY_SIZE {
            if is_child(&root) {
                child_depth += usize::from(counting_children);
            } else {
                counting_children = false;
                projects.push(root.project_id);
            }
            let Some(job) = root.parent_job_id else { break };
            let bridge = store.job_without_spec(job).await?;
            root = store.pipeline(bridge.pipeline_id).await?;
        }
        match target {
            None if child_depth >= MAX_CHILD_DEPTH => {
                return Err(NotCreatedOr::NotCreated(NotCreated::new(
                    FailureReason::ReachedMaxDescendantPipelinesDepth,
                    format!(
                        "Maximum number of nested child pipelines reached: at most {MAX_CHILD_DEPTH} levels of child pipelines"
                    ),
                )));
            }
            Some(t) if projects.iter().filter(|p| **p == t).count() > 2 => {
                return Err(NotCreatedOr::NotCreated(NotCreated::new(
                    FailureReason::PipelineLoopDetected,
                    "Pipeline loop detected: this project's pipelines trigger each other in a cycle",
                )));
            }
            _ => {}
        }
        let mut size = 1;
        let mut level = vec![root.id];
        while !level.is_empty() && size < MAX_HIERARCHY_SIZE {
            let mut next = Vec::new();
            for id in level {
                for p in store.downstream_pipelines(id).await? {
                    next.push(p.id);
                }
            }
            size += next.len();
            level = next;
        }
        if size >= MAX_HIERARCHY_SIZE {
            return Err(NotCreatedOr::NotCreated(NotCreated::new(
                FailureReason::ReachedMaxPipelineHierarchySize,
                format!(
                    "downstream pipeline tree is too large: at most {MAX_HIERARCHY_SIZE} pipelines"
                ),
            )));
        }
        Ok(())
    }

    /// The variables a job's keywords are expanded with before it runs: the predefined
    /// ones of its pipeline (with the pipeline's and, for `job_id` > 0, the job's id and
    /// URL), its YAML variables and the pipeline variables, expanded.
    async fn job_scope(
        &self,
        project: &gantry_store::Project,
        pipeline: &gantry_store::Pipeline,
        job_id: i64,
        m: &gantry_pipeline::Job,
    ) -> Result<HashMap<String, String>> {
        let mut predefined = self
            .facts()
            .pipeline_info(self.sources(), self.settings(), project, pipeline)
            .await
            .predefined();
        let base = format!("{}/{}", self.external_url(), full_path(&project.name));
        predefined.insert("CI_PIPELINE_ID".into(), pipeline.id.to_string());
        predefined.insert(
            "CI_PIPELINE_URL".into(),
            format!("{base}/-/pipelines/{}", pipeline.id),
        );
        if job_id > 0 {
            predefined.insert("CI_JOB_ID".into(), job_id.to_string());
            predefined.insert("CI_JOB_URL".into(), format!("{base}/-/jobs/{job_id}"));
        }
        let pipeline_variables = self.settings().pipeline_variables(pipeline)?.values;
        Ok(creation_variables(m, &predefined, &pipeline_variables))
    }

    /// The variables a bridge sends down, as pipeline variables of the new pipeline
    /// (GitLab's `DownstreamVariablesCalculator`): its YAML variables with their
    /// references expanded, then (`forward:pipeline_variables`) the parent's pipeline
    /// variables and the dotenv variables of its dependencies; a later one of the same
    /// name wins.
    async fn downstream_variables(
        &self,
        job: &gantry_store::Job,
        spec: &StoredSpec,
        trigger: &gantry_pipeline::Trigger,
        parent: &gantry_store::Pipeline,
        project: &gantry_store::Project,
    ) -> Result<Vec<(String, String)>> {
        let m: &gantry_pipeline::Job = &spec.job;
        let pipeline_variables = self.settings().pipeline_variables(parent)?.values;
        let dotenv = if trigger.forward_pipeline_variables {
            let rows = self.dep_rows(parent.id).await?;
            let mut dotenv = Vec::new();
            for d in dependency_rows(spec, job, &rows) {
                dotenv.extend(self.artifacts().dotenv_variables(d.id).await?);
            }
            dotenv
        } else {
            Vec::new()
        };
        let mut scope = self.job_scope(project, parent, job.id, m).await?;
        for (k, v) in &dotenv {
            scope.insert(k.clone(), v.clone());
        }
        let mut out: Vec<(String, String)> = Vec::new();
        let mut push = |key: &str, value: String| {
            out.retain(|(k, _)| k != key);
            out.push((key.to_owned(), value));
        };
        if trigger.forward_yaml_variables {
            for (key, v) in m.inherited_variables.iter().chain(&m.variables) {
                let value = if v.expand {
                    gantry_pipeline::expand::expand_nested(
                        &v.value,
                        &|n| scope.get(n).cloned(),
                        gantry_pipeline::expand::Unknown::Empty,
                    )
                } else {
                    v.value.clone()
                };
                push(key, value);
            }
        }
        if trigger.forward_pipeline_variables {
            for (k, v) in pipeline_variables.into_iter().chain(dotenv) {
                push(&k, v);
            }
        }
        Ok(out)
    }

    /// `needs:pipeline:job` of a job (GitLab's `BuildDependencies#cross_pipeline`): each
    /// `pipeline` (expanded: usually `$PARENT_PIPELINE_ID`, a variable the trigger job
    /// sent down) must be another pipeline of the job's hierarchy, and its latest attempt
    /// of `job` is a dependency (artifacts and dotenv variables) when `artifacts` is true.
    /// `needs:project` (GitLab's `BuildDependencies#cross_project`): the latest successful
    /// job named `job` on `ref` of the named project (its latest attempt, in any pipeline of
    /// that ref, as GitLab's `max_build_id_by`), when that project's CI/CD job token
    /// allowlist lets this job's project in.
    /// `(job id, name, pipeline id)` of each; the inner `Err` is a need that names no such
    /// job (the job fails `missing_dependency_failure`).
    pub(crate) async fn cross_pipeline_dependencies(
        &self,
        pipeline: &gantry_store::Pipeline,
        project: &gantry_store::Project,
        spec: &StoredSpec,
    ) -> Result<std::result::Result<Vec<(i64, String, i64)>, String>> {
        let wanted: Vec<(&str, &str)> = spec
            .job
            .cross_needs
            .iter()
            .filter(|n| n.artifacts && n.project.is_none())
            .filter_map(|n| Some((n.pipeline.as_deref()?, n.job.as_deref()?)))
            .collect();
        let from_projects: Vec<(&str, &str, &str)> = spec
            .job
            .cross_needs
            .iter()
            .filter(|n| n.artifacts)
            .filter_map(|n| Some((n.project.as_deref()?, n.job.as_deref()?, n.ref_.as_deref()?)))
            .collect();
        if wanted.is_empty() && from_projects.is_empty() {
            return Ok(Ok(Vec::new()));
        }
        let store = &self.inner.store;
        let scope = self.job_scope(project, pipeline, 0, &spec.job).await?;
        let expand = |s: &str| {
            gantry_pipeline::expand::expand_nested(
                s,
                &|n| scope.get(n).cloned(),
                gantry_pipeline::expand::Unknown::Empty,
            )
        };
        let mut out = Vec::new();
        for (raw_project, raw_job, raw_ref) in from_projects {
            let (path, job, ref_name) = (expand(raw_project), expand(raw_job), expand(raw_ref));
            let other = match self.project_by_path(&path).await {
                Ok(p) => p,
                Err(CoordinatorError::NotFound(_)) => {
                    return Ok(Err(format!(
                        "needs:project `{path}`: no such project on this server"
                    )));
                }
                Err(e) => return Err(e),
            };
            // The other project's CI/CD job token allowlist (`job_token_scope.rs`).
            if let Some(why) = self
                .job_token_refusal(project.id, other.id, JobTokenUse::NeedsProject)
                .await?
            {
                return Ok(Err(format!("needs:project `{path}`: {why}")));
            }
            match self
                .latest_successful_job(other.id, &ref_name, &job)
                .await?
            {
                Some((id, pipeline_id)) => out.push((id, job, pipeline_id)),
                None => {
                    return Ok(Err(format!(
                        "needs:project `{path}` has no successful job `{job}` on ref `{ref_name}`"
                    )));
                }
            }
        }
        if wanted.is_empty() {
            return Ok(Ok(out));
        }
        // The hierarchy: up to the root, then every pipeline below it.
        let mut root = pipeline.clone();
        for _ in 0..=MAX_CHILD_DEPTH {
            let Some(job) = root.parent_job_id else { break };
            let bridge = store.job_without_spec(job).await?;
            root = store.pipeline(bridge.pipeline_id).await?;
        }
        let mut family = vec![root.id];
        let mut level = vec![root.id];
        while !level.is_empty() && family.len() < MAX_HIERARCHY_SIZE {
            let mut next = Vec::new();
            for id in level {
                next.extend(store.downstream_pipelines(id).await?.iter().map(|p| p.id));
            }
            family.extend(&next);
            level = next;
        }
        for (raw_pipeline, raw_job) in wanted {
            let (text, job) = (expand(raw_pipeline), expand(raw_job));
            let Ok(id) = text.trim().parse::<i64>() else {
                return Ok(Err(format!(
                    "needs:pipeline `{raw_pipeline}` is `{text}`, not a pipeline id"
                )));
            };
            // The current pipeline's jobs are local needs, not cross-pipeline ones.
            if id == pipeline.id {
                continue;
            }
            if !family.contains(&id) {
                return Ok(Err(format!(
                    "needs:pipeline {id} is not a pipeline of this pipeline's hierarchy"
                )));
            }
            let found = store
                .pipeline_jobs_without_spec(id)
                .await?
                .into_iter()
                .filter(|r| r.name == job && !r.retried)
                .max_by_key(|r| r.id);
            match found {
                Some(r) => out.push((r.id, r.name, id)),
                None => {
                    return Ok(Err(format!("needs:pipeline {id} has no job `{job}`")));
                }
            }
        }
        Ok(Ok(out))
    }

    /// `(job id, pipeline id)` of the newest successful job named `job` (its latest
    /// attempt) of the project's pipelines of `ref_name`
    /// ([`gantry_store::Store::latest_successful_job_of_ref`]).
    pub(crate) async fn latest_successful_job(
        &self,
        project_id: i64,
        ref_name: &str,
        job: &str,
    ) -> Result<Option<(i64, i64)>> {
        Ok(self
            .inner
            .store
            .latest_successful_job_of_ref(project_id, ref_name, job)
            .await?)
    }

    /// The `include:artifact` files of a trigger, read from the latest attempt of each
    /// named job of the parent pipeline that has an artifacts archive.
    async fn include_artifacts(
        &self,
        parent: &gantry_store::Pipeline,
        include: &[serde_json::Value],
    ) -> Result<HashMap<(String, String), std::result::Result<String, ArtifactError>>> {
        let mut out = HashMap::new();
        let wanted: Vec<(String, String)> = include
            .iter()
            .filter_map(|item| {
                let path = item.get("artifact")?.as_str()?;
                let job = item.get("job")?.as_str()?;
                Some((job.to_owned(), path.trim_start_matches('/').to_owned()))
            })
            .collect();
        if wanted.is_empty() {
            return Ok(out);
        }
        let rows = self
            .inner
            .store
            .pipeline_jobs_without_spec(parent.id)
            .await?;
        let artifacts = self.inner.store.pipeline_artifacts(parent.id).await?;
        let now = now_ms();
        for (job, path) in wanted {
            let archive = rows
                .iter()
                .filter(|r| r.name == job)
                .filter_map(|r| {
                    artifacts
                        .iter()
                        .find(|a| a.job_id == r.id && a.file_type == "archive" && !a.expired(now))
                })
                .max_by_key(|a| a.job_id);
            let file = match archive {
                None => Err(ArtifactError::NoJob),
                Some(a) if u64::try_from(a.size).unwrap_or(u64::MAX) > MAX_ARTIFACT_ARCHIVE => {
                    Err(ArtifactError::TooLarge(MAX_ARTIFACT_ARCHIVE))
                }
                Some(a) => match self.artifacts().blob_get(a.blob_key.clone()).await? {
                    None => Err(ArtifactError::NoJob),
                    Some(bytes) => read_zip_file(&bytes, &path),
                },
            };
            out.insert((job, path), file);
        }
        Ok(out)
    }
}

/// A store failure, or a pipeline that could not be created.
enum NotCreatedOr {
    NotCreated(NotCreated),
    Store(CoordinatorError),
}

impl From<CoordinatorError> for NotCreatedOr {
    fn from(e: CoordinatorError) -> Self {
        NotCreatedOr::Store(e)
    }
}

impl From<gantry_store::StoreError> for NotCreatedOr {
    fn from(e: gantry_store::StoreError) -> Self {
        NotCreatedOr::Store(e.into())
    }
}

/// One file of a zip artifacts archive, as UTF-8 text.
fn read_zip_file(bytes: &[u8], path: &str) -> std::result::Result<String, ArtifactError> {
    use std::io::Read as _;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| ArtifactError::Io(format!("the archive is no zip file: {e}")))?;
    let mut file = match zip.by_name(path) {
        Ok(f) => f,
        Err(zip::result::ZipError::FileNotFound) => return Err(ArtifactError::NoFile),
        Err(e) => return Err(ArtifactError::Io(e.to_string())),
    };
    let mut text = String::new();
    file.by_ref()
        .take(MAX_ARTIFACT_ARCHIVE)
        .read_to_string(&mut text)
        .map_err(|e| ArtifactError::Io(format!("not UTF-8 text: {e}")))?;
    Ok(text)
}
