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
//! ([`crate::shell::detached`]: whole lines, points in the job's record, no byte lost or
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

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::{BuildTemplate, DockerExecutor, drain, exit_outcome};
use crate::docker::DockerError;
use crate::docker::client::{connect, connect_to};
use crate::journal::{DetachedStage, DockerRecord, RunningJob, StageFiles, StagePlace};
use crate::shell::detached::{StageOutput, read_status, stage_files};
use crate::shell::{CancelReason, Stage, StageOutcome, quote, stage_script, warn_on_timeout};
use crate::trace::Trace;

/// The stages' directory in the job's `.tmp` directory.
const STAGES_DIR: &str = "stages";

/// How often a reattached stage that has not begun is looked at.
const POLL: Duration = Duration::from_millis(50);

/// Where detached stages keep their files, and the job's record.
pub(crate) struct Detach {
    /// The job's `.tmp` directory here.
    host: PathBuf,
    /// The same directory in the container.
    seen: PathBuf,
    job: Arc<RunningJob>,
}

/// A stage's files here and as the container sees them.
struct Files {
    here: StageFiles,
    seen: StageFiles,
}

impl Detach {
    fn files(&self, stage: &str) -> Files {
        Files {
            here: stage_files(&self.host.join(STAGES_DIR), stage),
            seen: stage_files(&self.seen.join(STAGES_DIR), stage),
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
            host: host.to_owned(),
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
        if let Err(error) = prepare_files(&files.here) {
            return StageOutcome::SystemFailure {
                error: DockerError::Api {
                    action: format!("prepare the files of {}", stage.name),
                    reason: error.to_string(),
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
            remote: None,
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
            (&id, &files.here),
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
        let files = &detached.files;
        let began = crate::journal::began_path(files);
        loop {
            if began.exists() || files.status.exists() {
                break;
            }
            match self.docker.inspect_container(id, None).await {
                Ok(inspect) if inspect.state.as_ref().and_then(|s| s.running) == Some(true) => {}
                Ok(_) => {
                    if began.exists() || files.status.exists() {
                        break;
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
            tokio::time::sleep(POLL).await;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let left = Duration::from_millis(detached.place.deadline_unix_ms).saturating_sub(now);
        let output = StageOutput::start(files, detached.checkpoint, trace, &detach.job);
        self.watch(
            &detach.job,
            (id, files),
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
    /// status file, else the container's.
    #[allow(clippy::too_many_arguments)]
    async fn watch(
        &self,
        job: &Arc<RunningJob>,
        (id, files): (&str, &StageFiles),
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
        let outcome = match stop {
            Stop::Exited(exited) => {
                let exited = match read_status(&files.status) {
                    Some(code) => Ok(i64::from(code)),
                    None => exited,
                };
                exit_outcome(exited, name)
            }
            Stop::Timeout => {
                self.terminate(id).await;
                StageOutcome::Timeout { after: timeout }
            }
            Stop::Canceled(reason) => {
                self.terminate(id).await;
                StageOutcome::Canceled { reason }
            }
        };
        output.finish().await;
        if let Some(pump) = pump {
            drain(pump, name, trace).await;
        }
        warn_on_timeout(trace, name, outcome)
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
