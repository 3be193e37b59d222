//! The job log on the wire (§5): incremental `PATCH /jobs/:id/trace` with byte ranges,
//! its checksum, and the in-band formats inside the bytes (per-line timestamps, log
//! sections).

pub mod checksum;
pub mod patch;
pub mod range;
pub mod section;
pub mod timestamp;
