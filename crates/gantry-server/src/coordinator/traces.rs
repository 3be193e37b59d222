//! Job logs (§5): a runner's `PATCH /jobs/:id/trace` appended at the end only, and the
//! log read back (user API, coverage). Bytes in [`super::trace_files`], the committed
//! size in the store: append = write the bytes at the committed size, then commit the
//! new size; read = exactly the committed size.
//!
//! With blobs in object storage (shared by every coordinator), a job's log is archived
//! there when the runner reports its final state, before that state is committed
//! ([`Traces::sync_trace`]); a coordinator without the local file reads the archive.
//! Logs of jobs that end otherwise (canceled, timed out by the coordinator, lost) are
//! archived in the background once they ended ([`Traces::spawn_archive_traces`],
//! from the state change).
//!
//! A patch is checked before its body is read ([`Coordinator::begin_trace_append`]: the
//! job runs, the offset is the end, a declared length fits the limit), then its body is
//! written to the file as it arrives ([`TraceAppend::write`]), so receiving the bytes and
//! writing them overlap and no patch is held whole in memory.
//!
//! The body is written under the job's append lock and given up after
//! `CoordinatorConfig::trace_body_idle_timeout` of silence. The user API streams the
//! committed bytes from the file (`TraceSource`, through `http::file_body`), as it streams
//! artifacts.
//!
//! Coordinators that share their blobs are replicas behind one address: a job's patches
//! may reach any of them. They keep a running job's log in the database instead
//! (`trace_chunks`, each patch's bytes written with the new size in one transaction), so
//! any replica takes the next patch and serves the log; once the log is archived the
//! rows go ([`gantry_store::Store::drop_trace_chunks`]).
//!
//! The service ([`Traces`], `Coordinator::traces`) owns the log files and what was
//! archived; it reads, syncs and archives logs, calling the store and the blob store
//! only. Appends stay on the coordinator (a patch past the limit fails the job, a
//! decision) and take the service's per-job lock.

use std::convert::Infallible;
use std::io::{self, Write as _};
use std::sync::Arc;

use futures_util::{Stream, StreamExt as _};
use gantry_store::TraceState;
use tokio::sync::OwnedMutexGuard;

use crate::processor::{Event, FailureReason, Status};

use super::Coordinator;
use super::error::CoordinatorError;
use super::time::now_ms;

/// Bytes handed to the file writer at a time: a few system calls and thread wake-ups per
/// 1 MiB patch, not one per network read.
const WRITE_BATCH: usize = 256 * 1024;

fn task_failed(job_id: i64, e: tokio::task::JoinError) -> CoordinatorError {
    CoordinatorError::Io(io::Error::other(format!(
        "append to the trace of job {job_id}: the task stopped: {e}"
    )))
}

/// The blob key of a finished job's archived log.
pub(super) fn archive_key(job_id: i64) -> String {
    format!("traces/{job_id}.log")
}

fn to_u64(size: i64) -> u64 {
    u64::try_from(size).unwrap_or(0)
}

/// Who appends to a log: a runner (only while its job executes), or the coordinator
/// noting why a job never started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// With the job's status when the caller read its row in this request.
    Runner(Option<Status>),
    Coordinator,
}

/// A trace patch that passed the checks and whose bytes are not written yet. Holds the
/// job's append lock: the next patch of the job waits until this one is committed or
/// dropped (dropped = nothing written).
pub struct TraceAppend {
    coordinator: Coordinator,
    job_id: i64,
    state: TraceState,
    _lock: OwnedMutexGuard<()>,
}

impl Coordinator {
    /// The job logs service.
    pub fn traces(&self) -> &Traces {
        &self.inner.traces
    }

    /// A runner's `PATCH /jobs/:id/trace` with its whole body at hand: append `data` at
    /// `range_start` ([`Coordinator::begin_trace_append`], then [`TraceAppend::write`]).
    pub async fn append_trace<D>(
        &self,
        job_id: i64,
        range_start: u64,
        data: D,
    ) -> std::result::Result<u64, CoordinatorError>
    where
        D: AsRef<[u8]> + Send + 'static,
    {
        let length = u64::try_from(data.as_ref().len()).unwrap_or(u64::MAX);
        self.begin_trace_append(job_id, range_start, Some(length))
            .await?
            .write(futures_util::stream::once(async move {
                Ok::<D, Infallible>(data)
            }))
            .await
            .map_err(AppendError::into_refusal)
    }

