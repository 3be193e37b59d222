//! What the coordinator stores per job row (`jobs.spec`): the compiled
//! [`gantry_pipeline::Job`] as JSON, read back through [`JobModel`] (the pipeline model is
//! serialize-only), plus what the pipeline row has no column for: the stage list and
//! `workflow:auto_cancel` of the pipeline the job belongs to, resolved cache keys,
//! GitLab's "enqueue immediately" flag of a retried or played actionable job, and the
//! variables a user gave when playing a finished manual job again (a new row).
//!
//! The format is the coordinator's alone; the store treats it as text.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::environment::JobEnvironment;

use crate::processor::{
    AutoCancel, JobId, JobState, OnJobFailure, OnNewCommit, RetryPolicy, Status,
};

use super::error::{CoordinatorError, Result};

/// One `jobs.spec` value.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StoredSpec {
    /// The compiled job, as `gantry_pipeline::Job` serializes it.
    pub job: JobModel,
    /// Declared stages of the pipeline, in order.
    pub stages: Vec<String>,
    pub auto_cancel: StoredAutoCancel,
    /// `workflow:name`, expanded.
    #[serde(default)]
    pub pipeline_name: Option<String>,
    /// Cache keys resolved at creation (`key:files` digests), one per `caches` entry.
    #[serde(default)]
    pub cache_keys: Vec<String>,
    /// Skip the manual/delayed gate when next processed (a retried actionable job).
    #[serde(default)]
    pub enqueue_immediately: bool,
    /// Variables given when this attempt was started by a play of a finished manual job,
    /// as an older Gantry stored them (plain); see `manual_variables_sealed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manual_variables: Vec<(String, String)>,
    /// The same, sealed (`Coordinator::seal_variables`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_variables_sealed: Option<String>,
    /// `environment:` name and URL expanded at creation (GitLab persists the name).
    #[serde(default)]
    pub environment: Option<JobEnvironment>,
    /// This attempt's job input values that differ from their defaults (`job_inputs.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_values: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StoredAutoCancel {
    pub on_new_commit: String,
    pub on_job_failure: String,
}

impl StoredAutoCancel {
    pub fn to_processor(&self) -> AutoCancel {
        AutoCancel {
            on_new_commit: match self.on_new_commit.as_str() {
                "interruptible" => OnNewCommit::Interruptible,
                "none" => OnNewCommit::None,
                _ => OnNewCommit::Conservative,
            },
            on_job_failure: match self.on_job_failure.as_str() {
                "all" => OnJobFailure::All,
                _ => OnJobFailure::None,
            },
        }
    }
}

impl StoredSpec {
    /// The environment the store keeps for a new attempt of this job, as at creation.
    pub fn new_job_environment(&self) -> Option<gantry_store::NewJobEnvironment> {
        let model = self.job.environment.as_ref()?;
        self.environment.as_ref()?.to_new(model).ok()
    }

    pub fn parse(text: &str) -> Result<StoredSpec> {
        serde_json::from_str(text).map_err(|e| CoordinatorError::corrupt(format!("job spec: {e}")))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// A trigger (bridge) job: no runner ever runs it.
    pub fn is_bridge(&self) -> bool {
        self.job.trigger.is_some()
    }
}

/// `gantry_pipeline::When`, readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WhenModel {
    #[default]
    OnSuccess,
    OnFailure,
    Always,
    Manual,
    Delayed,
}

