//! The `dotenv` report (gitlabhq `Ci::ParseDotenvArtifactService`): variables a job
//! passes to later jobs.
//!
//! GitLab's rules, reproduced:
//!
//! * the content must be smaller than the size limit (default 5 KB = 5120 bytes:
//!   `size < limit`). GitLab measures the stored (gzip) file; this parser measures the
//!   bytes it is given, which is never more lenient for the same report;
//! * UTF-16 content (with a byte-order mark) is converted, a UTF-8 BOM stripped,
//!   invalid UTF-8 replaced by U+FFFD;
//! * every line must match `^(.*?)=(.*)$`: the key is everything before the first
//!   `=`, the value everything after it, both stripped of surrounding whitespace
//!   (and NUL). There are no comments, no blank lines, no quotes processing
//!   (`A="x"` keeps the quotes), no multi-line values, no `export` keyword;
//! * a key must be 1–255 characters of `[A-Za-z0-9_]`;
//! * a repeated key takes the last value; more than the variable limit (default 20)
//!   distinct keys is an error.
//!
//! Every error names the line it comes from.

use std::fmt;

/// Limits of a dotenv report (GitLab plan limits `dotenv_variables`, `dotenv_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DotenvLimits {
    /// Most distinct variables (default 20).
    pub max_variables: usize,
    /// The content must be strictly smaller than this many bytes (default 5120).
    pub max_bytes: usize,
}

impl Default for DotenvLimits {
    fn default() -> Self {
        Self {
            max_variables: 20,
            max_bytes: 5 * 1024,
        }
    }
}

/// One variable of a dotenv report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotenvVariable {
    /// The name.
    pub key: String,
    /// The value, stripped; may be empty.
    pub value: String,
}

/// Where in a report a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DotenvLocation {
    /// The report file, when known.
    pub file: Option<String>,
    /// 1-based line number.
    pub line: usize,
}

impl fmt::Display for DotenvLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{file}:{}", self.line),
            None => write!(f, "line {}", self.line),
        }
    }
}

/// Why a dotenv report is rejected. GitLab's own message is quoted where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DotenvError {
    /// The report is too large.
    #[error(
        "parse dotenv report: Dotenv Artifact Too Big. Maximum Allowable Size: {limit} (the report has {size} bytes)"
    )]
    TooBig {
        /// Bytes given.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A line is not `KEY=VALUE` (GitLab: `Invalid Format`).
    #[error("parse dotenv report at {at}: Invalid Format: expected KEY=VALUE, found {line:?}")]
    InvalidFormat {
        /// Where.
        at: DotenvLocation,
        /// The offending line, without its line break.
        line: String,
    },
    /// A key is empty, too long or has characters other than letters, digits and `_`.
    #[error("parse dotenv report at {at}: Validation failed: Key {problem} (key {key:?})")]
    InvalidKey {
        /// Where.
        at: DotenvLocation,
        /// The key.
        key: String,
        /// GitLab's wording of the problem.
        problem: &'static str,
    },
    /// Too many variables.
    #[error("parse dotenv report at {at}: Dotenv files cannot have more than {limit} variables")]
    TooManyVariables {
        /// The line that defines the first variable past the limit.
        at: DotenvLocation,
        /// The limit.
        limit: usize,
    },
}

/// Parses one dotenv report (see the module docs for the rules).
pub fn parse_dotenv(
    content: &[u8],
    limits: DotenvLimits,
) -> Result<Vec<DotenvVariable>, DotenvError> {
    parse_dotenv_files([(None, content)], limits)
}

/// Parses a report made of several files (the members of a gzip report), applying
/// the limits to the whole: sizes add up, variables are counted across files, a later
/// definition of a key replaces an earlier one in place.
pub fn parse_dotenv_files<'a>(
    files: impl IntoIterator<Item = (Option<&'a str>, &'a [u8])>,
    limits: DotenvLimits,
) -> Result<Vec<DotenvVariable>, DotenvError> {
    let files: Vec<(Option<&str>, &[u8])> = files.into_iter().collect();
    let size: usize = files.iter().map(|(_, content)| content.len()).sum();
    if size >= limits.max_bytes {
        return Err(DotenvError::TooBig {
            size,
            limit: limits.max_bytes,
        });
    }
    let mut variables: Vec<DotenvVariable> = Vec::new();
    for (file, content) in files {
        let text = decode(content);
        for (index, line) in lines(&text).enumerate() {
            let at = || DotenvLocation {
                file: file.map(str::to_owned),
                line: index + 1,
            };
            let Some((key, value)) = line.split_once('=') else {
                return Err(DotenvError::InvalidFormat {
                    at: at(),
                    line: line.trim_end_matches(['\n', '\r']).to_owned(),
                });
            };
            let key = ruby_strip(key);
            let value = ruby_strip(value);
            if let Some(problem) = key_problem(key) {
                return Err(DotenvError::InvalidKey {
                    at: at(),
                    key: key.to_owned(),
                    problem,
                });
            }
            if let Some(existing) = variables.iter_mut().find(|v| v.key == key) {
                existing.value = value.to_owned();
            } else {
                if variables.len() == limits.max_variables {
                    return Err(DotenvError::TooManyVariables {
                        at: at(),
                        limit: limits.max_variables,
                    });
                }
                variables.push(DotenvVariable {
                    key: key.to_owned(),
                    value: value.to_owned(),
                });
            }
        }
    }
    Ok(variables)
}

/// Ruby's `each_line`: pieces ending in `\n` (the last may not), no empty trailing one.
/// The `\n` is dropped; a `\r` before it stays (stripped with the value).
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        match rest.find('\n') {
            Some(end) => {
                let line = &rest[..end];
                rest = &rest[end + 1..];
                Some(line)
            }
            None => {
                let line = rest;
                rest = "";
                Some(line)
            }
        }
    })
}

/// Ruby's `String#strip`: whitespace (`\t\n\v\f\r `) and NUL at both ends.
fn ruby_strip(text: &str) -> &str {
    text.trim_matches(|c| matches!(c, '\t' | '\n' | '\u{0b}' | '\u{0c}' | '\r' | ' ' | '\0'))
}

fn key_problem(key: &str) -> Option<&'static str> {
    if key.is_empty() {
        Some("can't be blank")
    } else if key.len() > 255 {
        Some("is too long (maximum is 255 characters)")
    } else if !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Some("can contain only letters, digits and '_'.")
    } else {
        None
    }
}

/// UTF-16 (with BOM) → UTF-8; strip a UTF-8 BOM; invalid UTF-8 replaced.
fn decode(content: &[u8]) -> String {
    let utf16 = |big_endian: bool, bytes: &[u8]| {
        let units: Vec<u16> = bytes
            .chunks(2)
            .map(|pair| match pair {
                [a, b] if big_endian => u16::from_be_bytes([*a, *b]),
                [a, b] => u16::from_le_bytes([*a, *b]),
                _ => 0xFFFD,
            })
            .collect();
        String::from_utf16_lossy(&units)
    };
    match content {
        [0xFF, 0xFE, rest @ ..] => utf16(false, rest),
        [0xFE, 0xFF, rest @ ..] => utf16(true, rest),
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8_lossy(rest).into_owned(),
        _ => String::from_utf8_lossy(content).into_owned(),
    }
}
