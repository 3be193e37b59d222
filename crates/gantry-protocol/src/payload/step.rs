//! `steps` (§3.5.5) and `hooks` (§3.5.6) of the job payload.

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;
use crate::payload::when::When;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// `steps[].name`. The runner runs step `x` as build stage `step_x`, except
    /// `after_script`, which has its own stage.
    #[derive(Default)]
    pub enum StepName ("step name") {
        /// `before_script` + `script`.
        #[default]
        Script = "script",
        /// From `release:`; needs feature `multi_build_steps`.
        Release = "release",
        /// `after_script`; sent with `when: always`, `allow_failure: true`.
        AfterScript = "after_script",
        /// The synthetic step gitlab-runner creates for a `run:` job (§3.5.13); GitLab
        /// does not send it.
        Run = "run",
    }
}

/// One entry of `steps` (§3.5.5).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Step {
    /// Which step.
    #[serde(deserialize_with = "zero_if_null")]
    pub name: StepName,
    /// Commands.
    #[serde(deserialize_with = "zero_if_null")]
    pub script: Vec<String>,
    /// Seconds (the job timeout).
    #[serde(deserialize_with = "zero_if_null")]
    pub timeout: i64,
    /// When it runs; empty means `on_success`.
    #[serde(deserialize_with = "zero_if_null")]
    pub when: When,
    /// Whether a failure of this step fails the job.
    #[serde(deserialize_with = "zero_if_null")]
    pub allow_failure: bool,
}

wire_enum! {
    /// `hooks[].name` (§3.5.6).
    #[derive(Default)]
    pub enum HookName ("hook name") {
        /// Runs before the git checkout.
        #[default]
        PreGetSourcesScript = "pre_get_sources_script",
        /// Runs after the git checkout.
        PostGetSourcesScript = "post_get_sources_script",
    }
}

/// One entry of `hooks` (§3.5.6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hook {
    /// Which hook.
    #[serde(deserialize_with = "zero_if_null")]
    pub name: HookName,
    /// Commands.
    #[serde(deserialize_with = "zero_if_null")]
    pub script: Vec<String>,
}
