//! Artifact rows, their locks and expiry, deleting a pipeline with its job data.

use super::*;

/// Job ids bound in one statement by [`Store::artifacts_of_jobs`] (far below SQLite's
/// and PostgreSQL's limits of bound parameters).
const JOBS_PER_STATEMENT: usize = 500;

/// [`Store::take_artifacts`]'s statement: `$1` is the selection's value, `$2` the limit.
/// The expired ones come by the index `artifacts_expiry` in its order (a pass costs the
/// rows it takes and the expired ones kept, not every artifact).
pub(crate) fn take_artifacts_sql(which: &ArtifactSelection) -> String {
    let condition = match which {
        // Locked ones stay (Artifact::expired).
        ArtifactSelection::ExpiredBy(_) => {
            "a.expire_at IS NOT NULL AND a.expire_at <= $1 \
             AND NOT EXISTS (SELECT 1 FROM pipelines p WHERE p.id = j.pipeline_id AND p.locked = 1)"
        }
        ArtifactSelection::OfJob(_) => "a.job_id = $1",
        ArtifactSelection::OfProject(_) => "j.project_id = $1",
    };
    format!(
        "DELETE FROM artifacts WHERE id IN (\
            SELECT a.id FROM artifacts a JOIN jobs j ON j.id = a.job_id \
            WHERE {condition} \
            AND j.status NOT IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling') \
            ORDER BY a.expire_at, a.id LIMIT $2) \
         RETURNING job_id, file_type, blob_key",
    )
}

impl Store {
    /// Removes up to `limit` artifact rows of `which`, of jobs that no longer run (a
    /// running job may still upload one of the same key), soonest expired first; returns
    /// `(job id, file type, blob key)` of each, for their blobs to be deleted. Two
    /// coordinators doing this at once take disjoint rows.
    pub async fn take_artifacts(
        &self,
        which: ArtifactSelection,
        limit: i64,
    ) -> Result<Vec<(i64, String, String)>> {
        let value = match which {
            ArtifactSelection::ExpiredBy(now) => now,
            ArtifactSelection::OfJob(job_id) => job_id,
            ArtifactSelection::OfProject(project_id) => project_id,
        };
        let rows = sqlx::query(&take_artifacts_sql(&which))
            .bind(value)
            .bind(limit)
            .fetch_all(&self.writer)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
    }

    /// Deletes pipeline `id` with its jobs, their artifact rows and log chunks, in one
    /// transaction; pipelines it triggered stay (their `parent_job_id` is cleared).
    /// Returns the deleted jobs' ids and `(job id, file type, blob key)` of their
    /// artifacts, for the files and blobs to be removed; `NotFound` without the pipeline.
    pub async fn delete_pipeline(&self, id: i64) -> Result<DeletedPipeline> {
        let mut tx = self.begin_write().await?;
        environments::detach_deployments(&mut tx, id).await?;
        let deleted =
            delete_job_data(&mut tx, "SELECT id FROM jobs WHERE pipeline_id = $1", id).await?;
        sqlx::query("DELETE FROM jobs WHERE pipeline_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM merge_request_pipelines WHERE pipeline_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM pipelines WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("pipeline"));
        }
        tx.commit().await?;
        Ok(deleted)
    }

    /// Erases a finished job's log (GitLab's `erase`): its size goes to 0 (readers then
    /// see nothing of the file, which the caller removes), its chunks in the database go,
    /// and `erased_at` is set. `false` when the job has not finished.
    pub async fn erase_job_log(&self, job_id: i64, now: i64) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE jobs SET trace_size = 0, trace_checksum = NULL, trace_in_db = 0, erased_at = $1 \
             WHERE id = $2 AND status IN ('success', 'failed', 'canceled', 'skipped')",
        )
        .bind(now)
        .bind(job_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query("DELETE FROM trace_chunks WHERE job_id = $1")
            .bind(job_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Makes a job's artifacts never expire (GitLab's "keep"); returns how many it has.
    pub async fn keep_artifacts(&self, job_id: i64) -> Result<u64> {
        let done = sqlx::query("UPDATE artifacts SET expire_at = NULL WHERE job_id = $1")
            .bind(job_id)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }

    /// Record an artifact (replacing an earlier one of the same type for the job).
    pub async fn put_artifact(&self, a: &NewArtifact, now: i64) -> Result<Artifact> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM artifacts WHERE job_id = $1 AND file_type = $2")
            .bind(a.job_id)
            .bind(&a.file_type)
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query(
            "INSERT INTO artifacts (job_id, file_type, file_format, filename, size, sha256, blob_key, expire_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(a.job_id)
        .bind(&a.file_type)
        .bind(&a.file_format)
        .bind(&a.filename)
        .bind(a.size)
        .bind(&a.sha256)
        .bind(&a.blob_key)
        .bind(a.expire_at)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let id: i64 = r.get(0);
        tx.commit().await?;
        let row = sqlx::query(&format!(
            "SELECT {} FROM artifacts WHERE id = $1",
            Artifact::COLUMNS
        ))
        .bind(id)
        .fetch_one(&self.pool)
        .await?;
        Artifact::from_row(&row)
    }

    pub async fn artifacts(&self, job_id: i64) -> Result<Vec<Artifact>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM artifacts WHERE job_id = $1 ORDER BY id",
            Artifact::COLUMNS
        ))
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Artifact::from_row).collect()
    }

    /// The artifacts of `job_ids` (by job, then in creation order): a job's
    /// dependencies' artifacts, O(dependencies) whatever the size of their pipelines
    /// (one statement per `JOBS_PER_STATEMENT` jobs).
    pub async fn artifacts_of_jobs(&self, job_ids: &[i64]) -> Result<Vec<Artifact>> {
        // Every job with dependencies reads them as its payload is made: a hot read.
        let mut out = Vec::new();
        for chunk in job_ids.chunks(JOBS_PER_STATEMENT) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT {} FROM artifacts WHERE job_id IN ({}) ORDER BY job_id, id",
                Artifact::COLUMNS,
                marks.join(", ")
            );
            let params = chunk.iter().map(|id| (*id).into()).collect();
            out.extend(self.read_hot(&sql, params).await?.read::<Artifact>()?);
        }
        Ok(out)
    }

    /// The artifacts of every job of a pipeline (by job, then in creation order).
    pub async fn pipeline_artifacts(&self, pipeline_id: i64) -> Result<Vec<Artifact>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM artifacts WHERE job_id IN (SELECT id FROM jobs WHERE pipeline_id = $1) ORDER BY job_id, id",
            Artifact::COLUMNS
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Artifact::from_row).collect()
    }
}
