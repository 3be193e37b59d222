//! User API, projects and pipelines (GitLab API v4 shapes): `POST/GET /projects`,
//! `GET/PUT/DELETE /projects/:id`, `POST /projects/:id/pipeline`, `GET /projects/:id/pipelines[/:pid[/jobs]]`,
//! `POST …/pipelines/:pid/cancel|retry`. Every call needs the admin token. A project is
//! addressed by id or by its URL-encoded path (`gantry%2Fdemo`), as in GitLab.

use axum::extract::{Path, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use gantry_pipeline::{InputValue, PipelineInputs, Source};
use serde::Deserialize;

use crate::coordinator::{
    CoordinatorError, DefaultBranch, PipelineRequest, PipelineView, Project, ProjectRequest,
    ProjectSettings, project_name_in,
};

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::{AppState, auth, json_response};

/// The project `:project` names: a numeric id or a path/name.
/// The id of the project named by `project` (id or path), for a caller with the admin token.
pub(crate) async fn admin_project_id(
    state: &AppState,
    headers: &HeaderMap,
    project: &str,
) -> ApiResult<i64> {
    auth::require_admin(&state.coordinator, headers).await?;
    Ok(find_project(state, project).await?.id)
}

pub(crate) async fn find_project(state: &AppState, project: &str) -> Result<Project, ApiError> {
    let found = match project.parse::<i64>() {
        Ok(id) => state.coordinator.project(id).await,
        Err(_) => state.coordinator.project_by_path(project).await,
    };
    found.map_err(|e| match e {
        CoordinatorError::NotFound(_) => ApiError::not_found("Project"),
        other => other.into(),
    })
}

/// Body of `POST /projects`: GitLab's `name` (or `path`), `namespace_id` and
/// `import_url`, or Gantry's `repo_url`; GitLab's `default_branch` (else the repository's
/// `HEAD`) and `ci_config_path`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CreateProject {
    name: Option<String>,
    /// The project's path in its namespace (GitLab's slug); `name` when not given.
    path: Option<String>,
    /// The group to create it in: its id (`GET /namespaces`) or full path. Without it, a
    /// `name` with `/` names its groups (`acme/app`), else the default namespace.
    namespace_id: Option<serde_json::Value>,
    repo_url: Option<String>,
    import_url: Option<String>,
    default_branch: Option<String>,
    ci_config_path: Option<String>,
}

/// `POST /api/v4/projects` → `201` with the project.
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: CreateProject = extract::params(&headers, &body).await?;
    let leaf = req
        .path
        .filter(|p| !p.trim().is_empty())
        .or(req.name.filter(|n| !n.trim().is_empty()))
        .ok_or_else(|| {
            ApiError::param("name, path are missing, at least one parameter must be provided")
        })?;
    let name = match req.namespace_id {
        None | Some(serde_json::Value::Null) => leaf,
        Some(named) => {
            let named = match named {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            if leaf.contains('/') {
                return Err(ApiError::bad_request(format!(
                    "path `{leaf}` contains `/`: give the project's own path, and its group as namespace_id"
                )));
            }
            match state.coordinator.group(&named).await {
                Ok(group) => project_name_in(&group.full_path, &leaf),
                Err(CoordinatorError::NotFound(_)) => {
                    return Err(ApiError::bad_request(format!(
                        "namespace_id `{named}` names no namespace: give the id or full path of one (GET /namespaces lists them)"
                    )));
                }
                Err(other) => return Err(other.into()),
            }
        }
    };
    let repo = req
        .repo_url
        .or(req.import_url)
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| ApiError::param("repo_url is missing"))?;
    let project = state
        .coordinator
        .create_project_with(&ProjectRequest {
            name,
            repo,
            default_branch: match req.default_branch.filter(|b| !b.trim().is_empty()) {
                Some(branch) => DefaultBranch::Branch(branch),
                None => DefaultBranch::Head,
            },
            ci_config_path: req.ci_config_path,
        })
        .await
        .map_err(ApiError::from_git_input)?;
    Ok(json_response(StatusCode::CREATED, &project))
}

