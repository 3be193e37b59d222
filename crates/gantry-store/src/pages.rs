//! Pages deployments (migration 0032, GitLab's `pages_deployments`): a Pages job's site,
//! a zip blob the coordinator wrote, one row per deployment. Which row is served is
//! the newest active one of a project and path prefix ([`Store::active_pages_deployment`],
//! one indexed lookup); a new deployment deactivates the older ones of its prefix in the
//! transaction that adds it and hands their blobs back for the caller to remove.

use sqlx::Row;

use crate::{Result, Store};

/// A deployment to record.
#[derive(Clone, Debug)]
pub struct NewPagesDeployment {
    pub project_id: i64,
    pub job_id: i64,
    pub pipeline_id: i64,
    pub sha: String,
    /// `pages:path_prefix`, expanded and slugified; empty for the main site.
    pub path_prefix: String,
    pub blob_key: String,
    pub file_count: i64,
    pub size: i64,
    /// Milliseconds; `None`: never expires.
    pub expires_at: Option<i64>,
}

/// A recorded deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagesDeployment {
    pub id: i64,
    pub project_id: i64,
    pub job_id: i64,
    pub pipeline_id: i64,
    pub sha: String,
    pub path_prefix: String,
    pub blob_key: String,
    pub file_count: i64,
    pub size: i64,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub deleted_at: Option<i64>,
}

const COLUMNS: &str = "id, project_id, job_id, pipeline_id, sha, path_prefix, blob_key, \
                       file_count, size, created_at, expires_at, deleted_at";

fn from_row(r: &sqlx::any::AnyRow) -> PagesDeployment {
    PagesDeployment {
        id: r.get(0),
        project_id: r.get(1),
        job_id: r.get(2),
        pipeline_id: r.get(3),
        sha: r.get(4),
        path_prefix: r.get(5),
        blob_key: r.get(6),
        file_count: r.get(7),
        size: r.get(8),
        created_at: r.get(9),
        expires_at: r.get(10),
        deleted_at: r.get(11),
    }
}

impl Store {
    /// Records `new` as its project's and prefix's served deployment, deactivating the
    /// older active ones of the same prefix (GitLab's
    /// `deactivate_deployments_older_than`). Returns the new row and the blob keys of the
    /// deactivated ones, which nothing serves any more.
    pub async fn add_pages_deployment(
        &self,
        new: &NewPagesDeployment,
        now: i64,
    ) -> Result<(PagesDeployment, Vec<String>)> {
        let mut tx = self.begin_write().await?;
        let older: Vec<String> = sqlx::query(
            "SELECT blob_key FROM pages_deployments \
             WHERE project_id = $1 AND path_prefix = $2 AND deleted_at IS NULL",
        )
        .bind(new.project_id)
        .bind(&new.path_prefix)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
        sqlx::query(
            "UPDATE pages_deployments SET deleted_at = $3 \
             WHERE project_id = $1 AND path_prefix = $2 AND deleted_at IS NULL",
        )
        .bind(new.project_id)
        .bind(&new.path_prefix)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query(&format!(
            "INSERT INTO pages_deployments (project_id, job_id, pipeline_id, sha, path_prefix, \
             blob_key, file_count, size, created_at, expires_at, deleted_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL) RETURNING {COLUMNS}"
        ))
        .bind(new.project_id)
        .bind(new.job_id)
        .bind(new.pipeline_id)
        .bind(&new.sha)
        .bind(&new.path_prefix)
        .bind(&new.blob_key)
        .bind(new.file_count)
        .bind(new.size)
        .bind(now)
        .bind(new.expires_at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((from_row(&row), older))
    }

    /// The served deployment of a project and path prefix (`""`: the main site): the
    /// newest active one that has not expired at `now`.
    pub async fn active_pages_deployment(
        &self,
        project_id: i64,
        path_prefix: &str,
        now: i64,
    ) -> Result<Option<PagesDeployment>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM pages_deployments \
             WHERE project_id = $1 AND path_prefix = $2 AND deleted_at IS NULL \
             AND (expires_at IS NULL OR expires_at > $3) ORDER BY id DESC LIMIT 1"
        ))
        .bind(project_id)
        .bind(path_prefix)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(from_row))
    }

    /// A project's active deployments, newest first (GitLab's `GET /projects/:id/pages`
    /// lists them).
    pub async fn pages_deployments(&self, project_id: i64) -> Result<Vec<PagesDeployment>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM pages_deployments \
             WHERE project_id = $1 AND deleted_at IS NULL ORDER BY id DESC"
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(from_row).collect())
    }

    /// The blob keys of every deployment of a project, active or not (the files to remove
    /// with the project).
    pub async fn pages_blob_keys(&self, project_id: i64) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT blob_key FROM pages_deployments WHERE project_id = $1")
            .bind(project_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
