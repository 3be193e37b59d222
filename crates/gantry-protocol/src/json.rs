//! Decoding JSON bodies with errors that name the field, and the serde helpers that
//! implement the zero-value rules of §0.2.
//!
//! §0.2: both sides MUST ignore unknown fields and MUST treat an absent field and
//! `null` as the zero value. Structs therefore carry `#[serde(default)]` (absent →
//! zero) and [`zero_if_null`] on non-`Option` fields (`null` → zero). Unknown fields
//! are ignored (no `deny_unknown_fields` anywhere). A field of the wrong type is an
//! error that names its JSON path.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crate::ProtocolError;

/// Decodes a JSON body into `T`, naming the JSON path of the first bad field.
///
/// Unknown fields are ignored; trailing data after the value is an error. Never
/// panics: serde_json bounds nesting depth (128), so hostile input yields an error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ProtocolError> {
    decode(short_type_name::<T>(), bytes)
}

pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    bytes: &[u8],
) -> Result<T, ProtocolError> {
    // Tracking the path costs a third of the decoding: a document that decodes needs no
    // path, so only one that does not is read again to name where it fails.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = display_path(&error.path().to_string());
        let inner = error.into_inner();
        json_error(what, path, &inner)
    })?;
    deserializer
        .end()
        .map_err(|error| json_error(what, ".".to_owned(), &error))?;
    Ok(value)
}

/// serde_path_to_error writes `?` for a segment it could not name (a syntax error
/// before the key was read); drop those trailing segments, `.` being the document.
fn display_path(path: &str) -> String {
    let mut path = path;
    while let Some(parent) = path.strip_suffix(".?") {
        path = parent;
    }
    if path == "?" || path.is_empty() {
        ".".to_owned()
    } else {
        path.to_owned()
    }
}

fn json_error(what: &'static str, path: String, error: &serde_json::Error) -> ProtocolError {
    ProtocolError::Json {
        what,
        path,
        line: error.line(),
        column: error.column(),
        message: error.to_string(),
    }
}

fn short_type_name<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    // `alloc::vec::Vec<gantry_protocol::Step>` has no clean short form; only strip the
    // module path of plain names.
    if full.contains('<') {
        return full;
    }
    full.rsplit("::").next().unwrap_or(full)
}

/// `deserialize_with` helper: `null` becomes `T::default()` (absent fields are covered
/// by `#[serde(default)]`).
pub(crate) fn zero_if_null<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// `skip_serializing_if` helper for Go's `omitempty` on booleans.
pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

/// `skip_serializing_if` helper for Go's `omitempty` on integers.
pub(crate) fn is_zero_i64(value: &i64) -> bool {
    *value == 0
}

/// `skip_serializing_if` helper for Go's `omitempty` on sizes.
pub(crate) fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}
