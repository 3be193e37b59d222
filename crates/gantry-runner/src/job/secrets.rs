//! A job's `secrets:` resolved before its first stage, as gitlab-runner's
//! `Build.resolveSecrets` does: every string of the payload's `secrets` object is
//! expanded with the job's variables, each secret is read from its provider, and becomes
//! a variable — a file variable unless `file: false`, always masked and raw.
//!
//! Providers: HashiCorp Vault and OpenBao ([`vault`]: JWT login, engines `kv-v2`, `kv-v1`
//! and `generic`) and AWS Secrets Manager ([`aws`]: web-identity role from the job's ID
//! token, or the runner's own credentials). A secret of another provider
//! (`gcp_secret_manager`, `azure_key_vault`, `gitlab_secrets_manager`, `akeyless`) fails the
//! job `runner_unsupported` naming the provider, where gitlab-runner would warn and run the
//! job without it: a job that declares a secret never runs without it.
//!
//! A secret the provider does not have fails the job unless the job sets
//! `FF_SECRET_RESOLVING_FAILS_IF_MISSING=false` (then the variable is empty), as
//! gitlab-runner's flag (default on). Failures are classified as gitlab-runner's
//! `wrapSecretResolvingError`: a provider's 400/401/403/404 answer is the job's
//! configuration ([`SecretsError::Configuration`] → `runner_configuration_error`), a 5xx
//! the provider's fault ([`SecretsError::External`] → `runner_external_dependency_failure`),
//! anything else (transport, a missing value) `runner_system_failure`.
//!
//! Cost: one login and one read per secret (Vault), one role assumption per distinct role
//! and one read per secret (AWS), each bounded by [`TIMEOUT`].

pub mod aws;
pub mod vault;

use std::time::Duration;

use gantry_protocol::JobVariable;
use serde_json::{Map, Value};

use super::variables::get_bool;

/// How long one provider request may take (gitlab-runner's AWS resolver: 30 s).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a job's secrets could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretsError {
    /// The payload's entry for a secret is not what its provider reads.
    #[error("secret {secret:?}: {message}")]
    Invalid {
        /// The secret's variable name.
        secret: String,
        /// What is wrong.
        message: String,
    },
    /// A provider this runner has no resolver for.
    #[error(
        "secret {secret:?} uses {provider}, which gantry-runner cannot resolve (it resolves vault and aws_secrets_manager)"
    )]
    Unsupported {
        /// The secret's variable name.
        secret: String,
        /// The provider key.
        provider: String,
    },
    /// The provider refused the request as configured (its 4xx answer).
    #[error("secret {secret:?}: {message}")]
    Configuration {
        /// The secret's variable name.
        secret: String,
        /// The provider's answer.
        message: String,
    },
    /// The provider failed (its 5xx answer).
    #[error("secret {secret:?}: {message}")]
    External {
        /// The secret's variable name.
        secret: String,
        /// The provider's answer.
        message: String,
    },
    /// The provider could not be reached, or has no such value.
    #[error("secret {secret:?}: {message}")]
    System {
        /// The secret's variable name.
        secret: String,
        /// What went wrong.
        message: String,
    },
}

/// What a provider answered when it failed, before it is tied to a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderError {
    /// The entry is not usable as it is.
    Invalid(String),
    /// An HTTP answer with this status.
    Status(u16, String),
    /// No value there (Vault's 404, a missing field).
    NotFound(String),
    /// Transport or decoding failure.
    Other(String),
}

impl ProviderError {
    fn for_secret(self, secret: &str) -> SecretsError {
        let secret = secret.to_owned();
        match self {
            ProviderError::Invalid(message) => SecretsError::Invalid { secret, message },
            ProviderError::Status(code @ (400 | 401 | 403 | 404), message) => {
                SecretsError::Configuration {
                    secret,
                    message: format!("{message} (HTTP {code})"),
                }
            }
            ProviderError::Status(code @ 500..=599, message) => SecretsError::External {
                secret,
                message: format!("{message} (HTTP {code})"),
            },
            ProviderError::Status(code, message) => SecretsError::System {
                secret,
                message: format!("{message} (HTTP {code})"),
            },
            ProviderError::NotFound(message) | ProviderError::Other(message) => {
                SecretsError::System { secret, message }
            }
        }
    }
}

/// Where the resolver reads the runner's own environment (AWS credentials and endpoint
/// overrides): the process environment in a runner, a map in tests.
pub type Environment<'a> = &'a (dyn Fn(&str) -> Option<String> + Send + Sync);

