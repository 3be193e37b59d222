//! The one path every state change takes: a pipeline's rows → [`PipelineState`] →
//! processor decision → `store.apply` (optimistic lock; retried when stale — only another
//! process can make it so: this process's assignments wait on the coordinator's
//! assignment gate from a decision's read to its commit). [`Loaded`]
//! is a pipeline as read — and as kept between decisions: the coordinator holds each
//! active pipeline's copy while its `lock_version` is the store's, so a decision reads
//! one row (the pipeline's) and costs work in proportion to the jobs it changes;
//! [`diff`] turns the jobs the decision changed back into the store's [`PipelineChange`].
//!
//! Processor job ids are row positions (`JobId(i + 1)` is `rows[i]`); rows the processor
//! adds (retries) come after them and become new rows.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gantry_store::{Job, JobUpdate, NewJob, Pipeline, PipelineChange};

use crate::processor::{JobId, JobState, PipelineState, Status, Timestamp, pipeline_status};

use super::error::{CoordinatorError, Result};
use super::spec::StoredSpec;

/// A pipeline as read from the store: its row, its job rows with their parsed specs, and
/// the processor's state built from them. Kept between decisions by the coordinator's
/// active-pipeline cache ([`super::Coordinator`]'s `decide`), valid while the
/// pipeline's `lock_version` is the one in [`Loaded::pipeline`]: every decision moves it
/// ([`gantry_store::Store::apply`]), and so does an assignment
/// ([`gantry_store::Store::assign_jobs`]); a holder of the copy applies its own changes
/// to it ([`Loaded::applied`], [`Loaded::assigned`]).
#[derive(Clone, Debug)]
pub(crate) struct Loaded {
    pub pipeline: Pipeline,
    pub rows: Vec<Job>,
    pub specs: Vec<Arc<StoredSpec>>,
    pub state: PipelineState,
    /// Row position of each job id.
    by_id: HashMap<i64, usize>,
    /// Built from the store, not yet decided over (a decision then looks at every row,
    /// not only at the ones it changed).
    pub fresh: bool,
}

pub(crate) fn job_id(index: usize) -> JobId {
    JobId(u32::try_from(index + 1).unwrap_or(u32::MAX))
}

fn ts(ms: Option<i64>) -> Option<Timestamp> {
    ms.map(super::time::to_ts)
}

