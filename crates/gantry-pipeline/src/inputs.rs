//! `spec:inputs` headers and `$[[ inputs.NAME ]]` interpolation (spec §1.6, §6.6), and
//! `$[[ component.name|sha|version|reference ]]` in a component's template, for the keys
//! its `spec:component` lists.
//!
//! A file without a `spec:` header is not interpolated (its `$[[ ]]` text stays as
//! written). Limits: at most [`MAX_BLOCKS`] blocks per file, block text under 1 KiB,
//! at most 3 functions per block, at most 50 `options`.

use indexmap::IndexMap;

use crate::context::Context;
use crate::expand::{Unknown, expand_server};
use crate::validate::Cx;
use crate::yaml::{Entry, Map, Node, Value};

pub const MAX_BLOCKS: usize = 10_000;
const MAX_BLOCK_LEN: usize = 1024;
const MAX_FUNCTIONS: usize = 3;
const MAX_OPTIONS: usize = 50;

#[derive(Clone, Copy, PartialEq, Eq)]
enum InputType {
    String,
    Number,
    Boolean,
    Array,
}

struct Spec {
    kind: InputType,
    default: Option<Node>,
    options: Option<Vec<Node>>,
    regex: Option<String>,
    /// `rules` (GitLab 18.7's conditional inputs): the first rule whose `if` holds — or
    /// the fallback rule without one — gives the input its `options` and `default`.
    rules: Option<Vec<InputRule>>,
}

/// How deep inputs' rules may read inputs with rules (`a`'s rule reads `b`, whose rule
/// reads `c`, …): resolving is recursive, so the depth is bounded.
const MAX_RULE_DEPTH: usize = 32;

/// One of an input's `rules`.
struct InputRule {
    /// `if`: an expression over other inputs (`$[[ inputs.x ]] == 'aws'`).
    cond: Option<crate::expr::Expression>,
    /// The inputs `cond` reads, resolved before it is evaluated.
    reads: Vec<String>,
    options: Option<Vec<Node>>,
    /// `default`: `Some(None)` for `default: null` (the value must be given).
    default: Option<Option<Node>>,
}

/// The input names an `if` of `spec:inputs:rules` reads (`$[[ inputs.name ]]`, name of
/// word characters, spaces allowed inside the brackets: GitLab's input lexeme).
fn input_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("$[[") {
        rest = &rest[at + 3..];
        let inner = rest.trim_start();
        let Some(after) = inner.strip_prefix("inputs.") else {
            continue;
        };
        let end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let (name, tail) = after.split_at(end);
        if !name.is_empty()
            && tail.trim_start().starts_with("]]")
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    }
    names
}

/// At most this many inputs are given to one pipeline (GitLab's runbook for CI inputs:
/// "Maximum 20 inputs per pipeline").
pub const MAX_PIPELINE_INPUTS: usize = 20;
/// At most this many bytes of input values (as JSON) are given to one pipeline (GitLab:
/// "Total input content limited to 1 MB").
pub const MAX_PIPELINE_INPUT_BYTES: usize = 1024 * 1024;

/// A pipeline's inputs: values for the `spec:inputs` of its root configuration file,
/// given when the pipeline is created (GitLab's `inputs` of the pipeline and trigger
/// APIs, `trigger:inputs` of a multi-project trigger job, `gantry run --input`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PipelineInputs {
    values: IndexMap<String, InputValue>,
}

/// One given input value.
#[derive(Clone, Debug, PartialEq)]
pub enum InputValue {
    /// A typed value (a JSON body, a YAML `trigger:inputs` mapping): used as it is.
    Json(serde_json::Value),
    /// Text from a command line or a form field: read as the input's declared type
    /// (`3` for a number, `true`/`false` for a boolean, `[a, b]` for an array).
    Text(String),
}

impl PipelineInputs {
    pub fn new() -> Self {
        Self::default()
    }