/// The runner process's environment.
pub fn process_environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Resolves `secrets` (the payload's object) into variables. `log` receives the lines
/// gitlab-runner prints while it resolves.
pub async fn resolve(
    secrets: &Map<String, Value>,
    variables: &[JobVariable],
    env: Environment<'_>,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<JobVariable>, SecretsError> {
    let fail_if_missing =
        get_bool(variables, "FF_SECRET_RESOLVING_FAILS_IF_MISSING").unwrap_or(true);
    let lookup = crate::artifacts::lookup_in(variables);
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| SecretsError::System {
            secret: String::new(),
            message: format!("an HTTP client for secrets: {e}"),
        })?;
    let mut out = Vec::new();
    for (name, secret) in secrets {
        log(&format!("Resolving secret {name:?}..."));
        let mut secret = secret.clone();
        expand_strings(&mut secret, &lookup);
        let Some(entry) = secret.as_object() else {
            return Err(SecretsError::Invalid {
                secret: name.clone(),
                message: "not an object".into(),
            });
        };
        let provider = entry
            .keys()
            .find(|k| !matches!(k.as_str(), "file" | "token"))
            .cloned()
            .unwrap_or_default();
        let file = entry.get("file").and_then(Value::as_bool).unwrap_or(true);
        let config = entry.get(&provider).cloned().unwrap_or(Value::Null);
        let value = match provider.as_str() {
            "vault" => {
                log("Using \"vault\" secret resolver...");
                vault::resolve(&client, &config).await
            }
            "aws_secrets_manager" => {
                log("Using \"aws_secrets_manager\" secret resolver...");
                aws::resolve(&client, &config, env).await
            }
            _ => {
                return Err(SecretsError::Unsupported {
                    secret: name.clone(),
                    provider,
                });
            }
        };
        let value = match value {
            Ok(value) => value,
            Err(ProviderError::NotFound(why)) if !fail_if_missing => {
                log(&format!(
                    "WARNING: secret {name:?} not found ({why}); FF_SECRET_RESOLVING_FAILS_IF_MISSING is off, so it is empty"
                ));
                String::new()
            }
            Err(error) => return Err(error.for_secret(name)),
        };
        out.push(JobVariable {
            key: name.clone(),
            value,
            public: false,
            masked: true,
            file,
            raw: true,
        });
    }
    Ok(out)
}

/// gitlab-runner's `Secrets.ExpandVariables`: every string of the entry, expanded.
fn expand_strings(value: &mut Value, lookup: &dyn Fn(&str) -> Option<String>) {
    match value {
        Value::String(text) if text.contains('$') => {
            *text = crate::artifacts::expand(text, lookup);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| expand_strings(v, lookup)),
        Value::Object(map) => map.values_mut().for_each(|v| expand_strings(v, lookup)),
        _ => {}
    }
}

/// A string field of a provider's entry (`""` when absent or null).
pub(crate) fn field<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    let mut at = value;
    for key in path {
        match at.get(key) {
            Some(next) => at = next,
            None => return "",
        }
    }
    at.as_str().unwrap_or("")
}

/// A JSON scalar as gitlab-runner prints it with `%v` (strings as they are).
pub(crate) fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_expanded_everywhere() {
        let vars = vec![JobVariable {
            key: "TOKEN".into(),
            value: "jwt-1".into(),
            public: false,
            masked: true,
            file: false,
            raw: true,
        }];
        let lookup = crate::artifacts::lookup_in(&vars);
        let mut v = json!({"server": {"auth": {"data": {"jwt": "$TOKEN"}}}, "list": ["${TOKEN}x"]});
        expand_strings(&mut v, &lookup);
        assert_eq!(
            v,
            json!({"server": {"auth": {"data": {"jwt": "jwt-1"}}}, "list": ["jwt-1x"]})
        );
    }

    #[test]
    fn failures_are_classified_as_gitlab_runner_does() {
        let f = |e: ProviderError| e.for_secret("S");
        assert!(matches!(
            f(ProviderError::Status(403, "denied".into())),
            SecretsError::Configuration { .. }
        ));
        assert!(matches!(
            f(ProviderError::Status(503, "sealed".into())),
            SecretsError::External { .. }
        ));
        assert!(matches!(
            f(ProviderError::Status(429, "slow".into())),
            SecretsError::System { .. }
        ));
        assert!(matches!(
            f(ProviderError::NotFound("x".into())),
            SecretsError::System { .. }
        ));
    }

    #[tokio::test]
    async fn other_providers_are_refused_by_name() {
        let secrets = json!({"S": {"gcp_secret_manager": {"name": "n"}, "token": "t"}});
        let env = |_: &str| None;
        let err = resolve(secrets.as_object().expect("object"), &[], &env, &mut |_| {})
            .await
            .expect_err("unsupported");
        assert_eq!(
            err.to_string(),
            "secret \"S\" uses gcp_secret_manager, which gantry-runner cannot resolve (it resolves vault and aws_secrets_manager)"
        );
    }
}
