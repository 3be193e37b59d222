//! Environments and deployments (GitLab's `Environment` and `Deployment`).
//!
//! An environment is created, `available`, when a pipeline with a job naming it is created
//! (`NewJob::environment`); a job whose action is `start` also gets a deployment. A
//! deployment's status is the job's, read through the job row while it exists
//! ([`DEPLOYMENT_STATUS`]), so it never lags behind; deleting the pipeline copies it into
//! the deployment row. What a job's end does to its environment
//! ([`EnvironmentEvent`]) is decided by the coordinator and written here, in the
//! transaction that records the job's status.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::{Result, Store, StoreError, b};

/// A job's `environment:`, expanded, persisted with the job (`NewJob::environment`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewJobEnvironment {
    pub name: String,
    pub slug: String,
    /// `start`, `prepare`, `stop`, `verify` or `access`.
    pub action: String,
    /// The tier a new environment gets: the declared one, else the one guessed from the name.
    pub initial_tier: String,
    /// `deployment_tier:`, given to the environment when the deployment succeeds.
    pub declared_tier: Option<String>,
    /// The expanded `url:`, given to the environment when the deployment succeeds.
    pub url: Option<String>,
    /// `auto_stop_in:` in ms: from creation for a new environment, and from each
    /// successful deployment.
    pub auto_stop_in: Option<i64>,
    pub on_stop: Option<String>,
}

/// What a job's new status does to its environment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvironmentEvent {
    /// A deployment succeeded: the environment is available again and takes the job's URL,
    /// tier and `auto_stop_in`.
    Deployed,
    /// A stop job succeeded: the environment is stopped.
    StopComplete,
    /// A stop job failed: an environment waiting for it is available again.
    StopFailed,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Environment {
    pub id: i64,
    pub project_id: i64,
    pub name: String,
    pub slug: String,
    pub external_url: Option<String>,
    /// `available`, `stopping` or `stopped`.
    pub state: String,
    pub tier: String,
    /// Unix ms.
    pub auto_stop_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Environment {
    const COLUMNS: &'static str = "id, project_id, name, slug, external_url, state, tier, auto_stop_at, created_at, updated_at";

    /// [`Environment::COLUMNS`] of the table aliased `alias`.
    fn columns_of(alias: &str) -> String {
        let columns: Vec<String> = Self::COLUMNS
            .split(", ")
            .map(|c| format!("{alias}.{c}"))
            .collect();
        columns.join(", ")
    }
    fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            project_id: r.get("project_id"),
            name: r.get("name"),
            slug: r.get("slug"),
            external_url: r.get("external_url"),
            state: r.get("state"),
            tier: r.get("tier"),
            auto_stop_at: r.get("auto_stop_at"),
            created_at: r.get("created_at"),
            updated_at: r.get("updated_at"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployment {
    pub id: i64,
    pub project_id: i64,
    pub iid: i64,
    pub environment_id: i64,
    /// `None` once the job's pipeline is deleted.
    pub job_id: Option<i64>,
    pub pipeline_id: Option<i64>,
    /// The branch or tag name (no `refs/…` prefix).
    pub ref_name: String,
    pub tag: bool,
    pub sha: String,
    /// `created`, `running`, `success`, `failed`, `canceled`, `skipped` or `blocked`.
    pub status: String,
    pub on_stop: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
}

/// A deployment's status from its job's (GitLab's `Deployment#sync_status_with`): a
/// manual job's deployment is `blocked`, a job not yet running is `created`, a job being
/// canceled is still `running`.
const DEPLOYMENT_STATUS: &str = "CASE j.status WHEN 'manual' THEN 'blocked' \
     WHEN 'running' THEN 'running' WHEN 'canceling' THEN 'running' \
     WHEN 'success' THEN 'success' WHEN 'failed' THEN 'failed' \
     WHEN 'canceled' THEN 'canceled' WHEN 'skipped' THEN 'skipped' ELSE 'created' END";

/// Deployment rows with their job's status, as a table `dd` to filter and order.
fn deployments_table() -> String {
    format!(
        "(SELECT d.id, d.project_id, d.iid, d.environment_id, d.job_id, d.pipeline_id, d.ref_name, d.tag, d.sha, \
         CASE WHEN j.id IS NULL THEN d.status ELSE {DEPLOYMENT_STATUS} END AS status, d.on_stop, d.created_at, \
         COALESCE(j.finished_at, j.started_at, d.updated_at) AS updated_at, \
         CASE WHEN j.id IS NULL THEN d.finished_at ELSE j.finished_at END AS finished_at \
         FROM deployments d LEFT JOIN jobs j ON j.id = d.job_id) dd"
    )
}

impl Deployment {
    fn from_row(r: &AnyRow) -> Self {
        Self {
            id: r.get("id"),
            project_id: r.get("project_id"),
            iid: r.get("iid"),
            environment_id: r.get("environment_id"),
            job_id: r.get("job_id"),
            pipeline_id: r.get("pipeline_id"),
            ref_name: r.get("ref_name"),
            tag: r.get::<i64, _>("tag") != 0,
            sha: r.get("sha"),
            status: r.get("status"),
            on_stop: r.get("on_stop"),
            created_at: r.get("created_at"),
            updated_at: r.get("updated_at"),
            finished_at: r.get("finished_at"),
        }
    }
}

/// An environment created through the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEnvironment {
    pub name: String,
    pub slug: String,
    pub external_url: Option<String>,
    pub tier: String,
}

/// What `PUT /environments/:id` changes; `None` keeps the value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvironmentChanges {
    /// `Some(None)` removes the URL.
    pub external_url: Option<Option<String>>,
    pub tier: Option<String>,
}

/// Which of a project's environments to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvironmentFilter {
    /// Exactly this name.
    pub name: Option<String>,
    /// Names containing this text (case-insensitive).
    pub search: Option<String>,
    pub state: Option<String>,
}

