//! `gantry-steps`: GitLab Functions (CI steps) — the `run:` keyword's step runner.
//!
//! A job's `run:` list ([`definition::parse_run_list`]) is run by an [`Engine`] that loads
//! step files ([`load`]: local directories, git references), evaluates `${{ }}`
//! ([`template`], [`expr`]: the Moa language), checks inputs and outputs against each
//! step's spec, and returns a tree of [`StepResult`]s. Programs run through a
//! [`Launcher`]: [`LocalLauncher`] here, the runner's executors in `gantry-runner`.
//!
//! Knows nothing about the coordinator, HTTP or executors.
//!
//! No input panics: expressions, step files and output files give a failure naming the step
//! (limits in the module docs and the README). The first step that does not succeed ends
//! its sequence; a stopped launch (timeout, cancel) stops the whole run and its reason goes
//! back to the caller (`Engine::stopped`).

pub mod definition;
pub mod engine;
pub mod expr;
pub use expr::template;
pub mod load;
pub mod local;
pub mod reference;
pub mod result;

pub use definition::{Invocation, parse_run_list};
pub use engine::{Engine, JobContext, Launch, Launched, Launcher, Program};
pub use load::{Loader, PathMap};
pub use local::LocalLauncher;
pub use result::{Status, StepResult};
