//! The coordinator's spans of a pipeline run (OpenTelemetry; `gantry-telemetry` holds
//! the settings, the provider and the names). One trace per pipeline:
//!
//! ```text
//! RUN <pipeline name>          SERVER   created_at → finished_at      (when it completes)
//! ├── create pipeline          INTERNAL the creation request           (at creation)
//! │   ├── fetch commit                  mirror sync + ref resolution
//! │   └── compile configuration        .gitlab-ci.yml and its includes
//! │       └── read <path> | include remote|project|artifact …   each file read
//! └── <job name>               INTERNAL created_at → finished_at      (when the job completes)
//!     ├── queue                         queued_at → started_at (pending → picked)
//!     └── execute <job name>   (runner) its own spans, under TRACEPARENT
//! ```
//!
//! **Incremental and replica-safe.** Nothing is held in memory between requests: a job
//! span is emitted by whichever process stores the job's end ([`Coordinator::decide`]
//! after `Store::apply`), with explicit start and end times from the job's stored times;
//! the pipeline span likewise when the pipeline's status becomes completed. Their ids
//! come from the pipeline's stored trace id (`pipelines.trace_id`, drawn at creation;
//! derivation in `gantry_telemetry::ids`), so the `TRACEPARENT` a job's payload carries
//! ([`Coordinator::job_traceparent`]) names the span emitted later, elsewhere. A
//! pipeline retried after it completed emits its span again when it completes again
//! (same id, later end). Pipelines created while tracing was off have no trace id and
//! no spans.
//!
//! Cost: off, one `Option` test per decision and per payload; on, O(jobs the decision
//! ended) spans built per decision, handed to the SDK's batch processor (a bounded queue
//! drained by its own thread; a full queue drops spans, never blocks).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gantry_store::{Job, JobUpdate, Pipeline, PipelineChange};
use gantry_telemetry::names::{self as n, result_of, status_of, task_type};
use gantry_telemetry::{KeyValue, PipelineTrace, Recorded, SpanId, SpanKind, Status, Telemetry};

use super::Coordinator;
use super::projects::{full_path, project_path};
use super::state::Loaded;
use crate::processor::Status as JobStatus;

/// Unix milliseconds as a time.
fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// When the steps of a pipeline's creation ran.
#[derive(Clone, Debug)]
pub(crate) struct CreationTimes {
    pub started: SystemTime,
    /// The mirror's sync and the ref's resolution (`None`: done by the caller's caller,
    /// a push or a schedule).
    pub fetched: Option<(SystemTime, SystemTime)>,
    pub compiled: Option<(SystemTime, SystemTime)>,
    /// The files compiling read (the configuration file and its includes).
    pub reads: Vec<Read>,
}

impl CreationTimes {
    pub(crate) fn starting(fetched: Option<(SystemTime, SystemTime)>) -> Self {
        CreationTimes {
            started: fetched.map_or_else(SystemTime::now, |(start, _)| start),
            fetched,
            compiled: None,
            reads: Vec::new(),
        }
    }
}

impl Coordinator {
    fn telemetry(&self) -> Option<&Telemetry> {
        self.inner.cfg.telemetry.as_ref()
    }

    /// A new pipeline's trace (`None` when tracing is off).
    pub(crate) fn new_trace(&self) -> Option<PipelineTrace> {
        self.telemetry().map(|_| PipelineTrace::random())
    }

    fn trace_of(&self, pipeline: &Pipeline) -> Option<(&Telemetry, PipelineTrace)> {
        let telemetry = self.telemetry()?;
        let trace = PipelineTrace::parse(pipeline.trace_id.as_deref()?)?;
        Some((telemetry, trace))
    }

    /// The `TRACEPARENT` job variable: the job span's W3C context.
    pub(crate) fn job_traceparent(&self, pipeline: &Pipeline, job_id: i64) -> Option<String> {
        let (telemetry, trace) = self.trace_of(pipeline)?;
        Some(gantry_telemetry::traceparent(
            trace.trace_id,
            trace.job_span(job_id),
            telemetry.samples(trace.trace_id),
        ))
    }

