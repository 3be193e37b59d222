//! Code quality reports (`artifacts:reports:codequality`, Code Climate JSON): a
//! pipeline's degradations, as GitLab's `Gitlab::Ci::Parsers::Codequality::CodeClimate` and
//! `Gitlab::Ci::Reports::CodequalityReports` read them. GitLab shows them through GraphQL
//! (`Pipeline.codeQualityReports`, `codeQualityReportSummary`); Gantry's REST form,
//! `GET /projects/:id/pipelines/:pipeline_id/codequality_report`, has that summary's fields
//! (`blocker` … `unknown`, `count`) and each degradation in `CodeQualityDegradationType`'s
//! fields (`description`, `check_name`, `fingerprint`, `severity`, `path`, `line`,
//! `web_url`, `engine_name`).
//!
//! Rules (GitLab's): a report is a JSON array; a degradation must have the string fields
//! `description`, `fingerprint`, `severity` and an object `location` (the `codeclimate.json`
//! schema) — reading stops at the first one that does not; degradations are keyed by
//! `fingerprint` (a later one replaces an earlier); `line` is `location.lines.begin`, else
//! `location.positions.begin.line`; they are sorted by severity (`blocker`, `critical`,
//! `major`, `minor`, `info`, then anything else); a report that is not JSON gives
//! `JSON parsing failed: …`. `web_url` is the file's line in the web UI's repository
//! browser GitLab would link to (`<project URL>/-/blob/<sha>/<path>#L<line>`).
//!
//! Reports are decompressed into memory, at most [`MAX_REPORT_BYTES`] per job. Cost: one
//! pass over the reports per request.

use std::io::Read as _;
use std::sync::Arc;

use gantry_protocol::ArtifactType;
use indexmap::IndexMap;
use serde::Serialize;

use super::Coordinator;
use super::error::CoordinatorError;
use super::time::now_ms;

/// Bytes of one job's reports, decompressed.
pub const MAX_REPORT_BYTES: u64 = 64 * 1024 * 1024;

/// GitLab's severities, in priority order.
const SEVERITIES: [&str; 6] = ["blocker", "critical", "major", "minor", "info", "unknown"];

/// One degradation (GitLab's `CodeQualityDegradationType`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Degradation {
    pub description: String,
    pub check_name: Option<String>,
    pub fingerprint: String,
    pub severity: String,
    pub path: Option<String>,
    pub line: Option<i64>,
    pub web_url: Option<String>,
    pub engine_name: Option<String>,
}

/// GitLab's `code_quality_report_summary`: degradations per severity and in all.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CodequalitySummary {
    pub blocker: u64,
    pub critical: u64,
    pub major: u64,
    pub minor: u64,
    pub info: u64,
    pub unknown: u64,
    pub count: u64,
}

/// A pipeline's code quality report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CodequalityReport {
    pub summary: CodequalitySummary,
    pub degradations: Vec<Degradation>,
    /// The jobs whose reports were read, with their errors.
    pub jobs: Vec<CodequalityJob>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CodequalityJob {
    pub id: i64,
    pub name: String,
    pub error: Option<String>,
}

/// Where a degradation's file is shown.
pub struct BlobUrl<'a> {
    pub project_url: &'a str,
    pub sha: &'a str,
}

