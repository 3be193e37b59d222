//! Pipeline schedules (`move_schedule`, the compare-and-set of `next_run_at`, is in `lib.rs`: pipeline creation uses it too).

use super::*;

impl Store {
    /// Store a new schedule (`variables` sealed by the caller).
    pub async fn create_pipeline_schedule(
        &self,
        s: &PipelineSchedule,
        max_per_project: i64,
    ) -> Result<PipelineSchedule> {
        let mut tx = self.begin_write().await?;
        let count: i64 =
            sqlx::query("SELECT COUNT(*) FROM pipeline_schedules WHERE project_id = $1")
                .bind(s.project_id)
                .fetch_one(&mut *tx)
                .await?
                .get(0);
        if count >= max_per_project {
            return Err(StoreError::Conflict(format!(
                "a project has at most {max_per_project} pipeline schedules: delete one first"
            )));
        }
        let row = sqlx::query(&format!(
            "INSERT INTO pipeline_schedules (project_id, description, ref_name, cron, cron_timezone, active, next_run_at, variables, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING {}",
            PipelineSchedule::COLUMNS
        ))
        .bind(s.project_id)
        .bind(&s.description)
        .bind(&s.ref_name)
        .bind(&s.cron)
        .bind(&s.cron_timezone)
        .bind(b(s.active))
        .bind(s.next_run_at)
        .bind(&s.variables)
        .bind(s.created_at)
        .bind(s.updated_at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(PipelineSchedule::from_row(&row))
    }

    /// Replace a schedule's settings (all but its id, project and creation time).
    pub async fn update_pipeline_schedule(&self, s: &PipelineSchedule) -> Result<PipelineSchedule> {
        let row = sqlx::query(&format!(
            "UPDATE pipeline_schedules SET description = $1, ref_name = $2, cron = $3, cron_timezone = $4, active = $5, next_run_at = $6, variables = $7, updated_at = $8 \
             WHERE id = $9 AND project_id = $10 RETURNING {}",
            PipelineSchedule::COLUMNS
        ))
        .bind(&s.description)
        .bind(&s.ref_name)
        .bind(&s.cron)
        .bind(&s.cron_timezone)
        .bind(b(s.active))
        .bind(s.next_run_at)
        .bind(&s.variables)
        .bind(s.updated_at)
        .bind(s.id)
        .bind(s.project_id)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref()
            .map(PipelineSchedule::from_row)
            .ok_or(StoreError::NotFound("pipeline schedule"))
    }

    pub async fn pipeline_schedule(&self, project_id: i64, id: i64) -> Result<PipelineSchedule> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM pipeline_schedules WHERE id = $1 AND project_id = $2",
            PipelineSchedule::COLUMNS
        ))
        .bind(id)
        .bind(project_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(PipelineSchedule::from_row)
            .ok_or(StoreError::NotFound("pipeline schedule"))
    }

    /// A project's schedules, oldest first.
    pub async fn pipeline_schedules(&self, project_id: i64) -> Result<Vec<PipelineSchedule>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipeline_schedules WHERE project_id = $1 ORDER BY id",
            PipelineSchedule::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(PipelineSchedule::from_row).collect())
    }

    /// Active schedules whose next run is at or before `now`, earliest first (at most
    /// `limit`).
    pub async fn due_pipeline_schedules(
        &self,
        now: i64,
        limit: i64,
    ) -> Result<Vec<PipelineSchedule>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipeline_schedules WHERE next_run_at <= $1 ORDER BY next_run_at, id LIMIT $2",
            PipelineSchedule::COLUMNS
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(PipelineSchedule::from_row).collect())
    }

    /// Move a schedule's next run from `due` to `next` without a pipeline (its pipeline
    /// could not be created); `false` when another coordinator moved it first.
    pub async fn move_pipeline_schedule(
        &self,
        id: i64,
        due: i64,
        next: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let moved = move_schedule(&mut tx, id, due, next, now).await?;
        if moved {
            tx.commit().await?;
        }
        Ok(moved)
    }

    pub async fn delete_pipeline_schedule(&self, project_id: i64, id: i64) -> Result<()> {
        let done = sqlx::query("DELETE FROM pipeline_schedules WHERE id = $1 AND project_id = $2")
            .bind(id)
            .bind(project_id)
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("pipeline schedule"));
        }
        Ok(())
    }

    /// The pipelines a schedule ran, newest first (at most `limit`).
    pub async fn schedule_pipelines(&self, schedule_id: i64, limit: i64) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE schedule_id = $1 ORDER BY id DESC LIMIT $2",
            Pipeline::COLUMNS
        ))
        .bind(schedule_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Pipeline::from_row).collect()
    }
}