/// `GET /projects`' filters and order, GitLab's names.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ProjectFilter {
    search: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    simple: Option<bool>,
    order_by: Option<String>,
    sort: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    archived: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    membership: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    owned: Option<bool>,
}

/// The keys of GitLab's `BasicProjectDetails` (`simple=true`) that a Gantry project has.
const SIMPLE_PROJECT_KEYS: [&str; 10] = [
    "id",
    "name",
    "name_with_namespace",
    "path",
    "path_with_namespace",
    "created_at",
    "default_branch",
    "http_url_to_repo",
    "web_url",
    "namespace",
];

/// `GET /api/v4/projects[?search=&simple=&order_by=&sort=&archived=&membership=&owned=&page=&per_page=]`:
/// the projects, newest first by default, paged. `search` matches the name or path
/// (any case); `order_by` is `id`, `name`, `path`, `created_at` (default), `updated_at`
/// or `last_activity_at` (the last two as `created_at`: Gantry keeps neither), `sort`
/// `asc` or `desc` (default). The administrator is a member and owner of every
/// project, so `membership` and `owned` keep them all; no project is archived, so
/// `archived=true` lists none.
pub(crate) async fn list(
    State(state): State<AppState>,
    Query(filter): Query<ProjectFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let order_by = filter.order_by.as_deref().unwrap_or("created_at");
    const ORDERS: [&str; 6] = [
        "id",
        "name",
        "path",
        "created_at",
        "updated_at",
        "last_activity_at",
    ];
    if !ORDERS.contains(&order_by) {
        return Err(ApiError::param(format!(
            "order_by does not have a valid value: give one of {}",
            ORDERS.join(", ")
        )));
    }
    let descending = match filter.sort.as_deref().unwrap_or("desc") {
        "desc" => true,
        "asc" => false,
        _ => {
            return Err(ApiError::param(
                "sort does not have a valid value: give asc or desc",
            ));
        }
    };
    // Every project is the administrator's, none archived: these keep all or none.
    let _ = (filter.membership, filter.owned);
    let mut projects = if filter.archived == Some(true) {
        Vec::new()
    } else {
        state.coordinator.projects().await?
    };
    if let Some(search) = filter
        .search
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let search = search.to_lowercase();
        projects.retain(|p| {
            [&p.name, &p.path, &p.path_with_namespace]
                .iter()
                .any(|text| text.to_lowercase().contains(&search))
        });
    }
    projects.sort_by(|a, b| {
        let order = match order_by {
            "name" => a.name.cmp(&b.name),
            "path" => a.path.cmp(&b.path),
            "id" => a.id.cmp(&b.id),
            _ => a.created_at.cmp(&b.created_at),
        }
        .then(a.id.cmp(&b.id));
        if descending { order.reverse() } else { order }
    });
    if filter.simple != Some(true) {
        return Ok(page_of(projects, &page));
    }
    let simple = projects
        .iter()
        .map(simple_project)
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(page_of(simple, &page))
}

/// A project as GitLab's `BasicProjectDetails` shows it (`simple=true`, job token
/// allowlists): the keys of it Gantry has.
pub(crate) fn simple_project(project: &Project) -> ApiResult<serde_json::Value> {
    let mut value = serde_json::to_value(project)
        .map_err(|e| ApiError::internal(&format!("encode project {}: {e}", project.id)))?;
    if let Some(object) = value.as_object_mut() {
        object.retain(|key, _| SIMPLE_PROJECT_KEYS.contains(&key.as_str()));
    }
    Ok(value)
}

/// `GET /api/v4/projects/:id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    Ok(json_response(
        StatusCode::OK,
        &find_project(&state, &project).await?,
    ))
}

/// Body of `PUT /projects/:id`: the GitLab settings Gantry has; others are ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct UpdateProject {
    default_branch: Option<String>,
    ci_config_path: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_i64")]
    build_timeout: Option<i64>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    keep_latest_artifact: Option<bool>,
    build_git_strategy: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_i64")]
    ci_default_git_depth: Option<i64>,
    /// `enabled` or `disabled`.
    auto_cancel_pending_pipelines: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    ci_separated_caches: Option<bool>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    ci_forward_deployment_enabled: Option<bool>,
}

