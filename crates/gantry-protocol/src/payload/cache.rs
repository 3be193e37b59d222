//! `cache` of the job payload (§3.5.9). Cache content never goes through the API.

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;
use crate::payload::when::When;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `cache[].policy`; empty means `pull-push`.
    #[derive(Default)]
    pub enum CachePolicy ("cache policy", empty = PullPush) {
        /// Download only.
        Pull = "pull",
        /// Upload only.
        Push = "push",
        /// Download before and upload after the job.
        #[default]
        PullPush = "pull-push",
    }
}

/// One entry of `cache` (§3.5.9).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cache {
    /// Cache key; the server may append `-<index>` and `-protected`/`-non_protected`.
    #[serde(deserialize_with = "zero_if_null")]
    pub key: String,
    /// Include untracked files.
    #[serde(deserialize_with = "zero_if_null")]
    pub untracked: bool,
    /// Paths (globs).
    #[serde(deserialize_with = "zero_if_null")]
    pub paths: Vec<String>,
    /// Pull/push policy.
    #[serde(deserialize_with = "zero_if_null")]
    pub policy: CachePolicy,
    /// When to save.
    #[serde(deserialize_with = "zero_if_null")]
    pub when: When,
    /// Keys to try when `key` misses (feature `fallback_cache_keys`).
    #[serde(deserialize_with = "zero_if_null")]
    pub fallback_keys: Vec<String>,
}
