//! A job's `secrets:` on their way to the runner: which providers the job's variables
//! enable (GitLab EE's `Ci::Secrets::Integration#secrets_provider?`) and the payload's
//! `secrets` object (`EE::Ci::BuildRunnerPresenter#secrets_configuration`).
//!
//! The compiled job keeps `secrets:` as written; [`configuration`] first normalizes each
//! secret as GitLab's config entries do (`Entry::Vault::Secret`, `Entry::AwsSecretsManager::Secret`):
//! `vault: path/to/secret/field@engine` becomes `{engine: {name: kv-v2, path: engine}, path,
//! field}` (engine path `kv-v2` without `@`), `aws_secrets_manager: id#field` becomes
//! `{secret_id, field}`. It then adds each provider's `server` from the job's variables
//! (as the runner will see them, expanded): Vault's `VAULT_SERVER_URL`, `VAULT_NAMESPACE`,
//! `VAULT_AUTH_PATH` (default `jwt`), `VAULT_AUTH_ROLE` and, as the JWT, the secret's
//! `token` or `$` + the job's first `id_tokens` name (`${CI_JOB_JWT}` without ID tokens,
//! which GitLab 17 removed: the runner finds it empty); AWS's `AWS_REGION`, `AWS_ROLE_ARN`,
//! `AWS_ROLE_SESSION_NAME` and the secret's `token` or `$AWS_ID_TOKEN`; GCP's and Azure's
//! likewise. As GitLab's presenter memoizes each provider's server, every secret of one
//! provider gets the first one's server, JWT included.
//!
//! A provider is enabled when its variables are set (`VAULT_SERVER_URL`; `AWS_REGION`;
//! the three `GCP_*`; the three `AZURE_*`); GitLab's own secrets manager is not part of
//! Gantry, so never. A job that declares `secrets:` while no provider is enabled, or one
//! of whose secrets names a provider that is not, fails `secrets_provider_not_found`
//! before it starts ([`ProviderNotFound`]), as GitLab's `pre_assign_runner_checks` drop it.
//! A provider GitLab does not know (`akeyless`) passes through; the runner refuses it.
//!
//! Cost: O(secrets + variables) per job payload, nothing when the job has no `secrets:`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// The provider keys GitLab's `PROVIDER_TYPE_MAP` knows, with the variables that enable
/// each (`None`: never enabled here).
const PROVIDERS: &[(&str, Option<&[&str]>)] = &[
    (
        "azure_key_vault",
        Some(&[
            "AZURE_KEY_VAULT_SERVER_URL",
            "AZURE_CLIENT_ID",
            "AZURE_TENANT_ID",
        ]),
    ),
    (
        "gcp_secret_manager",
        Some(&[
            "GCP_PROJECT_NUMBER",
            "GCP_WORKLOAD_IDENTITY_FEDERATION_POOL_ID",
            "GCP_WORKLOAD_IDENTITY_FEDERATION_PROVIDER_ID",
        ]),
    ),
    ("vault", Some(&["VAULT_SERVER_URL"])),
    ("gitlab_secrets_manager", None),
    ("aws_secrets_manager", Some(&["AWS_REGION"])),
];

/// Why a job with `secrets:` cannot start: GitLab's `secrets_provider_not_found`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProviderNotFound {
    /// No provider at all is enabled by the job's variables.
    #[error(
        "the job declares `secrets:` but no secrets provider is configured: set `VAULT_SERVER_URL` (HashiCorp Vault / OpenBao) or `AWS_REGION` (AWS Secrets Manager) as a CI/CD variable of the project, group or instance, or in the job's `variables:`"
    )]
    NoProvider,
    /// A secret names a provider whose variables are not set.
    #[error("secret `{secret}` uses `{provider}`, which is not configured: {fix}")]
    NotConfigured {
        /// The secret (variable) name.
        secret: String,
        /// Its provider key.
        provider: String,
        /// What to set.
        fix: String,
    },
}

/// The variables a job's payload carries, by name (expanded values).
pub(crate) type Values<'a> = HashMap<&'a str, &'a str>;