    /// Checks a trace patch before its body is read: the job runs (else `Forbidden`),
    /// `range_start` is the stored length (else `RangeMismatch { size }`, `416`), and a
    /// declared `length` fits the trace limit (else the job fails `trace_size_exceeded`
    /// and this is `Forbidden`, nothing written). Waits for the job's previous patch.
    pub async fn begin_trace_append(
        &self,
        job_id: i64,
        range_start: u64,
        length: Option<u64>,
    ) -> std::result::Result<TraceAppend, CoordinatorError> {
        self.begin_append(job_id, range_start, length, Writer::Runner(None))
            .await
    }

    /// [`Coordinator::begin_trace_append`] for a job whose row the caller read in this
    /// request (its token check): `status` is that row's, and the log's committed size is
    /// the one this process noted (`trace_files.rs`) when it has it and `range_start`
    /// matches it, so the job's row is not read again. The append's commit still compares
    /// the stored size.
    pub async fn begin_checked_trace_append(
        &self,
        job_id: i64,
        status: Status,
        range_start: u64,
        length: Option<u64>,
    ) -> std::result::Result<TraceAppend, CoordinatorError> {
        self.begin_append(job_id, range_start, length, Writer::Runner(Some(status)))
            .await
    }

    /// The coordinator's own line in the log of a job that never ran (failed at its
    /// pipeline's creation): why it did not start. Nothing is written when the job has
    /// a log already.
    pub(crate) async fn note_on_unstarted_job(&self, job_id: i64, text: &str) {
        self.coordinator_note(job_id, 0, text).await;
    }

    /// The coordinator's own line at the end of job `job_id`'s log, once its runner has
    /// sent the whole log (a step the coordinator runs for the job, such as its release,
    /// failed). Best effort: a log that cannot be read or written keeps what it has.
    pub(crate) async fn note_at_end_of_log(&self, job_id: i64, text: &str) {
        let Ok(state) = self.inner.store.trace_state(job_id).await else {
            return;
        };
        self.coordinator_note(job_id, to_u64(state.size), text)
            .await;
    }

    /// Appends `text` to job `job_id`'s log at `offset`, its committed size (else
    /// nothing is written).
    async fn coordinator_note(&self, job_id: i64, offset: u64, text: &str) {
        let Ok(append) = self
            .begin_append(job_id, offset, None, Writer::Coordinator)
            .await
        else {
            return;
        };
        let data = text.as_bytes().to_vec();
        let _ = append
            .write(futures_util::stream::once(async move {
                Ok::<_, Infallible>(data)
            }))
            .await;
    }

    async fn begin_append(
        &self,
        job_id: i64,
        range_start: u64,
        length: Option<u64>,
        writer: Writer,
    ) -> std::result::Result<TraceAppend, CoordinatorError> {
        let files = &self.inner.traces.files;
        let lock = files.lock(job_id).await;
        let known = match writer {
            Writer::Runner(Some(status)) if !self.inner.blobs.is_shared() => files
                .known_size(job_id)
                .filter(|&size| size == range_start)
                .and_then(|size| i64::try_from(size).ok())
                .map(|size| TraceState {
                    status,
                    size,
                    in_db: false,
                }),
            _ => None,
        };
        let state = match known {
            Some(state) => state,
            None => self.inner.store.trace_state(job_id).await?,
        };
        if matches!(writer, Writer::Runner(_)) && !state.status.is_executing() {
            return Err(CoordinatorError::Forbidden(format!(
                "append to the trace of job {job_id}: it is {}",
                state.status
            )));
        }
        let start = i64::try_from(range_start).map_err(|_| {
            CoordinatorError::Invalid(format!(
                "append to the trace of job {job_id}: offset {range_start} is too large"
            ))
        })?;
        if start != state.size {
            return Err(CoordinatorError::RangeMismatch {
                size: to_u64(state.size),
            });
        }
        if let Some(length) = length
            && to_u64(state.size).saturating_add(length) > self.inner.cfg.trace_limit
        {
            return Err(self.trace_size_exceeded(job_id).await);
        }
        Ok(TraceAppend {
            coordinator: self.clone(),
            job_id,
            state,
            _lock: lock,
        })
    }

