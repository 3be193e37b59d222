//! Environments and deployments, GitLab's API shapes (admin token):
//! `GET/POST /projects/:id/environments` (`?name=`, `?search=`, `?states=`, paged),
//! `GET/PUT/DELETE …/environments/:environment_id`, `POST …/:environment_id/stop`
//! (`force`), `POST …/environments/stop_stale` (`before`), `GET /projects/:id/deployments` (`?environment=`, `?status=`,
//! `?updated_after=`, `?updated_before=`, `?finished_after=`, `?finished_before=`,
//! `?order_by=`, `?sort=`, paged), `GET …/deployments/:deployment_id`, and deployments made
//! outside pipelines: `POST …/deployments`, `PUT …/deployments/:deployment_id` (`status`). Parameters come
//! as JSON or a form. Rules: `coordinator/environments.rs`.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_store::{DeploymentFilter, EnvironmentChanges, EnvironmentFilter};
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::{Page, admin_project_id, paged};
use super::{AppState, json_response};
use crate::coordinator::{DeploymentRequest, EnvironmentRequest};

/// GitLab's deployment statuses.
const DEPLOYMENT_STATUSES: [&str; 7] = [
    "created", "running", "success", "failed", "canceled", "skipped", "blocked",
];

/// The orders of `GET …/deployments` (`order_by`).
const DEPLOYMENT_ORDERS: [&str; 6] = [
    "id",
    "iid",
    "created_at",
    "updated_at",
    "finished_at",
    "ref",
];

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ListQuery {
    name: Option<String>,
    search: Option<String>,
    states: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EnvironmentParams {
    name: Option<String>,
    external_url: Option<String>,
    tier: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StopParams {
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    force: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct DeploymentQuery {
    environment: Option<String>,
    status: Option<String>,
    updated_after: Option<String>,
    updated_before: Option<String>,
    finished_after: Option<String>,
    finished_before: Option<String>,
    order_by: Option<String>,
    sort: Option<String>,
}

/// `GET /projects/:id/environments`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<ListQuery>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let filter = EnvironmentFilter {
        name: query.name,
        search: query.search,
        state: query.states,
    };
    let (offset, limit) = page.window();
    let (environments, total) = state
        .coordinator
        .environments()
        .page(project, &filter, offset, limit)
        .await?;
    Ok(paged(environments, total, &page))
}

/// `POST /projects/:id/environments` → `201`.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let params: EnvironmentParams = extract::params(&headers, &body).await?;
    let created = state
        .coordinator
        .environments()
        .create(
            project,
            EnvironmentRequest {
                name: params.name,
                external_url: params.external_url,
                tier: params.tier,
            },
        )
        .await?;
    Ok(json_response(StatusCode::CREATED, &created))
}

/// `GET /projects/:id/environments/:environment_id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let environment = state.coordinator.environment(project, id).await?;
    Ok(json_response(StatusCode::OK, &environment))
}

/// `PUT /projects/:id/environments/:environment_id`: `external_url` (empty removes it)
/// and `tier`; the name cannot change.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let params: EnvironmentParams = extract::params(&headers, &body).await?;
    if params.name.is_some() {
        return Err(ApiError::param(
            "name cannot be changed: an environment keeps its name (create another one instead)",
        ));
    }
    let changes = EnvironmentChanges {
        external_url: params.external_url.map(Some),
        tier: params.tier,
    };
    let environment = state
        .coordinator
        .environments()
        .update(project, id, changes)
        .await?;
    Ok(json_response(StatusCode::OK, &environment))
}

