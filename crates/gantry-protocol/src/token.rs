//! Token kinds and prefixes (§1.1) and the runner manager `system_id` (§1.3).
//!
//! Tokens are opaque strings on the wire; only their prefixes carry meaning.

/// Prefix of a runner authentication token created through `POST /user/runners` or
/// the UI (`Ci::Runner::CREATED_RUNNER_TOKEN_PREFIX`). The runner picks the
/// registration/unregistration flow by testing exactly this prefix (§1.1, §2.4).
pub const CREATED_RUNNER_TOKEN_PREFIX: &str = "glrt-";

/// Prefix of a runner authentication token obtained through legacy registration
/// (`POST /runners`, §2.1) on current GitLab.
pub const REGISTERED_RUNNER_TOKEN_PREFIX: &str = "glrtr-";

/// Prefix of a job token, a.k.a. `CI_JOB_TOKEN` (`Ci::Build::TOKEN_PREFIX`, GitLab ≥ 16.9).
pub const JOB_TOKEN_PREFIX: &str = "glcbt-";

/// Prefix of a personal access token (sent as `PRIVATE-TOKEN`).
pub const PERSONAL_ACCESS_TOKEN_PREFIX: &str = "glpat-";

/// Prefix of current legacy registration tokens (`GR1348941` + random); older ones
/// have no prefix.
pub const REGISTRATION_TOKEN_PREFIX: &str = "GR1348941";

/// Partition prefixes that follow `glrt-` (or stand alone on legacy-registered
/// tokens): `t1_` instance, `t2_` group, `t3_` project runner. Built by Rails as
/// `"t#{runner_type_value.to_s(16)}_"`.
pub const PARTITION_PREFIXES: [&str; 3] = ["t1_", "t2_", "t3_"];

/// Token prefixes the runner masks in job logs by default (§1.1, §5.5).
pub const DEFAULT_MASKED_TOKEN_PREFIXES: &[&str] = &[PERSONAL_ACCESS_TOKEN_PREFIX];

/// Token prefixes the runner masks when `FF_MASK_ALL_DEFAULT_TOKENS` is on, in
/// addition to [`DEFAULT_MASKED_TOKEN_PREFIXES`] and the server's
/// `features.token_mask_prefixes` (§1.1).
pub const ALL_DEFAULT_MASKED_TOKEN_PREFIXES: &[&str] = &[
    "gloas-",
    "gldt-",
    CREATED_RUNNER_TOKEN_PREFIX,
    JOB_TOKEN_PREFIX,
    REGISTERED_RUNNER_TOKEN_PREFIX,
    "glptt-",
    "glft-",
    "glimt-",
    "glagent-",
    "glsoat-",
    "glffct-",
    "_gitlab_session=",
    "gltok-",
];

/// Whether `token` has the job token's prefix (`glcbt-`).
pub fn is_job_token(token: &str) -> bool {
    token.starts_with(JOB_TOKEN_PREFIX)
}

/// Whether a runner token was created through the UI/API (`glrt-`), which selects the
/// `POST /runners/verify` registration flow and manager-only unregistration (§2.2, §2.4).
pub fn is_created_runner_token(token: &str) -> bool {
    token.starts_with(CREATED_RUNNER_TOKEN_PREFIX)
}

/// Whether `system_id` has the form the runner generates and accepts:
/// `^[sr]_[0-9a-zA-Z]{12}$` (§1.3; `s_` from the machine id, `r_` random).
pub fn is_valid_system_id(system_id: &str) -> bool {
    let bytes = system_id.as_bytes();
    bytes.len() == 14
        && matches!(bytes[0], b's' | b'r')
        && bytes[1] == b'_'
        && bytes[2..].iter().all(u8::is_ascii_alphanumeric)
}
