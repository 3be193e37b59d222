//! `/-/runners`: every runner with its status, tags and last contact, and Pause or
//! Resume, which the runner's next job request obeys.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::super::AppState;
use super::super::error::ApiError;
use super::shell::{button, escape, html, redirect, refused_action, when};

pub(super) async fn runners(state: &AppState) -> Result<Response, ApiError> {
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

pub(super) async fn runner_action(
    state: &AppState,
    id: i64,
    action: &str,
) -> Result<Response, ApiError> {
    let update = crate::coordinator::RunnerUpdate {
        paused: Some(action == "pause"),
        ..Default::default()
    };
    match state.coordinator.update_runner(id, &update).await {
        Ok(_) => Ok(redirect("/-/runners", None)),
        Err(e) => refused_action(e, "/-/runners"),
    }
}
