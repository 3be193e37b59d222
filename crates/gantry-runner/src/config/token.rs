//! A runner token's short form, the runner's id in logs, directory names and cache keys.

use gantry_protocol::token::{
    CREATED_RUNNER_TOKEN_PREFIX, JOB_TOKEN_PREFIX, PARTITION_PREFIXES,
    REGISTERED_RUNNER_TOKEN_PREFIX,
};

/// How many characters of a token identify it in logs and directory names.
const SHORT_TOKEN_LEN: usize = 9;

/// The short display id of a runner token (gitlab-runner's `ShortenToken`): prefixes
/// `glrt-`, `t1_`/`t2_`/`t3_`, `glrtr-`, `glcbt-` and `GR` + 7 hex digits removed, then
/// the first 9 characters.
pub fn short_token(token: &str) -> String {
    let mut rest = token;
    for prefix in [
        CREATED_RUNNER_TOKEN_PREFIX,
        REGISTERED_RUNNER_TOKEN_PREFIX,
        JOB_TOKEN_PREFIX,
    ] {
        if let Some(stripped) = rest.strip_prefix(prefix) {
            rest = stripped;
            break;
        }
    }
    for prefix in PARTITION_PREFIXES {
        if let Some(stripped) = rest.strip_prefix(prefix) {
            rest = stripped;
            break;
        }
    }
    let bytes = rest.as_bytes();
    if bytes.len() > 9 && bytes.starts_with(b"GR") && bytes[2..9].iter().all(u8::is_ascii_hexdigit)
    {
        rest = &rest[9..];
    }
    let short: String = rest
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(SHORT_TOKEN_LEN)
        .collect();
    if short.is_empty() {
        "runner".to_owned()
    } else {
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_tokens_drop_known_prefixes() {
        assert_eq!(short_token("glrt-t1_abcdefghijklmnop"), "abcdefghi");
        assert_eq!(short_token("glrt-abcdefghijklmnop"), "abcdefghi");
        assert_eq!(short_token("glrtr-zyxwvutsrqp"), "zyxwvutsr");
        assert_eq!(short_token("GR1348941abcdefghijk"), "abcdefghi");
        assert_eq!(short_token("fakerunnertoken"), "fakerunne");
        assert_eq!(short_token("../.."), "runner");
    }
}
