//! The job log end to end: writers → masking → buffer; checksum and size; incremental
//! patches with 416 resync; output limit; sections and per-line timestamps.

use std::sync::Arc;
use std::time::Duration;

use gantry_protocol::{ContentRange, SectionOptions, StreamKind, TraceChecksum};
use gantry_runner::trace::{MaskSet, Trace, TraceOptions};

fn fixed_clock() -> gantry_runner::trace::Clock {
    Arc::new(|| Duration::from_micros(1_769_853_601_123_456))
}

fn options(limit: u64) -> TraceOptions {
    TraceOptions {
        output_limit: limit,
        timestamps: false,
        clock: fixed_clock(),
        tap: None,
        continues: None,
    }
}

fn masks(values: &[&str]) -> MaskSet {
    MaskSet::builder()
        .values(values)
        .build()
        .expect("masks build")
}

fn text(trace: &Trace) -> String {
    String::from_utf8(trace.contents()).expect("the log is UTF-8")
}

#[test]
fn checksum_and_size_describe_exactly_the_log() {
    let trace = Trace::new(masks(&["p4ssw0rd!"]), options(1 << 20));
    let mut out = trace.writer(StreamKind::Stdout);
    let mut err = trace.writer(StreamKind::Stderr);
    out.write(b"login with p4s");
    err.write(b"warning: \xff invalid byte\n");
    out.write(b"sw0rd! ok\n");
    out.finish();
    err.finish();
    let log = text(&trace);
    // Without timestamps, streams interleave like a terminal; the masker only held
    // back the part that could be the secret.
    assert_eq!(
        log,
        "login with warning: \u{FFFD} invalid byte\n[MASKED] ok\n"
    );
    let output = trace.output();
    let mut reference = TraceChecksum::new();
    reference.update(log.as_bytes());
    assert_eq!(output.checksum, reference.to_wire());
    assert_eq!(output.bytesize, log.len() as u64);
}

#[test]
fn a_secret_split_across_many_writes_is_masked() {
    let secret = "glcbt-0123456789abcdef";
    let trace = Trace::new(masks(&[secret]), options(1 << 20));
    let mut writer = trace.writer(StreamKind::Stdout);
    let line = format!("token={secret}\n");
    for byte in line.as_bytes() {
        writer.write(std::slice::from_ref(byte));
    }
    drop(writer);
    assert_eq!(text(&trace), "token=[MASKED]\n");
}

/// A fake coordinator log that appends only at its current length (§5.2).
struct Server {
    log: Vec<u8>,
}

impl Server {
    /// Returns `Ok(())` for 202, `Err(length)` for 416.
    fn patch(&mut self, range: ContentRange, body: &[u8]) -> Result<(), u64> {
        if range.start() != self.log.len() as u64 {
            return Err(self.log.len() as u64);
        }
        assert_eq!(range.len(), body.len() as u64);
        self.log.extend_from_slice(body);
        Ok(())
    }
}

fn flush(trace: &Trace, server: &mut Server, max: usize) -> usize {
    let mut patches = 0;
    loop {
        let Some(chunk) = trace.buffer().next_chunk(max) else {
            return patches;
        };
        patches += 1;
        assert!(patches < 10_000, "no progress");
        let range = chunk.content_range().expect("chunks are never empty");
        match server.patch(range, &chunk.data) {
            Ok(()) => trace.buffer().chunk_sent(&chunk),
            Err(length) => trace.buffer().rewind(length),
        }
    }
}

#[test]
fn incremental_patches_survive_lost_and_duplicated_data() {
    let trace = Trace::new(MaskSet::empty(), options(1 << 20));
    let mut writer = trace.writer(StreamKind::Stdout);
    let mut server = Server { log: Vec::new() };
    for i in 0..50 {
        writer.write(format!("line {i}\n").as_bytes());
        if i % 7 == 0 {
            flush(&trace, &mut server, 16);
        }
        if i == 20 {
            // The server lost its last bytes (e.g. a restart): 416 tells us its length.
            let keep = server.log.len() - 5;
            server.log.truncate(keep);
        }
        if i == 30 {
            // We think the server has less than it has: it answers 416 and we skip.
            let sent = trace.buffer().sent_offset();
            trace.buffer().rewind(sent.saturating_sub(9));
        }
    }
    drop(writer);
    flush(&trace, &mut server, 1 << 20);
    assert_eq!(server.log, trace.contents());
    assert!(trace.buffer().fully_sent());
}

