//! User API, runners: `POST /user/runners` (create → `glrt-` token, `runner-api.md`
//! §2.2), `GET /runners/all` and `GET /runners` (filtered, paged), `GET /runners/:id`,
//! `PUT /runners/:id` (settings, pause and resume), `GET /runners/:id/jobs`,
//! `DELETE /runners/:id`, and a project's runners: `GET|POST /projects/:id/runners`,
//! `DELETE /projects/:id/runners/:runner_id`. Admin token.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_protocol::registration::TagList;
use gantry_protocol::{
    AccessLevel, CreateRunnerRequest, GroupRef, JobStatus, RunnerRegistrationDetails, RunnerType,
};
use gantry_store::JobsOrder;
use serde::Deserialize;

use crate::coordinator::{CoordinatorError, RunnerOptions, RunnerUpdate};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::{Page, admin_project_id, page_of, paged};
use super::{AppState, auth, json_response};

/// `POST /api/v4/user/runners` → `201 {"id", "token", "token_expires_at"}`. Instance,
/// group and project runners; a group runner's `group_id` is the group's id or full path
/// (a group some project is in, else `400`).
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: CreateRunnerRequest = extract::params(&headers, &body).await?;
    let (project_id, group_path) = match req.runner_type {
        None => return Err(ApiError::param("runner_type is missing")),
        Some(RunnerType::InstanceType) => (None, None),
        Some(RunnerType::GroupType) => match req.group_id {
            None => return Err(ApiError::param("group_id is missing")),
            Some(named) => {
                let named = match named {
                    GroupRef::Id(id) => id.to_string(),
                    GroupRef::Path(path) => path,
                };
                match state.coordinator.group_path(&named).await {
                    Ok(path) => (None, Some(path)),
                    Err(CoordinatorError::NotFound(_)) => {
                        return Err(ApiError::param(format!(
                            "group_id `{named}` names no group: give the id or full path of a group some project is in"
                        )));
                    }
                    Err(other) => return Err(other.into()),
                }
            }
        },
        Some(RunnerType::ProjectType) => (
            Some(
                req.project_id
                    .ok_or_else(|| ApiError::param("project_id is missing"))?,
            ),
            None,
        ),
    };
    let opts = RunnerOptions {
        description: req.description,
        tags: req.tag_list.0,
        run_untagged: req.run_untagged.unwrap_or(true),
        locked: req.locked.unwrap_or(false),
        protected_only: req.access_level == Some(AccessLevel::RefProtected),
        project_id,
        group_path,
        maximum_timeout: req.maximum_timeout,
        paused: req.paused.unwrap_or(false),
        any_tags: false,
        maintenance_note: Some(req.maintenance_note).filter(|n| !n.is_empty()),
    };
    let (runner, token) = state
        .coordinator
        .create_runner(opts)
        .await
        .map_err(|e| match e {
            CoordinatorError::NotFound(_) => ApiError::bad_request("project_id names no project"),
            other => other.into(),
        })?;
    Ok(json_response(
        StatusCode::CREATED,
        &RunnerRegistrationDetails {
            id: runner.id,
            token,
            token_expires_at: None,
        },
    ))
}

/// `GET /runners/all`'s filters (GitLab's), and its page.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ListFilter {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    paused: Option<bool>,
    /// Runners with every one of these tags (comma-separated).
    tag_list: Option<TagList>,
    status: Option<String>,
}

const RUNNER_TYPES: [&str; 3] = ["instance_type", "group_type", "project_type"];
const RUNNER_STATUSES: [&str; 6] = [
    "online",
    "offline",
    "stale",
    "never_contacted",
    "active",
    "paused",
];

/// `GET /api/v4/runners/all[?type=&paused=&tag_list=&status=&page=&per_page=]`: every
/// runner, oldest first, filtered and paged as GitLab does (`status` also takes GitLab's
/// deprecated `active` and `paused`).
pub(crate) async fn list(
    State(state): State<AppState>,
    Query(filter): Query<ListFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let runners = filtered(state.coordinator.runners().await?, filter)?;
    Ok(page_of(runners, &page))
}

