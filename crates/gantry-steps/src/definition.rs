//! What a step is: an [`Invocation`] (an item of a `run:` list), and the [`Spec`] and
//! [`Definition`] of a step file (`func.yml`, or the legacy `step.yml`: two YAML documents,
//! the interface then the implementation).
//!
//! Parsing is strict, as the step-runner's (known fields only, names
//! `^[a-zA-Z_][a-zA-Z0-9_]*$`, declared types); every problem is a [`Problem`] naming its
//! JSON pointer (`/run/0/inputs/x`), which [`crate::load`] turns into `file:line:col`.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Value};

/// One problem in a step's text, at a JSON pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `/run/0/name`, empty for the document itself.
    pub pointer: String,
    /// What is wrong and what is expected.
    pub message: String,
}

type Problems = Vec<Problem>;

fn problem(problems: &mut Problems, pointer: &str, message: impl Into<String>) {
    problems.push(Problem {
        pointer: pointer.to_owned(),
        message: message.into(),
    });
}

fn join(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// A name of a step, input, output or variable.
pub fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The type of an input or output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueType {
    String,
    Number,
    Boolean,
    Array,
    Struct,
}

impl ValueType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "string" => Self::String,
            "number" => Self::Number,
            "boolean" => Self::Boolean,
            "array" => Self::Array,
            "struct" => Self::Struct,
            _ => return None,
        })
    }

    /// Whether `v` is of this type.
    pub fn accepts(self, v: &Value) -> bool {
        matches!(
            (self, v),
            (Self::String, Value::String(_))
                | (Self::Number, Value::Number(_))
                | (Self::Boolean, Value::Bool(_))
                | (Self::Array, Value::Array(_))
                | (Self::Struct, Value::Object(_))
        )
    }

    /// `string`, …
    pub fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Array => "array",
            Self::Struct => "struct",
        }
    }
}

/// A declared input or output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Param {
    #[serde(rename = "type")]
    pub ty: ValueType,
    /// Absent: the input is required (the output must be written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub sensitive: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A spec's `outputs`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Outputs {
    Declared(IndexMap<String, Param>),
    /// `outputs: delegate`: the outputs of one child (`run`) or a whole step result in the
    /// output file (`exec`).
    Delegate(DelegateMarker),
}

/// The literal `delegate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DelegateMarker {
    Delegate,
}

impl Default for Outputs {
    fn default() -> Self {
        Self::Declared(IndexMap::new())
    }
}

/// The interface of a step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Spec {
    pub inputs: IndexMap<String, Param>,
    pub outputs: Outputs,
}

/// Where a step comes from, as written (`func:`/`step:`): a string, or `{git: …}` /
/// `{oci: …}`. Resolved at run time, after its expressions are expanded
/// ([`crate::reference`]).
pub type RawReference = Value;

/// What an invocation runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// `func:` / `step:`.
    Func(RawReference),
    /// `script:`: shell text, run by bash (or sh).
    Script(String),
}

/// One item of a `run:` list.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub name: String,
    pub target: Target,
    /// Values as written (expressions expanded when the step runs).
    pub inputs: Map<String, Value>,
    pub env: IndexMap<String, String>,
    /// JSON pointer of the item, for messages.
    pub pointer: String,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// One program, no shell.
    Exec {
        command: Vec<String>,
        work_dir: Option<String>,
    },
    /// A sequence of steps.
    Run {
        steps: Vec<Invocation>,
        /// Declared outputs computed from the children (`outputs:`).
        outputs: Map<String, Value>,
        /// `delegate:`: the child whose outputs are this step's.
        delegate: Option<String>,
    },
}

/// The implementation of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    pub env: IndexMap<String, String>,
    pub body: Body,
}

/// A `run:` list (a job's, or a definition's) into invocations. `pointer` is where the
/// list stands (`""` for a job's list, `/run` in a definition).
pub fn parse_run_list(value: &Value, pointer: &str) -> Result<Vec<Invocation>, Vec<Problem>> {
    let mut problems = Vec::new();
    let steps = run_list(value, pointer, &mut problems);
    if problems.is_empty() {
        Ok(steps)
    } else {
        Err(problems)
    }
}

