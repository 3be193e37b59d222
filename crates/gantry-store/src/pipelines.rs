//! Pipelines and their jobs: creation (jobs a hundred a statement), reads, `apply` (a decision's writes under `lock_version`).

use super::*;
use crate::direct::{Param, bind_all};

/// The statuses of a pipeline not finished ([`Store::active_pipelines`]).
const ACTIVE: &str = "('created', 'waiting_for_resource', 'preparing', 'pending', 'running', 'canceling', 'scheduled', 'manual')";

/// The statuses an auto-cancel may cancel (`JobStatus::is_cancelable`): exactly the
/// condition of the partial index `pipelines_cancelable` (migration 0038), so SQLite uses it.
const CANCELABLE: &str = "('created', 'waiting_for_resource', 'preparing', 'waiting_for_callback', 'pending', 'running', 'scheduled')";

/// [`Store::active_pipelines`]'s statement, by the partial index `pipelines_unfinished`.
pub(crate) fn active_pipelines_sql() -> String {
    format!(
        "SELECT {} FROM pipelines WHERE status IN {ACTIVE} ORDER BY id",
        Pipeline::COLUMNS
    )
}

/// [`Store::jobs_page`]'s condition: `$1` is the project or runner, `$2…` the `statuses`
/// statuses. By `jobs_by_project` or `jobs_by_runner`, newest first: a page costs its
/// offset and size, the count the owner's jobs in an index.
pub(crate) fn jobs_page_filter(of: JobsOf, statuses: usize) -> String {
    let mut filter = match of {
        JobsOf::Project(_) => "project_id = $1 AND bridge = 0".to_owned(),
        JobsOf::Runner(_) => "runner_id = $1 AND bridge = 0".to_owned(),
    };
    if statuses > 0 {
        let list: Vec<String> = (0..statuses).map(|i| format!("${}", i + 2)).collect();
        filter.push_str(&format!(" AND status IN ({})", list.join(", ")));
    }
    filter
}

/// [`Store::cancelable_pipelines_of_ref`]'s statement. (`+parent_job_id`: without
/// statistics SQLite would rather walk the index of child pipelines, `pipelines_parent_job`,
/// over every pipeline without a parent.)
pub(crate) fn cancelable_of_ref_sql() -> String {
    format!(
        "SELECT {} FROM pipelines WHERE project_id = $1 AND ref_name = $2 AND tag = $3 \
         AND id < $4 AND status IN {CANCELABLE} AND +parent_job_id IS NULL ORDER BY id",
        Pipeline::COLUMNS
    )
}

/// [`Store::latest_successful_job_of_ref`]'s statement: GitLab's `max_build_id_by` over
/// `Ci::Build.latest.success` — by the partial index `jobs_latest_success_of_ref`, the
/// newest first (only a trigger job of that name is passed over).
pub(crate) const LATEST_SUCCESSFUL_JOB_OF_REF: &str = "SELECT j.id, j.pipeline_id FROM jobs j \
     WHERE j.project_id = $1 AND j.ref_name = $2 AND j.name = $3 \
     AND j.status = 'success' AND j.retried = 0 AND j.bridge = 0 \
     ORDER BY j.id DESC LIMIT 1";

/// [`Store::latest_artifacts_job_of_ref`]'s statement: the newest successful pipeline of the
/// ref (not a child pipeline), then, in it and its child pipelines (parent first), the
/// latest attempt named `$3` with an archive.
pub(crate) const LATEST_ARTIFACTS_JOB_OF_REF: &str = "SELECT j.id FROM jobs j \
     WHERE j.pipeline_id IN (SELECT f.id FROM pipelines f, \
         (SELECT id FROM pipelines WHERE project_id = $1 AND ref_name = $2 AND status = 'success' \
          AND source <> 'parent_pipeline' ORDER BY id DESC LIMIT 1) AS latest \
         WHERE f.id = latest.id OR f.root_id = latest.id) \
     AND j.name = $3 AND j.retried = 0 \
     AND EXISTS (SELECT 1 FROM artifacts a WHERE a.job_id = j.id AND a.file_type = 'archive') \
     ORDER BY j.pipeline_id, j.id DESC LIMIT 1";

