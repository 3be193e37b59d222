//! `gantry-store`: Gantry's database access and migrations.
//!
//! One [`Store`] over sqlx's `Any` driver: the backend is chosen once, from the URL, in
//! [`Backend::from_url`]; every query in this crate is portable SQL (positional `$N`
//! parameters in increasing order — `?` on SQLite in the statements of many rows,
//! `Backend::batch_param` — no dialect functions, integers as `BIGINT`), so
//! PostgreSQL is a second migration folder (`migrations/postgres`, the same versions as
//! `migrations/sqlite`), not a second implementation. The store's tests run against both.
//!
//! The store persists decisions; it never makes scheduling decisions. Multi-row changes
//! happen in one transaction, and pipeline-wide changes are guarded by an optimistic
//! `lock_version`, so two coordinators (or two requests) cannot interleave half-writes.
//!
//! On SQLite the job hot path's writes (`write_hot`: an assignment, a decision, an
//! acknowledgement, a log's commit) and its reads (`read_hot`: a job by its token, a
//! job's dependencies' artifacts) run the same text and parameters through rusqlite on
//! the calling thread (`direct`), not sqlx's connection thread; row types read from
//! either executor's rows through `rows::Fields`. `GANTRY_SQLITE_DIRECT=off` sends them
//! through sqlx too.
//!
//! Otherwise only `begin_write` differs between the backends (`BEGIN IMMEDIATE` on SQLite, `BEGIN` on
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
mod artifacts;
mod direct;
mod environments;
mod error;
mod instance_variables;
mod job_resources;
mod job_token_scope;
mod merge_requests;
mod pages;
mod pipelines;
mod projects;
mod queue;
mod releases;
mod resource_groups;
mod rows;
mod runner_info;
mod runners;
mod schedules;
mod sessions;
mod settings;
pub mod testing;
mod traces;
mod triggers;
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
pub use pages::{NewPagesDeployment, PagesDeployment};
pub use releases::{NewRelease, Release};
pub use resource_groups::{DEFAULT_PROCESS_MODE, ResourceGroup, ResourceJob};
pub use rows::*;
pub use runner_info::{LEGACY_SYSTEM_ID, RunnerInfo, RunnerManager};
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

/// The rows of [`Store::read_hot`], from whichever executor ran it.
enum HotRows {
    Direct(Vec<direct::Row>),
    Sqlx(Vec<sqlx::any::AnyRow>),
}

impl HotRows {
    /// Every row as a `T`.
    fn read<T: rows::FromFields>(&self) -> Result<Vec<T>> {
        match self {
            HotRows::Direct(rows) => rows.iter().map(T::from_fields).collect(),
            HotRows::Sqlx(rows) => rows.iter().map(T::from_fields).collect(),
        }
    }
}

