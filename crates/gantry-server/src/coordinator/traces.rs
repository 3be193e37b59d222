//! Job logs (§5): a runner's `PATCH /jobs/:id/trace` appended at the end only, and the
//! log read back (user API, coverage). Bytes in [`super::trace_files`], the committed
//! size in the store: append = write the bytes at the committed size, then commit the
//! new size; read = exactly the committed size.

use std::io;

use crate::processor::{Event, FailureReason};

use super::Coordinator;
use super::error::CoordinatorError;
use super::jobs::executing;
use super::time::now_ms;

fn task_failed(job_id: i64, e: tokio::task::JoinError) -> CoordinatorError {
    CoordinatorError::Io(io::Error::other(format!(
        "append to the trace of job {job_id}: the task stopped: {e}"
    )))
}

impl Coordinator {
    /// A runner's `PATCH /jobs/:id/trace`: append `data` at `range_start`, which must be
    /// the stored length (else `RangeMismatch { size }`, `416`). Returns the new length.
    /// Past the trace limit the job fails `trace_size_exceeded` and this is `Forbidden`.
    ///
    /// The append runs to its end in a task of its own even when the caller stops
    /// waiting (a runner that hung up), so no file write outlives its job's lock.
    pub async fn append_trace<D>(
        &self,
        job_id: i64,
        range_start: u64,
        data: D,
    ) -> std::result::Result<u64, CoordinatorError>
    where
        D: AsRef<[u8]> + Send + 'static,
    {
        let this = self.clone();
        tokio::spawn(async move { this.append_trace_locked(job_id, range_start, data).await })
            .await
            .map_err(|e| task_failed(job_id, e))?
    }

    async fn append_trace_locked<D>(
        &self,
        job_id: i64,
        range_start: u64,
        data: D,
    ) -> std::result::Result<u64, CoordinatorError>
    where
        D: AsRef<[u8]> + Send + 'static,
    {
        let store = &self.inner.store;
        let _job = self.inner.traces.lock(job_id).await;
        let state = store.trace_state(job_id).await?;
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
                size: u64::try_from(state.size).unwrap_or(0),
            });
        }
        let len = i64::try_from(data.as_ref().len()).unwrap_or(i64::MAX);
        let limit = i64::try_from(self.inner.cfg.trace_limit).unwrap_or(i64::MAX);
        let now = now_ms();
        if state.size.saturating_add(len) > limit {
            let _ = self
                .job_event(job_id, now, |job| Event::JobFailed {
                    job,
                    reason: FailureReason::TraceSizeExceeded,
                    exit_code: None,
                })
                .await;
            return Err(CoordinatorError::Forbidden(format!(
                "append to the trace of job {job_id}: the trace would exceed the limit of {limit} bytes; the job was dropped (trace_size_exceeded)"
            )));
        }
        // A log from before trace files (migration 0004) moves to its file now.
        let mut old = if state.in_db {
            Some(store.trace_in_db(job_id).await?)
        } else {
            None
        };
        if let Some(old) = &mut old {
            old.truncate(usize::try_from(state.size).unwrap_or(0));
        }
        if len > 0 || old.is_some() {
            let this = self.clone();
            tokio::task::spawn_blocking(move || {
                let files = &this.inner.traces;
                if let Some(old) = old {
                    files.write_at(job_id, 0, &old)?;
                }
                files.write_at(job_id, range_start, data.as_ref())
            })
            .await
            .map_err(|e| task_failed(job_id, e))??;
        }
        let size = state.size + len;
        if store
            .commit_trace_size(job_id, state.size, size, state.in_db, now)
            .await?
        {
            Ok(u64::try_from(size).unwrap_or(0))
        } else {
            // Another process appended meanwhile (the same runner's retry: the same
            // bytes at the same offset); this patch was not taken.
            let size = store.trace_state(job_id).await?.size;
            Err(CoordinatorError::RangeMismatch {
                size: u64::try_from(size).unwrap_or(0),
            })
        }
    }

    /// The job's log as stored so far: exactly its committed size.
    pub async fn trace(&self, job_id: i64) -> std::result::Result<Vec<u8>, CoordinatorError> {
        let snapshot = self.inner.store.trace_snapshot(job_id).await?;
        if let Some(data) = snapshot.in_db {
            return Ok(data);
        }
        let size = u64::try_from(snapshot.size).unwrap_or(0);
        if size == 0 {
            return Ok(Vec::new());
        }
        let this = self.clone();
        Ok(
            tokio::task::spawn_blocking(move || this.inner.traces.read(job_id, size))
                .await
                .map_err(|e| {
                    CoordinatorError::Io(io::Error::other(format!(
                        "read the trace of job {job_id}: the task stopped: {e}"
                    )))
                })??,
        )
    }
}
