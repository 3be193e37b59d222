//! The service over a project's environments and deployments: GitLab's environments and
//! deployments APIs (deployments made outside pipelines too), stopping an environment (its `on_stop` jobs run, or it stops at
//! once), and stopping environments whose `auto_stop_in` has passed.
//!
//! Environments are created with the pipelines that name them and move with their jobs
//! (`environment::event_for`, written by the store in the job's transaction); this module
//! is what users and time do to them.
//!
//! The rows alone (list, create, change, delete; resource groups' too, in
//! `resource_groups.rs`) are the [`Environments`] service's, which calls the store only;
//! what involves jobs (deployments' views, stopping through `on_stop` jobs, auto-stop)
//! stays on the coordinator.

use gantry_store::{
    DeleteEnvironment, Deployment, DeploymentFilter, DeploymentUpdate, Environment,
    EnvironmentChanges, EnvironmentFilter, NewDeployment, NewEnvironment,
};
use serde::Serialize;

use super::environment::{TIERS, check_name, guess_tier, slug};
use super::error::{CoordinatorError, Result};

use super::time::now_ms;
use super::views::JobView;
use super::{Coordinator, iso8601};
use crate::processor::Status;

/// How many environments one pass of [`Coordinator::stop_due_environments`] stops.
pub const AUTO_STOP_BATCH: i64 = 100;

/// The longest `external_url` (GitLab's `length: { maximum: 255 }`).
const MAX_URL_LEN: usize = 255;

/// An environment, shaped like GitLab's `GET /projects/:id/environments/:environment_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvironmentView {
    pub id: i64,
    pub name: String,
    pub slug: String,
    pub description: Option<String>,
    pub external_url: Option<String>,
    pub state: String,
    pub tier: String,
    pub created_at: String,
    pub updated_at: String,
    pub auto_stop_at: Option<String>,
    /// GitLab's default: stop when `auto_stop_in` passes, with or without a stop job.
    pub auto_stop_setting: &'static str,
    /// The last successful deployment (single environment only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_deployment: Option<Box<DeploymentView>>,
}

/// An environment inside a deployment (GitLab's `EnvironmentBasic`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvironmentBasic {
    pub id: i64,
    pub name: String,
    pub slug: String,
    pub external_url: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A deployment, shaped like GitLab's `GET /projects/:id/deployments/:deployment_id`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeploymentView {
    pub id: i64,
    pub iid: i64,
    #[serde(rename = "ref")]
    pub ref_name: String,
    pub sha: String,
    pub status: String,
    pub created_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
    pub environment: Option<EnvironmentBasic>,
    /// The job that deploys (`null` once its pipeline is deleted).
    pub deployable: Option<JobView>,
}

impl Eq for DeploymentView {}

/// `POST /projects/:id/environments`.
#[derive(Clone, Debug, Default)]
pub struct EnvironmentRequest {
    pub name: Option<String>,
    pub external_url: Option<String>,
    pub tier: Option<String>,
}

/// `POST …/deployments`: the fields GitLab requires.
#[derive(Clone, Debug, Default)]
pub struct DeploymentRequest {
    pub environment: Option<String>,
    pub sha: Option<String>,
    pub ref_name: Option<String>,
    pub tag: Option<bool>,
    pub status: Option<String>,
}

/// What `POST …/deployments` needs, for its messages.
const DEPLOYMENT_PARAMS: &str = "give environment, sha, ref, tag (true or false) and status (running, success, failed or canceled)";

/// The statuses the API sets (GitLab's `values`).
fn check_api_status(status: &str) -> Result<()> {
    if ["running", "success", "failed", "canceled"].contains(&status) {
        Ok(())
    } else {
        Err(invalid(format!(
            "status: `{status}` is not a status the API sets: give running, success, failed or canceled"
        )))
    }
}

fn invalid(m: impl Into<String>) -> CoordinatorError {
    CoordinatorError::Invalid(m.into())
}

fn check_tier(tier: &str) -> Result<()> {
    if TIERS.contains(&tier) {
        Ok(())
    } else {
        Err(invalid(format!(
            "tier: `{tier}` is not a tier: give one of {}",
            TIERS.join(", ")
        )))
    }
}

