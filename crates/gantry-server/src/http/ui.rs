//! The web UI: server-rendered HTML pages at the addresses the API's `web_url`s name, as
//! GitLab's: `/` (projects), `/{project}` and `/{project}/-/pipelines` (its pipelines),
//! `/{project}/-/pipelines/{id}` (stages and jobs), `/{project}/-/jobs/{id}` (a job and
//! its log), `/{project}/-/pipelines/new` (GitLab's "Run pipeline" form: a ref, variables
//! and inputs; source `web`), `/{project}/-/environments` (each environment's state and
//! last deployment, with Stop). Pages of something still running reload themselves every 3
//! seconds. Buttons post to the same addresses plus `/cancel`, `/retry` or `/play` and
//! come back.
//!
//! `/-/runners` lists the runners with Pause and Resume. Pages share the fallback route
//! with git (`git.rs`): a path with `/-/` or a project's path is a page, one ending in
//! `.git` is git's.
//!
//! Sign-in: the admin token, given once on `/-/login` and kept in an `HttpOnly`,
//! `SameSite=Strict` cookie (`Secure` when the external URL is `https`), so another site
//! can neither read it nor make the browser post with it. `/-/logout` forgets it.
//!
//! Every text from a repository, a job or its log is HTML-escaped; a log loses its ANSI
//! escapes and GitLab's section markers. At most the last [`MAX_LOG_SHOWN`] bytes of a log
//! are shown (the API's `…/jobs/:id/trace` has the whole). No script runs on these pages.

use std::fmt::Write as _;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use gantry_protocol::trace::section;

use crate::coordinator::{CoordinatorError, JobView, PipelineView, Project};

use super::AppState;
use super::error::ApiError;
use super::extract;

/// The cookie the admin token is kept in.
const COOKIE: &str = "gantry_token";
/// The most of a log a page shows (its end).
pub const MAX_LOG_SHOWN: usize = 1024 * 1024;
/// Pipelines per page of a project's list.
const PER_PAGE: i64 = 50;
/// The largest form a page posts (a new pipeline's variables).
const MAX_FORM: usize = 256 * 1024;

