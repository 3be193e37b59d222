//! OIDC ID tokens (`id_tokens:`): a job gets, for each token it names, a JSON Web Token
//! signed RS256 with the instance's key, with GitLab's claims (`project_path`, `ref`,
//! `ref_protected`, `environment`, `sub` = `project_path:…:ref_type:…:ref:…`, `aud` from
//! the job), so a cloud or Vault that trusts the instance's issuer lets the job in.
//! Whoever verifies reads the public key from the issuer's discovery document
//! (`/.well-known/openid-configuration` → `/oauth/discovery/keys`, as on GitLab).
//!
//! The key: RSA-2048, made once per instance on first use and kept in the database (its
//! PKCS#8, encrypted with the database key like variable values), so replicas sign with
//! the same key. The key id (`kid`) is its RFC 7638 JWK thumbprint.

use std::sync::Arc;

use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{self, KeyPair as _};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use super::Coordinator;
use super::error::{CoordinatorError, Result};

/// Where the sealed key lives in the settings table.
const KEY_SETTING: &str = "oidc_signing_key";

/// A token lives for the job's timeout and this much more (GitLab: 5 minutes).
const GRACE_SECS: i64 = 300;

/// The instance's signing key and what its public half looks like as a JWK.
pub(crate) struct SigningKey {
    pair: KeyPair,
    kid: String,
    n: String,
    e: String,
}

impl SigningKey {
    fn from_pkcs8(der: &[u8]) -> Result<Self> {
        let pair = KeyPair::from_pkcs8(der)
            .map_err(|e| CoordinatorError::corrupt(format!("the ID token signing key: {e}")))?;
        let public = pair.public_key();
        let n = URL_SAFE_NO_PAD.encode(public.modulus().big_endian_without_leading_zero());
        let e = URL_SAFE_NO_PAD.encode(public.exponent().big_endian_without_leading_zero());
        // RFC 7638: the SHA-256 of the required members, in lexical order, no spaces.
        let thumbprint = format!(r#"{{"e":"{e}","kty":"RSA","n":"{n}"}}"#);
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(thumbprint.as_bytes()));
        Ok(Self { pair, kid, n, e })
    }

    /// A new key (tests: tokens signed without a database).
    #[cfg(test)]
    pub(crate) fn generate() -> Self {
        let pair = KeyPair::generate(KeySize::Rsa2048).expect("an RSA key");
        let der = aws_lc_rs::encoding::AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(&pair)
            .expect("its PKCS#8");
        Self::from_pkcs8(der.as_ref()).expect("a key read back")
    }

    /// `header.claims.signature`, RS256.
    fn sign(&self, claims: &Value) -> Result<String> {
        let header = json!({"kid": self.kid, "typ": "JWT", "alg": "RS256"});
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let mut sig = vec![0; self.pair.public_modulus_len()];
        self.pair
            .sign(
                &signature::RSA_PKCS1_SHA256,
                &aws_lc_rs::rand::SystemRandom::new(),
                input.as_bytes(),
                &mut sig,
            )
            .map_err(|_| CoordinatorError::Io(std::io::Error::other("sign an ID token")))?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig)))
    }
}

/// The facts of one job a token states (GitLab's claims), besides the audience.
pub(crate) struct JobClaims<'a> {
    pub namespace_path: &'a str,
    pub project_path: &'a str,
    pub project_id: i64,
    pub pipeline_id: i64,
    pub pipeline_source: &'a str,
    pub job_id: i64,
    pub ref_name: &'a str,
    pub tag: bool,
    pub ref_protected: bool,
    pub sha: &'a str,
    pub runner_id: i64,
    pub ci_config_path: &'a str,
    /// The job's environment: name, action, tier.
    pub environment: Option<(&'a str, &'a str, &'a str)>,
    pub timeout_secs: i64,
    pub now_secs: i64,
}

impl Coordinator {
    /// The instance's signing key: read from the database, or made and stored by the
    /// first coordinator that needs one (another's, made meanwhile, wins).
    pub(crate) async fn signing_key(&self) -> Result<Arc<SigningKey>> {
        self.inner
            .oidc_key
            .get_or_try_init(|| async {
                let store = &self.inner.store;
                if store.setting(KEY_SETTING).await?.is_none() {
                    let pair = KeyPair::generate(KeySize::Rsa2048).map_err(|_| {
                        CoordinatorError::Io(std::io::Error::other("make the ID token signing key"))
                    })?;
                    let der =
                        aws_lc_rs::encoding::AsDer::<aws_lc_rs::encoding::Pkcs8V1Der>::as_der(
                            &pair,
                        )
                        .map_err(|_| {
                            CoordinatorError::Io(std::io::Error::other(
                                "encode the ID token signing key",
                            ))
                        })?;
                    let sealed = self.settings().seal(&STANDARD.encode(der.as_ref()));
                    store.init_setting(KEY_SETTING, &sealed).await?;
                }
                let sealed = store
                    .setting(KEY_SETTING)
                    .await?
                    .ok_or_else(|| CoordinatorError::corrupt("the ID token signing key is gone"))?;
                let encoded = self.settings().open(&sealed).map_err(|e| {
                    CoordinatorError::corrupt(format!(
                        "the ID token signing key does not decrypt with this server's key: {e}"
                    ))
                })?;
                let der = STANDARD.decode(encoded).map_err(|e| {
                    CoordinatorError::corrupt(format!("the ID token signing key: {e}"))
                })?;
                Ok::<_, CoordinatorError>(Arc::new(SigningKey::from_pkcs8(&der)?))
            })
            .await
            .cloned()
    }

