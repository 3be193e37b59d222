//! Unit test reports (`artifacts:reports:junit`): GitLab's pipeline test report
//! (`GET /projects/:id/pipelines/:pipeline_id/test_report` and `…/test_report_summary`),
//! read from the JUnit XML reports the pipeline's latest jobs uploaded.
//!
//! Parsing follows `Gitlab::Ci::Parsers::Test::Junit`: test cases count inside a
//! `testsuite` (at any depth) or the one top-level `testsuites`; a case with a `failure`
//! child is `failed`, else with `error` `error`, else with `skipped` `skipped`, else
//! `success`; a failed or errored case's `system_output` is the failure's text, then
//! `System Out:` and `System Err:` sections; `time` is its execution time in seconds.
//! Every job's reports form the suite named after the job (a `parallel` job's instances,
//! `name 1/3` …, share one suite; `parallel:matrix` jobs keep their full names). A report
//! that is not XML gives its suite a `suite_error` (`JUnit XML parsing failed: …`) and
//! counts of zero, as GitLab's.
//!
//! The report (a multi-member gzip stream, one member per file) is read as it is
//! decompressed, never whole. Limits: [`MAX_TEST_CASES`] per report (GitLab.com's plan
//! limit; past it the suite errors), a case's `system_output` up to [`MAX_CASE_OUTPUT`]
//! bytes and a suite's outputs up to [`MAX_SUITE_OUTPUT`] bytes in all (past them the text is
//! cut and ends with a note), elements nested at most [`MAX_DEPTH`] deep.
//!
//! The XML is streamed through a `quick-xml` reader. `gantry run` prints the report after
//! its summary.

use std::io::BufRead;
use std::sync::Arc;

use gantry_protocol::ArtifactType;
use quick_xml::events::{BytesStart, Event};
use serde::Serialize;

use super::Coordinator;
use super::error::CoordinatorError;
use super::time::now_ms;

/// Test cases one report may hold (GitLab.com's `ci_max_test_cases_per_report`).
pub const MAX_TEST_CASES: usize = 500_000;
/// Bytes of `system_output` kept per test case.
pub const MAX_CASE_OUTPUT: usize = 64 * 1024;
/// Bytes of `system_output` kept per suite, all cases together.
pub const MAX_SUITE_OUTPUT: usize = 16 * 1024 * 1024;
/// Elements nested in one another in a report (JUnit files nest a handful).
pub const MAX_DEPTH: usize = 256;

/// One test case (GitLab's `TestCaseEntity`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestCase {
    /// `success`, `failed`, `skipped` or `error`.
    pub status: String,
    pub name: String,
    pub classname: String,
    pub file: Option<String>,
    /// Seconds.
    pub execution_time: f64,
    pub system_output: Option<String>,
    /// GitLab's field; JUnit has no separate stack trace, so always `null`.
    pub stack_trace: Option<String>,
}

/// The test cases of one suite: the reports of the jobs of one name (GitLab's
/// `TestSuiteEntity`; `build_ids` as in the summary).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TestSuite {
    pub name: String,
    #[serde(flatten)]
    pub counts: TestCounts,
    pub suite_error: Option<String>,
    pub build_ids: Vec<i64>,
    pub test_cases: Vec<TestCase>,
    #[serde(skip)]
    output_bytes: usize,
}

/// A pipeline's test report (GitLab's `TestReportEntity`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TestReport {
    #[serde(flatten)]
    pub counts: TestCounts,
    pub test_suites: Vec<TestSuite>,
}

/// What a suite or a whole report counts (GitLab's field names in both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TestCounts {
    /// Seconds, the cases' own times summed (to 1/1000).
    pub total_time: f64,
    pub total_count: u64,
    pub success_count: u64,
    pub failed_count: u64,
    pub skipped_count: u64,
    pub error_count: u64,
}

impl TestCounts {
    /// The counts of `cases`.
    fn of(cases: &[TestCase]) -> TestCounts {
        let count = |status: &str| cases.iter().filter(|c| c.status == status).count() as u64;
        let (success, failed, skipped, error) = (
            count("success"),
            count("failed"),
            count("skipped"),
            count("error"),
        );
        TestCounts {
            total_time: round_time(cases.iter().fold(0.0, |sum, c| sum + c.execution_time)),
            total_count: success + failed + skipped + error,
            success_count: success,
            failed_count: failed,
            skipped_count: skipped,
            error_count: error,
        }
    }

    fn add(self, other: TestCounts) -> TestCounts {
        TestCounts {
            total_time: round_time(self.total_time + other.total_time),
            total_count: self.total_count + other.total_count,
            success_count: self.success_count + other.success_count,
            failed_count: self.failed_count + other.failed_count,
            skipped_count: self.skipped_count + other.skipped_count,
            error_count: self.error_count + other.error_count,
        }
    }
}

