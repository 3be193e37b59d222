//! YAML loading as GitLab does it: Psych's YAML 1.1 scalar typing, anchors and aliases
//! (file-local), `<<` merge keys with Psych's positional semantics, and the `!reference`
//! tag kept as an unresolved node. Every node keeps its source position.
//!
//! Collections are shared, copy-on-write subtrees (`Rc`): cloning a [`Node`] is cheap, which
//! is what aliases, `extends` and `default:` merging do to the same base values for hundreds
//! of jobs. A mutation through `&mut` copies only the levels it touches (`Rc::make_mut`).
//!
//! The text is parsed by `gantry-libyaml` (libyaml's own scanner and parser), and the tree
//! is built here from its events: what GitLab's libyaml accepts loads, and what it rejects
//! fails with Psych's message and position. `YamlError::kind` tells a syntax error from a
//! stated limit or a tree that cannot be built. `!reference` stays a `Value::Reference`
//! until `resolve.rs` replaces it. A `Node` is not `Send` (`Rc`); what the crate hands out
//! (`model`) is plain data.
//!
//! Limits (stated, tested): a file may hold at most [`Limits::max_bytes`] bytes of text,
//! build at most [`Limits::max_nodes`] nodes (aliases count every node they copy, so an
//! alias bomb stops at the budget instead of exhausting memory) and nest at most
//! [`Limits::max_depth`] levels.

use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use gantry_libyaml::{EventData, Parser, ScalarStyle};
use indexmap::IndexMap;

use crate::expand::ruby_float_to_string;

/// Index of a source file in a [`crate::SourceMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// A position in a source file (1-based line and column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    pub file: FileId,
    pub line: u32,
    pub col: u32,
}

#[derive(Clone, Debug, PartialEq, Default)]
pub enum Value {
    #[default]
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// Shared; `Rc::make_mut` to change it.
    Seq(Rc<Vec<Node>>),
    Map(Map),
    /// `!reference [path, ...]` before resolution; items are the path segments as written.
    Reference(Rc<Vec<Node>>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub value: Value,
    pub pos: Pos,
}

/// What kind of scalar a mapping key was written as. GitLab symbolizes string keys and
/// keeps others (integers, booleans) as they are, which matters for job names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Str,
    Other,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub key_pos: Pos,
    pub key_kind: KeyKind,
    pub value: Node,
}

/// An insertion-ordered mapping. Re-inserting a key keeps its first position and replaces
/// the value (Ruby `Hash` semantics). Cloning shares the entries; the first mutation of a
/// shared map copies its entries (one level: their values stay shared). Equality does not
/// depend on the order (as `IndexMap`'s).
#[derive(Clone, Debug, Default)]
pub struct Map {
    entries: Rc<Entries>,
}

/// Mappings of up to this many entries are searched by a scan (most of a configuration
/// is small mappings: a scan of a few short keys is cheaper than hashing); larger ones are
/// indexed.
const SCANNED_UP_TO: usize = 12;

#[derive(Clone, Debug)]
enum Entries {
    Few(Vec<(String, Entry)>),
    // FxHash: keys are short YAML keys, hashed constantly; SipHash's DoS resistance buys
    // nothing here (a file's keys are bounded by the node budget).
    Many(IndexMap<String, Entry, rustc_hash::FxBuildHasher>),
}

impl Default for Entries {
    fn default() -> Self {
        Entries::Few(Vec::new())
    }
}

/// One of two iterators of the same items.
enum Either<A, B> {
    A(A),
    B(B),
}

impl<A: Iterator, B: Iterator<Item = A::Item>> Iterator for Either<A, B> {
    type Item = A::Item;
    fn next(&mut self) -> Option<A::Item> {
        match self {
            Either::A(a) => a.next(),
            Either::B(b) => b.next(),
        }
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Either::A(a) => a.size_hint(),
            Either::B(b) => b.size_hint(),
        }
    }
}

impl Entries {
    fn len(&self) -> usize {
        match self {
            Entries::Few(v) => v.len(),
            Entries::Many(m) => m.len(),
        }
    }
    fn get(&self, key: &str) -> Option<&Entry> {
        match self {
            Entries::Few(v) => v.iter().find(|(k, _)| k == key).map(|(_, e)| e),
            Entries::Many(m) => m.get(key),
        }
    }
    fn get_mut(&mut self, key: &str) -> Option<&mut Entry> {
        match self {
            Entries::Few(v) => v.iter_mut().find(|(k, _)| k == key).map(|(_, e)| e),
            Entries::Many(m) => m.get_mut(key),
        }
    }
    fn insert(&mut self, key: String, entry: Entry) {
        match self {
            Entries::Few(v) => {
                if let Some(slot) = v.iter_mut().find(|(k, _)| *k == key) {
                    slot.1 = entry;
                } else if v.len() < SCANNED_UP_TO {
                    v.push((key, entry));
                } else {
                    let mut m =
                        IndexMap::with_capacity_and_hasher(v.len() * 2, rustc_hash::FxBuildHasher);
                    m.extend(std::mem::take(v));
                    m.insert(key, entry);
                    *self = Entries::Many(m);
                }
            }
            Entries::Many(m) => {
                m.insert(key, entry);
            }
        }
    }
    fn shift_remove(&mut self, key: &str) -> Option<Entry> {
        match self {
            Entries::Few(v) => {
                let i = v.iter().position(|(k, _)| k == key)?;
                Some(v.remove(i).1)
            }
            Entries::Many(m) => m.shift_remove(key),
        }
    }
    fn iter(&self) -> impl Iterator<Item = (&String, &Entry)> {
        match self {
            Entries::Few(v) => Either::A(v.iter().map(|(k, e)| (k, e))),
            Entries::Many(m) => Either::B(m.iter()),
        }
    }
    fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Entry)> {
        match self {
            Entries::Few(v) => Either::A(v.iter_mut().map(|(k, e)| (&*k, e))),
            Entries::Many(m) => Either::B(m.iter_mut()),
        }
    }
    fn into_iter(self) -> impl Iterator<Item = (String, Entry)> {
        match self {
            Entries::Few(v) => Either::A(v.into_iter()),
            Entries::Many(m) => Either::B(m.into_iter()),
        }
    }
}