    /// Fails the job `trace_size_exceeded`; the error for the patch that went past.
    async fn trace_size_exceeded(&self, job_id: i64) -> CoordinatorError {
        let _ = self
            .job_event(job_id, now_ms(), |job| Event::JobFailed {
                job,
                reason: FailureReason::TraceSizeExceeded,
                exit_code: None,
            })
            .await;
        CoordinatorError::Forbidden(format!(
            "append to the trace of job {job_id}: the trace would exceed the limit of {} bytes; the job was dropped (trace_size_exceeded)",
            self.inner.cfg.trace_limit
        ))
    }
}

/// The job logs service: a log's bytes (its file, or the database's chunks when the
/// blobs are shared) read back, made durable and archived. Owns the log files
/// (`super::trace_files`) and the lengths archived before a job's final state; calls the
/// store and the blob store only. Reached through [`Coordinator::traces`]; appends, which
/// may fail a job (`trace_size_exceeded`), stay on the coordinator and call it.
#[derive(Clone)]
pub struct Traces {
    store: gantry_store::Store,
    pub(super) files: Arc<super::trace_files::TraceFiles>,
    blobs: Arc<dyn super::BlobStore>,
    /// Logs are flushed to disk before a job's final state (`CoordinatorConfig::durable_blobs`).
    durable: bool,
    /// Jobs whose log [`Traces::sync_trace`] archived before their final state, with the
    /// length archived (not archived again when they end at that length).
    archived: Arc<std::sync::Mutex<std::collections::HashMap<i64, u64>>>,
}

impl Traces {
    pub(super) fn new(
        store: gantry_store::Store,
        files: super::trace_files::TraceFiles,
        blobs: Arc<dyn super::BlobStore>,
        durable: bool,
    ) -> Self {
        Self {
            store,
            files: Arc::new(files),
            blobs,
            durable,
            archived: Arc::default(),
        }
    }

