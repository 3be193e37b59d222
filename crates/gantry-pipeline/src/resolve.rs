//! `extends` (spec §2.2) and `!reference` (spec §2.4), applied in that order to the merged
//! configuration.

use crate::include::deep_merge;
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
type Done = std::collections::HashMap<String, Vec<String>>;

fn extends_list(node: &Node) -> Option<Vec<(String, Pos)>> {
    let e = node.as_map()?.get("extends")?;
    match &e.value {
        Value::Seq(items) => Some(
            items
                .iter()
                .map(|i| (i.scalar_to_string().unwrap_or_else(|| i.to_json().to_string()), i.pos))
                .collect(),
        ),
        _ => Some(vec![(e.scalar_to_string().unwrap_or_else(|| e.to_json().to_string()), e.pos)]),
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
        let extending = chain.len().saturating_sub(1);
        if let Some(deep) = (0..extending).find(|i| stack.len() + i > MAX_EXTENDS_DEPTH) {
            let pos = root.get(&chain[deep]).map(|n| n.pos);
            cx.raw(format!("{}: nesting too deep in `extends`", chain[deep]), pos);
            return false;
        }
        return true;
    }
    let Some(node) = root.get(key) else { return true };
    let Some(bases) = extends_list(node) else {
        done.insert(key.to_owned(), vec![key.to_owned()]);
        return true;
    };
    let pos = node.pos;
    // GitLab's order of checks; messages name the entry being extended.
    if stack.len() > MAX_EXTENDS_DEPTH {
        cx.raw(format!("{key}: nesting too deep in `extends`"), Some(pos));
        return false;
    }
    if stack.iter().any(|k| k == key) {
        cx.raw(format!("{key}: circular dependency detected in `extends`"), Some(pos));
        return false;
    }
    stack.push(key.to_owned());
    let mut merged = Map::new();
    let mut longest: Vec<String> = Vec::new();
    for (base, bpos) in &bases {
        match root.get(base) {
            None => {
                cx.raw(format!("{key}: unknown keys in `extends` ({base})"), Some(*bpos));
                stack.pop();
                return false;
            }
            Some(b) if b.as_map().is_none() => {
                cx.raw(format!("{key}: invalid base hashes in `extends` ({base})"), Some(*bpos));
                stack.pop();
                return false;
            }
            Some(_) => {}
        }
        if !resolve_entry(root, base, stack, done, cx) {
            stack.pop();
            return false;
        }
        if let Some(chain) = done.get(base).filter(|c| c.len() > longest.len()) {
            longest = chain.clone();
        }
        let own = root.get(key).and_then(Node::as_map);
        if let Some(Value::Map(b)) = root.get(base).map(|b| &b.value) {
            merge_base(&mut merged, b, own);
        }
    }
    stack.pop();
    if let Some(node) = root.get_mut(key) {
        if let Value::Map(own) = std::mem::take(&mut node.value) {
            deep_merge(&mut merged, own);
        }
        node.value = Value::Map(merged);
    }
    longest.insert(0, key.to_owned());
    done.insert(key.to_owned(), longest);
    true
}

/// Resolve every `!reference` in the configuration against the configuration itself.
pub(crate) fn references(root: &mut Map, cx: &mut Cx) {
    // Most configurations hold no `!reference`: don't copy the whole tree for nothing.
    if !root.iter().any(|(_, n)| has_reference(n)) {
        return;
    }
    let snapshot = root.clone();
    let start = cx.errors.len();
    for (_, node) in root.iter_mut() {
        resolve_node(node, &snapshot, &mut Vec::new(), cx);
    }
    // A reference reached from several places (a cycle, a shared snippet) is reported once.
    let mut seen = std::collections::HashSet::new();
    let mut i = 0;
    cx.errors.retain(|d| {
        i += 1;
        i <= start || seen.insert((d.message.clone(), d.pos.map(|p| (p.file, p.line, p.col))))
    });
}

/// `deep_merge(merged, base)` as a step towards `deep_merge(bases…, own)`: a base value that
/// the entry's own value will replace wholesale (not a mapping merged into a mapping) is
/// not copied; a null keeps its key's position, which is all the final result takes from it.
fn merge_base(acc: &mut Map, base: &Map, own: Option<&Map>) {
    for (key, entry) in base.entries() {
        let shadow = own.and_then(|m| m.get(key));
        match (acc.get_mut(key), &entry.value.value) {
            (Some(Node { value: Value::Map(left), .. }), Value::Map(r)) => merge_base(left, r, shadow.and_then(Node::as_map)),
            (_, value) => {
                let replaced = shadow.is_some_and(|s| !(matches!(s.value, Value::Map(_)) && matches!(value, Value::Map(_))));
                let entry = if replaced {
                    crate::yaml::Entry {
                        key_pos: entry.key_pos,
                        key_kind: entry.key_kind,
                        value: Node::null(entry.value.pos),
                    }
                } else {
                    entry.clone()
                };
                acc.insert(key.to_owned(), entry);
            }
        }
    }
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

fn resolve_node(node: &mut Node, root: &Map, stack: &mut Vec<String>, cx: &mut Cx) {
    match &mut node.value {
        Value::Reference(items) => {
            let items = items.clone();
            // An unresolved reference stays in place (fragment linting strips it).
            if let Some(v) = lookup(&items, node.pos, root, stack, cx) {
                node.value = v.value;
            }
        }
        Value::Seq(items) => items.iter_mut().for_each(|i| resolve_node(i, root, stack, cx)),
        Value::Map(m) => m.iter_mut().for_each(|(_, v)| resolve_node(v, root, stack, cx)),
        _ => {}
    }
}

fn lookup(items: &[Node], pos: Pos, root: &Map, stack: &mut Vec<String>, cx: &mut Cx) -> Option<Node> {
    let rendered = render_path(items);
    let path: Option<Vec<&str>> = items.iter().map(Node::as_str).collect();
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        cx.raw(format!("!reference {rendered} is not valid"), Some(pos));
        return None;
    };
    if stack.contains(&rendered) {
        cx.raw(format!("!reference {rendered} is part of a circular chain"), Some(pos));
        return None;
    }
    if stack.len() >= MAX_REFERENCE_DEPTH {
        cx.raw(format!("!reference {rendered} is nested too deeply (maximum {MAX_REFERENCE_DEPTH})"), Some(pos));
        return None;
    }
    let mut cur = root.get(path[0]);
    for seg in &path[1..] {
        cur = cur.and_then(|n| n.as_map()).and_then(|m| m.get(seg));
    }
    let Some(found) = cur else {
        cx.raw(format!("!reference {rendered} could not be found"), Some(pos));
        return None;
    };
    let mut found = found.clone();
    stack.push(rendered);
    resolve_node(&mut found, root, stack, cx);
    stack.pop();
    Some(found)
}
