//! Error bodies (§0.2): `{"message": "403 Forbidden"}`, or for validation errors
//! `{"message": {"field": ["error 1", "error 2"]}}`. Some Rails endpoints answer
//! `{"error": "..."}` instead (exact shape unconfirmed). The runner reads them only for
//! logging; the coordinator sends them with `Content-Type: application/json`.

use std::collections::BTreeMap;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An error body (§0.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorResponse {
    /// Grape's message: text or per-field validation errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<ErrorMessage>,
    /// The `{"error": "..."}` form of some Rails endpoints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ErrorResponse {
    /// `{"message": "<text>"}`, e.g. `"403 Forbidden"`.
    pub fn message(text: impl Into<String>) -> Self {
        Self {
            message: Some(ErrorMessage::Text(text.into())),
            error: None,
        }
    }
}

/// The `message` of an [`ErrorResponse`]: a string or an object of field → errors.
/// The wire format forces the two shapes; decoding looks at the JSON type, so a bad
/// value still names what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorMessage {
    /// `"403 Forbidden"`.
    Text(String),
    /// `{"tags_list": ["can not be empty when runner is not allowed to pick untagged jobs"]}`.
    Fields(BTreeMap<String, Vec<String>>),
}

impl Serialize for ErrorMessage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text(text) => serializer.serialize_str(text),
            Self::Fields(fields) => fields.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for ErrorMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MessageVisitor;

        impl<'de> Visitor<'de> for MessageVisitor {
            type Value = ErrorMessage;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an object of field → list of errors")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<ErrorMessage, E> {
                Ok(ErrorMessage::Text(value.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ErrorMessage, A::Error> {
                let mut fields = BTreeMap::new();
                while let Some((field, errors)) = map.next_entry::<String, Vec<String>>()? {
                    fields.insert(field, errors);
                }
                Ok(ErrorMessage::Fields(fields))
            }
        }

        deserializer.deserialize_any(MessageVisitor)
    }
}