    fn archived(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<i64, u64>> {
        self.archived
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `job_id` was handed to a runner with `size` bytes of log committed in its file:
    /// the runner's first append need not read the job's row for it.
    pub(super) fn handed_out(&self, job_id: i64, size: u64) {
        self.files.note_size(job_id, size);
    }

    /// The committed size of `job_id`'s log as this process knows it without reading the
    /// store (see `TraceFiles::known_size`); `None` when logs are shared blobs (their
    /// size is in the database) or the size is not known.
    pub(super) fn known_local_size(&self, job_id: i64) -> Option<u64> {
        if self.blobs.is_shared() {
            return None;
        }
        self.files.known_size(job_id)
    }

    /// `job_id` stopped executing: no runner appends to its log any more.
    pub(super) fn stopped(&self, job_id: i64) {
        self.files.forget_size(job_id);
    }

    /// Removes a deleted or erased job's log file (a missing file is removed already).
    pub(super) fn remove(&self, job_id: i64) -> io::Result<()> {
        self.files.remove(job_id)
    }

    /// The job's log as stored so far: exactly its committed size.
    pub async fn trace(&self, job_id: i64) -> std::result::Result<Vec<u8>, CoordinatorError> {
        match self.trace_source(job_id).await? {
            TraceSource::Bytes(data) => Ok(data),
            TraceSource::File { file, len } => tokio::task::spawn_blocking(move || {
                let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
                io::Read::read_to_end(&mut io::Read::take(file, len), &mut out).map(|_| out)
            })
            .await
            .map_err(|e| {
                CoordinatorError::Io(io::Error::other(format!(
                    "read the trace of job {job_id}: the task stopped: {e}"
                )))
            })?
            .map_err(CoordinatorError::Io),
        }
    }

    /// Bytes `[from, from + max)` of the job's log as stored so far (fewer at its end;
    /// `from: None`: its last `max` bytes), with the log's length and, when
    /// `count_lines`, the number of `\n` before the window (the web UI's line numbers).
    /// Reads only the window, plus the prefix when lines are counted: O(window) or
    /// O(start + window).
    pub async fn trace_window(
        &self,
        job_id: i64,
        from: Option<u64>,
        max: u64,
        count_lines: bool,
    ) -> std::result::Result<TraceWindow, CoordinatorError> {
        let (mut file, len) = match self.trace_source(job_id).await? {
            TraceSource::Bytes(data) => {
                let len = data.len() as u64;
                let from = from.unwrap_or(len.saturating_sub(max));
                let start = usize::try_from(from.min(len)).unwrap_or(data.len());
                let end = usize::try_from(from.saturating_add(max).min(len)).unwrap_or(data.len());
                let lines_before = count_lines
                    .then(|| data[..start].iter().filter(|&&b| b == b'\n').count() as u64);
                return Ok(TraceWindow {
                    bytes: data[start..end].to_vec(),
                    start: start as u64,
                    len,
                    lines_before,
                });
            }
            TraceSource::File { file, len } => (file, len),
        };
        let from = from.unwrap_or(len.saturating_sub(max));
        tokio::task::spawn_blocking(move || {
            use std::io::{Read as _, Seek as _};
            let start = from.min(len);
            let lines_before = if count_lines {
                let mut count = 0u64;
                let mut buf = vec![0u8; 256 * 1024];
                let mut prefix = io::Read::take(&mut file, start);
                loop {
                    let n = prefix.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    count += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                }
                Some(count)
            } else {
                None
            };
            file.seek(io::SeekFrom::Start(start))?;
            let want = max.min(len - start);
            let mut bytes = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
            io::Read::take(&mut file, want).read_to_end(&mut bytes)?;
            Ok(TraceWindow {
                bytes,
                start,
                len,
                lines_before,
            })
        })
        .await
        .map_err(|e| {
            CoordinatorError::Io(io::Error::other(format!(
                "read the trace of job {job_id}: the task stopped: {e}"
            )))
        })?
        .map_err(CoordinatorError::Io)
    }

    /// The log as stored so far, to be streamed (the user API): the job's file, of
    /// which the first `len` bytes are the log, or the bytes a database row of an older
    /// version holds.
    pub async fn trace_source(
        &self,
        job_id: i64,
    ) -> std::result::Result<TraceSource, CoordinatorError> {
        let snapshot = self.store.trace_snapshot(job_id).await?;
        if let Some(data) = snapshot.in_db {
            return Ok(TraceSource::Bytes(data));
        }
        let len = to_u64(snapshot.size);
        let this = self.clone();
        let file = tokio::task::spawn_blocking(move || this.files.open(job_id, len))
            .await
            .map_err(|e| {
                CoordinatorError::Io(io::Error::other(format!(
                    "read the trace of job {job_id}: the task stopped: {e}"
                )))
            })?
            .map_err(CoordinatorError::Io)?;
        if let Some(file) = file {
            return Ok(TraceSource::File { file, len });
        }
        if len > 0 && self.blobs.is_shared() {
            let this = self.clone();
            let archived =
                tokio::task::spawn_blocking(move || this.blobs.open(&archive_key(job_id)))
                    .await
                    .map_err(|e| {
                        CoordinatorError::Io(io::Error::other(format!(
                            "read the archived trace of job {job_id}: the task stopped: {e}"
                        )))
                    })?
                    .map_err(CoordinatorError::Io)?;
            if let Some((file, archived_len)) = archived {
                return Ok(TraceSource::File {
                    file,
                    len: len.min(archived_len),
                });
            }
        }
        Ok(TraceSource::Bytes(Vec::new()))
    }

    /// Makes the job's log safe before its final state is committed: its file flushed
    /// to disk when the coordinator keeps its blobs durable (see `trace_files.rs`), and
    /// archived into the blob store when that is shared (object storage), so any
    /// coordinator can serve it. Once per job; no patch is accepted afterwards.
    pub(super) async fn sync_trace(
        &self,
        job_id: i64,
    ) -> std::result::Result<(), CoordinatorError> {
        let archive = self.blobs.is_shared();
        if !self.durable && !archive {
            return Ok(());
        }
        let (len, source) = if archive {
            let snapshot = self.store.trace_snapshot(job_id).await?;
            (to_u64(snapshot.size), snapshot.in_db)
        } else {
            (0, None)
        };
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if this.durable {
                this.files.sync(job_id)?;
            }
            if archive && len > 0 {
                this.archive_trace(job_id, len, source)?;
                this.archived().insert(job_id, len);
            }
            Ok::<(), io::Error>(())
        })
        .await
        .map_err(|e| {
            CoordinatorError::Io(io::Error::other(format!(
                "sync the trace of job {job_id}: the task stopped: {e}"
            )))
        })?
        .map_err(CoordinatorError::Io)?;
        if archive && len > 0 {
            self.drop_archived_chunks(job_id, len).await;
        }
        Ok(())
    }

