//! Loading a configuration: the root file, its `spec:inputs` header, and `include`
//! resolution (spec §2.6), merged into one mapping. Files arrive through [`Loader`].
//!
//! Limits: at most [`MAX_INCLUDES`] includes per pipeline (nested and duplicates counted),
//! nesting at most [`MAX_INCLUDE_DEPTH`] files deep, every file within
//! [`crate::yaml::Limits`], and all files together at most [`MAX_TOTAL_BYTES`].

use crate::context::Context;
use crate::diagnostic::SourceMap;
use crate::expand::{Unknown, expand_server};
use crate::inputs;
use crate::rules::{self, RuleTarget};
use crate::validate::{Cx, join};
use crate::yaml::{self, Limits, Map, Node, Pos, Value};

/// GitLab's `ci_max_includes` default.
pub const MAX_INCLUDES: usize = 150;
/// Nesting of includes (GitLab bounds it only by the include count; we state a depth too).
pub const MAX_INCLUDE_DEPTH: usize = 100;
/// All configuration files together.
pub const MAX_TOTAL_BYTES: usize = 32 * 1024 * 1024;

/// Where configuration files come from: the project's files at the pipeline's commit.
pub trait Loader {
    /// Read a project file by its path relative to the project root (no leading `/`).
    /// `Ok(None)` when it does not exist; `Err` for an I/O failure, with its description.
    fn read(&self, path: &str) -> Result<Option<String>, String>;
    /// Every file path in the project, relative to its root (for `include:local`
    /// wildcards and `rules:exists`).
    fn files(&self) -> Vec<String>;
}

/// Files held in memory: for tests, tools, and callers that already have the files.
#[derive(Clone, Debug, Default)]
pub struct MemoryLoader {
    files: std::collections::BTreeMap<String, String>,
}

impl MemoryLoader {
    pub fn new() -> Self {
        Self::default()
    }
    /// Add a file (path relative to the project root).
    pub fn with(mut self, path: impl Into<String>, text: impl Into<String>) -> Self {
        self.insert(path, text);
        self
    }
    pub fn insert(&mut self, path: impl Into<String>, text: impl Into<String>) {
        self.files.insert(path.into(), text.into());
    }
}

impl Loader for MemoryLoader {
    fn read(&self, path: &str) -> Result<Option<String>, String> {
        Ok(self.files.get(path).cloned())
    }
    fn files(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }
}

/// The project's file list, read from the loader the first time something needs it
/// (`include:local` wildcards, `include:rules` and `rules:exists`), sorted.
pub(crate) struct Files<'a> {
    loader: &'a dyn Loader,
    list: std::cell::OnceCell<Vec<String>>,
}

impl<'a> Files<'a> {
    pub fn new(loader: &'a dyn Loader) -> Self {
        Files {
            loader,
            list: std::cell::OnceCell::new(),
        }
    }

    pub fn get(&self) -> &[String] {
        self.list.get_or_init(|| {
            let mut files = self.loader.files();
            files.sort();
            files
        })
    }
}

pub(crate) struct Loading<'a> {
    pub loader: &'a dyn Loader,
    pub ctx: &'a Context,
    pub sources: &'a mut SourceMap,
    pub cx: &'a mut Cx,
    pub limits: Limits,
    pub includes: usize,
    pub files: &'a Files<'a>,
}

