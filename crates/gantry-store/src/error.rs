/// What can go wrong talking to the database. Messages read after "failed to".
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("open the database {url}: {source}")]
    Open {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("migrate the database schema: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("run a database query: {0}")]
    Query(#[from] sqlx::Error),
    /// SQLite through the hot path's own connection (`direct.rs`).
    #[error("run a database query: {0}")]
    Direct(#[source] rusqlite::Error),
    #[error("find the {0}")]
    NotFound(&'static str),
    #[error("store it: {0}")]
    Conflict(String),
    #[error("apply the change: the pipeline changed meanwhile")]
    Stale,
    /// A change guarded by a job's token ([`crate::JobTokenGuard`]) found the job holding
    /// another token, or none (it stopped executing, or went back to the queue).
    #[error("apply the change: job {job_id} no longer runs with the token it was made for")]
    TokenRevoked { job_id: i64 },
    #[error("use the database: {0}")]
    Unsupported(String),
    /// A row holds what Gantry never writes (e.g. an unknown status): `table.column` and
    /// the value.
    #[error("read {column}: it holds {value:?}, which is not a known value")]
    Unreadable { column: &'static str, value: String },
}

impl StoreError {
    /// A unique-constraint violation as a conflict with `message`; anything else as is.
    pub(crate) fn conflict_or(e: sqlx::Error, message: String) -> Self {
        match &e {
            sqlx::Error::Database(d) if d.is_unique_violation() => StoreError::Conflict(message),
            _ => StoreError::Query(e),
        }
    }
}