impl PartialEq for Map {
    fn eq(&self, other: &Map) -> bool {
        self.len() == other.len() && self.entries().all(|(k, e)| other.entry(k) == Some(e))
    }
}

impl Map {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entries.get(key).map(|e| &e.value)
    }
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        // Not copied when shared unless the key is there.
        if !self.contains_key(key) {
            return None;
        }
        Rc::make_mut(&mut self.entries)
            .get_mut(key)
            .map(|e| &mut e.value)
    }
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }
    pub fn contains_key(&self, key: &str) -> bool {
        self.entries.get(key).is_some()
    }
    pub fn insert(&mut self, key: String, entry: Entry) {
        Rc::make_mut(&mut self.entries).insert(key, entry);
    }
    /// Insert a value whose key has the same position as the value.
    pub fn insert_node(&mut self, key: impl Into<String>, value: Node) {
        let key_pos = value.pos;
        self.insert(
            key.into(),
            Entry {
                key_pos,
                key_kind: KeyKind::Str,
                value,
            },
        );
    }
    pub fn remove(&mut self, key: &str) -> Option<Node> {
        // Not copied when shared unless the key is there.
        if !self.contains_key(key) {
            return None;
        }
        Rc::make_mut(&mut self.entries)
            .shift_remove(key)
            .map(|e| e.value)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.entries.iter().map(|(k, e)| (k.as_str(), &e.value))
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Node)> {
        Rc::make_mut(&mut self.entries)
            .iter_mut()
            .map(|(k, e)| (k.as_str(), &mut e.value))
    }
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(k, e)| (k.as_str(), e))
    }
    /// The entries by value (copied when the map is shared).
    pub fn entries_owned(self) -> impl Iterator<Item = (String, Entry)> {
        Rc::unwrap_or_clone(self.entries).into_iter()
    }
    /// Whether both maps share their entries (then they are equal).
    pub fn ptr_eq(&self, other: &Map) -> bool {
        Rc::ptr_eq(&self.entries, &other.entries)
    }
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }
}

impl Node {
    pub fn new(value: Value, pos: Pos) -> Self {
        Self { value, pos }
    }
    pub fn null(pos: Pos) -> Self {
        Self::new(Value::Null, pos)
    }
    pub fn str(s: impl Into<String>, pos: Pos) -> Self {
        Self::new(Value::Str(s.into()), pos)
    }
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
    /// The identity of a mapping's or sequence's shared contents: nodes with the same id
    /// (while one of them lives) have the same contents.
    pub(crate) fn shared_id(&self) -> Option<*const ()> {
        match &self.value {
            Value::Seq(items) => Some(Rc::as_ptr(items).cast()),
            Value::Map(m) => Some(Rc::as_ptr(&m.entries).cast()),
            _ => None,
        }
    }
    pub fn as_map(&self) -> Option<&Map> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
    pub fn as_map_mut(&mut self) -> Option<&mut Map> {
        match &mut self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }
    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self.value {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_int(&self) -> Option<i64> {
        match self.value {
            Value::Int(i) => Some(i),
            _ => None,
        }
    }
    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }
    pub fn is_scalar(&self) -> bool {
        matches!(
            self.value,
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_)
        )
    }
    /// Ruby's `to_s` of a scalar, as GitLab stringifies variable values: `012` → `"10"`,
    /// `on` → `"true"`, `1.10` → `"1.1"`, `~` → `""`. `None` for collections.
    pub fn scalar_to_string(&self) -> Option<String> {
        Some(match &self.value {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => ruby_float_to_string(*f),
            Value::Str(s) => s.clone(),
            Value::Seq(_) | Value::Map(_) | Value::Reference(_) => return None,
        })
    }
    /// "Blank" in Rails terms: null, false, empty or whitespace-only string, empty collection.
    pub fn is_blank(&self) -> bool {
        match &self.value {
            Value::Null => true,
            Value::Bool(b) => !b,
            Value::Str(s) => s.trim().is_empty(),
            Value::Seq(s) => s.is_empty(),
            Value::Map(m) => m.is_empty(),
            Value::Int(_) | Value::Float(_) | Value::Reference(_) => false,
        }
    }
    /// Number of nodes in this subtree (used for the alias budget).
    pub fn size(&self) -> usize {
        1 + match &self.value {
            Value::Seq(items) | Value::Reference(items) => items.iter().map(Node::size).sum(),
            Value::Map(m) => m.iter().map(|(_, v)| 1 + v.size()).sum(),
            _ => 0,
        }
    }
    /// The node for a JSON value (every node at `pos`): a number without a fraction
    /// that fits `i64` is an integer, as YAML would read it.
    pub fn from_json(value: &serde_json::Value, pos: Pos) -> Node {
        use serde_json::Value as J;
        let value = match value {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => Value::Str(s.clone()),
            J::Array(items) => Value::Seq(Rc::new(
                items.iter().map(|i| Node::from_json(i, pos)).collect(),
            )),
            J::Object(o) => {
                let mut m = Map::new();
                for (k, v) in o {
                    m.insert_node(k.clone(), Node::from_json(v, pos));
                }
                Value::Map(m)
            }
        };
        Node::new(value, pos)
    }
    /// A JSON view of the node (references rendered as `{"!reference": [...]}`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Str(s) => J::String(s.clone()),
            Value::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(m) => {
                J::Object(m.iter().map(|(k, v)| (k.to_owned(), v.to_json())).collect())
            }
            Value::Reference(items) => {
                let mut o = serde_json::Map::new();
                o.insert(
                    "!reference".into(),
                    J::Array(items.iter().map(Node::to_json).collect()),
                );
                J::Object(o)
            }
        }
    }
}

