//! A job's `inputs:` (GitLab 18.10 job inputs, `Entry::JobInput` and the job's
//! `validate_job_inputs!`): each input's type (`string` by default, `number`, `boolean`,
//! `array`), its required `default`, `options`, `regex` and `description`. The runner
//! interpolates `${{ job.inputs.NAME }}` with them (not this crate: GitLab's
//! configuration never reads `${{ }}`).
//!
//! GitLab validates in two passes with its own messages, and lower-cases each line:
//! first each input's entry (`jobs:J:inputs:N …`); then, when every entry is valid,
//! each default against its type, options and regex (``jobs:J inputs `n`: …``), as
//! `Ci::Inputs::Builder` checks a provided value. Defaults given as text for a
//! number, boolean or array input (`default: "5"`) pass as GitLab parses them as JSON;
//! Gantry stores the parsed value, so the runner gets the declared type.

use crate::model::{JobInput, JobInputType};
use crate::validate::{Cx, join};
use crate::yaml::{Node, Value};

/// GitLab's limits: inputs per job, options per input.
const MAX_INPUTS: usize = 50;
const MAX_OPTIONS: usize = 50;
const KEYS: [&str; 5] = ["default", "description", "options", "regex", "type"];

/// `inputs:` of job `path` (`jobs:NAME`): the inputs in declaration order, or `None`
/// after reporting what is wrong.
pub(crate) fn job_inputs(node: &Node, path: &str, cx: &mut Cx) -> Option<Vec<JobInput>> {
    let ipath = join(path, "inputs");
    let map = cx.map(node, &ipath)?;
    let mut parsed = Vec::new();
    let mut ok = true;
    for (name, def) in map.iter() {
        match entry(name, def, &join(&ipath, name), cx) {
            Some(input) => parsed.push((input, def.pos)),
            None => ok = false,
        }
    }
    if !ok {
        return None;
    }
    if parsed.len() > MAX_INPUTS {
        cx.push(
            format!("{path} inputs has too many entries (maximum {MAX_INPUTS})"),
            node.pos,
        );
        return None;
    }
    let mut inputs = Vec::new();
    for (mut input, pos) in parsed {
        let errors = check_default(&mut input);
        if errors.is_empty() {
            inputs.push(input);
        } else {
            ok = false;
            for e in errors {
                cx.push(format!("{path} inputs {e}"), pos);
            }
        }
    }
    ok.then_some(inputs)
}

/// Pass A: one input's entry.
fn entry(name: &str, def: &Node, path: &str, cx: &mut Cx) -> Option<JobInput> {
    let empty = crate::yaml::Map::new();
    let map = match &def.value {
        Value::Map(m) => m,
        // `name:` with no value is an empty hash to GitLab: it lacks its default.
        Value::Null => &empty,
        _ => {
            cx.config(path, "should be a hash", def.pos);
            return None;
        }
    };
    if !cx.unknown_keys(map, &KEYS, path, def.pos) {
        return None;
    }
    let default = match map.get("default") {
        Some(d) if !matches!(d.value, Value::Null) => d.to_json(),
        _ => {
            cx.push(format!("{path} must have a default value"), def.pos);
            return None;
        }
    };
    let kind = match map.get("type") {
        None => JobInputType::String,
        Some(t) => match t.as_str() {
            Some("string") => JobInputType::String,
            Some("number") => JobInputType::Number,
            Some("boolean") => JobInputType::Boolean,
            Some("array") => JobInputType::Array,
            _ => {
                cx.push(
                    format!(
                        "{path} input type unknown value: {}",
                        crate::yaml::compact_json(t)
                    ),
                    t.pos,
                );
                return None;
            }
        },
    };
    let options = match map.get("options") {
        None => None,
        Some(o) => match o.as_seq() {
            Some(items) if items.len() > MAX_OPTIONS => {
                cx.config(
                    path,
                    format!("cannot define more than {MAX_OPTIONS} options"),
                    o.pos,
                );
                return None;
            }
            Some(items) => Some(items.iter().map(Node::to_json).collect()),
            None => {
                cx.push(format!("{path} input options should be an array"), o.pos);
                return None;
            }
        },
    };
    let regex = match map.get("regex") {
        None => None,
        Some(r) => match r.as_str() {
            Some(r) => Some(r.to_owned()),
            None => {
                cx.push(format!("{path} input regex should be a string"), r.pos);
                return None;
            }
        },
    };
    let description = match map.get("description").map(|d| &d.value) {
        None | Some(Value::Null) => None,
        Some(Value::Str(s)) => Some(s.clone()),
        Some(Value::Int(i)) => Some(i.to_string()),
        Some(_) => {
            cx.push(
                format!("{path} input description must be an alphanumeric string"),
                def.pos,
            );
            return None;
        }
    };
    Some(JobInput {
        name: name.to_owned(),
        kind,
        default,
        options,
        regex,
        description,
    })
}

