//! Job logs: what the database keeps of them.
//!
//! The bytes of a log are not here: they live in one append-only file per job that the
//! coordinator writes (`data_dir/traces`). The database keeps the one fact that must be
//! transactional, the job's `trace_size`: how many bytes of that file are the log. An
//! append writes its bytes at offset `trace_size` first and commits the new size second
//! ([`Store::commit_trace_size`], a compare-and-set), so a crash between the two leaves
//! bytes past the committed size that no reader sees and the next append overwrites.
//!
//! Logs written before migration 0004 are still in `trace_chunks` (`trace_in_db = 1`):
//! they are read from there ([`Store::trace_snapshot`]) and moved to the file by the
//! job's next append, if any (the commit clears the flag and deletes the chunks).
//!
//! Coordinators that share their blobs (several replicas behind one address) keep a
//! running job's log in `trace_chunks` instead, so that any of them can take the next
//! patch and serve the log: [`Store::append_trace_chunks`] writes a patch's bytes and
//! commits the size in one transaction, and [`Store::drop_trace_chunks`] removes them
//! once the finished log is archived in the shared blobs.

use sqlx::Row;

use crate::{Result, Store, StoreError};

/// A job's trace as the database sees it, read in one statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceState {
    /// The job's status (appends are for running jobs only; the caller decides).
    pub status: crate::JobStatus,
    /// Committed length of the log, bytes: the truth.
    pub size: i64,
    /// The log's bytes are in `trace_chunks` (written before migration 0004), not in a
    /// file.
    pub in_db: bool,
}

/// A job's log at one instant: its committed size, and its bytes when the database holds
/// them (a log written before migration 0004).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceSnapshot {
    pub size: i64,
    /// `Some` for a log still in `trace_chunks`: exactly its bytes.
    pub in_db: Option<Vec<u8>>,
}