    /// A JSON object's members, typed. Anything but an object (or `null`: none) is an
    /// error naming the fix.
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        match value {
            serde_json::Value::Null => Ok(Self::new()),
            serde_json::Value::Object(o) => {
                let mut inputs = Self::new();
                for (k, v) in o {
                    inputs.insert(k.clone(), InputValue::Json(v.clone()));
                }
                inputs.check()?;
                Ok(inputs)
            }
            other => Err(format!(
                "inputs must be an object of input names and values, like {{\"environment\": \"staging\"}}; got {}",
                json_type(other)
            )),
        }
    }

    /// Adds or replaces an input.
    pub fn insert(&mut self, name: impl Into<String>, value: InputValue) {
        self.values.insert(name.into(), value);
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &InputValue)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The limits ([`MAX_PIPELINE_INPUTS`], `MAX_PIPELINE_INPUT_BYTES`) and names.
    pub fn check(&self) -> Result<(), String> {
        if self.values.len() > MAX_PIPELINE_INPUTS {
            return Err(format!(
                "{} inputs given: a pipeline takes at most {MAX_PIPELINE_INPUTS}",
                self.values.len()
            ));
        }
        if let Some(name) = self.values.keys().find(|k| k.trim().is_empty()) {
            return Err(format!("input name `{name}` is empty"));
        }
        let bytes: usize = self
            .values
            .iter()
            .map(|(k, v)| {
                k.len()
                    + match v {
                        InputValue::Json(j) => j.to_string().len(),
                        InputValue::Text(t) => t.len(),
                    }
            })
            .sum();
        if bytes > MAX_PIPELINE_INPUT_BYTES {
            return Err(format!(
                "the inputs take {bytes} bytes: a pipeline's inputs take at most {MAX_PIPELINE_INPUT_BYTES} bytes"
            ));
        }
        Ok(())
    }

    /// Typed JSON (text read as a string).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.values
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        InputValue::Json(j) => j.clone(),
                        InputValue::Text(t) => serde_json::Value::String(t.clone()),
                    };
                    (k.clone(), v)
                })
                .collect(),
        )
    }

    /// The mapping an includer would have written, each text value read as the type
    /// its input declares.
    fn to_node(&self, specs: &IndexMap<String, Spec>, pos: crate::yaml::Pos) -> Node {
        let mut m = Map::new();
        for (name, value) in &self.values {
            let node = match value {
                InputValue::Json(j) => Node::from_json(j, pos),
                InputValue::Text(t) => read_text(t, specs.get(name).map(|s| s.kind), pos),
            };
            m.insert_node(name.clone(), node);
        }
        Node::new(Value::Map(m), pos)
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Text as the declared type; text that is not one stays a string, so the type check
/// reports it (`provided value is not a number`).
fn read_text(text: &str, kind: Option<InputType>, pos: crate::yaml::Pos) -> Node {
    let parsed = match kind {
        Some(InputType::Number) => {
            let t = text.trim();
            t.parse::<i64>().ok().map(Value::Int).or_else(|| {
                t.parse::<f64>()
                    .ok()
                    .filter(|f| f.is_finite() && !t.is_empty())
                    .map(Value::Float)
            })
        }
        Some(InputType::Boolean) => match text.trim() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        Some(InputType::Array) => {
            crate::yaml::parse_documents(text, pos.file, crate::yaml::Limits::default())
                .ok()
                .and_then(|docs| docs.into_iter().next())
                .filter(|d| matches!(d.value, Value::Seq(_)))
                .map(|d| Node::from_json(&d.to_json(), pos).value)
        }
        Some(InputType::String) | None => None,
    };
    Node::new(parsed.unwrap_or_else(|| Value::Str(text.to_owned())), pos)
}

/// An item of `spec:include` (GitLab's `Header::Include`): a path or URL, or a mapping
/// with exactly one of `local`, `remote`, `project` and the common include keys.
pub(crate) fn header_include_item_ok(item: &Node) -> bool {
    match &item.value {
        Value::Str(_) => true,
        Value::Map(m) => {
            let locations = m
                .keys()
                .filter(|k| ["local", "remote", "project"].contains(k))
                .count();
            locations == 1
                && m.keys().all(|k| {
                    [
                        "local",
                        "remote",
                        "project",
                        "file",
                        "ref",
                        "integrity",
                        "cache",
                    ]
                    .contains(&k)
                })
        }
        _ => false,
    }
}

/// What the file's inputs are given by.
#[derive(Clone, Copy)]
pub(crate) enum Given<'a> {
    /// Nothing (a root file of a pipeline created without inputs).
    Nothing,
    /// The `inputs:` of an `include` item (or of a child pipeline's trigger include).
    Include(&'a Node),
    /// A pipeline's inputs, for its root file.
    Pipeline(&'a PipelineInputs),
}

/// Interpolate `body` with the inputs declared in `header` and given by the includer.
pub(crate) fn interpolate(
    header: Option<&Node>,
    given: Given<'_>,
    body: &mut Node,
    ctx: &Context,
    cx: &mut Cx,
    file: Option<&str>,
    component: Option<&ComponentInfo>,
) {
    let prefix = |m: String| match file {
        Some(f) => format!("`{f}`: {m}"),
        None => m,
    };
    let (given_node, given_empty) = match given {
        Given::Nothing => (None, true),
        Given::Include(g) => match g.as_map() {
            Some(m) => (Some(g), m.is_empty()),
            None => {
                cx.raw(prefix("inputs config should be a hash".into()), Some(g.pos));
                return;
            }
        },
        Given::Pipeline(p) => (None, p.is_empty()),
    };
    let Some(header) = header else {
        if !given_empty {
            let message = match given {
                Given::Pipeline(_) => "Given inputs not defined in the `spec` section of the configuration file: the pipeline's configuration declares no `spec:inputs` header".to_owned(),
                _ => "Given inputs not defined in the `spec` section of the included configuration file".to_owned(),
            };
            cx.raw(
                prefix(message),
                given_node.map(|g| g.pos).or(Some(body.pos)),
            );
        }
        return;
    };
    let Some((specs, declared)) = parse_header(header, cx, &prefix) else {
        return;
    };
    let owned;
    let given_map = match given {
        Given::Nothing => None,
        Given::Include(g) => g.as_map(),
        Given::Pipeline(p) => {
            owned = p.to_node(&specs, header.pos);
            owned.as_map()
        }
    };
    let mut errors = Vec::new();
    if let Some(g) = given_map {
        let unknown: Vec<&str> = g.keys().filter(|k| !specs.contains_key(*k)).collect();
        if !unknown.is_empty() {
            errors.push(format!("unknown input arguments: {}", unknown.join(", ")));
        }
    }
    let mut resolver = Resolver {
        specs: &specs,
        given: given_map,
        pos: header.pos,
        done: IndexMap::new(),
        stack: Vec::new(),
        errors: &mut errors,
    };
    for name in specs.keys() {
        resolver.resolve(name);
    }
    let values: IndexMap<String, Node> = resolver
        .done
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name, v)))
        .collect();
    if !errors.is_empty() {
        errors.truncate(3);
        cx.raw(prefix(errors.join(", ")), Some(header.pos));
        return;
    }
    let mut state = Interp {
        values: &values,
        component: Components {
            declared,
            info: component,
        },
        ctx,
        blocks: 0,
        error: None,
    };
    state.node(body);
    if let Some(e) = state.error {
        cx.raw(prefix(e), Some(body.pos));
    }
}

