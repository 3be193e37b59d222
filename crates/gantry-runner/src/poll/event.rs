//! What the poll loop tells its operator. The binary prints these on stderr, filtered
//! by `log_level`; tests collect them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::job::{JobEvent, JobReport};
use crate::level::Level;

/// Something the poll loop did or saw.
#[derive(Debug, Clone)]
pub enum PollEvent {
    /// Polling started.
    Started {
        /// `[[runners]]` entries polled.
        runners: usize,
        /// `concurrent`.
        concurrent: usize,
    },
    /// A job request failed; the entry waits before asking again.
    RequestFailed {
        /// The entry (`name` or short token).
        runner: String,
        /// What failed, and what to do about it.
        error: String,
        /// When the entry asks again.
        retry_in: Duration,
    },
    /// `unhealthy_requests_limit` job requests failed in a row: the entry asks no more
    /// for `disabled_for` (`unhealthy_interval`), then counts again.
    RunnerUnhealthy {
        /// The entry.
        runner: String,
        /// The failures in a row.
        failures: u32,
        /// How long it asks no more.
        disabled_for: Duration,
    },
    /// A job request was answered `409` (another runner won the race); asked again
    /// after `check_interval`.
    RequestConflict {
        /// The entry.
        runner: String,
    },
    /// A job was assigned but its payload cannot be decoded; it is reported as failed
    /// when its id and token can be read.
    UndecodableJob {
        /// The entry.
        runner: String,
        /// The job id, if readable.
        job_id: Option<i64>,
        /// What is wrong, naming the JSON path.
        error: String,
    },
    /// A job was received and is starting.
    JobReceived {
        /// The entry.
        runner: String,
        /// Job id.
        job_id: i64,
        /// `job_info.name`.
        job_name: String,
        /// `CI_CONCURRENT_ID`.
        concurrent_id: usize,
    },
    /// Something about a running job.
    Job {
        /// The entry.
        runner: String,
        /// What.
        event: JobEvent,
    },
    /// No new jobs are taken (SIGQUIT, or `max_jobs` reached); running jobs finish.
    StopTakingJobs {
        /// Jobs still running.
        running: usize,
        /// Job requests in flight (a job they bring is run).
        requesting: usize,
    },
    /// Running jobs are being interrupted (SIGTERM/SIGINT).
    Interrupting {
        /// Jobs being interrupted.
        running: usize,
        /// How long they have to finish (`shutdown_timeout`).
        timeout: Duration,
    },
    /// `shutdown_timeout` passed with jobs still running; they are killed without a
    /// final update.
    ShutdownTimeout {
        /// Jobs abandoned.
        abandoned: usize,
    },
    /// A second interrupt: stop now.
    Forced {
        /// Jobs killed.
        killed: usize,
    },
    /// A new configuration is in effect.
    Reloaded {
        /// Entries now polled.
        runners: usize,
        /// `concurrent` now.
        concurrent: usize,
    },
    /// A new configuration was refused; the old one stays.
    ReloadRejected {
        /// Why.
        error: String,
    },
    /// Before polling: what a previous run of a Docker entry left behind was removed
    /// (or could not be).
    DockerLeftovers {
        /// The entry.
        runner: String,
        /// What was removed, or why the engine could not be asked.
        result: Result<crate::executor::docker::Removed, String>,
    },
    /// Before polling: a job a previous runner process was running when it died
    /// ([`crate::journal`]): its processes still running were killed, and the coordinator
    /// was told (or could not be).
    LostJob {
        /// The entry of the job's coordinator (its URL when no entry has it any more).
        runner: String,
        /// The job id.
        job_id: i64,
        /// Process groups of the job that still ran, killed.
        killed: usize,
        /// Why a job this process began to take over could not go on (its Docker
        /// build container is gone).
        why: Option<String>,
        /// The custom executor's `cleanup_exec`, run in the environment the job's
        /// `prepare_exec` had begun to make (`None`: there was none to clean up).
        cleanup: Option<Result<(), String>>,
        /// What the coordinator did, or why it could not be told.
        result: Result<crate::journal::LostJobEnd, String>,
    },
    /// A job a runner process that died left running in a detached script stage, taken
    /// over by this one (`crate::executor::shell::detached`).
    JobTakenOver {
        /// The entry.
        runner: String,
        /// The job id.
        job_id: i64,
        /// Where the job stood (`its step_script still runs`, …).
        found: String,
    },
    /// The runner hands its jobs over to the next runner process (SIGUSR2): it takes
    /// no new jobs and stops once every running job is in a detached stage.
    HandingOver {
        /// Jobs running now.
        running: usize,
    },
    /// The runner stops, leaving these jobs' detached stages running for the next
    /// runner process to take over.
    HandedOver {
        /// Jobs left.
        jobs: usize,
    },
    /// A line the `cleanup_exec` of a lost job printed.
    LostJobCleanupLine {
        /// The entry.
        runner: String,
        /// The job id.
        job_id: i64,
        /// `stdout` or `stderr`.
        stream: String,
        /// The line.
        line: String,
    },
    /// A file in the journal directory that is not a readable job record (left in place).
    LostJobUnreadable {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        error: String,
    },
    /// A job could not be recorded in the journal: it runs, but a crash of this process
    /// would leave it `running` on the coordinator.
    JournalFailed {
        /// The entry.
        runner: String,
        /// The job id.
        job_id: i64,
        /// Why.
        error: String,
    },
    /// The fleet of an `instance` entry (its plugin's log, scaling decisions).
    Fleet {
        /// The entry.
        runner: String,
        /// How important.
        level: Level,
        /// What happened.
        message: String,
    },
    /// Polling ended.
    Stopped {
        /// Jobs run.
        jobs: usize,
    },
}