fn text(v: &serde_json::Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// `CodequalityReports#valid_degradation?` (the `codeclimate.json` schema).
fn valid(d: &serde_json::Value) -> bool {
    let location = d.get("location");
    let int_or_absent = |v: Option<&serde_json::Value>| v.is_none_or(|v| v.is_i64() || v.is_u64());
    d.is_object()
        && ["description", "fingerprint", "severity"]
            .iter()
            .all(|k| d.get(k).is_some_and(serde_json::Value::is_string))
        && location.is_some_and(serde_json::Value::is_object)
        && location
            .and_then(|l| l.get("path"))
            .is_none_or(serde_json::Value::is_string)
        && int_or_absent(d.pointer("/location/lines/begin"))
        && int_or_absent(d.pointer("/location/positions/begin/line"))
}

/// One report's degradations into `into` (by fingerprint). The error is GitLab's.
pub fn parse_into(
    json: &[u8],
    url: Option<&BlobUrl<'_>>,
    into: &mut IndexMap<String, Degradation>,
) -> Result<(), String> {
    let root: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("JSON parsing failed: {e}"))?;
    let Some(items) = root.as_array() else {
        // `root.each` over a hash yields pairs, none a valid degradation.
        return Ok(());
    };
    for d in items {
        if !valid(d) {
            break;
        }
        let path = d
            .pointer("/location/path")
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        let line = d
            .pointer("/location/lines/begin")
            .or_else(|| d.pointer("/location/positions/begin/line"))
            .and_then(serde_json::Value::as_i64);
        let web_url = match (url, &path) {
            (Some(u), Some(p)) => Some(format!(
                "{}/-/blob/{}/{}#L{}",
                u.project_url,
                u.sha,
                p.trim_start_matches('/'),
                line.map(|l| l.to_string()).unwrap_or_default()
            )),
            _ => None,
        };
        let fingerprint = text(d, "fingerprint").unwrap_or_default();
        into.insert(
            fingerprint.clone(),
            Degradation {
                description: text(d, "description").unwrap_or_default(),
                check_name: text(d, "check_name"),
                fingerprint,
                severity: text(d, "severity").unwrap_or_default(),
                path,
                line,
                web_url,
                engine_name: text(d, "engine_name"),
            },
        );
    }
    Ok(())
}

/// Sorted by severity, and GitLab's summary.
pub fn finish(
    degradations: IndexMap<String, Degradation>,
) -> (Vec<Degradation>, CodequalitySummary) {
    let priority = |s: &str| {
        let s = s.to_lowercase();
        SEVERITIES
            .iter()
            .position(|p| *p == s)
            .unwrap_or(SEVERITIES.len() - 1)
    };
    let mut list: Vec<Degradation> = degradations.into_values().collect();
    list.sort_by_key(|d| priority(&d.severity));
    let mut summary = CodequalitySummary::default();
    for d in &list {
        let slot = match d.severity.to_lowercase().as_str() {
            "blocker" => &mut summary.blocker,
            "critical" => &mut summary.critical,
            "major" => &mut summary.major,
            "minor" => &mut summary.minor,
            "info" => &mut summary.info,
            _ => &mut summary.unknown,
        };
        *slot += 1;
        summary.count += 1;
    }
    (list, summary)
}

/// The JSON documents of a report: GitLab stores `codequality` raw (one file, as the
/// runner uploaded it); a gzip stream (one member per report file) is read too.
fn members(file: std::fs::File) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut reader = std::io::BufReader::new(file);
    let mut total = 0_u64;
    let gzip = std::io::BufRead::fill_buf(&mut reader)
        .map_err(|e| format!("the report could not be read: {e}"))?
        .starts_with(&[0x1f, 0x8b]);
    if !gzip {
        let mut text = Vec::new();
        (&mut reader)
            .take(MAX_REPORT_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| format!("the report could not be read: {e}"))?;
        if text.len() as u64 > MAX_REPORT_BYTES {
            return Err(format!(
                "the report is larger than {MAX_REPORT_BYTES} bytes"
            ));
        }
        if !text.iter().all(u8::is_ascii_whitespace) {
            out.push(text);
        }
        return Ok(out);
    }
    loop {
        let at_end = std::io::BufRead::fill_buf(&mut reader)
            .map_err(|e| format!("the report could not be read: {e}"))?
            .is_empty();
        if at_end {
            return Ok(out);
        }
        let mut member = flate2::bufread::GzDecoder::new(&mut reader);
        let mut text = Vec::new();
        (&mut member)
            .take(MAX_REPORT_BYTES + 1 - total)
            .read_to_end(&mut text)
            .map_err(|e| format!("the report could not be read: {e}"))?;
        total += text.len() as u64;
        if total > MAX_REPORT_BYTES {
            return Err(format!(
                "the report is larger than {MAX_REPORT_BYTES} bytes unpacked"
            ));
        }
        out.push(text);
    }
}