/// `PUT /api/v4/projects/:id` → `200` with the project as it now is; `400` naming the
/// setting refused (nothing changes then).
pub(crate) async fn update(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: UpdateProject = extract::params(&headers, &body).await?;
    let project = find_project(&state, &project).await?;
    let auto_cancel = match req.auto_cancel_pending_pipelines.as_deref() {
        None => None,
        Some("enabled") => Some(true),
        Some("disabled") => Some(false),
        Some(other) => {
            return Err(ApiError::param(format!(
                "auto_cancel_pending_pipelines does not have a valid value: give enabled or disabled, not `{other}`"
            )));
        }
    };
    let updated = state
        .coordinator
        .update_project(
            project.id,
            &ProjectSettings {
                default_branch: req.default_branch,
                ci_config_path: req.ci_config_path,
                build_timeout: req.build_timeout,
                keep_latest_artifact: req.keep_latest_artifact,
                build_git_strategy: req.build_git_strategy,
                ci_default_git_depth: req.ci_default_git_depth.map(Some),
                auto_cancel_pending_pipelines: auto_cancel,
                ci_separated_caches: req.ci_separated_caches,
                ci_forward_deployment_enabled: req.ci_forward_deployment_enabled,
            },
        )
        .await?;
    Ok(json_response(StatusCode::OK, &updated))
}

/// `DELETE /api/v4/projects/:id` → `202` (GitLab's answer; the deletion is done when it
/// comes): the project, its pipelines, jobs, artifacts, logs, environments and settings.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let id = admin_project_id(&state, &headers, &project).await?;
    state.coordinator.delete_project(id).await?;
    Ok(json_response(
        StatusCode::ACCEPTED,
        &serde_json::json!({"message": "202 Accepted"}),
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct RefQuery {
    #[serde(rename = "ref")]
    ref_name: Option<String>,
}

/// A `{"key", "value", "variable_type"}` variable as GitLab's API takes it
/// (`variable_type`: `env_var`, the default, or `file`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct KeyValue {
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) variable_type: Option<String>,
    /// A form gave `value` (an empty one counts).
    #[serde(skip)]
    pub(crate) value_given: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CreatePipeline {
    #[serde(rename = "ref")]
    ref_name: Option<String>,
    variables: Vec<KeyValue>,
    /// `{"NAME": value}`: the configuration's `spec:inputs`, typed as JSON.
    inputs: Option<serde_json::Value>,
}

/// A form-encoded pipeline request, as Rack reads GitLab's: `ref=main`,
/// `variables[][key]=K&variables[][value]=V[&variables[][variable_type]=file]` (a repeated
/// field starts the next variable) and `inputs[NAME]=value` (text, read as each input's
/// declared type).
fn create_pipeline_form(body: &[u8]) -> Result<(CreatePipeline, PipelineInputs), ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
        .map_err(|e| ApiError::param(format!("decode the form parameters: {e}")))?;
    let mut req = CreatePipeline::default();
    let mut inputs = PipelineInputs::default();
    for (name, value) in pairs {
        if name == "ref" {
            req.ref_name = Some(value);
        } else if let Some(field) = name
            .strip_prefix("variables[][")
            .and_then(|f| f.strip_suffix(']'))
        {
            let starts_next = match req.variables.last() {
                None => true,
                Some(last) => match field {
                    "key" => !last.key.is_empty(),
                    "value" => last.value_given,
                    "variable_type" => last.variable_type.is_some(),
                    _ => false,
                },
            };
            if starts_next {
                req.variables.push(KeyValue::default());
            }
            if let Some(last) = req.variables.last_mut() {
                match field {
                    "key" => last.key = value,
                    "value" => {
                        last.value = value;
                        last.value_given = true;
                    }
                    "variable_type" => last.variable_type = Some(value),
                    _ => {}
                }
            }
        } else if let Some(key) = name
            .strip_prefix("inputs[")
            .and_then(|rest| rest.strip_suffix(']'))
        {
            inputs.insert(key, InputValue::Text(value));
        }
    }
    inputs
        .check()
        .map_err(|e| ApiError::param(format!("inputs: {e}")))?;
    Ok((req, inputs))
}