/// `GET /api/v4/runners[?type=&paused=&tag_list=&status=]`: the runners the token's user
/// owns, as GitLab lists them — project and group runners (the administrator owns every
/// project and group); instance runners are in `GET /runners/all`.
pub(crate) async fn owned(
    State(state): State<AppState>,
    Query(filter): Query<ListFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let runners = state
        .coordinator
        .runners()
        .await?
        .into_iter()
        .filter(|r| r.runner_type != "instance_type")
        .collect();
    Ok(page_of(filtered(runners, filter)?, &page))
}

/// `GET /api/v4/projects/:id/runners[?type=&paused=&tag_list=&status=]`: the runners that
/// may run the project's jobs — instance runners, its groups' runners, its own project
/// runners and those enabled for it.
pub(crate) async fn project_list(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(filter): Query<ListFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project_id = admin_project_id(&state, &headers, &project).await?;
    let runners = state.coordinator.project_runners(project_id).await?;
    Ok(page_of(filtered(runners, filter)?, &page))
}

/// The body of `POST /projects/:id/runners`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EnableRunner {
    #[serde(deserialize_with = "extract::grape::opt_i64")]
    runner_id: Option<i64>,
}

/// `POST /api/v4/projects/:id/runners` (`runner_id`) → `201` and the runner: a project
/// runner of another project runs this project's jobs too. `403` for an instance, group
/// or locked runner; `400` when it runs them already.
pub(crate) async fn project_enable(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project_id = admin_project_id(&state, &headers, &project).await?;
    let req: EnableRunner = extract::params(&headers, &body).await?;
    let runner_id = req
        .runner_id
        .ok_or_else(|| ApiError::param("runner_id is missing"))?;
    let runner = state
        .coordinator
        .enable_project_runner(project_id, runner_id)
        .await
        .map_err(|e| match e {
            CoordinatorError::NotFound(_) => ApiError::not_found("Runner"),
            other => other.into(),
        })?;
    Ok(json_response(StatusCode::CREATED, &runner))
}

/// `DELETE /api/v4/projects/:id/runners/:runner_id` → `204`: the runner no longer runs
/// the project's jobs. `404` when it was not enabled there, `403` for its own project.
pub(crate) async fn project_disable(
    State(state): State<AppState>,
    Path((project, runner_id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project_id = admin_project_id(&state, &headers, &project).await?;
    state
        .coordinator
        .disable_project_runner(project_id, runner_id)
        .await
        .map_err(|e| match e {
            CoordinatorError::NotFound(_) => ApiError::not_found("Runner"),
            other => other.into(),
        })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// GitLab's runner filters over `runners` (in their order); a `type` or `status` that is
/// not one of GitLab's is `400`.
fn filtered(
    runners: Vec<crate::coordinator::Runner>,
    filter: ListFilter,
) -> Result<Vec<crate::coordinator::Runner>, ApiError> {
    let kind = filter.kind.filter(|k| !k.is_empty());
    if kind.as_deref().is_some_and(|k| !RUNNER_TYPES.contains(&k)) {
        return Err(ApiError::param("type does not have a valid value"));
    }
    let status = filter.status.filter(|s| !s.is_empty());
    if status
        .as_deref()
        .is_some_and(|s| !RUNNER_STATUSES.contains(&s))
    {
        return Err(ApiError::param("status does not have a valid value"));
    }
    let tags = filter.tag_list.map(|t| t.0).unwrap_or_default();
    Ok(runners
        .into_iter()
        .filter(|r| kind.as_deref().is_none_or(|k| r.runner_type == k))
        .filter(|r| filter.paused.is_none_or(|p| r.paused == p))
        .filter(|r| tags.iter().all(|t| r.tag_list.contains(t)))
        .filter(|r| match status.as_deref() {
            None => true,
            Some("active") => !r.paused,
            Some("paused") => r.paused,
            Some(s) => r.status == s,
        })
        .collect())
}

/// `GET /runners/:id/jobs`'s `status` (one of GitLab's job statuses), `order_by` (`id`)
/// and `sort` (`asc` or `desc`, GitLab's default; it orders only with `order_by`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RunnerJobsFilter {
    status: Option<String>,
    order_by: Option<String>,
    sort: Option<String>,
}

impl RunnerJobsFilter {
    /// The statuses asked for and the order, as GitLab's `Ci::RunnerJobsFinder` takes them
    /// (its API's parameter checks: Grape's "does not have a valid value").
    fn read(self) -> Result<(Vec<String>, JobsOrder), ApiError> {
        let statuses = match self.status.filter(|s| !s.is_empty()) {
            Some(s) if JobStatus::parse(&s).is_some() => vec![s],
            Some(_) => return Err(ApiError::param("status does not have a valid value")),
            None => Vec::new(),
        };
        let by_id = match self.order_by.as_deref() {
            None => false,
            Some("id") => true,
            Some(_) => return Err(ApiError::param("order_by does not have a valid value")),
        };
        let order = match self.sort.as_deref() {
            None | Some("desc") => JobsOrder::NewestFirst,
            Some("asc") if by_id => JobsOrder::OldestFirst,
            Some("asc") => JobsOrder::NewestFirst,
            Some(_) => return Err(ApiError::param("sort does not have a valid value")),
        };
        Ok((statuses, order))
    }
}

/// `GET /api/v4/runners/:id/jobs[?status=running&order_by=id&sort=asc&page=&per_page=]`:
/// the jobs the runner took, of every project, newest first unless asked otherwise, paged.
pub(crate) async fn jobs(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    Query(filter): Query<RunnerJobsFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let (statuses, order) = filter.read()?;
    let (offset, limit) = page.window();
    let (jobs, total) = state
        .coordinator
        .runner_jobs_page(id, &statuses, order, offset, limit)
        .await?;
    Ok(paged(jobs, total, &page))
}

/// `GET /api/v4/runners/:id/managers`: the runner's processes (GitLab's runner
/// managers), oldest first, not paged (as GitLab).
pub(crate) async fn managers(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.runner_managers(id).await?,
    ))
}

