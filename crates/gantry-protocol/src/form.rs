//! Form bodies as GitLab's Grape reads them: `application/x-www-form-urlencoded` (and the
//! fields of a multipart form) parsed with Rack's nested-key rules, then decoded into the
//! same types as a JSON body, with Grape's coercion of text into booleans and integers.
//!
//! Rack's rules (`Rack::QueryParser#normalize_params`): `a=1` sets `a` (the last one
//! wins), `a[]=1&a[]=2` is a list, `info[name]=x` a nested object, `v[][key]=A&v[][value]=1`
//! a list of objects (a new object starts when its key repeats). So a runner may register
//! with `token=…&tag_list=a,b&run_untagged=false&info[name]=my-runner`, and the coordinator
//! reads it as the JSON `{"token": …, "tag_list": "a,b", "run_untagged": false, "info":
//! {"name": "my-runner"}}`.
//!
//! Every value of a form is text; a field's type decides how it is read: `true`/`1`/`yes`
//! for a boolean (dry-types' words, [`crate::grape`]), digits for an integer, and an empty
//! value is "not given" for an optional field, as dry-types' `Params` types read it.
//!
//! Limits: keys nest at most [`MAX_DEPTH`] levels (Rack's default is 100; no form this
//! API reads nests past 3), a list of objects or a repeated key grows no further than the
//! body's size, which the HTTP layer bounds. No input panics.

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};

use crate::ProtocolError;
use crate::grape;

/// Keys nest at most this deep (`a[b][c]` is 3).
pub const MAX_DEPTH: usize = 32;

/// A parsed form: text leaves, lists and objects (in the order keys first appear).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Text(String),
    List(Vec<Node>),
    Map(Vec<(String, Node)>),
}

impl Node {
    fn entry(entries: &[(String, Node)], key: &str) -> Option<usize> {
        entries.iter().position(|(k, _)| k == key)
    }
}

/// Decodes a URL-encoded form body into `T` (see the module docs); a value that does not
/// fit its field is a [`ProtocolError::Form`] naming the key (`info[features][shared]`).
pub fn parse_form<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProtocolError> {
    let pairs = split_pairs(body);
    from_pairs(std::any::type_name::<T>(), &pairs)
}

/// Decodes `(key, value)` pairs (a multipart form's text fields, in order) into `T`, with
/// the same nesting and coercion as [`parse_form`].
pub fn parse_form_pairs<T: DeserializeOwned>(
    pairs: &[(String, String)],
) -> Result<T, ProtocolError> {
    from_pairs(std::any::type_name::<T>(), pairs)
}

fn from_pairs<T: DeserializeOwned>(
    type_name: &'static str,
    pairs: &[(String, String)],
) -> Result<T, ProtocolError> {
    let what = type_name.rsplit("::").next().unwrap_or(type_name);
    let mut root = Vec::new();
    for (key, value) in pairs {
        normalize(&mut root, key, value.clone(), 0).map_err(|message| ProtocolError::Form {
            what,
            key: key.clone(),
            message,
        })?;
    }
    let node = Node::Map(root);
    serde_path_to_error::deserialize(&node).map_err(|error| {
        let key = rack_key(&error.path().to_string());
        ProtocolError::Form {
            what,
            key,
            message: error.into_inner().0,
        }
    })
}

/// `a=1&b=x+y&c=%2F` → `[("a","1"), ("b","x y"), ("c","/")]`; empty pieces are skipped,
/// a piece without `=` has an empty value (as Rack reads them).
fn split_pairs(body: &[u8]) -> Vec<(String, String)> {
    body.split(|b| *b == b'&' || *b == b';')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (key, value) = match piece.iter().position(|b| *b == b'=') {
                Some(at) => (&piece[..at], &piece[at + 1..]),
                None => (piece, &b""[..]),
            };
            (unescape(key), unescape(value))
        })
        .filter(|(key, _)| !key.is_empty())
        .collect()
}

