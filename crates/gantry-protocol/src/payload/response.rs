//! The job payload: `201` body of `POST /api/v4/jobs/request` (§3.5, example §3.6).
//!
//! Keys are declared in the order GitLab emits them. Fields GitLab sends as `null`
//! (`image`, `artifacts`, `entrypoint`, …) are `Option`s serialized as `null`; fields
//! GitLab omits (`steps` of a `run:` job, `secrets`, `inputs`, …) are `Option`s
//! skipped when `None`. Unknown keys are ignored; absent keys and `null` decode as the
//! zero value (§0.2).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ProtocolError;
use crate::json::{decode, zero_if_null};
use crate::payload::artifact::JobArtifact;
use crate::payload::cache::Cache;
use crate::payload::credential::Credential;
use crate::payload::dependency::Dependency;
use crate::payload::features::JobFeatures;
use crate::payload::git_info::GitInfo;
use crate::payload::image::{Image, Service};
use crate::payload::input::JobInput;
use crate::payload::job_info::JobInfo;
use crate::payload::policy_options::{PolicyOptions, SuspendOptions};
use crate::payload::runner_info::RunnerInfo;
use crate::payload::step::{Hook, Step};
use crate::payload::variable::JobVariable;

/// The job payload (§3.5).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobResponse {
    /// Job id.
    #[serde(deserialize_with = "zero_if_null")]
    pub id: i64,
    /// Job token (`glcbt-…`, §1.1).
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
    /// Project setting: default `GIT_STRATEGY` is `fetch` when true, `clone` when false.
    #[serde(deserialize_with = "zero_if_null")]
    pub allow_git_fetch: bool,
    /// §3.5.1.
    #[serde(deserialize_with = "zero_if_null")]
    pub job_info: JobInfo,
    /// §3.5.2.
    #[serde(deserialize_with = "zero_if_null")]
    pub git_info: GitInfo,
    /// §3.5.3.
    #[serde(deserialize_with = "zero_if_null")]
    pub runner_info: RunnerInfo,
    /// Sorted and expanded by the server (§3.5.4).
    #[serde(deserialize_with = "zero_if_null")]
    pub variables: Vec<JobVariable>,
    /// Omitted when `run` is present (§3.5.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<Step>>,
    /// §3.5.6.
    #[serde(deserialize_with = "zero_if_null")]
    pub hooks: Vec<Hook>,
    /// `null` when the job has no image (§3.5.7).
    pub image: Option<Image>,
    /// §3.5.7.
    #[serde(deserialize_with = "zero_if_null")]
    pub services: Vec<Service>,
    /// `null` when the job defines no artifacts (§3.5.8).
    pub artifacts: Option<Vec<JobArtifact>>,
    /// §3.5.9.
    #[serde(deserialize_with = "zero_if_null")]
    pub cache: Vec<Cache>,
    /// §3.5.10.
    #[serde(deserialize_with = "zero_if_null")]
    pub credentials: Vec<Credential>,
    /// §3.5.11.
    #[serde(deserialize_with = "zero_if_null")]
    pub features: JobFeatures,
    /// §3.5.12.
    #[serde(deserialize_with = "zero_if_null")]
    pub dependencies: Vec<Dependency>,
    /// CI Steps jobs only: a JSON **string** holding a JSON array of step definitions
    /// (§3.5.13); decode with [`JobResponse::run_steps`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// EE secrets, keyed by variable name, each with one provider key (§3.5.14). Kept
    /// as opaque JSON: the secrets resolver owns its schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Map<String, Value>>,
    /// EE (§3.5.15).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_options: Option<PolicyOptions>,
    /// Job inputs (§3.5.16).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<JobInput>>,
    /// Experimental (§3.5.17).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspend_options: Option<SuspendOptions>,
}

/// Decodes a job payload (the `201` body of `POST /jobs/request`).
///
/// Unknown fields are ignored; a known field of the wrong type is an error naming its
/// JSON path (e.g. `` at `variables[3].public` ``) with line and column. Never panics.
pub fn parse_job_response(bytes: &[u8]) -> Result<JobResponse, ProtocolError> {
    decode("job payload", bytes)
}

impl JobResponse {
    /// The step definitions of a CI Steps job (§3.5.13): `None` when `run` is absent,
    /// else the decoded array (each element opaque JSON, owned by the step runner).
    pub fn run_steps(&self) -> Result<Option<Vec<Value>>, ProtocolError> {
        let Some(run) = &self.run else {
            return Ok(None);
        };
        let steps = serde_json::from_str::<Vec<Value>>(run).map_err(|error| {
            ProtocolError::InvalidRunSteps {
                message: error.to_string(),
            }
        })?;
        Ok(Some(steps))
    }

    /// The variable named `key`, if the server sent one: its last definition, the one
    /// the runner uses ([`crate::variable`]).
    pub fn variable(&self, key: &str) -> Option<&JobVariable> {
        self.variables
            .iter()
            .rev()
            .find(|variable| variable.key == key)
    }
}
