//! `cache`: a hash or an array of hashes (at most 4) — GitLab `Entry::Caches`,
//! `Entry::Cache`, `Entry::Key`, `Entry::Files`, `Entry::Prefix`.
//!
//! Each cache is located at `<path>:cache` (GitLab names composable-array items by their
//! class), so a bad key reads `jobs:x:cache:cache:key config cannot be "." or ".."`.

use crate::model::{ArtifactsWhen, Cache, CacheKey};
use crate::validate::{Cx, join};
use crate::yaml::{Map, Node, Value};

use super::common::check_cache_key;

/// GitLab's `MULTIPLE_CACHE_LIMIT` (instance setting "Maximum caches per job").
pub(crate) const MAX_CACHES: usize = 4;
/// `cache:fallback_keys` limit.
pub(crate) const MAX_FALLBACK_KEYS: usize = 5;
/// `cache:key:files` limit: GitLab's backend allows 2. Its `increase_ci_cache_key_files_limit`
/// flag (beta, off by default; gitlab-org/gitlab!257060) raises it to 10, which the editor's
/// schema already accepts; Gantry follows the default.
pub(crate) const MAX_KEY_FILES: usize = 2;
/// `cache:key:files_commits` limit.
pub(crate) const MAX_KEY_FILES_COMMITS: usize = 2;

const CACHE_KEYS: &[&str] = &[
    "key",
    "untracked",
    "paths",
    "when",
    "policy",
    "unprotect",
    "fallback_keys",
];

