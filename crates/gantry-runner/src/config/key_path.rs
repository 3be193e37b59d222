//! Dotted key paths (`runners[0].docker.image`) and their positions in the file.

use std::fmt;

/// One step of a [`KeyPath`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// Where a value lives in `config.toml`, written as gitlab-runner's users read it:
/// `runners[0].docker.image`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KeyPath(Vec<Segment>);

impl KeyPath {
    /// The document root.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// This path with `key` appended.
    pub fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.to_owned()));
        Self(segments)
    }

    /// This path with `index` appended.
    pub fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(index));
        Self(segments)
    }

    /// The steps, outermost first.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// The last table key, if the path ends in one.
    pub fn last_key(&self) -> Option<&str> {
        match self.0.last() {
            Some(Segment::Key(key)) => Some(key),
            _ => None,
        }
    }

    pub(crate) fn from_ignored(path: &serde_ignored::Path<'_>) -> Self {
        fn walk(path: &serde_ignored::Path<'_>, out: &mut Vec<Segment>) {
            match path {
                serde_ignored::Path::Root => {}
                serde_ignored::Path::Seq { parent, index } => {
                    walk(parent, out);
                    out.push(Segment::Index(*index));
                }
                serde_ignored::Path::Map { parent, key } => {
                    walk(parent, out);
                    out.push(Segment::Key(key.clone()));
                }
                serde_ignored::Path::Some { parent }
                | serde_ignored::Path::NewtypeStruct { parent }
                | serde_ignored::Path::NewtypeVariant { parent } => walk(parent, out),
            }
        }
        let mut segments = Vec::new();
        walk(path, &mut segments);
        Self(segments)
    }

    pub(crate) fn from_tracked(path: &serde_path_to_error::Path) -> Self {
        let segments = path
            .iter()
            .filter_map(|segment| match segment {
                serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
                serde_path_to_error::Segment::Enum { variant } => {
                    Some(Segment::Key(variant.clone()))
                }
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        Self(segments)
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(top level)");
        }
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(index) => write!(f, "[{index}]")?,
                Segment::Key(key) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    let bare = !key.is_empty()
                        && key
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                    if bare {
                        f.write_str(key)?;
                    } else {
                        write!(f, "{key:?}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A 1-based line and column in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

impl Location {
    /// The position of byte `offset` in `text` (clamped to the text).
    pub fn of_offset(text: &str, offset: usize) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Self { line, column }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// Finds where `path` (or its closest existing ancestor) is written in `text`.
pub(crate) fn locate(text: &str, path: &KeyPath) -> Option<Location> {
    use toml::de::{DeTable, DeValue};

    let root = DeTable::parse(text).ok()?;
    let mut best = None;
    let mut current: Option<&DeValue<'_>> = None;
    let mut table: Option<&DeTable<'_>> = Some(root.get_ref());
    for segment in path.segments() {
        let next = match (segment, current, table) {
            (Segment::Key(key), None, Some(table)) => table
                .iter()
                .find(|(k, _)| k.get_ref().as_ref() == key.as_str())
                .map(|(k, v)| (k.span(), v)),
            (Segment::Key(key), Some(DeValue::Table(table)), _) => table
                .iter()
                .find(|(k, _)| k.get_ref().as_ref() == key.as_str())
                .map(|(k, v)| (k.span(), v)),
            (Segment::Index(index), Some(DeValue::Array(array)), _) => {
                array.get(*index).map(|v| (v.span(), v))
            }
            _ => None,
        };
        let Some((span, value)) = next else { break };
        best = Some(span.start);
        current = Some(value.get_ref());
        table = None;
    }
    best.map(|offset| Location::of_offset(text, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_like_gitlab_runner_users_read_it() {
        let path = KeyPath::root()
            .key("runners")
            .index(0)
            .key("docker")
            .key("image");
        assert_eq!(path.to_string(), "runners[0].docker.image");
        assert_eq!(KeyPath::root().key("a b").to_string(), "\"a b\"");
    }

    #[test]
    fn locates_nested_keys() {
        let text = "concurrent = 2\n\n[[runners]]\nname = \"a\"\n\n[[runners]]\n  limit = 3\n";
        let path = KeyPath::root().key("runners").index(1).key("limit");
        assert_eq!(locate(text, &path), Some(Location { line: 7, column: 3 }));
        let missing = KeyPath::root().key("runners").index(1).key("token");
        // falls back to the closest existing ancestor
        assert!(locate(text, &missing).is_some());
    }
}
