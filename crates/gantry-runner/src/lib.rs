//! `gantry-runner`: the agent users install on build machines. It polls a coordinator over
//! the GitLab Runner API (`gantry-protocol` types), runs each job's lifecycle in an
//! executor, streams the trace, and moves artifacts and cache. It never touches the
//! database.

pub mod artifacts;
pub mod cache;
pub mod client;
pub mod config;
pub mod dirs;
pub mod executor;
pub mod fleet;
pub mod job;
pub mod journal;
pub mod level;
pub mod metrics;
pub mod poll;
pub mod resources;
pub mod sources;
pub mod trace;
