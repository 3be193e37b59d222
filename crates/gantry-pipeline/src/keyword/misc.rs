//! The small job keywords: `allow_failure`, `timeout`, `tags`, `hooks`, `coverage`,
//! `resource_group`, `interruptible`, `pages`, `dast_configuration`, `identity`.

use crate::duration::{TIMEOUT_LIMIT, parse_duration, parse_expire_in};
use crate::validate::{Cx, int_or_int_array, join};
use crate::yaml::{Node, Value};

use super::common::{opt_string, parent_path};

/// GitLab's `Tags::TAGS_LIMIT` (a job must have fewer tags than this).
pub(crate) const TAGS_LIMIT: usize = 50;

/// `allow_failure`: a boolean or `{exit_codes: int | [int]}`. Returns the boolean and
/// the exit codes (the hash form means `false` plus criteria).
pub(crate) fn allow_failure(node: &Node, path: &str, cx: &mut Cx) -> Option<(bool, Vec<i64>)> {
    match &node.value {
        Value::Bool(b) => Some((*b, Vec::new())),
        Value::Map(map) => {
            let mut ok = cx.unknown_keys(map, &["exit_codes"], path, node.pos);
            let mut codes = Vec::new();
            if let Some(e) = map.get("exit_codes").filter(|n| !n.is_null()) {
                match int_or_int_array(e) {
                    Some(c) => codes = c,
                    None => {
                        cx.attr(
                            path,
                            "exit_codes",
                            "should be an array of integers or an integer",
                            e.pos,
                        );
                        ok = false;
                    }
                }
            }
            ok.then_some((false, codes))
        }
        _ => {
            cx.config(path, "should be a hash or a boolean value", node.pos);
            None
        }
    }
}

/// `timeout`: a duration string below [`TIMEOUT_LIMIT`]; seconds. As in GitLab, a value
/// that is not a valid duration also fails the limit check (both messages).
pub(crate) fn timeout(node: &Node, path: &str, cx: &mut Cx) -> Option<u64> {
    match node.as_str().and_then(parse_duration) {
        Some(secs) if secs < TIMEOUT_LIMIT => Some(secs),
        Some(_) => {
            cx.config(path, "should not exceed the limit", node.pos);
            None
        }
        None => {
            cx.config(path, "should be a duration", node.pos);
            cx.config(path, "should not exceed the limit", node.pos);
            None
        }
    }
}

/// `tags`: an array of strings (nested arrays, e.g. from `!reference`, are flattened),
/// fewer than [`TAGS_LIMIT`].
pub(crate) fn tags(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let ok =
        matches!(node.value, Value::Seq(_)) && crate::validate::flatten_strings(node, 0, &mut out);
    if !ok {
        cx.config(path, "should be an array of strings", node.pos);
        return None;
    }
    if out.len() >= TAGS_LIMIT {
        cx.config(
            path,
            format!("must be less than the limit of {TAGS_LIMIT} tags"),
            node.pos,
        );
        return None;
    }
    Some(out)
}

