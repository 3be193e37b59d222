//! The pending queue and assignment (`assign_jobs`: exactly once), counts the queue and metrics read.

use super::*;
use crate::direct::{Param, Row as HotRow};

/// [`Store::executing_jobs_of_runner`]'s statement. (`+runner_id`: SQLite would rather walk
/// `jobs_by_runner`, every job the runner ever ran, than the executing ones by status.)
pub(crate) const EXECUTING_JOBS_OF_RUNNER: &str =
    "SELECT id FROM jobs WHERE status IN ('running', 'canceling') AND +runner_id = $1 ORDER BY id";

impl Store {
    /// Pending jobs in queue order (oldest first), with the number of running jobs of
    /// their project, for fair-share ordering by the caller.
    pub async fn pending_jobs(&self, limit: i64) -> Result<Vec<(Job, i64)>> {
        let rows = sqlx::query(&format!(
            "SELECT {}, (SELECT COUNT(*) FROM jobs r WHERE r.project_id = jobs.project_id AND r.status = 'running') AS running \
             FROM jobs WHERE status = 'pending' ORDER BY queued_at, id LIMIT $1",
            Job::COLUMNS
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((Job::from_row(r)?, r.get::<i64, _>("running"))))
            .collect::<Result<_>>()
    }

    /// Pending jobs in queue order (oldest first), without their specs: what job
    /// selection reads on every request, so it stays small.
    pub async fn pending_queue(&self, limit: i64) -> Result<Vec<QueuedJob>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE status = 'pending' ORDER BY queued_at, id LIMIT $1",
            QueuedJob::COLUMNS
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(QueuedJob::from_row).collect())
    }

    /// Pending jobs queued after `after` (`(queued_at, id)`) in queue order: what joined
    /// the queue since a [`Store::pending_queue`] read that ended there. O(jobs returned)
    /// on the `jobs_by_status` index. (A job put back in the queue keeps its older
    /// `queued_at`: a reader learns of it by reading the queue whole.)
    pub async fn pending_queue_after(
        &self,
        after: (i64, i64),
        limit: i64,
    ) -> Result<Vec<QueuedJob>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE status = 'pending' \
             AND (queued_at > $1 OR (queued_at = $1 AND id > $2)) \
             ORDER BY queued_at, id LIMIT $3",
            QueuedJob::COLUMNS
        ))
        .bind(after.0)
        .bind(after.1)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(QueuedJob::from_row).collect())
    }

    /// `(status, jobs)` for the statuses a job passes through before it ends (what the
    /// coordinator's metrics show); counted on the `jobs_by_status` index.
    pub async fn active_job_counts(&self) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT status, COUNT(*) FROM jobs \
             WHERE status IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling') \
             GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// How many runners contacted the coordinator at or after `since` (Unix ms).
    pub async fn runners_contacted_since(&self, since: i64) -> Result<i64> {
        Ok(
            sqlx::query("SELECT COUNT(*) FROM runners WHERE contacted_at >= $1")
                .bind(since)
                .fetch_one(&self.pool)
                .await?
                .get::<i64, _>(0),
        )
    }

    /// `(project id, running jobs)` for every project with running jobs (fair share).
    pub async fn running_jobs_per_project(&self) -> Result<Vec<(i64, i64)>> {
        let rows = sqlx::query(
            "SELECT project_id, COUNT(*) FROM jobs WHERE status = 'running' GROUP BY project_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// `(project id, status, pipelines)` of the pipelines not finished (created,
    /// waiting for a resource, preparing, pending, scheduled, running, canceling); a
    /// partial index holds exactly these (migration 0035).
    pub async fn active_pipeline_counts(&self) -> Result<Vec<(i64, String, i64)>> {
        let rows = sqlx::query(
            "SELECT project_id, status, COUNT(*) FROM pipelines \
             WHERE status IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'scheduled', 'running', 'canceling') \
             GROUP BY project_id, status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<i64, _>(0),
                    r.get::<String, _>(1),
                    r.get::<i64, _>(2),
                )
            })
            .collect())
    }

    /// How many runners are registered.
    pub async fn runner_count(&self) -> Result<i64> {
        Ok(sqlx::query("SELECT COUNT(*) FROM runners")
            .fetch_one(&self.pool)
            .await?
            .get::<i64, _>(0))
    }

    /// `(runner id, jobs)` for every runner executing jobs (running or canceling): which
    /// runners are busy, for why a job waits.
    pub async fn executing_jobs_per_runner(&self) -> Result<Vec<(i64, i64)>> {
        let rows = sqlx::query(
            "SELECT runner_id, COUNT(*) FROM jobs \
             WHERE status IN ('running', 'canceling') AND runner_id IS NOT NULL \
             GROUP BY runner_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// The jobs `runner_id` is executing (running or canceling), by id: through the
    /// `(status, …)` index, O(executing jobs), not a read of every active pipeline.
    pub async fn executing_jobs_of_runner(&self, runner_id: i64) -> Result<Vec<i64>> {
        let rows = sqlx::query(EXECUTING_JOBS_OF_RUNNER)
            .bind(runner_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| r.try_get::<i64, _>(0).map_err(Into::into))
            .collect()
    }

    /// Hand a pending job to a runner. Returns the status of the job's pipeline when the
    /// job is now the runner's; `None` when another runner got it first (the row is no
    /// longer pending): every pending job goes to exactly one runner.
    pub async fn assign_job(
        &self,
        job_id: i64,
        runner_id: i64,
        token_hash: &str,
        timeout_secs: i64,
        now: i64,
    ) -> Result<Option<JobStatus>> {
        let mut won = self
            .assign_jobs(
                &[Assignment {
                    job_id,
                    runner_id,
                    runner_manager_id: None,
                    token_hash: token_hash.to_owned(),
                    timeout_secs,
                }],
                now,
            )
            .await?;
        Ok(won.remove(&job_id).map(|a| a.pipeline_status))
    }

    /// [`Store::assign_job`] for many jobs in one transaction (one commit, however many
    /// runners asked at once). Returns the jobs now held by the runner named for them; a
    /// job named twice goes to its first assignment only. At most [`MAX_ASSIGN_BATCH`]
    /// assignments.
    ///
    /// The pipelines of the jobs still pending have their `lock_version` moved first
    /// (pipeline rows before job rows, the order [`Store::apply`] locks them in): a
    /// decision made over rows read before the assignment fails [`StoreError::Stale`],
    /// and a copy of the rows stays valid by applying [`Assigned`].
    ///
    /// A job goes only to a runner that still exists and is not paused, checked in the
    /// same statements (`RUNNER_MAY_TAKE`): a runner read before it was deleted or
    /// paused (a held request, a cached lookup) gets nothing, and its job stays pending
    /// for the others, its pipeline untouched.
    pub async fn assign_jobs(
        &self,
        batch: &[Assignment],
        now: i64,
    ) -> Result<HashMap<i64, Assigned>> {
        let mut seen = HashSet::new();
        let batch: Vec<&Assignment> = batch
            .iter()
            .filter(|a| seen.insert(a.job_id))
            .take(MAX_ASSIGN_BATCH)
            .collect();
        if batch.is_empty() {
            return Ok(HashMap::new());
        }
        if self.backend == Backend::Sqlite {
            return self.assign_jobs_in_one_trip(&batch, now).await;
        }
        // $1 = now; then per job i (from 0): $(2+5i) id, $(3+5i) runner, $(4+5i) token hash,
        // $(5+5i) timeout, $(6+5i) runner manager.
        let case = |column: usize| -> String {
            let mut sql = String::from("CASE jobs.id");
            for i in 0..batch.len() {
                sql.push_str(&format!(
                    " WHEN ${} THEN ${}",
                    2 + 5 * i,
                    2 + 5 * i + column
                ));
            }
            sql.push_str(" END");
            sql
        };
        let ids: Vec<String> = (0..batch.len())
            .map(|i| format!("${}", 2 + 5 * i))
            .collect();
        let mut tx = self.begin_write().await?;
        // $1..$n = the job ids, $(n+1)..$(2n) = their runners.
        let n = batch.len();
        let mut runner_of = String::from("CASE jobs.id");
        for i in 1..=n {
            runner_of.push_str(&format!(" WHEN ${i} THEN ${}", n + i));
        }
        runner_of.push_str(" END");
        let bump = format!(
            "UPDATE pipelines SET lock_version = lock_version + 1 \
             WHERE id IN (SELECT pipeline_id FROM jobs WHERE id IN ({}) AND status = 'pending' AND runner_id IS NULL \
             AND {}) \
             RETURNING id, status, lock_version",
            (1..=n)
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", "),
            runner_may_take(&runner_of)
        );
        let mut query = sqlx::query(&bump);
        for a in &batch {
            query = query.bind(a.job_id);
        }
        for a in &batch {
            query = query.bind(a.runner_id);
        }
        let pipelines: HashMap<i64, (JobStatus, i64)> = query
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                let status = crate::rows::status(r, "pipelines.status", "status")?;
                Ok((r.get("id"), (status, r.get("lock_version"))))
            })
            .collect::<Result<_>>()?;
        if pipelines.is_empty() {
            tx.rollback().await?;
            return Ok(HashMap::new());
        }
        let sql = format!(
            "UPDATE jobs SET status = 'running', runner_id = {}, token_hash = {}, timeout_secs = {}, runner_manager_id = {}, \
             started_at = $1, last_contact_at = NULL \
             WHERE id IN ({}) AND status = 'pending' AND runner_id IS NULL AND {} \
             RETURNING id, pipeline_id, trace_size, trace_in_db",
            case(1),
            case(2),
            case(3),
            case(4),
            ids.join(", "),
            runner_may_take(&case(1))
        );
        let mut query = sqlx::query(&sql).bind(now);
        for a in &batch {
            query = query
                .bind(a.job_id)
                .bind(a.runner_id)
                .bind(a.token_hash.as_str())
                .bind(a.timeout_secs)
                .bind(a.runner_manager_id);
        }
        let rows = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        let mut columns = None;
        let rows: Vec<HotRow> = rows
            .iter()
            .map(|r| HotRow::from_any(r, &mut columns))
            .collect();
        assigned(&rows, &pipelines)
    }

    /// [`Store::assign_jobs`] on SQLite: the same two statements in one write
    /// transaction ([`Store::write_hot`]). The job rows' update repeats the pipelines'
    /// condition, so under the write lock both touch the same jobs' pipelines or neither
    /// does.
    async fn assign_jobs_in_one_trip(
        &self,
        batch: &[&Assignment],
        now: i64,
    ) -> Result<HashMap<i64, Assigned>> {
        let marks = vec!["?"; batch.len()].join(", ");
        let case = vec!["WHEN ? THEN ?"; batch.len()].join(" ");
        let may_take = runner_may_take(&format!("CASE jobs.id {case} END"));
        let bump = format!(
            "UPDATE pipelines SET lock_version = lock_version + 1 \
             WHERE id IN (SELECT pipeline_id FROM jobs WHERE id IN ({marks}) AND status = 'pending' AND runner_id IS NULL \
             AND {may_take}) \
             RETURNING id, status, lock_version"
        );
        let take = format!(
            "UPDATE jobs SET status = 'running', runner_id = CASE id {case} END, token_hash = CASE id {case} END, \
             timeout_secs = CASE id {case} END, runner_manager_id = CASE id {case} END, started_at = ?, \
             last_contact_at = NULL \
             WHERE id IN ({marks}) AND status = 'pending' AND runner_id IS NULL AND {may_take} \
             RETURNING id, pipeline_id, trace_size, trace_in_db"
        );
        let mut params: Vec<Param> = Vec::with_capacity(batch.len() * 14 + 1);
        params.extend(batch.iter().map(|a| Param::from(a.job_id)));
        // `may_take`'s, then the runner's `CASE`: the same pairs.
        for a in batch.iter().chain(batch) {
            params.extend([Param::from(a.job_id), a.runner_id.into()]);
        }
        for a in batch {
            params.extend([Param::from(a.job_id), a.token_hash.as_str().into()]);
        }
        for a in batch {
            params.extend([Param::from(a.job_id), a.timeout_secs.into()]);
        }
        for a in batch {
            params.extend([Param::from(a.job_id), a.runner_manager_id.into()]);
        }
        params.push(now.into());
        params.extend(batch.iter().map(|a| Param::from(a.job_id)));
        for a in batch {
            params.extend([Param::from(a.job_id), a.runner_id.into()]);
        }
        let rows = self.write_hot(&[&bump, &take], params).await?;
        let (bumped, jobs): (Vec<_>, Vec<_>) =
            rows.into_iter().partition(|r| r.has("lock_version"));
        let pipelines: HashMap<i64, (JobStatus, i64)> = bumped
            .iter()
            .map(|r| {
                let status = r.status("pipelines.status", "status")?;
                Ok((r.int("id")?, (status, r.int("lock_version")?)))
            })
            .collect::<Result<_>>()?;
        assigned(&jobs, &pipelines)
    }

    /// Record that the job's runner is alive.
    pub async fn touch_job(&self, job_id: i64, now: i64) -> Result<()> {
        sqlx::query("UPDATE jobs SET last_contact_at = $1 WHERE id = $2")
            .bind(now)
            .bind(job_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Record the coverage found in a finished job's log.
    pub async fn set_job_coverage(&self, job_id: i64, coverage: f64) -> Result<()> {
        sqlx::query("UPDATE jobs SET coverage = $1 WHERE id = $2")
            .bind(coverage)
            .bind(job_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }
}

/// The condition under which a job may go to the runner `runner` (an SQL expression of
/// the `jobs` row naming the runner's id) in [`Store::assign_jobs`]: that runner exists
/// and is not paused. A primary-key lookup per job assigned.
fn runner_may_take(runner: &str) -> String {
    format!("EXISTS (SELECT 1 FROM runners WHERE runners.id = {runner} AND runners.paused = 0)")
}

/// The jobs an assignment's update returned, with their pipelines' status and new
/// `lock_version` (`pipelines`, from the pipelines' update).
fn assigned(
    rows: &[HotRow],
    pipelines: &HashMap<i64, (JobStatus, i64)>,
) -> Result<HashMap<i64, Assigned>> {
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let pipeline_id = r.int("pipeline_id")?;
        let Some((status, lock_version)) = pipelines.get(&pipeline_id) else {
            continue;
        };
        out.insert(
            r.int("id")?,
            Assigned {
                pipeline_id,
                pipeline_status: *status,
                lock_version: *lock_version,
                trace_size: r.int("trace_size")?,
                trace_in_db: r.int("trace_in_db")? != 0,
            },
        );
    }
    Ok(out)
}
