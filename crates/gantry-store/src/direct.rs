//! SQLite statements of the job hot path run on the calling thread (issue 36): its
//! writes ([`Direct::write`]) and its reads by key ([`Direct::read`]: a job by its
//! token, for every log patch; a job's dependencies' artifacts, for every payload).
//!
//! sqlx's SQLite driver runs each connection on a thread of its own: a statement is a
//! message to that thread and its rows (and its result) messages back, and a pooled
//! connection going back to its pool is pinged — one more message each way — by a task
//! sqlx spawns. Each message may wake a sleeping thread. On the 2-vCPU machine the job
//! hot path (assignment, acknowledgement, log commit, decision) spent more CPU on those
//! wake-ups than in SQLite: an `UPDATE … RETURNING` and a `SELECT` by key took ≈ 280 µs
//! of CPU through sqlx's pool and ≈ 120 µs here (a loop of 20,000, release build).
//!
//! [`Direct`] is one more connection to the same database file, used by the statements
//! that run once per job or more (a read sees the latest commit, as a read of the pool
//! does); rows read as any row type through [`crate::rows::Fields`]; [`Direct::write`] runs them under a lock in this process,
//! in one `BEGIN IMMEDIATE … COMMIT` when there are several. Its statements are prepared
//! once and kept (`prepare_cached`). It never waits for SQLite's write lock: waiting would
//! block the runtime's thread, and the transaction holding the lock may be sqlx's, whose
//! next statement needs that very thread (`gantry run`'s runtime has one) — a deadlock
//! until the busy timeout. A write that finds the database locked fails at once with
//! nothing written ([`is_busy`]), and [`crate::Store::write_hot`] sends it through sqlx,
//! whose connection thread waits for the lock.
//!
//! The connection checkpoints the WAL as SQLite does by itself, in the commit that takes
//! it past 1,000 pages (`wal_autocheckpoint`), as sqlx's writer did: that commit's caller
//! waits for the checkpoint's copy and `fsync` (a few milliseconds every few hundred
//! jobs), on a runtime worker now. A checkpoint thread of its own was tried: under a
//! steady stream of writes its `PASSIVE` checkpoint never caught up with the last frame,
//! so the WAL never restarted and grew without bound.
//!
//! Parameters follow sqlx's rules, so the same text runs through either: an anonymous
//! `?` takes the next value, counted across the statements of one write; `$n` and `?n`
//! take value `n`. [`Param`] is the one list of values both executors bind
//! ([`Param::bind_to`] for sqlx, PostgreSQL's path).

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags};
use sqlx::Row as _;

use crate::{Result, StoreError};

/// A value bound to a statement (`None`: `NULL`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Param {
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(Some(v))
    }
}

impl From<Option<i64>> for Param {
    fn from(v: Option<i64>) -> Self {
        Param::Int(v)
    }
}

impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(Some(v.to_owned()))
    }
}

impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(Some(v))
    }
}

impl From<Option<String>> for Param {
    fn from(v: Option<String>) -> Self {
        Param::Text(v)
    }
}

impl Param {
    /// Binds this value to a sqlx query, after those it has.
    pub(crate) fn bind_to<'q>(
        self,
        q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        match self {
            Param::Int(v) => q.bind(v),
            Param::Text(v) => q.bind(v),
        }
    }
}

impl rusqlite::ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(match self {
            Param::Int(Some(v)) => ValueRef::Integer(*v),
            Param::Text(Some(v)) => ValueRef::Text(v.as_bytes()),
            Param::Int(None) | Param::Text(None) => ValueRef::Null,
        }))
    }
}

/// Binds `params` to a sqlx query, in order.
pub(crate) fn bind_all<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    params: Vec<Param>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for p in params {
        q = p.bind_to(q);
    }
    q
}

/// A row a write returned (its `RETURNING` clause), read by column name.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    columns: Arc<[String]>,
    values: Vec<Value>,
}