    /// The issuer: the external URL, as GitLab's `iss`.
    fn issuer(&self) -> String {
        issuer(self.external_url())
    }

    /// `GET /.well-known/openid-configuration` (GitLab's discovery document).
    pub fn openid_configuration(&self) -> Value {
        let issuer = self.issuer();
        json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/oauth/discovery/keys"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public", "pairwise"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "claims_supported": [
                "iss", "sub", "aud", "exp", "iat", "nbf", "jti", "namespace_path",
                "project_id", "project_path", "pipeline_id", "pipeline_source", "job_id",
                "ref", "ref_type", "ref_path", "ref_protected", "environment",
                "environment_protected", "deployment_tier", "environment_action", "runner_id",
                "runner_environment", "sha", "ci_config_ref_uri", "ci_config_sha",
                "project_visibility", "user_id", "user_login", "user_email", "user_access_level"
            ],
        })
    }

    /// `GET /oauth/discovery/keys`: the public key as a JWK set.
    pub async fn jwks(&self) -> std::result::Result<Value, CoordinatorError> {
        let key = self.signing_key().await?;
        Ok(json!({"keys": [{
            "kty": "RSA", "kid": key.kid, "e": key.e, "n": key.n, "use": "sig", "alg": "RS256"
        }]}))
    }
}

/// The tokens a job's `id_tokens:` asks for, as `(variable, JWT)` signed with `key`; each
/// `aud` (a string or a list) expanded with `expand` (the job's variables).
pub(crate) fn sign(
    key: &SigningKey,
    issuer: &str,
    tokens: &Value,
    claims: &JobClaims<'_>,
    expand: &(dyn Fn(&str) -> String + Sync),
) -> Result<Vec<(String, String)>> {
    let Some(tokens) = tokens.as_object().filter(|t| !t.is_empty()) else {
        return Ok(Vec::new());
    };
    let base = base_claims(issuer, claims);
    let mut out = Vec::with_capacity(tokens.len());
    for (name, token) in tokens {
        let aud = match token.get("aud") {
            Some(Value::String(a)) => json!(expand(a)),
            Some(Value::Array(list)) => Value::Array(
                list.iter()
                    .filter_map(Value::as_str)
                    .map(|a| json!(expand(a)))
                    .collect(),
            ),
            _ => continue,
        };
        let mut claims = base.clone();
        if let Some(map) = claims.as_object_mut() {
            map.insert("aud".to_owned(), aud);
            map.insert("jti".to_owned(), json!(uuid_v4()));
        }
        out.push((name.clone(), key.sign(&claims)?));
    }
    Ok(out)
}

fn base_claims(issuer: &str, c: &JobClaims<'_>) -> Value {
    let host = issuer.split_once("://").map_or(issuer, |(_, rest)| rest);
    let ref_type = if c.tag { "tag" } else { "branch" };
    let ref_path = if c.tag {
        format!("refs/tags/{}", c.ref_name)
    } else {
        format!("refs/heads/{}", c.ref_name)
    };
    let mut claims = json!({
        "namespace_id": "1",
        "namespace_path": c.namespace_path,
        "project_id": c.project_id.to_string(),
        "project_path": c.project_path,
        "user_id": "1",
        "user_login": "root",
        "user_email": "admin@example.com",
        "user_access_level": "owner",
        "pipeline_id": c.pipeline_id.to_string(),
        "pipeline_source": c.pipeline_source,
        "job_id": c.job_id.to_string(),
        "ref": c.ref_name,
        "ref_type": ref_type,
        "ref_path": ref_path,
        "ref_protected": c.ref_protected.to_string(),
        "runner_id": c.runner_id,
        "runner_environment": "self-hosted",
        "sha": c.sha,
        "ci_config_ref_uri": format!("{host}/{}//{}@{ref_path}", c.project_path, c.ci_config_path),
        "ci_config_sha": c.sha,
        "project_visibility": "private",
        "iss": issuer,
        "iat": c.now_secs,
        "nbf": c.now_secs - 5,
        "exp": c.now_secs + c.timeout_secs.max(0) + GRACE_SECS,
        "sub": format!("project_path:{}:ref_type:{ref_type}:ref:{}", c.project_path, c.ref_name),
    });
    if let (Some((name, action, tier)), Some(map)) = (c.environment, claims.as_object_mut()) {
        map.insert("environment".to_owned(), json!(name));
        map.insert("environment_protected".to_owned(), json!("false"));
        map.insert("deployment_tier".to_owned(), json!(tier));
        map.insert("environment_action".to_owned(), json!(action));
    }
    claims
}

/// The issuer of an instance at `external_url`: GitLab's `iss`.
pub(crate) fn issuer(external_url: &str) -> String {
    external_url.trim_end_matches('/').to_owned()
}

/// A random UUID (version 4), as GitLab's `jti`.
fn uuid_v4() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}