/// Pass B: the default against the input's type, options and regex (every problem,
/// in GitLab's order); a default given as JSON text is replaced by its value.
fn check_default(input: &mut JobInput) -> Vec<String> {
    let name = input.name.clone();
    let mut errors = Vec::new();
    match coerce(input.kind, &input.default) {
        Ok(value) => input.default = value,
        Err(kind) => errors.push(format!("`{name}`: default value is not {kind}")),
    }
    if let Some(options) = &input.options {
        match input.kind {
            JobInputType::String => {
                let value = text(&input.default);
                if !options.iter().any(|o| text(o) == value) {
                    errors.push(format!(
                        "`{name}`: `{value}` cannot be used because it is not in the list of allowed options"
                    ));
                }
            }
            JobInputType::Number => {
                if !options.iter().any(|o| same_number(o, &input.default)) {
                    errors.push(format!(
                        "`{name}`: `{}` cannot be used because it is not in the list of the allowed options",
                        text(&input.default)
                    ));
                }
            }
            JobInputType::Boolean | JobInputType::Array => errors.push(format!(
                "`{name}`: options can only be used with string and number inputs"
            )),
        }
    }
    if let Some(pattern) = &input.regex {
        if input.kind == JobInputType::String {
            match regex::RegexBuilder::new(pattern)
                .size_limit(1 << 20)
                .build()
            {
                Ok(re) if re.is_match(&text(&input.default)) => {}
                Ok(_) => errors.push(format!(
                    "`{name}`: default value does not match required regex pattern"
                )),
                Err(_) => errors.push(format!("`{name}`: invalid regular expression")),
            }
        } else {
            errors.push(format!(
                "`{name}`: regex validation can only be used with string inputs"
            ));
        }
    }
    errors
}

/// A value as an input of `kind` takes it: strings take any scalar as its text; the
/// other types take their JSON value, or text that parses as one (GitLab's
/// `Gitlab::Json.parse(value.to_s)`). `Err`: the type's name with its article.
pub fn coerce(
    kind: JobInputType,
    value: &serde_json::Value,
) -> Result<serde_json::Value, &'static str> {
    use serde_json::Value as J;
    let parsed = match value {
        J::String(s) if kind != JobInputType::String => {
            serde_json::from_str::<J>(s.trim()).unwrap_or_else(|_| value.clone())
        }
        other => other.clone(),
    };
    match (kind, &parsed) {
        (JobInputType::String, J::String(_)) => Ok(parsed),
        (JobInputType::String, J::Number(_) | J::Bool(_)) => Ok(J::String(text(&parsed))),
        (JobInputType::String, _) => Err("a string"),
        (JobInputType::Number, J::Number(_)) => Ok(parsed),
        (JobInputType::Number, _) => Err("a number"),
        (JobInputType::Boolean, J::Bool(_)) => Ok(parsed),
        (JobInputType::Boolean, _) => Err("a boolean"),
        (JobInputType::Array, J::Array(_)) => Ok(parsed),
        (JobInputType::Array, _) => Err("an array"),
    }
}

/// A scalar's text (`to_s`); other values as compact JSON.
fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn same_number(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}
