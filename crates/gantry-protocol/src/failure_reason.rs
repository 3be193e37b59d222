//! `failure_reason` values (§4.3): GitLab's `Enums::Ci::CommitStatus.failure_reasons`,
//! as listed in the `features.failure_reasons` of §3.6, plus `image_pull_failure`,
//! which gitlab-runner sends to servers that accept it.
//!
//! `job_canceled` is internal to gitlab-runner and never valid on the server (it maps
//! to `unknown_failure`); it belongs to the runner's outcome type, not to the wire.

use crate::wire_enum::wire_enum;

wire_enum! {
    /// Why a job failed (§4.3). Serialized as the snake_case GitLab value.
    #[derive(Default)]
    pub enum FailureReason ("failure reason") {
        /// Fallback when nothing more precise applies.
        #[default]
        UnknownFailure = "unknown_failure",
        /// The user script failed (also what an empty reason means).
        ScriptFailure = "script_failure",
        /// Server-side API failure.
        ApiFailure = "api_failure",
        /// The job was stuck or timed out (server side).
        StuckOrTimeoutFailure = "stuck_or_timeout_failure",
        /// Runner or executor failure.
        RunnerSystemFailure = "runner_system_failure",
        /// A dependency's artifacts are expired or erased (§3.4).
        MissingDependencyFailure = "missing_dependency_failure",
        /// The runner lacks a feature the job needs (§3.4, §8.2).
        RunnerUnsupported = "runner_unsupported",
        /// A delayed job's schedule went stale.
        StaleSchedule = "stale_schedule",
        /// The job timeout was exceeded.
        JobExecutionTimeout = "job_execution_timeout",
        /// The project is archived.
        ArchivedFailure = "archived_failure",
        /// Prerequisites (e.g. environment resources) were not met.
        UnmetPrerequisites = "unmet_prerequisites",
        /// Scheduler failure.
        SchedulerFailure = "scheduler_failure",
        /// Data integrity failure.
        DataIntegrityFailure = "data_integrity_failure",
        /// A newer deployment already ran.
        ForwardDeploymentFailure = "forward_deployment_failure",
        /// The triggering user is blocked.
        UserBlocked = "user_blocked",
        /// The project was deleted.
        ProjectDeleted = "project_deleted",
        /// CI minutes quota exceeded.
        CiQuotaExceeded = "ci_quota_exceeded",
        /// A pipeline trigger loop was detected.
        PipelineLoopDetected = "pipeline_loop_detected",
        /// No runner can pick the job.
        NoMatchingRunner = "no_matching_runner",
        /// The trace exceeded the instance limit (§5.2).
        TraceSizeExceeded = "trace_size_exceeded",
        /// CI/CD is disabled for the project.
        BuildsDisabled = "builds_disabled",
        /// The environment could not be created.
        EnvironmentCreationFailure = "environment_creation_failure",
        /// The deployment was rejected.
        DeploymentRejected = "deployment_rejected",
        /// An outdated deployment job was prevented.
        FailedOutdatedDeploymentJob = "failed_outdated_deployment_job",
        /// The server timed the job out.
        JobExecutionServerTimeout = "job_execution_server_timeout",
        /// Stuck pending although matching runners exist.
        StuckPendingWithMatchingRunners = "stuck_pending_with_matching_runners",
        /// Stuck pending with no matching runner.
        StuckPendingNoMatchingRunners = "stuck_pending_no_matching_runners",
        /// A running job stopped sending updates (§4.6).
        NoUpdatesRunning = "no_updates_running",
        /// A canceling job stopped sending updates.
        NoUpdatesCanceling = "no_updates_canceling",
        /// A running job passed its timeout on the server (§9).
        ServerTimeoutRunning = "server_timeout_running",
        /// A canceling job passed its timeout on the server.
        ServerTimeoutCanceling = "server_timeout_canceling",
        /// Runner configuration or incompatible CI configuration (→ `script_failure`
        /// on servers that do not accept it).
        RunnerConfigurationError = "runner_configuration_error",
        /// An external dependency (registry, git host…) failed (→
        /// `runner_system_failure` on servers that do not accept it).
        RunnerExternalDependencyFailure = "runner_external_dependency_failure",
        /// The runner process was told to stop (→ `unknown_failure` on servers that do
        /// not accept it).
        RunnerInterrupted = "runner_interrupted",
        /// Protected environment access denied.
        ProtectedEnvironmentFailure = "protected_environment_failure",
        /// Bridge: insufficient permissions downstream.
        InsufficientBridgePermissions = "insufficient_bridge_permissions",
        /// Bridge: downstream project not found.
        DownstreamBridgeProjectNotFound = "downstream_bridge_project_not_found",
        /// Bridge: invalid trigger.
        InvalidBridgeTrigger = "invalid_bridge_trigger",
        /// Bridge: upstream project not found.
        UpstreamBridgeProjectNotFound = "upstream_bridge_project_not_found",
        /// Bridge: insufficient permissions upstream.
        InsufficientUpstreamPermissions = "insufficient_upstream_permissions",
        /// Bridge: the pipeline is already a child pipeline.
        BridgePipelineIsChildPipeline = "bridge_pipeline_is_child_pipeline",
        /// Bridge: the downstream pipeline could not be created.
        DownstreamPipelineCreationFailed = "downstream_pipeline_creation_failed",
        /// A secrets provider was not found.
        SecretsProviderNotFound = "secrets_provider_not_found",
        /// Maximum depth of descendant pipelines reached.
        ReachedMaxDescendantPipelinesDepth = "reached_max_descendant_pipelines_depth",
        /// IP restriction.
        IpRestrictionFailure = "ip_restriction_failure",
        /// Maximum pipeline hierarchy size reached.
        ReachedMaxPipelineHierarchySize = "reached_max_pipeline_hierarchy_size",
        /// Downstream pipeline trigger rate limit reached.
        ReachedDownstreamPipelineTriggerRateLimit = "reached_downstream_pipeline_trigger_rate_limit",
        /// Duo workflow not allowed.
        DuoWorkflowNotAllowed = "duo_workflow_not_allowed",
        /// Job router failure.
        JobRouterFailure = "job_router_failure",
        /// The job token expired (§1.2).
        JobTokenExpired = "job_token_expired",
        /// An ID token's project path was burned.
        IdTokenBurnedProjectPath = "id_token_burned_project_path",
        /// A downstream project trigger resolved to empty.
        DownstreamProjectTriggerResolvedToEmpty = "downstream_project_trigger_resolved_to_empty",
        /// Pulling the job image failed (→ `runner_system_failure` on servers that do
        /// not accept it). Not in the §3.6 server list.
        ImagePullFailure = "image_pull_failure",
    }
}

