//! Why a job failed: GitLab's `failure_reason` enum (spec §5.7, gitlabhq
//! `app/models/concerns/enums/ci/commit_status.rb`), never a string.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! failure_reasons {
    ($($variant:ident => $name:literal,)*) => {
        /// A job's `failure_reason`, with GitLab's values (newest list, in GitLab's order).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum FailureReason {
            $($variant,)*
        }

        impl FailureReason {
            /// Every reason, in GitLab's order.
            pub const ALL: &'static [FailureReason] = &[$(FailureReason::$variant,)*];

            pub fn as_str(self) -> &'static str {
                match self {
                    $(FailureReason::$variant => $name,)*
                }
            }

            /// The reason named `s`, if it is one of GitLab's values.
            pub fn parse(s: &str) -> Option<FailureReason> {
                match s {
                    $($name => Some(FailureReason::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

failure_reasons! {
    UnknownFailure => "unknown_failure",
    ScriptFailure => "script_failure",
    ApiFailure => "api_failure",
    StuckOrTimeoutFailure => "stuck_or_timeout_failure",
    RunnerSystemFailure => "runner_system_failure",
    MissingDependencyFailure => "missing_dependency_failure",
    RunnerUnsupported => "runner_unsupported",
    StaleSchedule => "stale_schedule",
    JobExecutionTimeout => "job_execution_timeout",
    ArchivedFailure => "archived_failure",
    UnmetPrerequisites => "unmet_prerequisites",
    SchedulerFailure => "scheduler_failure",
    DataIntegrityFailure => "data_integrity_failure",
    ForwardDeploymentFailure => "forward_deployment_failure",
    UserBlocked => "user_blocked",
    ProjectDeleted => "project_deleted",
    CiQuotaExceeded => "ci_quota_exceeded",
    PipelineLoopDetected => "pipeline_loop_detected",
    NoMatchingRunner => "no_matching_runner",
    TraceSizeExceeded => "trace_size_exceeded",
    BuildsDisabled => "builds_disabled",
    EnvironmentCreationFailure => "environment_creation_failure",
    DeploymentRejected => "deployment_rejected",
    FailedOutdatedDeploymentJob => "failed_outdated_deployment_job",
    JobExecutionServerTimeout => "job_execution_server_timeout",
    StuckPendingWithMatchingRunners => "stuck_pending_with_matching_runners",
    StuckPendingNoMatchingRunners => "stuck_pending_no_matching_runners",
    NoUpdatesRunning => "no_updates_running",
    NoUpdatesCanceling => "no_updates_canceling",
    ServerTimeoutRunning => "server_timeout_running",
    ServerTimeoutCanceling => "server_timeout_canceling",
    RunnerConfigurationError => "runner_configuration_error",
    RunnerExternalDependencyFailure => "runner_external_dependency_failure",
    RunnerInterrupted => "runner_interrupted",
    ProtectedEnvironmentFailure => "protected_environment_failure",
    InsufficientBridgePermissions => "insufficient_bridge_permissions",
    DownstreamBridgeProjectNotFound => "downstream_bridge_project_not_found",
    InvalidBridgeTrigger => "invalid_bridge_trigger",
    UpstreamBridgeProjectNotFound => "upstream_bridge_project_not_found",
    InsufficientUpstreamPermissions => "insufficient_upstream_permissions",
    BridgePipelineIsChildPipeline => "bridge_pipeline_is_child_pipeline",
    DownstreamPipelineCreationFailed => "downstream_pipeline_creation_failed",
    SecretsProviderNotFound => "secrets_provider_not_found",
    ReachedMaxDescendantPipelinesDepth => "reached_max_descendant_pipelines_depth",
    IpRestrictionFailure => "ip_restriction_failure",
    ReachedMaxPipelineHierarchySize => "reached_max_pipeline_hierarchy_size",
    ReachedDownstreamPipelineTriggerRateLimit => "reached_downstream_pipeline_trigger_rate_limit",
    DuoWorkflowNotAllowed => "duo_workflow_not_allowed",
    JobRouterFailure => "job_router_failure",
    JobTokenExpired => "job_token_expired",
    IdTokenBurnedProjectPath => "id_token_burned_project_path",
    DownstreamProjectTriggerResolvedToEmpty => "downstream_project_trigger_resolved_to_empty",
}

impl FailureReason {
    /// The reason a runner reported, as GitLab stores it: an empty reason is
    /// `script_failure`, an unknown one `unknown_failure` (runner API §4.3).
    pub fn from_runner(s: &str) -> FailureReason {
        if s.is_empty() {
            return FailureReason::ScriptFailure;
        }
        FailureReason::parse(s).unwrap_or(FailureReason::UnknownFailure)
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_count() {
        assert_eq!(FailureReason::ALL.len(), 52);
        for r in FailureReason::ALL {
            assert_eq!(FailureReason::parse(r.as_str()), Some(*r));
        }
    }

    #[test]
    fn runner_reasons_are_stored_like_gitlab() {
        assert_eq!(FailureReason::from_runner(""), FailureReason::ScriptFailure);
        assert_eq!(
            FailureReason::from_runner("job_canceled"),
            FailureReason::UnknownFailure
        );
        assert_eq!(
            FailureReason::from_runner("runner_system_failure"),
            FailureReason::RunnerSystemFailure
        );
    }
}