impl<'a> Loading<'a> {
    pub fn files(&self) -> &'a [String] {
        self.files.get()
    }

    /// Parse a file's text into its body mapping (header `spec:` split off and inputs
    /// interpolated). Errors are pushed with `what` naming the file for included files.
    pub fn parse_file(
        &mut self,
        name: &str,
        text: String,
        given_inputs: Option<&Node>,
        included_as: Option<&str>,
    ) -> Option<Map> {
        let file = self.sources.add(name, text);
        if self.sources.total_bytes() > MAX_TOTAL_BYTES {
            self.cx.raw("Total size of combined CI/CD configuration is too big", None);
            return None;
        }
        let prefix = |m: String| match included_as {
            Some(loc) => format!("`{loc}`: {m}"),
            None => m,
        };
        let text = self.sources.get(file).map_or("", |f| f.text.as_str());
        let docs = match yaml::parse_documents(text, file, self.limits) {
            Ok(d) => d,
            Err(e) => {
                let msg = if e.message == yaml::TOO_BIG {
                    e.message.clone()
                } else {
                    format!("({name}): {} at line {} column {}", e.message, e.pos.line, e.pos.col)
                };
                self.cx.raw(prefix(msg), Some(e.pos));
                return None;
            }
        };
        let start = Pos { file, line: 1, col: 1 };
        let mut docs = docs.into_iter();
        let first = docs.next();
        let second = docs.next();
        let (header, body) = match (first, second) {
            (Some(h), Some(b)) if h.as_map().is_some_and(|m| m.contains_key("spec")) => (Some(h), Some(b)),
            (Some(f), _) => (None, Some(f)),
            (None, _) => (None, None),
        };
        let mut body = match body {
            Some(b) if matches!(b.value, Value::Map(_)) && !(included_as.is_some() && b.is_blank()) => b,
            // An included file must hold a non-empty mapping (GitLab's `File::Base#validate_hash!`:
            // a comment-only file, a scalar, a list or `{}`).
            Some(b) if included_as.is_some() => {
                self.cx.raw(format!("Included file `{}` does not have valid YAML syntax!", included_as.unwrap_or(name)), Some(b.pos));
                return None;
            }
            Some(b) => {
                self.cx.raw(prefix("Invalid configuration format".into()), Some(b.pos));
                return None;
            }
            None => {
                if included_as.is_some() {
                    self.cx.raw(format!("Included file `{}` does not have valid YAML syntax!", included_as.unwrap_or(name)), Some(start));
                } else {
                    self.cx.raw("Please provide content of .gitlab-ci.yml", Some(start));
                }
                return None;
            }
        };
        let errors_before = self.cx.errors.len();
        inputs::interpolate(header.as_ref(), given_inputs, &mut body, self.ctx, self.cx, included_as);
        if self.cx.errors.len() > errors_before {
            return None;
        }
        match body.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// Resolve `include` of `map` (a file's body) and merge: included files first, in
    /// order, then the file's own content on top.
    pub fn expand_includes(&mut self, mut map: Map, depth: usize, fragment: bool) -> Map {
        let Some(include) = map.remove("include") else {
            return map;
        };
        if fragment {
            // A fragment's includes are checked for structure, never resolved.
            self.items(&include);
            return map;
        }
        if depth >= MAX_INCLUDE_DEPTH {
            // GitLab bounds nesting only by the include count: same message.
            self.cx.raw(format!("Maximum of {MAX_INCLUDES} nested includes are allowed!"), Some(include.pos));
            return map;
        }
        let mut acc = Map::new();
        for item in self.items(&include) {
            if self.cx.has_errors() {
                break;
            }
            for (loc, text, item_node) in self.fetch(&item) {
                self.includes += 1;
                if self.includes > MAX_INCLUDES {
                    self.cx.raw(format!("Maximum of {MAX_INCLUDES} nested includes are allowed!"), Some(item.pos));
                    return map;
                }
                let given = item_node.as_map().and_then(|m| m.get("inputs")).cloned();
                let Some(body) = self.parse_file(&loc, text, given.as_ref(), Some(&loc)) else {
                    continue;
                };
                let body = self.expand_includes(body, depth + 1, false);
                deep_merge(&mut acc, body);
            }
        }
        deep_merge(&mut acc, map);
        acc
    }

    /// Normalize `include` into mapping items, validating their structure.
    fn items(&mut self, include: &Node) -> Vec<Node> {
        let list: Vec<Node> = match &include.value {
            Value::Seq(items) => items.to_vec(),
            Value::Str(_) | Value::Map(_) => vec![include.clone()],
            _ => {
                self.cx.config("include", "should be an array or a string", include.pos);
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for (i, item) in list.into_iter().enumerate() {
            let path = join("include", &i.to_string());
            match &item.value {
                Value::Str(s) => {
                    let s = expand_server(s, &|n| self.ctx.var(n), Unknown::Empty);
                    let key = if is_url(&s) { "remote" } else { "local" };
                    let mut m = Map::new();
                    m.insert_node(key, Node::str(s, item.pos));
                    out.push(Node::new(Value::Map(m), item.pos));
                }
                Value::Map(m) => {
                    const LOCATIONS: [&str; 6] = ["local", "project", "remote", "template", "artifact", "component"];
                    const ALLOWED: [&str; 11] =
                        ["local", "project", "file", "ref", "remote", "integrity", "template", "component", "artifact", "job", "inputs"];
                    let given: Vec<&str> = m.keys().filter(|k| LOCATIONS.contains(k)).collect();
                    if given.is_empty() {
                        self.cx.raw(
                            format!(
                                "`{}` does not have a valid subkey for include. Valid subkeys are: `local`, `project`, `remote`, `template`, `artifact`, `component`",
                                compact_json(&item)
                            ),
                            Some(item.pos),
                        );
                        continue;
                    }
                    if given.len() > 1 {
                        self.cx.raw(
                            format!("Each include must use only one of: `local`, `project`, `remote`, `template`, `artifact`, `component`; `{}` uses {}", compact_json(&item), given.join(", ")),
                            Some(item.pos),
                        );
                        continue;
                    }
                    let mut allowed: Vec<&str> = ALLOWED.to_vec();
                    allowed.push("rules");
                    if !self.cx.unknown_keys(m, &allowed, &path, item.pos) {
                        continue;
                    }
                    if let Some(p) = m.get("project") {
                        if !p.as_str().is_some_and(valid_project_path) {
                            self.cx.raw(
                                format!("Project `{}` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined.", compact_json(p)),
                                Some(p.pos),
                            );
                            continue;
                        }
                    }
                    if m.contains_key("project") && !m.contains_key("file") {
                        self.cx.config(&path, "must specify the file where to fetch the config from", item.pos);
                        continue;
                    }
                    if m.contains_key("artifact") && !m.contains_key("job") {
                        self.cx.config(&path, "must specify the job where to fetch the artifact from", item.pos);
                        continue;
                    }
                    if let Some(r) = m.get("rules") {
                        let rules = rules::parse_rules(r, &join(&path, "rules"), RuleTarget::Include, self.cx);
                        let Some(rules) = rules else { continue };
                        if !rules::include_matches(&rules, self.ctx, self.files) {
                            continue;
                        }
                    }
                    out.push(item.clone());
                }
                _ => self.cx.config(&path, "should be a hash or a string", item.pos),
            }
        }
        out
    }

    /// The files an include item names: `(location, text, item)`; errors are pushed.
    fn fetch(&mut self, item: &Node) -> Vec<(String, String, Node)> {
        let Some(m) = item.as_map() else { return Vec::new() };
        let expand = |cx: &Context, s: &str| expand_server(s, &|n| cx.var(n), Unknown::Empty);
        let str_of = |cx: &mut Cx, key: &str| -> Option<String> {
            let n = m.get(key)?;
            match &n.value {
                Value::Str(s) => Some(s.clone()),
                _ => {
                    cx.raw(format!("Included file `{}` needs to be a string", compact_json(n)), Some(n.pos));
                    None
                }
            }
        };
        if m.contains_key("local") {
            let Some(raw) = str_of(self.cx, "local") else { return Vec::new() };
            let loc = expand(self.ctx, &raw);
            let rel = loc.trim_start_matches('/').to_owned();
            if !has_yaml_ext(&rel) {
                self.cx.raw(format!("Included file `{loc}` does not have YAML extension!"), Some(item.pos));
                return Vec::new();
            }
            let paths: Vec<String> = if rel.contains('*') {
                // GitLab's `Repository#search_files_by_wildcard_path`: the path is a literal
                // except `**` (anything, `/` included) and `*` (anything but `/`), anchored.
                let pattern = regex::escape(&rel).replace(r"\*\*", ".*?").replace(r"\*", "[^/]*?");
                let Ok(re) = regex::Regex::new(&format!("^{pattern}$")) else {
                    self.cx.raw(format!("Included file `{loc}` is not a valid glob pattern!"), Some(item.pos));
                    return Vec::new();
                };
                self.files().iter().filter(|f| re.is_match(f.as_str())).cloned().collect()
            } else {
                vec![rel]
            };
            // A wildcard matching no file includes nothing, without error (GitLab's
            // `LocationExpander` maps it to an empty list).
            let mut out = Vec::new();
            for p in paths {
                // A repository path has no `.`, `..` or empty component: `./a.yml` or
                // `../a.yml` names no file (and must not reach outside the project).
                let tree_path = p.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
                match if tree_path { self.loader.read(&p) } else { Ok(None) } {
                    Ok(Some(text)) if text.trim().is_empty() => {
                        self.cx.raw(format!("Local file `{p}` is empty!"), Some(item.pos));
                    }
                    Ok(Some(text)) => out.push((p, text, item.clone())),
                    Ok(None) => self.cx.raw(format!("Local file `{p}` does not exist!"), Some(item.pos)),
                    Err(e) => self.cx.raw(format!("Local file `{p}` could not be read: {e}"), Some(item.pos)),
                }
            }
            return out;
        }
        let (kind, what) = if let Some(p) = m.get("project") {
            let file = m.get("file").map(compact_json).unwrap_or_default();
            ("include:project", format!("Project `{}` file {file}", p.as_str().map(|s| expand(self.ctx, s)).unwrap_or_default()))
        } else if let Some(r) = m.get("remote") {
            ("include:remote", format!("Remote file `{}`", r.as_str().map(|s| expand(self.ctx, s)).unwrap_or_default()))
        } else if let Some(t) = m.get("template") {
            ("include:template", format!("Template file `{}`", t.as_str().unwrap_or_default()))
        } else if let Some(c) = m.get("component") {
            ("include:component", format!("Component `{}`", c.as_str().map(|s| expand(self.ctx, s)).unwrap_or_default()))
        } else if let Some(a) = m.get("artifact") {
            ("include:artifact", format!("Artifact `{}`", a.as_str().unwrap_or_default()))
        } else {
            return Vec::new();
        };
        self.cx.raw(
            format!("{what} cannot be resolved offline: {kind} is not supported by Gantry yet; vendor the file into the repository and use include:local"),
            Some(item.pos),
        );
        Vec::new()
    }
}

/// `group/project` (any depth) of letters, digits, `_`, `-`, `.`, or a path built from
/// variables. Anything else can never name a project.
fn valid_project_path(p: &str) -> bool {
    if p.contains('$') {
        return !p.is_empty();
    }
    let parts: Vec<&str> = p.split('/').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
}

fn has_yaml_ext(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".yml") || lower.ends_with(".yaml")
}

fn is_url(s: &str) -> bool {
    (s.starts_with("http://") || s.starts_with("https://")) && s.len() > "https://".len()
}

/// A compact JSON rendering of a node for messages.
pub(crate) fn compact_json(n: &Node) -> String {
    match &n.value {
        Value::Str(s) => s.clone(),
        _ => n.to_json().to_string(),
    }
}

/// GitLab's `deep_merge`: mappings merge recursively; anything else on the right replaces.
pub(crate) fn deep_merge(acc: &mut Map, right: Map) {
    if acc.is_empty() {
        *acc = right;
        return;
    }
    for (key, entry) in right.entries_owned() {
        match (acc.get_mut(&key), entry.value.value) {
            (Some(Node { value: Value::Map(left), .. }), Value::Map(r)) => deep_merge(left, r),
            (_, value) => acc.insert(
                key,
                yaml::Entry {
                    key_pos: entry.key_pos,
                    key_kind: entry.key_kind,
                    value: Node { value, pos: entry.value.pos },
                },
            ),
        }
    }
}

/// [`deep_merge`] of a borrowed right side: its values are shared into `acc`, not copied.
pub(crate) fn deep_merge_shared(acc: &mut Map, right: &Map) {
    if acc.is_empty() {
        *acc = right.clone();
        return;
    }
    if acc.ptr_eq(right) {
        // Merging a map into itself changes nothing.
        return;
    }
    for (key, entry) in right.entries() {
        if let (Some(Node { value: Value::Map(left), .. }), Value::Map(r)) = (acc.get_mut(key), &entry.value.value) {
            deep_merge_shared(left, r);
        } else {
            acc.insert(key.to_owned(), entry.clone());
        }
    }
}