/// The processor's view of row `i`.
fn job_state(i: usize, row: &Job, spec: &StoredSpec, graceful: bool) -> Result<JobState> {
    let status = row.status;
    let mut j = spec.job_state(job_id(i), status);
    j.name = row.name.clone();
    j.stage_idx = usize::try_from(row.stage_idx).unwrap_or(0);
    j.allow_failure = row.allow_failure;
    j.attempt = u32::try_from(row.attempt).unwrap_or(1);
    j.retried = row.retried;
    j.enqueue_immediately = spec.enqueue_immediately && status == Status::Created;
    j.exit_code = row.exit_code;
    j.failure_reason = row.failure_reason.as_deref().and_then(|r| r.parse().ok());
    j.graceful_cancel = graceful;
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
    Ok(j)
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
            jobs.push(job_state(i, row, spec, graceful.contains(&row.id))?);
        }
        let (mut stages, auto_cancel) = match specs.first() {
            Some(s) => (s.stages.clone(), s.auto_cancel.to_processor()),
            None => (Vec::new(), crate::processor::AutoCancel::default()),
        };
        let needed = jobs.iter().map(|j| j.stage_idx + 1).max().unwrap_or(0);
        while stages.len() < needed {
            stages.push(format!("stage-{}", stages.len()));
        }
        let status = pipeline.status;
        let state = PipelineState::from_parts(stages, jobs, auto_cancel, status)
            .map_err(CoordinatorError::corrupt)?;
        let by_id = rows.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
        Ok(Loaded {
            pipeline,
            rows,
            specs,
            state,
            by_id,
            fresh: true,
        })
    }

    /// The processor id of the row with database id `db_id`.
    /// The position of row `db_id` in `rows` and `specs`.
    pub fn row_index(&self, db_id: i64) -> Option<usize> {
        self.by_id.get(&db_id).copied()
    }

    pub fn job_id(&self, db_id: i64) -> Option<JobId> {
        self.by_id.get(&db_id).copied().map(job_id)
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

    /// The store applied `change` (decided over this copy, whose state is now `state`):
    /// the copy becomes what the store holds, as [`gantry_store::Store::apply`] writes
    /// it. `None` when the change added rows (the store numbers them: read again).
    pub fn applied(
        mut self,
        state: PipelineState,
        change: &PipelineChange,
        positions: &[usize],
        now_ms: i64,
    ) -> Option<Loaded> {
        if !change.new_jobs.is_empty() {
            return None;
        }
        let p = &mut self.pipeline;
        p.lock_version += 1;
        p.status.clone_from(&change.status);
        p.started_at = p.started_at.or(change.started_at);
        p.finished_at = change.finished_at;
        p.updated_at = now_ms;
        for (u, &i) in change.jobs.iter().zip(positions) {
            let row = self.rows.get_mut(i)?;
            row.status.clone_from(&u.status);
            row.retried = u.retried;
            row.allow_failure = u.allow_failure;
            row.exit_code = u.exit_code.or(row.exit_code);
            row.failure_reason = u.failure_reason.clone().or(row.failure_reason.take());
            row.queued_at = u.queued_at.or(row.queued_at);
            row.scheduled_at = u.scheduled_at;
            row.started_at = u.started_at.or(row.started_at);
            row.finished_at = u.finished_at.or(row.finished_at);
            if u.manual_variables.is_some() {
                row.manual_variables.clone_from(&u.manual_variables);
            }
            if u.input_values.is_some() {
                row.input_values.clone_from(&u.input_values);
            }
        }
        self.state = state;
        self.fresh = false;
        Some(self)
    }

    /// The store assigned jobs of this pipeline to runners ([`gantry_store::Store::assign_jobs`],
    /// which moved the pipeline's lock to `lock_version`) at `now_ms`. False when this
    /// copy was not as of just before (then it is to be read again).
    pub fn assigned(&mut self, lock_version: i64, jobs: &[AssignedJob], now_ms: i64) -> bool {
        if self.pipeline.lock_version + 1 != lock_version {
            return false;
        }
        for a in jobs {
            let Some(&i) = self.by_id.get(&a.job_id) else {
                return false;
            };
            let row = &mut self.rows[i];
            row.status = Status::Running;
            row.runner_id = Some(a.runner_id);
            row.runner_manager_id = a.runner_manager_id;
            row.timeout_secs = Some(a.timeout_secs);
            row.started_at = Some(now_ms);
            row.last_contact_at = None;
            match job_state(i, &self.rows[i], &self.specs[i], a.graceful) {
                Ok(j) => self.state.refresh(j),
                Err(_) => return false,
            }
        }
        self.pipeline.lock_version = lock_version;
        true
    }
}

/// A job the store handed to a runner, as [`Loaded::assigned`] applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AssignedJob {
    pub job_id: i64,
    pub runner_id: i64,
    pub runner_manager_id: Option<i64>,
    pub timeout_secs: i64,
    /// The runner cancels gracefully.
    pub graceful: bool,
}

/// Side data of one decision that the processor does not model.
#[derive(Clone, Debug, Default)]
pub(crate) struct Extras {
    /// Variables of a played job, by name, as stored (sealed: `Settings::seal_variables`):
    /// stored on whichever row of that name the decision starts (the played row, or its
    /// new attempt).
    pub manual_variables: Option<(String, String)>,
    /// Job input values of a played or retried job, by name (`job_inputs.rs`): stored
    /// in the spec of the row the decision starts; `None` keeps the values as they were.
    pub input_values: Option<(String, serde_json::Map<String, serde_json::Value>)>,
    /// The decision is stored only while this job holds this token
    /// ([`gantry_store::PipelineChange::guard`]).
    pub token_guard: Option<gantry_store::JobTokenGuard>,
}

impl Extras {
    fn inputs_for(&self, name: &str) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.input_values
            .as_ref()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
    }

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

