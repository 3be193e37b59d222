//! What `gantry run` prints: every job's log lines prefixed with its (coloured) name, a
//! live status view at the bottom of a terminal, and the summary table at the end.
//!
//! Log lines are the job logs as the runner sends them to the coordinator (masked),
//! with GitLab's section markers removed; without colour (`--no-color`, `NO_COLOR`, or
//! not a terminal) ANSI sequences are removed too. Without a terminal there is no live
//! view: job starts and ends are printed as prefixed lines instead.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Instant;

use gantry_protocol::trace::section;

/// One job as the display knows it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JobLine {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) stage: String,
    pub(crate) status: String,
    /// Seconds the job ran (so far).
    pub(crate) duration: Option<f64>,
}

const PALETTE: [&str; 6] = [
    "\x1b[36m", "\x1b[35m", "\x1b[34m", "\x1b[33m", "\x1b[32m", "\x1b[96m",
];
const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
/// Longest name padding; longer names are not padded further.
const MAX_PAD: usize = 30;

pub(crate) struct Display {
    color: bool,
    live: bool,
    pad: usize,
    /// Job id → (name, colour index).
    names: HashMap<i64, (String, usize)>,
    /// Unfinished last line of each job's log.
    partial: HashMap<i64, Vec<u8>>,
    /// Lines of the live view currently on screen.
    footer: usize,
    jobs: Vec<JobLine>,
    stages: Vec<String>,
    started: Instant,
    out: std::io::Stdout,
}

impl Display {
    pub(crate) fn new(color: bool, live: bool) -> Self {
        Display {
            color,
            live,
            pad: 0,
            names: HashMap::new(),
            partial: HashMap::new(),
            footer: 0,
            jobs: Vec::new(),
            stages: Vec::new(),
            started: Instant::now(),
            out: std::io::stdout(),
        }
    }

    /// The pipeline's stages (for the live view) and job names (for the padding).
    pub(crate) fn set_stages(&mut self, stages: Vec<String>) {
        self.stages = stages;
    }

    fn name_of(&mut self, job_id: i64, fallback: &str) -> (String, usize) {
        if let Some(n) = self.names.get(&job_id) {
            return n.clone();
        }
        let entry = (fallback.to_owned(), self.names.len() % PALETTE.len());
        self.names.insert(job_id, entry.clone());
        entry
    }

    /// Whether a job's name is registered.
    pub(crate) fn knows(&self, job_id: i64) -> bool {
        self.names.contains_key(&job_id)
    }

    /// Registers a job's name (before its log arrives).
    pub(crate) fn job_name(&mut self, job_id: i64, name: &str) {
        self.pad = self.pad.max(name.chars().count()).min(MAX_PAD);
        let _ = self.name_of(job_id, name);
    }

    fn prefix(&mut self, job_id: i64) -> String {
        let (name, colour) = self.name_of(job_id, &format!("job {job_id}"));
        let width = self.pad.max(name.chars().count().min(MAX_PAD));
        if self.color {
            format!("{}{name:<width$}{RESET} {DIM}|{RESET} ", PALETTE[colour])
        } else {
            format!("{name:<width$} | ")
        }
    }

