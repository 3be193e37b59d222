//! Instance CI/CD variables, GitLab's API shapes (`API::Admin::Ci::Variables`):
//! `GET/POST /admin/ci/variables`, `GET/PUT/DELETE /admin/ci/variables/:key`. Every call
//! needs the admin token. An instance variable has no environment scope: an
//! `environment_scope` parameter is unknown here and ignored, as every unknown parameter
//! is; `PUT` never renames (GitLab drops `key` from its body). Rules and limits:
//! `coordinator::instance_variables`.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_store::InstanceVariable;
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::{AppState, auth, json_response};
use crate::coordinator::SettingsError;

/// An instance variable as GitLab's API shows it (`Entities::Ci::Variable` of a
/// `Ci::InstanceVariable`: no `hidden`, no `environment_scope`).
#[derive(Debug, Serialize)]
struct InstanceVariableView {
    variable_type: String,
    key: String,
    value: String,
    protected: bool,
    masked: bool,
    raw: bool,
    description: Option<String>,
}

impl From<InstanceVariable> for InstanceVariableView {
    fn from(v: InstanceVariable) -> Self {
        Self {
            variable_type: v.variable_type,
            key: v.key,
            value: v.value,
            protected: v.protected,
            masked: v.masked,
            raw: v.raw,
            description: v.description,
        }
    }
}

/// The body of `POST` and `PUT`: absent fields keep their default (`POST`) or current
/// value (`PUT`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct InstanceVariableParams {
    key: Option<String>,
    value: Option<String>,
    variable_type: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    protected: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    masked: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    raw: Option<bool>,
    description: Option<String>,
}

impl InstanceVariableParams {
    /// `v` with the given fields (but `key`, which only `POST` sets).
    fn apply(self, mut v: InstanceVariable) -> InstanceVariable {
        if let Some(value) = self.value {
            v.value = value;
        }
        if let Some(t) = self.variable_type {
            v.variable_type = t;
        }
        v.protected = self.protected.unwrap_or(v.protected);
        v.masked = self.masked.unwrap_or(v.masked);
        v.raw = self.raw.unwrap_or(v.raw);
        if self.description.is_some() {
            v.description = self.description;
        }
        v
    }
}

/// GitLab's answer for a key the instance does not have.
fn not_found() -> ApiError {
    ApiError::not_found("InstanceVariable")
}

/// The variable `key`, else `404`.
async fn find(state: &AppState, key: &str) -> Result<InstanceVariable, ApiError> {
    state
        .coordinator
        .settings()
        .instance_variables()
        .await?
        .into_iter()
        .find(|v| v.key == key)
        .ok_or_else(not_found)
}

/// A variable that went between the read and the write is a `404` too.
fn gone(e: SettingsError) -> ApiError {
    match e {
        SettingsError::NotFound(_) => not_found(),
        other => other.into(),
    }
}

/// `GET /api/v4/admin/ci/variables[?page=&per_page=]`: a page (20 by default) with GitLab's
/// `X-Page`, `X-Per-Page`, `X-Next-Page` and `X-Total` headers.
pub(crate) async fn list(
    State(state): State<AppState>,
    page: super::projects::Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let vars = state.coordinator.settings().instance_variables().await?;
    let views: Vec<InstanceVariableView> =
        vars.into_iter().map(InstanceVariableView::from).collect();
    Ok(super::projects::page_of(views, &page))
}

/// `POST /api/v4/admin/ci/variables` → `201` with the variable.
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let mut params: InstanceVariableParams = extract::params(&headers, &body).await?;
    let Some(key) = params.key.take() else {
        return Err(ApiError::param("key is missing"));
    };
    if params.value.is_none() {
        return Err(ApiError::param("value is missing"));
    }
    let v = params.apply(InstanceVariable::new(key, ""));
    state
        .coordinator
        .settings()
        .create_instance_variable(&v)
        .await?;
    Ok(json_response(
        StatusCode::CREATED,
        &InstanceVariableView::from(v),
    ))
}

/// `GET /api/v4/admin/ci/variables/:key`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let v = find(&state, &key).await?;
    Ok(json_response(
        StatusCode::OK,
        &InstanceVariableView::from(v),
    ))
}

/// `PUT /api/v4/admin/ci/variables/:key` → `200` with the variable.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: InstanceVariableParams = extract::params(&headers, &body).await?;
    let v = params.apply(find(&state, &key).await?);
    state
        .coordinator
        .settings()
        .update_instance_variable(&key, &v)
        .await
        .map_err(gone)?;
    Ok(json_response(
        StatusCode::OK,
        &InstanceVariableView::from(v),
    ))
}

/// `DELETE /api/v4/admin/ci/variables/:key` → `204`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    state
        .coordinator
        .settings()
        .delete_instance_variable(&key)
        .await
        .map_err(gone)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
