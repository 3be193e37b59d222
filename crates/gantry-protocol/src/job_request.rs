//! Body of `POST /api/v4/jobs/request` (§3.1). The answers are a `201` with a
//! [`JobResponse`](crate::JobResponse), or a `204` carrying
//! [`header::LAST_UPDATE`](crate::header::LAST_UPDATE) (§3.2, §3.3).

use serde::{Deserialize, Serialize};

use crate::info::VersionInfo;
use crate::json::zero_if_null;

/// Body of `POST /api/v4/jobs/request` (§3.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobRequest {
    /// What the runner is and supports (§2.8).
    #[serde(deserialize_with = "zero_if_null")]
    pub info: VersionInfo,
    /// Runner authentication token (required).
    #[serde(deserialize_with = "zero_if_null")]
    pub token: String,
    /// Runner manager id (§1.3); omitted when empty.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub system_id: String,
    /// The last `X-GitLab-Last-Update` value received, echoed verbatim; omitted before
    /// the first one (§3.3).
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub last_update: String,
    /// Only when the executor supports sessions and `[session_server]` is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionInfo>,
}

/// `session` of a job request (§3.1): where GitLab reaches the runner's session /
/// terminal server. Exposed back as `runner_info.runner_session_url`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionInfo {
    /// Session server URL.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub url: String,
    /// PEM certificate of the session server.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub certificate: String,
    /// Bearer secret GitLab presents to the session server.
    #[serde(
        skip_serializing_if = "String::is_empty",
        deserialize_with = "zero_if_null"
    )]
    pub authorization: String,
}