fn run_list(value: &Value, pointer: &str, problems: &mut Problems) -> Vec<Invocation> {
    let Value::Array(items) = value else {
        problem(problems, pointer, "must be a list of steps");
        return Vec::new();
    };
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = format!("{pointer}/{i}");
        if let Some(step) = invocation(item, &p, problems) {
            if seen.contains(&step.name.as_str()) {
                problem(
                    problems,
                    &join(&p, "name"),
                    format!("step name `{}` is used twice in this list", step.name),
                );
            }
            out.push(step);
        }
        if let Some(Value::String(name)) = item.get("name") {
            seen.push(name);
        }
    }
    out
}

fn invocation(value: &Value, pointer: &str, problems: &mut Problems) -> Option<Invocation> {
    let Value::Object(map) = value else {
        problem(
            problems,
            pointer,
            "a step must be a mapping with `name` and one of `func`, `step` or `script`",
        );
        return None;
    };
    let before = problems.len();
    for key in map.keys() {
        if !["name", "func", "step", "script", "inputs", "env"].contains(&key.as_str()) {
            problem(
                problems,
                &join(pointer, key),
                format!(
                    "unknown key `{key}`; a step has name, func (or step), script, inputs and env"
                ),
            );
        }
    }
    let name = match map.get("name") {
        Some(Value::String(s)) if is_name(s) => s.clone(),
        Some(Value::String(s)) => {
            problem(
                problems,
                &join(pointer, "name"),
                format!("step name {s:?} must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
            );
            String::new()
        }
        Some(_) => {
            problem(
                problems,
                &join(pointer, "name"),
                "step name must be a string",
            );
            String::new()
        }
        None => {
            problem(problems, pointer, "a step needs a `name`");
            String::new()
        }
    };
    let refs: Vec<&str> = ["func", "step"]
        .into_iter()
        .filter(|k| map.contains_key(*k))
        .collect();
    let target = match (refs.as_slice(), map.get("script")) {
        ([], Some(Value::String(s))) if !s.trim().is_empty() => {
            if map.contains_key("inputs") {
                problem(
                    problems,
                    &join(pointer, "inputs"),
                    "a `script` step takes no inputs",
                );
            }
            Some(Target::Script(s.clone()))
        }
        ([], Some(_)) => {
            problem(
                problems,
                &join(pointer, "script"),
                "`script` must be non-empty text",
            );
            None
        }
        ([key], None) => {
            let r = &map[*key];
            if reference_shape(r) {
                Some(Target::Func(r.clone()))
            } else {
                problem(
                    problems,
                    &join(pointer, key),
                    format!(
                        "`{key}` must be a path (./dir), a git reference (host/path@rev), or {{git: {{url, rev, dir, file}}}} / {{oci: {{registry, repository, tag, dir, file}}}}"
                    ),
                );
                None
            }
        }
        _ => {
            problem(
                problems,
                pointer,
                "a step needs exactly one of `func`, `step` or `script`",
            );
            None
        }
    };
    let inputs = match map.get("inputs") {
        None => Map::new(),
        Some(Value::Object(o)) => {
            for k in o.keys().filter(|k| !is_name(k)) {
                problem(
                    problems,
                    &join(&join(pointer, "inputs"), k),
                    format!("input name {k:?} must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
                );
            }
            o.clone()
        }
        Some(_) => {
            problem(
                problems,
                &join(pointer, "inputs"),
                "`inputs` must be a mapping of names to values",
            );
            Map::new()
        }
    };
    let env = env_map(map.get("env"), &join(pointer, "env"), problems);
    let target = target?;
    (problems.len() == before).then(|| Invocation {
        name,
        target,
        inputs,
        env,
        pointer: pointer.to_owned(),
    })
}

fn reference_shape(r: &Value) -> bool {
    match r {
        Value::String(s) => !s.trim().is_empty(),
        Value::Object(o) if o.len() == 1 => {
            let (kind, body) = o
                .iter()
                .next()
                .map(|(k, v)| (k.as_str(), v))
                .unwrap_or(("", &Value::Null));
            let (required, allowed): (&[&str], &[&str]) = match kind {
                "git" => (&["url", "rev"], &["url", "rev", "dir", "file"]),
                "oci" => (
                    &["registry", "repository", "tag"],
                    &["registry", "repository", "tag", "dir", "file"],
                ),
                _ => return false,
            };
            let Value::Object(fields) = body else {
                return false;
            };
            required.iter().all(|k| fields.contains_key(*k))
                && fields
                    .iter()
                    .all(|(k, v)| allowed.contains(&k.as_str()) && v.is_string())
        }
        _ => false,
    }
}

fn env_map(
    value: Option<&Value>,
    pointer: &str,
    problems: &mut Problems,
) -> IndexMap<String, String> {
    let mut out = IndexMap::new();
    match value {
        None => {}
        Some(Value::Object(o)) => {
            for (k, v) in o {
                let p = join(pointer, k);
                if !is_env_name(k) {
                    problem(
                        problems,
                        &p,
                        format!(
                            "variable name {k:?} must be letters, digits and _ (not starting with a digit)"
                        ),
                    );
                }
                match v {
                    Value::String(s) => {
                        out.insert(k.clone(), s.clone());
                    }
                    Value::Number(_) | Value::Bool(_) => {
                        out.insert(k.clone(), v.to_string());
                    }
                    _ => problem(problems, &p, "an env value must be text"),
                }
            }
        }
        Some(_) => problem(
            problems,
            pointer,
            "`env` must be a mapping of names to text",
        ),
    }
    out
}

fn is_env_name(s: &str) -> bool {
    is_name(s)
}

/// The spec document (`spec:` with `inputs` and `outputs`, or an empty `spec:`).
pub fn parse_spec(value: &Value) -> Result<Spec, Vec<Problem>> {
    let mut problems = Vec::new();
    let spec = spec(value, &mut problems);
    if problems.is_empty() {
        Ok(spec)
    } else {
        Err(problems)
    }
}

fn spec(value: &Value, problems: &mut Problems) -> Spec {
    let mut out = Spec::default();
    let Value::Object(doc) = value else {
        problem(
            problems,
            "",
            "the first document must be `spec:` (the step's inputs and outputs)",
        );
        return out;
    };
    for k in doc.keys().filter(|k| *k != "spec") {
        problem(
            problems,
            &join("", k),
            format!("unknown key `{k}` in the spec document; it holds only `spec:`"),
        );
    }
    let body = match doc.get("spec") {
        None => {
            problem(
                problems,
                "",
                "the first document must be `spec:` (the step's inputs and outputs)",
            );
            return out;
        }
        Some(Value::Null) => return out,
        Some(Value::Object(o)) => o,
        Some(_) => {
            problem(
                problems,
                "/spec",
                "`spec` must be a mapping with `inputs` and `outputs`",
            );
            return out;
        }
    };
    for k in body
        .keys()
        .filter(|k| !["inputs", "outputs"].contains(&k.as_str()))
    {
        problem(
            problems,
            &join("/spec", k),
            format!("unknown key `{k}`; a spec has inputs and outputs"),
        );
    }
    if let Some(inputs) = body.get("inputs") {
        out.inputs = params(inputs, "/spec/inputs", problems);
    }
    match body.get("outputs") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "delegate" => {
            out.outputs = Outputs::Delegate(DelegateMarker::Delegate)
        }
        Some(o @ Value::Object(_)) => {
            out.outputs = Outputs::Declared(params(o, "/spec/outputs", problems))
        }
        Some(_) => problem(
            problems,
            "/spec/outputs",
            "`outputs` must be a mapping of declared outputs or `delegate`",
        ),
    }
    out
}

fn params(value: &Value, pointer: &str, problems: &mut Problems) -> IndexMap<String, Param> {
    let mut out = IndexMap::new();
    let Value::Object(o) = value else {
        if !value.is_null() {
            problem(
                problems,
                pointer,
                "must be a mapping of names to {type, default, sensitive}",
            );
        }
        return out;
    };
    for (name, decl) in o {
        let p = join(pointer, name);
        if !is_name(name) {
            problem(
                problems,
                &p,
                format!("name {name:?} must match ^[a-zA-Z_][a-zA-Z0-9_]*$"),
            );
        }
        let Value::Object(fields) = decl else {
            problem(
                problems,
                &p,
                "must be a mapping with `type` (string, number, boolean, array or struct)",
            );
            continue;
        };
        for k in fields
            .keys()
            .filter(|k| !["type", "default", "sensitive", "description"].contains(&k.as_str()))
        {
            problem(
                problems,
                &join(&p, k),
                format!("unknown key `{k}`; expected type, default, sensitive or description"),
            );
        }
        let ty = match fields.get("type") {
            Some(Value::String(t)) => match ValueType::parse(t) {
                Some(ty) => ty,
                None => {
                    problem(
                        problems,
                        &join(&p, "type"),
                        format!(
                            "unknown type {t:?}; expected string, number, boolean, array or struct"
                        ),
                    );
                    continue;
                }
            },
            _ => {
                problem(
                    problems,
                    &p,
                    "`type` is required: string, number, boolean, array or struct",
                );
                continue;
            }
        };
        let default = fields.get("default").cloned();
        if let Some(d) = &default {
            if !ty.accepts(d) {
                problem(
                    problems,
                    &join(&p, "default"),
                    format!("the default is not a {}", ty.name()),
                );
            }
        }
        let sensitive = match fields.get("sensitive") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                problem(
                    problems,
                    &join(&p, "sensitive"),
                    "`sensitive` must be true or false",
                );
                false
            }
        };
        let description = match fields.get("description") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                problem(
                    problems,
                    &join(&p, "description"),
                    "`description` must be text",
                );
                None
            }
        };
        out.insert(
            name.clone(),
            Param {
                ty,
                default,
                sensitive,
                description,
            },
        );
    }
    out
}