/// The payload's `secrets` for a job whose compiled `secrets:` is `secrets`: each secret
/// normalized with its provider's `server`, or why the job cannot start.
/// `first_id_token` is the name of the job's first `id_tokens:` entry.
pub(crate) fn configuration(
    secrets: &Value,
    values: &Values<'_>,
    first_id_token: Option<&str>,
) -> Result<Map<String, Value>, ProviderNotFound> {
    let Some(secrets) = secrets.as_object() else {
        return Ok(Map::new());
    };
    check_providers(secrets, values)?;
    let var = |name: &str| -> Value {
        values
            .get(name)
            .filter(|v| !v.is_empty())
            .map_or(Value::Null, |v| Value::String((*v).to_owned()))
    };
    let mut servers: HashMap<&str, Value> = HashMap::new();
    let mut out = Map::new();
    for (name, secret) in secrets {
        let Some(secret) = secret.as_object() else {
            continue;
        };
        let token = secret.get("token").and_then(Value::as_str);
        let mut normalized = Map::new();
        for (key, value) in secret {
            let value = match key.as_str() {
                "vault" => {
                    let mut v = vault_value(value);
                    let server = servers.entry("vault").or_insert_with(|| {
                        let jwt = match (token, first_id_token) {
                            (Some(t), Some(_)) => t.to_owned(),
                            (None, Some(first)) => format!("${first}"),
                            (_, None) => "${CI_JOB_JWT}".to_owned(),
                        };
                        let mut data = Map::new();
                        data.insert("jwt".into(), Value::String(jwt));
                        if let Value::String(role) = var("VAULT_AUTH_ROLE") {
                            data.insert("role".into(), Value::String(role));
                        }
                        let path = match var("VAULT_AUTH_PATH") {
                            Value::String(p) => p,
                            _ => "jwt".to_owned(),
                        };
                        json!({
                            "url": var("VAULT_SERVER_URL"),
                            "namespace": var("VAULT_NAMESPACE"),
                            "auth": {"name": "jwt", "path": path, "data": data},
                        })
                    });
                    v.insert("server".into(), server.clone());
                    Value::Object(v)
                }
                "aws_secrets_manager" => {
                    let mut v = aws_value(value);
                    let server = servers.entry("aws").or_insert_with(|| {
                        json!({
                            "region": var("AWS_REGION"),
                            "jwt": token.unwrap_or("$AWS_ID_TOKEN"),
                            "role_arn": var("AWS_ROLE_ARN"),
                            "role_session_name": var("AWS_ROLE_SESSION_NAME"),
                        })
                    });
                    v.insert("server".into(), server.clone());
                    Value::Object(v)
                }
                "gcp_secret_manager" => {
                    let mut v = value.as_object().cloned().unwrap_or_default();
                    let server = servers.entry("gcp").or_insert_with(|| {
                        json!({
                            "project_number": var("GCP_PROJECT_NUMBER"),
                            "workload_identity_federation_pool_id": var("GCP_WORKLOAD_IDENTITY_FEDERATION_POOL_ID"),
                            "workload_identity_federation_provider_id": var("GCP_WORKLOAD_IDENTITY_FEDERATION_PROVIDER_ID"),
                            "jwt": token,
                        })
                    });
                    v.insert("server".into(), server.clone());
                    Value::Object(v)
                }
                "azure_key_vault" => {
                    let mut v = value.as_object().cloned().unwrap_or_default();
                    let server = servers.entry("azure").or_insert_with(|| {
                        let jwt = match (token, first_id_token) {
                            (Some(t), Some(_)) => t.to_owned(),
                            (None, Some(first)) => format!("${first}"),
                            (_, None) => "${CI_JOB_JWT_V2}".to_owned(),
                        };
                        json!({
                            "url": var("AZURE_KEY_VAULT_SERVER_URL"),
                            "client_id": var("AZURE_CLIENT_ID"),
                            "tenant_id": var("AZURE_TENANT_ID"),
                            "jwt": jwt,
                        })
                    });
                    v.insert("server".into(), server.clone());
                    Value::Object(v)
                }
                _ => value.clone(),
            };
            normalized.insert(key.clone(), value);
        }
        out.insert(name.clone(), Value::Object(normalized));
    }
    Ok(out)
}

