//! `extends` (spec §2.2) and `!reference` (spec §2.4), applied in that order to the merged
//! configuration.

use std::rc::Rc;

use crate::validate::Cx;
use crate::yaml::{Map, Node, Pos, Value};

/// Ancestors an entry that itself uses `extends` may have (GitLab's `MAX_NESTING_LEVELS`:
/// a job may reach a base without `extends` through at most 11 `extends` hops).
pub const MAX_EXTENDS_DEPTH: usize = 10;
/// Nesting of `!reference` resolution.
pub const MAX_REFERENCE_DEPTH: usize = 10;

/// Resolve `extends` of every root entry in place.
pub(crate) fn extends(root: &mut Map, cx: &mut Cx) {
    let keys: Vec<String> = root.keys().map(str::to_owned).collect();
    let mut done = Done::default();
    for key in keys {
        let mut stack = Vec::new();
        // GitLab raises on the first `extends` error: report one.
        if !resolve_entry(root, &key, &mut stack, &mut done, cx) {
            break;
        }
    }
}

/// Entries already extended, with the longest `extends` chain from each (the entry first,
/// down to a base without `extends`), so that reaching one again deeper in another chain
/// still checks the depth the way GitLab does (it re-walks every chain).
type Done = rustc_hash::FxHashMap<String, Rc<Chain>>;

/// An `extends` chain as a shared list: an entry's chain is the entry, then its base's.
struct Chain {
    name: String,
    len: usize,
    next: Option<Rc<Chain>>,
}

impl Chain {
    fn nth(&self, i: usize) -> &str {
        let mut cur = self;
        for _ in 0..i {
            match &cur.next {
                Some(next) => cur = next,
                None => break,
            }
        }
        &cur.name
    }
}

/// An `extends` item's base name (a non-string item is named by its JSON, which no entry has).
fn base_name(item: &Node) -> std::borrow::Cow<'_, str> {
    match &item.value {
        Value::Str(s) => s.as_str().into(),
        _ => item
            .scalar_to_string()
            .unwrap_or_else(|| item.to_json().to_string())
            .into(),
    }
}

/// Returns false when an error stops resolution of this entry.
fn resolve_entry(
    root: &mut Map,
    key: &str,
    stack: &mut Vec<String>,
    done: &mut Done,
    cx: &mut Cx,
) -> bool {
    if let Some(chain) = done.get(key) {
        // Entries of the chain with `extends` (all but the last) have `stack.len() + i`
        // ancestors; GitLab rejects an extending entry with more than the maximum.
        let extending = chain.len.saturating_sub(1);
        if let Some(deep) = (0..extending).find(|i| stack.len() + i > MAX_EXTENDS_DEPTH) {
            let name = chain.nth(deep);
            let pos = root.get(name).map(|n| n.pos);
            cx.raw(format!("{name}: nesting too deep in `extends`"), pos);
            return false;
        }
        return true;
    }
    let Some(node) = root.get(key) else {
        return true;
    };
    // The `extends` value, shared (cheap to clone): the base names borrow from it while the
    // bases are resolved in `root`.
    let Some(extends) = node.as_map().and_then(|m| m.get("extends")).cloned() else {
        let chain = Chain {
            name: key.to_owned(),
            len: 1,
            next: None,
        };
        done.insert(key.to_owned(), Rc::new(chain));
        return true;
    };
    let bases: Vec<(std::borrow::Cow<'_, str>, Pos)> = match &extends.value {
        Value::Seq(items) => items.iter().map(|i| (base_name(i), i.pos)).collect(),
        _ => vec![(base_name(&extends), extends.pos)],
    };
    let pos = node.pos;
    // GitLab's order of checks; messages name the entry being extended.
    if stack.len() > MAX_EXTENDS_DEPTH {
        cx.raw(format!("{key}: nesting too deep in `extends`"), Some(pos));
        return false;
    }
    if stack.iter().any(|k| k == key) {
        cx.raw(
            format!("{key}: circular dependency detected in `extends`"),
            Some(pos),
        );
        return false;
    }
    stack.push(key.to_owned());
    // `deep_merge(bases…, own)`; the bases' values are shared, not copied.
    let mut merged = Map::new();
    let mut longest: Option<Rc<Chain>> = None;
    for (base, bpos) in &bases {
        let base: &str = base;
        match root.get(base) {
            None => {
                cx.raw(
                    format!("{key}: unknown keys in `extends` ({base})"),
                    Some(*bpos),
                );
                stack.pop();
                return false;
            }
            Some(b) if b.as_map().is_none() => {
                cx.raw(
                    format!("{key}: invalid base hashes in `extends` ({base})"),
                    Some(*bpos),
                );
                stack.pop();
                return false;
            }
            Some(_) => {}
        }
        if !resolve_entry(root, base, stack, done, cx) {
            stack.pop();
            return false;
        }
        if let Some(chain) = done
            .get(base)
            .filter(|c| c.len > longest.as_ref().map_or(0, |l| l.len))
        {
            longest = Some(Rc::clone(chain));
        }
        if let Some(Value::Map(b)) = root.get(base).map(|b| &b.value) {
            deep_merge_shared(&mut merged, b);
        }
    }
    stack.pop();
    if let Some(node) = root.get_mut(key) {
        if let Value::Map(own) = std::mem::take(&mut node.value) {
            deep_merge(&mut merged, own);
        }
        node.value = Value::Map(merged);
    }
    let chain = Chain {
        name: key.to_owned(),
        len: 1 + longest.as_ref().map_or(0, |l| l.len),
        next: longest,
    };
    done.insert(key.to_owned(), Rc::new(chain));
    true
}

