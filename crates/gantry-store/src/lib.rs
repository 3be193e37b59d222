//! `gantry-store`: Gantry's database access and migrations.
//!
//! One [`Store`] over sqlx's `Any` driver: the backend is chosen once, from the URL, in
//! [`Backend::from_url`]; every query in this crate is portable SQL (positional `$N`
//! parameters in increasing order — `?` on SQLite in the statements of many rows,
//! [`Backend::batch_param`] — no dialect functions, integers as `BIGINT`), so
//! PostgreSQL is a second migration folder (`migrations/postgres`, the same versions as
//! `migrations/sqlite`), not a second implementation. The store's tests run against both.
//!
//! The store persists decisions; it never makes scheduling decisions. Multi-row changes
//! happen in one transaction, and pipeline-wide changes are guarded by an optimistic
//! `lock_version`, so two coordinators (or two requests) cannot interleave half-writes.
//!
//! Only `begin_write` differs between the backends (`BEGIN IMMEDIATE` on SQLite, `BEGIN` on
//! PostgreSQL). The API's lists page in the query (`pipelines_page`, `jobs_page`: `COUNT` +
//! `LIMIT/OFFSET`; `jobs.bridge` keeps trigger jobs out without reading specs).
//! `delete_project` removes every row a project owns in one transaction: a new table with a
//! `project_id` must be added there.
//!
//! Invariants:
//! - `Store::apply` writes a pipeline's job updates, new attempts and status in one
//!   transaction under its `lock_version` (`StoreError::Stale` → reload and decide again).
//!   Rows go a hundred per statement (`insert_jobs`: `INSERT … RETURNING id, name`;
//!   `update_jobs`: `WITH v (…) AS (VALUES …) UPDATE jobs … FROM v`, values `CAST` for
//!   PostgreSQL), one at a time when a batch names a job twice.
//! - Exactly-once assignment: `assign_jobs` is one conditional update (`status = 'pending'
//!   AND runner_id IS NULL`; a job named twice goes to its first assignment).
//! - Job tokens die with the job: `Store::apply` clears `token_hash` of a job that stops
//!   executing, in the transaction that stops it.
//! - Each schedule time runs once (migration 0012): `next_run_at` moves only by
//!   compare-and-set (`move_schedule`), inside `create_pipeline` for a timed run. Each push
//!   is taken once (migration 0011): `project_refs` moves only by compare-and-set
//!   (`move_ref`), inside `create_pipeline`; a lost race is `StoreError::Stale` and stores
//!   nothing.
//! - Artifact locks move with pipeline ends (migrations 0015, 0016): a pipeline is created
//!   `locked` when its project's `keep_latest_artifact` is on, with `root_id` its family's
//!   root; `Store::apply` of a change that ends a pipeline (`PipelineChange::ended`)
//!   unlocks the older families of its ref but the newest successful one, in the same
//!   transaction, and `move_ref` of a deleted ref unlocks its pipelines.
//!   `Artifact::expired` is the one availability test every read uses; `take_artifacts`
//!   skips locked ones.
//! - One downstream pipeline per trigger job (migration 0005): `pipelines.parent_job_id` is
//!   unique; a second `create_pipeline` for the same job is `StoreError::Conflict`.

mod access;
mod acknowledgement;
mod environments;
mod error;
mod job_resources;
mod job_token_scope;
mod merge_requests;
mod resource_groups;
mod rows;
mod sessions;
pub mod testing;
mod traces;
mod variables;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Row};

pub use access::{AccessToken, NewAccessToken};
pub use acknowledgement::RequeuedJob;
pub use environments::{
    DeleteEnvironment, Deployment, DeploymentFilter, DeploymentUpdate, Environment,
    EnvironmentChanges, EnvironmentEvent, EnvironmentFilter, NewDeployment, NewEnvironment,
    NewJobEnvironment,
};
pub use error::StoreError;
pub use job_resources::JobResourceUse;
pub use job_token_scope::{JobTokenAllowlist, LinkAdded};
pub use merge_requests::{MergeRequest, MergeRequestLink, NewMergeRequest};
pub use resource_groups::{DEFAULT_PROCESS_MODE, ResourceGroup};
pub use rows::*;
pub use traces::{TraceSnapshot, TraceState};
pub use variables::{CreatedGroup, PlainVariable, VariableOwner};

pub type Result<T> = std::result::Result<T, StoreError>;

/// The database backends Gantry can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// Parameter `n` (from 1) of a statement of many rows: `$n` on PostgreSQL, an
    /// anonymous `?` on SQLite. A statement written with it uses every parameter once, in
    /// increasing order, so both bind the same values in the same order.
    ///
    /// SQLite finds a named parameter (`$n`) by walking the statement's list of names
    /// (`sqlite3VListNumToName`), once when it parses the statement and once more for each
    /// parameter sqlx binds, which asks every parameter's name: a statement of N named
    /// parameters costs N² steps each time it runs. A hundred job rows are 1,100–1,500
    /// parameters; anonymous ones have no names to walk.
    fn batch_param(self, n: usize) -> String {
        match self {
            Backend::Sqlite => "?".to_owned(),
            Backend::Postgres => format!("${n}"),
        }
    }

    /// The one place a backend is chosen.
    pub fn from_url(url: &str) -> Result<Self> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(StoreError::Unsupported(format!(
                "database URL `{}`: expected sqlite:///path/to/gantry.db or postgres://user:password@host/database",
                redact_url(url)
            )))
        }
    }
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// A short name for the set of SQLite migrations (their versions and checksums): a
/// template database made by one set is not used by another.
fn migrations_key() -> String {
    let mut folded = [0u8; 8];
    for (i, m) in SQLITE_MIGRATIONS.iter().enumerate() {
        let bytes = m
            .version
            .to_le_bytes()
            .into_iter()
            .chain(m.checksum.iter().copied());
        for (j, b) in bytes.enumerate() {
            let k = (i * 7 + j) % folded.len();
            folded[k] = folded[k].rotate_left(3) ^ b;
        }
    }
    folded.iter().map(|b| format!("{b:02x}")).collect()
}
/// Switch the SQLite database file at `path` to WAL mode (kept in its header) and close it
/// (which removes its `-wal` and `-shm` files).
async fn to_wal(path: &std::path::Path) -> std::result::Result<(), sqlx::Error> {
    use sqlx::Connection as _;
    let mut conn = sqlx::AnyConnection::connect(&format!("sqlite://{}", path.display())).await?;
    sqlx::query("PRAGMA journal_mode = WAL")
        .execute(&mut conn)
        .await?;
    conn.close().await
}

static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// `url` without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// Connections to one database. Reads go to a pool; every write goes through one writer
/// connection, so this process's writes queue in memory instead of sleep-polling SQLite's
/// lock (`busy_timeout`), and a transaction that reads before it writes cannot lose its
/// snapshot to another writer of this process (`SQLITE_BUSY_SNAPSHOT`). Write
/// transactions take the write lock when they begin (`BEGIN IMMEDIATE` on SQLite), so
/// another process's writer makes them wait, never fail halfway.
#[derive(Clone, Debug)]
pub struct Store {
    pool: AnyPool,
    writer: AnyPool,
    backend: Backend,
}

/// Whether a store's commits must reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Durability {
    Durable,
    /// The database is deleted when its process ends ([`Store::create_sqlite_from_template`]).
    Throwaway,
}

fn b(v: bool) -> i64 {
    i64::from(v)
}

