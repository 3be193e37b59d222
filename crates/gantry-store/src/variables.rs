//! CI/CD variables set in settings: a project's (`project_variables`) and a group's
//! (`group_variables`). Both have GitLab's shape, [`ProjectVariable`], and the same
//! rules: a key is unique per environment scope in its owner. One implementation serves
//! both tables, chosen by [`VariableOwner`]. Instance variables have no scope and live
//! in the store's root module.

use sqlx::Row;
use sqlx::any::AnyArguments;
use sqlx::query::Query;

use crate::{ProjectVariable, Result, Store, StoreError, b};

/// Whose variables: a project's, or a group's. A group is a project namespace, named by
/// its full path (`acme`, `acme/platform`); its numeric id is in `group_ids`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum VariableOwner {
    Project(i64),
    Group(String),
}

impl VariableOwner {
    fn table(&self) -> &'static str {
        match self {
            Self::Project(_) => "project_variables",
            Self::Group(_) => "group_variables",
        }
    }

    fn column(&self) -> &'static str {
        match self {
            Self::Project(_) => "project_id",
            Self::Group(_) => "group_path",
        }
    }

    /// `the project` / `the group`, for messages.
    fn noun(&self) -> &'static str {
        match self {
            Self::Project(_) => "the project",
            Self::Group(_) => "the group",
        }
    }

    /// Binds the owner as the query's next parameter.
    fn bind<'q>(
        &self,
        query: Query<'q, sqlx::Any, AnyArguments<'q>>,
    ) -> Query<'q, sqlx::Any, AnyArguments<'q>> {
        match self {
            Self::Project(id) => query.bind(*id),
            Self::Group(path) => query.bind(path.clone()),
        }
    }
}

/// A value stored without the encryption prefix (see
/// [`Store::variables_without_prefix`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlainVariable {
    pub owner: VariableOwner,
    pub key: String,
    pub environment_scope: String,
    pub value: String,
}

impl Store {
    /// An owner's variables, by key, then environment scope.
    pub async fn variables(&self, owner: &VariableOwner) -> Result<Vec<ProjectVariable>> {
        let sql = format!(
            "SELECT {} FROM {} WHERE {} = $1 ORDER BY key, environment_scope",
            ProjectVariable::COLUMNS,
            owner.table(),
            owner.column()
        );
        let rows = owner.bind(sqlx::query(&sql)).fetch_all(&self.pool).await?;
        Ok(rows.iter().map(ProjectVariable::from_row).collect())
    }

    /// The variables of project `project_id` and of the groups `paths`, each with its
    /// owner, by key and environment scope: one query for all that a project's pipelines
    /// see (so a job's payload costs no more queries with groups than without).
    pub async fn settings_variables(
        &self,
        project_id: i64,
        paths: &[String],
    ) -> Result<Vec<(VariableOwner, ProjectVariable)>> {
        let params: Vec<String> = (1..=paths.len()).map(|i| format!("${i}")).collect();
        let groups = if paths.is_empty() {
            String::new()
        } else {
            format!(
                "SELECT group_path, {} FROM group_variables WHERE group_path IN ({}) UNION ALL ",
                ProjectVariable::COLUMNS,
                params.join(", ")
            )
        };
        let sql = format!(
            "{groups}SELECT NULL AS group_path, {} FROM project_variables WHERE project_id = ${} ORDER BY key, environment_scope",
            ProjectVariable::COLUMNS,
            paths.len() + 1
        );
        let mut query = sqlx::query(&sql);
        for path in paths {
            query = query.bind(path.clone());
        }
        let rows = query.bind(project_id).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                let owner = match r.try_get::<Option<String>, _>("group_path")? {
                    Some(path) => VariableOwner::Group(path),
                    None => VariableOwner::Project(project_id),
                };
                Ok((owner, ProjectVariable::from_row(r)))
            })
            .collect()
    }

    /// Adds a variable; `Conflict` when the owner has one of that key and scope.
    pub async fn create_variable(
        &self,
        owner: &VariableOwner,
        v: &ProjectVariable,
        now: i64,
    ) -> Result<()> {
        let sql = format!(
            "INSERT INTO {} ({}, key, value, variable_type, protected, masked, raw, environment_scope, description, created_at, hidden) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            owner.table(),
            owner.column()
        );
        owner
            .bind(sqlx::query(&sql))
            .bind(&v.key)
            .bind(&v.value)
            .bind(&v.variable_type)
            .bind(b(v.protected))
            .bind(b(v.masked))
            .bind(b(v.raw))
            .bind(&v.environment_scope)
            .bind(v.description.clone())
            .bind(now)
            .bind(b(v.hidden))
            .execute(&self.writer)
            .await
            .map_err(|e| taken(e, owner, v))?;
        Ok(())
    }

    /// Replaces the variable `key` of environment scope `scope` with `v` (which may
    /// change the scope; `hidden` is kept: it is set at creation only); `NotFound` when
    /// there is none, `Conflict` when the new key and scope belong to another variable.
    pub async fn update_variable(
        &self,
        owner: &VariableOwner,
        key: &str,
        scope: &str,
        v: &ProjectVariable,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET key = $1, value = $2, variable_type = $3, protected = $4, masked = $5, raw = $6, environment_scope = $7, description = $8 \
             WHERE {} = $9 AND key = $10 AND environment_scope = $11",
            owner.table(),
            owner.column()
        );
        let query = sqlx::query(&sql)
            .bind(&v.key)
            .bind(&v.value)
            .bind(&v.variable_type)
            .bind(b(v.protected))
            .bind(b(v.masked))
            .bind(b(v.raw))
            .bind(&v.environment_scope)
            .bind(v.description.clone());
        let done = owner
            .bind(query)
            .bind(key)
            .bind(scope)
            .execute(&self.writer)
            .await
            .map_err(|e| taken(e, owner, v))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("variable"));
        }
        Ok(())
    }

    /// Every project's and group's variables whose stored value does not start with
    /// `prefix` (values written before they were encrypted, `prefix` marking encrypted
    /// ones).
    pub async fn variables_without_prefix(&self, prefix: &str) -> Result<Vec<PlainVariable>> {
        let len = prefix.chars().count();
        let mut out = Vec::new();
        for kind in [
            VariableOwner::Project(0),
            VariableOwner::Group(String::new()),
        ] {
            let (table, column) = (kind.table(), kind.column());
            let rows = sqlx::query(&format!(
                "SELECT {column}, key, environment_scope, value FROM {table} WHERE substr(value, 1, {len}) <> $1",
            ))
            .bind(prefix)
            .fetch_all(&self.pool)
            .await?;
            for r in &rows {
                out.push(PlainVariable {
                    owner: match kind {
                        VariableOwner::Project(_) => VariableOwner::Project(r.try_get(column)?),
                        VariableOwner::Group(_) => VariableOwner::Group(r.try_get(column)?),
                    },
                    key: r.try_get("key")?,
                    environment_scope: r.try_get("environment_scope")?,
                    value: r.try_get("value")?,
                });
            }
        }
        Ok(out)
    }

    /// Sets the stored value of the variable `key` of scope `scope`, if it still holds
    /// `old` (a concurrent update wins).
    pub async fn replace_variable_value(
        &self,
        owner: &VariableOwner,
        key: &str,
        scope: &str,
        old: &str,
        value: &str,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET value = $1 WHERE {} = $2 AND key = $3 AND environment_scope = $4 AND value = $5",
            owner.table(),
            owner.column()
        );
        owner
            .bind(sqlx::query(&sql).bind(value))
            .bind(key)
            .bind(scope)
            .bind(old)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Removes the variable `key` of environment scope `scope`; `NotFound` when there is
    /// none.
    pub async fn delete_variable(
        &self,
        owner: &VariableOwner,
        key: &str,
        scope: &str,
    ) -> Result<()> {
        let sql = format!(
            "DELETE FROM {} WHERE {} = $1 AND key = $2 AND environment_scope = $3",
            owner.table(),
            owner.column()
        );
        let done = owner
            .bind(sqlx::query(&sql))
            .bind(key)
            .bind(scope)
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("variable"));
        }
        Ok(())
    }
}

