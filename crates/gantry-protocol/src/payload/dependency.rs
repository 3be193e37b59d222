//! `dependencies` of the job payload (§3.5.12): jobs whose artifacts to download.

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;

/// One entry of `dependencies` (§3.5.12).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dependency {
    /// Dependency job id, for `GET /jobs/:id/artifacts`.
    #[serde(deserialize_with = "zero_if_null")]
    pub id: i64,
    /// Dependency job name.
    #[serde(deserialize_with = "zero_if_null")]
    pub name: String,
    /// Token to send as `JOB-TOKEN` when downloading: the running job's own token on
    /// current GitLab, the dependency's on older GitLab (§6.4).
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
    /// Omitted when the dependency has no available archive (some clients send `null`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts_file: Option<ArtifactsFile>,
}

/// `dependencies[].artifacts_file` (§3.5.12).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArtifactsFile {
    /// e.g. `artifacts.zip`.
    #[serde(deserialize_with = "zero_if_null")]
    pub filename: String,
    /// Bytes.
    #[serde(deserialize_with = "zero_if_null")]
    pub size: u64,
}
