//! Instance executor stages that outlive the runner process (`gantry runner run`, whose
//! job records let a restarted runner take a job over, [`crate::journal`]).
//!
//! The stage does not run in the SSH channel that starts it. One short command
//! ([`LAUNCH`]) receives the script on its standard input, keeps it as a file on the
//! instance and starts it in a session of its own (`setsid`; without it, in the
//! background), its output appended to two files and its exit code written to a third,
//! in `<slot>.stages/<stage>/` beside the job's slot directory on the instance:
//!
//! ```text
//! <slot>.stages/step_script/script   what the shell runs
//!                           began/   made (atomically) when the stage is started: never twice
//!                           pid      the stage's process (group) id
//!                           out err  its standard output and error
//!                           status   its exit code, once it ended
//! ```
//!
//! The runner copies the two output files here as they grow — a second SSH command
//! sends what was appended past the offsets it is given ([`super::follow`], shared with
//! the docker-autoscaler executor) — into files beside the job's record
//! ([`crate::journal::aside_dir`]), which only ever grow by what the instance's files
//! hold next: at every moment each copy is a prefix of its original, byte for byte. The
//! copies are read into the log exactly as the shell executor's detached stages are
//! ([`StageOutput`]: whole lines, points in the job's record, nothing sent past a
//! recorded point), so no byte is lost and none sent twice across a restart.
//!
//! If the runner process dies, the stage runs on: nothing it writes to goes away with
//! the SSH connection. A restarted runner restores the job's acquisition from the
//! taskscaler's state storage, opens a new session, and
//!
//! * launches the stage again: [`LAUNCH`] is idempotent (`mkdir began`), so a stage that
//!   had begun is left alone and only one that never began (the runner died before the
//!   script was whole on the instance) starts now;
//! * follows the files on from the copies' ends, and reads the copies into the log on
//!   from the point where the coordinator's log ends;
//! * takes the exit code from `status` once the follower has everything; a stage whose
//!   process is gone without one (killed on the instance) is a system failure.
//!
//! Timeouts and cancellation signal the stage's process group on the instance, as
//! attached stages are stopped. The stage's directory goes with the slot directory at
//! the end of the job.
//!
//! Costs: the follower asks the instance's files for their size every 0.1 s and sends
//! only what was appended (O(new bytes) per pass); the copies here give the
//! disk blocks the coordinator acknowledged back, as the shell executor's files do.
//! The instance needs `setsid` (util-linux, busybox) to give the stage its own process
//! group, and `head -c`/`tail -c`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gantry_fleet::connector::Exit;

use super::follow::{RemoteFiles, empty_copies, follow, remote_status};
use super::{InstanceError, InstanceExecutor};
use crate::executor::quote;
use crate::executor::shell::detached::{StageOutput, stage_files};
use crate::executor::shell::{stage_script, warn_on_timeout};
use crate::executor::{CancelReason, Stage, StageOutcome};
use crate::journal::{DetachedStage, RunningJob, StageFiles, StagePlace};
use crate::trace::Trace;

/// Starts a stage unless it began already. `$1` the stage's directory, `$2` the
/// script's length in bytes (it arrives on stdin), `$3` the shell. Prints `started` or
/// `running`.
const LAUNCH: &str = r#"d=$1 len=$2 sh=$3
mkdir -p "$d" || exit 1
if [ -d "$d/began" ]; then echo running; exit 0; fi
cat >"$d/script.part" || exit 1
if [ "$(($(wc -c <"$d/script.part")))" != "$len" ]; then echo "the stage's script arrived cut short" >&2; exit 1; fi
mv -f "$d/script.part" "$d/script" || exit 1
mkdir "$d/began" 2>/dev/null || { echo running; exit 0; }
: >"$d/out" && : >"$d/err" && rm -f "$d/status" "$d/pid" || exit 1
s=; command -v setsid >/dev/null 2>&1 && s=setsid
$s sh -c 'd=$1 sh=$2
echo $$ >"$d/pid.part" && mv -f "$d/pid.part" "$d/pid"
"$sh" "$d/script" >>"$d/out" 2>>"$d/err" </dev/null
c=$?
printf "%s\n" "$c" >"$d/status.part" && mv -f "$d/status.part" "$d/status"
exit "$c"' gantry-stage "$d" "$sh" </dev/null >/dev/null 2>&1 &
echo started
"#;

/// Where the job's detached stages keep their copies here, and the job's record.
pub(crate) struct Detach {
    here: PathBuf,
    job: Arc<RunningJob>,
}

/// How [`LAUNCH`] found the stage.
#[derive(Debug, PartialEq, Eq)]
enum Launched {
    /// Started now.
    Started,
    /// It had begun before.
    Running,
}

impl InstanceExecutor {
    /// Runs the job's script stages detached when `job` is a record a restarted runner
    /// could take over (their copies beside the record).
    pub(crate) fn detach_in(&mut self, job: Option<&Arc<RunningJob>>) {
        let Some(job) = job.filter(|job| job.resumable()) else {
            return;
        };
        if let Ok(here) = job.aside() {
            self.detach = Some(Detach {
                here,
                job: Arc::clone(job),
            });
        }
    }

