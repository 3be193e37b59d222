//! The coordinator's metrics: Prometheus text at `GET /-/metrics` (see
//! `http/metrics.rs`) and, when an OTLP endpoint is configured
//! ([`CoordinatorConfig::meters`](super::CoordinatorConfig)), the same figures over OTLP
//! under OpenTelemetry's names. Names follow the CI/CD semantic conventions where one
//! exists (`gantry_telemetry::names::metric`); the Prometheus names are OpenTelemetry's
//! Prometheus mapping of them (`.` → `_`, unit suffix, `_total` on counters).
//!
//! Events are recorded where they happen, O(1) each: a job request answered
//! ([`Metrics::job_request`]), a job handed to a runner (its queue wait, in
//! `queue.rs`), a stored decision that ended jobs or the pipeline
//! ([`Coordinator::observe_decision`], beside the spans), a pipeline completed at
//! creation, an HTTP answer `5xx` (`http/mod.rs`), a failed timer pass (`timers.rs`).
//! Gauges are read from the store at each scrape (three grouped queries, O(unfinished
//! pipelines + runners)); for OTLP, the timer loop reads them every
//! [`GAUGE_REFRESH_TICKS`] seconds into a snapshot the observable instruments report.
//!
//! | Prometheus | OpenTelemetry | type | labels | what |
//! |---|---|---|---|---|
//! | `cicd_pipeline_run_duration_seconds` | `cicd.pipeline.run.duration` | histogram | `cicd_pipeline_name`, `cicd_pipeline_run_state` (`pending`: created → started, `executing`: started → finished), `cicd_pipeline_result`, `error_type` | each state of each finished pipeline run; the result on the state it was reached in |
//! | `cicd_pipeline_run_active` | `cicd.pipeline.run.active` | gauge | `cicd_pipeline_name`, `cicd_pipeline_run_state` (`pending`, `executing`, `finalizing`: canceling) | pipeline runs not finished |
//! | `cicd_pipeline_run_errors_total` | `cicd.pipeline.run.errors` | counter | `cicd_pipeline_name`, `error_type` (the pipeline's failure reason, else `_OTHER`) | pipeline runs that failed |
//! | `cicd_system_errors_total` | `cicd.system.errors` | counter | `cicd_system_component` (`controller`: an HTTP answer 5xx, `scheduler`: a timer pass), `error_type` (the HTTP status, `timers`, `auto_stop`) | the coordinator's own errors, not jobs' |
//! | `cicd_worker_count` | `cicd.worker.count` | gauge | `cicd_worker_state` (`busy`: online and executing a job, `available`: online, idle; `offline`: no contact in 2 hours) | runners |
//! | `gantry_job_queue_duration_seconds` | `gantry.job.queue.duration` | histogram | | each job's wait, pending → handed to a runner |
//! | `gantry_job_duration_seconds` | `gantry.job.duration` | histogram | `status` | each finished job's run, started → finished |
//! | `gantry_job_failures_total` | `gantry.job.failures` | counter | `failure_reason` | jobs that failed, by GitLab's failure reason |
//! | `gantry_jobs` | | gauge | `status` | jobs not finished yet: `created`, `waiting_for_resource`, `preparing`, `pending` (the queue), `running`, `canceling` |
//! | `gantry_runners_online` | | gauge | | runners that asked for jobs in the last 2 hours (GitLab's "online") |
//! | `gantry_job_requests_total` | | counter | `result` (`job`, `none`) | job requests answered by this process, with a job or without |
//! | `gantry_pipelines_created_total` | | counter | | pipelines this process created |
//! | `gantry_jobs_finished_total` | | counter | `status` (`success`, `failed`, `canceled`, `skipped`) | jobs whose end this process decided |
//! | `gantry_build_info` | | gauge (1) | `version` | this binary |
//!
//! **Choice:** `cicd.pipeline.name` is the project's full path. The conventions ask for
//! a low-cardinality name; `workflow:name` (what the pipeline span is named after) may
//! hold variables and so vary per run, the project's path does not.
//!
//! Counters and histograms count what this process saw since it started (each replica
//! its own, as Prometheus sums them); gauges are the store's, the same on every replica.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gantry_store::{Job, JobUpdate, Pipeline, PipelineChange};
use gantry_telemetry::KeyValue;
use gantry_telemetry::metrics::{
    Counter as OtelCounter, DURATION_BUCKETS, Histogram as OtelHistogram, Meters, ObservableGauge,
};
use gantry_telemetry::names::{self as n, metric, result_of};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::Coordinator;
use super::error::CoordinatorError;
use super::projects::full_path;
use super::state::Loaded;
use super::time::now_ms;
use crate::processor::Status;

