//! What runners send about a job: status updates (§4, with the `202` accept protocol and
//! cancellation through `Job-Status`); trace patches (§5) are in `traces.rs`.

use std::sync::Arc;
use std::time::Duration;

use gantry_protocol::update::{PENDING_STATE_TIMEOUT, accept_backoff};
use gantry_protocol::{JobState as WireState, UpdateJobRequest};
use gantry_store::Job;

use crate::processor::{Event, FailureReason, Status};

use super::coverage;
use super::error::CoordinatorError;
use super::spec::StoredSpec;
use super::time::now_ms;
use super::views::{JobView, UpdateResult};
use super::{Coordinator, token};

/// A runner's keep-alives are recorded to this resolution (ms): the last contact matters
/// to the second at most, and a keep-alive within a second of the last writes nothing.
pub const KEEP_ALIVE_RESOLUTION_MS: i64 = 1000;

impl Coordinator {
    /// The job a job token belongs to, while the job runs (`running` or `canceling`);
    /// `None` for unknown tokens and ended jobs (the token is revoked when the job ends).
    pub async fn job_by_token(
        &self,
        token: &str,
    ) -> std::result::Result<Option<JobView>, CoordinatorError> {
        match self.executing_job_by_token(token).await? {
            Some(job) => Ok(Some(self.job(job.id).await?)),
            None => Ok(None),
        }
    }

    /// The row (without its `spec`) of the job a job token belongs to, while the job
    /// runs: what authorising a runner's call needs, and what [`Coordinator::update_job_as`]
    /// takes ([`Coordinator::job_by_token`] for the whole job).
    pub async fn executing_job_by_token(
        &self,
        token: &str,
    ) -> std::result::Result<Option<Job>, CoordinatorError> {
        if !token.starts_with(token::JOB_TOKEN_PREFIX) {
            return Ok(None);
        }
        let hash = token::hash(token);
        let Some(job) = self.inner.store.job_by_token_hash(&hash).await? else {
            return Ok(None);
        };
        if !job.status.is_executing() {
            return Ok(None);
        }
        self.executing().seen((job.id, job.pipeline_id), hash);
        Ok(Some(job))
    }

    /// How many times this coordinator looked a job up by its token (a runner's call
    /// costs one: the HTTP gate's lookup is passed on to the handler).
    pub fn job_token_lookups(&self) -> u64 {
        self.inner.store.token_lookups()
    }

    /// How many times this coordinator read a job's log state from the store (a runner's
    /// log patch of a job this process handed out reads none).
    pub fn trace_state_reads(&self) -> u64 {
        self.inner.store.trace_state_reads()
    }

    /// For a `403` answer: the id and status of the job a token belonged to, also after the
    /// job ended (remembered in memory since this process issued or saw it), so the
    /// answer can carry `Job-Status` (§4.2, §4.5).
    pub async fn job_status_for_token(
        &self,
        token: &str,
    ) -> std::result::Result<Option<(i64, Status)>, CoordinatorError> {
        let hash = token::hash(token);
        let id = match self.inner.store.job_by_token_hash(&hash).await? {
            Some(job) => return Ok(Some((job.id, job.status))),
            None => self.executing().ended_job(&hash),
        };
        match id {
            Some(id) => Ok(Some((id, self.inner.store.job_status(id).await?))),
            None => Ok(None),
        }
    }

    /// A runner's `PUT /jobs/:id` checked by its own write instead of a token lookup
    /// before it, where that is safe; `None` when it is not (the caller then checks the
    /// token and calls [`Coordinator::update_job_as`]):
    /// - a keep-alive (`running`, `pending` or no state, nothing else to record) is one
    ///   statement whose condition is the token ([`gantry_store::Store::contact_job`]):
    ///   the acknowledgement above all. One that matches nothing (a wrong token, a job no
    ///   longer executing, a contact within `KEEP_ALIVE_RESOLUTION_MS` of the last) is
    ///   `None`.
    /// - a final update (`success`/`failed`) of a job this process handed out with this
    ///   token, whose log it knows complete, and that records nothing before its decision
    ///   (no `coverage`, logs not shared blobs to archive): the decision's write checks
    ///   the token ([`gantry_store::JobTokenGuard`]); refused (the job stopped, or
    ///   holds another token now), it is `None`.
    pub async fn update_job_by_token(
        &self,
        job_id: i64,
        token: &str,
        req: &UpdateJobRequest,
    ) -> std::result::Result<Option<UpdateResult>, CoordinatorError> {
        if req.resources.is_some()
            || req.trace.is_some()
            || !token.starts_with(token::JOB_TOKEN_PREFIX)
        {
            return Ok(None);
        }
        let hash = token::hash(token);
        match req.state {
            None | Some(WireState::Pending | WireState::Running) => {
                let now = now_ms();
                let Some((status, pipeline_id)) = self
                    .inner
                    .store
                    .contact_job(job_id, &hash, now, KEEP_ALIVE_RESOLUTION_MS)
                    .await?
                else {
                    return Ok(None);
                };
                self.executing().seen((job_id, pipeline_id), hash);
                Ok(Some(UpdateResult {
                    accepted: true,
                    job_status: status,
                    update_interval: None,
                }))
            }
            Some(WireState::Success | WireState::Failed) => {
                let Some(pipeline_id) = self.executing().pipeline_of(job_id, &hash) else {
                    return Ok(None);
                };
                let records_coverage = match self.processing().spec(job_id) {
                    Some(spec) => spec.job.coverage.is_some(),
                    None => true,
                };
                let complete = self
                    .traces()
                    .known_local_size(job_id)
                    .is_some_and(|stored| req.output.bytesize <= stored);
                if records_coverage || !complete {
                    return Ok(None);
                }
                let guard = gantry_store::JobTokenGuard {
                    job_id,
                    token_hash: hash,
                };
                // Refused (the job stopped, or holds another token now): the checked way
                // gives the answer it always gave, `Job-Status` and all.
                match self
                    .finish_job((job_id, pipeline_id), req, Some(guard))
                    .await
                {
                    Ok(result) => Ok(Some(result)),
                    Err(CoordinatorError::Forbidden(_)) => Ok(None),
                    Err(other) => Err(other),
                }
            }
        }
    }

