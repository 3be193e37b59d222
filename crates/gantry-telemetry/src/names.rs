//! Span and attribute names, and GitLab's job and pipeline statuses as the conventions'
//! results.
//!
//! Names follow the OpenTelemetry CI/CD semantic conventions (v1.44.0, release
//! candidate; `spec/telemetry.md` §1): ids are strings (the conventions' type, not the
//! Collector GitLab receiver's integers), results are the conventions' values
//! ([`result_of`]), the raw GitLab status rides beside them as `gitlab.*.status`. They
//! are span attributes, not resource attributes: one tracer provider serves every
//! pipeline of a process (a provider per run, which the conventions suggest for the
//! `cicd.pipeline.run` resource, would cost a batch thread per pipeline).

use opentelemetry::trace::Status;

pub const PIPELINE_NAME: &str = "cicd.pipeline.name";
pub const PIPELINE_RUN_ID: &str = "cicd.pipeline.run.id";
pub const PIPELINE_RUN_URL: &str = "cicd.pipeline.run.url.full";
pub const PIPELINE_ACTION: &str = "cicd.pipeline.action.name";
pub const PIPELINE_RESULT: &str = "cicd.pipeline.result";
pub const TASK_NAME: &str = "cicd.pipeline.task.name";
pub const TASK_RUN_ID: &str = "cicd.pipeline.task.run.id";
pub const TASK_RUN_URL: &str = "cicd.pipeline.task.run.url.full";
pub const TASK_TYPE: &str = "cicd.pipeline.task.type";
pub const TASK_RUN_RESULT: &str = "cicd.pipeline.task.run.result";
pub const WORKER_ID: &str = "cicd.worker.id";
pub const WORKER_NAME: &str = "cicd.worker.name";
pub const SYSTEM_COMPONENT: &str = "cicd.system.component";
pub const ERROR_TYPE: &str = "error.type";
pub const VCS_PROVIDER: &str = "vcs.provider.name";
pub const VCS_REPOSITORY_URL: &str = "vcs.repository.url.full";
pub const VCS_REPOSITORY_NAME: &str = "vcs.repository.name";
pub const VCS_OWNER: &str = "vcs.owner.name";
pub const VCS_REF_NAME: &str = "vcs.ref.head.name";
pub const VCS_REF_TYPE: &str = "vcs.ref.head.type";
pub const VCS_REVISION: &str = "vcs.ref.head.revision";
pub const GITLAB_PROJECT_PATH: &str = "gitlab.project.path";
pub const GITLAB_PROJECT_ID: &str = "gitlab.project.id";
pub const GITLAB_PIPELINE_ID: &str = "gitlab.pipeline.id";
pub const GITLAB_PIPELINE_IID: &str = "gitlab.pipeline.iid";
pub const GITLAB_PIPELINE_SOURCE: &str = "gitlab.pipeline.source";
pub const GITLAB_PIPELINE_STATUS: &str = "gitlab.pipeline.status";
pub const GITLAB_JOB_ID: &str = "gitlab.job.id";
pub const GITLAB_JOB_STAGE: &str = "gitlab.job.stage";
pub const GITLAB_JOB_STATUS: &str = "gitlab.job.status";
pub const GITLAB_JOB_FAILURE_REASON: &str = "gitlab.job.failure_reason";
pub const GITLAB_JOB_ALLOW_FAILURE: &str = "gitlab.job.allow_failure";
pub const GITLAB_JOB_QUEUED_DURATION: &str = "gitlab.job.queued_duration";
pub const GITLAB_RUNNER_ID: &str = "gitlab.runner.id";
pub const GITLAB_RUNNER_EXECUTOR: &str = "gitlab.runner.executor";
pub const GITLAB_SECTION: &str = "gitlab.job.section";
/// The job's resource use at its end (Gantry's; see `gantry_runner::resources`).
pub const GANTRY_JOB_CPU_USER_SECONDS: &str = "gantry.job.cpu_user_seconds";
pub const GANTRY_JOB_CPU_SYSTEM_SECONDS: &str = "gantry.job.cpu_system_seconds";
pub const GANTRY_JOB_PEAK_MEMORY_BYTES: &str = "gantry.job.peak_memory_bytes";
pub const GANTRY_JOB_READ_BYTES: &str = "gantry.job.read_bytes";
pub const GANTRY_JOB_WRITTEN_BYTES: &str = "gantry.job.written_bytes";
pub const GITLAB_STEP_NAME: &str = "gitlab.step.name";
pub const PIPELINE_RUN_STATE: &str = "cicd.pipeline.run.state";
pub const WORKER_STATE: &str = "cicd.worker.state";

