//! Script stages in the build container that outlive the runner process (`gantry runner
//! run`, whose job records let a restarted runner take a job over, [`crate::journal`]).
//!
//! The stage runs in the build container as every stage does (the container started
//! again, the script sent on its standard input), but what the container's shell reads
//! is one compound command that sends the script's output to two files and its exit
//! code to a third, in `<project>.tmp/stages/` of the build directory — bound into the
//! container, so the files are the runner's to read:
//!
//! ```text
//! { : >B || exit 125; : | eval 'SCRIPT' >>OUT 2>>ERR; set -- "$?"; (umask 022; printf '%s\n' "$1" >STATUS); exit "$1"; }
//! ```
//!
//! The shell runs none of it before it read all of it (an input cut short is a syntax
//! error), and the first thing it does is write `B` (the script *began*). The runner
//! copies the files into the log as the shell executor's detached stages do
//! ([`crate::executor::shell::detached`]: whole lines, points in the job's record, no byte lost or
//! sent twice). If the runner dies, the container runs on: nothing it writes to goes
//! away, and Docker keeps it after it exits. A restarted runner finds the stage in the
//! job's record and
//!
//! * with `STATUS` written: copies the rest of the output, and the stage ended with
//!   that code;
//! * with `B` written and the container running: reads on from the point the
//!   coordinator's log ends at, and waits for the container (`POST /containers/{id}/wait`);
//!   a container that stopped without `STATUS` (killed) ends the stage with its own exit
//!   code, as the attached stage does;
//! * without `B` once the container stopped (the runner died before the script was
//!   whole in the shell, or before the container started): starts the stage again — it
//!   never ran a line.
//!
//! The stage's directory is 0733 and its output files 0622, so whatever user the image
//! runs as can write them and only the runner can read them; `STATUS` is written with
//! umask 022. What the container prints outside the script (its entrypoint, the shell
//! itself) still comes through the attach stream while this runner watches; after a
//! takeover it is not read again. A build container gone (removed, the engine
//! restarted) ends a taken-over job as a lost one ([`crate::poll`]).
//!
//! **On a fleet instance** (the docker-autoscaler executor, [`crate::executor::docker_autoscaler`])
//! the build directory bound into the container is the slot directory's copy on the
//! instance, so the files are written there. The runner makes them over the SSH session
//! (the same modes), and follows them into copies beside the job's record as the
//! instance executor does ([`crate::executor::instance::follow`]); the copies are what it reads
//! into the log and what the record names. Once the container stopped the runner makes
//! the stage's stop file, and the follower sends the rest and ends; the exit code is
//! read from `STATUS` on the instance (else the container's). A restarted runner checks
//! `B` and `STATUS` on the instance, follows on from the copies' ends and reads the
//! copies on from the point the coordinator's log ends at. Costs: one SSH channel per
//! running stage for the follower (0.1 s passes, O(new bytes) each), a few short
//! commands per stage; while a taken-over stage has not begun, one command per
//! [`REMOTE_POLL`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use gantry_fleet::connector::{Exit, Session};

use super::{BuildTemplate, DockerExecutor, drain, exit_outcome};
use crate::executor::docker::DockerError;
use crate::executor::docker::client::{connect, connect_to};
use crate::executor::instance::follow::{
    RemoteFiles, any_exists, empty_copies, follow, remote_status,
};
use crate::executor::quote;
use crate::executor::shell::detached::{StageOutput, read_status, stage_files};
use crate::executor::shell::{stage_script, warn_on_timeout};
use crate::executor::{CancelReason, Stage, StageOutcome};
use crate::journal::{DetachedStage, DockerRecord, RunningJob, StageFiles, StagePlace};
use crate::trace::Trace;

/// The stages' directory in the job's `.tmp` directory.
const STAGES_DIR: &str = "stages";

/// How often a reattached stage that has not begun is looked at.
const POLL: Duration = Duration::from_millis(50);

/// The same on a fleet instance (each look is an SSH command).
const REMOTE_POLL: Duration = Duration::from_millis(250);

