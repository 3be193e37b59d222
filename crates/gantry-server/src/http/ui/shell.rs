//! What every page shares: the HTML frame (header, stylesheet, scripts) and its security
//! headers, escaping, status pills, buttons (forms carrying the session's CSRF token),
//! redirects and the "not done" page.
//!
//! Headers of every page: `Content-Security-Policy` allows scripts, styles, images and
//! `fetch` only from this server (`'self'`, no inline script or style), forms only to it,
//! no framing (`frame-ancestors 'none'` and `X-Frame-Options: DENY`), no `<base>`;
//! `Cache-Control: no-store` (the pages show what the admin sees).
//!
//! The CSRF token of the request's session is a task-local value ([`CSRF`], set by
//! `serve` around one page's rendering), so [`button`] and the header's sign-out form
//! carry it without every page function passing it along.

use crate::processor::Status;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::coordinator::{CoordinatorError, JobView, Project};

use super::super::AppState;
use super::super::error::ApiError;

tokio::task_local! {
    /// The CSRF token of the session a page is rendered for (empty: no session, e.g. a
    /// `PRIVATE-TOKEN` client).
    pub(super) static CSRF: String;
}

/// The form field (GitLab's name) that carries the CSRF token.
pub(super) const CSRF_FIELD: &str = "authenticity_token";

/// The policy of every page and script.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

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

/// The hidden field with the session's CSRF token; empty without a session.
pub(super) fn csrf_field() -> String {
    let token = CSRF.try_with(Clone::clone).unwrap_or_default();
    if token.is_empty() {
        return String::new();
    }
    format!(
        "<input type=\"hidden\" name=\"{CSRF_FIELD}\" value=\"{}\">",
        escape(&token)
    )
}

/// A page: `title`, `body`; `refresh` reloads it every 3 s (pages of something still
/// running); `script` is a path of a script of this server's (`/-/ui/…`).
pub(super) fn page(
    status: StatusCode,
    title: &str,
    refresh: bool,
    script: Option<&str>,
    body: &str,
) -> Response {
    let refresh = if refresh {
        r#"<meta http-equiv="refresh" content="3">"#
    } else {
        ""
    };
    let script = script
        .map(|s| format!("<script src=\"{}\" defer></script>", escape(s)))
        .unwrap_or_default();
    let csrf = csrf_field();
    let sign_out = if csrf.is_empty() {
        String::new()
    } else {
        format!(
            "<form class=\"inline out\" method=\"post\" action=\"/-/logout\">{csrf}<button type=\"submit\">Sign out</button></form>"
        )
    };
    let html = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · Gantry</title>{refresh}<link rel=\"stylesheet\" href=\"/-/ui/app.css\">{script}</head>\
         <body><header><a href=\"/\"><b>Gantry</b></a><a href=\"/\">Projects</a><a href=\"/-/runners\">Runners</a>{sign_out}</header><main>{body}</main></body></html>",
        escape(title)
    );
    with_headers((status, html).into_response(), "text/html; charset=utf-8")
}

/// [`page`] without script.
pub(super) fn html(status: StatusCode, title: &str, refresh: bool, body: &str) -> Response {
    page(status, title, refresh, None, body)
}

/// `response` with the content type and the security headers of every page.
pub(super) fn with_headers(mut response: Response, content_type: &'static str) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    response
}

pub(super) fn redirect(to: &str, set_cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, c);
    }
    response
}

pub(super) fn not_found() -> Response {
    html(
        StatusCode::NOT_FOUND,
        "Not found",
        false,
        "<h1>Not found</h1>",
    )
}

pub(super) fn badge(status: &str) -> String {
    let status = escape(status);
    format!("<span class=\"s {status}\">{status}</span>")
}

pub(super) fn when(ms: Option<i64>) -> String {
    ms.map(|ms| crate::coordinator::iso8601(ms)[..19].replace('T', " "))
        .unwrap_or_default()
}

pub(super) fn seconds(d: Option<f64>) -> String {
    match d {
        Some(d) if d >= 60.0 => format!("{}m {:02}s", (d / 60.0).floor(), (d % 60.0).floor()),
        Some(d) => format!("{}s", d.floor()),
        None => String::new(),
    }
}

/// The page refreshes while a status will change without a user's action (a job
/// waiting for others, queued, running or being canceled).
pub(super) fn active(status: Status) -> bool {
    matches!(
        status,
        Status::Created
            | Status::WaitingForResource
            | Status::Preparing
            | Status::Pending
            | Status::Running
            | Status::Canceling
    )
}

pub(super) async fn project_at(state: &AppState, path: &str) -> Result<Option<Project>, ApiError> {
    match state.coordinator.project_by_path(path).await {
        Ok(p) => Ok(Some(p)),
        Err(CoordinatorError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn project_link(p: &Project) -> String {
    format!(
        "<a href=\"/{}\">{}</a>",
        escape(&p.path_with_namespace),
        escape(&p.path_with_namespace)
    )
}

/// A button posting to `action`, with the session's CSRF token.
pub(super) fn button(action: &str, label: &str) -> String {
    format!(
        "<form class=\"inline\" method=\"post\" action=\"{}\">{}<button type=\"submit\">{}</button></form>",
        escape(action),
        csrf_field(),
        escape(label)
    )
}

/// Why a waiting job waits (its `pending_reason`), as a paragraph; empty otherwise.
pub(super) fn why_waiting(j: &JobView) -> String {
    j.pending_reason
        .as_ref()
        .map(|why| format!("<p class=\"why\">{}</p>", escape(&why.to_string())))
        .unwrap_or_default()
}

/// A button whose action the coordinator refused (a job that is not manual, a pipeline
/// with nothing to retry, …): a page saying why, with the way back; other errors as the
/// API answers them.
pub(super) fn refused_action(e: CoordinatorError, back: &str) -> Result<Response, ApiError> {
    let status = match &e {
        CoordinatorError::Invalid(_) => StatusCode::BAD_REQUEST,
        CoordinatorError::Forbidden(_) => StatusCode::FORBIDDEN,
        CoordinatorError::Conflict(_) => StatusCode::CONFLICT,
        CoordinatorError::NotFound(_) => StatusCode::NOT_FOUND,
        _ => return Err(e.into()),
    };
    Ok(not_done(status, &e.to_string(), back))
}

/// A page saying an action was not done, why, and the way back.
pub(super) fn not_done(status: StatusCode, why: &str, back: &str) -> Response {
    html(
        status,
        "Not done",
        false,
        &format!(
            "<h1>Not done</h1><p class=\"error\">{}</p><p><a href=\"{}\">Back</a></p>",
            escape(why),
            escape(back)
        ),
    )
}

/// How long before `now` the time `ms` was, for people (`just now`, `5 minutes ago`,
/// `3 days ago`; both Unix ms), as GitLab's lists show times.
pub(super) fn ago(ms: i64, now: i64) -> String {
    let secs = (now - ms).max(0) / 1000;
    let (n, unit) = match secs {
        s if s < 60 => return "just now".to_owned(),
        s if s < 3600 => (s / 60, "minute"),
        s if s < 86_400 => (s / 3600, "hour"),
        s if s < 30 * 86_400 => (s / 86_400, "day"),
        s if s < 365 * 86_400 => (s / (30 * 86_400), "month"),
        s => (s / (365 * 86_400), "year"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}