/// Metric names (OpenTelemetry's; the Prometheus text writes each with `.` as `_`, the
/// unit as a suffix (`_seconds`) and `_total` on counters, as OpenTelemetry's
/// Prometheus compatibility specification does).
pub mod metric {
    /// Histogram (s): each state (`pending`, `executing`) of a finished pipeline run.
    pub const PIPELINE_RUN_DURATION: &str = "cicd.pipeline.run.duration";
    /// Up-down counter: pipeline runs not finished, by state.
    pub const PIPELINE_RUN_ACTIVE: &str = "cicd.pipeline.run.active";
    /// Counter: pipeline runs that ended failed, by `error.type`.
    pub const PIPELINE_RUN_ERRORS: &str = "cicd.pipeline.run.errors";
    /// Counter: errors of the CI system itself, by `cicd.system.component`, `error.type`.
    pub const SYSTEM_ERRORS: &str = "cicd.system.errors";
    /// Up-down counter: runners by `cicd.worker.state` (`available`, `busy`, `offline`).
    pub const WORKER_COUNT: &str = "cicd.worker.count";
    /// Histogram (s), no convention: a job's wait in the queue, pending → picked.
    pub const JOB_QUEUE_DURATION: &str = "gantry.job.queue.duration";
    /// Histogram (s), no convention: a finished job's run, started → finished, by status.
    pub const JOB_DURATION: &str = "gantry.job.duration";
    /// Counter, no convention: jobs that failed, by `gitlab.job.failure_reason`.
    pub const JOB_FAILURES: &str = "gantry.job.failures";
    /// Up-down counters, no convention: a runner process's job slots (`concurrent`)
    /// and those in use.
    pub const RUNNER_CAPACITY_LIMIT: &str = "gantry.runner.capacity.limit";
    pub const RUNNER_CAPACITY_USAGE: &str = "gantry.runner.capacity.usage";
}

/// Failure reasons that are the CI system's fault (`error`), not the job's
/// (`failure`); timeouts are `timeout`.
const SYSTEM_FAILURES: &[&str] = &[
    "runner_system_failure",
    "runner_unsupported",
    "scheduler_failure",
    "data_integrity_failure",
    "api_failure",
    "archived_failure",
    "stale_schedule",
];

/// The conventions' result (`success`, `failure`, `error`, `timeout`, `cancellation`,
/// `skip`) of a GitLab status; `None` while it has not ended.
pub fn result_of(status: &str, failure_reason: Option<&str>) -> Option<&'static str> {
    Some(match status {
        "success" => "success",
        "failed" => match failure_reason {
            Some("job_execution_timeout" | "stuck_or_timeout_failure") => "timeout",
            Some(r) if SYSTEM_FAILURES.contains(&r) => "error",
            _ => "failure",
        },
        "canceled" | "canceling" => "cancellation",
        "skipped" => "skip",
        _ => return None,
    })
}

/// The span status of a result: `Ok` for success, an error with the failure reason for
/// a failure, an error or a timeout, unset otherwise (a cancel or a skip is no error).
pub fn status_of(result: &str, failure_reason: Option<&str>) -> Status {
    match result {
        "success" => Status::Ok,
        "failure" | "error" | "timeout" => {
            Status::error(failure_reason.unwrap_or(result).to_owned())
        }
        _ => Status::Unset,
    }
}

/// `cicd.pipeline.task.type` of a job in `stage`: the convention's `build`, `test` or
/// `deploy` when the stage is GitLab's default of that name (or `.pre`/`.post` → none).
pub fn task_type(stage: &str) -> Option<&'static str> {
    match stage {
        "build" => Some("build"),
        "test" => Some("test"),
        "deploy" => Some("deploy"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_statuses_map_to_convention_results() {
        assert_eq!(result_of("success", None), Some("success"));
        assert_eq!(result_of("failed", Some("script_failure")), Some("failure"));
        assert_eq!(
            result_of("failed", Some("runner_system_failure")),
            Some("error")
        );
        assert_eq!(
            result_of("failed", Some("job_execution_timeout")),
            Some("timeout")
        );
        assert_eq!(result_of("canceled", None), Some("cancellation"));
        assert_eq!(result_of("skipped", None), Some("skip"));
        assert_eq!(result_of("running", None), None);
        assert_eq!(status_of("success", None), Status::Ok);
        assert_eq!(
            status_of("failure", Some("script_failure")),
            Status::error("script_failure")
        );
        assert_eq!(status_of("cancellation", None), Status::Unset);
    }
}