/// `POST /api/v4/projects/:id/pipeline?ref=REF` (or `{"ref", "variables", "inputs"}` in the body)
/// → `201` with the pipeline. A configuration error still creates a (failed) pipeline;
/// an unknown ref or a pipeline `workflow:rules` filters out is `400`.
pub(crate) async fn create_pipeline(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(query): Query<RefQuery>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let is_form = extract::header_str(&headers, "content-type").is_some_and(|ct| {
        ct.to_ascii_lowercase()
            .starts_with("application/x-www-form-urlencoded")
    });
    let (req, form_inputs) = if is_form {
        create_pipeline_form(&body)?
    } else {
        (
            extract::json::<CreatePipeline>(&body)?,
            PipelineInputs::default(),
        )
    };
    let project = find_project(&state, &project).await?;
    let ref_name = query
        .ref_name
        .or(req.ref_name)
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| ApiError::param("ref is missing"))?;
    let inputs = match &req.inputs {
        Some(json) => {
            PipelineInputs::from_json(json).map_err(|e| ApiError::param(format!("inputs: {e}")))?
        }
        None => form_inputs,
    };
    let mut variables = Vec::with_capacity(req.variables.len());
    let mut file_variables = Vec::new();
    for KeyValue {
        key,
        value,
        variable_type,
        ..
    } in req.variables
    {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ApiError::param(format!(
                "variables: `{key}` is not a variable name (letters, digits and `_` only)"
            )));
        }
        match variable_type.as_deref() {
            None | Some("env_var") => {}
            Some("file") => file_variables.push(key.clone()),
            Some(other) => {
                return Err(ApiError::param(format!(
                    "variables: `{key}` has variable_type `{other}`: use `env_var` or `file`"
                )));
            }
        }
        variables.push((key, value));
    }
    let pipeline = state
        .coordinator
        .create_pipeline_with(
            project.id,
            PipelineRequest {
                ref_name,
                variables,
                file_variables,
                raw_variables: Vec::new(),
                source: Source::Api,
                jobs: None,
                inputs,
            },
        )
        .await
        .map_err(|e| ApiError::from_creation(e, true))?;
    let pipeline = state.coordinator.with_detail(pipeline).await?;
    Ok(json_response(StatusCode::CREATED, &pipeline))
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct PipelineFilter {
    #[serde(rename = "ref")]
    ref_name: Option<String>,
    status: Option<String>,
    sha: Option<String>,
    source: Option<String>,
    scope: Option<String>,
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    yaml_errors: Option<bool>,
    created_after: Option<String>,
    created_before: Option<String>,
    updated_after: Option<String>,
    updated_before: Option<String>,
    order_by: Option<String>,
    sort: Option<String>,
}