/// How long the follower of a stage on an instance may take to send the rest once the
/// container stopped.
const FOLLOW_REST: Duration = Duration::from_secs(60);

/// Where detached stages keep their files, and the job's record.
pub(crate) struct Detach {
    /// Where the files are.
    at: FilesAt,
    /// The job's `.tmp` directory in the container.
    seen: PathBuf,
    job: Arc<RunningJob>,
}

/// Where a job's detached stages keep their files.
enum FilesAt {
    /// In the job's `.tmp` directory here (bound into the container): read in place.
    Here(PathBuf),
    /// In the job's `.tmp` directory on a fleet instance (`tmp`, reached through
    /// `session`), followed into copies here (in `copies`, beside the job's record).
    Instance {
        session: Session,
        tmp: String,
        copies: PathBuf,
    },
}

/// A stage's files: those the runner reads into the log, as the container sees them,
/// and on the instance (docker-autoscaler).
struct Files {
    here: StageFiles,
    seen: StageFiles,
    remote: Option<(Session, RemoteFiles)>,
}

impl Files {
    /// The file the wrapper makes when the script begins, where the runner looks.
    fn began(&self) -> String {
        match &self.remote {
            Some((_, remote)) => crate::journal::began_path(&remote_as_local(remote))
                .to_string_lossy()
                .into_owned(),
            None => crate::journal::began_path(&self.here)
                .to_string_lossy()
                .into_owned(),
        }
    }

    /// Whether the script began or ended (its `B` or `STATUS` is there).
    async fn began_or_ended(&self) -> Result<bool, DockerError> {
        match &self.remote {
            Some((session, remote)) => any_exists(session, &[&self.began(), &remote.status])
                .await
                .map_err(|error| DockerError::Api {
                    action: "look for the stage's files on the instance".to_owned(),
                    reason: error.to_string(),
                    status: None,
                }),
            None => Ok(Path::new(&self.began()).exists() || self.here.status.exists()),
        }
    }
}

/// A stage's remote files as paths (to name them as [`stage_files`] does).
fn remote_as_local(remote: &RemoteFiles) -> StageFiles {
    StageFiles {
        out: PathBuf::from(&remote.out),
        err: PathBuf::from(&remote.err),
        status: PathBuf::from(&remote.status),
    }
}

impl Detach {
    fn files(&self, stage: &str) -> Files {
        let seen = stage_files(&self.seen.join(STAGES_DIR), stage);
        match &self.at {
            FilesAt::Here(host) => Files {
                here: stage_files(&host.join(STAGES_DIR), stage),
                seen,
                remote: None,
            },
            FilesAt::Instance {
                session,
                tmp,
                copies,
            } => {
                let remote = stage_files(&Path::new(tmp).join(STAGES_DIR), stage);
                Files {
                    here: stage_files(copies, stage),
                    seen,
                    remote: Some((session.clone(), RemoteFiles::in_container(&remote))),
                }
            }
        }
    }

    /// The files of the stage a runner process that died recorded in `detached`.
    fn files_of(&self, detached: &DetachedStage) -> Files {
        let mut files = self.files(&detached.place.name);
        // The record's own copies (the same, unless the job's directories moved).
        files.here = detached.files.clone();
        files
    }

    /// The stages' directory on the instance (for the record).
    fn remote_dir(&self) -> Option<String> {
        match &self.at {
            FilesAt::Here(_) => None,
            FilesAt::Instance { tmp, .. } => Some(
                Path::new(tmp)
                    .join(STAGES_DIR)
                    .to_string_lossy()
                    .into_owned(),
            ),
        }
    }
}

impl DockerExecutor {
    /// Runs the job's script stages detached, their files in the job's `.tmp`
    /// directory (`host` here, `seen` in the container), when `job` is a record a
    /// restarted runner could take over; the job's containers are recorded there from
    /// now on.
    pub(crate) fn detach_in(&mut self, host: &Path, seen: &Path, job: Option<&Arc<RunningJob>>) {
        let Some(job) = job.filter(|job| job.resumable()) else {
            return;
        };
        self.detach = Some(Detach {
            at: FilesAt::Here(host.to_owned()),
            seen: seen.to_owned(),
            job: Arc::clone(job),
        });
        self.record();
    }