/// What a path of the UI names.
#[derive(Debug, PartialEq, Eq)]
enum Page<'a> {
    Projects,
    Login,
    Logout,
    Pipelines(&'a str),
    NewPipeline(&'a str),
    Pipeline(&'a str, i64, Option<&'a str>),
    Job(&'a str, i64, Option<&'a str>),
    Environments(&'a str),
    /// Stop environment `id` of a project.
    StopEnvironment(&'a str, i64),
    Runners,
    /// `pause` or `resume` runner `id`.
    RunnerAction(i64, &'a str),
}

fn page(path: &str) -> Option<Page<'_>> {
    match path {
        "/" => return Some(Page::Projects),
        "/-/login" => return Some(Page::Login),
        "/-/logout" => return Some(Page::Logout),
        "/-/runners" => return Some(Page::Runners),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/-/runners/") {
        return match rest.split('/').collect::<Vec<_>>()[..] {
            [id, action @ ("pause" | "resume")] => {
                Some(Page::RunnerAction(id.parse().ok()?, action))
            }
            _ => None,
        };
    }
    // The API's and the server's own addresses are never pages.
    if path.starts_with("/api/") || path.starts_with("/-/") {
        return None;
    }
    let path = path.strip_prefix('/')?.trim_end_matches('/');
    let Some((project, rest)) = path.split_once("/-/") else {
        // A project's own address (its `web_url`: `namespace/name`, two parts at least); a
        // git path has `.git` in it. `/favicon.ico` and the like are no page.
        return (path.contains('/') && !path.contains(".git")).then_some(Page::Pipelines(path));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let id = |s: &str| s.parse::<i64>().ok();
    match parts[..] {
        ["pipelines"] => Some(Page::Pipelines(project)),
        ["pipelines", "new"] => Some(Page::NewPipeline(project)),
        ["pipelines", n] => Some(Page::Pipeline(project, id(n)?, None)),
        ["pipelines", n, action @ ("cancel" | "retry")] => {
            Some(Page::Pipeline(project, id(n)?, Some(action)))
        }
        ["jobs", n] => Some(Page::Job(project, id(n)?, None)),
        ["environments"] => Some(Page::Environments(project)),
        ["environments", n, "stop"] => Some(Page::StopEnvironment(project, id(n)?)),
        ["jobs", n, action @ ("cancel" | "retry" | "play")] => {
            Some(Page::Job(project, id(n)?, Some(action)))
        }
        _ => None,
    }
}

/// Whether `path` is a page of the UI (else git's or nobody's).
pub(crate) fn is_page(path: &str) -> bool {
    page(path).is_some()
}

/// The UI's answer to `request`, or `None` when its path is not a page (the caller then
/// serves git or a `404`).
pub(crate) async fn serve(state: &AppState, request: Request) -> Option<Response> {
    let path = request.uri().path().to_owned();
    let page = page(&path)?;
    let method = request.method().clone();
    if method != Method::GET && method != Method::HEAD && method != Method::POST {
        return None;
    }
    let headers = request.headers().clone();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let body = if method == Method::POST {
        axum::body::to_bytes(request.into_body(), MAX_FORM)
            .await
            .unwrap_or_default()
    } else {
        axum::body::Bytes::new()
    };
    let secure = state
        .coordinator
        .config()
        .external_url
        .starts_with("https://");
    let answer = match page {
        Page::Login if method == Method::POST => login(state, &body, secure).await,
        Page::Login => Ok(login_page(StatusCode::OK, None)),
        Page::Logout => Ok(redirect("/-/login", Some(cookie("", secure, 0)))),
        _ => match signed_in(state, &headers).await {
            Ok(false) => Ok(login_page(StatusCode::UNAUTHORIZED, None)),
            Err(e) => Err(e),
            Ok(true) => match (page, method == Method::POST) {
                (Page::Projects, _) => projects(state).await,
                (Page::Pipelines(p), _) => pipelines(state, p, &query).await,
                (Page::NewPipeline(p), false) => new_pipeline_page(state, p).await,
                (Page::NewPipeline(p), true) => run_pipeline(state, p, &body).await,
                (Page::Pipeline(p, id, Some(action)), true) => {
                    pipeline_action(state, p, id, action).await
                }
                (Page::Pipeline(p, id, _), _) => pipeline(state, p, id).await,
                (Page::Job(p, id, Some(action)), true) => job_action(state, p, id, action).await,
                (Page::Job(p, id, _), _) => job(state, p, id).await,
                (Page::Environments(p), _) => environments(state, p).await,
                (Page::StopEnvironment(p, id), true) => stop_environment(state, p, id).await,
                (Page::Runners, _) => runners(state).await,
                (Page::RunnerAction(id, action), true) => runner_action(state, id, action).await,
                _ => Ok(not_found()),
            },
        },
    };
    Some(answer.unwrap_or_else(|e| e.into_response()))
}

async fn signed_in(state: &AppState, headers: &HeaderMap) -> Result<bool, ApiError> {
    let token = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
        .or_else(|| extract::private_token(headers).map(str::to_owned));
    match token {
        Some(t) if !t.is_empty() => Ok(state.coordinator.is_admin(&t).await?),
        _ => Ok(false),
    }
}

fn cookie(token: &str, secure: bool, max_age: i64) -> String {
    format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

async fn login(state: &AppState, body: &[u8], secure: bool) -> Result<Response, ApiError> {
    let form: Vec<(String, String)> = serde_urlencoded::from_bytes(body).unwrap_or_default();
    let token = form
        .iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    // A token is `glpat-` and base64url-ish characters: nothing a cookie cannot carry.
    let plain = token
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if token.is_empty() || !plain || !state.coordinator.is_admin(&token).await? {
        return Ok(login_page(
            StatusCode::UNAUTHORIZED,
            Some("That is not the admin token: use the one the server printed at its first start."),
        ));
    }
    Ok(redirect("/", Some(cookie(&token, secure, 30 * 24 * 3600))))
}

fn redirect(to: &str, set_cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, c);
    }
    response
}

/// `text` with `&`, `<`, `>`, `"` and `'` as character references.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A log as text: each line as a reader sees it ([`section::plain_line`]: no ANSI escapes,
/// no section markers, the last write of a line rewritten with `\r`).
pub(crate) fn plain_log(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let lines: Vec<String> = text.split('\n').filter_map(section::plain_line).collect();
    let mut out = lines.join("\n");
    out.truncate(out.trim_end_matches('\n').len());
    out
}

/// What a job's page shows of its log: the last [`MAX_LOG_SHOWN`] bytes as text, after a
/// line saying where the rest is.
fn shown_log(raw: &[u8], project_id: i64, job_id: i64) -> String {
    let cut = raw.len().saturating_sub(MAX_LOG_SHOWN);
    let mut log = String::new();
    if cut > 0 {
        let _ = writeln!(
            log,
            "… the first {cut} bytes are left out; GET /api/v4/projects/{project_id}/jobs/{job_id}/trace has the whole log"
        );
    }
    log.push_str(&plain_log(&raw[cut..]));
    log
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#1f1e24}\
header{background:#1f1e24;color:#fff;padding:.6em 1.2em}header a{color:#fff;text-decoration:none;margin-right:1em}\
main{padding:1em 1.2em}table{border-collapse:collapse}td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:left}\
.s{display:inline-block;padding:.05em .5em;border-radius:1em;font-size:.85em;color:#fff;background:#737278}\
.success{background:#108548}.failed{background:#dd2b0e}.running{background:#1f75cb}.pending,.waiting_for_resource,.preparing{background:#c17d10}\
.canceled,.canceling,.skipped,.manual,.scheduled,.created{background:#737278}\
.stages{display:flex;gap:2em;align-items:flex-start}.stage h3{font-size:1em;text-transform:capitalize}\
.stage div{margin:.3em 0}pre{background:#1f1e24;color:#e8e8e8;padding:1em;overflow:auto;font-size:.85em}\
form.inline{display:inline}button{margin-right:.5em}.error{color:#dd2b0e}\
.why{color:#8f5a00;font-size:.85em;max-width:28em}";

fn html(status: StatusCode, title: &str, refresh: bool, body: &str) -> Response {
    let refresh = if refresh {
        r#"<meta http-equiv="refresh" content="3">"#
    } else {
        ""
    };
    let page = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{} · Gantry</title>{refresh}<style>{STYLE}</style></head>\
         <body><header><a href=\"/\"><b>Gantry</b></a><a href=\"/\">Projects</a><a href=\"/-/runners\">Runners</a><a href=\"/-/logout\">Sign out</a></header><main>{body}</main></body></html>",
        escape(title)
    );
    let mut response = (status, page).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // The pages show what the admin token sees: no caching, no framing.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
        .headers_mut()
        .insert("x-frame-options", HeaderValue::from_static("DENY"));
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        ),
    );
    response
}

fn login_page(status: StatusCode, error: Option<&str>) -> Response {
    let error = error
        .map(|e| format!("<p class=\"error\">{}</p>", escape(e)))
        .unwrap_or_default();
    html(
        status,
        "Sign in",
        false,
        &format!(
            "<h1>Sign in</h1>{error}<form method=\"post\" action=\"/-/login\">\
             <label>Admin token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" size=\"40\"></label> \
             <button type=\"submit\">Sign in</button></form>"
        ),
    )
}

fn not_found() -> Response {
    html(
        StatusCode::NOT_FOUND,
        "Not found",
        false,
        "<h1>Not found</h1>",
    )
}

fn badge(status: &str) -> String {
    let status = escape(status);
    format!("<span class=\"s {status}\">{status}</span>")
}

fn when(ms: Option<i64>) -> String {
    ms.map(|ms| crate::coordinator::iso8601(ms)[..19].replace('T', " "))
        .unwrap_or_default()
}

fn seconds(d: Option<f64>) -> String {
    match d {
        Some(d) if d >= 60.0 => format!("{}m {:02}s", (d / 60.0).floor(), (d % 60.0).floor()),
        Some(d) => format!("{}s", d.floor()),
        None => String::new(),
    }
}

fn active(status: &str) -> bool {
    matches!(
        status,
        "created" | "waiting_for_resource" | "preparing" | "pending" | "running" | "canceling"
    )
}

async fn project_at(state: &AppState, path: &str) -> Result<Option<Project>, ApiError> {
    match state.coordinator.project_by_path(path).await {
        Ok(p) => Ok(Some(p)),
        Err(CoordinatorError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn project_link(p: &Project) -> String {
    format!(
        "<a href=\"/{}\">{}</a>",
        escape(&p.path_with_namespace),
        escape(&p.path_with_namespace)
    )
}

async fn projects(state: &AppState) -> Result<Response, ApiError> {
    let mut rows = String::new();
    for p in state.coordinator.projects().await? {
        let (latest, _) = state
            .coordinator
            .pipelines_page(p.id, &Default::default(), 0, 1)
            .await?;
        let latest = latest
            .first()
            .map(|l| {
                format!(
                    "{} <a href=\"/{}/-/pipelines/{}\">#{}</a> on {}",
                    badge(&l.status),
                    escape(&p.path_with_namespace),
                    l.id,
                    l.id,
                    escape(&l.ref_name)
                )
            })
            .unwrap_or_else(|| "no pipeline yet".to_owned());
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{latest}</td></tr>",
            project_link(&p),
            escape(&p.default_branch)
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"3\">No projects: <code>gantry project create NAME --repo PATH_OR_URL</code> makes one.</td></tr>".to_owned();
    }
    Ok(html(
        StatusCode::OK,
        "Projects",
        false,
        &format!(
            "<h1>Projects</h1><table><tr><th>Project</th><th>Default branch</th><th>Latest pipeline</th></tr>{rows}</table>"
        ),
    ))
}

/// `/-/runners`: every runner with its status, tags and last contact, and Pause or
/// Resume.
async fn environments(state: &AppState, path: &str) -> Result<Response, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    let base = format!("/{}/-", project.path_with_namespace);
    let (list, total) = state
        .coordinator
        .environments_page(project.id, &Default::default(), 0, PER_PAGE)
        .await?;
    let mut rows = String::new();
    for e in &list {
        let shown = state.coordinator.environment(project.id, e.id).await?;
        let url = e.external_url.as_deref().map_or_else(String::new, |u| {
            format!(
                "<a href=\"{}\" rel=\"noopener\">{}</a>",
                escape(u),
                escape(u)
            )
        });
        let last = shown.last_deployment.as_ref().map_or_else(
            || "—".to_owned(),
            |d| {
                let job = d.deployable.as_ref().map_or_else(String::new, |j| {
                    format!(
                        " <a href=\"{}/jobs/{}\">{}</a>",
                        escape(&base),
                        j.id,
                        escape(&j.name)
                    )
                });
                format!(
                    "#{} {}{job} {}",
                    d.iid,
                    escape(&d.ref_name),
                    escape(&d.created_at)
                )
            },
        );
        let stop = if e.state == "available" {
            button(&format!("{base}/environments/{}/stop", e.id), "Stop")
        } else {
            String::new()
        };
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{url}</td><td>{last}</td><td>{}</td><td>{stop}</td></tr>",
            escape(&e.name),
            escape(&e.state),
            escape(&e.tier),
            escape(e.auto_stop_at.as_deref().unwrap_or("")),
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"7\">No environments: a job with <code>environment:</code> makes one.</td></tr>".to_owned();
    }
    Ok(html(
        StatusCode::OK,
        "Environments",
        list.iter().any(|e| e.state == "stopping"),
        &format!(
            "<h1>{} · environments</h1><p>{total} environments · <a href=\"{}/pipelines\">pipelines</a></p>\
             <table><tr><th>Environment</th><th>State</th><th>Tier</th><th>URL</th><th>Last deployment</th><th>Stops at (UTC)</th><th></th></tr>{rows}</table>",
            escape(&project.path_with_namespace),
            escape(&base),
        ),
    ))
}

async fn stop_environment(state: &AppState, path: &str, id: i64) -> Result<Response, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    let back = format!("/{}/-/environments", project.path_with_namespace);
    match state
        .coordinator
        .stop_environment(project.id, id, false)
        .await
    {
        Ok(_) => Ok(redirect(&back, None)),
        Err(e) => refused_action(e, &back),
    }
}

async fn runners(state: &AppState) -> Result<Response, ApiError> {
    let mut rows = String::new();
    for r in state.coordinator.runners().await? {
        let action = if r.paused {
            button(&format!("/-/runners/{}/resume", r.id), "Resume")
        } else {
            button(&format!("/-/runners/{}/pause", r.id), "Pause")
        };
        let _ = write!(
            rows,
            "<tr><td>#{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{action}</td></tr>",
            r.id,
            escape(&r.description),
            escape(r.status),
            if r.paused { " (paused)" } else { "" },
            escape(r.runner_type),
            escape(&r.tag_list.join(", ")),
            when(r.contacted_at),
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"7\">No runners: <code>POST /api/v4/user/runners</code> creates one, <code>gantry runner register</code> uses it.</td></tr>".to_owned();
    }
    Ok(html(
        StatusCode::OK,
        "Runners",
        false,
        &format!(
            "<h1>Runners</h1><table><tr><th>Runner</th><th>Description</th><th>Status</th><th>Type</th><th>Tags</th><th>Last contact</th><th></th></tr>{rows}</table>"
        ),
    ))
}

async fn runner_action(state: &AppState, id: i64, action: &str) -> Result<Response, ApiError> {
    let update = crate::coordinator::RunnerUpdate {
        paused: Some(action == "pause"),
        ..Default::default()
    };
    match state.coordinator.update_runner(id, &update).await {
        Ok(_) => Ok(redirect("/-/runners", None)),
        Err(e) => refused_action(e, "/-/runners"),
    }
}

fn pipeline_row(project: &Project, p: &PipelineView) -> String {
    format!(
        "<tr><td><a href=\"/{path}/-/pipelines/{id}\">#{id}</a></td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
        badge(&p.status),
        escape(&p.ref_name),
        escape(&p.sha[..p.sha.len().min(8)]),
        escape(&p.source),
        when(Some(p.created_at)),
        seconds(p.duration.map(|d| d as f64)),
        path = escape(&project.path_with_namespace),
        id = p.id,
    )
}

async fn pipelines(state: &AppState, path: &str, query: &str) -> Result<Response, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    let page: i64 = serde_urlencoded::from_str::<Vec<(String, String)>>(query)
        .unwrap_or_default()
        .iter()
        .find(|(k, _)| k == "page")
        .and_then(|(_, v)| v.parse().ok())
        .filter(|p| *p >= 1)
        .unwrap_or(1);
    let (list, total) = state
        .coordinator
        .pipelines_page(
            project.id,
            &Default::default(),
            (page - 1) * PER_PAGE,
            PER_PAGE,
        )
        .await?;
    let rows: String = list.iter().map(|p| pipeline_row(&project, p)).collect();
    let refresh = list.iter().any(|p| active(&p.status));
    let mut pager = String::new();
    if page > 1 {
        let _ = write!(pager, "<a href=\"?page={}\">newer</a> ", page - 1);
    }
    if page * PER_PAGE < total {
        let _ = write!(pager, "<a href=\"?page={}\">older</a>", page + 1);
    }
    Ok(html(
        StatusCode::OK,
        &project.path_with_namespace,
        refresh,
        &format!(
            "<h1>{}</h1><p>{total} pipelines · clone <code>{}</code> · <a href=\"/{}/-/pipelines/new\">Run pipeline</a> · <a href=\"/{2}/-/environments\">Environments</a></p>\
             <table><tr><th>Pipeline</th><th>Status</th><th>Ref</th><th>Commit</th><th>Source</th><th>Created (UTC)</th><th>Duration</th></tr>{rows}</table><p>{pager}</p>",
            escape(&project.path_with_namespace),
            escape(&project.http_url_to_repo),
            escape(&project.path_with_namespace),
        ),
    ))
}

/// The "Run pipeline" form, with what was entered and why it was refused.
fn new_pipeline_form(
    project: &Project,
    status: StatusCode,
    fields: &[(String, String)],
    error: Option<&str>,
) -> Response {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| escape(v))
            .unwrap_or_default()
    };
    let ref_name = match field("ref") {
        r if r.is_empty() => escape(&project.default_branch),
        r => r,
    };
    let error = error
        .map(|e| format!("<p class=\"error\">{}</p>", escape(e)))
        .unwrap_or_default();
    html(
        status,
        "Run pipeline",
        false,
        &format!(
            "<p>{}</p><h1>Run pipeline</h1>{error}<form method=\"post\">\
             <p><label>Branch or tag<br><input name=\"ref\" value=\"{ref_name}\" size=\"40\"></label></p>\
             <p><label>Variables, one <code>KEY=value</code> a line<br><textarea name=\"variables\" rows=\"5\" cols=\"60\">{}</textarea></label></p>\
             <p><label>Inputs, one <code>name=value</code> a line (read as the type <code>spec:inputs</code> declares)<br><textarea name=\"inputs\" rows=\"3\" cols=\"60\">{}</textarea></label></p>\
             <button type=\"submit\">Run pipeline</button></form>",
            project_link(project),
            field("variables"),
            field("inputs"),
        ),
    )
}

async fn new_pipeline_page(state: &AppState, path: &str) -> Result<Response, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    Ok(new_pipeline_form(&project, StatusCode::OK, &[], None))
}

/// `KEY=value` lines (blank lines skipped); the error names the line.
fn assignments(text: &str, what: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        match line.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => out.push((k.trim().to_owned(), v.to_owned())),
            _ => {
                return Err(format!(
                    "{what}, line {}: `{line}` is not {}=value",
                    n + 1,
                    if what == "variables" { "KEY" } else { "name" }
                ));
            }
        }
    }
    Ok(out)
}

/// Creates the pipeline the form asks for (source `web`, as GitLab's form) and shows it;
/// a mistake shows the form again with what was entered.
async fn run_pipeline(state: &AppState, path: &str, body: &[u8]) -> Result<Response, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(body).unwrap_or_default();
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let refused = |m: &str| {
        Ok(new_pipeline_form(
            &project,
            StatusCode::BAD_REQUEST,
            &fields,
            Some(m),
        ))
    };
    let ref_name = match get("ref").trim() {
        "" => project.default_branch.clone(),
        r => r.to_owned(),
    };
    let variables = match assignments(&get("variables"), "variables") {
        Ok(v) => v,
        Err(m) => return refused(&m),
    };
    let mut inputs = gantry_pipeline::PipelineInputs::default();
    match assignments(&get("inputs"), "inputs") {
        Ok(list) => {
            for (name, value) in list {
                inputs.insert(name, gantry_pipeline::InputValue::Text(value));
            }
        }
        Err(m) => return refused(&m),
    }
    let created = state
        .coordinator
        .create_pipeline_with(
            project.id,
            crate::coordinator::PipelineRequest {
                ref_name,
                variables,
                file_variables: Vec::new(),
                raw_variables: Vec::new(),
                source: gantry_pipeline::Source::Web,
                jobs: None,
                inputs,
            },
        )
        .await;
    match created {
        Ok(p) => Ok(redirect(
            &format!("/{}/-/pipelines/{}", project.path_with_namespace, p.id),
            None,
        )),
        Err(CoordinatorError::Invalid(m)) => refused(&m),
        Err(e) => Err(e.into()),
    }
}

/// The pipeline `id` when it belongs to the project at `path`.
async fn pipeline_of(
    state: &AppState,
    path: &str,
    id: i64,
) -> Result<Option<(Project, PipelineView)>, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(None);
    };
    match state.coordinator.pipeline(id).await {
        Ok(p) if p.project_id == project.id => Ok(Some((project, p))),
        Ok(_) | Err(CoordinatorError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn button(action: &str, label: &str) -> String {
    format!(
        "<form class=\"inline\" method=\"post\" action=\"{}\"><button type=\"submit\">{}</button></form>",
        escape(action),
        escape(label)
    )
}

async fn pipeline(state: &AppState, path: &str, id: i64) -> Result<Response, ApiError> {
    let Some((project, p)) = pipeline_of(state, path, id).await? else {
        return Ok(not_found());
    };
    let jobs = state.coordinator.pipeline_jobs(id).await?;
    let base = format!("/{}/-", project.path_with_namespace);
    let mut stages: Vec<(String, String)> = Vec::new();
    for j in jobs.iter().filter(|j| !j.retried) {
        let cell = format!(
            "<div>{} <a href=\"{}/jobs/{}\">{}</a> {}{}</div>",
            badge(&j.status),
            escape(&base),
            j.id,
            escape(&j.name),
            seconds(j.duration),
            why_waiting(j),
        );
        match stages.iter_mut().find(|(s, _)| *s == j.stage) {
            Some((_, cells)) => cells.push_str(&cell),
            None => stages.push((j.stage.clone(), cell)),
        }
    }
    let columns: String = stages
        .iter()
        .map(|(stage, cells)| {
            format!(
                "<div class=\"stage\"><h3>{}</h3>{cells}</div>",
                escape(stage)
            )
        })
        .collect();
    let errors: String = p
        .yaml_errors
        .iter()
        .map(|e| format!("<p class=\"error\">{}</p>", escape(e)))
        .collect();
    let mut actions = String::new();
    if active(&p.status) {
        actions.push_str(&button(&format!("{base}/pipelines/{id}/cancel"), "Cancel"));
    }
    if matches!(p.status.as_str(), "failed" | "canceled") {
        actions.push_str(&button(
            &format!("{base}/pipelines/{id}/retry"),
            "Retry failed jobs",
        ));
    }
    Ok(html(
        StatusCode::OK,
        &format!("Pipeline #{id}"),
        active(&p.status),
        &format!(
            "<p>{}</p><h1>Pipeline #{id} {}</h1><p>{} <code>{}</code> · {} · created {} UTC{}</p>{actions}{errors}<div class=\"stages\">{columns}</div>",
            project_link(&project),
            badge(&p.status),
            escape(&p.ref_name),
            escape(&p.sha),
            escape(&p.source),
            when(Some(p.created_at)),
            p.duration
                .map(|d| format!(" · {}", seconds(Some(d as f64))))
                .unwrap_or_default(),
        ),
    ))
}

async fn pipeline_action(
    state: &AppState,
    path: &str,
    id: i64,
    action: &str,
) -> Result<Response, ApiError> {
    if pipeline_of(state, path, id).await?.is_none() {
        return Ok(not_found());
    }
    let back = format!("/{path}/-/pipelines/{id}");
    let done = match action {
        "cancel" => state.coordinator.cancel_pipeline(id).await,
        _ => state.coordinator.retry_pipeline(id).await,
    };
    match done {
        Ok(_) => Ok(redirect(&back, None)),
        Err(e) => refused_action(e, &back),
    }
}

/// A button whose action the coordinator refused (a job that is not manual, a pipeline
/// with nothing to retry, …): a page saying why, with the way back; other errors as the
/// API answers them.
fn refused_action(e: CoordinatorError, back: &str) -> Result<Response, ApiError> {
    let status = match &e {
        CoordinatorError::Invalid(_) => StatusCode::BAD_REQUEST,
        CoordinatorError::Forbidden(_) => StatusCode::FORBIDDEN,
        CoordinatorError::Conflict(_) => StatusCode::CONFLICT,
        CoordinatorError::NotFound(_) => StatusCode::NOT_FOUND,
        _ => return Err(e.into()),
    };
    Ok(html(
        status,
        "Not done",
        false,
        &format!(
            "<h1>Not done</h1><p class=\"error\">{}</p><p><a href=\"{}\">Back</a></p>",
            escape(&e.to_string()),
            escape(back)
        ),
    ))
}

async fn job_of(
    state: &AppState,
    path: &str,
    id: i64,
) -> Result<Option<(Project, JobView)>, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(None);
    };
    match state.coordinator.job(id).await {
        Ok(j) if j.project_id == project.id => Ok(Some((project, j))),
        Ok(_) | Err(CoordinatorError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn job(state: &AppState, path: &str, id: i64) -> Result<Response, ApiError> {
    let Some((project, j)) = job_of(state, path, id).await? else {
        return Ok(not_found());
    };
    let log = shown_log(&state.coordinator.trace(id).await?, project.id, id);
    let base = format!("/{}/-", project.path_with_namespace);
    let mut actions = String::new();
    if active(&j.status) {
        actions.push_str(&button(&format!("{base}/jobs/{id}/cancel"), "Cancel"));
    } else if j.status == "manual" {
        actions.push_str(&button(&format!("{base}/jobs/{id}/play"), "Run"));
    } else if !j.retried {
        actions.push_str(&button(&format!("{base}/jobs/{id}/retry"), "Retry"));
    }
    let reason = j
        .failure_reason
        .as_deref()
        .map(|r| format!(" · {}", escape(r)))
        .unwrap_or_default();
    let waiting = why_waiting(&j);
    Ok(html(
        StatusCode::OK,
        &j.name,
        active(&j.status),
        &format!(
            "<p>{} · <a href=\"{}/pipelines/{}\">pipeline #{}</a></p><h1>{} {}</h1>\
             <p>stage {} · attempt {} · {}{reason}</p>{waiting}{actions}<pre>{}</pre>",
            project_link(&project),
            escape(&base),
            j.pipeline_id,
            j.pipeline_id,
            escape(&j.name),
            badge(&j.status),
            escape(&j.stage),
            j.attempt,
            seconds(j.duration),
            escape(&log),
        ),
    ))
}

/// Why a waiting job waits (its `pending_reason`), as a paragraph; empty otherwise.
fn why_waiting(j: &JobView) -> String {
    j.pending_reason
        .as_ref()
        .map(|why| format!("<p class=\"why\">{}</p>", escape(&why.to_string())))
        .unwrap_or_default()
}

async fn job_action(
    state: &AppState,
    path: &str,
    id: i64,
    action: &str,
) -> Result<Response, ApiError> {
    if job_of(state, path, id).await?.is_none() {
        return Ok(not_found());
    }
    let done = match action {
        "cancel" => state.coordinator.cancel_job(id).await,
        "play" => state.coordinator.play_job(id, Vec::new()).await,
        _ => state.coordinator.retry_job(id).await,
    };
    match done {
        Ok(job) => Ok(redirect(&format!("/{path}/-/jobs/{}", job.id), None)),
        Err(e) => refused_action(e, &format!("/{path}/-/jobs/{id}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_pages() {
        assert_eq!(page("/"), Some(Page::Projects));
        assert_eq!(page("/gantry/demo"), Some(Page::Pipelines("gantry/demo")));
        assert_eq!(page("/a/b/c/-/pipelines"), Some(Page::Pipelines("a/b/c")));
        assert_eq!(
            page("/g/d/-/pipelines/7"),
            Some(Page::Pipeline("g/d", 7, None))
        );
        assert_eq!(
            page("/g/d/-/pipelines/7/cancel"),
            Some(Page::Pipeline("g/d", 7, Some("cancel")))
        );
        assert_eq!(
            page("/g/d/-/jobs/9/play"),
            Some(Page::Job("g/d", 9, Some("play")))
        );
        assert_eq!(page("/g/d/-/pipelines/new"), Some(Page::NewPipeline("g/d")));
        assert_eq!(page("/g/d.git/info/refs"), None);
        assert_eq!(page("/favicon.ico"), None);
        assert_eq!(page("/api/v4/projects"), None);
        assert_eq!(page("/g/d/-/jobs/x"), None);
        assert_eq!(page("/g/d/-/jobs/9/delete"), None);
    }

    #[test]
    fn logs_lose_escapes_and_section_markers() {
        let raw = b"\x1b[0Ksection_start:1700000000:build_script\r\x1b[0K\x1b[32;1m$ make\x1b[0;m\n\
                    progress 10%\rprogress 100%\n<b>&\n\x1b[0Ksection_end:1700000001:build_script\r\x1b[0K\n";
        assert_eq!(plain_log(raw), "$ make\nprogress 100%\n<b>&");
        assert_eq!(escape("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
    }

    #[test]
    fn a_page_shows_the_last_mebibyte_of_a_log() {
        let mut raw = vec![b'a'; 10];
        raw.extend(std::iter::repeat_n(b'b', MAX_LOG_SHOWN));
        let shown = shown_log(&raw, 3, 9);
        let (note, rest) = shown.split_once('\n').unwrap();
        assert_eq!(
            note,
            "… the first 10 bytes are left out; GET /api/v4/projects/3/jobs/9/trace has the whole log"
        );
        assert_eq!(rest.len(), MAX_LOG_SHOWN);
        assert!(rest.bytes().all(|b| b == b'b'));
        assert_eq!(shown_log(b"short", 3, 9), "short");
    }
}
