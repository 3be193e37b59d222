//! `environment`: a name or `{name, url, action, on_stop, auto_stop_in, kubernetes,
//! deployment_tier}` — GitLab `Entry::Environment`, `Entry::Kubernetes`.

use crate::duration::parse_expire_in;
use crate::model::Environment;
use crate::validate::{Cx, join};
use crate::yaml::{Map, Node, Value};

use super::common::{ENVIRONMENT_NAME_MESSAGE, opt_string, valid_environment_name};

const ENVIRONMENT_KEYS: &[&str] = &[
    "name",
    "url",
    "action",
    "on_stop",
    "auto_stop_in",
    "kubernetes",
    "deployment_tier",
];
pub(crate) const ACTIONS: &[&str] = &["start", "prepare", "stop", "verify", "access"];
const KUBERNETES_KEYS: &[&str] = &[
    "namespace",
    "agent",
    "flux_resource_path",
    "dashboard",
    "managed_resources",
];
const URL_MAX: usize = 255;

pub(crate) fn environment(node: &Node, path: &str, cx: &mut Cx) -> Option<Environment> {
    match &node.value {
        Value::Str(s) => {
            let ok = check_name(Some(node), node, path, cx);
            ok.then(|| Environment {
                name: s.clone(),
                url: None,
                action: "start".to_owned(),
                on_stop: None,
                auto_stop_in: None,
                deployment_tier: None,
            })
        }
        Value::Map(map) => environment_map(map, node, path, cx),
        _ => {
            cx.config(path, "should be a hash or a string", node.pos);
            // GitLab also validates the `name` of the (empty) value.
            check_name(None, node, path, cx);
            None
        }
    }
}

/// `name`: present, a string, and in GitLab's environment-name format (the type check
/// reuses the format message, as GitLab does).
fn check_name(name: Option<&Node>, at: &Node, path: &str, cx: &mut Cx) -> bool {
    let pos = name.map_or(at.pos, |n| n.pos);
    let mut ok = true;
    if !super::common::present(name) {
        cx.attr(path, "name", "can't be blank", pos);
        ok = false;
    }
    if !name
        .and_then(Node::as_str)
        .is_some_and(valid_environment_name)
    {
        cx.attr(path, "name", ENVIRONMENT_NAME_MESSAGE, pos);
        ok = false;
    }
    ok
}

fn environment_map(map: &Map, node: &Node, path: &str, cx: &mut Cx) -> Option<Environment> {
    let mut ok = cx.unknown_keys(map, ENVIRONMENT_KEYS, path, node.pos);
    ok &= check_name(map.get("name"), node, path, cx);

    let mut string = |key: &str, cx: &mut Cx| -> Option<String> {
        opt_string(map, key, path, cx).unwrap_or_else(|()| {
            ok = false;
            None
        })
    };
    let url = string("url", cx);
    let action = string("action", cx);
    let on_stop = string("on_stop", cx);
    let tier = string("deployment_tier", cx);

    if let Some(u) = &url {
        if u.chars().count() > URL_MAX {
            cx.attr(
                path,
                "url",
                format!("is too long (maximum is {URL_MAX} characters)"),
                pos_of(map, "url", node),
            );
            ok = false;
        }
    }
    if let Some(a) = &action {
        if !ACTIONS.contains(&a.as_str()) {
            cx.attr(
                path,
                "action",
                "should be start, stop, prepare, verify, or access",
                pos_of(map, "action", node),
            );
            ok = false;
        }
    }
    // GitLab (18.x) checks only that the tier is text here (`validates :deployment_tier,
    // type: String`): it is expanded with the job's variables when the environment is
    // created (`Ci::Deployable#expanded_deployment_tier`), and a value that names no tier
    // then fails the job `environment_creation_failure` (`Environment`'s `tier` enum
    // validates). Gantry does the same (the server's `coordinator::environment`).

    let mut auto_stop_in = None;
    if let Some(a) = map.get("auto_stop_in").filter(|n| !n.is_null()) {
        match a.as_str() {
            // A value holding a variable is checked after expansion (GitLab skips it).
            Some(s) if has_variable(s) || parse_expire_in(s).is_some() => {
                auto_stop_in = Some(s.to_owned())
            }
            _ => {
                cx.attr(path, "auto_stop_in", "should be a duration", a.pos);
                ok = false;
            }
        }
    }

    if let Some(k) = map.get("kubernetes").filter(|n| !n.is_null()) {
        ok &= kubernetes(k, &join(path, "kubernetes"), cx);
    }

    if !ok {
        return None;
    }
    Some(Environment {
        name: map
            .get("name")
            .and_then(Node::as_str)
            .unwrap_or_default()
            .to_owned(),
        url,
        action: action.unwrap_or_else(|| "start".to_owned()),
        on_stop,
        auto_stop_in,
        deployment_tier: tier,
    })
}

fn pos_of(map: &Map, key: &str, node: &Node) -> crate::yaml::Pos {
    map.get(key).map_or(node.pos, |n| n.pos)
}

/// `ExpandVariables::VARIABLES_REGEXP`: `$NAME`, `${NAME}` or `%NAME%`.
pub(crate) fn has_variable(s: &str) -> bool {
    let b = s.as_bytes();
    let name_start = |c: u8| c.is_ascii_alphabetic() || c == b'_';
    let name_char = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    (0..b.len()).any(|i| match b[i] {
        b'$' => match b.get(i + 1) {
            Some(&c) if name_start(c) => true,
            Some(b'{') => {
                let rest = &b[i + 2..];
                let n = rest.iter().take_while(|c| name_char(**c)).count();
                n > 0 && name_start(rest[0]) && rest.get(n) == Some(&b'}')
            }
            _ => false,
        },
        b'%' => {
            let rest = &b[i + 1..];
            let n = rest.iter().take_while(|c| name_char(**c)).count();
            n > 0 && name_start(rest[0]) && rest.get(n) == Some(&b'%')
        }
        _ => false,
    })
}

/// `environment:kubernetes`: a non-empty hash of known keys; `namespace` and `agent`
/// required together with `flux_resource_path`.
fn kubernetes(node: &Node, path: &str, cx: &mut Cx) -> bool {
    let Some(map) = cx.map(node, path) else {
        return false;
    };
    let mut ok = cx.unknown_keys(map, KUBERNETES_KEYS, path, node.pos);
    if map.is_empty() {
        cx.config(path, "can't be blank", node.pos);
        ok = false;
    }
    for key in ["namespace", "agent", "flux_resource_path"] {
        ok &= opt_string(map, key, path, cx).is_ok();
    }
    if super::common::present(map.get("flux_resource_path")) {
        for key in ["namespace", "agent"] {
            if !super::common::present(map.get(key)) {
                cx.attr(path, key, "can't be blank", node.pos);
                ok = false;
            }
        }
    }
    for key in ["dashboard", "managed_resources"] {
        if let Some(n) = map.get(key).filter(|n| !n.is_null()) {
            if n.as_map().is_none() {
                cx.config(&join(path, key), "should be a hash", n.pos);
                ok = false;
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::has_variable;

    #[test]
    fn variable_detection() {
        assert!(has_variable("$X"));
        assert!(has_variable("a ${X_1} b"));
        assert!(has_variable("%X%"));
        assert!(!has_variable("1 day"));
        assert!(!has_variable("$"));
        assert!(!has_variable("${}"));
        assert!(!has_variable("${1}"));
        assert!(!has_variable("100%"));
    }
}