    /// The directory of stage `name` on the instance.
    fn stage_dir(&self, name: &str) -> String {
        let name: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("{}.stages/{name}", self.slot.remote().trim_end_matches('/'))
    }

    /// Runs `stage` detached as `place` of the job (see the module docs).
    pub(super) async fn run_detached(
        &self,
        detach: &Detach,
        stage: &Stage<'_>,
        place: &StagePlace,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let files = stage_files(&detach.here, stage.name);
        if let Err(error) = empty_copies(&files) {
            return system_failure(format!(
                "prepare the copies of {}'s output in {}: {error}",
                stage.name,
                detach.here.display()
            ));
        }
        let remote = self.stage_dir(stage.name);
        detach.job.stage_detached(DetachedStage {
            place: place.clone(),
            group: None,
            container: None,
            remote: Some(remote.clone()),
            files: files.clone(),
            checkpoint: None,
            points: Vec::new(),
        });
        if let Err(outcome) = self.launch(&remote, stage, trace).await {
            return outcome;
        }
        let output = StageOutput::start(&files, None, trace, &detach.job);
        self.watch(
            detach,
            (&remote, &files),
            output,
            stage,
            stage.timeout,
            trace,
            cancel,
        )
        .await
    }

    /// Goes on with the detached stage a runner process that died recorded in
    /// `detached`: follows it on from the copies' ends and reads the copies on from its
    /// checkpoint, or starts it (as `stage`) when it had not begun.
    pub(crate) async fn reattach(
        &self,
        detached: &DetachedStage,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let (Some(detach), Some(remote)) = (&self.detach, detached.remote.as_deref()) else {
            return system_failure(
                "the record of the detached stage names no directory on the instance".to_owned(),
            );
        };
        let files = &detached.files;
        let mut from = detached.checkpoint;
        match self.began(remote).await {
            Ok(true) => {}
            Ok(false) => match self.launch(remote, stage, trace).await {
                Ok(Launched::Running) => {}
                Ok(Launched::Started) => {
                    // It never ran a line: its output starts now.
                    if let Err(error) = empty_copies(files) {
                        return system_failure(format!(
                            "prepare the copies of {}'s output: {error}",
                            stage.name
                        ));
                    }
                    from = None;
                }
                Err(outcome) => return outcome,
            },
            Err(error) => return system_failure(error.to_string()),
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let left = Duration::from_millis(detached.place.deadline_unix_ms).saturating_sub(now);
        let output = StageOutput::start(files, from, trace, &detach.job);
        self.watch(detach, (remote, files), output, stage, left, trace, cancel)
            .await
    }

    /// Whether the stage in `remote` began.
    async fn began(&self, remote: &str) -> Result<bool, InstanceError> {
        let command = format!("test -d {}", quote(&format!("{remote}/began")));
        match self
            .slot
            .session()
            .run(&command, b"", &mut |_, _| {})
            .await?
        {
            Exit::Code(0) => Ok(true),
            Exit::Code(1) => Ok(false),
            other => Err(InstanceError::Closed {
                instance: format!("{} ({other})", self.instance_id()),
                stage: "looking for a stage".to_owned(),
            }),
        }
    }

    /// Sends `stage`'s script to `remote` and starts it there, unless it began before.
    async fn launch(
        &self,
        remote: &str,
        stage: &Stage<'_>,
        trace: &Trace,
    ) -> Result<Launched, StageOutcome> {
        if let Err(error) = self.slot.to_instance().await {
            return Err(StageOutcome::SystemFailure {
                error: error.into(),
            });
        }
        let script = stage_script(self.shell, stage, trace);
        // `: |` gives the script's commands an empty standard input, as attached.
        let input = format!(": | eval {}\n", quote(&script));
        let command = format!(
            "sh -c {} gantry-launch {} {} {}",
            quote(LAUNCH),
            quote(remote),
            input.len(),
            self.shell.as_str()
        );
        let mut said = Vec::new();
        let exit = self
            .slot
            .session()
            .run(&command, input.as_bytes(), &mut |_, bytes: &[u8]| {
                if said.len() < 4096 {
                    said.extend_from_slice(bytes);
                }
            })
            .await;
        let said = String::from_utf8_lossy(&said);
        match exit {
            Ok(Exit::Code(0)) if said.trim() == "started" => Ok(Launched::Started),
            Ok(Exit::Code(0)) if said.trim() == "running" => Ok(Launched::Running),
            Ok(exit) => Err(system_failure(format!(
                "start {} on instance {}: the launch ended with {exit}: {}",
                stage.name,
                self.instance_id(),
                said.trim()
            ))),
            Err(error) => Err(StageOutcome::SystemFailure {
                error: InstanceError::Connect(error).into(),
            }),
        }
    }

    /// Follows the stage in `remote` into `files` until it ends, `timeout` passes,
    /// `cancel` completes or the instance is lost; then reads the rest into the log.
    #[allow(clippy::too_many_arguments)]
    async fn watch(
        &self,
        detach: &Detach,
        (remote, files): (&str, &StageFiles),
        output: StageOutput,
        stage: &Stage<'_>,
        timeout: Duration,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        enum Stop {
            Followed(Result<Exit, InstanceError>),
            Timeout,
            Canceled(CancelReason),
            Lost(String),
        }
        let name = stage.name;
        let remote_files = RemoteFiles::in_dir(remote);
        let follow = follow(self.slot.session(), &remote_files, files);
        tokio::pin!(follow);
        let _sampler = stage
            .meter
            .map(|meter| self.measure(meter, &format!("{remote}/pid")));
        let stop = {
            let cancel = std::pin::pin!(cancel);
            tokio::select! {
                followed = &mut follow => Stop::Followed(followed),
                () = tokio::time::sleep(timeout) => Stop::Timeout,
                reason = cancel => Stop::Canceled(reason),
                reason = self.acquisition.lost() => Stop::Lost(reason),
                // Handed over: the job stays in this stage until the process exits, for
                // the next runner process to take it over — with its acquisition.
                () = detach.job.handed_over() => {
                    self.acquisition.hand_over();
                    std::future::pending().await
                }
            }
        };
        let outcome = match stop {
            Stop::Followed(Ok(Exit::Code(0))) => match self.exit_code(&remote_files.status).await {
                Ok(code) => {
                    // Kept here too: a runner that dies now finds the stage ended.
                    let _ = std::fs::write(&files.status, format!("{code}\n"));
                    match code {
                        0 => StageOutcome::Success,
                        code => StageOutcome::ScriptFailure { exit_code: code },
                    }
                }
                Err(error) => system_failure(error),
            },
            Stop::Followed(Ok(Exit::Code(3))) => system_failure(format!(
                "{name} on instance {} ended without an exit code (its process was killed there)",
                self.instance_id()
            )),
            Stop::Followed(Ok(exit)) => system_failure(format!(
                "follow the output of {name} on instance {}: the follower ended with {exit}",
                self.instance_id()
            )),
            Stop::Followed(Err(error)) => StageOutcome::SystemFailure {
                error: error.into(),
            },
            Stop::Timeout | Stop::Canceled(_) => {
                self.kill_stage(&format!("{remote}/pid")).await;
                // What it printed until it stopped still comes.
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut follow).await;
                match stop {
                    Stop::Canceled(reason) => StageOutcome::Canceled { reason },
                    _ => StageOutcome::Timeout { after: timeout },
                }
            }
            Stop::Lost(reason) => StageOutcome::SystemFailure {
                error: InstanceError::Lost(reason).into(),
            },
        };
        output.finish().await;
        warn_on_timeout(trace, name, outcome)
    }

