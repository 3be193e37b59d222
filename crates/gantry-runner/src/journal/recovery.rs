//! Crash recovery's decisions and acts on a lost job, from its record: where a job
//! taken over goes on ([`takeover_point`], [`goes_on`]), and how a job that cannot is
//! ended — its process groups killed ([`kill_lost_groups`]), the coordinator told
//! ([`end_lost_job`]). The poll loop calls these when it starts (`poll/recovery.rs`: it
//! owns the slots, entries and clients they are applied with).

use std::time::Duration;

use gantry_protocol::{
    FailureReason, JobState, PatchOutcome, PatchTraceParams, UpdateJobRequest, UpdateOutcome,
};

use super::{AfterSteps, DetachedStage, JobRecord};
use crate::client::{Client, ClientError};
use crate::config::ExecutorKind;

/// Where a taken-over job goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeoverAt {
    /// From its beginning (a shell or Docker executor job that had not reached its
    /// script: preparing, sources, cache, artifacts, `hooks:`), as GitLab's `*_ATTEMPTS`
    /// retries run those stages again; the log goes on, without a second header.
    Start,
    /// In its detached script stage, watched again.
    Stage(Box<DetachedStage>),
    /// Past its steps: `after_script` (when still due), cache, artifacts, clean-up.
    AfterSteps(AfterSteps),
}

/// Where the lost job of `record` can go on, and what was found (for the log's
/// takeover line): its detached stage when it still runs, ended with its exit code
/// kept, or was left in its container or on its instance; past its steps; or its
/// beginning, when it had not reached its script. `None` when its stage's processes
/// are gone without an exit code (the machine restarted?): the job is ended as lost.
pub fn takeover_point(record: &JobRecord) -> Option<(TakeoverAt, String)> {
    match (&record.stage, &record.after) {
        (Some(stage), _) => {
            let name = &stage.place.name;
            let found = match &stage.group {
                _ if stage.files.status.exists() => format!("its {name} ended meanwhile"),
                Some(group) if group.running() => format!("its {name} still runs"),
                // Gone without its exit code.
                Some(_) => return None,
                // On a fleet instance: looked at when the job goes on.
                None if stage.remote.is_some() => format!("its {name} was left on its instance"),
                // In a container: looked at when the job goes on.
                None => format!("its {name} was left in its container"),
            };
            Some((TakeoverAt::Stage(Box::new(stage.clone())), found))
        }
        (None, Some(after)) => Some((
            TakeoverAt::AfterSteps(after.clone()),
            "it was past its script".to_owned(),
        )),
        (None, None) => Some((
            TakeoverAt::Start,
            "it had not reached its script, started it again".to_owned(),
        )),
    }
}

/// Whether a job of the executor `kind` can go on at `at`: a job on a fleet instance
/// past its start needs its instance recorded; starting again is for the shell and
/// Docker executors only (the custom driver may have made what a new start would make
/// again — such a job is ended as lost and its `cleanup_exec` runs; a Docker job's
/// containers are removed when it starts again).
pub fn goes_on(kind: ExecutorKind, at: &TakeoverAt, record: &JobRecord) -> bool {
    match at {
        TakeoverAt::Start => matches!(kind, ExecutorKind::Shell | ExecutorKind::Docker),
        TakeoverAt::Stage(_) | TakeoverAt::AfterSteps(_) => {
            let on_fleet = matches!(
                kind,
                ExecutorKind::Instance | ExecutorKind::DockerAutoscaler
            );
            !on_fleet || record.instance.is_some()
        }
    }
}

/// What became of a lost job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LostJobEnd {
    /// The log says why, and the job failed with `runner_system_failure`.
    Failed,
    /// The job was being canceled (`canceling`, waiting for its runner): the log says
    /// why, and the final update made it `canceled`.
    Canceled,
    /// The coordinator had ended the job already (canceled, timed out, or failed as
    /// stuck); nothing was changed.
    AlreadyEnded,
}

