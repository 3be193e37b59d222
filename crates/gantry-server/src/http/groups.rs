//! Groups, GitLab's API shapes (admin token): `GET /groups` (paged), `POST /groups`,
//! `GET /groups/:id` and `DELETE /groups/:id`, `:id` the group's id or URL-encoded full
//! path; the same groups as GitLab's namespaces API shows them: `GET /namespaces`,
//! `GET /namespaces/:id`, `GET /namespaces/:path/exists`. Groups are the namespaces of project paths and the groups made here:
//! `coordinator/groups.rs`.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use serde::Deserialize;

use crate::coordinator::{CoordinatorError, NamespaceView};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::{Page, page_of};
use super::{AppState, auth, json_response};

/// `GET /groups`.
pub(crate) async fn list(
    State(state): State<AppState>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(page_of(state.coordinator.groups().await?, &page))
}

/// `GET /groups/:id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    match state.coordinator.group(&group).await {
        Ok(g) => Ok(json_response(StatusCode::OK, &g)),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Group")),
        Err(other) => Err(other.into()),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct GroupParams {
    name: Option<String>,
    path: Option<String>,
    parent_id: Option<serde_json::Value>,
    description: Option<String>,
}

/// `POST /groups` (`name`, `path`, `parent_id`, `description`): `201` with the group.
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let params: GroupParams = extract::params(&headers, &body).await?;
    let (Some(name), Some(path)) = (params.name, params.path) else {
        return Err(ApiError::bad_request("name, path are missing"));
    };
    let parent = match params.parent_id {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) if s.is_empty() => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(other) => Some(other.to_string()),
    };
    match state
        .coordinator
        .create_group(
            &name,
            &path,
            parent.as_deref(),
            params.description.as_deref().unwrap_or_default(),
        )
        .await
    {
        Ok(group) => Ok(json_response(StatusCode::CREATED, &group)),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Parent group")),
        Err(other) => Err(other.into()),
    }
}

/// `DELETE /groups/:id`: `202`, as GitLab answers (the group is gone when it does).
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    match state.coordinator.delete_group(&group).await {
        Ok(()) => Ok(json_response(
            StatusCode::ACCEPTED,
            &serde_json::json!({ "message": "202 Accepted" }),
        )),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Group")),
        Err(other) => Err(other.into()),
    }
}

/// The filters of `GET /namespaces`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NamespaceFilter {
    /// Part of a namespace's name or path (any case); with `full_path_search`, of its
    /// full path.
    search: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    full_path_search: Option<bool>,
    /// Only namespaces without a parent.
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    top_level_only: Option<bool>,
    /// The admin owns every namespace: no filter.
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    owned_only: Option<bool>,
}

/// `GET /namespaces[?search=&top_level_only=&full_path_search=&owned_only=]`: the
/// namespaces (every group: Gantry has no user namespaces), by id, paged.
pub(crate) async fn namespaces(
    State(state): State<AppState>,
    Query(filter): Query<NamespaceFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let _ = filter.owned_only;
    let search = filter.search.as_deref().map(str::to_lowercase);
    let mut found: Vec<NamespaceView> = state
        .coordinator
        .groups()
        .await?
        .iter()
        .filter(|g| filter.top_level_only != Some(true) || g.parent_id.is_none())
        .filter(|g| match &search {
            None => true,
            Some(s) if filter.full_path_search == Some(true) => {
                g.full_path.to_lowercase().contains(s)
            }
            Some(s) => g.name.to_lowercase().contains(s) || g.path.to_lowercase().contains(s),
        })
        .map(NamespaceView::of)
        .collect();
    found.sort_by_key(|n| n.id);
    Ok(page_of(found, &page))
}

/// `GET /namespaces/:id`, `:id` its id or URL-encoded full path.
pub(crate) async fn namespace(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    match state.coordinator.group(&id).await {
        Ok(g) => Ok(json_response(StatusCode::OK, &NamespaceView::of(&g))),
        Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Namespace")),
        Err(other) => Err(other.into()),
    }
}

/// The query of `GET /namespaces/:path/exists`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ExistsQuery {
    /// The parent group's id; none: top-level namespaces.
    #[serde(deserialize_with = "extract::grape::opt_i64")]
    parent_id: Option<i64>,
}

/// `GET /namespaces/:path/exists[?parent_id=]`: `{"exists", "suggests"}` — whether a
/// namespace of that path (any case) is under the parent (top level without one), and
/// when it is, the path with the first number that makes it free (GitLab's
/// `Namespace.clean_path`: `group` → `group1`).
pub(crate) async fn namespace_exists(
    State(state): State<AppState>,
    Path(path): Path<String>,
    Query(query): Query<ExistsQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let siblings: Vec<String> = state
        .coordinator
        .groups()
        .await?
        .iter()
        .filter(|g| g.parent_id == query.parent_id)
        .map(|g| g.path.to_lowercase())
        .collect();
    let taken = |p: &str| siblings.iter().any(|s| *s == p.to_lowercase());
    let exists = taken(&path);
    let suggests: Vec<String> = if exists {
        (1..)
            .map(|n| format!("{path}{n}"))
            .find(|candidate| !taken(candidate))
            .into_iter()
            .collect()
    } else {
        Vec::new()
    };
    Ok(json_response(
        StatusCode::OK,
        &serde_json::json!({ "exists": exists, "suggests": suggests }),
    ))
}