/// Gives each input its value: the given one, else its default — for an input with
/// `rules`, the `options` and `default` of the first rule that holds, which reads the
/// values of the inputs its `if` names (resolved first; a cycle is an error).
struct Resolver<'a, 'e> {
    specs: &'a IndexMap<String, Spec>,
    given: Option<&'a crate::yaml::Map>,
    pos: crate::yaml::Pos,
    /// Resolved inputs; `None` for one that has an error.
    done: IndexMap<String, Option<Node>>,
    /// Inputs being resolved (to find cycles).
    stack: Vec<String>,
    errors: &'e mut Vec<String>,
}

impl Resolver<'_, '_> {
    fn resolve(&mut self, name: &str) -> Option<Node> {
        if let Some(done) = self.done.get(name) {
            return done.clone();
        }
        // An `if` may name an input the header does not declare: it reads as null.
        let specs = self.specs;
        let spec = specs.get(name)?;
        if let Some(at) = self.stack.iter().position(|n| n == name) {
            let cycle = self.stack[at..].join(" -> ");
            self.errors.push(format!(
                "`{name}` input: its rules depend on each other in a cycle: {cycle} -> {name}"
            ));
            return None;
        }
        if self.stack.len() > MAX_RULE_DEPTH {
            self.errors.push(format!(
                "`{name}` input: its rules read inputs whose rules read inputs more than {MAX_RULE_DEPTH} deep"
            ));
            self.done.insert(name.to_owned(), None);
            return None;
        }
        self.stack.push(name.to_owned());
        let (options, default) = match &spec.rules {
            None => (spec.options.clone(), spec.default.clone()),
            Some(rules) => match self.first_rule(rules) {
                Some(rule) => (rule.options.clone(), rule.default.clone().flatten()),
                // No rule holds and there is no fallback: GitLab gives the empty string.
                None => (None, Some(Node::str("", self.pos))),
            },
        };
        self.stack.pop();
        let value = self.given.and_then(|g| g.get(name)).cloned().or(default);
        let checked = match value {
            None => Err(format!(
                "`{name}` input: required value has not been provided"
            )),
            Some(value) => {
                let effective = Spec {
                    kind: spec.kind,
                    default: None,
                    options,
                    regex: spec.regex.clone(),
                    rules: None,
                };
                match check_value(name, &effective, &value) {
                    Some(e) => Err(e),
                    None => Ok(value),
                }
            }
        };
        let value = checked.map_err(|e| self.errors.push(e)).ok();
        self.done.insert(name.to_owned(), value.clone());
        value
    }

