//! What runners said about themselves (migrations 0034, 0042): the `info` of their job
//! requests (version, revision, platform, architecture, executor) and the address they
//! called from, written with `contacted_at`, as GitLab's runner heartbeat writes them —
//! on the runner's row and on its *manager*'s, the row of the runner process (the
//! `system_id` it sent; GitLab's `ci_runner_machines`) — and how many jobs each runs now.
//! Read for the runners API and the web UI's runners page.
//!
//! Cost: a heartbeat is one indexed update and one upsert by the managers' unique
//! `(runner_id, system_id)` index, in one transaction; [`Store::runner_infos`] reads every
//! runner (one scan of `runners`), [`Store::running_jobs_by_runner`] the running jobs (the
//! `jobs_by_status` index); [`Store::runner_managers`] one runner's managers by the same
//! unique index, and which of them run a job through `jobs_by_status` (the running jobs
//! are walked in the database; only the asked managers' ids come back).

use std::collections::{HashMap, HashSet};

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::{Result, Store};

/// The `system_id` GitLab gives the manager of a runner that sent none (an old runner):
/// `Ci::RunnerManager`'s `LEGACY_SYSTEM_XID`.
pub const LEGACY_SYSTEM_ID: &str = "<legacy>";

/// A runner's `info` and address, `''` where it said nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunnerInfo {
    pub version: String,
    pub revision: String,
    pub platform: String,
    pub architecture: String,
    pub executor: String,
    pub ip_address: String,
}

impl RunnerInfo {
    fn from_row(r: &AnyRow) -> Self {
        RunnerInfo {
            version: r.get("version"),
            revision: r.get("revision"),
            platform: r.get("platform"),
            architecture: r.get("architecture"),
            executor: r.get("executor"),
            ip_address: r.get("ip_address"),
        }
    }
}

/// One process of a runner (GitLab's runner manager): the runner's token used by the
/// machine `system_id` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerManager {
    pub id: i64,
    pub runner_id: i64,
    pub system_id: String,
    pub info: RunnerInfo,
    pub created_at: i64,
    pub contacted_at: Option<i64>,
    /// It runs a job now (a job it took is `running` or `canceling`).
    pub busy: bool,
}

const MANAGER_COLUMNS: &str = "id, runner_id, system_id, version, revision, platform, architecture, executor, ip_address, created_at, contacted_at";

/// A new manager's row ([`manager_insert`]'s binds), before its `ON CONFLICT` clause.
const MANAGER_INSERT: &str = "INSERT INTO runner_managers \
     (runner_id, system_id, created_at, contacted_at, version, revision, platform, architecture, executor, ip_address) \
     VALUES ($1, $2, $3, $3, $4, $5, $6, $7, $8, $9)";

/// A heartbeat's upsert: a known manager gets the new contact time and info.
const MANAGER_HEARTBEAT: &str = "ON CONFLICT (runner_id, system_id) DO UPDATE SET contacted_at = excluded.contacted_at, \
     version = excluded.version, revision = excluded.revision, platform = excluded.platform, \
     architecture = excluded.architecture, executor = excluded.executor, ip_address = excluded.ip_address \
     RETURNING id";

/// `sql` ([`MANAGER_INSERT`] and its conflict clause) bound to runner `id`'s process
/// `system_id` seen at `now` saying `info`.
fn manager_insert<'q>(
    sql: &'q str,
    id: i64,
    system_id: &'q str,
    now: i64,
    info: &'q RunnerInfo,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    sqlx::query(sql)
        .bind(id)
        .bind(system_id)
        .bind(now)
        .bind(info.version.as_str())
        .bind(info.revision.as_str())
        .bind(info.platform.as_str())
        .bind(info.architecture.as_str())
        .bind(info.executor.as_str())
        .bind(info.ip_address.as_str())
}

/// Which of the managers named by `marks` (`$1, $2, …`) have a running job.
pub(crate) fn busy_managers_sql(marks: &str) -> String {
    format!(
        "SELECT DISTINCT runner_manager_id FROM jobs \
         WHERE status IN ('running', 'canceling') AND runner_manager_id IN ({marks})"
    )
}

fn manager_from_row(r: &AnyRow, busy: &HashSet<i64>) -> RunnerManager {
    let id: i64 = r.get("id");
    RunnerManager {
        id,
        runner_id: r.get("runner_id"),
        system_id: r.get("system_id"),
        info: RunnerInfo::from_row(r),
        created_at: r.get("created_at"),
        contacted_at: r.get("contacted_at"),
        busy: busy.contains(&id),
    }
}