/// `Ci::Secrets::Integration#secrets_provider?`, with the reason when it is false.
fn check_providers(
    secrets: &Map<String, Value>,
    values: &Values<'_>,
) -> Result<(), ProviderNotFound> {
    let set = |name: &&str| values.get(name).is_some_and(|v| !v.is_empty());
    let enabled = |needs: Option<&[&str]>| needs.is_some_and(|n| n.iter().all(set));
    if !PROVIDERS.iter().any(|(_, needs)| enabled(*needs)) {
        return Err(ProviderNotFound::NoProvider);
    }
    for (name, secret) in secrets {
        let Some(secret) = secret.as_object() else {
            continue;
        };
        for key in secret.keys() {
            let Some((provider, needs)) = PROVIDERS.iter().find(|(p, _)| p == key) else {
                continue;
            };
            if enabled(*needs) {
                continue;
            }
            let fix = match needs {
                Some(needs) => format!(
                    "set {} as CI/CD variables",
                    needs
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => "GitLab's own secrets manager is not part of Gantry; use Vault / OpenBao or AWS Secrets Manager".to_owned(),
            };
            return Err(ProviderNotFound::NotConfigured {
                secret: name.clone(),
                provider: (*provider).to_owned(),
                fix,
            });
        }
    }
    Ok(())
}

/// `Entry::Vault::Secret#value`.
fn vault_value(value: &Value) -> Map<String, Value> {
    match value {
        Value::String(text) => {
            let (secret, engine) = match text.rsplit_once('@') {
                Some((secret, engine)) if !secret.is_empty() => (secret, engine),
                _ => (text.as_str(), "kv-v2"),
            };
            let (path, field) = secret.rsplit_once('/').unwrap_or(("", secret));
            let mut m = Map::new();
            m.insert("engine".into(), json!({"name": "kv-v2", "path": engine}));
            m.insert("path".into(), Value::String(path.to_owned()));
            m.insert("field".into(), Value::String(field.to_owned()));
            m
        }
        other => other.as_object().cloned().unwrap_or_default(),
    }
}

/// `Entry::AwsSecretsManager::Secret#value`.
fn aws_value(value: &Value) -> Map<String, Value> {
    match value {
        Value::String(text) => {
            // Ruby's `split('#')` drops trailing empty parts.
            let mut parts: Vec<&str> = text.split('#').collect();
            while parts.len() > 1 && parts.last() == Some(&"") {
                parts.pop();
            }
            let mut m = Map::new();
            m.insert("secret_id".into(), Value::String(parts[0].to_owned()));
            if let Some(field) = parts.get(1) {
                m.insert("field".into(), Value::String((*field).to_owned()));
            }
            m
        }
        other => other.as_object().cloned().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(pairs: &[(&'static str, &'static str)]) -> Values<'static> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn vault_strings_are_normalized_as_gitlab_does() {
        let secrets = json!({
            "A": {"vault": "production/db/password@ops"},
            "B": {"vault": "production/db/password", "file": false},
            "C": {"vault": {"engine": {"name": "kv-v1", "path": "kv"}, "path": "p", "field": "f"}, "token": "$OTHER"},
        });
        let v = values(&[
            ("VAULT_SERVER_URL", "http://vault:8200"),
            ("VAULT_AUTH_ROLE", "ci"),
        ]);
        let out = configuration(&secrets, &v, Some("VAULT_ID_TOKEN")).expect("configured");
        assert_eq!(
            out["A"]["vault"],
            json!({
                "engine": {"name": "kv-v2", "path": "ops"},
                "path": "production/db",
                "field": "password",
                "server": {
                    "url": "http://vault:8200",
                    "namespace": null,
                    "auth": {"name": "jwt", "path": "jwt", "data": {"jwt": "$VAULT_ID_TOKEN", "role": "ci"}},
                },
            })
        );
        assert_eq!(
            out["B"]["vault"]["engine"],
            json!({"name": "kv-v2", "path": "kv-v2"})
        );
        assert_eq!(out["B"]["file"], json!(false));
        // GitLab memoizes the server: C's own token does not reach it.
        assert_eq!(
            out["C"]["vault"]["server"]["auth"]["data"]["jwt"],
            json!("$VAULT_ID_TOKEN")
        );
        assert_eq!(out["C"]["token"], json!("$OTHER"));
        assert_eq!(
            out["C"]["vault"]["engine"],
            json!({"name": "kv-v1", "path": "kv"})
        );
    }

    #[test]
    fn aws_strings_and_servers() {
        let secrets = json!({"S": {"aws_secrets_manager": "db/creds#password"}, "T": {"aws_secrets_manager": {"secret_id": "x", "region": "eu-west-1"}}});
        let v = values(&[
            ("AWS_REGION", "us-east-1"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/ci"),
        ]);
        let out = configuration(&secrets, &v, None).expect("configured");
        assert_eq!(
            out["S"]["aws_secrets_manager"],
            json!({"secret_id": "db/creds", "field": "password", "server": {"region": "us-east-1", "jwt": "$AWS_ID_TOKEN", "role_arn": "arn:aws:iam::1:role/ci", "role_session_name": null}})
        );
        assert_eq!(
            out["T"]["aws_secrets_manager"]["region"],
            json!("eu-west-1")
        );
    }

    #[test]
    fn providers_must_be_configured() {
        let secrets = json!({"S": {"vault": "a/b"}});
        assert_eq!(
            configuration(&secrets, &values(&[]), None),
            Err(ProviderNotFound::NoProvider)
        );
        // An empty value does not count (GitLab's `present?`).
        assert_eq!(
            configuration(&secrets, &values(&[("VAULT_SERVER_URL", "")]), None),
            Err(ProviderNotFound::NoProvider)
        );
        let err = configuration(&secrets, &values(&[("AWS_REGION", "x")]), None)
            .expect_err("vault is not configured");
        assert_eq!(
            err.to_string(),
            "secret `S` uses `vault`, which is not configured: set `VAULT_SERVER_URL` as CI/CD variables"
        );
        let gsm = json!({"S": {"gitlab_secrets_manager": {"name": "x"}}});
        assert!(matches!(
            configuration(&gsm, &values(&[("AWS_REGION", "x")]), None),
            Err(ProviderNotFound::NotConfigured { .. })
        ));
    }
}