impl Value {
    /// Ruby-ish type name for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "float",
            Value::Str(_) => "string",
            Value::Seq(_) => "array",
            Value::Map(_) => "hash",
            Value::Reference(_) => "!reference",
        }
    }
}

/// Limits on one YAML file.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of text (GitLab: `max_yaml_size_bytes`, 2 MB).
    pub max_bytes: usize,
    /// Nodes built, counting every node an alias copies.
    pub max_nodes: usize,
    /// Nesting depth of collections (GitLab: `max_yaml_depth`, 100).
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 2 * 1024 * 1024,
            max_nodes: 1_000_000,
            max_depth: 100,
        }
    }
}

/// Why a file did not load. The [`YamlError::message`] is the text of the exception Psych
/// would raise; [`YamlError::gitlab_message`] is the message GitLab shows for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlError {
    pub kind: YamlErrorKind,
    pub message: String,
    pub pos: Pos,
}

/// The families of load failures, as GitLab tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YamlErrorKind {
    /// libyaml's scanner, parser or reader stopped (`Psych::SyntaxError`): the message is
    /// libyaml's problem and context, the position Psych's (the context mark).
    Syntax,
    /// A stated limit: bytes, nodes or depth ([`TOO_BIG`], GitLab's message).
    TooBig,
    /// The text parsed, but its tree cannot be built: an alias to an anchor not defined
    /// before it (Psych's `AnchorNotDefined`), an unknown or misused tag, a collection as a
    /// mapping key.
    Load,
}

impl YamlError {
    /// The message GitLab shows for this failure: `(<unknown>): … at line L column C` for a
    /// syntax error (Psych names no file: GitLab loads from a string), the bare message
    /// otherwise.
    pub fn gitlab_message(&self) -> String {
        match self.kind {
            YamlErrorKind::Syntax => format!(
                "(<unknown>): {} at line {} column {}",
                self.message, self.pos.line, self.pos.col
            ),
            YamlErrorKind::TooBig | YamlErrorKind::Load => self.message.clone(),
        }
    }
}

impl fmt::Display for YamlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.message, self.pos.line, self.pos.col
        )
    }
}

pub const TOO_BIG: &str = "The parsed YAML is too big";

/// A libyaml error as Psych reports it: `problem context` (either may be missing), at the
/// context mark. libyaml leaves the context mark of a parser error without context at its
/// initial value, so Psych reports those (and reader errors) at line 1 column 1; a scanner
/// error without context is raised with the problem's mark as its context mark.
fn syntax_error(e: &gantry_libyaml::Error, file: FileId) -> YamlError {
    let message = match e.context() {
        Some(context) if !e.problem().is_empty() => format!("{} {}", e.problem(), context),
        Some(context) => context.to_owned(),
        None => e.problem().to_owned(),
    };
    let mark = match (e.context_mark(), e.kind()) {
        (Some(m), _) => Some(m),
        (None, gantry_libyaml::ErrorKind::Scanner) => e.problem_mark(),
        (None, _) => None,
    };
    let (line, col) = mark.map_or((1, 1), |m| (m.line + 1, m.column + 1));
    YamlError {
        kind: YamlErrorKind::Syntax,
        message,
        pos: Pos {
            file,
            line: u32::try_from(line).unwrap_or(u32::MAX),
            col: u32::try_from(col).unwrap_or(u32::MAX),
        },
    }
}