    /// A runner's `PUT /jobs/:id` (the caller has checked the job token).
    ///
    /// - `running` (and two-phase `pending`, and an update without a state): the first one
    ///   acknowledges the job (it stays the runner's, see
    ///   [`Coordinator::requeue_unacknowledged`]), the others are keep-alives; `job_status`
    ///   is `running`, or `canceling` when a user canceled the job on a runner that cancels gracefully.
    /// - `success` / `failed`: the final state. While the runner reports more trace bytes
    ///   (`output.bytesize`) than are stored, the update is not applied and `accepted` is
    ///   false (answer `202`, retry after `update_interval`), for up to 5 minutes (§4.4).
    ///   Then the job finishes (a `canceling` job becomes `canceled`), its token is
    ///   revoked and the pipeline is processed.
    ///
    /// A job that is not running any more is `Forbidden` (`403`; its status is in
    /// [`Coordinator::job`]).
    pub async fn update_job(
        &self,
        job_id: i64,
        req: UpdateJobRequest,
    ) -> std::result::Result<UpdateResult, CoordinatorError> {
        let job = self.inner.store.job_without_spec(job_id).await?;
        self.update_job_as(job, req).await
    }

    /// [`Coordinator::update_job`] with the job's row as its token's check just read it
    /// ([`Coordinator::executing_job_by_token`]): the final state is applied in a
    /// transaction that checks the job's status again.
    pub async fn update_job_as(
        &self,
        job: Job,
        req: UpdateJobRequest,
    ) -> std::result::Result<UpdateResult, CoordinatorError> {
        let store = &self.inner.store;
        let job_id = job.id;
        if !job.status.is_executing() {
            return Err(CoordinatorError::Forbidden(format!(
                "update job {job_id}: it is {}",
                job.status
            )));
        }
        let now = now_ms();
        if let Some(used) = &req.resources {
            store
                .record_job_resources(job_id, &resource_use(used, now))
                .await?;
        }
        match req.state {
            // No state (GitLab's API declares it optional): a keep-alive like `running`;
            // the checksum and exit code count with the final state.
            None | Some(WireState::Pending | WireState::Running) => {
                match job.last_contact_at {
                    // The runner's first word about the job: it has it, and the job
                    // stays its own (`requeue_unacknowledged`).
                    None => {
                        store
                            .acknowledge_job(job_id, &token::hash(&req.token), now)
                            .await?;
                    }
                    // A keep-alive: the last contact matters to the second at most.
                    Some(at) if now - at >= KEEP_ALIVE_RESOLUTION_MS => {
                        store.touch_job(job_id, now).await?
                    }
                    Some(_) => {}
                }
                Ok(UpdateResult {
                    accepted: true,
                    job_status: job.status,
                    update_interval: None,
                })
            }
            Some(WireState::Success | WireState::Failed) => {
                let reported = req.output.bytesize;
                let stored = u64::try_from(job.trace_size).unwrap_or(0);
                if reported > stored {
                    let first = self.executing().first_final_update(job_id, now);
                    let age = Duration::from_millis(u64::try_from(now - first).unwrap_or(0));
                    if age < PENDING_STATE_TIMEOUT {
                        store.touch_job(job_id, now).await?;
                        return Ok(UpdateResult {
                            accepted: false,
                            job_status: job.status,
                            update_interval: Some(accept_backoff(age)),
                        });
                    }
                }
                self.finish_job((job_id, job.pipeline_id), &req, None).await
            }
        }
    }

