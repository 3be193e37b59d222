//! A project's CI/CD job token allowlist (GitLab's inbound job token scope, migration
//! 0026): the projects and groups whose job tokens may reach it. Whether the project
//! limits access to them at all is its row's `ci_inbound_job_token_scope_enabled`
//! ([`crate::ProjectChanges`]). The store keeps the entries; who may reach what is the
//! coordinator's decision.

use sqlx::Row;

use crate::{Result, Store};

/// The entries of a project's allowlist (the project itself, always in, is not one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobTokenAllowlist {
    /// The projects whose job tokens may reach it, by id.
    pub projects: Vec<i64>,
    /// The groups whose projects' job tokens may reach it: `(group id, full path)`, by id.
    pub groups: Vec<(i64, String)>,
}

/// What adding an allowlist entry did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkAdded {
    Added,
    /// The entry was there already; nothing changed.
    AlreadyThere,
    /// The allowlist has the most entries of that kind it may have; nothing changed.
    Full,
}

impl Store {
    /// Project `project_id`'s allowlist entries.
    pub async fn job_token_allowlist(&self, project_id: i64) -> Result<JobTokenAllowlist> {
        let projects = sqlx::query(
            "SELECT target_project_id FROM job_token_project_links WHERE project_id = $1 \
             ORDER BY target_project_id",
        )
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
        let groups = sqlx::query(
            "SELECT g.id, g.path FROM job_token_group_links l JOIN group_ids g ON g.id = l.group_id \
             WHERE l.project_id = $1 ORDER BY g.id",
        )
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
        Ok(JobTokenAllowlist { projects, groups })
    }

    /// Lets job tokens of `target_project_id` into `project_id`, unless the allowlist has
    /// `limit` projects already (checked and added in one transaction).
    pub async fn add_job_token_project(
        &self,
        project_id: i64,
        target_project_id: i64,
        limit: usize,
        now: i64,
    ) -> Result<LinkAdded> {
        self.add_link(
            "job_token_project_links",
            "target_project_id",
            project_id,
            target_project_id,
            limit,
            now,
        )
        .await
    }

    /// Lets job tokens of the projects under group `group_id` into `project_id`, unless
    /// the allowlist has `limit` groups already.
    pub async fn add_job_token_group(
        &self,
        project_id: i64,
        group_id: i64,
        limit: usize,
        now: i64,
    ) -> Result<LinkAdded> {
        self.add_link(
            "job_token_group_links",
            "group_id",
            project_id,
            group_id,
            limit,
            now,
        )
        .await
    }

    /// Takes `target_project_id` off `project_id`'s allowlist; `false` when it was not on.
    pub async fn remove_job_token_project(
        &self,
        project_id: i64,
        target_project_id: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM job_token_project_links WHERE project_id = $1 AND target_project_id = $2",
        )
        .bind(project_id)
        .bind(target_project_id)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Takes group `group_id` off `project_id`'s allowlist; `false` when it was not on.
    pub async fn remove_job_token_group(&self, project_id: i64, group_id: i64) -> Result<bool> {
        let done = sqlx::query(
            "DELETE FROM job_token_group_links WHERE project_id = $1 AND group_id = $2",
        )
        .bind(project_id)
        .bind(group_id)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// One entry into `table` (`project_id`, `column`): the count checked first, as
    /// GitLab validates the limit before the unique index answers.
    async fn add_link(
        &self,
        table: &'static str,
        column: &'static str,
        project_id: i64,
        target: i64,
        limit: usize,
        now: i64,
    ) -> Result<LinkAdded> {
        let mut tx = self.begin_write().await?;
        let count: i64 = sqlx::query(&format!(
            "SELECT COUNT(*) FROM {table} WHERE project_id = $1"
        ))
        .bind(project_id)
        .fetch_one(&mut *tx)
        .await?
        .get(0);
        if usize::try_from(count).unwrap_or(usize::MAX) >= limit {
            return Ok(LinkAdded::Full);
        }
        let done = sqlx::query(&format!(
            "INSERT INTO {table} (project_id, {column}, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (project_id, {column}) DO NOTHING"
        ))
        .bind(project_id)
        .bind(target)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(if done.rows_affected() == 1 {
            LinkAdded::Added
        } else {
            LinkAdded::AlreadyThere
        })
    }
}