/// Parse every document of `text`, as libyaml does (the `libyaml-safer` port: the same
/// scanner and parser, so what libyaml accepts loads and what it rejects fails with its
/// problem and position).
pub fn parse_documents(text: &str, file: FileId, limits: Limits) -> Result<Vec<Node>, YamlError> {
    let start = Pos {
        file,
        line: 1,
        col: 1,
    };
    if text.len() > limits.max_bytes {
        return Err(YamlError {
            kind: YamlErrorKind::TooBig,
            message: TOO_BIG.into(),
            pos: start,
        });
    }
    let mut b = Builder {
        limits,
        nodes: 0,
        anchors: HashMap::new(),
        stack: Vec::new(),
        docs: Vec::new(),
    };
    let mut input = text.as_bytes();
    let mut parser = Parser::new();
    parser.set_input_string(&mut input);
    // Psych parses the whole stream before it builds anything, so a syntax error anywhere
    // wins over a tree that cannot be built (an unknown alias, a limit): once building
    // fails, the rest is only parsed (no nodes are made, so an alias bomb costs nothing).
    // One exception: nesting deeper than the limit stops at once. libyaml's scanner checks
    // every open flow level's possible key at each token, so its time grows with the
    // square of the nesting (Psych takes seconds for 40,000 `[`); a file that deep is
    // reported too big without reading further.
    let mut failed: Option<YamlError> = None;
    let mut depth = 0usize;
    loop {
        let event = parser.parse().map_err(|e| syntax_error(&e, file))?;
        let pos = Pos {
            file,
            line: u32::try_from(event.start_mark.line + 1).unwrap_or(u32::MAX),
            col: u32::try_from(event.start_mark.column + 1).unwrap_or(u32::MAX),
        };
        match event.data {
            EventData::StreamEnd => break,
            EventData::SequenceStart { .. } | EventData::MappingStart { .. } => {
                depth += 1;
                if depth > limits.max_depth {
                    return Err(failed.unwrap_or_else(|| too_big(pos)));
                }
            }
            EventData::SequenceEnd | EventData::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
        if failed.is_some() {
            continue;
        }
        if let Err(e) = b.event(event.data, pos) {
            failed = Some(e);
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(b.docs),
    }
}

/// libyaml's event stream of `text`, one line per event, each with its 1-based start
/// line and column (`+DOC`/`-DOC` with `---`/`...` when explicit; `=VAL` with the scalar's
/// style `:` plain, `'` single, `"` double, `|` literal, `>` folded and its value escaped;
/// anchors `&a`, tags `<t>`, aliases `*a`), then `ERR` and Psych's message when libyaml
/// stops. It is the contract of the differential test against libyaml itself
/// (`tests/libyaml_differential.rs` compares it with what Ruby's Psych reports for the same
/// text), so what it prints is what [`parse_documents`] builds from.
#[doc(hidden)]
pub fn libyaml_events(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut input = text.as_bytes();
    let mut parser = Parser::new();
    parser.set_input_string(&mut input);
    let props = |anchor: &Option<String>, tag: &Option<String>| {
        let mut p = String::new();
        if let Some(a) = anchor {
            p.push_str(" &");
            p.push_str(a);
        }
        if let Some(t) = tag {
            p.push_str(" <");
            p.push_str(t);
            p.push('>');
        }
        p
    };
    loop {
        let event = match parser.parse() {
            Ok(e) => e,
            Err(e) => {
                let _ = writeln!(out, "ERR {}", syntax_error(&e, FileId(0)).gitlab_message());
                break;
            }
        };
        let at = format!(
            "{}:{}",
            event.start_mark.line + 1,
            event.start_mark.column + 1
        );
        let line = match &event.data {
            EventData::StreamStart { .. } => "+STR".to_owned(),
            EventData::StreamEnd => "-STR".to_owned(),
            EventData::DocumentStart { implicit, .. } => {
                if *implicit {
                    "+DOC".to_owned()
                } else {
                    "+DOC ---".to_owned()
                }
            }
            EventData::DocumentEnd { implicit } => {
                if *implicit {
                    "-DOC".to_owned()
                } else {
                    "-DOC ...".to_owned()
                }
            }
            EventData::Alias { anchor } => format!("=ALI *{anchor}"),
            EventData::Scalar {
                anchor,
                tag,
                value,
                style,
                ..
            } => {
                let style = match style {
                    ScalarStyle::SingleQuoted => '\'',
                    ScalarStyle::DoubleQuoted => '"',
                    ScalarStyle::Literal => '|',
                    ScalarStyle::Folded => '>',
                    _ => ':',
                };
                format!(
                    "=VAL{} {style}{}",
                    props(anchor, tag),
                    value.escape_default()
                )
            }
            EventData::SequenceStart { anchor, tag, .. } => format!("+SEQ{}", props(anchor, tag)),
            EventData::SequenceEnd => "-SEQ".to_owned(),
            EventData::MappingStart { anchor, tag, .. } => format!("+MAP{}", props(anchor, tag)),
            EventData::MappingEnd => "-MAP".to_owned(),
        };
        let _ = writeln!(out, "{at} {line}");
        if matches!(event.data, EventData::StreamEnd) {
            break;
        }
    }
    out
}

enum Frame {
    Seq {
        items: Vec<Node>,
        pos: Pos,
        anchor: Option<String>,
        reference: bool,
    },
    Map {
        map: Map,
        pos: Pos,
        anchor: Option<String>,
        key: Option<PendingKey>,
    },
}

struct PendingKey {
    name: String,
    kind: KeyKind,
    pos: Pos,
    merge: bool,
}

struct Builder {
    limits: Limits,
    nodes: usize,
    anchors: HashMap<String, (Node, usize, usize)>,
    stack: Vec<Frame>,
    docs: Vec<Node>,
}

impl Builder {
    fn err(&self, message: impl Into<String>, pos: Pos) -> YamlError {
        YamlError {
            kind: YamlErrorKind::Load,
            message: message.into(),
            pos,
        }
    }

    fn count(&mut self, n: usize, pos: Pos) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > self.limits.max_nodes {
            return Err(too_big(pos));
        }
        Ok(())
    }

    fn event(&mut self, event: EventData, pos: Pos) -> Result<(), YamlError> {
        match event {
            EventData::StreamStart { .. }
            | EventData::StreamEnd
            | EventData::DocumentEnd { .. } => Ok(()),
            // Anchors are the document's own: an alias in the next one to an anchor of this
            // one is unknown (Psych: `AnchorNotDefined`).
            EventData::DocumentStart { .. } => {
                self.anchors.clear();
                Ok(())
            }
            EventData::Alias { anchor } => {
                let Some((_, size, depth)) = self.anchors.get(&anchor) else {
                    // Psych's `AnchorNotDefined` (libyaml itself does not check aliases).
                    return Err(self.err(
                        format!("An alias referenced an unknown anchor: {anchor}"),
                        pos,
                    ));
                };
                let (size, depth) = (*size, *depth);
                if self.stack.len() + depth > self.limits.max_depth {
                    return Err(too_big(pos));
                }
                // Charge the budget before copying, so a bomb stops before it costs anything.
                self.count(size, pos)?;
                // The copy keeps the positions where the anchored content is written.
                let node = self
                    .anchors
                    .get(&anchor)
                    .map(|(n, _, _)| n.clone())
                    .unwrap_or(Node::null(pos));
                self.push_value(node, KeyKind::Str, false)
            }
            EventData::Scalar {
                anchor,
                tag,
                value,
                style,
                quoted_implicit,
                ..
            } => {
                self.count(1, pos)?;
                let (value, kind, plain_merge) =
                    resolve_scalar(value, style, quoted_implicit, tag.as_deref())
                        .map_err(|m| self.err(m, pos))?;
                let node = Node::new(value, pos);
                if let Some(anchor) = anchor {
                    self.anchors.insert(anchor, (node.clone(), 1, 0));
                }
                self.push_value(node, kind, plain_merge)
            }
            EventData::SequenceStart { anchor, tag, .. } => {
                self.count(1, pos)?;
                let reference = match tag.as_deref() {
                    None => false,
                    Some(REFERENCE_TAG) => true,
                    Some(t) if core_tag(t) == Some("seq") => false,
                    Some(t) => return Err(self.err(unknown_tag(t), pos)),
                };
                self.open(Frame::Seq {
                    items: Vec::new(),
                    pos,
                    anchor,
                    reference,
                })
            }
            EventData::MappingStart { anchor, tag, .. } => {
                self.count(1, pos)?;
                match tag.as_deref() {
                    None => {}
                    Some(t) if core_tag(t) == Some("map") => {}
                    Some(REFERENCE_TAG) => {
                        return Err(self.err("!reference [..] is not valid", pos));
                    }
                    Some(t) => return Err(self.err(unknown_tag(t), pos)),
                }
                self.open(Frame::Map {
                    map: Map::new(),
                    pos,
                    anchor,
                    key: None,
                })
            }
            EventData::SequenceEnd => {
                let Some(Frame::Seq {
                    items,
                    pos,
                    anchor,
                    reference,
                }) = self.stack.pop()
                else {
                    return Err(self.err("unbalanced sequence", pos));
                };
                let value = if reference {
                    Value::Reference(Rc::new(items))
                } else {
                    Value::Seq(Rc::new(items))
                };
                self.close(Node::new(value, pos), anchor)
            }
            EventData::MappingEnd => {
                let Some(Frame::Map {
                    map, pos, anchor, ..
                }) = self.stack.pop()
                else {
                    return Err(self.err("unbalanced mapping", pos));
                };
                self.close(Node::new(Value::Map(map), pos), anchor)
            }
        }
    }

    fn open(&mut self, frame: Frame) -> Result<(), YamlError> {
        let pos = match &frame {
            Frame::Seq { pos, .. } | Frame::Map { pos, .. } => *pos,
        };
        if self.stack.len() >= self.limits.max_depth {
            return Err(too_big(pos));
        }
        // A collection used as a mapping key is not something GitLab can symbolize.
        if let Some(Frame::Map { key: None, .. }) = self.stack.last() {
            return Err(self.err("mapping keys must be scalars", pos));
        }
        self.stack.push(frame);
        Ok(())
    }

    fn close(&mut self, node: Node, anchor: Option<String>) -> Result<(), YamlError> {
        if let Some(anchor) = anchor {
            let size = node.size();
            self.anchors
                .insert(anchor, (node.clone(), size, depth_of(&node)));
        }
        self.push_value(node, KeyKind::Str, false)
    }

    fn push_value(
        &mut self,
        node: Node,
        kind: KeyKind,
        plain_merge: bool,
    ) -> Result<(), YamlError> {
        match self.stack.last_mut() {
            None => {
                self.docs.push(node);
                Ok(())
            }
            Some(Frame::Seq { items, .. }) => {
                items.push(node);
                Ok(())
            }
            Some(Frame::Map { map, key, .. }) => match key.take() {
                None => {
                    let pos = node.pos;
                    let name = match node.value {
                        Value::Str(s) => Some(s),
                        value => Node::new(value, pos).scalar_to_string(),
                    };
                    let Some(name) = name else {
                        return Err(YamlError {
                            kind: YamlErrorKind::Load,
                            message: "mapping keys must be scalars".into(),
                            pos,
                        });
                    };
                    *key = Some(PendingKey {
                        merge: plain_merge && name == "<<",
                        name,
                        kind,
                        pos,
                    });
                    Ok(())
                }
                Some(k) => {
                    if k.merge {
                        match merge_source(node) {
                            Ok(src) => {
                                // Psych: `hash.merge!(merged)` — merged keys replace keys
                                // written before the `<<`; keys written after it win.
                                for (name, entry) in src.entries_owned() {
                                    map.insert(name, entry);
                                }
                            }
                            Err(node) => map.insert(
                                k.name,
                                Entry {
                                    key_pos: k.pos,
                                    key_kind: k.kind,
                                    value: node,
                                },
                            ),
                        }
                    } else {
                        map.insert(
                            k.name,
                            Entry {
                                key_pos: k.pos,
                                key_kind: k.kind,
                                value: node,
                            },
                        );
                    }
                    Ok(())
                }
            },
        }
    }
}

/// The mapping a `<<` value contributes, or the node back when it is not mergeable (then
/// `<<` is an ordinary key, as in Psych).
fn merge_source(node: Node) -> Result<Map, Node> {
    match node.value {
        Value::Map(m) => Ok(m),
        Value::Seq(items) if items.iter().all(|i| matches!(i.value, Value::Map(_))) => {
            // Psych: earlier entries of the list win over later ones.
            let mut merged = Map::new();
            for item in Rc::unwrap_or_clone(items).into_iter().rev() {
                if let Value::Map(m) = item.value {
                    for (name, entry) in m.entries_owned() {
                        merged.insert(name, entry);
                    }
                }
            }
            Ok(merged)
        }
        value => Err(Node {
            value,
            pos: node.pos,
        }),
    }
}

fn depth_of(node: &Node) -> usize {
    match &node.value {
        Value::Seq(items) | Value::Reference(items) => {
            1 + items.iter().map(depth_of).max().unwrap_or(0)
        }
        Value::Map(m) => 1 + m.iter().map(|(_, v)| depth_of(v)).max().unwrap_or(0),
        _ => 0,
    }
}

/// GitLab's custom tag, as libyaml resolves `!reference` (the primary handle `!`).
const REFERENCE_TAG: &str = "!reference";

/// The YAML core schema's prefix, what libyaml resolves the `!!` handle to.
const CORE_PREFIX: &str = "tag:yaml.org,2002:";

/// The suffix of a core-schema tag (`!!str` → `str`).
fn core_tag(tag: &str) -> Option<&str> {
    tag.strip_prefix(CORE_PREFIX)
}

fn unknown_tag(tag: &str) -> String {
    match core_tag(tag) {
        Some(suffix) => format!("unknown tag `!!{suffix}`"),
        None => format!("unknown tag `{tag}`"),
    }
}

fn too_big(pos: Pos) -> YamlError {
    YamlError {
        kind: YamlErrorKind::TooBig,
        message: TOO_BIG.into(),
        pos,
    }
}

/// Resolve a scalar as Psych does. Returns the value, the key kind it would have as a
/// mapping key, and whether it is a plain (untagged, unquoted) scalar. A quoted scalar
/// without a tag is a string (Psych's `o.quoted`, libyaml's `quoted_implicit`).
fn resolve_scalar(
    text: String,
    style: ScalarStyle,
    quoted_implicit: bool,
    tag: Option<&str>,
) -> Result<(Value, KeyKind, bool), String> {
    if let Some(t) = tag {
        if t == REFERENCE_TAG {
            return Err("!reference [..] is not valid".into());
        }
        let Some(suffix) = core_tag(t) else {
            return Err(unknown_tag(t));
        };
        let v = match suffix {
            "str" => Value::Str(text),
            "null" => Value::Null,
            "bool" => match psych_plain(&text) {
                v @ Value::Bool(_) => v,
                _ => return Err(format!("invalid value for !!bool: {text}")),
            },
            "int" => match psych_plain(&text) {
                v @ Value::Int(_) => v,
                _ => return Err(format!("invalid value for !!int: {text}")),
            },
            "float" => match psych_plain(&text) {
                Value::Int(i) => Value::Float(i as f64),
                v @ Value::Float(_) => v,
                _ => return Err(format!("invalid value for !!float: {text}")),
            },
            other => return Err(format!("unknown tag `!!{other}`")),
        };
        let kind = if matches!(v, Value::Str(_)) {
            KeyKind::Str
        } else {
            KeyKind::Other
        };
        return Ok((v, kind, false));
    }
    if quoted_implicit || style != ScalarStyle::Plain {
        return Ok((Value::Str(text), KeyKind::Str, false));
    }
    Ok(match plain_typed(&text) {
        Some(v) => (v, KeyKind::Other, true),
        None => (Value::Str(text), KeyKind::Str, true),
    })
}

/// Psych's `ScalarScanner#tokenize` for plain scalars (YAML 1.1 core types). Dates and
/// times stay strings (GitLab's safe loader would reject the Date class; we are lenient).
pub fn psych_plain(s: &str) -> Value {
    plain_typed(s).unwrap_or_else(|| Value::Str(s.to_owned()))
}

/// [`psych_plain`] of a scalar that is not a string; `None` for a string.
fn plain_typed(s: &str) -> Option<Value> {
    if s.is_empty() {
        return Some(Value::Null);
    }
    let first = s.as_bytes()[0];
    // The keywords, case-insensitively (the longest has 5 bytes).
    if s.len() <= 5
        && matches!(
            first.to_ascii_lowercase(),
            b'~' | b'n' | b'y' | b't' | b'o' | b'f' | b'.' | b'+' | b'-'
        )
    {
        let mut lower = [0u8; 5];
        let lower = &mut lower[..s.len()];
        lower.copy_from_slice(s.as_bytes());
        lower.make_ascii_lowercase();
        match &*lower {
            b"~" | b"null" => return Some(Value::Null),
            b"yes" | b"true" | b"on" => return Some(Value::Bool(true)),
            b"no" | b"false" | b"off" => return Some(Value::Bool(false)),
            b".inf" | b"+.inf" => return Some(Value::Float(f64::INFINITY)),
            b"-.inf" => return Some(Value::Float(f64::NEG_INFINITY)),
            b".nan" => return Some(Value::Float(f64::NAN)),
            _ => {}
        }
    }
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return None;
    }
    if let Some(v) = parse_sexagesimal(s) {
        return Some(v);
    }
    if let Some(i) = parse_ruby_int(s) {
        return Some(Value::Int(i));
    }
    parse_ruby_float(s).map(Value::Float)
}

