//! `credentials` of the job payload (§3.5.10).

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;

/// The only credential type gitlab-runner uses.
pub const CREDENTIAL_TYPE_REGISTRY: &str = "registry";

/// One entry of `credentials` (§3.5.10): container registry / dependency proxy login.
/// `type` stays a string: the runner ignores types other than `registry`, and a newer
/// GitLab may send some.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Credential {
    /// `registry`.
    #[serde(rename = "type", deserialize_with = "zero_if_null")]
    pub kind: String,
    /// Registry host\[:port\].
    #[serde(deserialize_with = "zero_if_null")]
    pub url: String,
    /// `gitlab-ci-token`.
    #[serde(deserialize_with = "zero_if_null")]
    pub username: String,
    /// The job token.
    #[serde(deserialize_with = "zero_if_null")]
    pub password: String,
}

impl Credential {
    /// Whether this is a registry credential (the only kind the runner uses).
    pub fn is_registry(&self) -> bool {
        self.kind == CREDENTIAL_TYPE_REGISTRY
    }
}
