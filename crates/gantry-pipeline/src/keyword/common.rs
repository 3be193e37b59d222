//! Small checks shared by several keyword validators: Rails' numericality and presence
//! rules, GitLab's `key` and environment-name formats, and the wording of the JSON-schema
//! errors GitLab reports for `image:docker`-style options.

use crate::validate::Cx;
use crate::yaml::{KeyKind, Map, Node, Pos, Value};

/// Rails `numericality: { only_integer: true }`: the integer, or the Rails message.
/// Strings that spell an integer are accepted, as Rails casts them.
pub(super) fn integer(node: &Node) -> Result<i64, &'static str> {
    match &node.value {
        Value::Int(i) => Ok(*i),
        Value::Float(f) if f.is_finite() => Err("must be an integer"),
        Value::Str(s) => {
            let t = s.trim();
            let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                t.parse::<i64>().map_err(|_| "is not a number")
            } else if t.parse::<f64>().is_ok_and(f64::is_finite) {
                Err("must be an integer")
            } else {
                Err("is not a number")
            }
        }
        _ => Err("is not a number"),
    }
}

/// Numericality with an inclusive range, reported as `<path> <attr> <message>` (attr
/// `config` for the node itself). Returns the value when every check passes.
pub(super) fn int_in_range(
    node: &Node,
    path: &str,
    attr: &str,
    min: i64,
    max: i64,
    cx: &mut Cx,
) -> Option<i64> {
    match integer(node) {
        Ok(i) => {
            let mut ok = true;
            if i < min {
                cx.attr(
                    path,
                    attr,
                    format!("must be greater than or equal to {min}"),
                    node.pos,
                );
                ok = false;
            }
            if i > max {
                cx.attr(
                    path,
                    attr,
                    format!("must be less than or equal to {max}"),
                    node.pos,
                );
                ok = false;
            }
            ok.then_some(i)
        }
        Err(msg) => {
            cx.attr(path, attr, msg, node.pos);
            None
        }
    }
}

/// Rails `presence`: not blank.
pub(super) fn present(node: Option<&Node>) -> bool {
    node.is_some_and(|n| !n.is_blank())
}

/// An optional string attribute (`validates :x, type: String, allow_nil: true`).
/// `Ok(None)` when absent or null; `Err(())` after reporting `<path> <key> should be a string`.
pub(super) fn opt_string(
    map: &Map,
    key: &str,
    path: &str,
    cx: &mut Cx,
) -> Result<Option<String>, ()> {
    match map.get(key) {
        None => Ok(None),
        Some(n) => match &n.value {
            Value::Null => Ok(None),
            Value::Str(s) => Ok(Some(s.clone())),
            _ => {
                cx.attr(path, key, "should be a string", n.pos);
                Err(())
            }
        },
    }
}

/// An optional boolean attribute (`validates :x, boolean: true, allow_nil: true`).
pub(super) fn opt_bool(map: &Map, key: &str, path: &str, cx: &mut Cx) -> Result<Option<bool>, ()> {
    match map.get(key) {
        None => Ok(None),
        Some(n) => match &n.value {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(*b)),
            _ => {
                cx.attr(path, key, "should be a boolean value", n.pos);
                Err(())
            }
        },
    }
}

/// A required string attribute: `type: String, presence: true`. Reports both the type and
/// the presence error as Rails does (a missing key fails both).
pub(super) fn required_string(
    map: &Map,
    key: &str,
    path: &str,
    at: Pos,
    cx: &mut Cx,
) -> Option<String> {
    let node = map.get(key);
    let pos = node.map_or(at, |n| n.pos);
    let mut ok = true;
    let s = match node.map(|n| &n.value) {
        Some(Value::Str(s)) => Some(s.clone()),
        _ => {
            cx.attr(path, key, "should be a string", pos);
            ok = false;
            None
        }
    };
    if !present(node) {
        cx.attr(path, key, "can't be blank", pos);
        ok = false;
    }
    if ok { s } else { None }
}

/// GitLab's `ArrayOfStringsOrString` value (string → one-element array).
pub(super) fn string_or_strings(node: &Node) -> Option<Vec<String>> {
    match &node.value {
        Value::Str(s) => Some(vec![s.clone()]),
        _ => crate::validate::string_array(node),
    }
}

/// GitLab's `alphanumeric` check on a mapping key: written as a string or an integer.
/// (Booleans, null and floats written as keys are not.)
pub(super) fn alphanumeric_key(name: &str, kind: KeyKind) -> bool {
    kind == KeyKind::Str || matches!(crate::yaml::psych_plain(name), Value::Int(_))
}

