//! Instance CI/CD variables (GitLab's Admin Area › CI/CD › Variables, `/admin/ci/variables`):
//! every pipeline of every project sees them.
//!
//! A key is unique instance-wide; there is no environment scope. A job gets them all,
//! protected ones only in pipelines of protected refs ([`for_job`]). Precedence in the job
//! (`ci-yaml.md` §6.1): above YAML and dotenv variables, below project, pipeline and
//! manual-job variables. At pipeline creation, `workflow:rules`, `include` paths and job
//! `rules` see them below the project variables ([`for_creation`]).
//!
//! Values follow the project variables' rules ([`super::variables::validate`]: key, value
//! length, type, masking) and are stored encrypted with the same key. Limit: at most
//! [`MAX_INSTANCE_VARIABLES`] variables (GitLab's default plan limit
//! `ci_instance_level_variables`).

use std::sync::Arc;

use gantry_store::InstanceVariable;

use super::settings::Settings;
use super::settings::SettingsError;
use super::time::now_ms;
use super::variables::{taken, validate_attributes};

/// Variables per instance (GitLab's default plan limit `ci_instance_level_variables`).
pub const MAX_INSTANCE_VARIABLES: usize = 25;

/// Checks an instance variable before it is stored; the message names the field and the
/// fix (the project variables' rules, without an environment scope).
pub fn validate(v: &InstanceVariable) -> Result<(), SettingsError> {
    validate_attributes(&v.key, &v.value, &v.variable_type, v.masked)
}

/// The instance variables a job of a pipeline gets (`protected`: whether the pipeline's
/// ref is protected).
pub fn for_job(
    vars: &[InstanceVariable],
    protected: bool,
) -> impl Iterator<Item = &InstanceVariable> {
    vars.iter().filter(move |v| protected || !v.protected)
}

/// `(key, value)` of the instance variables pipeline creation sees (see
/// `Context::with_instance_variables`): all but the protected ones on an unprotected ref.
pub fn for_creation(vars: &[InstanceVariable], protected: bool) -> Vec<(String, String)> {
    for_job(vars, protected)
        .map(|v| (v.key.clone(), v.value.clone()))
        .collect()
}

impl Settings {
    /// The instance's CI/CD variables, by key, values decrypted.
    pub async fn instance_variables(&self) -> Result<Vec<InstanceVariable>, SettingsError> {
        Ok(self.kept_instance_variables().await?.as_ref().clone())
    }

    /// [`Settings::instance_variables`], kept (see `variables::SettingsCache`): what a
    /// job's payload and a pipeline's creation read.
    pub(crate) async fn kept_instance_variables(
        &self,
    ) -> Result<Arc<Vec<InstanceVariable>>, SettingsError> {
        let cache = &self.cache;
        if let Some(kept) = cache.instance() {
            return Ok(kept);
        }
        let generation = cache.generation();
        let read = Arc::new(self.read_instance_variables().await?);
        cache.keep_instance(generation, Arc::clone(&read));
        Ok(read)
    }

    async fn read_instance_variables(&self) -> Result<Vec<InstanceVariable>, SettingsError> {
        let mut vars = self.store.instance_variables().await?;
        for v in &mut vars {
            v.value = self.key.decrypt(&v.value).map_err(|e| {
                SettingsError::Undecryptable(format!(
                    "the value of instance variable `{}`: {e}",
                    v.key
                ))
            })?;
        }
        Ok(vars)
    }

    /// Adds an instance variable (`Invalid` when it breaks a rule of [`validate`], the
    /// instance has one of that key, or it has [`MAX_INSTANCE_VARIABLES`] already).
    pub async fn create_instance_variable(
        &self,
        v: &InstanceVariable,
    ) -> Result<(), SettingsError> {
        validate(v)?;
        if self.store.instance_variables().await?.len() >= MAX_INSTANCE_VARIABLES {
            return Err(SettingsError::Invalid(format!(
                "the instance has {MAX_INSTANCE_VARIABLES} variables, the most it may have (GitLab's `ci_instance_level_variables`): delete one first"
            )));
        }
        let created = self
            .store
            .create_instance_variable(&self.sealed_instance(v), now_ms())
            .await
            .map_err(taken);
        self.cache.changed();
        created
    }

    /// Replaces the instance variable `key` with `v` (`NotFound` when there is none).
    pub async fn update_instance_variable(
        &self,
        key: &str,
        v: &InstanceVariable,
    ) -> Result<(), SettingsError> {
        validate(v)?;
        let updated = self
            .store
            .update_instance_variable(key, &self.sealed_instance(v))
            .await
            .map_err(taken);
        self.cache.changed();
        updated
    }

    /// Removes the instance variable `key` (`NotFound` when there is none).
    pub async fn delete_instance_variable(&self, key: &str) -> Result<(), SettingsError> {
        let deleted = self.store.delete_instance_variable(key).await;
        self.cache.changed();
        Ok(deleted?)
    }

    /// `v` as stored: its value encrypted.
    fn sealed_instance(&self, v: &InstanceVariable) -> InstanceVariable {
        InstanceVariable {
            value: self.key.encrypt(&v.value),
            ..v.clone()
        }
    }

    /// Encrypts the instance variable values stored in plain text (at start; see
    /// `encrypt_stored_variables`).
    pub(crate) async fn encrypt_stored_instance_variables(&self) -> Result<(), SettingsError> {
        let store = &self.store;
        for (key, value) in store
            .instance_variables_without_prefix(super::secrets::PREFIX)
            .await?
        {
            let sealed = self.key.encrypt(&value);
            store
                .replace_instance_variable_value(&key, &value, &sealed)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_variables_only_on_protected_refs() {
        let vars = vec![
            InstanceVariable {
                protected: true,
                ..InstanceVariable::new("TOKEN", "t")
            },
            InstanceVariable::new("URL", "u"),
        ];
        let keys = |protected| -> Vec<String> {
            for_creation(&vars, protected)
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(keys(true), ["TOKEN", "URL"]);
        assert_eq!(keys(false), ["URL"]);
        assert_eq!(for_job(&vars, false).count(), 1);
    }

    #[test]
    fn validation_is_the_project_variables_without_a_scope() {
        let err = |v: &InstanceVariable| match validate(v) {
            Err(SettingsError::Invalid(m)) => m,
            other => panic!("expected Invalid, got {other:?}"),
        };
        let mut v = InstanceVariable::new("A-B", "x");
        assert!(err(&v).starts_with("key: `A-B` can contain only letters"));
        v.key = "SECRET".to_owned();
        v.masked = true;
        v.value = "short".to_owned();
        assert!(err(&v).contains("cannot be masked"));
        v.masked = false;
        v.variable_type = "json".to_owned();
        assert!(err(&v).contains("use `env_var` or `file`"));
        v.variable_type = "file".to_owned();
        assert!(validate(&v).is_ok());
    }
}
