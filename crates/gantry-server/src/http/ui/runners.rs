//! `/-/runners`: every runner with its status, version, executor, platform, address
//! (what it said at its last contact, `gantry_store::RunnerInfo`), tags, last contact
//! and the jobs it runs now, its processes (GitLab's runner managers: each `system_id`
//! with its version, in the cell's title), and Pause or Resume (GitLab's `paused`, as
//! `PUT /runners/:id paused=true`), which the runner's next job request obeys. Cost:
//! four queries (runners, their info, their managers, the running jobs by runner).

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::super::AppState;
use super::super::error::ApiError;
use super::shell::{ago, button, escape, html, redirect, refused_action, when};

pub(super) async fn runners(state: &AppState) -> Result<Response, ApiError> {
    let infos = state.coordinator.runner_infos().await?;
    let running = state.coordinator.running_jobs_by_runner().await?;
    let managers = state.coordinator.all_runner_managers().await?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let mut rows = String::new();
    for r in state.coordinator.runners().await? {
        let action = if r.paused {
            button(&format!("/-/runners/{}/resume", r.id), "Resume")
        } else {
            button(&format!("/-/runners/{}/pause", r.id), "Pause")
        };
        let info = infos.get(&r.id).cloned().unwrap_or_default();
        let version = if info.revision.is_empty() {
            escape(&info.version)
        } else {
            format!(
                "{} <small>({})</small>",
                escape(&info.version),
                escape(&info.revision)
            )
        };
        let platform = match (info.platform.as_str(), info.architecture.as_str()) {
            ("", "") => String::new(),
            (p, "") | ("", p) => escape(p),
            (p, a) => format!("{}/{}", escape(p), escape(a)),
        };
        let contact = r.contacted_at.map_or_else(
            || "never".to_owned(),
            |at| {
                format!(
                    "<span title=\"{} UTC\">{}</span>",
                    when(Some(at)),
                    ago(at, now)
                )
            },
        );
        let processes = managers.get(&r.id).map_or(&[][..], Vec::as_slice);
        let process_list = processes
            .iter()
            .map(|m| match m.info.version.as_str() {
                "" => m.system_id.clone(),
                v => format!("{} ({v})", m.system_id),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let processes = format!(
            "<span title=\"{}\">{}</span>",
            escape(&process_list),
            processes.len()
        );
        let _ = write!(
            rows,
            "<tr id=\"runner-{id}\"><td>#{id}</td><td>{}</td><td class=\"status\">{}{}</td><td>{}</td><td>{version}</td><td>{}</td><td>{platform}</td><td>{}</td><td>{}</td><td>{contact}</td><td class=\"processes\">{processes}</td><td class=\"running\">{}</td><td>{action}</td></tr>",
            escape(&r.description),
            escape(r.status),
            if r.paused { " (paused)" } else { "" },
            escape(r.runner_type),
            escape(&info.executor),
            escape(&info.ip_address),
            escape(&r.tag_list.join(", ")),
            running.get(&r.id).copied().unwrap_or(0),
            id = r.id,
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"13\">No runners: <code>POST /api/v4/user/runners</code> creates one, <code>gantry runner register</code> uses it.</td></tr>".to_owned();
    }
    Ok(html(
        StatusCode::OK,
        "Runners",
        false,
        &format!(
            "<h1>Runners</h1><table class=\"runners\"><tr><th>Runner</th><th>Description</th><th>Status</th><th>Type</th><th>Version</th><th>Executor</th><th>Platform</th><th>IP address</th><th>Tags</th><th>Last contact</th><th>Processes</th><th>Jobs running</th><th></th></tr>{rows}</table>"
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
