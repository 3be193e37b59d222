//! The job log as the coordinator will hold it: bytes, checksum, size, what has been
//! sent, and the output limit (§5.1–§5.4).
//!
//! Memory stays bounded whatever the log's size: past [`MEMORY_WINDOW`] bytes the log
//! moves to a spool file (created in the temporary directory and unlinked at once, as
//! gitlab-runner keeps its trace in a temporary file), and chunks are read back from it.
//! When no spool file can be created or written, the log stays in memory: bytes are
//! never dropped because of the disk.

use std::fs::File;
use std::os::unix::fs::FileExt;

use gantry_protocol::trace::checksum::format_checksum;
use gantry_protocol::trace::patch::MAX_PATCH_BYTES;
use gantry_protocol::{ContentRange, JobTraceOutput};

use gantry_protocol::StreamKind;
use gantry_protocol::trace::timestamp::STREAM_RUNNER;

use super::section::{ANSI_BOLD_YELLOW, ANSI_RESET};
use super::stamp::HeaderFormatter;
use super::{Clock, Tap};

/// Room kept past the output limit for the runner's own messages (stage sections, the
/// final "Job succeeded" / "ERROR: Job failed" lines), so a job that hit the limit still
/// says how it ended. Job output never uses it.
pub const RUNNER_MESSAGE_RESERVE: u64 = 64 * 1024;

/// Log bytes held in memory before they move to the spool file.
pub const MEMORY_WINDOW: usize = 4 * 1024 * 1024;

/// The start of the log, on disk.
struct Spool {
    file: File,
    /// Bytes in the file (the log's first `len` bytes).
    len: u64,
}

