//! `gantry-pipeline`: `.gitlab-ci.yml` in, a validated and fully expanded pipeline (or
//! precise errors) out. Pure: included files arrive through [`Loader`]; no clock, no
//! network, no file system.
//!
//! Entry point: [`compile()`]. [`report::LintReport`] is the stable JSON contract of
//! `gantry lint`.

pub mod compile;
pub mod context;
pub mod diagnostic;
pub mod duration;
pub mod emit;
pub mod expand;
pub mod expr;
pub mod include;
pub(crate) mod inputs;
pub(crate) mod keyword;
pub mod loader;
pub use keyword::coerce_job_input;
pub mod model;
pub mod report;
pub(crate) mod resolve;
pub(crate) mod rules;
pub mod select;
pub(crate) mod suggest;
pub(crate) mod validate;
pub mod yaml;

pub use compile::{Compiled, Options, compile};
pub use context::{
    Context, ExternalPullRequestInfo, GITLAB_VERSION, MergeRequestDiff, MergeRequestEventType,
    MergeRequestInfo, PipelineInfo, Source, Upstream,
};
pub use diagnostic::{Diagnostic, Location, SourceMap};
pub use include::remote_message;
pub use inputs::{InputValue, MAX_PIPELINE_INPUTS, PipelineInputs};
pub use loader::{
    ArtifactError, CompareError, Loader, MemoryLoader, ProjectError, ReadError, RemoteError,
};
pub use model::*;
pub use select::{SelectError, select_jobs};
