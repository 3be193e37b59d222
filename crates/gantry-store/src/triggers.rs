//! Pipeline trigger tokens (by hash).

use super::*;

impl Store {
    /// Adds a pipeline trigger token (by its hash) to a project.
    pub async fn create_pipeline_trigger(
        &self,
        project_id: i64,
        token_hash: &str,
        token_prefix: &str,
        description: &str,
        now: i64,
    ) -> Result<PipelineTrigger> {
        let row = sqlx::query(&format!(
            "INSERT INTO pipeline_triggers (project_id, token_hash, token_prefix, description, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {}",
            PipelineTrigger::COLUMNS
        ))
        .bind(project_id)
        .bind(token_hash)
        .bind(token_prefix)
        .bind(description)
        .bind(now)
        .fetch_one(&self.writer)
        .await?;
        Ok(PipelineTrigger::from_row(&row))
    }

    /// A project's trigger tokens, oldest first.
    pub async fn pipeline_triggers(&self, project_id: i64) -> Result<Vec<PipelineTrigger>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipeline_triggers WHERE project_id = $1 ORDER BY id",
            PipelineTrigger::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(PipelineTrigger::from_row).collect())
    }

    /// A project's trigger `id`; `NotFound` when it has none of that id.
    pub async fn pipeline_trigger(&self, project_id: i64, id: i64) -> Result<PipelineTrigger> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM pipeline_triggers WHERE project_id = $1 AND id = $2",
            PipelineTrigger::COLUMNS
        ))
        .bind(project_id)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(PipelineTrigger::from_row)
            .ok_or(StoreError::NotFound("pipeline trigger"))
    }

    /// Changes a project's trigger's description; `NotFound` when it has none of that id.
    pub async fn describe_pipeline_trigger(
        &self,
        project_id: i64,
        id: i64,
        description: &str,
    ) -> Result<PipelineTrigger> {
        let row = sqlx::query(&format!(
            "UPDATE pipeline_triggers SET description = $1 WHERE project_id = $2 AND id = $3 \
             RETURNING {}",
            PipelineTrigger::COLUMNS
        ))
        .bind(description)
        .bind(project_id)
        .bind(id)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref()
            .map(PipelineTrigger::from_row)
            .ok_or(StoreError::NotFound("pipeline trigger"))
    }

    /// The trigger whose token hashes to `token_hash`, marked used at `now`.
    pub async fn use_pipeline_trigger(
        &self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<PipelineTrigger>> {
        let row = sqlx::query(&format!(
            "UPDATE pipeline_triggers SET last_used_at = $1 WHERE token_hash = $2 RETURNING {}",
            PipelineTrigger::COLUMNS
        ))
        .bind(now)
        .bind(token_hash)
        .fetch_optional(&self.writer)
        .await?;
        Ok(row.as_ref().map(PipelineTrigger::from_row))
    }

    /// Removes a project's trigger; `NotFound` when it has none of that id.
    pub async fn delete_pipeline_trigger(&self, project_id: i64, id: i64) -> Result<()> {
        let done = sqlx::query("DELETE FROM pipeline_triggers WHERE project_id = $1 AND id = $2")
            .bind(project_id)
            .bind(id)
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("pipeline trigger"));
        }
        Ok(())
    }
}