    /// The same for a job on a fleet instance (docker-autoscaler): the job's `.tmp`
    /// directory is `tmp` on the instance `session` reaches, `seen` in the container;
    /// the copies of the stages' output go beside the job's record.
    pub(crate) fn detach_on_instance(
        &mut self,
        (session, tmp): (&Session, &str),
        seen: &Path,
        job: Option<&Arc<RunningJob>>,
    ) {
        let Some(job) = job.filter(|job| job.resumable()) else {
            return;
        };
        let Ok(copies) = job.aside() else { return };
        self.detach = Some(Detach {
            at: FilesAt::Instance {
                session: session.clone(),
                tmp: tmp.to_owned(),
                copies,
            },
            seen: seen.to_owned(),
            job: Arc::clone(job),
        });
        self.record();
    }

    /// Writes what the job made to its record (when its stages run detached).
    pub(super) fn record(&self) {
        let Some(detach) = &self.detach else { return };
        let container = self
            .container
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        detach.job.docker_made(Some(DockerRecord {
            instance: self.instance.clone(),
            container,
            builds: self.builds.load(std::sync::atomic::Ordering::Relaxed),
        }));
    }

    /// The executor of a job a runner process that died left in `record`'s containers,
    /// on the engine at `host`; its stages go on detached.
    pub(crate) async fn resume(
        host: Option<&str>,
        (short_token, job_id): (&str, i64),
        kill_grace: Duration,
        record: &DockerRecord,
    ) -> Result<Self, DockerError> {
        let docker = match host {
            Some(host) => connect_to(host).await?,
            None => connect().await?,
        };
        Self::resume_on(docker, (short_token, job_id), kill_grace, record).await
    }

    /// [`DockerExecutor::resume`] on the engine `docker` is connected to (an instance's,
    /// for docker-autoscaler).
    pub(crate) async fn resume_on(
        docker: Docker,
        (short_token, job_id): (&str, i64),
        kill_grace: Duration,
        record: &DockerRecord,
    ) -> Result<Self, DockerError> {
        let mut executor = Self::with_engine(docker, short_token, job_id, kill_grace);
        executor.instance.clone_from(&record.instance);
        executor.labels = super::job_labels(short_token, job_id, &record.instance);
        executor.prefix = super::sanitize(&format!(
            "gantry-{short_token}-{job_id}-{}",
            record.instance
        ));
        executor
            .builds
            .store(record.builds, std::sync::atomic::Ordering::Relaxed);
        if let Some(id) = &record.container {
            let inspect = match executor.docker.inspect_container(id, None).await {
                Ok(inspect) => inspect,
                // Gone: a stage that needs it fails; the job's end still cleans up.
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => return Ok(executor),
                Err(error) => {
                    return Err(DockerError::api(
                        format!("inspect the job's build container {id}"),
                        &error,
                    ));
                }
            };
            // How to make it again, should it disappear before a later stage.
            let config = inspect.config.unwrap_or_default();
            executor.build = Some(BuildTemplate {
                image: config.image.or(inspect.image).unwrap_or_default(),
                entrypoint: config.entrypoint,
                user: config.user,
                platform: String::new(),
                host_config: inspect.host_config.unwrap_or_default(),
                env: config.env.unwrap_or_default(),
            });
            *executor
                .container
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(id.clone());
        }
        Ok(executor)
    }