/// GitLab's `KeyValidator` (cache keys and prefixes): after URL-decoding, no `/` and not
/// `.` or `..`. Reports `<path> config <message>`.
pub(super) fn check_cache_key(node: &Node, path: &str, cx: &mut Cx) -> Option<String> {
    let Value::Str(s) = &node.value else {
        cx.config(path, "should be a string or symbol", node.pos);
        return None;
    };
    let decoded = cgi_unescape(s);
    if decoded.contains('/') {
        cx.config(path, "cannot contain the \"/\" character", node.pos);
        None
    } else if decoded == "." || decoded == ".." {
        cx.config(path, "cannot be \".\" or \"..\"", node.pos);
        None
    } else {
        Some(s.clone())
    }
}

/// Ruby's `CGI.unescape`: `+` is a space, `%XX` a byte; malformed escapes stay as written.
pub(super) fn cgi_unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) if hex.is_some_and(|h| h.bytes().all(|c| c.is_ascii_hexdigit())) => {
                        out.push(b);
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `Gitlab::Regex.environment_name_regex` (also used for resource groups): letters,
/// digits, `_ / $ { } . -` and spaces, not starting or ending with `/`.
pub(super) fn valid_environment_name(s: &str) -> bool {
    let allowed = |c: char| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | '$' | '{' | '}' | '.' | ' ' | '-')
    };
    !s.is_empty() && s.chars().all(allowed) && !s.starts_with('/') && !s.ends_with('/')
}

pub(super) const ENVIRONMENT_NAME_MESSAGE: &str = "can contain only letters, digits, '-', '_', '/', '$', '{', '}', '.', and spaces, but it cannot start or end with '/'";

/// A project path as the editor schema checks it (`(?:\S/\S|\$\S+)`, unanchored):
/// `group/project`, `group/sub/project`, or something holding a `$VARIABLE`. Every GitLab
/// project path has a namespace, so anything else fails when the downstream pipeline is
/// created ("project not found").
pub(super) fn plausible_project_path(s: &str) -> bool {
    let chars: Vec<char> = s.chars().collect();
    let slash = chars
        .windows(3)
        .any(|w| !w[0].is_whitespace() && w[1] == '/' && !w[2].is_whitespace());
    let variable = chars
        .windows(2)
        .any(|w| w[0] == '$' && !w[1].is_whitespace());
    slash || variable
}

pub(super) const PROJECT_PATH_MESSAGE: &str =
    "should be a full project path (`group/project`) or contain a variable";

/// `json_schemer`'s pretty location: `root` or `property '/a/b'`.
pub(super) fn pointer_label(pointer: &str) -> String {
    if pointer.is_empty() {
        "root".to_owned()
    } else {
        format!("property '{pointer}'")
    }
}

/// Escape a key for a JSON pointer.
pub(super) fn pointer_join(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// The parent of a colon-joined path (`jobs:build:resource_group` → `jobs:build`).
pub(super) fn parent_path(path: &str) -> Option<&str> {
    path.rsplit_once(':').map(|(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgi_unescape_matches_ruby() {
        assert_eq!(cgi_unescape("a%2Fb"), "a/b");
        assert_eq!(cgi_unescape("a%2fb"), "a/b");
        assert_eq!(cgi_unescape("%2E%2e"), "..");
        assert_eq!(cgi_unescape("a+b"), "a b");
        assert_eq!(cgi_unescape("100%"), "100%");
        assert_eq!(cgi_unescape("%zz%4"), "%zz%4");
        assert_eq!(cgi_unescape("%C3%A9"), "é");
    }

    #[test]
    fn environment_names() {
        assert!(valid_environment_name("review/$CI_COMMIT_REF_NAME"));
        assert!(valid_environment_name("a"));
        assert!(valid_environment_name("${X} y.z-1_2"));
        assert!(!valid_environment_name("/a"));
        assert!(!valid_environment_name("a/"));
        assert!(!valid_environment_name(""));
        assert!(!valid_environment_name("a:b"));
        assert!(!valid_environment_name("é"));
    }

    #[test]
    fn project_paths() {
        for ok in [
            "group/project",
            "group/sub-group/project",
            "$FOO",
            "group/$VAR/project",
            "$.",
        ] {
            assert!(plausible_project_path(ok), "{ok}");
        }
        for bad in ["", "slug", "/slug", "slug/", "slug#", "$", "a / b"] {
            assert!(!plausible_project_path(bad), "{bad}");
        }
    }

    #[test]
    fn integers_like_rails() {
        let n = |v| Node::new(v, Pos::default());
        assert_eq!(integer(&n(Value::Int(3))), Ok(3));
        assert_eq!(integer(&n(Value::Str(" 2 ".into()))), Ok(2));
        assert_eq!(integer(&n(Value::Float(2.0))), Err("must be an integer"));
        assert_eq!(
            integer(&n(Value::Str("2.5".into()))),
            Err("must be an integer")
        );
        assert_eq!(integer(&n(Value::Str("x".into()))), Err("is not a number"));
        assert_eq!(integer(&n(Value::Bool(true))), Err("is not a number"));
    }
}
