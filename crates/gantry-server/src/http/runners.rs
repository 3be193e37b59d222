//! Runner lifecycle (`runner-api.md` §2): legacy registration, verify, delete, delete a
//! manager, router discovery. Authenticated by the token in the body.

use axum::Extension;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_protocol::{
    AccessLevel, RegisterRunnerRequest, RunnerRegistrationDetails, RunnerTokenRequest,
    UnregisterManagerRequest, VerifyRunnerRequest, header,
};

use crate::coordinator::RunnerOptions;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::peer::{Peer, peer_ip};
use super::{AppState, auth, json_response};

/// `POST /api/v4/runners` (§2.1): register with the registration token → `201`.
pub(crate) async fn register(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let req: RegisterRunnerRequest = extract::params(&headers, &body).await?;
    if req.token.trim().is_empty() {
        return Err(ApiError::forbidden_because(
            "the registration token is missing",
        ));
    }
    let tags = req.tag_list.0;
    if req.run_untagged == Some(false) && tags.is_empty() {
        return Err(ApiError::param(
            "tags_list can not be empty when runner is not allowed to pick untagged jobs",
        ));
    }
    let opts = RunnerOptions {
        description: req.description,
        run_untagged: req.run_untagged.unwrap_or(true),
        tags,
        locked: req.locked.unwrap_or(true),
        protected_only: req.access_level == Some(AccessLevel::RefProtected),
        project_id: None,
        group_path: None,
        maximum_timeout: req.maximum_timeout,
        paused: req.paused.unwrap_or(false),
        any_tags: false,
        maintenance_note: Some(req.maintenance_note).filter(|n| !n.is_empty()),
    };
    let name = Some(req.info.name).filter(|n| !n.is_empty());
    let (runner, token) = state
        .coordinator
        .register_runner(&req.token, opts, name)
        .await?;
    Ok(json_response(
        StatusCode::CREATED,
        &RunnerRegistrationDetails {
            id: runner.id,
            token,
            token_expires_at: None,
        },
    ))
}

/// `POST /api/v4/runners/verify` (§2.3): `200` with the JSON form, `403` for an unknown
/// token. The `system_id` it sends has a manager from now on (GitLab's
/// `ensure_runner_manager`), with its `info` and address.
pub(crate) async fn verify(
    State(state): State<AppState>,
    peer: Option<Extension<ConnectInfo<Peer>>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let req: VerifyRunnerRequest = extract::params(&headers, &body).await?;
    let runner = auth::require_runner(&state.coordinator, &req.token).await?;
    let info = gantry_store::RunnerInfo {
        version: req.info.version,
        revision: req.info.revision,
        platform: req.info.platform,
        architecture: req.info.architecture,
        executor: req.info.executor,
        ip_address: peer_ip(peer.as_ref()),
    };
    state
        .coordinator
        .verified_runner_manager(runner.id, &req.system_id, &info)
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &RunnerRegistrationDetails {
            id: runner.id,
            token: req.token,
            token_expires_at: None,
        },
    ))
}

/// `DELETE /api/v4/runners` (§2.4): delete the runner the token belongs to → `204`.
pub(crate) async fn unregister(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let req: RunnerTokenRequest = extract::params(&headers, &body).await?;
    let runner = auth::require_runner(&state.coordinator, &req.token).await?;
    state.coordinator.delete_runner(runner.id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /api/v4/runners/managers` (§2.5): `204` once the runner's manager of that
/// `system_id` is deleted, `404` (`Runner manager not found`) when it has none.
pub(crate) async fn unregister_manager(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let req: UnregisterManagerRequest = extract::params(&headers, &body).await?;
    let runner = auth::require_runner(&state.coordinator, &req.token).await?;
    if req.system_id.trim().is_empty() {
        return Err(ApiError::param("system_id is missing"));
    }
    state
        .coordinator
        .delete_runner_manager(runner.id, &req.system_id)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /api/v4/runners/router/discovery` (§2.7): no job router here → `501` (after
/// checking the `RUNNER-TOKEN` header).
pub(crate) async fn router_discovery(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let token = extract::header_str(&headers, header::RUNNER_TOKEN).unwrap_or("");
    auth::require_runner(&state.coordinator, token).await?;
    Err(ApiError::message(
        StatusCode::NOT_IMPLEMENTED,
        "Not Implemented - no job router",
    ))
}