    /// Runs `stage` detached as `place` of the job (see the module docs).
    pub(super) async fn run_detached(
        &self,
        detach: &Detach,
        build: &BuildTemplate,
        stage: &Stage<'_>,
        place: &StagePlace,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let files = detach.files(stage.name);
        let prepared = match &files.remote {
            None => prepare_files(&files.here).map_err(|error| error.to_string()),
            Some((session, remote)) => match empty_copies(&files.here) {
                Ok(()) => prepare_remote_files(session, remote).await,
                Err(error) => Err(format!(
                    "{}: {error}",
                    files.here.out.parent().unwrap_or(Path::new("")).display()
                )),
            },
        };
        if let Err(reason) = prepared {
            return StageOutcome::SystemFailure {
                error: DockerError::Api {
                    action: format!("prepare the files of {}", stage.name),
                    reason,
                    status: None,
                }
                .into(),
            };
        }
        let script = stage_script(crate::config::ShellKind::Sh, stage, trace);
        let input = wrapped(&script, &files.seen);
        let id = match self.build_container(build, stage).await {
            Ok(id) => id,
            Err(outcome) => return outcome,
        };
        detach.job.stage_detached(DetachedStage {
            place: place.clone(),
            group: None,
            container: Some(id.clone()),
            remote: detach.remote_dir(),
            files: files.here.clone(),
            checkpoint: None,
            points: Vec::new(),
        });
        let output = StageOutput::start(&files.here, None, trace, &detach.job);
        let pump = match self.start_attached(&id, &input, stage.name, trace).await {
            Ok(pump) => Some(pump),
            Err(outcome) => {
                output.finish().await;
                return outcome;
            }
        };
        let _sampler = stage.meter.map(|meter| self.measure(meter, &id));
        self.watch(
            &detach.job,
            (&id, &files),
            (output, pump),
            stage.name,
            stage.timeout,
            trace,
            cancel,
        )
        .await
    }

    /// Goes on with the detached stage a runner process that died recorded in
    /// `detached`: reads on from its checkpoint until it ends, or starts it again (as
    /// `stage`) when its script had not begun.
    pub(crate) async fn reattach(
        &self,
        detached: &DetachedStage,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let (Some(detach), Some(id)) = (&self.detach, detached.container.as_deref()) else {
            return StageOutcome::SystemFailure {
                error: DockerError::NotPrepared.into(),
            };
        };
        let files = detach.files_of(detached);
        let poll = if files.remote.is_some() {
            REMOTE_POLL
        } else {
            POLL
        };
        let began = async || match files.began_or_ended().await {
            Ok(began) => Ok(began),
            Err(error) => Err(StageOutcome::SystemFailure {
                error: error.into(),
            }),
        };
        loop {
            match began().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(outcome) => return outcome,
            }
            match self.docker.inspect_container(id, None).await {
                Ok(inspect) if inspect.state.as_ref().and_then(|s| s.running) == Some(true) => {}
                Ok(_) => {
                    match began().await {
                        Ok(true) => break,
                        Ok(false) => {}
                        Err(outcome) => return outcome,
                    }
                    // It never ran a line: it starts again.
                    return self.run(stage, trace, cancel).await;
                }
                Err(error) => {
                    return StageOutcome::SystemFailure {
                        error: DockerError::api(
                            format!("inspect the container of {}", detached.place.name),
                            &error,
                        )
                        .into(),
                    };
                }
            }
            tokio::time::sleep(poll).await;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let left = Duration::from_millis(detached.place.deadline_unix_ms).saturating_sub(now);
        let output = StageOutput::start(&files.here, detached.checkpoint, trace, &detach.job);
        self.watch(
            &detach.job,
            (id, &files),
            (output, None),
            &detached.place.name,
            left,
            trace,
            cancel,
        )
        .await
    }

