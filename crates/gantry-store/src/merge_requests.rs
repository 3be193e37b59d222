//! Merge requests and pull requests (migration 0028): the ones `gantry run
//! --merge-request` opens and those forges' webhooks describe, the pipelines created for
//! them (`merge_request_pipelines`, written in the pipeline's own transaction by
//! [`crate::Store::create_pipeline`]) and each project's webhook secret (sealed by the
//! coordinator; the store keeps text). The store keeps the rows; which pipelines a merge
//! request gets is the coordinator's decision.
//!
//! Complexity: every read is by primary key or by the `(project_id, iid)` and
//! `(project_id, source_branch, state)` indexes; a branch's open requests are read at
//! most `limit` rows at a time (GitLab's `MAX_OPEN_MERGE_REQUESTS_REFS`, 4).

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::rows::flag;
use crate::{Pipeline, Result, Store, StoreError, b};

/// A merge request (GitLab's) or pull request (GitHub's, Gitea's) of a project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeRequest {
    pub id: i64,
    pub project_id: i64,
    /// The forge's number of it: GitLab's iid, GitHub's and Gitea's pull request number.
    pub iid: i64,
    /// `local` (`gantry run`), `gitlab`, `github` or `gitea`.
    pub forge: String,
    /// `opened`, `closed` or `merged` (GitLab's states).
    pub state: String,
    pub title: String,
    pub description: String,
    pub source_branch: String,
    pub target_branch: String,
    /// The source branch's head at the last event.
    pub source_sha: String,
    /// The target branch's head at the last event.
    pub target_sha: String,
    /// The repositories (`owner/name` or the forge's path) the branches live in.
    pub source_repository: String,
    pub target_repository: String,
    pub draft: bool,
    pub labels: Vec<String>,
    /// The author's login on the forge.
    pub author: String,
    /// The request's page on the forge.
    pub web_url: String,
    pub created_at: i64,
    pub updated_at: i64,
}

impl MergeRequest {
    const COLUMNS: &'static str = "id, project_id, iid, forge, state, title, description, source_branch, target_branch, \
         source_sha, target_sha, source_repository, target_repository, draft, labels, author, web_url, created_at, updated_at";

    fn from_row(r: &AnyRow) -> Self {
        let labels: String = r.get("labels");
        Self {
            id: r.get("id"),
            project_id: r.get("project_id"),
            iid: r.get("iid"),
            forge: r.get("forge"),
            state: r.get("state"),
            title: r.get("title"),
            description: r.get("description"),
            source_branch: r.get("source_branch"),
            target_branch: r.get("target_branch"),
            source_sha: r.get("source_sha"),
            target_sha: r.get("target_sha"),
            source_repository: r.get("source_repository"),
            target_repository: r.get("target_repository"),
            draft: flag(r, "draft"),
            labels: labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            author: r.get("author"),
            web_url: r.get("web_url"),
            created_at: r.get("created_at"),
            updated_at: r.get("updated_at"),
        }
    }
}

/// A merge request as an event describes it (`id`, `created_at`, `updated_at` are the
/// store's). [`Store::upsert_merge_request`] creates it or brings the row of its
/// `(project_id, iid)` to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewMergeRequest {
    pub project_id: i64,
    pub iid: i64,
    pub forge: String,
    pub state: String,
    pub title: String,
    pub description: String,
    pub source_branch: String,
    pub target_branch: String,
    pub source_sha: String,
    pub target_sha: String,
    pub source_repository: String,
    pub target_repository: String,
    pub draft: bool,
    pub labels: Vec<String>,
    pub author: String,
    pub web_url: String,
}

/// A merge request pipeline's merge request and the commits it ran for (GitLab's
/// `ci_pipelines.merge_request_id`, `source_sha`, `target_sha`, and the diff's base).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeRequestLink {
    pub merge_request_id: i64,
    /// `detached` or `merged_result`.
    pub event_type: String,
    /// The source branch's head the pipeline ran for.
    pub source_sha: String,
    /// The target branch's head then.
    pub target_sha: String,
    /// The merge base of the two (`CI_MERGE_REQUEST_DIFF_BASE_SHA`), when there is one.
    pub base_sha: Option<String>,
}

