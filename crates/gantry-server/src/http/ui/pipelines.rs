//! A project's pipelines (`/{project}`, `/{project}/-/pipelines`, 50 a page), GitLab's
//! "Run pipeline" form (`/{project}/-/pipelines/new`: a ref, variables and inputs;
//! source `web`) and a pipeline's page (`/{project}/-/pipelines/{id}`: stages and jobs,
//! the `needs` edges, downstream pipelines, the parent of a child pipeline), with Cancel
//! and Retry.

use crate::processor::Status;
use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use crate::coordinator::{CommitSummary, CoordinatorError, JobView, PipelineView, Project};

use super::super::AppState;
use super::super::error::ApiError;
use super::PER_PAGE;
use super::shell::ago;
use super::shell::{
    active, badge, button, csrf_field, escape, html, not_found, page, project_at, project_link,
    redirect, refused_action, seconds, when, why_waiting,
};

/// A pipeline of the list, with its commit's title and author when the mirror has it,
/// and how long ago it was created (`now`, Unix ms).
fn pipeline_row(
    project: &Project,
    p: &PipelineView,
    commit: Option<&CommitSummary>,
    now: i64,
) -> String {
    let (title, author) = commit.map_or((String::new(), String::new()), |c| {
        (
            format!("<br><small class=\"title\">{}</small>", escape(&c.title)),
            format!("<br><small class=\"author\">{}</small>", escape(&c.author)),
        )
    });
    format!(
        "<tr><td><a href=\"/{path}/-/pipelines/{id}\">#{id}</a></td><td>{}</td><td>{}</td><td><code>{}</code>{title}{author}</td><td>{}</td><td><span title=\"{} UTC\">{}</span></td><td>{}</td></tr>",
        badge(p.status.as_str()),
        escape(&p.ref_name),
        escape(&p.sha[..p.sha.len().min(8)]),
        escape(&p.source),
        when(Some(p.created_at)),
        ago(p.created_at, now),
        seconds(p.duration.map(|d| d as f64)),
        path = escape(&project.path_with_namespace),
        id = p.id,
    )
}

/// The filters of a list of pipelines: `status`, `ref`, `source` (GitLab's API
/// parameters), each empty when not set.
#[derive(Debug, Default, PartialEq, Eq)]
struct ListFilter {
    status: String,
    ref_name: String,
    source: String,
}