impl Spool {
    /// An unlinked file, readable and writable by this process only.
    fn create() -> std::io::Result<Spool> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir();
        let mut error = None;
        for _ in 0..16 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!(
                "gantry-trace-{}-{}-{nanos}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let path = dir.join(name);
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(file) => {
                    std::fs::remove_file(&path)?;
                    return Ok(Spool { file, len: 0 });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(error.unwrap_or_else(|| std::io::Error::other("no free spool file name")))
    }
}

/// The job log: every byte written, in order, up to the output limit.
///
/// Invariants: `checksum()` and `len()` always describe exactly `contents()`; nothing
/// is dropped without the limit notice having been written (once) first.
pub struct TraceBuffer {
    /// The log from byte `spooled()` on.
    log: Vec<u8>,
    /// The log before `log`, when it outgrew [`MEMORY_WINDOW`].
    spool: Option<Spool>,
    /// A spool file could not be created or written: keep everything in memory.
    spool_failed: bool,
    crc: crc32fast::Hasher,
    limit: u64,
    limit_exceeded: bool,
    dropped: u64,
    reserve_left: u64,
    sent: u64,
    /// Bytes of the log before this buffer, held by the coordinator only (a job a
    /// restarted runner took over, see [`TraceBuffer::continuing`]).
    base: u64,
    /// Whether `crc` covers the whole log (false when the CRC of the bytes before
    /// `base` is unknown: the checksum is then left out of the final update).
    crc_known: bool,
    line_headers: Option<Clock>,
    tap: Option<Tap>,
    /// While set, nothing past this offset is sent ([`send_until`](Self::send_until)).
    send_until: Option<u64>,
}

impl std::fmt::Debug for TraceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceBuffer")
            .field("len", &self.len())
            .field("spooled", &self.spooled())
            .field("limit", &self.limit)
            .field("limit_exceeded", &self.limit_exceeded)
            .field("dropped", &self.dropped)
            .field("sent", &self.sent)
            .field("base", &self.base)
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
            spool: None,
            spool_failed: false,
            crc: crc32fast::Hasher::new(),
            limit,
            limit_exceeded: false,
            dropped: 0,
            reserve_left: RUNNER_MESSAGE_RESERVE,
            sent: 0,
            base: 0,
            crc_known: true,
            line_headers: None,
            tap: None,
            send_until: None,
        }
    }

    /// A log whose first `base` bytes the coordinator already holds (written by a
    /// runner process that died; this one continues the job). `crc` is the CRC-32 of
    /// those bytes when known; without it the log's checksum is unknown and
    /// [`checksum`](Self::checksum) is empty (the final update leaves it out).
    pub fn continuing(limit: u64, base: u64, crc: Option<u32>) -> Self {
        let mut buffer = Self::new(limit);
        buffer.base = base;
        buffer.sent = base;
        buffer.crc_known = crc.is_some();
        buffer.crc = crc32fast::Hasher::new_with_initial_len(crc.unwrap_or(0), base);
        buffer
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
        let room = self.limit.saturating_sub(self.len());
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
        if !self.limit_exceeded && self.len().saturating_add(bytes.len() as u64) <= self.limit {
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
        if self.last_byte().is_some_and(|b| b != b'\n') {
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
        if self.log.len() >= MEMORY_WINDOW {
            self.spill();
        }
    }

    /// Moves the bytes in memory to the spool file (kept in memory when that fails).
    fn spill(&mut self) {
        if self.spool_failed {
            return;
        }
        if self.spool.is_none() {
            match Spool::create() {
                Ok(spool) => self.spool = Some(spool),
                Err(_) => {
                    self.spool_failed = true;
                    return;
                }
            }
        }
        let Some(spool) = &mut self.spool else { return };
        match spool.file.write_all_at(&self.log, spool.len) {
            Ok(()) => {
                spool.len += self.log.len() as u64;
                self.log.clear();
            }
            Err(_) => self.spool_failed = true,
        }
    }

    /// Bytes of the log in the spool file.
    fn spooled(&self) -> u64 {
        self.spool.as_ref().map_or(0, |spool| spool.len)
    }

    fn last_byte(&self) -> Option<u8> {
        if let Some(&b) = self.log.last() {
            return Some(b);
        }
        let spool = self.spool.as_ref().filter(|spool| spool.len > 0)?;
        let mut byte = [0u8];
        spool.file.read_exact_at(&mut byte, spool.len - 1).ok()?;
        Some(byte[0])
    }

    /// Reads `len` bytes at `offset` of the log (from the spool file, then memory).
    /// Bytes before `base` are not here: the read starts at `base` at the earliest.
    fn read(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        let spooled = self.spooled();
        let offset = offset.max(self.base) - self.base;
        let end = offset
            .saturating_add(len as u64)
            .min(self.len() - self.base);
        if offset < spooled {
            let from_spool = end.min(spooled) - offset;
            out.resize(usize::try_from(from_spool).unwrap_or(usize::MAX), 0);
            if let Some(spool) = &self.spool {
                spool.file.read_exact_at(&mut out, offset)?;
            }
        }
        if end > spooled {
            let from = usize::try_from(offset.max(spooled) - spooled).unwrap_or(usize::MAX);
            let to = usize::try_from(end - spooled).unwrap_or(usize::MAX);
            out.extend_from_slice(&self.log[from..to]);
        }
        Ok(out)
    }

    /// Whether job output passed the limit (the job should be reported as such).
    pub fn limit_exceeded(&self) -> bool {
        self.limit_exceeded
    }

    /// Bytes of output dropped because of the limit.
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped
    }

    /// A copy of the whole log (read back from the spool file when it has one); for a
    /// [continuing](Self::continuing) log, the part after its base.
    pub fn contents(&self) -> std::io::Result<Vec<u8>> {
        self.read(
            self.base,
            usize::try_from(self.len() - self.base).unwrap_or(usize::MAX),
        )
    }

    /// Log size in bytes (`output.bytesize`).
    pub fn len(&self) -> u64 {
        self.base + self.spooled() + self.log.len() as u64
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// CRC-32 (IEEE) of the log.
    pub fn crc32(&self) -> u32 {
        self.crc.clone().finalize()
    }

    /// CRC-32 (IEEE) of the log, when known (see [`continuing`](Self::continuing)).
    pub fn known_crc32(&self) -> Option<u32> {
        self.crc_known.then(|| self.crc32())
    }

    /// `crc32:%08x` (`output.checksum`); empty when the CRC of the part before a
    /// [continuing](Self::continuing) log's base is unknown.
    pub fn checksum(&self) -> String {
        if self.crc_known {
            format_checksum(self.crc32())
        } else {
            String::new()
        }
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

    /// Sends nothing past `end` until called again (`None`: everything may be sent).
    /// A detached stage holds its log back to the last point its job's record names
    /// (`crate::executor::shell::detached`): whatever length the coordinator's log has when
    /// the runner dies, the record then says which output it holds.
    pub fn send_until(&mut self, end: Option<u64>) {
        self.send_until = end;
    }

    /// Where the log may be sent up to now.
    fn sendable_end(&self) -> u64 {
        self.send_until
            .map_or(self.len(), |end| end.clamp(self.sent, self.len()))
    }

    /// Bytes that may be sent and are not yet accepted.
    pub fn unsent(&self) -> u64 {
        self.sendable_end().saturating_sub(self.sent)
    }

    /// The next chunk to send, at most `max` bytes (clamped to 1..=1 MiB, gitlab-runner's
    /// patch limit); `None` when everything has been sent, or when the spool file
    /// cannot be read back (a disk failure: the final update's size then tells the
    /// coordinator what it lacks).
    pub fn next_chunk(&self, max: usize) -> Option<TraceChunk> {
        let unsent = self.unsent();
        if unsent == 0 {
            return None;
        }
        let max = max
            .clamp(1, MAX_PATCH_BYTES)
            .min(usize::try_from(unsent).unwrap_or(usize::MAX));
        let data = self.read(self.sent, max).ok()?;
        Some(TraceChunk {
            offset: self.sent,
            data,
        })
    }

    /// The server accepted `chunk` (`202`): continue after it.
    pub fn chunk_sent(&mut self, chunk: &TraceChunk) {
        self.chunk_accepted(chunk.offset, chunk.end());
    }

    /// The server accepted the bytes `offset..end` (`202`): continue after them.
    pub fn chunk_accepted(&mut self, offset: u64, end: u64) {
        if offset == self.sent {
            self.sent = end.min(self.len());
        }
    }

    /// The server holds `server_length` bytes (`416` + `Range: 0-<length>`): continue
    /// from there, re-sending what it lacks or skipping what it has.
    pub fn rewind(&mut self, server_length: u64) {
        self.sent = server_length.clamp(self.base, self.len());
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
    fn a_continuing_log_sends_from_its_base_and_keeps_the_whole_checksum() {
        let mut whole = gantry_protocol::TraceChecksum::new();
        whole.update(b"before the crash\nafter\n");
        let mut prefix = crc32fast::Hasher::new();
        prefix.update(b"before the crash\n");
        let mut buffer = TraceBuffer::continuing(1024, 17, Some(prefix.finalize()));
        assert!(buffer.fully_sent());
        assert!(buffer.next_chunk(100).is_none());
        buffer.append(b"after\n");
        assert_eq!(buffer.len(), 23);
        let chunk = buffer.next_chunk(100).unwrap();
        assert_eq!(chunk.content_range().unwrap().to_string(), "17-22");
        assert_eq!(chunk.data, b"after\n");
        assert_eq!(buffer.checksum(), whole.to_wire());
        assert_eq!(buffer.contents().unwrap(), b"after\n");
        // The coordinator cannot hold less than the base: a rewind stops there.
        buffer.rewind(3);
        assert_eq!(buffer.sent_offset(), 17);

        // Without the CRC of the part before, the checksum is left out.
        let mut unknown = TraceBuffer::continuing(1024, 40, None);
        unknown.append(b"x");
        assert_eq!(unknown.checksum(), "");
        assert_eq!(unknown.output().bytesize, 41);
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
        let text = String::from_utf8(buffer.contents().unwrap()).unwrap();
        assert!(text.starts_with("abcé\n"));
        assert_eq!(text.matches("exceeded limit of 5 bytes").count(), 1);
        let mut cut = TraceBuffer::new(4);
        cut.append("abcé".as_bytes());
        assert!(
            String::from_utf8(cut.contents().unwrap())
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

    /// A log of `len` bytes whose byte `i` is `i % 251` (no period that divides the
    /// window or the chunk size).
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn a_large_log_moves_to_the_spool_file_and_reads_back_exactly() {
        let log = pattern(3 * MEMORY_WINDOW + 12_345);
        let mut buffer = TraceBuffer::new(u64::MAX);
        for piece in log.chunks(32 * 1024 + 7) {
            buffer.append(piece);
        }
        assert!(buffer.spooled() >= 3 * MEMORY_WINDOW as u64, "{buffer:?}");
        assert!(buffer.log.len() < MEMORY_WINDOW);
        assert_eq!(buffer.len(), log.len() as u64);
        assert_eq!(buffer.contents().unwrap(), log);
        let mut reference = gantry_protocol::TraceChecksum::new();
        reference.update(&log);
        assert_eq!(buffer.checksum(), reference.to_wire());

        // Chunks, including those across the spool's end, are the log.
        let mut sent = Vec::new();
        while let Some(chunk) = buffer.next_chunk(MAX_PATCH_BYTES) {
            assert_eq!(chunk.offset, sent.len() as u64);
            assert!(chunk.data.len() <= MAX_PATCH_BYTES);
            sent.extend_from_slice(&chunk.data);
            buffer.chunk_sent(&chunk);
        }
        assert_eq!(sent, log);
        // A 412 makes the runner send everything again; a 416 rewinds anywhere.
        buffer.rewind(0);
        assert_eq!(buffer.next_chunk(10).unwrap().data, &log[..10]);
        let across = buffer.spooled() - 5;
        buffer.rewind(across);
        let at = usize::try_from(across).unwrap();
        assert_eq!(buffer.next_chunk(20).unwrap().data, &log[at..at + 20]);
    }

    #[test]
    fn the_limit_notice_after_a_spill_knows_how_the_log_ended() {
        let limit = MEMORY_WINDOW as u64 + 10;
        let mut buffer = TraceBuffer::new(limit);
        let mut line = vec![b'x'; MEMORY_WINDOW - 1];
        line.push(b'\n');
        buffer.append(&line);
        assert_eq!(buffer.spooled(), MEMORY_WINDOW as u64, "spilled");
        buffer.append(b"0123456789abcdef");
        assert!(buffer.limit_exceeded());
        let text = String::from_utf8(buffer.contents().unwrap()).unwrap();
        assert!(
            text.ends_with("the job log is truncated here.\u{1b}[0;m\n"),
            "{}",
            &text[text.len() - 200..]
        );
        assert!(
            text.contains("0123456789\n\u{1b}"),
            "a newline before the notice"
        );
        assert_eq!(buffer.dropped_bytes(), 6);
    }
}
