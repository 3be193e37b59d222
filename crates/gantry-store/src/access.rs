//! Personal access tokens (GitLab's `glpat-` tokens of a user, beyond the admin token
//! made at first start) and the projects a project runner was enabled for beyond its own
//! (`runner_projects`). Tokens are stored as hashes only; the caller hashes.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::rows::flag;
use crate::{Result, Store, StoreError};

/// A personal access token, without its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessToken {
    pub id: i64,
    pub user_id: i64,
    pub name: String,
    /// GitLab's scope names (`api`, `read_api`).
    pub scopes: Vec<String>,
    /// The last day it works (`YYYY-MM-DD`, UTC); `None`: it does not expire.
    pub expires_at: Option<String>,
    pub revoked: bool,
    pub created_at: i64,
}

impl AccessToken {
    const COLUMNS: &'static str = "id, user_id, name, scopes, expires_at, revoked, created_at";

    fn from_row(r: &AnyRow) -> Self {
        let scopes: String = r.get("scopes");
        Self {
            id: r.get("id"),
            user_id: r.get("user_id"),
            name: r.get("name"),
            scopes: scopes
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            expires_at: r.get("expires_at"),
            revoked: flag(r, "revoked"),
            created_at: r.get("created_at"),
        }
    }
}

/// What a new personal access token is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewAccessToken<'a> {
    pub user_id: i64,
    pub name: &'a str,
    pub token_hash: &'a str,
    pub scopes: &'a [String],
    pub expires_at: Option<&'a str>,
}

impl Store {
    /// Stores a new personal access token.
    pub async fn create_access_token(
        &self,
        token: &NewAccessToken<'_>,
        now: i64,
    ) -> Result<AccessToken> {
        let row = sqlx::query(
            "INSERT INTO personal_access_tokens (user_id, name, token_hash, scopes, expires_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(token.user_id)
        .bind(token.name)
        .bind(token.token_hash)
        .bind(token.scopes.join(","))
        .bind(token.expires_at)
        .bind(now)
        .fetch_one(&self.writer)
        .await?;
        self.access_token(row.get(0)).await
    }

    /// Every personal access token, oldest first.
    pub async fn access_tokens(&self) -> Result<Vec<AccessToken>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM personal_access_tokens ORDER BY id",
            AccessToken::COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(AccessToken::from_row).collect())
    }

    /// The token `id`; `NotFound` when there is none.
    pub async fn access_token(&self, id: i64) -> Result<AccessToken> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM personal_access_tokens WHERE id = $1",
            AccessToken::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| AccessToken::from_row(&r))
            .ok_or(StoreError::NotFound("personal access token"))
    }

    /// The token whose secret hashes to `token_hash`, revoked or expired ones included.
    pub async fn access_token_by_hash(&self, token_hash: &str) -> Result<Option<AccessToken>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM personal_access_tokens WHERE token_hash = $1",
            AccessToken::COLUMNS
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| AccessToken::from_row(&r)))
    }

    /// Revokes the token `id` for good; `NotFound` when there is none or it was revoked.
    pub async fn revoke_access_token(&self, id: i64) -> Result<()> {
        let done = sqlx::query(
            "UPDATE personal_access_tokens SET revoked = 1 WHERE id = $1 AND revoked = 0",
        )
        .bind(id)
        .execute(&self.writer)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("personal access token"));
        }
        Ok(())
    }

    // ---- runners enabled for more projects ----

    /// Enables the project runner `runner_id` for `project_id` too; `false` when it was
    /// already.
    pub async fn enable_runner_project(
        &self,
        runner_id: i64,
        project_id: i64,
        now: i64,
    ) -> Result<bool> {
        let done = sqlx::query(
            "INSERT INTO runner_projects (runner_id, project_id, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (runner_id, project_id) DO NOTHING",
        )
        .bind(runner_id)
        .bind(project_id)
        .bind(now)
        .execute(&self.writer)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Disables the runner `runner_id` for `project_id`; `false` when it was not enabled
    /// there.
    pub async fn disable_runner_project(&self, runner_id: i64, project_id: i64) -> Result<bool> {
        let done =
            sqlx::query("DELETE FROM runner_projects WHERE runner_id = $1 AND project_id = $2")
                .bind(runner_id)
                .bind(project_id)
                .execute(&self.writer)
                .await?;
        Ok(done.rows_affected() == 1)
    }

    /// `runner` with its other projects read in (project runners only: no other runner
    /// has any).
    pub(crate) async fn with_enabled_projects(
        &self,
        mut runner: crate::Runner,
    ) -> Result<crate::Runner> {
        if runner.project_id.is_none() {
            return Ok(runner);
        }
        let rows = sqlx::query(
            "SELECT project_id FROM runner_projects WHERE runner_id = $1 ORDER BY created_at, project_id",
        )
        .bind(runner.id)
        .fetch_all(&self.pool)
        .await?;
        runner.enabled_projects = rows.iter().map(|r| r.get(0)).collect();
        Ok(runner)
    }
}
