//! User API, runners: `POST /user/runners` (create → `glrt-` token, `runner-api.md`
//! §2.2), `GET /runners/all`, `GET /runners/:id`, `DELETE /runners/:id`. Admin token.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_protocol::{AccessLevel, CreateRunnerRequest, RunnerRegistrationDetails, RunnerType};

use crate::coordinator::{CoordinatorError, RunnerOptions};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::{AppState, auth, json_response};

/// `POST /api/v4/user/runners` → `201 {"id", "token", "token_expires_at"}`. Instance and
/// project runners; groups do not exist here (`400`).
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: CreateRunnerRequest = extract::params(&headers, &body)?;
    let project_id = match req.runner_type {
        None => return Err(ApiError::param("runner_type is missing")),
        Some(RunnerType::InstanceType) => None,
        Some(RunnerType::GroupType) => {
            return Err(ApiError::bad_request(
                "group runners are not supported: Gantry has no groups",
            ));
        }
        Some(RunnerType::ProjectType) => Some(
            req.project_id
                .ok_or_else(|| ApiError::param("project_id is missing"))?,
        ),
    };
    let opts = RunnerOptions {
        description: req.description,
        tags: req.tag_list.0,
        run_untagged: req.run_untagged.unwrap_or(true),
        locked: req.locked.unwrap_or(false),
        protected_only: req.access_level == Some(AccessLevel::RefProtected),
        project_id,
        maximum_timeout: req.maximum_timeout,
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

/// `GET /api/v4/runners/all`.
pub(crate) async fn list(State(state): State<AppState>, headers: HeaderMap) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.runners().await?,
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
        &state.coordinator.runner(id).await?,
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
