//! `release` — GitLab `Entry::Release`, `Release::Assets`, `Assets::Links`,
//! `Assets::Link`. Passed on as JSON once the structure is checked.

use crate::validate::{Cx, join};
use crate::yaml::{Node, Value};

use super::common::{opt_string, present, required_string, string_or_strings};

const RELEASE_KEYS: &[&str] = &[
    "tag_name",
    "tag_message",
    "name",
    "description",
    "ref",
    "released_at",
    "milestones",
    "assets",
];
const LINK_KEYS: &[&str] = &["name", "url", "filepath", "link_type"];
pub(crate) const LINK_TYPES: &[&str] = &["other", "runbook", "image", "package"];

pub(crate) fn release(node: &Node, path: &str, cx: &mut Cx) -> Option<serde_json::Value> {
    let map = cx.map(node, path)?;
    let mut ok = cx.unknown_keys(map, RELEASE_KEYS, path, node.pos);
    ok &= required_string(map, "tag_name", path, node.pos, cx).is_some();
    ok &= required_string(map, "description", path, node.pos, cx).is_some();
    for key in ["tag_message", "name", "ref", "released_at"] {
        ok &= opt_string(map, key, path, cx).is_ok();
    }
    if let Some(m) = map.get("milestones").filter(|n| !n.is_null()) {
        if string_or_strings(m).is_none() {
            cx.attr(
                path,
                "milestones",
                "should be an array of strings or a string",
                m.pos,
            );
            ok = false;
        }
    }
    if let Some(a) = map.get("assets").filter(|n| !n.is_null()) {
        ok &= assets(a, &join(path, "assets"), cx);
    }
    ok.then(|| node.to_json())
}

fn assets(node: &Node, path: &str, cx: &mut Cx) -> bool {
    let Some(map) = cx.map(node, path) else {
        return false;
    };
    let mut ok = cx.unknown_keys(map, &["links"], path, node.pos);
    let links = map.get("links");
    let pos = links.map_or(node.pos, |n| n.pos);
    match links.map(|n| &n.value) {
        Some(Value::Seq(items)) if !items.is_empty() => {
            if !items.iter().all(|i| i.as_map().is_some()) {
                cx.attr(path, "links", "should be an array of hashes", pos);
                return false;
            }
            let lpath = join(&join(path, "links"), "link");
            for item in items.iter() {
                ok &= link(item, &lpath, cx);
            }
        }
        Some(Value::Seq(_)) | None | Some(Value::Null) => {
            cx.attr(path, "links", "can't be blank", pos);
            ok = false;
        }
        Some(_) => {
            cx.attr(path, "links", "should be an array of hashes", pos);
            ok = false;
        }
    }
    ok
}

fn link(node: &Node, path: &str, cx: &mut Cx) -> bool {
    let Some(map) = cx.map(node, path) else {
        return false;
    };
    let mut ok = cx.unknown_keys(map, LINK_KEYS, path, node.pos);
    ok &= required_string(map, "name", path, node.pos, cx).is_some();
    // GitLab checks the URL only after variable expansion (`url: $S3/x` is common).
    let url = map.get("url");
    if !present(url) {
        cx.attr(
            path,
            "url",
            "can't be blank",
            url.map_or(node.pos, |n| n.pos),
        );
        ok = false;
    } else {
        ok &= opt_string(map, "url", path, cx).is_ok();
    }
    ok &= opt_string(map, "filepath", path, cx).is_ok();
    match opt_string(map, "link_type", path, cx) {
        Ok(Some(t)) if !LINK_TYPES.contains(&t.as_str()) => {
            cx.attr(path, "link_type", "is not included in the list", node.pos);
            ok = false;
        }
        Ok(_) => {}
        Err(()) => ok = false,
    }
    ok
}
