//! `gantry-protocol`: the GitLab Runner API on the wire (`shared/spec/runner-api.md`).
//!
//! Request and response bodies, header names and values, and the small text formats
//! of the runner ⇄ coordinator link: registration (§2), job request and payload (§3),
//! job update (§4), trace (§5), artifacts (§6). Both the coordinator and the runner
//! use these types; nothing else in the workspace derives serde for this link.
//!
//! Decoding follows §0.2: unknown fields are ignored, absent fields and `null` are the
//! zero value, and a known field of the wrong type is a [`ProtocolError`] naming its
//! JSON path ([`parse_job_response`], [`parse_json`]). No HTTP client or server here.
//!
//! Also no I/O and no clock; the only dependencies are serde, serde_json,
//! serde_path_to_error and thiserror. Keys GitLab sends as `null` are `Option`s serialized
//! as `null`, keys it omits are skipped, in GitLab's key order: the §3.6 example
//! (`tests/fixtures/job_payload.json`) round-trips exactly. Closed value sets are enums;
//! open ones (`features.failure_reasons`, credential `type`, `secrets`) stay strings or
//! JSON, so a newer GitLab cannot make a payload undecodable.
//!
//! ```
//! use gantry_protocol::{ContentRange, FailureReason, parse_job_response};
//!
//! let job = parse_job_response(
//!     br#"{"id": 1042, "token": "glcbt-x", "future_key": {},
//!          "features": {"trace_sections": true, "failure_reasons": ["script_failure"]}}"#,
//! )?;
//! assert_eq!(job.id, 1042);
//! // This server predates `image_pull_failure`: send the wider reason instead (§4.3).
//! let reason = job.features.failure_reason_for(FailureReason::ImagePullFailure);
//! assert_eq!(reason, FailureReason::RunnerSystemFailure);
//! // The first 1 KiB of the log goes out as `Content-Range: 0-1023` (§5.1).
//! assert_eq!(ContentRange::for_chunk(0, 1024).map(|r| r.to_string()).as_deref(), Some("0-1023"));
//!
//! let error = parse_job_response(br#"{"variables": [{"key": "A", "masked": "no"}]}"#).unwrap_err();
//! assert!(error.to_string().starts_with("decode job payload: at `variables[0].masked`: invalid type"));
//! # Ok::<(), gantry_protocol::ProtocolError>(())
//! ```

pub mod artifact;
pub mod error;
pub mod error_body;
pub mod failure_reason;
pub mod features;
pub mod form;
pub mod grape;
pub mod header;
pub mod info;
pub mod job_request;
pub mod job_status;
mod json;
pub mod long_poll;
pub mod payload;
pub mod registration;
pub mod resources;
pub mod time;
pub mod token;
pub mod trace;
pub mod update;
pub mod update_interval;
mod wire_enum;

pub use artifact::{ArtifactFormat, ArtifactType, ArtifactUploadParams};
pub use error::ProtocolError;
pub use error_body::{ErrorMessage, ErrorResponse};
pub use failure_reason::FailureReason;
pub use features::{Feature, Features};
pub use form::{parse_form, parse_form_pairs};
pub use info::{ConfigInfo, VersionInfo, validate_labels};
pub use job_request::{JobRequest, SessionInfo};
pub use job_status::JobStatus;
pub use json::parse_json;
pub use payload::artifact::JobArtifact;
pub use payload::cache::{Cache, CachePolicy};
pub use payload::credential::Credential;
pub use payload::dependency::{ArtifactsFile, Dependency};
pub use payload::executor_opts::{
    DockerExecutorOptions, ExecutorOptions, ImageUser, KubernetesExecutorOptions,
};
pub use payload::features::{GcpOidcAuth, JobFeatures, JobTracing, OtelAuth, OtelEndpoint};
pub use payload::git_info::{GitInfo, ObjectFormat, RefType};
pub use payload::image::{Image, Port, PortProtocol, PullPolicy, Service};
pub use payload::input::{InputType, JobInput, JobInputValue};
pub use payload::job_info::JobInfo;
pub use payload::policy_options::{PolicyOptions, SuspendOptions};
pub use payload::response::{JobResponse, parse_job_response};
pub use payload::runner_info::RunnerInfo;
pub use payload::step::{Hook, HookName, Step, StepName};
pub use payload::variable::{JobVariable, lookup as variable};
pub use payload::when::When;
pub use registration::{
    AccessLevel, CreateRunnerRequest, GroupRef, RegisterRunnerRequest, RegisterRunnerResponse,
    ResetTokenResponse, RouterDiscoveryResponse, RunnerRegistrationDetails, RunnerTokenRequest,
    RunnerType, TagList, UnregisterManagerRequest, VerifyRunnerRequest, VerifyRunnerResponse,
};
pub use resources::JobResources;
pub use trace::checksum::TraceChecksum;
pub use trace::patch::{PatchOutcome, PatchTraceParams, PatchTraceResponse};
pub use trace::range::{ContentRange, TraceRange};
pub use trace::section::{
    SectionMarker, SectionOptions, parse_section_marker, section_end, section_start,
};
pub use trace::timestamp::{LineHeader, StreamKind};
pub use update::{JobState, JobTraceOutput, UpdateJobRequest, UpdateJobResponse, UpdateOutcome};
pub use update_interval::parse_trace_update_interval;