/// A variable of that key and scope exists already (GitLab's validation message).
fn taken(e: sqlx::Error, owner: &VariableOwner, v: &ProjectVariable) -> StoreError {
    StoreError::conflict_or(
        e,
        format!(
            "({}) has already been taken: {} has a variable `{}` for environment scope `{}`",
            v.key,
            owner.noun(),
            v.key,
            v.environment_scope
        ),
    )
}

/// A group made with `POST /groups`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedGroup {
    /// Its full path.
    pub path: String,
    /// Its id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
}

impl Store {
    /// The ids of group `paths`, given to those that have none yet (in one transaction),
    /// as `(path, id)` in the order of `paths`.
    pub async fn group_ids(&self, paths: &[String], now: i64) -> Result<Vec<(String, i64)>> {
        let mut tx = self.begin_write().await?;
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            sqlx::query(
                "INSERT INTO group_ids (path, created_at) VALUES ($1, $2) ON CONFLICT (path) DO NOTHING",
            )
            .bind(path)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            let id: i64 = sqlx::query("SELECT id FROM group_ids WHERE path = $1")
                .bind(path)
                .fetch_one(&mut *tx)
                .await?
                .get(0);
            out.push((path.clone(), id));
        }
        tx.commit().await?;
        Ok(out)
    }

    /// Makes group `path` (`POST /groups`): its row is marked as made, with `name` and
    /// `description`; returns its id. `Ok(None)` when it was made already.
    pub async fn create_group(
        &self,
        path: &str,
        name: &str,
        description: &str,
        now: i64,
    ) -> Result<Option<i64>> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO group_ids (path, created_at) VALUES ($1, $2) ON CONFLICT (path) DO NOTHING",
        )
        .bind(path)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let made = sqlx::query(
            "UPDATE group_ids SET created = TRUE, name = $2, description = $3 WHERE path = $1 AND NOT created",
        )
        .bind(path)
        .bind(name)
        .bind(description)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if made == 0 {
            return Ok(None);
        }
        let id: i64 = sqlx::query("SELECT id FROM group_ids WHERE path = $1")
            .bind(path)
            .fetch_one(&mut *tx)
            .await?
            .get(0);
        tx.commit().await?;
        Ok(Some(id))
    }

    /// The groups made with `POST /groups`: `(path, id, name, description)`, by path.
    pub async fn created_groups(&self) -> Result<Vec<CreatedGroup>> {
        let rows = sqlx::query(
            "SELECT path, id, name, description FROM group_ids WHERE created ORDER BY path",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| CreatedGroup {
                path: r.get(0),
                id: r.get(1),
                name: r.get::<Option<String>, _>(2).unwrap_or_default(),
                description: r.get(3),
            })
            .collect())
    }

    /// Group `path` is no longer a made group (its id stays with its path). Returns
    /// whether it was one.
    pub async fn uncreate_group(&self, path: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE group_ids SET created = FALSE, name = NULL, description = '' WHERE path = $1 AND created",
        )
        .bind(path)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The path of the group with this id, if one has it.
    pub async fn group_path(&self, id: i64) -> Result<Option<String>> {
        let row = sqlx::query("SELECT path FROM group_ids WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
    }
}
