//! The runner's Prometheus metrics: what `gantry runner run` serves at `GET /metrics` on
//! `listen_address`, under gitlab-runner's metric names so its dashboards and alerts keep
//! working. They are derived from the poll loop's events ([`RunnerMetrics::observe`]),
//! so the loop itself knows nothing about them.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `gitlab_runner_version_info` | gauge (1) | `name`, `version`, `revision`, `os`, `architecture` | this binary |
//! | `gitlab_runner_concurrent` | gauge | | `concurrent` in force |
//! | `gitlab_runner_jobs` | gauge | `runner` | jobs running now (gitlab-runner adds `state`/`stage` labels; Gantry does not) |
//! | `gantry_runner_jobs_received_total` | counter | `runner` | jobs received (gitlab-runner's `gitlab_runner_jobs_total`, renamed: OpenMetrics forbids a counter and a gauge of one base name) |
//! | `gitlab_runner_failed_jobs_total` | counter | `runner`, `failure_reason` | jobs that ended failed |
//! | `gitlab_runner_job_duration_seconds` | histogram | `runner` | how long jobs ran, received to reported |
//! | `gitlab_runner_errors_total` | counter | `level` (`warning`, `error`) | problems the runner logged |
//! | `gantry_runner_job_request_failures_total` | counter | `runner` | job requests that failed (the entry backs off) |
//! | `gitlab_runner_api_request_statuses_total` | counter | `runner`, `endpoint`, `status` | requests to the coordinator by endpoint (`request_job`, `update_job`, `patch_trace`, `upload_artifacts`, `download_artifacts`, `verify_runner`, …) and HTTP status (`error`: no answer), fed by [`RunnerMetrics::observe_api`] |
//! | `gantry_runner_job_cpu_seconds_total` | counter | `runner`, `mode` (`user`, `system`) | CPU time of finished jobs ([`crate::resources`]; executors that measure) |
//! | `gantry_runner_job_io_bytes_total` | counter | `runner`, `direction` (`read`, `written`) | storage bytes of finished jobs |
//! | `gantry_runner_job_peak_memory_bytes` | histogram | `runner` | each finished job's peak memory |
//! | `gantry_runner_capacity_limit` | gauge | | job slots (`concurrent`); OpenTelemetry `gantry.runner.capacity.limit` |
//! | `gantry_runner_capacity_usage` | gauge | | job slots in use (jobs running, every entry); `gantry.runner.capacity.usage` |
//! | `cicd_system_errors_total` | counter | `cicd_system_component` (`agent`), `error_type` (a system failure reason of a job: `runner_system_failure`, `runner_unsupported`; `request_failed`: a job request failed) | the runner's own errors, not the jobs' (`cicd.system.errors`) |
//!
//! With an OTLP endpoint ([`RunnerMetrics::with_meters`]) the capacity gauges and
//! `cicd.system.errors` are exported over OTLP too, under their OpenTelemetry names.
//!
//! `runner` is the entry's `name`, else its short token, as in the log.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use gantry_telemetry::KeyValue;
use gantry_telemetry::metrics::{Counter as OtelCounter, Meters, ObservableGauge};
use gantry_telemetry::names::{self as n, metric};

use crate::job::JobEvent;
use crate::poll::{Level, PollEvent};

