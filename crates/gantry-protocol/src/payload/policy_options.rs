//! `policy_options` (EE, §3.5.15) and `suspend_options` (experimental, §3.5.17).

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;

/// `policy_options` (EE, §3.5.15): the job comes from a pipeline execution policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyOptions {
    /// Whether the job was injected by an execution policy.
    #[serde(deserialize_with = "zero_if_null")]
    pub execution_policy_job: bool,
    /// Policy name.
    #[serde(deserialize_with = "zero_if_null")]
    pub policy_name: String,
    /// Whether user variables may override policy variables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_variables_override_allowed: Option<bool>,
    /// Variables exempt from the override rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_variables_override_exceptions: Option<Vec<String>>,
}

/// `suspend_options` (experimental, runtime environments, §3.5.17; server emission
/// unconfirmed). All keys optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SuspendOptions {
    /// Suspend the environment when the job succeeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspend_on_success: Option<bool>,
    /// Suspend the environment when the job fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspend_on_failure: Option<bool>,
    /// Key of the runtime environment; echoed in job updates (§4.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_environment_key: Option<String>,
}
