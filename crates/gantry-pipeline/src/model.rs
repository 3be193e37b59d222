//! The compiled pipeline: what the YAML processor hands to the coordinator and to
//! `gantry lint`. Every value here is validated; nothing refers back to YAML nodes.
//!
//! The types read back what they serialize: the coordinator stores each compiled [`Job`] as
//! JSON (its `jobs.spec`) and reads it as this same type. A field an older row lacks takes
//! its default (`#[serde(default)]`; `expand` and `artifacts` default to true, as written
//! YAML does); [`Job::pos`] is not stored.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::yaml::Pos;

/// A YAML variable after stringification (`VAR: 012` is `"10"`, as GitLab does).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variable {
    pub value: String,
    /// `expand: false` makes the variable raw (never expanded).
    #[serde(default = "yes")]
    pub expand: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Variable {
    pub fn plain(value: impl Into<String>) -> Self {
        Self {
            value: value.into(),
            expand: true,
            description: None,
            options: Vec::new(),
        }
    }
}

pub type Variables = IndexMap<String, Variable>;

fn yes() -> bool {
    true
}

/// Job-level `when`, after rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum When {
    #[default]
    OnSuccess,
    OnFailure,
    Always,
    Manual,
    Delayed,
}

impl When {
    pub fn as_str(self) -> &'static str {
        match self {
            When::OnSuccess => "on_success",
            When::OnFailure => "on_failure",
            When::Always => "always",
            When::Manual => "manual",
            When::Delayed => "delayed",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "on_success" => When::OnSuccess,
            "on_failure" => When::OnFailure,
            "always" => When::Always,
            "manual" => When::Manual,
            "delayed" => When::Delayed,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Need {
    pub job: String,
    #[serde(default = "yes")]
    pub artifacts: bool,
    #[serde(default)]
    pub optional: bool,
}

/// `needs` entries that refer to other pipelines or projects. Kept for the coordinator; a
/// local pipeline cannot satisfy them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct CrossNeed {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(rename = "ref")]
    pub ref_: Option<String>,
    #[serde(default = "yes")]
    pub artifacts: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Image {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_platform: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pull_policy: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Service {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub variables: Variables,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_platform: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pull_policy: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArtifactsWhen {
    #[default]
    OnSuccess,
    OnFailure,
    Always,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Artifacts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub paths: Vec<String>,
    pub exclude: Vec<String>,
    pub untracked: bool,
    pub when: ArtifactsWhen,
    /// As written (`"1 week"`, `"never"`); validated as a duration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_in: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expose_as: Option<String>,
    /// `access` (`all` | `developer` | `maintainer` | `none`); `public: false` maps to `developer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// Report type (`junit`, `dotenv`, ...) → paths.
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub reports: IndexMap<String, Vec<String>>,
    /// `reports:coverage_report`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coverage_report: Option<CoverageReport>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoverageReport {
    pub coverage_format: String,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKey {
    /// A literal key (variables expanded by the runner).
    Literal(String),
    /// `key: {files: [...], prefix: ...}`, computed at pipeline creation from file contents.
    Files {
        files: Vec<String>,
        prefix: Option<String>,
    },
    /// `key: {files_commits: [...], prefix: ...}`.
    FilesCommits {
        files: Vec<String>,
        prefix: Option<String>,
    },
}

impl Default for CacheKey {
    /// GitLab's key when none is given.
    fn default() -> Self {
        CacheKey::Literal("default".to_owned())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Cache {
    pub key: CacheKey,
    pub paths: Vec<String>,
    pub untracked: bool,
    pub unprotect: bool,
    /// `pull-push` | `pull` | `push`, or a `$VARIABLE` resolved by the runner.
    pub policy: String,
    pub when: ArtifactsWhen,
    pub fallback_keys: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Retry {
    pub max: u8,
    /// Failure reasons (or `always`) that allow a retry.
    pub when: Vec<String>,
    pub exit_codes: Vec<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Environment {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_stop: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_stop_in: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment_tier: Option<String>,
}

impl Environment {
    /// `action:`, `start` when not given.
    pub fn action(&self) -> &str {
        if self.action.is_empty() {
            "start"
        } else {
            &self.action
        }
    }
}

/// Downstream pipeline trigger (bridge job). The coordinator creates the downstream pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Trigger {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Child pipeline include items, as written (JSON form).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    pub forward_yaml_variables: bool,
    pub forward_pipeline_variables: bool,
    /// `trigger:inputs` of a multi-project trigger: the downstream pipeline's inputs
    /// (a JSON object).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<serde_json::Value>,
}

/// A job after every merge, expansion and rule: one row of the pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Job {
    pub name: String,
    pub stage: String,
    /// Index into [`Pipeline::stages`].
    pub stage_idx: usize,
    pub when: When,
    pub allow_failure: bool,
    /// `allow_failure: {exit_codes: [...]}` criteria (only when `allow_failure` is false).
    pub allow_failure_exit_codes: Vec<i64>,
    /// `None` = stage-ordered; `Some([])` = `needs: []`.
    pub needs: Option<Vec<Need>>,
    pub cross_needs: Vec<CrossNeed>,
    /// `None` = artifacts of all jobs in earlier stages (or of `needs`).
    pub dependencies: Option<Vec<String>>,
    pub before_script: Vec<String>,
    pub script: Vec<String>,
    pub after_script: Vec<String>,
    pub pre_get_sources_script: Vec<String>,
    /// The job's own variables after all merging: job-level (after `extends`), matrix
    /// values and matched `rules:variables` on top. Globals are not included.
    pub variables: Variables,
    /// The global variables this job inherits (after `inherit:variables`).
    pub inherited_variables: Variables,
    pub tags: Vec<String>,
    pub image: Option<Image>,
    pub services: Vec<Service>,
    pub artifacts: Option<Artifacts>,
    pub caches: Vec<Cache>,
    pub retry: Retry,
    /// Text as written (`"5 minutes"`).
    pub start_in: Option<String>,
    /// Seconds.
    pub timeout: Option<u64>,
    pub interruptible: Option<bool>,
    pub coverage: Option<String>,
    pub environment: Option<Environment>,
    pub resource_group: Option<String>,
    pub trigger: Option<Trigger>,
    pub release: Option<serde_json::Value>,
    pub secrets: Option<serde_json::Value>,
    pub id_tokens: Option<serde_json::Value>,
    /// `inputs:` (job inputs), in declaration order; `None` without the keyword.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<JobInput>>,
    pub manual_confirmation: Option<String>,
    /// Set on a Pages job (`pages: true`/a hash, or named `pages` without `pages: false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pages: Option<Pages>,
    /// `run:` (GitLab Functions): the validated step list, run by the runner's step
    /// runner instead of `before_script`/`script`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<serde_json::Value>,
    /// `parallel` instance (1-based) and total, when the job came from `parallel`.
    pub node_index: Option<u32>,
    pub node_total: Option<u32>,
    /// Name of the job as written before `parallel` expansion.
    pub group_name: String,
    /// Where the job is defined.
    #[serde(skip)]
    pub pos: Pos,
}

/// A Pages job's deployment (`Entry::Job#pages_job?`): the folder of its artifacts that
/// is the site (`pages:publish`, else `publish`, else `public`; GitLab adds it to
/// `artifacts:paths`), and `pages:path_prefix`/`pages:expire_in` as written (variables
/// are expanded by the coordinator).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Pages {
    pub publish: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_in: Option<String>,
}

/// `workflow:auto_cancel` after rules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoCancel {
    pub on_new_commit: String,
    pub on_job_failure: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    /// False when `workflow:rules` filtered the pipeline or no job remained.
    pub created: bool,
    /// Why the pipeline was not created (GitLab's message).
    pub not_created_reason: Option<String>,
    /// Declared stages in order, `.pre` first and `.post` last.
    pub stages: Vec<String>,
    /// Global YAML variables (including matched `workflow:rules:variables`).
    pub variables: Variables,
    pub name: Option<String>,
    pub auto_cancel: AutoCancel,
    pub jobs: Vec<Job>,
}

/// One of a job's `inputs:`: its default (of its type), and what a value given when the
/// job is run or retried must satisfy. The runner interpolates `${{ job.inputs.NAME }}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInput {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: JobInputType,
    pub default: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A job input's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobInputType {
    String,
    Number,
    Boolean,
    Array,
}

impl JobInputType {
    pub fn as_str(self) -> &'static str {
        match self {
            JobInputType::String => "string",
            JobInputType::Number => "number",
            JobInputType::Boolean => "boolean",
            JobInputType::Array => "array",
        }
    }
}