impl PipelineFilter {
    /// The store's filter; `400` naming a parameter GitLab would refuse.
    fn to_store(&self) -> ApiResult<gantry_store::PipelineFilter> {
        use gantry_store::{PipelineOrder, PipelineScope};
        let scope = match self.scope.as_deref() {
            None => None,
            Some("running") => Some(PipelineScope::Running),
            Some("pending") => Some(PipelineScope::Pending),
            Some("finished") => Some(PipelineScope::Finished),
            Some("branches") => Some(PipelineScope::Branches),
            Some("tags") => Some(PipelineScope::Tags),
            Some(other) => {
                return Err(ApiError::param(format!(
                    "scope does not have a valid value: give running, pending, finished, branches or tags, not `{other}`"
                )));
            }
        };
        // GitLab's `Ci::HasStatus::AVAILABLE_STATUSES`: every status, `waiting_for_callback`
        // too.
        let status = match self.status.as_deref() {
            None => None,
            Some(s) => Some(gantry_protocol::JobStatus::parse(s).ok_or_else(|| {
                ApiError::param(format!(
                    "status does not have a valid value: give one of {}",
                    gantry_protocol::JobStatus::NAMES.join(", ")
                ))
            })?),
        };
        let order = match self.order_by.as_deref() {
            None | Some("id" | "user_id") => PipelineOrder::Id,
            Some("status") => PipelineOrder::Status,
            Some("ref") => PipelineOrder::Ref,
            Some("updated_at") => PipelineOrder::UpdatedAt,
            Some(other) => {
                return Err(ApiError::param(format!(
                    "order_by does not have a valid value: give id, status, ref, updated_at or user_id, not `{other}`"
                )));
            }
        };
        let ascending = match self.sort.as_deref() {
            None | Some("desc") => false,
            Some("asc") => true,
            Some(other) => {
                return Err(ApiError::param(format!(
                    "sort does not have a valid value: give asc or desc, not `{other}`"
                )));
            }
        };
        let time = |name: &str, value: &Option<String>| -> ApiResult<Option<i64>> {
            value
                .as_deref()
                .map(|v| extract::time_ms(name, v))
                .transpose()
        };
        Ok(gantry_store::PipelineFilter {
            ref_name: self.ref_name.clone(),
            status,
            sha: self.sha.clone(),
            source: self.source.clone(),
            scope,
            yaml_errors: self.yaml_errors,
            created_after: time("created_after", &self.created_after)?,
            created_before: time("created_before", &self.created_before)?,
            updated_after: time("updated_after", &self.updated_after)?,
            updated_before: time("updated_before", &self.updated_before)?,
            order,
            ascending,
        })
    }
}

/// `GET /api/v4/projects/:id/pipelines`, newest first unless asked otherwise, a page at a
/// time (see [`paged`]), with GitLab's filters: `ref`, `status`, `sha`, `source`, `scope`
/// (`running`, `pending`, `finished`, `branches`, `tags`), `yaml_errors`,
/// `created_after|before`, `updated_after|before`, `order_by` (`id`, `status`, `ref`,
/// `updated_at`, `user_id`) and `sort`.
pub(crate) async fn pipelines(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(filter): Query<PipelineFilter>,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let filter = filter.to_store()?;
    let (offset, limit) = page.window();
    let (pipelines, total) = state
        .coordinator
        .pipelines_page(project.id, &filter, offset, limit)
        .await?;
    Ok(paged(pipelines, total, &page))
}

/// The pipeline `:pipeline` of the project `:project`; `404` when it belongs to another.
pub(crate) async fn find_pipeline(
    state: &AppState,
    project: &str,
    pipeline: i64,
) -> Result<PipelineView, ApiError> {
    let project = find_project(state, project).await?;
    match state.coordinator.pipeline(pipeline).await {
        Ok(p) if p.project_id == project.id => Ok(p),
        Ok(_) | Err(CoordinatorError::NotFound(_)) => Err(ApiError::not_found("Pipeline")),
        Err(other) => Err(other.into()),
    }
}

/// `GET /api/v4/projects/:id/pipelines/:pipeline_id`.
pub(crate) async fn pipeline(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let pipeline = find_pipeline(&state, &project, pipeline).await?;
    Ok(json_response(
        StatusCode::OK,
        &state.coordinator.with_detail(pipeline).await?,
    ))
}