impl Row {
    /// Whether the row has the column `name` (rows of different statements of one write
    /// come back together).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.columns.iter().any(|c| c == name)
    }

    fn value(&self, name: &'static str) -> Result<&Value> {
        self.columns
            .iter()
            .position(|c| c == name)
            .and_then(|i| self.values.get(i))
            .ok_or(StoreError::Unreadable {
                column: name,
                value: "no such column".to_owned(),
            })
    }

    /// Integer column `name` (`NULL` is an error).
    pub(crate) fn int(&self, name: &'static str) -> Result<i64> {
        match self.value(name)? {
            Value::Integer(v) => Ok(*v),
            other => Err(StoreError::Unreadable {
                column: name,
                value: format!("{other:?}"),
            }),
        }
    }

    /// Text column `name` (`NULL` is an error).
    pub(crate) fn text(&self, name: &'static str) -> Result<&str> {
        match self.value(name)? {
            Value::Text(v) => Ok(v),
            other => Err(StoreError::Unreadable {
                column: name,
                value: format!("{other:?}"),
            }),
        }
    }

    /// Status column `name` of `table.column`.
    pub(crate) fn status(
        &self,
        table: &'static str,
        name: &'static str,
    ) -> Result<crate::JobStatus> {
        let value = self.text(name)?;
        crate::JobStatus::parse(value).ok_or_else(|| StoreError::Unreadable {
            column: table,
            value: value.to_owned(),
        })
    }

    /// A sqlx row as a [`Row`] (the rows of a write sqlx ran: PostgreSQL, or an SQLite
    /// database without its own connection here). Integers, floats and text; anything
    /// else reads as `NULL`.
    pub(crate) fn from_any(row: &sqlx::any::AnyRow, columns: &mut Option<Arc<[String]>>) -> Row {
        use sqlx::Column as _;
        let names = row.columns().iter().map(|c| c.name().to_owned());
        let columns = match columns {
            Some(known)
                if known
                    .iter()
                    .map(String::as_str)
                    .eq(row.columns().iter().map(|c| c.name())) =>
            {
                Arc::clone(known)
            }
            _ => {
                let made: Arc<[String]> = names.collect();
                *columns = Some(Arc::clone(&made));
                made
            }
        };
        let values = (0..columns.len())
            .map(|i| {
                if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
                    v.map_or(Value::Null, Value::Integer)
                } else if let Ok(v) = row.try_get::<Option<String>, _>(i) {
                    v.map_or(Value::Null, Value::Text)
                } else if let Ok(v) = row.try_get::<Option<f64>, _>(i) {
                    v.map_or(Value::Null, Value::Real)
                } else {
                    Value::Null
                }
            })
            .collect();
        Row { columns, values }
    }
}

/// The connection of this process's in-thread writes (see the module docs).
pub(crate) struct Direct {
    conn: Mutex<Connection>,
    /// [`crate::Store::read_hot`] reads through it (else through sqlx:
    /// `GANTRY_SQLITE_DIRECT=writes`).
    pub(crate) reads: bool,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Direct")
    }
}

/// Statements kept prepared on the connection: the hot path has a few dozen texts (an
/// assignment's and a decision's vary with their number of rows).
const PREPARED: usize = 128;

