//! [`StepResult`]: what a step did, as the step-runner's `step-results.json` writes it
//! (protobuf JSON, lowerCamelCase), plus what GitLab's lacks: when each step started and
//! ended, why it failed, and the commit a git reference resolved to.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::definition::Spec;

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Running,
    Success,
    Failure,
    Cancelled,
}

/// Where a step came from (`Step.Reference`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultReference {
    /// `local`, `git`, `oci`, `builtin`, or `script` for a `script:` step.
    pub protocol: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The path (local) or directory in the repository (git).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// The revision as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The commit the revision resolved to (Gantry).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// The invocation, its expressions expanded (`Step`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResultStep {
    pub name: String,
    pub step: ResultReference,
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub inputs: Map<String, Value>,
}

/// An `exec` step's process.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecResult {
    pub command: Vec<String>,
    pub work_dir: String,
    pub exit_code: i32,
}

/// What one step did; a `run` step's children in `sub_step_results`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepResult {
    pub step: ResultStep,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<Spec>,
    pub status: Status,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub outputs: Map<String, Value>,
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub exports: IndexMap<String, String>,
    /// The definition's `env`, expanded.
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_result: Option<ExecResult>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sub_step_results: Vec<StepResult>,
    /// RFC 3339, UTC (Gantry).
    pub started_at: String,
    /// RFC 3339, UTC (Gantry).
    pub ended_at: String,
    /// Why the step failed (Gantry): the first problem, the step's own or its child's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl StepResult {
    /// The exit code of the process that failed the step, if one did.
    pub fn failed_exit_code(&self) -> Option<i32> {
        if self.status != Status::Failure {
            return None;
        }
        self.sub_step_results
            .iter()
            .rev()
            .find_map(StepResult::failed_exit_code)
            .or_else(|| {
                self.exec_result
                    .as_ref()
                    .map(|e| e.exit_code)
                    .filter(|c| *c != 0)
            })
    }

    /// Each step of the tree with its depth, in execution order.
    pub fn walk(&self) -> Vec<(usize, &StepResult)> {
        let mut out = Vec::new();
        fn go<'a>(r: &'a StepResult, depth: usize, out: &mut Vec<(usize, &'a StepResult)>) {
            out.push((depth, r));
            for c in &r.sub_step_results {
                go(c, depth + 1, out);
            }
        }
        go(self, 0, &mut out);
        out
    }
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    gantry_protocol::time::rfc3339_millis(gantry_protocol::time::now_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let now = now_rfc3339();
        assert_eq!(now.len(), "2026-11-27T14:00:00.123Z".len(), "{now}");
        assert!(now.ends_with('Z') && now.as_bytes()[10] == b'T', "{now}");
    }
}