impl Store {
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
            "INSERT INTO pipelines (project_id, iid, ref_name, tag, sha, before_sha, source, status, failure_reason, yaml_errors, variables, protected, created_at, updated_at, parent_job_id, schedule_id, trace_id, trigger_short_token, root_id, locked) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
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
        .bind(p.status.as_str())
        .bind(&p.failure_reason)
        .bind(&p.yaml_errors)
        .bind(&p.variables)
        .bind(b(p.protected))
        .bind(now)
        .bind(now)
        .bind(p.parent_job_id)
        .bind(p.schedule.as_ref().map(|s| s.schedule_id))
        .bind(&p.trace_id)
        .bind(&p.trigger_short_token)
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
        let pipeline = Pipeline::from_row(&row)?;
        if let Some(link) = &p.merge_request {
            merge_requests::insert_link(&mut tx, pipeline.id, link).await?;
        }
        let at = (pipeline.id, p.project_id, p.ref_name.as_str());
        insert_jobs(&mut tx, self.backend, at, jobs, now).await?;
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
            .ok_or(StoreError::NotFound("pipeline"))?
    }

    /// The project's pipelines of one ref (`tag`: a tag, else a branch) older than
    /// `before_id` and in a cancelable status (`CANCELABLE`, `JobStatus::is_cancelable`),
    /// oldest first, child pipelines left out: what a new pipeline's auto-cancel looks at.
    /// By the partial index `pipelines_cancelable`: O(those pipelines), not O(the ref's
    /// history).
    pub async fn cancelable_pipelines_of_ref(
        &self,
        project_id: i64,
        ref_name: &str,
        tag: bool,
        before_id: i64,
    ) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&cancelable_of_ref_sql())
            .bind(project_id)
            .bind(ref_name)
            .bind(i64::from(tag))
            .bind(before_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(Pipeline::from_row).collect()
    }

    /// `(job id, pipeline id)` of the newest successful job named `job` (its latest
    /// attempt, not a trigger job) of any pipeline of the project's ref `ref_name` (a branch
    /// or a tag of that name): `needs:project`'s job, as GitLab's
    /// `BuildDependencies#cross_project` finds it. One statement, by
    /// `jobs_latest_success_of_ref`: O(1) (trigger jobs of that name newer than it aside).
    pub async fn latest_successful_job_of_ref(
        &self,
        project_id: i64,
        ref_name: &str,
        job: &str,
    ) -> Result<Option<(i64, i64)>> {
        let row = sqlx::query(LATEST_SUCCESSFUL_JOB_OF_REF)
            .bind(project_id)
            .bind(ref_name)
            .bind(job)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }

    /// The job whose archive `GET /projects/:id/jobs/artifacts/:ref/download?job=` serves:
    /// in the newest successful pipeline of the ref (a child pipeline is never one) or its
    /// child pipelines, the latest attempt named `job` that has an archive — GitLab's
    /// `latest_successful_build_for_ref`. One statement: the ref's newest pipelines by
    /// `pipelines_by_ref` until a successful one, that family's jobs by `jobs_by_pipeline`.
    pub async fn latest_artifacts_job_of_ref(
        &self,
        project_id: i64,
        ref_name: &str,
        job: &str,
    ) -> Result<Option<i64>> {
        let row = sqlx::query(LATEST_ARTIFACTS_JOB_OF_REF)
            .bind(project_id)
            .bind(ref_name)
            .bind(job)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get(0)))
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
        let status = filter.status.map(|s| s.as_str().to_owned());
        for (column, value) in [
            ("ref_name", &filter.ref_name),
            ("status", &status),
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
        Ok((
            rows.iter().map(Pipeline::from_row).collect::<Result<_>>()?,
            total,
        ))
    }

    /// One page of a project's or a runner's jobs (every attempt, trigger jobs left out),
    /// in `order`, those in `statuses` when it is not empty; and how many match in all.
    pub async fn jobs_page(
        &self,
        of: JobsOf,
        statuses: &[String],
        order: JobsOrder,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Job>, i64)> {
        let owner_id = match of {
            JobsOf::Project(id) | JobsOf::Runner(id) => id,
        };
        let filter = jobs_page_filter(of, statuses.len());
        let count = format!("SELECT COUNT(*) FROM jobs WHERE {filter}");
        let total: i64 = filtered(&count, owner_id, statuses)
            .fetch_one(&self.pool)
            .await?
            .get(0);
        let n = statuses.len() + 1;
        let sql = format!(
            "SELECT {} FROM jobs WHERE {filter} ORDER BY id {} LIMIT ${} OFFSET ${}",
            Job::COLUMNS,
            match order {
                JobsOrder::NewestFirst => "DESC",
                JobsOrder::OldestFirst => "ASC",
            },
            n + 1,
            n + 2
        );
        let rows = filtered(&sql, owner_id, statuses)
            .bind(limit)
            .bind(offset)
            .fetch_all(&self.pool)
            .await?;
        Ok((
            rows.iter().map(Job::from_row).collect::<Result<_>>()?,
            total,
        ))
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
        row.map(|r| Pipeline::from_row(&r)).transpose()
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
        rows.iter().map(Pipeline::from_row).collect()
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
    /// The pipelines not finished, of every project, oldest first.
    pub async fn active_pipelines(&self) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&active_pipelines_sql())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(Pipeline::from_row).collect()
    }

    /// [`Store::active_pipelines`] of one project: O(the project's pipelines), by its index.
    pub async fn active_pipelines_of(&self, project_id: i64) -> Result<Vec<Pipeline>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM pipelines WHERE project_id = $1 AND status IN {ACTIVE} ORDER BY id",
            Pipeline::COLUMNS
        ))
        .bind(project_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Pipeline::from_row).collect()
    }

    pub async fn pipeline_jobs(&self, pipeline_id: i64) -> Result<Vec<Job>> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE pipeline_id = $1 ORDER BY id",
            Job::COLUMNS
        ))
        .bind(pipeline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(Job::from_row).collect()
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
        rows.iter().map(Job::from_row).collect()
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

    /// What a pipeline's detail view sums over its latest jobs (not retried): the mean
    /// of their `coverage` (`None` when none has one) and how many failed or were
    /// canceled with `allow_failure` (GitLab's `Ci::Pipeline#coverage` and
    /// `#number_of_warnings`). One read of the pipeline's job rows by its index.
    pub async fn pipeline_job_summary(&self, pipeline_id: i64) -> Result<PipelineJobSummary> {
        let row = sqlx::query(
            "SELECT AVG(coverage) AS coverage, \
             COALESCE(SUM(CASE WHEN allow_failure = 1 AND status IN ('failed', 'canceled') THEN 1 ELSE 0 END), 0) AS warnings \
             FROM jobs WHERE pipeline_id = $1 AND retried = 0",
        )
        .bind(pipeline_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(PipelineJobSummary {
            coverage: row.try_get("coverage")?,
            warnings: row.try_get("warnings")?,
        })
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
            .ok_or(StoreError::NotFound("job"))?
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
            .ok_or(StoreError::NotFound("job"))?
    }

    /// The job holding this token hash, without its `spec` ([`Store::job_without_spec`]):
    /// authorising a runner's call and the call itself read the row once.
    pub async fn job_by_token_hash(&self, token_hash: &str) -> Result<Option<Job>> {
        self.token_lookups
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Every log patch and update of a runner pays it: a hot read.
        let sql = format!(
            "SELECT {} FROM jobs WHERE token_hash = $1",
            Job::COLUMNS_WITHOUT_SPEC
        );
        let rows = self.read_hot(&sql, vec![token_hash.into()]).await?;
        Ok(rows.read::<Job>()?.pop())
    }

    /// How many times this store (and its clones) looked a job up by its token: the cost
    /// a runner's call pays to prove itself, which the server keeps at one per request.
    pub fn token_lookups(&self) -> u64 {
        self.token_lookups
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A job's status.
    pub async fn job_status(&self, id: i64) -> Result<JobStatus> {
        let row = sqlx::query("SELECT status FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound("job"))?;
        crate::rows::status(&row, "jobs.status", "status")
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
        if self.backend == Backend::Sqlite && fits_one_trip(change) {
            return self
                .apply_in_one_trip(pipeline_id, expected_lock_version, change, now)
                .await;
        }
        let mut tx = self.begin_write().await?;
        let sql = pipeline_cas(self.backend, change.guard.is_some());
        let update = bind_all(
            sqlx::query(&sql),
            pipeline_cas_params(pipeline_id, expected_lock_version, change, now),
        );
        let r = update.execute(&mut *tx).await?;
        if r.rows_affected() != 1 {
            // Which condition failed: only a guarded change needs telling (one more
            // statement, on this rare path only).
            return Err(refusal(&mut tx, pipeline_id, change.guard.as_ref()).await);
        }
        if change.ended {
            unlock_older_artifacts(&mut tx, pipeline_id).await?;
        }
        update_jobs(&mut tx, self.backend, &change.jobs, now).await?;
        if !change.new_jobs.is_empty() {
            let row = sqlx::query("SELECT project_id, ref_name FROM pipelines WHERE id = $1")
                .bind(pipeline_id)
                .fetch_one(&mut *tx)
                .await?;
            let (project_id, ref_name): (i64, String) = (row.try_get(0)?, row.try_get(1)?);
            let at = (pipeline_id, project_id, ref_name.as_str());
            insert_jobs(&mut tx, self.backend, at, &change.new_jobs, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// [`Store::apply`] on SQLite for a change of job rows and the pipeline's status only
    /// ([`fits_one_trip`]): the pipeline's compare-and-set and the jobs' update in one
    /// write ([`Store::write_hot`]). The jobs' update runs only when the pipeline's did
    /// (`changes() = 1`: the rows the statement before it changed).
    async fn apply_in_one_trip(
        &self,
        pipeline_id: i64,
        expected_lock_version: i64,
        change: &PipelineChange,
        now: i64,
    ) -> Result<()> {
        let cas = format!(
            "{} RETURNING lock_version",
            pipeline_cas(Backend::Sqlite, change.guard.is_some())
        );
        let jobs = format!(
            "{} AND changes() = 1",
            job_rows_update(Backend::Sqlite, change.jobs.len())
        );
        let mut params = pipeline_cas_params(pipeline_id, expected_lock_version, change, now);
        job_rows_params(&mut params, &change.jobs);
        let statements: &[&str] = if change.jobs.is_empty() {
            &[&cas]
        } else {
            &[&cas, &jobs]
        };
        if self.write_hot(statements, params).await?.is_empty() {
            let mut conn = self.pool.acquire().await?;
            return Err(refusal(&mut conn, pipeline_id, change.guard.as_ref()).await);
        }
        Ok(())
    }
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

/// Jobs inserted per statement: 17 parameters each, well within SQLite's 32 766 and
/// PostgreSQL's 65 535.
const JOB_INSERT_BATCH: usize = 100;

/// Where new jobs go: their pipeline, its project and its ref (`(pipeline_id, project_id,
/// ref_name)`; a job row carries its pipeline's ref, as GitLab's `ci_builds.ref`).
type JobsAt<'a> = (i64, i64, &'a str);

/// Inserts `jobs` into the pipeline, [`JOB_INSERT_BATCH`] rows a statement (a statement
/// is a round trip to the database's thread or server), then what each job brings along
/// (its environment, its resource group).
async fn insert_jobs(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: Backend,
    at: JobsAt<'_>,
    jobs: &[NewJob],
    now: i64,
) -> Result<()> {
    let (pipeline_id, project_id, _) = at;
    for chunk in jobs.chunks(JOB_INSERT_BATCH) {
        // Rows come back in no promised order: each is known by its name, which must
        // be unique in the batch (it is in a new pipeline); else one row at a time.
        let names: HashSet<&str> = chunk.iter().map(|j| j.name.as_str()).collect();
        if names.len() != chunk.len() {
            for j in chunk {
                let id: i64 = insert_job_rows(tx, backend, at, std::slice::from_ref(j), now)
                    .await?
                    .first()
                    .map(|(id, _)| *id)
                    .ok_or(StoreError::NotFound("inserted job"))?;
                insert_job_extras(tx, pipeline_id, project_id, id, j, now).await?;
            }
            continue;
        }
        let ids: HashMap<String, i64> = insert_job_rows(tx, backend, at, chunk, now)
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
    (pipeline_id, project_id, ref_name): JobsAt<'_>,
    jobs: &[NewJob],
    now: i64,
) -> Result<Vec<(i64, String)>> {
    const COLUMNS: usize = 17;
    let mut sql = String::from(
        "INSERT INTO jobs (pipeline_id, project_id, name, stage, stage_idx, status, attempt, allow_failure, spec, tags, protected, created_at, bridge, failure_reason, finished_at, resource_group, ref_name) VALUES ",
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
            .bind(j.status.as_str())
            .bind(j.attempt)
            .bind(b(j.allow_failure))
            .bind(j.spec.clone())
            .bind(tags)
            .bind(b(j.protected))
            .bind(now)
            .bind(b(j.bridge))
            .bind(j.failure_reason.clone())
            .bind(j.failure_reason.as_ref().map(|_| now))
            .bind(j.resource_group.clone())
            .bind(ref_name);
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

/// Jobs updated per statement: 12 parameters each.
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
    let sql = job_rows_update(backend, updates.len());
    let mut params = Vec::with_capacity(updates.len() * 12);
    job_rows_params(&mut params, updates);
    bind_all(sqlx::query(&sql), params)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The text of [`update_job_rows`]' statement for `rows` jobs, without a terminator (a
/// caller may add a condition: it ends in its `WHERE` clause).
fn job_rows_update(backend: Backend, rows: usize) -> String {
    use std::fmt::Write as _;
    const TYPES: [&str; 12] = [
        "BIGINT", "TEXT", "BIGINT", "BIGINT", "BIGINT", "TEXT", "BIGINT", "BIGINT", "BIGINT",
        "BIGINT", "TEXT", "TEXT",
    ];
    let mut sql = String::from(
        "WITH v (id, status, retried, allow_failure, exit_code, failure_reason, queued_at, scheduled_at, \
         started_at, finished_at, manual_variables, input_values) AS (VALUES ",
    );
    for row in 0..rows {
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
         input_values = COALESCE(v.input_values, jobs.input_values), \
         token_hash = CASE WHEN v.status IN ('running', 'canceling') THEN jobs.token_hash ELSE NULL END \
         FROM v WHERE jobs.id = v.id",
    );
    sql
}

/// [`job_rows_update`]'s parameters for `updates`, after those in `params`.
fn job_rows_params(params: &mut Vec<Param>, updates: &[JobUpdate]) {
    for u in updates {
        params.extend([
            Param::from(u.id),
            u.status.as_str().into(),
            b(u.retried).into(),
            b(u.allow_failure).into(),
            u.exit_code.into(),
            u.failure_reason.clone().into(),
            u.queued_at.into(),
            u.scheduled_at.into(),
            u.started_at.into(),
            u.finished_at.into(),
            u.manual_variables.clone().into(),
            u.input_values.clone().into(),
        ]);
    }
}

/// The text of [`Store::apply`]'s compare-and-set of the pipeline row (numbered or
/// anonymous parameters, [`Backend::batch_param`]); `guarded`: only while the guard's job
/// holds its token ([`PipelineChange::guard`]).
fn pipeline_cas(backend: Backend, guarded: bool) -> String {
    let p = |n| backend.batch_param(n);
    let guard = if guarded {
        format!(
            " AND EXISTS (SELECT 1 FROM jobs WHERE id = {} AND pipeline_id = {} AND token_hash = {})",
            p(7),
            p(8),
            p(9)
        )
    } else {
        String::new()
    };
    format!(
        "UPDATE pipelines SET lock_version = lock_version + 1, status = {}, started_at = COALESCE(started_at, {}), \
         finished_at = {}, updated_at = {} WHERE id = {} AND lock_version = {}{guard}",
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        p(6)
    )
}

/// [`pipeline_cas`]'s parameters.
fn pipeline_cas_params(
    pipeline_id: i64,
    expected_lock_version: i64,
    change: &PipelineChange,
    now: i64,
) -> Vec<Param> {
    let mut params = vec![
        Param::from(change.status.as_str()),
        change.started_at.into(),
        change.finished_at.into(),
        now.into(),
        pipeline_id.into(),
        expected_lock_version.into(),
    ];
    if let Some(guard) = &change.guard {
        params.extend([
            Param::from(guard.job_id),
            pipeline_id.into(),
            guard.token_hash.as_str().into(),
        ]);
    }
    params
}

/// Whether [`Store::apply`] can send `change` in one round trip on SQLite: job rows
/// (distinct, one statement's worth) and the pipeline's status, nothing that needs
/// statements of its own (new rows, environments, the artifacts' unlock at the end).
fn fits_one_trip(change: &PipelineChange) -> bool {
    let ids: HashSet<i64> = change.jobs.iter().map(|u| u.id).collect();
    !change.ended
        && change.new_jobs.is_empty()
        && change.jobs.len() <= JOB_UPDATE_BATCH
        && ids.len() == change.jobs.len()
        && change.jobs.iter().all(|u| u.environment_event.is_none())
}

/// Why a change's compare-and-set matched no pipeline row: the job of its guard holds
/// another token (or none), or the pipeline changed meanwhile. One statement, on this
/// rare path only.
async fn refusal(
    conn: &mut sqlx::AnyConnection,
    pipeline_id: i64,
    guard: Option<&JobTokenGuard>,
) -> StoreError {
    let Some(guard) = guard else {
        return StoreError::Stale;
    };
    let holds =
        sqlx::query("SELECT 1 FROM jobs WHERE id = $1 AND pipeline_id = $2 AND token_hash = $3")
            .bind(guard.job_id)
            .bind(pipeline_id)
            .bind(guard.token_hash.as_str())
            .fetch_optional(conn)
            .await;
    match holds {
        Ok(Some(_)) => StoreError::Stale,
        Ok(None) => StoreError::TokenRevoked {
            job_id: guard.job_id,
        },
        Err(e) => StoreError::Query(e),
    }
}
