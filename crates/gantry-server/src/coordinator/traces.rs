//! Job logs (§5): a runner's `PATCH /jobs/:id/trace` appended at the end only, and the
//! log read back (user API, coverage). Bytes in [`super::trace_files`], the committed
//! size in the store: append = write the bytes at the committed size, then commit the
//! new size; read = exactly the committed size.
//!
//! With blobs in object storage (shared by every coordinator), a job's log is archived
//! there when the runner reports its final state, before that state is committed
//! ([`Coordinator::sync_trace`]); a coordinator without the local file reads the archive.
//! Logs of jobs that end otherwise (canceled, timed out by the coordinator, lost) are
//! archived in the background once they ended ([`Coordinator::spawn_archive_traces`],
//! from the state change).
//!
//! A patch is checked before its body is read ([`Coordinator::begin_trace_append`]: the
//! job runs, the offset is the end, a declared length fits the limit), then its body is
//! written to the file as it arrives ([`TraceAppend::write`]), so receiving the bytes and
//! writing them overlap and no patch is held whole in memory.

use std::convert::Infallible;
use std::fmt::Display;
use std::io::{self, Write as _};
use std::pin::pin;

use futures_util::{Stream, StreamExt as _};
use gantry_store::TraceState;
use tokio::sync::OwnedMutexGuard;

use crate::processor::{Event, FailureReason};

use super::Coordinator;
use super::error::CoordinatorError;
use super::jobs::executing;
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
fn archive_key(job_id: i64) -> String {
    format!("traces/{job_id}.log")
}

fn to_u64(size: i64) -> u64 {
    u64::try_from(size).unwrap_or(0)
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
        let lock = self.inner.traces.lock(job_id).await;
        let state = self.inner.store.trace_state(job_id).await?;
        if !executing(&state.status) {
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

    /// The log as stored so far, to be streamed (the user API): the job's file, of
    /// which the first `len` bytes are the log, or the bytes a database row of an older
    /// version holds.
    pub async fn trace_source(
        &self,
        job_id: i64,
    ) -> std::result::Result<TraceSource, CoordinatorError> {
        let snapshot = self.inner.store.trace_snapshot(job_id).await?;
        if let Some(data) = snapshot.in_db {
            return Ok(TraceSource::Bytes(data));
        }
        let len = to_u64(snapshot.size);
        let this = self.clone();
        let file = tokio::task::spawn_blocking(move || this.inner.traces.open(job_id, len))
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
        if len > 0 && self.inner.blobs.is_shared() {
            let this = self.clone();
            let archived =
                tokio::task::spawn_blocking(move || this.inner.blobs.open(&archive_key(job_id)))
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
        let archive = self.inner.blobs.is_shared();
        if !self.inner.cfg.durable_blobs && !archive {
            return Ok(());
        }
        let len = if archive {
            to_u64(self.inner.store.trace_snapshot(job_id).await?.size)
        } else {
            0
        };
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            if this.inner.cfg.durable_blobs {
                this.inner.traces.sync(job_id)?;
            }
            if archive && len > 0 {
                this.archive_trace(job_id, len)?;
                this.runtime().archived.insert(job_id, len);
            }
            Ok::<(), io::Error>(())
        })
        .await
        .map_err(|e| {
            CoordinatorError::Io(io::Error::other(format!(
                "sync the trace of job {job_id}: the task stopped: {e}"
            )))
        })?
        .map_err(CoordinatorError::Io)
    }

    /// Archives the logs of `jobs`, which just ended, in the background, when the blobs
    /// are shared: those that ended without the runner's final update (canceled, timed
    /// out, lost) or grew after it was archived. Each waits for a patch in flight; a
    /// failure is logged (the log stays on this coordinator's disk).
    pub(super) fn spawn_archive_traces(&self, jobs: Vec<i64>) {
        if jobs.is_empty() || !self.inner.blobs.is_shared() {
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
        let _lock = self.inner.traces.lock(job_id).await;
        let len = to_u64(self.inner.store.trace_snapshot(job_id).await?.size);
        let archived = self.runtime().archived.remove(&job_id);
        if len == 0 || archived == Some(len) {
            return Ok(());
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.archive_trace(job_id, len))
            .await
            .map_err(|e| {
                CoordinatorError::Io(io::Error::other(format!(
                    "archive the trace of job {job_id}: the task stopped: {e}"
                )))
            })?
            .map_err(CoordinatorError::Io)
    }

    /// Copies the first `len` bytes of the job's log file into the blob store (blocking).
    fn archive_trace(&self, job_id: i64, len: u64) -> io::Result<()> {
        let Some(file) = self.inner.traces.open(job_id, len)? else {
            return Ok(());
        };
        let dir = self.inner.blobs.staging_dir();
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("trace-{job_id}-{}", super::token::new_token("")));
        let stored = std::fs::File::create(&path)
            .and_then(|mut staged| io::copy(&mut io::Read::take(file, len), &mut staged))
            .and_then(|_| self.inner.blobs.put_file(&archive_key(job_id), &path));
        if stored.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        stored.map_err(|e| {
            io::Error::new(e.kind(), format!("archive the trace of job {job_id}: {e}"))
        })
    }
}