    /// Waits for the stage in container `id` to end, `timeout` to pass or `cancel` to
    /// complete, then copies the rest of its output; its exit code is the one in its
    /// status file, else the container's. Files on an instance are followed meanwhile.
    #[allow(clippy::too_many_arguments)]
    async fn watch(
        &self,
        job: &Arc<RunningJob>,
        (id, files): (&str, &Files),
        (output, pump): (StageOutput, Option<tokio::task::JoinHandle<()>>),
        name: &str,
        timeout: Duration,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        enum Stop {
            Exited(Result<i64, String>),
            Timeout,
            Canceled(CancelReason),
        }
        // Aborted when dropped (the job's stage given up: the instance lost).
        let follower = files.remote.clone().map(|(session, remote)| {
            let copies = files.here.clone();
            AbortOnDrop(tokio::spawn(async move {
                follow(&session, &remote, &copies).await
            }))
        });
        let stop = {
            let cancel = std::pin::pin!(cancel);
            tokio::select! {
                exited = self.wait_exit(id) => Stop::Exited(exited),
                () = tokio::time::sleep(timeout) => Stop::Timeout,
                reason = cancel => Stop::Canceled(reason),
                // Handed over: the job stays in this stage until the process exits, for
                // the next runner process to take it over.
                () = job.handed_over() => std::future::pending().await,
            }
        };
        let exited = match stop {
            Stop::Exited(exited) => Ok(exited),
            Stop::Timeout => {
                self.terminate(id).await;
                Err(StageOutcome::Timeout { after: timeout })
            }
            Stop::Canceled(reason) => {
                self.terminate(id).await;
                Err(StageOutcome::Canceled { reason })
            }
        };
        // The container stopped: what is left on the instance comes here.
        let followed = match (&files.remote, follower) {
            (Some((session, remote)), Some(follower)) => {
                Some(follow_rest(session, remote, follower, name).await)
            }
            _ => None,
        };
        let outcome = match (exited, followed) {
            (Err(stopped), _) => stopped,
            (_, Some(Err(failure))) => failure,
            (Ok(exited), Some(Ok(status))) => {
                if let Some(code) = status {
                    // Kept here too: a runner that dies now finds the stage ended.
                    let _ = std::fs::write(&files.here.status, format!("{code}\n"));
                }
                exit_outcome(status.map(i64::from).map_or(exited, Ok), name)
            }
            (Ok(exited), None) => {
                let exited = match read_status(&files.here.status) {
                    Some(code) => Ok(i64::from(code)),
                    None => exited,
                };
                exit_outcome(exited, name)
            }
        };
        output.finish().await;
        if let Some(pump) = pump {
            drain(pump, name, trace).await;
        }
        warn_on_timeout(trace, name, outcome)
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Once the stage's container stopped: makes the stage's stop file on the instance so
/// that `follower` sends the rest and ends, waits for it, and reads the exit code there
/// (`None`: the script wrote none, the container was stopped or killed).
async fn follow_rest(
    session: &Session,
    remote: &RemoteFiles,
    mut follower: AbortOnDrop<Result<Exit, crate::executor::instance::InstanceError>>,
    name: &str,
) -> Result<Option<i32>, StageOutcome> {
    let failed = |action: String, reason: String| StageOutcome::SystemFailure {
        error: DockerError::Api {
            action,
            reason,
            status: None,
        }
        .into(),
    };
    let instance = session.instance_id().to_owned();
    if let Some(stop) = &remote.stop {
        let command = format!(": > {}", quote(stop));
        match session.run(&command, b"", &mut |_, _| {}).await {
            Ok(Exit::Code(0)) => {}
            Ok(exit) => {
                return Err(failed(
                    format!("end the follower of {name} on instance {instance}"),
                    format!("`{command}` ended with {exit}"),
                ));
            }
            Err(error) => {
                return Err(failed(
                    format!("end the follower of {name} on instance {instance}"),
                    error.to_string(),
                ));
            }
        }
    }
    let action = format!("copy the output of {name} from instance {instance}");
    match tokio::time::timeout(FOLLOW_REST, &mut follower.0).await {
        Ok(Ok(Ok(Exit::Code(0)))) => {}
        Ok(Ok(Ok(exit))) => return Err(failed(action, format!("the follower ended with {exit}"))),
        Ok(Ok(Err(error))) => return Err(failed(action, error.to_string())),
        Ok(Err(error)) => return Err(failed(action, error.to_string())),
        Err(_) => {
            return Err(failed(
                action,
                format!("the follower did not end within {FOLLOW_REST:?}"),
            ));
        }
    }
    remote_status(session, &remote.status)
        .await
        .map_err(|reason| failed(format!("read the exit code of {name}"), reason))
}

/// Makes the stage's directory (0733) and empty output files (0622) on the instance,
/// with no exit code, no mark of a beginning and no stop file (as [`prepare_files`]).
async fn prepare_remote_files(session: &Session, remote: &RemoteFiles) -> Result<(), String> {
    let local = remote_as_local(remote);
    let path = |p: &Path| quote(&p.to_string_lossy());
    let dir = local.out.parent().unwrap_or(Path::new("/"));
    let command = format!(
        "mkdir -p {dir} && chmod 0733 {dir} && : > {out} && : > {err} && chmod 0622 {out} {err} && rm -f {status} {began} {stop}",
        dir = path(dir),
        out = quote(&remote.out),
        err = quote(&remote.err),
        status = quote(&remote.status),
        began = path(&crate::journal::began_path(&local)),
        stop = quote(remote.stop.as_deref().unwrap_or("")),
    );
    let mut said = Vec::new();
    match session
        .run(&command, b"", &mut |_, bytes: &[u8]| {
            if said.len() < 4096 {
                said.extend_from_slice(bytes);
            }
        })
        .await
    {
        Ok(Exit::Code(0)) => Ok(()),
        Ok(exit) => Err(format!(
            "on instance {}, `{command}` ended with {exit}: {}",
            session.instance_id(),
            String::from_utf8_lossy(&said).trim()
        )),
        Err(error) => Err(error.to_string()),
    }
}

/// The stage's directory (0733) and empty output files (0622) for `files`; no exit code
/// and no mark of a beginning yet.
fn prepare_files(files: &StageFiles) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = files.out.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o733))?;
    }
    for path in [&files.out, &files.err] {
        std::fs::File::create(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o622))?;
    }
    for path in [&files.status, &crate::journal::began_path(files)] {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// What the container's shell reads: `script` with its output and exit code going to
/// `files` (their paths in the container), one compound command (see the module docs).
fn wrapped(script: &str, files: &StageFiles) -> String {
    let path = |p: &Path| quote(&p.to_string_lossy());
    let status = path(&files.status);
    format!(
        "{{ : >{began} || exit 125; : | eval {script} >>{out} 2>>{err}; set -- \"$?\"; (umask 022; printf '%s\\n' \"$1\" >{status}); exit \"$1\"; }}\n",
        began = path(&crate::journal::began_path(files)),
        script = quote(script),
        out = path(&files.out),
        err = path(&files.err),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_is_one_command_and_writes_its_files() {
        let files = stage_files(Path::new("/builds/p.tmp/stages"), "step_script");
        let input = wrapped("echo 'hi'\nexit 3\n", &files);
        assert!(
            input.starts_with("{ : >/builds/p.tmp/stages/stage_step_script.began"),
            "{input}"
        );
        assert!(input.ends_with("exit \"$1\"; }\n"), "{input}");

        // Run by a real shell, cut short or whole.
        let dir = tempfile::tempdir().unwrap();
        let files = stage_files(dir.path(), "s");
        prepare_files(&files).unwrap();
        let input = wrapped("echo out; echo err >&2; exit 3", &files);
        let run = |input: &str| {
            use std::io::Write;
            let mut child = std::process::Command::new("sh")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            child.wait().unwrap().code()
        };
        let cut = &input[..input.len() - 3];
        assert_ne!(run(cut), Some(3));
        assert!(
            !crate::journal::began_path(&files).exists(),
            "a cut input runs nothing"
        );
        assert_eq!(run(&input), Some(3));
        assert!(crate::journal::began_path(&files).exists());
        assert_eq!(std::fs::read_to_string(&files.out).unwrap(), "out\n");
        assert_eq!(std::fs::read_to_string(&files.err).unwrap(), "err\n");
        assert_eq!(read_status(&files.status), Some(3));
    }
}
