//! The clock, read only at the coordinator's edge, and ISO 8601 formatting.

use crate::processor::Timestamp;

/// Now, in Unix milliseconds (the store's unit).
pub(crate) fn now_ms() -> i64 {
    gantry_protocol::time::now_millis()
}

/// Milliseconds to the processor's whole seconds.
pub(crate) fn to_ts(ms: i64) -> Timestamp {
    Timestamp(ms.div_euclid(1000))
}

/// `2026-01-31T10:00:00.000Z` (GitLab's API format).
pub fn iso8601(ms: i64) -> String {
    gantry_protocol::time::rfc3339_millis(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_gitlab() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_769_853_600_123), "2026-01-31T10:00:00.123Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