fn split_sign(s: &str) -> (bool, &str) {
    if let Some(r) = s.strip_prefix('-') {
        (true, r)
    } else if let Some(r) = s.strip_prefix('+') {
        (false, r)
    } else {
        (false, s)
    }
}

/// `[-+]?[0-9][0-9_]*(:[0-5]?[0-9]){1,2}` (int) and the same followed by `.[0-9_]*` (float).
fn parse_sexagesimal(s: &str) -> Option<Value> {
    let (neg, body) = split_sign(s);
    if !body.contains(':') {
        return None;
    }
    let (body, frac) = match body.split_once('.') {
        Some((b, f)) => (b, Some(f)),
        None => (body, None),
    };
    let mut parts = body.split(':');
    let head = parts.next()?;
    if head.is_empty()
        || !head.as_bytes()[0].is_ascii_digit()
        || !head.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    let rest: Vec<&str> = parts.collect();
    if rest.is_empty() || rest.len() > 2 {
        return None;
    }
    let mut total: i64 = head.replace('_', "").parse().ok()?;
    for p in &rest {
        let ok = match p.as_bytes() {
            [d] => d.is_ascii_digit(),
            [a, b] => (b'0'..=b'5').contains(a) && b.is_ascii_digit(),
            _ => false,
        };
        if !ok {
            return None;
        }
        total = total.checked_mul(60)?.checked_add(p.parse::<i64>().ok()?)?;
    }
    match frac {
        None => Some(Value::Int(if neg { -total } else { total })),
        Some(f) => {
            if !f.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
                return None;
            }
            let frac: f64 = format!("0.{}", f.replace('_', "")).parse().unwrap_or(0.0);
            let v = total as f64 + frac;
            Some(Value::Float(if neg { -v } else { v }))
        }
    }
}

