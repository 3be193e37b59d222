//! The `info` object a runner sends about itself (§2.8) on register, verify, job
//! request and every job update.
//!
//! Named after gitlab-runner's `common.VersionInfo`, to keep it apart from the job
//! payload's [`RunnerInfo`](crate::RunnerInfo) (§3.5.3).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ProtocolError;
use crate::features::Features;
use crate::json::zero_if_null;

/// The `info` object (§2.8). String fields are omitted when empty (Go `omitempty`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VersionInfo {
    /// Program name, e.g. `gitlab-runner`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub name: String,
    /// e.g. `19.4.0`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub version: String,
    /// Short git sha.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub revision: String,
    /// Go `GOOS`: `linux`, `windows`, `darwin`, `freebsd`, …
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub platform: String,
    /// Go `GOARCH`: `amd64`, `arm64`, …
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub architecture: String,
    /// `shell`, `docker`, `docker-autoscaler`, `custom`, `instance`, … Empty on
    /// `POST /runners`.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub executor: String,
    /// `bash`, `sh`, `powershell`, `pwsh`. Rails does not declare it (ignored).
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub shell: String,
    /// What the runner supports (§8). Always sent.
    #[serde(deserialize_with = "zero_if_null")]
    pub features: Features,
    /// Executor configuration the server records. Always sent.
    #[serde(deserialize_with = "zero_if_null")]
    pub config: ConfigInfo,
    /// Runner labels; omitted when empty. See [`validate_labels`].
    #[serde(
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub labels: BTreeMap<String, String>,
}

/// `info.config` (§2.8).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigInfo {
    /// `gpus` from the docker executor configuration; `""` when unset.
    #[serde(deserialize_with = "zero_if_null")]
    pub gpus: String,
}

/// At most this many labels (§2.8).
pub const MAX_LABELS: usize = 32;

/// Checks runner labels against the rules of §2.8: at most [`MAX_LABELS`] entries, key
/// `^[a-zA-Z0-9_][a-zA-Z0-9._-]{2,64}$`, value `^[a-zA-Z0-9._-]{1,256}$`.
pub fn validate_labels(labels: &BTreeMap<String, String>) -> Result<(), ProtocolError> {
    if labels.len() > MAX_LABELS {
        let key = labels.keys().nth(MAX_LABELS).cloned().unwrap_or_default();
        return Err(ProtocolError::InvalidLabel {
            key,
            reason: "a runner has at most 32 labels",
        });
    }
    let label_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    for (key, value) in labels {
        let invalid = |reason| {
            Err(ProtocolError::InvalidLabel {
                key: key.clone(),
                reason,
            })
        };
        let first_ok = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || !key.chars().all(label_char) {
            return invalid(
                "keys start with a letter, digit or `_` and use only letters, digits, `.`, `_` and `-`",
            );
        }
        if !(3..=65).contains(&key.len()) {
            return invalid("keys are 3 to 65 characters long");
        }
        if value.is_empty() || value.len() > 256 || !value.chars().all(label_char) {
            return invalid("values are 1 to 256 letters, digits, `.`, `_` or `-`");
        }
    }
    Ok(())
}