impl Store {
    /// Open (creating it if needed) and migrate the database at `url`
    /// (`sqlite:///abs/path.db`, `sqlite://relative.db` or `postgres://user:password@host/db`).
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_with_readers(url, 8).await
    }

    /// [`Store::open`] with at most `readers` connections for reads (besides the one
    /// writer): fewer for a short-lived process, where opening a connection and preparing
    /// its statements costs more than waiting for one.
    pub async fn open_with_readers(url: &str, readers: u32) -> Result<Self> {
        Self::open_sqlite_or_postgres(url, readers, Durability::Durable).await
    }

    async fn open_sqlite_or_postgres(
        url: &str,
        readers: u32,
        durability: Durability,
    ) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let backend = Backend::from_url(url)?;
        let url = match backend {
            Backend::Sqlite if !url.contains('?') => format!("{url}?mode=rwc"),
            Backend::Sqlite | Backend::Postgres => url.to_owned(),
        };
        let opts = AnyConnectOptions::from_str(&url).map_err(|e| StoreError::Open {
            url: redact_url(&url),
            source: e,
        })?;
        let connect = |max: u32| {
            AnyPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(Duration::from_secs(30))
                // A ping before each use costs a round trip to the connection's thread
                // per query; an SQLite connection is a file handle in this process and
                // does not go stale.
                .test_before_acquire(false)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        if backend == Backend::Sqlite {
                            // WAL lets readers proceed during writes; busy_timeout makes a
                            // writer of another process wait instead of failing.
                            sqlx::query("PRAGMA journal_mode = WAL")
                                .execute(&mut *conn)
                                .await?;
                            sqlx::query("PRAGMA busy_timeout = 10000")
                                .execute(&mut *conn)
                                .await?;
                            sqlx::query("PRAGMA foreign_keys = ON")
                                .execute(&mut *conn)
                                .await?;
                            // NORMAL: a commit survives a crash of this process, and is
                            // on disk after the next checkpoint. A throwaway store needs
                            // neither, so it never waits for the disk.
                            sqlx::query(match durability {
                                Durability::Durable => "PRAGMA synchronous = NORMAL",
                                Durability::Throwaway => "PRAGMA synchronous = OFF",
                            })
                            .execute(&mut *conn)
                            .await?;
                            // Readers map the file instead of reading pages with a system call
                            // each (their page caches start over after every commit).
                            sqlx::query("PRAGMA mmap_size = 268435456")
                                .execute(&mut *conn)
                                .await?;
                        }
                        Ok(())
                    })
                })
                .connect_with(opts.clone())
        };
        let open_error = |e| StoreError::Open {
            url: redact_url(&url),
            source: e,
        };
        if backend == Backend::Postgres {
            // One plain connection first: a server that is down or refuses the login is
            // an error now, not after the pool's acquire timeout.
            use sqlx::Connection as _;
            sqlx::AnyConnection::connect_with(&opts)
                .await
                .map_err(open_error)?
                .close()
                .await
                .map_err(open_error)?;
        }
        let writer = connect(1).await.map_err(open_error)?;
        match backend {
            Backend::Sqlite => SQLITE_MIGRATIONS
                .run(&writer)
                .await
                .map_err(StoreError::Migrate)?,
            Backend::Postgres => POSTGRES_MIGRATIONS
                .run(&writer)
                .await
                .map_err(StoreError::Migrate)?,
        }
        let pool = connect(readers.max(1)).await.map_err(open_error)?;
        Ok(Self {
            pool,
            writer,
            backend,
        })
    }

    /// Create a new SQLite database at `path` for a store that lives as long as one run
    /// (`gantry run`'s): a copy of an empty, migrated database kept in `cache_dir` (made by
    /// the first such run of this set of migrations), so the run does not apply every
    /// migration again. Whatever goes wrong with the copy (none yet, a damaged one, a
    /// read-only cache) falls back to migrating a new file. Its commits are never synced to
    /// the disk (`synchronous = OFF`): a crash loses the run, and the file, anyway.
    pub async fn create_sqlite_from_template(
        path: &std::path::Path,
        readers: u32,
        cache_dir: &std::path::Path,
    ) -> Result<Self> {
        let url = format!("sqlite://{}", path.display());
        let template = cache_dir.join(format!("store-sqlite-{}.db", migrations_key()));
        // A file that does not start as an SQLite database would make the pool retry
        // until its acquire timeout: such a template is not used (and is made again).
        // Nor is one in rollback-journal mode (bytes 18 and 19 of the header are 2 in WAL
        // mode): switching each copy to WAL wrote and synced its header, ≈ 4 ms a run.
        let looks_right = std::fs::File::open(&template).is_ok_and(|mut f| {
            use std::io::Read as _;
            let mut head = [0u8; 20];
            f.read_exact(&mut head).is_ok()
                && &head[..16] == b"SQLite format 3\0"
                && head[18..20] == [2, 2]
        });
        if looks_right && std::fs::copy(&template, path).is_ok() {
            match Self::open_sqlite_or_postgres(&url, readers, Durability::Throwaway).await {
                Ok(store) => return Ok(store),
                Err(_) => {
                    // A damaged template: made again below.
                    let _ = std::fs::remove_file(&template);
                    for suffix in ["", "-wal", "-shm"] {
                        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                    }
                }
            }
        }
        let store = Self::open_sqlite_or_postgres(&url, readers, Durability::Throwaway).await?;
        // The template: written beside, then renamed, so a concurrent run copies either
        // none or a whole one.
        if std::fs::create_dir_all(cache_dir).is_ok() {
            let staged = cache_dir.join(format!(
                ".store-sqlite-{}.{}.tmp",
                migrations_key(),
                std::process::id()
            ));
            let _ = std::fs::remove_file(&staged);
            let made = sqlx::query("VACUUM INTO $1")
                .bind(staged.to_string_lossy().into_owned())
                .execute(&store.writer)
                .await
                .is_ok()
                && to_wal(&staged).await.is_ok();
            if !made || std::fs::rename(&staged, &template).is_err() {
                let _ = std::fs::remove_file(&staged);
            }
        }
        Ok(store)
    }

    /// Whether this store's commits wait for the disk (on SQLite, `synchronous` above
    /// `OFF`: in WAL mode a checkpoint syncs; PostgreSQL is left to its server's settings).
    pub async fn syncs_to_disk(&self) -> Result<bool> {
        match self.backend {
            Backend::Postgres => Ok(true),
            Backend::Sqlite => {
                let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
                    .fetch_one(&self.writer)
                    .await?;
                Ok(level > 0)
            }
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A write transaction on the writer connection, holding the write lock from the start.
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>> {
        let statement = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            // Row locks and the conditional updates (`lock_version`, `status = 'pending'
            // AND runner_id IS NULL`) keep concurrent coordinators apart.
            Backend::Postgres => "BEGIN",
        };
        Ok(self.writer.begin_with(statement).await?)
    }

    // ---- settings and admin tokens ----

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

    // ---- projects ----

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
    /// trigger tokens, schedules, protected refs, recorded refs, project runners, merge
    /// requests and job token allowlist entries (its own and those naming it).
    /// Pipelines of other projects that its trigger jobs created stay, without their
    /// link. Returns the deleted jobs and artifacts, whose files the caller removes.
    pub async fn delete_project(&self, id: i64) -> Result<DeletedPipeline> {
        let mut tx = self.begin_write().await?;
        let deleted =
            delete_job_data(&mut tx, "SELECT id FROM jobs WHERE project_id = $1", id).await?;
        for statement in [
            "DELETE FROM deployments WHERE project_id = $1",
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

    // ---- pipeline schedules ----

    /// Store a new schedule (`variables` sealed by the caller).
    pub async fn create_pipeline_schedule(
        &self,
        s: &PipelineSchedule,
        max_per_project: i64,
    ) -> Result<PipelineSchedule> {
        let mut tx = self.begin_write().await?;
        let count: i64 =
            sqlx::query("SELECT COUNT(*) FROM pipeline_schedules WHERE project_id = $1")
                .bind(s.project_id)
                .fetch_one(&mut *tx)
                .await?
                .get(0);
        if count >= max_per_project {
            return Err(StoreError::Conflict(format!(
                "a project has at most {max_per_project} pipeline schedules: delete one first"
            )));
        }
        let row = sqlx::query(&format!(
            "INSERT INTO pipeline_schedules (project_id, description, ref_name, cron, cron_timezone, active, next_run_at, variables, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING {}",
            PipelineSchedule::COLUMNS
        ))
        .bind(s.project_id)
        .bind(&s.description)
        .bind(&s.ref_name)
        .bind(&s.cron)
        .bind(&s.cron_timezone)
        .bind(b(s.active))
        .bind(s.next_run_at)
        .bind(&s.variables)
        .bind(s.created_at)
        .bind(s.updated_at)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(PipelineSchedule::from_row(&row))
    }

    /// Replace a schedule's settings (all but its id, project and creation time).
    pub async fn update_pipeline_schedule(&self, s: &PipelineSchedule) -> Result<PipelineSchedule> {
        let row = sqlx::query(&format!(
            "UPDATE pipeline_schedules SET description = $1, ref_name = $2, cron = $3, cron_timezone = $4, active = $5, next_run_at = $6, variables = $7, updated_at = $8 \
             WHERE id = $9 AND project_id = $10 RETURNING {}",
            PipelineSchedule::COLUMNS
        ))
        .bind(&s.description)
        .bind(&s.ref_name)
        .bind(&s.cron)
        .bind(&s.cron_timezone)
        .bind(b(s.active))
        .bind(s.next_run_at)
        .bind(&s.variables)
        .bind(s.updated_at)
        .bind(s.id)
        .bind(s.project_id)
        .fetch_optional(&self.writer)
        .await?;
        row.as_ref()
            .map(PipelineSchedule::from_row)
            .ok_or(StoreError::NotFound("pipeline schedule"))
    }

    pub async fn pipeline_schedule(&self, project_id: i64, id: i64) -> Result<PipelineSchedule> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM pipeline_schedules WHERE id = $1 AND project_id = $2",
            PipelineSchedule::COLUMNS
        ))
        .bind(id)
        .bind(project_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(PipelineSchedule::from_row)
            .ok_or(StoreError::NotFound("pipeline schedule"))
    }

    /// A project's schedules, oldest first.
    pub async fn pipeline_schedules(&self, project_id: i64) -> Result<Vec<PipelineSchedule>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipeline_schedules WHERE project_id = $1 ORDER BY id",
            PipelineSchedule::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(PipelineSchedule::from_row).collect())
    }

    /// Active schedules whose next run is at or before `now`, earliest first (at most
    /// `limit`).
    pub async fn due_pipeline_schedules(
        &self,
        now: i64,
        limit: i64,
    ) -> Result<Vec<PipelineSchedule>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipeline_schedules WHERE next_run_at <= $1 ORDER BY next_run_at, id LIMIT $2",
            PipelineSchedule::COLUMNS
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(PipelineSchedule::from_row).collect())
    }

    /// Move a schedule's next run from `due` to `next` without a pipeline (its pipeline
    /// could not be created); `false` when another coordinator moved it first.
    pub async fn move_pipeline_schedule(
        &self,
        id: i64,
        due: i64,
        next: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let moved = move_schedule(&mut tx, id, due, next, now).await?;
        if moved {
            tx.commit().await?;
        }
        Ok(moved)
    }

    pub async fn delete_pipeline_schedule(&self, project_id: i64, id: i64) -> Result<()> {
        let done = sqlx::query("DELETE FROM pipeline_schedules WHERE id = $1 AND project_id = $2")
            .bind(id)
            .bind(project_id)
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("pipeline schedule"));
        }
        Ok(())
    }

    /// The pipelines a schedule ran, newest first (at most `limit`).
    pub async fn schedule_pipelines(&self, schedule_id: i64, limit: i64) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE schedule_id = $1 ORDER BY id DESC LIMIT $2",
            Pipeline::COLUMNS
        ))
        .bind(schedule_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Pipeline::from_row).collect())
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

    // ---- project CI/CD variables ----

    /// Adds a pipeline trigger token (by its hash) to a project.
    pub async fn create_pipeline_trigger(
        &self,
        project_id: i64,
        token_hash: &str,
        token_prefix: &str,
        description: &str,
        now: i64,
    ) -> Result<PipelineTrigger> {
        let row = sqlx::query(&format!(
            "INSERT INTO pipeline_triggers (project_id, token_hash, token_prefix, description, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {}",
            PipelineTrigger::COLUMNS
        ))
        .bind(project_id)
        .bind(token_hash)
        .bind(token_prefix)
        .bind(description)
        .bind(now)
        .fetch_one(&self.writer)
        .await?;
        Ok(PipelineTrigger::from_row(&row))
    }

    /// A project's trigger tokens, oldest first.
    pub async fn pipeline_triggers(&self, project_id: i64) -> Result<Vec<PipelineTrigger>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipeline_triggers WHERE project_id = $1 ORDER BY id",
            PipelineTrigger::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(PipelineTrigger::from_row).collect())
    }

    /// The trigger whose token hashes to `token_hash`, marked used at `now`.
    pub async fn use_pipeline_trigger(
        &self,
        token_hash: &str,
        now: i64,
    ) -> Result<Option<PipelineTrigger>> {
        let row = sqlx::query(&format!(
            "UPDATE pipeline_triggers SET last_used_at = $1 WHERE token_hash = $2 RETURNING {}",
            PipelineTrigger::COLUMNS
        ))
        .bind(now)
        .bind(token_hash)
        .fetch_optional(&self.writer)
        .await?;
        Ok(row.as_ref().map(PipelineTrigger::from_row))
    }

    /// Removes a project's trigger; `NotFound` when it has none of that id.
    pub async fn delete_pipeline_trigger(&self, project_id: i64, id: i64) -> Result<()> {
        let done = sqlx::query("DELETE FROM pipeline_triggers WHERE project_id = $1 AND id = $2")
            .bind(project_id)
            .bind(id)
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("pipeline trigger"));
        }
        Ok(())
    }

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
    /// `(key, value)` (see [`Store::project_variables_without_prefix`]).
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

    // ---- runners ----

    pub async fn create_runner(&self, r: &NewRunner, now: i64) -> Result<Runner> {
        let tags = serde_json::to_string(&r.tags).unwrap_or_else(|_| "[]".into());
        let res = sqlx::query(
            "INSERT INTO runners (token_hash, description, tags, run_untagged, locked, protected_only, project_id, maximum_timeout, created_at, paused, group_path, any_tags) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
        )
        .bind(&r.token_hash)
        .bind(&r.description)
        .bind(tags)
        .bind(b(r.run_untagged))
        .bind(b(r.locked))
        .bind(b(r.protected_only))
        .bind(r.project_id)
        .bind(r.maximum_timeout)
        .bind(now)
        .bind(b(r.paused))
        .bind(&r.group_path)
        .bind(b(r.any_tags))
        .fetch_one(&self.writer)
        .await?;
        let id: i64 = res.get(0);
        self.runner(id).await
    }

    /// Changes a runner's settings in one statement. A runner that would be left without
    /// tags and not running untagged jobs (it could run nothing) is not changed:
    /// `Conflict`, as GitLab's validation refuses it. `NotFound` when there is no runner
    /// `id`.
    pub async fn update_runner(&self, id: i64, changes: &RunnerChanges) -> Result<Runner> {
        let tags = match &changes.tags {
            Some(tags) => Some(
                serde_json::to_string(tags)
                    .map_err(|e| StoreError::Conflict(format!("encode the runner's tags: {e}")))?,
            ),
            None => None,
        };
        let changed = sqlx::query(
            "UPDATE runners SET \
             description = COALESCE($2, description), \
             tags = COALESCE($3, tags), \
             run_untagged = COALESCE($4, run_untagged), \
             locked = COALESCE($5, locked), \
             protected_only = COALESCE($6, protected_only), \
             maximum_timeout = COALESCE($7, maximum_timeout), \
             paused = COALESCE($8, paused) \
             WHERE id = $1 AND (COALESCE($4, run_untagged) <> 0 OR COALESCE($3, tags) <> '[]')",
        )
        .bind(id)
        .bind(&changes.description)
        .bind(tags)
        .bind(changes.run_untagged.map(b))
        .bind(changes.locked.map(b))
        .bind(changes.protected_only.map(b))
        .bind(changes.maximum_timeout)
        .bind(changes.paused.map(b))
        .execute(&self.writer)
        .await?
        .rows_affected();
        let runner = self.runner(id).await?;
        if changed == 0 {
            return Err(StoreError::Conflict(
                "tags_list can not be empty when runner is not allowed to pick untagged jobs"
                    .to_owned(),
            ));
        }
        Ok(runner)
    }

    pub async fn runner(&self, id: i64) -> Result<Runner> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM runners WHERE id = $1",
            Runner::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let runner = row
            .map(|r| Runner::from_row(&r))
            .ok_or(StoreError::NotFound("runner"))?;
        self.with_enabled_projects(runner).await
    }

    pub async fn runner_by_token_hash(&self, token_hash: &str) -> Result<Option<Runner>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM runners WHERE token_hash = $1",
            Runner::COLUMNS
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => Ok(Some(
                self.with_enabled_projects(Runner::from_row(&row)).await?,
            )),
            None => Ok(None),
        }
    }

    pub async fn runners(&self) -> Result<Vec<Runner>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM runners ORDER BY id",
            Runner::COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?;
        let mut runners: Vec<Runner> = rows.iter().map(Runner::from_row).collect();
        let enabled = sqlx::query(
            "SELECT runner_id, project_id FROM runner_projects ORDER BY created_at, project_id",
        )
        .fetch_all(&self.pool)
        .await?;
        for row in enabled {
            let runner_id: i64 = row.get(0);
            if let Some(runner) = runners.iter_mut().find(|r| r.id == runner_id) {
                runner.enabled_projects.push(row.get(1));
            }
        }
        Ok(runners)
    }

    /// Delete a runner; its finished jobs keep their history (runner_id cleared).
    pub async fn delete_runner(&self, id: i64) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM runner_projects WHERE runner_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE jobs SET runner_id = NULL WHERE runner_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM runners WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn touch_runner(&self, id: i64, now: i64) -> Result<()> {
        sqlx::query("UPDATE runners SET contacted_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    // ---- pipelines and jobs ----

    /// The project's next pipeline `iid` (its `pipeline_counter`, moved on), taken before
    /// the pipeline is compiled so that `CI_PIPELINE_IID` is known to its rules — GitLab's
    /// `ensure_project_iid!`, also outside the creation's transaction. A creation that
    /// does not happen leaves a gap, as on GitLab.
    pub async fn allocate_pipeline_iid(&self, project_id: i64) -> Result<i64> {
        let row = sqlx::query(
            "UPDATE projects SET pipeline_counter = pipeline_counter + 1 WHERE id = $1 RETURNING pipeline_counter",
        )
        .bind(project_id)
        .fetch_optional(&self.writer)
        .await?
        .ok_or(StoreError::NotFound("project"))?;
        Ok(row.get(0))
    }

    /// Give back an `iid` no pipeline got (the configuration created none): the counter
    /// moves back only when no later `iid` was taken meanwhile, so `iid`s stay unique.
    pub async fn release_pipeline_iid(&self, project_id: i64, iid: i64) -> Result<()> {
        sqlx::query(
            "UPDATE projects SET pipeline_counter = pipeline_counter - 1 WHERE id = $1 AND pipeline_counter = $2",
        )
        .bind(project_id)
        .bind(iid)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Persist a pipeline and all its jobs in one transaction, with the `iid` taken by
    /// [`Store::allocate_pipeline_iid`]. A push's ref move and a timed schedule run are
    /// checked first: when another coordinator took them, nothing is written
    /// ([`StoreError::Stale`]). Returns the pipeline's row as inserted; its jobs are not
    /// read back (a large pipeline's specs are megabytes): [`Store::pipeline_jobs`].
    pub async fn create_pipeline(
        &self,
        p: &NewPipeline,
        jobs: &[NewJob],
        now: i64,
    ) -> Result<Pipeline> {
        let mut tx = self.begin_write().await?;
        if let Some(change) = &p.push {
            if !move_ref(&mut tx, p.project_id, change).await? {
                return Err(StoreError::Stale);
            }
        }
        if let Some(ScheduleRun {
            schedule_id,
            due: Some(due),
            next,
        }) = &p.schedule
        {
            if !move_schedule(&mut tx, *schedule_id, *due, *next, now).await? {
                return Err(StoreError::Stale);
            }
        }
        let row = sqlx::query(&format!(
            "INSERT INTO pipelines (project_id, iid, ref_name, tag, sha, before_sha, source, status, failure_reason, yaml_errors, variables, protected, created_at, updated_at, parent_job_id, schedule_id, trace_id, root_id, locked) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
             (SELECT COALESCE(pp.root_id, pp.id) FROM jobs pj JOIN pipelines pp ON pp.id = pj.pipeline_id \
              WHERE pj.id = $15 AND pp.project_id = $1), \
             (SELECT keep_latest_artifact FROM projects WHERE id = $1)) RETURNING {}",
            Pipeline::COLUMNS
        ))
        .bind(p.project_id)
        .bind(p.iid)
        .bind(&p.ref_name)
        .bind(b(p.tag))
        .bind(&p.sha)
        .bind(&p.before_sha)
        .bind(&p.source)
        .bind(&p.status)
        .bind(&p.failure_reason)
        .bind(&p.yaml_errors)
        .bind(&p.variables)
        .bind(b(p.protected))
        .bind(now)
        .bind(now)
        .bind(p.parent_job_id)
        .bind(p.schedule.as_ref().map(|s| s.schedule_id))
        .bind(&p.trace_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            StoreError::conflict_or(
                e,
                match p.parent_job_id {
                    Some(job) => {
                        format!("the trigger job {job} already created its downstream pipeline")
                    }
                    None => format!("the project already has a pipeline #{}", p.iid),
                },
            )
        })?;
        let pipeline = Pipeline::from_row(&row);
        if let Some(link) = &p.merge_request {
            merge_requests::insert_link(&mut tx, pipeline.id, link).await?;
        }
        insert_jobs(&mut tx, self.backend, pipeline.id, p.project_id, jobs, now).await?;
        tx.commit().await?;
        Ok(pipeline)
    }

    pub async fn pipeline(&self, id: i64) -> Result<Pipeline> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE id = $1",
            Pipeline::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Pipeline::from_row(&r))
            .ok_or(StoreError::NotFound("pipeline"))
    }

    pub async fn pipelines(&self, project_id: i64) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE project_id = $1 ORDER BY id DESC",
            Pipeline::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Pipeline::from_row).collect())
    }

    /// One page of a project's pipelines, newest first (`ref_name` and `status` when
    /// given), and how many match in all.
    pub async fn pipelines_page(
        &self,
        project_id: i64,
        filter: &PipelineFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Pipeline>, i64)> {
        let mut sql = "project_id = $1".to_owned();
        let mut values: Vec<String> = Vec::new();
        for (column, value) in [
            ("ref_name", &filter.ref_name),
            ("status", &filter.status),
            ("sha", &filter.sha),
            ("source", &filter.source),
        ] {
            if let Some(v) = value {
                values.push(v.clone());
                sql.push_str(&format!(" AND {column} = ${}", values.len() + 1));
            }
        }
        // Times are numbers the caller parsed: written into the SQL, not bound as text.
        for (column, op, value) in [
            ("created_at", ">=", filter.created_after),
            ("created_at", "<=", filter.created_before),
            ("updated_at", ">=", filter.updated_after),
            ("updated_at", "<=", filter.updated_before),
        ] {
            if let Some(v) = value {
                sql.push_str(&format!(" AND {column} {op} {v}"));
            }
        }
        match filter.yaml_errors {
            Some(true) => sql.push_str(" AND yaml_errors IS NOT NULL"),
            Some(false) => sql.push_str(" AND yaml_errors IS NULL"),
            None => {}
        }
        match filter.scope {
            Some(PipelineScope::Running) => sql.push_str(" AND status = 'running'"),
            Some(PipelineScope::Pending) => sql.push_str(" AND status = 'pending'"),
            Some(PipelineScope::Finished) => {
                sql.push_str(" AND status IN ('success', 'failed', 'canceled', 'skipped')")
            }
            Some(scope @ (PipelineScope::Branches | PipelineScope::Tags)) => {
                let tag = i64::from(scope == PipelineScope::Tags);
                sql.push_str(&format!(
                    " AND id IN (SELECT MAX(id) FROM pipelines WHERE project_id = $1 AND tag = {tag} GROUP BY ref_name)"
                ));
            }
            None => {}
        }
        let count = format!("SELECT COUNT(*) FROM pipelines WHERE {sql}");
        let total: i64 = filtered(&count, project_id, &values)
            .fetch_one(&self.pool)
            .await?
            .get(0);
        let order = match filter.order {
            PipelineOrder::Id => "id",
            PipelineOrder::Status => "status",
            PipelineOrder::Ref => "ref_name",
            PipelineOrder::UpdatedAt => "updated_at",
        };
        let direction = if filter.ascending { "ASC" } else { "DESC" };
        let select = format!(
            "SELECT {} FROM pipelines WHERE {sql} ORDER BY {order} {direction}, id {direction} LIMIT ${} OFFSET ${}",
            Pipeline::COLUMNS,
            values.len() + 2,
            values.len() + 3
        );
        let rows = filtered(&select, project_id, &values)
            .bind(limit)
            .bind(offset)
            .fetch_all(&self.pool)
            .await?;
        Ok((rows.iter().map(Pipeline::from_row).collect(), total))
    }

    /// One page of a project's or a runner's jobs (every attempt, trigger jobs left out),
    /// newest first, those in `statuses` when it is not empty; and how many match in all.
    pub async fn jobs_page(
        &self,
        of: JobsOf,
        statuses: &[String],
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Job>, i64)> {
        let (mut filter, owner_id) = match of {
            JobsOf::Project(id) => ("project_id = $1 AND bridge = 0".to_owned(), id),
            JobsOf::Runner(id) => ("runner_id = $1 AND bridge = 0".to_owned(), id),
        };
        if !statuses.is_empty() {
            let list: Vec<String> = (0..statuses.len()).map(|i| format!("${}", i + 2)).collect();
            filter.push_str(&format!(" AND status IN ({})", list.join(", ")));
        }
        let count = format!("SELECT COUNT(*) FROM jobs WHERE {filter}");
        let total: i64 = filtered(&count, owner_id, statuses)
            .fetch_one(&self.pool)
            .await?
            .get(0);
        let n = statuses.len() + 1;
        let sql = format!(
            "SELECT {} FROM jobs WHERE {filter} ORDER BY id DESC LIMIT ${} OFFSET ${}",
            Job::COLUMNS,
            n + 1,
            n + 2
        );
        let rows = filtered(&sql, owner_id, statuses)
            .bind(limit)
            .bind(offset)
            .fetch_all(&self.pool)
            .await?;
        Ok((rows.iter().map(Job::from_row).collect(), total))
    }

    /// The pipeline the trigger job `job_id` created, if any.
    pub async fn pipeline_by_parent_job(&self, job_id: i64) -> Result<Option<Pipeline>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE parent_job_id = $1",
            Pipeline::COLUMNS
        ))
        .bind(job_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| Pipeline::from_row(&r)))
    }

    /// The pipelines trigger jobs of `pipeline_id` created (any attempt), oldest first.
    pub async fn downstream_pipelines(&self, pipeline_id: i64) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE parent_job_id IN (SELECT id FROM jobs WHERE pipeline_id = $1) ORDER BY id",
            Pipeline::COLUMNS
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Pipeline::from_row).collect())
    }

    /// What time may have made due at `now` (Unix ms), read on the jobs' status index
    /// instead of visiting every active pipeline: the pipelines with a running or
    /// canceling job silent since `silent_before` or past its timeout plus
    /// `timeout_grace_secs`, a delayed job whose time has come, or a job pending since
    /// `pending_before`; and the projects with jobs waiting for a resource. A superset by
    /// up to a second (times are compared in milliseconds, the processor's in whole
    /// seconds): the caller decides over the pipeline's rows. O(executing + scheduled +
    /// waiting jobs + those returned).
    pub async fn timer_candidates(
        &self,
        now: i64,
        timeout_grace_secs: i64,
        silent_before: i64,
        pending_before: i64,
    ) -> Result<TimerCandidates> {
        let slack = 999;
        let rows = sqlx::query(
            "SELECT pipeline_id, project_id, status FROM jobs WHERE status IN ('running', 'canceling') \
               AND (COALESCE(last_contact_at, finished_at, started_at, queued_at) <= $1 \
                    OR (status = 'running' AND timeout_secs IS NOT NULL AND started_at IS NOT NULL \
                        AND started_at + (timeout_secs + $2) * 1000 <= $3)) \
             UNION ALL SELECT pipeline_id, project_id, status FROM jobs WHERE status = 'scheduled' AND scheduled_at <= $3 \
             UNION ALL SELECT pipeline_id, project_id, status FROM jobs WHERE status = 'pending' AND queued_at <= $4 \
             UNION ALL SELECT pipeline_id, project_id, status FROM jobs WHERE status = 'waiting_for_resource'",
        )
        .bind(silent_before.saturating_add(slack))
        .bind(timeout_grace_secs)
        .bind(now.saturating_add(slack))
        .bind(pending_before.saturating_add(slack))
        .fetch_all(&self.pool)
        .await?;
        let mut out = TimerCandidates::default();
        for r in &rows {
            let status: String = r.get("status");
            if status == "waiting_for_resource" {
                out.resource_projects.insert(r.get("project_id"));
            } else {
                out.pipelines.insert(r.get("pipeline_id"));
            }
        }
        Ok(out)
    }

    /// Pipelines not yet in a final status (for re-processing after a restart).
    pub async fn active_pipelines(&self) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE status IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling', 'scheduled', 'manual') ORDER BY id",
            Pipeline::COLUMNS
        ))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Pipeline::from_row).collect())
    }

    pub async fn pipeline_jobs(&self, pipeline_id: i64) -> Result<Vec<Job>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE pipeline_id = $1 ORDER BY id",
            Job::COLUMNS
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Job::from_row).collect())
    }

    /// [`Store::pipeline_jobs`] with every `spec` empty: the pipeline's state without the
    /// large column (fetch the specs a cache lacks with [`Store::pipeline_job_specs`]).
    pub async fn pipeline_jobs_without_spec(&self, pipeline_id: i64) -> Result<Vec<Job>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE pipeline_id = $1 ORDER BY id",
            Job::COLUMNS_WITHOUT_SPEC
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Job::from_row).collect())
    }

    /// The spec of a pipeline's first job (what the whole configuration set for the
    /// pipeline, such as `workflow:name`, is read from); `None` for a pipeline without jobs.
    pub async fn first_job_spec(&self, pipeline_id: i64) -> Result<Option<String>> {
        let row = sqlx::query("SELECT spec FROM jobs WHERE pipeline_id = $1 ORDER BY id LIMIT 1")
            .bind(pipeline_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// `(job id, spec)` of a pipeline's jobs, in id order.
    pub async fn pipeline_job_specs(&self, pipeline_id: i64) -> Result<Vec<(i64, String)>> {
        let rows = sqlx::query("SELECT id, spec FROM jobs WHERE pipeline_id = $1 ORDER BY id")
            .bind(pipeline_id)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(|r| (r.get("id"), r.get("spec"))).collect())
    }

    pub async fn job(&self, id: i64) -> Result<Job> {
        let row = sqlx::query(&format!("SELECT {} FROM jobs WHERE id = $1", Job::COLUMNS))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Job::from_row(&r))
            .ok_or(StoreError::NotFound("job"))
    }

    /// [`Store::job`] with `spec` empty: the row without its large column.
    pub async fn job_without_spec(&self, id: i64) -> Result<Job> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE id = $1",
            Job::COLUMNS_WITHOUT_SPEC
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| Job::from_row(&r))
            .ok_or(StoreError::NotFound("job"))
    }

    /// The job holding this token hash, without its `spec` ([`Store::job_without_spec`]):
    /// authorising a runner's call and the call itself read the row once.
    pub async fn job_by_token_hash(&self, token_hash: &str) -> Result<Option<Job>> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE token_hash = $1",
            Job::COLUMNS_WITHOUT_SPEC
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| Job::from_row(&r)))
    }

    /// A job's status.
    pub async fn job_status(&self, id: i64) -> Result<String> {
        let row = sqlx::query("SELECT status FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| r.get("status"))
            .ok_or(StoreError::NotFound("job"))
    }

    /// Apply a batch of decisions to one pipeline atomically: job updates, new job rows
    /// (retries), and the pipeline's own status; a job that stops executing loses its
    /// token (the hash is cleared). Fails with [`StoreError::Stale`] when the
    /// pipeline changed since `expected_lock_version` was read; the caller reloads and
    /// decides again.
    pub async fn apply(
        &self,
        pipeline_id: i64,
        expected_lock_version: i64,
        change: &PipelineChange,
        now: i64,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        let r = sqlx::query(
            "UPDATE pipelines SET lock_version = lock_version + 1, status = $1, started_at = COALESCE(started_at, $2), finished_at = $3, updated_at = $4 \
             WHERE id = $5 AND lock_version = $6",
        )
        .bind(&change.status)
        .bind(change.started_at)
        .bind(change.finished_at)
        .bind(now)
        .bind(pipeline_id)
        .bind(expected_lock_version)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() != 1 {
            return Err(StoreError::Stale);
        }
        if change.ended {
            unlock_older_artifacts(&mut tx, pipeline_id).await?;
        }
        update_jobs(&mut tx, self.backend, &change.jobs, now).await?;
        if !change.new_jobs.is_empty() {
            let project_id: i64 = sqlx::query("SELECT project_id FROM pipelines WHERE id = $1")
                .bind(pipeline_id)
                .fetch_one(&mut *tx)
                .await?
                .get(0);
            insert_jobs(
                &mut tx,
                self.backend,
                pipeline_id,
                project_id,
                &change.new_jobs,
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    // ---- queue ----

    /// Pending jobs in queue order (oldest first), with the number of running jobs of
    /// their project, for fair-share ordering by the caller.
    pub async fn pending_jobs(&self, limit: i64) -> Result<Vec<(Job, i64)>> {
        let rows = sqlx::query(&format!(
            "SELECT {}, (SELECT COUNT(*) FROM jobs r WHERE r.project_id = jobs.project_id AND r.status = 'running') AS running \
             FROM jobs WHERE status = 'pending' ORDER BY queued_at, id LIMIT $1",
            Job::COLUMNS
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (Job::from_row(r), r.get::<i64, _>("running")))
            .collect())
    }

    /// Pending jobs in queue order (oldest first), without their specs: what job
    /// selection reads on every request, so it stays small.
    pub async fn pending_queue(&self, limit: i64) -> Result<Vec<QueuedJob>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE status = 'pending' ORDER BY queued_at, id LIMIT $1",
            QueuedJob::COLUMNS
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(QueuedJob::from_row).collect())
    }

    /// Pending jobs queued after `after` (`(queued_at, id)`) in queue order: what joined
    /// the queue since a [`Store::pending_queue`] read that ended there. O(jobs returned)
    /// on the `jobs_by_status` index. (A job put back in the queue keeps its older
    /// `queued_at`: a reader learns of it by reading the queue whole.)
    pub async fn pending_queue_after(
        &self,
        after: (i64, i64),
        limit: i64,
    ) -> Result<Vec<QueuedJob>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE status = 'pending' \
             AND (queued_at > $1 OR (queued_at = $1 AND id > $2)) \
             ORDER BY queued_at, id LIMIT $3",
            QueuedJob::COLUMNS
        ))
        .bind(after.0)
        .bind(after.1)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(QueuedJob::from_row).collect())
    }

    /// `(status, jobs)` for the statuses a job passes through before it ends (what the
    /// coordinator's metrics show); counted on the `jobs_by_status` index.
    pub async fn active_job_counts(&self) -> Result<Vec<(String, i64)>> {
        let rows = sqlx::query(
            "SELECT status, COUNT(*) FROM jobs \
             WHERE status IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling') \
             GROUP BY status",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// How many runners contacted the coordinator at or after `since` (Unix ms).
    pub async fn runners_contacted_since(&self, since: i64) -> Result<i64> {
        Ok(
            sqlx::query("SELECT COUNT(*) FROM runners WHERE contacted_at >= $1")
                .bind(since)
                .fetch_one(&self.pool)
                .await?
                .get::<i64, _>(0),
        )
    }

    /// `(project id, running jobs)` for every project with running jobs (fair share).
    pub async fn running_jobs_per_project(&self) -> Result<Vec<(i64, i64)>> {
        let rows = sqlx::query(
            "SELECT project_id, COUNT(*) FROM jobs WHERE status = 'running' GROUP BY project_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// `(runner id, jobs)` for every runner executing jobs (running or canceling): which
    /// runners are busy, for why a job waits.
    pub async fn executing_jobs_per_runner(&self) -> Result<Vec<(i64, i64)>> {
        let rows = sqlx::query(
            "SELECT runner_id, COUNT(*) FROM jobs \
             WHERE status IN ('running', 'canceling') AND runner_id IS NOT NULL \
             GROUP BY runner_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<i64, _>(0), r.get::<i64, _>(1)))
            .collect())
    }

    /// Hand a pending job to a runner. Returns the status of the job's pipeline when the
    /// job is now the runner's; `None` when another runner got it first (the row is no
    /// longer pending): every pending job goes to exactly one runner.
    pub async fn assign_job(
        &self,
        job_id: i64,
        runner_id: i64,
        token_hash: &str,
        timeout_secs: i64,
        now: i64,
    ) -> Result<Option<String>> {
        let mut won = self
            .assign_jobs(
                &[Assignment {
                    job_id,
                    runner_id,
                    token_hash: token_hash.to_owned(),
                    timeout_secs,
                }],
                now,
            )
            .await?;
        Ok(won.remove(&job_id).map(|a| a.pipeline_status))
    }

    /// [`Store::assign_job`] for many jobs in one transaction (one commit, however many
    /// runners asked at once). Returns the jobs now held by the runner named for them; a
    /// job named twice goes to its first assignment only. At most [`MAX_ASSIGN_BATCH`]
    /// assignments.
    ///
    /// The pipelines of the jobs still pending have their `lock_version` moved first
    /// (pipeline rows before job rows, the order [`Store::apply`] locks them in): a
    /// decision made over rows read before the assignment fails [`StoreError::Stale`],
    /// and a copy of the rows stays valid by applying [`Assigned`].
    pub async fn assign_jobs(
        &self,
        batch: &[Assignment],
        now: i64,
    ) -> Result<HashMap<i64, Assigned>> {
        let mut seen = HashSet::new();
        let batch: Vec<&Assignment> = batch
            .iter()
            .filter(|a| seen.insert(a.job_id))
            .take(MAX_ASSIGN_BATCH)
            .collect();
        if batch.is_empty() {
            return Ok(HashMap::new());
        }
        // $1 = now; then per job i (from 0): $(2+4i) id, $(3+4i) runner, $(4+4i) token hash,
        // $(5+4i) timeout.
        let case = |column: usize| -> String {
            let mut sql = String::from("CASE id");
            for i in 0..batch.len() {
                sql.push_str(&format!(
                    " WHEN ${} THEN ${}",
                    2 + 4 * i,
                    2 + 4 * i + column
                ));
            }
            sql.push_str(" END");
            sql
        };
        let ids: Vec<String> = (0..batch.len())
            .map(|i| format!("${}", 2 + 4 * i))
            .collect();
        let mut tx = self.begin_write().await?;
        // $1.. = the job ids.
        let bump = format!(
            "UPDATE pipelines SET lock_version = lock_version + 1 \
             WHERE id IN (SELECT pipeline_id FROM jobs WHERE id IN ({}) AND status = 'pending' AND runner_id IS NULL) \
             RETURNING id, status, lock_version",
            (1..=batch.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut query = sqlx::query(&bump);
        for a in &batch {
            query = query.bind(a.job_id);
        }
        let pipelines: HashMap<i64, (String, i64)> = query
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| (r.get("id"), (r.get("status"), r.get("lock_version"))))
            .collect();
        if pipelines.is_empty() {
            tx.rollback().await?;
            return Ok(HashMap::new());
        }
        let sql = format!(
            "UPDATE jobs SET status = 'running', runner_id = {}, token_hash = {}, timeout_secs = {}, started_at = $1, last_contact_at = NULL \
             WHERE id IN ({}) AND status = 'pending' AND runner_id IS NULL \
             RETURNING id, pipeline_id",
            case(1),
            case(2),
            case(3),
            ids.join(", ")
        );
        let mut query = sqlx::query(&sql).bind(now);
        for a in &batch {
            query = query
                .bind(a.job_id)
                .bind(a.runner_id)
                .bind(a.token_hash.as_str())
                .bind(a.timeout_secs);
        }
        let rows = query.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let pipeline_id: i64 = r.get("pipeline_id");
                let (status, lock_version) = pipelines.get(&pipeline_id)?;
                Some((
                    r.get("id"),
                    Assigned {
                        pipeline_id,
                        pipeline_status: status.clone(),
                        lock_version: *lock_version,
                    },
                ))
            })
            .collect())
    }

    /// Record that the job's runner is alive.
    pub async fn touch_job(&self, job_id: i64, now: i64) -> Result<()> {
        sqlx::query("UPDATE jobs SET last_contact_at = $1 WHERE id = $2")
            .bind(now)
            .bind(job_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Record the coverage found in a finished job's log.
    pub async fn set_job_coverage(&self, job_id: i64, coverage: f64) -> Result<()> {
        sqlx::query("UPDATE jobs SET coverage = $1 WHERE id = $2")
            .bind(coverage)
            .bind(job_id)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    // ---- artifacts ----

    /// Removes up to `limit` artifact rows of `which`, of jobs that no longer run (a
    /// running job may still upload one of the same key), soonest expired first; returns
    /// `(job id, file type, blob key)` of each, for their blobs to be deleted. Two
    /// coordinators doing this at once take disjoint rows.
    pub async fn take_artifacts(
        &self,
        which: ArtifactSelection,
        limit: i64,
    ) -> Result<Vec<(i64, String, String)>> {
        let (condition, value) = match which {
            // Locked ones stay (Artifact::expired).
            ArtifactSelection::ExpiredBy(now) => (
                "a.expire_at IS NOT NULL AND a.expire_at <= $1 \
                 AND NOT EXISTS (SELECT 1 FROM pipelines p WHERE p.id = j.pipeline_id AND p.locked = 1)",
                now,
            ),
            ArtifactSelection::OfJob(job_id) => ("a.job_id = $1", job_id),
            ArtifactSelection::OfProject(project_id) => ("j.project_id = $1", project_id),
        };
        let rows = sqlx::query(&format!(
            "DELETE FROM artifacts WHERE id IN (\
                SELECT a.id FROM artifacts a JOIN jobs j ON j.id = a.job_id \
                WHERE {condition} \
                AND j.status NOT IN ('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling') \
                ORDER BY a.expire_at, a.id LIMIT $2) \
             RETURNING job_id, file_type, blob_key",
        ))
        .bind(value)
        .bind(limit)
        .fetch_all(&self.writer)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
    }

    /// Deletes pipeline `id` with its jobs, their artifact rows and log chunks, in one
    /// transaction; pipelines it triggered stay (their `parent_job_id` is cleared).
    /// Returns the deleted jobs' ids and `(job id, file type, blob key)` of their
    /// artifacts, for the files and blobs to be removed; `NotFound` without the pipeline.
    pub async fn delete_pipeline(&self, id: i64) -> Result<DeletedPipeline> {
        let mut tx = self.begin_write().await?;
        environments::detach_deployments(&mut tx, id).await?;
        let deleted =
            delete_job_data(&mut tx, "SELECT id FROM jobs WHERE pipeline_id = $1", id).await?;
        sqlx::query("DELETE FROM jobs WHERE pipeline_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM merge_request_pipelines WHERE pipeline_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM pipelines WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("pipeline"));
        }
        tx.commit().await?;
        Ok(deleted)
    }

    /// Erases a finished job's log (GitLab's `erase`): its size goes to 0 (readers then
    /// see nothing of the file, which the caller removes), its chunks in the database go,
    /// and `erased_at` is set. `false` when the job has not finished.
    pub async fn erase_job_log(&self, job_id: i64, now: i64) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE jobs SET trace_size = 0, trace_checksum = NULL, trace_in_db = 0, erased_at = $1 \
             WHERE id = $2 AND status IN ('success', 'failed', 'canceled', 'skipped')",
        )
        .bind(now)
        .bind(job_id)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        sqlx::query("DELETE FROM trace_chunks WHERE job_id = $1")
            .bind(job_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Makes a job's artifacts never expire (GitLab's "keep"); returns how many it has.
    pub async fn keep_artifacts(&self, job_id: i64) -> Result<u64> {
        let done = sqlx::query("UPDATE artifacts SET expire_at = NULL WHERE job_id = $1")
            .bind(job_id)
            .execute(&self.writer)
            .await?;
        Ok(done.rows_affected())
    }

    /// Record an artifact (replacing an earlier one of the same type for the job).
    pub async fn put_artifact(&self, a: &NewArtifact, now: i64) -> Result<Artifact> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM artifacts WHERE job_id = $1 AND file_type = $2")
            .bind(a.job_id)
            .bind(&a.file_type)
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query(
            "INSERT INTO artifacts (job_id, file_type, file_format, filename, size, sha256, blob_key, expire_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        )
        .bind(a.job_id)
        .bind(&a.file_type)
        .bind(&a.file_format)
        .bind(&a.filename)
        .bind(a.size)
        .bind(&a.sha256)
        .bind(&a.blob_key)
        .bind(a.expire_at)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let id: i64 = r.get(0);
        tx.commit().await?;
        let row = sqlx::query(&format!(
            "SELECT {} FROM artifacts WHERE id = $1",
            Artifact::COLUMNS
        ))
        .bind(id)
        .fetch_one(&self.pool)
        .await?;
        Ok(Artifact::from_row(&row))
    }

    pub async fn artifacts(&self, job_id: i64) -> Result<Vec<Artifact>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM artifacts WHERE job_id = $1 ORDER BY id",
            Artifact::COLUMNS
        ))
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Artifact::from_row).collect())
    }

    /// The artifacts of every job of a pipeline (by job, then in creation order): one
    /// query for a job's dependencies, however many there are.
    pub async fn pipeline_artifacts(&self, pipeline_id: i64) -> Result<Vec<Artifact>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM artifacts WHERE job_id IN (SELECT id FROM jobs WHERE pipeline_id = $1) ORDER BY job_id, id",
            Artifact::COLUMNS
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(Artifact::from_row).collect())
    }
}

