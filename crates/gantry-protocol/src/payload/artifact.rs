//! `artifacts` of the job payload (§3.5.8): what the runner must collect and upload.

use serde::{Deserialize, Serialize};

use crate::artifact::{ArtifactFormat, ArtifactType, ArtifactUploadParams};
use crate::json::zero_if_null;
use crate::payload::when::When;

/// One entry of `artifacts` (§3.5.8): the archive entry (from `paths`/`untracked`) or a
/// report entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobArtifact {
    /// User `artifacts:name` (archive) or the type's default file name (report);
    /// may be `null`.
    pub name: Option<String>,
    /// Archive entry only; omitted when `null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untracked: Option<bool>,
    /// Paths (globs) to collect.
    #[serde(deserialize_with = "zero_if_null")]
    pub paths: Vec<String>,
    /// Archive entry only, and only when non-empty.
    #[serde(
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub exclude: Vec<String>,
    /// `null` means `on_success`; reports are `always`.
    pub when: Option<When>,
    /// e.g. `"1 week"`, `"never"`; `null` for the instance default.
    pub expire_in: Option<String>,
    /// `archive` or a report type.
    #[serde(deserialize_with = "zero_if_null")]
    pub artifact_type: ArtifactType,
    /// The format the type requires (§6.2).
    #[serde(deserialize_with = "zero_if_null")]
    pub artifact_format: ArtifactFormat,
}

impl JobArtifact {
    /// When to upload: `when`, or `on_success` when unset.
    pub fn effective_when(&self) -> When {
        self.when.unwrap_or_default()
    }

    /// The query parameters the runner sends when uploading this entry (§6.2).
    pub fn upload_params(&self) -> ArtifactUploadParams {
        ArtifactUploadParams {
            artifact_type: Some(self.artifact_type),
            artifact_format: Some(self.artifact_format),
            expire_in: self
                .expire_in
                .clone()
                .filter(|expire_in| !expire_in.is_empty()),
        }
    }
}
