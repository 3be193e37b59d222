//! `run:` steps (experiment, 17.3+), checked against the structure of GitLab's step
//! schema: each step has a `name` (`[A-Za-z_][A-Za-z0-9_]*`) and either a `script`
//! (non-empty string; no `inputs`) or a function reference in `step`/`func` (a string, or
//! `{git: {url, rev, dir?, file?}}`, or `{oci: {registry, repository, tag, dir?, file?}}`)
//! with optional `inputs`; `env` maps names to strings. Messages follow `json_schemer`'s
//! wording (`property '/0/step' is not of type: string`).

use crate::validate::Cx;
use crate::yaml::{Map, Node, Pos, Value};

use super::common::{pointer_join, pointer_label};

pub(crate) fn run_steps(node: &Node, path: &str, cx: &mut Cx) -> Option<serde_json::Value> {
    let mut errors: Vec<(String, Pos)> = Vec::new();
    match &node.value {
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                step(item, &format!("/{i}"), &mut errors);
            }
        }
        _ => errors.push(("root is not of type: array".to_owned(), node.pos)),
    }
    if errors.is_empty() {
        return Some(node.to_json());
    }
    for (msg, pos) in errors {
        cx.config(path, msg, pos);
    }
    None
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn step(node: &Node, ptr: &str, errors: &mut Vec<(String, Pos)>) {
    let Some(map) = node.as_map() else {
        errors.push((
            format!("{} is not of type: object", pointer_label(ptr)),
            node.pos,
        ));
        return;
    };
    let refs: Vec<&str> = ["step", "func"]
        .into_iter()
        .filter(|k| map.contains_key(k))
        .collect();
    let script = map.contains_key("script");
    let allowed: &[&str] = if script {
        &["name", "env", "script"]
    } else {
        &["name", "env", "inputs", "step", "func"]
    };
    for (key, entry) in map.entries() {
        if !allowed.contains(&key) {
            errors.push((
                format!(
                    "{} is invalid: error_type=schema",
                    pointer_label(&pointer_join(ptr, key))
                ),
                entry.key_pos,
            ));
        }
    }
    match map.get("name") {
        None => errors.push((
            format!("{} is missing required keys: name", pointer_label(ptr)),
            node.pos,
        )),
        Some(n) => match n.as_str() {
            Some(s) if is_name(s) => {}
            Some(_) => errors.push((
                format!(
                    "{} does not match pattern: ^[a-zA-Z_][a-zA-Z0-9_]*$",
                    pointer_label(&pointer_join(ptr, "name"))
                ),
                n.pos,
            )),
            None => errors.push((
                format!(
                    "{} is not of type: string",
                    pointer_label(&pointer_join(ptr, "name"))
                ),
                n.pos,
            )),
        },
    }
    if script {
        if let Some(s) = map.get("script") {
            let p = pointer_join(ptr, "script");
            match s.as_str() {
                Some(t) if !t.is_empty() => {}
                Some(_) => errors.push((
                    format!("{} is invalid: error_type=minLength", pointer_label(&p)),
                    s.pos,
                )),
                None => errors.push((
                    format!("{} is not of type: string", pointer_label(&p)),
                    s.pos,
                )),
            }
        }
    } else if refs.len() != 1 {
        errors.push((
            format!(
                "{} must have exactly one of: script, step, func",
                pointer_label(ptr)
            ),
            node.pos,
        ));
    }
    for key in refs {
        if let Some(r) = map.get(key) {
            func_ref(r, &pointer_join(ptr, key), errors);
        }
    }
    if let Some(env) = map.get("env") {
        named(env, &pointer_join(ptr, "env"), true, errors);
    }
    if let Some(inputs) = map.get("inputs").filter(|_| !script) {
        named(inputs, &pointer_join(ptr, "inputs"), false, errors);
    }
}

/// `env` (string values) and `inputs` (any values): objects keyed by names.
fn named(node: &Node, ptr: &str, strings_only: bool, errors: &mut Vec<(String, Pos)>) {
    let Some(map) = node.as_map() else {
        errors.push((
            format!("{} is not of type: object", pointer_label(ptr)),
            node.pos,
        ));
        return;
    };
    for (key, entry) in map.entries() {
        let p = pointer_join(ptr, key);
        if !is_name(key) {
            errors.push((
                format!("{} is invalid: error_type=schema", pointer_label(&p)),
                entry.key_pos,
            ));
        } else if strings_only && entry.value.as_str().is_none() {
            errors.push((
                format!("{} is not of type: string", pointer_label(&p)),
                entry.value.pos,
            ));
        }
    }
}

fn func_ref(node: &Node, ptr: &str, errors: &mut Vec<(String, Pos)>) {
    match &node.value {
        Value::Str(_) => {}
        Value::Map(map) if map.len() == 1 && map.contains_key("git") => {
            reference(
                map,
                "git",
                &["url", "rev"],
                &["url", "rev", "dir", "file"],
                ptr,
                errors,
            );
        }
        Value::Map(map) if map.len() == 1 && map.contains_key("oci") => {
            reference(
                map,
                "oci",
                &["registry", "repository", "tag"],
                &["registry", "repository", "tag", "dir", "file"],
                ptr,
                errors,
            );
        }
        _ => errors.push((
            format!(
                "{} should be a string, a git reference or an oci reference",
                pointer_label(ptr)
            ),
            node.pos,
        )),
    }
}

fn reference(
    outer: &Map,
    key: &str,
    required: &[&str],
    allowed: &[&str],
    ptr: &str,
    errors: &mut Vec<(String, Pos)>,
) {
    let Some(node) = outer.get(key) else {
        return;
    };
    let p = pointer_join(ptr, key);
    let Some(map) = node.as_map() else {
        errors.push((
            format!("{} is not of type: object", pointer_label(&p)),
            node.pos,
        ));
        return;
    };
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|k| !map.contains_key(k))
        .collect();
    if !missing.is_empty() {
        errors.push((
            format!(
                "{} is missing required keys: {}",
                pointer_label(&p),
                missing.join(", ")
            ),
            node.pos,
        ));
    }
    for (k, entry) in map.entries() {
        let kp = pointer_join(&p, k);
        if !allowed.contains(&k) {
            errors.push((
                format!("{} is invalid: error_type=schema", pointer_label(&kp)),
                entry.key_pos,
            ));
        } else if entry.value.as_str().is_none() {
            errors.push((
                format!("{} is not of type: string", pointer_label(&kp)),
                entry.value.pos,
            ));
        }
    }
}
