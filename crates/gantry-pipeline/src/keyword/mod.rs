//! Validators for job keywords (spec §3), one concept per file.
//!
//! Every validator takes the YAML node of the keyword and its YAML path (`jobs:build:cache`),
//! pushes **all** the errors it finds into the [`Cx`](crate::validate::Cx) in GitLab's
//! wording, and returns `None` exactly when it pushed at least one error. A `null` value is
//! not handled here: GitLab treats `key: null` in a job as "not specified" (the `default:`
//! value, if any, applies), so callers skip null values before calling.
//!
//! Locations follow GitLab's entry tree: items of composable arrays are named by their
//! class (`jobs:x:cache:cache`, `jobs:x:services:service`), `retry` errors use the bare
//! location `retry`, and a few "unknown strategy" errors have no `config` word
//! (`jobs:x:parallel should be an integer or a hash`).

mod artifacts;
mod cache;
mod common;
mod environment;
mod image;
mod inherit;
mod job_inputs;
mod misc;
mod parallel;
mod release;
mod retry;
mod run;
mod secrets;
mod trigger;
mod variables;

#[cfg(test)]
mod tests;

pub(crate) use artifacts::artifacts;
pub(crate) use cache::caches;
pub(crate) use environment::environment;
pub(crate) use image::{image, services};
pub(crate) use inherit::{DEFAULT_KEYS, Inherit, InheritSet, inherit};
pub use job_inputs::coerce as coerce_job_input;
pub(crate) use job_inputs::job_inputs;
pub(crate) use misc::{
    PagesKeyword, allow_failure, coverage, dast_configuration, hooks, identity, interruptible,
    pages, resource_group, tags, timeout,
};
pub(crate) use parallel::{Parallel, parallel};
pub(crate) use release::release;
pub(crate) use retry::retry;
pub(crate) use run::run_steps;
pub(crate) use secrets::{id_tokens, secrets};
pub(crate) use trigger::trigger;
pub(crate) use variables::{VarLevel, variables};