/// Which of a project's deployments to list, and in which order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeploymentFilter {
    /// The environment's name.
    pub environment: Option<String>,
    pub status: Option<String>,
    /// Unix ms, inclusive bounds on `updated_at`.
    pub updated_after: Option<i64>,
    pub updated_before: Option<i64>,
    /// Unix ms, bounds on `finished_at` (finished deployments only).
    pub finished_after: Option<i64>,
    pub finished_before: Option<i64>,
    /// `id`, `iid`, `created_at`, `updated_at`, `finished_at` or `ref` (checked by the
    /// caller; anything else orders by `id`).
    pub order_by: String,
    pub ascending: bool,
}

/// A deployment made outside pipelines (GitLab's `POST /projects/:id/deployments`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewDeployment {
    /// The environment, found by name or created with this slug and tier.
    pub environment: String,
    pub slug: String,
    pub tier: String,
    pub ref_name: String,
    pub tag: bool,
    pub sha: String,
    pub status: String,
}

/// Why a deployment's status did not change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeploymentUpdate {
    Updated(Deployment),
    /// A job deploys it: its status is the job's.
    MadeByJob,
    /// GitLab's state machine has no such step (`running` only follows `created`).
    CannotMove {
        from: String,
    },
}

/// Why an environment was not deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteEnvironment {
    Deleted,
    /// It is not stopped (GitLab deletes stopped environments only).
    NotStopped,
}

/// What deleting an environment does to its jobs (by `jobs_by_environment`).
pub(crate) const ENVIRONMENT_JOBS_LEFT: &str =
    "UPDATE jobs SET environment_id = NULL WHERE environment_id = $1";

