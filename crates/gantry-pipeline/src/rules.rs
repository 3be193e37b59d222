//! `rules` (jobs, `workflow`, `include`) and legacy `only`/`except`: structure validation
//! and evaluation against a pipeline's variables and files (spec §4.4–4.6).
//!
//! `Rule::matches` is a `Result`: a clause that cannot be evaluated (a `compare_to` that is
//! not a valid ref) is GitLab's error where GitLab reports it — for a job, `Failed to parse
//! rule for …`; in `include:rules`, an `include:…` error at the item; in `workflow:rules`,
//! the pipeline is filtered out without a word (GitLab's `EvaluateWorkflowRules`).

use globset::{GlobBuilder, GlobMatcher};

use crate::context::Context;
use crate::expand::{Unknown, expand_server};
use crate::expr::{Expression, parse_regex_literal};
use crate::keyword::{self, VarLevel};
use crate::loader::{CompareError, Files};
use crate::model::Variables;
use crate::validate::{Cx, flatten_nodes, join};
use crate::yaml::{Node, Value};

/// Maximum paths in `rules:changes` and `rules:exists`.
pub const MAX_RULE_PATHS: usize = 50;
/// Glob comparisons after which a `changes`/`exists` clause assumes a match (GitLab).
const MAX_COMPARISONS: usize = 50_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RuleTarget {
    Job,
    Workflow,
    Include,
}

