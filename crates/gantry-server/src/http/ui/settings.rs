//! `/{project}/-/settings/ci_cd` (GitLab's address): a project's CI/CD settings, read
//! only (the API and `gantry project` change them): the repository it mirrors, the CI
//! file, the job timeout, Git strategy and depth, the pipeline and artifact settings,
//! and its CI/CD variables (a masked one's value hidden). Cost: the project and its
//! variables (two queries).

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;
use gantry_store::VariableOwner;

use super::super::AppState;
use super::super::error::ApiError;
use super::shell::{escape, html, not_found, project_at, project_link, seconds};

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

pub(super) async fn settings(state: &AppState, path: &str) -> Result<Response, ApiError> {
    let Some(p) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    let mut rows = String::new();
    for (name, value) in [
        ("Repository mirrored", escape(&p.repo_url)),
        ("Clone URL", escape(&p.http_url_to_repo)),
        ("Default branch", escape(&p.default_branch)),
        ("CI/CD configuration file", escape(&p.ci_config_path)),
        ("Job timeout", seconds(Some(p.build_timeout as f64))),
        ("Git strategy", escape(&p.build_git_strategy)),
        (
            "Git shallow clone depth",
            p.ci_default_git_depth
                .map_or_else(|| "not set".to_owned(), |d| d.to_string()),
        ),
        (
            "Auto-cancel redundant pipelines",
            p.auto_cancel_pending_pipelines.to_owned(),
        ),
        (
            "Keep artifacts from the latest successful jobs",
            yes(p.keep_latest_artifact).to_owned(),
        ),
        (
            "Use separate caches for protected branches",
            yes(p.ci_separated_caches).to_owned(),
        ),
        (
            "Prevent outdated deployment jobs",
            yes(p.ci_forward_deployment_enabled).to_owned(),
        ),
    ] {
        let _ = write!(rows, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    let mut vars = String::new();
    for v in state
        .coordinator
        .settings()
        .variables(&VariableOwner::Project(p.id))
        .await?
    {
        let value = if v.masked {
            "<i class=\"masked\">masked</i>".to_owned()
        } else {
            format!("<code>{}</code>", escape(&v.value))
        };
        let mut flags = Vec::new();
        if v.protected {
            flags.push("protected");
        }
        if v.masked {
            flags.push(if v.hidden {
                "masked and hidden"
            } else {
                "masked"
            });
        }
        if v.raw {
            flags.push("raw");
        }
        if v.variable_type == "file" {
            flags.push("file");
        }
        let _ = write!(
            vars,
            "<tr><td><code>{}</code></td><td>{value}</td><td>{}</td><td>{}</td></tr>",
            escape(&v.key),
            escape(&v.environment_scope),
            flags.join(", ")
        );
    }
    if vars.is_empty() {
        vars = "<tr><td colspan=\"4\">No variables: <code>POST /api/v4/projects/:id/variables</code> adds one.</td></tr>".to_owned();
    }
    Ok(html(
        StatusCode::OK,
        "CI/CD settings",
        false,
        &format!(
            "<p>{}</p><h1>CI/CD settings</h1><p class=\"why\">Read only: the API and <code>gantry project</code> change them.</p>\
             <table class=\"settings\">{rows}</table><h2>Variables</h2>\
             <table class=\"variables\"><tr><th>Key</th><th>Value</th><th>Environments</th><th>Attributes</th></tr>{vars}</table>",
            project_link(&p),
        ),
    ))
}