impl Store {
    /// A project's environments by name, filtered, one page of them and how many match.
    pub async fn environments_page(
        &self,
        project_id: i64,
        filter: &EnvironmentFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Environment>, i64)> {
        let mut sql = String::from("project_id = $1");
        let mut values = Vec::new();
        if let Some(name) = &filter.name {
            values.push(name.clone());
            sql.push_str(&format!(" AND name = ${}", values.len() + 1));
        }
        if let Some(search) = &filter.search {
            values.push(format!("%{}%", like_escaped(&search.to_lowercase())));
            sql.push_str(&format!(
                " AND LOWER(name) LIKE ${} ESCAPE '\\'",
                values.len() + 1
            ));
        }
        if let Some(state) = &filter.state {
            values.push(state.clone());
            sql.push_str(&format!(" AND state = ${}", values.len() + 1));
        }
        let count = format!("SELECT COUNT(*) FROM environments WHERE {sql}");
        let total: i64 = crate::filtered(&count, project_id, &values)
            .fetch_one(&self.pool)
            .await?
            .get(0);
        let select = format!(
            "SELECT {} FROM environments WHERE {sql} ORDER BY name, id LIMIT {limit} OFFSET {offset}",
            Environment::COLUMNS
        );
        let rows = crate::filtered(&select, project_id, &values)
            .fetch_all(&self.pool)
            .await?;
        Ok((rows.iter().map(Environment::from_row).collect(), total))
    }