    /// A log kept in the database (coordinators sharing their logs) that is archived now:
    /// its rows go. A failure only leaves them (the archive is what is read once the job
    /// ended; the rows are read while it runs).
    async fn drop_archived_chunks(&self, job_id: i64, len: u64) {
        let size = i64::try_from(len).unwrap_or(i64::MAX);
        if let Err(error) = self.store.drop_trace_chunks(job_id, size).await {
            eprintln!(
                "gantry: failed to drop the database copy of job {job_id}'s archived log: {error}"
            );
        }
    }

    /// The first `size` bytes of the job's log file (a log this coordinator began before
    /// its blobs were shared).
    pub(super) async fn read_trace_file(
        &self,
        job_id: i64,
        size: i64,
    ) -> std::result::Result<Vec<u8>, CoordinatorError> {
        let len = to_u64(size);
        let this = self.clone();
        let bytes = tokio::task::spawn_blocking(move || -> io::Result<Vec<u8>> {
            let mut out = Vec::new();
            if let Some(file) = this.files.open(job_id, len)? {
                io::Read::read_to_end(&mut io::Read::take(file, len), &mut out)?;
            }
            Ok(out)
        })
        .await
        .map_err(|e| task_failed(job_id, e))?
        .map_err(CoordinatorError::Io)?;
        if to_u64(i64::try_from(bytes.len()).unwrap_or(0)) != len {
            return Err(CoordinatorError::Io(io::Error::other(format!(
                "append to the trace of job {job_id}: its first {len} bytes are not on this coordinator's disk (they were written before its blobs were shared, by another coordinator)"
            ))));
        }
        Ok(bytes)
    }

    /// Archives the logs of `jobs`, which just ended, in the background, when the blobs
    /// are shared: those that ended without the runner's final update (canceled, timed
    /// out, lost) or grew after it was archived. Each waits for a patch in flight; a
    /// failure is logged (the log stays on this coordinator's disk).
    pub(super) fn spawn_archive_traces(&self, jobs: Vec<i64>) {
        if jobs.is_empty() || !self.blobs.is_shared() {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            for job_id in jobs {
                if let Err(error) = this.archive_ended_trace(job_id).await {
                    eprintln!("gantry: failed to archive the log of job {job_id}: {error}");
                }
            }
        });
    }

    async fn archive_ended_trace(&self, job_id: i64) -> std::result::Result<(), CoordinatorError> {
        let _lock = self.files.lock(job_id).await;
        let snapshot = self.store.trace_snapshot(job_id).await?;
        let len = to_u64(snapshot.size);
        let archived = self.archived().remove(&job_id);
        if len == 0 || archived == Some(len) {
            return Ok(());
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.archive_trace(job_id, len, snapshot.in_db))
            .await
            .map_err(|e| {
                CoordinatorError::Io(io::Error::other(format!(
                    "archive the trace of job {job_id}: the task stopped: {e}"
                )))
            })?
            .map_err(CoordinatorError::Io)?;
        self.drop_archived_chunks(job_id, len).await;
        Ok(())
    }

    /// Copies the first `len` bytes of the job's log — `in_db`, the bytes the database
    /// holds, else its file — into the blob store (blocking).
    fn archive_trace(&self, job_id: i64, len: u64, in_db: Option<Vec<u8>>) -> io::Result<()> {
        let mut source: Box<dyn io::Read> = match in_db {
            Some(bytes) => Box::new(io::Cursor::new(bytes)),
            None => match self.files.open(job_id, len)? {
                Some(file) => Box::new(file),
                None => return Ok(()),
            },
        };
        let dir = self.blobs.staging_dir();
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("trace-{job_id}-{}", super::token::new_token("")));
        let stored = std::fs::File::create(&path)
            .and_then(|mut staged| io::copy(&mut io::Read::take(&mut source, len), &mut staged))
            .and_then(|_| self.blobs.put_file(&archive_key(job_id), &path));
        if stored.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        stored.map_err(|e| {
            io::Error::new(e.kind(), format!("archive the trace of job {job_id}: {e}"))
        })
    }
}

