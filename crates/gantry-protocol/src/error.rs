//! [`ProtocolError`]: everything that can be wrong with a message on the runner link.
//!
//! Messages read after "failed to" (STYLE.md §3) and name the place: the JSON path of a
//! bad field, the header value that did not parse, the unknown enum value.

/// A malformed or unsupported value on the runner link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A JSON body did not decode. `path` is the JSON path of the offending field
    /// (`variables[3].public`, `.` for the document itself); `line`/`column` are
    /// serde_json's 1-based position (0 when unknown).
    #[error("decode {what}: at `{path}`: {message}")]
    Json {
        /// The message kind, e.g. `job payload`.
        what: &'static str,
        /// JSON path of the field that failed.
        path: String,
        /// 1-based line in the body.
        line: usize,
        /// 1-based column in the body.
        column: usize,
        /// serde_json's description, with its position.
        message: String,
    },

    /// A form body (URL-encoded or multipart, [`crate::form`]) did not decode. `key` is
    /// the form key of the offending value, as the client wrote it (`info[features][shared]`;
    /// `.` for the form itself).
    #[error("decode {what}: form parameter `{key}`: {message}")]
    Form {
        /// The message kind, e.g. `RegisterRunnerRequest`.
        what: &'static str,
        /// The form key.
        key: String,
        /// What is wrong with its value.
        message: String,
    },

    /// A string is not one of the values an enum of the protocol allows.
    #[error("parse {kind} `{value}`: expected one of {}", join_names(.expected))]
    UnknownValue {
        /// What was being parsed, e.g. `failure reason`.
        kind: &'static str,
        /// The value received.
        value: String,
        /// Every accepted value.
        expected: &'static [&'static str],
    },

    /// A `Content-Range` request header of `PATCH /jobs/:id/trace` (§5.1).
    #[error("parse Content-Range `{value}`: {reason}")]
    InvalidContentRange {
        /// The header value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A `Range` response header of `PATCH /jobs/:id/trace` (§5.2).
    #[error("parse Range `{value}`: {reason}")]
    InvalidRange {
        /// The header value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A trace checksum that is not `crc32:` + 8 lowercase hex digits (§5.3).
    #[error("parse trace checksum `{value}`: expected `crc32:` followed by 8 lowercase hex digits")]
    InvalidChecksum {
        /// The value received.
        value: String,
    },

    /// A log section name outside `[a-zA-Z0-9_.-]+` (§5.7).
    #[error(
        "write log section `{name}`: a section name must be non-empty and use only ASCII letters, digits, `_`, `.` and `-`"
    )]
    InvalidSectionName {
        /// The rejected name.
        name: String,
    },

    /// A log section option key or value outside `[a-zA-Z0-9_-]+` (§5.7).
    #[error(
        "write log section option `{option}`: keys and values use only ASCII letters, digits, `_` and `-`"
    )]
    InvalidSectionOption {
        /// The rejected `key=value`.
        option: String,
    },

    /// The `run` string of a CI Steps job is not a JSON array (§3.5.13).
    #[error("decode `run` steps: {message}")]
    InvalidRunSteps {
        /// What is wrong with it.
        message: String,
    },

    /// A job input whose content does not match its declared type (§3.5.16).
    #[error("validate job input `{key}`: {reason}")]
    InvalidInput {
        /// The input's key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// `image.executor_opts` (or a service's) names options gitlab-runner does not
    /// support; the runner fails such a job with `runner_system_failure` (§3.5.7).
    #[error("use executor options {}: supported are `docker.platform`, `docker.user` and `kubernetes.user`", join_owned(.options))]
    UnsupportedExecutorOptions {
        /// The unsupported options, as `docker.foo` paths.
        options: Vec<String>,
    },

    /// A runner label that breaks the rules of §2.8.
    #[error("validate runner label `{key}`: {reason}")]
    InvalidLabel {
        /// The label key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// An artifact upload whose format is not the one its type requires (§6.2; GitLab
    /// answers `400`).
    #[error("upload `{artifact_type}` artifact: the format must be `{expected}`, not `{actual}`")]
    ArtifactFormatMismatch {
        /// The artifact type.
        artifact_type: &'static str,
        /// The format that type requires.
        expected: &'static str,
        /// The format received.
        actual: &'static str,
    },
}

fn join_names(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    quoted.join(", ")
}

fn join_owned(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    quoted.join(", ")
}
