//! `gantry-server`: the coordinator.
//!
//! - [`processor`]: GitLab's job state machine as a pure, deterministic library.
//! - [`coordinator`]: the service that turns commits into pipelines, persists the
//!   processor's decisions through `gantry-store`, queues jobs for runners and receives
//!   their updates, traces and artifacts. No HTTP here.
//! - [`http`]: the GitLab-compatible Runner API and user API (axum) over the coordinator.

pub mod coordinator;
pub mod http;
pub mod processor;
pub mod testing;

pub use processor::{
    Event, JobId, JobState, JobStatus, PipelineState, PipelineStatus, Status, Timestamp,
    Transition, apply, pipeline_status, process,
};