impl Direct {
    /// A connection to the SQLite database file `path` (migrated, in WAL mode already),
    /// with the pool's settings; `synchronous` is `NORMAL` or `OFF`.
    pub(crate) fn open(path: &Path, synchronous: &str) -> Result<Self> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(direct_error)?;
        conn.execute_batch(&format!(
            "PRAGMA foreign_keys = ON; PRAGMA synchronous = {synchronous}; PRAGMA mmap_size = 0;"
        ))
        .map_err(direct_error)?;
        // rusqlite waits five seconds by default: never here (see the module docs).
        conn.busy_timeout(std::time::Duration::ZERO)
            .map_err(direct_error)?;
        conn.set_prepared_statement_cache_capacity(PREPARED);
        Ok(Direct {
            conn: Mutex::new(conn),
            reads: true,
        })
    }

    /// Runs one query with `params` and returns its rows: a read of the latest commit
    /// (its own read transaction). In WAL mode a reader does not wait for the writer;
    /// the rare moments it would (a WAL being reset) fail at once as a busy write does
    /// ([`is_busy`]).
    pub(crate) fn read(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>> {
        self.write(&[sql], params)
    }

    /// Runs `statements` in order with `params` (see the module docs for how they bind):
    /// one statement on its own, several in one write transaction. Returns the rows their
    /// `RETURNING` clauses gave, in order. On an error nothing is written.
    pub(crate) fn write(&self, statements: &[&str], params: &[Param]) -> Result<Vec<Row>> {
        let conn = match self.conn.lock() {
            Ok(conn) => conn,
            // A panic mid-write: whatever it left open is rolled back below.
            Err(poisoned) => poisoned.into_inner(),
        };
        if !conn.is_autocommit() {
            conn.execute_batch("ROLLBACK").map_err(direct_error)?;
        }
        let many = statements.len() > 1;
        let run = || -> rusqlite::Result<Vec<Row>> {
            if many {
                conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
            }
            let mut rows = Vec::new();
            let mut next = 0usize;
            for sql in statements {
                let mut stmt = conn.prepare_cached(sql)?;
                for i in 1..=stmt.parameter_count() {
                    let n = match stmt.parameter_name(i) {
                        None => {
                            next += 1;
                            next
                        }
                        Some(name) => name[1..]
                            .parse::<usize>()
                            .map_err(|_| rusqlite::Error::InvalidParameterName(name.to_owned()))?,
                    };
                    let value = params
                        .get(n.wrapping_sub(1))
                        .ok_or(rusqlite::Error::InvalidParameterCount(n, params.len()))?;
                    stmt.raw_bind_parameter(i, value)?;
                }
                let columns: Arc<[String]> =
                    stmt.column_names().into_iter().map(str::to_owned).collect();
                let width = columns.len();
                let mut result = stmt.raw_query();
                while let Some(row) = result.next()? {
                    let values = (0..width)
                        .map(|i| row.get::<_, Value>(i))
                        .collect::<rusqlite::Result<_>>()?;
                    rows.push(Row {
                        columns: Arc::clone(&columns),
                        values,
                    });
                }
            }
            if many {
                conn.prepare_cached("COMMIT")?.execute([])?;
            }
            Ok(rows)
        };
        let result = run();
        if result.is_err() && !conn.is_autocommit() {
            // The error came halfway: nothing of it stays.
            conn.execute_batch("ROLLBACK").map_err(direct_error)?;
        }
        result.map_err(direct_error)
    }
}

impl crate::rows::Fields for Row {
    fn field<T: crate::rows::Field>(&self, name: &'static str) -> Result<T> {
        let value = self.value(name)?;
        T::from_value(value).ok_or_else(|| StoreError::Unreadable {
            column: name,
            value: format!("{value:?}"),
        })
    }
}

/// Whether `e` is a write of [`Direct::write`] that found the database locked (another
/// connection writing), nothing of it written.
pub(crate) fn is_busy(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Direct(rusqlite::Error::SqliteFailure(f, _))
            if f.code == rusqlite::ErrorCode::DatabaseBusy
    )
}

