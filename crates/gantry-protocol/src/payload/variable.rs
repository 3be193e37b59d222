//! Job variables (§3.5.4), also used for service variables (§3.5.7).

use serde::{Deserialize, Serialize};

use crate::json::{is_false, zero_if_null};

/// One entry of `variables` (§3.5.4). `file` and `raw` are sent only when true.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobVariable {
    /// Variable name.
    #[serde(deserialize_with = "zero_if_null")]
    pub key: String,
    /// Value; may be empty.
    #[serde(deserialize_with = "zero_if_null")]
    pub value: String,
    /// `false` for secrets (project/group variables, tokens).
    #[serde(deserialize_with = "zero_if_null")]
    pub public: bool,
    /// The runner replaces the value with `[MASKED]` in the log.
    #[serde(deserialize_with = "zero_if_null")]
    pub masked: bool,
    /// The runner writes the value to a temp file and sets the variable to its path.
    #[serde(skip_serializing_if = "is_false", deserialize_with = "zero_if_null")]
    pub file: bool,
    /// The runner must not expand `$VAR` references in the value.
    #[serde(skip_serializing_if = "is_false", deserialize_with = "zero_if_null")]
    pub raw: bool,
}

/// The value of `name` in a job's `variables`: the last definition wins
/// (gitlab-runner's `JobVariables.Get`).
pub fn lookup<'a>(variables: &'a [JobVariable], name: &str) -> Option<&'a str> {
    variables
        .iter()
        .rev()
        .find(|variable| variable.key == name)
        .map(|variable| variable.value.as_str())
}