/// Whether the configuration holds a `!reference`. Asked before `extends`, which only
/// copies nodes (and shares them: after it, the walk would visit each base once per job).
pub(crate) fn has_references(root: &Map) -> bool {
    root.iter().any(|(_, n)| has_reference(n))
}

/// Resolve every `!reference` in the configuration against the configuration itself.
pub(crate) fn references(root: &mut Map, cx: &mut Cx) {
    let snapshot = root.clone();
    let mut resolver = Resolver {
        root: &snapshot,
        stack: Vec::new(),
        done: rustc_hash::FxHashMap::default(),
    };
    let start = cx.errors.len();
    for (_, node) in root.iter_mut() {
        if let Some(new) = resolver.resolved(node, cx) {
            *node = new;
        }
    }
    // A reference reached from several places (a cycle, a shared snippet) is reported once.
    let mut seen = std::collections::HashSet::new();
    let mut i = 0;
    cx.errors.retain(|d| {
        i += 1;
        i <= start || seen.insert((d.message.clone(), d.pos.map(|p| (p.file, p.line, p.col))))
    });
}

fn has_reference(node: &Node) -> bool {
    match &node.value {
        Value::Reference(_) => true,
        Value::Seq(items) => items.iter().any(has_reference),
        Value::Map(m) => m.iter().any(|(_, v)| has_reference(v)),
        _ => false,
    }
}

