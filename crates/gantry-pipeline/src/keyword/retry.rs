//! `retry`: `0..=2` or `{max, when, exit_codes}` (GitLab `Entry::Retry`).
//!
//! GitLab reports these errors at the location `retry` (hash and integer forms) or
//! `retry config` (wrong type), without the job prefix — so `path` is not used in messages.

use crate::model::Retry;
use crate::validate::{Cx, int_or_int_array};
use crate::yaml::{Node, Value};

use super::common::int_in_range;

/// `always` plus every job failure reason (`Ci::Build.failure_reasons`), which is what
/// GitLab accepts in `retry:when`.
pub(crate) const RETRY_WHEN: &[&str] = &[
    "always",
    "unknown_failure",
    "script_failure",
    "api_failure",
    "stuck_or_timeout_failure",
    "runner_system_failure",
    "missing_dependency_failure",
    "runner_unsupported",
    "stale_schedule",
    "job_execution_timeout",
    "archived_failure",
    "unmet_prerequisites",
    "scheduler_failure",
    "data_integrity_failure",
    "forward_deployment_failure",
    "user_blocked",
    "project_deleted",
    "ci_quota_exceeded",
    "pipeline_loop_detected",
    "no_matching_runner",
    "trace_size_exceeded",
    "builds_disabled",
    "environment_creation_failure",
    "deployment_rejected",
    "failed_outdated_deployment_job",
    "job_execution_server_timeout",
    "stuck_pending_with_matching_runners",
    "stuck_pending_no_matching_runners",
    "no_updates_running",
    "no_updates_canceling",
    "server_timeout_running",
    "server_timeout_canceling",
    "runner_configuration_error",
    "runner_external_dependency_failure",
    "runner_interrupted",
    "protected_environment_failure",
    "insufficient_bridge_permissions",
    "downstream_bridge_project_not_found",
    "invalid_bridge_trigger",
    "upstream_bridge_project_not_found",
    "insufficient_upstream_permissions",
    "bridge_pipeline_is_child_pipeline",
    "downstream_pipeline_creation_failed",
    "secrets_provider_not_found",
    "reached_max_descendant_pipelines_depth",
    "ip_restriction_failure",
    "reached_max_pipeline_hierarchy_size",
    "reached_downstream_pipeline_trigger_rate_limit",
    "duo_workflow_not_allowed",
    "job_router_failure",
    "job_token_expired",
    "id_token_burned_project_path",
    "downstream_project_trigger_resolved_to_empty",
];

const LOCATION: &str = "retry";

/// Validate `retry`. `Retry::when` is empty when `when` is not written (GitLab then
/// retries on any failure unless `exit_codes` narrows it, see spec §5.7).
pub(crate) fn retry(node: &Node, _path: &str, cx: &mut Cx) -> Option<Retry> {
    match &node.value {
        Value::Int(_) => {
            let max = int_in_range(node, LOCATION, "config", 0, 2, cx)?;
            Some(Retry {
                max: u8::try_from(max).ok()?,
                when: Vec::new(),
                exit_codes: Vec::new(),
            })
        }
        Value::Map(map) => {
            let mut ok = cx.unknown_keys(map, &["max", "when", "exit_codes"], LOCATION, node.pos);
            let mut out = Retry {
                max: 0,
                when: Vec::new(),
                exit_codes: Vec::new(),
            };
            if let Some(m) = map.get("max").filter(|n| !n.is_null()) {
                match int_in_range(m, LOCATION, "max", 0, 2, cx).and_then(|v| u8::try_from(v).ok())
                {
                    Some(v) => out.max = v,
                    None => ok = false,
                }
            }
            if let Some(w) = map.get("when").filter(|n| !n.is_null()) {
                match &w.value {
                    Value::Str(s) => {
                        if RETRY_WHEN.contains(&s.as_str()) {
                            out.when = vec![s.clone()];
                        } else {
                            cx.attr(LOCATION, "when", "is not included in the list", w.pos);
                            ok = false;
                        }
                    }
                    _ => match crate::validate::string_array(w) {
                        Some(list) => {
                            let unknown: Vec<&str> = list
                                .iter()
                                .map(String::as_str)
                                .filter(|s| !RETRY_WHEN.contains(s))
                                .collect();
                            if unknown.is_empty() {
                                out.when = list;
                            } else {
                                cx.attr(
                                    LOCATION,
                                    "when",
                                    format!("contains unknown values: {}", unknown.join(", ")),
                                    w.pos,
                                );
                                ok = false;
                            }
                        }
                        None => {
                            cx.attr(
                                LOCATION,
                                "when",
                                "should be an array of strings or a string",
                                w.pos,
                            );
                            ok = false;
                        }
                    },
                }
            }
            if let Some(e) = map.get("exit_codes").filter(|n| !n.is_null()) {
                match int_or_int_array(e) {
                    Some(codes) => out.exit_codes = codes,
                    None => {
                        cx.attr(
                            LOCATION,
                            "exit_codes",
                            "should be an array of integers or an integer",
                            e.pos,
                        );
                        ok = false;
                    }
                }
            }
            ok.then_some(out)
        }
        _ => {
            cx.push(
                "retry config has to be either an integer or a hash".to_owned(),
                node.pos,
            );
            None
        }
    }
}