/// Move a schedule's `next_run_at` from `due` to `next` if it is still `due`.
async fn move_schedule(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    id: i64,
    due: i64,
    next: Option<i64>,
    now: i64,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE pipeline_schedules SET next_run_at = $1, updated_at = $2 WHERE id = $3 AND next_run_at = $4",
    )
    .bind(next)
    .bind(now)
    .bind(id)
    .bind(due)
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Move a recorded ref from `change.from` to `change.to` if it is still at `from`.
async fn move_ref(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    project_id: i64,
    change: &RefChange,
) -> Result<bool> {
    let done = match (&change.from, &change.to) {
        (None, Some(to)) => {
            sqlx::query(
                "INSERT INTO project_refs (project_id, ref_name, sha) VALUES ($1, $2, $3) \
                 ON CONFLICT (project_id, ref_name) DO NOTHING",
            )
            .bind(project_id)
            .bind(&change.ref_name)
            .bind(to)
            .execute(&mut **tx)
            .await?
        }
        (Some(from), Some(to)) => sqlx::query(
            "UPDATE project_refs SET sha = $1 WHERE project_id = $2 AND ref_name = $3 AND sha = $4",
        )
        .bind(to)
        .bind(project_id)
        .bind(&change.ref_name)
        .bind(from)
        .execute(&mut **tx)
        .await?,
        (Some(from), None) => {
            // A deleted branch or tag keeps no artifacts past their expiry (GitLab's
            // unlock on ref deletion).
            let (name, tag) = match change.ref_name.strip_prefix("refs/tags/") {
                Some(tag) => (tag, true),
                None => (
                    change
                        .ref_name
                        .strip_prefix("refs/heads/")
                        .unwrap_or(&change.ref_name),
                    false,
                ),
            };
            sqlx::query(
                "UPDATE pipelines SET locked = 0 \
                 WHERE project_id = $1 AND ref_name = $2 AND tag = $3 AND locked = 1",
            )
            .bind(project_id)
            .bind(name)
            .bind(b(tag))
            .execute(&mut **tx)
            .await?;
            sqlx::query(
                "DELETE FROM project_refs WHERE project_id = $1 AND ref_name = $2 AND sha = $3",
            )
            .bind(project_id)
            .bind(&change.ref_name)
            .bind(from)
            .execute(&mut **tx)
            .await?
        }
        (None, None) => return Ok(true),
    };
    Ok(done.rows_affected() == 1)
}

