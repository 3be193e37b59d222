//! What `gantry run` prints: every job's log lines prefixed with its (coloured) name, a
//! live status view at the bottom of a terminal, and the summary table at the end.
//!
//! Log lines are the job logs as the runner sends them to the coordinator (masked),
//! with GitLab's section markers removed; without colour (`--no-color`, `NO_COLOR`, or
//! not a terminal) ANSI sequences are removed too. Without a terminal there is no live
//! view: job starts and ends are printed as prefixed lines instead.
//!
//! Output is gathered and written by [`Display::flush`] once the events at hand are
//! handled (or [`FLUSH_AT`] bytes wait): a job printing fast costs one write, and one
//! redraw of the live view, per batch instead of per line.

use gantry_server::Status;
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
    pub(crate) status: Status,
    /// Seconds the job ran (so far).
    pub(crate) duration: Option<f64>,
    /// Why it waits, when that is worth a line of the live view (the coordinator's
    /// pending reason).
    pub(crate) waiting: Option<String>,
}

const PALETTE: [&str; 6] = [
    "\x1b[36m", "\x1b[35m", "\x1b[34m", "\x1b[33m", "\x1b[32m", "\x1b[96m",
];
const RESET: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
/// Longest name padding; longer names are not padded further.
const MAX_PAD: usize = 30;
/// Output waiting past this many bytes is written at once.
const FLUSH_AT: usize = 64 * 1024;

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
    out: Box<dyn std::io::Write + Send>,
    /// Text printed since the last [`Display::flush`].
    pending: String,
    /// The live view changed since it was drawn.
    redraw: bool,
}

impl Display {
    pub(crate) fn new(color: bool, live: bool) -> Self {
        Self::to(color, live, Box::new(std::io::stdout()))
    }

    /// A display writing to `out`.
    fn to(color: bool, live: bool, out: Box<dyn std::io::Write + Send>) -> Self {
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
            out,
            pending: String::new(),
            redraw: false,
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
        self.redraw |= self.live;
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
                let (symbol, colour) = status_symbol(job.status);
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
        // Why jobs wait, a line per reason: the jobs it holds back, the first few named.
        let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
        for job in &self.jobs {
            let Some(why) = job.waiting.as_deref() else {
                continue;
            };
            match reasons.iter_mut().find(|(w, _)| *w == why) {
                Some((_, names)) => names.push(&job.name),
                None => reasons.push((why, vec![&job.name])),
            }
        }
        for (why, names) in reasons {
            let shown = names.iter().take(3).copied().collect::<Vec<_>>().join(", ");
            let more = match names.len() {
                n if n > 3 => format!(" and {} more", n - 3),
                _ => String::new(),
            };
            let verb = if names.len() == 1 { "waits" } else { "wait" };
            let _ = writeln!(out, "{:>10}  {DIM}{shown}{more} {verb}: {why}{RESET}", "");
        }
        let _ = writeln!(
            out,
            "{DIM}{:>10}  {:.1}s{RESET}",
            "elapsed",
            self.started.elapsed().as_secs_f64()
        );
        out
    }

    /// Prints `text` above the live view, at the next [`Display::flush`].
    fn print(&mut self, text: &str) {
        self.pending.push_str(text);
        self.redraw |= self.live;
        if self.pending.len() >= FLUSH_AT {
            self.flush();
        }
    }

    /// Writes what was printed since the last flush, above the live view (redrawn).
    pub(crate) fn flush(&mut self) {
        if !self.pending.is_empty() || self.redraw {
            self.write_out(self.live);
        }
    }

    /// Writes what is left and removes the live view (before the summary).
    pub(crate) fn finish(&mut self) {
        self.write_out(false);
        self.live = false;
    }

    /// Erases the live view on screen, writes the pending text, and draws the view
    /// again when `view`.
    fn write_out(&mut self, view: bool) {
        let mut buf = String::new();
        if self.live && self.footer > 0 {
            let _ = write!(buf, "\x1b[{}F\x1b[0J", self.footer);
        }
        buf.push_str(&self.pending);
        self.pending.clear();
        self.footer = 0;
        if view {
            let footer = self.footer_text();
            self.footer = footer.lines().count();
            buf.push_str(&footer);
        }
        self.redraw = false;
        if !buf.is_empty() {
            let _ = self.out.write_all(buf.as_bytes());
            let _ = self.out.flush();
        }
    }

    pub(crate) fn color(&self) -> bool {
        self.color
    }
}

impl Drop for Display {
    /// A run that stops early (an error) still shows what it printed.
    fn drop(&mut self) {
        self.finish();
    }
}