#[derive(Clone, Debug)]
pub(crate) struct Changes {
    pub paths: Vec<String>,
    /// The ref the changed paths are taken against (variables expanded at evaluation);
    /// the diff comes from [`crate::Loader::changed_since`].
    pub compare_to: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Rule {
    pub if_: Option<Expression>,
    pub changes: Option<Changes>,
    pub exists: Option<Vec<String>>,
    pub when: Option<String>,
    pub start_in: Option<String>,
    pub allow_failure: Option<bool>,
    pub variables: Option<Variables>,
    pub needs: Option<Node>,
    pub interruptible: Option<bool>,
    pub auto_cancel: Option<Node>,
}

/// Validate a `rules` list (nested arrays from `!reference` are flattened, ≤ 10 levels).
pub(crate) fn parse_rules(
    node: &Node,
    path: &str,
    target: RuleTarget,
    cx: &mut Cx,
) -> Option<Vec<Rule>> {
    // `Entry::Rules` validates `presence`: `rules: []` is blank.
    if target != RuleTarget::Include && node.as_seq().is_some_and(<[Node]>::is_empty) {
        cx.config(path, "can't be blank", node.pos);
        return None;
    }
    let items = match flatten_nodes(node) {
        Some(items)
            if items
                .iter()
                .all(|i| matches!(i.value, Value::Map(_) | Value::Null))
                || target == RuleTarget::Include =>
        {
            items
        }
        _ => {
            cx.config(
                path,
                "should be an array containing hashes and arrays of hashes",
                node.pos,
            );
            return None;
        }
    };
    let rule_path = join(path, "rule");
    let mut out = Vec::new();
    let mut ok = true;
    for item in &items {
        match parse_rule(item, &rule_path, target, cx) {
            Some(r) => out.push(r),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn parse_rule(node: &Node, path: &str, target: RuleTarget, cx: &mut Cx) -> Option<Rule> {
    let Some(m) = node.as_map() else {
        if node.is_null() {
            cx.config(path, "can't be blank", node.pos);
        } else {
            cx.config(path, "should be a hash", node.pos);
        }
        return None;
    };
    if m.is_empty() {
        cx.config(path, "can't be blank", node.pos);
        return None;
    }
    let allowed: &[&str] = match target {
        RuleTarget::Job => &[
            "if",
            "changes",
            "exists",
            "when",
            "start_in",
            "allow_failure",
            "variables",
            "needs",
            "interruptible",
        ],
        RuleTarget::Workflow => &[
            "if",
            "changes",
            "exists",
            "when",
            "variables",
            "auto_cancel",
            "start_in",
            "allow_failure",
            "needs",
        ],
        RuleTarget::Include => &["if", "changes", "exists", "when"],
    };
    let errors = cx.errors.len();
    cx.unknown_keys(m, allowed, path, node.pos);
    let mut rule = Rule::default();
    if let Some(n) = m.get("if") {
        match &n.value {
            Value::Str(s) => match Expression::parse(s) {
                Ok(e) => rule.if_ = Some(e),
                Err(_) => cx.attr(path, "if", "invalid expression syntax", n.pos),
            },
            // `validates :if, expression: true`: a non-string is a syntax error.
            _ => cx.attr(path, "if", "invalid expression syntax", n.pos),
        }
    }
    if let Some(n) = m.get("changes") {
        rule.changes = parse_changes(n, &join(path, "changes"), cx);
    }
    if let Some(n) = m.get("exists") {
        rule.exists = parse_exists(n, &join(path, "exists"), cx);
    }
    if let Some(n) = m.get("when") {
        let allowed: &[&str] = match target {
            RuleTarget::Job => &[
                "on_success",
                "on_failure",
                "always",
                "never",
                "manual",
                "delayed",
            ],
            RuleTarget::Workflow | RuleTarget::Include => &["always", "never"],
        };
        match n.as_str() {
            _ if n.is_null() => {}
            Some(w) if allowed.contains(&w) => rule.when = Some(w.to_owned()),
            Some(w) => cx.attr(path, "when", format!("unknown value: {w}"), n.pos),
            None => cx.attr(path, "when", "should be a string", n.pos),
        }
    }
    if target == RuleTarget::Job {
        match (m.get("start_in"), rule.when.as_deref()) {
            (Some(n), Some("delayed")) => match n.as_str() {
                Some(s) if crate::duration::parse_duration(s).is_some() => {
                    if crate::duration::parse_duration(s).unwrap_or(0) >= crate::duration::ONE_WEEK
                    {
                        cx.attr(path, "start_in", "should not exceed the limit", n.pos);
                    }
                    rule.start_in = Some(s.to_owned());
                }
                _ => cx.attr(path, "start_in", "should be a duration", n.pos),
            },
            (Some(n), _) => cx.config(path, "contains disallowed keys: start_in", n.pos),
            (None, Some("delayed")) => cx.attr(path, "start_in", "can't be blank", node.pos),
            (None, _) => {}
        }
        if let Some(n) = m.get("interruptible") {
            rule.interruptible = cx.boolean(n, &join(path, "interruptible"));
        }
    }
    if target != RuleTarget::Include {
        if let Some(n) = m.get("allow_failure") {
            match n.as_bool() {
                Some(b) => rule.allow_failure = Some(b),
                None => cx.attr(path, "allow_failure", "should be a boolean value", n.pos),
            }
        }
        if let Some(n) = m.get("variables") {
            rule.variables = keyword::variables(n, &join(path, "variables"), VarLevel::Rule, cx);
        }
        if let Some(n) = m.get("needs") {
            // `rules:needs` takes job needs only (no cross-project or cross-pipeline needs).
            let items = match &n.value {
                Value::Seq(_) => flatten_nodes(n).unwrap_or_default(),
                _ => vec![n],
            };
            for item in &items {
                let ok = match &item.value {
                    Value::Str(_) => true,
                    Value::Map(nm) => {
                        nm.contains_key("job")
                            && nm
                                .keys()
                                .all(|k| ["job", "artifacts", "optional"].contains(&k))
                    }
                    _ => false,
                };
                if !ok {
                    cx.config(
                        &join(path, "needs"),
                        "uses invalid types: cross_dependency",
                        item.pos,
                    );
                }
            }
            rule.needs = Some(n.clone());
        }
        if let Some(n) = m.get("auto_cancel") {
            rule.auto_cancel = Some(n.clone());
        }
    }
    (cx.errors.len() == errors).then_some(rule)
}

fn path_list(n: &Node, path: &str, cx: &mut Cx, what: &str) -> Option<Vec<String>> {
    let list = match &n.value {
        Value::Str(s) => vec![s.clone()],
        Value::Seq(_) => match crate::validate::string_array(n) {
            Some(l) => l,
            None => {
                cx.config(path, format!("should be an array of strings{what}"), n.pos);
                return None;
            }
        },
        _ => return None,
    };
    if list.len() > MAX_RULE_PATHS {
        cx.config(
            path,
            format!("has too many entries (maximum {MAX_RULE_PATHS})"),
            n.pos,
        );
        return None;
    }
    Some(list)
}

fn parse_changes(n: &Node, path: &str, cx: &mut Cx) -> Option<Changes> {
    match &n.value {
        Value::Seq(_) => Some(Changes {
            paths: path_list(n, path, cx, "")?,
            compare_to: None,
        }),
        Value::Map(m) => {
            cx.unknown_keys(m, &["paths", "compare_to"], path, n.pos);
            let Some(p) = m.get("paths") else {
                cx.attr(path, "paths", "can't be blank", n.pos);
                return None;
            };
            let paths = match &p.value {
                Value::Seq(_) => path_list(p, &join(path, "paths"), cx, "")?,
                _ => {
                    cx.attr(path, "paths", "should be an array of strings", p.pos);
                    return None;
                }
            };
            let compare_to = match m.get("compare_to") {
                None => None,
                Some(c) => Some(cx.string(c, &join(path, "compare_to"))?),
            };
            Some(Changes { paths, compare_to })
        }
        _ => {
            cx.config(path, "should be an array or a hash", n.pos);
            None
        }
    }
}

fn parse_exists(n: &Node, path: &str, cx: &mut Cx) -> Option<Vec<String>> {
    match &n.value {
        Value::Str(_) | Value::Seq(_) => path_list(n, path, cx, ""),
        Value::Map(m) => {
            cx.unknown_keys(m, &["paths", "project", "ref"], path, n.pos);
            if m.contains_key("ref") && !m.contains_key("project") {
                cx.attr(path, "project", "can't be blank", n.pos);
                return None;
            }
            match m.get("paths") {
                Some(p) if matches!(p.value, Value::Seq(_)) => {
                    path_list(p, &join(path, "paths"), cx, "")
                }
                Some(p) => {
                    cx.config(&join(path, "paths"), "should be an array of strings", p.pos);
                    None
                }
                None => {
                    cx.attr(path, "paths", "can't be blank", n.pos);
                    None
                }
            }
        }
        _ => {
            cx.config(
                path,
                "should be a string, an array of strings, or a hash",
                n.pos,
            );
            None
        }
    }
}

/// The variables a rule is evaluated against.
pub(crate) struct Scope<'a> {
    pub ctx: &'a Context,
    pub lookup: &'a dyn Fn(&str) -> Option<String>,
    pub files: &'a Files<'a>,
}

fn glob(pattern: &str) -> Option<GlobMatcher> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

impl Rule {
    /// Whether every clause of the rule holds; `Err` with GitLab's message when a clause
    /// cannot be evaluated (`rules:changes:compare_to is not a valid ref`).
    pub fn matches(&self, scope: &Scope<'_>) -> Result<bool, String> {
        if let Some(e) = &self.if_ {
            if !e.evaluate(scope.lookup, &|_| None) {
                return Ok(false);
            }
        }
        if let Some(c) = &self.changes {
            if !c.matches(scope)? {
                return Ok(false);
            }
        }
        if let Some(paths) = &self.exists {
            if !exists_match(paths, scope)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl Changes {
    /// Against the paths changed since `compare_to` when it is given and the loader can
    /// compare, else against the pipeline's changed files.
    fn matches(&self, scope: &Scope<'_>) -> Result<bool, String> {
        let Some(to) = &self.compare_to else {
            return Ok(changes_match(&self.paths, scope));
        };
        match scope.files.changed_since(&expand_path(to, scope)) {
            Ok(changed) => Ok(paths_match(&self.paths, &changed, scope)),
            Err(CompareError::Unsupported) => Ok(changes_match(&self.paths, scope)),
            Err(e) => Err(e.to_string()),
        }
    }
}

fn expand_path(p: &str, scope: &Scope<'_>) -> String {
    expand_server(p, scope.lookup, Unknown::Keep)
}

/// Against the pipeline's changed files: true when they are unknown, as on GitLab.
pub(crate) fn changes_match(paths: &[String], scope: &Scope<'_>) -> bool {
    match &scope.ctx.changed_files {
        Some(changed) => paths_match(paths, changed, scope),
        None => true,
    }
}

fn paths_match(paths: &[String], changed: &[String], scope: &Scope<'_>) -> bool {
    let mut comparisons = 0usize;
    for p in paths {
        let Some(m) = glob(&expand_path(p, scope)) else {
            continue;
        };
        for f in changed {
            comparisons += 1;
            if comparisons > MAX_COMPARISONS || m.is_match(f) {
                return true;
            }
        }
    }
    false
}

/// `rules:exists`: whether one of `paths` (expanded; a directory when it ends in `/`, a
/// glob when it has one) names a file of the project. `Err` when the project's files
/// cannot be listed (the loader's reason): never false for a project that has them.
pub(crate) fn exists_match(paths: &[String], scope: &Scope<'_>) -> Result<bool, String> {
    let files = scope
        .files
        .get()
        .map_err(|e| format!("rules:exists: the project's files could not be listed: {e}"))?;
    let limit = MAX_COMPARISONS / paths.len().max(1);
    for p in paths {
        let p = expand_path(p, scope);
        let p = p.trim_start_matches('/');
        if let Some(dir) = p.strip_suffix('/') {
            let prefix = format!("{dir}/");
            if files.iter().any(|f| f.starts_with(&prefix)) {
                return Ok(true);
            }
            continue;
        }
        if !p.contains(['*', '?', '[', '{']) {
            if files.binary_search_by(|f| f.as_str().cmp(p)).is_ok() || files.iter().any(|f| f == p)
            {
                return Ok(true);
            }
            continue;
        }
        let Some(m) = glob(p) else { continue };
        for (i, f) in files.iter().enumerate() {
            if i > limit || m.is_match(f) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// `include:rules`: included when the first matching rule is not `when: never`.
pub(crate) fn include_matches(
    rules: &[Rule],
    ctx: &Context,
    files: &Files<'_>,
) -> Result<bool, String> {
    let lookup = |n: &str| ctx.var(n);
    let scope = Scope {
        ctx,
        lookup: &lookup,
        files,
    };
    Ok(first_match(rules, &scope)?.is_some_and(|r| r.when.as_deref() != Some("never")))
}

/// The first matching rule, if any; the first clause that cannot be evaluated ends the
/// search with its message, as GitLab's `Rules#evaluate` does.
pub(crate) fn first_match<'r>(
    rules: &'r [Rule],
    scope: &Scope<'_>,
) -> Result<Option<&'r Rule>, String> {
    for rule in rules {
        if rule.matches(scope)? {
            return Ok(Some(rule));
        }
    }
    Ok(None)
}

/// Legacy `only`/`except`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Policy {
    pub refs: Option<Vec<String>>,
    pub variables: Option<Vec<Expression>>,
    pub changes: Option<Vec<String>>,
    pub kubernetes: bool,
}

pub(crate) fn parse_policy(node: &Node, path: &str, cx: &mut Cx) -> Option<Policy> {
    let refs_err = "should be an array of strings or regular expressions using re2 syntax";
    // `p` is what precedes the message: `<path> config` for the array form, `<path> refs`
    // for the `refs:` attribute of the hash form (GitLab's `ComplexPolicy` attributes).
    let check_refs = |cx: &mut Cx, n: &Node, p: &str| -> Option<Vec<String>> {
        let Some(list) = crate::validate::string_array(n) else {
            cx.push(format!("{p} {refs_err}"), n.pos);
            return None;
        };
        for r in &list {
            if let Some(Err(_)) = parse_regex_literal(r) {
                cx.push(format!("{p} {refs_err}"), n.pos);
                return None;
            }
        }
        Some(list)
    };
    match &node.value {
        Value::Seq(_) => Some(Policy {
            refs: Some(check_refs(cx, node, &format!("{path} config"))?),
            ..Policy::default()
        }),
        Value::Map(m) => {
            let errors = cx.errors.len();
            cx.unknown_keys(
                m,
                &["refs", "variables", "changes", "kubernetes"],
                path,
                node.pos,
            );
            let mut p = Policy::default();
            if let Some(r) = m.get("refs") {
                p.refs = check_refs(cx, r, &format!("{path} refs"));
            }
            if let Some(v) = m.get("variables") {
                match crate::validate::string_array(v) {
                    Some(list) => {
                        let mut exprs = Vec::new();
                        for e in list {
                            match Expression::parse(&e) {
                                Ok(x) => exprs.push(x),
                                Err(_) => {
                                    cx.attr(path, "variables", "invalid expression syntax", v.pos)
                                }
                            }
                        }
                        p.variables = Some(exprs);
                    }
                    None => cx.attr(path, "variables", "should be an array of strings", v.pos),
                }
            }
            if let Some(c) = m.get("changes") {
                p.changes = match &c.value {
                    Value::Str(s) => Some(vec![s.clone()]),
                    _ => cx.string_array(c, &join(path, "changes")),
                };
            }
            if let Some(k) = m.get("kubernetes") {
                match k.as_str() {
                    Some("active") => p.kubernetes = true,
                    _ => cx.config(
                        &join(path, "kubernetes"),
                        "unknown value: kubernetes",
                        k.pos,
                    ),
                }
            }
            (cx.errors.len() == errors).then_some(p)
        }
        _ => {
            // `Policy::UnknownStrategy`: no `config` word (a string is not a refs list).
            cx.push(
                format!("{path} has to be either an array of conditions or a hash"),
                node.pos,
            );
            None
        }
    }
}

impl Policy {
    /// The implicit `only: {refs: [branches, tags]}`.
    pub fn default_only() -> Self {
        Policy {
            refs: Some(vec!["branches".into(), "tags".into()]),
            ..Policy::default()
        }
    }

    /// `only` semantics: every given sub-condition holds.
    pub fn all_hold(&self, scope: &Scope<'_>) -> bool {
        self.refs.as_ref().is_none_or(|r| refs_match(r, scope.ctx))
            && self
                .variables
                .as_ref()
                .is_none_or(|v| v.iter().any(|e| e.evaluate(scope.lookup, &|_| None)))
            && self
                .changes
                .as_ref()
                .is_none_or(|c| changes_match(c, scope))
            && (!self.kubernetes || scope.ctx.var("CI_KUBERNETES_ACTIVE").is_some())
    }

    /// `except` semantics: any given sub-condition holds.
    pub fn any_holds(&self, scope: &Scope<'_>) -> bool {
        self.refs.as_ref().is_some_and(|r| refs_match(r, scope.ctx))
            || self
                .variables
                .as_ref()
                .is_some_and(|v| v.iter().any(|e| e.evaluate(scope.lookup, &|_| None)))
            || self
                .changes
                .as_ref()
                .is_some_and(|c| changes_match(c, scope))
            || (self.kubernetes && scope.ctx.var("CI_KUBERNETES_ACTIVE").is_some())
    }
}

fn refs_match(refs: &[String], ctx: &Context) -> bool {
    let source = ctx.var("CI_PIPELINE_SOURCE").unwrap_or_default();
    let is_tag = ctx.var("CI_COMMIT_TAG").is_some();
    let is_mr = source == "merge_request_event";
    let is_branch = !is_tag && !is_mr && ctx.var("CI_COMMIT_BRANCH").is_some();
    let ref_name = ctx.var("CI_COMMIT_REF_NAME").unwrap_or_default();
    let project = ctx.var("CI_PROJECT_PATH").unwrap_or_default();
    let source_keyword = source.strip_suffix("_event").unwrap_or(&source).to_owned();
    refs.iter().any(|r| {
        // `pattern@group/project` restricts a pattern to one project; a whole `/regex/` is
        // never split.
        let (pattern, proj) = match r.rsplit_once('@') {
            Some((p, proj))
                if parse_regex_literal(r).is_none() && !p.is_empty() && !proj.is_empty() =>
            {
                (p, Some(proj))
            }
            _ => (r.as_str(), None),
        };
        if proj.is_some_and(|p| p != project) {
            return false;
        }
        match pattern {
            "branches" => return is_branch,
            "tags" => return is_tag,
            _ => {}
        }
        // The source name or its Rails plural (`push` → `pushes`, `schedule` → `schedules`).
        let singular = pattern
            .strip_suffix("es")
            .filter(|s| s.ends_with("sh"))
            .or_else(|| pattern.strip_suffix('s'))
            .unwrap_or(pattern);
        if [
            "api",
            "chat",
            "external",
            "external_pull_request",
            "merge_request",
            "pipeline",
            "push",
            "schedule",
            "trigger",
            "web",
            "webide",
            "parent_pipeline",
        ]
        .contains(&singular)
        {
            return singular == source_keyword || pattern == source_keyword;
        }
        if is_mr {
            return false;
        }
        match parse_regex_literal(pattern) {
            Some(Ok(re)) => re.is_match(&ref_name),
            Some(Err(_)) => false,
            None => pattern == ref_name,
        }
    })
}
