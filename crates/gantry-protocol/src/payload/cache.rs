//! `cache` of the job payload (§3.5.9). Cache content never goes through the API.

use serde::{Deserialize, Serialize};

use crate::ProtocolError;
use crate::json::zero_if_null;
use crate::payload::when::When;

/// `cache[].policy` (§3.5.9). GitLab accepts `pull`, `push`, `pull-push` or a CI/CD
/// variable (`policy: $CACHE_POLICY`) and passes a variable through unexpanded: the runner
/// expands it with the job's variables (gitlab-runner's `ExpandValue`) and only then
/// checks it. So this set is open on the wire: any text containing `$` decodes as
/// [`CachePolicy::Variable`]; anything else must be a known policy. Empty means
/// `pull-push`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum CachePolicy {
    /// Download only.
    Pull,
    /// Upload only.
    Push,
    /// Download before and upload after the job.
    #[default]
    PullPush,
    /// A variable reference such as `$CACHE_POLICY` or `${CACHE_POLICY}`, as sent.
    Variable(String),
}

impl CachePolicy {
    /// The known policies, in the order the spec lists them.
    pub const ALL: &'static [Self] = &[Self::Pull, Self::Push, Self::PullPush];

    /// The wire strings of [`Self::ALL`].
    pub const NAMES: &'static [&'static str] = &["pull", "push", "pull-push"];

    /// The wire string (the reference text for [`CachePolicy::Variable`]).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pull => "pull",
            Self::Push => "push",
            Self::PullPush => "pull-push",
            Self::Variable(text) => text,
        }
    }

    /// Whether the runner still has to expand this policy.
    pub fn is_variable(&self) -> bool {
        matches!(self, Self::Variable(_))
    }
}

impl std::str::FromStr for CachePolicy {
    type Err = ProtocolError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "" | "pull-push" => Ok(Self::PullPush),
            "pull" => Ok(Self::Pull),
            "push" => Ok(Self::Push),
            text if text.contains('$') => Ok(Self::Variable(text.to_owned())),
            _ => Err(ProtocolError::UnknownValue {
                kind: "cache policy",
                value: value.to_owned(),
                expected: &["pull", "push", "pull-push", "$VARIABLE"],
            }),
        }
    }
}

impl std::fmt::Display for CachePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for CachePolicy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for CachePolicy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl serde::de::Visitor<'_> for Visitor {
            type Value = CachePolicy;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a cache policy string")
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<CachePolicy, E> {
                value.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_str(Visitor)
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