/// The line added to a lost job's log; `why` says why it could not go on, when the
/// runner began to take it over.
pub fn lost_job_message(system_id: &str, why: Option<&str>) -> String {
    let why = why
        .map(|why| format!(" It could not go on: {why}."))
        .unwrap_or_default();
    format!(
        "\n\x1b[31;1mERROR: The runner (system ID {system_id}) stopped while this job ran \
         (killed, crashed, or its machine restarted). It found the job when it started \
         again, ended what was left of it and failed it (runner_system_failure).{why}\x1b[0m\n"
    )
}

/// Kills the process groups of `record` still there (the same processes, or ones they
/// left: see `ProcessStamp::signal_group`); returns how many were.
pub fn kill_lost_groups(record: &JobRecord) -> usize {
    use nix::sys::signal::Signal;
    record
        .groups
        .iter()
        .filter(|group| group.signal_group(Signal::SIGKILL))
        .count()
}

/// Where [`append_to_log`] put its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The log's length before them.
    pub at: u64,
    /// The coordinator asked for the job to be canceled (`canceling`).
    pub cancel_requested: bool,
}

/// Appends `bytes` to the coordinator's log of `record`'s job, whose length this
/// process does not know: a patch at 0 is answered with it (`416`), and the bytes go
/// there. `None`: the coordinator has ended the job.
pub async fn append_to_log(
    client: &Client,
    record: &JobRecord,
    bytes: &[u8],
) -> Result<Option<Appended>, ClientError> {
    let params = PatchTraceParams::default();
    let mut start = 0;
    let mut cancel_requested = false;
    for _ in 0..2 {
        let answer = client
            .patch_trace(record.job_id, &record.token, params, start, bytes.to_vec())
            .await?;
        cancel_requested |= answer.cancel_requested;
        match answer.outcome {
            PatchOutcome::RangeMismatch { resume_at } if resume_at != start => {
                start = resume_at;
            }
            PatchOutcome::Aborted => return Ok(None),
            _ => break,
        }
    }
    Ok(Some(Appended {
        at: start,
        cancel_requested,
    }))
}

/// The line a restarted runner adds to the log of a job it takes over.
pub fn takeover_message(system_id: &str, found: &str) -> String {
    format!(
        "\n\x1b[33;1mWARNING: The runner (system ID {system_id}) stopped while this job ran \
         (killed, crashed, or restarted) and was started again: {found}\x1b[0m\n"
    )
}

/// How many times a `202` (final state stored, trace not yet finalised) is waited out.
const ACCEPTED_RETRIES: usize = 10;

