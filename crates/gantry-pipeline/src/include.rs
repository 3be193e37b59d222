//! Loading a configuration: the root file, its `spec:inputs` header, and `include`
//! resolution (spec §2.6), merged into one mapping. Files arrive through [`Loader`].
//!
//! Limits: at most [`MAX_INCLUDES`] includes per pipeline (nested and duplicates counted),
//! nesting at most [`MAX_INCLUDE_DEPTH`] files deep, every file within
//! [`crate::yaml::Limits`], and all files together at most [`MAX_TOTAL_BYTES`].
//!
//! Where a nested include looks (GitLab's `External::Context#mutate`, `Origin`): a file
//! of the pipeline's project and a file included with `include:project` resolve their
//! `include:local` in their own project at their own commit; a file fetched with
//! `include:remote` has no project, so `include:local` in it is an error (GitLab's
//! "Local file `…` does not have project!"), while `remote` and `project` work anywhere.

use crate::context::Context;
use crate::diagnostic::SourceMap;
use crate::expand::{Unknown, expand_server};
use crate::inputs::{self, ComponentInfo};
use crate::loader::{Files, Loader, ProjectError, RemoteError};
use crate::resolve::deep_merge;
use crate::rules::{self, RuleTarget};
use crate::validate::{Cx, join};
use crate::yaml::compact_json;
use crate::yaml::{self, Limits, Map, Node, Pos, Value};

/// GitLab's `ci_max_includes` default.
pub const MAX_INCLUDES: usize = 150;
/// Nesting of includes (GitLab bounds it only by the include count; we state a depth too).
pub const MAX_INCLUDE_DEPTH: usize = 100;
/// All configuration files together.
pub const MAX_TOTAL_BYTES: usize = 32 * 1024 * 1024;

/// One file an `include:` read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Included {
    /// GitLab's name for the kind: `local`, `file` (another project's), `remote`,
    /// `template` or `component`.
    pub kind: &'static str,
    /// The file as the configuration named it.
    pub location: String,
}

/// The project a configuration file belongs to: where its `include:local` looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The pipeline's own project at the pipeline's commit.
    Pipeline,
    /// Another project (or the same one by path) at a ref (`None`: default branch).
    Project {
        path: String,
        ref_name: Option<String>,
    },
    /// A remote file: no project.
    Remote,
}

/// Whether a remote include failed for want of reaching it (no network, no answer, an
/// HTTP error status): what an offline copy or a mirror would resolve, unlike a file
/// that was read and is too large or not text.
fn unreachable(e: &RemoteError) -> bool {
    !matches!(e, RemoteError::TooLarge(_) | RemoteError::NotText)
}

