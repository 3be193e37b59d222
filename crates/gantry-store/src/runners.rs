//! Runners: registration rows, changes, contact times.

use super::*;

/// What [`Store::delete_runner`] does to the runner's jobs (by `jobs_by_runner`).
pub(crate) const RUNNER_JOBS_LEFT: &str =
    "UPDATE jobs SET runner_id = NULL, runner_manager_id = NULL WHERE runner_id = $1";

impl Store {
    pub async fn create_runner(&self, r: &NewRunner, now: i64) -> Result<Runner> {
        let tags = serde_json::to_string(&r.tags).unwrap_or_else(|_| "[]".into());
        let res = sqlx::query(
            "INSERT INTO runners (token_hash, description, tags, run_untagged, locked, protected_only, project_id, maximum_timeout, created_at, paused, group_path, any_tags, name, maintenance_note) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id",
        )
        .bind(&r.token_hash)
        .bind(&r.description)
        .bind(tags)
        .bind(b(r.run_untagged))
        .bind(b(r.locked))
        .bind(b(r.protected_only))
        .bind(r.project_id)
        .bind(r.maximum_timeout)
        .bind(now)
        .bind(b(r.paused))
        .bind(&r.group_path)
        .bind(b(r.any_tags))
        .bind(&r.name)
        .bind(&r.maintenance_note)
        .fetch_one(&self.writer)
        .await?;
        let id: i64 = res.get(0);
        self.runner(id).await
    }

    /// Changes a runner's settings in one statement. A runner that would be left without
    /// tags and not running untagged jobs (it could run nothing) is not changed:
    /// `Conflict`, as GitLab's validation refuses it. `NotFound` when there is no runner
    /// `id`.
    pub async fn update_runner(&self, id: i64, changes: &RunnerChanges) -> Result<Runner> {
        let tags = match &changes.tags {
            Some(tags) => Some(
                serde_json::to_string(tags)
                    .map_err(|e| StoreError::Conflict(format!("encode the runner's tags: {e}")))?,
            ),
            None => None,
        };
        let changed = sqlx::query(
            "UPDATE runners SET \
             description = COALESCE($2, description), \
             tags = COALESCE($3, tags), \
             run_untagged = COALESCE($4, run_untagged), \
             locked = COALESCE($5, locked), \
             protected_only = COALESCE($6, protected_only), \
             maximum_timeout = COALESCE($7, maximum_timeout), \
             paused = COALESCE($8, paused), \
             maintenance_note = COALESCE($9, maintenance_note) \
             WHERE id = $1 AND (COALESCE($4, run_untagged) <> 0 OR COALESCE($3, tags) <> '[]')",
        )
        .bind(id)
        .bind(&changes.description)
        .bind(tags)
        .bind(changes.run_untagged.map(b))
        .bind(changes.locked.map(b))
        .bind(changes.protected_only.map(b))
        .bind(changes.maximum_timeout)
        .bind(changes.paused.map(b))
        .bind(&changes.maintenance_note)
        .execute(&self.writer)
        .await?
        .rows_affected();
        let runner = self.runner(id).await?;
        if changed == 0 {
            return Err(StoreError::Conflict(
                "tags_list can not be empty when runner is not allowed to pick untagged jobs"
                    .to_owned(),
            ));
        }
        Ok(runner)
    }

    pub async fn runner(&self, id: i64) -> Result<Runner> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM runners WHERE id = $1",
            Runner::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let runner = row
            .map(|r| Runner::from_row(&r))
            .ok_or(StoreError::NotFound("runner"))?;
        self.with_enabled_projects(runner).await
    }

    pub async fn runner_by_token_hash(&self, token_hash: &str) -> Result<Option<Runner>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM runners WHERE token_hash = $1",
            Runner::COLUMNS
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => Ok(Some(
                self.with_enabled_projects(Runner::from_row(&row)).await?,
            )),
            None => Ok(None),
        }
    }

    pub async fn runners(&self) -> Result<Vec<Runner>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM runners ORDER BY id",
            Runner::COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?;
        let mut runners: Vec<Runner> = rows.iter().map(Runner::from_row).collect();
        let enabled = sqlx::query(
            "SELECT runner_id, project_id FROM runner_projects ORDER BY created_at, project_id",
        )
        .fetch_all(&self.pool)
        .await?;
        for row in enabled {
            let runner_id: i64 = row.get(0);
            if let Some(runner) = runners.iter_mut().find(|r| r.id == runner_id) {
                runner.enabled_projects.push(row.get(1));
            }
        }
        Ok(runners)
    }

    /// Delete a runner; its finished jobs keep their history (runner_id cleared).
    pub async fn delete_runner(&self, id: i64) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM runner_projects WHERE runner_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(RUNNER_JOBS_LEFT)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM runner_managers WHERE runner_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM runners WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn touch_runner(&self, id: i64, now: i64) -> Result<()> {
        sqlx::query("UPDATE runners SET contacted_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }
}
