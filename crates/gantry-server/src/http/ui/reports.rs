//! The pipeline page's code reports block: the coverage report's totals and the code
//! quality summary with its degradations (at most [`MAX_SHOWN`]), each linking to its JSON
//! (`http/reports.rs`). Empty when the pipeline has neither report; the reports are read
//! only when a job of the pipeline uploaded one (one artifacts query otherwise).

use std::fmt::Write as _;

use super::super::AppState;
use super::shell::escape;

/// Degradations listed on the page.
const MAX_SHOWN: usize = 20;

/// The block for pipeline `pipeline_id` of project `project_id`, or `""`.
pub(super) async fn pipeline_reports(
    state: &AppState,
    project_id: i64,
    pipeline_id: i64,
) -> String {
    let c = &state.coordinator;
    let Ok(types) = c.pipeline_artifact_types(pipeline_id).await else {
        return String::new();
    };
    let api = format!("/api/v4/projects/{project_id}/pipelines/{pipeline_id}");
    let mut out = String::new();
    if types.iter().any(|t| t == "cobertura" || t == "jacoco") {
        if let Ok(r) = c.coverage_report(pipeline_id).await {
            let percent = r
                .summary
                .percent
                .map_or_else(|| "no lines".to_owned(), |p| format!("{p:.2}%"));
            let _ = write!(
                out,
                "<p>Coverage report: <b>{percent}</b> ({} of {} lines in {} files) · <a href=\"{api}/coverage_report\">JSON</a></p>",
                r.summary.covered_lines, r.summary.lines, r.summary.files
            );
        }
    }
    if types.iter().any(|t| t == "codequality") {
        if let Ok(r) = c.codequality_report(pipeline_id).await {
            let _ = write!(
                out,
                "<p>Code quality: <b>{} degradations</b> · <a href=\"{api}/codequality_report\">JSON</a></p>",
                r.summary.count
            );
            if !r.degradations.is_empty() {
                out.push_str("<table><tr><th>Severity</th><th>Where</th><th>Description</th></tr>");
                for d in r.degradations.iter().take(MAX_SHOWN) {
                    let place = match (&d.path, d.line) {
                        (Some(p), Some(l)) => format!("{p}:{l}"),
                        (Some(p), None) => p.clone(),
                        _ => String::new(),
                    };
                    let _ = write!(
                        out,
                        "<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
                        escape(&d.severity),
                        escape(&place),
                        escape(&d.description)
                    );
                }
                out.push_str("</table>");
            }
        }
    }
    out
}
