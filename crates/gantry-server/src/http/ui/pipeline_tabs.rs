//! A pipeline's tabs beside its graph (`pipelines.rs`), at GitLab's addresses:
//! `/{project}/-/pipelines/{id}/builds` (its jobs as a list: status, name, stage, runner,
//! durations, failure reason), `…/test_report` (the coordinator's test report from the
//! jobs' JUnit reports, `coordinator/test_reports.rs`: the counts, each suite, the
//! failed and errored cases first with their output) and `…/variables` (those it was
//! created with; masked values hidden, `Coordinator::pipeline_variables_shown`).
//!
//! Limits: the test report tab lists at most [`MAX_CASES`] cases per suite (failed and
//! errored ones first) and shows each case's output as the coordinator keeps it (cut
//! at 64 KiB), so a page stays small for a suite of thousands. Cost: one pipeline, its
//! jobs or its report (the JUnit reports parsed, O(cases)) or its variables.

use crate::processor::Status;
use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use crate::coordinator::test_reports::{TestCase, TestSuite};
use crate::coordinator::{CoordinatorError, PipelineView, Project};

use super::super::AppState;
use super::super::error::ApiError;
use super::job_details::failure_text;
use super::shell::{active, badge, escape, html, not_found, project_at, project_link, seconds};

/// The cases of one suite the test report tab lists.
pub(super) const MAX_CASES: usize = 500;

/// Which tab a page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tab {
    Pipeline,
    Jobs,
    Tests,
    Variables,
}

impl Tab {
    /// The tab at the address's last part (`builds`, `test_report`, `variables`).
    pub(super) fn at(part: &str) -> Option<Tab> {
        match part {
            "builds" => Some(Tab::Jobs),
            "test_report" => Some(Tab::Tests),
            "variables" => Some(Tab::Variables),
            _ => None,
        }
    }
}