/// Psych's non-strict INTEGER regex: binary `0b`, octal leading `0`, decimal with `_`/`,`
/// separators between digits, hex `0x`; then Ruby `Integer()` of the text without `,`/`_`.
fn parse_ruby_int(s: &str) -> Option<i64> {
    let (neg, body) = split_sign(s);
    let signed = |v: i64| if neg { v.checked_neg() } else { Some(v) };
    let clean = |t: &str| {
        t.chars()
            .filter(|c| *c != '_' && *c != ',')
            .collect::<String>()
    };
    if let Some(bin) = body.strip_prefix("0b") {
        if bin.is_empty() || !bin.bytes().all(|b| matches!(b, b'0' | b'1' | b'_' | b',')) {
            return None;
        }
        return signed(i64::from_str_radix(&clean(bin), 2).ok()?);
    }
    if let Some(hex) = body.strip_prefix("0x") {
        if hex.is_empty()
            || !hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'_' || b == b',')
        {
            return None;
        }
        return signed(i64::from_str_radix(&clean(hex), 16).ok()?);
    }
    if body.len() > 1 && body.starts_with('0') {
        let oct = &body[1..];
        if !oct.bytes().all(|b| matches!(b, b'0'..=b'7' | b'_' | b',')) {
            return None;
        }
        let digits = clean(oct);
        if digits.is_empty() {
            return signed(0);
        }
        return signed(i64::from_str_radix(&digits, 8).ok()?);
    }
    if body == "0" {
        return Some(0);
    }
    // [1-9](?:[0-9]|,[0-9]|_[0-9])*
    let bytes = body.as_bytes();
    if bytes.is_empty() || !matches!(bytes[0], b'1'..=b'9') {
        return None;
    }
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'0'..=b'9' => i += 1,
            b',' | b'_' if i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit() => i += 2,
            _ => return None,
        }
    }
    signed(clean(body).parse().ok()?)
}

