//! Errors and warnings with their place: the YAML path in GitLab's wording, and the
//! file:line:column where the offending value is written.

use std::fmt;

use serde::Serialize;

use crate::yaml::{FileId, Pos};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// GitLab-style message, e.g. `jobs:build:script config should be a string or ...`.
    pub message: String,
    pub pos: Option<Pos>,
    /// Gantry's advice beside GitLab's message (``did you mean `script`?``), when it has
    /// some.
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, pos: Option<Pos>) -> Self {
        Self {
            message: message.into(),
            pos,
            hint: None,
        }
    }
}

/// The files a compilation read, for rendering positions and snippets.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

#[derive(Clone, Debug)]
pub struct SourceFile {
    pub name: String,
    pub text: String,
}

impl SourceMap {
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        self.files.push(SourceFile {
            name: name.into(),
            text: text.into(),
        });
        FileId(u32::try_from(self.files.len() - 1).unwrap_or(u32::MAX))
    }
    pub fn get(&self, id: FileId) -> Option<&SourceFile> {
        self.files.get(id.0 as usize)
    }
    pub fn len(&self) -> usize {
        self.files.len()
    }
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
    pub fn total_bytes(&self) -> usize {
        self.files.iter().map(|f| f.text.len()).sum()
    }
    /// `file:line:col`, when the position is known.
    pub fn location(&self, pos: Pos) -> Option<Location> {
        // Line 0 is `Pos::default()`: no single place (e.g. "no visible job").
        if pos.line == 0 {
            return None;
        }
        let f = self.get(pos.file)?;
        Some(Location {
            file: f.name.clone(),
            line: pos.line,
            column: pos.col,
        })
    }
    /// The source line of a position.
    pub fn line_text(&self, pos: Pos) -> Option<&str> {
        let f = self.get(pos.file)?;
        f.text.lines().nth((pos.line as usize).checked_sub(1)?)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Location {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}
