//! `gantry run --timeline`: the run's timeline ([`Timeline`]) as text at the end — a row
//! per job over the run's time axis (`░` waiting for a runner, `█` running), a row per
//! section of its log beneath (`▒`), and the job's CPU time and peak memory beside it.
//! O(jobs × sections × width).

use std::fmt::Write as _;

use gantry_server::coordinator::{Timeline, human_bytes};

/// Columns of the time axis.
const WIDTH: usize = 48;

/// Which cells of `WIDTH` the interval `[from, to)` (Unix ms) covers, on an axis from
/// `start` spanning `span` ms (at least one cell for a non-empty interval).
fn cells(start: i64, span: i64, from: i64, to: i64) -> std::ops::Range<usize> {
    let cell = |at: i64| {
        let offset = (at - start).clamp(0, span) as f64;
        ((offset / span as f64) * WIDTH as f64).floor() as usize
    };
    let first = cell(from).min(WIDTH - 1);
    let last = cell(to).clamp(first + 1, WIDTH);
    first..last
}

fn seconds(ms: i64) -> String {
    format!("{:.1}s", ms.max(0) as f64 / 1000.0)
}

/// The text timeline (see the module docs).
pub(crate) fn render(timeline: &Timeline) -> String {
    let span = (timeline.end - timeline.start).max(1);
    let label_width = timeline
        .jobs
        .iter()
        .flat_map(|j| {
            std::iter::once(j.name.chars().count())
                .chain(j.sections.iter().map(|s| s.name.chars().count() + 2))
        })
        .max()
        .unwrap_or(3)
        .max(3);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "timeline: {} (a column ≈ {}; ░ waiting for a runner, █ running, ▒ a section)",
        seconds(span),
        seconds(span / WIDTH as i64),
    );
    for job in &timeline.jobs {
        let mut row = [' '; WIDTH];
        if let Some(queued) = job.queued_at {
            let until = job.started_at.or(job.finished_at).unwrap_or(timeline.end);
            if until > queued {
                for c in cells(timeline.start, span, queued, until) {
                    row[c] = '░';
                }
            }
        }
        if let Some(started) = job.started_at {
            let until = job.finished_at.unwrap_or(timeline.end);
            for c in cells(timeline.start, span, started, until) {
                row[c] = '█';
            }
        }
        let figures = job
            .resources
            .map(|u| {
                format!(
                    "  cpu {:.2}s, memory {}",
                    u.cpu_user_seconds + u.cpu_system_seconds,
                    human_bytes(u.peak_memory_bytes)
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<label_width$} |{}| {}{figures}",
            job.name,
            row.iter().collect::<String>(),
            job.status,
        );
        for section in &job.sections {
            let mut row = [' '; WIDTH];
            for c in cells(timeline.start, span, section.start, section.end) {
                row[c] = '▒';
            }
            let label = format!("  {}", section.name);
            let _ = writeln!(
                out,
                "{label:<label_width$} |{}| {}",
                row.iter().collect::<String>(),
                seconds(section.end - section.start),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use gantry_server::coordinator::{ResourcesView, TimelineJob, TimelineSection};

    use super::*;

    #[test]
    fn the_timeline_shows_waits_runs_sections_and_figures() {
        let t0 = 1_700_000_000_000;
        let section = |name: &str, from: i64, to: i64| TimelineSection {
            name: name.into(),
            start: t0 + from,
            end: t0 + to,
        };
        let timeline = Timeline {
            start: t0,
            end: t0 + 12_000,
            jobs: vec![
                TimelineJob {
                    id: 1,
                    name: "build".into(),
                    stage: "build".into(),
                    status: gantry_server::Status::Success,
                    queued_at: Some(t0),
                    started_at: Some(t0 + 500),
                    finished_at: Some(t0 + 6_000),
                    sections: vec![
                        section("prepare_executor", 1_000, 2_000),
                        section("step_script", 2_000, 6_000),
                    ],
                    resources: Some(ResourcesView {
                        cpu_user_seconds: 1.75,
                        cpu_system_seconds: 0.25,
                        peak_memory_bytes: 200 << 20,
                        read_bytes: 0,
                        written_bytes: 4096,
                        updated_at: t0 + 6_000,
                    }),
                },
                TimelineJob {
                    id: 2,
                    name: "test".into(),
                    stage: "test".into(),
                    status: gantry_server::Status::Failed,
                    queued_at: Some(t0 + 6_000),
                    started_at: Some(t0 + 9_000),
                    finished_at: Some(t0 + 12_000),
                    sections: vec![section("step_script", 9_000, 12_000)],
                    resources: None,
                },
                TimelineJob {
                    id: 3,
                    name: "deploy".into(),
                    stage: "deploy".into(),
                    status: gantry_server::Status::Skipped,
                    queued_at: None,
                    started_at: None,
                    finished_at: None,
                    sections: vec![],
                    resources: None,
                },
            ],
        };
        insta::assert_snapshot!(render(&timeline));
    }
}
