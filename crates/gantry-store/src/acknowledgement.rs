//! A job handed to a runner is *acknowledged* by the runner's first contact about it.
//!
//! [`crate::Store::assign_jobs`] leaves the job's `last_contact_at` empty; the runner's
//! first `PUT /jobs/:id` ([`Store::contact_job`] or [`Store::acknowledge_job`], checked
//! against the token it was given) or trace patch fills it. A job still unacknowledged after the coordinator's
//! bound went to a runner that never received it (its request was cut while the answer
//! was on its way) or died at once: [`Store::requeue_unacknowledged`] puts it back in
//! the queue — `pending` again, same row, no runner, its token revoked, no attempt
//! counted — in one compare-and-set per row (`status = 'running' AND last_contact_at IS
//! NULL`), so a job is put back once, whatever the number of coordinators, and never after
//! its runner spoke. Each pipeline concerned has its `lock_version` moved in the same
//! transaction: a decision taken on the job's old state is then `Stale` and taken again.
//!
//! Rows assigned before this rule existed have `last_contact_at` set at assignment: they
//! count as acknowledged.

use sqlx::Row;

use crate::{Result, Store};

/// A job [`Store::requeue_unacknowledged`] put back in the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequeuedJob {
    pub id: i64,
    pub pipeline_id: i64,
    /// The runner the job had been handed to.
    pub runner_id: i64,
    /// When it had been handed over (Unix ms).
    pub assigned_at: i64,
}

impl Store {
    /// Record the runner's first contact about a job it holds with `token_hash`. False
    /// when the job was acknowledged before, or is no longer that token's.
    pub async fn acknowledge_job(&self, job_id: i64, token_hash: &str, now: i64) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE jobs SET last_contact_at = $1 \
             WHERE id = $2 AND token_hash = $3 AND last_contact_at IS NULL",
        )
        .bind(now)
        .bind(job_id)
        .bind(token_hash)
        .execute(&self.writer)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// A runner's word about a job it runs, checked by the write itself: the job's last
    /// contact becomes `now` when `token_hash` is the job's, the job is executing
    /// (`running` or `canceling`) and its last contact is empty (the acknowledgement) or at
    /// least `keep_alive_ms` old. The job's status and pipeline when it was written; `None` when nothing
    /// matched — a wrong token, a job no longer executing or a contact too recent to
    /// record, which the caller tells apart by reading the job.
    pub async fn contact_job(
        &self,
        job_id: i64,
        token_hash: &str,
        now: i64,
        keep_alive_ms: i64,
    ) -> Result<Option<(crate::JobStatus, i64)>> {
        let rows = self
            .write_hot(
                &["UPDATE jobs SET last_contact_at = $1 \
                   WHERE id = $2 AND token_hash = $3 AND status IN ('running', 'canceling') \
                   AND (last_contact_at IS NULL OR last_contact_at <= $4) RETURNING status, pipeline_id"],
                vec![
                    now.into(),
                    job_id.into(),
                    token_hash.into(),
                    now.saturating_sub(keep_alive_ms).into(),
                ],
            )
            .await?;
        rows.first()
            .map(|r| Ok((r.status("jobs.status", "status")?, r.int("pipeline_id")?)))
            .transpose()
    }

    /// Put back in the queue every job handed to a runner at or before `assigned_before`
    /// (Unix ms) that its runner has not acknowledged: `pending`, without runner, token,
    /// start time or timeout (see the module docs). Trigger jobs, which no runner holds,
    /// are left alone.
    pub async fn requeue_unacknowledged(&self, assigned_before: i64) -> Result<Vec<RequeuedJob>> {
        let mut tx = self.begin_write().await?;
        let candidates = sqlx::query(
            "SELECT id, pipeline_id, runner_id, started_at FROM jobs \
             WHERE status = 'running' AND runner_id IS NOT NULL AND last_contact_at IS NULL \
             AND started_at <= $1",
        )
        .bind(assigned_before)
        .fetch_all(&mut *tx)
        .await?;
        let candidates: Vec<RequeuedJob> = candidates.iter().map(RequeuedJob::from_row).collect();
        // Pipeline rows before job rows, the order `Store::apply` locks them in.
        bump_pipelines(&mut tx, &candidates).await?;
        let mut jobs = Vec::new();
        for job in candidates {
            if put_back(&mut tx, &job).await? {
                jobs.push(job);
            }
        }
        tx.commit().await?;
        Ok(jobs)
    }

    /// Put one job back in the queue at once, as [`Store::requeue_unacknowledged`] does:
    /// the answer that handed it over with the token `token_hash` never left (its
    /// request was dropped). `None` when the job is no longer that token's, or its runner
    /// acknowledged it.
    pub async fn requeue_job(&self, job_id: i64, token_hash: &str) -> Result<Option<RequeuedJob>> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "SELECT id, pipeline_id, runner_id, started_at FROM jobs \
             WHERE id = $1 AND token_hash = $2 AND status = 'running' \
             AND runner_id IS NOT NULL AND last_contact_at IS NULL",
        )
        .bind(job_id)
        .bind(token_hash)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let job = RequeuedJob::from_row(&row);
        bump_pipelines(&mut tx, std::slice::from_ref(&job)).await?;
        if !put_back(&mut tx, &job).await? {
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(job))
    }
}

impl RequeuedJob {
    fn from_row(row: &sqlx::any::AnyRow) -> Self {
        RequeuedJob {
            id: row.get("id"),
            pipeline_id: row.get("pipeline_id"),
            runner_id: row.get("runner_id"),
            assigned_at: row.get("started_at"),
        }
    }
}

type Tx = sqlx::Transaction<'static, sqlx::Any>;

/// The compare-and-set: false when another coordinator put the job back, or its runner
/// spoke, since it was read.
async fn put_back(tx: &mut Tx, job: &RequeuedJob) -> Result<bool> {
    let r = sqlx::query(
        "UPDATE jobs SET status = 'pending', runner_id = NULL, token_hash = NULL, \
         started_at = NULL, timeout_secs = NULL \
         WHERE id = $1 AND status = 'running' AND runner_id = $2 \
         AND started_at = $3 AND last_contact_at IS NULL",
    )
    .bind(job.id)
    .bind(job.runner_id)
    .bind(job.assigned_at)
    .execute(&mut **tx)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Decisions taken on the jobs' old state become `Stale`.
async fn bump_pipelines(tx: &mut Tx, jobs: &[RequeuedJob]) -> Result<()> {
    let mut pipelines: Vec<i64> = jobs.iter().map(|j| j.pipeline_id).collect();
    pipelines.sort_unstable();
    pipelines.dedup();
    for pipeline in pipelines {
        sqlx::query("UPDATE pipelines SET lock_version = lock_version + 1 WHERE id = $1")
            .bind(pipeline)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
