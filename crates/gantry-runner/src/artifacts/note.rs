//! `Note`: a line for the job log produced while collecting, archiving or extracting.

use std::fmt;

/// One line for the job log. Warnings render with gitlab-runner's `WARNING: ` prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Progress information, e.g. `coverage/: found 12 matching artifact files and directories`.
    Info(String),
    /// Something the user should fix, e.g. a path that matched nothing.
    Warning(String),
}

impl Note {
    /// The text without the level prefix.
    pub fn text(&self) -> &str {
        match self {
            Self::Info(text) | Self::Warning(text) => text,
        }
    }

    /// Whether this is a warning.
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::Warning(_))
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Info(text) => f.write_str(text),
            Self::Warning(text) => write!(f, "WARNING: {text}"),
        }
    }
}
