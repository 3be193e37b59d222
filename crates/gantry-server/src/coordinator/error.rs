//! What can go wrong in the coordinator, in its own words. Messages read after "failed
//! to". Which HTTP status each becomes is the HTTP layer's choice (`http/error.rs`,
//! `From<CoordinatorError> for ApiError`), not this type's.

use gantry_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// The named thing does not exist.
    #[error("find the {0}")]
    NotFound(&'static str),
    /// The caller may not do this (bad token, job not running, another project).
    #[error("{0}")]
    Forbidden(String),
    /// The request is malformed or does not apply.
    #[error("{0}")]
    Invalid(String),
    /// Job input values (`job_inputs` of a play or retry) that do not fit the job's
    /// `inputs:`; GitLab's message (`Unknown input: a`, …).
    #[error("{0}")]
    InvalidInputs(String),
    /// A job selection (`gantry run JOB`, `jobs` of a creation) names a job the
    /// pipeline does not have.
    #[error("{0}")]
    UnknownJob(#[from] gantry_pipeline::SelectError),
    /// The request conflicts with the current state (duplicate name, ...).
    #[error("{0}")]
    Conflict(String),
    /// A body exceeds a size limit.
    #[error("{0}")]
    TooLarge(String),
    /// A trace patch does not start at the end of the stored trace; `size` is where
    /// it ends (`Range: 0-<size>`).
    #[error("append to the trace: it holds {size} bytes, so a patch must start at byte {size}")]
    RangeMismatch { size: u64 },
    /// A `git` command failed (at a project's creation: its repository is bad).
    #[error("{0}")]
    Git(String),
    /// The database failed.
    #[error(transparent)]
    Store(StoreError),
    /// A database write this request shared with others failed (the message is the
    /// write's error).
    #[error("{0}")]
    Batch(String),
    /// A blob or repository file could not be read or written.
    #[error("read or write a file: {0}")]
    Io(#[from] std::io::Error),
}

impl From<StoreError> for CoordinatorError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => CoordinatorError::NotFound(what),
            StoreError::Conflict(m) => CoordinatorError::Conflict(m),
            revoked @ StoreError::TokenRevoked { .. } => {
                CoordinatorError::Forbidden(revoked.to_string())
            }
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