/// GitLab's message for a failed remote include (`Remote file `…` could not be fetched
/// because of …`); a socket or HTTP error's detail follows in parentheses.
pub fn remote_message(url: &str, e: &RemoteError) -> String {
    match e {
        RemoteError::Unsupported => {
            format!(
                "Remote file `{url}` cannot be resolved offline: include:remote needs network access, which this reader of the configuration does not have"
            )
        }
        RemoteError::Status(code) => {
            format!("Remote file `{url}` could not be fetched because of HTTP code `{code}` error!")
        }
        RemoteError::Timeout => {
            format!("Remote file `{url}` could not be fetched because of a timeout error!")
        }
        RemoteError::Socket(detail) => format!(
            "Remote file `{url}` could not be fetched because of a socket error! ({detail})"
        ),
        RemoteError::Http(detail) => {
            format!("Remote file `{url}` could not be fetched because of HTTP error! ({detail})")
        }
        RemoteError::TooLarge(limit) => {
            let size = if limit % (1024 * 1024) == 0 {
                format!("{} MiB", limit / (1024 * 1024))
            } else {
                format!("{limit} bytes")
            };
            format!("Remote file `{url}` could not be fetched because it is larger than {size}!")
        }
        RemoteError::NotText => {
            format!("Remote file `{url}` could not be fetched because it is not UTF-8 text!")
        }
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
    /// The project of the file whose includes are being resolved.
    pub origin: Origin,
    /// The files read so far ([`crate::compile::Compiled::includes`]).
    pub included: &'a mut Vec<Included>,
    /// [`crate::compile::Options::every_include_error`].
    pub every_include_error: bool,
}

/// One file an include item names.
struct Fetched {
    /// The file's name in the source map (and in `file:line:column`).
    name: String,
    /// How GitLab's messages name it (`` `<location>`: … ``).
    location: String,
    text: String,
    item: Node,
    /// Where its own `include:local` looks.
    origin: Origin,
    /// What `$[[ component.* ]]` names, for a file included with `include:component`.
    component: Option<ComponentInfo>,
}

impl<'a> Loading<'a> {
    /// The project's files (`Err`: they could not be listed, the loader's reason).
    pub fn files(&self) -> Result<&'a [String], crate::loader::ReadError> {
        self.files.get()
    }

    /// Parse a file's text into its body mapping (header `spec:` split off and inputs
    /// interpolated). Errors are pushed with `what` naming the file for included files.
    pub fn parse_file(
        &mut self,
        name: &str,
        text: String,
        given_inputs: inputs::Given<'_>,
        included_as: Option<&str>,
        component: Option<&ComponentInfo>,
    ) -> Option<Map> {
        let file = self.sources.add(name, text);
        if self.sources.total_bytes() > MAX_TOTAL_BYTES {
            self.cx.raw(
                "Total size of combined CI/CD configuration is too big",
                None,
            );
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
                self.cx.raw(prefix(e.gitlab_message()), Some(e.pos));
                return None;
            }
        };
        let start = Pos {
            file,
            line: 1,
            col: 1,
        };
        let mut docs = docs.into_iter();
        let first = docs.next();
        let second = docs.next();
        let (header, body) = match (first, second) {
            (Some(h), Some(b)) if h.as_map().is_some_and(|m| m.contains_key("spec")) => {
                (Some(h), Some(b))
            }
            (Some(f), _) => (None, Some(f)),
            (None, _) => (None, None),
        };
        let header = match header {
            Some(h) => Some(self.header_includes(h, &prefix)?),
            None => None,
        };
        let mut body = match body {
            Some(b)
                if matches!(b.value, Value::Map(_)) && !(included_as.is_some() && b.is_blank()) =>
            {
                b
            }
            // An included file must hold a non-empty mapping (GitLab's `File::Base#validate_hash!`:
            // a comment-only file, a scalar, a list or `{}`).
            Some(b) if included_as.is_some() => {
                self.cx.raw(
                    format!(
                        "Included file `{}` does not have valid YAML syntax!",
                        included_as.unwrap_or(name)
                    ),
                    Some(b.pos),
                );
                return None;
            }
            Some(b) => {
                self.cx
                    .raw(prefix("Invalid configuration format".into()), Some(b.pos));
                return None;
            }
            None => {
                if included_as.is_some() {
                    self.cx.raw(
                        format!(
                            "Included file `{}` does not have valid YAML syntax!",
                            included_as.unwrap_or(name)
                        ),
                        Some(start),
                    );
                } else {
                    self.cx
                        .raw("Please provide content of .gitlab-ci.yml", Some(start));
                }
                return None;
            }
        };
        let errors_before = self.cx.errors.len();
        inputs::interpolate(
            header.as_ref(),
            given_inputs,
            &mut body,
            self.ctx,
            self.cx,
            included_as,
            component,
        );
        if self.cx.errors.len() > errors_before {
            return None;
        }
        match body.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// `header` with the inputs of its `spec:include` files (GitLab's
    /// `External::Header::Processor`, 18.x) added before its own `spec:inputs`: each file
    /// (`local`, `remote` or `project`, read from the current origin as the file's own
    /// includes are) holds only `inputs:`; a name declared twice, in two files or in a
    /// file and inline, is an error. `None`: an error was pushed. A header whose
    /// `spec:include` is malformed is returned as it is, for `inputs::interpolate` to
    /// report.
    fn header_includes(&mut self, header: Node, prefix: &dyn Fn(String) -> String) -> Option<Node> {
        let Some(spec) = header.as_map().and_then(|m| m.get("spec")) else {
            return Some(header);
        };
        let Some((spec_map, include)) = spec.as_map().and_then(|m| Some((m, m.get("include")?)))
        else {
            return Some(header);
        };
        let items: Vec<Node> = match &include.value {
            Value::Seq(items) => items.to_vec(),
            _ => vec![include.clone()],
        };
        if !items.iter().all(inputs::header_include_item_ok) {
            return Some(header);
        }
        let mut merged = Map::new();
        let mut names: Vec<String> = Vec::new();
        for item in &items {
            let item = match &item.value {
                Value::Str(s) => {
                    let s = self.expand(s);
                    let mut m = Map::new();
                    let key = if is_url(&s) { "remote" } else { "local" };
                    m.insert_node(key, Node::str(s, item.pos));
                    Node::new(Value::Map(m), item.pos)
                }
                _ => item.clone(),
            };
            if let Some(m) = item.as_map() {
                if !check_remote_options(m, "header:spec:include", self.cx) {
                    return None;
                }
            }
            let errors_before = self.cx.errors.len();
            let fetched = self.fetch(&item);
            if self.cx.errors.len() > errors_before {
                return None;
            }
            for f in fetched {
                let file = self.sources.add(&f.name, f.text);
                let text = self.sources.get(file).map_or("", |f| f.text.as_str());
                let doc = match yaml::parse_documents(text, file, self.limits) {
                    Ok(docs) => docs.into_iter().next(),
                    Err(e) => {
                        self.cx.raw(prefix(e.gitlab_message()), Some(e.pos));
                        return None;
                    }
                };
                let Some(map) = doc
                    .as_ref()
                    .and_then(|d| d.as_map())
                    .filter(|m| !m.is_empty())
                else {
                    self.cx.raw(
                        format!(
                            "Included file `{}` does not have valid YAML syntax!",
                            f.location
                        ),
                        Some(f.item.pos),
                    );
                    return None;
                };
                let unknown: Vec<String> = map
                    .keys()
                    .filter(|k| *k != "inputs")
                    .map(|k| format!(":{k}"))
                    .collect();
                if !unknown.is_empty() {
                    self.cx.raw(
                        prefix(format!(
                            "Header include file `{}` contains unknown keys: [{}]",
                            f.location,
                            unknown.join(", ")
                        )),
                        Some(f.item.pos),
                    );
                    return None;
                }
                if let Some(declared) = map.get("inputs").and_then(|i| i.as_map()) {
                    for (name, def) in declared.iter() {
                        names.push(name.to_owned());
                        merged.insert_node(name.to_owned(), def.clone());
                    }
                }
            }
        }
        if let Some(inline) = spec_map.get("inputs").and_then(|i| i.as_map()) {
            for (name, def) in inline.iter() {
                names.push(name.to_owned());
                merged.insert_node(name.to_owned(), def.clone());
            }
        }
        let mut duplicates: Vec<&str> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) && !duplicates.contains(&name.as_str()) {
                duplicates.push(name);
            }
        }
        if !duplicates.is_empty() {
            self.cx.raw(
                prefix(format!(
                    "Duplicate input keys found: {}. Input keys must be unique across all included files and inline specifications.",
                    duplicates.join(", ")
                )),
                Some(include.pos),
            );
            return None;
        }
        let mut new_spec = spec_map.clone();
        new_spec.insert_node("inputs", Node::new(Value::Map(merged), include.pos));
        let Some(mut new_header) = header.as_map().cloned() else {
            return Some(header);
        };
        new_header.insert_node("spec", Node::new(Value::Map(new_spec), spec.pos));
        Some(Node::new(Value::Map(new_header), header.pos))
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
            self.cx.raw(
                format!("Maximum of {MAX_INCLUDES} nested includes are allowed!"),
                Some(include.pos),
            );
            return map;
        }
        let mut acc = Map::new();
        for item in self.items(&include) {
            if self.cx.has_errors() && !self.every_include_error {
                break;
            }
            for f in self.fetch(&item) {
                self.includes += 1;
                if self.includes > MAX_INCLUDES {
                    self.cx.raw(
                        format!("Maximum of {MAX_INCLUDES} nested includes are allowed!"),
                        Some(item.pos),
                    );
                    return map;
                }
                self.included.push(Included {
                    kind: include_kind(&f.item),
                    location: f.location.clone(),
                });
                let given = f.item.as_map().and_then(|m| m.get("inputs")).cloned();
                // The file's origin already while its header is read: its `spec:include`
                // files come from where its own includes do.
                let outer = std::mem::replace(&mut self.origin, f.origin);
                let Some(body) = self.parse_file(
                    &f.name,
                    f.text,
                    given
                        .as_ref()
                        .map_or(inputs::Given::Nothing, inputs::Given::Include),
                    Some(&f.location),
                    f.component.as_ref(),
                ) else {
                    self.origin = outer;
                    continue;
                };
                let body = self.expand_includes(body, depth + 1, false);
                self.origin = outer;
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
                self.cx
                    .config("include", "should be an array or a string", include.pos);
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
                    const LOCATIONS: [&str; 6] = [
                        "local",
                        "project",
                        "remote",
                        "template",
                        "artifact",
                        "component",
                    ];
                    const ALLOWED: [&str; 12] = [
                        "local",
                        "project",
                        "file",
                        "ref",
                        "remote",
                        "integrity",
                        "cache",
                        "template",
                        "component",
                        "artifact",
                        "job",
                        "inputs",
                    ];
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
                        self.cx.config(
                            &path,
                            "must specify the file where to fetch the config from",
                            item.pos,
                        );
                        continue;
                    }
                    if !check_remote_options(m, &path, self.cx) {
                        continue;
                    }
                    if m.contains_key("artifact") && !m.contains_key("job") {
                        self.cx.config(
                            &path,
                            "must specify the job where to fetch the artifact from",
                            item.pos,
                        );
                        continue;
                    }
                    if let Some(r) = m.get("rules") {
                        let rules = rules::parse_rules(
                            r,
                            &join(&path, "rules"),
                            RuleTarget::Include,
                            self.cx,
                        );
                        let Some(rules) = rules else { continue };
                        let other;
                        let files = match self.origin_files() {
                            Some(list) => {
                                other = Files::with_list(self.loader, list);
                                &other
                            }
                            None => self.files,
                        };
                        match rules::include_matches(&rules, self.ctx, files) {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(e) => {
                                self.cx.raw(format!("include:{e}"), Some(item.pos));
                                continue;
                            }
                        }
                    }
                    out.push(item.clone());
                }
                _ => self
                    .cx
                    .config(&path, "should be a hash or a string", item.pos),
            }
        }
        out
    }

    /// The files of the current origin's project (`include:local` wildcards and
    /// `rules:exists` of include rules).
    /// The file list of the project of the file being read, when it is not the
    /// pipeline's own (`None`: [`Loading::files`]).
    fn origin_files(&self) -> Option<Result<Vec<String>, crate::loader::ReadError>> {
        match &self.origin {
            Origin::Pipeline => None,
            Origin::Project { path, ref_name } => {
                Some(self.loader.project_files(path, ref_name.as_deref()))
            }
            Origin::Remote => Some(Ok(Vec::new())),
        }
    }

    /// The files an include item names; errors are pushed.
    fn fetch(&mut self, item: &Node) -> Vec<Fetched> {
        let Some(m) = item.as_map() else {
            return Vec::new();
        };
        let str_of = |cx: &mut Cx, key: &str| -> Option<String> {
            let n = m.get(key)?;
            match &n.value {
                Value::Str(s) => Some(s.clone()),
                _ => {
                    cx.raw(
                        format!("Included file `{}` needs to be a string", compact_json(n)),
                        Some(n.pos),
                    );
                    None
                }
            }
        };
        if m.contains_key("local") {
            let Some(raw) = str_of(self.cx, "local") else {
                return Vec::new();
            };
            let loc = self.expand(&raw);
            return self.fetch_local(&loc, item);
        }
        if m.contains_key("remote") {
            let Some(raw) = str_of(self.cx, "remote") else {
                return Vec::new();
            };
            let url = self.expand(&raw);
            return self
                .fetch_remote(&url, m.get("integrity").and_then(|i| i.as_str()), item)
                .into_iter()
                .collect();
        }
        if let Some(p) = m.get("project") {
            let Some(raw) = p.as_str() else {
                return Vec::new();
            };
            let project = self.expand(raw);
            let ref_name = match m.get("ref") {
                Some(_) => match str_of(self.cx, "ref") {
                    Some(r) => Some(self.expand(&r)),
                    None => return Vec::new(),
                },
                None => None,
            };
            let files: Vec<&Node> = match m.get("file").map(|f| &f.value) {
                Some(Value::Seq(list)) => list.iter().collect(),
                Some(_) => m.get("file").into_iter().collect(),
                None => Vec::new(),
            };
            let mut out = Vec::new();
            for f in files {
                let Value::Str(raw) = &f.value else {
                    self.cx.raw(
                        format!("Included file `{}` needs to be a string", compact_json(f)),
                        Some(f.pos),
                    );
                    return out;
                };
                let path = self.expand(raw);
                match self.fetch_project(&project, ref_name.as_deref(), &path, item) {
                    Some(file) => out.push(file),
                    // GitLab reports an include's first error only.
                    None => return out,
                }
            }
            return out;
        }
        if let Some(t) = m.get("template") {
            let Some(name) = t.as_str() else {
                self.cx.raw(
                    format!("Included file `{}` needs to be a string", compact_json(t)),
                    Some(item.pos),
                );
                return Vec::new();
            };
            if let Some(url) = self
                .loader
                .template_url(name)
                .filter(|_| valid_template(name))
            {
                return self.fetch_template(name, &url, item).into_iter().collect();
            }
            if !has_yaml_ext(name) {
                self.cx.raw(
                    format!("Included file `{name}` does not have YAML extension!"),
                    Some(item.pos),
                );
                return Vec::new();
            }
            if !valid_template(name) {
                self.cx.raw(
                    format!("Template file `{name}` is not a valid location!"),
                    Some(item.pos),
                );
                return Vec::new();
            }
            self.cx.raw(
                format!("Template file `{name}` cannot be resolved offline: include:template needs GitLab's templates, which this reader of the configuration does not have"),
                Some(item.pos),
            );
            Vec::new()
        } else if let Some(c) = m.get("component") {
            let Some(raw) = c.as_str() else {
                self.cx.raw(
                    format!("Included file `{}` needs to be a string", compact_json(c)),
                    Some(item.pos),
                );
                return Vec::new();
            };
            let address = self.expand(raw);
            self.fetch_component(&address, item).into_iter().collect()
        } else if m.contains_key("artifact") {
            let (Some(path), Some(job)) = (str_of(self.cx, "artifact"), str_of(self.cx, "job"))
            else {
                return Vec::new();
            };
            self.fetch_artifact(&path, &job, item).into_iter().collect()
        } else {
            Vec::new()
        }
    }

    fn expand(&self, s: &str) -> String {
        expand_server(s, &|n| self.ctx.var(n), Unknown::Empty)
    }

    /// `include:local` in the current origin's project.
    fn fetch_local(&mut self, loc: &str, item: &Node) -> Vec<Fetched> {
        let rel = loc.trim_start_matches('/').to_owned();
        if !has_yaml_ext(&rel) {
            self.cx.raw(
                format!("Included file `{loc}` does not have YAML extension!"),
                Some(item.pos),
            );
            return Vec::new();
        }
        if self.origin == Origin::Remote {
            // GitLab: a remote file's context has no project (`File::Local#validate_context!`).
            self.cx.raw(
                format!("Local file `{rel}` does not have project!"),
                Some(item.pos),
            );
            return Vec::new();
        }
        let paths: Vec<String> = if rel.contains('*') {
            // GitLab's `Repository#search_files_by_wildcard_path`: the path is a literal
            // except `**` (anything, `/` included) and `*` (anything but `/`), anchored.
            let pattern = regex::escape(&rel)
                .replace(r"\*\*", ".*?")
                .replace(r"\*", "[^/]*?");
            let Ok(re) = regex::Regex::new(&format!("^{pattern}$")) else {
                self.cx.raw(
                    format!("Included file `{loc}` is not a valid glob pattern!"),
                    Some(item.pos),
                );
                return Vec::new();
            };
            let origin = self.origin_files();
            let listed = match &origin {
                Some(list) => list.as_deref().map_err(Clone::clone),
                None => self.files(),
            };
            let mut matching: Vec<String> = match listed {
                Ok(files) => files.iter().filter(|f| re.is_match(f)).cloned().collect(),
                Err(e) => {
                    self.cx.raw(
                        format!(
                            "Included file `{loc}`: the project's files could not be listed: {e}"
                        ),
                        Some(item.pos),
                    );
                    return Vec::new();
                }
            };
            matching.sort();
            matching
        } else {
            vec![rel]
        };
        // A wildcard matching no file includes nothing, without error (GitLab's
        // `LocationExpander` maps it to an empty list).
        let mut out = Vec::new();
        for p in paths {
            // A repository path has no `.`, `..` or empty component: `./a.yml` or
            // `../a.yml` names no file (and must not reach outside the project).
            let read = if !tree_path(&p) {
                Ok(None)
            } else {
                match &self.origin {
                    Origin::Pipeline | Origin::Remote => {
                        self.loader.read(&p).map_err(|e| e.to_string())
                    }
                    Origin::Project { path, ref_name } => self
                        .loader
                        .project_file(path, ref_name.as_deref(), &p)
                        .map_err(|e| e.to_string()),
                }
            };
            match read {
                Ok(Some(text)) if text.trim().is_empty() => {
                    self.cx
                        .raw(format!("Local file `{p}` is empty!"), Some(item.pos));
                }
                Ok(Some(text)) => {
                    let name = match &self.origin {
                        Origin::Project { path, ref_name } => {
                            project_file_name(path, ref_name.as_deref(), &p)
                        }
                        _ => p.clone(),
                    };
                    out.push(Fetched {
                        name,
                        location: p,
                        text,
                        item: item.clone(),
                        origin: self.origin.clone(),
                        component: None,
                    });
                }
                Ok(None) => self
                    .cx
                    .raw(format!("Local file `{p}` does not exist!"), Some(item.pos)),
                Err(e) => self.cx.raw(
                    format!("Local file `{p}` could not be read: {e}"),
                    Some(item.pos),
                ),
            }
        }
        out
    }

    /// `include:remote` (GitLab's `File::Remote`): extension, address, fetch, content,
    /// then the optional `integrity`.
    fn fetch_remote(&mut self, url: &str, integrity: Option<&str>, item: &Node) -> Option<Fetched> {
        if !has_yaml_ext(url.split(['?', '#']).next().unwrap_or_default()) {
            self.cx.raw(
                format!("Included file `{url}` does not have YAML extension!"),
                Some(item.pos),
            );
            return None;
        }
        if !valid_address(url) {
            self.cx.raw(
                format!("Remote file `{url}` does not have a valid address!"),
                Some(item.pos),
            );
            return None;
        }
        let text = match self.loader.remote(url) {
            Ok(text) => text,
            Err(e) => {
                self.cx.raw(remote_message(url, &e), Some(item.pos));
                if unreachable(&e) {
                    self.cx.hint_last(self.loader.remote_hint(url));
                }
                return None;
            }
        };
        if text.trim().is_empty() {
            self.cx.raw(
                format!("Included file `{url}` is empty or does not exist!"),
                Some(item.pos),
            );
            return None;
        }
        if let Some(expected) = integrity.and_then(integrity_digest) {
            if sha256_base64(text.as_bytes()) != expected {
                self.cx.raw(
                    format!("Remote file `{url}` failed integrity check"),
                    Some(item.pos),
                );
                return None;
            }
        }
        Some(Fetched {
            name: url.to_owned(),
            location: url.to_owned(),
            text,
            item: item.clone(),
            origin: Origin::Remote,
            component: None,
        })
    }

    /// `include:template` (GitLab's `File::Template`) read from the loader's templates
    /// ([`Loader::template_url`]). Like a remote file, a template has no project (spec
    /// §2.6: an empty context), so an `include:local` inside it is an error.
    fn fetch_template(&mut self, name: &str, url: &str, item: &Node) -> Option<Fetched> {
        let text = match self.loader.remote(url) {
            Ok(text) => text,
            Err(RemoteError::Status(404)) => String::new(),
            Err(e) => {
                self.cx.raw(
                    format!(
                        "Template file `{name}` could not be read: {}",
                        remote_message(url, &e)
                    ),
                    Some(item.pos),
                );
                if unreachable(&e) {
                    self.cx.hint_last(self.loader.remote_hint(url));
                }
                return None;
            }
        };
        if text.trim().is_empty() {
            self.cx.raw(
                format!("Included file `{name}` is empty or does not exist!"),
                Some(item.pos),
            );
            return None;
        }
        Some(Fetched {
            name: name.to_owned(),
            location: name.to_owned(),
            text,
            item: item.clone(),
            origin: Origin::Remote,
            component: None,
        })
    }

    /// `include:component` (GitLab's `File::Component` and `Ci::Components::FetchService`
    /// with an instance path): `<fqdn>/<project path>/<name>@<version>` is
    /// `templates/<name>.yml` or `templates/<name>/template.yml` of the longest path
    /// prefix that is a project, at `<version>` (a branch, tag or SHA); its own includes
    /// read that project. Without a catalog, `~latest` and partial versions do not
    /// resolve.
    fn fetch_component(&mut self, address: &str, item: &Node) -> Option<Fetched> {
        let fail = |this: &mut Self, what: &str| {
            this.cx
                .raw(format!("component '{address}' - {what}"), Some(item.pos));
            None
        };
        let (path, version) = match address.split_once('@') {
            Some((path, version)) => (path, Some(version)),
            None => (address, None),
        };
        let offline = |this: &mut Self| {
            this.cx.raw(
                format!("Component `{address}` cannot be resolved offline: include:component needs that project's repository, which this reader of the configuration does not have"),
                Some(item.pos),
            );
            None
        };
        let fqdn = self.ctx.var("CI_SERVER_FQDN").unwrap_or_default();
        let Some(path) = path
            .strip_prefix(fqdn.as_str())
            .and_then(|p| p.strip_prefix('/'))
            .filter(|_| !fqdn.is_empty())
        else {
            // Another instance's component; a reader that holds no project cannot tell
            // which instance it runs for.
            if !self.loader.reads_projects() {
                return offline(self);
            }
            return fail(self, "the component path is not supported");
        };
        if version.is_some_and(|v| v.starts_with('~')) {
            return fail(
                self,
                "The ~latest version reference is not supported for non-catalog resources. Use a tag, branch, or SHA instead.",
            );
        }
        let segments: Vec<&str> = path.split('/').collect();
        // Longest project path first; a project needs a group, the name a segment.
        for cut in (2..segments.len()).rev() {
            let project = segments[..cut].join("/");
            let name = segments[cut..].join("/");
            if !valid_project_path(&project) || !tree_path(&name) {
                continue;
            }
            let (mut found, mut exists) = (None, false);
            for file in [
                format!("templates/{name}.yml"),
                format!("templates/{name}/template.yml"),
            ] {
                match self.loader.project_file(&project, version, &file) {
                    Ok(Some(text)) => {
                        found = Some((file, text));
                        break;
                    }
                    Ok(None) | Err(ProjectError::NoRef) => exists = true,
                    Err(ProjectError::NotFound) => break,
                    Err(ProjectError::Unsupported) => return offline(self),
                    Err(ProjectError::Io(e)) => {
                        return fail(self, &format!("content could not be read: {e}"));
                    }
                }
            }
            match found {
                Some((file, text)) if !text.trim().is_empty() => {
                    let component = ComponentInfo {
                        sha: self.loader.project_commit(&project, version),
                        name,
                        reference: version.map(str::to_owned),
                        version: None,
                    };
                    return Some(Fetched {
                        name: project_file_name(&project, version, &file),
                        location: address.to_owned(),
                        text,
                        item: item.clone(),
                        origin: Origin::Project {
                            path: project,
                            ref_name: version.map(str::to_owned),
                        },
                        component: Some(component),
                    });
                }
                // A project without the component (or the version): the answer; no
                // such project: a shorter path is tried.
                Some(_) => return fail(self, "content not found"),
                None if exists => return fail(self, "content not found"),
                None => {}
            }
        }
        fail(
            self,
            "project does not exist or you don't have sufficient permissions",
        )
    }

    /// `include:artifact` (GitLab's `File::Artifact`): a file of a parent pipeline job's
    /// artifacts; its own `include:local` entries read the pipeline's project.
    fn fetch_artifact(&mut self, path: &str, job: &str, item: &Node) -> Option<Fetched> {
        let location = path.trim_start_matches('/').to_owned();
        if !has_yaml_ext(&location) {
            self.cx.raw(
                format!("Included file `{location}` does not have YAML extension!"),
                Some(item.pos),
            );
            return None;
        }
        match self.loader.artifact(job, &location) {
            Ok(text) if text.trim().is_empty() => {
                self.cx
                    .raw(format!("File `{location}` is empty!"), Some(item.pos));
                None
            }
            Ok(text) => Some(Fetched {
                name: format!("{job}:{location}"),
                location,
                text,
                item: item.clone(),
                origin: Origin::Pipeline,
                component: None,
            }),
            Err(e) => {
                self.cx.raw(e.message(job, &location), Some(item.pos));
                None
            }
        }
    }

    /// One `file` of `include:project` (GitLab's `File::Project`).
    fn fetch_project(
        &mut self,
        project: &str,
        ref_name: Option<&str>,
        file: &str,
        item: &Node,
    ) -> Option<Fetched> {
        let location = file.trim_start_matches('/').to_owned();
        // GitLab looks projects up case-insensitively and names them lower-cased.
        let shown = project.to_lowercase();
        if !has_yaml_ext(&location) {
            self.cx.raw(
                format!("Included file `{location}` does not have YAML extension!"),
                Some(item.pos),
            );
            return None;
        }
        if !valid_project_path(project) || project.contains('$') {
            self.cx.raw(
                format!("Project `{shown}` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined."),
                Some(item.pos),
            );
            return None;
        }
        let read = if tree_path(&location) {
            self.loader.project_file(project, ref_name, &location)
        } else {
            Ok(None)
        };
        let text = match read {
            Ok(Some(text)) => text,
            Ok(None) => {
                self.cx.raw(
                    format!("Project `{shown}` file `{location}` does not exist!"),
                    Some(item.pos),
                );
                self.cx
                    .hint_last(self.loader.project_hint(project, ref_name, &location));
                return None;
            }
            Err(ProjectError::Unsupported) => {
                self.cx.raw(
                    format!("Project `{shown}` file `{location}` cannot be resolved offline: include:project needs that project's repository, which this reader of the configuration does not have"),
                    Some(item.pos),
                );
                return None;
            }
            Err(ProjectError::NotFound) => {
                self.cx.raw(
                    format!("Project `{shown}` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined."),
                    Some(item.pos),
                );
                self.cx
                    .hint_last(self.loader.project_hint(project, ref_name, &location));
                return None;
            }
            Err(ProjectError::NoRef) => {
                self.cx.raw(
                    format!(
                        "Project `{shown}` reference `{}` does not exist!",
                        ref_name.unwrap_or("HEAD")
                    ),
                    Some(item.pos),
                );
                self.cx
                    .hint_last(self.loader.project_hint(project, ref_name, &location));
                return None;
            }
            Err(ProjectError::Io(e)) => {
                self.cx.raw(
                    format!("Project `{shown}` file `{location}` could not be read: {e}"),
                    Some(item.pos),
                );
                return None;
            }
        };
        if text.trim().is_empty() {
            self.cx.raw(
                format!("Project `{shown}` file `{location}` is empty!"),
                Some(item.pos),
            );
            return None;
        }
        Some(Fetched {
            name: project_file_name(project, ref_name, &location),
            location,
            text,
            item: item.clone(),
            origin: Origin::Project {
                path: project.to_owned(),
                ref_name: ref_name.map(str::to_owned),
            },
            component: None,
        })
    }
}

