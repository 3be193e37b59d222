//! Project CI/CD variables (GitLab's Settings › CI/CD › Variables, `/projects/:id/variables`).
//!
//! A variable is unique per `(key, environment_scope)` in its project. Which of them a job
//! gets ([`for_job`]): protected ones only in pipelines of protected refs; a scope other
//! than `*` only when the job has an environment whose name matches it (`*` in a scope is a
//! wildcard); of several matches for one key the more specific scope wins (`*` first, later
//! ones replace it, as GitLab orders them). Precedence in the job (`ci-yaml.md` §6.1):
//! above YAML and dotenv variables, below pipeline and manual-job variables.
//!
//! Groups have variables too (`VariableOwner`; a group is a namespace of project names, its
//! id in `group_ids`, no other row): a job sees the layers outer group, subgroups, then its
//! project, the nearer owner winning. They and the instance's are read from the store once
//! and kept, decrypted, in a `SettingsCache`: a job's payload does not read them again. A
//! change through this coordinator (a variable of the instance, a group or a project; a group
//! or project deleted) drops what is kept; a change through another replica is seen within
//! [`SETTINGS_TTL`]. At creation they reach the pipeline through
//! `Context::with_settings_variables`, where a job's rules see its environment's through
//! `Context::project_var_for` (nearest owner, then `scope_rank`).
//!
//! At pipeline creation, `workflow:rules` and `include` paths see the variables of scope `*`;
//! a job's `rules` also see those scoped to its environment (its name expanded with the
//! variables known then), as GitLab's do.
//!
//! Limits (GitLab's): a key has at most 255 characters of letters, digits and `_`; a value
//! at most [`MAX_VALUE_CHARS`] characters; a project at most [`MAX_PER_PROJECT`] variables.
//! A masked value must be at least 8 characters of `[a-zA-Z0-9_+=/@:.~-]` (GitLab's
//! `Ci::Maskable`), so the runner can find it in the log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use gantry_pipeline::context::{SettingsVariable, scope_matches, scope_rank};
use gantry_store::{InstanceVariable, ProjectVariable, VariableOwner};

use super::Coordinator;
use super::error::CoordinatorError;
use super::settings::Settings;
use super::settings::SettingsError;
use super::time::now_ms;

/// The longest value GitLab stores (`Ci::Variable` validates 10,000 characters).
pub const MAX_VALUE_CHARS: usize = 10_000;
/// Variables per project (GitLab's default plan limit `project_ci_variables`).
pub const MAX_PER_PROJECT: usize = 8_000;
/// Variables per group (GitLab's default plan limit `group_ci_variables`).
pub const MAX_PER_GROUP: usize = 30_000;
const MAX_KEY_CHARS: usize = 255;

/// `ENV_VAR` / `FILE` as GitLab's API spells them.
pub const ENV_VAR: &str = "env_var";
pub const FILE: &str = "file";

/// How long kept settings variables are used without reading them again: the bound on
/// seeing a change made through another replica (changes through this one drop them at
/// once).
pub const SETTINGS_TTL: Duration = Duration::from_secs(5);

/// Kept projects at most; past it the cache starts again empty.
const MAX_KEPT_PROJECTS: usize = 4_096;

/// A project's settings variables: `(layer, variable)` as
/// [`Settings::settings_variables`] returns them.
pub(crate) type Layered = Arc<Vec<(usize, ProjectVariable)>>;

/// The settings variables read from the store, decrypted: the instance's, and each
/// project's with its groups' (by project id and name, since the name says the groups).
/// Every entry is used for [`SETTINGS_TTL`]; [`SettingsCache::changed`] drops them all. A read
/// that began before a change does not keep its answer (the generation moved). Cost: a
/// lookup is one hash probe under a mutex; memory is bounded by [`MAX_KEPT_PROJECTS`].
#[derive(Default)]
pub(crate) struct SettingsCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    generation: u64,
    instance: Option<(Instant, Arc<Vec<InstanceVariable>>)>,
    projects: HashMap<(i64, String), (Instant, Layered)>,
}