pub(crate) fn check_url(url: &str) -> Result<()> {
    if url.chars().count() > MAX_URL_LEN {
        return Err(invalid(format!(
            "external_url is longer than {MAX_URL_LEN} characters"
        )));
    }
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http" | "https") => Ok(()),
        _ => Err(invalid(format!(
            "external_url: `{url}` is not an http(s) URL: give one such as `https://review.example.com`"
        ))),
    }
}

fn basic(e: &Environment) -> EnvironmentBasic {
    EnvironmentBasic {
        id: e.id,
        name: e.name.clone(),
        slug: e.slug.clone(),
        external_url: e.external_url.clone(),
        created_at: iso8601(e.created_at),
        updated_at: iso8601(e.updated_at),
    }
}

fn environment_view(e: &Environment) -> EnvironmentView {
    EnvironmentView {
        id: e.id,
        name: e.name.clone(),
        slug: e.slug.clone(),
        description: None,
        external_url: e.external_url.clone(),
        state: e.state.clone(),
        tier: e.tier.clone(),
        created_at: iso8601(e.created_at),
        updated_at: iso8601(e.updated_at),
        auto_stop_at: e.auto_stop_at.map(iso8601),
        auto_stop_setting: "always",
        last_deployment: None,
    }
}

/// The environments service (`Coordinator::environments()`): a project's environment
/// rows (list, create, change, delete) and its resource groups' rows; it calls the store
/// only. What involves jobs — deployments and their views, stopping (it plays `on_stop`
/// jobs), a resource group's order (it hands resources to jobs) — stays the
/// coordinator's.
pub struct Environments<'a> {
    pub(super) store: &'a gantry_store::Store,
}

impl Environments<'_> {
    /// One page of a project's environments, by name, and how many match.
    pub async fn page(
        &self,
        project_id: i64,
        filter: &EnvironmentFilter,
        offset: i64,
        limit: i64,
    ) -> std::result::Result<(Vec<EnvironmentView>, i64), CoordinatorError> {
        self.store.project(project_id).await?;
        if filter.name.is_some() && filter.search.is_some() {
            return Err(invalid(
                "name and search are mutually exclusive: give one of them",
            ));
        }
        if let Some(state) = &filter.state {
            if !["available", "stopping", "stopped"].contains(&state.as_str()) {
                return Err(invalid(format!(
                    "states: `{state}` is not a state: give available, stopping or stopped"
                )));
            }
        }
        let (rows, total) = self
            .store
            .environments_page(project_id, filter, offset, limit)
            .await?;
        Ok((rows.iter().map(environment_view).collect(), total))
    }

    /// Creates an environment without a deployment (GitLab's `POST …/environments`).
    pub async fn create(
        &self,
        project_id: i64,
        request: EnvironmentRequest,
    ) -> std::result::Result<EnvironmentView, CoordinatorError> {
        self.store.project(project_id).await?;
        let name = request
            .name
            .ok_or_else(|| invalid("name is missing: give the environment's name"))?;
        check_name(&name).map_err(|m| invalid(format!("name: {m}")))?;
        if let Some(url) = request.external_url.as_ref().filter(|u| !u.is_empty()) {
            check_url(url)?;
        }
        if let Some(tier) = &request.tier {
            check_tier(tier)?;
        }
        let new = NewEnvironment {
            slug: slug(&name),
            tier: request.tier.unwrap_or_else(|| guess_tier(&name).to_owned()),
            external_url: request.external_url.filter(|u| !u.is_empty()),
            name,
        };
        let created = self
            .store
            .create_environment(project_id, &new, now_ms())
            .await
            .map_err(|e| match e {
                gantry_store::StoreError::Conflict(_) => invalid(format!(
                    "name has already been taken: the project has an environment `{}`",
                    new.name
                )),
                other => other.into(),
            })?;
        Ok(environment_view(&created))
    }

    /// Changes an environment's URL or tier (GitLab's `PUT …/environments/:id`).
    pub async fn update(
        &self,
        project_id: i64,
        id: i64,
        changes: EnvironmentChanges,
    ) -> std::result::Result<EnvironmentView, CoordinatorError> {
        if let Some(Some(url)) = &changes.external_url {
            if !url.is_empty() {
                check_url(url)?;
            }
        }
        if let Some(tier) = &changes.tier {
            check_tier(tier)?;
        }
        let changes = EnvironmentChanges {
            external_url: changes.external_url.map(|u| u.filter(|u| !u.is_empty())),
            ..changes
        };
        let e = self
            .store
            .update_environment(project_id, id, &changes, now_ms())
            .await?;
        Ok(environment_view(&e))
    }

    /// Deletes a stopped environment and its deployments; `Forbidden` when it is not
    /// stopped (GitLab's 403).
    pub async fn delete(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<(), CoordinatorError> {
        match self.store.delete_environment(project_id, id).await? {
            DeleteEnvironment::Deleted => Ok(()),
            DeleteEnvironment::NotStopped => Err(CoordinatorError::Forbidden(
                "the environment is not stopped: stop it first (POST …/environments/:id/stop), then delete it".to_owned(),
            )),
        }
    }
}