impl Store {
    /// The job's status, trace size and where its bytes are.
    pub async fn trace_state(&self, job_id: i64) -> Result<TraceState> {
        self.trace_state_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let row = sqlx::query("SELECT status, trace_size, trace_in_db FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound("job"))?;
        Ok(TraceState {
            status: crate::rows::status(&row, "jobs.status", "status")?,
            size: row.get(1),
            in_db: row.get::<i64, _>(2) != 0,
        })
    }

    /// How many times this store (and its clones) read a job's log state
    /// ([`Store::trace_state`]): a runner's patch of a job this process handed out reads
    /// none (the coordinator keeps the sizes it committed).
    pub fn trace_state_reads(&self) -> u64 {
        self.trace_state_reads
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The bytes of a log still in `trace_chunks` (empty when there are none).
    pub async fn trace_in_db(&self, job_id: i64) -> Result<Vec<u8>> {
        read_chunks(&mut *self.pool.acquire().await?, job_id).await
    }

    /// The job's committed trace size and, for a log still in the database, its bytes,
    /// from one snapshot (a concurrent append that moves the log to its file cannot
    /// slip between the two reads).
    pub async fn trace_snapshot(&self, job_id: i64) -> Result<TraceSnapshot> {
        let mut tx = self.pool.begin().await?;
        let row = sqlx::query("SELECT trace_size, trace_in_db FROM jobs WHERE id = $1")
            .bind(job_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound("job"))?;
        let size: i64 = row.get(0);
        let in_db = if row.get::<i64, _>(1) != 0 {
            let mut data = read_chunks(&mut tx, job_id).await?;
            data.truncate(usize::try_from(size).unwrap_or(0));
            Some(data)
        } else {
            None
        };
        tx.commit().await?;
        Ok(TraceSnapshot { size, in_db })
    }

    /// Commit the job's trace size `from` → `to` after the bytes were written, and record
    /// the runner's contact at `now`. A compare-and-set: returns false, changing nothing,
    /// when the size is no longer `from` (another writer appended meanwhile). With
    /// `moved_from_db`, the log's old chunks were copied into its file: they are deleted
    /// and the flag cleared in the same transaction.
    pub async fn commit_trace_size(
        &self,
        job_id: i64,
        from: i64,
        to: i64,
        moved_from_db: bool,
        now: i64,
    ) -> Result<bool> {
        if to < from {
            return Err(StoreError::Conflict(format!(
                "shrink the trace of job {job_id} from {from} to {to} bytes"
            )));
        }
        const UPDATE: &str = "UPDATE jobs SET trace_size = $1, last_contact_at = $2, trace_in_db = 0 \
                              WHERE id = $3 AND trace_size = $4 AND trace_in_db = $5";
        let params = vec![
            to.into(),
            now.into(),
            job_id.into(),
            from.into(),
            i64::from(moved_from_db).into(),
        ];
        if !moved_from_db {
            // One statement: its own transaction.
            let returning = format!("{UPDATE} RETURNING id");
            return Ok(!self.write_hot(&[&returning], params).await?.is_empty());
        }
        let mut tx = self.begin_write().await?;
        let update = crate::direct::bind_all(sqlx::query(UPDATE), params);
        if update.execute(&mut *tx).await?.rows_affected() != 1 {
            return Ok(false);
        }
        delete_chunks_and_commit(tx, job_id).await
    }
}

impl Store {
    /// Append `data` (in order) to a log kept in `trace_chunks`, committing its size
    /// `from` → `to` and the runner's contact at `now`, in one transaction. A
    /// compare-and-set like [`Store::commit_trace_size`]: false, nothing written, when the
    /// size is no longer `from`.
    pub async fn append_trace_chunks(
        &self,
        job_id: i64,
        from: i64,
        to: i64,
        data: &[Vec<u8>],
        now: i64,
    ) -> Result<bool> {
        if to < from {
            return Err(StoreError::Conflict(format!(
                "shrink the trace of job {job_id} from {from} to {to} bytes"
            )));
        }
        let mut tx = self.begin_write().await?;
        let moved = sqlx::query(
            "UPDATE jobs SET trace_size = $1, last_contact_at = $2, trace_in_db = 1 \
             WHERE id = $3 AND trace_size = $4",
        )
        .bind(to)
        .bind(now)
        .bind(job_id)
        .bind(from)
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() != 1 {
            return Ok(false);
        }
        let next: i64 =
            sqlx::query("SELECT COALESCE(MAX(seq), -1) + 1 FROM trace_chunks WHERE job_id = $1")
                .bind(job_id)
                .fetch_one(&mut *tx)
                .await?
                .get(0);
        for (seq, chunk) in (next..).zip(data.iter().filter(|c| !c.is_empty())) {
            sqlx::query("INSERT INTO trace_chunks (job_id, seq, data) VALUES ($1, $2, $3)")
                .bind(job_id)
                .bind(seq)
                .bind(chunk.as_slice())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// After a finished log of `size` bytes was archived: its chunks are deleted and the
    /// log is no longer read from the database — unless it changed meanwhile.
    pub async fn drop_trace_chunks(&self, job_id: i64, size: i64) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let cleared = sqlx::query(
            "UPDATE jobs SET trace_in_db = 0 WHERE id = $1 AND trace_size = $2 AND trace_in_db = 1",
        )
        .bind(job_id)
        .bind(size)
        .execute(&mut *tx)
        .await?;
        if cleared.rows_affected() != 1 {
            return Ok(false);
        }
        delete_chunks_and_commit(tx, job_id).await
    }
}

/// Deletes the job's `trace_chunks` rows and commits `tx` (whose update made them
/// unread); true.
async fn delete_chunks_and_commit(
    mut tx: sqlx::Transaction<'static, sqlx::Any>,
    job_id: i64,
) -> Result<bool> {
    sqlx::query("DELETE FROM trace_chunks WHERE job_id = $1")
        .bind(job_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

async fn read_chunks(conn: &mut sqlx::AnyConnection, job_id: i64) -> Result<Vec<u8>> {
    let rows = sqlx::query("SELECT data FROM trace_chunks WHERE job_id = $1 ORDER BY seq")
        .bind(job_id)
        .fetch_all(conn)
        .await?;
    let mut out = Vec::new();
    for r in rows {
        out.extend_from_slice(&r.get::<Vec<u8>, _>(0));
    }
    Ok(out)
}