    /// Log bytes of a job; whole lines are printed.
    pub(crate) fn log(&mut self, job_id: i64, bytes: &[u8]) {
        let mut partial = self.partial.remove(&job_id).unwrap_or_default();
        partial.extend_from_slice(bytes);
        let mut lines = Vec::new();
        while let Some(at) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=at).collect();
            lines.push(self.clean(&line[..line.len() - 1]));
        }
        if !partial.is_empty() {
            self.partial.insert(job_id, partial);
        }
        let lines: Vec<String> = lines.into_iter().flatten().collect();
        if !lines.is_empty() {
            let prefix = self.prefix(job_id);
            let text: String = lines.iter().fold(String::new(), |mut s, l| {
                let _ = writeln!(s, "{prefix}{l}");
                s
            });
            self.print(&text);
        }
    }

    /// The rest of a job's log (a last line without a line break).
    pub(crate) fn flush_job(&mut self, job_id: i64) {
        if let Some(rest) = self.partial.remove(&job_id) {
            if let Some(line) = self.clean(&rest) {
                let prefix = self.prefix(job_id);
                self.print(&format!("{prefix}{line}\n"));
            }
        }
    }

    /// A line about a job from gantry itself (started, finished, played).
    pub(crate) fn note(&mut self, job_id: i64, text: &str) {
        let prefix = self.prefix(job_id);
        let text = if self.color {
            format!("{prefix}{BOLD}{text}{RESET}\n")
        } else {
            format!("{prefix}{text}\n")
        };
        self.print(&text);
    }

    /// A line not about one job.
    pub(crate) fn message(&mut self, text: &str) {
        self.print(&format!("{text}\n"));
    }

    /// One display line out of raw log bytes: section markers removed, the last
    /// carriage-return segment kept, ANSI removed without colour. `None` for a line that
    /// held only markers.
    fn clean(&self, raw: &[u8]) -> Option<String> {
        let text = String::from_utf8_lossy(raw);
        let mut text: &str = &text;
        let owned;
        if text.contains("section_") {
            owned = section::strip_section_markers(text);
            if owned.trim().is_empty() && !text.trim().is_empty() {
                return None;
            }
            text = &owned;
        }
        let text = text.rsplit('\r').find(|s| !s.is_empty()).unwrap_or("");
        let text = if self.color {
            text.to_owned()
        } else {
            section::strip_ansi(text)
        };
        Some(text.trim_end().to_owned())
    }

    /// The live view: per stage, each job with its state and time.
    pub(crate) fn update_jobs(&mut self, jobs: Vec<JobLine>) {
        if jobs == self.jobs && !self.live {
            return;
        }
        self.jobs = jobs;
        if self.live {
            self.print("");
        }
    }

    fn footer_text(&self) -> String {
        let mut out = String::new();
        for stage in &self.stages {
            let jobs: Vec<&JobLine> = self.jobs.iter().filter(|j| &j.stage == stage).collect();
            if jobs.is_empty() {
                continue;
            }
            let _ = write!(out, "{BOLD}{stage:>10}{RESET} ");
            for job in jobs {
                let (symbol, colour) = status_symbol(&job.status);
                let time = job
                    .duration
                    .map(|d| format!(" {d:.1}s"))
                    .unwrap_or_default();
                let _ = write!(
                    out,
                    " {colour}{symbol} {}{RESET}{DIM}{time}{RESET}",
                    job.name
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "{DIM}{:>10}  {:.1}s{RESET}",
            "elapsed",
            self.started.elapsed().as_secs_f64()
        );
        out
    }

    /// Prints `text` above the live view (which is redrawn).
    fn print(&mut self, text: &str) {
        let mut buf = String::new();
        if self.live && self.footer > 0 {
            let _ = write!(buf, "\x1b[{}F\x1b[0J", self.footer);
        }
        buf.push_str(text);
        if self.live {
            let footer = self.footer_text();
            self.footer = footer.lines().count();
            buf.push_str(&footer);
        }
        let mut out = self.out.lock();
        let _ = out.write_all(buf.as_bytes());
        let _ = out.flush();
    }

    /// Removes the live view before the summary.
    pub(crate) fn finish(&mut self) {
        if self.live && self.footer > 0 {
            let mut out = self.out.lock();
            let _ = write!(out, "\x1b[{}F\x1b[0J", self.footer);
            let _ = out.flush();
        }
        self.live = false;
        self.footer = 0;
    }

    pub(crate) fn color(&self) -> bool {
        self.color
    }
}

fn status_symbol(status: &str) -> (&'static str, &'static str) {
    match status {
        "success" => ("✔", "\x1b[32m"),
        "failed" => ("✘", "\x1b[31m"),
        "running" => ("●", "\x1b[36m"),
        "pending" | "preparing" | "waiting_for_resource" => ("○", "\x1b[33m"),
        "canceled" | "canceling" => ("⊘", "\x1b[90m"),
        "skipped" => ("»", "\x1b[90m"),
        "manual" => ("▶", "\x1b[90m"),
        "scheduled" => ("◷", "\x1b[33m"),
        _ => ("·", "\x1b[90m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cleaned_without_colour() {
        let d = Display::new(false, false);
        assert_eq!(d.clean(b"section_end:1:x\r\x1b[0K"), None);
        assert_eq!(
            d.clean(b"progress 10%\rprogress 100%").as_deref(),
            Some("progress 100%")
        );
        assert_eq!(d.clean(b"\x1b[32mok\x1b[0m  ").as_deref(), Some("ok"));
        assert_eq!(d.clean(b"").as_deref(), Some(""));
    }
}
