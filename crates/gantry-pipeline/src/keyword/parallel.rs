//! `parallel`: a count (1..=200) or `{matrix: [...]}` (GitLab `Entry::Product::Parallel`,
//! `Product::Matrix`, `Product::Variables`). `parallel: null` is the caller's business (it
//! cancels an inherited value).

use indexmap::IndexMap;

use crate::validate::{Cx, join};
use crate::yaml::{Node, Value};

use super::common::{alphanumeric_key, int_in_range};

/// GitLab's `PARALLEL_LIMIT`: most instances of one job, and most matrix permutations.
pub(crate) const PARALLEL_LIMIT: i64 = 200;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Parallel {
    Count(u32),
    /// One map per `matrix` entry: variable → values (stringified), in written order.
    Matrix(Vec<IndexMap<String, Vec<String>>>),
}

pub(crate) fn parallel(node: &Node, path: &str, cx: &mut Cx) -> Option<Parallel> {
    match &node.value {
        Value::Int(_) | Value::Float(_) => {
            int_in_range(node, path, "config", 1, PARALLEL_LIMIT, cx)
                .and_then(|n| u32::try_from(n).ok())
                .map(Parallel::Count)
        }
        Value::Map(map) => {
            let mut ok = cx.unknown_keys(map, &["matrix"], path, node.pos);
            match map.get("matrix") {
                None => {
                    cx.config(path, "missing required keys: matrix", node.pos);
                    None
                }
                Some(m) => {
                    let matrix = matrix(m, &join(path, "matrix"), cx);
                    ok &= matrix.is_some();
                    if ok {
                        matrix.map(Parallel::Matrix)
                    } else {
                        None
                    }
                }
            }
        }
        _ => {
            // `Parallel::UnknownStrategy` reports `<location> should be ...` (no `config`).
            cx.push(format!("{path} should be an integer or a hash"), node.pos);
            None
        }
    }
}

/// `parallel:matrix` (also usable for `needs:parallel:matrix`).
pub(crate) fn matrix(
    node: &Node,
    path: &str,
    cx: &mut Cx,
) -> Option<Vec<IndexMap<String, Vec<String>>>> {
    let Some(items) = node
        .as_seq()
        .filter(|items| items.iter().all(|i| i.as_map().is_some()))
    else {
        cx.config(path, "should be an array of hashes", node.pos);
        return None;
    };
    let vpath = join(path, "variables");
    let mut ok = true;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Some(map) = item.as_map() else {
            continue;
        };
        let mut entry = IndexMap::new();
        let mut valid = true;
        for (name, e) in map.entries() {
            let values: Option<Vec<String>> = match &e.value.value {
                Value::Seq(vals) if !vals.is_empty() => vals.iter().map(matrix_scalar).collect(),
                Value::Str(s) if !s.trim().is_empty() => Some(vec![s.clone()]),
                Value::Int(i) => Some(vec![i.to_string()]),
                _ => None,
            };
            match values {
                Some(v) if alphanumeric_key(name, e.key_kind) => {
                    entry.insert(name.to_owned(), v);
                }
                _ => valid = false,
            }
        }
        if !valid {
            cx.config(
                &vpath,
                "should be a hash of key value pairs, value can be an array",
                item.pos,
            );
            ok = false;
        }
        if map.is_empty() {
            cx.config(&vpath, "requires at least 1 items", item.pos);
            ok = false;
        }
        out.push(entry);
    }
    if !ok {
        return None;
    }
    let jobs = out.iter().fold(0usize, |acc, entry| {
        acc.saturating_add(
            entry
                .values()
                .fold(1usize, |p, v| p.saturating_mul(v.len())),
        )
    });
    if jobs > PARALLEL_LIMIT as usize {
        cx.config(
            path,
            format!("generates too many jobs (maximum is {PARALLEL_LIMIT})"),
            node.pos,
        );
        return None;
    }
    Some(out)
}

/// A matrix value inside an array: a string or an integer (GitLab's `alphanumeric`).
fn matrix_scalar(node: &Node) -> Option<String> {
    match &node.value {
        Value::Str(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}
