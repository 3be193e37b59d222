//! Script stages that outlive the runner process (`gantry runner run`, shell executor).
//!
//! With a job record kept ([`crate::journal`]), the shell of a script stage
//! (`step_script`, `after_script`, …) does not write into pipes held by the runner: a
//! small `/bin/sh` wrapper, the leader of the stage's process group, runs it with its
//! standard output and error appended to two files in the job's temporary directory,
//! then writes its exit code to a third. The runner copies the files into the log as
//! they grow ([`tail`]). If the runner process dies, the stage goes on: nothing it
//! writes to breaks, and its exit code is kept. A restarted runner finds the stage in
//! the job's record, [reattaches](Detached::reattach_with) to it — reading on from the last
//! point whose output the coordinator is known to hold ([`LogCheckpoint`]) — and the
//! job goes on from there.
//!
//! No byte is lost and none is sent twice: the copy gives the log whole lines only
//! (a line without its end goes on after [`PARTIAL_LINE_WAIT`], or at the stage's end),
//! and after each batch it records a *point* in the job's record — how far it read each
//! file, and the log's length then — before the log may be sent past it
//! ([`TraceBuffer::send_until`](crate::trace::TraceBuffer::send_until)). Whatever the
//! moment the runner dies, the coordinator's log ends at a recorded point, and the next
//! runner reads on from exactly there ([`DetachedStage::resume_point`]). Only a log more
//! than a patch (1 MiB) behind can be cut between points; the output after the last
//! point before the cut then comes again, and the takeover line says so.
//!
//! A stage stays in the job's record after it ended, until the record's next change
//! replaces it in the same write (the next stage, or the end of the steps), so the
//! record always names a point the job can go on from.

use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::process::Ended;
use crate::journal::{DetachedStage, LogCheckpoint, ProcessStamp, RunningJob, StageFiles};
use crate::trace::{Trace, TraceWriter};
use std::collections::VecDeque;

/// The wrapper: runs `"$@"` with its output appended to `$1` and `$2`, then writes its
/// exit code to `$3` (through a rename, so a reader never sees half of it).
const WRAPPER: &str = r#"out=$1 err=$2 status=$3
shift 3
"$@" >>"$out" 2>>"$err" </dev/null
code=$?
printf '%s\n' "$code" >"$status.part" && mv -f "$status.part" "$status"
exit "$code"
"#;

/// How often a reattached stage's exit code is looked for, and the files are read while
/// the stage prints nothing (they are read at once when written, see [`Wake`]).
const POLL: Duration = Duration::from_millis(50);

/// Bytes read from a file at a time.
const READ_CHUNK: usize = 64 * 1024;

/// How long the start of a line waits for its end before it goes into the log.
const PARTIAL_LINE_WAIT: Duration = Duration::from_secs(1);

/// Points a record holds past its checkpoint; the log is held back while there are
/// this many (until the coordinator acknowledges some).
const MAX_POINTS: usize = 128;

/// A detached script stage this runner watches.
pub(crate) struct Detached {
    /// The wrapper, when this process started it (`None` after a reattach).
    child: Option<Child>,
    leader: ProcessStamp,
    files: StageFiles,
    /// Taken by [`Detached::finish`]; dropped with the stage otherwise.
    output: Option<StageOutput>,
    job: Arc<RunningJob>,
    /// Kill the group when dropped (cleared by [`Detached::finish`]).
    armed: bool,
    /// The stage's resource meter, when measured ([`Detached::measure`]).
    measured: Option<crate::resources::ProcessMeter>,
}

/// The copy of a detached stage's files into the log (every executor whose stages
/// write files: shell, custom, Docker).
pub(crate) struct StageOutput {
    done: watch::Sender<bool>,
    tail: Option<JoinHandle<()>>,
    trace: Trace,
}