/// Form unescaping: `+` is a space, `%XX` a byte; a `%` not followed by two hex digits
/// stays as it is. Bytes that are not UTF-8 become U+FFFD.
fn unescape(text: &[u8]) -> String {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let pair = text
                    .get(i + 1)
                    .and_then(|h| hex(*h))
                    .zip(text.get(i + 2).and_then(|l| hex(*l)));
                if let Some((h, l)) = pair {
                    out.push(h * 16 + l);
                    i += 2;
                } else {
                    out.push(b'%');
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Rack's `normalize_params`: puts `value` at `name` (`a`, `a[]`, `a[b]`, `a[][b]`, …)
/// into `entries`.
fn normalize(
    entries: &mut Vec<(String, Node)>,
    name: &str,
    value: String,
    depth: usize,
) -> Result<(), String> {
    if depth >= MAX_DEPTH {
        return Err(format!("keys nest at most {MAX_DEPTH} levels deep"));
    }
    // Rack: `/\A[\[\]]*([^\[\]]+)\]*/`: the first segment, then what follows it.
    let trimmed = name.trim_start_matches(['[', ']']);
    let end = trimmed.find(['[', ']']).unwrap_or(trimmed.len());
    let key = &trimmed[..end];
    let after = trimmed[end..].trim_start_matches(']');
    if key.is_empty() {
        return Ok(());
    }
    if after.is_empty() || after == "[" {
        match Node::entry(entries, key) {
            Some(at) => entries[at].1 = Node::Text(value),
            None => entries.push((key.to_owned(), Node::Text(value))),
        }
        return Ok(());
    }
    if after == "[]" {
        let at = ensure(entries, key, || Node::List(Vec::new()));
        let Node::List(items) = &mut entries[at].1 else {
            return Err(format!(
                "`{key}` is given both as a list and as a value or object"
            ));
        };
        items.push(Node::Text(value));
        return Ok(());
    }
    if let Some(rest) = after.strip_prefix("[]") {
        // `a[][b]`: a list of objects. A simple `[b]` names a key of the last object;
        // anything deeper (`[b][c]`) is normalized as a name of its own.
        let child = rest
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .filter(|c| !c.is_empty() && !c.contains(['[', ']']))
            .unwrap_or(rest);
        let at = ensure(entries, key, || Node::List(Vec::new()));
        let Node::List(items) = &mut entries[at].1 else {
            return Err(format!(
                "`{key}` is given both as a list and as a value or object"
            ));
        };
        let reuse = matches!(items.last(), Some(Node::Map(last)) if !has_path(last, child));
        if !reuse {
            items.push(Node::Map(Vec::new()));
        }
        let Some(Node::Map(last)) = items.last_mut() else {
            return Err(format!("`{key}[]` mixes values and objects"));
        };
        return normalize(last, child, value, depth + 1);
    }
    // `a[b]…`: an object, and `[b]…` a name inside it.
    let at = ensure(entries, key, || Node::Map(Vec::new()));
    let Node::Map(inner) = &mut entries[at].1 else {
        return Err(format!(
            "`{key}` is given both as an object and as a value or list"
        ));
    };
    normalize(inner, after, value, depth + 1)
}

/// Whether the object has a value at `name` (`b`, or `b][c` / `[b][c]` for a nested one),
/// Rack's `params_hash_has_key?`.
fn has_path(entries: &[(String, Node)], name: &str) -> bool {
    let mut current = entries;
    let mut segments = name.split(['[', ']']).filter(|s| !s.is_empty()).peekable();
    while let Some(segment) = segments.next() {
        match Node::entry(current, segment).map(|at| &current[at].1) {
            None => return false,
            Some(Node::Map(inner)) => current = inner,
            Some(_) => return segments.peek().is_none(),
        }
    }
    true
}

fn ensure(entries: &mut Vec<(String, Node)>, key: &str, make: impl FnOnce() -> Node) -> usize {
    match Node::entry(entries, key) {
        Some(at) => at,
        None => {
            entries.push((key.to_owned(), make()));
            entries.len() - 1
        }
    }
}

/// serde_path_to_error's `info.features.shared` → `info[features][shared]`.
fn rack_key(path: &str) -> String {
    let mut segments = path.split('.').filter(|s| !s.is_empty() && *s != "?");
    let Some(first) = segments.next() else {
        return ".".to_owned();
    };
    let mut key = first.to_owned();
    for segment in segments {
        key.push('[');
        key.push_str(segment);
        key.push(']');
    }
    key
}

/// A decoding error's message.
#[derive(Debug)]
struct FormError(String);

impl std::fmt::Display for FormError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormError {}

impl de::Error for FormError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        FormError(msg.to_string())
    }
}

