//! `trigger` (bridge jobs) — GitLab `Entry::Trigger`, `Trigger::Forward`, and the
//! `Entry::Includes`/`Entry::Include` checks applied to `trigger:include`.
//!
//! Beyond GitLab's entry checks, a project path that cannot name a project (no
//! `namespace/project` shape and no variable, e.g. `''`, `slug`, `/slug`, `slug/`) is
//! rejected here: GitLab accepts it at lint time but the downstream pipeline can never be
//! created. Likewise a child include item without exactly one location key is rejected
//! with the include mapper's messages.

use crate::model::Trigger;
use crate::validate::{Cx, join};
use crate::yaml::{Map, Node, Value};

use super::common::{PROJECT_PATH_MESSAGE, opt_bool, opt_string, plausible_project_path};

const CROSS_PROJECT_KEYS: &[&str] = &["project", "branch", "strategy", "forward", "inputs"];
const CHILD_KEYS: &[&str] = &["strategy", "include", "forward"];
pub(crate) const STRATEGIES: &[&str] = &["depend", "mirror"];
/// `SameProjectTrigger::INCLUDE_MAX_SIZE`.
pub(crate) const MAX_CHILD_INCLUDES: usize = 3;
const INCLUDE_KEYS: &[&str] = &[
    "local",
    "file",
    "remote",
    "template",
    "component",
    "artifact",
    "inputs",
    "job",
    "project",
    "ref",
    "rules",
];
const LOCATION_KEYS: &[&str] = &[
    "local",
    "project",
    "remote",
    "template",
    "artifact",
    "component",
];

pub(crate) fn trigger(node: &Node, path: &str, cx: &mut Cx) -> Option<Trigger> {
    match &node.value {
        Value::Str(s) => {
            if s.trim().is_empty() {
                cx.config(path, "can't be blank", node.pos);
                return None;
            }
            if !plausible_project_path(s) {
                cx.config(path, PROJECT_PATH_MESSAGE, node.pos);
                return None;
            }
            Some(Trigger {
                project: Some(s.clone()),
                branch: None,
                include: Vec::new(),
                strategy: None,
                forward_yaml_variables: true,
                forward_pipeline_variables: false,
                inputs: None,
            })
        }
        Value::Map(map) if map.contains_key("include") => child(map, node, path, cx),
        Value::Map(map) => cross_project(map, node, path, cx),
        _ => {
            cx.push(
                format!("{path} has to be either a string or a hash"),
                node.pos,
            );
            None
        }
    }
}

fn cross_project(map: &Map, node: &Node, path: &str, cx: &mut Cx) -> Option<Trigger> {
    let mut ok = cx.unknown_keys(map, CROSS_PROJECT_KEYS, path, node.pos);
    if map.is_empty() {
        cx.config(path, "can't be blank", node.pos);
        ok = false;
    }
    let project = super::common::required_string(map, "project", path, node.pos, cx);
    match &project {
        Some(p) if !plausible_project_path(p) => {
            cx.attr(
                path,
                "project",
                PROJECT_PATH_MESSAGE,
                map.get("project").map_or(node.pos, |n| n.pos),
            );
            ok = false;
        }
        Some(_) => {}
        None => ok = false,
    }
    let branch = opt_string(map, "branch", path, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });
    let strategy = strategy(map, path, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });
    let forward = forward(map, path, cx);
    let inputs = map.get("inputs").filter(|n| !n.is_null());
    if let Some(i) = inputs {
        if i.as_map().is_none() {
            cx.config(&join(path, "inputs"), "should be a hash", i.pos);
            ok = false;
        }
    }
    let (yaml, pipeline) = forward?;
    if !ok {
        return None;
    }
    Some(Trigger {
        project,
        branch,
        include: Vec::new(),
        strategy,
        forward_yaml_variables: yaml,
        forward_pipeline_variables: pipeline,
        inputs: inputs.map(Node::to_json),
    })
}

fn child(map: &Map, node: &Node, path: &str, cx: &mut Cx) -> Option<Trigger> {
    let mut ok = cx.unknown_keys(map, CHILD_KEYS, path, node.pos);
    let strategy = strategy(map, path, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });
    let forward = forward(map, path, cx);
    let include = map
        .get("include")
        .and_then(|i| includes(i, &join(path, "include"), cx));
    ok &= include.is_some();
    let (yaml, pipeline) = forward?;
    if !ok {
        return None;
    }
    Some(Trigger {
        project: None,
        branch: None,
        include: include?,
        strategy,
        forward_yaml_variables: yaml,
        forward_pipeline_variables: pipeline,
        inputs: None,
    })
}

fn strategy(map: &Map, path: &str, cx: &mut Cx) -> Result<Option<String>, ()> {
    let value = opt_string(map, "strategy", path, cx)?;
    match value {
        Some(s) if !STRATEGIES.contains(&s.as_str()) => {
            let pos = map.get("strategy").map_or_else(Default::default, |n| n.pos);
            cx.attr(path, "strategy", "should be depend or mirror", pos);
            Err(())
        }
        v => Ok(v),
    }
}