impl StageOutput {
    /// Starts copying `files` into `trace` from `from` (the stage's start when `None`),
    /// recording points in `job`.
    pub(crate) fn start(
        files: &StageFiles,
        from: Option<LogCheckpoint>,
        trace: &Trace,
        job: &Arc<RunningJob>,
    ) -> Self {
        let (done, watching) = watch::channel(false);
        let writers = [
            trace.writer(gantry_protocol::StreamKind::Stdout),
            trace.writer(gantry_protocol::StreamKind::Stderr),
        ];
        let points = Points {
            job: Arc::clone(job),
            trace: trace.clone(),
            unacked: VecDeque::new(),
            last: None,
        };
        let from = from.map_or([0, 0], |c| [c.out, c.err]);
        let tail = tokio::spawn(tail(
            [files.out.clone(), files.err.clone()],
            from,
            writers,
            watching,
            points,
        ));
        Self {
            done,
            tail: Some(tail),
            trace: trace.clone(),
        }
    }

    /// Reads the files to their end into the log, which may then be sent whole.
    pub(crate) async fn finish(mut self) {
        let _ = self.done.send(true);
        if let Some(tail) = self.tail.take() {
            let _ = tail.await;
        }
    }
}

impl Drop for StageOutput {
    fn drop(&mut self) {
        if let Some(tail) = &self.tail {
            tail.abort();
        }
        self.trace.buffer().send_until(None);
    }
}

/// The files of stage `name` in `dir`.
pub(crate) fn stage_files(dir: &Path, name: &str) -> StageFiles {
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    StageFiles {
        out: dir.join(format!("stage_{name}.out")),
        err: dir.join(format!("stage_{name}.err")),
        status: dir.join(format!("stage_{name}.status")),
    }
}