/// After pipeline `pipeline_id` ended: unlocks the artifacts of the older pipeline
/// families of its ref (their root is older than its root), but for the newest
/// successful family (migration 0015).
async fn unlock_older_artifacts(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    pipeline_id: i64,
) -> Result<()> {
    let row = sqlx::query(
        "SELECT project_id, ref_name, tag, COALESCE(root_id, id) FROM pipelines WHERE id = $1",
    )
    .bind(pipeline_id)
    .fetch_one(&mut **tx)
    .await?;
    let (project_id, ref_name, tag, root): (i64, String, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    sqlx::query(
        "UPDATE pipelines SET locked = 0 \
         WHERE project_id = $1 AND ref_name = $2 AND tag = $3 AND locked = 1 \
         AND COALESCE(root_id, id) < $4 \
         AND COALESCE(root_id, id) <> COALESCE((SELECT MAX(s.id) FROM pipelines s \
             WHERE s.project_id = $1 AND s.ref_name = $2 AND s.tag = $3 \
             AND s.root_id IS NULL AND s.status = 'success'), 0)",
    )
    .bind(project_id)
    .bind(ref_name)
    .bind(tag)
    .bind(root)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Deletes the artifact rows and log chunks of the jobs `of_jobs` selects (`$1` = `id`)
/// and unlinks the pipelines they triggered; returns the jobs and artifacts, whose files
/// the caller removes once the transaction commits.
async fn delete_job_data(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    of_jobs: &str,
    id: i64,
) -> Result<DeletedPipeline> {
    let jobs: Vec<i64> = sqlx::query(of_jobs)
        .bind(id)
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<std::result::Result<_, _>>()?;
    let artifacts = sqlx::query(&format!(
        "DELETE FROM artifacts WHERE job_id IN ({of_jobs}) RETURNING job_id, file_type, blob_key"
    ))
    .bind(id)
    .fetch_all(&mut **tx)
    .await?
    .iter()
    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
    .collect::<Result<Vec<_>>>()?;
    for statement in [
        format!("DELETE FROM trace_chunks WHERE job_id IN ({of_jobs})"),
        format!("UPDATE pipelines SET parent_job_id = NULL WHERE parent_job_id IN ({of_jobs})"),
    ] {
        sqlx::query(&statement).bind(id).execute(&mut **tx).await?;
    }
    Ok(DeletedPipeline { jobs, artifacts })
}

/// Jobs inserted per statement: 15 parameters each, well within SQLite's 32 766 and
/// PostgreSQL's 65 535.
const JOB_INSERT_BATCH: usize = 100;

/// Inserts `jobs` into the pipeline, [`JOB_INSERT_BATCH`] rows a statement (a statement
/// is a round trip to the database's thread or server), then what each job brings along
/// (its environment, its resource group).
async fn insert_jobs(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    pipeline_id: i64,
    project_id: i64,
    jobs: &[NewJob],
    now: i64,
) -> Result<()> {
    for chunk in jobs.chunks(JOB_INSERT_BATCH) {
        // Rows come back in no promised order: each is known by its name, which must
        // be unique in the batch (it is in a new pipeline); else one row at a time.
        let names: HashSet<&str> = chunk.iter().map(|j| j.name.as_str()).collect();
        if names.len() != chunk.len() {
            for j in chunk {
                let id: i64 = insert_job_rows(
                    tx,
                    backend,
                    pipeline_id,
                    project_id,
                    std::slice::from_ref(j),
                    now,
                )
                .await?
                .first()
                .map(|(id, _)| *id)
                .ok_or(StoreError::NotFound("inserted job"))?;
                insert_job_extras(tx, pipeline_id, project_id, id, j, now).await?;
            }
            continue;
        }
        let ids: HashMap<String, i64> =
            insert_job_rows(tx, backend, pipeline_id, project_id, chunk, now)
                .await?
                .into_iter()
                .map(|(id, name)| (name, id))
                .collect();
        for j in chunk {
            if j.environment.is_none() && j.resource_group.is_none() {
                continue;
            }
            let id = *ids
                .get(&j.name)
                .ok_or(StoreError::NotFound("inserted job"))?;
            insert_job_extras(tx, pipeline_id, project_id, id, j, now).await?;
        }
    }
    Ok(())
}

/// One `INSERT` of `jobs`' rows; their ids and names. A job that is created failed
/// (`failure_reason`) is finished when it is created.
async fn insert_job_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    pipeline_id: i64,
    project_id: i64,
    jobs: &[NewJob],
    now: i64,
) -> Result<Vec<(i64, String)>> {
    const COLUMNS: usize = 15;
    let mut sql = String::from(
        "INSERT INTO jobs (pipeline_id, project_id, name, stage, stage_idx, status, attempt, allow_failure, spec, tags, protected, created_at, bridge, failure_reason, finished_at) VALUES ",
    );
    for i in 0..jobs.len() {
        sql.push_str(if i == 0 { "(" } else { ", (" });
        for column in 0..COLUMNS {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&backend.batch_param(i * COLUMNS + column + 1));
        }
        sql.push(')');
    }
    sql.push_str(" RETURNING id, name");
    let mut q = sqlx::query(&sql);
    for j in jobs {
        let tags = serde_json::to_string(&j.tags).unwrap_or_else(|_| "[]".into());
        q = q
            .bind(pipeline_id)
            .bind(project_id)
            .bind(j.name.clone())
            .bind(j.stage.clone())
            .bind(j.stage_idx)
            .bind(j.status.clone())
            .bind(j.attempt)
            .bind(b(j.allow_failure))
            .bind(j.spec.clone())
            .bind(tags)
            .bind(b(j.protected))
            .bind(now)
            .bind(b(j.bridge))
            .bind(j.failure_reason.clone())
            .bind(j.failure_reason.as_ref().map(|_| now));
    }
    q.fetch_all(&mut **tx)
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// What a new job brings along: its environment's deployment, its resource group.
async fn insert_job_extras(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    pipeline_id: i64,
    project_id: i64,
    id: i64,
    j: &NewJob,
    now: i64,
) -> Result<()> {
    if let Some(e) = &j.environment {
        environments::insert_job_environment(tx, pipeline_id, project_id, id, e, now).await?;
    }
    if let Some(key) = &j.resource_group {
        resource_groups::ensure_resource_group(tx, project_id, key, now).await?;
    }
    Ok(())
}

/// `sql` with `$1` = `project_id` and `$2…` = `values`.
fn filtered<'q>(
    sql: &'q str,
    owner_id: i64,
    values: &[String],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    let mut q = sqlx::query(sql).bind(owner_id);
    for value in values {
        q = q.bind(value.clone());
    }
    q
}

