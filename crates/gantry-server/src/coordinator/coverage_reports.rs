//! Coverage reports (`artifacts:reports:coverage_report`, Cobertura or JaCoCo XML): a
//! pipeline's line coverage per file, as GitLab's `Gitlab::Ci::Reports::CoverageReport`
//! holds it (`{files: {path: {line: hits}}}`, the shape of a merge request's
//! `coverage_reports.json`), with a summary Gantry adds (lines with hits, lines measured,
//! their ratio) for the API, the web UI and `gantry run`.
//!
//! Parsing follows GitLab's SAX documents. Cobertura (`CoberturaDocument`): each `class`
//! with a `filename` gives its `line`s' `number` → `hits`; a `source` naming a folder below
//! the project's path (`…/<group>/<project>/sub/`) prefixes the file names with `sub/`
//! (GitLab also checks that the file exists in the commit; Gantry takes the first such
//! source, without reading the repository). JaCoCo (`JacocoDocument`): the path is the
//! `group`/`package`/`sourcefile` names joined, a `line`'s `nr` → `ci` (covered
//! instructions); GitLab keeps only files a merge request changed (their full paths),
//! Gantry keeps them all, named by that joined path. Lines of a file in several reports
//! (or classes) add up, as GitLab's `add_file`. An XML error gives the job's report an
//! `error` (GitLab's `XML parsing failed with error: …`).
//!
//! The report (a gzip stream, one member per file) is decompressed into memory, at most
//! [`MAX_REPORT_BYTES`] (past it the job's report errors), and split into its XML documents;
//! at most [`MAX_FILES`] files and [`MAX_LINES`] lines per pipeline are kept (past them, the
//! report says it was cut). Cost: one pass over the reports' bytes per request.

use std::collections::BTreeMap;
use std::io::{BufRead, Read as _};
use std::sync::Arc;

use gantry_protocol::ArtifactType;
use quick_xml::events::Event;
use serde::Serialize;

use super::Coordinator;
use super::error::CoordinatorError;
use super::time::now_ms;

/// Files kept per pipeline report.
pub const MAX_FILES: usize = 100_000;
/// Lines kept per pipeline report, all files together.
pub const MAX_LINES: usize = 5_000_000;
/// Bytes of one job's reports, decompressed.
pub const MAX_REPORT_BYTES: u64 = 256 * 1024 * 1024;

/// The format of a coverage report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoverageFormat {
    Cobertura,
    Jacoco,
}

/// A pipeline's coverage report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CoverageReport {
    /// File → line → hits.
    pub files: BTreeMap<String, BTreeMap<u64, u64>>,
    pub summary: CoverageSummary,
    /// Per job with a report: its id, name and the error its report gave, if any.
    pub jobs: Vec<CoverageJob>,
    /// Whether files or lines were left out ([`MAX_FILES`], [`MAX_LINES`]).
    pub truncated: bool,
}

/// Lines measured and lines hit, all files together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CoverageSummary {
    pub files: u64,
    pub lines: u64,
    pub covered_lines: u64,
    /// `covered_lines / lines` in percent, two decimals; `None` without lines.
    pub percent: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CoverageJob {
    pub id: i64,
    pub name: String,
    pub format: &'static str,
    pub error: Option<String>,
}

impl CoverageReport {
    fn lines(&self) -> usize {
        self.files.values().map(BTreeMap::len).sum()
    }

    fn add_file(&mut self, name: String, lines: Vec<(u64, u64)>, budget: &mut usize) {
        if !self.files.contains_key(&name) && self.files.len() >= MAX_FILES {
            self.truncated = true;
            return;
        }
        let file = self.files.entry(name).or_default();
        for (line, hits) in lines {
            match file.get_mut(&line) {
                Some(h) => *h = h.saturating_add(hits),
                None if *budget == 0 => self.truncated = true,
                None => {
                    *budget -= 1;
                    file.insert(line, hits);
                }
            }
        }
    }

