//! Project CI/CD variables (GitLab's Settings › CI/CD › Variables, `/projects/:id/variables`).
//!
//! A variable is unique per `(key, environment_scope)` in its project. Which of them a job
//! gets ([`for_job`]): protected ones only in pipelines of protected refs; a scope other
//! than `*` only when the job has an environment whose name matches it (`*` in a scope is a
//! wildcard); of several matches for one key the more specific scope wins (`*` first, later
//! ones replace it, as GitLab orders them). Precedence in the job (`ci-yaml.md` §6.1):
//! above YAML and dotenv variables, below pipeline and manual-job variables.
//!
//! At pipeline creation, `workflow:rules` and `include` paths see the variables of scope `*`;
//! a job's `rules` also see those scoped to its environment (its name expanded with the
//! variables known then), as GitLab's do.
//!
//! Limits (GitLab's): a key has at most 255 characters of letters, digits and `_`; a value
//! at most [`MAX_VALUE_CHARS`] characters; a project at most [`MAX_PER_PROJECT`] variables.
//! A masked value must be at least 8 characters of `[a-zA-Z0-9_+=/@:.~-]` (GitLab's
//! `Ci::Maskable`), so the runner can find it in the log.

use gantry_pipeline::context::scope_matches;
use gantry_store::ProjectVariable;

use super::Coordinator;
use super::error::CoordinatorError;
use super::time::now_ms;

/// The longest value GitLab stores (`Ci::Variable` validates 10,000 characters).
pub const MAX_VALUE_CHARS: usize = 10_000;
/// Variables per project (GitLab's default plan limit `project_ci_variables`).
pub const MAX_PER_PROJECT: usize = 8_000;
const MAX_KEY_CHARS: usize = 255;

/// `ENV_VAR` / `FILE` as GitLab's API spells them.
pub const ENV_VAR: &str = "env_var";
pub const FILE: &str = "file";

