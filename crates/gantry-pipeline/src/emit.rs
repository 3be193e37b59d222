//! YAML text of a JSON value, in block style: the merged configuration the CI Lint API
//! answers with (`merged_yaml`). Strings that a YAML reader would take for something
//! else (a number, a boolean, `null`, an indicator) are double-quoted; multi-line strings
//! are literal blocks where that keeps them exact. What this writes reads back as the
//! same value (tested against [`crate::yaml`]'s reader).
//!
//! The value is `Compiled::merged`, kept only when `Options::keep_merged` asks for it.

use serde_json::Value;

/// The document, starting with `---` and ending with a newline.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::from("---");
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            block(&mut out, value, 0);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            block(&mut out, value, 0);
        }
        scalar_or_empty => {
            out.push(' ');
            inline(&mut out, scalar_or_empty, 0);
            out.push('\n');
        }
    }
    out
}

/// A non-empty mapping or sequence, each line indented by `indent`.
fn block(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(m) => {
            for (key, v) in m {
                out.push_str(&pad);
                out.push_str(&quoted_if_needed(key));
                out.push(':');
                entry(out, v, indent, indent + 2);
            }
        }
        Value::Array(items) => {
            for v in items {
                out.push_str(&pad);
                out.push('-');
                match v {
                    // `- key: value` with the mapping's other keys under the first.
                    Value::Object(m) if !m.is_empty() => {
                        let mut nested = String::new();
                        block(&mut nested, v, indent + 2);
                        out.push(' ');
                        out.push_str(&nested[indent + 2..]);
                    }
                    _ => entry(out, v, indent, indent + 2),
                }
            }
        }
        other => {
            out.push_str(&pad);
            inline(out, other, indent);
            out.push('\n');
        }
    }
}

/// What follows `key:` or `-`: a nested block on the next lines, or a value on this one.
fn entry(out: &mut String, v: &Value, indent: usize, nested: usize) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            block(out, v, nested);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            // A sequence under a key sits at the key's indentation plus two.
            block(out, v, nested);
        }
        _ => {
            out.push(' ');
            inline(out, v, indent);
            out.push('\n');
        }
    }
}

/// A scalar or an empty collection on the current line (`indent`: the line's own, for a
/// literal block's lines).
fn inline(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => string(out, s, indent),
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
    }
}

fn string(out: &mut String, s: &str, indent: usize) {
    if let Some(literal) = literal_block(s, indent) {
        out.push_str(&literal);
        // The caller ends the line; the block ends with its last content line.
        if out.ends_with('\n') {
            out.pop();
        }
        return;
    }
    out.push_str(&quoted_if_needed(s));
}

/// `|-`/`|` and the lines, indented two past `indent`, when that reads back exactly: more
/// than one line, no line starting with a space (it would set the indentation), no
/// trailing spaces or tabs and no control characters.
fn literal_block(s: &str, indent: usize) -> Option<String> {
    let body = s.strip_suffix('\n').unwrap_or(s);
    // The first line with text sets the block's indentation: it may not start with a space.
    let first_text = body.split('\n').find(|l| !l.is_empty());
    if !body.contains('\n')
        || body.ends_with('\n')
        || first_text.is_some_and(|l| l.starts_with([' ', '\t']))
        || s.chars()
            .any(|c| (c.is_control() && c != '\n') || unusual(c))
        || body.split('\n').any(|l| l.ends_with([' ', '\t']))
    {
        return None;
    }
    let pad = " ".repeat(indent + 2);
    let mut text = String::from(if s.ends_with('\n') { "|" } else { "|-" });
    for line in body.split('\n') {
        text.push('\n');
        if !line.is_empty() {
            text.push_str(&pad);
            text.push_str(line);
        }
    }
    text.push('\n');
    Some(text)
}

/// The string as a plain scalar when YAML reads it back as this string, else
/// double-quoted (JSON's escapes are YAML's).
fn quoted_if_needed(s: &str) -> String {
    if plain_is_safe(s) {
        s.to_owned()
    } else {
        // JSON leaves NEL, LS, PS and BOM as they are; libyaml reads the first three as line
        // breaks even inside double quotes (folding them), so they are escaped.
        let json = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned());
        if json.contains(['\u{85}', '\u{2028}', '\u{2029}', '\u{feff}']) {
            json.chars()
                .fold(String::with_capacity(json.len() + 8), |mut out, c| {
                    match c {
                        '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}' => {
                            out.push_str(&format!("\\u{:04x}", u32::from(c)));
                        }
                        c => out.push(c),
                    }
                    out
                })
        } else {
            json
        }
    }
}

/// Characters some YAML readers take for line breaks or a byte-order mark: quoted.
fn unusual(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}')
}