fn invalid_text<T>(text: &str, expected: &str) -> Result<T, FormError> {
    Err(FormError(format!("`{text}` is not {expected}")))
}

macro_rules! integer {
    ($method:ident, $visit:ident, $ty:ty) => {
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
            match self {
                Node::Text(text) => match text.trim().parse::<$ty>() {
                    Ok(n) => visitor.$visit(n),
                    Err(_) => invalid_text(text, "an integer"),
                },
                other => other.deserialize_any(visitor),
            }
        }
    };
}

impl<'de> Deserializer<'de> for &'de Node {
    type Error = FormError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        match self {
            Node::Text(text) => visitor.visit_borrowed_str(text),
            Node::List(items) => visitor.visit_seq(Items(items.iter())),
            Node::Map(entries) => visitor.visit_map(Entries {
                entries: entries.iter(),
                value: None,
            }),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        match self {
            Node::Text(text) => match grape::bool_word(text) {
                Some(b) => visitor.visit_bool(b),
                None => invalid_text(text, grape::BOOL_EXPECTED),
            },
            other => other.deserialize_any(visitor),
        }
    }

    integer!(deserialize_i8, visit_i8, i8);
    integer!(deserialize_i16, visit_i16, i16);
    integer!(deserialize_i32, visit_i32, i32);
    integer!(deserialize_i64, visit_i64, i64);
    integer!(deserialize_u8, visit_u8, u8);
    integer!(deserialize_u16, visit_u16, u16);
    integer!(deserialize_u32, visit_u32, u32);
    integer!(deserialize_u64, visit_u64, u64);

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        match self {
            Node::Text(text) => match text.trim().parse::<f64>() {
                Ok(n) => visitor.visit_f64(n),
                Err(_) => invalid_text(text, "a number"),
            },
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        match self {
            // dry-types' `Params` types read an empty value as not given.
            Node::Text(text) if text.is_empty() => visitor.visit_none(),
            other => visitor.visit_some(other),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, FormError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        match self {
            // One value where a list is expected is a list of one.
            Node::Text(_) => visitor.visit_seq(Items(std::slice::from_ref(self).iter())),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        match self {
            Node::Text(text) if text.is_empty() => visitor.visit_map(Entries {
                entries: [].iter(),
                value: None,
            }),
            other => other.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, FormError> {
        match self {
            Node::Text(text) => visitor.visit_enum(text.as_str().into_deserializer()),
            _ => Err(FormError(
                "expected a value, not a list or object".to_owned(),
            )),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, FormError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit_struct tuple tuple_struct identifier
    }
}

struct Items<'de>(std::slice::Iter<'de, Node>);

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = FormError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, FormError> {
        self.0.next().map(|node| seed.deserialize(node)).transpose()
    }
}

struct Entries<'de> {
    entries: std::slice::Iter<'de, (String, Node)>,
    value: Option<&'de Node>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = FormError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, FormError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(key.as_str().into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, FormError> {
        match self.value.take() {
            Some(node) => seed.deserialize(node),
            None => Err(FormError("a value without a key".to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registration::RegisterRunnerRequest;
    use crate::{Feature, JobRequest, UpdateJobRequest};

    fn tree(body: &str) -> Node {
        let mut root = Vec::new();
        for (k, v) in split_pairs(body.as_bytes()) {
            normalize(&mut root, &k, v, 0).unwrap();
        }
        Node::Map(root)
    }

    fn text(s: &str) -> Node {
        Node::Text(s.to_owned())
    }

    fn map(entries: &[(&str, Node)]) -> Node {
        Node::Map(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn nests_keys_as_rack_does() {
        assert_eq!(
            tree("a=1&a=2&b[]=x&b[]=y&c[d][e]=z&f=a+b%2Fc%zz"),
            map(&[
                ("a", text("2")),
                ("b", Node::List(vec![text("x"), text("y")])),
                ("c", map(&[("d", map(&[("e", text("z"))]))])),
                ("f", text("a b/c%zz")),
            ])
        );
        // A list of objects: a new object starts when its key repeats.
        assert_eq!(
            tree("v[][key]=A&v[][value]=1&v[][key]=B&v[][value]=2"),
            map(&[(
                "v",
                Node::List(vec![
                    map(&[("key", text("A")), ("value", text("1"))]),
                    map(&[("key", text("B")), ("value", text("2"))]),
                ])
            )])
        );
        let mut root = Vec::new();
        normalize(&mut root, "a", "1".into(), 0).unwrap();
        assert!(normalize(&mut root, "a[b]", "2".into(), 0).is_err());
        let deep = format!("a{}", "[b]".repeat(40));
        let e = parse_form::<RegisterRunnerRequest>(format!("{deep}=1").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("nest at most"), "{e}");
    }

    #[test]
    fn registers_with_a_form_as_grape_reads_it() {
        let req: RegisterRunnerRequest = parse_form(
            b"token=glrt-x&description=my+runner&tag_list=a,b&run_untagged=False&locked=0\
              &maximum_timeout=3600&access_level=ref_protected&info[name]=py&info[features][shared]=true",
        )
        .unwrap();
        assert_eq!(req.token, "glrt-x");
        assert_eq!(req.description, "my runner");
        assert_eq!(req.tag_list.0, ["a", "b"]);
        assert_eq!(req.run_untagged, Some(false));
        assert_eq!(req.locked, Some(false));
        assert_eq!(req.maximum_timeout, Some(3600));
        assert_eq!(req.info.name, "py");
        assert!(req.info.features.has(Feature::Shared));
        // Tags as a list (`tag_list[]=`), and an empty value is not given.
        let req: RegisterRunnerRequest =
            parse_form(b"token=t&tag_list[]=a&tag_list[]=b&paused=&maximum_timeout=").unwrap();
        assert_eq!(req.tag_list.0, ["a", "b"]);
        assert_eq!(req.paused, None);
        assert_eq!(req.maximum_timeout, None);
    }

    #[test]
    fn job_bodies_decode_from_forms() {
        let req: JobRequest =
            parse_form(b"token=t&info[features][trace_checksum]=1&last_update=abc").unwrap();
        assert!(req.info.features.has(Feature::TraceChecksum));
        assert_eq!(req.last_update, "abc");
        let req: UpdateJobRequest =
            parse_form(b"token=t&state=failed&exit_code=3&output[checksum]=crc32:0000abcd")
                .unwrap();
        assert_eq!(req.exit_code, 3);
        assert_eq!(req.trace_checksum(), Some("crc32:0000abcd"));
        let pairs = [("token".to_owned(), "t".to_owned())];
        let req: JobRequest = parse_form_pairs(&pairs).unwrap();
        assert_eq!(req.token, "t");
    }

    #[test]
    fn a_bad_value_names_its_form_key() {
        let e = parse_form::<RegisterRunnerRequest>(b"token=t&info[features][shared]=maybe")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("decode RegisterRunnerRequest: form parameter `info[features][shared]`: `maybe` is not a boolean"),
            "{e}"
        );
        let e = parse_form::<UpdateJobRequest>(b"token=t&exit_code=x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`exit_code`: `x` is not an integer"), "{e}");
        let e = parse_form::<RegisterRunnerRequest>(b"token=t&access_level=sometimes")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`access_level`"), "{e}");
    }

    #[test]
    fn no_input_panics() {
        for body in [
            &b"&&;=&=x&[]=1&[a]=2&a[=3&a]=4&%=%&%f=%fg"[..],
            b"a[][]=1&a[][b][c]=2&a[][b][c]=3",
            b"\xff\xfe=\x00",
            b"a[b][]=1&a[b][c]=2",
        ] {
            let _ = parse_form::<RegisterRunnerRequest>(body);
            let _ = parse_form::<UpdateJobRequest>(body);
        }
    }
}
