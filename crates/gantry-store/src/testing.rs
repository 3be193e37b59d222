//! Databases for tests, in one place: which backend a test suite runs on is chosen by
//! `GANTRY_TEST_DATABASE` (`sqlite`, the default, or `postgres`); PostgreSQL databases
//! are created fresh, one per call, in the server `GANTRY_TEST_POSTGRES_URL` names
//! (`scripts/test-postgres.sh start` starts one and prints both variables).

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// Names the backend test suites run on.
pub const TEST_DATABASE: &str = "GANTRY_TEST_DATABASE";
/// An admin URL of the PostgreSQL server for tests (`postgres://postgres@127.0.0.1:PORT/postgres`).
pub const TEST_POSTGRES_URL: &str = "GANTRY_TEST_POSTGRES_URL";

/// The URL of the test database that stands at `sqlite_file`: that SQLite file, or, when
/// `GANTRY_TEST_DATABASE=postgres`, a PostgreSQL database created on the first call and
/// named in a file beside it (`<sqlite_file>.postgres-url`), so a test that reopens "the
/// same file" (a restart) reopens the same database.
pub async fn database_url(sqlite_file: &Path) -> Result<String, String> {
    match std::env::var(TEST_DATABASE).as_deref() {
        Ok("postgres") => {
            let mut name = sqlite_file.as_os_str().to_owned();
            name.push(".postgres-url");
            let sidecar = std::path::PathBuf::from(name);
            if let Ok(url) = std::fs::read_to_string(&sidecar) {
                return Ok(url);
            }
            let url = postgres_database().await?;
            std::fs::write(&sidecar, &url)
                .map_err(|e| format!("write {}: {e}", sidecar.display()))?;
            Ok(url)
        }
        Ok("sqlite") | Err(_) => Ok(sqlite_url(sqlite_file)),
        Ok(other) => Err(format!(
            "{TEST_DATABASE}={other}: expected sqlite or postgres"
        )),
    }
}

/// `sqlite://<file>`.
pub fn sqlite_url(file: &Path) -> String {
    format!("sqlite://{}", file.display())
}

/// A new, empty database in the `GANTRY_TEST_POSTGRES_URL` server; its URL.
pub async fn postgres_database() -> Result<String, String> {
    use sqlx::Executor as _;
    static N: AtomicU32 = AtomicU32::new(0);
    let admin = std::env::var(TEST_POSTGRES_URL).map_err(|_| {
        format!(
            "{TEST_POSTGRES_URL} is not set: tests on PostgreSQL need a server (eval \"$(scripts/test-postgres.sh start)\" starts one; scripts/test does it)"
        )
    })?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "gantry_test_{}_{}_{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&admin)
        .await
        .map_err(|e| format!("connect to {}: {e}", crate::redact_url(&admin)))?;
    let created = pool
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await;
    pool.close().await;
    created.map_err(|e| format!("create database {name}: {e}"))?;
    match admin.rsplit_once('/') {
        Some((server, _)) => Ok(format!("{server}/{name}")),
        None => Err(format!("{TEST_POSTGRES_URL} names no database: {admin}")),
    }
}