    fn first_rule<'r>(&mut self, rules: &'r [InputRule]) -> Option<&'r InputRule> {
        for rule in rules {
            let Some(cond) = &rule.cond else {
                return Some(rule);
            };
            let read: Vec<(&str, Option<String>)> = rule
                .reads
                .iter()
                .map(|n| (n.as_str(), self.resolve(n).map(|v| render(&v))))
                .collect();
            let input = |n: &str| {
                read.iter()
                    .find(|(k, _)| *k == n)
                    .and_then(|(_, v)| v.clone())
            };
            if cond.evaluate(&|_| None, &input) {
                return Some(rule);
            }
        }
        None
    }
}

/// Validate a `spec:` header on its own (fragment linting).
pub(crate) fn check_header(header: &Node, cx: &mut Cx) {
    let _ = parse_header(header, cx, &|m| m);
}

fn parse_header(
    header: &Node,
    cx: &mut Cx,
    prefix: &dyn Fn(String) -> String,
) -> Option<(IndexMap<String, Spec>, Vec<String>)> {
    let bad = |cx: &mut Cx, m: &str, n: &Node| {
        cx.raw(prefix(m.to_owned()), Some(n.pos));
        None
    };
    let Some(spec) = header.as_map().and_then(|m| m.get("spec")) else {
        return bad(cx, "header:spec config should be a hash", header);
    };
    let Some(spec_map) = spec.as_map() else {
        return bad(cx, "header:spec config should be a hash", spec);
    };
    for key in spec_map.keys() {
        // `description` (GitLab 18.10): text describing the file, shown by the catalog.
        if !["inputs", "include", "component", "description"].contains(&key) {
            return bad(
                cx,
                &format!("header:spec config contains unknown keys: {key}"),
                spec,
            );
        }
    }
    if let Some(d) = spec_map.get("description") {
        match &d.value {
            Value::Null => {}
            // GitLab's schema: `maxLength: 256` (characters).
            Value::Str(text) if text.chars().count() > 256 => {
                return bad(
                    cx,
                    "header:spec:description is too long (maximum is 256 characters)",
                    d,
                );
            }
            Value::Str(_) => {}
            _ => return bad(cx, "header:spec:description config should be a string", d),
        }
    }
    let mut declared = Vec::new();
    if let Some(c) = spec_map.get("component") {
        match crate::validate::string_array(c)
            .filter(|l| l.iter().all(|v| COMPONENT_KEYS.contains(&v.as_str())))
        {
            Some(list) => declared = list,
            None => {
                return bad(
                    cx,
                    "header:spec:component config should be an array of: name, sha, version, reference",
                    c,
                );
            }
        }
    }
    if let Some(inc) = spec_map.get("include") {
        let items = match &inc.value {
            Value::Seq(items) => items.to_vec(),
            _ => vec![inc.clone()],
        };
        for item in &items {
            if !header_include_item_ok(item) {
                return bad(
                    cx,
                    "header:spec:include config supports only `local`, `remote` and `project` (with `file`, `ref`) items",
                    item,
                );
            }
        }
    }
    let mut out = IndexMap::new();
    let Some(inputs) = spec_map.get("inputs") else {
        return Some((out, declared));
    };
    let Some(inputs) = inputs.as_map() else {
        return bad(cx, "header:spec:inputs config should be a hash", inputs);
    };
    for (name, def) in inputs.iter() {
        let mut spec = Spec {
            kind: InputType::String,
            default: None,
            options: None,
            regex: None,
            rules: None,
        };
        match &def.value {
            Value::Null => {}
            Value::Map(m) => {
                for key in m.keys() {
                    if ![
                        "default",
                        "description",
                        "options",
                        "regex",
                        "type",
                        "rules",
                    ]
                    .contains(&key)
                    {
                        return bad(
                            cx,
                            &format!(
                                "header:spec:inputs:{name} config contains unknown keys: {key}"
                            ),
                            def,
                        );
                    }
                }
                if let Some(t) = m.get("type") {
                    spec.kind = match t.as_str() {
                        Some("string") => InputType::String,
                        Some("number") => InputType::Number,
                        Some("boolean") => InputType::Boolean,
                        Some("array") => InputType::Array,
                        _ => {
                            return bad(
                                cx,
                                &format!(
                                    "header:spec:inputs:{name} input type unknown value: {}",
                                    crate::yaml::compact_json(t)
                                ),
                                t,
                            );
                        }
                    };
                }
                spec.default = m.get("default").cloned();
                if let Some(r) = m.get("rules") {
                    let path = format!("header:spec:inputs:{name}:rules");
                    if m.contains_key("default") || m.contains_key("options") {
                        return bad(
                            cx,
                            &format!(
                                "{path} cannot be combined with a top-level `default` or `options`"
                            ),
                            r,
                        );
                    }
                    let Some(items) = r.as_seq() else {
                        return bad(cx, &format!("{path} config should be an array"), r);
                    };
                    let mut rules = Vec::new();
                    for rule in items {
                        let Some(rm) = rule.as_map() else {
                            return bad(cx, &format!("{path}:rule config should be a hash"), rule);
                        };
                        if let Some(k) = rm
                            .keys()
                            .find(|k| !["if", "options", "default"].contains(k))
                        {
                            return bad(
                                cx,
                                &format!("{path}:rule config contains unknown keys: {k}"),
                                rule,
                            );
                        }
                        let (cond, reads) = match rm.get("if").map(|n| &n.value) {
                            None | Some(Value::Null) => (None, Vec::new()),
                            Some(Value::Str(e)) => match crate::expr::Expression::parse(e) {
                                Ok(cond) => (Some(cond), input_names(e)),
                                Err(_) => {
                                    return bad(
                                        cx,
                                        &format!("{path}:rule if invalid expression syntax"),
                                        rule,
                                    );
                                }
                            },
                            Some(_) => {
                                return bad(
                                    cx,
                                    &format!("{path}:rule if should be a string"),
                                    rule,
                                );
                            }
                        };
                        let options = match rm.get("options") {
                            None => None,
                            Some(o) => match o.as_seq() {
                                Some(items) if items.len() > MAX_OPTIONS => {
                                    return bad(
                                        cx,
                                        &format!(
                                            "{path}:rule config cannot define more than {MAX_OPTIONS} options"
                                        ),
                                        o,
                                    );
                                }
                                Some(items) => Some(items.to_vec()),
                                None => {
                                    return bad(
                                        cx,
                                        &format!("{path}:rule options should be an array"),
                                        o,
                                    );
                                }
                            },
                        };
                        let default = rm
                            .get("default")
                            .map(|d| (!matches!(d.value, Value::Null)).then(|| d.clone()));
                        if cond.is_some() && options.is_none() && default.is_none() {
                            return bad(
                                cx,
                                &format!(
                                    "{path}:rule config rule with 'if' must define 'options' or 'default'"
                                ),
                                rule,
                            );
                        }
                        if cond.is_none() && options.is_none() {
                            return bad(
                                cx,
                                &format!("{path}:rule config fallback rule must define 'options'"),
                                rule,
                            );
                        }
                        rules.push(InputRule {
                            cond,
                            reads,
                            options,
                            default,
                        });
                    }
                    spec.rules = Some(rules);
                }
                if let Some(o) = m.get("options") {
                    let Some(items) = o.as_seq() else {
                        return bad(
                            cx,
                            &format!("header:spec:inputs:{name} options should be an array"),
                            o,
                        );
                    };
                    if items.len() > MAX_OPTIONS {
                        return bad(
                            cx,
                            &format!(
                                "header:spec:inputs:{name} options cannot contain more than {MAX_OPTIONS} values"
                            ),
                            o,
                        );
                    }
                    if !matches!(spec.kind, InputType::String | InputType::Number) {
                        // Checked with the value (GitLab's `BaseInput#validate_options`).
                        return bad(
                            cx,
                            &format!(
                                "`{name}` input: Options can only be used with string and number inputs"
                            ),
                            o,
                        );
                    }
                    spec.options = Some(items.to_vec());
                }
                if let Some(r) = m.get("regex") {
                    let Some(r) = r.as_str() else {
                        return bad(
                            cx,
                            &format!("header:spec:inputs:{name} regex should be a string"),
                            r,
                        );
                    };
                    if spec.kind != InputType::String {
                        return bad(
                            cx,
                            &format!(
                                "`{name}` input: RegEx validation can only be used with string inputs"
                            ),
                            def,
                        );
                    }
                    spec.regex = Some(r.to_owned());
                }
            }
            _ => {
                return bad(
                    cx,
                    &format!("header:spec:inputs:{name} config should be a hash"),
                    def,
                );
            }
        }
        out.insert(name.to_owned(), spec);
    }
    Some((out, declared))
}