/// GitLab's `test_report_summary`: the counts in all and per suite, without the cases.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestReportSummary {
    pub total: SummaryTotal,
    pub test_suites: Vec<SuiteSummary>,
}

/// The summary's `total` (GitLab's short field names).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SummaryTotal {
    pub time: f64,
    pub count: u64,
    pub success: u64,
    pub failed: u64,
    pub skipped: u64,
    pub error: u64,
    /// The first suite's error, if any.
    pub suite_error: Option<String>,
}

/// One suite of the summary, with the jobs whose reports form it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SuiteSummary {
    pub name: String,
    #[serde(flatten)]
    pub counts: TestCounts,
    pub build_ids: Vec<i64>,
    pub suite_error: Option<String>,
}

/// The suite a job's cases belong to: its name without a `parallel` instance suffix
/// (` 2/3`), GitLab's `test_suite_name` for a job that is not a matrix job.
pub fn suite_name(job_name: &str) -> &str {
    let Some((base, suffix)) = job_name.rsplit_once(' ') else {
        return job_name;
    };
    let is_instance = suffix.split_once('/').is_some_and(|(i, n)| {
        !i.is_empty()
            && !n.is_empty()
            && i.bytes().all(|b| b.is_ascii_digit())
            && n.bytes().all(|b| b.is_ascii_digit())
    });
    if is_instance {
        base.trim_end()
    } else {
        job_name
    }
}

impl TestReport {
    /// The suite named `name`, created empty (in order of first use) when new.
    pub fn suite(&mut self, name: &str) -> &mut TestSuite {
        let at = self.suite_index(name);
        &mut self.test_suites[at]
    }

    fn suite_index(&mut self, name: &str) -> usize {
        match self.test_suites.iter().position(|s| s.name == name) {
            Some(at) => at,
            None => {
                self.test_suites.push(TestSuite {
                    name: name.to_owned(),
                    ..TestSuite::default()
                });
                self.test_suites.len() - 1
            }
        }
    }

    /// Totals over the suites (a suite with an error counts nothing).
    pub fn finish(&mut self) {
        let mut counts = TestCounts::default();
        for s in &mut self.test_suites {
            s.finish();
            counts = counts.add(s.counts);
        }
        self.counts = counts;
    }

    /// GitLab's summary of the report.
    pub fn summary(&self) -> TestReportSummary {
        let c = self.counts;
        TestReportSummary {
            total: SummaryTotal {
                time: c.total_time,
                count: c.total_count,
                success: c.success_count,
                failed: c.failed_count,
                skipped: c.skipped_count,
                error: c.error_count,
                suite_error: self.test_suites.iter().find_map(|s| s.suite_error.clone()),
            },
            test_suites: self
                .test_suites
                .iter()
                .map(|s| SuiteSummary {
                    name: s.name.clone(),
                    counts: s.counts,
                    build_ids: s.build_ids.clone(),
                    suite_error: s.suite_error.clone(),
                })
                .collect(),
        }
    }
}

/// Seconds as GitLab shows them: rounded to 1/1000 (sums of floats drift).
fn round_time(t: f64) -> f64 {
    // `+ 0.0` turns the `-0.0` of an empty sum into `0`.
    (t * 1000.0).round() / 1000.0 + 0.0
}

impl TestSuite {
    fn finish(&mut self) {
        if self.suite_error.is_some() {
            self.test_cases.clear();
        }
        self.counts = TestCounts::of(&self.test_cases);
    }

    /// Adds the cases of one JUnit report (the XML of one or more files, one after the
    /// other) read from `xml`; a report that cannot be read sets [`TestSuite::suite_error`].
    pub fn add_report(&mut self, xml: impl BufRead) {
        if self.suite_error.is_some() {
            return;
        }
        if let Err(e) = self.parse(xml, MAX_TEST_CASES) {
            self.suite_error = Some(e);
        }
    }