/// The definition document: `exec:` or `run:` (exactly one), `env:`, and for `run:`,
/// `outputs:` or `delegate:`.
pub fn parse_definition(value: &Value, spec: &Spec) -> Result<Definition, Vec<Problem>> {
    let mut problems = Vec::new();
    let def = definition(value, spec, &mut problems);
    match def {
        Some(d) if problems.is_empty() => Ok(d),
        _ => Err(problems),
    }
}

fn definition(value: &Value, spec: &Spec, problems: &mut Problems) -> Option<Definition> {
    let Value::Object(doc) = value else {
        problem(
            problems,
            "",
            "the second document must hold `exec:` or `run:`",
        );
        return None;
    };
    for k in doc.keys() {
        if !["exec", "run", "env", "outputs", "delegate"].contains(&k.as_str()) {
            let hint = if k == "steps" {
                " (renamed `run` in step-runner 0.2)"
            } else {
                ""
            };
            problem(
                problems,
                &join("", k),
                format!(
                    "unknown key `{k}`{hint}; a definition has exec or run, env, outputs and delegate"
                ),
            );
        }
    }
    let env = env_map(doc.get("env"), "/env", problems);
    let body = match (doc.get("exec"), doc.get("run")) {
        (Some(exec), None) => {
            for k in ["outputs", "delegate"]
                .into_iter()
                .filter(|k| doc.contains_key(*k))
            {
                problem(
                    problems,
                    &join("", k),
                    format!(
                        "`{k}` belongs to a `run` definition; an exec step writes its outputs to ${{{{ output_file }}}}"
                    ),
                );
            }
            exec_body(exec, problems)?
        }
        (None, Some(run)) => {
            let steps = run_list(run, "/run", problems);
            let outputs = match doc.get("outputs") {
                None => Map::new(),
                Some(Value::Object(o)) => o.clone(),
                Some(_) => {
                    problem(
                        problems,
                        "/outputs",
                        "`outputs` must map each declared output to a value",
                    );
                    Map::new()
                }
            };
            let delegate = match doc.get("delegate") {
                None => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => {
                    problem(
                        problems,
                        "/delegate",
                        "`delegate` must name a step of `run`",
                    );
                    None
                }
            };
            match (&spec.outputs, &delegate) {
                (Outputs::Delegate(_), None) => problem(
                    problems,
                    "",
                    "the spec says `outputs: delegate`: name the step with `delegate: <step name>`",
                ),
                (Outputs::Declared(_), Some(_)) => problem(
                    problems,
                    "/delegate",
                    "`delegate` needs `outputs: delegate` in the spec",
                ),
                (_, Some(d)) if !steps.iter().any(|s| &s.name == d) => {
                    problem(
                        problems,
                        "/delegate",
                        format!("`delegate: {d}` names no step of `run`"),
                    );
                }
                _ => {}
            }
            if let Outputs::Declared(declared) = &spec.outputs {
                for k in outputs.keys().filter(|k| !declared.contains_key(*k)) {
                    problem(
                        problems,
                        &join("/outputs", k),
                        format!("output `{k}` is not declared in the spec"),
                    );
                }
            }
            Body::Run {
                steps,
                outputs,
                delegate,
            }
        }
        (Some(_), Some(_)) => {
            problem(problems, "", "a definition has `exec` or `run`, not both");
            return None;
        }
        (None, None) => {
            problem(
                problems,
                "",
                "a definition needs `exec:` (one program) or `run:` (a list of steps)",
            );
            return None;
        }
    };
    Some(Definition { env, body })
}