fn status_symbol(status: Status) -> (&'static str, &'static str) {
    match status {
        Status::Success => ("✔", "\x1b[32m"),
        Status::Failed => ("✘", "\x1b[31m"),
        Status::Running => ("●", "\x1b[36m"),
        Status::Pending | Status::Preparing | Status::WaitingForResource => ("○", "\x1b[33m"),
        Status::Canceled | Status::Canceling => ("⊘", "\x1b[90m"),
        Status::Skipped => ("»", "\x1b[90m"),
        Status::Manual => ("▶", "\x1b[90m"),
        Status::Scheduled => ("◷", "\x1b[33m"),
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

    /// Every write the display makes, kept apart.
    #[derive(Clone, Default)]
    struct Writes(std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

    impl std::io::Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Writes {
        fn texts(&self) -> Vec<String> {
            let writes = self.0.lock().unwrap();
            writes
                .iter()
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect()
        }
    }

    fn job(id: i64, name: &str, status: &str) -> JobLine {
        JobLine {
            id,
            name: name.to_owned(),
            stage: "test".to_owned(),
            status: Status::parse(status).expect("a status name"),
            duration: None,
            waiting: None,
        }
    }

    #[test]
    fn a_batch_of_log_lines_is_one_write_and_one_redraw_of_the_live_view() {
        let writes = Writes::default();
        let mut d = Display::to(false, true, Box::new(writes.clone()));
        d.set_stages(vec!["test".to_owned()]);
        d.job_name(1, "fast");
        d.update_jobs(vec![job(1, "fast", "running")]);
        d.flush();
        assert_eq!(writes.texts().len(), 1, "the first view");
        for i in 0..500 {
            d.log(1, format!("line {i}\n").as_bytes());
        }
        d.update_jobs(vec![job(1, "fast", "success")]);
        assert_eq!(writes.texts().len(), 1, "nothing written before the flush");
        d.flush();
        let texts = writes.texts();
        assert_eq!(texts.len(), 2, "{texts:?}");
        let batch = &texts[1];
        // The view on screen is erased once, the lines follow in order, the view once.
        assert!(batch.starts_with("\x1b[2F\x1b[0J"), "{batch:?}");
        assert_eq!(batch.matches("\x1b[0J").count(), 1);
        assert_eq!(batch.matches("fast | line ").count(), 500);
        assert!(batch.find("fast | line 0\n") < batch.find("fast | line 499\n"));
        assert!(
            batch.contains("✔ fast") && batch.ends_with("s\x1b[0m\n"),
            "{batch:?}"
        );
        // Nothing new: nothing written.
        d.flush();
        assert_eq!(writes.texts().len(), 2);
    }

    #[test]
    fn the_live_view_says_once_per_reason_which_jobs_wait_for_it() {
        let mut d = Display::to(false, true, Box::new(Writes::default()));
        d.set_stages(vec!["test".to_owned()]);
        let busy = "all busy";
        let waiting = |id, name: &str, why: &str| JobLine {
            waiting: Some(why.to_owned()),
            ..job(id, name, "pending")
        };
        d.update_jobs(vec![
            job(1, "run", "running"),
            waiting(2, "a", busy),
            waiting(3, "deploy", "This job is waiting for resource: production"),
            waiting(4, "b", busy),
            waiting(5, "c", busy),
            waiting(6, "d", busy),
        ]);
        let view = d.footer_text().replace(DIM, "").replace(RESET, "");
        let lines: Vec<&str> = view.lines().skip(1).map(str::trim).collect();
        assert_eq!(
            lines[..2],
            [
                "a, b, c and 1 more wait: all busy",
                "deploy waits: This job is waiting for resource: production"
            ],
            "{view}"
        );
    }

    #[test]
    fn output_past_the_flush_size_is_written_without_waiting() {
        let writes = Writes::default();
        let mut d = Display::to(false, false, Box::new(writes.clone()));
        d.job_name(1, "loud");
        let line = format!("{}\n", "x".repeat(1000));
        for _ in 0..(FLUSH_AT / 1000 + 1) {
            d.log(1, line.as_bytes());
        }
        assert_eq!(writes.texts().len(), 1);
        assert!(writes.texts()[0].len() >= FLUSH_AT);
    }

    #[test]
    fn what_was_printed_is_written_when_the_display_goes() {
        let writes = Writes::default();
        {
            let mut d = Display::to(false, false, Box::new(writes.clone()));
            d.message("project variables from .gantry/variables.yml");
        }
        assert_eq!(
            writes.texts(),
            vec!["project variables from .gantry/variables.yml\n".to_owned()]
        );
    }
}
