//! The job log as the coordinator will hold it: bytes, checksum, size, what has been
//! sent, and the output limit (§5.1–§5.4).

use gantry_protocol::trace::checksum::format_checksum;
use gantry_protocol::trace::patch::MAX_PATCH_BYTES;
use gantry_protocol::{ContentRange, JobTraceOutput};

use gantry_protocol::StreamKind;
use gantry_protocol::trace::timestamp::STREAM_RUNNER;

use super::{Clock, Tap};
use super::section::{ANSI_BOLD_YELLOW, ANSI_RESET};
use super::stamp::HeaderFormatter;

/// Room kept past the output limit for the runner's own messages (stage sections, the
/// final "Job succeeded" / "ERROR: Job failed" lines), so a job that hit the limit still
/// says how it ended. Job output never uses it.
pub const RUNNER_MESSAGE_RESERVE: u64 = 64 * 1024;

/// The job log: every byte written, in order, up to the output limit.
///
/// Invariants: `checksum()` and `len()` always describe exactly `bytes()`; nothing is
/// dropped without the limit notice having been written (once) first.
#[derive(Clone)]
pub struct TraceBuffer {
    log: Vec<u8>,
    crc: crc32fast::Hasher,
    limit: u64,
    limit_exceeded: bool,
    dropped: u64,
    reserve_left: u64,
    sent: u64,
    line_headers: Option<Clock>,
    tap: Option<Tap>,
}

impl std::fmt::Debug for TraceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceBuffer")
            .field("len", &self.log.len())
            .field("limit", &self.limit)
            .field("limit_exceeded", &self.limit_exceeded)
            .field("dropped", &self.dropped)
            .field("sent", &self.sent)
            .field("line_headers", &self.line_headers.is_some())
            .field("tap", &self.tap.is_some())
            .finish()
    }
}

/// A piece of the log to send with `PATCH /trace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceChunk {
    /// Offset of the first byte in the whole log.
    pub offset: u64,
    /// The bytes (never empty).
    pub data: Vec<u8>,
}

impl TraceChunk {
    /// The `Content-Range` header value of this chunk (`None` only for an empty
    /// chunk, which [`TraceBuffer::next_chunk`] never returns).
    pub fn content_range(&self) -> Option<ContentRange> {
        ContentRange::for_chunk(self.offset, self.data.len() as u64)
    }

    /// Offset just past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.data.len() as u64)
    }
}

impl TraceBuffer {
    /// An empty log that accepts `limit` bytes of job output (the runner's
    /// `output_limit`, in bytes).
    pub fn new(limit: u64) -> Self {
        Self {
            log: Vec::new(),
            crc: crc32fast::Hasher::new(),
            limit,
            limit_exceeded: false,
            dropped: 0,
            reserve_left: RUNNER_MESSAGE_RESERVE,
            sent: 0,
            line_headers: None,
            tap: None,
        }
    }

    /// `tap` sees every byte appended to the log, in order.
    pub fn with_tap(mut self, tap: Tap) -> Self {
        self.tap = Some(tap);
        self
    }

    /// With per-line timestamps on (§5.6), the limit notice lines get a runner-stream
    /// line header stamped with `clock`.
    pub fn with_line_headers(mut self, clock: Clock) -> Self {
        self.line_headers = Some(clock);
        self
    }

    /// The output limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Appends job output. Past the limit, writes the limit notice once and drops the
    /// rest (counted in [`dropped_bytes`](Self::dropped_bytes)).
    pub fn append(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.limit_exceeded {
            self.dropped = self.dropped.saturating_add(bytes.len() as u64);
            return;
        }
        let room = self.limit.saturating_sub(self.log.len() as u64);
        if (bytes.len() as u64) <= room {
            self.push(bytes);
            return;
        }
        // Cut at a character boundary so the log stays valid UTF-8.
        let mut cut = usize::try_from(room).unwrap_or(usize::MAX).min(bytes.len());
        while cut > 0 && cut < bytes.len() && bytes[cut] & 0b1100_0000 == 0b1000_0000 {
            cut -= 1;
        }
        self.push(&bytes[..cut]);
        self.dropped = self.dropped.saturating_add((bytes.len() - cut) as u64);
        self.write_limit_notice();
    }

    /// Appends a runner message (stage headers, the final status line). Allowed past
    /// the limit while [`RUNNER_MESSAGE_RESERVE`] lasts.
    pub fn append_runner(&mut self, bytes: &[u8]) {
        if !self.limit_exceeded
            && (self.log.len() as u64).saturating_add(bytes.len() as u64) <= self.limit
        {
            self.push(bytes);
        } else if (bytes.len() as u64) <= self.reserve_left {
            self.reserve_left -= bytes.len() as u64;
            self.push(bytes);
        } else {
            self.dropped = self.dropped.saturating_add(bytes.len() as u64);
        }
    }