fn check_value(name: &str, spec: &Spec, value: &Node) -> Option<String> {
    let ok = match spec.kind {
        InputType::String => matches!(value.value, Value::Str(_)),
        InputType::Number => matches!(value.value, Value::Int(_) | Value::Float(_)),
        InputType::Boolean => matches!(value.value, Value::Bool(_)),
        InputType::Array => matches!(value.value, Value::Seq(_)),
    };
    if !ok {
        let t = match spec.kind {
            InputType::String => "string",
            InputType::Number => "number",
            InputType::Boolean => "boolean",
            InputType::Array => "array",
        };
        let article = if spec.kind == InputType::Array {
            "an"
        } else {
            "a"
        };
        return Some(format!(
            "`{name}` input: provided value is not {article} {t}"
        ));
    }
    if let Some(options) = &spec.options {
        if !options.iter().any(|o| o.value == value.value) {
            return Some(format!(
                "`{name}` input: `{}` cannot be used because it is not in the list of allowed options",
                value.scalar_to_string().unwrap_or_default()
            ));
        }
    }
    if let (Some(re), Some(s)) = (&spec.regex, value.as_str()) {
        match regex::RegexBuilder::new(re).size_limit(1 << 20).build() {
            Ok(r) if r.is_match(s) => {}
            Ok(_) => {
                return Some(format!(
                    "`{name}` input: provided value does not match required RegEx pattern"
                ));
            }
            Err(_) => return Some(format!("`{name}` input: invalid regular expression")),
        }
    }
    None
}

