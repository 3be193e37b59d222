//! Resource groups (GitLab's `Ci::ResourceGroup`): one row per key of a project, made with
//! the first pipeline that has a job of that key (`NewJob::resource_group`), holding the
//! order in which waiting jobs get the resource (`process_mode`). Which job holds a
//! resource is not stored here: it is the job statuses (`waiting_for_resource` → the
//! coordinator's `assign_resources`). The jobs of a project that are not done with a
//! resource are read by [`Store::resource_jobs`] through `jobs.resource_group` (migration
//! 0037) and its partial index: O(such jobs), whatever the size of their pipelines.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::{JobStatus, Result, Store, StoreError};

/// GitLab's default `process_mode`.
pub const DEFAULT_PROCESS_MODE: &str = "unordered";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceGroup {
    pub id: i64,
    pub project_id: i64,
    pub key: String,
    /// `unordered`, `oldest_first`, `newest_first` or `newest_ready_first`.
    pub process_mode: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl ResourceGroup {
    const COLUMNS: &'static str = "id, project_id, key, process_mode, created_at, updated_at";
    fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            project_id: r.get("project_id"),
            key: r.get("key"),
            process_mode: r.get("process_mode"),
            created_at: r.get("created_at"),
            updated_at: r.get("updated_at"),
        }
    }
}

/// A job of a resource group that is not done with its resource: it will want it
/// (`created`, `scheduled`), waits for it (`waiting_for_resource`) or holds it
/// (`pending`, `running`, `canceling`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceJob {
    pub id: i64,
    pub pipeline_id: i64,
    /// The resource group's key.
    pub group: String,
    /// `created`, `scheduled`, `waiting_for_resource`, `pending`, `running` or `canceling`.
    pub status: JobStatus,
    /// A newer attempt replaced it.
    pub retried: bool,
}

impl Store {
    /// The project's jobs of resource groups that are not done with their resource, in
    /// active pipelines, by id: one indexed read (`jobs_resource_groups`), O(those jobs).
    pub async fn resource_jobs(&self, project_id: i64) -> Result<Vec<ResourceJob>> {
        let rows = sqlx::query(
            "SELECT j.id, j.pipeline_id, j.resource_group, j.status, j.retried FROM jobs j \
             JOIN pipelines p ON p.id = j.pipeline_id \
             WHERE j.project_id = $1 AND j.resource_group IS NOT NULL \
             AND j.status IN ('created', 'scheduled', 'waiting_for_resource', 'pending', 'running', 'canceling') \
             AND p.status IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling', 'scheduled', 'manual') \
             ORDER BY j.id",
        )
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ResourceJob {
                    id: r.try_get(0)?,
                    pipeline_id: r.try_get(1)?,
                    group: r.try_get(2)?,
                    status: crate::rows::status(r, "jobs.status", "status")?,
                    retried: r.try_get::<i64, _>(4)? != 0,
                })
            })
            .collect()
    }

    /// A project's resource groups, by key.
    pub async fn resource_groups(&self, project_id: i64) -> Result<Vec<ResourceGroup>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM resource_groups WHERE project_id = $1 ORDER BY key",
            ResourceGroup::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(ResourceGroup::from_row).collect())
    }

    /// A project's resource group of `key`.
    pub async fn resource_group(&self, project_id: i64, key: &str) -> Result<ResourceGroup> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM resource_groups WHERE project_id = $1 AND key = $2",
            ResourceGroup::COLUMNS
        ))
        .bind(project_id)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound("resource group"))?;
        Ok(ResourceGroup::from_row(&row))
    }

    /// Sets a resource group's `process_mode` (checked by the caller).
    pub async fn set_process_mode(
        &self,
        project_id: i64,
        key: &str,
        mode: &str,
        now: i64,
    ) -> Result<ResourceGroup> {
        let row = sqlx::query(&format!(
            "UPDATE resource_groups SET process_mode = $1, updated_at = $2 \
             WHERE project_id = $3 AND key = $4 RETURNING {}",
            ResourceGroup::COLUMNS
        ))
        .bind(mode)
        .bind(now)
        .bind(project_id)
        .bind(key)
        .fetch_optional(&self.writer)
        .await?
        .ok_or(StoreError::NotFound("resource group"))?;
        Ok(ResourceGroup::from_row(&row))
    }
}

/// The project's resource group `key`, made (`unordered`) if it does not exist.
pub(crate) async fn ensure_resource_group(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project_id: i64,
    key: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO resource_groups (project_id, key, process_mode, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $4) ON CONFLICT (project_id, key) DO NOTHING",
    )
    .bind(project_id)
    .bind(key)
    .bind(DEFAULT_PROCESS_MODE)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