impl Store {
    /// Runner `id`'s process `system_id` was in contact at `now` (ms) and said `info`
    /// about itself: written on the runner's row and on its manager's, which is created
    /// the first time (one transaction). Returns the manager's id.
    pub async fn runner_heartbeat(
        &self,
        id: i64,
        system_id: &str,
        now: i64,
        info: &RunnerInfo,
    ) -> Result<i64> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "UPDATE runners SET contacted_at = $1, version = $2, revision = $3, platform = $4, \
             architecture = $5, executor = $6, ip_address = $7 WHERE id = $8",
        )
        .bind(now)
        .bind(&info.version)
        .bind(&info.revision)
        .bind(&info.platform)
        .bind(&info.architecture)
        .bind(&info.executor)
        .bind(&info.ip_address)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let sql = format!("{MANAGER_INSERT} {MANAGER_HEARTBEAT}");
        let manager = manager_insert(&sql, id, system_id, now, info)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(manager.get("id"))
    }

    /// Runner `id`'s process `system_id` authenticated at `now` without asking for a job
    /// (`POST /runners/verify`): its manager is created if it has none, with `info`;
    /// an existing one is left as it is (GitLab updates contact times only when a runner
    /// asks for jobs).
    pub async fn ensure_runner_manager(
        &self,
        id: i64,
        system_id: &str,
        now: i64,
        info: &RunnerInfo,
    ) -> Result<()> {
        let sql = format!("{MANAGER_INSERT} ON CONFLICT (runner_id, system_id) DO NOTHING");
        manager_insert(&sql, id, system_id, now, info)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    /// Runner `id`'s managers, oldest first.
    pub async fn runner_managers(&self, id: i64) -> Result<Vec<RunnerManager>> {
        let rows = sqlx::query(&format!(
            "SELECT {MANAGER_COLUMNS} FROM runner_managers WHERE runner_id = $1 ORDER BY id"
        ))
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        let ids: Vec<i64> = rows.iter().map(|r| r.get("id")).collect();
        let busy = self.busy_managers(&ids).await?;
        Ok(rows.iter().map(|r| manager_from_row(r, &busy)).collect())
    }

    /// Every runner's managers, by runner id, oldest first (one scan of
    /// `runner_managers`; `busy` is not read: false).
    pub async fn all_runner_managers(&self) -> Result<HashMap<i64, Vec<RunnerManager>>> {
        let rows = sqlx::query(&format!(
            "SELECT {MANAGER_COLUMNS} FROM runner_managers ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        let mut out: HashMap<i64, Vec<RunnerManager>> = HashMap::new();
        for r in &rows {
            let m = manager_from_row(r, &HashSet::new());
            out.entry(m.runner_id).or_default().push(m);
        }
        Ok(out)
    }

    /// The managers of `ids` that still exist (a deleted one is absent), by id.
    pub async fn runner_managers_by_id(&self, ids: &[i64]) -> Result<HashMap<i64, RunnerManager>> {
        let mut out = HashMap::new();
        for chunk in ids.chunks(100) {
            let marks = (1..=chunk.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql =
                format!("SELECT {MANAGER_COLUMNS} FROM runner_managers WHERE id IN ({marks})");
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            let rows = query.fetch_all(&self.pool).await?;
            let found: Vec<i64> = rows.iter().map(|r| r.get("id")).collect();
            let busy = self.busy_managers(&found).await?;
            out.extend(rows.iter().map(|r| {
                let m = manager_from_row(r, &busy);
                (m.id, m)
            }));
        }
        Ok(out)
    }

    /// Which of the managers `ids` run a job now: per 100 ids, one read that walks the
    /// running jobs by `jobs_by_status` in the database and returns only theirs (O(ids)
    /// rows back, not one per running job).
    async fn busy_managers(&self, ids: &[i64]) -> Result<HashSet<i64>> {
        let mut busy = HashSet::new();
        for chunk in ids.chunks(100) {
            let marks = (1..=chunk.len())
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", ");
            let sql = busy_managers_sql(&marks);
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(*id);
            }
            for r in query.fetch_all(&self.pool).await? {
                busy.insert(r.get::<i64, _>("runner_manager_id"));
            }
        }
        Ok(busy)
    }

    /// Delete runner `id`'s manager `system_id` (`DELETE /runners/managers`); false when
    /// it has none of that id. Its jobs keep their runner and show no manager.
    pub async fn delete_runner_manager(&self, id: i64, system_id: &str) -> Result<bool> {
        let r = sqlx::query("DELETE FROM runner_managers WHERE runner_id = $1 AND system_id = $2")
            .bind(id)
            .bind(system_id)
            .execute(&self.writer)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Every runner's info, by runner id.
    pub async fn runner_infos(&self) -> Result<HashMap<i64, RunnerInfo>> {
        let rows = sqlx::query(
            "SELECT id, version, revision, platform, architecture, executor, ip_address FROM runners",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("id"), RunnerInfo::from_row(r)))
            .collect())
    }

    /// How many jobs each runner runs now (`running`), by runner id; a runner without
    /// any is absent.
    pub async fn running_jobs_by_runner(&self) -> Result<HashMap<i64, i64>> {
        let rows = sqlx::query(
            "SELECT runner_id, COUNT(*) AS n FROM jobs WHERE status = 'running' AND runner_id IS NOT NULL GROUP BY runner_id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("runner_id"), r.get("n")))
            .collect())
    }
}