/// `GET /api/v4/projects/:id/pipelines/latest[?ref=…]`: the newest pipeline of the ref
/// (the default branch when not given); `404` when it has none.
pub(crate) async fn latest_pipeline(
    State(state): State<AppState>,
    Path(project): Path<String>,
    Query(filter): Query<PipelineFilter>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let ref_name = filter
        .ref_name
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| project.default_branch.clone());
    let newest_of_ref = gantry_store::PipelineFilter {
        ref_name: Some(ref_name),
        ..gantry_store::PipelineFilter::default()
    };
    let (mut newest, _) = state
        .coordinator
        .pipelines_page(project.id, &newest_of_ref, 0, 1)
        .await?;
    match newest.pop() {
        Some(p) => Ok(json_response(
            StatusCode::OK,
            &state.coordinator.with_detail(p).await?,
        )),
        None => Err(ApiError::not_found("Pipeline")),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct JobsFilter {
    /// Read as Grape reads a boolean (`true`, `1`, `yes`, …).
    #[serde(deserialize_with = "extract::grape::opt_bool")]
    include_retried: Option<bool>,
}

/// `scope` / `scope[]` (repeatable): the job statuses asked for (none: all).
fn scopes(query: Option<&str>) -> Result<Vec<String>, ApiError> {
    let pairs: Vec<(String, String)> = match query {
        Some(query) => serde_urlencoded::from_str(query)
            .map_err(|e| ApiError::param(format!("decode the query parameters: {e}")))?,
        None => Vec::new(),
    };
    const STATUSES: [&str; 11] = [
        "created",
        "pending",
        "running",
        "failed",
        "success",
        "canceled",
        "canceling",
        "skipped",
        "waiting_for_resource",
        "manual",
        "scheduled",
    ];
    let mut out = Vec::new();
    for (key, value) in pairs {
        if key != "scope" && key != "scope[]" {
            continue;
        }
        if !STATUSES.contains(&value.as_str()) {
            return Err(ApiError::param(format!(
                "scope does not have a valid value: `{value}` is not one of {}",
                STATUSES.join(", ")
            )));
        }
        out.push(value);
    }
    Ok(out)
}

/// `page` and `per_page` (GitLab's offset pagination: 20 by default, at most 100), and the
/// request's URL, which the answer's `Link` header names with other pages
/// ([`paged`]). Extracted from the request itself (`page: Page` in a handler).
#[derive(Debug, Default)]
pub(crate) struct Page {
    page: Option<usize>,
    per_page: Option<usize>,
    /// The request's URL under the server's external URL, without its query, and the
    /// query's other parameters (`None`: no `Link` header).
    url: Option<(String, Vec<(String, String)>)>,
}

impl axum::extract::FromRequestParts<AppState> for Page {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
            .map_err(|_| ApiError::param("the query string is not URL-encoded"))?;
        let number = |name: &str| -> Result<Option<usize>, ApiError> {
            match pairs.iter().rfind(|(k, _)| k == name) {
                None => Ok(None),
                Some((_, v)) if v.is_empty() => Ok(None),
                Some((_, v)) => v
                    .parse::<usize>()
                    .map(Some)
                    .map_err(|_| ApiError::param(format!("{name} is invalid"))),
            }
        };
        let (page, per_page) = (number("page")?, number("per_page")?);
        let others = pairs
            .into_iter()
            .filter(|(k, _)| k != "page" && k != "per_page")
            .collect();
        let base = state.coordinator.external_url().trim_end_matches('/');
        // The path as the client sent it: the nested router sees the rest below the API's
        // root.
        let path = parts.uri.path();
        Ok(Self {
            page,
            per_page,
            url: Some((format!("{base}{}{path}", super::API_ROOT), others)),
        })
    }
}

impl Page {
    /// GitLab's `Link` header (`OffsetHeaderBuilder#pagination_links`): the previous,
    /// next, first and last pages' URLs, each the request's with its other parameters
    /// and `page`/`per_page`, sorted by name as Rails' `to_query` sorts them.
    fn links(&self, number: usize, per_page: usize, pages: usize, next: Option<usize>) -> String {
        let Some((url, others)) = &self.url else {
            return String::new();
        };
        let href = |page: usize| {
            let mut params: Vec<(&str, String)> = others
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .chain([
                    ("page", page.to_string()),
                    ("per_page", per_page.to_string()),
                ])
                .collect();
            params.sort_by(|a, b| a.0.cmp(b.0));
            let query = serde_urlencoded::to_string(&params).unwrap_or_default();
            format!("{url}?{query}")
        };
        let mut links = Vec::with_capacity(4);
        if number > 1 {
            links.push(format!("<{}>; rel=\"prev\"", href(number - 1)));
        }
        if let Some(next) = next {
            links.push(format!("<{}>; rel=\"next\"", href(next)));
        }
        links.push(format!("<{}>; rel=\"first\"", href(1)));
        links.push(format!("<{}>; rel=\"last\"", href(pages)));
        links.join(", ")
    }
}

