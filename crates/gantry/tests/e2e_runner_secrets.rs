//! `secrets:` end to end: our coordinator and runner, a Vault-API server on loopback and
//! the test suite's moto server (AWS Secrets Manager and STS, started by `scripts/test`
//! through `scripts/test-s3.sh`, which exports `AWS_ENDPOINT_URL`).
//!
//! No Vault or OpenBao binary can be installed on this machine kind (neither is packaged
//! by Debian or PyPI), so the Vault side is a server written here from Vault's HTTP API
//! documentation (`/v1/auth/jwt/login`, KV v2 `/v1/<mount>/data/<path>`, KV v1
//! `/v1/<mount>/<path>`, `X-Vault-Token`, `X-Vault-Namespace`, `{"errors": [...]}`). It
//! checks the job's JWT as Vault's JWT auth would: RS256 signature against the
//! coordinator's published keys (`/oauth/discovery/keys`, verified with aws-lc-rs), the
//! bound audience and the role.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::signature::{RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use e2e_runner_support::*;
use serde_json::{Value, json};

const ROLE: &str = "ci-role";
const AUDIENCE: &str = "https://vault.test";
const NAMESPACE: &str = "team-a";
const VAULT_TOKEN: &str = "hvs.gantry-e2e";

#[derive(Default)]
struct Vault {
    /// The coordinator's JWKS, set once the coordinator runs.
    keys: Mutex<Option<Value>>,
    /// Every login's claims, as verified.
    logins: Mutex<Vec<Value>>,
}

fn vault_error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"errors": [message]}))).into_response()
}

fn verified_claims(jwt: &str, keys: &Value) -> Option<Value> {
    let (input, sig) = jwt.rsplit_once('.')?;
    let header: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(input.split('.').next()?).ok()?).ok()?;
    let key = keys["keys"]
        .as_array()?
        .iter()
        .find(|k| k["kid"] == header["kid"])?;
    let n = URL_SAFE_NO_PAD.decode(key["n"].as_str()?).ok()?;
    let e = URL_SAFE_NO_PAD.decode(key["e"].as_str()?).ok()?;
    let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
    RsaPublicKeyComponents { n: &n, e: &e }
        .verify(&RSA_PKCS1_2048_8192_SHA256, input.as_bytes(), &sig)
        .ok()?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(input.split('.').nth(1)?).ok()?).ok()
}

async fn login(
    State(vault): State<Arc<Vault>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if headers
        .get("x-vault-namespace")
        .and_then(|v| v.to_str().ok())
        != Some(NAMESPACE)
    {
        return vault_error(StatusCode::FORBIDDEN, "namespace not authorized");
    }
    if body["role"] != ROLE {
        return vault_error(
            StatusCode::BAD_REQUEST,
            &format!("role {} could not be found", body["role"]),
        );
    }
    let keys = vault.keys.lock().unwrap().clone().expect("keys set");
    let Some(claims) = verified_claims(body["jwt"].as_str().unwrap_or(""), &keys) else {
        return vault_error(
            StatusCode::BAD_REQUEST,
            "error validating token: invalid signature",
        );
    };
    if claims["aud"] != AUDIENCE {
        return vault_error(
            StatusCode::BAD_REQUEST,
            "error validating claims: invalid audience (aud) claim",
        );
    }
    vault.logins.lock().unwrap().push(claims);
    Json(json!({"auth": {"client_token": VAULT_TOKEN, "policies": ["ci"], "lease_duration": 60}}))
        .into_response()
}

async fn read(headers: HeaderMap, Path(path): Path<String>) -> Response {
    if headers.get("x-vault-token").and_then(|v| v.to_str().ok()) != Some(VAULT_TOKEN) {
        return vault_error(StatusCode::FORBIDDEN, "permission denied");
    }
    match path.as_str() {
        "secret/data/app/db" => Json(json!({
            "data": {"data": {"password": "s3cr3t-from-vault", "port": 5432}, "metadata": {"version": 3}}
        }))
        .into_response(),
        "kv1/app/api" => Json(json!({"data": {"key": "api-key-from-kv1"}})).into_response(),
        _ => (StatusCode::NOT_FOUND, Json(json!({"errors": []}))).into_response(),
    }
}

