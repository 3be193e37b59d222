//! Sessions of the web UI (migration 0027): made when somebody signs in with the admin
//! token, ended when they sign out, dead once `expires_at` passed. Only the SHA-256 hash
//! of a session id is stored (the caller hashes, as for tokens). Making a session also
//! deletes the expired ones, so the table holds at most the sessions of one expiry
//! period (an indexed range delete).

use sqlx::Row;

use crate::{Result, Store};

impl Store {
    /// Stores a new session (its id's hash) that lives until `expires_at` (ms), after
    /// deleting every session that expired by `now`.
    pub async fn create_ui_session(&self, id_hash: &str, now: i64, expires_at: i64) -> Result<()> {
        sqlx::query("DELETE FROM ui_sessions WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.writer)
            .await?;
        sqlx::query(
            "INSERT INTO ui_sessions (id_hash, created_at, expires_at) VALUES ($1, $2, $3)",
        )
        .bind(id_hash)
        .bind(now)
        .bind(expires_at)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// When the session whose id hashes to `id_hash` expires (ms); `None` when there is
    /// no such session (never made, or ended).
    pub async fn ui_session_expiry(&self, id_hash: &str) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT expires_at FROM ui_sessions WHERE id_hash = $1")
            .bind(id_hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Ends the session whose id hashes to `id_hash`; `false` when there was none.
    pub async fn delete_ui_session(&self, id_hash: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM ui_sessions WHERE id_hash = $1")
            .bind(id_hash)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}