impl Coordinator {
    /// The pipeline's code quality report: the Code Climate reports of its latest jobs
    /// (expired ones are gone).
    pub async fn codequality_report(
        &self,
        pipeline_id: i64,
    ) -> Result<CodequalityReport, CoordinatorError> {
        let store = &self.inner.store;
        let pipeline = store.pipeline(pipeline_id).await?;
        let project = store.project(pipeline.project_id).await?;
        let project_url = format!(
            "{}/{}",
            self.external_url(),
            super::projects::full_path(&project.name)
        );
        let now = now_ms();
        let artifacts = store.pipeline_artifacts(pipeline_id).await?;
        let mut jobs = store.pipeline_jobs_without_spec(pipeline_id).await?;
        jobs.sort_by_key(|j| j.id);
        let mut all = IndexMap::new();
        let mut report = CodequalityReport::default();
        for job in jobs.iter().filter(|j| !j.retried) {
            let Some(a) = artifacts.iter().find(|a| {
                a.job_id == job.id
                    && a.file_type == ArtifactType::Codequality.as_str()
                    && !a.expired(now)
            }) else {
                continue;
            };
            let (blobs, key) = (Arc::clone(&self.inner.blobs), a.blob_key.clone());
            let read = tokio::task::spawn_blocking(move || match blobs.open(&key) {
                Ok(Some((file, _))) => members(file),
                Ok(None) => Ok(Vec::new()),
                Err(e) => Err(format!("the report could not be read: {e}")),
            })
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))?;
            let url = BlobUrl {
                project_url: &project_url,
                sha: &pipeline.sha,
            };
            let error = match read {
                Ok(docs) => docs
                    .iter()
                    .map(|d| parse_into(d, Some(&url), &mut all))
                    .find_map(Result::err),
                Err(e) => Some(e),
            };
            report.jobs.push(CodequalityJob {
                id: job.id,
                name: job.name.clone(),
                error,
            });
        }
        (report.degradations, report.summary) = finish(all);
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degradations_by_fingerprint_sorted_by_severity() {
        let json = br#"[
          {"type":"issue","check_name":"E501","description":"line too long","fingerprint":"a",
           "severity":"minor","location":{"path":"app.py","lines":{"begin":3}}},
          {"description":"undefined name","fingerprint":"b","severity":"critical",
           "location":{"path":"lib.py","positions":{"begin":{"line":9,"column":1}}}},
          {"description":"again","fingerprint":"a","severity":"minor","location":{"path":"app.py"}},
          {"description":"no location","fingerprint":"c","severity":"info"},
          {"description":"after an invalid one","fingerprint":"d","severity":"info","location":{}}
        ]"#;
        let mut all = IndexMap::new();
        let url = BlobUrl {
            project_url: "http://h/g/p",
            sha: "abc",
        };
        parse_into(json, Some(&url), &mut all).unwrap();
        let (list, summary) = finish(all);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].fingerprint, "b");
        assert_eq!(list[0].line, Some(9));
        assert_eq!(list[1].description, "again");
        assert_eq!(
            list[1].web_url.as_deref(),
            Some("http://h/g/p/-/blob/abc/app.py#L")
        );
        assert_eq!((summary.critical, summary.minor, summary.count), (1, 1, 2));
        let mut none = IndexMap::new();
        assert!(
            parse_into(b"{", None, &mut none)
                .unwrap_err()
                .starts_with("JSON parsing failed:")
        );
    }
}