/// `GET /api/v4/projects/:id/jobs[?scope[]=failed&page=&per_page=]`: the project's jobs
/// (every attempt; not trigger jobs), newest first, a page at a time with GitLab's
/// `X-Page`, `X-Per-Page`, `X-Next-Page` and `X-Total` headers.
pub(crate) async fn project_jobs(
    State(state): State<AppState>,
    Path(project): Path<String>,
    RawQuery(query): RawQuery,
    page: Page,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let scopes = scopes(query.as_deref())?;
    let project = find_project(&state, &project).await?;
    let (offset, limit) = page.window();
    let (jobs, total) = state
        .coordinator
        .project_jobs_page(project.id, &scopes, offset, limit)
        .await?;
    Ok(paged(jobs, total, &page))
}

impl Page {
    /// `per_page` (20 by default, 1–100) and `page` (from 1).
    fn numbers(&self) -> (usize, usize) {
        (
            self.page.unwrap_or(1).max(1),
            self.per_page.unwrap_or(20).clamp(1, 100),
        )
    }

    /// The page as (offset, limit) rows.
    pub(crate) fn window(&self) -> (i64, i64) {
        let (number, per_page) = self.numbers();
        let offset = (number - 1).saturating_mul(per_page);
        (
            i64::try_from(offset).unwrap_or(i64::MAX),
            i64::try_from(per_page).unwrap_or(20),
        )
    }
}

/// Page `page` of a whole list held in memory (lists with a small limit: variables),
/// answered as [`paged`] does.
pub(crate) fn page_of<T: serde::Serialize>(all: Vec<T>, page: &Page) -> Response {
    let (offset, limit) = page.window();
    let total = i64::try_from(all.len()).unwrap_or(i64::MAX);
    let shown: Vec<T> = all
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .take(usize::try_from(limit).unwrap_or(20))
        .collect();
    paged(shown, total, page)
}

