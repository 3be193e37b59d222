//! Trace patches (§5): byte ranges, answers, checksum, sections, timestamps.

use std::time::Duration;

use gantry_protocol::trace::checksum::{format_checksum, parse_checksum};
use gantry_protocol::trace::section::{SectionBoundary, section_start_with};
use gantry_protocol::trace::timestamp::{LINE_HEADER_LEN, STREAM_RUNNER, STREAM_SCRIPT};
use gantry_protocol::{
    ContentRange, LineHeader, PatchOutcome, PatchTraceParams, PatchTraceResponse, ProtocolError,
    SectionOptions, StreamKind, TraceChecksum, TraceRange, parse_section_marker, section_end,
    section_start,
};

#[test]
fn content_range_formats_inclusive_offsets() {
    let range = ContentRange::for_chunk(4096, 4096).expect("non-empty");
    assert_eq!(range.to_string(), "4096-8191");
    assert_eq!(
        (range.start(), range.end(), range.len()),
        (4096, 8191, 4096)
    );
    assert_eq!(
        ContentRange::for_chunk(0, 1).expect("one byte").to_string(),
        "0-0"
    );
    assert_eq!(
        ContentRange::for_chunk(0, 0),
        None,
        "the runner never sends an empty patch"
    );
    assert_eq!(ContentRange::for_chunk(u64::MAX, 2), None, "end overflows");
    assert_eq!(
        ContentRange::for_chunk(u64::MAX, 1)
            .expect("last byte")
            .to_string(),
        format!("{0}-{0}", u64::MAX)
    );
    assert_eq!(ContentRange::new(5, 4), None);
    assert_eq!(
        ContentRange::new(0, u64::MAX).expect("whole space").len(),
        u64::MAX,
        "len saturates"
    );
}

#[test]
fn content_range_parses_what_it_formats() {
    for (start, len) in [(0, 1), (0, 1024), (1024, 1), (123_456_789, 1 << 20)] {
        let range = ContentRange::for_chunk(start, len).expect("non-empty");
        assert_eq!(
            range.to_string().parse::<ContentRange>().expect("parses"),
            range
        );
    }
    assert_eq!(
        ContentRange::parse(" 0-1023 ")
            .expect("whitespace trimmed")
            .len(),
        1024
    );
    let max = format!("{0}-{0}", u64::MAX);
    assert_eq!(ContentRange::parse(&max).expect("max").start(), u64::MAX);
}

#[test]
fn malformed_content_ranges_are_errors() {
    let cases = [
        ("", "expected `<start>-<end>` (inclusive byte offsets)"),
        ("1024", "expected `<start>-<end>` (inclusive byte offsets)"),
        ("0-", "a byte offset is missing"),
        ("-5", "a byte offset is missing"),
        ("-1-2", "a byte offset is missing"),
        ("+1-2", "byte offsets are unsigned decimal integers"),
        ("1-+2", "byte offsets are unsigned decimal integers"),
        ("bytes 0-1", "byte offsets are unsigned decimal integers"),
        ("0-1/2", "byte offsets are unsigned decimal integers"),
        ("1-2-3", "byte offsets are unsigned decimal integers"),
        ("0x10-0x20", "byte offsets are unsigned decimal integers"),
        ("1 - 2", "byte offsets are unsigned decimal integers"),
        ("٣-٤", "byte offsets are unsigned decimal integers"),
        ("5-4", "the end offset is before the start offset"),
        (
            "18446744073709551616-18446744073709551617",
            "a byte offset is too large",
        ),
    ];
    for (value, reason) in cases {
        let error = ContentRange::parse(value).expect_err(value);
        assert_eq!(
            error,
            ProtocolError::InvalidContentRange {
                value: value.to_owned(),
                reason
            },
            "{value}"
        );
    }
    assert_eq!(
        ContentRange::parse("5-4")
            .expect_err("reversed")
            .to_string(),
        "parse Content-Range `5-4`: the end offset is before the start offset"
    );
}