impl SettingsCache {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The generation now, to hand back with what is then read.
    pub(crate) fn generation(&self) -> u64 {
        self.kept().generation
    }

    /// Variables changed: nothing kept is used again.
    pub(crate) fn changed(&self) {
        let mut kept = self.kept();
        kept.generation = kept.generation.wrapping_add(1);
        kept.instance = None;
        kept.projects.clear();
    }

    pub(crate) fn instance(&self) -> Option<Arc<Vec<InstanceVariable>>> {
        let kept = self.kept();
        let (at, vars) = kept.instance.as_ref()?;
        (at.elapsed() < SETTINGS_TTL).then(|| Arc::clone(vars))
    }

    pub(crate) fn keep_instance(&self, generation: u64, vars: Arc<Vec<InstanceVariable>>) {
        let mut kept = self.kept();
        if kept.generation == generation {
            kept.instance = Some((Instant::now(), vars));
        }
    }

    pub(crate) fn project(&self, id: i64, name: &str) -> Option<Layered> {
        let kept = self.kept();
        let (at, vars) = kept.projects.get(&(id, name.to_owned()))?;
        (at.elapsed() < SETTINGS_TTL).then(|| Arc::clone(vars))
    }

    pub(crate) fn keep_project(&self, generation: u64, id: i64, name: &str, vars: Layered) {
        let mut kept = self.kept();
        if kept.generation != generation {
            return;
        }
        if kept.projects.len() >= MAX_KEPT_PROJECTS {
            kept.projects.clear();
        }
        kept.projects
            .insert((id, name.to_owned()), (Instant::now(), vars));
    }
}

/// Checks a variable before it is stored; the message names the field and the fix.
pub fn validate(v: &ProjectVariable) -> Result<(), SettingsError> {
    validate_attributes(&v.key, &v.value, &v.variable_type, v.masked)?;
    if v.hidden && !v.masked {
        return Err(SettingsError::Invalid(format!(
            "masked of `{}`: a hidden variable is masked too: set masked as well (the API's masked_and_hidden sets both)",
            v.key
        )));
    }
    if v.environment_scope.is_empty() || v.environment_scope.chars().count() > MAX_KEY_CHARS {
        return Err(SettingsError::Invalid(format!(
            "environment_scope of `{}`: must be `*`, an environment name or a pattern with `*`, of at most {MAX_KEY_CHARS} characters",
            v.key
        )));
    }
    Ok(())
}

/// The rules every CI/CD variable follows, project or instance (GitLab's `Ci::HasVariable`
/// and `Ci::Maskable`): key, value length, type, and a maskable value when masked.
pub(crate) fn validate_attributes(
    key: &str,
    value: &str,
    variable_type: &str,
    masked: bool,
) -> Result<(), SettingsError> {
    let invalid = |m: String| Err(SettingsError::Invalid(m));
    if key.is_empty() {
        return invalid("key: is missing: give the variable a name".to_owned());
    }
    if key.chars().count() > MAX_KEY_CHARS {
        return invalid(format!(
            "key: is too long (maximum is {MAX_KEY_CHARS} characters)"
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return invalid(format!(
            "key: `{key}` can contain only letters, digits and '_'"
        ));
    }
    if value.chars().count() > MAX_VALUE_CHARS {
        return invalid(format!(
            "value of `{key}`: is too long (maximum is {MAX_VALUE_CHARS} characters)"
        ));
    }
    if variable_type != ENV_VAR && variable_type != FILE {
        return invalid(format!(
            "variable_type of `{key}`: `{variable_type}` is not a valid value: use `env_var` or `file`"
        ));
    }
    if masked && !maskable(value) {
        return invalid(format!(
            "value of `{key}`: cannot be masked: a masked value must be at least 8 characters of letters, digits and `_+=/@:.~-` (no spaces or newlines); unmask the variable or change its value"
        ));
    }
    Ok(())
}

/// GitLab's `Ci::Maskable::REGEX`: `\A[a-zA-Z0-9_+=/@:.~-]{8,}\z`.
fn maskable(value: &str) -> bool {
    value.len() >= 8
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_+=/@:.~-".contains(&b))
}

/// The settings variables a job of a pipeline gets, in the order they are applied (a
/// later one of the same key replaces an earlier one): `vars` are
/// `Settings::settings_variables`; `environment` is the job's expanded environment
/// name, `None` without one; `protected` says whether the pipeline's ref is protected.
/// Of one key, the nearest owner's wins, there the most specific scope (`scope_rank`).
pub fn for_job<'a>(
    vars: &'a [(usize, ProjectVariable)],
    protected: bool,
    environment: Option<&str>,
) -> Vec<&'a ProjectVariable> {
    let mut out: Vec<&(usize, ProjectVariable)> = vars
        .iter()
        .filter(|(_, v)| protected || !v.protected)
        .filter(|(_, v)| {
            v.environment_scope == "*"
                || environment.is_some_and(|e| scope_matches(&v.environment_scope, e))
        })
        .collect();
    out.sort_by_key(|(layer, v)| {
        let rank = environment.map_or(0, |e| scope_rank(&v.environment_scope, e));
        (*layer, rank)
    });
    out.into_iter().map(|(_, v)| v).collect()
}

