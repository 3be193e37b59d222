//! Projects, their protected refs and the refs seen of their mirrors (`move_ref` is in `lib.rs`: pipelines use it too).

use super::*;

impl Store {
    /// Adds a project and its first protected branches, in one transaction.
    pub async fn create_project(&self, p: &NewProject, now: i64) -> Result<Project> {
        let mut tx = self.begin_write().await?;
        let r = sqlx::query(
            "INSERT INTO projects (name, repo_url, default_branch, timeout_secs, created_at, ci_config_path) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(&p.name)
        .bind(&p.repo_url)
        .bind(&p.default_branch)
        .bind(p.timeout_secs)
        .bind(now)
        .bind(&p.ci_config_path)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| StoreError::conflict_or(e, format!("a project named `{}` already exists", p.name)))?;
        let id: i64 = r.get(0);
        for name in &p.protected_branches {
            insert_protected_ref(&mut tx, id, RefKind::Branch, name, now).await?;
        }
        tx.commit().await?;
        self.project(id).await
    }

    /// A project's protected branches and tags, branches first, by name.
    pub async fn protected_refs(&self, project_id: i64) -> Result<Vec<ProtectedRef>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM protected_refs WHERE project_id = $1 ORDER BY kind, name",
            ProtectedRef::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(ProtectedRef::from_row).collect())
    }

    /// Protects a branch or tag name or pattern; `Conflict` when it is protected already.
    pub async fn protect_ref(
        &self,
        project_id: i64,
        kind: RefKind,
        name: &str,
        now: i64,
    ) -> Result<ProtectedRef> {
        let mut tx = self.begin_write().await?;
        let protected = insert_protected_ref(&mut tx, project_id, kind, name, now).await?;
        tx.commit().await?;
        Ok(protected)
    }

    /// Removes a protection; `NotFound` when there is none of that kind and name.
    pub async fn unprotect_ref(&self, project_id: i64, kind: RefKind, name: &str) -> Result<()> {
        let done = sqlx::query(
            "DELETE FROM protected_refs WHERE project_id = $1 AND kind = $2 AND name = $3",
        )
        .bind(project_id)
        .bind(kind.as_str())
        .bind(name)
        .execute(&self.writer)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("protected ref"));
        }
        Ok(())
    }

    /// Deletes a project and everything it owns, in one transaction: its pipelines, jobs
    /// (their log chunks and artifact rows), environments and deployments, variables,
    /// trigger tokens, schedules, protected refs, recorded refs, project runners (and
    /// their managers), merge requests and job token allowlist entries (its own and those
    /// naming it).
    /// Pipelines of other projects that its trigger jobs created stay, without their
    /// link. Returns the deleted jobs and artifacts, whose files the caller removes.
    pub async fn delete_project(&self, id: i64) -> Result<DeletedPipeline> {
        let mut tx = self.begin_write().await?;
        let deleted =
            delete_job_data(&mut tx, "SELECT id FROM jobs WHERE project_id = $1", id).await?;
        for statement in [
            "DELETE FROM deployments WHERE project_id = $1",
            "DELETE FROM pages_deployments WHERE project_id = $1",
            "DELETE FROM releases WHERE project_id = $1",
            "DELETE FROM jobs WHERE project_id = $1",
            "DELETE FROM merge_request_pipelines WHERE pipeline_id IN (SELECT id FROM pipelines WHERE project_id = $1)",
            "DELETE FROM merge_requests WHERE project_id = $1",
            "DELETE FROM pipelines WHERE project_id = $1",
            "DELETE FROM environments WHERE project_id = $1",
            "DELETE FROM resource_groups WHERE project_id = $1",
            "DELETE FROM project_variables WHERE project_id = $1",
            "DELETE FROM pipeline_triggers WHERE project_id = $1",
            "DELETE FROM pipeline_schedules WHERE project_id = $1",
            "DELETE FROM protected_refs WHERE project_id = $1",
            "DELETE FROM project_refs WHERE project_id = $1",
            "DELETE FROM runner_projects WHERE project_id = $1",
            "DELETE FROM runner_projects WHERE runner_id IN (SELECT id FROM runners WHERE project_id = $1)",
            // Jobs of other projects its runners took keep their history, without them.
            "UPDATE jobs SET runner_id = NULL, runner_manager_id = NULL \
             WHERE runner_id IN (SELECT id FROM runners WHERE project_id = $1)",
            "DELETE FROM runner_managers WHERE runner_id IN (SELECT id FROM runners WHERE project_id = $1)",
            "DELETE FROM runners WHERE project_id = $1",
            "DELETE FROM job_token_project_links WHERE project_id = $1",
            "DELETE FROM job_token_project_links WHERE target_project_id = $1",
            "DELETE FROM job_token_group_links WHERE project_id = $1",
        ] {
            sqlx::query(statement).bind(id).execute(&mut *tx).await?;
        }
        let done = sqlx::query("DELETE FROM projects WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("project"));
        }
        tx.commit().await?;
        Ok(deleted)
    }

    /// Change a project's settings (those `changes` names) and return it.
    pub async fn update_project(&self, id: i64, changes: &ProjectChanges) -> Result<Project> {
        let mut tx = self.begin_write().await?;
        let found = sqlx::query(
            "UPDATE projects SET \
             default_branch = COALESCE($2, default_branch), \
             ci_config_path = COALESCE($3, ci_config_path), \
             timeout_secs = COALESCE($4, timeout_secs), \
             keep_latest_artifact = COALESCE($5, keep_latest_artifact), \
             build_git_strategy = COALESCE($6, build_git_strategy), \
             ci_default_git_depth = CASE WHEN $7 = 1 THEN $8 ELSE ci_default_git_depth END, \
             auto_cancel_pending_pipelines = COALESCE($9, auto_cancel_pending_pipelines), \
             ci_separated_caches = COALESCE($10, ci_separated_caches), \
             ci_forward_deployment_enabled = COALESCE($11, ci_forward_deployment_enabled), \
             ci_inbound_job_token_scope_enabled = COALESCE($12, ci_inbound_job_token_scope_enabled) \
             WHERE id = $1",
        )
        .bind(id)
        .bind(&changes.default_branch)
        .bind(&changes.ci_config_path)
        .bind(changes.timeout_secs)
        .bind(changes.keep_latest_artifact.map(b))
        .bind(&changes.build_git_strategy)
        .bind(b(changes.ci_default_git_depth.is_some()))
        .bind(changes.ci_default_git_depth.flatten())
        .bind(changes.auto_cancel_pending_pipelines.map(b))
        .bind(changes.ci_separated_caches.map(b))
        .bind(changes.ci_forward_deployment_enabled.map(b))
        .bind(changes.ci_inbound_job_token_scope_enabled.map(b))
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if found == 0 {
            return Err(StoreError::NotFound("project"));
        }
        let row = sqlx::query(&format!(
            "SELECT {} FROM projects WHERE id = $1",
            Project::COLUMNS
        ))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Project::from_row(&row))
    }

    pub async fn project(&self, id: i64) -> Result<Project> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM projects WHERE id = $1",
            Project::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Project::from_row(&r))
            .ok_or(StoreError::NotFound("project"))
    }

    /// The branches and tags of a project as last recorded (`refs/…` → commit), sorted;
    /// `None` when they never were ([`Store::record_refs`]).
    pub async fn project_refs(&self, project_id: i64) -> Result<Option<Vec<(String, String)>>> {
        let seen: Option<i64> = sqlx::query("SELECT refs_seen_at FROM projects WHERE id = $1")
            .bind(project_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound("project"))?
            .get(0);
        if seen.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT ref_name, sha FROM project_refs WHERE project_id = $1 ORDER BY ref_name",
        )
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(Some(
            rows.iter()
                .map(|r| (r.get::<String, _>(0), r.get::<String, _>(1)))
                .collect(),
        ))
    }

    /// Record a project's refs for the first time (no pipelines: what was there before is
    /// no push). `false` when they were recorded already (by another coordinator).
    pub async fn record_refs(
        &self,
        project_id: i64,
        refs: &[(String, String)],
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let first = sqlx::query(
            "UPDATE projects SET refs_seen_at = $1 WHERE id = $2 AND refs_seen_at IS NULL",
        )
        .bind(now)
        .bind(project_id)
        .execute(&mut *tx)
        .await?;
        if first.rows_affected() == 0 {
            return Ok(false);
        }
        for (name, sha) in refs {
            sqlx::query("INSERT INTO project_refs (project_id, ref_name, sha) VALUES ($1, $2, $3)")
                .bind(project_id)
                .bind(name)
                .bind(sha)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Record a ref's change that creates no pipeline (a deletion, a change over the
    /// push limit, a configuration that creates none); `false` when the ref had moved
    /// meanwhile (another coordinator took the change).
    pub async fn move_ref(&self, project_id: i64, change: &RefChange) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let moved = move_ref(&mut tx, project_id, change).await?;
        if moved {
            tx.commit().await?;
        }
        Ok(moved)
    }

    pub async fn project_by_name(&self, name: &str) -> Result<Project> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM projects WHERE name = $1",
            Project::COLUMNS
        ))
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Project::from_row(&r))
            .ok_or(StoreError::NotFound("project"))
    }

    pub async fn projects(&self) -> Result<Vec<Project>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM projects ORDER BY id",
            Project::COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Project::from_row).collect())
    }
}

async fn insert_protected_ref(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    project_id: i64,
    kind: RefKind,
    name: &str,
    now: i64,
) -> Result<ProtectedRef> {
    let row = sqlx::query(&format!(
        "INSERT INTO protected_refs (project_id, kind, name, created_at) VALUES ($1, $2, $3, $4) RETURNING {}",
        ProtectedRef::COLUMNS
    ))
    .bind(project_id)
    .bind(kind.as_str())
    .bind(name)
    .bind(now)
    .fetch_one(&mut **tx)
    .await
    .map_err(|e| {
        StoreError::conflict_or(e, format!("the {} `{name}` is protected already", kind.as_str()))
    })?;
    Ok(ProtectedRef::from_row(&row))
}
