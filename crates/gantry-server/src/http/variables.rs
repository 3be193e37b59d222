//! Project and group CI/CD variables, GitLab's API shapes: `GET/POST /projects/:id/variables`,
//! `GET/PUT/DELETE /projects/:id/variables/:key`, and the same under `/groups/:id`, where
//! `:id` is the group's id or URL-encoded full path (`acme%2Fplatform`; a group is a
//! namespace some project is in, else `404 Group Not Found`: `coordinator/groups.rs`). One set of handlers serves both. A key that exists for several environment
//! scopes is addressed with `filter[environment_scope]=<scope>`. Every call needs the admin
//! token. `PUT` changes the fields given but never the key nor whether the variable is
//! hidden (`key` and `masked_and_hidden` in its body are ignored, as GitLab ignores them). Rules and limits: `coordinator::variables`.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;

use gantry_store::{ProjectVariable, VariableOwner};
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::find_project;
use super::{AppState, auth, json_response};
use crate::coordinator::CoordinatorError;

/// A variable as GitLab's API shows it: a hidden one without its value (`null`).
#[derive(Debug, Serialize)]
struct VariableView {
    variable_type: String,
    key: String,
    value: Option<String>,
    protected: bool,
    masked: bool,
    hidden: bool,
    raw: bool,
    environment_scope: String,
    description: Option<String>,
}

impl From<ProjectVariable> for VariableView {
    fn from(v: ProjectVariable) -> Self {
        Self {
            variable_type: v.variable_type,
            key: v.key,
            value: (!v.hidden).then_some(v.value),
            protected: v.protected,
            masked: v.masked,
            hidden: v.hidden,
            raw: v.raw,
            environment_scope: v.environment_scope,
            description: v.description,
        }
    }
}

/// The body of `POST` and `PUT`: absent fields keep their default (`POST`) or current
/// value (`PUT`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct VariableParams {
    key: Option<String>,
    value: Option<String>,
    variable_type: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    protected: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    masked: Option<bool>,
    /// At creation only: masked, and the value never shown again.
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    masked_and_hidden: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    raw: Option<bool>,
    environment_scope: Option<String>,
    description: Option<String>,
}

impl VariableParams {
    fn apply(self, mut v: ProjectVariable) -> ProjectVariable {
        if let Some(key) = self.key {
            v.key = key;
        }
        if let Some(value) = self.value {
            v.value = value;
        }
        if let Some(t) = self.variable_type {
            v.variable_type = t;
        }
        v.protected = self.protected.unwrap_or(v.protected);
        v.masked = self.masked.unwrap_or(v.masked);
        v.raw = self.raw.unwrap_or(v.raw);
        if let Some(scope) = self.environment_scope {
            v.environment_scope = scope;
        }
        if self.description.is_some() {
            v.description = self.description;
        }
        v
    }
}

/// `filter[environment_scope]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ScopeFilter {
    #[serde(rename = "filter[environment_scope]")]
    environment_scope: Option<String>,
}

/// Whose variables a route names: `{project}` (id or path) or `{group}` (full path),
/// and `{key}` on the routes of one variable.
async fn owner(
    state: &AppState,
    params: &HashMap<String, String>,
) -> Result<VariableOwner, ApiError> {
    if let Some(project) = params.get("project") {
        return Ok(VariableOwner::Project(
            find_project(state, project).await?.id,
        ));
    }
    let named = params.get("group").map(String::as_str).unwrap_or_default();
    match state.coordinator.group_path(named).await {
        Ok(path) => Ok(VariableOwner::Group(path)),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Group")),
        Err(other) => Err(other.into()),
    }
}

fn key(params: &HashMap<String, String>) -> &str {
    params.get("key").map(String::as_str).unwrap_or_default()
}

/// `GET /api/v4/{projects,groups}/:id/variables[?page=&per_page=]`: a page (20 by
/// default) with GitLab's `X-Page`, `X-Per-Page`, `X-Next-Page` and `X-Total` headers.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    page: super::projects::Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let owner = owner(&state, &params).await?;
    let vars = state.coordinator.settings().variables(&owner).await?;
    let views: Vec<VariableView> = vars.into_iter().map(VariableView::from).collect();
    Ok(super::projects::page_of(views, &page))
}

/// `POST /api/v4/{projects,groups}/:id/variables` → `201` with the variable.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let request: VariableParams = extract::params(&headers, &body).await?;
    let owner = owner(&state, &params).await?;
    if request.key.is_none() {
        return Err(ApiError::param("key is missing"));
    }
    if request.value.is_none() {
        return Err(ApiError::param("value is missing"));
    }
    let hidden = request.masked_and_hidden == Some(true);
    let mut v = request.apply(ProjectVariable::new("", ""));
    if hidden {
        v.masked = true;
        v.hidden = true;
    }
    state
        .coordinator
        .settings()
        .create_variable(&owner, &v)
        .await?;
    Ok(json_response(StatusCode::CREATED, &VariableView::from(v)))
}

/// The one variable `key` names (with the scope filter when several scopes have it).
async fn find(
    state: &AppState,
    owner: &VariableOwner,
    key: &str,
    filter: &ScopeFilter,
) -> Result<ProjectVariable, ApiError> {
    let mut found: Vec<ProjectVariable> = state
        .coordinator
        .settings()
        .variables(owner)
        .await?
        .into_iter()
        .filter(|v| v.key == key)
        .filter(|v| {
            filter
                .environment_scope
                .as_ref()
                .is_none_or(|s| *s == v.environment_scope)
        })
        .collect();
    match found.len() {
        0 => Err(ApiError::not_found("Variable")),
        1 => Ok(found.remove(0)),
        _ => Err(ApiError::conflict(
            "There are multiple variables with provided parameters. Please use 'filter[environment_scope]'",
        )),
    }
}

/// `GET /api/v4/{projects,groups}/:id/variables/:key`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    Query(filter): Query<ScopeFilter>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let owner = owner(&state, &params).await?;
    let v = find(&state, &owner, key(&params), &filter).await?;
    Ok(json_response(StatusCode::OK, &VariableView::from(v)))
}

/// `PUT /api/v4/{projects,groups}/:id/variables/:key` → `200` with the variable.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    Query(filter): Query<ScopeFilter>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let request: VariableParams = extract::params(&headers, &body).await?;
    let owner = owner(&state, &params).await?;
    let key = key(&params);
    let current = find(&state, &owner, key, &filter).await?;
    let scope = current.environment_scope.clone();
    // GitLab updates with `declared_params.except(:key, :filter)`, and `PUT` declares no
    // `masked_and_hidden`: a `key` in the body never renames the variable, and whether it
    // is hidden stays as created.
    let v = VariableParams {
        key: None,
        masked_and_hidden: None,
        ..request
    }
    .apply(current);
    state
        .coordinator
        .settings()
        .update_variable(&owner, key, &scope, &v)
        .await?;
    Ok(json_response(StatusCode::OK, &VariableView::from(v)))
}

/// `DELETE /api/v4/{projects,groups}/:id/variables/:key` → `204`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    Query(filter): Query<ScopeFilter>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let owner = owner(&state, &params).await?;
    let key = key(&params);
    let current = find(&state, &owner, key, &filter).await?;
    state
        .coordinator
        .settings()
        .delete_variable(&owner, key, &current.environment_scope)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
