//! `image` and `services` of the job payload (§3.5.7).
//!
//! Two types: GitLab never sends `alias`, `command` or `variables` on `image`, so
//! [`Image`] has no such keys and a payload round-trips exactly.

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;
use crate::payload::executor_opts::ExecutorOptions;
use crate::payload::variable::JobVariable;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `pull_policy` entries.
    pub enum PullPolicy ("pull policy") {
        /// Always pull.
        Always = "always",
        /// Pull when not present locally.
        IfNotPresent = "if-not-present",
        /// Never pull.
        Never = "never",
    }
}

wire_enum! {
    /// `ports[].protocol`. gitlab-runner defaults an absent protocol to `http`.
    #[derive(Default)]
    pub enum PortProtocol ("port protocol", empty = Http) {
        /// Plain HTTP.
        #[default]
        Http = "http",
        /// HTTPS.
        Https = "https",
    }
}

/// `image` (§3.5.7); the payload's `image` is `null` when the job has none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Image {
    /// Image reference (may contain variables the runner expands).
    #[serde(deserialize_with = "zero_if_null")]
    pub name: String,
    /// Entrypoint override; `null` when not set.
    pub entrypoint: Option<Vec<String>>,
    /// Exposed ports.
    #[serde(deserialize_with = "zero_if_null")]
    pub ports: Vec<Port>,
    /// Executor-specific options; unsupported keys are recorded, see
    /// [`ExecutorOptions::check`].
    #[serde(deserialize_with = "zero_if_null")]
    pub executor_opts: ExecutorOptions,
    /// Pull policies; `null` when not set.
    pub pull_policy: Option<Vec<PullPolicy>>,
}

/// One entry of `services` (§3.5.7): the image keys plus `alias`, `command` and
/// `variables`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Service {
    /// Image reference.
    #[serde(deserialize_with = "zero_if_null")]
    pub name: String,
    /// Entrypoint override; `null` when not set.
    pub entrypoint: Option<Vec<String>>,
    /// Exposed ports.
    #[serde(deserialize_with = "zero_if_null")]
    pub ports: Vec<Port>,
    /// Executor-specific options.
    #[serde(deserialize_with = "zero_if_null")]
    pub executor_opts: ExecutorOptions,
    /// Pull policies; `null` when not set.
    pub pull_policy: Option<Vec<PullPolicy>>,
    /// One or more aliases separated by commas or spaces (several need feature
    /// `service_multiple_aliases`); see [`Service::aliases`].
    pub alias: Option<String>,
    /// Command override; `null` when not set.
    pub command: Option<Vec<String>>,
    /// Service-specific variables (feature `service_variables`).
    #[serde(deserialize_with = "zero_if_null")]
    pub variables: Vec<JobVariable>,
}

impl Service {
    /// The aliases, split on commas and whitespace.
    pub fn aliases(&self) -> Vec<&str> {
        self.alias
            .as_deref()
            .unwrap_or("")
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|alias| !alias.is_empty())
            .collect()
    }
}

/// One entry of `ports` (§3.5.7).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Port {
    /// Port number.
    #[serde(deserialize_with = "zero_if_null")]
    pub number: u16,
    /// `http` or `https`.
    #[serde(deserialize_with = "zero_if_null")]
    pub protocol: PortProtocol,
    /// Port name.
    #[serde(deserialize_with = "zero_if_null")]
    pub name: String,
}
