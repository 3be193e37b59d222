//! Pipeline trigger tokens, GitLab's API shapes: `GET/POST /projects/:id/triggers` and
//! `GET/PUT/DELETE /projects/:id/triggers/:trigger_id` (admin token), and
//! `POST /projects/:id/trigger/pipeline` (the trigger token is the credential), also as the
//! webhook form `POST /projects/:id/ref/:ref/trigger/pipeline?token=…`. Parameters come
//! from the query, a form (`-F token=… -F ref=main -F "variables[KEY]=value"
//! -F "inputs[NAME]=value"`, multipart or URL-encoded) or JSON (`{"token", "ref",
//! "variables": {"KEY": "value"}, "inputs": {"NAME": value}}`). Form inputs are text, read
//! as the type each `spec:inputs` entry declares; JSON inputs are typed.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_pipeline::{InputValue, PipelineInputs, Source};
use serde::Deserialize;

use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::projects::find_project;
use super::{AppState, auth, json_response};
use crate::coordinator::PipelineRequest;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NewTrigger {
    description: Option<String>,
}

/// `POST /projects/:id/triggers` → `201` with the trigger and its whole token.
pub(crate) async fn create(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: NewTrigger = extract::params(&headers, &body).await?;
    let project = find_project(&state, &project).await?;
    let description = req
        .description
        .ok_or_else(|| ApiError::param("description is missing"))?;
    let trigger = state
        .coordinator
        .triggers()
        .create(project.id, &description)
        .await?;
    Ok(json_response(StatusCode::CREATED, &trigger))
}

/// `GET /projects/:id/triggers`.
pub(crate) async fn list(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let triggers = state.coordinator.triggers().list(project.id).await?;
    Ok(json_response(StatusCode::OK, &triggers))
}

