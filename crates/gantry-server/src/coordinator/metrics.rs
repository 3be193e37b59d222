//! The coordinator's Prometheus metrics (`GET /-/metrics`, see `http/metrics.rs`): the
//! queue and the fleet of runners as the store has them now, read at each scrape, and
//! this process's counters.
//!
//! The counters are bumped where the events happen: `request_job_with` (job requests),
//! `create_at` (pipelines) and `after_change` (jobs finished).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `gantry_jobs` | gauge | `status` | jobs not finished yet: `created`, `waiting_for_resource`, `preparing`, `pending` (the queue), `running`, `canceling` |
//! | `gantry_runners_online` | gauge | | runners that asked for jobs in the last 2 hours (GitLab's "online") |
//! | `gantry_job_requests_total` | counter | `result` (`job`, `none`) | job requests answered by this process, with a job or without |
//! | `gantry_pipelines_created_total` | counter | | pipelines this process created |
//! | `gantry_jobs_finished_total` | counter | `status` (`success`, `failed`, `canceled`, `skipped`) | jobs whose end this process decided |
//! | `gantry_build_info` | gauge (1) | `version` | this binary |

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Coordinator;
use super::error::CoordinatorError;
use super::time::now_ms;

/// GitLab counts a runner online when it made contact within the last 2 hours.
pub(crate) const ONLINE_WINDOW_MS: i64 = 2 * 60 * 60 * 1000;

/// The statuses a job ends in, as `gantry_jobs_finished_total` labels them.
const FINISHED: [crate::processor::Status; 4] = [
    crate::processor::Status::Success,
    crate::processor::Status::Failed,
    crate::processor::Status::Canceled,
    crate::processor::Status::Skipped,
];

/// What this process counted since it started.
#[derive(Debug, Default)]
pub(super) struct Counters {
    requests_with_job: AtomicU64,
    requests_without_job: AtomicU64,
    pipelines_created: AtomicU64,
    /// By the index of the status in [`FINISHED`].
    finished: [AtomicU64; 4],
}

impl Counters {
    pub(super) fn job_request(&self, handed_a_job: bool) {
        let counter = if handed_a_job {
            &self.requests_with_job
        } else {
            &self.requests_without_job
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn pipeline_created(&self) {
        self.pipelines_created.fetch_add(1, Ordering::Relaxed);
    }

    /// A job went from `from` to `to`: counted when that ended it.
    pub(super) fn job_changed(
        &self,
        from: Option<crate::processor::Status>,
        to: crate::processor::Status,
    ) {
        if from.is_some_and(|from| !from.is_completed())
            && let Some(index) = FINISHED.iter().position(|s| *s == to)
        {
            self.finished[index].fetch_add(1, Ordering::Relaxed);
        }
    }
}

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

/// The `Content-Type` of [`Coordinator::metrics_text`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Coordinator {
    /// The metrics in Prometheus' text format (OpenMetrics); two queries on the store.
    pub async fn metrics_text(&self) -> Result<String, CoordinatorError> {
        let store = &self.inner.store;
        let jobs = store.active_job_counts().await?;
        let online = store
            .runners_contacted_since(now_ms() - ONLINE_WINDOW_MS)
            .await?;
        let mut registry = Registry::default();
        let build = Family::<VersionLabel, Gauge>::default();
        build
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION").to_owned(),
            })
            .set(1);
        registry.register("gantry_build_info", "This binary", build);
        let by_status = Family::<StatusLabel, Gauge>::default();
        for status in [
            "created",
            "waiting_for_resource",
            "preparing",
            "pending",
            "running",
            "canceling",
        ] {
            let count = jobs
                .iter()
                .find(|(s, _)| s == status)
                .map_or(0, |(_, n)| *n);
            by_status
                .get_or_create(&StatusLabel {
                    status: status.to_owned(),
                })
                .set(count);
        }
        registry.register("gantry_jobs", "Jobs not finished, by status", by_status);
        let runners = Gauge::<i64>::default();
        runners.set(online);
        registry.register(
            "gantry_runners_online",
            "Runners that asked for jobs in the last 2 hours",
            runners,
        );
        let counters = &self.inner.counters;
        let requests = Family::<ResultLabel, Counter>::default();
        for (result, counter) in [
            ("job", &counters.requests_with_job),
            ("none", &counters.requests_without_job),
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
        created.inc_by(counters.pipelines_created.load(Ordering::Relaxed));
        registry.register(
            "gantry_pipelines_created",
            "Pipelines created by this process",
            created,
        );
        let finished = Family::<StatusLabel, Counter>::default();
        for (status, counter) in FINISHED.iter().zip(&counters.finished) {
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
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).map_err(|e| {
            CoordinatorError::Io(std::io::Error::other(format!("encode the metrics: {e}")))
        })?;
        Ok(text)
    }
}
