//! `id_tokens` (GitLab `Entry::IdToken`) and `secrets` (EE `Entry::Secret` and its
//! providers). Both are passed on as JSON after their structure is checked.

use crate::validate::{Cx, join};
use crate::yaml::{Map, Node, Pos, Value};

use super::common::{opt_bool, opt_string, present, string_or_strings};

/// `id_tokens: {VAR: {aud: string | [string]}}`.
pub(crate) fn id_tokens(node: &Node, path: &str, cx: &mut Cx) -> Option<serde_json::Value> {
    let map = cx.map(node, path)?;
    let mut ok = true;
    for (name, token) in map.iter() {
        let tpath = join(path, name);
        let empty = Map::new();
        let tmap = token.as_map().unwrap_or(&empty);
        if !tmap.contains_key("aud") {
            cx.config(&tpath, "missing required keys: aud", token.pos);
            ok = false;
        }
        ok &= cx.unknown_keys(tmap, &["aud"], &tpath, token.pos);
        if let Some(aud) = tmap.get("aud") {
            if string_or_strings(aud).is_none() {
                cx.attr(
                    &tpath,
                    "aud",
                    "should be an array of strings or a string",
                    aud.pos,
                );
                ok = false;
            }
        }
    }
    ok.then(|| node.to_json())
}

/// Secret providers; each secret uses exactly one.
pub(crate) const SECRET_PROVIDERS: &[&str] = &[
    "vault",
    "azure_key_vault",
    "gcp_secret_manager",
    "aws_secrets_manager",
    "gitlab_secrets_manager",
    "akeyless",
];

/// `secrets: {VAR: {<provider>: ..., file: bool, token: string}}`.
pub(crate) fn secrets(node: &Node, path: &str, cx: &mut Cx) -> Option<serde_json::Value> {
    let map = cx.map(node, path)?;
    let mut ok = true;
    for (name, secret) in map.iter() {
        ok &= one_secret(secret, &join(path, name), cx);
    }
    ok.then(|| node.to_json())
}

fn one_secret(node: &Node, path: &str, cx: &mut Cx) -> bool {
    let Some(map) = cx.map(node, path) else {
        return false;
    };
    let mut allowed = SECRET_PROVIDERS.to_vec();
    allowed.extend(["file", "token"]);
    let mut ok = cx.unknown_keys(map, &allowed, path, node.pos);
    if SECRET_PROVIDERS
        .iter()
        .filter(|p| map.contains_key(p))
        .count()
        != 1
    {
        cx.config(
            path,
            format!(
                "must use exactly one of these keys: {}",
                SECRET_PROVIDERS.join(", ")
            ),
            node.pos,
        );
        ok = false;
    }
    ok &= opt_bool(map, "file", path, cx).is_ok();
    ok &= opt_string(map, "token", path, cx).is_ok();

    for (provider, value) in map.iter() {
        let ppath = join(path, provider);
        ok &= match provider {
            "vault" => match &value.value {
                Value::Str(_) => true,
                _ => fields(
                    value,
                    &ppath,
                    &[
                        ("engine", Kind::Engine, true),
                        ("path", Kind::Str, true),
                        ("field", Kind::Str, true),
                    ],
                    cx,
                ),
            },
            "azure_key_vault" => fields(
                value,
                &ppath,
                &[("name", Kind::Str, true), ("version", Kind::Str, false)],
                cx,
            ),
            "gcp_secret_manager" => {
                let mut good = fields(
                    value,
                    &ppath,
                    &[
                        ("name", Kind::Str, true),
                        ("version", Kind::StrOrInt, false),
                    ],
                    cx,
                );
                if !present(map.get("token")) {
                    cx.attr(
                        path,
                        "token",
                        "is required with gcp_secret_manager",
                        node.pos,
                    );
                    good = false;
                }
                good
            }
            "aws_secrets_manager" => match &value.value {
                Value::Str(_) => true,
                _ => fields(
                    value,
                    &ppath,
                    &[
                        ("secret_id", Kind::Str, true),
                        ("version_id", Kind::Str, false),
                        ("version_stage", Kind::Str, false),
                        ("region", Kind::Str, false),
                        ("role_arn", Kind::Str, false),
                        ("role_session_name", Kind::Str, false),
                        ("field", Kind::Str, false),
                    ],
                    cx,
                ),
            },
            "gitlab_secrets_manager" => {
                let mut good = fields(
                    value,
                    &ppath,
                    &[("name", Kind::Str, true), ("source", Kind::Str, false)],
                    cx,
                );
                if let Some(n) = value
                    .as_map()
                    .and_then(|m| m.get("name"))
                    .and_then(Node::as_str)
                {
                    if !n.is_empty() && !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                        cx.attr(
                            &ppath,
                            "name",
                            "can contain only letters, digits and '_'",
                            value.pos,
                        );
                        good = false;
                    }
                }
                good
            }
            "akeyless" if value.as_map().is_none() => {
                cx.config(&ppath, "should be a hash", value.pos);
                false
            }
            _ => true,
        };
    }
    ok
}

#[derive(Clone, Copy)]
enum Kind {
    Str,
    StrOrInt,
    /// Vault `engine: {name, path}`.
    Engine,
}

/// A provider hash with known fields (`required` ones must be present and non-blank).
fn fields(node: &Node, path: &str, spec: &[(&str, Kind, bool)], cx: &mut Cx) -> bool {
    let Some(map) = cx.map(node, path) else {
        return false;
    };
    let names: Vec<&str> = spec.iter().map(|(n, _, _)| *n).collect();
    let mut ok = cx.unknown_keys(map, &names, path, node.pos);
    let missing: Vec<&str> = spec
        .iter()
        .filter(|(n, _, req)| *req && !map.contains_key(n))
        .map(|(n, _, _)| *n)
        .collect();
    if !missing.is_empty() {
        cx.config(
            path,
            format!("missing required keys: {}", missing.join(", ")),
            node.pos,
        );
        ok = false;
    }
    for (name, kind, required) in spec {
        let Some(v) = map.get(name) else {
            continue;
        };
        if *required && !present(Some(v)) {
            cx.attr(path, name, "can't be blank", v.pos);
            ok = false;
            continue;
        }
        if v.is_null() {
            continue;
        }
        ok &= match kind {
            Kind::Str => type_ok(
                v.as_str().is_some(),
                path,
                name,
                "should be a string",
                v.pos,
                cx,
            ),
            Kind::StrOrInt => type_ok(
                matches!(v.value, Value::Str(_) | Value::Int(_)),
                path,
                name,
                "should be a string or an integer",
                v.pos,
                cx,
            ),
            Kind::Engine => fields(
                v,
                &join(path, name),
                &[("name", Kind::Str, true), ("path", Kind::Str, true)],
                cx,
            ),
        };
    }
    ok
}

fn type_ok(good: bool, path: &str, attr: &str, msg: &str, pos: Pos, cx: &mut Cx) -> bool {
    if !good {
        cx.attr(path, attr, msg, pos);
    }
    good
}