impl PollEvent {
    /// How important it is.
    pub fn level(&self) -> Level {
        match self {
            Self::RequestConflict { .. } => Level::Debug,
            Self::Started { .. }
            | Self::JobReceived { .. }
            | Self::StopTakingJobs { .. }
            | Self::Reloaded { .. }
            | Self::HandingOver { .. }
            | Self::HandedOver { .. }
            | Self::Stopped { .. } => Level::Info,
            Self::Job { event, .. } => match event {
                JobEvent::CoordinatorUnreachable { .. } => Level::Warn,
                JobEvent::DriverCleanup { stream, .. } if stream == "stdout" => Level::Debug,
                JobEvent::DriverCleanup { .. } => Level::Warn,
                _ => Level::Info,
            },
            Self::RequestFailed { .. } | Self::Interrupting { .. } => Level::Warn,
            Self::RunnerUnhealthy { .. } => Level::Error,
            Self::DockerLeftovers { result, .. } => match result {
                Ok(removed) if removed.failures.is_empty() => Level::Info,
                _ => Level::Warn,
            },
            Self::UndecodableJob { .. } => Level::Error,
            Self::LostJobCleanupLine { stream, .. } if stream == "stdout" => Level::Debug,
            Self::LostJobCleanupLine { .. } => Level::Warn,
            Self::LostJob { .. }
            | Self::JobTakenOver { .. }
            | Self::LostJobUnreadable { .. }
            | Self::JournalFailed { .. } => Level::Warn,
            Self::Fleet { level, .. } => *level,
            Self::ShutdownTimeout { .. } | Self::Forced { .. } | Self::ReloadRejected { .. } => {
                Level::Error
            }
        }
    }
}