    /// A runner's final update of `job_id` (of `pipeline_id`), its log complete: the job
    /// ends as the runner says, the pipeline is processed, and a successful job does what
    /// GitLab does after success. With `guard`, the decision applies only while the job
    /// still holds that token.
    async fn finish_job(
        &self,
        (job_id, pipeline_id): (i64, i64),
        req: &UpdateJobRequest,
        guard: Option<gantry_store::JobTokenGuard>,
    ) -> std::result::Result<UpdateResult, CoordinatorError> {
        let now = now_ms();
        self.executing().final_applied(job_id);
        let mut success = req.state == Some(WireState::Success);
        let mut reason = req
            .failure_reason
            .map(FailureReason::as_stored)
            .unwrap_or(FailureReason::ScriptFailure);
        let mut exit_code = (req.exit_code != 0).then_some(req.exit_code);
        // A `release:` job's release, before the job ends: GitLab's `release-cli` runs in
        // the job once its script succeeded, so the release exists before the next
        // stage's jobs start and their `CI_RELEASE_DESCRIPTION` names it, and a release
        // that cannot be made fails the job (`release-cli` exits 1), its reason at the end
        // of the log. (A job that is not recorded a success after all — cancelled
        // meanwhile — keeps its release, as a GitLab job failing after its release step
        // does.)
        if success
            && let Some(spec) = self.job_spec(job_id).await?
            && self.release_of_succeeded_job(job_id, &spec).await.is_err()
        {
            success = false;
            reason = FailureReason::ScriptFailure;
            exit_code = Some(1);
        }
        self.traces().sync_trace(job_id).await?;
        // Before the job ends: whoever sees it finished sees its coverage too
        // (`gantry run` reads the jobs once the pipeline ended, which may be before
        // this update returns).
        self.record_coverage(job_id).await?;
        let status = self
            .job_event_in(pipeline_id, job_id, now, guard, |job| {
                if success {
                    Event::JobSucceeded { job }
                } else {
                    Event::JobFailed {
                        job,
                        reason,
                        exit_code,
                    }
                }
            })
            .await
            .map_err(|e| match e {
                CoordinatorError::Conflict(m) => CoordinatorError::Forbidden(m),
                other => other,
            })?;
        let status = status.ok_or(CoordinatorError::NotFound("job"))?;
        if success && status == Status::Success {
            if let Some(spec) = self.job_spec(job_id).await? {
                self.after_success_pages(job_id, &spec).await;
            }
        }
        Ok(UpdateResult {
            accepted: true,
            job_status: status,
            update_interval: None,
        })
    }

    /// The job's specification, from the processing cache or its row (`None`: a row
    /// whose specification no longer parses).
    async fn job_spec(&self, job_id: i64) -> Result<Option<Arc<StoredSpec>>, CoordinatorError> {
        if let Some(spec) = self.processing().spec(job_id) {
            return Ok(Some(spec));
        }
        Ok(StoredSpec::parse(&self.inner.store.job(job_id).await?.spec)
            .ok()
            .map(Arc::new))
    }

    /// A finished job's `coverage`: found in its complete log by its regex (GitLab does
    /// it when the job finishes, whatever its status), read from the end of the log file
    /// a block at a time. The regex comes from the cached
    /// specification, or from the job's row when the cache lacks it.
    async fn record_coverage(&self, job_id: i64) -> Result<(), CoordinatorError> {
        let cached = self.processing().spec(job_id);
        let regex = match cached {
            Some(spec) => spec.job.coverage.clone(),
            None => StoredSpec::parse(&self.inner.store.job(job_id).await?.spec)
                .ok()
                .and_then(|s| s.job.coverage),
        };
        let Some(regex) = regex else {
            return Ok(());
        };
        let percent = match self.traces().trace_source(job_id).await? {
            super::TraceSource::Bytes(log) => coverage::extract(&log, &regex),
            super::TraceSource::File { mut file, len } => tokio::task::spawn_blocking(move || {
                coverage::extract_from_file(&mut file, len, &regex)
            })
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))??,
        };
        if let Some(percent) = percent {
            self.inner.store.set_job_coverage(job_id, percent).await?;
        }
        Ok(())
    }
}

/// The stored form of a runner's `resources` report (byte counts past `i64::MAX` are
/// clamped).
fn resource_use(used: &gantry_protocol::JobResources, now: i64) -> gantry_store::JobResourceUse {
    let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
    gantry_store::JobResourceUse {
        cpu_user_seconds: used.cpu_user_seconds.max(0.0),
        cpu_system_seconds: used.cpu_system_seconds.max(0.0),
        peak_memory_bytes: bytes(used.peak_memory_bytes),
        read_bytes: bytes(used.read_bytes),
        written_bytes: bytes(used.written_bytes),
        updated_at: now,
    }
}