fn direct_error(e: rusqlite::Error) -> StoreError {
    StoreError::Direct(e)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

    use std::time::Duration;

    use super::*;
    use crate::Store;

    async fn sqlite_store(dir: &Path) -> Store {
        let url = format!("sqlite://{}", dir.join("gantry.db").display());
        let store = Store::open(&url).await.expect("store");
        assert!(
            store.direct.is_some(),
            "an SQLite file gets its own connection"
        );
        store
    }

    fn values(rows: &[Row]) -> Vec<Vec<Value>> {
        rows.iter().map(|r| r.values.clone()).collect()
    }

    /// Anonymous `?` take the next value across the statements of one write, `$n` value
    /// `n`, as sqlx binds one text of several statements: the same parameters give the
    /// same rows through either executor.
    #[tokio::test]
    async fn parameters_bind_as_sqlx_binds_them() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = sqlite_store(dir.path()).await;
        let statements = ["SELECT ? AS a, ? AS b", "SELECT ? AS c, $1 AS d, NULL AS e"];
        let params = || {
            vec![
                Param::from(7),
                Param::from("x"),
                Param::from(None::<String>),
            ]
        };
        let direct = store
            .write_hot(&statements, params())
            .await
            .expect("direct");
        assert_eq!(
            values(&direct),
            [
                vec![Value::Integer(7), Value::Text("x".into())],
                vec![Value::Null, Value::Integer(7), Value::Null],
            ]
        );
        assert_eq!(direct[1].int("d").expect("d"), 7);
        assert!(direct[0].has("b") && !direct[0].has("c"));
        store.direct = None;
        let through_sqlx = store.write_hot(&statements, params()).await.expect("sqlx");
        assert_eq!(values(&through_sqlx), values(&direct));
        let one = store
            .write_hot(&["SELECT $2 AS two, $1 AS one"], params())
            .await
            .expect("one statement");
        assert_eq!(
            values(&one),
            [vec![Value::Text("x".into()), Value::Integer(7)]]
        );
    }

    /// A hot read's rows read as the pool's do, column by column ([`crate::rows::Fields`]):
    /// integers, text, `NULL`, a REAL that SQLite hands back as an integer; a value of
    /// another type is an error naming its column, not a panic.
    #[tokio::test]
    async fn a_hot_read_reads_its_columns_as_sqlx_does() {
        use crate::rows::Fields as _;

        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = sqlite_store(dir.path()).await;
        store
            .write_hot(
                &["CREATE TABLE t (i INTEGER, s TEXT, n TEXT, r REAL)"],
                vec![],
            )
            .await
            .expect("table");
        store
            .write_hot(
                &["INSERT INTO t VALUES (?, ?, NULL, 2), (?, ?, 'x', 2.5)"],
                vec![1.into(), "one".into(), 2.into(), "two".into()],
            )
            .await
            .expect("rows");
        let sql = "SELECT i, s, n, r FROM t WHERE i >= $1 ORDER BY i";
        type Read = (i64, String, Option<String>, Option<f64>);
        fn read<R: crate::rows::Fields>(r: &R) -> Result<Read> {
            Ok((r.field("i")?, r.field("s")?, r.field("n")?, r.field("r")?))
        }
        let rows = |hot: &crate::HotRows| -> Vec<Read> {
            match hot {
                crate::HotRows::Direct(rows) => rows.iter().map(|r| read(r).unwrap()).collect(),
                crate::HotRows::Sqlx(rows) => rows.iter().map(|r| read(r).unwrap()).collect(),
            }
        };
        let direct = store.read_hot(sql, vec![1.into()]).await.expect("direct");
        assert!(matches!(direct, crate::HotRows::Direct(_)));
        let want: Vec<Read> = vec![
            (1, "one".into(), None, Some(2.0)),
            (2, "two".into(), Some("x".into()), Some(2.5)),
        ];
        assert_eq!(rows(&direct), want);
        let crate::HotRows::Direct(raw) = &direct else {
            unreachable!()
        };
        match raw[0].field::<i64>("s") {
            Err(StoreError::Unreadable { column, .. }) => assert_eq!(column, "s"),
            other => panic!("text read as an integer: {other:?}"),
        }
        assert!(matches!(
            raw[0].field::<String>("missing"),
            Err(StoreError::Unreadable {
                column: "missing",
                ..
            })
        ));
        store.direct = None;
        let through_sqlx = store.read_hot(sql, vec![1.into()]).await.expect("sqlx");
        assert!(matches!(through_sqlx, crate::HotRows::Sqlx(_)));
        assert_eq!(rows(&through_sqlx), want);
    }

    /// Several statements are one transaction: an error in the second leaves nothing of
    /// the first, and the connection is usable afterwards.
    #[tokio::test]
    async fn a_write_of_several_statements_is_all_or_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = sqlite_store(dir.path()).await;
        store
            .write_hot(
                &["CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)"],
                vec![],
            )
            .await
            .expect("table");
        let failed = store
            .write_hot(
                &[
                    "INSERT INTO t (id, v) VALUES (?, ?)",
                    "INSERT INTO t (id, v) VALUES (?, ?)",
                ],
                vec![1.into(), "a".into(), 1.into(), "b".into()],
            )
            .await;
        assert!(
            matches!(failed, Err(StoreError::Direct(_))),
            "the second row breaks the key: {failed:?}"
        );
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&store.pool)
            .await
            .expect("count");
        assert_eq!(count, 0, "the first insert was rolled back");
        let rows = store
            .write_hot(
                &["INSERT INTO t (id, v) VALUES (?, ?) RETURNING id, v"],
                vec![2.into(), "c".into()],
            )
            .await
            .expect("the next write");
        assert_eq!(
            (rows[0].int("id").unwrap(), rows[0].text("v").unwrap()),
            (2, "c")
        );
        let missing = store
            .write_hot(&["SELECT ? AS a, ? AS b"], vec![1.into()])
            .await;
        assert!(matches!(missing, Err(StoreError::Direct(_))), "{missing:?}");
    }

    /// The connection checkpoints as it commits (SQLite's `wal_autocheckpoint`, as the
    /// pool's writer did), so the WAL does not grow with the writes: 2,000 writes of
    /// 8 KiB each stay within a few megabytes of WAL.
    #[tokio::test]
    async fn the_wal_stays_small_under_the_writes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = sqlite_store(dir.path()).await;
        let direct = store.direct.as_ref().expect("direct");
        let auto = direct
            .conn
            .lock()
            .unwrap()
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get::<_, i64>(0))
            .expect("pragma");
        assert_eq!(auto, 1_000, "SQLite's default");
        store
            .write_hot(&["CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"], vec![])
            .await
            .expect("table");
        let blob = "x".repeat(8 * 1024);
        for i in 0..2_000 {
            store
                .write_hot(
                    &["INSERT INTO t (id, v) VALUES (?, ?)"],
                    vec![i.into(), blob.as_str().into()],
                )
                .await
                .expect("insert");
        }
        let wal = std::fs::metadata(dir.path().join("gantry.db-wal"))
            .expect("the WAL")
            .len();
        assert!(
            wal < 12 * 1024 * 1024,
            "the WAL holds {wal} bytes: not checkpointed"
        );
    }

    /// A write that finds sqlx's writer in a transaction does not wait on the runtime's
    /// thread (the transaction's next statement may need it: a one-thread runtime here):
    /// the in-thread write fails at once, and [`Store::write_hot`] sends it through sqlx,
    /// which waits for the lock.
    #[tokio::test]
    async fn a_write_that_finds_the_database_locked_goes_through_sqlx() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = sqlite_store(dir.path()).await;
        store
            .write_hot(&["CREATE TABLE t (id INTEGER PRIMARY KEY)"], vec![])
            .await
            .expect("table");
        let mut tx = store.begin_write().await.expect("the pool's write lock");
        sqlx::query("INSERT INTO t (id) VALUES (1)")
            .execute(&mut *tx)
            .await
            .expect("insert");
        let direct = store.direct.as_ref().expect("direct");
        let started = std::time::Instant::now();
        let busy = direct.write(&["INSERT INTO t (id) VALUES (3)"], &[]);
        assert!(busy.as_ref().is_err_and(is_busy), "fails at once: {busy:?}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let writer = store.clone();
        let write = tokio::spawn(async move {
            writer
                .write_hot(
                    &[
                        "INSERT INTO t (id) VALUES (2)",
                        "SELECT COUNT(*) AS n FROM t",
                    ],
                    vec![],
                )
                .await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!write.is_finished(), "it waits for the transaction");
        sqlx::query("INSERT INTO t (id) VALUES (4)")
            .execute(&mut *tx)
            .await
            .expect("the transaction goes on meanwhile");
        tx.commit().await.expect("commit");
        let rows = write
            .await
            .expect("the task")
            .expect("the write, once the lock was free");
        assert_eq!(
            rows[0].int("n").unwrap(),
            3,
            "it saw the transaction's rows"
        );
    }
}