/// The tab bar of pipeline `id` of the project at `base` (`/{project}/-`), `current`
/// in bold.
pub(super) fn tabs(base: &str, id: i64, current: Tab) -> String {
    let here = format!("{base}/pipelines/{id}");
    let mut out = String::from("<nav class=\"tabs\">");
    for (tab, path, label) in [
        (Tab::Pipeline, "", "Pipeline"),
        (Tab::Jobs, "/builds", "Jobs"),
        (Tab::Tests, "/test_report", "Tests"),
        (Tab::Variables, "/variables", "Variables"),
    ] {
        if tab == current {
            let _ = write!(out, "<b>{label}</b>");
        } else {
            let _ = write!(out, "<a href=\"{}{path}\">{label}</a>", escape(&here));
        }
    }
    out.push_str("</nav>");
    out
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

/// The page of tab `tab` of pipeline `id`.
pub(super) async fn tab(
    state: &AppState,
    path: &str,
    id: i64,
    tab: Tab,
) -> Result<Response, ApiError> {
    let Some((project, p)) = pipeline_of(state, path, id).await? else {
        return Ok(not_found());
    };
    let base = format!("/{}/-", project.path_with_namespace);
    let (title, body, refresh) = match tab {
        Tab::Jobs => ("Jobs", jobs(state, &base, id).await?, active(p.status)),
        Tab::Tests => ("Tests", tests(state, id).await?, false),
        Tab::Variables | Tab::Pipeline => ("Variables", variables(state, id).await?, false),
    };
    Ok(html(
        StatusCode::OK,
        &format!("{title} · pipeline #{id}"),
        refresh,
        &format!(
            "<p>{}</p><h1>Pipeline #{id} {}</h1>{}{body}",
            project_link(&project),
            badge(p.status.as_str()),
            tabs(&base, id, tab)
        ),
    ))
}

async fn jobs(state: &AppState, base: &str, id: i64) -> Result<String, ApiError> {
    let mut rows = String::new();
    for j in state.coordinator.pipeline_jobs(id).await? {
        let reason = j
            .failure_reason
            .as_deref()
            .filter(|_| j.status == Status::Failed)
            .map(|r| escape(failure_text(r).unwrap_or(r)))
            .unwrap_or_default();
        let _ = write!(
            rows,
            "<tr><td>{}</td><td><a href=\"{}/jobs/{}\">{}</a>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{reason}</td></tr>",
            badge(j.status.as_str()),
            escape(base),
            j.id,
            escape(&j.name),
            if j.retried {
                " <small>(retried)</small>"
            } else {
                ""
            },
            escape(&j.stage),
            j.runner_id.map(|r| format!("#{r}")).unwrap_or_default(),
            seconds(j.queued_duration),
            seconds(j.duration),
        );
    }
    Ok(format!(
        "<table class=\"jobs\"><tr><th>Status</th><th>Job</th><th>Stage</th><th>Runner</th><th>Queued</th><th>Duration</th><th>Failure</th></tr>{rows}</table>"
    ))
}

/// One case as a row, with its output under it when it has any.
fn case_row(c: &TestCase) -> String {
    let output = c
        .system_output
        .as_deref()
        .filter(|o| !o.is_empty())
        .map(|o| {
            format!(
                "<tr class=\"output\"><td colspan=\"4\"><details{}><summary>output</summary><pre>{}</pre></details></td></tr>",
                if matches!(c.status.as_str(), "failed" | "error") {
                    " open"
                } else {
                    ""
                },
                escape(o)
            )
        })
        .unwrap_or_default();
    format!(
        "<tr class=\"case {}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>{output}",
        escape(c.status.as_str()),
        badge(c.status.as_str()),
        escape(&c.name),
        escape(&c.classname),
        seconds_exact(c.execution_time),
    )
}

/// Seconds with milliseconds (test cases are quick).
fn seconds_exact(s: f64) -> String {
    format!("{s:.3}s")
}

/// A suite: its counts, then its failed and errored cases, then the others.
fn suite_html(s: &TestSuite) -> String {
    let c = &s.counts;
    let error = s
        .suite_error
        .as_deref()
        .map(|e| format!("<p class=\"error\">{}</p>", escape(e)))
        .unwrap_or_default();
    let mut cases: Vec<&TestCase> = s.test_cases.iter().collect();
    cases.sort_by_key(|c| match c.status.as_str() {
        "failed" => 0,
        "error" => 1,
        "success" => 3,
        _ => 2,
    });
    let rows: String = cases.iter().take(MAX_CASES).map(|c| case_row(c)).collect();
    let cut = if cases.len() > MAX_CASES {
        format!(
            "<p class=\"why\">{} more cases are not listed; the API's <code>test_report</code> has them all.</p>",
            cases.len() - MAX_CASES
        )
    } else {
        String::new()
    };
    format!(
        "<section class=\"suite\" data-suite=\"{}\"><h2>{}</h2><p>{} tests · {} failed · {} errors · {} skipped · {} passed · {}</p>{error}\
         <table class=\"cases\"><tr><th>Status</th><th>Name</th><th>Class</th><th>Time</th></tr>{rows}</table>{cut}</section>",
        escape(&s.name),
        escape(&s.name),
        c.total_count,
        c.failed_count,
        c.error_count,
        c.skipped_count,
        c.success_count,
        seconds_exact(c.total_time),
    )
}

async fn tests(state: &AppState, id: i64) -> Result<String, ApiError> {
    let report = state.coordinator.test_report(id).await?;
    if report.test_suites.is_empty() {
        return Ok(
            "<p>No test report: a job with <code>artifacts:reports:junit</code> makes one.</p>"
                .to_owned(),
        );
    }
    let c = &report.counts;
    let suites: String = report.test_suites.iter().map(suite_html).collect();
    Ok(format!(
        "<p class=\"summary\">{} tests · {} failed · {} errors · {} skipped · {} passed · {}</p>{suites}",
        c.total_count,
        c.failed_count,
        c.error_count,
        c.skipped_count,
        c.success_count,
        seconds_exact(c.total_time),
    ))
}

async fn variables(state: &AppState, id: i64) -> Result<String, ApiError> {
    let vars = state.coordinator.pipeline_variables_shown(id).await?;
    if vars.is_empty() {
        return Ok("<p>This pipeline was created without variables.</p>".to_owned());
    }
    let rows: String = vars
        .iter()
        .map(|v| {
            let value = v.value.as_deref().map_or_else(
                || "<i class=\"masked\">masked</i>".to_owned(),
                |value| format!("<code>{}</code>", escape(value)),
            );
            format!(
                "<tr><td><code>{}</code></td><td>{value}</td></tr>",
                escape(&v.key)
            )
        })
        .collect();
    Ok(format!(
        "<table class=\"variables\"><tr><th>Key</th><th>Value</th></tr>{rows}</table>"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_case_comes_first_with_its_output_open_and_escaped() {
        let case = |status: &str, name: &str, out: Option<&str>| TestCase {
            status: status.to_owned(),
            name: name.to_owned(),
            classname: "pkg.T".to_owned(),
            file: None,
            execution_time: 0.25,
            system_output: out.map(str::to_owned),
            stack_trace: None,
        };
        let mut report = crate::coordinator::test_reports::TestReport::default();
        report.suite("unit").test_cases = vec![
            case("success", "adds", None),
            case("failed", "divides <by zero>", Some("expected 1, got \"2\"")),
        ];
        report.finish();
        insta::assert_snapshot!(suite_html(&report.test_suites[0]), @r#"<section class="suite" data-suite="unit"><h2>unit</h2><p>2 tests · 1 failed · 0 errors · 0 skipped · 1 passed · 0.500s</p><table class="cases"><tr><th>Status</th><th>Name</th><th>Class</th><th>Time</th></tr><tr class="case failed"><td><span class="s failed">failed</span></td><td>divides &lt;by zero&gt;</td><td>pkg.T</td><td>0.250s</td></tr><tr class="output"><td colspan="4"><details open><summary>output</summary><pre>expected 1, got &quot;2&quot;</pre></details></td></tr><tr class="case success"><td><span class="s success">success</span></td><td>adds</td><td>pkg.T</td><td>0.250s</td></tr></table></section>"#);
    }

    #[test]
    fn tabs_link_all_but_the_current() {
        insta::assert_snapshot!(tabs("/g/p/-", 7, Tab::Tests), @r#"<nav class="tabs"><a href="/g/p/-/pipelines/7">Pipeline</a><a href="/g/p/-/pipelines/7/builds">Jobs</a><b>Tests</b><a href="/g/p/-/pipelines/7/variables">Variables</a></nav>"#);
    }
}
