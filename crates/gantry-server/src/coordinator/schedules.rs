//! Pipeline schedules (GitLab's `Ci::PipelineSchedule`, Build › Pipeline schedules): a
//! ref's pipeline at the times a cron expression names in a time zone (`gantry-cron`), with
//! the schedule's variables as pipeline variables and `CI_PIPELINE_SOURCE=schedule`.
//!
//! The timers ([`Coordinator::tick`]) run due schedules every second
//! ([`Coordinator::run_due_schedules`]); GitLab runs them when its schedule worker next
//! runs after the cron time (every few minutes), Gantry at the cron time. A schedule whose
//! runs were missed (the server was down) runs once, then at its next time. A run moves
//! `next_run_at` by compare-and-set in the pipeline's own transaction, so one coordinator
//! of several runs it. `play` runs a schedule now and leaves its next time alone, as
//! GitLab's does.
//!
//! The pass is started every second by `spawn_background`'s loop (in `timers.rs`), one pass
//! at a time, unless `CoordinatorConfig::run_schedules` is off (`gantry run`); each
//! pipeline is created through `create_at` (`Creation::schedule`).
//!
//! The service ([`Schedules`], `Coordinator::schedules()`) keeps the schedules: their rows,
//! variables (sealed with the settings' key), full refs and next runs. Whatever creates a
//! pipeline — a due run, `play` — and a schedule's pipelines as API views stay on the
//! coordinator, which reads the schedule through the service.
//!
//! Limits: at most [`MAX_SCHEDULES_PER_PROJECT`] schedules per project, at most
//! [`MAX_SCHEDULE_VARIABLES`] variables per schedule (values as project variables').

use gantry_pipeline::{PipelineInputs, Source};
use gantry_store::{PipelineSchedule, ScheduleRun, StoreError};
use serde::Serialize;

use super::creation::Creation;
use super::error::Result;
use super::settings::Settings;
use super::sources::Sources;
use super::state::{file_variable_keys, parse_variables, pipeline_variables_json};
use super::time::{iso8601, now_ms};
use super::variables::{ENV_VAR, FILE, validate_attributes};
use super::{Coordinator, CoordinatorError};
use gantry_cron::{Cron, zone};

/// Schedules a project may have.
pub const MAX_SCHEDULES_PER_PROJECT: i64 = 100;
/// Variables a schedule may have.
pub const MAX_SCHEDULE_VARIABLES: usize = 100;
const MAX_DESCRIPTION: usize = 255;
/// Due schedules started per timer pass (the next pass takes the rest).
const DUE_PER_PASS: i64 = 50;

/// A schedule as GitLab's API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScheduleView {
    pub id: i64,
    pub description: String,
    /// `refs/heads/…` or `refs/tags/…`, as GitLab keeps it.
    #[serde(rename = "ref")]
    pub ref_name: String,
    pub cron: String,
    pub cron_timezone: String,
    pub next_run_at: Option<String>,
    pub active: bool,
    pub created_at: String,
    pub updated_at: String,
    pub owner: ScheduleOwner,
    /// The newest pipeline the schedule ran (one schedule's view only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_pipeline: Option<LastPipeline>,
    /// The schedule's variables (one schedule's view only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variables: Option<Vec<ScheduleVariable>>,
}

/// The user schedules run as (the server's administrator).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScheduleOwner {
    pub id: u64,
    pub name: String,
    pub username: String,
    pub state: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LastPipeline {
    pub id: i64,
    pub sha: String,
    #[serde(rename = "ref")]
    pub ref_name: String,
    pub status: crate::processor::Status,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScheduleVariable {
    pub key: String,
    pub value: String,
    pub variable_type: String,
}

/// Settings of a new or changed schedule; `None` keeps the current value (for a new one:
/// `description`, `ref` and `cron` are required, `cron_timezone` is `UTC`, `active` true).
#[derive(Clone, Debug, Default)]
pub struct ScheduleRequest {
    pub description: Option<String>,
    pub ref_name: Option<String>,
    pub cron: Option<String>,
    pub cron_timezone: Option<String>,
    pub active: Option<bool>,
}

fn invalid(m: impl Into<String>) -> CoordinatorError {
    CoordinatorError::Invalid(m.into())
}

/// The next run of `cron` in `timezone` after `after`; the error names what is wrong.
fn next_run(cron: &str, timezone: &str, after: i64) -> Result<i64> {
    let parsed = Cron::parse(cron).map_err(|e| invalid(format!("cron: {e}")))?;
    let tz = zone(timezone).ok_or_else(|| {
        invalid(format!(
            "cron_timezone: `{timezone}` is no time zone: give an IANA name such as `UTC`, `Europe/Berlin` or `America/New_York`, or a Rails name such as `Pacific Time (US & Canada)`"
        ))
    })?;
    parsed.next_after(after, &tz).ok_or_else(|| {
        invalid(format!(
            "cron: `{cron}` names no time in the next years: it would never run"
        ))
    })
}

/// The schedules service (`Coordinator::schedules()`): a project's schedules, their
/// variables (sealed as project variables are) and next runs. It calls the store,
/// [`Settings`] (sealing) and [`Sources`] (a ref's full name) only; running a schedule
/// creates a pipeline, which stays the coordinator's (`play_pipeline_schedule`,
/// `run_due_schedules`).
pub struct Schedules<'a> {
    store: &'a gantry_store::Store,
    settings: &'a Settings,
    sources: &'a Sources,
    /// Shown as every schedule's owner (the server's one user).
    owner: &'a super::PipelineUser,
}