/// Psych's FLOAT: `[-+]?([0-9][0-9_,]*)?\.[0-9]*([eE][-+][0-9]+)?` (a lone `.` stays a string).
fn parse_ruby_float(s: &str) -> Option<f64> {
    let (neg, body) = split_sign(s);
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int_part, frac) = mantissa.split_once('.')?;
    let int_ok = int_part.as_bytes()[..]
        .first()
        .is_some_and(u8::is_ascii_digit)
        && int_part
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'_' || b == b',');
    if !int_part.is_empty() && !int_ok {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if int_part.is_empty() && frac.is_empty() {
        return None;
    }
    if let Some(e) = exp {
        let digits = e.strip_prefix(['-', '+'])?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
    }
    let mut text: String = int_part
        .chars()
        .filter(|c| *c != '_' && *c != ',')
        .collect();
    if text.is_empty() {
        text.push('0');
    }
    text.push('.');
    text.push_str(if frac.is_empty() { "0" } else { frac });
    if let Some(e) = exp {
        text.push('e');
        text.push_str(e);
    }
    let v: f64 = text.parse().ok()?;
    Some(if neg { -v } else { v })
}

/// A compact JSON rendering of a node for messages.
pub(crate) fn compact_json(n: &Node) -> String {
    match &n.value {
        Value::Str(s) => s.clone(),
        _ => n.to_json().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Node {
        let mut docs = parse_documents(text, FileId(0), Limits::default()).expect("parses");
        docs.remove(0)
    }

    fn json(text: &str) -> String {
        doc(text).to_json().to_string()
    }

    #[test]
    fn psych_scalars() {
        assert_eq!(psych_plain("012345"), Value::Int(5349));
        assert_eq!(psych_plain("0x1F"), Value::Int(31));
        assert_eq!(psych_plain("1_000"), Value::Int(1000));
        assert_eq!(psych_plain("1,000"), Value::Int(1000));
        assert_eq!(psych_plain("0b101"), Value::Int(5));
        assert_eq!(psych_plain("1:20"), Value::Int(80));
        assert_eq!(psych_plain("1001:1001"), Value::Str("1001:1001".into()));
        assert_eq!(psych_plain("on"), Value::Bool(true));
        assert_eq!(psych_plain("OFF"), Value::Bool(false));
        assert_eq!(psych_plain("y"), Value::Str("y".into()));
        assert_eq!(psych_plain("~"), Value::Null);
        assert_eq!(psych_plain("1.10"), Value::Float(1.1));
        assert_eq!(psych_plain(".5"), Value::Float(0.5));
        assert_eq!(psych_plain("1."), Value::Float(1.0));
        assert_eq!(psych_plain("."), Value::Str(".".into()));
        assert_eq!(psych_plain("1e3"), Value::Str("1e3".into()));
        assert_eq!(psych_plain("1.0e+3"), Value::Float(1000.0));
        assert_eq!(psych_plain("-12"), Value::Int(-12));
        assert_eq!(psych_plain("09"), Value::Str("09".into()));
        assert_eq!(psych_plain("2024-01-01"), Value::Str("2024-01-01".into()));
        assert_eq!(
            psych_plain("99999999999999999999"),
            Value::Str("99999999999999999999".into())
        );
        assert_eq!(
            doc("a: 1.10\n")
                .as_map()
                .and_then(|m| m.get("a"))
                .and_then(Node::scalar_to_string),
            Some("1.1".into())
        );
    }

    #[test]
    fn quoted_and_tagged() {
        assert_eq!(
            json("a: '012'\nb: !!str 12\nc: !!int '7'\n"),
            r#"{"a":"012","b":"12","c":7}"#
        );
    }

    #[test]
    fn anchors_aliases_and_merge_keys() {
        let text =
            "base: &b {x: 1, y: 2}\nj:\n  <<: *b\n  y: 3\nk:\n  y: 0\n  <<: [*b, {x: 9, z: 4}]\n";
        assert_eq!(
            json(text),
            r#"{"base":{"x":1,"y":2},"j":{"x":1,"y":3},"k":{"y":2,"x":1,"z":4}}"#
        );
    }

    #[test]
    fn repeated_merge_keys_apply_in_order() {
        let text = "a: &a {p: 1, q: 1}\nb: &b {q: 2}\nj:\n  <<: *a\n  <<: *b\n";
        assert_eq!(
            json(text),
            r#"{"a":{"p":1,"q":1},"b":{"q":2},"j":{"p":1,"q":2}}"#
        );
    }

    #[test]
    fn reference_tag_is_kept() {
        assert_eq!(
            json("s: !reference [.a, script]\n"),
            r#"{"s":{"!reference":[".a","script"]}}"#
        );
    }

    #[test]
    fn unknown_tag_is_an_error() {
        let e = parse_documents("a: !foo bar\n", FileId(0), Limits::default()).unwrap_err();
        assert_eq!(e.message, "unknown tag `!foo`");
        // The node starts at its tag, as libyaml marks it.
        assert_eq!((e.pos.line, e.pos.col), (1, 4));
    }

    #[test]
    fn positions_are_one_based() {
        let d = doc("a:\n  b: [1, 2]\n");
        let b = d
            .as_map()
            .and_then(|m| m.get("a"))
            .and_then(Node::as_map)
            .and_then(|m| m.get("b"))
            .cloned();
        let b = b.expect("b");
        assert_eq!((b.pos.line, b.pos.col), (2, 6));
    }

    #[test]
    fn syntax_error_stops() {
        // libyaml's problem, then its context, at the context's mark (Psych's message).
        let e = parse_documents("a: [b\nc: d", FileId(0), Limits::default()).unwrap_err();
        assert_eq!(
            e.gitlab_message(),
            "(<unknown>): did not find expected ',' or ']' while parsing a flow sequence \
             at line 1 column 4"
        );
        assert_eq!(e.kind, YamlErrorKind::Syntax);
        let e = parse_documents("a: b: c\n", FileId(0), Limits::default()).unwrap_err();
        assert_eq!(
            e.gitlab_message(),
            "(<unknown>): mapping values are not allowed in this context at line 1 column 5"
        );
        let e = parse_documents("a:\n  b: 1\n c: 2\n", FileId(0), Limits::default()).unwrap_err();
        assert_eq!(
            e.gitlab_message(),
            "(<unknown>): did not find expected key while parsing a block mapping \
             at line 1 column 1"
        );
    }

    #[test]
    fn alias_bomb_is_rejected_quickly() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = format!("*a{}", i - 1);
            text.push_str(&format!(
                "a{i}: &a{i} [{}]\n",
                [prev.as_str(); 10].join(", ")
            ));
        }
        let t = std::time::Instant::now();
        let e = parse_documents(&text, FileId(0), Limits::default()).unwrap_err();
        assert_eq!(e.message, TOO_BIG);
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn depth_and_size_limits() {
        let deep = format!("{}{}", "[".repeat(150), "]".repeat(150));
        assert_eq!(
            parse_documents(&deep, FileId(0), Limits::default())
                .unwrap_err()
                .message,
            TOO_BIG
        );
        let big = "a".repeat(3 * 1024 * 1024);
        assert_eq!(
            parse_documents(&big, FileId(0), Limits::default())
                .unwrap_err()
                .message,
            TOO_BIG
        );
    }

    #[test]
    fn duplicate_keys_last_wins_in_first_position() {
        assert_eq!(json("a: 1\nb: 2\na: 3\n"), r#"{"a":3,"b":2}"#);
    }

    #[test]
    fn multiple_documents() {
        let docs = parse_documents(
            "spec:\n  inputs: {}\n---\na: 1\n",
            FileId(0),
            Limits::default(),
        )
        .expect("ok");
        assert_eq!(docs.len(), 2);
    }

    #[test]
    fn what_libyaml_accepts_loads() {
        // GitLab's own rules file: a single-quoted scalar continued on a line indented like
        // its key (YAML 1.2 wants it indented more; libyaml takes it).
        let text = "rules:\n  - if: '$A == \"1\" &&\n  $B'\n    when: never\n";
        assert_eq!(
            json(text),
            r#"{"rules":[{"if":"$A == \"1\" && $B","when":"never"}]}"#
        );
        // A flow sequence whose closing bracket is indented less than its key.
        let text = "job:\n  script: [\n    a,\n    b\n]\n";
        assert_eq!(json(text), r#"{"job":{"script":["a","b"]}}"#);
    }

    #[test]
    fn an_unknown_alias_is_psychs_error() {
        let e =
            parse_documents("a: &x [1]\n---\nb: *x\n", FileId(0), Limits::default()).unwrap_err();
        assert_eq!(
            e.gitlab_message(),
            "An alias referenced an unknown anchor: x"
        );
        let e = parse_documents("a: *nope\n", FileId(0), Limits::default()).unwrap_err();
        assert_eq!(
            e.gitlab_message(),
            "An alias referenced an unknown anchor: nope"
        );
        assert_eq!(e.kind, YamlErrorKind::Load);
    }

    #[test]
    fn complex_keys_are_rejected() {
        assert!(parse_documents("? [a]\n: b\n", FileId(0), Limits::default()).is_err());
    }
}