impl Detached {
    /// Starts `program` (its arguments, directory and environment) through the
    /// wrapper, alone in a new process group, and records it in `job` as `stage` (the
    /// record is synced first).
    pub(crate) fn spawn(
        program: &std::process::Command,
        files: StageFiles,
        place: crate::journal::StagePlace,
        trace: &Trace,
        job: &Arc<RunningJob>,
    ) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        for path in [&files.out, &files.err] {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)?;
        }
        match std::fs::remove_file(&files.status) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("gantry-stage")
            .arg(&files.out)
            .arg(&files.err)
            .arg(&files.status)
            .arg(program.get_program())
            .args(program.get_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Killed by `Drop` below unless the job is handed over.
            .process_group(0);
        if let Some(dir) = program.get_current_dir() {
            command.current_dir(dir);
        }
        for (key, value) in program.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let child = command.spawn()?;
        let pid = child.id().unwrap_or(0);
        let Some(leader) = i32::try_from(pid).ok().and_then(ProcessStamp::of) else {
            return Err(std::io::Error::other(
                "the stage's process cannot be identified in /proc",
            ));
        };
        job.group_started(pid);
        job.stage_detached(DetachedStage {
            place,
            group: Some(leader.clone()),
            container: None,
            remote: None,
            files: files.clone(),
            checkpoint: None,
            points: Vec::new(),
        });
        // The first point (nothing of the stage printed) is taken at once, so the
        // log's CRC is known even if the runner dies before it prints.
        Ok(Self::watch(Some(child), leader, files, None, trace, job))
    }

    /// [`reattach`](Self::reattach) with the job's record (which a reattach needs), and
    /// the time left until the stage's deadline.
    pub(crate) fn reattach_with(
        stage: &DetachedStage,
        trace: &Trace,
        job: Option<&Arc<RunningJob>>,
    ) -> Result<(Self, Duration), super::StageOutcome> {
        let Some(job) = job else {
            return Err(super::StageOutcome::SystemFailure {
                error: super::ShellError::Detached {
                    message: "a detached stage needs the job's record".to_owned(),
                }
                .into(),
            });
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let left = Duration::from_millis(stage.place.deadline_unix_ms).saturating_sub(now);
        let Some(leader) = stage.group.clone() else {
            return Err(super::StageOutcome::SystemFailure {
                error: super::ShellError::Detached {
                    message: "the record of the detached stage names no process group".to_owned(),
                }
                .into(),
            });
        };
        let running = Self::watch(
            None,
            leader,
            stage.files.clone(),
            stage.checkpoint,
            trace,
            job,
        );
        Ok((running, left))
    }

    fn watch(
        child: Option<Child>,
        leader: ProcessStamp,
        files: StageFiles,
        from: Option<LogCheckpoint>,
        trace: &Trace,
        job: &Arc<RunningJob>,
    ) -> Self {
        let output = StageOutput::start(&files, from, trace, job);
        Self {
            child,
            leader,
            files,
            output: Some(output),
            job: Arc::clone(job),
            armed: true,
            measured: None,
        }
    }

    /// Measures the stage's process tree into `stage` (see
    /// [`crate::resources::process_tree`]); the final figures are read before the
    /// wrapper is reaped when this process started it.
    pub(crate) fn measure(&mut self, stage: crate::resources::StageMeter) {
        if let Ok(pid) = u32::try_from(self.leader.pid) {
            self.measured = Some(crate::resources::ProcessMeter::start(stage, pid));
        }
    }

    /// Waits for the stage's shell to end.
    pub(crate) async fn wait(&mut self) -> Ended {
        if let Some(child) = &mut self.child {
            if let Some(measured) = self.measured.take() {
                measured.exited().await;
            }
            return match child.wait().await {
                Ok(status) => Ended::Exited(status),
                Err(error) => Ended::Failed(error),
            };
        }
        loop {
            if let Some(code) = read_status(&self.files.status) {
                return Ended::Exited(ExitStatus::from_raw((code & 0xff) << 8));
            }
            if !self.leader.running() {
                // It may have written the code just before exiting.
                return match read_status(&self.files.status) {
                    Some(code) => Ended::Exited(ExitStatus::from_raw((code & 0xff) << 8)),
                    None => Ended::Failed(std::io::Error::other(
                        "the stage's shell ended without leaving its exit code (it was killed while no runner watched it)",
                    )),
                };
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits for the shell to exit, `timeout` to pass or `cancel` to complete.
    pub(crate) async fn wait_until(
        &mut self,
        timeout: Duration,
        cancel: impl std::future::Future<Output = super::CancelReason>,
    ) -> super::process::Stop {
        let cancel = std::pin::pin!(cancel);
        let job = Arc::clone(&self.job);
        tokio::select! {
            ended = self.wait() => super::process::Stop::Ended(ended),
            () = tokio::time::sleep(timeout) => super::process::Stop::Timeout,
            reason = cancel => super::process::Stop::Canceled(reason),
            // Handed over: the job stays in this stage until the process exits, for the
            // next runner process to take it over.
            () = job.handed_over() => std::future::pending().await,
        }
    }

    /// Signals the group while it is the stage's: its leader runs, or processes the
    /// leader left hold the group id ([`ProcessStamp::signal_group`]) — after a
    /// reattach too, so a script's background processes end with the stage.
    fn signal(&self, signal: Signal) -> bool {
        self.leader.signal_group(signal)
    }

    /// SIGTERM to the group, up to `grace` for the shell to end, then SIGKILL.
    pub(crate) async fn terminate(&mut self, grace: Duration) {
        self.signal(Signal::SIGTERM);
        if tokio::time::timeout(grace, self.wait()).await.is_err() {
            self.signal(Signal::SIGKILL);
            let _ = tokio::time::timeout(grace, self.wait()).await;
        }
    }

    /// After the shell ended: ends what is left of its group (with `end_group`; the
    /// custom executor's driver may leave a VM running for later stages) and reads the
    /// rest of the output into the log. The stage stays in the job's record, its files
    /// in place, until the record's next change replaces it (the next stage, the end of
    /// the steps): whatever moment the runner dies at, the record names a point the job
    /// can go on from. The files go with the job's temporary directory.
    pub(crate) async fn finish(mut self, grace: Duration, end_group: bool) {
        if end_group && self.signal(Signal::SIGTERM) {
            tokio::time::sleep(grace.min(Duration::from_millis(200))).await;
            self.signal(Signal::SIGKILL);
        }
        self.armed = false;
        if let Some(output) = self.output.take() {
            output.finish().await;
        }
        self.job
            .group_ended(u32::try_from(self.leader.pid).unwrap_or(0));
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if self.armed && !self.job.handing_over() {
            // The future running the stage was dropped: nothing of the job survives.
            self.signal(Signal::SIGKILL);
        }
    }
}

/// The exit code in a status file, once it is there.
pub(crate) fn read_status(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Records points in the job's record and lets the log be sent up to the last one;
/// a point the coordinator acknowledged becomes the stage's checkpoint.
struct Points {
    job: Arc<RunningJob>,
    trace: Trace,
    /// Recorded, not yet acknowledged, oldest first.
    unacked: VecDeque<LogCheckpoint>,
    /// The last point recorded: `(out, err, log length)`.
    last: Option<(u64, u64, u64)>,
}

impl Points {
    /// After a pass that gave the log the files' bytes up to `consumed` (whole lines,
    /// the writers flushed): records a point if anything changed; returns the offsets
    /// of a point just acknowledged.
    fn tick(&mut self, consumed: [u64; 2]) -> Option<[u64; 2]> {
        let (sent, len, crc) = {
            let buffer = self.trace.buffer();
            (buffer.sent_offset(), buffer.len(), buffer.known_crc32())
        };
        let mut acked = None;
        while self.unacked.front().is_some_and(|p| p.log_len <= sent) {
            acked = self.unacked.pop_front();
        }
        let point = (consumed[0], consumed[1], len);
        let new = self.last != Some(point) && self.unacked.len() < MAX_POINTS;
        if new {
            self.unacked.push_back(LogCheckpoint {
                out: consumed[0],
                err: consumed[1],
                log_len: len,
                crc,
            });
            self.last = Some(point);
        }
        if new || acked.is_some() {
            self.job.checkpoint(acked, self.unacked.make_contiguous());
        }
        if new {
            // Recorded first: the coordinator never holds more than a point says.
            self.trace.buffer().send_until(Some(len));
        }
        acked.map(|p| [p.out, p.err])
    }
}

/// Gives the disk blocks of `file` before `upto` back (a hole: reads there return
/// zeros, the size and later offsets stay): output the coordinator holds is not kept
/// twice, so a stage that prints gigabytes does not fill the disk. File systems without
/// holes keep the bytes.
fn release(file: &std::fs::File, upto: u64) {
    use nix::fcntl::{FallocateFlags, fallocate};
    const BLOCK: u64 = 64 * 1024;
    let end = upto / BLOCK * BLOCK;
    if end == 0 {
        return;
    }
    let Ok(len) = i64::try_from(end) else { return };
    let _ = fallocate(
        file,
        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
        0,
        len,
    );
}

/// Wakes the copy of a stage's output when one of its files is written (inotify, read
/// by a thread of its own), so output and error lines reach the log in the order they
/// were written, as they do from pipes — unless both files were written since the last
/// read. Without inotify (no instance or watch left), the files are read every
/// [`POLL`].
struct Wake {
    written: Arc<tokio::sync::Notify>,
    /// Ends the thread (within [`POLL`]) when this is dropped.
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Wake {
    fn new(files: &[PathBuf; 2]) -> Self {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let written = Arc::new(tokio::sync::Notify::new());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .ok()
            .filter(|inotify| {
                files
                    .iter()
                    .all(|file| inotify.add_watch(file, AddWatchFlags::IN_MODIFY).is_ok())
            });
        if let Some(inotify) = inotify {
            let (written, stop) = (Arc::clone(&written), Arc::clone(&stop));
            let _ = std::thread::Builder::new()
                .name("gantry-stage-watch".to_owned())
                .spawn(move || watch_writes(&inotify, &written, &stop));
        }
        Self { written, stop }
    }

    /// Until a file is written (or was since the last call), or [`POLL`] passed.
    async fn written(&self) {
        tokio::select! {
            () = self.written.notified() => {}
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

impl Drop for Wake {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Tells `written` about each batch of `inotify`'s events until `stop`.
fn watch_writes(
    inotify: &nix::sys::inotify::Inotify,
    written: &tokio::sync::Notify,
    stop: &std::sync::atomic::AtomicBool,
) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let timeout = PollTimeout::try_from(POLL).unwrap_or(PollTimeout::NONE);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => {
                // The events only say "read again".
                while inotify.read_events().is_ok_and(|events| !events.is_empty()) {}
                written.notify_one();
            }
            Err(_) => return,
        }
    }
}

/// Copies what is appended to `files` (from `offsets`) into `writers`, whole lines
/// at a time, until `done` says the stage is over; then reads to the end once more and
/// flushes the writers.
async fn tail(
    files: [PathBuf; 2],
    mut offsets: [u64; 2],
    mut writers: [TraceWriter; 2],
    mut done: watch::Receiver<bool>,
    mut points: Points,
) {
    let wake = Wake::new(&files);
    let mut open: [Option<std::fs::File>; 2] = [None, None];
    // Read, not yet in the log: the start of a line, and since when it waits.
    let mut held: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut held_since = [tokio::time::Instant::now(); 2];
    let mut buf = vec![0u8; READ_CHUNK];
    points.tick(offsets);
    loop {
        let last_pass = *done.borrow_and_update();
        let mut got = false;
        for i in 0..2 {
            if open[i].is_none() {
                // Writable to give read blocks back (`release`); a file the stage
                // made (another user's) is only read.
                open[i] = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&files[i])
                    .or_else(|_| std::fs::File::open(&files[i]))
                    .ok();
            }
            let Some(file) = &open[i] else { continue };
            loop {
                let n = match file.read_at(&mut buf, offsets[i]) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => 0,
                };
                if n == 0 {
                    break;
                }
                got = true;
                let data = &buf[..n];
                if held[i].is_empty() {
                    held_since[i] = tokio::time::Instant::now();
                }
                match data.iter().rposition(|&b| b == b'\n') {
                    Some(end) => {
                        writers[i].write(&held[i]);
                        writers[i].write(&data[..=end]);
                        writers[i].finish();
                        held[i].clear();
                        held[i].extend_from_slice(&data[end + 1..]);
                        held_since[i] = tokio::time::Instant::now();
                    }
                    None => held[i].extend_from_slice(data),
                }
                offsets[i] += n as u64;
                if n < buf.len() {
                    break;
                }
            }
            let waited = held_since[i].elapsed() >= PARTIAL_LINE_WAIT;
            if !held[i].is_empty() && (last_pass || waited || held[i].len() >= READ_CHUNK) {
                writers[i].write(&held[i]);
                writers[i].finish();
                held[i].clear();
            }
        }
        let consumed = [
            offsets[0] - held[0].len() as u64,
            offsets[1] - held[1].len() as u64,
        ];
        if let Some(acked) = points.tick(consumed) {
            for (file, upto) in open.iter().zip(acked) {
                if let Some(file) = file {
                    release(file, upto);
                }
            }
        }
        if last_pass {
            break;
        }
        if !got {
            tokio::select! {
                () = wake.written() => {}
                _ = done.changed() => {}
            }
        }
    }
    for writer in &mut writers {
        writer.finish();
    }
    points.trace.buffer().send_until(None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_files_are_named_after_the_stage() {
        let files = stage_files(Path::new("/b/p.tmp"), "step_script");
        assert_eq!(files.out, Path::new("/b/p.tmp/stage_step_script.out"));
        assert_eq!(files.err, Path::new("/b/p.tmp/stage_step_script.err"));
        assert_eq!(files.status, Path::new("/b/p.tmp/stage_step_script.status"));
        assert_eq!(
            stage_files(Path::new("/t"), "a b/c").out,
            Path::new("/t/stage_a_b_c.out")
        );
    }

    #[test]
    fn read_output_gives_its_disk_blocks_back_and_later_bytes_stay() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let before = std::fs::metadata(&path).unwrap().blocks();
        release(&file, 800_000);
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!(after.len(), 1_000_000, "the size stays");
        assert!(
            after.blocks() < before,
            "blocks {before} → {}",
            after.blocks()
        );
        let mut tail = vec![0u8; 200_000];
        file.read_exact_at(&mut tail, 800_000).unwrap();
        assert_eq!(tail, data[800_000..]);
        // Less than a block: nothing to give back.
        release(&file, 10);
    }

    /// The log is sent only up to a point the record names, and output read on from
    /// the point the coordinator's log ends at comes exactly once.
    #[tokio::test]
    async fn the_log_is_held_to_recorded_points_and_goes_on_from_one() {
        use crate::trace::{MaskSet, TraceOptions};
        let dir = tempfile::tempdir().unwrap();
        let journal = crate::journal::Journal::open(dir.path().join("j")).unwrap();
        let payload = gantry_protocol::JobResponse {
            id: 5,
            token: "glcbt-5".into(),
            ..Default::default()
        };
        let resume = crate::journal::ResumeRecord {
            runner: "abc".into(),
            concurrent_id: 0,
            concurrent_project_id: 0,
            received_unix_ms: 0,
        };
        let job = Arc::new(
            journal
                .start_resumable("http://c.example/", &payload, resume)
                .unwrap(),
        );
        let files = stage_files(dir.path(), "step_script");
        std::fs::write(&files.out, "one\ntwo\npart").unwrap();
        std::fs::write(&files.err, "").unwrap();
        job.stage_detached(DetachedStage {
            place: crate::journal::StagePlace {
                at: crate::journal::StageAt::Step(0),
                name: "step_script".into(),
                before: crate::journal::RecordedEnding::Success,
                deadline_unix_ms: u64::MAX,
                limit_secs: 1,
            },
            group: None,
            container: None,
            remote: None,
            files: files.clone(),
            checkpoint: None,
            points: Vec::new(),
        });
        let trace = Trace::new(MaskSet::empty(), TraceOptions::default());
        trace.runner_line("header");
        let header = trace.buffer().len();
        let output = StageOutput::start(&files, None, &trace, &job);
        let recorded = || {
            let record: serde_json::Value = serde_json::from_slice(
                &std::fs::read(
                    std::fs::read_dir(journal.dir())
                        .unwrap()
                        .map(|e| e.unwrap().path())
                        .find(|p| p.extension().is_some_and(|e| e == "json"))
                        .unwrap(),
                )
                .unwrap(),
            )
            .unwrap();
            let stage: DetachedStage = serde_json::from_value(record["stage"].clone()).unwrap();
            stage
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while trace.buffer().len() < header + 8 {
            assert!(std::time::Instant::now() < deadline, "the lines are read");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        // Whole lines only; the log may be sent as far as the last point recorded.
        assert_eq!(trace.contents()[header as usize..], *b"one\ntwo\n");
        let stage = recorded();
        let last = *stage.points.last().unwrap();
        assert_eq!((last.out, last.log_len), (8, header + 8));
        assert_eq!(
            stage.points[0].log_len, header,
            "the stage's start is a point"
        );
        assert_eq!(trace.buffer().unsent(), header + 8);
        // Appended after the point (another writer): not sendable until the next one.
        trace.runner_line("x");
        assert_eq!(trace.buffer().unsent(), header + 8);

        // The coordinator holds the log up to the last point: a runner taking over
        // reads on from there, and nothing comes twice.
        let (point, exact) = stage.resume_point(header + 8);
        assert!(exact);
        drop(output);
        let len = trace.buffer().len();
        assert_eq!(trace.buffer().unsent(), len, "released");
        let again = Trace::new(
            MaskSet::empty(),
            TraceOptions {
                continues: Some((header + 8, point.and_then(|p| p.crc))),
                ..TraceOptions::default()
            },
        );
        std::fs::write(&files.out, "one\ntwo\npartial line\nthree\n").unwrap();
        let output = StageOutput::start(&files, point, &again, &job);
        output.finish().await;
        let mut whole = trace.contents()[..(header + 8) as usize].to_vec();
        whole.extend(again.buffer().contents().unwrap());
        assert_eq!(
            whole[header as usize..],
            *b"one\ntwo\npartial line\nthree\n"
        );
        assert!(again.buffer().known_crc32().is_some());
    }

    #[test]
    fn a_status_file_is_read_once_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        assert_eq!(read_status(&path), None);
        std::fs::write(&path, "").unwrap();
        assert_eq!(read_status(&path), None);
        std::fs::write(&path, "3\n").unwrap();
        assert_eq!(read_status(&path), Some(3));
    }
}