/// The keys `spec:component` may list.
const COMPONENT_KEYS: [&str; 4] = ["name", "sha", "version", "reference"];

/// `$[[ component.* ]]`: the keys the header declares and the component, when the file
/// was included with `include:component`.
struct Components<'a> {
    declared: Vec<String>,
    info: Option<&'a ComponentInfo>,
}

impl Components<'_> {
    fn value(&self, key: &str, pos: crate::yaml::Pos) -> Result<Node, String> {
        let access = format!("component.{key}");
        if !COMPONENT_KEYS.contains(&key) {
            return Err(format!(
                "unknown interpolation key: `{access}` (a component has name, sha, version and reference)"
            ));
        }
        if !self.declared.iter().any(|d| d == key) {
            return Err(format!(
                "unknown interpolation key: `{access}`: list `{key}` in the file's `spec:component`"
            ));
        }
        let Some(info) = self.info else {
            return Err(format!(
                "`{access}` is only known in a file included with `include:component`"
            ));
        };
        let text = match key {
            "name" => Some(info.name.clone()),
            "sha" => info.sha.clone(),
            "version" => info.version.clone(),
            _ => info.reference.clone(),
        };
        Ok(match text {
            Some(text) => Node::str(text, pos),
            None => Node::new(Value::Null, pos),
        })
    }
}

