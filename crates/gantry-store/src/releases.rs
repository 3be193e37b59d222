//! Releases (migration 0033, GitLab's `releases`): one per project and tag, written by
//! the coordinator when a `release:` job succeeded; read by the releases API. A second
//! release of a tag is a [`crate::StoreError::Conflict`] (GitLab's `Release already
//! exists`).

use sqlx::Row;

use crate::{Result, Store, StoreError};

/// A release to record.
#[derive(Clone, Debug)]
pub struct NewRelease {
    pub project_id: i64,
    pub tag_name: String,
    pub name: String,
    pub description: String,
    pub tag_message: Option<String>,
    pub sha: String,
    pub job_id: Option<i64>,
    pub pipeline_id: Option<i64>,
    /// JSON array of milestone titles.
    pub milestones: String,
    /// JSON array of links.
    pub links: String,
    /// Milliseconds.
    pub released_at: i64,
}

/// A recorded release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub id: i64,
    pub project_id: i64,
    pub tag_name: String,
    pub name: String,
    pub description: String,
    pub tag_message: Option<String>,
    pub sha: String,
    pub job_id: Option<i64>,
    pub pipeline_id: Option<i64>,
    pub milestones: String,
    pub links: String,
    pub created_at: i64,
    pub released_at: i64,
}

const COLUMNS: &str = "id, project_id, tag_name, name, description, tag_message, sha, job_id, \
                       pipeline_id, milestones, links, created_at, released_at";

fn from_row(r: &sqlx::any::AnyRow) -> Release {
    Release {
        id: r.get(0),
        project_id: r.get(1),
        tag_name: r.get(2),
        name: r.get(3),
        description: r.get(4),
        tag_message: r.get(5),
        sha: r.get(6),
        job_id: r.get(7),
        pipeline_id: r.get(8),
        milestones: r.get(9),
        links: r.get(10),
        created_at: r.get(11),
        released_at: r.get(12),
    }
}

impl Store {
    /// Records `new`; `Conflict` when the project has a release of that tag.
    pub async fn add_release(&self, new: &NewRelease, now: i64) -> Result<Release> {
        let mut tx = self.begin_write().await?;
        let exists = sqlx::query("SELECT id FROM releases WHERE project_id = $1 AND tag_name = $2")
            .bind(new.project_id)
            .bind(&new.tag_name)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_some() {
            return Err(StoreError::Conflict("Release already exists".to_owned()));
        }
        let row = sqlx::query(&format!(
            "INSERT INTO releases (project_id, tag_name, name, description, tag_message, sha, \
             job_id, pipeline_id, milestones, links, created_at, released_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING {COLUMNS}"
        ))
        .bind(new.project_id)
        .bind(&new.tag_name)
        .bind(&new.name)
        .bind(&new.description)
        .bind(new.tag_message.as_deref())
        .bind(&new.sha)
        .bind(new.job_id)
        .bind(new.pipeline_id)
        .bind(&new.milestones)
        .bind(&new.links)
        .bind(now)
        .bind(new.released_at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(from_row(&row))
    }

    /// A project's releases, newest `released_at` first (GitLab's default order).
    pub async fn releases(&self, project_id: i64) -> Result<Vec<Release>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM releases WHERE project_id = $1 ORDER BY released_at DESC, id DESC"
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(from_row).collect())
    }

    /// A project's release of `tag_name`.
    pub async fn release(&self, project_id: i64, tag_name: &str) -> Result<Release> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM releases WHERE project_id = $1 AND tag_name = $2"
        ))
        .bind(project_id)
        .bind(tag_name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(from_row)
            .ok_or(StoreError::NotFound("release"))
    }
}