    /// The stage's exit code from its `status` file on the instance.
    async fn exit_code(&self, status: &str) -> Result<i32, String> {
        match remote_status(self.slot.session(), status).await? {
            Some(code) => Ok(code),
            None => Err(format!(
                "the stage ended on instance {} without its exit code in {status}",
                self.instance_id()
            )),
        }
    }
}

fn system_failure(message: String) -> StageOutcome {
    StageOutcome::SystemFailure {
        error: crate::executor::shell::ShellError::Detached { message }.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two scripts, run by a real shell against a real directory: a launch starts
    /// the stage once, the follower sends what was appended past its offsets and ends
    /// once the exit code is there.
    #[test]
    fn the_launch_is_idempotent_and_the_follower_sends_what_follows() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let stage = dir.path().join("s.stages/step_script");
        let stage_text = stage.to_str().unwrap();
        let script = "echo one; echo two >&2; echo three\n";
        let launch = || {
            let mut child = std::process::Command::new("sh")
                .arg("-c")
                .arg(LAUNCH)
                .args(["gantry-launch", stage_text, &script.len().to_string(), "sh"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(script.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(launch(), "started\n");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !stage.join("status").exists() {
            assert!(std::time::Instant::now() < deadline, "the stage ends");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(launch(), "running\n", "not twice");
        assert_eq!(
            std::fs::read_to_string(stage.join("out")).unwrap(),
            "one\nthree\n"
        );
        let files = RemoteFiles::in_dir(stage_text);
        let follow = |o: u64, e: u64| super::super::follow::run_follow(&files, (o, e));
        let all = follow(0, 0);
        assert_eq!(all.status.code(), Some(0));
        assert_eq!(all.stdout, b"one\nthree\n");
        assert_eq!(all.stderr, b"two\n");
        let rest = follow(4, 4);
        assert_eq!(
            (rest.stdout.as_slice(), rest.stderr.as_slice()),
            (&b"three\n"[..], &b""[..])
        );
        // A stage whose process is gone without an exit code.
        std::fs::remove_file(stage.join("status")).unwrap();
        std::fs::write(stage.join("pid"), "999999999\n").unwrap();
        assert_eq!(follow(10, 4).status.code(), Some(3));
    }
}