    fn write_limit_notice(&mut self) {
        self.limit_exceeded = true;
        let mut notice = Vec::new();
        if self.log.last().is_some_and(|&b| b != b'\n') {
            notice.push(b'\n');
        }
        let lines = [
            format!("Job's log exceeded limit of {} bytes.", self.limit),
            "Job execution will continue but no more output will be collected: \
             the job log is truncated here."
                .to_owned(),
        ];
        for line in lines {
            if let Some(clock) = &self.line_headers {
                let mut headers = HeaderFormatter::new(STREAM_RUNNER, StreamKind::Stdout);
                notice.extend_from_slice(&headers.header(clock(), false));
            }
            notice.extend_from_slice(ANSI_BOLD_YELLOW.as_bytes());
            notice.extend_from_slice(line.as_bytes());
            notice.extend_from_slice(ANSI_RESET.as_bytes());
            notice.push(b'\n');
        }
        self.push(&notice);
    }

    fn push(&mut self, bytes: &[u8]) {
        self.crc.update(bytes);
        self.log.extend_from_slice(bytes);
        if let Some(tap) = &self.tap {
            tap(bytes);
        }
    }

    /// Whether job output passed the limit (the job should be reported as such).
    pub fn limit_exceeded(&self) -> bool {
        self.limit_exceeded
    }

    /// Bytes of output dropped because of the limit.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped
    }

    /// The log.
    pub fn bytes(&self) -> &[u8] {
        &self.log
    }

    /// Log size in bytes (`output.bytesize`).
    pub fn len(&self) -> u64 {
        self.log.len() as u64
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// CRC-32 (IEEE) of the log.
    pub fn crc32(&self) -> u32 {
        self.crc.clone().finalize()
    }

    /// `crc32:%08x` (`output.checksum`).
    pub fn checksum(&self) -> String {
        format_checksum(self.crc32())
    }

    /// The `output` object of a job update.
    pub fn output(&self) -> JobTraceOutput {
        JobTraceOutput {
            checksum: self.checksum(),
            bytesize: self.len(),
        }
    }

    /// Offset of the first byte not yet accepted by the server.
    pub fn sent_offset(&self) -> u64 {
        self.sent
    }

    /// Whether every byte has been accepted by the server.
    pub fn fully_sent(&self) -> bool {
        self.sent >= self.len()
    }

    /// The next chunk to send, at most `max` bytes (clamped to 1..=1 MiB, gitlab-runner's
    /// patch limit); `None` when everything has been sent.
    pub fn next_chunk(&self, max: usize) -> Option<TraceChunk> {
        let start = usize::try_from(self.sent).ok()?;
        if start >= self.log.len() {
            return None;
        }
        let max = max.clamp(1, MAX_PATCH_BYTES);
        let end = self.log.len().min(start.saturating_add(max));
        Some(TraceChunk {
            offset: self.sent,
            data: self.log[start..end].to_vec(),
        })
    }

    /// The server accepted `chunk` (`202`): continue after it.
    pub fn chunk_sent(&mut self, chunk: &TraceChunk) {
        if chunk.offset == self.sent {
            self.sent = chunk.end().min(self.len());
        }
    }

    /// The server holds `server_length` bytes (`416` + `Range: 0-<length>`): continue
    /// from there, re-sending what it lacks or skipping what it has.
    pub fn rewind(&mut self, server_length: u64) {
        self.sent = server_length.min(self.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_the_protocol_crate() {
        let mut buffer = TraceBuffer::new(1024);
        buffer.append(b"hello ");
        buffer.append(b"world\n");
        let mut reference = gantry_protocol::TraceChecksum::new();
        reference.update(b"hello world\n");
        assert_eq!(buffer.checksum(), reference.to_wire());
        assert_eq!(buffer.len(), 12);
    }

    #[test]
    fn limit_notice_is_written_once_and_cut_at_a_character() {
        let mut buffer = TraceBuffer::new(5);
        buffer.append("abcé".as_bytes());
        assert!(!buffer.limit_exceeded());
        buffer.append(b"xyz");
        buffer.append(b"more");
        assert!(buffer.limit_exceeded());
        assert_eq!(buffer.dropped_bytes(), 7);
        let text = String::from_utf8(buffer.bytes().to_vec()).unwrap();
        assert!(text.starts_with("abcé\n"));
        assert_eq!(text.matches("exceeded limit of 5 bytes").count(), 1);
        let mut cut = TraceBuffer::new(4);
        cut.append("abcé".as_bytes());
        assert!(
            String::from_utf8(cut.bytes().to_vec())
                .unwrap()
                .starts_with("abc\n")
        );
    }

    #[test]
    fn chunks_rewind_and_resend() {
        let mut buffer = TraceBuffer::new(1 << 20);
        buffer.append(b"0123456789");
        let first = buffer.next_chunk(4).unwrap();
        assert_eq!(first.content_range().unwrap().to_string(), "0-3");
        buffer.chunk_sent(&first);
        let second = buffer.next_chunk(100).unwrap();
        assert_eq!(second.content_range().unwrap().to_string(), "4-9");
        buffer.rewind(2);
        assert_eq!(buffer.next_chunk(100).unwrap().data, b"23456789");
        buffer.rewind(99);
        assert!(buffer.next_chunk(100).is_none());
        assert!(buffer.fully_sent());
    }
}