/// The settings variables pipeline creation sees (see `Context::with_settings_variables`):
/// all but the protected ones on an unprotected ref.
pub fn for_creation(vars: &[(usize, ProjectVariable)], protected: bool) -> Vec<SettingsVariable> {
    vars.iter()
        .filter(|(_, v)| protected || !v.protected)
        .map(|(layer, v)| SettingsVariable {
            layer: *layer,
            key: v.key.clone(),
            value: v.value.clone(),
            scope: v.environment_scope.clone(),
        })
        .collect()
}

/// A variable as a web page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShownVariable {
    pub key: String,
    /// `None`: hidden (masked).
    pub value: Option<String>,
    /// `job` (its `variables:`), `manual` (given when played) or `pipeline`.
    pub source: &'static str,
}

/// A pipeline's variables, opened.
pub(crate) struct PipelineVariables {
    /// `(key, value)`, in order.
    pub(crate) values: Vec<(String, String)>,
    /// The keys of those that are file variables.
    pub(crate) files: Vec<String>,
    /// The keys of those that are never expanded.
    pub(crate) raw: Vec<String>,
}

impl Settings {
    /// The CI/CD variables of a project or a group (`NotFound` when there is no such
    /// project, or no project in that group).
    pub async fn variables(
        &self,
        owner: &VariableOwner,
    ) -> Result<Vec<ProjectVariable>, SettingsError> {
        self.ensure_owner(owner).await?;
        self.stored_variables(owner).await
    }

    /// Fails with `NotFound` unless `owner` exists: a project, or a group (`groups.rs`).
    pub(crate) async fn ensure_owner(&self, owner: &VariableOwner) -> Result<(), SettingsError> {
        match owner {
            VariableOwner::Project(id) => {
                self.store.project(*id).await?;
            }
            VariableOwner::Group(path) => {
                if !super::groups::group_paths(&self.store)
                    .await?
                    .contains(path)
                {
                    return Err(SettingsError::NotFound("group"));
                }
            }
        }
        Ok(())
    }

    /// An owner's variables as stored, values decrypted.
    pub(crate) async fn stored_variables(
        &self,
        owner: &VariableOwner,
    ) -> Result<Vec<ProjectVariable>, SettingsError> {
        let mut vars = self.store.variables(owner).await?;
        for v in &mut vars {
            v.value = self.open_value(owner, v)?;
        }
        Ok(vars)
    }