/// Tells the coordinator that `record`'s job was lost: [`lost_job_message`] (with
/// `why`) at the end of its log, then `failed` with `runner_system_failure`. An error
/// is the network or an answer worth trying again later.
pub async fn end_lost_job(
    client: &Client,
    record: &JobRecord,
    system_id: &str,
    why: Option<&str>,
) -> Result<LostJobEnd, ClientError> {
    let message = lost_job_message(system_id, why).into_bytes();
    let Some(appended) = append_to_log(client, record, &message).await? else {
        return Ok(LostJobEnd::AlreadyEnded);
    };
    let canceling = appended.cancel_requested;
    let mut update = UpdateJobRequest::new(&record.token, JobState::Failed, client.info().clone());
    update.failure_reason = Some(FailureReason::RunnerSystemFailure);
    let ended = if canceling {
        LostJobEnd::Canceled
    } else {
        LostJobEnd::Failed
    };
    for _ in 0..ACCEPTED_RETRIES {
        let answer = client.update_job(record.job_id, &update).await?;
        if answer.status == 200 {
            // Its `Job-Status` is the state the update made (failed, canceled).
            return Ok(ended);
        }
        match answer.response.outcome {
            UpdateOutcome::Succeeded => return Ok(ended),
            UpdateOutcome::Aborted => return Ok(LostJobEnd::AlreadyEnded),
            UpdateOutcome::AcceptedButNotCompleted | UpdateOutcome::TraceValidationFailed => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            UpdateOutcome::Failed => {
                return Err(ClientError::Refused {
                    what: "end a lost job",
                    status: answer.status,
                    body: String::new(),
                });
            }
        }
    }
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{
        InstanceRecord, ProcessStamp, RecordedEnding, StageAt, StageFiles, StagePlace,
    };

    fn record() -> JobRecord {
        JobRecord {
            url: "http://127.0.0.1:1".to_owned(),
            job_id: 7,
            token: "glcbt-x".to_owned(),
            runner: ProcessStamp {
                pid: 1,
                start: 1,
                boot: "boot".to_owned(),
            },
            groups: Vec::new(),
            custom: None,
            resume: None,
            stage: None,
            after: None,
            docker: None,
            instance: None,
        }
    }

    fn stage(status: &std::path::Path) -> DetachedStage {
        DetachedStage {
            place: StagePlace {
                at: StageAt::Step(0),
                name: "step_script".to_owned(),
                before: RecordedEnding::Success,
                deadline_unix_ms: 0,
                limit_secs: 3600,
            },
            group: None,
            container: None,
            remote: None,
            files: StageFiles {
                out: status.with_extension("out"),
                err: status.with_extension("err"),
                status: status.to_owned(),
            },
            checkpoint: None,
            points: Vec::new(),
        }
    }

    const EVERY_KIND: [ExecutorKind; 5] = [
        ExecutorKind::Shell,
        ExecutorKind::Docker,
        ExecutorKind::Custom,
        ExecutorKind::Instance,
        ExecutorKind::DockerAutoscaler,
    ];

    #[test]
    fn a_job_before_its_script_starts_again_on_the_shell_and_docker_executors_only() {
        let lost = record();
        let (at, found) = takeover_point(&lost).unwrap();
        assert_eq!(at, TakeoverAt::Start);
        assert_eq!(found, "it had not reached its script, started it again");
        let going_on: Vec<ExecutorKind> = EVERY_KIND
            .into_iter()
            .filter(|kind| goes_on(*kind, &at, &lost))
            .collect();
        assert_eq!(going_on, [ExecutorKind::Shell, ExecutorKind::Docker]);
    }

    #[test]
    fn a_detached_stage_goes_on_where_it_was_left() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("stage.status");
        let mut lost = record();
        lost.stage = Some(stage(&status));
        assert_eq!(
            takeover_point(&lost).unwrap().1,
            "its step_script was left in its container"
        );
        lost.stage.as_mut().unwrap().remote = Some("/home/u/builds/x.tmp".to_owned());
        assert_eq!(
            takeover_point(&lost).unwrap().1,
            "its step_script was left on its instance"
        );
        let me = i32::try_from(std::process::id()).unwrap();
        lost.stage.as_mut().unwrap().group = ProcessStamp::of(me);
        assert_eq!(
            takeover_point(&lost).unwrap().1,
            "its step_script still runs"
        );
        std::fs::write(&status, "0").unwrap();
        let (at, found) = takeover_point(&lost).unwrap();
        assert_eq!(found, "its step_script ended meanwhile");
        assert!(matches!(at, TakeoverAt::Stage(_)));
        // On a fleet instance it needs the instance recorded.
        for kind in EVERY_KIND {
            let on_fleet = matches!(
                kind,
                ExecutorKind::Instance | ExecutorKind::DockerAutoscaler
            );
            assert_eq!(goes_on(kind, &at, &lost), !on_fleet, "{kind:?}");
        }
        lost.instance = Some(InstanceRecord {
            id: "i-1".to_owned(),
            key: "k".to_owned(),
        });
        assert!(EVERY_KIND.into_iter().all(|kind| goes_on(kind, &at, &lost)));
    }

    #[test]
    fn a_stage_whose_processes_are_gone_without_an_exit_code_is_not_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut lost = record();
        let mut detached = stage(&dir.path().join("never-written"));
        let me = ProcessStamp::of(i32::try_from(std::process::id()).unwrap()).unwrap();
        detached.group = Some(ProcessStamp {
            start: me.start + 1,
            ..me
        });
        lost.stage = Some(detached);
        assert_eq!(takeover_point(&lost), None);
    }

    #[test]
    fn a_job_past_its_steps_goes_on_from_there() {
        let mut lost = record();
        let after = AfterSteps {
            ending: RecordedEnding::Success,
            after_script_due: true,
        };
        lost.after = Some(after.clone());
        let (at, found) = takeover_point(&lost).unwrap();
        assert_eq!(at, TakeoverAt::AfterSteps(after));
        assert_eq!(found, "it was past its script");
    }
}
