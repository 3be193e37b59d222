//! The facts block of a job's page (`job.rs` places it above the log): its runner, how
//! long it was queued and ran, why it failed in words (GitLab's
//! `CommitStatusPresenter::CALLOUT_FAILURE_MESSAGES`), why a skipped or created job did
//! not run, its artifacts (download, browse) and the variables it was created with
//! (its `variables:` and those it was played with; masked values hidden:
//! `Coordinator::job_variables_shown`).
//!
//! Why a job did not run is read from the pipeline's jobs as they are now: a created
//! job waits for the jobs it `needs` (or, without `needs:`, those of the earlier stages)
//! that have not finished; a skipped job's `when:` and the jobs before it that failed
//! say why it was skipped. Cost: the pipeline's jobs and their `needs` (two queries),
//! the runner (one), the variables (three); O(jobs) in memory.

use crate::processor::Status;
use std::fmt::Write as _;

use crate::coordinator::{CoordinatorError, JobView};

use super::super::AppState;
use super::super::error::ApiError;
use super::artifacts::size;
use super::shell::{active, escape, seconds, when};

/// GitLab's text for a `failure_reason` (`CALLOUT_FAILURE_MESSAGES`); `script_failure`,
/// which GitLab leaves without a callout, says what failed.
pub(super) fn failure_text(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "unknown_failure" => "There is an unknown failure, please try again",
        "script_failure" => "The script failed: a command exited with a non-zero status",
        "api_failure" => "There has been an API failure, please try again",
        "stuck_or_timeout_failure" => {
            "There has been a timeout failure or the job got stuck. Check your timeout limits or try again"
        }
        "runner_system_failure" => "There has been a runner system failure, please try again",
        "missing_dependency_failure" => "There has been a missing dependency failure",
        "runner_unsupported" => "No runners support the requirements to run this job.",
        "stale_schedule" => "Delayed job could not be executed by some reason, please try again",
        "job_execution_timeout" | "job_execution_server_timeout" => {
            "The script exceeded the maximum execution time set for the job"
        }
        "archived_failure" => "The job is archived and cannot be run",
        "unmet_prerequisites" => "The job failed to complete prerequisite tasks",
        "scheduler_failure" => {
            "The scheduler failed to assign job to the runner, please try again or contact system administrator"
        }
        "data_integrity_failure" => {
            "There has been an unknown job problem, please contact your system administrator with the job ID to review the logs"
        }
        "forward_deployment_failure" => {
            "The deployment job is older than the previously succeeded deployment job, and therefore cannot be run"
        }
        "pipeline_loop_detected" => {
            "This job could not be executed because it would create infinitely looping pipelines"
        }
        "insufficient_upstream_permissions" => {
            "This job could not be executed because of insufficient permissions to track the upstream project."
        }
        "upstream_bridge_project_not_found" => {
            "This job could not be executed because upstream bridge project could not be found."
        }
        "invalid_bridge_trigger" => {
            "This job could not be executed because downstream pipeline trigger definition is invalid"
        }
        "downstream_bridge_project_not_found" => {
            "This job could not be executed because downstream bridge project could not be found"
        }
        "protected_environment_failure" => {
            "The environment this job is deploying to is protected. Only users with permission may successfully run this job."
        }
        "insufficient_bridge_permissions" => {
            "This job could not be executed because of insufficient permissions to create a downstream pipeline"
        }
        "bridge_pipeline_is_child_pipeline" => {
            "This job belongs to a child pipeline and cannot create further child pipelines"
        }
        "downstream_pipeline_creation_failed" => "The downstream pipeline could not be created",
        "secrets_provider_not_found" => {
            "The secrets provider can not be found. Check your CI/CD variables and try again."
        }
        "reached_max_descendant_pipelines_depth" => {
            "You reached the maximum depth of child pipelines"
        }
        "reached_max_pipeline_hierarchy_size" => "The downstream pipeline tree is too large",
        "project_deleted" => "The job belongs to a deleted project",
        "user_blocked" => "The user who created this job is blocked",
        "ci_quota_exceeded" => "No more compute minutes available",
        "no_matching_runner" => "No matching runner available",
        "trace_size_exceeded" => "The job log size limit was reached",
        "builds_disabled" => "The CI/CD is disabled for this project",
        "environment_creation_failure" => {
            "This job could not be executed because it would create an environment with an invalid parameter."
        }
        "deployment_rejected" => "This deployment job was rejected.",
        "failed_outdated_deployment_job" => {
            "The deployment job is older than the latest deployment, and therefore failed."
        }
        "reached_downstream_pipeline_trigger_rate_limit" => {
            "Too many downstream pipelines triggered in the last minute. Try again later."
        }
        "job_token_expired" => {
            "The CI job token has expired. The job may have exceeded the maximum time limit."
        }
        _ => return None,
    })
}