    fn open_value(
        &self,
        owner: &VariableOwner,
        v: &ProjectVariable,
    ) -> Result<String, SettingsError> {
        self.key.decrypt(&v.value).map_err(|e| {
            let whose = match owner {
                VariableOwner::Project(_) => "project".to_owned(),
                VariableOwner::Group(path) => format!("group `{path}`"),
            };
            SettingsError::Undecryptable(format!(
                "the value of {whose} variable `{}` (scope `{}`): {e}",
                v.key, v.environment_scope
            ))
        })
    }

    /// The settings variables a pipeline of project `project_name` sees, each with its
    /// layer (`SettingsVariable::layer`: its groups from the outermost, 0, then the
    /// project): project above group, the nearest subgroup above its parents
    /// (`ci-yaml.md` §6.1). One query for the project and all its groups.
    pub(crate) async fn settings_variables(
        &self,
        project_id: i64,
        project_name: &str,
    ) -> Result<Layered, SettingsError> {
        let cache = &self.cache;
        if let Some(kept) = cache.project(project_id, project_name) {
            return Ok(kept);
        }
        let generation = cache.generation();
        let read = Arc::new(
            self.read_settings_variables(project_id, project_name)
                .await?,
        );
        cache.keep_project(generation, project_id, project_name, Arc::clone(&read));
        Ok(read)
    }

    /// [`Settings::settings_variables`] from the store.
    async fn read_settings_variables(
        &self,
        project_id: i64,
        project_name: &str,
    ) -> Result<Vec<(usize, ProjectVariable)>, SettingsError> {
        let groups = group_paths(project_name);
        let mut out = Vec::new();
        for (owner, mut v) in self.store.settings_variables(project_id, &groups).await? {
            let layer = match &owner {
                VariableOwner::Group(path) => groups.iter().position(|g| g == path).unwrap_or(0),
                VariableOwner::Project(_) => groups.len(),
            };
            v.value = self.open_value(&owner, &v)?;
            out.push((layer, v));
        }
        Ok(out)
    }

    /// Pipeline or manual-job variables as stored (the JSON of `pipeline_variables_json`):
    /// encrypted like project variable values, unless there are none.
    pub(crate) fn seal_variables(&self, json: String) -> String {
        if json == "{}" {
            json
        } else {
            self.key.encrypt(&json)
        }
    }

    /// The variables a manual job was played with: the job row's, else those its attempt
    /// was created with (`spec`), else the plain list an older Gantry kept in the spec.
    pub(crate) fn manual_variables(
        &self,
        job: &gantry_store::Job,
        spec: &super::spec::StoredSpec,
    ) -> Result<Vec<(String, String)>, SettingsError> {
        let Some(stored) = job
            .manual_variables
            .as_deref()
            .or(spec.manual_variables_sealed.as_deref())
        else {
            return Ok(spec.manual_variables.clone());
        };
        let json = self.key.decrypt(stored).map_err(|e| {
            SettingsError::Undecryptable(format!(
                "the variables job {} was played with: {e}",
                job.id
            ))
        })?;
        Ok(super::state::parse_variables(&json))
    }
}

impl Coordinator {
    /// The variables pipeline `id` was created with (API, trigger, schedule, web form,
    /// `--var`, an upstream pipeline's): `(key, value, variable_type)`, as GitLab's
    /// `GET …/pipelines/:id/variables` lists them.
    pub async fn created_with_variables(
        &self,
        id: i64,
    ) -> Result<Vec<(String, String, &'static str)>, CoordinatorError> {
        let pipeline = self.inner.store.pipeline(id).await?;
        let vars = self.settings().pipeline_variables(&pipeline)?;
        Ok(vars
            .values
            .into_iter()
            .map(|(key, value)| {
                let kind = if vars.files.contains(&key) {
                    FILE
                } else {
                    ENV_VAR
                };
                (key, value, kind)
            })
            .collect())
    }