fn plain_is_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if "-?:,[]{}#&*!|>'\"%@`~".contains(first) || first.is_whitespace() {
        return false;
    }
    if s.ends_with([' ', '\t', ':'])
        || s.contains(": ")
        || s.contains(" #")
        || s.chars().any(|c| c.is_control() || unusual(c))
    {
        return false;
    }
    // What our own (Psych's) reader types as something else (`0x1F,` is 31 in YAML 1.1).
    if !matches!(crate::yaml::psych_plain(s), crate::yaml::Value::Str(ref t) if t == s) {
        return false;
    }
    // Words and numbers another YAML 1.1 or 1.2 reader takes for another type.
    let lower = s.to_ascii_lowercase();
    const WORDS: &[&str] = &[
        "null", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", "-.inf", ".nan",
    ];
    if WORDS.contains(&lower.as_str()) {
        return false;
    }
    let looks_numeric = s
        .chars()
        .all(|c| c.is_ascii_digit() || "+-._eExXoObBabcdefABCDEF:".contains(c))
        && s.chars().any(|c| c.is_ascii_digit());
    !looks_numeric
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::to_yaml;
    use crate::yaml::{FileId, Limits, parse_documents};

    fn reads_back(value: &serde_json::Value) -> String {
        let text = to_yaml(value);
        let docs = parse_documents(&text, FileId(0), Limits::default())
            .unwrap_or_else(|e| panic!("{text}\n{e:?}"));
        assert_eq!(docs.len(), 1, "{text}");
        assert_eq!(&docs[0].to_json(), value, "{text}");
        text
    }

    #[test]
    fn a_merged_configuration_reads_back_as_itself() {
        let text = reads_back(&json!({
            "stages": ["build", "test"],
            "variables": {"A": "1", "B": "yes", "C": "", "D": "a: b", "E": "#x", "F": "-", "G": "null", "H": "1e3", "I": "0x1F", "J": " lead", "K": "trail ", "L": "x #y"},
            "build": {
                "stage": "build",
                "script": ["echo \"hi\"", "make -j2", "for f in *; do\n  echo $f\ndone\n", "two\nlines", "tab\there", "[x]", "{y}", "*z", "!t", "|p", ">q", "'s'", "%d", "@u", "`c`"],
                "needs": [{"job": "prepare", "artifacts": false}, {"job": "other", "optional": true, "parallel": {"matrix": [{"OS": ["linux", "mac"]}]}}],
                "retry": 2,
                "allow_failure": {"exit_codes": [137, 255]},
                "timeout": null,
                "cache": [],
                "artifacts": {},
                "coverage": 1.5,
                "interruptible": true
            },
            "deep": {"a": {"b": {"c": [[1, 2], [], [{"d": "e"}]]}}}
        }));
        insta::assert_snapshot!(text);
    }

    /// Strings made of what trips YAML writers: indicators, spaces at either end, line
    /// breaks, quotes, words and numbers of other types, non-ASCII.
    fn tricky_string() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let pieces = prop::sample::select(vec![
            "a", "Z9", " ", "  ", "\t", "\n", "\r\n", ":", ": ", "#", " #", "-", "- ", "?", "[",
            "]", "{", "}", ",", "&", "*", "!", "|", ">", "'", "\"", "%", "@", "`", "~", "yes",
            "No", "null", "true", "1", "0x1F", "1e3", ".5", "é", "✓", "\u{2028}", "\u{85}", "\\",
        ]);
        prop::collection::vec(pieces, 0..8).prop_map(|parts| parts.concat())
    }

    fn tricky_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            tricky_string().prop_map(serde_json::Value::String),
            any::<i32>().prop_map(|n| json!(n)),
            any::<bool>().prop_map(|b| json!(b)),
            Just(serde_json::Value::Null),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(tricky_string(), inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(512))]
        #[test]
        fn any_value_reads_back_as_itself(value in tricky_value()) {
            reads_back(&value);
        }
    }

    #[test]
    fn strings_psych_reads_as_numbers_are_quoted() {
        // Found by the property test: YAML 1.1 integers may hold `,` and `_`.
        for s in ["0x1F,", "1_000", "0b1_0", "0o17", "1,000", "0777"] {
            let text = reads_back(&json!({ s: s }));
            assert!(text.contains(&format!("\"{s}\"")), "{s} is quoted: {text}");
        }
    }

    #[test]
    fn scalars_and_empty_documents() {
        for v in [
            json!({}),
            json!([]),
            json!("text"),
            json!(3),
            json!(null),
            json!(["a"]),
        ] {
            reads_back(&v);
        }
        reads_back(
            &json!({"multi": "a\n\nb\n", "blank_lines": "\n\nx", "crlf": "a\r\nb", "only_newline": "\n", "trailing": "a\nb \n"}),
        );
        reads_back(&json!({
            "indented_after_blank": "\n  indented\nnext",
            "kept_newlines": "a\nb\n\n",
            "separator": "a\u{2028}b\nc",
            "bom": "\u{feff}x",
            "unicode": "héllo\nwörld ✓"
        }));
    }
}
