//! `/` (every project with its latest pipeline) and `/{project}/-/environments` (each
//! environment's state and last deployment, with Stop).

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::super::AppState;
use super::super::error::ApiError;
use super::PER_PAGE;
use super::shell::{
    badge, button, escape, html, not_found, project_at, project_link, redirect, refused_action,
};

pub(super) async fn projects(state: &AppState) -> Result<Response, ApiError> {
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
                    badge(l.status.as_str()),
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

pub(super) async fn environments(state: &AppState, path: &str) -> Result<Response, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    let base = format!("/{}/-", project.path_with_namespace);
    let (list, total) = state
        .coordinator
        .environments()
        .page(project.id, &Default::default(), 0, PER_PAGE)
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

pub(super) async fn stop_environment(
    state: &AppState,
    path: &str,
    id: i64,
) -> Result<Response, ApiError> {
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