impl Schedules<'_> {
    fn view(&self, s: &PipelineSchedule) -> ScheduleView {
        let user = &self.owner;
        ScheduleView {
            id: s.id,
            description: s.description.clone(),
            ref_name: s.ref_name.clone(),
            cron: s.cron.clone(),
            cron_timezone: s.cron_timezone.clone(),
            next_run_at: s.next_run_at.map(iso8601),
            active: s.active,
            created_at: iso8601(s.created_at),
            updated_at: iso8601(s.updated_at),
            owner: ScheduleOwner {
                id: user.id,
                name: user.name.clone(),
                username: user.login.clone(),
                state: "active",
            },
            last_pipeline: None,
            variables: None,
        }
    }

    /// A schedule's variables `(key, value, file?)`.
    pub(crate) fn variables(&self, s: &PipelineSchedule) -> Result<Vec<ScheduleVariable>> {
        let json = self.settings.open(&s.variables).map_err(|e| {
            CoordinatorError::corrupt(format!("the variables of schedule {}: {e}", s.id))
        })?;
        let files = file_variable_keys(&json);
        Ok(parse_variables(&json)
            .into_iter()
            .map(|(key, value)| ScheduleVariable {
                variable_type: if files.contains(&key) { FILE } else { ENV_VAR }.to_owned(),
                key,
                value,
            })
            .collect())
    }

    fn seal_variables(&self, vars: &[ScheduleVariable]) -> String {
        let pairs: Vec<(String, String)> = vars
            .iter()
            .map(|v| (v.key.clone(), v.value.clone()))
            .collect();
        let files: Vec<String> = vars
            .iter()
            .filter(|v| v.variable_type == FILE)
            .map(|v| v.key.clone())
            .collect();
        self.settings
            .seal_variables(pipeline_variables_json(&pairs, &files, &[]))
    }

    /// `main`, `refs/heads/main`, `v1.0` → the full name of the branch or tag in the
    /// project's repository (GitLab keeps a schedule's ref in full).
    async fn full_ref(&self, project: &gantry_store::Project, ref_name: &str) -> Result<String> {
        let mirror = self.sources.sync_mirror(project).await?;
        match mirror.resolve(ref_name.trim()).await? {
            Some((r, _)) if r.tag => Ok(format!("refs/tags/{}", r.name)),
            Some((r, _)) => Ok(format!("refs/heads/{}", r.name)),
            None => Err(invalid(format!(
                "ref: `{ref_name}` is no branch or tag of {}",
                project.name
            ))),
        }
    }

    pub async fn create(
        &self,
        project_id: i64,
        request: ScheduleRequest,
    ) -> std::result::Result<ScheduleView, CoordinatorError> {
        let project = self.store.project(project_id).await?;
        let description = request
            .description
            .filter(|d| !d.trim().is_empty())
            .ok_or_else(|| invalid("description is missing: say what the schedule is for"))?;
        let ref_name = request
            .ref_name
            .filter(|r| !r.trim().is_empty())
            .ok_or_else(|| invalid("ref is missing: give the branch or tag to run"))?;
        let cron = request
            .cron
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| invalid("cron is missing: give five fields, e.g. `0 3 * * *`"))?;
        let now = now_ms();
        let mut s = PipelineSchedule {
            id: 0,
            project_id,
            description,
            ref_name,
            cron,
            cron_timezone: request.cron_timezone.unwrap_or_else(|| "UTC".to_owned()),
            active: request.active.unwrap_or(true),
            next_run_at: None,
            variables: self.seal_variables(&[]),
            created_at: now,
            updated_at: now,
        };
        self.check(&project, &mut s, now).await?;
        let stored = self
            .store
            .create_pipeline_schedule(&s, MAX_SCHEDULES_PER_PROJECT)
            .await?;
        Ok(self.view(&stored))
    }

    /// Validates `s` and sets its full ref and next run.
    async fn check(
        &self,
        project: &gantry_store::Project,
        s: &mut PipelineSchedule,
        now: i64,
    ) -> Result<()> {
        if s.description.chars().count() > MAX_DESCRIPTION {
            return Err(invalid(format!(
                "description: is too long (maximum is {MAX_DESCRIPTION} characters)"
            )));
        }
        let next = next_run(&s.cron, &s.cron_timezone, now)?;
        s.next_run_at = s.active.then_some(next);
        s.ref_name = self.full_ref(project, &s.ref_name).await?;
        Ok(())
    }

    pub async fn update(
        &self,
        project_id: i64,
        id: i64,
        request: ScheduleRequest,
    ) -> std::result::Result<ScheduleView, CoordinatorError> {
        let project = self.store.project(project_id).await?;
        let mut s = self.store.pipeline_schedule(project_id, id).await?;
        if let Some(d) = request.description {
            if d.trim().is_empty() {
                return Err(invalid("description: can't be blank"));
            }
            s.description = d;
        }
        if let Some(r) = request.ref_name {
            s.ref_name = r;
        }
        if let Some(c) = request.cron {
            s.cron = c;
        }
        if let Some(z) = request.cron_timezone {
            s.cron_timezone = z;
        }
        if let Some(a) = request.active {
            s.active = a;
        }
        let now = now_ms();
        s.updated_at = now;
        self.check(&project, &mut s, now).await?;
        let stored = self.store.update_pipeline_schedule(&s).await?;
        Ok(self.view(&stored))
    }

    pub async fn list(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<ScheduleView>, CoordinatorError> {
        self.store.project(project_id).await?;
        Ok(self
            .store
            .pipeline_schedules(project_id)
            .await?
            .iter()
            .map(|s| self.view(s))
            .collect())
    }

    /// One schedule with its variables and newest pipeline.
    pub async fn get(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<ScheduleView, CoordinatorError> {
        let s = self.store.pipeline_schedule(project_id, id).await?;
        let mut view = self.view(&s);
        view.variables = Some(self.variables(&s)?);
        view.last_pipeline = self
            .store
            .schedule_pipelines(id, 1)
            .await?
            .first()
            .map(|p| LastPipeline {
                id: p.id,
                sha: p.sha.clone(),
                ref_name: p.ref_name.clone(),
                status: p.status,
            });
        Ok(view)
    }

    pub async fn delete(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<(), CoordinatorError> {
        Ok(self.store.delete_pipeline_schedule(project_id, id).await?)
    }

    /// Adds (`create`) or changes a schedule's variable; `Conflict` when creating a key
    /// it has, `NotFound` when changing one it has not.
    pub async fn set_variable(
        &self,
        project_id: i64,
        id: i64,
        variable: ScheduleVariable,
        create: bool,
    ) -> std::result::Result<ScheduleVariable, CoordinatorError> {
        validate_attributes(
            &variable.key,
            &variable.value,
            &variable.variable_type,
            false,
        )?;
        let mut s = self.store.pipeline_schedule(project_id, id).await?;
        let mut vars = self.variables(&s)?;
        match vars.iter_mut().find(|v| v.key == variable.key) {
            Some(_) if create => {
                return Err(CoordinatorError::Conflict(format!(
                    "key: `{}` has already been taken",
                    variable.key
                )));
            }
            Some(v) => *v = variable.clone(),
            None if !create => {
                return Err(CoordinatorError::NotFound("pipeline schedule variable"));
            }
            None => {
                if vars.len() >= MAX_SCHEDULE_VARIABLES {
                    return Err(invalid(format!(
                        "variables: a schedule has at most {MAX_SCHEDULE_VARIABLES} variables"
                    )));
                }
                vars.push(variable.clone());
            }
        }
        s.variables = self.seal_variables(&vars);
        s.updated_at = now_ms();
        self.store.update_pipeline_schedule(&s).await?;
        Ok(variable)
    }

    pub async fn delete_variable(
        &self,
        project_id: i64,
        id: i64,
        key: &str,
    ) -> std::result::Result<ScheduleVariable, CoordinatorError> {
        let mut s = self.store.pipeline_schedule(project_id, id).await?;
        let mut vars = self.variables(&s)?;
        let Some(at) = vars.iter().position(|v| v.key == key) else {
            return Err(CoordinatorError::NotFound("pipeline schedule variable"));
        };
        let removed = vars.remove(at);
        s.variables = self.seal_variables(&vars);
        s.updated_at = now_ms();
        self.store.update_pipeline_schedule(&s).await?;
        Ok(removed)
    }
}

impl Coordinator {
    /// The schedules service (see the module docs).
    pub fn schedules(&self) -> Schedules<'_> {
        Schedules {
            store: &self.inner.store,
            settings: self.settings(),
            sources: self.sources(),
            owner: &self.inner.cfg.user,
        }
    }

    /// The pipelines a schedule ran, newest first (at most 100).
    pub async fn schedule_pipelines(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<Vec<super::views::PipelineView>, CoordinatorError> {
        self.inner.store.pipeline_schedule(project_id, id).await?;
        let mut out = Vec::new();
        for p in self.inner.store.schedule_pipelines(id, 100).await? {
            out.push(self.pipeline_view(&p).await?);
        }
        Ok(out)
    }

    /// Run a schedule now (GitLab's "play"): its pipeline, its next run unchanged.
    pub async fn play_pipeline_schedule(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<super::views::PipelineView, CoordinatorError> {
        let s = self.inner.store.pipeline_schedule(project_id, id).await?;
        self.run_schedule(
            &s,
            ScheduleRun {
                schedule_id: s.id,
                due: None,
                next: None,
            },
        )
        .await
    }

    /// Start every active schedule whose time has come (at most 50 per call): each gets a
    /// pipeline and its next run, or, when its pipeline cannot be created (its ref is gone,
    /// `workflow:rules` filter it out), only its next run. Returns the pipelines created.
    pub async fn run_due_schedules(
        &self,
        now: i64,
    ) -> std::result::Result<Vec<i64>, CoordinatorError> {
        let mut created = Vec::new();
        for s in self
            .inner
            .store
            .due_pipeline_schedules(now, DUE_PER_PASS)
            .await?
        {
            let Some(due) = s.next_run_at else { continue };
            // Missed runs are one run: the next time counts from now.
            let next = next_run(&s.cron, &s.cron_timezone, now).ok();
            let run = ScheduleRun {
                schedule_id: s.id,
                due: Some(due),
                next,
            };
            match self.run_schedule(&s, run).await {
                Ok(p) => created.push(p.id),
                // Another coordinator ran it.
                Err(CoordinatorError::Store(StoreError::Stale)) => {}
                Err(e) => {
                    eprintln!(
                        "gantry: pipeline schedule {} (`{}`) created no pipeline: {e}",
                        s.id, s.description
                    );
                    self.inner
                        .store
                        .move_pipeline_schedule(s.id, due, next, now_ms())
                        .await?;
                }
            }
        }
        Ok(created)
    }

    async fn run_schedule(
        &self,
        s: &PipelineSchedule,
        run: ScheduleRun,
    ) -> std::result::Result<super::views::PipelineView, CoordinatorError> {
        let project = self.inner.store.project(s.project_id).await?;
        let vars = self.schedules().variables(s)?;
        let mirror = self.sources().sync_mirror(&project).await?;
        let Some((r, commit)) = mirror.resolve(&s.ref_name).await? else {
            return Err(invalid(format!(
                "create a pipeline: Reference not found: `{}` is no branch or tag of {}",
                s.ref_name, project.name
            )));
        };
        self.sources().remember_commit(project.id, &r, &commit);
        let protected = self.settings().ref_protected(project.id, &r).await?;
        self.create_at(Creation {
            project,
            mirror,
            r,
            commit,
            protected,
            file_variables: vars
                .iter()
                .filter(|v| v.variable_type == FILE)
                .map(|v| v.key.clone())
                .collect(),
            raw_variables: Vec::new(),
            variables: vars.into_iter().map(|v| (v.key, v.value)).collect(),
            source: Source::Schedule,
            selection: None,
            parent_job_id: None,
            inputs: PipelineInputs::default(),
            child: None,
            push: None,
            schedule: Some(run),
            fetched: None,
            merge_request: None,
            trigger_short_token: None,
        })
        .await
    }
}