impl FailureReason {
    /// Reasons every GitLab accepts, whatever its `features.failure_reasons` (§4.3).
    pub const ALWAYS_SUPPORTED: &'static [Self] = &[
        Self::ScriptFailure,
        Self::RunnerSystemFailure,
        Self::JobExecutionTimeout,
    ];

    /// The older, wider reason gitlab-runner falls back to when a server does not
    /// accept this one (§4.3 compatibility table).
    pub const fn compatible_fallback(self) -> Option<Self> {
        match self {
            Self::ImagePullFailure | Self::RunnerExternalDependencyFailure => {
                Some(Self::RunnerSystemFailure)
            }
            Self::RunnerConfigurationError => Some(Self::ScriptFailure),
            Self::RunnerInterrupted => Some(Self::UnknownFailure),
            _ => None,
        }
    }

    /// The reason to send to a server whose `features.failure_reasons` is `accepted`
    /// (§4.3): this reason if accepted (or always supported), else the first accepted
    /// reason along its fallback chain (≤ 10 hops), else `unknown_failure`.
    pub fn negotiate(self, accepted: &[String]) -> Self {
        let is_accepted = |reason: Self| {
            Self::ALWAYS_SUPPORTED.contains(&reason)
                || accepted.iter().any(|a| a == reason.as_str())
        };
        let mut reason = self;
        for _ in 0..=10 {
            if is_accepted(reason) {
                return reason;
            }
            match reason.compatible_fallback() {
                Some(next) => reason = next,
                None => break,
            }
        }
        Self::UnknownFailure
    }

    /// Whether GitLab's server stores this reason (`Enums::Ci::CommitStatus.failure_reasons`,
    /// the list a coordinator sends in `features.failure_reasons`, §3.6): every value but
    /// `image_pull_failure`.
    pub const fn is_stored_by_server(self) -> bool {
        !matches!(self, Self::ImagePullFailure)
    }

    /// What a coordinator records for a reason a runner reported: the reason itself, or
    /// `unknown_failure` for one the server does not store (§4.3).
    pub const fn as_stored(self) -> Self {
        if self.is_stored_by_server() {
            self
        } else {
            Self::UnknownFailure
        }
    }

    /// Rails' reading of a received value: unknown values are stored as
    /// `unknown_failure` (§4.3). Empty means no reason.
    pub fn from_wire_lenient(value: &str) -> Option<Self> {
        if value.is_empty() {
            return None;
        }
        Some(value.parse().unwrap_or(Self::UnknownFailure))
    }
}
