//! The job log pipeline (spec `runner-api.md` §5).
//!
//! ```text
//! stdout ─► TraceWriter ┐  per stream: Masker → UTF-8 sanitiser → line stamper (FF_TIMESTAMPS)
//! stderr ─► TraceWriter ┼─► TraceBuffer (shared): output limit, CRC-32 + size, chunks for PATCH
//! runner ─► Trace::runner_message / section_start / section_end (stream 00, never held)
//! ```
//!
//! * [`Masker`] replaces secrets with `[MASKED]` even when they are split across
//!   writes, holding back only a tail that is a proper prefix of a secret.
//! * [`TraceBuffer`] is the log as the coordinator will hold it: the checksum and size
//!   always describe exactly its bytes (after masking, sanitising and stamping, as
//!   §5.3 says); [`TraceBuffer::next_chunk`] / [`TraceBuffer::chunk_sent`] /
//!   [`TraceBuffer::rewind`] drive `PATCH /trace` with `Content-Range` and the `416`
//!   resync. Past `output_limit` it writes one clear notice, sets
//!   [`TraceBuffer::limit_exceeded`] and drops job output — never silently.
//! * Memory is bounded whatever the log's size: past [`MEMORY_WINDOW`] the log moves to
//!   an unlinked spool file and patches are read back from it; each writer keeps at
//!   most one partial line (8 KiB) and one secret's length of tail.
//!
//! A [`Trace`] is a cheap handle (an `Arc`): the executor writes through
//! [`TraceWriter`]s while the poll loop takes chunks from the same buffer.

mod buffer;
mod masker;
mod section;
mod stamp;
mod utf8;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gantry_protocol::trace::patch::MAX_PATCH_BYTES;
use gantry_protocol::trace::timestamp::{STREAM_RUNNER, STREAM_SCRIPT};
use gantry_protocol::{JobTraceOutput, ProtocolError, SectionOptions, StreamKind};

pub use buffer::{MEMORY_WINDOW, RUNNER_MESSAGE_RESERVE, TraceBuffer, TraceChunk};
pub use masker::{
    ALL_DEFAULT_TOKEN_PREFIXES, DEFAULT_TOKEN_PREFIXES, MASK, MaskError, MaskSet, MaskSetBuilder,
    Masker, SENSITIVE_URL_PARAMS,
};
pub use section::{
    ANSI_BOLD_CYAN, ANSI_BOLD_GREEN, ANSI_BOLD_RED, ANSI_BOLD_YELLOW, ANSI_CLEAR, ANSI_RESET,
    ANSI_YELLOW, section_end_text, section_start_text,
};
pub use stamp::HEADER_LEN;

/// Wall-clock time since the Unix epoch; injectable for tests.
pub type Clock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    })
}

/// Sees the bytes appended to a log, in order (see [`TraceBuffer::with_tap`]).
pub type Tap = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// How a job's log is written.
#[derive(Clone)]
pub struct TraceOptions {
    /// `output_limit` in bytes.
    pub output_limit: u64,
    /// Per-line timestamps (§5.6; gitlab-runner's `FF_TIMESTAMPS`).
    pub timestamps: bool,
    /// Time source for timestamps and section markers.
    pub clock: Clock,
    /// Sees every byte appended to the log (live output of `gantry run`).
    pub tap: Option<Tap>,
    /// The log continues one the coordinator holds: its length and, when known, the
    /// CRC-32 of those bytes ([`TraceBuffer::continuing`]; a job taken over after a
    /// runner restart).
    pub continues: Option<(u64, Option<u32>)>,
}

impl Default for TraceOptions {
    fn default() -> Self {
        Self {
            output_limit: gantry_protocol::trace::patch::DEFAULT_OUTPUT_LIMIT,
            timestamps: false,
            clock: system_clock(),
            tap: None,
            continues: None,
        }
    }
}

impl fmt::Debug for TraceOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceOptions")
            .field("output_limit", &self.output_limit)
            .field("timestamps", &self.timestamps)
            .finish_non_exhaustive()
    }
}

struct Shared {
    buffer: Mutex<TraceBuffer>,
    /// Replaced, never changed, when values are added ([`Trace::mask_values`]): writers
    /// made before keep the set they started with.
    masks: std::sync::RwLock<Arc<MaskSet>>,
    options: TraceOptions,
    /// Mirrors `buffer.limit_exceeded()` so writers can skip work without locking.
    limit_hit: AtomicBool,
    /// Signalled when a whole patch of unsent log is waiting (see
    /// [`Trace::full_patch_waiting`]).
    full_patch: tokio::sync::Notify,
}

