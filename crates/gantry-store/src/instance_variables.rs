//! Instance-level CI/CD variables.

use super::*;

impl Store {
    /// The instance's variables, by key.
    pub async fn instance_variables(&self) -> Result<Vec<InstanceVariable>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM instance_variables ORDER BY key",
            InstanceVariable::COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(InstanceVariable::from_row).collect())
    }

    /// Adds an instance variable; `Conflict` when one of that key exists.
    pub async fn create_instance_variable(&self, v: &InstanceVariable, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO instance_variables (key, value, variable_type, protected, masked, raw, description, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&v.key)
        .bind(&v.value)
        .bind(&v.variable_type)
        .bind(b(v.protected))
        .bind(b(v.masked))
        .bind(b(v.raw))
        .bind(v.description.clone())
        .bind(now)
        .execute(&self.writer)
        .await
        .map_err(|e| instance_key_taken(e, v))?;
        Ok(())
    }

    /// Replaces the instance variable `key` with `v` (which may rename it); `NotFound`
    /// when there is none, `Conflict` when the new key belongs to another variable.
    pub async fn update_instance_variable(&self, key: &str, v: &InstanceVariable) -> Result<()> {
        let done = sqlx::query(
            "UPDATE instance_variables SET key = $1, value = $2, variable_type = $3, protected = $4, masked = $5, raw = $6, description = $7 \
             WHERE key = $8",
        )
        .bind(&v.key)
        .bind(&v.value)
        .bind(&v.variable_type)
        .bind(b(v.protected))
        .bind(b(v.masked))
        .bind(b(v.raw))
        .bind(v.description.clone())
        .bind(key)
        .execute(&self.writer)
        .await
        .map_err(|e| instance_key_taken(e, v))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("instance variable"));
        }
        Ok(())
    }

    /// The instance variables whose stored value does not start with `prefix`:
    /// `(key, value)` (see `Store::project_variables_without_prefix`).
    pub async fn instance_variables_without_prefix(
        &self,
        prefix: &str,
    ) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(&format!(
            "SELECT key, value FROM instance_variables WHERE substr(value, 1, {}) <> $1",
            prefix.chars().count()
        ))
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("key")?, r.try_get("value")?)))
            .collect()
    }

    /// Sets the stored value of the instance variable `key`, if it still holds `old` (a
    /// concurrent update wins).
    pub async fn replace_instance_variable_value(
        &self,
        key: &str,
        old: &str,
        value: &str,
    ) -> Result<()> {
        sqlx::query("UPDATE instance_variables SET value = $1 WHERE key = $2 AND value = $3")
            .bind(value)
            .bind(key)
            .bind(old)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Removes the instance variable `key`; `NotFound` when there is none.
    pub async fn delete_instance_variable(&self, key: &str) -> Result<()> {
        let done = sqlx::query("DELETE FROM instance_variables WHERE key = $1")
            .bind(key)
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("instance variable"));
        }
        Ok(())
    }
}

/// An instance variable of that key exists already (GitLab's validation message).
fn instance_key_taken(e: sqlx::Error, v: &InstanceVariable) -> StoreError {
    StoreError::conflict_or(
        e,
        format!(
            "({}) has already been taken: the instance has a variable `{}`",
            v.key, v.key
        ),
    )
}