impl Store {
    /// Creates merge request `(m.project_id, m.iid)` or updates it to `m`, and returns
    /// its row.
    pub async fn upsert_merge_request(
        &self,
        m: &NewMergeRequest,
        now: i64,
    ) -> Result<MergeRequest> {
        let row = sqlx::query(&format!(
            "INSERT INTO merge_requests (project_id, iid, forge, state, title, description, source_branch, \
             target_branch, source_sha, target_sha, source_repository, target_repository, draft, labels, author, \
             web_url, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17) \
             ON CONFLICT (project_id, iid) DO UPDATE SET forge = excluded.forge, state = excluded.state, \
             title = excluded.title, description = excluded.description, source_branch = excluded.source_branch, \
             target_branch = excluded.target_branch, source_sha = excluded.source_sha, \
             target_sha = excluded.target_sha, source_repository = excluded.source_repository, \
             target_repository = excluded.target_repository, draft = excluded.draft, labels = excluded.labels, \
             author = excluded.author, web_url = excluded.web_url, updated_at = excluded.updated_at \
             RETURNING {}",
            MergeRequest::COLUMNS
        ))
        .bind(m.project_id)
        .bind(m.iid)
        .bind(&m.forge)
        .bind(&m.state)
        .bind(&m.title)
        .bind(&m.description)
        .bind(&m.source_branch)
        .bind(&m.target_branch)
        .bind(&m.source_sha)
        .bind(&m.target_sha)
        .bind(&m.source_repository)
        .bind(&m.target_repository)
        .bind(b(m.draft))
        .bind(m.labels.join(","))
        .bind(&m.author)
        .bind(&m.web_url)
        .bind(now)
        .fetch_one(&self.writer)
        .await?;
        Ok(MergeRequest::from_row(&row))
    }

    /// The iid a new local merge request of the project gets: one above the highest.
    pub async fn next_merge_request_iid(&self, project_id: i64) -> Result<i64> {
        let row = sqlx::query(
            "SELECT COALESCE(MAX(iid), 0) + 1 FROM merge_requests WHERE project_id = $1",
        )
        .bind(project_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.get(0))
    }

