//! The end of a run: the summary table and the `--json-report` file.

use std::fmt::Write as _;

use gantry_server::Status;
use gantry_server::coordinator::coverage_reports::CoverageReport;
use gantry_server::coordinator::test_reports::TestReport;
use gantry_server::coordinator::{CodequalityReport, CodequalitySummary, Degradation};
use gantry_server::coordinator::{
    JobEnvironment, JobView, PendingReason, ResourcesView, human_bytes, iso8601,
};
use serde::Serialize;

/// Failed and errored test cases listed after the summary table.
const MAX_LISTED_FAILURES: usize = 20;

/// `--json-report`: a stable contract (snapshot-tested).
#[derive(Debug, Serialize)]
pub(crate) struct RunReport {
    /// `success`, `failed`, `canceled`, `skipped` or `manual`.
    pub(crate) status: Status,
    /// Every attempt of every job, in the order they were created.
    pub(crate) jobs: Vec<JobReport>,
    /// The unit test report (`artifacts:reports:junit`); only when a job uploaded one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tests: Option<TestsReport>,
    /// The coverage report (`artifacts:reports:coverage_report`): its totals; only when a
    /// job uploaded one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) coverage_report: Option<CoverageTotals>,
    /// The code quality report (`artifacts:reports:codequality`); only when a job
    /// uploaded one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) codequality: Option<CodequalityTotals>,
}

/// A coverage report's totals (lines measured in Cobertura/JaCoCo reports).
#[derive(Debug, Serialize)]
pub(crate) struct CoverageTotals {
    pub(crate) files: u64,
    pub(crate) lines: u64,
    pub(crate) covered_lines: u64,
    pub(crate) percent: Option<f64>,
    /// Reports that could not be read: `(job, error)`.
    pub(crate) errors: Vec<(String, String)>,
}

/// A code quality report: GitLab's summary and every degradation.
#[derive(Debug, Serialize)]
pub(crate) struct CodequalityTotals {
    pub(crate) summary: CodequalitySummary,
    pub(crate) degradations: Vec<Degradation>,
    pub(crate) errors: Vec<(String, String)>,
}

/// What the summary and the JSON report say of the code reports besides JUnit.
#[derive(Debug, Default)]
pub(crate) struct CodeReports {
    pub(crate) coverage: Option<CoverageReport>,
    pub(crate) codequality: Option<CodequalityReport>,
}

impl CodeReports {
    fn coverage_totals(&self) -> Option<CoverageTotals> {
        let c = self.coverage.as_ref().filter(|c| !c.jobs.is_empty())?;
        Some(CoverageTotals {
            files: c.summary.files,
            lines: c.summary.lines,
            covered_lines: c.summary.covered_lines,
            percent: c.summary.percent,
            errors: c
                .jobs
                .iter()
                .filter_map(|j| Some((j.name.clone(), j.error.clone()?)))
                .collect(),
        })
    }

    fn codequality_totals(&self) -> Option<CodequalityTotals> {
        let q = self.codequality.as_ref().filter(|q| !q.jobs.is_empty())?;
        Some(CodequalityTotals {
            summary: q.summary.clone(),
            degradations: q.degradations.clone(),
            errors: q
                .jobs
                .iter()
                .filter_map(|j| Some((j.name.clone(), j.error.clone()?)))
                .collect(),
        })
    }
}

