//! What a job reports about itself to whoever runs it (the poll loop prints these).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::JobEnding;

/// Something worth telling the runner's operator about a job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobEvent {
    /// The job started (accepted by the coordinator).
    Started {
        /// Job id.
        job_id: i64,
        /// `$CI_PROJECT_DIR`.
        project_dir: String,
    },
    /// The coordinator could not be reached (or answered with a server error); the job
    /// keeps running, the trace is kept, and the call is retried.
    CoordinatorUnreachable {
        /// Job id.
        job_id: i64,
        /// What failed.
        error: String,
        /// When the next attempt is.
        retry_in: Duration,
    },
    /// The coordinator answers again after an outage.
    CoordinatorBack {
        /// Job id.
        job_id: i64,
        /// How long it was away.
        after: Duration,
    },
    /// A line the custom executor's `cleanup_exec` printed (gitlab-runner writes them
    /// to its own log: stdout at debug, stderr at warning level).
    DriverCleanup {
        /// Job id.
        job_id: i64,
        /// `stdout` or `stderr`.
        stream: String,
        /// The line.
        line: String,
    },
    /// The job ended.
    Finished {
        /// Job id.
        job_id: i64,
        /// How.
        ending: JobEnding,
        /// Whether the coordinator has the final status.
        delivery: Delivery,
        /// What the job used (`None`: its executor does not measure).
        resources: Option<gantry_protocol::JobResources>,
    },
}

impl fmt::Display for JobEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Started {
                job_id,
                project_dir,
            } => write!(f, "job {job_id}: started in {project_dir}"),
            Self::CoordinatorUnreachable {
                job_id,
                error,
                retry_in,
            } => write!(
                f,
                "job {job_id}: the coordinator is unreachable ({error}); the job keeps running, its log is kept, retrying in {:.1}s",
                retry_in.as_secs_f64()
            ),
            Self::CoordinatorBack { job_id, after } => write!(
                f,
                "job {job_id}: the coordinator answers again after {:.1}s",
                after.as_secs_f64()
            ),
            Self::DriverCleanup {
                job_id,
                stream,
                line,
            } => write!(f, "job {job_id}: cleanup_exec ({stream}): {line}"),
            Self::Finished {
                job_id,
                ending,
                delivery,
                ..
            } => {
                write!(f, "job {job_id}: {ending}; final status {delivery}")
            }
        }
    }
}

/// What became of the final update (§4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// `200`: the coordinator has the final status and the whole trace.
    Accepted,
    /// `403` / `Job-Status: canceled|failed`: the coordinator had already ended the job.
    Refused,
    /// Nothing sent: the coordinator aborted the job (or never accepted it).
    NotSent,
    /// Retries exhausted; the coordinator will time the job out.
    GaveUp {
        /// The last problem.
        last_error: String,
    },
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Accepted => f.write_str("delivered"),
            Self::Refused => {
                f.write_str("refused by the coordinator (the job had already ended there)")
            }
            Self::NotSent => f.write_str("not sent (aborted by the coordinator)"),
            Self::GaveUp { last_error } => write!(f, "not delivered after retries: {last_error}"),
        }
    }
}

/// Where a job's events go.
pub type JobEvents = Arc<dyn Fn(JobEvent) + Send + Sync>;

/// An event sink that drops everything.
pub fn ignore_events() -> JobEvents {
    Arc::new(|_| {})
}