/// A part of a job's log ([`Traces::trace_window`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceWindow {
    /// The bytes read.
    pub bytes: Vec<u8>,
    /// Where they start in the log.
    pub start: u64,
    /// The log's length.
    pub len: u64,
    /// `\n` bytes before `start`, when asked for.
    pub lines_before: Option<u64>,
}

/// A job's log to read ([`Traces::trace_source`]).
#[derive(Debug)]
pub enum TraceSource {
    /// The whole log.
    Bytes(Vec<u8>),
    /// The log is the first `len` bytes of `file` (bytes past it are not committed).
    File { file: std::fs::File, len: u64 },
}

/// Why reading a patch's body stopped early.
enum Stop<E> {
    TooLarge,
    /// The body's own error.
    Body(E),
    /// Nothing arrived for this long.
    Idle(std::time::Duration),
}

/// How a trace append failed: the patch's body (its stream's own error, for the caller
/// to answer as it knows best), or the coordinator refused or failed it.
#[derive(Debug)]
pub enum AppendError<E> {
    /// The body failed.
    Body(E),
    /// The append was refused (`Forbidden`, `RangeMismatch`, an unreadable or idle
    /// body, …) or the store failed.
    Refused(CoordinatorError),
}

impl<E> From<CoordinatorError> for AppendError<E> {
    fn from(error: CoordinatorError) -> Self {
        Self::Refused(error)
    }
}

impl<E> From<gantry_store::StoreError> for AppendError<E> {
    fn from(error: gantry_store::StoreError) -> Self {
        Self::Refused(error.into())
    }
}

impl<E> From<io::Error> for AppendError<E> {
    fn from(error: io::Error) -> Self {
        Self::Refused(error.into())
    }
}

impl AppendError<Infallible> {
    /// The coordinator's error (a body that cannot fail cannot be the reason).
    pub fn into_refusal(self) -> CoordinatorError {
        match self {
            Self::Body(never) => match never {},
            Self::Refused(error) => error,
        }
    }
}

/// The refusal of a patch whose body sent nothing for `after`.
fn idle_body(job_id: i64, after: std::time::Duration) -> CoordinatorError {
    CoordinatorError::Invalid(format!(
        "append to the trace of job {job_id}: the patch could not be read: nothing arrived for {after:?}"
    ))
}

impl TraceAppend {
    /// Writes the patch's `body` at the end of the log as it arrives, then commits the
    /// new length, which it returns. Nothing is committed when the body fails (the
    /// bytes written stay past the committed size, invisible, and the next append
    /// overwrites them) or goes past the trace limit (the job fails
    /// `trace_size_exceeded`, `Forbidden`).
    ///
    /// Runs to its end in a task of its own even when the caller stops waiting (a
    /// runner that hung up), so no file write outlives the job's lock; a body that
    /// sends nothing for `trace_body_idle_timeout` fails the patch.
    pub async fn write<S, D, E>(self, body: S) -> std::result::Result<u64, AppendError<E>>
    where
        S: Stream<Item = Result<D, E>> + Send + 'static,
        D: AsRef<[u8]> + Send + 'static,
        E: Send + 'static,
    {
        let job_id = self.job_id;
        tokio::spawn(self.write_now(body))
            .await
            .map_err(|e| task_failed(job_id, e))?
    }