#[test]
fn trace_range_is_zero_dash_length() {
    assert_eq!(TraceRange { length: 1024 }.to_string(), "0-1024");
    assert_eq!(TraceRange::parse("0-1024").expect("parses").length, 1024);
    assert_eq!(TraceRange::parse("0-0").expect("empty log").length, 0);
    for bad in [
        "",
        "0-",
        "-",
        "0--5",
        "0-abc",
        "1024",
        "0-1-2",
        "0-99999999999999999999",
    ] {
        assert!(TraceRange::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn patch_answers_are_classified_like_gitlab_runner() {
    let classify = |status, job_status, range| {
        PatchTraceResponse::classify(status, job_status, range, None).outcome
    };
    assert_eq!(
        classify(202, Some("running"), Some("0-2048")),
        PatchOutcome::Succeeded
    );
    assert_eq!(
        classify(416, None, Some("0-1500")),
        PatchOutcome::RangeMismatch { resume_at: 1500 }
    );
    assert_eq!(
        classify(416, None, Some("0-")),
        PatchOutcome::RangeMismatch { resume_at: 0 }
    );
    assert_eq!(
        classify(416, None, Some("0--3")),
        PatchOutcome::RangeMismatch { resume_at: 0 }
    );
    assert_eq!(
        classify(416, None, None),
        PatchOutcome::RangeMismatch { resume_at: 0 }
    );
    assert_eq!(classify(404, None, None), PatchOutcome::NotFound);
    assert_eq!(classify(403, None, None), PatchOutcome::Aborted);
    assert_eq!(
        classify(202, Some("canceled"), None),
        PatchOutcome::Aborted,
        "Job-Status wins over 202"
    );
    assert_eq!(
        classify(416, Some("failed"), Some("0-10")),
        PatchOutcome::Aborted
    );
    assert_eq!(classify(400, None, None), PatchOutcome::Failed);
    assert_eq!(classify(500, None, None), PatchOutcome::Failed);

    let canceling = PatchTraceResponse::classify(202, Some("canceling"), None, Some("60"));
    assert_eq!(canceling.outcome, PatchOutcome::Succeeded);
    assert!(canceling.cancel_requested);
    assert_eq!(canceling.update_interval, Some(Duration::from_secs(60)));
    assert_eq!(
        PatchTraceParams { debug_trace: false }.to_query(),
        "debug_trace=false"
    );
    assert_eq!(
        PatchTraceParams { debug_trace: true }.to_query(),
        "debug_trace=true"
    );
}

#[test]
fn checksum_is_crc32_ieee() {
    let mut checksum = TraceChecksum::new();
    assert_eq!(checksum.to_wire(), "crc32:00000000");
    checksum.update(b"1234");
    checksum.update(b"56789");
    assert_eq!(checksum.crc32(), 0xCBF4_3926, "the CRC-32 check value");
    assert_eq!(checksum.bytesize(), 9);
    assert_eq!(checksum.to_wire(), "crc32:cbf43926");
    let output = checksum.output();
    assert_eq!(
        (output.checksum.as_str(), output.bytesize),
        ("crc32:cbf43926", 9)
    );

    let mut whole = TraceChecksum::new();
    whole.update(b"The quick brown fox jumps over the lazy dog");
    assert_eq!(whole.crc32(), 0x414F_A339);

    assert_eq!(format_checksum(0x0000_00ff), "crc32:000000ff");
    assert_eq!(
        parse_checksum("crc32:8a1f2c3d").expect("valid"),
        0x8a1f_2c3d
    );
    for bad in [
        "",
        "crc32:",
        "crc32:8A1F2C3D",
        "crc32:8a1f2c3",
        "crc32:8a1f2c3d0",
        "md5:8a1f2c3d",
        "crc32:+a1f2c3d",
    ] {
        assert!(parse_checksum(bad).is_err(), "{bad}");
    }
}

#[test]
fn section_markers_match_gitlab_format() {
    assert_eq!(
        section_start("get_sources", 1_769_853_600, false).expect("valid"),
        "section_start:1769853600:get_sources\r\x1b[0K"
    );
    assert_eq!(
        section_start("step_script", 10, true).expect("valid"),
        "section_start:10:step_script[collapsed=true]\r\x1b[0K"
    );
    assert_eq!(
        section_start_with(
            "section_script_step_0",
            10,
            SectionOptions {
                collapsed: true,
                hide_duration: true
            }
        )
        .expect("valid"),
        "section_start:10:section_script_step_0[hide_duration=true,collapsed=true]\r\x1b[0K"
    );
    assert_eq!(
        section_end("step_script", 12).expect("valid"),
        "section_end:12:step_script\r\x1b[0K"
    );
    for bad in ["", "has space", "semi;colon", "brack[et", "ünï"] {
        let error = section_start(bad, 0, false).expect_err(bad);
        assert_eq!(
            error,
            ProtocolError::InvalidSectionName {
                name: bad.to_owned()
            }
        );
        assert!(section_end(bad, 0).is_err());
    }
}

#[test]
fn section_markers_parse_back() {
    let start = format!(
        "{}Executing \"step_script\" stage\n",
        section_start("step_script", 42, true).expect("valid")
    );
    let (marker, rest) = parse_section_marker(&start).expect("a marker");
    assert_eq!(marker.boundary, SectionBoundary::Start);
    assert_eq!(
        (marker.timestamp, marker.name.as_str(), marker.collapsed()),
        (42, "step_script", true)
    );
    assert_eq!(rest, "Executing \"step_script\" stage\n");

    let (end, rest) =
        parse_section_marker("section_end:43:step_script\r\x1b[0K").expect("a marker");
    assert_eq!(
        (end.boundary, end.timestamp, end.options.len(), rest),
        (SectionBoundary::End, 43, 0, "")
    );

    for bad in [
        "section_start:42:step_script",
        "section_start:42:step_script\n",
        "section_start::x\r\x1b[0K",
        "section_start:-1:x\r\x1b[0K",
        "section_start:1:\r\x1b[0K",
        "section_start:1:x[collapsed]\r\x1b[0K",
        "section_start:1:x[collapsed=true\r\x1b[0K",
        "section_middle:1:x\r\x1b[0K",
        "section_start:99999999999999999999999:x\r\x1b[0K",
        "plain line",
    ] {
        assert_eq!(parse_section_marker(bad), None, "{bad:?}");
    }
}

#[test]
fn line_header_formats_32_bytes() {
    let header = LineHeader {
        time: Duration::new(1_769_853_601, 123_456_789),
        stream: STREAM_SCRIPT,
        kind: StreamKind::Stdout,
        continuation: false,
    };
    let text = header.format();
    assert_eq!(text, "2026-01-31T10:00:01.123456Z 01O ");
    assert_eq!(text.len(), LINE_HEADER_LEN);

    let service = LineHeader {
        stream: 0x1a,
        kind: StreamKind::Stderr,
        continuation: true,
        ..header
    };
    assert_eq!(service.format(), "2026-01-31T10:00:01.123456Z 1aE+");

    let epoch = LineHeader {
        time: Duration::ZERO,
        stream: STREAM_RUNNER,
        ..header
    };
    assert_eq!(epoch.format(), "1970-01-01T00:00:00.000000Z 00O ");
    let leap_day = LineHeader {
        time: Duration::from_secs(951_782_400),
        ..epoch
    };
    assert_eq!(leap_day.format(), "2000-02-29T00:00:00.000000Z 00O ");
    let far = LineHeader {
        time: Duration::from_secs(u64::MAX),
        ..epoch
    };
    assert_eq!(far.format(), "9999-12-31T23:59:59.999999Z 00O ");
}

#[test]
fn line_header_parses_back() {
    let line = b"2026-01-31T10:00:01.123456Z 01O $ bundle exec rspec\n";
    let (header, message) = LineHeader::parse(line).expect("a header");
    assert_eq!(header.time, Duration::new(1_769_853_601, 123_456_000));
    assert_eq!(
        (header.stream, header.kind, header.continuation),
        (1, StreamKind::Stdout, false)
    );
    assert_eq!(message, b"$ bundle exec rspec\n");

    for secs in [
        0u64,
        59,
        86_399,
        951_782_400,
        1_769_853_601,
        4_102_444_800,
        253_402_300_799,
    ] {
        let header = LineHeader {
            time: Duration::new(secs, 999_999_000),
            stream: 0x0f,
            kind: StreamKind::Stderr,
            continuation: true,
        };
        let text = header.format();
        assert_eq!(
            LineHeader::parse(text.as_bytes()).expect("round-trips").0,
            header,
            "{text}"
        );
    }

    for bad in [
        &b"2026-01-31T10:00:01.123456Z 01O"[..],
        b"2026-01-31 10:00:01.123456Z 01O x",
        b"2026-02-30T10:00:01.123456Z 01O x",
        b"2025-02-29T10:00:01.123456Z 01O x",
        b"2026-13-01T10:00:01.123456Z 01O x",
        b"2026-01-31T24:00:01.123456Z 01O x",
        b"1969-12-31T23:59:59.000000Z 01O x",
        b"2026-01-31T10:00:01.123456Z 1AO x",
        b"2026-01-31T10:00:01.123456Z 01X x",
        b"2026-01-31T10:00:01.123456Z 01O*x",
        b"2026-01-31T10:00:01.12345xZ 01O x",
        b"plain output without a header...",
    ] {
        assert_eq!(
            LineHeader::parse(bad),
            None,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}
