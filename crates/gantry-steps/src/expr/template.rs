//! `${{ … }}` in step text: input values, env values, references, `exec.command`,
//! `exec.work_dir`, `outputs`, `script`.
//!
//! A string that is exactly one `${{ expr }}` keeps the expression's type (a number stays
//! a number, an object an object); anything else is text, each expression converted as
//! [`crate::expr::text`] does. `\${{` is a literal `${{`. An unterminated `${{` is an error;
//! a `}}` inside a quoted string of the expression does not end it.

use serde_json::{Map, Value};

use crate::expr::{ExprError, evaluate, text};

enum Piece<'a> {
    Text(String),
    Expr(&'a str),
}

fn pieces(s: &str) -> Result<Vec<Piece<'_>>, ExprError> {
    let mut out = Vec::new();
    let mut literal = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("${{") {
        if rest[..at].ends_with('\\') {
            literal.push_str(&rest[..at - 1]);
            literal.push_str("${{");
            rest = &rest[at + 3..];
            continue;
        }
        literal.push_str(&rest[..at]);
        let body = &rest[at + 3..];
        let end = closing(body).ok_or_else(|| ExprError {
            message: format!("`${{{{` without its `}}}}` in {s:?}"),
        })?;
        if !literal.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut literal)));
        }
        out.push(Piece::Expr(&body[..end]));
        rest = &body[end + 2..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        out.push(Piece::Text(literal));
    }
    Ok(out)
}

/// Where the `}}` closing an expression is, skipping quoted strings.
fn closing(body: &str) -> Option<usize> {
    let bytes = body.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'"' || b == b'\'' => quote = Some(b),
            None if bytes[i..].starts_with(b"}}") => return Some(i),
            None => {}
        }
        i += 1;
    }
    None
}

/// Whether `s` holds an expression (or an escaped opener).
pub fn has_expression(s: &str) -> bool {
    s.contains("${{")
}

/// Expands `s`: one whole expression keeps its type, anything else is text.
pub fn expand(s: &str, cx: &Map<String, Value>) -> Result<Value, ExprError> {
    if !has_expression(s) {
        return Ok(Value::String(s.to_owned()));
    }
    let parts = pieces(s)?;
    if let [Piece::Expr(e)] = parts.as_slice() {
        return evaluate(e, cx);
    }
    join(&parts, cx).map(Value::String)
}

/// Expands `s` to text.
pub fn expand_text(s: &str, cx: &Map<String, Value>) -> Result<String, ExprError> {
    if !has_expression(s) {
        return Ok(s.to_owned());
    }
    join(&pieces(s)?, cx)
}

fn join(parts: &[Piece<'_>], cx: &Map<String, Value>) -> Result<String, ExprError> {
    let mut out = String::new();
    for part in parts {
        match part {
            Piece::Text(t) => out.push_str(t),
            Piece::Expr(e) => out.push_str(&text(&evaluate(e, cx)?)),
        }
    }
    Ok(out)
}

/// Expands every string inside `value` (arrays and objects walked; keys kept).
pub fn expand_value(value: &Value, cx: &Map<String, Value>) -> Result<Value, ExprError> {
    match value {
        Value::String(s) => expand(s, cx),
        Value::Array(items) => items
            .iter()
            .map(|i| expand_value(i, cx))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, v) in o {
                out.insert(k.clone(), expand_value(v, cx)?);
            }
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cx() -> Map<String, Value> {
        let Value::Object(o) = json!({"inputs": {"n": 2, "s": "x", "o": {"a": [1]}}}) else {
            unreachable!()
        };
        o
    }

    #[test]
    fn native_type_only_for_a_whole_expression() {
        assert_eq!(expand("${{ inputs.n }}", &cx()).unwrap(), json!(2));
        assert_eq!(expand("${{inputs.o}}", &cx()).unwrap(), json!({"a": [1]}));
        assert_eq!(expand("n=${{ inputs.n }}", &cx()).unwrap(), json!("n=2"));
        assert_eq!(expand(" ${{ inputs.n }}", &cx()).unwrap(), json!(" 2"));
        assert_eq!(
            expand("${{ inputs.s }}${{ inputs.n }}", &cx()).unwrap(),
            json!("x2")
        );
        assert_eq!(expand("${{ inputs.o }}", &cx()).unwrap(), json!({"a": [1]}));
        assert_eq!(
            expand("o=${{ inputs.o }}", &cx()).unwrap(),
            json!("o={\"a\":[1]}")
        );
        assert_eq!(expand("plain", &cx()).unwrap(), json!("plain"));
    }

    #[test]
    fn escapes_quotes_and_errors() {
        assert_eq!(
            expand("\\${{ inputs.n }}", &cx()).unwrap(),
            json!("${{ inputs.n }}")
        );
        assert_eq!(
            expand("${{ \"}}\" + inputs.s }}", &cx()).unwrap(),
            json!("}}x")
        );
        assert_eq!(
            expand("a ${{ inputs.n", &cx()).unwrap_err().message,
            "`${{` without its `}}` in \"a ${{ inputs.n\""
        );
        assert_eq!(
            expand_value(&json!({"k": ["${{ inputs.n }}", 1]}), &cx()).unwrap(),
            json!({"k": [2, 1]})
        );
    }
}