/// `forward: {yaml_variables (default true), pipeline_variables (default false)}`.
fn forward(map: &Map, path: &str, cx: &mut Cx) -> Option<(bool, bool)> {
    let Some(f) = map.get("forward").filter(|n| !n.is_null()) else {
        return Some((true, false));
    };
    let fpath = join(path, "forward");
    let fmap = cx.map(f, &fpath)?;
    let mut ok = cx.unknown_keys(
        fmap,
        &["yaml_variables", "pipeline_variables"],
        &fpath,
        f.pos,
    );
    let yaml = opt_bool(fmap, "yaml_variables", &fpath, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });
    let pipeline = opt_bool(fmap, "pipeline_variables", &fpath, cx).unwrap_or_else(|()| {
        ok = false;
        None
    });
    ok.then(|| (yaml.unwrap_or(true), pipeline.unwrap_or(false)))
}

/// `trigger:include`: a string or an array of at most 3 strings/hashes. Items are kept as
/// written (JSON form) for the coordinator.
fn includes(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<serde_json::Value>> {
    let items: Vec<&Node> = match &node.value {
        Value::Str(_) => vec![node],
        Value::Seq(items) => items.iter().collect(),
        _ => {
            cx.config(path, "should be an array or a string", node.pos);
            return None;
        }
    };
    let mut ok = true;
    if items.len() > MAX_CHILD_INCLUDES {
        cx.config(
            path,
            format!("is too long (maximum is {MAX_CHILD_INCLUDES})"),
            node.pos,
        );
        ok = false;
    }
    // Items are entries without a key: GitLab names them by class (`include`).
    let item_path = join(path, "include");
    for item in &items {
        ok &= include_item(item, &item_path, cx);
    }
    ok.then(|| items.iter().map(|i| i.to_json()).collect())
}

fn include_item(node: &Node, path: &str, cx: &mut Cx) -> bool {
    let map = match &node.value {
        Value::Str(s) => {
            if s.trim().is_empty() {
                cx.config(path, "can't be blank", node.pos);
                return false;
            }
            return true;
        }
        Value::Map(m) => m.clone(),
        // GitLab fabricates the entry from `config || {}`.
        Value::Null => Map::new(),
        _ => {
            cx.config(path, "should be a hash or a string", node.pos);
            return false;
        }
    };
    let mut ok = cx.unknown_keys(&map, INCLUDE_KEYS, path, node.pos);
    if map.get("artifact").is_some_and(|n| !n.is_null()) && !super::common::present(map.get("job"))
    {
        cx.config(
            path,
            "must specify the job where to fetch the artifact from",
            node.pos,
        );
        ok = false;
    }
    if map.get("project").is_some_and(|n| !n.is_null()) && !super::common::present(map.get("file"))
    {
        cx.config(
            path,
            "must specify the file where to fetch the config from",
            node.pos,
        );
        ok = false;
    }
    for key in [
        "local",
        "remote",
        "template",
        "component",
        "artifact",
        "job",
        "project",
        "ref",
    ] {
        ok &= opt_string(&map, key, path, cx).is_ok();
    }
    if let Some(f) = map.get("file").filter(|n| !n.is_null()) {
        if super::common::string_or_strings(f).is_none() {
            cx.attr(
                path,
                "file",
                "should be an array of strings or a string",
                f.pos,
            );
            ok = false;
        }
    }
    if let Some(p) = map.get("project").and_then(Node::as_str) {
        if !plausible_project_path(p) {
            cx.attr(
                path,
                "project",
                PROJECT_PATH_MESSAGE,
                map.get("project").map_or(node.pos, |n| n.pos),
            );
            ok = false;
        }
    }
    if let Some(i) = map.get("inputs").filter(|n| !n.is_null()) {
        if i.as_map().is_none() {
            cx.config(&join(path, "inputs"), "should be a hash", i.pos);
            ok = false;
        }
    }
    if let Some(r) = map.get("rules").filter(|n| !n.is_null()) {
        if !r
            .as_seq()
            .is_some_and(|items| items.iter().all(|i| i.as_map().is_some()))
        {
            cx.attr(path, "rules", "should be an array of hashes", r.pos);
            ok = false;
        }
    }
    // The include mapper's checks (messages kept as GitLab writes them).
    let locations: Vec<&str> = LOCATION_KEYS
        .iter()
        .copied()
        .filter(|k| map.contains_key(k))
        .collect();
    let valid = LOCATION_KEYS
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if locations.is_empty() {
        cx.raw(
            format!(
                "`{}` does not have a valid subkey for include. Valid subkeys are: {valid}",
                node.to_json()
            ),
            Some(node.pos),
        );
        ok = false;
    } else if locations.len() > 1 {
        cx.raw(
            format!("Each include must use only one of: {valid}"),
            Some(node.pos),
        );
        ok = false;
    }
    ok
}