impl ListFilter {
    fn of(fields: &[(String, String)]) -> ListFilter {
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.trim().to_owned())
                .unwrap_or_default()
        };
        ListFilter {
            status: get("status"),
            ref_name: get("ref"),
            source: get("source"),
        }
    }

    fn to_store(&self) -> gantry_store::PipelineFilter {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        gantry_store::PipelineFilter {
            status: Status::parse(&self.status),
            ref_name: some(&self.ref_name),
            source: some(&self.source),
            ..Default::default()
        }
    }

    /// The query of these filters, `&`-prefixed (for the pager's links).
    fn query(&self) -> String {
        let pairs: Vec<(&str, &str)> = [
            ("status", self.status.as_str()),
            ("ref", self.ref_name.as_str()),
            ("source", self.source.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect();
        if pairs.is_empty() {
            return String::new();
        }
        format!(
            "&{}",
            serde_urlencoded::to_string(pairs).unwrap_or_default()
        )
    }

    /// The filter form (a GET form: no CSRF token needed).
    fn form(&self) -> String {
        let options = |all: &str, values: &[&str], chosen: &str| {
            let mut out = format!("<option value=\"\">{all}</option>");
            for v in values {
                let _ = write!(
                    out,
                    "<option{}>{v}</option>",
                    if *v == chosen { " selected" } else { "" }
                );
            }
            out
        };
        format!(
            "<form class=\"filters\" method=\"get\"><select name=\"status\" aria-label=\"Status\">{}</select> \
             <input name=\"ref\" value=\"{}\" placeholder=\"branch or tag\" aria-label=\"Ref\" size=\"16\"> \
             <select name=\"source\" aria-label=\"Source\">{}</select> <button type=\"submit\">Filter</button></form>",
            options("any status", &filter_statuses(), &self.status),
            escape(&self.ref_name),
            options(
                "any source",
                &[
                    "push",
                    "web",
                    "trigger",
                    "schedule",
                    "api",
                    "pipeline",
                    "parent_pipeline",
                    "merge_request_event",
                    "chat",
                    "external"
                ],
                &self.source
            ),
        )
    }
}

pub(super) async fn pipelines(
    state: &AppState,
    path: &str,
    query: &str,
) -> Result<Response, ApiError> {
    let Some(project) = project_at(state, path).await? else {
        return Ok(not_found());
    };
    let fields = serde_urlencoded::from_str::<Vec<(String, String)>>(query).unwrap_or_default();
    let filter = ListFilter::of(&fields);
    let page: i64 = fields
        .iter()
        .find(|(k, _)| k == "page")
        .and_then(|(_, v)| v.parse().ok())
        .filter(|p| *p >= 1)
        .unwrap_or(1);
    let (list, total) = state
        .coordinator
        .pipelines_page(
            project.id,
            &filter.to_store(),
            (page - 1) * PER_PAGE,
            PER_PAGE,
        )
        .await?;
    let shas: Vec<String> = list.iter().map(|p| p.sha.clone()).collect();
    let commits = state
        .coordinator
        .commit_summaries(project.id, &shas)
        .await
        .unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let rows: String = list
        .iter()
        .enumerate()
        .map(|(i, p)| pipeline_row(&project, p, commits.get(i).and_then(Option::as_ref), now))
        .collect();
    let refresh = list.iter().any(|p| active(p.status));
    let mut pager = String::new();
    if page > 1 {
        let _ = write!(
            pager,
            "<a href=\"?page={}{}\">newer</a> ",
            page - 1,
            escape(&filter.query())
        );
    }
    if page * PER_PAGE < total {
        let _ = write!(
            pager,
            "<a href=\"?page={}{}\">older</a>",
            page + 1,
            escape(&filter.query())
        );
    }
    Ok(html(
        StatusCode::OK,
        &project.path_with_namespace,
        refresh,
        &format!(
            "<h1>{}</h1><p>{total} pipelines · clone <code>{}</code> · <a href=\"/{}/-/pipelines/new\">Run pipeline</a> · <a href=\"/{2}/-/environments\">Environments</a> · <a href=\"/{2}/-/settings/ci_cd\">CI/CD settings</a></p>{}\
             <table class=\"pipelines\"><tr><th>Pipeline</th><th>Status</th><th>Ref</th><th>Commit</th><th>Source</th><th>Created</th><th>Duration</th></tr>{rows}</table><p>{pager}</p>",
            escape(&project.path_with_namespace),
            escape(&project.http_url_to_repo),
            escape(&project.path_with_namespace),
            filter.form(),
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
            "<p>{}</p><h1>Run pipeline</h1>{error}<form method=\"post\">{}\
             <p><label>Branch or tag<br><input name=\"ref\" value=\"{ref_name}\" size=\"40\"></label></p>\
             <p><label>Variables, one <code>KEY=value</code> a line<br><textarea name=\"variables\" rows=\"5\" cols=\"60\">{}</textarea></label></p>\
             <p><label>Inputs, one <code>name=value</code> a line (read as the type <code>spec:inputs</code> declares)<br><textarea name=\"inputs\" rows=\"3\" cols=\"60\">{}</textarea></label></p>\
             <button type=\"submit\">Run pipeline</button></form>",
            project_link(project),
            csrf_field(),
            field("variables"),
            field("inputs"),
        ),
    )
}

pub(super) async fn new_pipeline_page(state: &AppState, path: &str) -> Result<Response, ApiError> {
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
pub(super) async fn run_pipeline(
    state: &AppState,
    path: &str,
    body: &[u8],
) -> Result<Response, ApiError> {
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
pub(super) async fn pipeline_of(
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

/// How a pipeline's jobs are grouped: GitLab's "Group jobs by" switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grouping {
    /// One column per stage.
    Stage,
    /// One column per depth in the `needs` graph ("job dependencies").
    Needs,
}

/// The column of each job (by index in `jobs`) in the "job dependencies" view: 0 for a
/// job with `needs: []`, else one more than the deepest job it needs; a job without
/// `needs:` needs every job of the earlier stages (GitLab's default), so it goes one
/// past their deepest. `jobs` are in stage order. O(jobs²) name look-ups.
fn needs_layers(jobs: &[(&JobView, Option<&Vec<String>>)]) -> Vec<usize> {
    let mut layers: Vec<usize> = Vec::with_capacity(jobs.len());
    for (i, (job, needs)) in jobs.iter().enumerate() {
        let layer = match needs {
            Some(names) => names
                .iter()
                .filter_map(|n| jobs[..i].iter().position(|(j, _)| j.name == *n))
                .map(|at| layers[at] + 1)
                .max()
                .unwrap_or(0),
            None => jobs[..i]
                .iter()
                .zip(&layers)
                .filter(|((j, _), _)| j.stage != job.stage)
                .map(|(_, l)| l + 1)
                .max()
                .unwrap_or(0),
        };
        layers.push(layer);
    }
    layers
}

/// A job's status pill: an allowed failure is a warning, as GitLab shows it.
fn job_badge(j: &JobView) -> String {
    if j.status == Status::Failed && j.allow_failure {
        "<span class=\"s warning\" title=\"failed, allowed to fail\">failed (allowed)</span>"
            .to_owned()
    } else {
        badge(j.status.as_str())
    }
}

/// `/{project}/-/pipelines/{id}[?view=needs]`: the jobs in columns by stage (or by
/// `needs` depth) with the `needs` edges drawn by `pipeline.js`, earlier attempts of
/// retried jobs, downstream pipelines as cards, and for a child pipeline the way back to
/// its parent and trigger job. Cost: three queries (jobs, their specs' `needs`, the
/// pipeline) plus one per downstream pipeline and one for a parent; O(jobs²) name
/// look-ups in memory, fine for the hundreds of jobs a pipeline holds.
pub(super) async fn pipeline(
    state: &AppState,
    path: &str,
    id: i64,
    query: &str,
) -> Result<Response, ApiError> {
    let Some((project, p)) = pipeline_of(state, path, id).await? else {
        return Ok(not_found());
    };
    let grouping = if query.split('&').any(|kv| kv == "view=needs") {
        Grouping::Needs
    } else {
        Grouping::Stage
    };
    let jobs = state.coordinator.pipeline_jobs(id).await?;
    let needs = state.coordinator.pipeline_needs(id).await?;
    let base = format!("/{}/-", project.path_with_namespace);
    let current: Vec<(&JobView, Option<&Vec<String>>)> = jobs
        .iter()
        .filter(|j| !j.retried)
        .map(|j| {
            let n = needs
                .iter()
                .find(|(id, _)| *id == j.id)
                .and_then(|(_, n)| n.as_ref());
            (j, n)
        })
        .collect();
    let layers = needs_layers(&current);
    let mut columns: Vec<(String, String)> = Vec::new();
    let mut cards = String::new();
    for (i, (j, job_needs)) in current.iter().enumerate() {
        let earlier: Vec<String> = jobs
            .iter()
            .filter(|r| r.retried && r.name == j.name)
            .map(|r| {
                format!(
                    "<a href=\"{}/jobs/{}\">#{}</a> {}",
                    escape(&base),
                    r.id,
                    r.id,
                    badge(r.status.as_str())
                )
            })
            .collect();
        let retried = if earlier.is_empty() {
            String::new()
        } else {
            format!(
                "<details class=\"retried\"><summary>{} earlier {}</summary>{}</details>",
                earlier.len(),
                if earlier.len() == 1 {
                    "attempt"
                } else {
                    "attempts"
                },
                earlier.join("<br>")
            )
        };
        let needs_attr = job_needs
            .map(|n| serde_json::to_string(n).unwrap_or_default())
            .unwrap_or_default();
        let cell = format!(
            "<div class=\"job\" data-name=\"{}\" data-needs=\"{}\">{} <a href=\"{}/jobs/{}\">{}</a> {}{}{retried}</div>",
            escape(&j.name),
            escape(&needs_attr),
            job_badge(j),
            escape(&base),
            j.id,
            escape(&j.name),
            seconds(j.duration),
            why_waiting(j),
        );
        let column = match grouping {
            Grouping::Stage => j.stage.clone(),
            Grouping::Needs => format!("{}", layers[i] + 1),
        };
        match columns.iter_mut().find(|(c, _)| *c == column) {
            Some((_, cells)) => cells.push_str(&cell),
            None => columns.push((column, cell)),
        }
        if let Some(d) = &j.downstream_pipeline {
            let href = match state.coordinator.pipeline(d.id).await {
                Ok(down) => down.web_url,
                Err(CoordinatorError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            let _ = write!(
                cards,
                "<a class=\"card\" href=\"{}\">{} <b>Pipeline #{}</b><br><small>triggered by {}</small></a>",
                escape(&href),
                badge(d.status.as_str()),
                d.id,
                escape(&j.name),
            );
        }
    }
    if grouping == Grouping::Needs {
        columns.sort_by_key(|(c, _)| c.parse::<usize>().unwrap_or(0));
    }
    let mut columns: String = columns
        .iter()
        .map(|(name, cells)| {
            let title = match grouping {
                Grouping::Stage => escape(name),
                Grouping::Needs => String::new(),
            };
            format!("<div class=\"stage\"><h3>{title}</h3>{cells}</div>")
        })
        .collect();
    if !cards.is_empty() {
        let _ = write!(
            columns,
            "<div class=\"stage downstream\"><h3>Downstream</h3>{cards}</div>"
        );
    }
    let upstream = match p.parent_job_id {
        Some(job_id) => match state.coordinator.job(job_id).await {
            Ok(trigger) => {
                let parent = state.coordinator.pipeline(trigger.pipeline_id).await?;
                format!(
                    "<p class=\"upstream\">Child of <a href=\"{}\">pipeline #{}</a>, triggered by <a href=\"{}\">{}</a></p>",
                    escape(&parent.web_url),
                    parent.id,
                    escape(&trigger.web_url),
                    escape(&trigger.name)
                )
            }
            Err(CoordinatorError::NotFound(_)) => String::new(),
            Err(e) => return Err(e.into()),
        },
        None => String::new(),
    };
    let errors: String = p
        .yaml_errors
        .iter()
        .map(|e| format!("<p class=\"error\">{}</p>", escape(e)))
        .collect();
    let mut actions = String::new();
    if active(p.status) {
        actions.push_str(&button(&format!("{base}/pipelines/{id}/cancel"), "Cancel"));
    }
    if matches!(p.status, Status::Failed | Status::Canceled) {
        actions.push_str(&button(
            &format!("{base}/pipelines/{id}/retry"),
            "Retry failed jobs",
        ));
    }
    let here = format!("{base}/pipelines/{id}");
    let tabs = super::pipeline_tabs::tabs(&base, id, super::pipeline_tabs::Tab::Pipeline);
    let switch = match grouping {
        Grouping::Stage => format!(
            "<b>stage</b> · <a href=\"{}?view=needs\">job dependencies</a>",
            escape(&here)
        ),
        Grouping::Needs => format!(
            "<a href=\"{}\">stage</a> · <b>job dependencies</b>",
            escape(&here)
        ),
    };
    let reports = super::reports::pipeline_reports(state, project.id, id).await;
    Ok(page(
        StatusCode::OK,
        &format!("Pipeline #{id}"),
        active(p.status),
        Some("/-/ui/pipeline.js"),
        &format!(
            "<p>{}</p>{upstream}<h1>Pipeline #{id} {}</h1><p>{} <code>{}</code> · {} · created {} UTC{}</p>{actions}{errors}{tabs}\
             <p class=\"switch\">Group jobs by: {switch} · <a href=\"{}/timeline\">timeline</a></p><div class=\"graph\"><div class=\"stages\">{columns}</div></div>{reports}",
            project_link(&project),
            badge(p.status.as_str()),
            escape(&p.ref_name),
            escape(&p.sha),
            escape(&p.source),
            when(Some(p.created_at)),
            p.duration
                .map(|d| format!(" · {}", seconds(Some(d as f64))))
                .unwrap_or_default(),
            escape(&here),
        ),
    ))
}

pub(super) async fn pipeline_action(
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

/// The statuses the pipelines page filters by: GitLab's, without the two a pipeline
/// shows only for a moment (`waiting_for_callback`, `canceling`).
fn filter_statuses() -> Vec<&'static str> {
    Status::ALL
        .iter()
        .filter(|s| !matches!(s, Status::WaitingForCallback | Status::Canceling))
        .map(|s| s.as_str())
        .collect()
}
