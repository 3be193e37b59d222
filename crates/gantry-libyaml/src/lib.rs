//! libyaml's scanner and parser in safe Rust: the parsing half of `libyaml-safer` 0.3.0
//! (Simon Ask Ulsnes's port of `unsafe-libyaml`, itself David Tolnay's translation of
//! libyaml 0.2.5 by Kirill Simonov; MIT, `LICENSE-MIT`), vendored so that no input can
//! panic it. GitLab reads `.gitlab-ci.yml` with libyaml (through Ruby's Psych), so this
//! is what `gantry-pipeline` reads it with.
//!
//! Changes from upstream, each where libyaml's C code does something the port did not
//! (the C buffer ends in NUL characters, which the port's queue does not hold):
//! - reading a line break or a character at the end of the input does nothing (C's
//!   `READ_LINE` / `READ` on the terminating NUL), where the port panicked;
//! - a tag followed by `,` inside a flow collection ends the tag (C's check), where the
//!   port panicked with a TODO;
//! - look-ups past the end of the buffer read as NUL, where the port unwrapped;
//! - the port's `unwrap`s and asserts on its own stacks (states, marks, simple keys,
//!   tokens) are errors (`internal parser state lost`, `internal scanner state lost`):
//!   libyaml keeps them balanced, and neither the tests nor the fuzzer reach them, but no
//!   input can turn them into a panic.
//!
//! And for speed, with the same tokens, marks and errors (the differential test holds):
//! - the working buffer is a vector and a read position (`chars.rs`), as libyaml's buffer
//!   and pointer, instead of a `VecDeque`; printable ASCII input is copied in without
//!   decoding;
//! - the scalar scanners read a run of characters that cannot end or change the scalar
//!   in one go (`read_run`), and reuse their buffers from one scalar to the next, copying
//!   each value out at its length; indentation and comments are skipped a run at a time
//!   (`skip_run`).
//!
//! The emitter and the document loader are left out (Gantry builds its own tree from the
//! events). The differential test against libyaml itself is
//! `gantry-pipeline/tests/differential`.
#![warn(clippy::pedantic)]
#![allow(
    clippy::cast_lossless,
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::fn_params_excessive_bools,
    clippy::manual_range_contains,
    clippy::missing_panics_doc,
    clippy::missing_errors_doc,
    clippy::module_name_repetitions,
    clippy::must_use_candidate,
    clippy::needless_pass_by_value,
    clippy::struct_excessive_bools,
    clippy::too_many_arguments,
    clippy::too_many_lines,
    clippy::unnecessary_wraps,
    clippy::match_wildcard_for_single_variants
)]
// Kept close to upstream: helpers of the emitter and loader left out stay unused, and
// upstream's control flow is kept as written (easier to compare with libyaml's C).
#![allow(dead_code, clippy::manual_let_else, clippy::collapsible_if)]
#![forbid(unsafe_code)]

extern crate alloc;

#[macro_use]
mod macros;

mod chars;
mod error;
mod event;
mod parser;
mod reader;
mod scanner;
mod token;

pub use crate::error::*;
pub use crate::event::*;
pub use crate::parser::*;
pub use crate::scanner::*;
pub use crate::token::*;

pub(crate) const INPUT_RAW_BUFFER_SIZE: usize = 16384;
pub(crate) const INPUT_BUFFER_SIZE: usize = INPUT_RAW_BUFFER_SIZE;
pub(crate) const OUTPUT_BUFFER_SIZE: usize = 16384;

/// The tag `!!null` with the only possible value: `null`.
pub const NULL_TAG: &str = "tag:yaml.org,2002:null";
/// The tag `!!bool` with the values: `true` and `false`.
pub const BOOL_TAG: &str = "tag:yaml.org,2002:bool";
/// The tag `!!str` for string values.
pub const STR_TAG: &str = "tag:yaml.org,2002:str";
/// The tag `!!int` for integer values.
pub const INT_TAG: &str = "tag:yaml.org,2002:int";
/// The tag `!!float` for float values.
pub const FLOAT_TAG: &str = "tag:yaml.org,2002:float";
/// The tag `!!timestamp` for date and time values.
pub const TIMESTAMP_TAG: &str = "tag:yaml.org,2002:timestamp";

/// The tag `!!seq` is used to denote sequences.
pub const SEQ_TAG: &str = "tag:yaml.org,2002:seq";
/// The tag `!!map` is used to denote mapping.
pub const MAP_TAG: &str = "tag:yaml.org,2002:map";

/// The default scalar tag is `!!str`.
pub const DEFAULT_SCALAR_TAG: &str = STR_TAG;
/// The default sequence tag is `!!seq`.
pub const DEFAULT_SEQUENCE_TAG: &str = SEQ_TAG;
/// The default mapping tag is `!!map`.
pub const DEFAULT_MAPPING_TAG: &str = MAP_TAG;

/// The version directive data.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct VersionDirective {
    /// The major version number.
    pub major: i32,
    /// The minor version number.
    pub minor: i32,
}

/// The tag directive data.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TagDirective {
    /// The tag handle.
    pub handle: String,
    /// The tag prefix.
    pub prefix: String,
}

/// The stream encoding.
#[derive(Copy, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[non_exhaustive]
pub enum Encoding {
    /// Let the parser choose the encoding.
    #[default]
    Any = 0,
    /// The default UTF-8 encoding.
    Utf8 = 1,
    /// The UTF-16-LE encoding with BOM.
    Utf16Le = 2,
    /// The UTF-16-BE encoding with BOM.
    Utf16Be = 3,
}

/// Line break type.
#[derive(Copy, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[non_exhaustive]
pub enum Break {
    /// Let the parser choose the break type.
    #[default]
    Any = 0,
    /// Use CR for line breaks (Mac style).
    Cr = 1,
    /// Use LN for line breaks (Unix style).
    Ln = 2,
    /// Use CR LN for line breaks (DOS style).
    CrLn = 3,
}

/// Scalar styles.
#[derive(Copy, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[non_exhaustive]
pub enum ScalarStyle {
    /// Let the emitter choose the style.
    #[default]
    Any = 0,
    /// The plain scalar style.
    Plain = 1,
    /// The single-quoted scalar style.
    SingleQuoted = 2,
    /// The double-quoted scalar style.
    DoubleQuoted = 3,
    /// The literal scalar style.
    Literal = 4,
    /// The folded scalar style.
    Folded = 5,
}

/// Sequence styles.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[non_exhaustive]
pub enum SequenceStyle {
    /// Let the emitter choose the style.
    Any = 0,
    /// The block sequence style.
    Block = 1,
    /// The flow sequence style.
    Flow = 2,
}

/// Mapping styles.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[non_exhaustive]
pub enum MappingStyle {
    /// Let the emitter choose the style.
    Any = 0,
    /// The block mapping style.
    Block = 1,
    /// The flow mapping style.
    Flow = 2,
}