impl Coordinator {
    /// The environments service (see `Environments`).
    pub fn environments(&self) -> Environments<'_> {
        Environments {
            store: &self.inner.store,
        }
    }

    /// A project's environment, with its last successful deployment.
    pub async fn environment(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<EnvironmentView, CoordinatorError> {
        let e = self.inner.store.environment(project_id, id).await?;
        let mut view = environment_view(&e);
        if let Some(d) = self.inner.store.last_deployment(e.id).await? {
            view.last_deployment = Some(Box::new(self.deployment_view(&d, Some(&e)).await?));
        }
        Ok(view)
    }

    /// Stops an environment (GitLab's `Environments::StopService`). With `force` it is
    /// stopped at once. Otherwise, an available environment whose last finished
    /// deployments name `on_stop` jobs that can be played becomes `stopping` and those
    /// jobs are played (it is stopped when one succeeds, available again when one
    /// fails); without such jobs it is stopped at once. `Invalid` when its state did not
    /// change (it was not available).
    pub async fn stop_environment(
        &self,
        project_id: i64,
        id: i64,
        force: bool,
    ) -> std::result::Result<EnvironmentView, CoordinatorError> {
        let e = self.inner.store.environment(project_id, id).await?;
        let moved = if force {
            self.inner
                .store
                .move_environment(e.id, &["available", "stopping"], "stopped", now_ms())
                .await?
        } else {
            self.stop_with_actions(&e).await?
        };
        if !moved {
            return Err(invalid(format!(
                "the environment is {} already: nothing to stop (force=true stops one that is stopping)",
                e.state
            )));
        }
        self.environment(project_id, id).await
    }

    /// A deleted branch stops the environments it deployed last (GitLab's
    /// `Environments::StopService#execute_for_branch`), with their stop jobs.
    pub(crate) async fn stop_environments_of_branch(
        &self,
        project_id: i64,
        branch: &str,
    ) -> Result<()> {
        let store = &self.inner.store;
        for e in store
            .environments_deployed_from_branch(project_id, branch)
            .await?
        {
            self.stop_with_actions(&e).await?;
        }
        Ok(())
    }

    /// GitLab's `Environment#stop_with_actions!`: `false` when the environment was not
    /// available.
    async fn stop_with_actions(&self, e: &Environment) -> Result<bool> {
        let store = &self.inner.store;
        if e.state != "available" {
            return Ok(false);
        }
        let actions = self.stop_actions(e).await?;
        let to = if actions.is_empty() {
            "stopped"
        } else {
            "stopping"
        };
        if !store
            .move_environment(e.id, &["available"], to, now_ms())
            .await?
        {
            return Ok(false);
        }
        for job in actions {
            if let Err(err) = self.play_job(job, Vec::new()).await {
                eprintln!(
                    "gantry: the stop job {job} of environment `{}` could not be played: {err}",
                    e.name
                );
            }
        }
        Ok(true)
    }

    /// The `on_stop` jobs of the environment's last finished deployments that can be
    /// played: the current attempt of a manual job, waiting or finished.
    async fn stop_actions(&self, e: &Environment) -> Result<Vec<i64>> {
        let store = &self.inner.store;
        let mut actions = Vec::new();
        for d in store.last_finished_deployment_group(e.id).await? {
            let (Some(on_stop), Some(pipeline_id)) = (&d.on_stop, d.pipeline_id) else {
                continue;
            };
            // The specs come from the coordinator's cache (parsed once per job).
            let (rows, specs) = self.rows_with_specs(pipeline_id).await?;
            let Some((job, spec)) = rows
                .iter()
                .zip(&specs)
                .filter(|(j, _)| &j.name == on_stop && !j.retried)
                .max_by_key(|(j, _)| (j.attempt, j.id))
            else {
                continue;
            };
            let manual = matches!(spec.job.when, gantry_pipeline::When::Manual);
            let playable = matches!(
                job.status,
                Status::Manual | Status::Success | Status::Failed | Status::Canceled
            );
            if manual && playable && !actions.contains(&job.id) {
                actions.push(job.id);
            }
        }
        Ok(actions)
    }

    /// Stops the available environments whose `auto_stop_at` has come (at most
    /// [`AUTO_STOP_BATCH`]), as GitLab's auto-stop worker does; returns how many.
    pub async fn stop_due_environments(
        &self,
        now: i64,
    ) -> std::result::Result<usize, CoordinatorError> {
        let due = self
            .inner
            .store
            .auto_stoppable_environments(now, AUTO_STOP_BATCH)
            .await?;
        let mut stopped = 0;
        for e in &due {
            if self.stop_with_actions(e).await? {
                stopped += 1;
            }
            self.inner.store.clear_auto_stop(e.id).await?;
        }
        Ok(stopped)
    }

    /// Stops a project's available environments neither changed nor deployed to since
    /// `before` (Unix ms), with their stop jobs (GitLab's `POST …/environments/stop_stale`);
    /// `before` must be a week ago at least and ten years ago at most. Returns how many
    /// were stopped or are stopping.
    pub async fn stop_stale_environments(
        &self,
        project_id: i64,
        before: i64,
    ) -> std::result::Result<usize, CoordinatorError> {
        const WEEK_MS: i64 = 7 * 24 * 3_600_000;
        const TEN_YEARS_MS: i64 = 3_652 * 24 * 3_600_000;
        self.inner.store.project(project_id).await?;
        let now = now_ms();
        if before > now - WEEK_MS || before < now - TEN_YEARS_MS {
            return Err(invalid(
                "Invalid Date: before must lie between ten years and one week ago",
            ));
        }
        let mut stopped = 0;
        loop {
            let stale = self
                .inner
                .store
                .stale_environments(project_id, before, AUTO_STOP_BATCH)
                .await?;
            let mut moved = 0;
            for e in &stale {
                if self.stop_with_actions(e).await? {
                    moved += 1;
                }
            }
            stopped += moved;
            // A batch that moved nothing would be read again: stop there.
            if stale.len() < usize::try_from(AUTO_STOP_BATCH).unwrap_or(100) || moved == 0 {
                return Ok(stopped);
            }
        }
    }

    /// GitLab's "Prevent outdated deployment jobs" (on by default): why a deployment job
    /// must not start — its environment's last successful deployment is newer and of
    /// another commit. A retry may deploy an older commit again (a rollback, as GitLab's
    /// default allows).
    pub(crate) async fn outdated_deployment(
        &self,
        job: &gantry_store::Job,
        project: &gantry_store::Project,
    ) -> Result<Option<String>> {
        if !project.ci_forward_deployment_enabled
            || job.attempt > 1
            || job.environment_action.as_deref() != Some("start")
        {
            return Ok(None);
        }
        let Some(environment) = job.environment_id else {
            return Ok(None);
        };
        let store = &self.inner.store;
        let (Some(mine), Some(last)) = (
            store.job_deployment(job.id).await?,
            store.last_deployment(environment).await?,
        ) else {
            return Ok(None);
        };
        if last.id <= mine.id || last.sha == mine.sha {
            return Ok(None);
        }
        Ok(Some(format!(
            "the environment has a newer successful deployment (#{}, commit {}): this job would deploy an older commit over it (Settings › CI/CD › Prevent outdated deployment jobs, `ci_forward_deployment_enabled`)",
            last.iid,
            &last.sha[..last.sha.len().min(8)]
        )))
    }

    /// One page of a project's deployments and how many match.
    pub async fn deployments_page(
        &self,
        project_id: i64,
        filter: &DeploymentFilter,
        offset: i64,
        limit: i64,
    ) -> std::result::Result<(Vec<DeploymentView>, i64), CoordinatorError> {
        self.inner.store.project(project_id).await?;
        let (rows, total) = self
            .inner
            .store
            .deployments_page(project_id, filter, offset, limit)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for d in &rows {
            out.push(self.deployment_view(d, None).await?);
        }
        Ok((out, total))
    }

    /// Records a deployment made outside pipelines (GitLab's `POST …/deployments`): its
    /// environment is found by name or created.
    pub async fn create_deployment(
        &self,
        project_id: i64,
        request: DeploymentRequest,
    ) -> std::result::Result<DeploymentView, CoordinatorError> {
        self.inner.store.project(project_id).await?;
        let missing = |what: &str| invalid(format!("{what} is missing: {}", DEPLOYMENT_PARAMS));
        let environment = request.environment.ok_or_else(|| missing("environment"))?;
        check_name(&environment).map_err(|m| invalid(format!("environment: {m}")))?;
        let sha = request.sha.ok_or_else(|| missing("sha"))?;
        if !(7..=64).contains(&sha.len()) || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(invalid(format!(
                "sha: `{sha}` is not a commit SHA: give the deployed commit's hexadecimal SHA"
            )));
        }
        let ref_name = request
            .ref_name
            .filter(|r| !r.is_empty())
            .ok_or_else(|| missing("ref"))?;
        let tag = request.tag.ok_or_else(|| missing("tag"))?;
        let status = request.status.ok_or_else(|| missing("status"))?;
        check_api_status(&status)?;
        let new = NewDeployment {
            slug: slug(&environment),
            tier: guess_tier(&environment).to_owned(),
            environment,
            ref_name,
            tag,
            sha,
            status,
        };
        let d = self
            .inner
            .store
            .create_deployment(project_id, &new, now_ms())
            .await?;
        self.deployment_view(&d, None).await
    }

    /// Moves a deployment made outside pipelines to `status` (GitLab's `PUT
    /// …/deployments/:id`); a job's deployment follows its job and cannot be moved.
    pub async fn update_deployment(
        &self,
        project_id: i64,
        id: i64,
        status: Option<String>,
    ) -> std::result::Result<DeploymentView, CoordinatorError> {
        let status = status.ok_or_else(|| {
            invalid("status is missing: give running, success, failed or canceled")
        })?;
        check_api_status(&status)?;
        match self
            .inner
            .store
            .update_deployment_status(project_id, id, &status, now_ms())
            .await?
        {
            DeploymentUpdate::Updated(d) => self.deployment_view(&d, None).await,
            DeploymentUpdate::MadeByJob => Err(invalid(
                "Deployments created using GitLab CI can not be updated using the API: its status is its job's",
            )),
            DeploymentUpdate::CannotMove { from } => Err(invalid(format!(
                "status: the deployment is {from}: it cannot become {status} (running follows created only)"
            ))),
        }
    }

    /// A project's deployment.
    pub async fn deployment(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<DeploymentView, CoordinatorError> {
        let d = self.inner.store.deployment(project_id, id).await?;
        self.deployment_view(&d, None).await
    }

    async fn deployment_view(
        &self,
        d: &Deployment,
        environment: Option<&Environment>,
    ) -> Result<DeploymentView> {
        let environment = match environment {
            Some(e) => Some(basic(e)),
            None => self
                .inner
                .store
                .environments_by_id(&[d.environment_id])
                .await?
                .first()
                .map(basic),
        };
        let deployable = match d.job_id {
            Some(id) => Some(self.job_view_by_id(id).await?),
            None => None,
        };
        Ok(DeploymentView {
            id: d.id,
            iid: d.iid,
            ref_name: d.ref_name.clone(),
            sha: d.sha.clone(),
            status: d.status.clone(),
            created_at: iso8601(d.created_at),
            updated_at: iso8601(d.updated_at),
            finished_at: d.finished_at.map(iso8601),
            environment,
            deployable,
        })
    }
}