    /// What every span of the pipeline says about it.
    fn pipeline_attributes(&self, pipeline: &Pipeline) -> Vec<KeyValue> {
        let project = self.facts().project_name(pipeline.project_id);
        let base = self.external_url().trim_end_matches('/');
        let mut attributes = vec![
            KeyValue::new(n::PIPELINE_RUN_ID, pipeline.id.to_string()),
            KeyValue::new(n::GITLAB_PIPELINE_ID, pipeline.id),
            KeyValue::new(n::GITLAB_PIPELINE_IID, pipeline.iid),
            KeyValue::new(n::GITLAB_PIPELINE_SOURCE, pipeline.source.clone()),
            KeyValue::new(n::GITLAB_PROJECT_ID, pipeline.project_id),
            KeyValue::new(n::VCS_PROVIDER, "gitlab"),
            KeyValue::new(n::VCS_REF_NAME, pipeline.ref_name.clone()),
            KeyValue::new(n::VCS_REF_TYPE, if pipeline.tag { "tag" } else { "branch" }),
            KeyValue::new(n::VCS_REVISION, pipeline.sha.clone()),
        ];
        if !project.is_empty() {
            let path = full_path(&project);
            let (owner, name) = project_path(&project);
            attributes.extend([
                KeyValue::new(
                    n::PIPELINE_RUN_URL,
                    format!("{base}/{path}/-/pipelines/{}", pipeline.id),
                ),
                KeyValue::new(n::VCS_REPOSITORY_URL, format!("{base}/{path}")),
                KeyValue::new(n::VCS_REPOSITORY_NAME, name),
                KeyValue::new(n::VCS_OWNER, owner),
                KeyValue::new(n::GITLAB_PROJECT_PATH, path),
            ]);
        }
        attributes
    }

    /// The creation spans of a pipeline just stored.
    pub(crate) fn record_creation(&self, pipeline: &Pipeline, times: &CreationTimes) {
        let Some((telemetry, trace)) = self.trace_of(pipeline) else {
            return;
        };
        let create = SpanId::from(rand::random::<u64>().max(1));
        let mut attributes = self.pipeline_attributes(pipeline);
        attributes.push(KeyValue::new(n::SYSTEM_COMPONENT, "controller"));
        let span = |name: &str, span_id, parent, (start, end), attributes| Recorded {
            name: name.to_owned(),
            trace_id: trace.trace_id,
            span_id,
            parent: Some(parent),
            kind: SpanKind::Internal,
            start,
            end,
            attributes,
            status: Status::Unset,
        };
        let ended = SystemTime::now();
        if let Some(fetched) = times.fetched {
            let id = SpanId::from(rand::random::<u64>().max(1));
            telemetry.record(span("fetch commit", id, create, fetched, Vec::new()));
        }
        if let Some(compiled) = times.compiled {
            let compile = SpanId::from(rand::random::<u64>().max(1));
            for read in &times.reads {
                let id = SpanId::from(rand::random::<u64>().max(1));
                let mut recorded = span(
                    &read.name,
                    id,
                    compile,
                    (read.start, read.end),
                    vec![KeyValue::new(
                        "gitlab.include.location",
                        read.location.clone(),
                    )],
                );
                if let Some(error) = &read.error {
                    recorded.status = Status::error(error.clone());
                }
                telemetry.record(recorded);
            }
            telemetry.record(span(
                "compile configuration",
                compile,
                create,
                compiled,
                Vec::new(),
            ));
        }
        telemetry.record(span(
            "create pipeline",
            create,
            trace.pipeline_span(),
            (times.started, ended),
            attributes,
        ));
    }