/// `hooks: {pre_get_sources_script}`; returns the commands (empty when absent).
pub(crate) fn hooks(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<String>> {
    let map = cx.map(node, path)?;
    let ok = cx.unknown_keys(map, &["pre_get_sources_script"], path, node.pos);
    let script = match map.get("pre_get_sources_script").filter(|n| !n.is_null()) {
        None => Some(Vec::new()),
        Some(s) => cx.commands(s, &join(path, "pre_get_sources_script")),
    };
    if ok { script } else { None }
}

/// `coverage: /regex/`, RE2 syntax. Returns the literal as written (`/…/flags`); use
/// [`crate::expr::parse_regex_literal`] to compile it.
pub(crate) fn coverage(node: &Node, path: &str, cx: &mut Cx) -> Option<String> {
    match node.as_str() {
        Some(s) if matches!(crate::expr::parse_regex_literal(s), Some(Ok(_))) => Some(s.to_owned()),
        _ => {
            cx.config(
                path,
                "must be a regular expression with re2 syntax",
                node.pos,
            );
            None
        }
    }
}

/// `resource_group`: a string. GitLab validates it as an attribute of the job, so the
/// message reads `<job path> resource group should be a string`.
pub(crate) fn resource_group(node: &Node, path: &str, cx: &mut Cx) -> Option<String> {
    match node.as_str() {
        Some(s) => Some(s.to_owned()),
        None => {
            match parent_path(path) {
                Some(parent) => cx.attr(parent, "resource_group", "should be a string", node.pos),
                None => cx.config(path, "should be a string", node.pos),
            }
            None
        }
    }
}

pub(crate) fn interruptible(node: &Node, path: &str, cx: &mut Cx) -> Option<bool> {
    cx.boolean(node, path)
}

/// `pages`: a boolean or `{publish, path_prefix, expire_in}` (`Entry::Pages`). `true`
/// or a hash is the value as written; `false` is `Some(PagesKeyword::Off)`.
pub(crate) fn pages(node: &Node, path: &str, cx: &mut Cx) -> Option<PagesKeyword> {
    match &node.value {
        Value::Bool(true) => Some(PagesKeyword::On(PagesOptions::default())),
        Value::Bool(false) => Some(PagesKeyword::Off),
        Value::Map(map) => {
            let mut ok = cx.unknown_keys(
                map,
                &["path_prefix", "expire_in", "publish"],
                path,
                node.pos,
            );
            let path_prefix = opt_string(map, "path_prefix", path, cx);
            let publish = opt_string(map, "publish", path, cx);
            ok &= path_prefix.is_ok() && publish.is_ok();
            let mut expire_in = None;
            if let Some(e) = map.get("expire_in").filter(|n| !n.is_null()) {
                // `duration: { variable: true }`: a value holding a variable is a duration
                // once expanded (GitLab skips it here).
                let ok_text =
                    |s: &str| super::environment::has_variable(s) || parse_expire_in(s).is_some();
                if !e.as_str().is_some_and(ok_text) {
                    cx.attr(path, "expire_in", "should be a duration", e.pos);
                    ok = false;
                }
                expire_in = e.as_str().map(str::to_owned);
            }
            let options = PagesOptions {
                publish: publish.ok().flatten(),
                path_prefix: path_prefix.ok().flatten(),
                expire_in,
            };
            // `config[:pages].present?`: an empty hash is not.
            ok.then_some(if map.is_empty() {
                PagesKeyword::Empty
            } else {
                PagesKeyword::On(options)
            })
        }
        _ => {
            cx.config(path, "should be a hash or a boolean value", node.pos);
            None
        }
    }
}

/// What a job's `pages:` says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum PagesKeyword {
    /// `pages: false`: not a Pages job, even when named `pages`.
    Off,
    /// `pages: {}` (or no `pages:`): a Pages job only when named `pages`.
    #[default]
    Empty,
    /// `pages: true` or a non-empty hash.
    On(PagesOptions),
}

/// The hash form's values, as written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PagesOptions {
    pub publish: Option<String>,
    pub path_prefix: Option<String>,
    pub expire_in: Option<String>,
}

/// `dast_configuration: {site_profile, scanner_profile}` (EE).
pub(crate) fn dast_configuration(node: &Node, path: &str, cx: &mut Cx) -> Option<()> {
    let map = cx.map(node, path)?;
    let mut ok = cx.unknown_keys(map, &["site_profile", "scanner_profile"], path, node.pos);
    ok &= opt_string(map, "site_profile", path, cx).is_ok();
    ok &= opt_string(map, "scanner_profile", path, cx).is_ok();
    ok.then_some(())
}

/// `identity: google_cloud` (beta).
pub(crate) fn identity(node: &Node, path: &str, cx: &mut Cx) -> Option<()> {
    match node.as_str() {
        Some("google_cloud") => Some(()),
        Some(_) => {
            cx.config(path, "is not included in the list", node.pos);
            None
        }
        None => {
            cx.config(path, "should be a string", node.pos);
            None
        }
    }
}