/// Jobs named in a sentence: `a`, `a and b`, `a, b and c`, each in `<code>`.
fn names(list: &[&str]) -> String {
    let coded: Vec<String> = list
        .iter()
        .map(|n| format!("<code>{}</code>", escape(n)))
        .collect();
    match coded.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// Whether a finished job `j` lets the jobs after it run `on_success`.
fn passed(j: &JobView) -> bool {
    j.status == Status::Success
        || (j.status == Status::Failed && j.allow_failure)
        || j.status == Status::Manual
}

/// Why job `j` (created, skipped, manual or delayed) has not run, as HTML; empty for
/// other statuses. `jobs` are the pipeline's latest attempts, `needs` its jobs' `needs`
/// (`None`: no `needs:`).
pub(super) fn why_not_run(j: &JobView, jobs: &[JobView], needs: Option<&Vec<String>>) -> String {
    let before: Vec<&JobView> = match needs {
        Some(list) => jobs
            .iter()
            .filter(|o| !o.retried && list.contains(&o.name))
            .collect(),
        None => {
            // Stages are in order of first appearance in the pipeline's jobs.
            let mut stages: Vec<&str> = Vec::new();
            for o in jobs {
                if !stages.contains(&o.stage.as_str()) {
                    stages.push(&o.stage);
                }
            }
            let at = stages.iter().position(|s| *s == j.stage).unwrap_or(0);
            jobs.iter()
                .filter(|o| {
                    !o.retried && stages.iter().position(|s| *s == o.stage).unwrap_or(0) < at
                })
                .collect()
        }
    };
    let what = if needs.is_some() {
        "the jobs it needs"
    } else {
        "the earlier stages"
    };
    let text = match j.status {
        Status::Created => {
            let waiting: Vec<&str> = before
                .iter()
                .filter(|o| active(o.status))
                .map(|o| o.name.as_str())
                .collect();
            if waiting.is_empty() {
                "It has not been queued yet: it is queued as soon as the pipeline is processed again.".to_owned()
            } else {
                format!("It waits for {what} to finish: {}.", names(&waiting))
            }
        }
        Status::Skipped => {
            let failed: Vec<&str> = before
                .iter()
                .filter(|o| !active(o.status) && !passed(o))
                .map(|o| o.name.as_str())
                .collect();
            match j.when.as_str() {
                "on_failure" => format!(
                    "It runs only when one of {what} fails (<code>when: on_failure</code>), and none did."
                ),
                _ if !failed.is_empty() => format!(
                    "It runs only when {what} succeed (<code>when: {}</code>), and {} did not.",
                    escape(&j.when),
                    names(&failed)
                ),
                _ => format!(
                    "It was skipped: the pipeline ended (failed or canceled) before it could run (<code>when: {}</code>).",
                    escape(&j.when)
                ),
            }
        }
        Status::Manual => {
            "A manual job: it runs when somebody runs it (the Run button).".to_owned()
        }
        Status::Scheduled => format!(
            "A delayed job (<code>when: delayed</code>): it is queued at {} UTC.",
            when(j.scheduled_at)
        ),
        _ => return String::new(),
    };
    format!("<p class=\"why\" id=\"why-not-run\">{text}</p>")
}

/// The facts block of job `j` of the page at `base` (`/{project}/-`).
pub(super) async fn details(state: &AppState, base: &str, j: &JobView) -> Result<String, ApiError> {
    let mut out = String::from("<dl class=\"details\">");
    if let Some(reason) = j
        .failure_reason
        .as_deref()
        .filter(|_| j.status == Status::Failed)
    {
        let text = failure_text(reason).map_or_else(|| escape(reason), escape);
        let code = j
            .exit_code
            .map(|c| format!(" (exit code {c})"))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<dt>Failed</dt><dd class=\"error\" id=\"failure\">{text}{code} <small><code>{}</code></small></dd>",
            escape(reason)
        );
    }
    if let Some(id) = j.runner_id {
        let name = match state.coordinator.runner(id).await {
            Ok(r) if !r.description.is_empty() => format!("#{id} {}", escape(&r.description)),
            Ok(_) | Err(CoordinatorError::NotFound(_)) => format!("#{id}"),
            Err(e) => return Err(e.into()),
        };
        let _ = write!(
            out,
            "<dt>Runner</dt><dd id=\"runner\"><a href=\"/-/runners#runner-{id}\">{name}</a></dd>"
        );
    }
    if let Some(q) = j.queued_duration {
        let _ = write!(
            out,
            "<dt>Queued</dt><dd id=\"queued\">{}</dd>",
            seconds(Some(q))
        );
    }
    if let Some(d) = j.duration {
        let _ = write!(
            out,
            "<dt>{}</dt><dd id=\"duration\">{}</dd>",
            if j.status == Status::Running {
                "Running for"
            } else {
                "Ran"
            },
            seconds(Some(d))
        );
    }
    if let Some(archive) = j
        .artifacts
        .iter()
        .find(|a| a.file_type == "archive")
        .filter(|_| j.erased_at.is_none())
    {
        let url = escape(&format!("{base}/jobs/{}/artifacts", j.id));
        let expires = archive
            .expire_at
            .map(|at| format!(" · expire {} UTC", when(Some(at))))
            .unwrap_or_default();
        let browse = if archive.file_format == "zip" {
            format!(" · <a class=\"browse\" href=\"{url}/browse\">Browse</a>")
        } else {
            String::new()
        };
        let _ = write!(
            out,
            "<dt>Artifacts</dt><dd id=\"artifacts\">{}{expires} · <a class=\"download\" href=\"{url}/download\">Download</a>{browse}</dd>",
            size(u64::try_from(archive.size).unwrap_or(0)),
        );
    }
    out.push_str("</dl>");
    let variables = state.coordinator.job_variables_shown(j.id).await?;
    if !variables.is_empty() {
        let rows: String = variables
            .iter()
            .map(|v| {
                let value = v.value.as_deref().map_or_else(
                    || "<i class=\"masked\">masked</i>".to_owned(),
                    |value| format!("<code>{}</code>", escape(value)),
                );
                format!(
                    "<tr><td><code>{}</code></td><td>{value}</td><td>{}</td></tr>",
                    escape(&v.key),
                    v.source
                )
            })
            .collect();
        let _ = write!(
            out,
            "<details class=\"variables\" id=\"variables\"><summary>Variables ({})</summary><table><tr><th>Key</th><th>Value</th><th>From</th></tr>{rows}</table></details>",
            variables.len()
        );
    }
    if matches!(
        j.status,
        Status::Created | Status::Skipped | Status::Manual | Status::Scheduled
    ) {
        let jobs = state.coordinator.pipeline_jobs(j.pipeline_id).await?;
        let needs = state.coordinator.pipeline_needs(j.pipeline_id).await?;
        let own = needs
            .iter()
            .find(|(id, _)| *id == j.id)
            .and_then(|(_, n)| n.as_ref());
        out.push_str(&why_not_run(j, &jobs, own));
    }
    Ok(out)
}
