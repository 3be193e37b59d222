//! Protected branches and tags, GitLab's API shapes: `GET/POST
//! /projects/:id/protected_branches`, `GET/DELETE /projects/:id/protected_branches/:name`,
//! and the same for `protected_tags`. `name` (a name or a pattern with `*`) comes in the
//! query string, as GitLab's documentation sends it, or in the body. Every call needs
//! the admin token. Access levels are shown as GitLab's defaults (Maintainers) and
//! ignored when given: Gantry has one user. Rules: `coordinator::protected`.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_store::{ProtectedRef, RefKind};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::find_project;
use super::{AppState, auth, json_response};

/// GitLab's Maintainers access level, the default of every protection.
fn maintainers(id: i64) -> Value {
    json!([{
        "id": id,
        "access_level": 40,
        "access_level_description": "Maintainers",
        "deploy_key_id": null,
        "user_id": null,
        "group_id": null,
    }])
}

/// A protection as GitLab's API shows it (`Entities::ProtectedBranch` / `ProtectedTag`).
fn view(p: &ProtectedRef) -> Value {
    match p.kind {
        RefKind::Branch => json!({
            "id": p.id,
            "name": p.name,
            "push_access_levels": maintainers(p.id),
            "merge_access_levels": maintainers(p.id),
            "allow_force_push": false,
            "code_owner_approval_required": false,
        }),
        RefKind::Tag => json!({
            "name": p.name,
            "create_access_levels": maintainers(p.id),
        }),
    }
}

/// Which list a route names.
fn kind(uri: &axum::http::Uri) -> RefKind {
    if uri.path().contains("/protected_tags") {
        RefKind::Tag
    } else {
        RefKind::Branch
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NameParam {
    name: Option<String>,
}

/// `GET /api/v4/projects/:id/protected_{branches,tags}`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, param(&params, "project")).await?;
    let refs = state
        .coordinator
        .settings()
        .protected_refs(project.id, kind(&uri))
        .await?;
    let views: Vec<Value> = refs.iter().map(view).collect();
    Ok(json_response(StatusCode::OK, &views))
}

/// `POST /api/v4/projects/:id/protected_{branches,tags}` → `201`; `409` when the name is
/// protected already.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    Query(query): Query<NameParam>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let from_body: NameParam = extract::params(&headers, &body).await?;
    let Some(name) = query.name.or(from_body.name) else {
        return Err(ApiError::param("name is missing"));
    };
    let project = find_project(&state, param(&params, "project")).await?;
    let created = state
        .coordinator
        .settings()
        .protect_ref(project.id, kind(&uri), &name)
        .await?;
    Ok(json_response(StatusCode::CREATED, &view(&created)))
}

/// `GET /api/v4/projects/:id/protected_{branches,tags}/:name` (the name URL-encoded).
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, param(&params, "project")).await?;
    let name = param(&params, "name");
    let found = state
        .coordinator
        .settings()
        .protected_refs(project.id, kind(&uri))
        .await?
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ApiError::message(StatusCode::NOT_FOUND, "Not found"))?;
    Ok(json_response(StatusCode::OK, &view(&found)))
}

/// `DELETE /api/v4/projects/:id/protected_{branches,tags}/:name` → `204`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(params): Path<HashMap<String, String>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, param(&params, "project")).await?;
    match state
        .coordinator
        .settings()
        .unprotect_ref(project.id, kind(&uri), param(&params, "name"))
        .await
    {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(crate::coordinator::SettingsError::NotFound(_)) => {
            Err(ApiError::message(StatusCode::NOT_FOUND, "Not found"))
        }
        Err(other) => Err(other.into()),
    }
}

fn param<'a>(params: &'a HashMap<String, String>, name: &str) -> &'a str {
    params.get(name).map(String::as_str).unwrap_or_default()
}
