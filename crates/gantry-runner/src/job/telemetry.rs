//! The runner's spans: one per job execution, a child of the coordinator's job span
//! (the payload's `TRACEPARENT` variable, W3C Trace Context; a new trace when it has
//! none, as with GitLab's coordinator), and one per lifecycle section under it
//! ([`super::lifecycle::Section`] holds and ends it). The job's scripts see the
//! payload's `TRACEPARENT` unchanged: their own tools' spans become children of the
//! job span, beside this execution span.
//!
//! Off (no tracer), every function here returns at its first test and builds nothing.

use gantry_protocol::JobResponse;
use gantry_telemetry::names::{self as n, result_of, status_of};
use gantry_telemetry::{KeyValue, LiveSpan, SpanKind};

use super::{JobContext, JobEnding, variables::get};
use crate::config::ExecutorKind;

/// Opens the job execution span (see the module docs).
pub(crate) fn job_span(
    cx: &JobContext,
    job: &JobResponse,
    choice: ExecutorKind,
    variables: &[gantry_protocol::JobVariable],
) -> LiveSpan {
    let Some(telemetry) = &cx.telemetry else {
        return LiveSpan::none();
    };
    let parent = get(variables, "TRACEPARENT").and_then(gantry_telemetry::parse_traceparent);
    let name = &job.job_info.name;
    let mut attributes = vec![
        KeyValue::new(n::TASK_NAME, name.clone()),
        KeyValue::new(n::TASK_RUN_ID, job.id.to_string()),
        KeyValue::new(n::GITLAB_JOB_ID, job.id),
        KeyValue::new(n::GITLAB_JOB_STAGE, job.job_info.stage.clone()),
        KeyValue::new(n::PIPELINE_RUN_ID, job.job_info.pipeline_id.to_string()),
        KeyValue::new(n::GITLAB_PIPELINE_ID, job.job_info.pipeline_id),
        KeyValue::new(n::GITLAB_RUNNER_EXECUTOR, choice.as_str()),
        KeyValue::new(n::SYSTEM_COMPONENT, "agent"),
        KeyValue::new(n::VCS_REF_NAME, job.git_info.git_ref.clone()),
        KeyValue::new(n::VCS_REVISION, job.git_info.sha.clone()),
    ];
    for (key, variable) in [
        (n::TASK_RUN_URL, "CI_JOB_URL"),
        (n::GITLAB_PROJECT_PATH, "CI_PROJECT_PATH"),
    ] {
        if let Some(value) = get(variables, variable) {
            attributes.push(KeyValue::new(key, value.to_owned()));
        }
    }
    if let Some(id) = cx.runner.id {
        attributes.push(KeyValue::new(n::WORKER_ID, id.to_string()));
        attributes.push(KeyValue::new(n::GITLAB_RUNNER_ID, id));
    }
    if let Some(runner) = &cx.runner.name {
        attributes.push(KeyValue::new(n::WORKER_NAME, runner.clone()));
    }
    telemetry.start_span(
        format!("execute {name}"),
        parent.as_ref(),
        SpanKind::Consumer,
        attributes,
    )
}

/// Ends the job execution span with the job's result.
pub(crate) fn end_job_span(
    mut span: LiveSpan,
    ending: &JobEnding,
    resources: Option<&gantry_protocol::JobResources>,
) {
    if span.context().is_none() {
        return;
    }
    if let Some(r) = resources {
        let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
        span.set_attribute(KeyValue::new(
            n::GANTRY_JOB_CPU_USER_SECONDS,
            r.cpu_user_seconds,
        ));
        span.set_attribute(KeyValue::new(
            n::GANTRY_JOB_CPU_SYSTEM_SECONDS,
            r.cpu_system_seconds,
        ));
        span.set_attribute(KeyValue::new(
            n::GANTRY_JOB_PEAK_MEMORY_BYTES,
            bytes(r.peak_memory_bytes),
        ));
        span.set_attribute(KeyValue::new(n::GANTRY_JOB_READ_BYTES, bytes(r.read_bytes)));
        span.set_attribute(KeyValue::new(
            n::GANTRY_JOB_WRITTEN_BYTES,
            bytes(r.written_bytes),
        ));
    }
    let (status, reason) = match ending {
        JobEnding::Success => ("success", None),
        JobEnding::Canceled | JobEnding::Interrupted | JobEnding::Aborted => ("canceled", None),
        other => ("failed", other.failure_reason().map(|r| r.as_str())),
    };
    let result = result_of(status, reason).unwrap_or("failure");
    span.set_attribute(KeyValue::new(n::TASK_RUN_RESULT, result));
    span.set_attribute(KeyValue::new(n::GITLAB_JOB_STATUS, status));
    if let Some(reason) = reason {
        span.set_attribute(KeyValue::new(n::GITLAB_JOB_FAILURE_REASON, reason));
        span.set_attribute(KeyValue::new(n::ERROR_TYPE, reason));
    }
    span.end(status_of(result, reason));
}

/// A section's span under the job's (`parent`: [`LiveSpan::context`] of the job span).
pub(crate) fn section_span(
    cx: &JobContext,
    parent: Option<&gantry_telemetry::SpanContext>,
    name: &'static str,
) -> LiveSpan {
    match (&cx.telemetry, parent) {
        (Some(telemetry), Some(parent)) => telemetry.start_span(
            name,
            Some(parent),
            SpanKind::Internal,
            vec![KeyValue::new(n::GITLAB_SECTION, name)],
        ),
        _ => LiveSpan::none(),
    }
}

/// The spans of a `run:` list's steps and their sub-steps, from the step runner's
/// results (their recorded times), under the `step_run` section's span (`parent`).
pub(crate) fn record_steps(
    cx: &JobContext,
    parent: Option<&gantry_telemetry::SpanContext>,
    result: &gantry_steps::StepResult,
) {
    let (Some(telemetry), Some(parent)) = (&cx.telemetry, parent) else {
        return;
    };
    for step in &result.sub_step_results {
        record_step(telemetry, parent, step);
    }
}

fn record_step(
    telemetry: &gantry_telemetry::Telemetry,
    parent: &gantry_telemetry::SpanContext,
    step: &gantry_steps::StepResult,
) {
    use gantry_protocol::time::parse_rfc3339_utc;
    use gantry_steps::Status;
    let at = |text: &str| {
        let ms = parse_rfc3339_utc(text).and_then(|ms| u64::try_from(ms).ok())?;
        Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
    };
    let (Some(start), Some(end)) = (at(&step.started_at), at(&step.ended_at)) else {
        return;
    };
    let status = match step.status {
        Status::Success => gantry_telemetry::Status::Ok,
        Status::Failure => gantry_telemetry::Status::error(
            step.error.clone().unwrap_or_else(|| "failed".to_owned()),
        ),
        Status::Running | Status::Cancelled => gantry_telemetry::Status::Unset,
    };
    let span_id = telemetry.new_span_id();
    telemetry.record_under(
        gantry_telemetry::Recorded {
            name: format!("step {}", step.step.name),
            trace_id: parent.trace_id(),
            span_id,
            parent: Some(parent.span_id()),
            kind: SpanKind::Internal,
            start,
            end,
            attributes: vec![KeyValue::new(n::GITLAB_STEP_NAME, step.step.name.clone())],
            status,
        },
        parent,
    );
    let this = gantry_telemetry::SpanContext::new(
        parent.trace_id(),
        span_id,
        parent.trace_flags(),
        false,
        parent.trace_state().clone(),
    );
    for sub in &step.sub_step_results {
        record_step(telemetry, &this, sub);
    }
}