    fn finish(&mut self) {
        let lines = self.lines() as u64;
        let covered = self
            .files
            .values()
            .flat_map(BTreeMap::values)
            .filter(|h| **h > 0)
            .count() as u64;
        self.summary = CoverageSummary {
            files: self.files.len() as u64,
            lines,
            covered_lines: covered,
            percent: (lines > 0)
                .then(|| (covered as f64 * 10_000.0 / lines as f64).round() / 100.0),
        };
    }
}

fn attr(e: &quick_xml::events::BytesStart<'_>, name: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == name)
        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
}

/// Parses one report into `report`; `project_path` is the project's full path (Cobertura
/// `source`s). The error is GitLab's message.
pub fn parse_into(
    reader: impl BufRead,
    format: CoverageFormat,
    project_path: &str,
    report: &mut CoverageReport,
) -> Result<(), String> {
    let mut budget = MAX_LINES.saturating_sub(report.lines());
    let mut xml = quick_xml::Reader::from_reader(reader);
    xml.config_mut().trim_text(true);
    let mut buf = Vec::new();
    let invalid_line = || "Line information had invalid values".to_owned();
    // Cobertura.
    let mut sources: Vec<String> = Vec::new();
    let mut in_source = false;
    let mut class: Option<String> = None;
    let mut lines: Vec<(u64, u64)> = Vec::new();
    // JaCoCo.
    let mut path: Vec<String> = Vec::new();
    let mut depth = 0_usize;
    loop {
        let event = xml
            .read_event_into(&mut buf)
            .map_err(|e| format!("XML parsing failed with error: {e}"))?;
        let (start, empty) = match &event {
            Event::Start(e) => (Some(e.clone()), false),
            Event::Empty(e) => (Some(e.clone()), true),
            _ => (None, false),
        };
        if let Some(e) = start {
            if !empty {
                depth += 1;
                if depth > 256 {
                    return Err("XML parsing failed with error: elements nested too deep".into());
                }
            }
            let name = e.name();
            match (format, name.as_ref()) {
                (CoverageFormat::Cobertura, b"source") => in_source = !empty,
                (CoverageFormat::Cobertura, b"class") => {
                    let filename = attr(&e, b"filename").filter(|f| !f.is_empty());
                    class = filename.map(|f| cobertura_name(&f, &sources, project_path));
                    lines.clear();
                }
                (CoverageFormat::Cobertura, b"line") => {
                    let number = attr(&e, b"number").and_then(|n| n.trim().parse().ok());
                    let hits = attr(&e, b"hits").and_then(|n| n.trim().parse().ok());
                    match (number, hits) {
                        (Some(n), Some(h)) => lines.push((n, h)),
                        _ => return Err(invalid_line()),
                    }
                }
                (CoverageFormat::Jacoco, b"group" | b"package" | b"sourcefile") => {
                    if let Some(n) = attr(&e, b"name").filter(|n| !n.is_empty()) {
                        if !empty {
                            path.push(n.replace('\\', "/"));
                        }
                    } else if !empty {
                        path.push(String::new());
                    }
                }
                (CoverageFormat::Jacoco, b"line") => {
                    let nr = attr(&e, b"nr").and_then(|n| n.trim().parse().ok());
                    let ci = attr(&e, b"ci").and_then(|n| n.trim().parse().ok());
                    let (Some(nr), Some(ci)) = (nr, ci) else {
                        return Err("Line information had invalid attributes".to_owned());
                    };
                    let file: Vec<&str> = path
                        .iter()
                        .map(String::as_str)
                        .filter(|s| !s.is_empty())
                        .collect();
                    if !file.is_empty() {
                        report.add_file(file.join("/"), vec![(nr, ci)], &mut budget);
                    }
                }
                _ => {}
            }
            continue;
        }
        match event {
            Event::Text(t) if in_source => {
                let text = t
                    .unescape()
                    .map_err(|e| format!("XML parsing failed with error: {e}"))?;
                sources.push(text.trim().replace('\\', "/"));
            }
            Event::End(e) => {
                depth = depth.saturating_sub(1);
                match (format, e.name().as_ref()) {
                    (CoverageFormat::Cobertura, b"source") => in_source = false,
                    (CoverageFormat::Cobertura, b"class") => {
                        if let Some(name) = class.take() {
                            if !lines.is_empty() {
                                report.add_file(name, std::mem::take(&mut lines), &mut budget);
                            }
                        }
                    }
                    (CoverageFormat::Jacoco, b"group" | b"package" | b"sourcefile") => {
                        path.pop();
                    }
                    _ => {}
                }
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
        buf.clear();
    }
}

/// A Cobertura `class`'s file name, below the first `source` that is a folder below the
/// project's path.
fn cobertura_name(filename: &str, sources: &[String], project_path: &str) -> String {
    let filename = filename.replace('\\', "/");
    let marker = format!("{project_path}/");
    for source in sources.iter().take(100) {
        if let Some((_, below)) = source.split_once(&marker) {
            let below = below.trim_matches('/');
            if !below.is_empty() {
                return format!("{below}/{filename}");
            }
        }
    }
    filename
}

impl Coordinator {
    /// The types of the pipeline's artifacts (`archive`, `junit`, `cobertura`, …), one
    /// per artifact: whether a report is there to read.
    pub async fn pipeline_artifact_types(
        &self,
        pipeline_id: i64,
    ) -> Result<Vec<String>, CoordinatorError> {
        Ok(self
            .inner
            .store
            .pipeline_artifacts(pipeline_id)
            .await?
            .into_iter()
            .map(|a| a.file_type)
            .collect())
    }

    /// The pipeline's coverage report: the Cobertura and JaCoCo reports of its latest
    /// jobs (expired ones are gone), merged.
    pub async fn coverage_report(
        &self,
        pipeline_id: i64,
    ) -> Result<CoverageReport, CoordinatorError> {
        let store = &self.inner.store;
        let pipeline = store.pipeline(pipeline_id).await?;
        let project = store.project(pipeline.project_id).await?;
        let project_path = super::projects::full_path(&project.name);
        let now = now_ms();
        let artifacts = store.pipeline_artifacts(pipeline_id).await?;
        let mut jobs = store.pipeline_jobs_without_spec(pipeline_id).await?;
        jobs.sort_by_key(|j| j.id);
        let mut report = CoverageReport::default();
        for job in jobs.iter().filter(|j| !j.retried) {
            for a in artifacts
                .iter()
                .filter(|a| a.job_id == job.id && !a.expired(now))
            {
                let format = if a.file_type == ArtifactType::Cobertura.as_str() {
                    CoverageFormat::Cobertura
                } else if a.file_type == ArtifactType::Jacoco.as_str() {
                    CoverageFormat::Jacoco
                } else {
                    continue;
                };
                let (blobs, key, path) = (
                    Arc::clone(&self.inner.blobs),
                    a.blob_key.clone(),
                    project_path.clone(),
                );
                let mut taken = std::mem::take(&mut report);
                let (back, error) = tokio::task::spawn_blocking(move || {
                    let error = match blobs.open(&key) {
                        Ok(Some((file, _))) => parse_gzip(file, format, &path, &mut taken).err(),
                        Ok(None) => None,
                        Err(e) => Some(format!("the report could not be read: {e}")),
                    };
                    (taken, error)
                })
                .await
                .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))?;
                report = back;
                report.jobs.push(CoverageJob {
                    id: job.id,
                    name: job.name.clone(),
                    format: match format {
                        CoverageFormat::Cobertura => "cobertura",
                        CoverageFormat::Jacoco => "jacoco",
                    },
                    error,
                });
            }
        }
        report.finish();
        Ok(report)
    }
}