/// One page of a list as GitLab answers it (`Gitlab::Pagination::OffsetHeaderBuilder`):
/// the JSON array `shown` (page `page.page`, from 1, of `page.per_page` items: 20 by
/// default, at most 100) of `total` items, with `X-Page`, `X-Per-Page`, `X-Next-Page`
/// and `X-Prev-Page` (empty when there is none), `X-Total`, `X-Total-Pages` (at least 1)
/// and `Link` (`rel="prev"`, `"next"`, `"first"`, `"last"`: what python-gitlab's
/// iterators and `get_all` follow).
pub(crate) fn paged<T: serde::Serialize>(shown: Vec<T>, total: i64, page: &Page) -> Response {
    let (number, per_page) = page.numbers();
    let total = usize::try_from(total).unwrap_or(0);
    let pages = total.div_ceil(per_page).max(1);
    let next = (number.saturating_mul(per_page) < total).then_some(number + 1);
    let shown_number = |n: Option<usize>| n.map(|n| n.to_string()).unwrap_or_default();
    let mut response = json_response(StatusCode::OK, &shown);
    for (name, value) in [
        ("x-page", number.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-next-page", shown_number(next)),
        (
            "x-prev-page",
            shown_number((number > 1).then(|| number - 1)),
        ),
        ("x-total", total.to_string()),
        ("x-total-pages", pages.to_string()),
        ("link", page.links(number, per_page, pages, next)),
    ] {
        if value.is_empty() && name == "link" {
            continue;
        }
        if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// `GET /api/v4/projects/:id/pipelines/:pipeline_id/jobs[?include_retried=true]`:
/// current attempts only unless asked, as GitLab.
pub(crate) async fn pipeline_jobs(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    Query(filter): Query<JobsFilter>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let scopes = scopes(query.as_deref())?;
    list_jobs(
        &state, &project, pipeline, &filter, &scopes, &headers, false,
    )
    .await
}

/// `DELETE /api/v4/projects/:id/pipelines/:pipeline_id` → `204`: the pipeline, its jobs,
/// logs and artifacts are gone (an active pipeline is canceled first).
pub(crate) async fn delete_pipeline(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let pipeline = find_pipeline(&state, &project, pipeline).await?;
    state.coordinator.delete_pipeline(pipeline.id).await?;
    Ok(axum::response::IntoResponse::into_response(
        StatusCode::NO_CONTENT,
    ))
}

/// `GET /api/v4/projects/:id/pipelines/:pipeline_id/variables`: the variables the
/// pipeline was created with, `[{"key", "variable_type", "value"}]` in the order given.
pub(crate) async fn pipeline_variables(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let pipeline = find_pipeline(&state, &project, pipeline).await?;
    let vars: Vec<serde_json::Value> = state
        .coordinator
        .created_with_variables(pipeline.id)
        .await?
        .into_iter()
        .map(|(key, value, kind)| {
            serde_json::json!({"key": key, "variable_type": kind, "value": value})
        })
        .collect();
    Ok(json_response(StatusCode::OK, &vars))
}

/// `GET /api/v4/projects/:id/pipelines/:pipeline_id/bridges`: the trigger jobs, each with
/// its `downstream_pipeline` once created.
pub(crate) async fn pipeline_bridges(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    Query(filter): Query<JobsFilter>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let scopes = scopes(query.as_deref())?;
    list_jobs(&state, &project, pipeline, &filter, &scopes, &headers, true).await
}

/// A pipeline's jobs (`bridges: false`) or trigger jobs (`true`), as GitLab splits them.
async fn list_jobs(
    state: &AppState,
    project: &str,
    pipeline: i64,
    filter: &JobsFilter,
    scopes: &[String],
    headers: &HeaderMap,
    bridges: bool,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, headers).await?;
    let pipeline = find_pipeline(state, project, pipeline).await?;
    let jobs: Vec<_> = state
        .coordinator
        .pipeline_jobs(pipeline.id)
        .await?
        .into_iter()
        .filter(|j| (filter.include_retried == Some(true) || !j.retried) && j.bridge == bridges)
        .filter(|j| scopes.is_empty() || scopes.iter().any(|s| s == j.status.as_str()))
        .collect();
    Ok(json_response(StatusCode::OK, &jobs))
}

/// `GET /api/v4/projects/:id/pipelines/:pipeline_id/test_report`: the JUnit reports of
/// the pipeline's jobs, every test case included.
pub(crate) async fn test_report(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let report = pipeline_test_report(&state, &project, pipeline, &headers).await?;
    Ok(json_response(StatusCode::OK, &report))
}

/// `GET /api/v4/projects/:id/pipelines/:pipeline_id/test_report_summary`: the counts,
/// in all and per suite (with the jobs whose reports form it), without the cases.
pub(crate) async fn test_report_summary(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let report = pipeline_test_report(&state, &project, pipeline, &headers).await?;
    Ok(json_response(StatusCode::OK, &report.summary()))
}

async fn pipeline_test_report(
    state: &AppState,
    project: &str,
    pipeline: i64,
    headers: &HeaderMap,
) -> Result<crate::coordinator::test_reports::TestReport, ApiError> {
    auth::require_admin(&state.coordinator, headers).await?;
    let pipeline = find_pipeline(state, project, pipeline).await?;
    Ok(state.coordinator.test_report(pipeline.id).await?)
}

/// `POST /api/v4/projects/:id/pipelines/:pipeline_id/cancel` → `201`.
pub(crate) async fn cancel_pipeline(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let pipeline = find_pipeline(&state, &project, pipeline).await?;
    Ok(json_response(
        StatusCode::CREATED,
        &state
            .coordinator
            .with_detail(state.coordinator.cancel_pipeline(pipeline.id).await?)
            .await?,
    ))
}

/// `POST /api/v4/projects/:id/pipelines/:pipeline_id/retry` → `201`.
pub(crate) async fn retry_pipeline(
    State(state): State<AppState>,
    Path((project, pipeline)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let pipeline = find_pipeline(&state, &project, pipeline).await?;
    Ok(json_response(
        StatusCode::CREATED,
        &state
            .coordinator
            .with_detail(state.coordinator.retry_pipeline(pipeline.id).await?)
            .await?,
    ))
}
