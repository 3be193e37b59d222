//! A job's page (`/{project}/-/jobs/{id}`) with Cancel, Retry or Run, and its live log:
//! the page holds no log; its script (`job.js`, served by `assets.rs`) asks
//! `…/jobs/{id}/trace.json` for the tail, then every half second for what came since (a byte
//! offset, the line number and the text style there), builds collapsible sections from
//! the markers `log.rs` reports, follows the end unless the reader scrolled up, and offers
//! the earlier part on demand. `…/jobs/{id}/raw` is the log as text.
//!
//! Watching: the page, `trace.json` and `raw` mark a running job as watched
//! (`AppState::watch`, as the API's trace does), so the runner is told the short update
//! interval at its next contact; see `http/mod.rs` for how soon that is.

use crate::processor::Status;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::coordinator::{CoordinatorError, JobView, Project, TraceSource};

use super::super::AppState;
use super::super::error::ApiError;
use super::log::{Line, Style, render_line};
use super::shell::{
    active, badge, button, escape, not_found, page, project_at, project_link, redirect,
    refused_action, seconds, why_waiting, with_headers,
};

/// What the page loads first: the log's last 256 KiB (a 10 MB log opens as fast as a
/// small one); earlier parts on demand.
pub(super) const TAIL: u64 = 256 * 1024;
/// The most one later request reads.
pub(super) const WINDOW: u64 = 1024 * 1024;

pub(super) async fn job_of(
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

pub(super) async fn job(state: &AppState, path: &str, id: i64) -> Result<Response, ApiError> {
    let Some((project, j)) = job_of(state, path, id).await? else {
        return Ok(not_found());
    };
    if j.status == Status::Running {
        state.watch(id);
    }
    let base = format!("/{}/-", project.path_with_namespace);
    let mut actions = String::new();
    if active(j.status) {
        actions.push_str(&button(&format!("{base}/jobs/{id}/cancel"), "Cancel"));
    } else if j.status == Status::Manual {
        actions.push_str(&button(&format!("{base}/jobs/{id}/play"), "Run"));
    } else if !j.retried {
        actions.push_str(&button(&format!("{base}/jobs/{id}/retry"), "Retry"));
    }
    let reason = j
        .failure_reason
        .as_deref()
        .map(|r| format!(" · {}", escape(r)))
        .unwrap_or_default();
    let waiting = why_waiting(&j) + &super::timeline::resources_block(j.resources.as_ref());
    let job_url = escape(&format!("{base}/jobs/{id}"));
    let details = super::job_details::details(state, &base, &j).await?;
    Ok(page(
        StatusCode::OK,
        &j.name,
        false,
        Some("/-/ui/job.js"),
        &format!(
            "<p>{} · <a href=\"{}/pipelines/{}\">pipeline #{}</a></p><h1>{} <span id=\"status\">{}</span></h1>\
             <p>stage {} · attempt {} · {}{reason} · <a href=\"{job_url}/raw\">raw log</a></p>{waiting}{actions}{details}\
             <div id=\"log\" class=\"log\" data-trace=\"{job_url}/trace.json\"><noscript>The live log needs JavaScript; the <a href=\"{job_url}/raw\">raw log</a> does not.</noscript></div>",
            project_link(&project),
            escape(&base),
            j.pipeline_id,
            j.pipeline_id,
            escape(&j.name),
            badge(j.status.as_str()),
            escape(&j.stage),
            j.attempt,
            seconds(j.duration),
        ),
    ))
}

/// The query of `trace.json`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TraceQuery {
    /// Where to read from; absent: the log's tail.
    offset: Option<u64>,
    /// The number of the line at `offset` minus one; absent: counted, and `offset` moved
    /// to the next line's start.
    line: Option<u64>,
    /// The text style at `offset` ([`Style::encode`]).
    state: String,
}

