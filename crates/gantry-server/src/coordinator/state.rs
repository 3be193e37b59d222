//! The one path every state change takes: load rows → [`PipelineState`] → processor
//! decision → `store.apply` (optimistic lock; retried when stale). [`Loaded`] is a pipeline
//! as read; [`diff`] turns the decided state back into the store's [`PipelineChange`].
//!
//! Processor job ids are row positions (`JobId(i + 1)` is `rows[i]`); rows the processor
//! adds (retries) come after them and become new rows.

use std::collections::HashSet;
use std::sync::Arc;

use gantry_store::{Job, JobUpdate, NewJob, Pipeline, PipelineChange};

use crate::processor::{JobId, JobState, PipelineState, Status, Timestamp, pipeline_status};

use super::error::{CoordinatorError, Result};
use super::spec::StoredSpec;

/// A pipeline as read from the store.
#[derive(Clone, Debug)]
pub(crate) struct Loaded {
    pub pipeline: Pipeline,
    pub rows: Vec<Job>,
    pub specs: Vec<Arc<StoredSpec>>,
    pub state: PipelineState,
}

pub(crate) fn job_id(index: usize) -> JobId {
    JobId(u32::try_from(index + 1).unwrap_or(u32::MAX))
}

fn ts(ms: Option<i64>) -> Option<Timestamp> {
    ms.map(super::time::to_ts)
}

impl Loaded {
    /// `specs[i]` is the parsed spec of `rows[i]`.
    pub fn build(
        pipeline: Pipeline,
        rows: Vec<Job>,
        specs: Vec<Arc<StoredSpec>>,
        graceful: &HashSet<i64>,
    ) -> Result<Loaded> {
        let mut jobs = Vec::with_capacity(rows.len());
        for (i, (row, spec)) in rows.iter().zip(&specs).enumerate() {
            let status = Status::parse(&row.status).ok_or_else(|| {
                CoordinatorError::corrupt(format!("job {} has status `{}`", row.id, row.status))
            })?;
            let mut j = spec.job.job_state(job_id(i), status);
            j.name = row.name.clone();
            j.stage_idx = usize::try_from(row.stage_idx).unwrap_or(0);
            j.allow_failure = row.allow_failure;
            j.attempt = u32::try_from(row.attempt).unwrap_or(1);
            j.retried = row.retried;
            j.enqueue_immediately = spec.enqueue_immediately && status == Status::Created;
            j.exit_code = row.exit_code;
            j.failure_reason = row.failure_reason.as_deref().and_then(|r| r.parse().ok());
            j.graceful_cancel = graceful.contains(&row.id);
            j.effective_timeout = row.timeout_secs.and_then(|t| u64::try_from(t).ok());
            j.queued_at = ts(row.queued_at);
            j.scheduled_at = ts(row.scheduled_at);
            j.started_at = ts(row.started_at);
            j.finished_at = ts(row.finished_at);
            j.updated_at = ts(row
                .last_contact_at
                .or(row.finished_at)
                .or(row.started_at)
                .or(row.queued_at));
            jobs.push(j);
        }
        let (mut stages, auto_cancel) = match specs.first() {
            Some(s) => (s.stages.clone(), s.auto_cancel.to_processor()),
            None => (Vec::new(), crate::processor::AutoCancel::default()),
        };
        let needed = jobs.iter().map(|j| j.stage_idx + 1).max().unwrap_or(0);
        while stages.len() < needed {
            stages.push(format!("stage-{}", stages.len()));
        }
        let status = Status::parse(&pipeline.status).ok_or_else(|| {
            CoordinatorError::corrupt(format!(
                "pipeline {} has status `{}`",
                pipeline.id, pipeline.status
            ))
        })?;
        let state = PipelineState::from_parts(stages, jobs, auto_cancel, status)
            .map_err(CoordinatorError::corrupt)?;
        Ok(Loaded {
            pipeline,
            rows,
            specs,
            state,
        })
    }

    /// The processor id of the row with database id `db_id`.
    pub fn job_id(&self, db_id: i64) -> Option<JobId> {
        self.rows.iter().position(|r| r.id == db_id).map(job_id)
    }

    /// The row of processor job `id` (`None` for rows not persisted yet).
    pub fn row(&self, id: JobId) -> Option<&Job> {
        usize::try_from(id.0)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.rows.get(i))
    }

    /// The latest persisted row called `name` (the template of a new attempt).
    pub fn latest_index(&self, name: &str) -> Option<usize> {
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.name == name)
            .max_by_key(|(_, r)| (r.attempt, r.id))
            .map(|(i, _)| i)
    }

    /// The spec of a processor job (a new attempt has its name's).
    pub fn spec_of(&self, j: &JobState) -> Option<&StoredSpec> {
        let i = match self.row(j.id) {
            Some(_) => usize::try_from(j.id.0 - 1).ok(),
            None => self.latest_index(&j.name),
        };
        i.and_then(|i| self.specs.get(i)).map(|s| &**s)
    }
}

/// Side data of one decision that the processor does not model.
#[derive(Clone, Debug, Default)]
pub(crate) struct Extras {
    /// Variables of a played job, by name, as stored (sealed: `Coordinator::seal_variables`):
    /// stored on whichever row of that name the decision starts (the played row, or its
    /// new attempt).
    pub manual_variables: Option<(String, String)>,
}