fn render_path(items: &[Node]) -> String {
    let parts: Vec<String> = items
        .iter()
        .map(|i| match i.as_str() {
            Some(s) => format!("{s:?}"),
            None => i.to_json().to_string(),
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

struct Resolver<'a> {
    root: &'a Map,
    /// The references being resolved (rendered paths), outermost first.
    stack: Vec<String>,
    /// Values of the references written outside any referenced value that resolved without
    /// a diagnostic, by rendered path: every job naming `!reference [.x, rules]` gets the
    /// same shared value (resolved once, and validated once as one node).
    done: rustc_hash::FxHashMap<String, Node>,
}

impl Resolver<'_> {
    /// The node with its `!reference`s resolved, or `None` when nothing in it changes (an
    /// unresolved reference stays in place; fragment linting strips it). Only the collections
    /// on the way to a reference are copied.
    fn resolved(&mut self, node: &Node, cx: &mut Cx) -> Option<Node> {
        match &node.value {
            Value::Reference(items) => self
                .lookup(items, node.pos, cx)
                .map(|v| Node::new(v.value, node.pos)),
            Value::Seq(items) => {
                let mut out: Option<Vec<Node>> = None;
                for (i, item) in items.iter().enumerate() {
                    if let Some(new) = self.resolved(item, cx) {
                        if let Some(slot) = out.get_or_insert_with(|| items.to_vec()).get_mut(i) {
                            *slot = new;
                        }
                    }
                }
                out.map(|v| Node::new(Value::Seq(Rc::new(v)), node.pos))
            }
            Value::Map(m) => {
                let mut out: Option<Map> = None;
                for (k, v) in m.iter() {
                    if let Some(new) = self.resolved(v, cx) {
                        if let Some(slot) = out.get_or_insert_with(|| m.clone()).get_mut(k) {
                            *slot = new;
                        }
                    }
                }
                out.map(|m| Node::new(Value::Map(m), node.pos))
            }
            _ => None,
        }
    }

    fn lookup(&mut self, items: &[Node], pos: Pos, cx: &mut Cx) -> Option<Node> {
        let rendered = render_path(items);
        let path: Option<Vec<&str>> = items.iter().map(Node::as_str).collect();
        let Some(path) = path.filter(|p| !p.is_empty()) else {
            cx.raw(format!("!reference {rendered} is not valid"), Some(pos));
            return None;
        };
        if self.stack.contains(&rendered) {
            cx.raw(
                format!("!reference {rendered} is part of a circular chain"),
                Some(pos),
            );
            return None;
        }
        if self.stack.len() >= MAX_REFERENCE_DEPTH {
            cx.raw(
                format!(
                    "!reference {rendered} is nested too deeply (maximum {MAX_REFERENCE_DEPTH})"
                ),
                Some(pos),
            );
            return None;
        }
        // Outside any referenced value the result depends on the path only (the stack is
        // empty); a result that gave a diagnostic is not kept (its messages are repeated).
        let outermost = self.stack.is_empty();
        if let Some(found) = self.done.get(&rendered).filter(|_| outermost) {
            return Some(found.clone());
        }
        let root = self.root;
        let mut cur = root.get(path[0]);
        for seg in &path[1..] {
            cur = cur.and_then(|n| n.as_map()).and_then(|m| m.get(seg));
        }
        let Some(found) = cur else {
            cx.raw(
                format!("!reference {rendered} could not be found"),
                Some(pos),
            );
            return None;
        };
        let errors = cx.errors.len();
        self.stack.push(rendered);
        let found = self.resolved(found, cx).unwrap_or_else(|| found.clone());
        let rendered = self.stack.pop();
        if let Some(rendered) = rendered.filter(|_| outermost && cx.errors.len() == errors) {
            self.done.insert(rendered, found.clone());
        }
        Some(found)
    }
}

/// GitLab's `deep_merge`: mappings merge recursively; anything else on the right replaces.
pub(crate) fn deep_merge(acc: &mut Map, right: Map) {
    if acc.is_empty() {
        *acc = right;
        return;
    }
    for (key, entry) in right.entries_owned() {
        match (acc.get_mut(&key), entry.value.value) {
            (
                Some(Node {
                    value: Value::Map(left),
                    ..
                }),
                Value::Map(r),
            ) => deep_merge(left, r),
            (_, value) => acc.insert(
                key,
                crate::yaml::Entry {
                    key_pos: entry.key_pos,
                    key_kind: entry.key_kind,
                    value: Node {
                        value,
                        pos: entry.value.pos,
                    },
                },
            ),
        }
    }
}

/// [`deep_merge`] of a borrowed right side: its values are shared into `acc`, not copied.
pub(crate) fn deep_merge_shared(acc: &mut Map, right: &Map) {
    if acc.is_empty() {
        *acc = right.clone();
        return;
    }
    if acc.ptr_eq(right) {
        // Merging a map into itself changes nothing.
        return;
    }
    for (key, entry) in right.entries() {
        if let (
            Some(Node {
                value: Value::Map(left),
                ..
            }),
            Value::Map(r),
        ) = (acc.get_mut(key), &entry.value.value)
        {
            deep_merge_shared(left, r);
        } else {
            acc.insert(key.to_owned(), entry.clone());
        }
    }
}
