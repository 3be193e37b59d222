//! `git_info` of the job payload (§3.5.2).

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `git_info.ref_type`.
    #[derive(Default)]
    pub enum RefType ("ref type") {
        /// A branch (also merge-request refs).
        #[default]
        Branch = "branch",
        /// A tag.
        Tag = "tag",
    }
}

wire_enum! {
    /// `git_info.repo_object_format`.
    #[derive(Default)]
    pub enum ObjectFormat ("repository object format") {
        /// SHA-1 object ids (the default when absent).
        #[default]
        Sha1 = "sha1",
        /// SHA-256 object ids.
        Sha256 = "sha256",
    }
}

/// `git_info` (§3.5.2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GitInfo {
    /// HTTP(S) clone URL with the job token embedded
    /// (`https://gitlab-ci-token:<job token>@host/path.git`).
    #[serde(deserialize_with = "zero_if_null")]
    pub repo_url: String,
    /// Branch or tag name (or merge-request ref name).
    #[serde(rename = "ref", deserialize_with = "zero_if_null")]
    pub git_ref: String,
    /// Commit to check out.
    #[serde(deserialize_with = "zero_if_null")]
    pub sha: String,
    /// Previous commit of the push (`0000…` when none).
    #[serde(deserialize_with = "zero_if_null")]
    pub before_sha: String,
    /// Branch or tag.
    #[serde(deserialize_with = "zero_if_null")]
    pub ref_type: RefType,
    /// Fetch refspecs; always starts with the persistent pipeline ref.
    #[serde(deserialize_with = "zero_if_null")]
    pub refspecs: Vec<String>,
    /// Shallow clone depth; 0 = full clone.
    #[serde(deserialize_with = "zero_if_null")]
    pub depth: i64,
    /// Object format of the repository.
    #[serde(deserialize_with = "zero_if_null")]
    pub repo_object_format: ObjectFormat,
    /// Whether the ref is protected; may be `null`.
    pub protected: Option<bool>,
}
