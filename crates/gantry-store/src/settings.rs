//! Instance settings and the admin API tokens (by hash).

use super::*;

impl Store {
    pub async fn setting(&self, key: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT value FROM settings WHERE key = $1")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get::<String, _>(0)))
    }

    /// Set a setting only if it is not set yet; returns whether it was inserted.
    pub async fn init_setting(&self, key: &str, value: &str) -> Result<bool> {
        let r = sqlx::query(
            "INSERT INTO settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
        )
        .bind(key)
        .bind(value)
        .execute(&self.writer)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn add_admin_token(&self, token_hash: &str, now: i64) -> Result<()> {
        sqlx::query("INSERT INTO admin_tokens (token_hash, created_at) VALUES ($1, $2)")
            .bind(token_hash)
            .bind(now)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Adds an admin token and, when `revoke_others`, removes every other admin token, in
    /// one transaction (`gantry server admin-token --revoke-others`).
    pub async fn add_admin_token_only(
        &self,
        token_hash: &str,
        now: i64,
        revoke_others: bool,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        if revoke_others {
            sqlx::query("DELETE FROM admin_tokens")
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("INSERT INTO admin_tokens (token_hash, created_at) VALUES ($1, $2)")
            .bind(token_hash)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn admin_token_count(&self) -> Result<i64> {
        Ok(sqlx::query("SELECT COUNT(*) FROM admin_tokens")
            .fetch_one(&self.pool)
            .await?
            .get(0))
    }

    pub async fn is_admin_token(&self, token_hash: &str) -> Result<bool> {
        let row = sqlx::query("SELECT id FROM admin_tokens WHERE token_hash = $1")
            .bind(token_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }
}
