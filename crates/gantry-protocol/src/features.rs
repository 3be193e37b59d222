//! `info.features`: what a runner says it can do (§8).
//!
//! On the wire an object of string → bool. gitlab-runner always sends every key it
//! knows, `false` ones included; other clients send only the `true` ones. [`Features`]
//! keeps the map as received (unknown keys from newer runners included, so the
//! coordinator can store them as the manager's runtime features) and answers questions
//! in terms of [`Feature`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::wire_enum::wire_enum;

wire_enum! {
    /// A key of `info.features` (§8.1). `Feature::ALL` is the set gitlab-runner 19.4
    /// sends.
    pub enum Feature ("runner feature") {
        /// Supports job variables.
        Variables = "variables",
        /// Supports `image:`.
        Image = "image",
        /// Supports `services:`.
        Services = "services",
        /// Artifacts support.
        Artifacts = "artifacts",
        /// Cache support.
        Cache = "cache",
        /// `cache:fallback_keys`; required by jobs that use it (§8.2).
        FallbackCacheKeys = "fallback_cache_keys",
        /// Shared build directories.
        Shared = "shared",
        /// Several artifact entries including reports; required by jobs with
        /// `artifacts:reports` (§8.2).
        UploadMultipleArtifacts = "upload_multiple_artifacts",
        /// `raw` and `gzip` artifact formats.
        UploadRawArtifacts = "upload_raw_artifacts",
        /// Interactive session server.
        Session = "session",
        /// Web terminal.
        Terminal = "terminal",
        /// Fetches with `git_info.refspecs`; required for merge-request refs (§8.2).
        Refspecs = "refspecs",
        /// Masks `masked` variables.
        Masking = "masking",
        /// Service proxy.
        Proxy = "proxy",
        /// Honours `raw: true` variables.
        RawVariables = "raw_variables",
        /// `artifacts:exclude`; required by jobs that use it (§8.2).
        ArtifactsExclude = "artifacts_exclude",
        /// Extra steps such as `release`; required by jobs with `release:` (§8.2).
        MultiBuildSteps = "multi_build_steps",
        /// Handles `412` by re-sending the whole trace.
        TraceReset = "trace_reset",
        /// Sends `output.checksum`.
        TraceChecksum = "trace_checksum",
        /// Sends `output.bytesize`.
        TraceSize = "trace_size",
        /// Resolves `secrets:`; required by jobs that declare them (EE, §8.2).
        VaultSecrets = "vault_secrets",
        /// Understands cancellation through `Job-Status`.
        Cancelable = "cancelable",
        /// Sends `exit_code`; required by jobs with `allow_failure:exit_codes` (§8.2).
        ReturnExitCode = "return_exit_code",
        /// Per-service variables.
        ServiceVariables = "service_variables",
        /// Comma-separated service aliases.
        ServiceMultipleAliases = "service_multiple_aliases",
        /// `image.executor_opts`.
        ImageExecutorOpts = "image_executor_opts",
        /// `services[].executor_opts`.
        ServiceExecutorOpts = "service_executor_opts",
        /// Supports the `canceling` state: `after_script` runs on cancel (§4.5).
        CancelGracefully = "cancel_gracefully",
        /// Runs `run:` steps natively (§3.5.13).
        NativeStepsIntegration = "native_steps_integration",
        /// Two-phase job commit (§3.7).
        TwoPhaseJobCommit = "two_phase_job_commit",
        /// Understands the payload's `inputs` (§3.5.16).
        JobInputs = "job_inputs",
    }
}

/// The `info.features` map (§8). Serializes as a JSON object of booleans.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Features(pub BTreeMap<String, bool>);

impl Features {
    /// Every key of [`Feature::ALL`], `true` for those in `enabled` and `false` for the
    /// rest: the form gitlab-runner sends.
    pub fn advertise(enabled: &[Feature]) -> Self {
        let map = Feature::ALL
            .iter()
            .map(|feature| (feature.as_str().to_owned(), enabled.contains(feature)))
            .collect();
        Self(map)
    }

    /// Whether the runner advertised `feature` as `true` (absent counts as `false`).
    pub fn has(&self, feature: Feature) -> bool {
        self.0.get(feature.as_str()).copied().unwrap_or(false)
    }

    /// Sets `feature` to `enabled`.
    pub fn set(&mut self, feature: Feature, enabled: bool) {
        self.0.insert(feature.as_str().to_owned(), enabled);
    }
}