/// A job's log: a shared handle to its [`TraceBuffer`], masks and options.
#[derive(Clone)]
pub struct Trace {
    shared: Arc<Shared>,
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace")
            .field("buffer", &*self.buffer())
            .field("options", &self.shared.options)
            .finish()
    }
}

impl Trace {
    /// A new, empty log.
    pub fn new(masks: MaskSet, options: TraceOptions) -> Self {
        let mut buffer = match options.continues {
            Some((base, crc)) => TraceBuffer::continuing(options.output_limit, base, crc),
            None => TraceBuffer::new(options.output_limit),
        };
        if options.timestamps {
            buffer = buffer.with_line_headers(Arc::clone(&options.clock));
        }
        if let Some(tap) = &options.tap {
            buffer = buffer.with_tap(Arc::clone(tap));
        }
        Self {
            shared: Arc::new(Shared {
                buffer: Mutex::new(buffer),
                masks: std::sync::RwLock::new(Arc::new(masks)),
                options,
                limit_hit: AtomicBool::new(false),
                full_patch: tokio::sync::Notify::new(),
            }),
        }
    }

    fn masks(&self) -> Arc<MaskSet> {
        match self.shared.masks.read() {
            Ok(masks) => Arc::clone(&masks),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Masks `values` too from now on (what is written later: writers made from now,
    /// runner messages). A `run:` step's sensitive inputs and outputs come this way.
    pub fn mask_values<I, V>(&self, values: I) -> Result<(), MaskError>
    where
        I: IntoIterator<Item = V>,
        V: AsRef<[u8]>,
    {
        let extended = Arc::new(self.masks().with_values(values)?);
        match self.shared.masks.write() {
            Ok(mut masks) => *masks = extended,
            Err(poisoned) => *poisoned.into_inner() = extended,
        }
        Ok(())
    }

    /// `bytes` with everything the log hides hidden (for files that leave the job, such
    /// as `step-results.json`).
    pub fn mask(&self, bytes: &[u8]) -> Vec<u8> {
        self.masks().mask_all(bytes)
    }

    /// A writer for one output stream of the job script (`01`).
    pub fn writer(&self, kind: StreamKind) -> TraceWriter {
        self.stream_writer(STREAM_SCRIPT, kind)
    }

    /// A writer for any stream number (services use `0f` upwards).
    pub fn stream_writer(&self, stream: u8, kind: StreamKind) -> TraceWriter {
        TraceWriter {
            shared: Arc::clone(&self.shared),
            masker: Masker::new(self.masks()),
            utf8: utf8::Utf8Sanitizer::default(),
            stamper: self
                .shared
                .options
                .timestamps
                .then(|| stamp::LineStamper::new(stream, kind)),
            masked: Vec::new(),
            clean: Vec::new(),
            stamped: Vec::new(),
        }
    }

    /// Writes a runner message (stream `00`), masked, as is: add `\n` yourself.
    /// Runner messages may use [`RUNNER_MESSAGE_RESERVE`] past the output limit.
    pub fn runner_raw(&self, text: &str) {
        let masked = self.masks().mask_all(text.as_bytes());
        let mut bytes = masked;
        if self.shared.options.timestamps {
            let mut stamper = stamp::LineStamper::new(STREAM_RUNNER, StreamKind::Stdout);
            let mut out = Vec::with_capacity(bytes.len() + HEADER_LEN);
            stamper.write(&bytes, self.now(), &mut out);
            stamper.finish(&mut out);
            bytes = out;
        }
        self.buffer().append_runner(&bytes);
    }

    /// Writes one line from the runner (`\n` added).
    pub fn runner_line(&self, text: &str) {
        self.runner_raw(&format!("{text}\n"));
    }

    /// Writes a warning line (yellow, `WARNING: ` prefix), as gitlab-runner does.
    pub fn warning(&self, text: &str) {
        self.runner_line(&format!("{ANSI_YELLOW}WARNING: {text}{ANSI_RESET}"));
    }

    /// Writes an error line (bold red, `ERROR: ` prefix), as gitlab-runner does.
    pub fn error(&self, text: &str) {
        self.runner_line(&format!("{ANSI_BOLD_RED}ERROR: {text}{ANSI_RESET}"));
    }

    /// Opens section `name` (`[a-zA-Z0-9_.-]+`) with a bold cyan `header` line.
    pub fn section_start(
        &self,
        name: &str,
        header: &str,
        options: SectionOptions,
    ) -> Result<(), ProtocolError> {
        let text = section_start_text(name, self.now().as_secs(), header, options)?;
        self.runner_raw(&text);
        Ok(())
    }

    /// Closes section `name`.
    pub fn section_end(&self, name: &str) -> Result<(), ProtocolError> {
        let text = section_end_text(name, self.now().as_secs())?;
        self.runner_raw(&text);
        Ok(())
    }

    /// The buffer, locked (for chunks, checksum, size). Hold it briefly.
    pub fn buffer(&self) -> MutexGuard<'_, TraceBuffer> {
        self.shared
            .buffer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The `output` object of a job update.
    pub fn output(&self) -> JobTraceOutput {
        self.buffer().output()
    }

    /// Resolves once at least [`MAX_PATCH_BYTES`] of log are waiting to be sent (at once
    /// if that happened since the last call), so a fast log can go out in whole patches
    /// while the job runs instead of waiting for the update interval.
    pub async fn full_patch_waiting(&self) {
        self.shared.full_patch.notified().await;
    }

    /// Whether job output passed `output_limit`.
    pub fn limit_exceeded(&self) -> bool {
        self.shared.limit_hit.load(Ordering::Relaxed) || self.buffer().limit_exceeded()
    }

    /// A copy of the whole log (for tests and diagnostics; empty if the log's spool
    /// file cannot be read back).
    pub fn contents(&self) -> Vec<u8> {
        self.buffer().contents().unwrap_or_default()
    }

    fn now(&self) -> Duration {
        (self.shared.options.clock)()
    }
}

/// Writes one output stream into a [`Trace`]. Dropping it flushes what it held back;
/// call [`TraceWriter::finish`] to do that at a chosen point (e.g. before a section
/// end).
pub struct TraceWriter {
    shared: Arc<Shared>,
    masker: Masker,
    utf8: utf8::Utf8Sanitizer,
    stamper: Option<stamp::LineStamper>,
    masked: Vec<u8>,
    clean: Vec<u8>,
    stamped: Vec<u8>,
}

impl fmt::Debug for TraceWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceWriter")
            .field("held", &self.masker.held())
            .finish_non_exhaustive()
    }
}

impl TraceWriter {
    /// Writes output bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.shared.limit_hit.load(Ordering::Relaxed) {
            self.shared
                .buffer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .append(bytes);
            return;
        }
        let mut masked = std::mem::take(&mut self.masked);
        masked.clear();
        self.masker.write(bytes, &mut masked);
        self.emit(&masked, false);
        self.masked = masked;
    }

    /// Flushes everything held back (a partial secret, an unfinished character, a
    /// partial line). The stream may continue afterwards.
    pub fn finish(&mut self) {
        let mut masked = std::mem::take(&mut self.masked);
        masked.clear();
        self.masker.finish(&mut masked);
        self.emit(&masked, true);
        self.masked = masked;
    }

    fn emit(&mut self, masked: &[u8], last: bool) {
        let mut clean = std::mem::take(&mut self.clean);
        clean.clear();
        self.utf8.write(masked, &mut clean);
        if last {
            self.utf8.finish(&mut clean);
        }
        let mut stamped = std::mem::take(&mut self.stamped);
        let out: &[u8] = match &mut self.stamper {
            Some(stamper) => {
                stamped.clear();
                if !clean.is_empty() {
                    stamper.write(&clean, (self.shared.options.clock)(), &mut stamped);
                }
                if last {
                    stamper.finish(&mut stamped);
                }
                &stamped
            }
            None => &clean,
        };
        if !out.is_empty() {
            let mut buffer = self
                .shared
                .buffer
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            buffer.append(out);
            if buffer.limit_exceeded() {
                self.shared.limit_hit.store(true, Ordering::Relaxed);
            }
            if buffer.len().saturating_sub(buffer.sent_offset()) >= MAX_PATCH_BYTES as u64 {
                self.shared.full_patch.notify_one();
            }
        }
        self.clean = clean;
        self.stamped = stamped;
    }
}

impl std::io::Write for TraceWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        TraceWriter::write(self, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        self.finish();
    }
}
