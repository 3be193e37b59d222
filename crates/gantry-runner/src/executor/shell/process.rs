//! The script's process group: spawn it alone in its own group, stream its output, and
//! end the whole group (grandchildren included) on timeout, cancellation, or when the
//! stage is over.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::journal::RunningJob;
use crate::trace::{Trace, TraceWriter};

/// After the group is SIGKILLed, how long to wait for the pipes to close before giving
/// up on a process that escaped the group (e.g. `setsid`) but holds them open.
const PIPE_DRAIN_AFTER_KILL: Duration = Duration::from_secs(2);

/// A running script: the shell, its group id, and the tasks copying its output.
pub(crate) struct Running {
    child: Child,
    group: Option<Group>,
    pumps: Vec<JoinHandle<()>>,
    /// The group's entry in the job's record, cleared when this is dropped (after
    /// [`Running::finish`] or [`Running::release`]).
    recorded: Option<Recorded>,
    /// The stage's resource meter: [`Running::wait`] reads the shell's final figures
    /// before reaping it, and a sampler follows its process tree meanwhile.
    measured: Option<crate::resources::ProcessMeter>,
}

/// A process group named in a job's record ([`crate::journal`]) while it runs.
struct Recorded {
    job: Arc<RunningJob>,
    pid: u32,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.job.group_ended(self.pid);
    }
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
    command.args(args).current_dir(work_dir);
    spawn_command(
        command,
        Sink::Trace(Box::new(trace.writer(gantry_protocol::StreamKind::Stdout))),
        Sink::Trace(Box::new(trace.writer(gantry_protocol::StreamKind::Stderr))),
    )
}

/// Where one output stream of a process goes.
pub(crate) enum Sink {
    /// Into the job log.
    Trace(Box<TraceWriter>),
    /// Kept in memory, up to a limit (bytes past it are counted, not kept).
    Capture(Arc<Mutex<Captured>>),
    /// Handed over a line at a time (the runner's own log).
    Lines(Box<dyn FnMut(&str) + Send>),
}

/// Output kept by [`Sink::Capture`].
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) bytes: Vec<u8>,
    pub(crate) limit: usize,
    /// Bytes past the limit, dropped.
    pub(crate) dropped: u64,
}

impl Captured {
    pub(crate) fn with_limit(limit: usize) -> Arc<Mutex<Self>> {
        Arc::new(Mutex::new(Self {
            limit,
            ..Self::default()
        }))
    }
}

/// Spawns `command` (program, arguments, directory and environment set by the caller)
/// alone in a new process group, stdin closed, its two output streams copied into
/// `stdout` and `stderr`.
pub(crate) fn spawn_command(
    mut command: Command,
    stdout: Sink,
    stderr: Sink,
) -> std::io::Result<Running> {
    command
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
    if let Some(out) = child.stdout.take() {
        pumps.push(tokio::spawn(pump(out, stdout)));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(tokio::spawn(pump(err, stderr)));
    }
    Ok(Running {
        child,
        group,
        pumps,
        recorded: None,
        measured: None,
    })
}

async fn pump(mut reader: impl AsyncRead + Unpin, mut sink: Sink) {
    let mut buf = vec![0u8; 32 * 1024];
    let mut line = Vec::new();
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => match &mut sink {
                Sink::Trace(writer) => writer.write(&buf[..n]),
                Sink::Capture(captured) => {
                    let mut captured = captured.lock().unwrap_or_else(PoisonError::into_inner);
                    let room = captured.limit.saturating_sub(captured.bytes.len());
                    let kept = n.min(room);
                    captured.bytes.extend_from_slice(&buf[..kept]);
                    captured.dropped += (n - kept) as u64;
                }
                Sink::Lines(handle) => {
                    for &byte in &buf[..n] {
                        if byte == b'\n' {
                            handle(String::from_utf8_lossy(&line).trim_end());
                            line.clear();
                        } else if line.len() < MAX_LINE {
                            line.push(byte);
                        }
                    }
                }
            },
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    match &mut sink {
        Sink::Trace(writer) => writer.finish(),
        Sink::Lines(handle) if !line.is_empty() => {
            handle(String::from_utf8_lossy(&line).trim_end())
        }
        _ => {}
    }
}

/// Longest line a [`Sink::Lines`] hands over; the rest of a longer line is dropped.
const MAX_LINE: usize = 8 * 1024;

/// Why [`Running::wait_until`] returned.
pub(crate) enum Stop {
    /// The process exited.
    Ended(Ended),
    /// The time ran out (the process still runs).
    Timeout,
    /// The stage was stopped from outside (the process still runs).
    Canceled(super::CancelReason),
}

impl Running {
    /// Names the process group in `job`'s record while it runs, so that a runner that
    /// dies meanwhile kills it when it starts again.
    pub(crate) fn record_in(&mut self, job: Option<&Arc<RunningJob>>) {
        let (Some(job), Some(pid)) = (job, self.child.id()) else {
            return;
        };
        job.group_started(pid);
        self.recorded = Some(Recorded {
            job: Arc::clone(job),
            pid,
        });
    }

    /// Waits for the process to exit, `timeout` to pass or `cancel` to complete.
    pub(crate) async fn wait_until(
        &mut self,
        timeout: Duration,
        cancel: impl std::future::Future<Output = super::CancelReason>,
    ) -> Stop {
        let cancel = std::pin::pin!(cancel);
        tokio::select! {
            ended = self.wait() => Stop::Ended(ended),
            () = tokio::time::sleep(timeout) => Stop::Timeout,
            reason = cancel => Stop::Canceled(reason),
        }
    }

    /// Measures the script's process tree into `stage` until it ends (see
    /// [`crate::resources::process_tree`]).
    pub(crate) fn measure(&mut self, stage: crate::resources::StageMeter) {
        if let Some(pid) = self.child.id() {
            self.measured = Some(crate::resources::ProcessMeter::start(stage, pid));
        }
    }

    /// Waits for the shell to exit (when measured, reading its final figures before
    /// it is reaped).
    pub(crate) async fn wait(&mut self) -> Ended {
        if let Some(measured) = self.measured.take() {
            measured.exited().await;
        }
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
        match self.terminate_within(grace, None).await {
            Some(ended) => ended,
            None => self.wait().await,
        }
    }

    /// [`terminate`](Running::terminate), giving up after `force` more past the
    /// SIGKILL (`None`: waiting as long as it takes): a process stuck in the kernel
    /// is abandoned, as gitlab-runner's `force_kill_timeout` does.
    pub(crate) async fn terminate_within(
        &mut self,
        grace: Duration,
        force: Option<Duration>,
    ) -> Option<Ended> {
        if let Some(group) = &self.group {
            group.signal(Signal::SIGTERM);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => Some(Ended::Exited(status)),
            Ok(Err(error)) => Some(Ended::Failed(error)),
            Err(_) => {
                if let Some(group) = &self.group {
                    group.signal(Signal::SIGKILL);
                }
                match force {
                    None => Some(self.wait().await),
                    Some(force) => tokio::time::timeout(force, self.wait()).await.ok(),
                }
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

impl Running {
    /// After the program exited: leaves whatever it started in the background running
    /// (the custom executor's driver may start a VM or a container for later stages)
    /// and reads its output for up to `drain` more (a background process may hold the
    /// pipes open for good).
    pub(crate) async fn release(mut self, drain: Duration) {
        if let Some(group) = self.group.take() {
            std::mem::forget(group); // no SIGKILL on drop
        }
        let mut pumps = std::mem::take(&mut self.pumps);
        if tokio::time::timeout(drain, join_all(&mut pumps))
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