/// Checks a variable before it is stored; the message names the field and the fix.
pub fn validate(v: &ProjectVariable) -> Result<(), CoordinatorError> {
    validate_attributes(&v.key, &v.value, &v.variable_type, v.masked)?;
    if v.hidden && !v.masked {
        return Err(CoordinatorError::Invalid(format!(
            "masked of `{}`: a hidden variable is masked too: set masked as well (the API's masked_and_hidden sets both)",
            v.key
        )));
    }
    if v.environment_scope.is_empty() || v.environment_scope.chars().count() > MAX_KEY_CHARS {
        return Err(CoordinatorError::Invalid(format!(
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
) -> Result<(), CoordinatorError> {
    let invalid = |m: String| Err(CoordinatorError::Invalid(m));
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

/// The variables a job of a pipeline gets, in the order they are applied (a later one of
/// the same key replaces an earlier one): `environment` is the job's expanded environment
/// name, `None` without one; `protected` says whether the pipeline's ref is protected.
pub fn for_job<'a>(
    vars: &'a [ProjectVariable],
    protected: bool,
    environment: Option<&str>,
) -> Vec<&'a ProjectVariable> {
    let mut out: Vec<&ProjectVariable> = vars
        .iter()
        .filter(|v| protected || !v.protected)
        .filter(|v| {
            v.environment_scope == "*"
                || environment.is_some_and(|e| scope_matches(&v.environment_scope, e))
        })
        .collect();
    out.sort_by(|a, b| scope_order(a).cmp(&scope_order(b)));
    out
}

/// `(key, value, environment scope)` of the variables pipeline creation sees, in the
/// order they apply (see `Context::with_project_variables`): all but the protected ones
/// on an unprotected ref.
pub fn for_creation(vars: &[ProjectVariable], protected: bool) -> Vec<(String, String, String)> {
    let mut out: Vec<&ProjectVariable> =
        vars.iter().filter(|v| protected || !v.protected).collect();
    out.sort_by(|a, b| scope_order(a).cmp(&scope_order(b)));
    out.into_iter()
        .map(|v| (v.key.clone(), v.value.clone(), v.environment_scope.clone()))
        .collect()
}

/// `*` first, then the other scopes by name: the more specific scope applies last.
fn scope_order(v: &ProjectVariable) -> (bool, &str) {
    (v.environment_scope != "*", &v.environment_scope)
}

/// A pipeline's variables, opened.
pub(crate) struct PipelineVariables {
    /// `(key, value)`, in order.
    pub(crate) values: Vec<(String, String)>,
    /// The keys of those that are file variables.
    pub(crate) files: Vec<String>,
}

impl Coordinator {
    /// A project's CI/CD variables.
    pub async fn project_variables(
        &self,
        project_id: i64,
    ) -> Result<Vec<ProjectVariable>, CoordinatorError> {
        self.inner.store.project(project_id).await?;
        self.stored_project_variables(project_id).await
    }

    /// A project's variables as stored, values decrypted.
    pub(crate) async fn stored_project_variables(
        &self,
        project_id: i64,
    ) -> Result<Vec<ProjectVariable>, CoordinatorError> {
        let mut vars = self.inner.store.project_variables(project_id).await?;
        for v in &mut vars {
            v.value = self.inner.db_key.decrypt(&v.value).map_err(|e| {
                CoordinatorError::corrupt(format!(
                    "the value of project variable `{}` (scope `{}`): {e}",
                    v.key, v.environment_scope
                ))
            })?;
        }
        Ok(vars)
    }

    /// Pipeline or manual-job variables as stored (the JSON of `pipeline_variables_json`):
    /// encrypted like project variable values, unless there are none.
    pub(crate) fn seal_variables(&self, json: String) -> String {
        if json == "{}" {
            json
        } else {
            self.inner.db_key.encrypt(&json)
        }
    }

    /// The variables a manual job was played with: the job row's, else those its attempt
    /// was created with (`spec`), else the plain list an older Gantry kept in the spec.
    pub(crate) fn manual_variables(
        &self,
        job: &gantry_store::Job,
        spec: &super::spec::StoredSpec,
    ) -> Result<Vec<(String, String)>, CoordinatorError> {
        let Some(stored) = job
            .manual_variables
            .as_deref()
            .or(spec.manual_variables_sealed.as_deref())
        else {
            return Ok(spec.manual_variables.clone());
        };
        let json = self.inner.db_key.decrypt(stored).map_err(|e| {
            CoordinatorError::corrupt(format!("the variables job {} was played with: {e}", job.id))
        })?;
        Ok(super::state::parse_variables(&json))
    }

    /// A pipeline's variables. Pipelines stored before encryption are read as they are.
    pub(crate) fn pipeline_variables(
        &self,
        pipeline: &gantry_store::Pipeline,
    ) -> Result<PipelineVariables, CoordinatorError> {
        let json = self
            .inner
            .db_key
            .decrypt(&pipeline.variables)
            .map_err(|e| {
                CoordinatorError::corrupt(format!("the variables of pipeline {}: {e}", pipeline.id))
            })?;
        Ok(PipelineVariables {
            values: super::state::parse_variables(&json),
            files: super::state::file_variable_keys(&json),
        })
    }

    /// `v` as stored: its value encrypted.
    fn sealed(&self, v: &ProjectVariable) -> ProjectVariable {
        ProjectVariable {
            value: self.inner.db_key.encrypt(&v.value),
            ..v.clone()
        }
    }

    /// Encrypts the values stored before values were encrypted (at start).
    pub(crate) async fn encrypt_stored_variables(&self) -> Result<(), CoordinatorError> {
        let store = &self.inner.store;
        for (project, key, scope, value) in store
            .project_variables_without_prefix(super::secrets::PREFIX)
            .await?
        {
            let sealed = self.inner.db_key.encrypt(&value);
            store
                .replace_project_variable_value(project, &key, &scope, &value, &sealed)
                .await?;
        }
        Ok(())
    }

    /// Adds a variable (`Invalid` when it breaks a rule of [`validate`] or the project
    /// has one of that key and scope).
    pub async fn create_project_variable(
        &self,
        project_id: i64,
        v: &ProjectVariable,
    ) -> Result<(), CoordinatorError> {
        validate(v)?;
        if self.project_variables(project_id).await?.len() >= MAX_PER_PROJECT {
            return Err(CoordinatorError::Invalid(format!(
                "the project has {MAX_PER_PROJECT} variables, the most it may have: delete one first"
            )));
        }
        self.inner
            .store
            .create_project_variable(project_id, &self.sealed(v), now_ms())
            .await
            .map_err(taken)
    }

    /// Replaces the variable `key` of scope `scope` (`NotFound` when there is none). A
    /// hidden variable stays hidden and masked (GitLab's rule: `hidden` is chosen at
    /// creation, with `masked_and_hidden`); `v` may not change either.
    pub async fn update_project_variable(
        &self,
        project_id: i64,
        key: &str,
        scope: &str,
        v: &ProjectVariable,
    ) -> Result<(), CoordinatorError> {
        let current = self
            .inner
            .store
            .project_variables(project_id)
            .await?
            .into_iter()
            .find(|c| c.key == key && c.environment_scope == scope)
            .ok_or(CoordinatorError::NotFound("variable"))?;
        if current.hidden && !v.masked {
            return Err(CoordinatorError::Invalid(format!(
                "masked of `{key}`: a hidden variable stays masked; to unmask it, delete it and create it again"
            )));
        }
        if current.hidden != v.hidden {
            return Err(CoordinatorError::Invalid(format!(
                "hidden of `{key}`: is chosen when a variable is created (masked_and_hidden); delete it and create it again"
            )));
        }
        validate(v)?;
        self.inner
            .store
            .update_project_variable(project_id, key, scope, &self.sealed(v))
            .await
            .map_err(taken)
    }

    /// Removes the variable `key` of scope `scope` (`NotFound` when there is none).
    pub async fn delete_project_variable(
        &self,
        project_id: i64,
        key: &str,
        scope: &str,
    ) -> Result<(), CoordinatorError> {
        Ok(self
            .inner
            .store
            .delete_project_variable(project_id, key, scope)
            .await?)
    }
}

/// A duplicate key is a `400` on GitLab (a validation error), not a conflict.
pub(crate) fn taken(e: gantry_store::StoreError) -> CoordinatorError {
    match e {
        gantry_store::StoreError::Conflict(m) => CoordinatorError::Invalid(m),
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
    fn a_job_gets_protected_and_scoped_variables_only_where_they_apply() {
        let vars = vec![
            var("TOKEN", "*", true),
            var("URL", "*", false),
            var("URL", "review/*", false),
            var("URL", "production", false),
        ];
        let got = |protected, env| -> Vec<String> {
            for_job(&vars, protected, env)
                .into_iter()
                .map(|v| v.value.clone())
                .collect()
        };
        assert_eq!(got(false, None), ["URL@*"]);
        assert_eq!(got(true, None), ["TOKEN@*", "URL@*"]);
        // The specific scope comes last, so it replaces `*`.
        assert_eq!(got(false, Some("production")), ["URL@*", "URL@production"]);
        assert_eq!(got(false, Some("review/x")), ["URL@*", "URL@review/*"]);
        let keys = |protected| -> Vec<(String, String)> {
            for_creation(&vars, protected)
                .into_iter()
                .map(|(k, _, scope)| (k, scope))
                .collect()
        };
        let pair = |k: &str, s: &str| (k.to_owned(), s.to_owned());
        assert_eq!(
            keys(true),
            [
                pair("TOKEN", "*"),
                pair("URL", "*"),
                pair("URL", "production"),
                pair("URL", "review/*")
            ]
        );
        assert_eq!(keys(false).len(), 3);
    }

    #[test]
    fn validation_names_the_field_and_the_fix() {
        let err = |v: &ProjectVariable| match validate(v) {
            Err(CoordinatorError::Invalid(m)) => m,
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