/// The coverage and code quality lines after the summary; empty without reports.
pub(crate) fn code_reports_summary(reports: &CodeReports) -> String {
    let mut out = String::new();
    if let Some(c) = reports.coverage_totals() {
        let percent = c
            .percent
            .map_or_else(|| "no lines".to_owned(), |p| format!("{p:.2}%"));
        let _ = writeln!(
            out,
            "coverage report: {percent} ({} of {} lines in {} files)",
            c.covered_lines, c.lines, c.files
        );
        for (job, error) in &c.errors {
            let _ = writeln!(out, "  error  {job}: {error}");
        }
    }
    if let Some(q) = reports.codequality_totals() {
        let s = &q.summary;
        let parts: Vec<String> = [
            ("blocker", s.blocker),
            ("critical", s.critical),
            ("major", s.major),
            ("minor", s.minor),
            ("info", s.info),
            ("unknown", s.unknown),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
        let detail = if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        };
        let _ = writeln!(out, "code quality: {} degradations{detail}", s.count);
        for d in q.degradations.iter().take(MAX_LISTED_FAILURES) {
            let place = match (&d.path, d.line) {
                (Some(p), Some(l)) => format!("{p}:{l}"),
                (Some(p), None) => p.clone(),
                _ => String::new(),
            };
            let _ = writeln!(out, "  {:<8}  {place}  {}", d.severity, d.description);
        }
        if q.degradations.len() > MAX_LISTED_FAILURES {
            let _ = writeln!(
                out,
                "  … and {} more (all of them are in --json-report)",
                q.degradations.len() - MAX_LISTED_FAILURES
            );
        }
        for (job, error) in &q.errors {
            let _ = writeln!(out, "  error  {job}: {error}");
        }
    }
    out
}

/// The pipeline's test counts, and the cases that did not pass.
#[derive(Debug, Serialize)]
pub(crate) struct TestsReport {
    pub(crate) total: u64,
    pub(crate) success: u64,
    pub(crate) failed: u64,
    pub(crate) skipped: u64,
    pub(crate) error: u64,
    /// Seconds, the cases' own times summed.
    pub(crate) time: f64,
    /// Every `failed` or `error` case, suite by suite.
    pub(crate) failures: Vec<TestFailure>,
    /// Suites whose report could not be read, with why.
    pub(crate) suite_errors: Vec<SuiteError>,
}

