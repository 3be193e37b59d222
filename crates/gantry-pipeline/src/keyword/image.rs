//! `image`, `services` and their shared parts (`pull_policy`, `docker:`/`kubernetes:`
//! executor options) — GitLab `Entry::Image`, `Entry::Service(s)`, `Imageable`,
//! `PullPolicy`, `schemas/imageable/executor_opts.json`.

use crate::model::{Image, Service};
use crate::validate::{Cx, join};
use crate::yaml::{Map, Node, Value};

use super::common::{pointer_join, pointer_label};
use super::variables::{VarLevel, variables};

const IMAGEABLE_KEYS: &[&str] = &[
    "docker",
    "kubernetes",
    "name",
    "entrypoint",
    "ports",
    "pull_policy",
];
const SERVICE_KEYS: &[&str] = &["command", "alias", "variables"];
pub(crate) const PULL_POLICIES: &[&str] = &["always", "never", "if-not-present"];

/// What `image` and a service have in common.
struct Imageable {
    name: String,
    entrypoint: Option<Vec<String>>,
    docker_user: Option<String>,
    docker_platform: Option<String>,
    pull_policy: Vec<String>,
}

pub(crate) fn image(node: &Node, path: &str, cx: &mut Cx) -> Option<Image> {
    let base = imageable(node, path, &[], cx)?;
    Some(Image {
        name: base.name,
        entrypoint: base.entrypoint,
        docker_user: base.docker_user,
        docker_platform: base.docker_platform,
        pull_policy: base.pull_policy,
    })
}