pub(crate) fn caches(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<Cache>> {
    let items: Vec<Node> = match &node.value {
        Value::Map(_) => vec![node.clone()],
        Value::Seq(items) => {
            if items.len() > MAX_CACHES {
                cx.config(
                    path,
                    format!("no more than {MAX_CACHES} caches can be created"),
                    node.pos,
                );
                return None;
            }
            // `[@config].flatten`: nested arrays (aliases of lists) are flattened.
            flattened(node, path, cx)?
        }
        _ => {
            cx.config(path, "can only be a Hash or an Array", node.pos);
            return None;
        }
    };
    let item_path = join(path, "cache");
    let mut ok = true;
    let mut out = Vec::with_capacity(items.len());
    for item in &items {
        match cache(item, &item_path, cx) {
            Some(c) => out.push(c),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// The items of an array with nested arrays flattened (as Ruby's `flatten`, capped at
/// [`crate::validate::MAX_NESTING`] levels).
pub(super) fn flattened(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<Node>> {
    let items = crate::validate::flatten_nodes(node).map(|v| v.into_iter().cloned().collect());
    if items.is_none() {
        cx.config(path, "should be an array", node.pos);
    }
    items
}

fn cache(node: &Node, path: &str, cx: &mut Cx) -> Option<Cache> {
    let map = cx.map(node, path)?;
    let mut ok = cx.unknown_keys(map, CACHE_KEYS, path, node.pos);

    let key = match map.get("key").filter(|n| !n.is_null()) {
        None => Some(CacheKey::Literal("default".to_owned())),
        Some(k) => cache_key(k, &join(path, "key"), cx),
    };
    ok &= key.is_some();

    let mut paths = Vec::new();
    if let Some(p) = map.get("paths").filter(|n| !n.is_null()) {
        match crate::validate::string_array(p) {
            Some(v) => paths = v,
            None => {
                cx.config(&join(path, "paths"), "should be an array of strings", p.pos);
                ok = false;
            }
        }
    }

    let mut flag = |name: &str, cx: &mut Cx| -> bool {
        match map.get(name).filter(|n| !n.is_null()) {
            None => false,
            Some(n) => cx.boolean(n, &join(path, name)).unwrap_or_else(|| {
                ok = false;
                false
            }),
        }
    };
    let untracked = flag("untracked", cx);
    let unprotect = flag("unprotect", cx);

    // `validates :policy, type: String, allow_blank: true, format: ALLOWED_POLICY` where the
    // pattern is unanchored: anything mentioning `pull`, `push` or `$` passes.
    let mut policy = "pull-push".to_owned();
    if let Some(p) = map.get("policy").filter(|n| !n.is_blank()) {
        match &p.value {
            Value::Str(s) => {
                if s.contains("push") || s.contains("pull") || s.contains('$') {
                    policy = s.clone();
                } else {
                    cx.attr(
                        path,
                        "policy",
                        "should be a variable or one of: pull-push, push, pull",
                        p.pos,
                    );
                    ok = false;
                }
            }
            _ => {
                cx.attr(path, "policy", "should be a string", p.pos);
                ok = false;
            }
        }
    }

    let when = match map.get("when").filter(|n| !n.is_null()) {
        None => Some(ArtifactsWhen::OnSuccess),
        Some(w) => when_of(w, path, cx),
    };
    ok &= when.is_some();

    let mut fallback_keys = Vec::new();
    if let Some(f) = map.get("fallback_keys").filter(|n| !n.is_null()) {
        match crate::validate::string_array(f) {
            Some(v) => {
                if v.len() > MAX_FALLBACK_KEYS {
                    // GitLab's typo, kept verbatim.
                    cx.attr(
                        path,
                        "fallback_keys",
                        format!("has to many entries (maximum {MAX_FALLBACK_KEYS})"),
                        f.pos,
                    );
                    ok = false;
                }
                fallback_keys = v;
            }
            None => {
                cx.config(
                    &join(path, "fallback_keys"),
                    "should be an array of strings",
                    f.pos,
                );
                ok = false;
            }
        }
    }

    if !ok {
        return None;
    }
    Some(Cache {
        key: key?,
        paths,
        untracked,
        unprotect,
        policy,
        when: when?,
        fallback_keys,
    })
}

/// `when` of a cache or of artifacts: `on_success`, `on_failure` or `always`. Reports
/// both the type and the inclusion error when the value is not a string, as Rails does.
pub(super) fn when_of(node: &Node, path: &str, cx: &mut Cx) -> Option<ArtifactsWhen> {
    let parsed = match node.as_str() {
        Some("on_success") => Some(ArtifactsWhen::OnSuccess),
        Some("on_failure") => Some(ArtifactsWhen::OnFailure),
        Some("always") => Some(ArtifactsWhen::Always),
        _ => None,
    };
    if parsed.is_none() {
        if node.as_str().is_none() {
            cx.attr(path, "when", "should be a string", node.pos);
        }
        cx.attr(
            path,
            "when",
            "should be one of: on_success, on_failure, always",
            node.pos,
        );
    }
    parsed
}

fn cache_key(node: &Node, path: &str, cx: &mut Cx) -> Option<CacheKey> {
    match &node.value {
        Value::Str(_) => check_cache_key(node, path, cx).map(CacheKey::Literal),
        Value::Map(map) => complex_key(map, node, path, cx),
        _ => {
            // `Key::UnknownStrategy`: `<location> should be ...`.
            cx.push(
                format!("{path} should be a hash, a string or a symbol"),
                node.pos,
            );
            None
        }
    }
}

fn complex_key(map: &Map, node: &Node, path: &str, cx: &mut Cx) -> Option<CacheKey> {
    let mut ok = cx.unknown_keys(map, &["files", "files_commits", "prefix"], path, node.pos);
    let files = map.get("files");
    let commits = map.get("files_commits");
    match (files, commits) {
        (Some(_), Some(_)) => {
            cx.config(
                path,
                "these keys cannot be used together: files, files_commits",
                node.pos,
            );
            ok = false;
        }
        (None, None) => {
            cx.config(path, "missing required keys: files", node.pos);
            ok = false;
        }
        _ => {}
    }
    let prefix = match map.get("prefix").filter(|n| !n.is_null()) {
        None => None,
        Some(p) => {
            let v = check_cache_key(p, &join(path, "prefix"), cx);
            ok &= v.is_some();
            v
        }
    };
    let list = |node: Option<&Node>, name: &str, max: usize, cx: &mut Cx| -> Option<Vec<String>> {
        let node = node?;
        let fpath = join(path, name);
        let Some(v) = crate::validate::string_array(node) else {
            cx.config(&fpath, "should be an array of strings", node.pos);
            return None;
        };
        if v.is_empty() {
            cx.config(&fpath, "requires at least 1 item", node.pos);
            return None;
        }
        if v.len() > max {
            cx.config(
                &fpath,
                format!("has too many items (maximum is {max})"),
                node.pos,
            );
            return None;
        }
        // `Files#value` drops leading slashes.
        Some(
            v.into_iter()
                .map(|f| f.trim_start_matches('/').to_owned())
                .collect(),
        )
    };
    let files_v = list(files, "files", MAX_KEY_FILES, cx);
    let commits_v = list(commits, "files_commits", MAX_KEY_FILES_COMMITS, cx);
    if files.is_some() && files_v.is_none() || commits.is_some() && commits_v.is_none() {
        ok = false;
    }
    if !ok {
        return None;
    }
    match (files_v, commits_v) {
        (Some(files), None) => Some(CacheKey::Files { files, prefix }),
        (None, Some(files)) => Some(CacheKey::FilesCommits { files, prefix }),
        _ => None,
    }
}