/// A job's log to read ([`Coordinator::trace_source`]).
#[derive(Debug)]
pub enum TraceSource {
    /// The whole log.
    Bytes(Vec<u8>),
    /// The log is the first `len` bytes of `file` (bytes past it are not committed).
    File { file: std::fs::File, len: u64 },
}

/// Why reading a patch's body stopped early.
enum Stop {
    TooLarge,
    Body(String),
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
    pub async fn write<S, D, E>(self, body: S) -> std::result::Result<u64, CoordinatorError>
    where
        S: Stream<Item = Result<D, E>> + Send + 'static,
        D: AsRef<[u8]> + Send + 'static,
        E: Display + Send + 'static,
    {
        let job_id = self.job_id;
        tokio::spawn(self.write_now(body))
            .await
            .map_err(|e| task_failed(job_id, e))?
    }

    async fn write_now<S, D, E>(self, body: S) -> std::result::Result<u64, CoordinatorError>
    where
        S: Stream<Item = Result<D, E>> + Send + 'static,
        D: AsRef<[u8]> + Send + 'static,
        E: Display + Send + 'static,
    {
        let (job_id, size) = (self.job_id, self.state.size);
        let store = &self.coordinator.inner.store;
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
                let files = &this.inner.traces;
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
        let mut body = pin!(body);
        let (mut received, mut batch, mut batched) = (0u64, Vec::new(), 0usize);
        let mut stop = None;
        // The job's append lock is held while the body arrives: without a limit, a runner
        // whose host vanished mid-patch (a connection that never closes) would block the
        // job's log, and the jobs sharing its lock stripe, for good.
        let idle = self.coordinator.inner.cfg.trace_body_idle_timeout;
        loop {
            let chunk = match tokio::time::timeout(idle, body.next()).await {
                Ok(None) => break,
                Ok(Some(Ok(chunk))) => chunk,
                Ok(Some(Err(e))) => {
                    stop = Some(Stop::Body(e.to_string()));
                    break;
                }
                Err(_) => {
                    stop = Some(Stop::Body(format!("nothing arrived for {idle:?}")));
                    break;
                }
            };
            let len = chunk.as_ref().len();
            received = received.saturating_add(len as u64);
            if received > room {
                stop = Some(Stop::TooLarge);
                break;
            }
            batch.push(chunk);
            batched += len;
            if batched >= WRITE_BATCH {
                batched = 0;
                if batches.send(std::mem::take(&mut batch)).await.is_err() {
                    break; // the writer failed: its error follows
                }
            }
        }
        if stop.is_none() && !batch.is_empty() {
            let _ = batches.send(batch).await;
        }
        drop(batches);
        let written = writer.await.map_err(|e| task_failed(job_id, e))?;
        match stop {
            Some(Stop::TooLarge) => {
                return Err(self.coordinator.trace_size_exceeded(job_id).await);
            }
            Some(Stop::Body(why)) => {
                return Err(CoordinatorError::Invalid(format!(
                    "append to the trace of job {job_id}: the patch could not be read: {why}"
                )));
            }
            None => written?,
        }
        let new_size = size.saturating_add(i64::try_from(received).unwrap_or(i64::MAX));
        if store
            .commit_trace_size(job_id, size, new_size, self.state.in_db, now_ms())
            .await?
        {
            Ok(to_u64(new_size))
        } else {
            // Another process appended meanwhile (the same runner's retry: the same
            // bytes at the same offset); this patch was not taken.
            let size = store.trace_state(job_id).await?.size;
            Err(CoordinatorError::RangeMismatch { size: to_u64(size) })
        }
    }
}