impl WhenModel {
    pub fn to_model(self) -> gantry_pipeline::When {
        match self {
            WhenModel::OnSuccess => gantry_pipeline::When::OnSuccess,
            WhenModel::OnFailure => gantry_pipeline::When::OnFailure,
            WhenModel::Always => gantry_pipeline::When::Always,
            WhenModel::Manual => gantry_pipeline::When::Manual,
            WhenModel::Delayed => gantry_pipeline::When::Delayed,
        }
    }
    pub fn as_str(self) -> &'static str {
        self.to_model().as_str()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct VariableModel {
    pub value: String,
    #[serde(default = "yes")]
    pub expand: bool,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct NeedModel {
    pub job: String,
    #[serde(default = "yes")]
    pub artifacts: bool,
    #[serde(default)]
    pub optional: bool,
}

/// `gantry_pipeline::CrossNeed`, readable.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct CrossNeedModel {
    pub project: Option<String>,
    pub pipeline: Option<String>,
    pub job: Option<String>,
    /// `needs:project:ref`.
    #[serde(rename = "ref")]
    pub ref_: Option<String>,
    #[serde(default = "yes")]
    pub artifacts: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ImageModel {
    pub name: String,
    pub entrypoint: Option<Vec<String>>,
    pub docker_user: Option<String>,
    pub docker_platform: Option<String>,
    pub pull_policy: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ServiceModel {
    pub name: String,
    pub alias: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    pub command: Option<Vec<String>>,
    pub variables: IndexMap<String, VariableModel>,
    pub docker_user: Option<String>,
    pub docker_platform: Option<String>,
    pub pull_policy: Vec<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ArtifactsWhenModel {
    #[default]
    OnSuccess,
    OnFailure,
    Always,
}

impl ArtifactsWhenModel {
    pub fn to_wire(self) -> gantry_protocol::When {
        match self {
            ArtifactsWhenModel::OnSuccess => gantry_protocol::When::OnSuccess,
            ArtifactsWhenModel::OnFailure => gantry_protocol::When::OnFailure,
            ArtifactsWhenModel::Always => gantry_protocol::When::Always,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ArtifactsModel {
    pub name: Option<String>,
    pub paths: Vec<String>,
    pub exclude: Vec<String>,
    pub untracked: bool,
    pub when: ArtifactsWhenModel,
    pub expire_in: Option<String>,
    pub reports: IndexMap<String, Vec<String>>,
    pub coverage_report: Option<CoverageReportModel>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct CoverageReportModel {
    pub coverage_format: String,
    pub path: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CacheKeyModel {
    Literal(String),
    Files {
        files: Vec<String>,
        prefix: Option<String>,
    },
    FilesCommits {
        files: Vec<String>,
        prefix: Option<String>,
    },
}

impl Default for CacheKeyModel {
    fn default() -> Self {
        CacheKeyModel::Literal("default".to_owned())
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct CacheModel {
    pub key: CacheKeyModel,
    pub paths: Vec<String>,
    pub untracked: bool,
    pub unprotect: bool,
    pub policy: String,
    pub when: ArtifactsWhenModel,
    pub fallback_keys: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RetryModel {
    pub max: u8,
    pub when: Vec<String>,
    pub exit_codes: Vec<i64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct EnvironmentModel {
    pub name: String,
    pub url: Option<String>,
    pub action: String,
    pub on_stop: Option<String>,
    pub auto_stop_in: Option<String>,
    pub deployment_tier: Option<String>,
}

impl EnvironmentModel {
    /// `action:`, `start` when not given.
    pub fn action(&self) -> &str {
        if self.action.is_empty() {
            "start"
        } else {
            &self.action
        }
    }
}

/// `gantry_pipeline::Pages`, readable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PagesModel {
    pub publish: String,
    pub path_prefix: Option<String>,
    pub expire_in: Option<String>,
}

/// The readable part of a serialized `gantry_pipeline::Job`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct JobModel {
    pub name: String,
    pub stage: String,
    pub stage_idx: usize,
    pub when: WhenModel,
    pub allow_failure: bool,
    pub allow_failure_exit_codes: Vec<i64>,
    pub needs: Option<Vec<NeedModel>>,
    /// `needs:pipeline:job` and `needs:project`.
    pub cross_needs: Vec<CrossNeedModel>,
    pub dependencies: Option<Vec<String>>,
    pub before_script: Vec<String>,
    pub script: Vec<String>,
    pub after_script: Vec<String>,
    pub pre_get_sources_script: Vec<String>,
    pub variables: IndexMap<String, VariableModel>,
    pub inherited_variables: IndexMap<String, VariableModel>,
    pub tags: Vec<String>,
    pub image: Option<ImageModel>,
    pub services: Vec<ServiceModel>,
    pub artifacts: Option<ArtifactsModel>,
    pub caches: Vec<CacheModel>,
    pub retry: RetryModel,
    pub start_in: Option<String>,
    pub timeout: Option<u64>,
    pub interruptible: Option<bool>,
    pub coverage: Option<String>,
    pub environment: Option<EnvironmentModel>,
    /// `id_tokens:`: variable name → `{aud: string | [string]}`.
    pub id_tokens: Option<serde_json::Value>,
    /// `secrets:` as written (EE; see `job_secrets.rs`).
    pub secrets: Option<serde_json::Value>,
    pub resource_group: Option<String>,
    pub trigger: Option<serde_json::Value>,
    /// A Pages job's site (`gantry_pipeline::Pages`), `publish` and `path_prefix`
    /// expanded at creation (`pages.rs`).
    pub pages: Option<PagesModel>,
    /// `release:` as written (`releases.rs`).
    pub release: Option<serde_json::Value>,
    /// `run:` steps (older rows have none).
    #[serde(default)]
    pub run: Option<serde_json::Value>,
    /// `inputs:` (job inputs; older rows have none).
    #[serde(default)]
    pub inputs: Option<Vec<gantry_pipeline::JobInput>>,
    pub node_index: Option<u32>,
    pub node_total: Option<u32>,
    pub group_name: String,
}

impl JobModel {
    /// From the compiled job, through its JSON (the only way in: the model is
    /// serialize-only).
    pub fn from_compiled(job: &gantry_pipeline::Job) -> Result<JobModel> {
        let value = serde_json::to_value(job)
            .map_err(|e| CoordinatorError::corrupt(format!("compiled job: {e}")))?;
        serde_json::from_value(value)
            .map_err(|e| CoordinatorError::corrupt(format!("compiled job: {e}")))
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::from_model(&gantry_pipeline::Retry {
            max: self.retry.max,
            when: self.retry.when.clone(),
            exit_codes: self.retry.exit_codes.clone(),
        })
    }

    /// The configuration part of a processor job row; runtime fields are the caller's.
    pub fn job_state(&self, id: JobId, status: Status) -> JobState {
        JobState {
            id,
            name: self.name.clone(),
            stage_idx: self.stage_idx,
            status,
            when: self.when.to_model(),
            allow_failure: self.allow_failure,
            allow_failure_exit_codes: if self.allow_failure {
                Vec::new()
            } else {
                self.allow_failure_exit_codes.clone()
            },
            needs: self
                .needs
                .as_ref()
                .map(|ns| ns.iter().map(|n| n.job.clone()).collect()),
            retry: self.retry_policy(),
            start_in: self
                .start_in
                .as_deref()
                .and_then(gantry_pipeline::duration::parse_duration),
            timeout: self.timeout,
            interruptible: self.interruptible.unwrap_or(false),
            resource_group: self.resource_group.clone(),
            attempt: 1,
            retried: false,
            enqueue_immediately: false,
            exit_code: None,
            failure_reason: None,
            graceful_cancel: false,
            effective_timeout: None,
            queued_at: None,
            scheduled_at: None,
            started_at: None,
            finished_at: None,
            updated_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_compiled_job_back() {
        struct One;
        impl gantry_pipeline::Loader for One {
            fn read(
                &self,
                _: &str,
            ) -> std::result::Result<Option<String>, gantry_pipeline::ReadError> {
                Ok(Some(
                    "variables: {G: g}\nbuild:\n  image: {name: ruby, entrypoint: ['']}\n  script: [make]\n  needs: []\n  cache: {key: {files: [Gemfile.lock]}, paths: [vendor]}\n  artifacts: {paths: [out], reports: {dotenv: build.env}, expire_in: 1 week}\n  retry: {max: 2, when: [script_failure]}\n  timeout: 10m\n  variables: {A: {value: x, expand: false}}\n"
                        .to_owned(),
                ))
            }
            fn files(&self) -> Vec<String> {
                vec![".gitlab-ci.yml".into(), "Gemfile.lock".into()]
            }
        }
        let ctx =
            gantry_pipeline::Context::new(&gantry_pipeline::PipelineInfo::default(), &[], None);
        let compiled = gantry_pipeline::compile(&gantry_pipeline::Options::default(), &ctx, &One);
        let job = &compiled.pipeline.as_ref().expect("valid").jobs[0];
        let m = JobModel::from_compiled(job).expect("readable");
        assert_eq!(m.name, "build");
        assert_eq!(m.script, ["make"]);
        assert_eq!(m.timeout, Some(600));
        assert!(m.needs.as_ref().is_some_and(Vec::is_empty));
        assert!(!m.variables["A"].expand);
        assert_eq!(m.inherited_variables["G"].value, "g");
        assert!(
            matches!(&m.caches[0].key, CacheKeyModel::Files { files, .. } if files == &["Gemfile.lock"])
        );
        let a = m.artifacts.as_ref().expect("artifacts");
        assert_eq!(a.reports["dotenv"], ["build.env"]);
        assert_eq!(a.expire_in.as_deref(), Some("1 week"));
        assert_eq!(m.retry.max, 2);
        assert_eq!(
            m.image.as_ref().and_then(|i| i.entrypoint.clone()),
            Some(vec![String::new()])
        );
    }
}
