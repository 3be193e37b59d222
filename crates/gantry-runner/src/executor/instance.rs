//! The instance executor: each job on an instance of the entry's fleet
//! ([`crate::fleet`], `[runners.autoscaler]`), its scripts run over SSH.
//!
//! * `prepare_executor`: a slot is acquired from the taskscaler (waiting up to
//!   `instance_acquire_timeout` while the group grows), the plugin is asked how to
//!   connect (`ConnectInfo`), and an SSH session is opened (retried until
//!   `connector_config.timeout`). A failed connection counts against the instance's
//!   health (`failure_threshold`).
//! * Directories: the job sees `$HOME/builds/<short token>/<concurrent id>/<project
//!   path>` on the instance (gitlab-runner's instance executor keeps `builds/` in the
//!   login user's home too).
//! * **Where the build directory lives.** As with every executor, the runner itself
//!   fetches sources, restores and saves cache and moves artifacts — on this machine,
//!   so the instance needs nothing but a shell and `tar` (gitlab-runner needs git and
//!   its own binary there). The slot directory (the project and its `.tmp` sibling)
//!   travels as a tar stream over the SSH session: to the instance before the first
//!   stage that runs there, back before the runner's next step that reads or writes it
//!   (cache, artifacts). A usual job moves it twice.
//! * Every stage's script goes to the instance shell's standard input (`bash`, or `sh`
//!   with `shell = "sh"`); its exit code is the stage's. A timeout or cancellation sends
//!   SIGTERM to the stage's process group on the instance, then SIGKILL after the grace
//!   period. An instance that disappears under the job fails it as a system failure.
//! * At the end the slot directory is removed from the instance, the session closed
//!   and the slot released (with `max_use_count`, the instance may then be removed).
//!
//! In the code: the entry's fleet is started by its first job request (`poll::fleet_lease`,
//! one per entry key); the request's `Reservation` becomes an `Acquisition` in
//! `acquire.rs` (with the session, shared with docker-autoscaler), and the job is
//! re-placed with `BuildDirs::on_instance` and the lifecycle's `Placer`
//! (`crate::executor::prepare`, as the custom executor's relocation is). `RemoteSlot` moves the slot directory (`to_instance` before a
//! stage, `to_host` before the lifecycle's host work: sources after the pre hook, cache,
//! artifacts, each `run:` step's outputs) and knows which copy is newer (`remote_current`).
//! A stage starts with `echo $$ > <slot>.stage.pid`, so a timeout or cancel can signal its
//! process group.
//!
//! **Takeover.** Under `gantry runner run` (a job record kept, [`crate::journal`]) the
//! script stages run detached on the instance instead (`detached`), the acquisition is
//! kept in the taskscaler's state file under the job's key
//! ([`Acquisition::keep_as`]) and the record names it ([`crate::journal::InstanceRecord`]).
//! A runner that died and starts again restores the acquisition from the state file
//! (`[runners.autoscaler.state_storage]` must be enabled: without it the instances it
//! finds are removed, and the job fails saying so), opens a new session and goes on with
//! the stage where the coordinator's log ends (`Executor::resume`). The slot
//! directory's copy on the instance is then the newer one.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gantry_fleet::connector::{ConnectError, Exit, Session, Stream};
use gantry_fleet::taskscaler::Acquisition;

mod acquire;
mod detached;
pub(crate) mod follow;

pub(crate) use acquire::{OnInstance, acquire, keep_acquisition, prepare};

use crate::config::ShellKind;
use crate::executor::quote;
use crate::executor::shell::{stage_script, warn_on_timeout};
use crate::executor::{CancelReason, Stage, StageOutcome};
use crate::trace::Trace;
use gantry_protocol::StreamKind;

/// An instance executor failure.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// The SSH session failed.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The local slot directory could not be made.
    #[error("create `{}`: {source}", path.display())]
    Local {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The build directory could not be brought back from the instance.
    #[error("bring the build directory back from the instance: {0}")]
    Sync(String),
    /// The instance went away while the job ran on it.
    #[error("{0}; the job cannot go on without it")]
    Lost(String),
    /// The command's channel closed without an exit status.
    #[error("the connection to instance {instance} closed during {stage} without an exit status")]
    Closed {
        /// The instance.
        instance: String,
        /// The stage.
        stage: String,
    },
}

/// The job's slot directory here and its copy on an instance, moved over the SSH
/// session as tar streams when the other side needs the newer copy. Shared by the
/// instance and docker-autoscaler executors.
pub(crate) struct RemoteSlot {
    session: Session,
    /// The slot directory here.
    local: PathBuf,
    /// The slot directory on the instance.
    remote: String,
    /// Whether the instance's copy of the slot directory is the newer one.
    remote_current: AtomicBool,
    /// Serializes moves of the slot directory.
    sync: tokio::sync::Mutex<()>,
    /// Bytes moved each way, for the log at the end.
    moved: Mutex<(u64, u64)>,
}