#[test]
fn patches_are_at_most_one_mebibyte() {
    let trace = Trace::new(MaskSet::empty(), options(8 << 20));
    let mut writer = trace.writer(StreamKind::Stdout);
    writer.write(&vec![b'x'; 3 << 20]);
    drop(writer);
    let mut server = Server { log: Vec::new() };
    assert_eq!(flush(&trace, &mut server, usize::MAX), 3);
    assert_eq!(server.log.len(), 3 << 20);
}

#[test]
fn output_limit_is_announced_once_and_never_silent() {
    let trace = Trace::new(masks(&["secret"]), options(64));
    let mut writer = trace.writer(StreamKind::Stdout);
    for i in 0..20 {
        writer.write(format!("output line {i:02} secret\n").as_bytes());
    }
    writer.finish();
    trace.runner_line("Job succeeded");
    assert!(trace.limit_exceeded());
    let log = text(&trace);
    assert_eq!(
        log.matches("Job's log exceeded limit of 64 bytes.").count(),
        1
    );
    assert!(log.ends_with("Job succeeded\n"), "{log}");
    assert!(!log.contains("line 19"));
    assert!(trace.buffer().dropped_bytes() > 0);
    insta::assert_snapshot!(log.replace('\x1b', "␛"), @r"
    output line 00 [MASKED]
    output line 01 [MASKED]
    output line 02 [
    ␛[33;1mJob's log exceeded limit of 64 bytes.␛[0;m
    ␛[33;1mJob execution will continue but no more output will be collected: the job log is truncated here.␛[0;m
    Job succeeded
    ");
    let mut reference = TraceChecksum::new();
    reference.update(log.as_bytes());
    assert_eq!(trace.output().checksum, reference.to_wire());
}

#[test]
fn sections_and_timestamps_look_like_gitlab_runner_s() {
    let trace = Trace::new(
        masks(&["hidden"]),
        TraceOptions {
            timestamps: true,
            ..options(1 << 20)
        },
    );
    trace
        .section_start(
            "step_script",
            "Executing \"step_script\" stage of the job script",
            SectionOptions::default(),
        )
        .unwrap();
    let mut out = trace.writer(StreamKind::Stdout);
    let mut err = trace.writer(StreamKind::Stderr);
    out.write(b"$ make\npart");
    err.write(b"progress 50%\r");
    out.write(b"ial line with hidden value\n");
    err.write(b"progress 100%\n");
    out.finish();
    err.finish();
    trace.section_end("step_script").unwrap();
    trace.runner_line("Job succeeded");
    assert!(
        trace
            .section_start("bad name", "x", SectionOptions::default())
            .is_err()
    );
    insta::assert_snapshot!(text(&trace).replace('\x1b', "␛").replace('\r', "␍"), @r#"
    2026-01-31T10:00:01.123456Z 00O section_start:1769853601:step_script␍␛[0K␛[36;1mExecuting "step_script" stage of the job script␛[0;m
    2026-01-31T10:00:01.123456Z 01O $ make
    2026-01-31T10:00:01.123456Z 01E progress 50%␍
    2026-01-31T10:00:01.123456Z 01O partial line with [MASKED] value
    2026-01-31T10:00:01.123456Z 01E+progress 100%
    2026-01-31T10:00:01.123456Z 00O section_end:1769853601:step_script␍␛[0K
    2026-01-31T10:00:01.123456Z 00O Job succeeded
    "#);
}

#[test]
fn limit_notice_gets_line_headers_when_timestamps_are_on() {
    let trace = Trace::new(
        MaskSet::empty(),
        TraceOptions {
            timestamps: true,
            ..options(40)
        },
    );
    let mut writer = trace.writer(StreamKind::Stdout);
    writer.write(b"first line\nsecond line\n");
    drop(writer);
    insta::assert_snapshot!(text(&trace).replace('\x1b', "␛"), @r"
    2026-01-31T10:00:01.123456Z 01O first li
    2026-01-31T10:00:01.123456Z 00O ␛[33;1mJob's log exceeded limit of 40 bytes.␛[0;m
    2026-01-31T10:00:01.123456Z 00O ␛[33;1mJob execution will continue but no more output will be collected: the job log is truncated here.␛[0;m
    ");
}
