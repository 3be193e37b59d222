//! Pipeline schedules, GitLab's API shapes (admin token): `GET/POST
//! /projects/:id/pipeline_schedules` (`?scope=active|inactive`), `GET/PUT/DELETE
//! …/pipeline_schedules/:schedule_id`, `GET …/:schedule_id/pipelines`, `POST
//! …/:schedule_id/play`, `POST …/:schedule_id/take_ownership` and the schedule's
//! variables, `POST …/:schedule_id/variables`,
//! `PUT/DELETE …/variables/:key`. Parameters come as JSON or a form. Rules and limits:
//! `coordinator/schedules.rs`.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::admin_project_id as project_id;
use super::{AppState, json_response};
use crate::coordinator::{ScheduleRequest, ScheduleVariable};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ScheduleParams {
    description: Option<String>,
    #[serde(rename = "ref")]
    ref_name: Option<String>,
    cron: Option<String>,
    cron_timezone: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    active: Option<bool>,
}

impl From<ScheduleParams> for ScheduleRequest {
    fn from(p: ScheduleParams) -> Self {
        ScheduleRequest {
            description: p.description,
            ref_name: p.ref_name,
            cron: p.cron,
            cron_timezone: p.cron_timezone,
            active: p.active,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ScopeQuery {
    scope: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VariableParams {
    key: Option<String>,
    value: Option<String>,
    variable_type: Option<String>,
}

/// `GET /projects/:id/pipeline_schedules`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<ScopeQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let active = match query.scope.as_deref() {
        None => None,
        Some("active") => Some(true),
        Some("inactive") => Some(false),
        Some(other) => {
            return Err(ApiError::param(format!(
                "scope `{other}` does not have a valid value: active or inactive"
            )));
        }
    };
    let schedules: Vec<_> = state
        .coordinator
        .schedules()
        .list(project)
        .await?
        .into_iter()
        .filter(|s| active.is_none_or(|a| s.active == a))
        .collect();
    Ok(json_response(StatusCode::OK, &schedules))
}

/// `POST /projects/:id/pipeline_schedules` → `201`.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let params: ScheduleParams = extract::params(&headers, &body).await?;
    let created = state
        .coordinator
        .schedules()
        .create(project, params.into())
        .await?;
    Ok(json_response(StatusCode::CREATED, &created))
}

/// `GET /projects/:id/pipeline_schedules/:schedule_id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let schedule = state.coordinator.schedules().get(project, id).await?;
    Ok(json_response(StatusCode::OK, &schedule))
}

/// `POST /projects/:id/pipeline_schedules/:schedule_id/take_ownership` → `201` with the
/// schedule. Every schedule is owned by the server's one user already (the `owner` its
/// answers show), so taking it changes nothing; a missing schedule is `404`.
pub(crate) async fn take_ownership(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let schedule = state.coordinator.schedules().get(project, id).await?;
    Ok(json_response(StatusCode::CREATED, &schedule))
}

/// `PUT /projects/:id/pipeline_schedules/:schedule_id`: the fields given change.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let params: ScheduleParams = extract::params(&headers, &body).await?;
    let updated = state
        .coordinator
        .schedules()
        .update(project, id, params.into())
        .await?;
    Ok(json_response(StatusCode::OK, &updated))
}

/// `DELETE /projects/:id/pipeline_schedules/:schedule_id` → `204`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    state.coordinator.schedules().delete(project, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /projects/:id/pipeline_schedules/:schedule_id/pipelines`, newest first.
pub(crate) async fn pipelines(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let pipelines = state.coordinator.schedule_pipelines(project, id).await?;
    Ok(json_response(StatusCode::OK, &pipelines))
}

/// `POST /projects/:id/pipeline_schedules/:schedule_id/play` → `201`, GitLab's
/// `{"message": "201 Created"}`, plus the pipeline's id.
pub(crate) async fn play(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let pipeline = state
        .coordinator
        .play_pipeline_schedule(project, id)
        .await?;
    Ok(json_response(
        StatusCode::CREATED,
        &serde_json::json!({"message": "201 Created", "pipeline_id": pipeline.id}),
    ))
}

fn variable(params: VariableParams, key: Option<String>) -> ApiResult<ScheduleVariable> {
    let key = key
        .or(params.key)
        .ok_or_else(|| ApiError::param("key is missing"))?;
    let value = params
        .value
        .ok_or_else(|| ApiError::param("value is missing"))?;
    Ok(ScheduleVariable {
        key,
        value,
        variable_type: params.variable_type.unwrap_or_else(|| "env_var".to_owned()),
    })
}

/// `POST /projects/:id/pipeline_schedules/:schedule_id/variables` → `201`.
pub(crate) async fn create_variable(
    State(state): State<AppState>,
    Path((project, id)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let params: VariableParams = extract::params(&headers, &body).await?;
    let v = state
        .coordinator
        .schedules()
        .set_variable(project, id, variable(params, None)?, true)
        .await?;
    Ok(json_response(StatusCode::CREATED, &v))
}

/// `PUT /projects/:id/pipeline_schedules/:schedule_id/variables/:key`.
pub(crate) async fn update_variable(
    State(state): State<AppState>,
    Path((project, id, key)): Path<(String, i64, String)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let params: VariableParams = extract::params(&headers, &body).await?;
    let v = state
        .coordinator
        .schedules()
        .set_variable(project, id, variable(params, Some(key))?, false)
        .await?;
    Ok(json_response(StatusCode::OK, &v))
}

/// `DELETE /projects/:id/pipeline_schedules/:schedule_id/variables/:key` → the variable.
pub(crate) async fn delete_variable(
    State(state): State<AppState>,
    Path((project, id, key)): Path<(String, i64, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = project_id(&state, &headers, &project).await?;
    let v = state
        .coordinator
        .schedules()
        .delete_variable(project, id, &key)
        .await?;
    Ok(json_response(StatusCode::OK, &v))
}
