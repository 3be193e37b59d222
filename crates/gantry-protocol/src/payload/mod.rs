//! The job payload (§3.5) and its sub-objects, one per file.

pub mod artifact;
pub mod cache;
pub mod credential;
pub mod dependency;
pub mod executor_opts;
pub mod features;
pub mod git_info;
pub mod image;
pub mod input;
pub mod job_info;
pub mod policy_options;
pub mod response;
pub mod runner_info;
pub mod step;
pub mod variable;
pub mod when;
