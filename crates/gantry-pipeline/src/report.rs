//! `gantry lint`'s report: the stable JSON contract and the human text rendering.

use std::fmt::Write as _;

use indexmap::IndexMap;
use serde::Serialize;

use crate::compile::Compiled;
use crate::diagnostic::{Diagnostic, SourceMap};
use crate::model::{Job, Variables};

#[derive(Debug, Serialize)]
pub struct LintReport {
    pub valid: bool,
    pub errors: Vec<Message>,
    pub warnings: Vec<Message>,
    pub pipeline_created: bool,
    pub stages: Vec<String>,
    pub variables: IndexMap<String, String>,
    pub jobs: Vec<LintJob>,
}

#[derive(Debug, Serialize)]
pub struct Message {
    pub message: String,
    /// `file:line:column` of the offending value, when known.
    pub location: Option<String>,
    /// Gantry's advice beside GitLab's message (``did you mean `script`?``); absent when
    /// there is none, so a message without one keeps its two fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct LintJob {
    pub name: String,
    pub stage: String,
    pub when: &'static str,
    pub allow_failure: bool,
    pub needs: Option<Vec<String>>,
    pub before_script: Vec<String>,
    pub script: Vec<String>,
    pub after_script: Vec<String>,
    pub variables: IndexMap<String, String>,
    pub tags: Vec<String>,
    pub image: Option<String>,
    pub retry: u8,
    pub start_in: Option<String>,
}

fn values(v: &Variables) -> IndexMap<String, String> {
    v.iter()
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect()
}

fn message(d: &Diagnostic, sources: &SourceMap) -> Message {
    Message {
        message: d.message.clone(),
        location: d
            .pos
            .and_then(|p| sources.location(p))
            .map(|l| l.to_string()),
        hint: d.hint.clone(),
    }
}

impl LintJob {
    fn from_job(j: &Job) -> Self {
        Self {
            name: j.name.clone(),
            stage: j.stage.clone(),
            when: j.when.as_str(),
            allow_failure: j.allow_failure,
            needs: j
                .needs
                .as_ref()
                .map(|n| n.iter().map(|n| n.job.clone()).collect()),
            before_script: j.before_script.clone(),
            script: j.script.clone(),
            after_script: j.after_script.clone(),
            variables: values(&j.variables),
            tags: j.tags.clone(),
            image: j.image.as_ref().map(|i| i.name.clone()),
            retry: j.retry.max,
            start_in: j.start_in.clone(),
        }
    }
}

impl LintReport {
    pub fn new(c: &Compiled) -> Self {
        let p = c.pipeline.as_ref();
        Self {
            valid: c.errors.is_empty(),
            errors: c.errors.iter().map(|d| message(d, &c.sources)).collect(),
            warnings: c.warnings.iter().map(|d| message(d, &c.sources)).collect(),
            pipeline_created: p.is_some_and(|p| p.created),
            stages: p.map(|p| p.stages.clone()).unwrap_or_default(),
            variables: p.map(|p| values(&p.variables)).unwrap_or_default(),
            jobs: p
                .map(|p| p.jobs.iter().map(LintJob::from_job).collect())
                .unwrap_or_default(),
        }
    }
}

/// Human rendering: errors with their source line, or the stages and jobs.
pub fn render_text(c: &Compiled) -> String {
    let mut out = String::new();
    if !c.errors.is_empty() {
        for d in &c.errors {
            render_diagnostic(&mut out, "error", d, &c.sources);
        }
        let _ = writeln!(
            out,
            "\n{} error{} found; the configuration is invalid.",
            c.errors.len(),
            if c.errors.len() == 1 { "" } else { "s" }
        );
        return out;
    }
    for d in &c.warnings {
        render_diagnostic(&mut out, "warning", d, &c.sources);
    }
    let Some(p) = &c.pipeline else { return out };
    if !p.created {
        let _ = writeln!(
            out,
            "The configuration is valid, but no pipeline would be created: {}",
            p.not_created_reason.as_deref().unwrap_or("no jobs")
        );
        return out;
    }
    let _ = writeln!(out, "The configuration is valid.");
    for (i, stage) in p.stages.iter().enumerate() {
        let jobs: Vec<&Job> = p.jobs.iter().filter(|j| j.stage_idx == i).collect();
        if jobs.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\nstage {stage}:");
        for j in jobs {
            let mut notes = Vec::new();
            if j.when != crate::model::When::OnSuccess {
                notes.push(format!("when: {}", j.when.as_str()));
            }
            if j.allow_failure {
                notes.push("allow_failure".to_owned());
            }
            if let Some(n) = &j.needs {
                notes.push(format!(
                    "needs: [{}]",
                    n.iter()
                        .map(|n| n.job.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if let Some(s) = &j.start_in {
                notes.push(format!("start_in: {s}"));
            }
            if notes.is_empty() {
                let _ = writeln!(out, "  {}", j.name);
            } else {
                let _ = writeln!(out, "  {}  ({})", j.name, notes.join("; "));
            }
        }
    }
    out
}

fn render_diagnostic(out: &mut String, level: &str, d: &Diagnostic, sources: &SourceMap) {
    let _ = writeln!(out, "{level}: {}", d.message);
    render_place(out, d, sources);
    if let Some(hint) = &d.hint {
        let _ = writeln!(out, "  hint: {hint}");
    }
}

fn render_place(out: &mut String, d: &Diagnostic, sources: &SourceMap) {
    let Some(pos) = d.pos else { return };
    let Some(loc) = sources.location(pos) else {
        return;
    };
    let _ = writeln!(out, "  --> {loc}");
    if let Some(line) = sources.line_text(pos) {
        let num = pos.line.to_string();
        let pad = " ".repeat(num.len());
        let _ = writeln!(out, "{pad} |");
        let _ = writeln!(out, "{num} | {line}");
        let col = (pos.col as usize)
            .saturating_sub(1)
            .min(line.chars().count());
        let _ = writeln!(out, "{pad} | {}^", " ".repeat(col));
    }
}
