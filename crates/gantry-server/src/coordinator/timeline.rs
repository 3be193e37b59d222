//! A pipeline's timeline ([`Timeline`]): each job's wait for a runner, its run, the
//! sections of its log and its resource use, on the pipeline's time axis. What the web
//! UI's timeline view and `gantry run --timeline` draw; one model for both.
//!
//! Sections come from the `section_start`/`section_end` markers of each job's log
//! (Unix seconds, as GitLab's runner writes them); a section still open ends at the
//! job's end (or now). Cost: one read of each job's log per timeline, O(log bytes) —
//! it is built on request, never on the job path.

use gantry_protocol::trace::section::{SectionBoundary, parse_section_marker};
use serde::Serialize;

use super::Coordinator;
use super::error::CoordinatorError;
use super::time::now_ms;
use super::views::{JobView, ResourcesView};

/// A pipeline's jobs on its time axis (Unix ms).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timeline {
    /// The axis's start: the pipeline's creation.
    pub start: i64,
    /// The axis's end: the last job's end, or now while jobs run.
    pub end: i64,
    /// The latest attempt of each job, in creation order.
    pub jobs: Vec<TimelineJob>,
}

/// One job on the [`Timeline`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimelineJob {
    pub id: i64,
    pub name: String,
    pub stage: String,
    pub status: crate::processor::Status,
    /// Waiting for a runner from (`queued_at`), Unix ms.
    pub queued_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// Its log's sections, in order.
    pub sections: Vec<TimelineSection>,
    pub resources: Option<ResourcesView>,
}

/// A section of a job's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TimelineSection {
    pub name: String,
    /// Unix ms (the markers have second precision).
    pub start: i64,
    pub end: i64,
}

/// The sections of `log`, a section still open ending at `open_end` (Unix ms).
pub fn sections_of(log: &[u8], open_end: i64) -> Vec<TimelineSection> {
    let text = String::from_utf8_lossy(log);
    let mut sections: Vec<TimelineSection> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for line in text.split('\n') {
        // A marker may follow a timestamp prefix or other text on the line.
        let mut rest = line;
        while let Some(at) = rest.find("section_") {
            rest = &rest[at..];
            let Some((marker, after)) = parse_section_marker(rest) else {
                rest = &rest["section_".len()..];
                continue;
            };
            let at_ms = i64::try_from(marker.timestamp)
                .unwrap_or(i64::MAX / 1000)
                .saturating_mul(1000);
            match marker.boundary {
                SectionBoundary::Start => {
                    open.push(sections.len());
                    sections.push(TimelineSection {
                        name: marker.name,
                        start: at_ms,
                        end: open_end.max(at_ms),
                    });
                }
                SectionBoundary::End => {
                    if let Some(pos) = open.iter().rposition(|&i| sections[i].name == marker.name) {
                        let index = open.remove(pos);
                        sections[index].end = at_ms.max(sections[index].start);
                    }
                }
            }
            rest = after;
        }
    }
    sections
}

/// The timeline of `jobs` (a pipeline's, every attempt) created at `start`, with the
/// logs of the jobs that started (`(job id, log)`).
pub fn timeline_of(start: i64, jobs: &[JobView], now: i64, logs: &[(i64, Vec<u8>)]) -> Timeline {
    let mut out = Vec::new();
    let mut end = start;
    for job in jobs.iter().filter(|j| !j.retried && !j.bridge) {
        let job_end = job.finished_at.or(job.started_at.map(|_| now));
        end = end
            .max(job_end.unwrap_or(start))
            .max(job.started_at.unwrap_or(start));
        let log = logs
            .iter()
            .find(|(id, _)| *id == job.id)
            .map(|(_, log)| log.as_slice())
            .unwrap_or_default();
        out.push(TimelineJob {
            id: job.id,
            name: job.name.clone(),
            stage: job.stage.clone(),
            status: job.status,
            queued_at: job.queued_at,
            started_at: job.started_at,
            finished_at: job.finished_at,
            sections: sections_of(log, job_end.unwrap_or(now)),
            resources: job.resources,
        });
    }
    Timeline {
        start,
        end,
        jobs: out,
    }
}

/// A byte count in binary units (`512 B`, `3.4 MiB`, `1.2 GiB`), as the UI and
/// `gantry run` show memory.
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

impl Coordinator {
    /// Pipeline `pipeline_id`'s [`Timeline`] (see the module docs).
    pub async fn pipeline_timeline(&self, pipeline_id: i64) -> Result<Timeline, CoordinatorError> {
        let pipeline = self.inner.store.pipeline(pipeline_id).await?;
        let jobs = self.pipeline_jobs(pipeline_id).await?;
        let mut logs = Vec::new();
        for job in jobs.iter().filter(|j| !j.retried && j.started_at.is_some()) {
            logs.push((
                job.id,
                self.traces().trace(job.id).await.unwrap_or_default(),
            ));
        }
        Ok(timeline_of(pipeline.created_at, &jobs, now_ms(), &logs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_pair_their_markers_and_an_open_one_ends_with_the_job() {
        let log = b"\x1b[0Ksection_start:100:prepare_executor\r\x1b[0Kheader\nline\n\
                    section_end:102:prepare_executor\r\x1b[0K\n\
                    section_start:102:step_script[collapsed=true]\r\x1b[0K\n";
        let sections = sections_of(log, 110_000);
        assert_eq!(
            sections,
            vec![
                TimelineSection {
                    name: "prepare_executor".into(),
                    start: 100_000,
                    end: 102_000
                },
                TimelineSection {
                    name: "step_script".into(),
                    start: 102_000,
                    end: 110_000
                },
            ]
        );
    }
}