/// What `trace.json` answers.
#[derive(Debug, Serialize)]
struct TracePiece {
    /// Where the lines start in the log.
    start: u64,
    /// Where the next request starts.
    offset: u64,
    /// The number of the last line sent (the next request's `line`).
    line: u64,
    /// The log's length now.
    size: u64,
    /// The job ended: the log is whole.
    complete: bool,
    status: Status,
    /// The text style at `offset`.
    state: String,
    lines: Vec<Line>,
}

/// `GET /{project}/-/jobs/{id}/trace.json` (GitLab's address): a piece of the log as
/// rendered lines. Without `offset` the last [`TAIL`] bytes (from a line start), else at
/// most [`WINDOW`] bytes from `offset`; while the job runs only whole lines (a line
/// still being written comes with its `\n`). Reading a running job's log marks it as
/// watched, so its runner sends more often. Cost: O(window), plus O(offset) to count
/// lines when `line` is absent (the first request of a page).
pub(super) async fn trace_json(
    state: &AppState,
    path: &str,
    id: i64,
    query: &str,
) -> Result<Response, ApiError> {
    let Some((_, j)) = job_of(state, path, id).await? else {
        return Ok(not_found());
    };
    let query: TraceQuery = serde_urlencoded::from_str(query).unwrap_or_default();
    let complete = !active(j.status);
    if j.status == Status::Running {
        state.watch(id);
    }
    let (from, max) = match query.offset {
        None => (None, TAIL),
        // Counting lines: read from the byte before, to start after its line's end.
        Some(o) if query.line.is_none() => (Some(o.saturating_sub(1)), WINDOW),
        Some(o) => (Some(o), WINDOW),
    };
    let window = state
        .coordinator
        .traces()
        .trace_window(id, from, max, query.line.is_none())
        .await?;
    let mut bytes: &[u8] = &window.bytes;
    let mut start = window.start;
    let mut line = query.line.or(window.lines_before).unwrap_or(0);
    if query.line.is_none() && start > 0 {
        // Start at the next line's start (a line longer than the window: where it is).
        if let Some(at) = bytes.iter().position(|&b| b == b'\n') {
            bytes = &bytes[at + 1..];
            start += at as u64 + 1;
            line += 1;
        }
    }
    let end = start + bytes.len() as u64;
    let whole = complete && end >= window.len;
    if !whole {
        // Whole lines only; a window of one unfinished line goes as it is when full.
        match bytes.iter().rposition(|&b| b == b'\n') {
            Some(at) => bytes = &bytes[..at + 1],
            None if (bytes.len() as u64) < max => bytes = &[],
            None => {}
        }
    }
    let mut style = Style::decode(&query.state);
    let mut lines = Vec::new();
    let text = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if !bytes.is_empty() {
        for raw in text.split(|&b| b == b'\n') {
            line += 1;
            lines.push(render_line(raw, line, &mut style));
        }
    }
    if !bytes.is_empty() && !bytes.ends_with(b"\n") {
        // The last line has no `\n` yet: the next piece starts after it, on the same line
        // number (only when the job ended or a line outgrew the window).
        line -= 1;
    }
    let piece = TracePiece {
        start,
        offset: start + bytes.len() as u64,
        line,
        size: window.len,
        complete,
        status: j.status,
        state: style.encode(),
        lines,
    };
    Ok(with_headers(
        axum::Json(piece).into_response(),
        "application/json",
    ))
}

/// `GET /{project}/-/jobs/{id}/raw`: the log as plain text, streamed (GitLab's "raw"
/// view). Marks a running job as watched, as the API's trace does.
pub(super) async fn raw(state: &AppState, path: &str, id: i64) -> Result<Response, ApiError> {
    let Some((_, j)) = job_of(state, path, id).await? else {
        return Ok(not_found());
    };
    if j.status == Status::Running {
        state.watch(id);
    }
    let body = match state.coordinator.traces().trace_source(id).await? {
        TraceSource::Bytes(log) => axum::body::Body::from(log),
        TraceSource::File { file, len } => super::super::file_body(file, len),
    };
    Ok(with_headers(
        (StatusCode::OK, body).into_response(),
        "text/plain; charset=utf-8",
    ))
}

pub(super) async fn job_action(
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
