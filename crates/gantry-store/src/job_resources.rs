//! A job's resource use as its runner reports it (`resources` in `PUT /jobs/:id`):
//! one row per job in `job_resources`, replaced by each report (the figures are
//! cumulative), deleted with the job (`ON DELETE CASCADE`). One upsert per report; a
//! pipeline's rows in one query.

use std::collections::HashMap;

use sqlx::Row;

use crate::{Result, Store};

/// What a job used, as last reported.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JobResourceUse {
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub peak_memory_bytes: i64,
    pub read_bytes: i64,
    pub written_bytes: i64,
    /// When it was reported (Unix ms).
    pub updated_at: i64,
}

const COLUMNS: &str = "job_id, cpu_user_seconds, cpu_system_seconds, peak_memory_bytes, read_bytes, written_bytes, updated_at";

fn from_row(row: &sqlx::any::AnyRow) -> Result<(i64, JobResourceUse)> {
    Ok((
        row.try_get(0)?,
        JobResourceUse {
            cpu_user_seconds: row.try_get(1)?,
            cpu_system_seconds: row.try_get(2)?,
            peak_memory_bytes: row.try_get(3)?,
            read_bytes: row.try_get(4)?,
            written_bytes: row.try_get(5)?,
            updated_at: row.try_get(6)?,
        },
    ))
}

impl Store {
    /// Records job `job_id`'s use, replacing what it reported before.
    pub async fn record_job_resources(&self, job_id: i64, used: &JobResourceUse) -> Result<()> {
        sqlx::query(&format!(
            "INSERT INTO job_resources ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
             ON CONFLICT (job_id) DO UPDATE SET cpu_user_seconds = excluded.cpu_user_seconds, \
             cpu_system_seconds = excluded.cpu_system_seconds, \
             peak_memory_bytes = excluded.peak_memory_bytes, read_bytes = excluded.read_bytes, \
             written_bytes = excluded.written_bytes, updated_at = excluded.updated_at"
        ))
        .bind(job_id)
        .bind(used.cpu_user_seconds)
        .bind(used.cpu_system_seconds)
        .bind(used.peak_memory_bytes)
        .bind(used.read_bytes)
        .bind(used.written_bytes)
        .bind(used.updated_at)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Job `job_id`'s last reported use; `None` when it reported none.
    pub async fn job_resources(&self, job_id: i64) -> Result<Option<JobResourceUse>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM job_resources WHERE job_id = $1"
        ))
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(from_row)
            .transpose()
            .map(|r| r.map(|(_, used)| used))
    }

    /// The reported use of every job of pipeline `pipeline_id` that reported one.
    pub async fn pipeline_job_resources(
        &self,
        pipeline_id: i64,
    ) -> Result<HashMap<i64, JobResourceUse>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM job_resources \
             WHERE job_id IN (SELECT id FROM jobs WHERE pipeline_id = $1)"
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(from_row).collect()
    }
}