    /// A project's environment.
    pub async fn environment(&self, project_id: i64, id: i64) -> Result<Environment> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM environments WHERE id = $1 AND project_id = $2",
            Environment::COLUMNS
        ))
        .bind(id)
        .bind(project_id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound("environment"))?;
        Ok(Environment::from_row(&row))
    }

    pub async fn create_environment(
        &self,
        project_id: i64,
        e: &NewEnvironment,
        now: i64,
    ) -> Result<Environment> {
        let row = sqlx::query(&format!(
            "INSERT INTO environments (project_id, name, slug, external_url, state, tier, auto_stop_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, 'available', $5, NULL, $6, $6) RETURNING {}",
            Environment::COLUMNS
        ))
        .bind(project_id)
        .bind(&e.name)
        .bind(&e.slug)
        .bind(&e.external_url)
        .bind(&e.tier)
        .bind(now)
        .fetch_one(&self.writer)
        .await
        .map_err(|err| {
            StoreError::conflict_or(
                err,
                format!("the project has an environment `{}` already", e.name),
            )
        })?;
        Ok(Environment::from_row(&row))
    }

    pub async fn update_environment(
        &self,
        project_id: i64,
        id: i64,
        changes: &EnvironmentChanges,
        now: i64,
    ) -> Result<Environment> {
        let row = sqlx::query(&format!(
            "UPDATE environments SET external_url = CASE WHEN $1 = 1 THEN $2 ELSE external_url END, \
             tier = COALESCE($3, tier), updated_at = $4 WHERE id = $5 AND project_id = $6 RETURNING {}",
            Environment::COLUMNS
        ))
        .bind(b(changes.external_url.is_some()))
        .bind(changes.external_url.clone().flatten())
        .bind(&changes.tier)
        .bind(now)
        .bind(id)
        .bind(project_id)
        .fetch_optional(&self.writer)
        .await?
        .ok_or(StoreError::NotFound("environment"))?;
        Ok(Environment::from_row(&row))
    }

    /// Deletes a stopped environment and its deployments; its jobs keep their status.
    pub async fn delete_environment(&self, project_id: i64, id: i64) -> Result<DeleteEnvironment> {
        let mut tx = self.begin_write().await?;
        let state: String =
            sqlx::query("SELECT state FROM environments WHERE id = $1 AND project_id = $2")
                .bind(id)
                .bind(project_id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or(StoreError::NotFound("environment"))?
                .get(0);
        if state != "stopped" {
            return Ok(DeleteEnvironment::NotStopped);
        }
        for statement in [
            "DELETE FROM deployments WHERE environment_id = $1",
            ENVIRONMENT_JOBS_LEFT,
            "DELETE FROM environments WHERE id = $1",
        ] {
            sqlx::query(statement).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(DeleteEnvironment::Deleted)
    }

    /// Moves an environment from one of `from` to `to` (stopping clears `auto_stop_at`);
    /// `false` when it was in another state.
    pub async fn move_environment(
        &self,
        id: i64,
        from: &[&str],
        to: &str,
        now: i64,
    ) -> Result<bool> {
        let states: Vec<String> = from.iter().map(|s| format!("'{s}'")).collect();
        let done = sqlx::query(&format!(
            "UPDATE environments SET state = $1, updated_at = $2, \
             auto_stop_at = CASE WHEN $1 = 'stopped' THEN NULL ELSE auto_stop_at END \
             WHERE id = $3 AND state IN ({})",
            states.join(", ")
        ))
        .bind(to)
        .bind(now)
        .bind(id)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Clears an environment's `auto_stop_at` (it was stopped by time, or is kept).
    pub async fn clear_auto_stop(&self, id: i64) -> Result<()> {
        sqlx::query("UPDATE environments SET auto_stop_at = NULL WHERE id = $1")
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Available environments whose `auto_stop_at` has come, oldest first.
    pub async fn auto_stoppable_environments(
        &self,
        now: i64,
        limit: i64,
    ) -> Result<Vec<Environment>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM environments WHERE state = 'available' AND auto_stop_at <= $1 \
             ORDER BY auto_stop_at, id LIMIT $2",
            Environment::COLUMNS
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Environment::from_row).collect())
    }

    /// A project's available environments neither changed nor deployed to since `before`
    /// (GitLab's `deployed_and_updated_before`), at most `limit`, oldest first.
    pub async fn stale_environments(
        &self,
        project_id: i64,
        before: i64,
        limit: i64,
    ) -> Result<Vec<Environment>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM environments e WHERE e.project_id = $1 AND e.state = 'available' \
             AND e.updated_at < $2 AND NOT EXISTS (SELECT 1 FROM {} WHERE dd.environment_id = e.id \
             AND COALESCE(dd.finished_at, dd.updated_at) >= $2) ORDER BY e.updated_at, e.id LIMIT $3",
            Environment::columns_of("e"),
            deployments_table()
        ))
        .bind(project_id)
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Environment::from_row).collect())
    }

    /// The environment's last successful deployment (GitLab's `last_deployment`).
    pub async fn last_deployment(&self, environment_id: i64) -> Result<Option<Deployment>> {
        let row = sqlx::query(&format!(
            "SELECT * FROM {} WHERE environment_id = $1 AND status = 'success' ORDER BY id DESC LIMIT 1",
            deployments_table()
        ))
        .bind(environment_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(Deployment::from_row))
    }

    /// The deployments to the environment of the pipeline of its last finished one
    /// (success, failed or canceled): GitLab's "last finished deployment group", whose
    /// `on_stop` jobs stop the environment.
    pub async fn last_finished_deployment_group(
        &self,
        environment_id: i64,
    ) -> Result<Vec<Deployment>> {
        let table = deployments_table();
        let rows = sqlx::query(&format!(
            "SELECT * FROM {table} WHERE environment_id = $1 AND pipeline_id = \
             (SELECT pipeline_id FROM {table} WHERE environment_id = $1 \
              AND status IN ('success', 'failed', 'canceled') ORDER BY id DESC LIMIT 1) ORDER BY id"
        ))
        .bind(environment_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Deployment::from_row).collect())
    }

    /// A project's available environments whose last successful deployment was of
    /// branch `branch` (GitLab's environments "recently updated on branch").
    pub async fn environments_deployed_from_branch(
        &self,
        project_id: i64,
        branch: &str,
    ) -> Result<Vec<Environment>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM environments e WHERE e.project_id = $1 AND e.state = 'available' AND $2 = \
             (SELECT CASE WHEN d.tag = 0 THEN d.ref_name END FROM deployments d LEFT JOIN jobs j ON j.id = d.job_id \
              WHERE d.environment_id = e.id AND (CASE WHEN j.id IS NULL THEN d.status ELSE {DEPLOYMENT_STATUS} END) = 'success' \
              ORDER BY d.id DESC LIMIT 1) ORDER BY e.name",
            Environment::columns_of("e")
        ))
        .bind(project_id)
        .bind(branch)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Environment::from_row).collect())
    }

    /// A project's deployments, filtered and ordered, one page of them and how many match.
    pub async fn deployments_page(
        &self,
        project_id: i64,
        filter: &DeploymentFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Deployment>, i64)> {
        let mut sql = String::from("dd.project_id = $1");
        let mut values: Vec<String> = Vec::new();
        if let Some(env) = &filter.environment {
            values.push(env.clone());
            sql.push_str(&format!(
                " AND dd.environment_id IN (SELECT id FROM environments WHERE project_id = $1 AND name = ${})",
                values.len() + 1
            ));
        }
        if let Some(status) = &filter.status {
            values.push(status.clone());
            sql.push_str(&format!(" AND dd.status = ${}", values.len() + 1));
        }
        // Times are numbers the caller parsed: written into the SQL, not bound as text.
        for (column, op, value) in [
            ("updated_at", ">=", filter.updated_after),
            ("updated_at", "<=", filter.updated_before),
            ("finished_at", ">=", filter.finished_after),
            ("finished_at", "<=", filter.finished_before),
        ] {
            if let Some(v) = value {
                sql.push_str(&format!(" AND dd.{column} {op} {v}"));
            }
        }
        if filter.finished_after.is_some() || filter.finished_before.is_some() {
            sql.push_str(" AND dd.status = 'success'");
        }
        let order = match filter.order_by.as_str() {
            "iid" | "created_at" | "updated_at" | "finished_at" => filter.order_by.as_str(),
            "ref" => "ref_name",
            _ => "id",
        };
        let direction = if filter.ascending { "ASC" } else { "DESC" };
        let table = deployments_table();
        let count = format!("SELECT COUNT(*) FROM {table} WHERE {sql}");
        let total: i64 = crate::filtered(&count, project_id, &values)
            .fetch_one(&self.pool)
            .await?
            .get(0);
        let select = format!(
            "SELECT * FROM {table} WHERE {sql} ORDER BY dd.{order} {direction}, dd.id {direction} \
             LIMIT {limit} OFFSET {offset}"
        );
        let rows = crate::filtered(&select, project_id, &values)
            .fetch_all(&self.pool)
            .await?;
        Ok((rows.iter().map(Deployment::from_row).collect(), total))
    }

    /// Records a deployment made outside pipelines (no job): its environment is found
    /// or created, and a `success` makes it available (GitLab's
    /// `Deployments::CreateService`).
    pub async fn create_deployment(
        &self,
        project_id: i64,
        d: &NewDeployment,
        now: i64,
    ) -> Result<Deployment> {
        let mut tx = self.begin_write().await?;
        let environment_id = find_or_create_environment(
            &mut tx,
            project_id,
            &d.environment,
            &d.slug,
            &d.tier,
            None,
            now,
        )
        .await?;
        let iid = next_deployment_iid(&mut tx, project_id).await?;
        let finished = finished_status(&d.status).then_some(now);
        let id: i64 = sqlx::query(
            "INSERT INTO deployments (project_id, iid, environment_id, job_id, pipeline_id, ref_name, tag, sha, status, created_at, updated_at, finished_at) \
             VALUES ($1, $2, $3, NULL, NULL, $4, $5, $6, $7, $8, $8, $9) RETURNING id",
        )
        .bind(project_id)
        .bind(iid)
        .bind(environment_id)
        .bind(&d.ref_name)
        .bind(b(d.tag))
        .bind(&d.sha)
        .bind(&d.status)
        .bind(now)
        .bind(finished)
        .fetch_one(&mut *tx)
        .await?
        .get(0);
        if d.status == "success" {
            start_environment(&mut tx, environment_id, now).await?;
        }
        tx.commit().await?;
        self.deployment(project_id, id).await
    }

    /// Moves a deployment made outside pipelines to `status` (GitLab's
    /// `Deployments::UpdateService`): `running` from `created` only, the end states from
    /// any other; a `success` makes its environment available.
    pub async fn update_deployment_status(
        &self,
        project_id: i64,
        id: i64,
        status: &str,
        now: i64,
    ) -> Result<DeploymentUpdate> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(
            "SELECT job_id, status, environment_id FROM deployments WHERE id = $1 AND project_id = $2",
        )
        .bind(id)
        .bind(project_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(StoreError::NotFound("deployment"))?;
        let job_id: Option<i64> = row.get(0);
        let from: String = row.get(1);
        let environment_id: i64 = row.get(2);
        if job_id.is_some() {
            return Ok(DeploymentUpdate::MadeByJob);
        }
        let allowed = match status {
            "running" => from == "created",
            _ => from != status,
        };
        if !allowed {
            return Ok(DeploymentUpdate::CannotMove { from });
        }
        sqlx::query(
            "UPDATE deployments SET status = $1, updated_at = $2, finished_at = $3 WHERE id = $4",
        )
        .bind(status)
        .bind(now)
        .bind(finished_status(status).then_some(now))
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if status == "success" {
            start_environment(&mut tx, environment_id, now).await?;
        }
        tx.commit().await?;
        Ok(DeploymentUpdate::Updated(
            self.deployment(project_id, id).await?,
        ))
    }

    /// A project's deployment.
    pub async fn deployment(&self, project_id: i64, id: i64) -> Result<Deployment> {
        let row = sqlx::query(&format!(
            "SELECT * FROM {} WHERE dd.id = $1 AND dd.project_id = $2",
            deployments_table()
        ))
        .bind(id)
        .bind(project_id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound("deployment"))?;
        Ok(Deployment::from_row(&row))
    }

    /// The deployment of a job, if it is one.
    pub async fn job_deployment(&self, job_id: i64) -> Result<Option<Deployment>> {
        let row = sqlx::query(&format!(
            "SELECT * FROM {} WHERE dd.job_id = $1",
            deployments_table()
        ))
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(Deployment::from_row))
    }

    /// Sets the URL job `job_id`'s deployment gives its environment when it succeeds (a
    /// URL known only once the job ran: its dotenv report). Nothing when the job deploys
    /// nothing.
    pub async fn set_deployment_url(&self, job_id: i64, url: &str) -> Result<()> {
        sqlx::query("UPDATE deployments SET url = $2 WHERE job_id = $1")
            .bind(job_id)
            .bind(url)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Environments by id (a project's jobs name them), in no particular order.
    pub async fn environments_by_id(&self, ids: &[i64]) -> Result<Vec<Environment>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = ids.iter().map(i64::to_string).collect();
        let rows = sqlx::query(&format!(
            "SELECT {} FROM environments WHERE id IN ({})",
            Environment::COLUMNS,
            list.join(", ")
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Environment::from_row).collect())
    }
}

