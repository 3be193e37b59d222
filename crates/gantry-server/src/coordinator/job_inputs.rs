//! Job inputs' values (GitLab 18.10 `inputs:` of a job): the values given when a job is
//! played or retried (`job_inputs` of `POST /jobs/:id/play` and `/retry`), checked as
//! GitLab's `Ci::Inputs::ProcessorService` checks them, and the payload's `inputs` the
//! runner interpolates `${{ job.inputs.NAME }}` with.
//!
//! Stored as the values that differ from their default, of the declared type (a number
//! given as `"3"` is stored as 3): a play of a manual job stores them on the row it
//! starts (`jobs.input_values`, written with the decision, so every replica reads
//! them); a retry's new attempt in its spec (`StoredSpec::input_values`, written with
//! the row) — the values given, or else the previous attempt's.

use gantry_pipeline::{JobInput, JobInputType, coerce_job_input};
use gantry_protocol::payload::input::{InputType, JobInput as PayloadInput, JobInputValue};
use serde_json::{Map, Value};

/// Values given for a job's `inputs`, against their specification: the overrides to
/// store, or GitLab's message (`Unknown input: a`, `` `n` input: provided value is not a
/// number``, …; several joined with `, `). A job without inputs ignores values (as
/// GitLab does).
pub(crate) fn overrides(
    spec: &[JobInput],
    given: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    if spec.is_empty() {
        return Ok(Map::new());
    }
    let unknown: Vec<&str> = given
        .keys()
        .filter(|k| !spec.iter().any(|i| &i.name == *k))
        .map(String::as_str)
        .collect();
    match unknown.as_slice() {
        [] => {}
        [one] => return Err(format!("Unknown input: {one}")),
        many => return Err(format!("Unknown inputs: {}", many.join(", "))),
    }
    let mut errors = Vec::new();
    let mut out = Map::new();
    for input in spec {
        let Some(raw) = given.get(&input.name) else {
            continue;
        };
        match check(input, raw) {
            Ok(value) if value == input.default => {}
            Ok(value) => {
                out.insert(input.name.clone(), value);
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors.join(", "))
    }
}

/// One value against its input: its type (a JSON text accepted for a number, boolean or
/// array), options, regex; every problem, in GitLab's order.
fn check(input: &JobInput, raw: &Value) -> Result<Value, Vec<String>> {
    let name = &input.name;
    let mut errors = Vec::new();
    let value = match coerce_job_input(input.kind, raw) {
        Ok(v) => v,
        Err(kind) => {
            errors.push(format!("`{name}` input: provided value is not {kind}"));
            raw.clone()
        }
    };
    if let Some(options) = &input.options {
        let text = |v: &Value| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let listed = match input.kind {
            JobInputType::Number => options
                .iter()
                .any(|o| o.as_f64().is_some() && o.as_f64() == value.as_f64()),
            _ => options.iter().any(|o| text(o) == text(&value)),
        };
        if !listed {
            errors.push(format!(
                "`{name}` input: `{}` cannot be used because it is not in the list of allowed options",
                text(&value)
            ));
        }
    }
    if let (Some(pattern), Some(text)) = (&input.regex, value.as_str()) {
        match regex::RegexBuilder::new(pattern)
            .size_limit(1 << 20)
            .build()
        {
            Ok(re) if re.is_match(text) => {}
            Ok(_) => errors.push(format!(
                "`{name}` input: provided value does not match required RegEx pattern"
            )),
            Err(_) => errors.push(format!("`{name}` input: invalid regular expression")),
        }
    }
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// The payload's `inputs`: every declared input in order, its stored value or else its
/// default (a stored `false` is kept: GitLab's `||` would lose it).
pub(crate) fn payload(spec: &[JobInput], values: Option<&Map<String, Value>>) -> Vec<PayloadInput> {
    spec.iter()
        .map(|input| PayloadInput {
            key: input.name.clone(),
            value: JobInputValue {
                kind: match input.kind {
                    JobInputType::String => InputType::String,
                    JobInputType::Number => InputType::Number,
                    JobInputType::Boolean => InputType::Boolean,
                    JobInputType::Array => InputType::Array,
                },
                content: values
                    .and_then(|v| v.get(&input.name))
                    .cloned()
                    .unwrap_or_else(|| input.default.clone()),
                sensitive: false,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(name: &str, kind: JobInputType, default: Value) -> JobInput {
        JobInput {
            name: name.to_owned(),
            kind,
            default,
            options: None,
            regex: None,
            description: None,
        }
    }

    fn given(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn values_are_checked_coerced_and_kept_only_when_not_the_default() {
        let mut env = input("env", JobInputType::String, json!("staging"));
        env.options = Some(vec![json!("staging"), json!("production")]);
        let spec = vec![
            env,
            input("replicas", JobInputType::Number, json!(1)),
            input("debug", JobInputType::Boolean, json!(true)),
        ];
        let out = overrides(
            &spec,
            &given(json!({"env": "production", "replicas": "3", "debug": true})),
        )
        .unwrap();
        assert_eq!(
            Value::Object(out.clone()),
            json!({"env": "production", "replicas": 3})
        );
        assert_eq!(
            overrides(&spec, &given(json!({"nope": 1}))).unwrap_err(),
            "Unknown input: nope"
        );
        assert_eq!(
            overrides(&spec, &given(json!({"b": 1, "a": 2}))).unwrap_err(),
            "Unknown inputs: b, a"
        );
        assert_eq!(
            overrides(&spec, &given(json!({"replicas": "many", "env": "dev"}))).unwrap_err(),
            "`env` input: `dev` cannot be used because it is not in the list of allowed options, \
             `replicas` input: provided value is not a number"
        );
        // A job without inputs ignores what it is given.
        assert!(overrides(&[], &given(json!({"x": 1}))).unwrap().is_empty());
        let sent = payload(&spec, Some(&out));
        assert_eq!(
            serde_json::to_value(&sent).unwrap(),
            json!([
                {"key": "env", "value": {"type": "string", "content": "production"}},
                {"key": "replicas", "value": {"type": "number", "content": 3}},
                {"key": "debug", "value": {"type": "boolean", "content": true}}
            ])
        );
    }
}