impl RemoteSlot {
    /// The slot directory `local` here, `remote` on the instance `session` reaches.
    pub(crate) fn new(session: Session, local: PathBuf, remote: String) -> Self {
        Self {
            session,
            local,
            remote,
            remote_current: AtomicBool::new(false),
            sync: tokio::sync::Mutex::new(()),
            moved: Mutex::new((0, 0)),
        }
    }

    /// The instance holds the newer copy of the slot directory (a job taken over after
    /// its stages ran there).
    pub(crate) fn instance_is_current(&self) {
        self.remote_current.store(true, Ordering::SeqCst);
    }

    /// The session to the instance.
    pub(crate) fn session(&self) -> &Session {
        &self.session
    }

    /// The slot directory on the instance.
    pub(crate) fn remote(&self) -> &str {
        &self.remote
    }

    /// Copies the slot directory to the instance unless it has the newer copy.
    pub(crate) async fn to_instance(&self) -> Result<(), InstanceError> {
        let _guard = self.sync.lock().await;
        if self.remote_current.load(Ordering::SeqCst) {
            return Ok(());
        }
        std::fs::create_dir_all(&self.local).map_err(|source| InstanceError::Local {
            path: self.local.clone(),
            source,
        })?;
        let bytes = self.session.upload_dir(&self.local, &self.remote).await?;
        self.moved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0 += bytes;
        self.remote_current.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Copies the slot directory back here when the instance has the newer copy
    /// (before the runner's own steps on the build directory).
    pub(crate) async fn to_host(&self) -> Result<(), InstanceError> {
        let _guard = self.sync.lock().await;
        if !self.remote_current.load(Ordering::SeqCst) {
            return Ok(());
        }
        let bytes = self.session.download_dir(&self.remote, &self.local).await?;
        self.moved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1 += bytes;
        self.remote_current.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Removes the slot directory (and `also`) from the instance and logs how much
    /// moved. Problems become warnings.
    pub(crate) async fn cleanup(&self, also: &[&str], trace: &Trace) {
        let mut script = format!("rm -rf -- {}", quote(&self.remote));
        for path in also {
            script.push(' ');
            script.push_str(&quote(path));
        }
        let id = self.session.instance_id();
        match self.session.run(&script, b"", &mut |_, _| {}).await {
            Ok(Exit::Code(0)) => {}
            Ok(exit) => trace.warning(&format!(
                "cleaning up: removing {} from instance {id} ended with {exit}",
                self.remote
            )),
            Err(error) => trace.warning(&format!("cleaning up: failed to {error}")),
        }
        let (up, down) = *self
            .moved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        trace.runner_line(&format!(
            "Moved the build directory: {} to instance {id}, {} back",
            human_bytes(up),
            human_bytes(down)
        ));
    }
}

/// A prepared instance executor (see the module docs).
pub(crate) struct InstanceExecutor {
    slot: RemoteSlot,
    acquisition: Acquisition,
    shell: ShellKind,
    kill_grace: Duration,
    /// Script stages run detached ([`detached`]).
    detach: Option<detached::Detach>,
}

impl InstanceExecutor {
    /// An executor on the acquired instance with an open session.
    pub(crate) fn new(
        slot: RemoteSlot,
        acquisition: Acquisition,
        shell: ShellKind,
        kill_grace: Duration,
    ) -> Self {
        Self {
            slot,
            acquisition,
            shell,
            kill_grace,
            detach: None,
        }
    }

    /// The instance's id.
    pub(crate) fn instance_id(&self) -> &str {
        self.acquisition.instance_id()
    }

    /// Copies the slot directory back here when the instance has the newer copy.
    pub(crate) async fn to_host(&self) -> Result<(), InstanceError> {
        self.slot.to_host().await
    }

    /// Runs `stage` on the instance (see the module docs).
    pub(crate) async fn run(
        &self,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        if let (Some(detach), Some(place)) = (&self.detach, stage.detach) {
            return self.run_detached(detach, stage, place, trace, cancel).await;
        }
        if let Err(error) = self.slot.to_instance().await {
            return StageOutcome::SystemFailure {
                error: error.into(),
            };
        }
        let script = stage_script(self.shell, stage, trace);
        // `: |` gives the script's commands an empty standard input, so a command that
        // reads it cannot eat the rest of the script.
        let input = format!(": | eval {}\n", quote(&script));
        let pid_file = self.pid_file();
        let command = format!(
            "echo $$ > {}; exec {}",
            quote(&pid_file),
            self.shell.as_str()
        );
        let mut out = trace.writer(StreamKind::Stdout);
        let mut err = trace.writer(StreamKind::Stderr);
        let _sampler = stage.meter.map(|meter| self.measure(meter, &pid_file));
        let outcome = {
            let mut sink = |stream: Stream, bytes: &[u8]| match stream {
                Stream::Stdout => out.write(bytes),
                Stream::Stderr => err.write(bytes),
            };
            let running = self
                .slot
                .session()
                .run(&command, input.as_bytes(), &mut sink);
            tokio::pin!(running);
            tokio::select! {
                exit = &mut running => Ok(exit),
                () = tokio::time::sleep(stage.timeout) => Err(StageOutcome::Timeout { after: stage.timeout }),
                reason = cancel => Err(StageOutcome::Canceled { reason }),
                reason = self.acquisition.lost() => Err(StageOutcome::SystemFailure {
                    error: InstanceError::Lost(reason).into(),
                }),
            }
        };
        let outcome = match outcome {
            Ok(exit) => exit_outcome(exit, stage.name, self.instance_id()),
            Err(stopped) => {
                // Stopped from here: the stage's processes on the instance get SIGTERM,
                // then SIGKILL.
                self.kill_stage(&pid_file).await;
                stopped
            }
        };
        out.finish();
        err.finish();
        warn_on_timeout(trace, stage.name, outcome)
    }

    /// Samples the stage's process tree on the instance (its shell's id is in
    /// `pid_file` there) into a new stage of `meter`, over the job's SSH session, until
    /// the returned sampler is dropped; the last sample is the stage's figure.
    pub(crate) fn measure(
        &self,
        meter: &crate::resources::JobMeter,
        pid_file: &str,
    ) -> crate::resources::Sampler {
        let session = self.slot.session().clone();
        let command =
            crate::resources::process_tree::dump_command(&crate::executor::quote(pid_file));
        crate::resources::sample_every(std::sync::Arc::new(meter.stage()), move || {
            let (session, command) = (session.clone(), command.clone());
            async move {
                let mut dump = Vec::new();
                let mut sink = |stream: Stream, bytes: &[u8]| {
                    if matches!(stream, Stream::Stdout) && dump.len() < (1 << 20) {
                        dump.extend_from_slice(bytes);
                    }
                };
                session.run(&command, b"", &mut sink).await.ok()?;
                crate::resources::process_tree::from_dump(&String::from_utf8_lossy(&dump))
            }
        })
    }

    fn pid_file(&self) -> String {
        format!("{}.stage.pid", self.slot.remote().trim_end_matches('/'))
    }

    /// SIGTERM to the process group of the stage on the instance, SIGKILL after the
    /// grace period.
    async fn kill_stage(&self, pid_file: &str) {
        let grace = self.kill_grace.as_secs().max(1);
        let script = format!(
            "p=$(cat {pid} 2>/dev/null) || exit 0; kill -TERM -- -\"$p\" 2>/dev/null; \
             i=0; while kill -0 -- -\"$p\" 2>/dev/null && [ $i -lt {grace} ]; do sleep 1; i=$((i+1)); done; \
             kill -KILL -- -\"$p\" 2>/dev/null; exit 0",
            pid = quote(pid_file),
        );
        let _ = tokio::time::timeout(
            self.kill_grace + Duration::from_secs(10),
            self.slot.session().run(&script, b"", &mut |_, _| {}),
        )
        .await;
    }

    /// Removes the job's directory (and its detached stages') from the instance; the
    /// session closes and the slot is released when the executor is dropped. Problems
    /// become warnings.
    pub(crate) async fn cleanup(&self, trace: &Trace) {
        let stages = format!("{}.stages", self.slot.remote().trim_end_matches('/'));
        self.slot.cleanup(&[&self.pid_file(), &stages], trace).await;
    }
}

fn exit_outcome(exit: Result<Exit, ConnectError>, stage: &str, instance: &str) -> StageOutcome {
    match exit {
        Ok(Exit::Code(0)) => StageOutcome::Success,
        Ok(Exit::Code(code)) => StageOutcome::ScriptFailure { exit_code: code },
        Ok(Exit::Signal(signal)) => StageOutcome::ScriptFailure {
            exit_code: 128 + signal_number(&signal),
        },
        Ok(Exit::Closed) => StageOutcome::SystemFailure {
            error: InstanceError::Closed {
                instance: instance.to_owned(),
                stage: stage.to_owned(),
            }
            .into(),
        },
        Err(error) => StageOutcome::SystemFailure {
            error: InstanceError::Connect(error).into(),
        },
    }
}

/// The number of a signal named as SSH names them (`TERM`, `KILL`).
fn signal_number(name: &str) -> i32 {
    match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "ILL" => 4,
        "ABRT" => 6,
        "FPE" => 8,
        "KILL" => 9,
        "USR1" => 10,
        "SEGV" => 11,
        "USR2" => 12,
        "PIPE" => 13,
        "ALRM" => 14,
        "TERM" => 15,
        _ => 0,
    }
}

fn human_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KIB {
        format!("{bytes} B")
    } else if b < KIB * KIB {
        format!("{:.1} KiB", b / KIB)
    } else if b < KIB * KIB * KIB {
        format!("{:.1} MiB", b / KIB / KIB)
    } else {
        format!("{:.1} GiB", b / KIB / KIB / KIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(human_bytes(5 * 1024 * 1024 + 1), "5.0 MiB");
    }

    #[test]
    fn signals_become_shell_exit_codes() {
        assert_eq!(128 + signal_number("TERM"), 143);
        assert_eq!(128 + signal_number("KILL"), 137);
    }
}
