//! `ArtifactError`: what can go wrong building, reading or extracting an archive.

use std::io;
use std::path::PathBuf;

/// Failures of artifact (and cache) archiving and extraction. Messages read after
/// "failed to".
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A file system operation failed.
    #[error("{action} {}: {source}", shown(&path.to_string_lossy()))]
    Io {
        /// What was being done, e.g. `create archive`.
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The archive could not be read: truncated, corrupt, or not of the format it
    /// claims.
    #[error("read archive {}: {detail}", path.display())]
    Corrupt {
        /// The archive file.
        path: PathBuf,
        /// What the decoder said.
        detail: String,
    },
    /// The downloaded file is none of zip, gzip or tar.zst.
    #[error("extract {}: unknown archive format (expected zip, gzip or tar.zst)", path.display())]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// An entry would be written outside the build directory (or is otherwise unsafe);
    /// nothing after it is extracted.
    #[error("extract `{}`: {reason}", shown(entry))]
    UnsafeEntry {
        /// The entry name as stored in the archive.
        entry: String,
        /// Why it was refused.
        reason: String,
    },
    /// A `raw` artifact must be exactly one file.
    #[error(
        "build the `{artifact_type}` artifact: format `raw` takes exactly one file, {count} matched"
    )]
    RawNeedsOneFile {
        /// The artifact type.
        artifact_type: &'static str,
        /// How many files matched.
        count: usize,
    },
}

impl ArtifactError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn unsafe_entry(entry: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::UnsafeEntry {
            entry: entry.into(),
            reason: reason.into(),
        }
    }
}

/// `text` for a message: control characters (a newline in an entry name, say) escaped as
/// in Rust source, so a name cannot forge lines of the job log; the rest as is.
pub(crate) fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