fn exec_body(exec: &Value, problems: &mut Problems) -> Option<Body> {
    let Value::Object(o) = exec else {
        problem(
            problems,
            "/exec",
            "`exec` must be a mapping with `command` (and `work_dir`)",
        );
        return None;
    };
    for k in o
        .keys()
        .filter(|k| !["command", "work_dir"].contains(&k.as_str()))
    {
        problem(
            problems,
            &join("/exec", k),
            format!("unknown key `{k}`; exec has command and work_dir"),
        );
    }
    let command: Vec<String> = match o.get("command") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(_) | Value::Bool(_) => Some(v.to_string()),
                _ => {
                    problem(
                        problems,
                        &format!("/exec/command/{i}"),
                        "an argument must be text",
                    );
                    None
                }
            })
            .collect(),
        _ => {
            problem(
                problems,
                "/exec/command",
                "`command` must be a non-empty list: the program, then its arguments",
            );
            return None;
        }
    };
    let work_dir = match o.get("work_dir") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            problem(problems, "/exec/work_dir", "`work_dir` must be a path");
            None
        }
    };
    Some(Body::Exec { command, work_dir })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(p: Vec<Problem>) -> Vec<String> {
        p.into_iter()
            .map(|p| format!("{}: {}", p.pointer, p.message))
            .collect()
    }

    #[test]
    fn run_list_checks() {
        let ok = parse_run_list(&json!([{"name": "a", "script": "echo"}, {"name": "b", "func": "./x", "inputs": {"v": 1}, "env": {"K": "v"}}]), "").unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].target, Target::Func(json!("./x")));
        let bad = parse_run_list(
            &json!([
                {"name": "1a", "script": "x"},
                {"name": "b", "script": "x", "inputs": {}},
                {"name": "c", "func": "./x", "step": "./y"},
                {"name": "d", "func": {"git": {"url": "u"}}},
                {"name": "e", "func": "./x", "when": "always"},
                {"name": "f", "script": "x", "env": {"A": []}},
                {"name": "f", "script": "y"},
            ]),
            "",
        )
        .unwrap_err();
        insta::assert_debug_snapshot!(messages(bad));
    }

    #[test]
    fn spec_and_definition_checks() {
        let spec = parse_spec(&json!({"spec": {"inputs": {"who": {"type": "string", "default": "world"}}, "outputs": {"n": {"type": "number"}}}})).unwrap();
        assert_eq!(spec.inputs["who"].default, Some(json!("world")));
        assert_eq!(parse_spec(&json!({"spec": null})).unwrap(), Spec::default());
        let bad = parse_spec(&json!({"spec": {"inputs": {"a": {"type": "text"}, "b": {"type": "number", "default": "x"}, "c": {}, "d": {"type": "string", "options": []}}, "outputs": 3}})).unwrap_err();
        insta::assert_debug_snapshot!("spec_problems", messages(bad));
        let def = parse_definition(
            &json!({"exec": {"command": ["echo", "${{ inputs.who }}"]}}),
            &spec,
        )
        .unwrap();
        assert!(matches!(def.body, Body::Exec { .. }));
        let bad = parse_definition(
            &json!({"steps": [], "exec": {"command": []}, "outputs": {}}),
            &spec,
        )
        .unwrap_err();
        insta::assert_debug_snapshot!("definition_problems", messages(bad));
        let delegate = parse_spec(&json!({"spec": {"outputs": "delegate"}})).unwrap();
        let bad = parse_definition(
            &json!({"run": [{"name": "a", "script": "x"}], "delegate": "b"}),
            &delegate,
        )
        .unwrap_err();
        assert_eq!(
            messages(bad),
            ["/delegate: `delegate: b` names no step of `run`"]
        );
    }
}