/// The in-thread connection ([`direct::Direct`]) to the SQLite database of `url`:
/// `None` for a database in memory or with `GANTRY_SQLITE_DIRECT=off`;
/// `GANTRY_SQLITE_DIRECT=writes` leaves the reads on sqlx (as before the reads moved:
/// the benchmark's baseline for them).
fn open_direct(
    url: &str,
    durability: Durability,
) -> Result<Option<std::sync::Arc<direct::Direct>>> {
    let setting = std::env::var("GANTRY_SQLITE_DIRECT").unwrap_or_default();
    if setting == "off" {
        return Ok(None);
    }
    let options =
        sqlx::sqlite::SqliteConnectOptions::from_str(url).map_err(|e| StoreError::Open {
            url: redact_url(url),
            source: e,
        })?;
    let path = options.get_filename();
    if path.as_os_str().is_empty() || path.to_string_lossy().contains(":memory:") {
        return Ok(None);
    }
    let synchronous = match durability {
        Durability::Durable => "NORMAL",
        Durability::Throwaway => "OFF",
    };
    let mut direct = direct::Direct::open(path, synchronous)?;
    direct.reads = setting != "writes";
    Ok(Some(std::sync::Arc::new(direct)))
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
    /// How many times a job was looked up by its token ([`Store::token_lookups`]).
    token_lookups: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// How many times a job's log state was read ([`Store::trace_state_reads`]).
    trace_state_reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// SQLite: the connection of the job hot path's statements, run on the calling
    /// thread ([`direct`]); `None` on PostgreSQL, for a database in memory, or with
    /// `GANTRY_SQLITE_DIRECT=off` (every statement through sqlx, as before issue 36's
    /// last steps: for comparing them in one build).
    direct: Option<std::sync::Arc<direct::Direct>>,
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
                            // No memory map of the file: in WAL mode a connection unmaps the
                            // whole file whenever another one committed since its last read
                            // (`sqlite3PagerSharedLock`), and each unmap is a TLB shootdown
                            // across cores. With a commit every few milliseconds that cost
                            // more than a `pread` per page: `gantry bench scale`, 1,000 jobs,
                            // 2.5 ms of CPU per job without the map, 3.1 ms with 256 MiB.
                            sqlx::query("PRAGMA mmap_size = 0")
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
        let direct = match backend {
            Backend::Sqlite => open_direct(&url, durability)?,
            Backend::Postgres => None,
        };
        Ok(Self {
            pool,
            writer,
            backend,
            token_lookups: std::sync::Arc::default(),
            trace_state_reads: std::sync::Arc::default(),
            direct,
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

    /// A write of the job hot path: `statements` in order with `params` (bound as
    /// [`direct`] describes), one on its own or several in one write transaction; the rows
    /// of their `RETURNING` clauses. On SQLite on this thread ([`direct::Direct::write`]),
    /// unless the database is locked (another connection writing: [`direct::is_busy`]);
    /// otherwise through sqlx — several statements in one trip
    /// ([`Store::write_in_one_trip`]), which only SQLite takes.
    async fn write_hot(
        &self,
        statements: &[&str],
        params: Vec<direct::Param>,
    ) -> Result<Vec<direct::Row>> {
        if let Some(direct) = &self.direct {
            match direct.write(statements, &params) {
                Err(e) if direct::is_busy(&e) => {}
                done => return done,
            }
        }
        let rows = match (statements, self.backend) {
            ([one], _) => {
                direct::bind_all(sqlx::query(one), params)
                    .fetch_all(&self.writer)
                    .await?
            }
            (_, Backend::Sqlite) => {
                let text = format!("BEGIN IMMEDIATE; {}; COMMIT", statements.join("; "));
                self.write_in_one_trip(direct::bind_all(sqlx::query(&text), params))
                    .await?
            }
            (_, Backend::Postgres) => {
                return Err(StoreError::Unsupported(
                    "several statements in one trip on PostgreSQL".to_owned(),
                ));
            }
        };
        let mut columns = None;
        Ok(rows
            .iter()
            .map(|r| direct::Row::from_any(r, &mut columns))
            .collect())
    }

    /// A read of the job hot path (one query, `params` bound as [`direct`] describes):
    /// on SQLite on this thread ([`direct::Direct::read`]) unless the database is busy,
    /// otherwise through sqlx's readers. The rows read as any [`rows::FromFields`] type
    /// ([`HotRows::read`]).
    async fn read_hot(&self, sql: &str, params: Vec<direct::Param>) -> Result<HotRows> {
        if let Some(direct) = self.direct.as_ref().filter(|d| d.reads) {
            match direct.read(sql, &params) {
                Err(e) if direct::is_busy(&e) => {}
                done => return done.map(HotRows::Direct),
            }
        }
        Ok(HotRows::Sqlx(
            direct::bind_all(sqlx::query(sql), params)
                .fetch_all(&self.pool)
                .await?,
        ))
    }

    /// SQLite: a write transaction sent as one text — `BEGIN IMMEDIATE; …; COMMIT` —
    /// in one round trip to the connection's thread instead of one per statement (sqlx
    /// hands each statement to the thread and waits for its answer: two thread switches
    /// each). sqlx runs a text's statements in order and binds anonymous `?` parameters
    /// in order across them (a numbered `$n` would not move the count on: use `?` only).
    /// Returns the rows of the statements' `RETURNING` clauses, in order; a statement
    /// cannot branch on an earlier one's result except in SQL (`changes()`).
    ///
    /// An error halfway leaves the transaction open on the connection: it is rolled back
    /// there, or the connection is closed, before the connection goes back to the pool.
    async fn write_in_one_trip<'q>(
        &self,
        batch: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> Result<Vec<sqlx::any::AnyRow>> {
        let mut conn = self.writer.acquire().await?;
        match batch.fetch_all(&mut *conn).await {
            Ok(rows) => Ok(rows),
            Err(e) => {
                match sqlx::query("ROLLBACK").execute(&mut *conn).await {
                    Ok(_) => {}
                    // The error came before `BEGIN` or ended the transaction itself.
                    Err(sqlx::Error::Database(d)) if d.message().contains("no transaction") => {}
                    Err(_) => conn.close_on_drop(),
                }
                Err(e.into())
            }
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    /// SQLite's plan of `sql` (its parameters bound to NULL), one line per step.
    async fn plan(store: &Store, sql: &str, parameters: usize) -> String {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let mut query = sqlx::query(&explain);
        for _ in 0..parameters {
            query = query.bind(None::<i64>);
        }
        let rows = query.fetch_all(&store.pool).await.expect("a plan");
        rows.iter()
            .map(|r| r.get::<String, _>(3))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The statements that run against a project's or the instance's whole history (a
    /// pipeline's creation, `needs:project`, the timers' passes, a restart) go through the
    /// indexes meant for them: SQLite has no statistics to choose by, and a wrong choice
    /// reads every pipeline, every successful job or every artifact.
    #[tokio::test]
    async fn the_reads_over_history_use_their_indexes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("gantry.db").display());
        let store = Store::open(&url).await.expect("store");
        let cancelable = plan(&store, &pipelines::cancelable_of_ref_sql(), 4).await;
        assert_eq!(
            cancelable,
            "SEARCH pipelines USING INDEX pipelines_cancelable \
             (project_id=? AND ref_name=? AND tag=? AND id<?)"
        );
        let latest = plan(&store, pipelines::LATEST_SUCCESSFUL_JOB_OF_REF, 3).await;
        assert_eq!(
            latest,
            "SEARCH j USING INDEX jobs_latest_success_of_ref \
             (project_id=? AND ref_name=? AND name=?)"
        );
        let archive = plan(&store, pipelines::LATEST_ARTIFACTS_JOB_OF_REF, 3).await;
        for step in [
            "SEARCH j USING INDEX jobs_by_pipeline (pipeline_id=?)",
            "SEARCH f USING COVERING INDEX pipelines_by_root (root_id=?)",
            "SEARCH pipelines USING INDEX pipelines_success_by_ref (project_id=? AND ref_name=?)",
        ] {
            assert!(archive.contains(step), "{archive}");
        }
        let expired = ArtifactSelection::ExpiredBy(0);
        let expiry = plan(&store, &artifacts::take_artifacts_sql(&expired), 2).await;
        assert!(
            expiry.contains("SEARCH a USING INDEX artifacts_expiry (expire_at>? AND expire_at<?)"),
            "{expiry}"
        );
        let active = plan(&store, &pipelines::active_pipelines_sql(), 0).await;
        assert_eq!(active, "SCAN pipelines USING INDEX pipelines_unfinished");
        let executing = plan(&store, queue::EXECUTING_JOBS_OF_RUNNER, 1).await;
        assert!(
            executing.starts_with("SEARCH jobs USING INDEX jobs_by_status (status=?)"),
            "{executing}"
        );
        let mut pages = Vec::new();
        for (of, index) in [
            (
                JobsOf::Project(1),
                "jobs_by_project (project_id=? AND bridge=?)",
            ),
            (JobsOf::Runner(1), "jobs_by_runner (runner_id=?)"),
        ] {
            for statuses in [0, 2] {
                let filter = pipelines::jobs_page_filter(of, statuses);
                let page = format!("SELECT id FROM jobs WHERE {filter} ORDER BY id DESC LIMIT 20");
                let page = plan(&store, &page, statuses + 1).await;
                assert!(page.contains(index), "{page}");
                assert!(!page.contains("TEMP B-TREE"), "{page}");
                let count = format!("SELECT COUNT(*) FROM jobs WHERE {filter}");
                pages.push(plan(&store, &count, statuses + 1).await);
                pages.push(page);
            }
        }
        let gone = plan(&store, runners::RUNNER_JOBS_LEFT, 1).await;
        assert!(gone.contains("jobs_by_runner (runner_id=?)"), "{gone}");
        // Whether a runner's managers run a job: the running jobs by status, never the
        // whole table (a server's history) nor a runner's every job.
        let busy = plan(&store, &runner_info::busy_managers_sql("$1, $2"), 2).await;
        assert!(busy.contains("jobs_by_status (status=?)"), "{busy}");
        assert!(!busy.contains("SCAN jobs"), "{busy}");
        let env = plan(&store, environments::ENVIRONMENT_JOBS_LEFT, 1).await;
        assert!(
            env.contains("jobs_by_environment (environment_id=?)"),
            "{env}"
        );
        // No step reads a whole table.
        for statement in [latest, archive, expiry].into_iter().chain(pages) {
            for table in ["pipelines", "jobs", "artifacts", "a", "j"] {
                let scan = format!("\nSCAN {table}\n");
                assert!(!format!("\n{statement}\n").contains(&scan), "{statement}");
            }
        }
    }
}
