//! Statuses and their groups (spec §5.1, GitLab `Ci::HasStatus`): the processor names
//! [`gantry_protocol::JobStatus`], the one status type every crate shares, `Status`.
//! [`JobStatus`] and [`PipelineStatus`] are the same type; the aliases only say which one
//! a signature means.

/// A job, stage or pipeline status.
pub use gantry_protocol::JobStatus as Status;

/// The status of a job.
pub type JobStatus = Status;
/// The status of a pipeline (or of a stage): the COMPOSITE of its jobs.
pub type PipelineStatus = Status;
