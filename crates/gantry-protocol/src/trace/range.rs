//! Byte ranges of `PATCH /jobs/:id/trace` (§5.1, §5.2).
//!
//! * Request `Content-Range: <start>-<end>`: inclusive byte offsets of the body in the
//!   whole log; no `bytes ` unit, no `/total`. [`ContentRange`].
//! * Answer `Range: 0-<length>` (on `202` and `416`): the log length the server holds
//!   after the call. Note: a *length*, not an inclusive end. [`TraceRange`].

use std::fmt;
use std::str::FromStr;

use crate::ProtocolError;

/// A `Content-Range` request value: bytes `start..=end` of the log (§5.1).
/// Always `start <= end` (the runner never sends an empty patch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentRange {
    start: u64,
    end: u64,
}

impl ContentRange {
    /// The range of a patch of `len` bytes at offset `start`; `None` when `len` is 0 or
    /// the end overflows.
    pub fn for_chunk(start: u64, len: u64) -> Option<Self> {
        let last = len.checked_sub(1)?;
        Some(Self {
            start,
            end: start.checked_add(last)?,
        })
    }

    /// `start..=end`; `None` when `end < start`.
    pub fn new(start: u64, end: u64) -> Option<Self> {
        (start <= end).then_some(Self { start, end })
    }

    /// Offset of the first byte. The only part Rails reads: a patch is appended only if
    /// this equals the stored length (§5.2).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset of the last byte (inclusive).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Number of bytes covered (saturating at `u64::MAX`).
    pub fn len(&self) -> u64 {
        (self.end - self.start).saturating_add(1)
    }

    /// Always false: a range covers at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Parses `<start>-<end>`: two unsigned decimal integers, `start <= end`.
    /// Surrounding whitespace is ignored; anything else (`bytes 0-1`, `0-1/2`, `-1-2`,
    /// `+1-2`, `5-4`, overflow) is an error.
    pub fn parse(value: &str) -> Result<Self, ProtocolError> {
        let invalid = |reason| ProtocolError::InvalidContentRange {
            value: value.to_owned(),
            reason,
        };
        let (start, end) = value
            .trim()
            .split_once('-')
            .ok_or_else(|| invalid("expected `<start>-<end>` (inclusive byte offsets)"))?;
        let start = parse_offset(start).map_err(&invalid)?;
        let end = parse_offset(end).map_err(&invalid)?;
        Self::new(start, end).ok_or_else(|| invalid("the end offset is before the start offset"))
    }
}

impl fmt::Display for ContentRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end)
    }
}

impl FromStr for ContentRange {
    type Err = ProtocolError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::parse(value)
    }
}

/// A `Range` answer value: `0-<length>`, the log length the server now holds (§5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceRange {
    /// Stored log length in bytes.
    pub length: u64,
}

impl TraceRange {
    /// Parses `<start>-<length>` (GitLab sends start `0`) and returns the length.
    /// `0-`, a negative or non-numeric length is an error; gitlab-runner then resumes
    /// from 0 (see [`PatchTraceResponse`](crate::PatchTraceResponse)).
    pub fn parse(value: &str) -> Result<Self, ProtocolError> {
        let invalid = |reason| ProtocolError::InvalidRange {
            value: value.to_owned(),
            reason,
        };
        let (start, length) = value
            .trim()
            .split_once('-')
            .ok_or_else(|| invalid("expected `0-<length>`"))?;
        parse_offset(start).map_err(&invalid)?;
        let length = parse_offset(length).map_err(&invalid)?;
        Ok(Self { length })
    }
}

impl fmt::Display for TraceRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0-{}", self.length)
    }
}

impl FromStr for TraceRange {
    type Err = ProtocolError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::parse(value)
    }
}

fn parse_offset(digits: &str) -> Result<u64, &'static str> {
    if digits.is_empty() {
        return Err("a byte offset is missing");
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("byte offsets are unsigned decimal integers");
    }
    digits.parse().map_err(|_| "a byte offset is too large")
}
