//! Per-line timestamps (§5.6; gitlab-runner ≥ 18.7 default, flag `FF_TIMESTAMPS`).
//!
//! Every log line starts with a fixed 32-byte header:
//!
//! ```text
//! 2026-01-31T10:00:01.123456Z 01O $ bundle exec rspec\n
//! └──── UTC, 6 fractional digits ┘ │ │└ flag: ' ' new line, '+' continuation
//!                                  │ └ O stdout / E stderr
//!                                  └ stream: 2 lowercase hex digits
//! ```

use std::time::Duration;

/// Length of the header in bytes.
pub const LINE_HEADER_LEN: usize = 32;

/// Stream of runner/executor messages.
pub const STREAM_RUNNER: u8 = 0x00;
/// Stream of the job script's output.
pub const STREAM_SCRIPT: u8 = 0x01;
/// First stream number of services (`0f` upwards).
pub const STREAM_SERVICES_START: u8 = 0x0f;

/// stdout or stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// `O`.
    Stdout,
    /// `E`.
    Stderr,
}

/// The 32-byte header of one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineHeader {
    /// Time since the Unix epoch, microsecond precision (finer parts are truncated
    /// when formatting). Formatting saturates at `9999-12-31T23:59:59.999999Z`.
    pub time: Duration,
    /// Stream number.
    pub stream: u8,
    /// stdout or stderr.
    pub kind: StreamKind,
    /// `+`: this entry continues the previous line (long line, or output with a bare
    /// `\r`).
    pub continuation: bool,
}

/// Seconds of `9999-12-31T23:59:59Z`.
const MAX_SECS: u64 = 253_402_300_799;

impl LineHeader {
    /// The 32-byte header, e.g. `2026-01-31T10:00:01.123456Z 01O `.
    pub fn format(&self) -> String {
        let (secs, micros) = if self.time.as_secs() > MAX_SECS {
            (MAX_SECS, 999_999)
        } else {
            (self.time.as_secs(), self.time.subsec_micros())
        };
        let days = secs / 86_400;
        let of_day = secs % 86_400;
        // `secs` is at most MAX_SECS, so the day count fits.
        let (year, month, day) = crate::time::civil_from_days(days as i64);
        let kind = match self.kind {
            StreamKind::Stdout => 'O',
            StreamKind::Stderr => 'E',
        };
        let flag = if self.continuation { '+' } else { ' ' };
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z {:02x}{kind}{flag}",
            of_day / 3600,
            of_day / 60 % 60,
            of_day % 60,
            self.stream,
        )
    }

    /// Parses the header at the start of `line` and returns it with the message bytes
    /// after it; `None` when `line` does not start with a well-formed header.
    pub fn parse(line: &[u8]) -> Option<(Self, &[u8])> {
        let header = line.get(..LINE_HEADER_LEN)?;
        let num = |range: std::ops::Range<usize>| -> Option<u64> {
            let digits = header.get(range)?;
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            digits.iter().try_fold(0u64, |acc, &d| {
                acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
            })
        };
        let separators = [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
            (26, b'Z'),
            (27, b' '),
        ];
        if separators.iter().any(|&(at, byte)| header[at] != byte) {
            return None;
        }
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second, micros) =
            (num(11..13)?, num(14..16)?, num(17..19)?, num(20..26)?);
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        if year < 1970 || hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        let days = crate::time::days_from_civil(
            i64::try_from(year).ok()?,
            u32::try_from(month).ok()?,
            u32::try_from(day).ok()?,
        )
        .and_then(|d| u64::try_from(d).ok())?;
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
        let stream = hex_byte(header[28], header[29])?;
        let kind = match header[30] {
            b'O' => StreamKind::Stdout,
            b'E' => StreamKind::Stderr,
            _ => return None,
        };
        let continuation = match header[31] {
            b' ' => false,
            b'+' => true,
            _ => return None,
        };
        let time = Duration::from_secs(secs) + Duration::from_micros(micros);
        Some((
            Self {
                time,
                stream,
                kind,
                continuation,
            },
            &line[LINE_HEADER_LEN..],
        ))
    }
}

fn hex_byte(high: u8, low: u8) -> Option<u8> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    Some(digit(high)? << 4 | digit(low)?)
}

fn is_leap(year: u64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}
