//! `variables` (global, job, `rules:variables`, service variables) — spec §1.4.
//!
//! GitLab (`Entry::Variables`, a composable hash of `Entry::Variable`): a scalar value is
//! stringified with Ruby's `to_s` after YAML typing (`VAR: 012` → `"10"`); a hash value may
//! use the data keys allowed at its level; `VAR: null` counts as an empty hash (value `""`);
//! arrays are rejected. Keys must have been written as strings or integers.

use crate::model::{Variable, Variables};
use crate::validate::{Cx, join};
use crate::yaml::{Map, Node, Value};

use super::common::alphanumeric_key;

/// Which hash forms a `variables` mapping accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VarLevel {
    /// Top-level `variables`: `value`, `description`, `expand`, `options`.
    Global,
    /// Job (and `default`-less job-like) `variables`: `value`, `expand`.
    Job,
    /// `rules:variables`, `workflow:rules:variables`, `services:variables`: scalars only.
    Rule,
}

impl VarLevel {
    fn allowed_data(self) -> &'static [&'static str] {
        match self {
            VarLevel::Global => &["value", "description", "expand", "options"],
            VarLevel::Job => &["value", "expand"],
            VarLevel::Rule => &[],
        }
    }
}

/// Validate a `variables` mapping at `path`.
pub(crate) fn variables(
    node: &Node,
    path: &str,
    level: VarLevel,
    cx: &mut Cx,
) -> Option<Variables> {
    let map = cx.map(node, path)?;
    let mut ok = true;
    let mut out = Variables::new();
    for (name, entry) in map.entries() {
        if !alphanumeric_key(name, entry.key_kind) {
            cx.attr(
                &join(path, name),
                "key",
                "must be an alphanumeric string",
                entry.key_pos,
            );
            ok = false;
        }
        match variable(&entry.value, path, name, level, cx) {
            Some(v) => {
                out.insert(name.to_owned(), v);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// One variable; `path` is the `variables` mapping's (the variable's own path is only built
/// for a message: this runs for every variable of every job).
fn variable(node: &Node, path: &str, name: &str, level: VarLevel, cx: &mut Cx) -> Option<Variable> {
    match &node.value {
        Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_) => {
            node.scalar_to_string().map(Variable::plain)
        }
        // GitLab builds the entry from `config.nil? ? {} : config`.
        Value::Null => complex(&Map::new(), node, &join(path, name), level, cx),
        Value::Map(m) => complex(m, node, &join(path, name), level, cx),
        Value::Seq(_) | Value::Reference(_) => {
            // `Variable::UnknownStrategy` reports this text without a location.
            cx.push(
                "variable definition must be either a string or a hash".to_owned(),
                node.pos,
            );
            None
        }
    }
}

fn complex(map: &Map, node: &Node, path: &str, level: VarLevel, cx: &mut Cx) -> Option<Variable> {
    let mut ok = true;

    let value = map.get("value").filter(|n| !n.is_null());
    if let Some(v) = value {
        if !v.is_scalar() {
            cx.attr(path, "config_value", "must be a scalar", v.pos);
            ok = false;
        }
    }
    let description = match map.get("description").filter(|n| !n.is_null()) {
        None => None,
        Some(d) => match &d.value {
            Value::Str(_) | Value::Int(_) => d.scalar_to_string(),
            _ => {
                cx.attr(
                    path,
                    "config_description",
                    "must be an alphanumeric string",
                    d.pos,
                );
                ok = false;
                None
            }
        },
    };
    let expand = match map.get("expand").filter(|n| !n.is_null()) {
        None => true,
        Some(e) => match e.value {
            Value::Bool(b) => b,
            _ => {
                cx.attr(path, "config_expand", "should be a boolean value", e.pos);
                ok = false;
                true
            }
        },
    };
    let options_node = map.get("options").filter(|n| !n.is_null());
    let options = match options_node {
        None => Vec::new(),
        Some(o) => match crate::validate::string_array(o) {
            Some(v) => v,
            None => {
                cx.attr(
                    path,
                    "config_options",
                    "should be an array of strings",
                    o.pos,
                );
                ok = false;
                Vec::new()
            }
        },
    };

    let allowed = level.allowed_data();
    if allowed.is_empty() {
        cx.config(path, "must be a string", node.pos);
        ok = false;
    } else {
        let extra: Vec<&str> = map.keys().filter(|k| !allowed.contains(k)).collect();
        if !extra.is_empty() {
            let at = map.entry(extra[0]).map_or(node.pos, |e| e.key_pos);
            cx.config(
                path,
                format!("uses invalid data keys: {}", extra.join(", ")),
                at,
            );
            ok = false;
        }
    }

    // `config_options.present? && config_options.exclude?(config_value)`: the comparison
    // is on the value as written, so only a string value can be among the options.
    if options_node.is_some_and(|o| !o.is_blank()) {
        let included = match (options_node.map(|o| &o.value), value.map(|v| &v.value)) {
            (Some(Value::Seq(items)), Some(Value::Str(v))) => {
                items.iter().any(|i| i.as_str() == Some(v.as_str()))
            }
            // A string `options` is already an error; Ruby's `String#exclude?` is a
            // substring test.
            (Some(Value::Str(o)), Some(Value::Str(v))) => o.contains(v.as_str()),
            _ => false,
        };
        if !included {
            cx.config(path, "value must be present in options", node.pos);
            ok = false;
        }
    }

    if !ok {
        return None;
    }
    Some(Variable {
        value: value.and_then(Node::scalar_to_string).unwrap_or_default(),
        expand,
        description,
        options,
    })
}