/// `DELETE /projects/:id/environments/:environment_id` → `204` (stopped ones only).
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    state.coordinator.environments().delete(project, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /projects/:id/environments/:environment_id/stop` (`force=true`: without its
/// stop jobs).
pub(crate) async fn stop(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let params: StopParams = extract::params(&headers, &body).await?;
    let environment = state
        .coordinator
        .stop_environment(project, id, params.force.unwrap_or(false))
        .await?;
    Ok(json_response(StatusCode::OK, &environment))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct StaleParams {
    before: Option<String>,
}

/// `POST /projects/:id/environments/stop_stale` (`before`: an ISO 8601 time between ten
/// years and one week ago): stops the environments neither changed nor deployed to since.
pub(crate) async fn stop_stale(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<StaleParams>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let params: StaleParams = extract::params(&headers, &body).await?;
    let before = params.before.or(query.before).ok_or_else(|| {
        ApiError::param("before is missing: give an ISO 8601 time such as 2019-03-15T08:00:00Z")
    })?;
    let before = extract::time_ms("before", &before)?;
    state
        .coordinator
        .stop_stale_environments(project, before)
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({"message": "Successfully requested stop for all stale environments"}),
    ))
}

/// `GET /projects/:id/deployments` (oldest first unless `sort=desc`, as GitLab).
pub(crate) async fn deployments(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<DeploymentQuery>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let filter = deployment_filter(query)?;
    let (offset, limit) = page.window();
    let (deployments, total) = state
        .coordinator
        .deployments_page(project, &filter, offset, limit)
        .await?;
    Ok(paged(deployments, total, &page))
}

/// `GET /projects/:id/deployments/:deployment_id`.
pub(crate) async fn deployment(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let deployment = state.coordinator.deployment(project, id).await?;
    Ok(json_response(StatusCode::OK, &deployment))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct DeploymentParams {
    environment: Option<String>,
    sha: Option<String>,
    #[serde(rename = "ref")]
    ref_name: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    tag: Option<bool>,
    status: Option<String>,
}

/// `POST /projects/:id/deployments` → `201`: a deployment made outside pipelines.
pub(crate) async fn create_deployment(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let p: DeploymentParams = extract::params(&headers, &body).await?;
    let request = DeploymentRequest {
        environment: p.environment,
        sha: p.sha,
        ref_name: p.ref_name,
        tag: p.tag,
        status: p.status,
    };
    let created = state
        .coordinator
        .create_deployment(project, request)
        .await?;
    Ok(json_response(StatusCode::CREATED, &created))
}

/// `PUT /projects/:id/deployments/:deployment_id`: `status`.
pub(crate) async fn update_deployment(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let p: DeploymentParams = extract::params(&headers, &body).await?;
    let updated = state
        .coordinator
        .update_deployment(project, id, p.status)
        .await?;
    Ok(json_response(StatusCode::OK, &updated))
}

fn deployment_filter(q: DeploymentQuery) -> ApiResult<DeploymentFilter> {
    if let Some(status) = &q.status {
        if !DEPLOYMENT_STATUSES.contains(&status.as_str()) {
            return Err(ApiError::param(format!(
                "status does not have a valid value: give one of {}",
                DEPLOYMENT_STATUSES.join(", ")
            )));
        }
    }
    let order_by = q.order_by.unwrap_or_else(|| "id".to_owned());
    if !DEPLOYMENT_ORDERS.contains(&order_by.as_str()) {
        return Err(ApiError::param(format!(
            "order_by does not have a valid value: give one of {}",
            DEPLOYMENT_ORDERS.join(", ")
        )));
    }
    let ascending = match q.sort.as_deref() {
        None | Some("asc") => true,
        Some("desc") => false,
        Some(_) => {
            return Err(ApiError::param(
                "sort does not have a valid value: give asc or desc",
            ));
        }
    };
    let time = |name: &str, value: Option<String>| -> ApiResult<Option<i64>> {
        value.map(|v| extract::time_ms(name, &v)).transpose()
    };
    Ok(DeploymentFilter {
        environment: q.environment,
        status: q.status,
        updated_after: time("updated_after", q.updated_after)?,
        updated_before: time("updated_before", q.updated_before)?,
        finished_after: time("finished_after", q.finished_after)?,
        finished_before: time("finished_before", q.finished_before)?,
        order_by,
        ascending,
    })
}