/// `GET /api/v4/runners/:id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.runner_details(id).await?,
    ))
}

/// The parameters of `PUT /runners/:id`, as GitLab names them (`active` is GitLab's
/// deprecated inverse of `paused`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UpdateParams {
    description: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    paused: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    active: Option<bool>,
    tag_list: Option<TagList>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    run_untagged: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    locked: Option<bool>,
    access_level: Option<AccessLevel>,
    #[serde(deserialize_with = "extract::grape::opt_i64")]
    maximum_timeout: Option<i64>,
    /// Also GitLab's deprecated `maintainer_note`.
    #[serde(alias = "maintainer_note")]
    maintenance_note: Option<String>,
}

/// `PUT /api/v4/runners/:id` → `200` and the runner: change its description, tags,
/// `run_untagged`, `locked`, `access_level`, `maximum_timeout`, or pause and resume it
/// (`paused`, or the deprecated `active`). JSON or a form; at least one parameter.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let p: UpdateParams = extract::params(&headers, &body).await?;
    let paused = match (p.paused, p.active) {
        (Some(_), Some(_)) => return Err(ApiError::param("active, paused are mutually exclusive")),
        (paused, active) => paused.or(active.map(|active| !active)),
    };
    let update = RunnerUpdate {
        description: p.description,
        tags: p.tag_list.map(|tags| tags.0),
        run_untagged: p.run_untagged,
        locked: p.locked,
        protected_only: p.access_level.map(|a| a == AccessLevel::RefProtected),
        maximum_timeout: p.maximum_timeout,
        paused,
        maintenance_note: p.maintenance_note,
    };
    if update == RunnerUpdate::default() {
        return Err(ApiError::param(
            "description, active, paused, tag_list, run_untagged, locked, access_level, maximum_timeout, maintenance_note are missing, at least one parameter must be provided",
        ));
    }
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.update_runner(id, &update).await?,
    ))
}

/// `DELETE /api/v4/runners/:id` → `204`; jobs it still runs fail as lost.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    state.coordinator.delete_runner(id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