/// GitLab counts a runner online when it made contact within the last 2 hours.
pub(crate) const ONLINE_WINDOW_MS: i64 = 2 * 60 * 60 * 1000;

/// How often (timer ticks, seconds) the gauges are read for the OTLP export.
pub(crate) const GAUGE_REFRESH_TICKS: u64 = 10;

/// The statuses a job ends in, as `gantry_jobs_finished_total` labels them.
const FINISHED: [Status; 4] = [
    Status::Success,
    Status::Failed,
    Status::Canceled,
    Status::Skipped,
];

/// The job statuses `gantry_jobs` counts.
const ACTIVE_JOB_STATUSES: [&str; 6] = [
    "created",
    "waiting_for_resource",
    "preparing",
    "pending",
    "running",
    "canceling",
];

fn histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    failure_reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunDurationLabels {
    cicd_pipeline_name: String,
    cicd_pipeline_run_state: String,
    /// Empty (no label) on a state the result was not reached in.
    cicd_pipeline_result: String,
    error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunActiveLabels {
    cicd_pipeline_name: String,
    cicd_pipeline_run_state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunErrorLabels {
    cicd_pipeline_name: String,
    error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SystemErrorLabels {
    cicd_system_component: String,
    error_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    cicd_worker_state: String,
}

/// The gauges as the store had them at the last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Gauges {
    /// `(pipeline name, run state)` → runs.
    pub runs: Vec<((String, &'static str), i64)>,
    /// `(worker state, runners)`: `available`, `busy`, `offline`.
    pub workers: [(&'static str, i64); 3],
    /// `(job status, jobs)` of [`ACTIVE_JOB_STATUSES`].
    pub jobs: Vec<(&'static str, i64)>,
    pub online: i64,
}

/// The OTLP side: the instruments the events are recorded in too.
struct Instruments {
    run_duration: OtelHistogram<f64>,
    run_errors: OtelCounter<u64>,
    system_errors: OtelCounter<u64>,
    queue_duration: OtelHistogram<f64>,
    job_duration: OtelHistogram<f64>,
    job_failures: OtelCounter<u64>,
    /// Kept so their callbacks stay registered.
    _observed: Vec<ObservableGauge<i64>>,
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Instruments")
    }
}

/// What this process measured since it started, in both encodings.
#[derive(Debug)]
pub(crate) struct Metrics {
    requests_with_job: AtomicU64,
    requests_without_job: AtomicU64,
    pipelines_created: AtomicU64,
    /// By the index of the status in [`FINISHED`].
    finished: [AtomicU64; 4],
    run_duration: HistogramFamily<RunDurationLabels>,
    run_errors: Family<RunErrorLabels, Counter>,
    system_errors: Family<SystemErrorLabels, Counter>,
    queue_duration: Histogram,
    job_duration: HistogramFamily<StatusLabel>,
    job_failures: Family<ReasonLabel, Counter>,
    otel: Option<Instruments>,
    /// The gauges for the OTLP export (read by the timer loop).
    gauges: Arc<Mutex<Gauges>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(None)
    }
}

impl Metrics {
    /// Metrics recorded in Prometheus' registry, and in `meters`' instruments when given.
    pub(crate) fn new(meters: Option<&Meters>) -> Self {
        let gauges = Arc::new(Mutex::new(Gauges::default()));
        Metrics {
            requests_with_job: AtomicU64::new(0),
            requests_without_job: AtomicU64::new(0),
            pipelines_created: AtomicU64::new(0),
            finished: Default::default(),
            run_duration: Family::new_with_constructor(histogram),
            run_errors: Family::default(),
            system_errors: Family::default(),
            queue_duration: histogram(),
            job_duration: Family::new_with_constructor(histogram),
            job_failures: Family::default(),
            otel: meters.map(|m| instruments(m, &gauges)),
            gauges,
        }
    }

    pub(crate) fn exports_otlp(&self) -> bool {
        self.otel.is_some()
    }

    pub(crate) fn job_request(&self, handed_a_job: bool) {
        let counter = if handed_a_job {
            &self.requests_with_job
        } else {
            &self.requests_without_job
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn pipeline_created(&self) {
        self.pipelines_created.fetch_add(1, Ordering::Relaxed);
    }

    /// A job went from `from` to `to`: counted when that ended it.
    pub(crate) fn job_changed(&self, from: Option<Status>, to: Status) {
        if from.is_some_and(|from| !from.is_completed())
            && let Some(index) = FINISHED.iter().position(|s| *s == to)
        {
            self.finished[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A job was handed to a runner after waiting `waited_ms` in the queue.
    pub(crate) fn job_picked(&self, waited_ms: i64) {
        let seconds = seconds(waited_ms);
        self.queue_duration.observe(seconds);
        if let Some(o) = &self.otel {
            o.queue_duration.record(seconds, &[]);
        }
    }

    /// An error of the coordinator itself: `component` is the conventions' (`controller`,
    /// `scheduler`), `kind` its `error.type`.
    pub(crate) fn system_error(&self, component: &str, kind: &str) {
        self.system_errors
            .get_or_create(&SystemErrorLabels {
                cicd_system_component: component.to_owned(),
                error_type: kind.to_owned(),
            })
            .inc();
        if let Some(o) = &self.otel {
            o.system_errors.add(
                1,
                &[
                    KeyValue::new(n::SYSTEM_COMPONENT, component.to_owned()),
                    KeyValue::new(n::ERROR_TYPE, kind.to_owned()),
                ],
            );
        }
    }

    /// A job ended with `status` (and `failure_reason`), having run `ran_ms` (`None`:
    /// it never started).
    fn job_ended(&self, status: &str, failure_reason: Option<&str>, ran_ms: Option<i64>) {
        if let Some(ran) = ran_ms {
            let seconds = seconds(ran);
            self.job_duration
                .get_or_create(&StatusLabel {
                    status: status.to_owned(),
                })
                .observe(seconds);
            if let Some(o) = &self.otel {
                o.job_duration.record(
                    seconds,
                    &[KeyValue::new(n::GITLAB_JOB_STATUS, status.to_owned())],
                );
            }
        }
        if status == Status::Failed.as_str() {
            let reason = failure_reason.unwrap_or("unknown_failure");
            self.job_failures
                .get_or_create(&ReasonLabel {
                    failure_reason: reason.to_owned(),
                })
                .inc();
            if let Some(o) = &self.otel {
                o.job_failures.add(
                    1,
                    &[KeyValue::new(
                        n::GITLAB_JOB_FAILURE_REASON,
                        reason.to_owned(),
                    )],
                );
            }
        }
    }

    /// A pipeline run of `name` ended with `status`: its states' durations, its error.
    fn pipeline_ended(&self, name: &str, run: &RunTimes<'_>, status: &str, finished_ms: i64) {
        let reason = run.failure_reason;
        let result = result_of(status, reason).unwrap_or("failure");
        let error_type = if matches!(result, "failure" | "error" | "timeout") {
            reason.unwrap_or("_OTHER")
        } else {
            ""
        };
        let started = run.started_at.filter(|s| *s <= finished_ms);
        let pending_end = started.unwrap_or(finished_ms);
        // The result goes on the state it was reached in: `executing` when the run
        // started, else `pending` (a run canceled or failed before any job ran).
        let mut states = vec![("pending", pending_end - run.created_at, started.is_none())];
        if let Some(started) = started {
            states.push(("executing", finished_ms - started, true));
        }
        for (state, ms, with_result) in states {
            let seconds = seconds(ms);
            let (result, error) = if with_result {
                (result, error_type)
            } else {
                ("", "")
            };
            self.run_duration
                .get_or_create(&RunDurationLabels {
                    cicd_pipeline_name: name.to_owned(),
                    cicd_pipeline_run_state: state.to_owned(),
                    cicd_pipeline_result: result.to_owned(),
                    error_type: error.to_owned(),
                })
                .observe(seconds);
            if let Some(o) = &self.otel {
                let mut attributes = vec![
                    KeyValue::new(n::PIPELINE_NAME, name.to_owned()),
                    KeyValue::new(n::PIPELINE_RUN_STATE, state),
                ];
                if !result.is_empty() {
                    attributes.push(KeyValue::new(n::PIPELINE_RESULT, result));
                }
                if !error.is_empty() {
                    attributes.push(KeyValue::new(n::ERROR_TYPE, error.to_owned()));
                }
                o.run_duration.record(seconds, &attributes);
            }
        }
        if !error_type.is_empty() {
            self.run_errors
                .get_or_create(&RunErrorLabels {
                    cicd_pipeline_name: name.to_owned(),
                    error_type: error_type.to_owned(),
                })
                .inc();
            if let Some(o) = &self.otel {
                o.run_errors.add(
                    1,
                    &[
                        KeyValue::new(n::PIPELINE_NAME, name.to_owned()),
                        KeyValue::new(n::ERROR_TYPE, error_type.to_owned()),
                    ],
                );
            }
        }
    }

    /// Registers the event metrics (counters and histograms kept since start).
    fn register_events(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "cicd_pipeline_run_duration",
            "Duration of each state of a finished pipeline run (cicd.pipeline.run.duration)",
            Unit::Seconds,
            self.run_duration.clone(),
        );
        registry.register(
            "cicd_pipeline_run_errors",
            "Pipeline runs that failed (cicd.pipeline.run.errors)",
            self.run_errors.clone(),
        );
        registry.register(
            "cicd_system_errors",
            "Errors of the coordinator itself, not of jobs (cicd.system.errors)",
            self.system_errors.clone(),
        );
        registry.register_with_unit(
            "gantry_job_queue_duration",
            "A job's wait in the queue, pending to handed to a runner",
            Unit::Seconds,
            self.queue_duration.clone(),
        );
        registry.register_with_unit(
            "gantry_job_duration",
            "A finished job's run, started to finished, by status",
            Unit::Seconds,
            self.job_duration.clone(),
        );
        registry.register(
            "gantry_job_failures",
            "Jobs that failed, by failure reason",
            self.job_failures.clone(),
        );
    }

    fn set_gauges(&self, gauges: Gauges) {
        if let Ok(mut g) = self.gauges.lock() {
            *g = gauges;
        }
    }
}

/// What a finished pipeline run's metrics need of it.
struct RunTimes<'a> {
    created_at: i64,
    started_at: Option<i64>,
    failure_reason: Option<&'a str>,
}

/// Milliseconds as seconds (negative: 0).
fn seconds(ms: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let s = ms.max(0) as f64 / 1000.0;
    s
}

fn instruments(meters: &Meters, gauges: &Arc<Mutex<Gauges>>) -> Instruments {
    let meter = meters.meter();
    let duration = |name: &'static str, what: &'static str| {
        meter
            .f64_histogram(name)
            .with_unit("s")
            .with_description(what)
            .with_boundaries(DURATION_BUCKETS.to_vec())
            .build()
    };
    let runs = Arc::clone(gauges);
    let workers = Arc::clone(gauges);
    Instruments {
        run_duration: duration(
            metric::PIPELINE_RUN_DURATION,
            "Duration of a pipeline run, by state and result",
        ),
        run_errors: meter
            .u64_counter(metric::PIPELINE_RUN_ERRORS)
            .with_unit("{error}")
            .with_description("Pipeline runs that failed")
            .build(),
        system_errors: meter
            .u64_counter(metric::SYSTEM_ERRORS)
            .with_unit("{error}")
            .with_description("Errors of the coordinator itself")
            .build(),
        queue_duration: duration(
            metric::JOB_QUEUE_DURATION,
            "A job's wait in the queue, pending to handed to a runner",
        ),
        job_duration: duration(metric::JOB_DURATION, "A finished job's run, by status"),
        job_failures: meter
            .u64_counter(metric::JOB_FAILURES)
            .with_unit("{job}")
            .with_description("Jobs that failed, by failure reason")
            .build(),
        _observed: vec![
            meter
                .i64_observable_gauge(metric::PIPELINE_RUN_ACTIVE)
                .with_unit("{run}")
                .with_description("Pipeline runs not finished, by state")
                .with_callback(move |o| {
                    if let Ok(g) = runs.lock() {
                        for ((name, state), count) in &g.runs {
                            o.observe(
                                *count,
                                &[
                                    KeyValue::new(n::PIPELINE_NAME, name.clone()),
                                    KeyValue::new(n::PIPELINE_RUN_STATE, *state),
                                ],
                            );
                        }
                    }
                })
                .build(),
            meter
                .i64_observable_gauge(metric::WORKER_COUNT)
                .with_unit("{worker}")
                .with_description("Runners, by state")
                .with_callback(move |o| {
                    if let Ok(g) = workers.lock() {
                        for (state, count) in g.workers {
                            o.observe(count, &[KeyValue::new(n::WORKER_STATE, state)]);
                        }
                    }
                })
                .build(),
        ],
    }
}

/// The conventions' run state of an unfinished pipeline status.
fn run_state(status: &str) -> &'static str {
    match status {
        "running" => "executing",
        "canceling" => "finalizing",
        _ => "pending",
    }
}

/// The `Content-Type` of [`Coordinator::metrics_text`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Coordinator {
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// An HTTP answer with a server error status (`http/mod.rs`).
    pub fn count_server_error(&self, status: u16) {
        self.metrics()
            .system_error("controller", &status.to_string());
    }

    /// The metrics a stored decision makes (beside its spans, `telemetry.rs`): each job
    /// it ended, and the pipeline when it ended. `loaded` is the pipeline as it was
    /// before `change`. O(jobs in `change`).
    pub(crate) fn observe_decision(&self, loaded: &Loaded, change: &PipelineChange, now_ms: i64) {
        let ended = change
            .jobs
            .iter()
            .filter(|u| u.status.is_completed())
            .filter_map(|u| Some((u, loaded.row(loaded.job_id(u.id)?)?)))
            .filter(|(_, row)| !row.status.is_completed());
        for (update, row) in ended {
            self.observe_job_end(update, row, now_ms);
        }
        if change.status.is_completed() && !loaded.pipeline.status.is_completed() {
            let mut pipeline = loaded.pipeline.clone();
            pipeline.started_at = change.started_at.or(pipeline.started_at);
            self.observe_pipeline_end(
                &pipeline,
                change.status,
                change.finished_at.unwrap_or(now_ms),
            );
        }
    }

    fn observe_job_end(&self, update: &JobUpdate, row: &Job, now_ms: i64) {
        let finished = update.finished_at.or(row.finished_at).unwrap_or(now_ms);
        let started = update.started_at.or(row.started_at);
        self.metrics().job_ended(
            update.status.as_str(),
            update.failure_reason.as_deref(),
            started.map(|s| finished - s),
        );
    }

    /// A pipeline that ended: at creation (a configuration error) or by a decision.
    pub(crate) fn observe_pipeline_end(
        &self,
        pipeline: &Pipeline,
        status: crate::processor::Status,
        finished_ms: i64,
    ) {
        let project = self.facts().project_name(pipeline.project_id);
        let name = if project.is_empty() {
            pipeline.project_id.to_string()
        } else {
            full_path(&project)
        };
        let run = RunTimes {
            created_at: pipeline.created_at,
            started_at: pipeline.started_at,
            failure_reason: pipeline.failure_reason.as_deref(),
        };
        self.metrics()
            .pipeline_ended(&name, &run, status.as_str(), finished_ms);
    }

    /// The gauges as the store has them now: four grouped queries.
    pub(crate) async fn read_gauges(&self) -> Result<Gauges, CoordinatorError> {
        let store = &self.inner.store;
        let jobs = store.active_job_counts().await?;
        let online = store
            .runners_contacted_since(now_ms() - ONLINE_WINDOW_MS)
            .await?;
        let total = store.runner_count().await?;
        let busy = i64::try_from(store.running_jobs_by_runner().await?.len()).unwrap_or(i64::MAX);
        let busy = busy.min(online);
        let mut runs: HashMap<(String, &'static str), i64> = HashMap::new();
        for (project_id, status, count) in store.active_pipeline_counts().await? {
            let name = match self.facts().project(project_id).await {
                Ok(p) => full_path(&p.name),
                Err(_) => project_id.to_string(),
            };
            *runs.entry((name, run_state(&status))).or_insert(0) += count;
        }
        let mut runs: Vec<_> = runs.into_iter().collect();
        runs.sort();
        Ok(Gauges {
            runs,
            workers: [
                ("available", online - busy),
                ("busy", busy),
                ("offline", (total - online).max(0)),
            ],
            jobs: ACTIVE_JOB_STATUSES
                .iter()
                .map(|s| {
                    let count = jobs.iter().find(|(j, _)| j == s).map_or(0, |(_, n)| *n);
                    (*s, count)
                })
                .collect(),
            online,
        })
    }

    /// Reads the gauges into the OTLP export's snapshot (the timer loop, every
    /// [`GAUGE_REFRESH_TICKS`]); nothing when OTLP is off.
    pub(crate) async fn refresh_exported_gauges(&self) {
        if !self.metrics().exports_otlp() {
            return;
        }
        match self.read_gauges().await {
            Ok(gauges) => self.metrics().set_gauges(gauges),
            Err(e) => {
                eprintln!("gantry server: failed to read the metrics' gauges: {e}");
                self.metrics().system_error("scheduler", "metrics");
            }
        }
    }

    /// The metrics in Prometheus' text format (OpenMetrics); four queries on the store.
    pub async fn metrics_text(&self) -> Result<String, CoordinatorError> {
        let gauges = self.read_gauges().await?;
        let metrics = self.metrics();
        let mut registry = Registry::default();
        let build = Family::<VersionLabel, Gauge>::default();
        build
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        registry.register("gantry_build_info", "This binary", build);
        let by_status = Family::<StatusLabel, Gauge>::default();
        for (status, count) in &gauges.jobs {
            by_status
                .get_or_create(&StatusLabel {
                    status: (*status).to_owned(),
                })
                .set(*count);
        }
        registry.register("gantry_jobs", "Jobs not finished, by status", by_status);
        let runners = Gauge::<i64>::default();
        runners.set(gauges.online);
        registry.register(
            "gantry_runners_online",
            "Runners that asked for jobs in the last 2 hours",
            runners,
        );
        let requests = Family::<ResultLabel, Counter>::default();
        for (result, counter) in [
            ("job", &metrics.requests_with_job),
            ("none", &metrics.requests_without_job),
        ] {
            requests
                .get_or_create(&ResultLabel {
                    result: result.to_owned(),
                })
                .inc_by(counter.load(Ordering::Relaxed));
        }
        registry.register(
            "gantry_job_requests",
            "Job requests answered by this process, with a job or without",
            requests,
        );
        let created = Counter::<u64>::default();
        created.inc_by(metrics.pipelines_created.load(Ordering::Relaxed));
        registry.register(
            "gantry_pipelines_created",
            "Pipelines created by this process",
            created,
        );
        let finished = Family::<StatusLabel, Counter>::default();
        for (status, counter) in FINISHED.iter().zip(&metrics.finished) {
            finished
                .get_or_create(&StatusLabel {
                    status: status.as_str().to_owned(),
                })
                .inc_by(counter.load(Ordering::Relaxed));
        }
        registry.register(
            "gantry_jobs_finished",
            "Jobs whose end this process decided, by final status",
            finished,
        );
        let active = Family::<RunActiveLabels, Gauge>::default();
        for ((name, state), count) in &gauges.runs {
            active
                .get_or_create(&RunActiveLabels {
                    cicd_pipeline_name: name.clone(),
                    cicd_pipeline_run_state: (*state).to_owned(),
                })
                .set(*count);
        }
        registry.register(
            "cicd_pipeline_run_active",
            "Pipeline runs not finished, by state (cicd.pipeline.run.active)",
            active,
        );
        let workers = Family::<WorkerLabels, Gauge>::default();
        for (state, count) in gauges.workers {
            workers
                .get_or_create(&WorkerLabels {
                    cicd_worker_state: state.to_owned(),
                })
                .set(count);
        }
        registry.register(
            "cicd_worker_count",
            "Runners, by state (cicd.worker.count)",
            workers,
        );
        metrics.register_events(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).map_err(|e| {
            CoordinatorError::Io(std::io::Error::other(format!("encode the metrics: {e}")))
        })?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register_events(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        text
    }

    #[test]
    fn system_errors_and_queue_waits_are_counted_in_the_conventions_names() {
        let metrics = Metrics::default();
        metrics.system_error("controller", "500");
        metrics.system_error("controller", "500");
        metrics.system_error("scheduler", "timers");
        metrics.job_picked(1_500);
        metrics.job_picked(-3); // a clock step: counted as no wait
        let text = text(&metrics);
        for needle in [
            "cicd_system_errors_total{cicd_system_component=\"controller\",error_type=\"500\"} 2",
            "cicd_system_errors_total{cicd_system_component=\"scheduler\",error_type=\"timers\"} 1",
            "gantry_job_queue_duration_seconds_count 2",
            "gantry_job_queue_duration_seconds_sum 1.5",
            "gantry_job_queue_duration_seconds_bucket{le=\"0.1\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle:?}:\n{text}");
        }
    }

    #[test]
    fn a_run_that_never_started_has_its_result_on_pending() {
        let metrics = Metrics::default();
        let run = RunTimes {
            created_at: 1_000,
            started_at: None,
            failure_reason: Some("config_error"),
        };
        metrics.pipeline_ended("g/p", &run, "failed", 3_000);
        let text = text(&metrics);
        for needle in [
            "cicd_pipeline_run_duration_seconds_sum{cicd_pipeline_name=\"g/p\",cicd_pipeline_run_state=\"pending\",cicd_pipeline_result=\"failure\",error_type=\"config_error\"} 2.0",
            "cicd_pipeline_run_errors_total{cicd_pipeline_name=\"g/p\",error_type=\"config_error\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle:?}:\n{text}");
        }
        assert!(!text.contains("run_state=\"executing\""), "{text}");
    }
}
