//! `inherit: {default, variables}` — spec §2.1, GitLab `Entry::Inherit`,
//! `Inherit::Default`, `Inherit::Variables`.

use crate::validate::{Cx, join};
use crate::yaml::{Node, Value};

/// Keys of `default:` that a job can inherit (`Entry::Default::ALLOWED_KEYS`).
pub(crate) const DEFAULT_KEYS: &[&str] = &[
    "after_script",
    "artifacts",
    "before_script",
    "cache",
    "hooks",
    "id_tokens",
    "image",
    "interruptible",
    "retry",
    "services",
    "tags",
    "timeout",
    "identity",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum InheritSet {
    All,
    Nothing,
    Only(Vec<String>),
}

impl InheritSet {
    /// Whether `key` (a `default:` keyword or a global variable name) is inherited.
    pub(crate) fn allows(&self, key: &str) -> bool {
        match self {
            InheritSet::All => true,
            InheritSet::Nothing => false,
            InheritSet::Only(keys) => keys.iter().any(|k| k == key),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Inherit {
    pub default: InheritSet,
    pub variables: InheritSet,
}

pub(crate) fn inherit(node: &Node, path: &str, cx: &mut Cx) -> Option<Inherit> {
    let map = cx.map(node, path)?;
    let ok = cx.unknown_keys(map, &["default", "variables"], path, node.pos);
    let default = set(
        map.get("default"),
        &join(path, "default"),
        Some(DEFAULT_KEYS),
        cx,
    );
    let variables = set(map.get("variables"), &join(path, "variables"), None, cx);
    if !ok {
        return None;
    }
    Some(Inherit {
        default: default?,
        variables: variables?,
    })
}

fn set(
    node: Option<&Node>,
    path: &str,
    allowed: Option<&[&str]>,
    cx: &mut Cx,
) -> Option<InheritSet> {
    let Some(node) = node else {
        return Some(InheritSet::All);
    };
    match &node.value {
        Value::Null | Value::Bool(true) => Some(InheritSet::All),
        Value::Bool(false) => Some(InheritSet::Nothing),
        Value::Seq(_) => {
            let Some(list) = crate::validate::string_array(node) else {
                cx.config(path, "should be an array of strings", node.pos);
                return None;
            };
            if let Some(allowed) = allowed {
                let unknown: Vec<&str> = list
                    .iter()
                    .map(String::as_str)
                    .filter(|k| !allowed.contains(k))
                    .collect();
                if !unknown.is_empty() {
                    cx.config(
                        path,
                        format!("contains unknown values: {}", unknown.join(", ")),
                        node.pos,
                    );
                    return None;
                }
            }
            Some(InheritSet::Only(list))
        }
        _ => {
            cx.push(
                format!("{path} should be a bool or array of strings"),
                node.pos,
            );
            None
        }
    }
}
