//! Trace throughput with masking on: 100 MB of job output with 3 masked values, fed in
//! 32 KiB pieces (what a pipe read returns), through
//!
//! 1. the `Masker` alone (output discarded: memory bounded by the held tail), and
//! 2. the whole `TraceWriter` pipeline (mask → UTF-8 sanitise → `TraceBuffer` with
//!    CRC-32, output limit raised to 256 MiB so every byte is processed and kept), with
//!    and without per-line timestamps.
//!
//! Run: `cargo bench -p gantry-runner --bench trace`. Prints MB/s (1 MB = 10^6 bytes).

use std::sync::Arc;
use std::time::Instant;

use gantry_protocol::StreamKind;
use gantry_runner::trace::{MaskSet, Masker, Trace, TraceOptions};

const TOTAL: usize = 100_000_000;
const PIECE: usize = 32 * 1024;
const SECRETS: [&str; 3] = [
    "s3cr3t-Passw0rd-value",
    "glcbt-64-char-job-token-abcdefghijklmnopqrstuvwxyz0123456789abcd",
    "AKIAIOSFODNN7EXAMPLE",
];

fn log_text() -> Vec<u8> {
    let mut text = Vec::with_capacity(TOTAL + 256);
    let mut line = 0usize;
    while text.len() < TOTAL {
        line += 1;
        // Realistic build output: mostly plain lines, a secret every 1000 lines.
        text.extend_from_slice(
            format!(
                "[{line:>8}] Compiling crate-{} v0.{}.0 (/builds/group/project)",
                line % 97,
                line % 13
            )
            .as_bytes(),
        );
        if line % 1000 == 0 {
            text.extend_from_slice(b" token=");
            text.extend_from_slice(SECRETS[line / 1000 % 3].as_bytes());
        }
        text.push(b'\n');
    }
    text.truncate(TOTAL);
    text
}

fn mb_per_s(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / 1e6 / seconds
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn masks() -> MaskSet {
    match MaskSet::builder().values(SECRETS).build() {
        Ok(set) => set,
        Err(error) => {
            eprintln!("{error}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let text = log_text();
    println!(
        "input: {} MB in {} KiB pieces, 3 masked values; peak RSS after generating input: {:.0} MiB",
        TOTAL / 1_000_000,
        PIECE / 1024,
        peak_rss_mib().unwrap_or(f64::NAN)
    );

    // 1. Masker alone.
    let set = Arc::new(masks());
    let mut masker = Masker::new(Arc::clone(&set));
    let mut out = Vec::with_capacity(PIECE * 2);
    let mut written = 0usize;
    let start = Instant::now();
    for piece in text.chunks(PIECE) {
        out.clear();
        masker.write(piece, &mut out);
        written += out.len();
    }
    out.clear();
    masker.finish(&mut out);
    written += out.len();
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "masker only:                      {:>6.0} MB/s  ({} bytes out)",
        mb_per_s(TOTAL, seconds),
        written,
    );

    // 2. Whole pipeline.
    for timestamps in [false, true] {
        let trace = Trace::new(
            masks(),
            TraceOptions {
                output_limit: 256 * 1024 * 1024,
                timestamps,
                ..TraceOptions::default()
            },
        );
        let mut writer = trace.writer(StreamKind::Stdout);
        let start = Instant::now();
        for piece in text.chunks(PIECE) {
            writer.write(piece);
        }
        writer.finish();
        let seconds = start.elapsed().as_secs_f64();
        let output = trace.output();
        println!(
            "trace pipeline, timestamps {:<6} {:>6.0} MB/s  (log {} bytes, {}, limit exceeded: {})",
            format!("{timestamps}:"),
            mb_per_s(TOTAL, seconds),
            output.bytesize,
            output.checksum,
            trace.limit_exceeded()
        );
    }

    // 3. Default output limit (4 MiB): memory stays bounded, the notice is written.
    let trace = Trace::new(masks(), TraceOptions::default());
    let mut writer = trace.writer(StreamKind::Stdout);
    let start = Instant::now();
    for piece in text.chunks(PIECE) {
        writer.write(piece);
    }
    writer.finish();
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "default 4 MiB output limit:       {:>6.0} MB/s  (log {} bytes, dropped {} bytes, limit exceeded: {})",
        mb_per_s(TOTAL, seconds),
        trace.output().bytesize,
        trace.buffer().dropped_bytes(),
        trace.limit_exceeded()
    );
    println!(
        "peak RSS: {:.0} MiB (the {} MB input + the largest log kept in memory)",
        peak_rss_mib().unwrap_or(f64::NAN),
        TOTAL / 1_000_000
    );
}
