//! `inputs` of the job payload (§3.5.16).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ProtocolError;
use crate::json::{is_false, zero_if_null};
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `inputs[].value.type`.
    #[derive(Default)]
    pub enum InputType ("input type") {
        /// A JSON string.
        #[default]
        String = "string",
        /// A JSON number.
        Number = "number",
        /// A JSON boolean.
        Boolean = "boolean",
        /// A JSON array.
        Array = "array",
        /// A JSON object.
        Struct = "struct",
    }
}

/// One entry of `inputs` (§3.5.16).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobInput {
    /// Input name.
    #[serde(deserialize_with = "zero_if_null")]
    pub key: String,
    /// Typed value.
    #[serde(deserialize_with = "zero_if_null")]
    pub value: JobInputValue,
}

/// `inputs[].value` (§3.5.16).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobInputValue {
    /// Declared type.
    #[serde(rename = "type", deserialize_with = "zero_if_null")]
    pub kind: InputType,
    /// The value; must match `type` and not be `null` (see [`JobInput::validate`]).
    pub content: Value,
    /// Whether to mask it; omitted when false.
    #[serde(skip_serializing_if = "is_false", deserialize_with = "zero_if_null")]
    pub sensitive: bool,
}

impl JobInput {
    /// The check gitlab-runner makes: `content` is present and matches `type`.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        let content = &self.value.content;
        let matches = match self.value.kind {
            InputType::String => content.is_string(),
            InputType::Number => content.is_number(),
            InputType::Boolean => content.is_boolean(),
            InputType::Array => content.is_array(),
            InputType::Struct => content.is_object(),
        };
        if content.is_null() {
            return Err(ProtocolError::InvalidInput {
                key: self.key.clone(),
                reason: "content is null".to_owned(),
            });
        }
        if !matches {
            return Err(ProtocolError::InvalidInput {
                key: self.key.clone(),
                reason: format!("content does not match type `{}`", self.value.kind),
            });
        }
        Ok(())
    }
}