    /// The variables job `id` was created with, as its web page shows them (GitLab's job
    /// page): its own `variables:` as written (before expansion), then those it was
    /// played with. Values are hidden per `Coordinator::shown_variables`. Cost: the job,
    /// its project and its settings variables (three queries).
    pub async fn job_variables_shown(
        &self,
        id: i64,
    ) -> Result<Vec<ShownVariable>, CoordinatorError> {
        let job = self.inner.store.job(id).await?;
        let spec = super::spec::StoredSpec::parse(&job.spec)?;
        let mut vars: Vec<(String, String, &'static str)> = spec
            .job
            .variables
            .iter()
            .map(|(k, v)| (k.clone(), v.value.clone(), "job"))
            .collect();
        for (k, v) in self.settings().manual_variables(&job, &spec)? {
            vars.push((k, v, "manual"));
        }
        self.shown_variables(job.project_id, vars).await
    }

    /// The variables pipeline `id` was created with, as its web page shows them (values
    /// hidden per `Coordinator::shown_variables`).
    pub async fn pipeline_variables_shown(
        &self,
        id: i64,
    ) -> Result<Vec<ShownVariable>, CoordinatorError> {
        let pipeline = self.inner.store.pipeline(id).await?;
        let vars = self
            .settings()
            .pipeline_variables(&pipeline)?
            .values
            .into_iter()
            .map(|(k, v)| (k, v, "pipeline"))
            .collect();
        self.shown_variables(pipeline.project_id, vars).await
    }

    /// `vars` of project `project_id` as a page shows them: a value is hidden when its
    /// key is that of a masked project or group variable, or it holds a masked
    /// variable's value (the job log masks those too). O(vars × masked variables).
    async fn shown_variables(
        &self,
        project_id: i64,
        vars: Vec<(String, String, &'static str)>,
    ) -> Result<Vec<ShownVariable>, CoordinatorError> {
        let project = self.inner.store.project(project_id).await?;
        let masked: Vec<ProjectVariable> = self
            .settings()
            .settings_variables(project.id, &project.name)
            .await?
            .iter()
            .map(|(_, v)| v)
            .filter(|v| v.masked)
            .cloned()
            .collect();
        Ok(vars
            .into_iter()
            .map(|(key, value, source)| {
                let hide = masked
                    .iter()
                    .any(|m| m.key == key || (!m.value.is_empty() && value.contains(&m.value)));
                ShownVariable {
                    key,
                    value: (!hide).then_some(value),
                    source,
                }
            })
            .collect())
    }
}

impl Settings {
    /// A pipeline's variables. Pipelines stored before encryption are read as they are.
    pub(crate) fn pipeline_variables(
        &self,
        pipeline: &gantry_store::Pipeline,
    ) -> Result<PipelineVariables, SettingsError> {
        let json = self.key.decrypt(&pipeline.variables).map_err(|e| {
            SettingsError::Undecryptable(format!("the variables of pipeline {}: {e}", pipeline.id))
        })?;
        Ok(PipelineVariables {
            values: super::state::parse_variables(&json),
            files: super::state::file_variable_keys(&json),
            raw: super::state::raw_variable_keys(&json),
        })
    }

    /// `v` as stored: its value encrypted.
    fn sealed(&self, v: &ProjectVariable) -> ProjectVariable {
        ProjectVariable {
            value: self.key.encrypt(&v.value),
            ..v.clone()
        }
    }

    /// Encrypts the project and group variable values stored before values were
    /// encrypted (at start).
    pub(crate) async fn encrypt_stored_variables(&self) -> Result<(), SettingsError> {
        let store = &self.store;
        for plain in store
            .variables_without_prefix(super::secrets::PREFIX)
            .await?
        {
            let sealed = self.key.encrypt(&plain.value);
            store
                .replace_variable_value(
                    &plain.owner,
                    &plain.key,
                    &plain.environment_scope,
                    &plain.value,
                    &sealed,
                )
                .await?;
        }
        Ok(())
    }

    /// Adds a variable (`Invalid` when it breaks a rule of [`validate`], the owner has
    /// one of that key and scope, or has as many variables as it may).
    pub async fn create_variable(
        &self,
        owner: &VariableOwner,
        v: &ProjectVariable,
    ) -> Result<(), SettingsError> {
        validate(v)?;
        let (most, whose) = match owner {
            VariableOwner::Project(_) => (MAX_PER_PROJECT, "the project"),
            VariableOwner::Group(_) => (MAX_PER_GROUP, "the group"),
        };
        if self.variables(owner).await?.len() >= most {
            return Err(SettingsError::Invalid(format!(
                "{whose} has {most} variables, the most it may have: delete one first"
            )));
        }
        let created = self
            .store
            .create_variable(owner, &self.sealed(v), now_ms())
            .await
            .map_err(taken);
        self.cache.changed();
        created
    }

    /// Replaces the variable `key` of scope `scope` (`NotFound` when there is none). A
    /// hidden variable stays hidden and masked (GitLab's rule: `hidden` is chosen at
    /// creation, with `masked_and_hidden`); `v` may not change either.
    pub async fn update_variable(
        &self,
        owner: &VariableOwner,
        key: &str,
        scope: &str,
        v: &ProjectVariable,
    ) -> Result<(), SettingsError> {
        let current = self
            .store
            .variables(owner)
            .await?
            .into_iter()
            .find(|c| c.key == key && c.environment_scope == scope)
            .ok_or(SettingsError::NotFound("variable"))?;
        if current.hidden && !v.masked {
            return Err(SettingsError::Invalid(format!(
                "masked of `{key}`: a hidden variable stays masked; to unmask it, delete it and create it again"
            )));
        }
        if current.hidden != v.hidden {
            return Err(SettingsError::Invalid(format!(
                "hidden of `{key}`: is chosen when a variable is created (masked_and_hidden); delete it and create it again"
            )));
        }
        validate(v)?;
        let updated = self
            .store
            .update_variable(owner, key, scope, &self.sealed(v))
            .await
            .map_err(taken);
        self.cache.changed();
        updated
    }

    /// Removes the variable `key` of scope `scope` (`NotFound` when there is none).
    pub async fn delete_variable(
        &self,
        owner: &VariableOwner,
        key: &str,
        scope: &str,
    ) -> Result<(), SettingsError> {
        let deleted = self.store.delete_variable(owner, key, scope).await;
        self.cache.changed();
        Ok(deleted?)
    }
}

/// The groups a project is in, outermost first: `acme/platform/widget` →
/// `acme`, `acme/platform`; a name without `/` is in the default namespace.
pub fn group_paths(project_name: &str) -> Vec<String> {
    let (namespace, _) = super::projects::project_path(project_name);
    let mut out = Vec::new();
    let mut end = 0;
    for segment in namespace.split('/') {
        end += segment.len();
        out.push(namespace[..end].to_owned());
        end += 1;
    }
    out
}

/// A duplicate key is a `400` on GitLab (a validation error), not a conflict.
pub(crate) fn taken(e: gantry_store::StoreError) -> SettingsError {
    match e {
        gantry_store::StoreError::Conflict(m) => SettingsError::Invalid(m),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(key: &str, scope: &str, protected: bool) -> ProjectVariable {
        ProjectVariable {
            protected,
            environment_scope: scope.to_owned(),
            ..ProjectVariable::new(key, format!("{key}@{scope}"))
        }
    }

    #[test]
    fn kept_settings_are_dropped_by_a_change_and_not_kept_by_a_read_from_before_it() {
        let cache = SettingsCache::default();
        let vars: Layered = Arc::new(vec![(0, var("A", "*", false))]);
        assert!(cache.project(1, "acme/app").is_none());
        let before = cache.generation();
        cache.keep_project(before, 1, "acme/app", Arc::clone(&vars));
        assert!(cache.project(1, "acme/app").is_some());
        // Another name is other groups.
        assert!(cache.project(1, "other/app").is_none());
        cache.changed();
        assert!(cache.project(1, "acme/app").is_none());
        // A read that began before the change keeps nothing.
        cache.keep_project(before, 1, "acme/app", Arc::clone(&vars));
        assert!(cache.project(1, "acme/app").is_none());
        let instance = Arc::new(vec![InstanceVariable::new("I", "v")]);
        cache.keep_instance(before, Arc::clone(&instance));
        assert!(cache.instance().is_none());
        cache.keep_instance(cache.generation(), instance);
        assert!(cache.instance().is_some());
        // Bounded: past the most kept, it starts again.
        let now = cache.generation();
        for id in 0..=i64::try_from(MAX_KEPT_PROJECTS).unwrap() {
            cache.keep_project(now, id, "p", Arc::clone(&vars));
        }
        assert!(cache.kept().projects.len() <= MAX_KEPT_PROJECTS);
    }

    #[test]
    fn a_job_gets_protected_and_scoped_variables_only_where_they_apply() {
        let vars = vec![
            (1, var("TOKEN", "*", true)),
            (1, var("URL", "*", false)),
            (1, var("URL", "production", false)),
            (1, var("URL", "prod*", false)),
            (1, var("URL", "review/*", false)),
        ];
        let got = |protected, env| -> Vec<String> {
            for_job(&vars, protected, env)
                .into_iter()
                .map(|v| v.value.clone())
                .collect()
        };
        assert_eq!(got(false, None), ["URL@*"]);
        assert_eq!(got(true, None), ["TOKEN@*", "URL@*"]);
        // The exact name comes last, after patterns, so it replaces them.
        assert_eq!(
            got(false, Some("production")),
            ["URL@*", "URL@prod*", "URL@production"]
        );
        assert_eq!(got(false, Some("review/x")), ["URL@*", "URL@review/*"]);
        assert_eq!(for_creation(&vars, true).len(), 5);
        assert_eq!(for_creation(&vars, false).len(), 4);
    }

    #[test]
    fn the_project_wins_over_its_groups_whatever_the_scopes() {
        let vars = vec![
            (2, var("URL", "*", false)),
            (0, var("URL", "production", false)),
            (1, var("URL", "prod*", false)),
            (0, var("TEAM", "*", false)),
            (1, var("TEAM", "*", false)),
        ];
        let got: Vec<String> = for_job(&vars, false, Some("production"))
            .into_iter()
            .map(|v| v.value.clone())
            .collect();
        // Applied in this order, a later one of a key replacing an earlier one.
        assert_eq!(
            got,
            ["TEAM@*", "URL@production", "TEAM@*", "URL@prod*", "URL@*"]
        );
        assert_eq!(
            group_paths("acme/platform/widget"),
            ["acme", "acme/platform"]
        );
        assert_eq!(group_paths("widget"), ["gantry"]);
    }

    #[test]
    fn validation_names_the_field_and_the_fix() {
        let err = |v: &ProjectVariable| match validate(v) {
            Err(SettingsError::Invalid(m)) => m,
            other => panic!("expected Invalid, got {other:?}"),
        };
        let mut v = var("A-B", "*", false);
        assert!(err(&v).starts_with("key: `A-B` can contain only letters"));
        v.key = "K".repeat(256);
        assert!(err(&v).contains("maximum is 255"));
        v.key = "SECRET".to_owned();
        v.masked = true;
        v.value = "short".to_owned();
        assert!(err(&v).contains("cannot be masked"));
        v.value = "has a space".to_owned();
        assert!(err(&v).contains("cannot be masked"));
        v.value = "s3cr3t-t0ken/xyz=".to_owned();
        assert!(validate(&v).is_ok());
        v.variable_type = "json".to_owned();
        assert!(err(&v).contains("use `env_var` or `file`"));
        v.variable_type = FILE.to_owned();
        v.value = "x".repeat(MAX_VALUE_CHARS + 1);
        v.masked = false;
        assert!(err(&v).contains("maximum is 10000"));
        v.value = String::new();
        v.environment_scope = String::new();
        assert!(err(&v).starts_with("environment_scope of `SECRET`"));
    }
}
