//! `/{project}/-/pipelines/{id}/timeline`: the pipeline's timeline
//! ([`crate::coordinator::Timeline`]) — a row per job with its wait for a runner (grey)
//! and its run (coloured by status) over the pipeline's time axis, a thinner bar per
//! section of its log beneath, and its CPU time and peak memory beside it.
//!
//! Server-rendered SVG (one `<svg>` per row, a shared 0–1000 horizontal scale), no
//! script: colours are SVG presentation attributes, which the page's
//! `Content-Security-Policy` (`style-src 'self'`, no inline style) allows; hovering a bar
//! shows its `<title>`. The page reloads itself while the pipeline runs. Cost: the
//! timeline reads each started job's log once per request.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use crate::coordinator::{ResourcesView, Timeline, TimelineJob, human_bytes};
use crate::processor::Status;

use super::super::AppState;
use super::super::error::ApiError;
use super::pipelines::pipeline_of;
use super::shell::{active, badge, escape, not_found, page, project_link};

/// The width of the horizontal scale.
const SCALE: f64 = 1000.0;
const JOB_BAR: u32 = 14;
const SECTION_BAR: u32 = 8;
const GAP: u32 = 4;

/// The pipeline's timeline page.
pub(super) async fn timeline(state: &AppState, path: &str, id: i64) -> Result<Response, ApiError> {
    let Some((project, p)) = pipeline_of(state, path, id).await? else {
        return Ok(not_found());
    };
    let timeline = state.coordinator.pipeline_timeline(id).await?;
    let base = format!("/{}/-", project.path_with_namespace);
    let body = format!(
        "<p>{}</p><h1>Pipeline #{id} {}</h1><p class=\"switch\"><a href=\"{}\">jobs</a> · <b>timeline</b></p>{}",
        project_link(&project),
        badge(p.status.as_str()),
        escape(&format!("{base}/pipelines/{id}")),
        render(&timeline, &base),
    );
    Ok(page(
        StatusCode::OK,
        &format!("Pipeline #{id} timeline"),
        active(p.status),
        None,
        &body,
    ))
}

/// Seconds as the bars' titles show them.
fn secs(ms: i64) -> String {
    format!("{:.1}s", ms.max(0) as f64 / 1000.0)
}

/// The table of rows (see the module docs); `base` is the project's `/-` address.
pub(crate) fn render(timeline: &Timeline, base: &str) -> String {
    let span = (timeline.end - timeline.start).max(1) as f64;
    let x = |at: i64| ((at - timeline.start).max(0) as f64 / span * SCALE).min(SCALE);
    let mut rows = String::new();
    for job in &timeline.jobs {
        let height = JOB_BAR + GAP + job.sections.len() as u32 * (SECTION_BAR + GAP);
        let mut svg = String::new();
        bars(&mut svg, job, timeline.end, &x);
        for (i, section) in job.sections.iter().enumerate() {
            let y = JOB_BAR + GAP + i as u32 * (SECTION_BAR + GAP);
            let (from, to) = (x(section.start), x(section.end));
            let _ = write!(
                svg,
                "<rect class=\"section\" x=\"{from:.1}\" y=\"{y}\" width=\"{:.1}\" height=\"{SECTION_BAR}\" fill=\"#8fb3e0\"><title>{}: {}</title></rect>",
                (to - from).max(1.0),
                escape(&section.name),
                secs(section.end - section.start),
            );
        }
        let sections: String = job
            .sections
            .iter()
            .map(|s| format!("<br><small>{}</small>", escape(&s.name)))
            .collect();
        let _ = write!(
            rows,
            "<tr><td><a href=\"{}\">{}</a> {}{sections}</td>\
             <td class=\"bars\"><svg viewBox=\"0 0 {SCALE} {height}\" width=\"100%\" height=\"{height}\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"{}\">{svg}</svg></td>\
             <td>{}</td><td>{}</td></tr>",
            escape(&format!("{base}/jobs/{}", job.id)),
            escape(&job.name),
            badge(job.status.as_str()),
            escape(&job.name),
            cpu(job.resources.as_ref()),
            memory(job.resources.as_ref()),
        );
    }
    format!(
        "<p>{} → {} ({})</p><table class=\"timeline\"><thead><tr><th>job</th><th>waiting · running · sections</th><th>CPU</th><th>memory</th></tr></thead><tbody>{rows}</tbody></table>",
        super::shell::when(Some(timeline.start)),
        super::shell::when(Some(timeline.end)),
        secs(timeline.end - timeline.start),
    )
}

/// The job's wait (queued → started, or → now/its end when it never started) and run.
fn bars(svg: &mut String, job: &TimelineJob, end: i64, x: &impl Fn(i64) -> f64) {
    if let Some(queued) = job.queued_at {
        let until = job.started_at.or(job.finished_at).unwrap_or(end);
        let (from, to) = (x(queued), x(until));
        let _ = write!(
            svg,
            "<rect class=\"waiting\" x=\"{from:.1}\" y=\"0\" width=\"{:.1}\" height=\"{JOB_BAR}\" fill=\"#c8c8c8\"><title>waiting for a runner: {}</title></rect>",
            (to - from).max(1.0),
            secs(until - queued),
        );
    }
    if let Some(started) = job.started_at {
        let until = job.finished_at.unwrap_or(end);
        let (from, to) = (x(started), x(until));
        let fill = match job.status {
            Status::Success => "#2da160",
            Status::Failed => "#dd2b0e",
            Status::Running => "#1f75cb",
            _ => "#737278",
        };
        let _ = write!(
            svg,
            "<rect class=\"running\" x=\"{from:.1}\" y=\"0\" width=\"{:.1}\" height=\"{JOB_BAR}\" fill=\"{fill}\"><title>{}: {}</title></rect>",
            (to - from).max(1.0),
            escape(job.status.as_str()),
            secs(until - started),
        );
    }
}

/// The job page's line about the job's resource use (empty when not measured).
pub(super) fn resources_block(used: Option<&ResourcesView>) -> String {
    let Some(u) = used else {
        return String::new();
    };
    format!(
        "<p class=\"resources\">CPU {} · peak memory {} · read {} · written {} <small>(as of {} UTC)</small></p>",
        cpu(Some(u)),
        memory(Some(u)),
        human_bytes(u.read_bytes),
        human_bytes(u.written_bytes),
        super::shell::when(Some(u.updated_at)),
    )
}

fn cpu(used: Option<&ResourcesView>) -> String {
    used.map(|u| {
        format!(
            "{:.2}s <small>({:.2} user, {:.2} system)</small>",
            u.cpu_user_seconds + u.cpu_system_seconds,
            u.cpu_user_seconds,
            u.cpu_system_seconds
        )
    })
    .unwrap_or_else(|| "–".to_owned())
}

fn memory(used: Option<&ResourcesView>) -> String {
    used.map(|u| human_bytes(u.peak_memory_bytes))
        .unwrap_or_else(|| "–".to_owned())
}