struct Interp<'a> {
    values: &'a IndexMap<String, Node>,
    component: Components<'a>,
    ctx: &'a Context,
    blocks: usize,
    error: Option<String>,
}

impl Interp<'_> {
    fn node(&mut self, node: &mut Node) {
        if self.error.is_some() {
            return;
        }
        match &mut node.value {
            Value::Str(s) if s.contains("$[[") => {
                if let Some(v) = self.string(s) {
                    node.value = v;
                }
            }
            Value::Seq(items) | Value::Reference(items) => std::rc::Rc::make_mut(items)
                .iter_mut()
                .for_each(|i| self.node(i)),
            Value::Map(m) => {
                let old = std::mem::take(m);
                let mut new = Map::new();
                for (k, mut e) in old.entries_owned() {
                    let key = if k.contains("$[[") {
                        match self.string(&k) {
                            Some(v) => Node::new(v, e.key_pos).scalar_to_string().unwrap_or(k),
                            None => k,
                        }
                    } else {
                        k
                    };
                    self.node(&mut e.value);
                    new.insert(key, Entry { ..e });
                }
                *m = new;
            }
            _ => {}
        }
    }

    /// Interpolate one string; `Some(typed)` when the string is exactly one block.
    fn string(&mut self, s: &str) -> Option<Value> {
        let mut out = String::new();
        let mut rest = s;
        let mut whole: Option<Value> = None;
        while let Some(start) = rest.find("$[[") {
            let Some(len) = rest[start..].find("]]") else {
                break;
            };
            let inner = &rest[start + 3..start + len];
            self.blocks += 1;
            if self.blocks > MAX_BLOCKS {
                self.error = Some("too many interpolation blocks".into());
                return None;
            }
            if inner.len() > MAX_BLOCK_LEN {
                self.error = Some("interpolation block is too long".into());
                return None;
            }
            let value = match self.block(inner) {
                Ok(v) => v,
                Err(e) => {
                    self.error = Some(e);
                    return None;
                }
            };
            if start == 0 && start + len + 2 == rest.len() && out.is_empty() {
                whole = Some(value.value.clone());
            }
            out.push_str(&rest[..start]);
            out.push_str(&render(&value));
            rest = &rest[start + len + 2..];
        }
        if let Some(v) = whole {
            return Some(v);
        }
        out.push_str(rest);
        Some(Value::Str(out))
    }

    fn block(&self, inner: &str) -> Result<Node, String> {
        let mut parts = inner.split('|').map(str::trim);
        let access = parts.next().unwrap_or_default();
        let mut value = if let Some(key) = access.strip_prefix("component.") {
            self.component.value(key, crate::yaml::Pos::default())?
        } else {
            let Some(name) = access.strip_prefix("inputs.") else {
                return Err(format!("unknown interpolation key: `{access}`"));
            };
            let Some(value) = self.values.get(name).cloned() else {
                return Err(format!("unknown interpolation key: `{name}`"));
            };
            value
        };
        let functions: Vec<&str> = parts.collect();
        if functions.len() > MAX_FUNCTIONS {
            return Err(format!(
                "too many functions in interpolation block (maximum is {MAX_FUNCTIONS})"
            ));
        }
        for f in functions {
            let text = value.scalar_to_string().unwrap_or_else(|| render(&value));
            let new = if f == "expand_vars" {
                expand_server(&text, &|n| self.ctx.var(n), Unknown::Keep)
            } else if f == "posix_escape" {
                posix_escape(&text)
            } else if let Some(args) = f
                .strip_prefix("truncate(")
                .and_then(|a| a.strip_suffix(')'))
            {
                let nums: Vec<usize> = args
                    .split(',')
                    .filter_map(|a| a.trim().parse().ok())
                    .collect();
                let [offset, length] = nums[..] else {
                    return Err(format!("invalid function arguments: `{f}`"));
                };
                text.chars().skip(offset).take(length).collect()
            } else {
                return Err(format!(
                    "no function matching `{f}`: check that the function name, arguments, and types are correct"
                ));
            };
            value = Node::str(new, value.pos);
        }
        Ok(value)
    }
}

fn render(n: &Node) -> String {
    match &n.value {
        Value::Seq(_) | Value::Map(_) => n.to_json().to_string(),
        _ => n.scalar_to_string().unwrap_or_default(),
    }
}

fn posix_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c.is_ascii_alphanumeric() || "_-.,:/@\n".contains(c)) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod input_name_tests {
    #[test]
    fn names_are_read_from_input_lexemes_only() {
        assert_eq!(
            super::input_names(
                "$[[ inputs.a ]] == 'x' && $[[inputs.b_2]] || $[[ inputs.a ]] == $[[ inputs.c-d ]] $[[ x.y ]]"
            ),
            ["a", "b_2"]
        );
    }
}

/// A component as its template sees it through `$[[ component.* ]]` (declared in the
/// template's `spec:component`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ComponentInfo {
    /// The component's name (`templates/<name>.yml`).
    pub name: String,
    /// The commit the template was read from.
    pub sha: Option<String>,
    /// The version as written after `@`.
    pub reference: Option<String>,
    /// The catalog release the reference resolves to; `None` without a CI/CD catalog (as
    /// GitLab's for a SHA, a branch or a project that is no catalog resource).
    pub version: Option<String>,
}