/// `services`: an array of strings or hashes. Item errors are located at
/// `<path>:service` as GitLab names composable array items by their class.
pub(crate) fn services(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<Service>> {
    if node.as_seq().is_none() {
        cx.config(path, "should be an array", node.pos);
        return None;
    }
    // `[@config].flatten`: nested arrays (aliases of lists) are flattened.
    let items = super::cache::flattened(node, path, cx)?;
    let item_path = join(path, "service");
    let mut ok = true;
    let mut out = Vec::with_capacity(items.len());
    for item in &items {
        match service(item, &item_path, cx) {
            Some(s) => out.push(s),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn service(node: &Node, path: &str, cx: &mut Cx) -> Option<Service> {
    let base = imageable(node, path, SERVICE_KEYS, cx);
    let mut ok = base.is_some();
    let mut alias = None;
    let mut command = None;
    let mut vars = crate::model::Variables::new();
    if let Value::Map(map) = &node.value {
        if let Some(a) = map.get("alias").filter(|n| !n.is_null()) {
            match a.as_str() {
                Some(s) => alias = Some(s.to_owned()),
                None => {
                    cx.attr(path, "alias", "should be a string", a.pos);
                    ok = false;
                }
            }
        }
        if let Some(c) = map.get("command").filter(|n| !n.is_null()) {
            match crate::validate::string_array(c) {
                Some(v) => command = Some(v),
                None => {
                    cx.attr(path, "command", "should be an array of strings", c.pos);
                    ok = false;
                }
            }
        }
        if let Some(v) = map.get("variables").filter(|n| !n.is_null()) {
            // Service variables get no `allowed_value_data`: scalars only.
            match variables(v, &join(path, "variables"), VarLevel::Rule, cx) {
                Some(v) => vars = v,
                None => ok = false,
            }
        }
    }
    let base = base?;
    if !ok {
        return None;
    }
    Some(Service {
        name: base.name,
        alias,
        entrypoint: base.entrypoint,
        command,
        variables: vars,
        docker_user: base.docker_user,
        docker_platform: base.docker_platform,
        pull_policy: base.pull_policy,
    })
}

fn imageable(node: &Node, path: &str, extra_keys: &[&str], cx: &mut Cx) -> Option<Imageable> {
    match &node.value {
        Value::Str(s) => {
            if s.trim().is_empty() {
                cx.attr(path, "name", "can't be blank", node.pos);
                return None;
            }
            Some(Imageable {
                name: s.clone(),
                entrypoint: None,
                docker_user: None,
                docker_platform: None,
                pull_policy: Vec::new(),
            })
        }
        Value::Map(map) => imageable_map(map, node, path, extra_keys, cx),
        _ => {
            cx.config(path, "should be a hash or a string", node.pos);
            None
        }
    }
}

fn imageable_map(
    map: &Map,
    node: &Node,
    path: &str,
    extra_keys: &[&str],
    cx: &mut Cx,
) -> Option<Imageable> {
    let allowed: Vec<&str> = IMAGEABLE_KEYS.iter().chain(extra_keys).copied().collect();
    let mut ok = cx.unknown_keys(map, &allowed, path, node.pos);
    if let Some(e) = map.entry("ports") {
        // Only the Web IDE terminal config enables `ports` (`with_image_ports`).
        cx.config(path, "contains disallowed keys: ports", e.key_pos);
        ok = false;
    }

    let name_node = map.get("name");
    let name = name_node.and_then(Node::as_str).map(str::to_owned);
    if name.is_none() {
        cx.attr(
            path,
            "name",
            "should be a string",
            name_node.map_or(node.pos, |n| n.pos),
        );
        ok = false;
    }
    if name_node.is_none_or(Node::is_blank) {
        cx.attr(
            path,
            "name",
            "can't be blank",
            name_node.map_or(node.pos, |n| n.pos),
        );
        ok = false;
    }

    let mut entrypoint = None;
    if let Some(e) = map.get("entrypoint").filter(|n| !n.is_null()) {
        match crate::validate::string_array(e) {
            Some(v) => entrypoint = Some(v),
            None => {
                cx.attr(path, "entrypoint", "should be an array of strings", e.pos);
                ok = false;
            }
        }
    }

    let (docker_user, docker_platform) = match executor_opts(map, path, cx) {
        Some(v) => v,
        None => {
            ok = false;
            (None, None)
        }
    };

    let mut pull_policy = Vec::new();
    if let Some(p) = map.get("pull_policy").filter(|n| !n.is_null()) {
        match pull_policy_of(p, &join(path, "pull_policy"), cx) {
            Some(v) => pull_policy = v,
            None => ok = false,
        }
    }

    if !ok {
        return None;
    }
    Some(Imageable {
        name: name?,
        entrypoint,
        docker_user,
        docker_platform,
        pull_policy,
    })
}

/// `pull_policy`: one of [`PULL_POLICIES`] or a non-empty array of them.
fn pull_policy_of(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<String>> {
    match &node.value {
        Value::Str(s) => {
            if PULL_POLICIES.contains(&s.as_str()) {
                Some(vec![s.clone()])
            } else {
                cx.config(path, "is not included in the list", node.pos);
                None
            }
        }
        _ => {
            let Some(list) = crate::validate::string_array(node) else {
                cx.config(path, "should be an array of strings or a string", node.pos);
                return None;
            };
            let mut ok = true;
            let unknown: Vec<&str> = list
                .iter()
                .map(String::as_str)
                .filter(|p| !PULL_POLICIES.contains(p))
                .collect();
            if !unknown.is_empty() {
                cx.config(
                    path,
                    format!("contains unknown values: {}", unknown.join(", ")),
                    node.pos,
                );
                ok = false;
            }
            if list.is_empty() {
                cx.config(path, "can't be blank", node.pos);
                ok = false;
            }
            ok.then_some(list)
        }
    }
}

/// `docker: {platform, user}` and `kubernetes: {user}`, checked like GitLab's
/// `executor_opts` JSON schema (null values are dropped before the check). Returns the
/// docker user and platform.
fn executor_opts(map: &Map, path: &str, cx: &mut Cx) -> Option<(Option<String>, Option<String>)> {
    let mut errors: Vec<(String, crate::yaml::Pos)> = Vec::new();
    let mut user = None;
    let mut platform = None;
    for (section, props) in [
        (
            "docker",
            &[("platform", 64usize, false), ("user", 255, false)][..],
        ),
        ("kubernetes", &[("user", 255, true)][..]),
    ] {
        let Some(sec) = map.get(section).filter(|n| !n.is_null()) else {
            continue;
        };
        let sec_ptr = pointer_join("", section);
        let Some(sec_map) = sec.as_map() else {
            errors.push((
                format!("{} is not of type: object", pointer_label(&sec_ptr)),
                sec.pos,
            ));
            continue;
        };
        for (key, entry) in sec_map.entries() {
            let ptr = pointer_join(&sec_ptr, key);
            let Some(&(_, max, int_ok)) = props.iter().find(|(p, _, _)| *p == key) else {
                errors.push((
                    format!("{} is invalid: error_type=schema", pointer_label(&ptr)),
                    entry.key_pos,
                ));
                continue;
            };
            let v = &entry.value;
            match &v.value {
                Value::Str(s) => {
                    let len = s.chars().count();
                    if len < 1 {
                        errors.push((
                            format!("{} is invalid: error_type=minLength", pointer_label(&ptr)),
                            v.pos,
                        ));
                    } else if len > max {
                        errors.push((
                            format!("{} is invalid: error_type=maxLength", pointer_label(&ptr)),
                            v.pos,
                        ));
                    } else if section == "docker" && key == "user" {
                        user = Some(s.clone());
                    } else if section == "docker" {
                        platform = Some(s.clone());
                    }
                }
                Value::Int(_) if int_ok => {}
                _ => errors.push((
                    format!("{} is not of type: string", pointer_label(&ptr)),
                    v.pos,
                )),
            }
        }
    }
    if errors.is_empty() {
        return Some((user, platform));
    }
    for (msg, pos) in errors {
        cx.attr(path, "executor_opts", msg, pos);
    }
    None
}
