//! `extends` (spec §2.2) and `!reference` (spec §2.4), applied in that order to the merged
//! configuration.

use crate::include::deep_merge;
use crate::validate::Cx;
use crate::yaml::{Map, Node, Pos, Value};

/// Ancestors an `extends` chain may have (11 levels including the job).
pub const MAX_EXTENDS_DEPTH: usize = 10;
/// Nesting of `!reference` resolution.
pub const MAX_REFERENCE_DEPTH: usize = 10;

/// Resolve `extends` of every root entry in place.
pub(crate) fn extends(root: &mut Map, cx: &mut Cx) {
    let keys: Vec<String> = root.keys().map(str::to_owned).collect();
    let mut done: std::collections::HashSet<String> = Default::default();
    for key in keys {
        let mut stack = Vec::new();
        resolve_entry(root, &key, &mut stack, &mut done, cx);
    }
}

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
    done: &mut std::collections::HashSet<String>,
    cx: &mut Cx,
) -> bool {
    if done.contains(key) {
        return true;
    }
    let Some(node) = root.get(key) else { return true };
    let Some(bases) = extends_list(node) else {
        done.insert(key.to_owned());
        return true;
    };
    let pos = node.pos;
    if stack.iter().any(|k| k == key) {
        cx.raw(format!("{}: circular dependency detected in `extends`", stack[0]), Some(pos));
        return false;
    }
    if stack.len() > MAX_EXTENDS_DEPTH {
        cx.raw(format!("{}: nesting too deep in `extends`", stack[0]), Some(pos));
        return false;
    }
    stack.push(key.to_owned());
    let mut merged = Map::new();
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
        if let Some(Value::Map(b)) = root.get(base).map(|b| b.value.clone()) {
            deep_merge(&mut merged, b);
        }
    }
    stack.pop();
    if let Some(node) = root.get_mut(key) {
        if let Value::Map(own) = std::mem::take(&mut node.value) {
            deep_merge(&mut merged, own);
        }
        node.value = Value::Map(merged);
    }
    done.insert(key.to_owned());
    true
}

/// Resolve every `!reference` in the configuration against the configuration itself.
pub(crate) fn references(root: &mut Map, cx: &mut Cx) {
    let snapshot = root.clone();
    for (_, node) in root.iter_mut() {
        resolve_node(node, &snapshot, &mut Vec::new(), cx);
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
            if let Some(v) = lookup(&items, node.pos, root, stack, cx) {
                node.value = v.value;
            } else {
                node.value = Value::Null;
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