    async fn write_now<S, D, E>(self, body: S) -> std::result::Result<u64, AppendError<E>>
    where
        S: Stream<Item = Result<D, E>> + Send + 'static,
        D: AsRef<[u8]> + Send + 'static,
        E: Send + 'static,
    {
        if self.coordinator.inner.blobs.is_shared() {
            return self.write_to_store(body).await;
        }
        let (job_id, size) = (self.job_id, self.state.size);
        let store = &self.coordinator.inner.store;
        let files = &self.coordinator.inner.traces.files;
        // Bytes written and not committed leave the file longer than any size known:
        // the size is noted again once this append commits.
        files.forget_size(job_id);
        // A log from before trace files (migration 0004) moves to its file now.
        let old = if self.state.in_db {
            let mut old = store.trace_in_db(job_id).await?;
            old.truncate(usize::try_from(size).unwrap_or(0));
            Some(old)
        } else {
            None
        };
        let (batches, mut received_batches) = tokio::sync::mpsc::channel::<Vec<D>>(2);
        let writer = {
            let this = self.coordinator.clone();
            tokio::task::spawn_blocking(move || -> io::Result<()> {
                let files = &this.inner.traces.files;
                let mut file = match old {
                    Some(old) => {
                        let mut file = files.open_at(job_id, 0)?;
                        file.write_all(&old)?;
                        file
                    }
                    None => files.open_at(job_id, to_u64(size))?,
                };
                while let Some(batch) = received_batches.blocking_recv() {
                    for chunk in &batch {
                        file.write_all(chunk.as_ref())?;
                    }
                }
                Ok(())
            })
        };
        let room = self
            .coordinator
            .inner
            .cfg
            .trace_limit
            .saturating_sub(to_u64(size));
        // The job's append lock is held while the body arrives: without a limit, a runner
        // whose host vanished mid-patch (a connection that never closes) would block the
        // job's log, and the jobs sharing its lock stripe, for good.
        let idle = self.coordinator.inner.cfg.trace_body_idle_timeout;
        let (mut batch, mut batched) = (Vec::new(), 0usize);
        let mut reader = BodyReader::new(body, room, idle);
        let stop = loop {
            match reader.next().await {
                Ok(Some(chunk)) => {
                    batched += chunk.as_ref().len();
                    batch.push(chunk);
                    if batched >= WRITE_BATCH {
                        batched = 0;
                        if batches.send(std::mem::take(&mut batch)).await.is_err() {
                            break None; // the writer failed: its error follows
                        }
                    }
                }
                Ok(None) => break None,
                Err(stop) => break Some(stop),
            }
        };
        let received = reader.received;
        if stop.is_none() && !batch.is_empty() {
            let _ = batches.send(batch).await;
        }
        drop(batches);
        let written = writer.await.map_err(|e| task_failed(job_id, e))?;
        match stop {
            Some(Stop::TooLarge) => {
                return Err(self.coordinator.trace_size_exceeded(job_id).await.into());
            }
            Some(Stop::Body(error)) => return Err(AppendError::Body(error)),
            Some(Stop::Idle(after)) => return Err(idle_body(job_id, after).into()),
            None => written?,
        }
        let new_size = size.saturating_add(i64::try_from(received).unwrap_or(i64::MAX));
        if store
            .commit_trace_size(job_id, size, new_size, self.state.in_db, now_ms())
            .await?
        {
            files.note_size(job_id, to_u64(new_size));
            Ok(to_u64(new_size))
        } else {
            // Another process appended meanwhile (the same runner's retry: the same
            // bytes at the same offset); this patch was not taken.
            let size = store.trace_state(job_id).await?.size;
            Err(CoordinatorError::RangeMismatch { size: to_u64(size) }.into())
        }
    }
}