/// A moto call (moto checks no signature; the runner's signing is checked against AWS's
/// published example in its unit tests).
async fn moto(endpoint: &str, target: &str, body: Value) -> Value {
    let response = reqwest::Client::new()
        .post(endpoint)
        .header("content-type", "application/x-amz-json-1.1")
        .header("x-amz-target", target)
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=gantry-test/20260101/us-east-1/secretsmanager/aws4_request, SignedHeaders=host, Signature=0",
        )
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{target}: {}",
        response.status()
    );
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_from_vault_and_aws_reach_the_job_masked() {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect(
        "AWS_ENDPOINT_URL: run through scripts/test, or `eval \"$(scripts/test-s3.sh start)\"` first (moto)",
    );
    let aws_secret = format!(
        "gantry-e2e-{}-{}/db",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    moto(
        &endpoint,
        "secretsmanager.CreateSecret",
        json!({"Name": aws_secret, "SecretString": "{\"password\":\"hunter2-from-aws\",\"port\":5432}"}),
    )
    .await;

    let vault = Arc::new(Vault::default());
    let app = Router::new()
        .route("/v1/auth/jwt/login", put(login).post(login))
        .route("/v1/{*path}", get(read))
        .with_state(Arc::clone(&vault));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let vault_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let ci = format!(
        r#"
variables:
  VAULT_SERVER_URL: {vault_url}
  VAULT_AUTH_ROLE: {ROLE}
  VAULT_NAMESPACE: {NAMESPACE}
  AWS_REGION: us-east-1
  AWS_ROLE_ARN: arn:aws:iam::123456789012:role/gantry-ci
  AWS_ROLE_SESSION_NAME: gantry-e2e

reads:
  id_tokens:
    VAULT_ID_TOKEN: {{aud: "{AUDIENCE}"}}
    AWS_ID_TOKEN: {{aud: sts.amazonaws.com}}
  secrets:
    DB_PASSWORD: {{vault: app/db/password@secret, file: false}}
    API_KEY_FILE:
      vault: {{engine: {{name: kv-v1, path: kv1}}, path: app/api, field: key}}
    AWS_DB: {{aws_secrets_manager: "{aws_secret}#password", file: false}}
  script:
    - echo "password is $DB_PASSWORD"
    - test "$DB_PASSWORD" = s3cr3t-from-vault
    - test -f "$API_KEY_FILE"
    - test "$(cat "$API_KEY_FILE")" = api-key-from-kv1
    - test "$AWS_DB" = hunter2-from-aws
    - echo "aws says $AWS_DB"
    - echo all-secrets-read

missing:
  id_tokens:
    VAULT_ID_TOKEN: {{aud: "{AUDIENCE}"}}
  secrets:
    GONE: {{vault: app/none/x@secret}}
  script: [echo script-ran]

wrong_role:
  variables: {{VAULT_AUTH_ROLE: nobody}}
  id_tokens:
    VAULT_ID_TOKEN: {{aud: "{AUDIENCE}"}}
  secrets:
    DB_PASSWORD: {{vault: app/db/password@secret}}
  script: [echo script-ran]

optional:
  variables: {{FF_SECRET_RESOLVING_FAILS_IF_MISSING: "false"}}
  id_tokens:
    VAULT_ID_TOKEN: {{aud: "{AUDIENCE}"}}
  secrets:
    GONE: {{vault: app/none/x@secret, file: false}}
  script:
    - test -z "$GONE"
    - echo empty-as-asked
"#
    );
    let setup = Setup::new(&ci, &[]).await;
    let server = &setup.server;
    let keys: Value = server
        .http
        .get(format!("{}/oauth/discovery/keys", server.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    *vault.keys.lock().unwrap() = Some(keys);

    let pipeline = server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "");
    server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(120))
        .await;
    runner.stop(Duration::from_secs(30)).await;

    let job = |name: &'static str| server.job_named(setup.project, pipeline, name);
    let reads = job("reads").await;
    let log = server
        .trace(setup.project, reads["id"].as_i64().unwrap())
        .await;
    assert_eq!(reads["status"], "success", "{log}");
    assert_eq!(
        sections(&log).first().map(String::as_str),
        Some("resolve_secrets"),
        "{log}"
    );
    for line in [
        "Resolving secret \"DB_PASSWORD\"...",
        "Using \"vault\" secret resolver...",
        "Using \"aws_secrets_manager\" secret resolver...",
        "password is [MASKED]",
        "aws says [MASKED]",
        "all-secrets-read",
    ] {
        assert!(log.contains(line), "{line:?} in {log}");
    }
    for secret in ["s3cr3t-from-vault", "hunter2-from-aws", "api-key-from-kv1"] {
        assert!(!log.contains(secret), "{secret} leaked: {log}");
    }
    // Vault saw the job's ID token, signed by the coordinator, for this job.
    let logins = vault.logins.lock().unwrap().clone();
    assert!(
        logins.iter().any(
            |c| c["job_id"].as_str() == Some(reads["id"].to_string().as_str())
                && c["project_path"].is_string()
        ),
        "{logins:?}"
    );

    let missing = job("missing").await;
    let log = server
        .trace(setup.project, missing["id"].as_i64().unwrap())
        .await;
    assert_eq!(
        (
            missing["status"].as_str(),
            missing["failure_reason"].as_str()
        ),
        (Some("failed"), Some("runner_system_failure")),
        "{log}"
    );
    assert!(
        log.contains("Vault has nothing at secret/data/app/none"),
        "{log}"
    );
    assert!(!log.contains("script-ran"), "{log}");

    let wrong = job("wrong_role").await;
    let log = server
        .trace(setup.project, wrong["id"].as_i64().unwrap())
        .await;
    assert_eq!(
        (wrong["status"].as_str(), wrong["failure_reason"].as_str()),
        (Some("failed"), Some("runner_configuration_error")),
        "{log}"
    );
    assert!(
        log.contains("role \\\"nobody\\\" could not be found")
            || log.contains("role \"nobody\" could not be found"),
        "{log}"
    );

    let optional = job("optional").await;
    let log = server
        .trace(setup.project, optional["id"].as_i64().unwrap())
        .await;
    assert_eq!(optional["status"], "success", "{log}");
    assert!(log.contains("empty-as-asked"), "{log}");
}