/// gitlab-runner's buckets for `gitlab_runner_job_duration_seconds` (seconds).
const DURATION_BUCKETS: [f64; 9] = [
    30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 10800.0, 18000.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunnerLabel {
    runner: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailedLabels {
    runner: String,
    failure_reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    runner: String,
    endpoint: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CpuLabels {
    runner: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IoLabels {
    runner: String,
    direction: String,
}

/// Buckets of `gantry_runner_job_peak_memory_bytes`: 16 MiB × 2ⁿ up to 64 GiB.
fn memory_buckets() -> impl Iterator<Item = f64> {
    (0..13).map(|n| f64::from(16u32 << 20) * f64::from(1u32 << n))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabel {
    level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    name: String,
    version: String,
    revision: String,
    os: String,
    architecture: String,
}

type DurationFamily = Family<RunnerLabel, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SystemErrorLabels {
    cicd_system_component: String,
    error_type: String,
}

/// The OTLP side (see the module docs).
struct Instruments {
    system_errors: OtelCounter<u64>,
    /// Kept so their callbacks stay registered.
    _observed: Vec<ObservableGauge<i64>>,
}

/// A runner process's metrics (see the module docs).
pub struct RunnerMetrics {
    registry: Registry,
    concurrent: Gauge,
    jobs: Family<RunnerLabel, Gauge>,
    jobs_total: Family<RunnerLabel, Counter>,
    failed: Family<FailedLabels, Counter>,
    duration: DurationFamily,
    errors: Family<LevelLabel, Counter>,
    request_failures: Family<RunnerLabel, Counter>,
    api_requests: Family<ApiLabels, Counter>,
    cpu: Family<CpuLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    io: Family<IoLabels, Counter>,
    peak_memory: DurationFamily,
    capacity_usage: Gauge,
    system_errors: Family<SystemErrorLabels, Counter>,
    otel: Option<Instruments>,
    /// When each running job was received, by id.
    started: Mutex<HashMap<i64, Instant>>,
}

impl Default for RunnerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RunnerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerMetrics").finish_non_exhaustive()
    }
}

impl RunnerMetrics {
    /// Every metric registered, at zero; Prometheus text only.
    pub fn new() -> Self {
        Self::with_meters(None)
    }

    /// [`RunnerMetrics::new`], with the capacity and the system errors also exported
    /// through `meters` (OTLP) when given.
    pub fn with_meters(meters: Option<&Meters>) -> Self {
        let mut registry = Registry::default();
        let version = Family::<VersionLabels, Gauge>::default();
        version
            .get_or_create(&VersionLabels {
                name: "gantry-runner".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                revision: option_env!("GANTRY_REVISION")
                    .unwrap_or("unknown")
                    .to_owned(),
                os: std::env::consts::OS.to_owned(),
                architecture: std::env::consts::ARCH.to_owned(),
            })
            .set(1);
        registry.register(
            "gitlab_runner_version_info",
            "A metric with a constant '1' value labeled by different build stats fields.",
            version,
        );
        let concurrent = Gauge::default();
        registry.register(
            "gitlab_runner_concurrent",
            "The current value of concurrent setting",
            concurrent.clone(),
        );
        let jobs = Family::<RunnerLabel, Gauge>::default();
        registry.register(
            "gitlab_runner_jobs",
            "The current number of running builds.",
            jobs.clone(),
        );
        let jobs_total = Family::<RunnerLabel, Counter>::default();
        // prometheus-client adds the `_total` suffix of a counter.
        registry.register(
            "gantry_runner_jobs_received",
            "Total number of handled jobs",
            jobs_total.clone(),
        );
        let failed = Family::<FailedLabels, Counter>::default();
        registry.register(
            "gitlab_runner_failed_jobs",
            "Total number of failed jobs",
            failed.clone(),
        );
        let duration: DurationFamily =
            Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS.iter().copied()));
        registry.register(
            "gitlab_runner_job_duration_seconds",
            "Histogram of job durations",
            duration.clone(),
        );
        let errors = Family::<LevelLabel, Counter>::default();
        registry.register(
            "gitlab_runner_errors",
            "The number of caught errors.",
            errors.clone(),
        );
        let request_failures = Family::<RunnerLabel, Counter>::default();
        registry.register(
            "gantry_runner_job_request_failures",
            "Job requests that failed; the entry backs off before asking again",
            request_failures.clone(),
        );
        let api_requests = Family::<ApiLabels, Counter>::default();
        registry.register(
            "gitlab_runner_api_request_statuses",
            "The number of API requests to the coordinator, by endpoint and status",
            api_requests.clone(),
        );
        let cpu = Family::<CpuLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "gantry_runner_job_cpu_seconds",
            "CPU time of finished jobs, by mode",
            cpu.clone(),
        );
        let io = Family::<IoLabels, Counter>::default();
        registry.register(
            "gantry_runner_job_io_bytes",
            "Storage bytes read and written by finished jobs",
            io.clone(),
        );
        let peak_memory: DurationFamily =
            Family::new_with_constructor(|| Histogram::new(memory_buckets()));
        registry.register(
            "gantry_runner_job_peak_memory_bytes",
            "Peak memory of finished jobs",
            peak_memory.clone(),
        );
        registry.register(
            "gantry_runner_capacity_limit",
            "Job slots: the concurrent setting (gantry.runner.capacity.limit)",
            concurrent.clone(),
        );
        let capacity_usage = Gauge::default();
        registry.register(
            "gantry_runner_capacity_usage",
            "Job slots in use: jobs running (gantry.runner.capacity.usage)",
            capacity_usage.clone(),
        );
        let system_errors = Family::<SystemErrorLabels, Counter>::default();
        registry.register(
            "cicd_system_errors",
            "Errors of the runner itself, not of jobs (cicd.system.errors)",
            system_errors.clone(),
        );
        let otel = meters.map(|m| instruments(m, &concurrent, &capacity_usage));
        Self {
            capacity_usage,
            system_errors,
            otel,
            cpu,
            io,
            peak_memory,
            registry,
            concurrent,
            jobs,
            jobs_total,
            failed,
            duration,
            errors,
            request_failures,
            api_requests,
            started: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one request of entry `runner` to `endpoint`, answered with `status` (`None`:
    /// no answer). Plug it into the poll loop with `PollOptions::api_observer`.
    pub fn observe_api(&self, runner: &str, endpoint: &str, status: Option<u16>) {
        self.api_requests
            .get_or_create(&ApiLabels {
                runner: runner.to_owned(),
                endpoint: endpoint.to_owned(),
                status: status.map_or_else(|| "error".to_owned(), |s| s.to_string()),
            })
            .inc();
    }

    fn observe_resources(&self, runner: &str, used: &crate::resources::JobResources) {
        for (mode, seconds) in [
            ("user", used.cpu_user_seconds),
            ("system", used.cpu_system_seconds),
        ] {
            self.cpu
                .get_or_create(&CpuLabels {
                    runner: runner.to_owned(),
                    mode: mode.to_owned(),
                })
                .inc_by(seconds);
        }
        for (direction, bytes) in [("read", used.read_bytes), ("written", used.written_bytes)] {
            self.io
                .get_or_create(&IoLabels {
                    runner: runner.to_owned(),
                    direction: direction.to_owned(),
                })
                .inc_by(bytes);
        }
        self.peak_memory
            .get_or_create(&RunnerLabel {
                runner: runner.to_owned(),
            })
            .observe(used.peak_memory_bytes as f64);
    }

    /// Counts what `event` says happened.
    pub fn observe(&self, event: &PollEvent) {
        match event.level() {
            Level::Warn => self.count_error("warning"),
            Level::Error => self.count_error("error"),
            Level::Debug | Level::Info => {}
        }
        match event {
            PollEvent::Started { concurrent, .. } | PollEvent::Reloaded { concurrent, .. } => {
                self.concurrent
                    .set(i64::try_from(*concurrent).unwrap_or(i64::MAX));
            }
            PollEvent::JobReceived { runner, job_id, .. } => {
                let label = RunnerLabel {
                    runner: runner.clone(),
                };
                self.jobs.get_or_create(&label).inc();
                self.capacity_usage.inc();
                self.jobs_total.get_or_create(&label).inc();
                self.started
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(*job_id, Instant::now());
            }
            PollEvent::JobTakenOver { runner, job_id, .. } => {
                let label = RunnerLabel {
                    runner: runner.clone(),
                };
                self.jobs.get_or_create(&label).inc();
                self.capacity_usage.inc();
                self.started
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(*job_id, Instant::now());
            }
            PollEvent::Job {
                runner,
                event:
                    JobEvent::Finished {
                        job_id,
                        ending,
                        resources,
                        ..
                    },
            } => {
                let label = RunnerLabel {
                    runner: runner.clone(),
                };
                if let Some(used) = resources {
                    self.observe_resources(runner, used);
                }
                let started = self
                    .started
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(job_id);
                if let Some(started) = started {
                    self.jobs.get_or_create(&label).dec();
                    self.capacity_usage.dec();
                    self.duration
                        .get_or_create(&label)
                        .observe(started.elapsed().as_secs_f64());
                }
                if let Some(reason) = ending.failure_reason() {
                    self.failed
                        .get_or_create(&FailedLabels {
                            runner: runner.clone(),
                            failure_reason: reason.as_str().to_owned(),
                        })
                        .inc();
                    if n::result_of("failed", Some(reason.as_str())) == Some("error") {
                        self.system_error(reason.as_str());
                    }
                }
            }
            PollEvent::RequestFailed { runner, .. } => {
                self.request_failures
                    .get_or_create(&RunnerLabel {
                        runner: runner.clone(),
                    })
                    .inc();
                self.system_error("request_failed");
            }
            _ => {}
        }
    }

    fn system_error(&self, kind: &str) {
        self.system_errors
            .get_or_create(&SystemErrorLabels {
                cicd_system_component: "agent".to_owned(),
                error_type: kind.to_owned(),
            })
            .inc();
        if let Some(o) = &self.otel {
            o.system_errors.add(
                1,
                &[
                    KeyValue::new(n::SYSTEM_COMPONENT, "agent"),
                    KeyValue::new(n::ERROR_TYPE, kind.to_owned()),
                ],
            );
        }
    }

    fn count_error(&self, level: &str) {
        self.errors
            .get_or_create(&LevelLabel {
                level: level.to_owned(),
            })
            .inc();
    }

    /// The metrics in Prometheus' text exposition format (OpenMetrics).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

fn instruments(meters: &Meters, limit: &Gauge, usage: &Gauge) -> Instruments {
    let meter = meters.meter();
    let gauge = |name: &'static str, what: &'static str, source: Gauge| {
        meter
            .i64_observable_gauge(name)
            .with_unit("{job}")
            .with_description(what)
            .with_callback(move |o| o.observe(source.get(), &[]))
            .build()
    };
    Instruments {
        system_errors: meter
            .u64_counter(metric::SYSTEM_ERRORS)
            .with_unit("{error}")
            .with_description("Errors of the runner itself, not of jobs")
            .build(),
        _observed: vec![
            gauge(
                metric::RUNNER_CAPACITY_LIMIT,
                "Job slots (concurrent)",
                limit.clone(),
            ),
            gauge(
                metric::RUNNER_CAPACITY_USAGE,
                "Job slots in use",
                usage.clone(),
            ),
        ],
    }
}

/// The `Content-Type` of [`RunnerMetrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_requests_are_counted_by_endpoint_and_status() {
        let metrics = RunnerMetrics::new();
        metrics.observe_api("a", "request_job", Some(204));
        metrics.observe_api("a", "request_job", Some(204));
        metrics.observe_api("a", "patch_trace", None);
        let text = metrics.encode();
        for needle in [
            "gitlab_runner_api_request_statuses_total{runner=\"a\",endpoint=\"request_job\",status=\"204\"} 2",
            "gitlab_runner_api_request_statuses_total{runner=\"a\",endpoint=\"patch_trace\",status=\"error\"} 1",
        ] {
            assert!(text.contains(needle), "missing {needle:?}:\n{text}");
        }
    }

    /// Every runner metric the example Grafana dashboard queries is one the runner
    /// serves (the server's are checked by the server's tests).
    #[test]
    fn the_example_dashboard_queries_metrics_the_runner_has() {
        let dashboard = include_str!("../../../examples/grafana/gantry-cicd.json");
        let text = RunnerMetrics::new().encode();
        let mut checked = 0;
        for prefix in ["gantry_runner_", "gitlab_runner_"] {
            for (at, _) in dashboard.match_indices(prefix) {
                let rest = &dashboard[at..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..end];
                let family = ["_bucket", "_count", "_sum", "_total"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix));
                assert!(
                    text.contains(&format!("# TYPE {name} "))
                        || family.is_some_and(|f| text.contains(&format!("# TYPE {f} "))),
                    "the dashboard queries `{name}`, which the runner does not serve:\n{text}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 4, "{checked}");
    }

    #[test]
    fn failed_requests_and_logged_problems_are_counted() {
        let metrics = RunnerMetrics::new();
        for _ in 0..2 {
            metrics.observe(&PollEvent::RequestFailed {
                runner: "a".to_owned(),
                error: "reach the server: connection refused".to_owned(),
                retry_in: std::time::Duration::from_secs(1),
            });
        }
        metrics.observe(&PollEvent::ReloadRejected {
            error: "bad file".to_owned(),
        });
        let text = metrics.encode();
        for needle in [
            "gantry_runner_job_request_failures_total{runner=\"a\"} 2",
            "gitlab_runner_errors_total{level=\"warning\"} 2",
            "gitlab_runner_errors_total{level=\"error\"} 1",
            "gitlab_runner_concurrent 0",
            "cicd_system_errors_total{cicd_system_component=\"agent\",error_type=\"request_failed\"} 2",
        ] {
            assert!(text.contains(needle), "missing {needle:?}:\n{text}");
        }
    }
}
