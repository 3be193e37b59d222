//! `features` of the job payload (§3.5.11): what the server tells the runner.

use serde::{Deserialize, Serialize};

use crate::failure_reason::FailureReason;
use crate::json::zero_if_null;

/// `features` (server → runner, §3.5.11).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobFeatures {
    /// When false the runner emits no `section_start`/`section_end` markers of its own.
    #[serde(deserialize_with = "zero_if_null")]
    pub trace_sections: bool,
    /// Failure reasons this server accepts. Kept as strings: GitLab adds reasons
    /// often, and an unknown one must not make the payload undecodable. Use
    /// [`FailureReason::negotiate`] to pick what to send.
    #[serde(deserialize_with = "zero_if_null")]
    pub failure_reasons: Vec<String>,
    /// Extra token prefixes to mask in the log (server emission unconfirmed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_mask_prefixes: Option<Vec<String>>,
    /// OpenTelemetry export settings (server emission unconfirmed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<JobTracing>,
}

impl JobFeatures {
    /// The reason to send for `reason` given this server's `failure_reasons` (§4.3).
    pub fn failure_reason_for(&self, reason: FailureReason) -> FailureReason {
        reason.negotiate(&self.failure_reasons)
    }
}

/// `features.tracing` (§3.5.11).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobTracing {
    /// Trace id to continue.
    #[serde(deserialize_with = "zero_if_null")]
    pub trace_id: String,
    /// Parent span id.
    #[serde(deserialize_with = "zero_if_null")]
    pub span_parent_id: String,
    /// Where to export.
    #[serde(deserialize_with = "zero_if_null")]
    pub otel_endpoints: Vec<OtelEndpoint>,
}

/// `features.tracing.otel_endpoints[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OtelEndpoint {
    /// OTLP endpoint URL.
    #[serde(deserialize_with = "zero_if_null")]
    pub url: String,
    /// Authentication, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<OtelAuth>,
}

/// `features.tracing.otel_endpoints[].auth`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OtelAuth {
    /// Authentication type, e.g. `http_bearer_gcp_oidc`.
    #[serde(rename = "type", deserialize_with = "zero_if_null")]
    pub kind: String,
    /// Settings of the `http_bearer_gcp_oidc` type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_bearer_gcp_oidc: Option<GcpOidcAuth>,
}

/// `auth.http_bearer_gcp_oidc`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GcpOidcAuth {
    /// Token audience.
    #[serde(deserialize_with = "zero_if_null")]
    pub audience: String,
}