/// `text` for a `LIKE … ESCAPE '\'` pattern: its `%`, `_` and `\` match themselves.
fn like_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The environment of a new job row: found or created (GitLab's `find_or_create_by`
/// name; a new one takes the job's tier and `auto_stop_in`), and the job's deployment
/// when its action is `start`.
pub(crate) async fn insert_job_environment(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    pipeline_id: i64,
    project_id: i64,
    job_id: i64,
    e: &NewJobEnvironment,
    now: i64,
) -> Result<()> {
    let auto_stop_at = e.auto_stop_in.map(|ms| now.saturating_add(ms));
    let environment_id = find_or_create_environment(
        tx,
        project_id,
        &e.name,
        &e.slug,
        &e.initial_tier,
        auto_stop_at,
        now,
    )
    .await?;
    sqlx::query("UPDATE jobs SET environment_id = $1, environment_action = $2 WHERE id = $3")
        .bind(environment_id)
        .bind(&e.action)
        .bind(job_id)
        .execute(&mut **tx)
        .await?;
    if e.action != "start" {
        return Ok(());
    }
    let iid = next_deployment_iid(tx, project_id).await?;
    sqlx::query(
        "INSERT INTO deployments (project_id, iid, environment_id, job_id, pipeline_id, ref_name, tag, sha, status, on_stop, url, tier, auto_stop_in, created_at, updated_at) \
         SELECT $1, $2, $3, $4, id, ref_name, tag, sha, 'created', $5, $6, $7, $8, $9, $9 FROM pipelines WHERE id = $10",
    )
    .bind(project_id)
    .bind(iid)
    .bind(environment_id)
    .bind(job_id)
    .bind(&e.on_stop)
    .bind(&e.url)
    .bind(&e.declared_tier)
    .bind(e.auto_stop_in)
    .bind(now)
    .bind(pipeline_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The id of the project's environment `name`, created (`available`, with this slug,
/// tier and `auto_stop_at`) if it does not exist (GitLab's `find_or_create_by` name).
async fn find_or_create_environment(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project_id: i64,
    name: &str,
    slug: &str,
    tier: &str,
    auto_stop_at: Option<i64>,
    now: i64,
) -> Result<i64> {
    sqlx::query(
        "INSERT INTO environments (project_id, name, slug, external_url, state, tier, auto_stop_at, created_at, updated_at) \
         VALUES ($1, $2, $3, NULL, 'available', $4, $5, $6, $6) ON CONFLICT (project_id, name) DO NOTHING",
    )
    .bind(project_id)
    .bind(name)
    .bind(slug)
    .bind(tier)
    .bind(auto_stop_at)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(
        sqlx::query("SELECT id FROM environments WHERE project_id = $1 AND name = $2")
            .bind(project_id)
            .bind(name)
            .fetch_one(&mut **tx)
            .await?
            .get(0),
    )
}

/// The project's next deployment `iid` (the row lock keeps concurrent writers apart).
async fn next_deployment_iid(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    project_id: i64,
) -> Result<i64> {
    Ok(sqlx::query(
        "UPDATE projects SET deployment_iid = deployment_iid + 1 WHERE id = $1 RETURNING deployment_iid",
    )
    .bind(project_id)
    .fetch_one(&mut **tx)
    .await?
    .get(0))
}

/// A successful deployment without a job makes its environment available.
async fn start_environment(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    environment_id: i64,
    now: i64,
) -> Result<()> {
    sqlx::query("UPDATE environments SET state = 'available', updated_at = $1 WHERE id = $2")
        .bind(now)
        .bind(environment_id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Whether a deployment in `status` has finished.
fn finished_status(status: &str) -> bool {
    matches!(status, "success" | "failed" | "canceled" | "skipped")
}

/// Applies `event` of job `job_id` to the job's environment (GitLab's
/// `Deployments::UpdateEnvironmentService`, `StopJobSuccessWorker`, `StopJobFailedWorker`).
pub(crate) async fn apply_environment_event(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    job_id: i64,
    event: EnvironmentEvent,
    now: i64,
) -> Result<()> {
    let sql = match event {
        EnvironmentEvent::Deployed => {
            "UPDATE environments SET state = 'available', \
             external_url = COALESCE((SELECT url FROM deployments WHERE job_id = $1), external_url), \
             tier = COALESCE((SELECT tier FROM deployments WHERE job_id = $1), tier), \
             auto_stop_at = COALESCE((SELECT auto_stop_in FROM deployments WHERE job_id = $1) + $2, auto_stop_at), \
             updated_at = $2 WHERE id = (SELECT environment_id FROM jobs WHERE id = $1)"
        }
        EnvironmentEvent::StopComplete => {
            "UPDATE environments SET state = 'stopped', auto_stop_at = NULL, updated_at = $2 \
             WHERE id = (SELECT environment_id FROM jobs WHERE id = $1) AND state IN ('available', 'stopping')"
        }
        EnvironmentEvent::StopFailed => {
            "UPDATE environments SET state = 'available', updated_at = $2 \
             WHERE id = (SELECT environment_id FROM jobs WHERE id = $1) AND state = 'stopping'"
        }
    };
    sqlx::query(sql)
        .bind(job_id)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Before a pipeline's jobs are deleted: their deployments keep the status they had and
/// lose the job.
pub(crate) async fn detach_deployments(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    pipeline_id: i64,
) -> Result<()> {
    sqlx::query(&format!(
        "UPDATE deployments SET status = (SELECT {DEPLOYMENT_STATUS} FROM jobs j WHERE j.id = deployments.job_id), \
         finished_at = (SELECT j.finished_at FROM jobs j WHERE j.id = deployments.job_id), job_id = NULL \
         WHERE job_id IN (SELECT id FROM jobs WHERE pipeline_id = $1)"
    ))
    .bind(pipeline_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