impl Extras {
    fn manual_for(&self, name: &str) -> Option<&str> {
        self.manual_variables
            .as_ref()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One job's status change, as persisted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StatusChange {
    /// `None` for a new row.
    pub db_id: Option<i64>,
    pub name: String,
    pub from: Option<Status>,
    pub to: Status,
    pub resource_group: bool,
}

/// Turn the decided state into the store's change.
pub(crate) fn diff(
    loaded: &Loaded,
    state: &PipelineState,
    now_ms: i64,
    extras: &Extras,
) -> (PipelineChange, Vec<StatusChange>) {
    let now_s = now_ms.div_euclid(1000);
    let conv = |new: Option<Timestamp>, old: Option<Timestamp>, row: Option<i64>| -> Option<i64> {
        if new == old {
            row
        } else {
            new.map(|t| {
                if t.0 == now_s {
                    now_ms
                } else {
                    t.0.saturating_mul(1000)
                }
            })
        }
    };
    let mut change = PipelineChange::default();
    let mut changes = Vec::new();
    for (i, row) in loaded.rows.iter().enumerate() {
        let id = job_id(i);
        let (Some(old), Some(new)) = (loaded.state.job(id), state.job(id)) else {
            continue;
        };
        let started_now =
            new.status != old.status && matches!(old.status, Status::Manual | Status::Scheduled);
        let manual = if started_now {
            extras.manual_for(&new.name)
        } else {
            None
        };
        let same = old.status == new.status
            && old.retried == new.retried
            && old.allow_failure == new.allow_failure
            && old.exit_code == new.exit_code
            && old.failure_reason == new.failure_reason
            && old.queued_at == new.queued_at
            && old.scheduled_at == new.scheduled_at
            && old.started_at == new.started_at
            && old.finished_at == new.finished_at
            && manual.is_none();
        if same {
            continue;
        }
        if old.status != new.status {
            changes.push(StatusChange {
                db_id: Some(row.id),
                name: new.name.clone(),
                from: Some(old.status),
                to: new.status,
                resource_group: new.resource_group.is_some(),
            });
        }
        change.jobs.push(JobUpdate {
            id: row.id,
            status: new.status.as_str().to_owned(),
            retried: new.retried,
            allow_failure: new.allow_failure,
            exit_code: new.exit_code,
            failure_reason: new.failure_reason.map(|r| r.as_str().to_owned()),
            queued_at: conv(new.queued_at, old.queued_at, row.queued_at),
            scheduled_at: conv(new.scheduled_at, old.scheduled_at, row.scheduled_at),
            started_at: conv(new.started_at, old.started_at, row.started_at),
            finished_at: conv(new.finished_at, old.finished_at, row.finished_at),
            manual_variables: manual.map(str::to_owned),
            environment_event: super::environment::event_for(
                row.environment_action.as_deref(),
                old.status,
                new.status,
            ),
        });
    }
    for new in state.jobs().iter().skip(loaded.rows.len()) {
        let Some(t) = loaded.latest_index(&new.name) else {
            continue;
        };
        let (row, template) = (&loaded.rows[t], &loaded.specs[t]);
        let mut spec = StoredSpec::clone(template);
        spec.enqueue_immediately = new.enqueue_immediately;
        spec.manual_variables = Vec::new();
        spec.manual_variables_sealed = extras.manual_for(&new.name).map(str::to_owned);
        changes.push(StatusChange {
            db_id: None,
            name: new.name.clone(),
            from: None,
            to: new.status,
            resource_group: new.resource_group.is_some(),
        });
        change.new_jobs.push(NewJob {
            name: new.name.clone(),
            stage: row.stage.clone(),
            stage_idx: row.stage_idx,
            status: new.status.as_str().to_owned(),
            attempt: i64::from(new.attempt),
            allow_failure: new.allow_failure,
            spec: spec.to_json(),
            tags: row.tags.clone(),
            protected: row.protected,
            bridge: spec.is_bridge(),
            failure_reason: None,
            // A new attempt is a new deployment to the environment (as on GitLab).
            environment: spec.new_job_environment(),
            resource_group: spec.job.resource_group.clone(),
        });
    }
    // The pipeline's state machine moved it in the processing passes of this decision
    // (`PipelineState::advance`); none ran (a retry's new rows) ⇒ it stays.
    let status = pipeline_status(state).status;
    change.status = status.as_str().to_owned();
    change.ended = status.is_stopped() && loaded.pipeline.status != change.status;
    let started = status == Status::Running || state.current_jobs().any(|j| j.started_at.is_some());
    change.started_at = started.then(|| loaded.pipeline.started_at.unwrap_or(now_ms));
    change.finished_at = status
        .is_completed()
        .then(|| loaded.pipeline.finished_at.unwrap_or(now_ms));
    (change, changes)
}

/// Pipeline or manual variables as stored: a JSON object in order.
pub(crate) fn variables_json(vars: &[(String, String)]) -> String {
    pipeline_variables_json(vars, &[])
}

/// [`variables_json`] where the keys in `files` are file variables, stored as
/// `{"value": …, "variable_type": "file"}`.
pub(crate) fn pipeline_variables_json(vars: &[(String, String)], files: &[String]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = vars
        .iter()
        .map(|(k, v)| {
            let value = if files.contains(k) {
                serde_json::json!({ "value": v, "variable_type": "file" })
            } else {
                serde_json::Value::String(v.clone())
            };
            (k.clone(), value)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// The inverse of [`variables_json`] (file variables give their value); anything
/// unreadable is no variables.
pub(crate) fn parse_variables(json: &str) -> Vec<(String, String)> {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Object(mut o) => match o.remove("value") {
                        Some(serde_json::Value::String(s)) => s,
                        _ => String::new(),
                    },
                    other => other.to_string(),
                };
                (k, v)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The keys of stored variables that are file variables.
pub(crate) fn file_variable_keys(json: &str) -> Vec<String> {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter(|(_, v)| v.get("variable_type").and_then(|t| t.as_str()) == Some("file"))
            .map(|(k, _)| k)
            .collect(),
        _ => Vec::new(),
    }
}