/// Every gzip member of `file` (one per report file the runner found) parsed in turn.
fn parse_gzip(
    file: std::fs::File,
    format: CoverageFormat,
    project_path: &str,
    report: &mut CoverageReport,
) -> Result<(), String> {
    let reader = std::io::BufReader::new(flate2::read::MultiGzDecoder::new(
        std::io::BufReader::new(file),
    ));
    parse_members(reader, format, project_path, report)
}

/// Several XML documents back to back (the members of the runner's gzip stream): each
/// `<?xml` starts a new one. Parsed whole, as one stream, a second document's declaration
/// is an error; so the stream is split at declarations while it is read.
fn parse_members(
    mut reader: impl BufRead,
    format: CoverageFormat,
    project_path: &str,
    report: &mut CoverageReport,
) -> Result<(), String> {
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut (&mut reader).take(MAX_REPORT_BYTES + 1), &mut text)
        .map_err(|e| format!("XML parsing failed with error: {e}"))?;
    if text.len() as u64 > MAX_REPORT_BYTES {
        return Err(format!(
            "the report is larger than {MAX_REPORT_BYTES} bytes unpacked"
        ));
    }
    let starts: Vec<usize> = text
        .windows(5)
        .enumerate()
        .filter(|(_, w)| *w == b"<?xml")
        .map(|(i, _)| i)
        .collect();
    if starts.len() <= 1 {
        return parse_into(&text[..], format, project_path, report);
    }
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(text.len());
        parse_into(&text[start..end], format, project_path, report)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cobertura_lines_add_up_and_sources_prefix_names() {
        let xml = r#"<?xml version="1.0" ?>
<coverage version="7.4" line-rate="0.5">
  <sources><source>/builds/gantry/demo/src</source></sources>
  <packages><package name="."><classes>
    <class name="a.py" filename="a.py"><lines>
      <line number="1" hits="1"/><line number="2" hits="0"/>
    </lines></class>
    <class name="a.py" filename="a.py"><lines><line number="2" hits="3"/></lines></class>
  </classes></package></packages>
</coverage>"#;
        let mut r = CoverageReport::default();
        parse_into(
            xml.as_bytes(),
            CoverageFormat::Cobertura,
            "gantry/demo",
            &mut r,
        )
        .unwrap();
        r.finish();
        assert_eq!(r.files["src/a.py"], BTreeMap::from([(1, 1), (2, 3)]));
        assert_eq!(r.summary.percent, Some(100.0));
    }

    #[test]
    fn jacoco_paths_join_package_and_source_file() {
        let xml = r#"<report name="x"><package name="com/example"><class name="com/example/A"/>
<sourcefile name="A.java"><line nr="3" mi="0" ci="2" mb="0" cb="0"/><line nr="4" mi="1" ci="0" mb="0" cb="0"/></sourcefile>
</package></report>"#;
        let mut r = CoverageReport::default();
        parse_into(
            xml.as_bytes(),
            CoverageFormat::Jacoco,
            "gantry/demo",
            &mut r,
        )
        .unwrap();
        r.finish();
        assert_eq!(
            r.files["com/example/A.java"],
            BTreeMap::from([(3, 2), (4, 0)])
        );
        assert_eq!((r.summary.lines, r.summary.covered_lines), (2, 1));
        assert_eq!(r.summary.percent, Some(50.0));
    }

    #[test]
    fn bad_lines_and_bad_xml_are_gitlabs_errors() {
        let mut r = CoverageReport::default();
        let bad = r#"<coverage><class filename="a"><line number="x" hits="1"/></class></coverage>"#;
        assert_eq!(
            parse_into(bad.as_bytes(), CoverageFormat::Cobertura, "g/p", &mut r),
            Err("Line information had invalid values".to_owned())
        );
        let broken = "<coverage><class></coverage>";
        assert!(
            parse_into(broken.as_bytes(), CoverageFormat::Cobertura, "g/p", &mut r)
                .unwrap_err()
                .starts_with("XML parsing failed with error:")
        );
    }
}
