//! `gantry-pipeline`: `.gitlab-ci.yml` in, a validated and fully expanded pipeline (or
//! precise errors) out. Pure: included files arrive through [`Loader`]; no clock, no
//! network, no file system.

pub mod diagnostic;
pub mod duration;
pub mod expand;
pub mod expr;
pub(crate) mod keyword;
pub mod model;
pub(crate) mod validate;
pub mod yaml;

pub use diagnostic::{Diagnostic, Location, SourceMap};
pub use model::*;
