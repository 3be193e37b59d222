//! The script's process group: spawn it alone in its own group, stream its output, and
//! end the whole group (grandchildren included) on timeout, cancellation, or when the
//! stage is over.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::trace::{Trace, TraceWriter};

/// After the group is SIGKILLed, how long to wait for the pipes to close before giving
/// up on a process that escaped the group (e.g. `setsid`) but holds them open.
const PIPE_DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// A running script: the shell, its group id, and the tasks copying its output.
pub(crate) struct Running {
    child: Child,
    group: Option<Group>,
    pumps: Vec<JoinHandle<()>>,
}

/// How the shell ended.
pub(crate) enum Ended {
    Exited(ExitStatus),
    Failed(std::io::Error),
}

/// Kills the group with SIGKILL when dropped unless disarmed: if the future running a
/// stage is dropped, nothing of the job survives.
struct Group {
    pgid: Pid,
}

impl Group {
    fn signal(&self, signal: Signal) -> bool {
        killpg(self.pgid, signal).is_ok()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = killpg(self.pgid, Signal::SIGKILL);
    }
}

pub(crate) fn spawn(
    program: &Path,
    args: &[&std::ffi::OsStr],
    work_dir: &Path,
    trace: &Trace,
) -> std::io::Result<Running> {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(work_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(|id| Group {
            pgid: Pid::from_raw(id),
        });
    let mut pumps = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(
            stdout,
            trace.writer(gantry_protocol::StreamKind::Stdout),
        )));
    }
    if let Some(stderr) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(
            stderr,
            trace.writer(gantry_protocol::StreamKind::Stderr),
        )));
    }
    Ok(Running {
        child,
        group,
        pumps,
    })
}

async fn pump(mut reader: impl AsyncRead + Unpin, mut writer: TraceWriter) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => writer.write(&buf[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    writer.finish();
}

impl Running {
    /// Waits for the shell to exit.
    pub(crate) async fn wait(&mut self) -> Ended {
        match self.child.wait().await {
            Ok(status) => Ended::Exited(status),
            Err(error) => Ended::Failed(error),
        }
    }

    /// SIGTERM to the group and up to `grace` for the shell to exit; SIGKILL to the
    /// group if it does not. Background jobs still alive are left to [`finish`].
    ///
    /// [`finish`]: Running::finish
    pub(crate) async fn terminate(&mut self, grace: Duration) -> Ended {
        if let Some(group) = &self.group {
            group.signal(Signal::SIGTERM);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => Ended::Exited(status),
            Ok(Err(error)) => Ended::Failed(error),
            Err(_) => {
                if let Some(group) = &self.group {
                    group.signal(Signal::SIGKILL);
                }
                self.wait().await
            }
        }
    }

    /// After the shell exited: ends what is left of its group (background jobs) —
    /// SIGTERM, up to `grace` for the output to end, SIGKILL — and waits until all output
    /// is in the trace.
    pub(crate) async fn finish(mut self, grace: Duration) {
        let group = self.group.take();
        let mut pumps = std::mem::take(&mut self.pumps);
        let leftovers = group.as_ref().is_some_and(|g| g.signal(Signal::SIGTERM));
        if leftovers {
            let drained = tokio::time::timeout(grace, join_all(&mut pumps)).await;
            if drained.is_ok() {
                // Output closed; kill anything that ignored SIGTERM but closed its pipes.
                drop(group);
                return;
            }
        }
        drop(group); // SIGKILL to whatever is left
        if tokio::time::timeout(PIPE_DRAIN_AFTER_KILL, join_all(&mut pumps))
            .await
            .is_err()
        {
            for pump in &pumps {
                pump.abort();
            }
        }
    }
}

async fn join_all(pumps: &mut Vec<JoinHandle<()>>) {
    while let Some(pump) = pumps.last_mut() {
        let _ = pump.await;
        pumps.pop();
    }
}
