//! `gantry-server`: the coordinator. Today it holds the pipeline processor
//! ([`processor`]), GitLab's job state machine as a pure, deterministic library; the store,
//! queue and HTTP layers build on it.

pub mod processor;

pub use processor::{
    Event, JobId, JobState, JobStatus, PipelineState, PipelineStatus, Status, Timestamp,
    Transition, apply, pipeline_status, process,
};
