//! What can go wrong in the coordinator. Messages read after "failed to"; the HTTP layer
//! maps each variant to one status code (noted per variant).

use gantry_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// 404: the named thing does not exist.
    #[error("find the {0}")]
    NotFound(&'static str),
    /// 403: the caller may not do this (bad token, job not running, another project).
    #[error("{0}")]
    Forbidden(String),
    /// 400: the request is malformed or does not apply.
    #[error("{0}")]
    Invalid(String),
    /// 400: job input values (`job_inputs` of a play or retry) that do not fit the job's
    /// `inputs:`; GitLab's message (`Unknown input: a`, …).
    #[error("{0}")]
    InvalidInputs(String),
    /// 400: a job selection (`gantry run JOB`, `jobs` of a creation) names a job the
    /// pipeline does not have.
    #[error("{0}")]
    UnknownJob(#[from] gantry_pipeline::SelectError),
    /// 409: the request conflicts with the current state (duplicate name, ...).
    #[error("{0}")]
    Conflict(String),
    /// 413: a body exceeds a size limit.
    #[error("{0}")]
    TooLarge(String),
    /// 416: a trace patch does not start at the end of the stored trace; `size` is where
    /// it ends (`Range: 0-<size>`).
    #[error("append to the trace: it holds {size} bytes, so a patch must start at byte {size}")]
    RangeMismatch { size: u64 },
    /// 500 (or 400/404 for a bad repository at project creation): a `git` command failed.
    #[error("{0}")]
    Git(String),
    /// 500: the database failed.
    #[error(transparent)]
    Store(StoreError),
    /// 500: a database write this request shared with others failed (the message is
    /// the write's error).
    #[error("{0}")]
    Batch(String),
    /// 500: a blob or repository file could not be read or written.
    #[error("read or write a file: {0}")]
    Io(#[from] std::io::Error),
}

impl From<StoreError> for CoordinatorError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => CoordinatorError::NotFound(what),
            StoreError::Conflict(m) => CoordinatorError::Conflict(m),
            other => CoordinatorError::Store(other),
        }
    }
}

impl CoordinatorError {
    /// Stored data that cannot be read back (a bug or a hand-edited database).
    pub(crate) fn corrupt(what: impl std::fmt::Display) -> Self {
        CoordinatorError::Io(std::io::Error::other(format!("read stored data: {what}")))
    }
}

pub(crate) type Result<T, E = CoordinatorError> = std::result::Result<T, E>;