impl TraceAppend {
    /// [`TraceAppend::write`] for coordinators that share their blobs: the patch's bytes
    /// go into the database with the new size, in one transaction, so the next patch and
    /// every reader may be another coordinator. A patch is held in memory, up to
    /// [`SHARED_PATCH_LIMIT`].
    async fn write_to_store<S, D, E>(self, body: S) -> std::result::Result<u64, AppendError<E>>
    where
        S: Stream<Item = Result<D, E>> + Send + 'static,
        D: AsRef<[u8]> + Send + 'static,
        E: Send + 'static,
    {
        let (job_id, size) = (self.job_id, self.state.size);
        let coordinator = &self.coordinator;
        let mut parts: Vec<Vec<u8>> = Vec::new();
        if !self.state.in_db && size > 0 {
            // Begun in this coordinator's file before its blobs were shared: the log
            // moves into the database with this patch.
            parts.push(coordinator.traces().read_trace_file(job_id, size).await?);
        }
        let trace_room = coordinator
            .inner
            .cfg
            .trace_limit
            .saturating_sub(to_u64(size));
        let room = trace_room.min(SHARED_PATCH_LIMIT as u64);
        let idle = coordinator.inner.cfg.trace_body_idle_timeout;
        let mut current: Vec<u8> = Vec::new();
        let mut reader = BodyReader::new(body, room, idle);
        let stop = loop {
            match reader.next().await {
                Ok(Some(chunk)) => {
                    for piece in chunk.as_ref().chunks(CHUNK_BYTES) {
                        if current.len() + piece.len() > CHUNK_BYTES {
                            parts.push(std::mem::take(&mut current));
                        }
                        current.extend_from_slice(piece);
                    }
                }
                Ok(None) => break None,
                Err(stop) => break Some(stop),
            }
        };
        let received = reader.received;
        parts.push(current);
        match stop {
            Some(Stop::TooLarge) if received <= trace_room => {
                return Err(AppendError::Refused(CoordinatorError::Invalid(format!(
                    "append to the trace of job {job_id}: a patch holds at most {SHARED_PATCH_LIMIT} bytes when coordinators share their logs (gitlab-runner sends at most {} at a time)",
                    gantry_protocol::trace::patch::MAX_PATCH_BYTES
                ))));
            }
            Some(Stop::TooLarge) => {
                return Err(coordinator.trace_size_exceeded(job_id).await.into());
            }
            Some(Stop::Body(error)) => return Err(AppendError::Body(error)),
            Some(Stop::Idle(after)) => return Err(idle_body(job_id, after).into()),
            None => {}
        }
        let store = &coordinator.inner.store;
        let new_size = size.saturating_add(i64::try_from(received).unwrap_or(i64::MAX));
        if store
            .append_trace_chunks(job_id, size, new_size, &parts, now_ms())
            .await?
        {
            Ok(to_u64(new_size))
        } else {
            let size = store.trace_state(job_id).await?.size;
            Err(CoordinatorError::RangeMismatch { size: to_u64(size) }.into())
        }
    }
}

/// The most a patch may hold when coordinators share their logs (it is held in memory
/// until its transaction): 8 times the most gitlab-runner sends.
pub const SHARED_PATCH_LIMIT: usize = 8 * gantry_protocol::trace::patch::MAX_PATCH_BYTES;

/// Bytes per database row of a shared log.
const CHUNK_BYTES: usize = 1024 * 1024;

/// A patch's body, read a piece at a time: stops past `room` bytes, on a body error, or
/// after `idle` without a piece.
struct BodyReader<S> {
    body: std::pin::Pin<Box<S>>,
    room: u64,
    idle: std::time::Duration,
    /// Bytes received so far.
    received: u64,
}

impl<S, D, E> BodyReader<S>
where
    S: Stream<Item = Result<D, E>>,
    D: AsRef<[u8]>,
{
    fn new(body: S, room: u64, idle: std::time::Duration) -> Self {
        Self {
            body: Box::pin(body),
            room,
            idle,
            received: 0,
        }
    }

    /// The next piece; `Ok(None)` at the end.
    async fn next(&mut self) -> Result<Option<D>, Stop<E>> {
        let chunk = match tokio::time::timeout(self.idle, self.body.next()).await {
            Ok(None) => return Ok(None),
            Ok(Some(Ok(chunk))) => chunk,
            Ok(Some(Err(e))) => return Err(Stop::Body(e)),
            Err(_) => return Err(Stop::Idle(self.idle)),
        };
        self.received = self.received.saturating_add(chunk.as_ref().len() as u64);
        if self.received > self.room {
            return Err(Stop::TooLarge);
        }
        Ok(Some(chunk))
    }
}