    fn parse(&mut self, xml: impl BufRead, max_cases: usize) -> Result<(), String> {
        let mut reader = quick_xml::Reader::from_reader(xml);
        let mut buf = Vec::new();
        // Element names from the root to the current element.
        let mut stack: Vec<Vec<u8>> = Vec::new();
        let mut case: Option<CaseBuilder> = None;
        let mut parsed = 0usize;
        let xml_error = |e: &dyn std::fmt::Display| format!("JUnit XML parsing failed: {e}");
        loop {
            let event = reader
                .read_event_into(&mut buf)
                .map_err(|e| xml_error(&e))?;
            match event {
                Event::Start(ref e) | Event::Empty(ref e) => {
                    let empty = matches!(event, Event::Empty(_));
                    let name = e.local_name().as_ref().to_vec();
                    match name.as_slice() {
                        b"testcase" if case.is_none() && counts_cases(&stack) => {
                            parsed += 1;
                            if parsed > max_cases {
                                return Err(format!(
                                    "JUnit data parsing failed: number of test cases exceeded the limit of {max_cases}"
                                ));
                            }
                            case = Some(CaseBuilder::new(e));
                        }
                        b"failure" | b"error" | b"skipped" | b"system-out" | b"system-err" => {
                            if let Some(c) = case.as_mut().filter(|_| is_child_of_case(&stack)) {
                                c.open(&name, e);
                            }
                        }
                        _ => {}
                    }
                    if empty {
                        self.close(&name, &mut case);
                    } else if stack.len() >= MAX_DEPTH {
                        return Err(format!(
                            "JUnit data parsing failed: elements are nested more than {MAX_DEPTH} deep"
                        ));
                    } else {
                        stack.push(name);
                    }
                }
                Event::End(_) => {
                    if let Some(name) = stack.pop() {
                        self.close(&name, &mut case);
                    }
                }
                Event::Text(t) => {
                    if let Some(c) = case.as_mut() {
                        let text = t.unescape().map_err(|e| xml_error(&e))?;
                        c.text(&text);
                    }
                }
                Event::CData(t) => {
                    if let Some(c) = case.as_mut() {
                        c.text(&String::from_utf8_lossy(&t));
                    }
                }
                Event::Eof => break,
                _ => {}
            }
            buf.clear();
        }
        Ok(())
    }

    /// The end of element `name`.
    fn close(&mut self, name: &[u8], case: &mut Option<CaseBuilder>) {
        match name {
            b"testcase" => {
                if let Some(c) = case.take() {
                    let budget = MAX_SUITE_OUTPUT.saturating_sub(self.output_bytes);
                    let test_case = c.build(budget);
                    self.output_bytes += test_case.system_output.as_ref().map_or(0, String::len);
                    self.test_cases.push(test_case);
                }
            }
            _ => {
                if let Some(c) = case.as_mut() {
                    c.close(name);
                }
            }
        }
    }
}

/// Whether a `testcase` under `stack` counts: its parent is a `testsuite`, or the
/// top-level `testsuites`.
fn counts_cases(stack: &[Vec<u8>]) -> bool {
    match stack {
        [.., parent] if parent.as_slice() == b"testsuite" => true,
        [only] => only.as_slice() == b"testsuites",
        _ => false,
    }
}

fn is_child_of_case(stack: &[Vec<u8>]) -> bool {
    stack.last().is_some_and(|p| p.as_slice() == b"testcase")
}

fn attr(e: &BytesStart<'_>, key: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == key)
        .map(|a| {
            a.unescape_value()
                .map(|v| v.into_owned())
                .unwrap_or_else(|_| String::from_utf8_lossy(&a.value).into_owned())
        })
}

/// Which text of the case is being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Capture {
    Failure,
    Error,
    Skipped,
    Out,
    Err,
}

/// A `failure`/`error`/`skipped`/`system-out`/`system-err` child: its `message`
/// attribute and its text.
#[derive(Default)]
struct Section {
    message: String,
    body: String,
}

impl Section {
    /// The message, then the text on lines of their own (a text of blanks only is none).
    fn render(self) -> String {
        match (self.message.is_empty(), self.body.trim().is_empty()) {
            (_, true) => self.message,
            (true, false) => self.body,
            (false, false) => format!("{}\n{}", self.message, self.body),
        }
    }
}

struct CaseBuilder {
    name: String,
    classname: String,
    file: Option<String>,
    time: f64,
    failure: Option<Section>,
    error: Option<Section>,
    skipped: Option<Section>,
    out: Option<Section>,
    err: Option<Section>,
    capturing: Option<Capture>,
}

impl CaseBuilder {
    fn new(e: &BytesStart<'_>) -> Self {
        CaseBuilder {
            name: attr(e, b"name").unwrap_or_default(),
            classname: attr(e, b"classname").unwrap_or_default(),
            file: attr(e, b"file"),
            time: attr(e, b"time")
                .and_then(|t| t.trim().parse::<f64>().ok())
                .filter(|t| t.is_finite() && *t >= 0.0)
                .unwrap_or(0.0),
            failure: None,
            error: None,
            skipped: None,
            out: None,
            err: None,
            capturing: None,
        }
    }

