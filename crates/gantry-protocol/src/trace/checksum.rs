//! The trace checksum of job updates (§5.3): CRC-32 (IEEE) over every byte of the log,
//! sent as `crc32:` + 8 lowercase hex digits, with the byte count.
//!
//! One implementation for both sides: the runner computes it while writing its log
//! buffer, the coordinator recomputes it over the stored log to detect loss.

use crate::ProtocolError;
use crate::update::JobTraceOutput;

/// The wire prefix of a checksum.
pub const CHECKSUM_PREFIX: &str = "crc32:";

/// Running CRC-32 (IEEE, reflected polynomial `0xEDB88320`) and byte count of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceChecksum {
    crc: u32,
    bytesize: u64,
}

const TABLE: [u32; 256] = build_table();

const fn build_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

impl TraceChecksum {
    /// The checksum of an empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` to the log.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut crc = !self.crc;
        for &byte in bytes {
            crc = TABLE[usize::from((crc as u8) ^ byte)] ^ (crc >> 8);
        }
        self.crc = !crc;
        self.bytesize = self.bytesize.saturating_add(bytes.len() as u64);
    }

    /// The CRC-32 so far.
    pub fn crc32(&self) -> u32 {
        self.crc
    }

    /// Bytes seen so far.
    pub fn bytesize(&self) -> u64 {
        self.bytesize
    }

    /// `crc32:%08x`.
    pub fn to_wire(&self) -> String {
        format_checksum(self.crc)
    }

    /// The `output` object of a job update.
    pub fn output(&self) -> JobTraceOutput {
        JobTraceOutput {
            checksum: self.to_wire(),
            bytesize: self.bytesize,
        }
    }
}

/// `crc32:%08x`.
pub fn format_checksum(crc: u32) -> String {
    format!("{CHECKSUM_PREFIX}{crc:08x}")
}

/// Parses `crc32:` + 8 lowercase hex digits.
pub fn parse_checksum(value: &str) -> Result<u32, ProtocolError> {
    let invalid = || ProtocolError::InvalidChecksum {
        value: value.to_owned(),
    };
    let hex = value.strip_prefix(CHECKSUM_PREFIX).ok_or_else(invalid)?;
    if hex.len() != 8
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(invalid());
    }
    u32::from_str_radix(hex, 16).map_err(|_| invalid())
}
