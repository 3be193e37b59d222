//! `id_tokens:` over HTTP: a job gets an RS256 JSON Web Token per name, masked, with
//! GitLab's claims and its `aud` (expanded), verifiable with the key the instance
//! publishes at GitLab's discovery paths (`/.well-known/openid-configuration` →
//! `/oauth/discovery/keys`). The signature is checked with aws-lc-rs, not with Gantry's code.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::http_support;

use aws_lc_rs::signature::{RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http_support::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

const CI: &str = r#"
deploy:
  script: [deploy]
  environment: production
  id_tokens:
    VAULT_ID_TOKEN:
      aud: https://vault.example.com
    CLOUD_TOKEN:
      aud: [sts.example.com, "$CI_PROJECT_NAME-audience"]
"#;

fn part(token: &str, i: usize) -> Value {
    let raw = token.split('.').nth(i).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(raw).unwrap()).unwrap()
}

async fn get_json(server: &TestServer, path: &str) -> Value {
    let response = server
        .http
        .get(format!("{}{path}", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    response.json().await.unwrap()
}

/// Whether `token`'s signature verifies with the JWK `key`.
fn verifies(token: &str, key: &Value) -> bool {
    let (input, sig) = token.rsplit_once('.').unwrap();
    let n = URL_SAFE_NO_PAD.decode(key["n"].as_str().unwrap()).unwrap();
    let e = URL_SAFE_NO_PAD.decode(key["e"].as_str().unwrap()).unwrap();
    let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
    RsaPublicKeyComponents { n: &n, e: &e }
        .verify(&RSA_PKCS1_2048_8192_SHA256, input.as_bytes(), &sig)
        .is_ok()
}

#[tokio::test]
async fn a_job_gets_signed_id_tokens_its_audience_can_verify() {
    let server = TestServer::start().await;
    let repo = Repo::new(&[(".gitlab-ci.yml", CI)]);
    let project = server.create_project("acme/app", &repo).await["id"]
        .as_i64()
        .unwrap();
    let (_, runner) = server.create_runner(json!({})).await;
    server.create_pipeline(project, "main").await;
    let (job_id, _, payload) = server.take_job(&runner).await;

    let variable = job_variable(&payload, "VAULT_ID_TOKEN").expect("the token variable");
    assert_eq!(variable["masked"], true);
    assert_eq!(variable["public"], false);
    let token = variable["value"].as_str().unwrap();
    let header = part(token, 0);
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["typ"], "JWT");
    let claims = part(token, 1);
    assert_eq!(claims["iss"], server.url.as_str());
    assert_eq!(claims["aud"], "https://vault.example.com");
    assert_eq!(
        claims["sub"],
        "project_path:acme/app:ref_type:branch:ref:main"
    );
    assert_eq!(claims["project_path"], "acme/app");
    assert_eq!(claims["namespace_path"], "acme");
    assert_eq!(claims["project_id"], project.to_string());
    assert_eq!(claims["job_id"], job_id.to_string());
    assert_eq!(claims["ref"], "main");
    assert_eq!(claims["ref_path"], "refs/heads/main");
    assert_eq!(claims["ref_protected"], "true");
    assert_eq!(claims["environment"], "production");
    assert_eq!(claims["deployment_tier"], "production");
    assert_eq!(claims["pipeline_source"], "api");
    let (iat, exp) = (
        claims["iat"].as_i64().unwrap(),
        claims["exp"].as_i64().unwrap(),
    );
    assert_eq!(exp - iat, 3600 + 300, "the job's timeout and five minutes");
    let cloud = part(job_variable_value(&payload, "CLOUD_TOKEN").unwrap(), 1);
    assert_eq!(cloud["aud"], json!(["sts.example.com", "app-audience"]));
    assert_ne!(cloud["jti"], claims["jti"]);

    // Verified with the published key, as Vault or a cloud does.
    let discovery = get_json(&server, "/.well-known/openid-configuration").await;
    assert_eq!(discovery["issuer"], server.url.as_str());
    let jwks_uri = discovery["jwks_uri"].as_str().unwrap();
    let path = jwks_uri.strip_prefix(server.url.as_str()).unwrap();
    let keys = get_json(&server, path).await;
    let key = &keys["keys"][0];
    assert_eq!(key["kid"], header["kid"]);
    assert_eq!(key["kty"], "RSA");
    assert!(verifies(token, key));
    let mut forged = part(token, 1);
    forged["ref"] = json!("other");
    let parts: Vec<&str> = token.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(forged.to_string()),
        parts[2]
    );
    assert!(
        !verifies(&forged, key),
        "a changed claim breaks the signature"
    );
    assert_eq!(get_json(&server, "/-/jwks").await, keys);
}
