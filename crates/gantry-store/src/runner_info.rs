//! What runners said about themselves (migration 0034): the `info` of their job
//! requests (version, revision, platform, architecture, executor) and the address they
//! called from, written with `contacted_at`, as GitLab's runner heartbeat writes them;
//! and how many jobs each runs now. Read for the web UI's runners page.
//!
//! Cost: a heartbeat is one indexed update; [`Store::runner_infos`] reads every runner
//! (one scan of `runners`), [`Store::running_jobs_by_runner`] the running jobs (the
//! `jobs_by_status` index).

use std::collections::HashMap;

use sqlx::Row;

use crate::{Result, Store};

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

impl Store {
    /// Runner `id` was in contact at `now` (ms) and said `info` about itself.
    pub async fn runner_heartbeat(&self, id: i64, now: i64, info: &RunnerInfo) -> Result<()> {
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
        .execute(&self.writer)
        .await?;
        Ok(())
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
            .map(|r| {
                (
                    r.get("id"),
                    RunnerInfo {
                        version: r.get("version"),
                        revision: r.get("revision"),
                        platform: r.get("platform"),
                        architecture: r.get("architecture"),
                        executor: r.get("executor"),
                        ip_address: r.get("ip_address"),
                    },
                )
            })
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