impl fmt::Display for PollEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Started {
                runners,
                concurrent,
            } => write!(
                f,
                "polling {runners} runner{} for jobs (concurrent = {concurrent})",
                if *runners == 1 { "" } else { "s" }
            ),
            Self::RequestFailed {
                runner,
                error,
                retry_in,
            } => write!(
                f,
                "runner {runner}: job request failed: {error}; asking again in {:.1}s",
                retry_in.as_secs_f64()
            ),
            Self::RunnerUnhealthy {
                runner,
                failures,
                disabled_for,
            } => write!(
                f,
                "runner {runner} is not healthy and will be disabled for {}: {failures} job requests failed in a row (unhealthy_requests_limit); it is checked again after unhealthy_interval",
                crate::config::format_duration(*disabled_for)
            ),
            Self::RequestConflict { runner } => {
                write!(
                    f,
                    "runner {runner}: job request answered 409 (another runner took the job)"
                )
            }
            Self::UndecodableJob {
                runner,
                job_id,
                error,
            } => match job_id {
                Some(id) => write!(
                    f,
                    "runner {runner}: job {id} cannot be run: failed to {error}; reporting it as failed"
                ),
                None => write!(
                    f,
                    "runner {runner}: received a job that cannot be read: failed to {error}"
                ),
            },
            Self::JobReceived {
                runner,
                job_id,
                job_name,
                concurrent_id,
            } => write!(
                f,
                "runner {runner}: received job {job_id} ({job_name}) in slot {concurrent_id}"
            ),
            Self::Job { runner, event } => write!(f, "runner {runner}: {event}"),
            Self::StopTakingJobs {
                running,
                requesting,
            } => {
                write!(
                    f,
                    "not taking new jobs; waiting for {running} running job(s) to finish"
                )?;
                if *requesting > 0 {
                    write!(
                        f,
                        " and for {requesting} job request(s) in flight (a long-polling coordinator may hold one for up to ~50 s; a job it brings is run)"
                    )?;
                }
                Ok(())
            }
            Self::Interrupting { running, timeout } => write!(
                f,
                "shutting down: interrupting {running} running job(s) (after_script still runs), up to {}s",
                timeout.as_secs()
            ),
            Self::ShutdownTimeout { abandoned } => write!(
                f,
                "shutdown_timeout passed: killed {abandoned} job(s) without a final update; the coordinator will time them out"
            ),
            Self::Forced { killed } => {
                write!(f, "second interrupt: stopping now, killed {killed} job(s)")
            }
            Self::Reloaded {
                runners,
                concurrent,
            } => {
                write!(
                    f,
                    "configuration reloaded: {runners} runner(s), concurrent = {concurrent}"
                )
            }
            Self::ReloadRejected { error } => write!(
                f,
                "configuration not reloaded (keeping the old one): {error}"
            ),
            Self::DockerLeftovers { runner, result } => match result {
                Ok(removed) => {
                    write!(
                        f,
                        "runner {runner}: removed what a previous run left behind: {} container(s), {} network(s), {} volume(s)",
                        removed.containers, removed.networks, removed.volumes
                    )?;
                    for failure in &removed.failures {
                        write!(f, "; could not {failure}")?;
                    }
                    Ok(())
                }
                Err(error) => write!(
                    f,
                    "runner {runner}: could not look for leftover containers: failed to {error}"
                ),
            },
            Self::LostJob {
                runner,
                job_id,
                killed,
                why,
                cleanup,
                result,
            } => {
                write!(
                    f,
                    "runner {runner}: job {job_id} was running when this runner last stopped"
                )?;
                if let Some(why) = why {
                    write!(f, "; it cannot go on: {why}")?;
                }
                if *killed > 0 {
                    write!(f, "; killed {killed} process group(s) it left running")?;
                }
                match cleanup {
                    None => {}
                    Some(Ok(())) => write!(f, "; ran the custom executor's cleanup_exec")?,
                    Some(Err(error)) => write!(f, "; cleanup_exec failed: {error}")?,
                }
                match result {
                    Ok(crate::journal::LostJobEnd::Failed) => {
                        write!(f, "; failed it (runner_system_failure)")
                    }
                    Ok(crate::journal::LostJobEnd::Canceled) => {
                        write!(f, "; it was being canceled: ended it as canceled")
                    }
                    Ok(crate::journal::LostJobEnd::AlreadyEnded) => {
                        write!(f, "; the coordinator had already ended it")
                    }
                    Err(error) => write!(
                        f,
                        "; could not fail it on the coordinator: {error} (its record stays, to try again at the next start)"
                    ),
                }
            }
            Self::HandingOver { running } => write!(
                f,
                "handing {running} running job(s) over to the next runner process: taking no new jobs; stopping once each is in a script stage that runs on its own"
            ),
            Self::HandedOver { jobs } => write!(
                f,
                "stopping: {jobs} job(s) left running for the next `gantry runner run` to take over"
            ),
            Self::JobTakenOver {
                runner,
                job_id,
                found,
            } => write!(
                f,
                "runner {runner}: job {job_id} was running when this runner last stopped; {found}: took the job over"
            ),
            Self::LostJobCleanupLine {
                runner,
                job_id,
                stream,
                line,
            } => write!(
                f,
                "runner {runner}: lost job {job_id}: cleanup_exec ({stream}): {line}"
            ),
            Self::LostJobUnreadable { path, error } => write!(
                f,
                "`{}` is not a job record ({error}); left in place, remove it if nothing needs it",
                path.display()
            ),
            Self::JournalFailed {
                runner,
                job_id,
                error,
            } => write!(
                f,
                "runner {runner}: job {job_id} runs without a record ({error}): if this runner dies, the job stays running on the coordinator until its stuck-job timeout\nmake the journal directory writable"
            ),
            Self::Fleet {
                runner, message, ..
            } => write!(f, "runner {runner}: fleet: {message}"),
            Self::Stopped { jobs } => write!(f, "stopped after {jobs} job(s)"),
        }
    }
}

/// Where poll events go.
pub type PollEvents = Arc<dyn Fn(&PollEvent) + Send + Sync>;

/// What a poll run did.
#[derive(Debug, Clone, Default)]
pub struct PollSummary {
    /// Every job run, in the order they ended.
    pub jobs: Vec<JobReport>,
}