    /// The spans a stored decision ended: each job that reached a completed status, and
    /// the pipeline when it did (see the module docs). `loaded` is the pipeline as it
    /// was before `change`.
    pub(crate) fn record_decision(&self, loaded: &Loaded, change: &PipelineChange, now_ms: i64) {
        let Some((telemetry, trace)) = self.trace_of(&loaded.pipeline) else {
            return;
        };
        let ended: Vec<(&JobUpdate, &Job)> = change
            .jobs
            .iter()
            .filter(|u| u.status.is_completed())
            .filter_map(|u| Some((u, loaded.row(loaded.job_id(u.id)?)?)))
            .filter(|(_, row)| !row.status.is_completed())
            .collect();
        let pipeline_ended = change.status.is_completed() && !loaded.pipeline.status.is_completed();
        if ended.is_empty() && !pipeline_ended {
            return;
        }
        let common = self.pipeline_attributes(&loaded.pipeline);
        let base = self.external_url().trim_end_matches('/').to_owned();
        let path = full_path(&self.facts().project_name(loaded.pipeline.project_id));
        for (update, row) in ended {
            let reason = update.failure_reason.as_deref();
            let result = result_of(update.status.as_str(), reason).unwrap_or("failure");
            let span_id = trace.job_span(row.id);
            let end = at(update.finished_at.or(row.finished_at).unwrap_or(now_ms));
            let queued = update.queued_at.or(row.queued_at);
            let started = update.started_at.or(row.started_at);
            let mut attributes = common.clone();
            attributes.extend([
                KeyValue::new(n::TASK_NAME, row.name.clone()),
                KeyValue::new(n::TASK_RUN_ID, row.id.to_string()),
                KeyValue::new(n::TASK_RUN_URL, format!("{base}/{path}/-/jobs/{}", row.id)),
                KeyValue::new(n::TASK_RUN_RESULT, result),
                KeyValue::new(n::GITLAB_JOB_ID, row.id),
                KeyValue::new(n::GITLAB_JOB_STAGE, row.stage.clone()),
                KeyValue::new(n::GITLAB_JOB_STATUS, update.status.as_str()),
                KeyValue::new(n::GITLAB_JOB_ALLOW_FAILURE, update.allow_failure),
                KeyValue::new(n::SYSTEM_COMPONENT, "controller"),
            ]);
            if let Some(kind) = task_type(&row.stage) {
                attributes.push(KeyValue::new(n::TASK_TYPE, kind));
            }
            if let Some(reason) = reason {
                attributes.push(KeyValue::new(
                    n::GITLAB_JOB_FAILURE_REASON,
                    reason.to_owned(),
                ));
                if matches!(result, "failure" | "error" | "timeout") {
                    attributes.push(KeyValue::new(n::ERROR_TYPE, reason.to_owned()));
                }
            }
            if let Some(runner) = row.runner_id {
                attributes.push(KeyValue::new(n::WORKER_ID, runner.to_string()));
                attributes.push(KeyValue::new(n::GITLAB_RUNNER_ID, runner));
            }
            if let (Some(q), Some(s)) = (queued, started) {
                #[allow(clippy::cast_precision_loss)]
                let seconds = (s - q).max(0) as f64 / 1000.0;
                attributes.push(KeyValue::new(n::GITLAB_JOB_QUEUED_DURATION, seconds));
            }
            if let Some(q) = queued {
                telemetry.record(Recorded {
                    name: "queue".to_owned(),
                    trace_id: trace.trace_id,
                    span_id: SpanId::from(rand::random::<u64>().max(1)),
                    parent: Some(span_id),
                    kind: SpanKind::Internal,
                    start: at(q),
                    end: started.map_or(end, at),
                    attributes: vec![KeyValue::new(n::GITLAB_JOB_ID, row.id)],
                    status: Status::Unset,
                });
            }
            telemetry.record(Recorded {
                name: row.name.clone(),
                trace_id: trace.trace_id,
                span_id,
                parent: Some(trace.pipeline_span()),
                kind: SpanKind::Internal,
                start: at(row.created_at),
                end,
                attributes,
                status: status_of(result, reason),
            });
        }
        if pipeline_ended {
            let name = loaded
                .specs
                .first()
                .and_then(|s| s.pipeline_name.clone())
                .filter(|n| !n.is_empty());
            self.record_pipeline(
                telemetry,
                trace,
                &loaded.pipeline,
                change.status,
                name,
                change.finished_at.unwrap_or(now_ms),
            );
        }
    }

    /// The pipeline run span of a pipeline stored as completed at creation (a
    /// configuration error, a skipped push).
    pub(crate) fn record_ended_at_creation(
        &self,
        pipeline: &Pipeline,
        status: JobStatus,
        now_ms: i64,
    ) {
        if let Some((telemetry, trace)) = self.trace_of(pipeline) {
            self.record_pipeline(telemetry, trace, pipeline, status, None, now_ms);
        }
    }