#[derive(Debug, Serialize)]
pub(crate) struct TestFailure {
    pub(crate) suite: String,
    pub(crate) classname: String,
    pub(crate) name: String,
    pub(crate) status: String,
    pub(crate) file: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SuiteError {
    pub(crate) suite: String,
    pub(crate) error: String,
}

impl TestsReport {
    /// `None` when no job uploaded a report.
    pub(crate) fn new(report: &TestReport) -> Option<Self> {
        if report.test_suites.is_empty() {
            return None;
        }
        Some(TestsReport {
            total: report.counts.total_count,
            success: report.counts.success_count,
            failed: report.counts.failed_count,
            skipped: report.counts.skipped_count,
            error: report.counts.error_count,
            time: report.counts.total_time,
            failures: report
                .test_suites
                .iter()
                .flat_map(|s| {
                    s.test_cases
                        .iter()
                        .filter(|c| c.status == "failed" || c.status == "error")
                        .map(|c| TestFailure {
                            suite: s.name.clone(),
                            classname: c.classname.clone(),
                            name: c.name.clone(),
                            status: c.status.clone(),
                            file: c.file.clone(),
                        })
                })
                .collect(),
            suite_errors: report
                .test_suites
                .iter()
                .filter_map(|s| {
                    Some(SuiteError {
                        suite: s.name.clone(),
                        error: s.suite_error.clone()?,
                    })
                })
                .collect(),
        })
    }
}

/// The lines about the test report after the summary table: the counts, then the cases
/// that did not pass (the first [`MAX_LISTED_FAILURES`], with the first line of their
/// output) and the suites whose report could not be read. Empty without a report.
pub(crate) fn tests_summary(report: &TestReport, color: bool) -> String {
    if report.test_suites.is_empty() {
        return String::new();
    }
    let paint = |code: &str, text: &str| {
        if color {
            format!("{code}{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tests: {} total, {} passed, {} failed, {} errors, {} skipped ({:.2}s)",
        report.counts.total_count,
        report.counts.success_count,
        report.counts.failed_count,
        report.counts.error_count,
        report.counts.skipped_count,
        report.counts.total_time
    );
    let failures: Vec<_> = report
        .test_suites
        .iter()
        .flat_map(|s| {
            s.test_cases
                .iter()
                .filter(|c| c.status == "failed" || c.status == "error")
                .map(move |c| (s, c))
        })
        .collect();
    for (suite, case) in failures.iter().take(MAX_LISTED_FAILURES) {
        let first_line = case
            .system_output
            .as_deref()
            .and_then(|o| o.lines().find(|l| !l.trim().is_empty()))
            .map(|l| format!(": {}", l.trim()))
            .unwrap_or_default();
        let what = if case.classname.is_empty() {
            case.name.clone()
        } else {
            format!("{} {}", case.classname, case.name)
        };
        let _ = writeln!(
            out,
            "  {}  {}  {what}{first_line}",
            paint("\x1b[31m", &format!("{:<6}", case.status)),
            suite.name
        );
    }
    if failures.len() > MAX_LISTED_FAILURES {
        let _ = writeln!(
            out,
            "  … and {} more (all of them are in --json-report)",
            failures.len() - MAX_LISTED_FAILURES
        );
    }
    for suite in &report.test_suites {
        if let Some(error) = &suite.suite_error {
            let _ = writeln!(
                out,
                "  {}  {}: {error}",
                paint("\x1b[31m", "error "),
                suite.name
            );
        }
    }
    out
}

#[derive(Debug, Serialize)]
pub(crate) struct JobReport {
    pub(crate) name: String,
    pub(crate) stage: String,
    pub(crate) status: Status,
    pub(crate) allow_failure: bool,
    pub(crate) started_at: Option<String>,
    pub(crate) finished_at: Option<String>,
    pub(crate) exit_code: Option<i64>,
    pub(crate) failure_reason: Option<String>,
    /// The job's `environment:` (name and URL, expanded); only for jobs that have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) environment: Option<JobEnvironment>,
    /// The percentage the job's `coverage` regex found in its log; only when it found one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) coverage: Option<f64>,
    /// What the job used (CPU seconds, peak memory, storage bytes), as its runner
    /// measured it; only for jobs whose executor measures (shell, docker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resources: Option<ResourcesReport>,
}

/// A job's `resources` in `--json-report`.
#[derive(Debug, Serialize)]
pub(crate) struct ResourcesReport {
    pub(crate) cpu_user_seconds: f64,
    pub(crate) cpu_system_seconds: f64,
    pub(crate) peak_memory_bytes: i64,
    pub(crate) read_bytes: i64,
    pub(crate) written_bytes: i64,
}

impl ResourcesReport {
    fn new(used: &ResourcesView) -> Self {
        Self {
            cpu_user_seconds: used.cpu_user_seconds,
            cpu_system_seconds: used.cpu_system_seconds,
            peak_memory_bytes: used.peak_memory_bytes,
            read_bytes: used.read_bytes,
            written_bytes: used.written_bytes,
        }
    }
}

/// `1.23s` of CPU (user + system), `-` when not measured.
fn cpu_cell(used: Option<&ResourcesView>) -> String {
    used.map_or_else(
        || "-".to_owned(),
        |u| format!("{:.2}s", u.cpu_user_seconds + u.cpu_system_seconds),
    )
}

/// The pipeline status as the report names it: GitLab's, with the states a finished
/// run can end in.
pub(crate) fn report_status(pipeline_status: Status) -> Status {
    match pipeline_status {
        Status::Success | Status::Failed | Status::Canceled | Status::Skipped | Status::Manual => {
            pipeline_status
        }
        // Canceling, or a run that ended while jobs were still created, pending or
        // scheduled: it stopped early (an interrupt).
        _ => Status::Canceled,
    }
}

impl RunReport {
    pub(crate) fn new(
        status: Status,
        jobs: &[JobView],
        tests: &TestReport,
        code: &CodeReports,
    ) -> Self {
        let mut jobs: Vec<&JobView> = jobs.iter().collect();
        jobs.sort_by_key(|j| j.id);
        RunReport {
            status: report_status(status),
            jobs: jobs
                .into_iter()
                .map(|j| JobReport {
                    name: j.name.clone(),
                    stage: j.stage.clone(),
                    status: j.status,
                    allow_failure: j.allow_failure,
                    started_at: j.started_at.map(iso8601),
                    finished_at: j.finished_at.map(iso8601),
                    exit_code: j.exit_code,
                    failure_reason: j.failure_reason.clone(),
                    environment: j.environment.clone(),
                    coverage: j.coverage,
                    resources: j.resources.as_ref().map(ResourcesReport::new),
                })
                .collect(),
            tests: TestsReport::new(tests),
            coverage_report: code.coverage_totals(),
            codequality: code.codequality_totals(),
        }
    }
}

/// Why a job did not run, in a user's words.
pub(crate) fn why_not_run(job: &JobView, pipeline_failed: bool) -> Option<String> {
    match job.status {
        Status::Skipped if job.when == "on_failure" => {
            Some("when: on_failure, and nothing failed".to_owned())
        }
        Status::Skipped if pipeline_failed => Some("a job it waits for failed".to_owned()),
        Status::Skipped => Some("skipped".to_owned()),
        Status::Manual => Some(format!("manual job: run it with --manual '{}'", job.name)),
        Status::Created | Status::Pending | Status::Scheduled | Status::WaitingForResource => {
            Some("the run stopped before it started".to_owned())
        }
        Status::Canceled if job.started_at.is_none() => {
            Some("canceled before it started".to_owned())
        }
        _ => None,
    }
}

/// The summary table: job, stage, status, duration, CPU time (user + system) and peak
/// memory (`-` where the executor does not measure), and why a job was skipped — or
/// never ran: `never` are the jobs no runner of the run could take (by name), and why —
/// or failed: the exit code, else the runner's own account (`endings`, by job id: which
/// image could not be pulled and why), else the failure reason.
pub(crate) fn summary(
    jobs: &[JobView],
    pipeline_status: Status,
    color: bool,
    never: &[(String, PendingReason)],
    endings: &std::collections::HashMap<i64, String>,
) -> String {
    let mut latest: Vec<&JobView> = jobs.iter().filter(|j| !j.retried).collect();
    latest.sort_by_key(|j| j.id);
    let failed = pipeline_status == Status::Failed
        || jobs
            .iter()
            .any(|j| j.status == Status::Failed && !j.allow_failure);
    let rows: Vec<[String; 7]> = latest
        .iter()
        .map(|j| {
            let status = match (j.status, j.allow_failure) {
                (Status::Failed, true) => "failed (allowed)".to_owned(),
                (s, _) => s.to_string(),
            };
            let duration = j
                .duration
                .map(|d| format!("{d:.2}s"))
                .unwrap_or_else(|| "-".to_owned());
            let mut note = match never.iter().find(|(name, _)| *name == j.name) {
                Some((_, why)) => format!("can never run: {why}"),
                None => why_not_run(j, failed).unwrap_or_default(),
            };
            if j.status == Status::Failed {
                note = match (j.exit_code, endings.get(&j.id), &j.failure_reason) {
                    (Some(code), _, _) => format!("exit code {code}"),
                    (None, Some(ending), _) => ending.replace('\n', "; "),
                    (None, None, Some(reason)) => reason.clone(),
                    (None, None, None) => String::new(),
                };
            }
            if let Some(coverage) = j.coverage {
                note = format!(
                    "{note}{}coverage {coverage}%",
                    if note.is_empty() { "" } else { ", " }
                );
            }
            if j.attempt > 1 {
                note = format!(
                    "attempt {}{}{note}",
                    j.attempt,
                    if note.is_empty() { "" } else { ", " }
                );
            }
            let memory = j
                .resources
                .as_ref()
                .map_or_else(|| "-".to_owned(), |u| human_bytes(u.peak_memory_bytes));
            [
                j.name.clone(),
                j.stage.clone(),
                status,
                duration,
                cpu_cell(j.resources.as_ref()),
                memory,
                note,
            ]
        })
        .collect();
    let headers = ["job", "stage", "status", "duration", "cpu", "memory", ""];
    let mut widths = headers.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: &[String; 7], colour: Option<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 6 {
                s.push_str(cell);
            } else if i == 2 && colour.is_some() {
                let _ = write!(s, "{}{cell:<w$}\x1b[0m  ", colour.unwrap_or(""));
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        s.trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(&headers.map(str::to_owned), None));
    for row in &rows {
        let colour = color.then(|| match row[2].as_str() {
            "success" => "\x1b[32m",
            "failed" => "\x1b[31m",
            "failed (allowed)" => "\x1b[33m",
            _ => "\x1b[90m",
        });
        let _ = writeln!(out, "{}", line(row, colour));
    }
    let _ = writeln!(out, "pipeline: {}", report_status(pipeline_status));
    out
}