/// Turn the decided state into the store's change: the rows of the jobs changed since
/// `originals` were taken ([`PipelineState::take_originals`], each job as it was), and the
/// new ones. Also returns the row position of each of `change.jobs`. O(jobs changed).
pub(crate) fn diff(
    loaded: &Loaded,
    state: &PipelineState,
    originals: &[(usize, JobState)],
    now_ms: i64,
    extras: &Extras,
) -> (PipelineChange, Vec<StatusChange>, Vec<usize>) {
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
    let mut change = PipelineChange {
        guard: extras.token_guard.clone(),
        ..PipelineChange::default()
    };
    let mut changes = Vec::new();
    let mut positions = Vec::new();
    for (i, old) in originals {
        let (Some(row), Some(new)) = (loaded.rows.get(*i), state.jobs().get(*i)) else {
            continue;
        };
        let started_now =
            new.status != old.status && matches!(old.status, Status::Manual | Status::Scheduled);
        let manual = if started_now {
            extras.manual_for(&new.name)
        } else {
            None
        };
        // A played manual job's input values go on its own row.
        let inputs = match (started_now, extras.inputs_for(&new.name)) {
            (true, Some(values)) => Some(serde_json::Value::Object(values.clone()).to_string()),
            _ => None,
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
            && manual.is_none()
            && inputs.is_none();
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
        positions.push(*i);
        change.jobs.push(JobUpdate {
            id: row.id,
            status: new.status,
            retried: new.retried,
            allow_failure: new.allow_failure,
            exit_code: new.exit_code,
            failure_reason: new.failure_reason.map(|r| r.as_str().to_owned()),
            queued_at: conv(new.queued_at, old.queued_at, row.queued_at),
            scheduled_at: conv(new.scheduled_at, old.scheduled_at, row.scheduled_at),
            started_at: conv(new.started_at, old.started_at, row.started_at),
            finished_at: conv(new.finished_at, old.finished_at, row.finished_at),
            manual_variables: manual.map(str::to_owned),
            input_values: inputs,
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
        // Values given now replace the previous attempt's; else it keeps them (those
        // given when it was played are on its row).
        if let Some(values) = extras.inputs_for(&new.name) {
            spec.input_values = (!values.is_empty()).then(|| values.clone());
        } else if let Some(played) = row.input_values.as_deref() {
            spec.input_values = serde_json::from_str(played).ok();
        }
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
            status: new.status,
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
    change.status = status;
    change.ended = status.is_stopped() && loaded.pipeline.status != change.status;
    let started = loaded.pipeline.started_at.is_some()
        || status == Status::Running
        || state.current_jobs().any(|j| j.started_at.is_some());
    change.started_at = started.then(|| loaded.pipeline.started_at.unwrap_or(now_ms));
    change.finished_at = status
        .is_completed()
        .then(|| loaded.pipeline.finished_at.unwrap_or(now_ms));
    (change, changes, positions)
}

/// Pipeline or manual variables as stored: a JSON object in order.
pub(crate) fn variables_json(vars: &[(String, String)]) -> String {
    pipeline_variables_json(vars, &[], &[])
}

/// [`variables_json`] where the keys in `files` are file variables and those in `raw`
/// are never expanded, stored as `{"value": …, "variable_type": "file", "raw": true}`.
pub(crate) fn pipeline_variables_json(
    vars: &[(String, String)],
    files: &[String],
    raw: &[String],
) -> String {
    let map: serde_json::Map<String, serde_json::Value> = vars
        .iter()
        .map(|(k, v)| {
            let value = match (files.contains(k), raw.contains(k)) {
                (false, false) => serde_json::Value::String(v.clone()),
                (true, false) => serde_json::json!({ "value": v, "variable_type": "file" }),
                (file, true) => serde_json::json!({
                    "value": v,
                    "variable_type": if file { "file" } else { "env_var" },
                    "raw": true,
                }),
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

/// The keys of stored variables that are never expanded.
pub(crate) fn raw_variable_keys(json: &str) -> Vec<String> {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter(|(_, v)| v.get("raw").and_then(serde_json::Value::as_bool) == Some(true))
            .map(|(k, _)| k)
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
