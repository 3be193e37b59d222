//! The toolkit every keyword validator uses: GitLab's message shapes and the recurring
//! type checks. Validators never stop at the first error; they collect all of them
//! (GitLab's CI Lint shows all).
//!
//! Message shapes (GitLab `Gitlab::Config::Entry::Validator`): a node's own type error reads
//! `<path> config <message>` (`jobs:build:script config should be ...`); an attribute of a
//! node reads `<path> <attribute> <message>` with the attribute humanized
//! (`jobs:deploy start in must be blank`). Entry messages are lower-cased as GitLab does.

use crate::diagnostic::Diagnostic;
use crate::yaml::{Map, Node, Pos, Value};

/// Collects diagnostics for one compilation.
#[derive(Debug, Default)]
pub struct Cx {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
}

/// Maximum nesting of arrays in `script`-like keys, `stages` and `rules`.
pub const MAX_NESTING: usize = 10;

impl Cx {
    /// `<path> config <msg>`, lower-cased.
    pub fn config(&mut self, path: &str, msg: impl AsRef<str>, pos: Pos) {
        self.push(format!("{path} config {}", msg.as_ref()), pos);
    }
    /// `<path> <attr> <msg>` with `attr` humanized (`start_in` → `start in`), lower-cased.
    pub fn attr(&mut self, path: &str, attr: &str, msg: impl AsRef<str>, pos: Pos) {
        self.push(
            format!("{path} {} {}", attr.replace('_', " "), msg.as_ref()),
            pos,
        );
    }
    /// An entry error whose text is already complete; lower-cased as GitLab does.
    pub fn push(&mut self, message: String, pos: Pos) {
        self.errors
            .push(Diagnostic::new(message.to_lowercase(), Some(pos)));
    }
    /// An error whose text is kept as written (YAML processor and include errors).
    pub fn raw(&mut self, message: impl Into<String>, pos: Option<Pos>) {
        self.errors.push(Diagnostic::new(message, pos));
    }
    pub fn warn(&mut self, message: impl Into<String>, pos: Option<Pos>) {
        self.warnings.push(Diagnostic::new(message, pos));
    }
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }

    /// The node as a mapping, or `<path> config should be a hash`.
    pub fn map<'a>(&mut self, node: &'a Node, path: &str) -> Option<&'a Map> {
        match &node.value {
            Value::Map(m) => Some(m),
            _ => {
                self.config(path, "should be a hash", node.pos);
                None
            }
        }
    }

    /// Report keys of `map` not in `allowed` as `<path> config contains unknown keys: a, b`.
    pub fn unknown_keys(&mut self, map: &Map, allowed: &[&str], path: &str, pos: Pos) -> bool {
        let unknown: Vec<&str> = map.keys().filter(|k| !allowed.contains(k)).collect();
        if unknown.is_empty() {
            return true;
        }
        let at = map.entry(unknown[0]).map_or(pos, |e| e.key_pos);
        self.config(
            path,
            format!("contains unknown keys: {}", unknown.join(", ")),
            at,
        );
        self.hint_last(crate::suggest::did_you_mean(&unknown, allowed));
        false
    }

    /// Attach a hint to the error pushed last.
    pub fn hint_last(&mut self, hint: Option<String>) {
        if let Some(last) = self.errors.last_mut() {
            last.hint = hint;
        }
    }

    /// A string value, or `<path> config should be a string`.
    pub fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            _ => {
                self.config(path, "should be a string", node.pos);
                None
            }
        }
    }

    /// A boolean, or `<path> config should be a boolean value`.
    pub fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.config(path, "should be a boolean value", node.pos);
                None
            }
        }
    }

    /// An array of strings, or `<path> config should be an array of strings`.
    pub fn string_array(&mut self, node: &Node, path: &str) -> Option<Vec<String>> {
        match string_array(node) {
            Some(v) => Some(v),
            None => {
                self.config(path, "should be an array of strings", node.pos);
                None
            }
        }
    }

    /// `script`-like commands: a string or an array of strings nested up to 10 levels,
    /// flattened.
    pub fn commands(&mut self, node: &Node, path: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let ok = match &node.value {
            Value::Str(s) => {
                out.push(s.clone());
                true
            }
            Value::Seq(_) => flatten_strings(node, 0, &mut out),
            _ => false,
        };
        if ok {
            Some(out)
        } else {
            self.config(
                path,
                format!("should be a string or a nested array of strings up to {MAX_NESTING} levels deep"),
                node.pos,
            );
            None
        }
    }
}

/// An array whose items are all strings (GitLab rejects numbers in arrays of strings).
pub fn string_array(node: &Node) -> Option<Vec<String>> {
    let items = node.as_seq()?;
    items
        .iter()
        .map(|i| i.as_str().map(str::to_owned))
        .collect()
}

/// Flatten nested arrays of strings (depth ≤ [`MAX_NESTING`]); false on anything else.
pub fn flatten_strings(node: &Node, depth: usize, out: &mut Vec<String>) -> bool {
    match &node.value {
        Value::Str(s) => {
            out.push(s.clone());
            true
        }
        Value::Seq(items) if depth < MAX_NESTING => {
            items.iter().all(|i| flatten_strings(i, depth + 1, out))
        }
        _ => false,
    }
}

/// Flatten nested arrays (any items) up to [`MAX_NESTING`] levels; `None` when deeper.
/// Borrows the items: rules and needs are flattened once per job.
pub fn flatten_nodes(node: &Node) -> Option<Vec<&Node>> {
    fn go<'a>(node: &'a Node, depth: usize, out: &mut Vec<&'a Node>) -> bool {
        match &node.value {
            Value::Seq(items) if depth < MAX_NESTING => items.iter().all(|i| go(i, depth + 1, out)),
            Value::Seq(_) => false,
            _ => {
                out.push(node);
                true
            }
        }
    }
    let mut out = Vec::new();
    match &node.value {
        Value::Seq(items) => items.iter().all(|i| go(i, 1, &mut out)).then_some(out),
        _ => None,
    }
}

/// Join a YAML path (built for every keyword of every job: one allocation, no formatting).
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        return key.to_owned();
    }
    let mut out = String::with_capacity(path.len() + 1 + key.len());
    out.push_str(path);
    out.push(':');
    out.push_str(key);
    out
}

/// GitLab's "should be an array of integers or an integer" values.
pub fn int_or_int_array(node: &Node) -> Option<Vec<i64>> {
    match &node.value {
        Value::Int(i) => Some(vec![*i]),
        Value::Seq(items) => items.iter().map(Node::as_int).collect(),
        _ => None,
    }
}
