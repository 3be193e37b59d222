//! Secrets: random tokens (≥ 128 bits) and the SHA-256 hashes the store keeps instead.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// `prefix` + 40 lowercase hex digits (160 random bits from the thread's CSPRNG).
pub(crate) fn new_token(prefix: &str) -> String {
    let mut bytes = [0u8; 20];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", hex(&bytes))
}

/// What the store keeps of a token.
pub(crate) fn hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Job tokens (`CI_JOB_TOKEN`, `glcbt-`).
pub(crate) const JOB_TOKEN_PREFIX: &str = gantry_protocol::token::JOB_TOKEN_PREFIX;
/// Runner tokens created through the API: `glrt-` + partition (`t1_` instance, `t3_` project).
pub(crate) fn runner_token(project_runner: bool) -> String {
    new_token(if project_runner {
        "glrt-t3_"
    } else {
        "glrt-t1_"
    })
}
/// Runner tokens obtained through legacy registration (`glrtr-`).
pub(crate) fn registered_runner_token() -> String {
    new_token(gantry_protocol::token::REGISTERED_RUNNER_TOKEN_PREFIX)
}