    pub async fn merge_request(&self, id: i64) -> Result<MergeRequest> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM merge_requests WHERE id = $1",
            MergeRequest::COLUMNS
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| MergeRequest::from_row(&r))
            .ok_or(StoreError::NotFound("merge request"))
    }

    pub async fn merge_request_by_iid(&self, project_id: i64, iid: i64) -> Result<MergeRequest> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM merge_requests WHERE project_id = $1 AND iid = $2",
            MergeRequest::COLUMNS
        ))
        .bind(project_id)
        .bind(iid)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| MergeRequest::from_row(&r))
            .ok_or(StoreError::NotFound("merge request"))
    }

    /// The project's merge requests, newest first; only those in `state` when given.
    pub async fn merge_requests(
        &self,
        project_id: i64,
        state: Option<&str>,
    ) -> Result<Vec<MergeRequest>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM merge_requests WHERE project_id = $1 AND ($2 = '' OR state = $2) \
             ORDER BY id DESC",
            MergeRequest::COLUMNS
        ))
        .bind(project_id)
        .bind(state.unwrap_or(""))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(MergeRequest::from_row).collect())
    }

    /// The open merge requests from `branch` of the project, newest first, at most
    /// `limit` (GitLab's `Ci::Pipeline#related_merge_requests.opened`).
    pub async fn open_merge_requests_from(
        &self,
        project_id: i64,
        branch: &str,
        limit: i64,
    ) -> Result<Vec<MergeRequest>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM merge_requests WHERE project_id = $1 AND source_branch = $2 \
             AND state = 'opened' ORDER BY id DESC LIMIT $3",
            MergeRequest::COLUMNS
        ))
        .bind(project_id)
        .bind(branch)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(MergeRequest::from_row).collect())
    }

    /// The merge request a pipeline ran for, with what it ran for; `None` for any other
    /// pipeline.
    pub async fn pipeline_merge_request(
        &self,
        pipeline_id: i64,
    ) -> Result<Option<(MergeRequestLink, MergeRequest)>> {
        let cols: Vec<String> = MergeRequest::COLUMNS
            .split(", ")
            .map(|c| format!("m.{c}"))
            .collect();
        let row = sqlx::query(&format!(
            "SELECT l.merge_request_id, l.event_type, l.source_sha AS link_source_sha, \
             l.target_sha AS link_target_sha, l.base_sha, {} \
             FROM merge_request_pipelines l JOIN merge_requests m ON m.id = l.merge_request_id \
             WHERE l.pipeline_id = $1",
            cols.join(", ")
        ))
        .bind(pipeline_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| {
            (
                MergeRequestLink {
                    merge_request_id: r.get("merge_request_id"),
                    event_type: r.get("event_type"),
                    source_sha: r.get("link_source_sha"),
                    target_sha: r.get("link_target_sha"),
                    base_sha: r.get("base_sha"),
                },
                MergeRequest::from_row(&r),
            )
        }))
    }

    /// The pipelines of a merge request, newest first.
    pub async fn merge_request_pipelines(&self, merge_request_id: i64) -> Result<Vec<Pipeline>> {
        let cols: Vec<String> = Pipeline::COLUMNS
            .split(',')
            .map(|c| format!("p.{}", c.trim()))
            .collect();
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipelines p JOIN merge_request_pipelines l ON l.pipeline_id = p.id \
             WHERE l.merge_request_id = $1 ORDER BY p.id DESC",
            cols.join(", ")
        ))
        .bind(merge_request_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Pipeline::from_row).collect()
    }

    /// Whether the merge request has a pipeline of `event_type` for source head
    /// `source_sha` already (a forge's event and the push that caused it are one change).
    pub async fn merge_request_pipeline_exists(
        &self,
        merge_request_id: i64,
        event_type: &str,
        source_sha: &str,
    ) -> Result<bool> {
        let row = sqlx::query(
            "SELECT COUNT(*) FROM merge_request_pipelines WHERE merge_request_id = $1 \
             AND event_type = $2 AND source_sha = $3",
        )
        .bind(merge_request_id)
        .bind(event_type)
        .bind(source_sha)
        .fetch_one(&self.pool)
        .await?;
        Ok(row.get::<i64, _>(0) > 0)
    }

    /// Sets (or, with `None`, removes) the project's forge webhook secret, as the
    /// coordinator sealed it.
    pub async fn set_forge_hook_secret(&self, project_id: i64, sealed: Option<&str>) -> Result<()> {
        let done = sqlx::query("UPDATE projects SET forge_hook_secret = $1 WHERE id = $2")
            .bind(sealed)
            .bind(project_id)
            .execute(&self.writer)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("project"));
        }
        Ok(())
    }

    /// The project's forge webhook secret, sealed; `None` when it has none.
    pub async fn forge_hook_secret(&self, project_id: i64) -> Result<Option<String>> {
        let row = sqlx::query("SELECT forge_hook_secret FROM projects WHERE id = $1")
            .bind(project_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound("project"))?;
        Ok(row.get(0))
    }
}

/// Writes a new pipeline's merge request link (in its creation transaction).
pub(crate) async fn insert_link(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    pipeline_id: i64,
    link: &MergeRequestLink,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO merge_request_pipelines (pipeline_id, merge_request_id, event_type, source_sha, target_sha, base_sha) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(pipeline_id)
    .bind(link.merge_request_id)
    .bind(&link.event_type)
    .bind(&link.source_sha)
    .bind(&link.target_sha)
    .bind(&link.base_sha)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