/// A template name GitLab can look up: `<name>.gitlab-ci.yml` (`File::Template`), here
/// also a relative path of plain segments (the name becomes part of a URL).
fn valid_template(name: &str) -> bool {
    name.len() > ".gitlab-ci.yml".len()
        && name.ends_with(".gitlab-ci.yml")
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains(['\\', '?', '#', '%']))
}

/// The source-map name of another project's file: `group/project@ref:path` (`:path`
/// alone after the project for the default branch), so `file:line:column` says which.
fn project_file_name(project: &str, ref_name: Option<&str>, path: &str) -> String {
    match ref_name {
        Some(r) => format!("{project}@{r}:{path}"),
        None => format!("{project}:{path}"),
    }
}

/// A repository path: no `.`, `..` or empty component.
fn tree_path(p: &str) -> bool {
    p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// GitLab's `UrlSanitizer.valid?` for remote includes: an `http(s)` URL with a host and
/// no whitespace.
fn valid_address(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    !host.is_empty()
        && !host.starts_with(':')
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The digest of an `integrity: sha256-<base64>` value (32 bytes), `None` when malformed.
fn integrity_digest(s: &str) -> Option<String> {
    let b64 = s.strip_prefix("sha256-")?;
    strict_base64(b64).then(|| b64.to_owned())
}

/// Ruby's `Base64.strict_decode64` accepts it: standard alphabet, length a multiple of
/// 4, at most two `=` and only at the end. (A hash of another length than SHA-256's is
/// accepted, as GitLab does; it then fails the integrity check.)
fn strict_base64(text: &str) -> bool {
    let body = text.trim_end_matches('=');
    let padding = text.len() - body.len();
    text.len() % 4 == 0
        && padding <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// `integrity` and `cache` of one `include` item, as GitLab's `BaseInclude` concern and
/// `Ci::IncludeCacheValidator` check them (each error is reported, as GitLab collects
/// them): both only with `remote`; `integrity` a `sha256-` prefixed strict base64 hash;
/// `cache` `true` (one hour) or a duration of at least one minute (`false`, null and
/// empty text are blank: no cache, accepted anywhere).
pub(crate) fn check_remote_options(m: &Map, path: &str, cx: &mut Cx) -> bool {
    let remote = m.get("remote").is_some_and(|r| !is_blank(r));
    let mut ok = true;
    if let Some(i) = m
        .get("integrity")
        .filter(|i| !i.is_null() && i.as_bool() != Some(false))
    {
        if !remote {
            cx.config(
                path,
                "integrity can only be specified for remote includes",
                i.pos,
            );
            ok = false;
        }
        match i.as_str().and_then(|t| t.strip_prefix("sha256-")) {
            None => {
                cx.config(path, "integrity hash must start with 'sha256-'", i.pos);
                ok = false;
            }
            Some(hash) if !strict_base64(hash) => {
                cx.config(path, "integrity hash must be base64 encoded", i.pos);
                ok = false;
            }
            Some(_) => {}
        }
    }
    if let Some(c) = m.get("cache").filter(|c| !is_blank(c)) {
        if !remote {
            cx.config(
                path,
                "cache can only be specified for remote includes",
                c.pos,
            );
            ok = false;
        }
        match &c.value {
            Value::Bool(true) => {}
            Value::Str(text) => match crate::duration::parse_expire_in(text) {
                None => {
                    cx.config(path, "cache contains an invalid duration", c.pos);
                    ok = false;
                }
                Some(crate::duration::ExpireIn::Seconds(secs)) if secs < 60 => {
                    cx.config(path, "cache duration must be at least 1 minute", c.pos);
                    ok = false;
                }
                Some(_) => {}
            },
            _ => {
                cx.config(path, "cache must be a boolean or a duration string", c.pos);
                ok = false;
            }
        }
    }
    ok
}

/// Rails' `blank?`: null, `false`, empty or white-space text, empty collections.
fn is_blank(node: &Node) -> bool {
    match &node.value {
        Value::Null | Value::Bool(false) => true,
        Value::Str(s) => s.trim().is_empty(),
        Value::Seq(items) => items.is_empty(),
        Value::Map(m) => m.is_empty(),
        _ => false,
    }
}

/// Standard base64 (with padding) of the SHA-256 of `bytes`.
pub(crate) fn sha256_base64(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let digest = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(44);
    for chunk in digest.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `group/project` (any depth) of letters, digits, `_`, `-`, `.`, or a path built from
/// variables. Anything else can never name a project.
fn valid_project_path(p: &str) -> bool {
    if p.contains('$') {
        return !p.is_empty();
    }
    let parts: Vec<&str> = p.split('/').collect();
    parts.len() >= 2
        && parts.iter().all(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
        })
}

fn has_yaml_ext(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.ends_with(".yml") || lower.ends_with(".yaml")
}

fn is_url(s: &str) -> bool {
    (s.starts_with("http://") || s.starts_with("https://")) && s.len() > "https://".len()
}

#[cfg(test)]
mod tests;

/// GitLab's name for the kind of an include item (`file` for another project's files).
fn include_kind(item: &Node) -> &'static str {
    let has = |key| item.as_map().is_some_and(|m| m.contains_key(key));
    if has("component") {
        "component"
    } else if has("remote") {
        "remote"
    } else if has("template") {
        "template"
    } else if has("project") {
        "file"
    } else {
        "local"
    }
}