    /// A `failure`/`error`/`skipped`/`system-out`/`system-err` child starts (the first
    /// of each kind counts).
    fn open(&mut self, name: &[u8], e: &BytesStart<'_>) {
        let what = match name {
            b"failure" => Capture::Failure,
            b"error" => Capture::Error,
            b"skipped" => Capture::Skipped,
            b"system-out" => Capture::Out,
            _ => Capture::Err,
        };
        let slot = self.slot(what);
        if slot.is_some() {
            return;
        }
        let mut message = String::new();
        push_bounded(
            &mut message,
            &attr(e, b"message").unwrap_or_default(),
            MAX_CASE_OUTPUT + 1,
        );
        *slot = Some(Section {
            message,
            body: String::new(),
        });
        self.capturing = Some(what);
    }

    fn slot(&mut self, what: Capture) -> &mut Option<Section> {
        match what {
            Capture::Failure => &mut self.failure,
            Capture::Error => &mut self.error,
            Capture::Skipped => &mut self.skipped,
            Capture::Out => &mut self.out,
            Capture::Err => &mut self.err,
        }
    }

    fn text(&mut self, text: &str) {
        let Some(what) = self.capturing else { return };
        if let Some(section) = self.slot(what).as_mut() {
            push_bounded(&mut section.body, text, MAX_CASE_OUTPUT + 1);
        }
    }

    fn close(&mut self, name: &[u8]) {
        if matches!(
            name,
            b"failure" | b"error" | b"skipped" | b"system-out" | b"system-err"
        ) {
            self.capturing = None;
        }
    }

    fn build(self, budget: usize) -> TestCase {
        let sections = |first: Option<Section>, out: Option<Section>, err: Option<Section>| {
            let parts: Vec<String> = [
                first.map(Section::render),
                out.map(|o| format!("System Out:\n\n{}", o.render())),
                err.map(|e| format!("System Err:\n\n{}", e.render())),
            ]
            .into_iter()
            .flatten()
            .collect();
            Some(parts.join("\n\n"))
        };
        let (status, output) = if self.failure.is_some() {
            ("failed", sections(self.failure, self.out, self.err))
        } else if self.error.is_some() {
            ("error", sections(self.error, self.out, self.err))
        } else if self.skipped.is_some() {
            (
                "skipped",
                self.skipped.map(Section::render).filter(|s| !s.is_empty()),
            )
        } else {
            ("success", None)
        };
        TestCase {
            status: status.to_owned(),
            name: self.name,
            classname: self.classname,
            file: self.file,
            execution_time: self.time,
            system_output: output.map(|o| cut(o, MAX_CASE_OUTPUT.min(budget))),
            stack_trace: None,
        }
    }
}

/// Appends `text` to `s`, up to `max` bytes in all (at a character boundary).
fn push_bounded(s: &mut String, text: &str, max: usize) {
    let room = max.saturating_sub(s.len());
    if text.len() <= room {
        s.push_str(text);
    } else {
        let mut end = room;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        s.push_str(&text[..end]);
    }
}

/// `s` cut to at most `max` bytes, with a note when it was cut.
fn cut(s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut out = String::new();
    push_bounded(&mut out, &s, max);
    out.push_str("\n[output cut: Gantry keeps 64 KiB per test case and 16 MiB per suite]");
    out
}

impl Coordinator {
    /// The pipeline's test report: the JUnit reports of its latest jobs (a retried
    /// attempt's are replaced by the retry's; expired ones are gone), one suite per job
    /// name, in the order the jobs were created. Empty when no job uploaded one.
    pub async fn test_report(&self, pipeline_id: i64) -> Result<TestReport, CoordinatorError> {
        let store = &self.inner.store;
        store.pipeline(pipeline_id).await?;
        let now = now_ms();
        let artifacts = store.pipeline_artifacts(pipeline_id).await?;
        let mut jobs = store.pipeline_jobs_without_spec(pipeline_id).await?;
        jobs.sort_by_key(|j| j.id);
        let mut report = TestReport::default();
        for job in jobs.iter().filter(|j| !j.retried) {
            let Some(junit) = artifacts.iter().find(|a| {
                a.job_id == job.id && a.file_type == ArtifactType::Junit.as_str() && !a.expired(now)
            }) else {
                continue;
            };
            let at = report.suite_index(suite_name(&job.name));
            let mut suite = std::mem::take(&mut report.test_suites[at]);
            suite.build_ids.push(job.id);
            let (blobs, key) = (Arc::clone(&self.inner.blobs), junit.blob_key.clone());
            suite = tokio::task::spawn_blocking(move || {
                match blobs.open(&key) {
                    Ok(Some((file, _))) => suite.add_report(std::io::BufReader::new(
                        flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file)),
                    )),
                    Ok(None) => {}
                    Err(e) => {
                        suite.suite_error = Some(format!("JUnit report could not be read: {e}"))
                    }
                }
                suite
            })
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))?;
            report.test_suites[at] = suite;
        }
        report.finish();
        Ok(report)
    }
}

#[cfg(test)]
mod tests;