    fn record_pipeline(
        &self,
        telemetry: &Telemetry,
        trace: PipelineTrace,
        pipeline: &Pipeline,
        status: JobStatus,
        name: Option<String>,
        finished_ms: i64,
    ) {
        let reason = pipeline.failure_reason.as_deref();
        let result = result_of(status.as_str(), reason).unwrap_or("failure");
        let name =
            name.unwrap_or_else(|| full_path(&self.facts().project_name(pipeline.project_id)));
        let mut attributes = self.pipeline_attributes(pipeline);
        attributes.extend([
            KeyValue::new(n::PIPELINE_NAME, name.clone()),
            KeyValue::new(n::PIPELINE_ACTION, "RUN"),
            KeyValue::new(n::PIPELINE_RESULT, result),
            KeyValue::new(n::GITLAB_PIPELINE_STATUS, status.as_str()),
            KeyValue::new(n::SYSTEM_COMPONENT, "controller"),
        ]);
        if matches!(result, "failure" | "error" | "timeout") {
            attributes.push(KeyValue::new(
                n::ERROR_TYPE,
                reason.unwrap_or("_OTHER").to_owned(),
            ));
        }
        telemetry.record(Recorded {
            name: format!("RUN {name}"),
            trace_id: trace.trace_id,
            span_id: trace.pipeline_span(),
            parent: None,
            kind: SpanKind::Server,
            start: at(pipeline.created_at),
            end: at(finished_ms),
            attributes,
            status: status_of(result, reason),
        });
    }
}

/// A file compiling read: `read <path>` (the configuration file, `include:local`),
/// `include remote <url>`, `include project <project>:<path>`, `include artifact
/// <job>:<path>`; its time and whether it failed.
#[derive(Clone, Debug)]
pub(crate) struct Read {
    pub name: String,
    pub location: String,
    pub start: SystemTime,
    pub end: SystemTime,
    pub error: Option<String>,
}

/// The reads of one compilation, shared with the blocking thread that compiles.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReadLog(std::sync::Arc<std::sync::Mutex<Vec<Read>>>);

impl ReadLog {
    fn push(&self, read: Read) {
        if let Ok(mut reads) = self.0.lock() {
            reads.push(read);
        }
    }

    pub(crate) fn take(&self) -> Vec<Read> {
        self.0
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default()
    }
}

/// A [`Loader`](gantry_pipeline::Loader) that logs the files `inner` reads with their
/// times; everything else is `inner`'s.
pub(crate) struct TimedLoader<'a> {
    pub inner: &'a dyn gantry_pipeline::Loader,
    pub log: &'a ReadLog,
}

impl TimedLoader<'_> {
    fn timed<T, E: std::fmt::Display>(
        &self,
        name: String,
        location: String,
        read: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let start = SystemTime::now();
        let out = read();
        self.log.push(Read {
            name,
            location,
            start,
            end: SystemTime::now(),
            error: out.as_ref().err().map(ToString::to_string),
        });
        out
    }
}

impl gantry_pipeline::Loader for TimedLoader<'_> {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        self.timed(format!("read {path}"), path.to_owned(), || {
            self.inner.read(path)
        })
    }

    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        self.inner.files()
    }

    fn remote(&self, url: &str) -> Result<String, gantry_pipeline::RemoteError> {
        self.timed(format!("include remote {url}"), url.to_owned(), || {
            self.inner.remote(url)
        })
    }

    fn project_file(
        &self,
        project: &str,
        ref_name: Option<&str>,
        path: &str,
    ) -> Result<Option<String>, gantry_pipeline::ProjectError> {
        self.timed(
            format!("include project {project}:{path}"),
            format!("{project}@{}:{path}", ref_name.unwrap_or("HEAD")),
            || self.inner.project_file(project, ref_name, path),
        )
    }

    fn project_commit(&self, project: &str, ref_name: Option<&str>) -> Option<String> {
        self.inner.project_commit(project, ref_name)
    }

    fn reads_projects(&self) -> bool {
        self.inner.reads_projects()
    }

    fn project_files(
        &self,
        project: &str,
        ref_name: Option<&str>,
    ) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        self.inner.project_files(project, ref_name)
    }

    fn template_url(&self, name: &str) -> Option<String> {
        self.inner.template_url(name)
    }

    fn artifact(&self, job: &str, path: &str) -> Result<String, gantry_pipeline::ArtifactError> {
        self.timed(
            format!("include artifact {job}:{path}"),
            format!("{job}:{path}"),
            || self.inner.artifact(job, path),
        )
    }

    fn changed_since(
        &self,
        compare_to: &str,
    ) -> Result<Vec<String>, gantry_pipeline::CompareError> {
        self.inner.changed_since(compare_to)
    }
}