/// Jobs updated per statement: 11 parameters each.
const JOB_UPDATE_BATCH: usize = 100;

/// Applies `updates`, [`JOB_UPDATE_BATCH`] rows a statement (a pipeline's stage that
/// starts moves all of its jobs at once), then what each new status does to its job's
/// environment. A job that stops executing loses its token. A batch naming a job twice
/// goes one row at a time, in order, as a joined update would apply only one of them.
async fn update_jobs(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    updates: &[JobUpdate],
    now: i64,
) -> Result<()> {
    for chunk in updates.chunks(JOB_UPDATE_BATCH) {
        let ids: HashSet<i64> = chunk.iter().map(|u| u.id).collect();
        if ids.len() == chunk.len() {
            update_job_rows(tx, backend, chunk).await?;
        } else {
            for u in chunk {
                update_job_rows(tx, backend, std::slice::from_ref(u)).await?;
            }
        }
    }
    for u in updates {
        if let Some(event) = u.environment_event {
            environments::apply_environment_event(tx, u.id, event, now).await?;
        }
    }
    Ok(())
}

/// One `UPDATE` of the jobs in `updates` (ids distinct), joined to their new values. The
/// values are cast to the columns' types, which PostgreSQL cannot infer inside `VALUES`.
async fn update_job_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    updates: &[JobUpdate],
) -> Result<()> {
    use std::fmt::Write as _;
    const TYPES: [&str; 11] = [
        "BIGINT", "TEXT", "BIGINT", "BIGINT", "BIGINT", "TEXT", "BIGINT", "BIGINT", "BIGINT",
        "BIGINT", "TEXT",
    ];
    let mut sql = String::from(
        "WITH v (id, status, retried, allow_failure, exit_code, failure_reason, queued_at, scheduled_at, \
         started_at, finished_at, manual_variables) AS (VALUES ",
    );
    for row in 0..updates.len() {
        sql.push_str(if row == 0 { "(" } else { ", (" });
        for (column, ty) in TYPES.iter().enumerate() {
            let sep = if column == 0 { "" } else { ", " };
            let _ = write!(
                sql,
                "{sep}CAST({} AS {ty})",
                backend.batch_param(row * TYPES.len() + column + 1)
            );
        }
        sql.push(')');
    }
    sql.push_str(
        ") UPDATE jobs SET status = v.status, retried = v.retried, allow_failure = v.allow_failure, \
         exit_code = COALESCE(v.exit_code, jobs.exit_code), failure_reason = COALESCE(v.failure_reason, jobs.failure_reason), \
         queued_at = COALESCE(v.queued_at, jobs.queued_at), scheduled_at = v.scheduled_at, \
         started_at = COALESCE(v.started_at, jobs.started_at), finished_at = COALESCE(v.finished_at, jobs.finished_at), \
         manual_variables = COALESCE(v.manual_variables, jobs.manual_variables), \
         token_hash = CASE WHEN v.status IN ('running', 'canceling') THEN jobs.token_hash ELSE NULL END \
         FROM v WHERE jobs.id = v.id",
    );
    let mut q = sqlx::query(&sql);
    for u in updates {
        q = q
            .bind(u.id)
            .bind(u.status.clone())
            .bind(b(u.retried))
            .bind(b(u.allow_failure))
            .bind(u.exit_code)
            .bind(u.failure_reason.clone())
            .bind(u.queued_at)
            .bind(u.scheduled_at)
            .bind(u.started_at)
            .bind(u.finished_at)
            .bind(u.manual_variables.clone());
    }
    q.execute(&mut **tx).await?;
    Ok(())
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