/// `GET /projects/:id/triggers/:trigger_id`.
pub(crate) async fn show(
    State(state): State<AppState>,
    Path((project, trigger)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    let trigger = state
        .coordinator
        .triggers()
        .get(project.id, trigger)
        .await?;
    Ok(json_response(StatusCode::OK, &trigger))
}

/// `PUT /projects/:id/triggers/:trigger_id` with a new `description` (the only field a
/// trigger has to change here; without it the trigger stays as it is).
pub(crate) async fn update(
    State(state): State<AppState>,
    Path((project, trigger)): Path<(String, i64)>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let req: NewTrigger = extract::params(&headers, &body).await?;
    let project = find_project(&state, &project).await?;
    let triggers = state.coordinator.triggers();
    let trigger = match req.description {
        Some(description) => triggers.describe(project.id, trigger, &description).await?,
        None => triggers.get(project.id, trigger).await?,
    };
    Ok(json_response(StatusCode::OK, &trigger))
}

/// `DELETE /projects/:id/triggers/:trigger_id` → `204`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    Path((project, trigger)): Path<(String, i64)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    auth::require_admin(&state.coordinator, &headers).await?;
    let project = find_project(&state, &project).await?;
    state
        .coordinator
        .triggers()
        .delete(project.id, trigger)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /projects/:id/trigger/pipeline` → `201` with the pipeline.
pub(crate) async fn trigger(
    State(state): State<AppState>,
    Path(project): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    run(&state, &project, None, query, &headers, body).await
}

/// `POST /projects/:id/ref/:ref/trigger/pipeline?token=…` (the webhook form).
pub(crate) async fn trigger_ref(
    State(state): State<AppState>,
    Path((project, ref_name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    run(&state, &project, Some(ref_name), query, &headers, body).await
}

async fn run(
    state: &AppState,
    project: &str,
    path_ref: Option<String>,
    query: Option<String>,
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    let mut pairs = match query.as_deref() {
        Some(query) => serde_urlencoded::from_str::<Vec<(String, String)>>(query)
            .map_err(|e| ApiError::param(format!("decode the query parameters: {e}")))?,
        None => Vec::new(),
    };
    let query_pairs = pairs.clone();
    let (body, json_inputs, json_body) = body_pairs(headers, body).await?;
    let body_form = if json_body.is_none() {
        body.clone()
    } else {
        Vec::new()
    };
    pairs.extend(body);
    let last = |name: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let token = last("token").ok_or_else(|| ApiError::param("token is missing"))?;
    let path_ref_given = path_ref.is_some();
    let ref_name = path_ref
        .or_else(|| last("ref"))
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| ApiError::param("ref is missing"))?;
    let mut variables: Vec<(String, String)> = Vec::new();
    for (name, value) in &pairs {
        let Some(key) = name
            .strip_prefix("variables[")
            .and_then(|rest| rest.strip_suffix(']'))
        else {
            continue;
        };
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ApiError::param(format!(
                "variables: `{key}` is not a variable name (letters, digits and `_` only)"
            )));
        }
        variables.retain(|(k, _)| k != key);
        variables.push((key.to_owned(), value.clone()));
    }
    // `inputs[NAME]=value` form fields are text, read as each input's declared type; a
    // JSON body's `inputs` object is typed.
    let mut inputs = match &json_inputs {
        Some(json) => {
            PipelineInputs::from_json(json).map_err(|e| ApiError::param(format!("inputs: {e}")))?
        }
        None => PipelineInputs::default(),
    };
    for (name, value) in &pairs {
        if let Some(key) = name
            .strip_prefix("inputs[")
            .and_then(|rest| rest.strip_suffix(']'))
        {
            inputs.insert(key, InputValue::Text(value.clone()));
        }
    }
    inputs
        .check()
        .map_err(|e| ApiError::param(format!("inputs: {e}")))?;
    let payload = trigger_payload(
        project,
        path_ref_given.then_some(ref_name.as_str()),
        &query_pairs,
        &body_form,
        json_body,
    );
    variables.retain(|(k, _)| k != PAYLOAD_VARIABLE);
    variables.push((PAYLOAD_VARIABLE.to_owned(), payload));
    let project = find_project(state, project).await?;
    let pipeline = state
        .coordinator
        .trigger_pipeline(
            project.id,
            &token,
            PipelineRequest {
                ref_name,
                variables,
                file_variables: vec![PAYLOAD_VARIABLE.to_owned()],
                raw_variables: vec![PAYLOAD_VARIABLE.to_owned()],
                source: Source::Trigger,
                jobs: None,
                inputs,
            },
        )
        .await
        .map_err(|e| ApiError::from_creation(e, false))?;
    let pipeline = state.coordinator.with_detail(pipeline).await?;
    Ok(json_response(StatusCode::CREATED, &pipeline))
}

/// GitLab's `Ci::PipelineTriggerService::PAYLOAD_VARIABLE_KEY`: every triggered pipeline
/// gets the request's parameters (its token left out) as this raw file variable, so a
/// webhook's JSON body reaches the jobs.
const PAYLOAD_VARIABLE: &str = "TRIGGER_PAYLOAD";

/// `TRIGGER_PAYLOAD`'s JSON: GitLab's `params.except(:token)` — the project as given in the
/// path (`id`), the query's and the body's parameters (`variables[K]`/`inputs[K]` form
/// fields as objects, a JSON body's values as they are), and the path's `ref`.
fn trigger_payload(
    project: &str,
    path_ref: Option<&str>,
    query: &[(String, String)],
    form: &[(String, String)],
    json_body: Option<serde_json::Map<String, serde_json::Value>>,
) -> String {
    use serde_json::{Map, Value};
    let mut out = Map::new();
    out.insert("id".into(), Value::String(project.to_owned()));
    let add_pairs = |out: &mut Map<String, Value>, pairs: &[(String, String)]| {
        for (name, value) in pairs {
            let nested = ["variables", "inputs"].iter().find_map(|group| {
                let key = name
                    .strip_prefix(group)?
                    .strip_prefix('[')?
                    .strip_suffix(']')?;
                Some((*group, key))
            });
            match nested {
                Some((group, key)) => {
                    let entry = out
                        .entry(group.to_owned())
                        .or_insert_with(|| Value::Object(Map::new()));
                    if let Value::Object(m) = entry {
                        m.insert(key.to_owned(), Value::String(value.clone()));
                    }
                }
                None => {
                    out.insert(name.clone(), Value::String(value.clone()));
                }
            }
        }
    };
    add_pairs(&mut out, query);
    add_pairs(&mut out, form);
    if let Some(body) = json_body {
        out.extend(body);
    }
    if let Some(r) = path_ref {
        out.insert("ref".into(), Value::String(r.to_owned()));
    }
    out.remove("token");
    Value::Object(out).to_string()
}

/// The body's parameters as `(name, value)` pairs: a form (multipart or URL-encoded)
/// as it is, JSON with `variables` as an object turned into `variables[KEY]` pairs; a
/// JSON body's `inputs`, as they are; and a JSON body itself (for `TRIGGER_PAYLOAD`).
#[allow(clippy::type_complexity)]
async fn body_pairs(
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<(
    Vec<(String, String)>,
    Option<serde_json::Value>,
    Option<serde_json::Map<String, serde_json::Value>>,
)> {
    let content_type = extract::header_str(headers, "content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("multipart/form-data") {
        return Ok((extract::multipart_pairs(headers, body).await?, None, None));
    }
    if content_type.starts_with("application/x-www-form-urlencoded") {
        return serde_urlencoded::from_bytes(&body)
            .map(|pairs| (pairs, None, None))
            .map_err(|e| ApiError::param(format!("decode the form parameters: {e}")));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok((Vec::new(), None, None));
    }
    let value: serde_json::Value = extract::json(&body)?;
    let Some(object) = value.as_object() else {
        return Err(ApiError::param(
            "the body must be a JSON object such as {\"token\": \"…\", \"ref\": \"main\"}",
        ));
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut pairs = Vec::new();
    let mut inputs = None;
    for (name, value) in object {
        match (name.as_str(), value) {
            ("inputs", value) => inputs = Some(value.clone()),
            ("variables", serde_json::Value::Object(vars)) => {
                pairs.extend(
                    vars.iter()
                        .map(|(k, v)| (format!("variables[{k}]"), text(v))),
                );
            }
            ("variables", _) => {
                return Err(ApiError::param(
                    "variables must be an object of names and values, such as {\"DEPLOY\": \"true\"}",
                ));
            }
            _ => pairs.push((name.clone(), text(value))),
        }
    }
    Ok((pairs, inputs, Some(object.clone())))
}
