//! Per-line timestamps (§5.6, `FF_TIMESTAMPS`), as gitlab-runner's timestamper writes
//! them: every entry starts with a 32-byte header and ends with `\n`, so entries of
//! different streams never interleave inside a line.
//!
//! * each `\n`-terminated line is one entry;
//! * a write with a `\r` but no further `\n` is flushed as one entry, terminated with
//!   `\n`; the next entry is marked `+` (continuation);
//! * a partial line is buffered until its `\n`, up to 8 KiB; past that it is flushed
//!   as an entry and the rest continues with `+`.

use std::time::Duration;

use gantry_protocol::{LineHeader, StreamKind};

/// Length of the header.
pub const HEADER_LEN: usize = gantry_protocol::trace::timestamp::LINE_HEADER_LEN;

/// How much of a line without `\n` is buffered before it is flushed.
pub(crate) const PARTIAL_LINE_LIMIT: usize = 8 * 1024;

/// Formats headers, reformatting the date only when the second changes.
#[derive(Debug)]
pub(crate) struct HeaderFormatter {
    stream: u8,
    kind: StreamKind,
    cached_second: Option<u64>,
    header: [u8; HEADER_LEN],
}

impl HeaderFormatter {
    pub(crate) fn new(stream: u8, kind: StreamKind) -> Self {
        Self {
            stream,
            kind,
            cached_second: None,
            header: [b' '; HEADER_LEN],
        }
    }

    pub(crate) fn header(&mut self, time: Duration, continuation: bool) -> [u8; HEADER_LEN] {
        if self.cached_second != Some(time.as_secs()) {
            let text = LineHeader {
                time: Duration::from_secs(time.as_secs()),
                stream: self.stream,
                kind: self.kind,
                continuation: false,
            }
            .format();
            if text.len() == HEADER_LEN {
                self.header.copy_from_slice(text.as_bytes());
            }
            self.cached_second = Some(time.as_secs());
        }
        let mut micros = time.subsec_micros();
        for i in (20..26).rev() {
            // `micros % 10` < 10
            self.header[i] = b'0' + (micros % 10) as u8;
            micros /= 10;
        }
        self.header[31] = if continuation { b'+' } else { b' ' };
        self.header
    }
}

/// Line assembly and headers for one stream.
#[derive(Debug)]
pub(crate) struct LineStamper {
    headers: HeaderFormatter,
    partial: Vec<u8>,
    continuation: bool,
}

impl LineStamper {
    pub(crate) fn new(stream: u8, kind: StreamKind) -> Self {
        Self {
            headers: HeaderFormatter::new(stream, kind),
            partial: Vec::new(),
            continuation: false,
        }
    }

    fn header(&mut self, now: Duration, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.headers.header(now, self.continuation));
        self.continuation = false;
    }

    /// Appends the entries `input` completes to `out`.
    pub(crate) fn write(&mut self, input: &[u8], now: Duration, out: &mut Vec<u8>) {
        let mut at = 0;
        while let Some(newline) = input[at..].iter().position(|&b| b == b'\n') {
            let line = &input[at..at + newline + 1];
            if self.partial.is_empty() {
                self.header(now, out);
            } else {
                out.append(&mut self.partial);
            }
            out.extend_from_slice(line);
            at += newline + 1;
        }
        let rest = &input[at..];
        if rest.is_empty() {
            return;
        }
        let flush = rest.contains(&b'\r') || self.partial.len() + rest.len() > PARTIAL_LINE_LIMIT;
        if flush {
            if self.partial.is_empty() {
                self.header(now, out);
            } else {
                out.append(&mut self.partial);
            }
            out.extend_from_slice(rest);
            out.push(b'\n');
            self.continuation = true;
            return;
        }
        if self.partial.is_empty() {
            let header = self.headers.header(now, self.continuation);
            self.continuation = false;
            self.partial.extend_from_slice(&header);
        }
        self.partial.extend_from_slice(rest);
    }

    /// Ends the stream: a buffered partial line is terminated with `\n`.
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.partial.is_empty() {
            out.append(&mut self.partial);
            out.push(b'\n');
            self.continuation = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_micros(1_769_853_601_123_456);

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    #[test]
    fn stamps_lines_and_buffers_partial_ones() {
        let mut stamper = LineStamper::new(1, StreamKind::Stdout);
        let mut out = Vec::new();
        stamper.write(b"one\ntw", T, &mut out);
        assert_eq!(text(&out), "2026-01-31T10:00:01.123456Z 01O one\n");
        stamper.write(b"o\nthree", T, &mut out);
        stamper.finish(&mut out);
        assert_eq!(
            text(&out),
            "2026-01-31T10:00:01.123456Z 01O one\n\
             2026-01-31T10:00:01.123456Z 01O two\n\
             2026-01-31T10:00:01.123456Z 01O three\n"
        );
    }

    #[test]
    fn carriage_returns_flush_and_continue() {
        let mut stamper = LineStamper::new(0, StreamKind::Stderr);
        let mut out = Vec::new();
        stamper.write(b"10%\r", T, &mut out);
        stamper.write(b"100%\n", T + Duration::from_secs(1), &mut out);
        assert_eq!(
            text(&out),
            "2026-01-31T10:00:01.123456Z 00E 10%\r\n\
             2026-01-31T10:00:02.123456Z 00E+100%\n"
        );
    }
}
