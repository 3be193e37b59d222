//! AWS Secrets Manager, as gitlab-runner's `aws_secrets_manager` resolver reads it:
//! `GetSecretValue` (`secret_id`, optional `version_id` / `version_stage`), the
//! `SecretString` (or the base64 of `SecretBinary`), and with `field` that key of the
//! secret's flat JSON (a string, number or boolean). Region, role and session name come
//! from the secret's own keys, else its `server` (`AWS_REGION`, `AWS_ROLE_ARN`,
//! `AWS_ROLE_SESSION_NAME`).
//!
//! Credentials: with a role, STS `AssumeRoleWithWebIdentity` with the job's JWT (the
//! secret's `token`, else `$AWS_ID_TOKEN`) — a JWT without a role is refused, as
//! gitlab-runner does; without a role, the runner's own credentials:
//! `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`, else the shared
//! credentials file (`AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`, profile
//! `AWS_PROFILE` or `default`). Instance metadata (IMDS) and SSO are not read.
//!
//! Endpoints: `https://sts.<region>.amazonaws.com` and
//! `https://secretsmanager.<region>.amazonaws.com`, or the SDKs' overrides from the
//! runner's environment (`AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL_SECRETS_MANAGER`,
//! `AWS_ENDPOINT_URL`), which gitlab-runner's SDK honours on the credentials path only.
//!
//! Requests to Secrets Manager are signed with Signature Version 4 ([`sign`]), checked
//! against AWS's published example.

use aws_lc_rs::{digest, hmac};
use serde_json::{Value, json};

use super::{Environment, ProviderError, field, scalar_text};

/// AWS credentials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    pub(crate) session_token: Option<String>,
}

/// Reads one `aws_secrets_manager` secret entry (already expanded, with its `server`).
pub(crate) async fn resolve(
    client: &reqwest::Client,
    entry: &Value,
    env: Environment<'_>,
) -> Result<String, ProviderError> {
    let own_or_server = |key: &str| {
        let own = field(entry, &[key]);
        if own.is_empty() {
            field(entry, &["server", key]).to_owned()
        } else {
            own.to_owned()
        }
    };
    let region = own_or_server("region");
    let role_arn = own_or_server("role_arn");
    let session_name = own_or_server("role_session_name");
    let jwt = field(entry, &["server", "jwt"]);
    let secret_id = field(entry, &["secret_id"]);
    if secret_id.is_empty() {
        return Err(ProviderError::Invalid("no secret_id".into()));
    }
    if region.is_empty() {
        return Err(ProviderError::Invalid(
            "no AWS region: set AWS_REGION or the secret's region".into(),
        ));
    }
    if role_arn.is_empty() && !jwt.is_empty() {
        return Err(ProviderError::Invalid(
            "Role ARN is required when using JWT for AWS authentication: set AWS_ROLE_ARN or the secret's role_arn".into(),
        ));
    }
    let credentials = if role_arn.is_empty() {
        own_credentials(env)?
    } else {
        let session_name = if session_name.is_empty() {
            // The Go SDK's default: `aws-go-sdk-<nanoseconds>`.
            format!(
                "aws-go-sdk-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos()
            )
        } else {
            session_name
        };
        let sts = endpoint(env, "STS", "sts", &region);
        assume_role_with_web_identity(client, &sts, &role_arn, &session_name, jwt).await?
    };

    let mut body = json!({"SecretId": secret_id});
    for (key, name) in [
        ("version_id", "VersionId"),
        ("version_stage", "VersionStage"),
    ] {
        let value = field(entry, &[key]);
        if !value.is_empty() {
            body[name] = Value::String(value.to_owned());
        }
    }
    let body = body.to_string();
    let base = endpoint(env, "SECRETS_MANAGER", "secretsmanager", &region);
    let url = reqwest::Url::parse(&base)
        .map_err(|e| ProviderError::Invalid(format!("Secrets Manager endpoint {base:?}: {e}")))?;
    let host = match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => {
            return Err(ProviderError::Invalid(format!(
                "Secrets Manager endpoint {base:?} has no host"
            )));
        }
    };
    let amz_date = amz_date(gantry_protocol::time::now_millis().div_euclid(1000));
    let mut headers = vec![
        (
            "content-type".to_owned(),
            "application/x-amz-json-1.1".to_owned(),
        ),
        ("host".to_owned(), host),
        ("x-amz-date".to_owned(), amz_date.clone()),
        (
            "x-amz-target".to_owned(),
            "secretsmanager.GetSecretValue".to_owned(),
        ),
    ];
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token".to_owned(), token.clone()));
    }
    let path = if url.path().is_empty() {
        "/"
    } else {
        url.path()
    };
    let authorization = sign(&Request {
        method: "POST",
        path,
        query: "",
        headers: &headers,
        body: body.as_bytes(),
        region: &region,
        service: "secretsmanager",
        amz_date: &amz_date,
        credentials: &credentials,
    });
    let mut request = client.post(url.clone()).body(body);
    for (name, value) in &headers {
        if name != "host" {
            request = request.header(name.as_str(), value.as_str());
        }
    }
    let response = request
        .header("authorization", authorization)
        .send()
        .await
        .map_err(|e| ProviderError::Other(format!("Secrets Manager GetSecretValue: {e}")))?;
    let status = response.status().as_u16();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let kind = field(&answer, &["__type"]);
        let message = answer
            .get("message")
            .or_else(|| answer.get("Message"))
            .and_then(Value::as_str)
            .unwrap_or("no message");
        let kind = kind.rsplit('#').next().unwrap_or(kind);
        return Err(ProviderError::Status(
            status,
            format!("Secrets Manager GetSecretValue of {secret_id:?}: {kind}: {message}"),
        ));
    }
    let data = if let Some(text) = answer.get("SecretString").and_then(Value::as_str) {
        text.to_owned()
    } else if let Some(binary) = answer.get("SecretBinary").and_then(Value::as_str) {
        // The API sends the bytes base64-encoded; gitlab-runner re-encodes the decoded
        // bytes, which gives the same text.
        binary.to_owned()
    } else {
        return Err(ProviderError::Other("secret contains no value".into()));
    };
    let wanted = field(entry, &["field"]);
    if wanted.is_empty() {
        return Ok(data);
    }
    let flat: serde_json::Map<String, Value> = serde_json::from_str(&data).map_err(|e| {
        ProviderError::Other(format!(
            "failed to parse JSON for secret '{secret_id}': {e}"
        ))
    })?;
    match flat.get(wanted) {
        None => Err(ProviderError::Other(format!(
            "key '{wanted}' not found in AWS Secrets Manager response for secret '{secret_id}'"
        ))),
        Some(value @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
            Ok(scalar_text(value).unwrap_or_default())
        }
        Some(_) => Err(ProviderError::Other(format!(
            "key '{wanted}' in aws secrets manager response for secret '{secret_id}' is not a string, number or boolean"
        ))),
    }
}

/// A service's endpoint: the environment's override, else AWS's regional one.
fn endpoint(env: Environment<'_>, service_env: &str, host: &str, region: &str) -> String {
    env(&format!("AWS_ENDPOINT_URL_{service_env}"))
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("https://{host}.{region}.amazonaws.com"))
}

/// The runner's own credentials: environment, then the shared credentials file.
fn own_credentials(env: Environment<'_>) -> Result<Credentials, ProviderError> {
    if let (Some(id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        if !id.is_empty() && !secret.is_empty() {
            return Ok(Credentials {
                access_key_id: id,
                secret_access_key: secret,
                session_token: env("AWS_SESSION_TOKEN").filter(|t| !t.is_empty()),
            });
        }
    }
    let file = env("AWS_SHARED_CREDENTIALS_FILE")
        .filter(|f| !f.is_empty())
        .or_else(|| env("HOME").map(|home| format!("{home}/.aws/credentials")));
    let profile = env("AWS_PROFILE")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "default".to_owned());
    let text = file
        .as_deref()
        .and_then(|f| std::fs::read_to_string(f).ok());
    text.as_deref()
        .and_then(|text| profile_credentials(text, &profile))
        .ok_or_else(|| {
            ProviderError::Invalid(format!(
                "no AWS credentials for the runner: set AWS_ROLE_ARN (and give the job an ID token AWS_ID_TOKEN), or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the runner's environment, or profile [{profile}] in {}",
                file.as_deref().unwrap_or("~/.aws/credentials")
            ))
        })
}

/// One profile's keys in an AWS shared credentials file (INI).
fn profile_credentials(text: &str, profile: &str) -> Option<Credentials> {
    let mut in_profile = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_profile = name.trim() == profile;
            continue;
        }
        if !in_profile {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let value = value.trim().to_owned();
            match key.trim() {
                "aws_access_key_id" => id = Some(value),
                "aws_secret_access_key" => secret = Some(value),
                "aws_session_token" => token = Some(value),
                _ => {}
            }
        }
    }
    Some(Credentials {
        access_key_id: id?,
        secret_access_key: secret?,
        session_token: token,
    })
}

/// STS `AssumeRoleWithWebIdentity` (an unsigned query-API call).
async fn assume_role_with_web_identity(
    client: &reqwest::Client,
    endpoint: &str,
    role_arn: &str,
    session_name: &str,
    jwt: &str,
) -> Result<Credentials, ProviderError> {
    let form = [
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", role_arn),
        ("RoleSessionName", session_name),
        ("WebIdentityToken", jwt),
    ];
    let response = client
        .post(endpoint)
        .form(&form)
        .send()
        .await
        .map_err(|e| ProviderError::Other(format!("STS AssumeRoleWithWebIdentity: {e}")))?;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    if !(200..300).contains(&status) {
        let code = xml_text(&text, "Code").unwrap_or_default();
        let message = xml_text(&text, "Message").unwrap_or_default();
        return Err(ProviderError::Status(
            status,
            format!("STS AssumeRoleWithWebIdentity for {role_arn}: {code}: {message}"),
        ));
    }
    match (
        xml_text(&text, "AccessKeyId"),
        xml_text(&text, "SecretAccessKey"),
    ) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(Credentials {
            access_key_id,
            secret_access_key,
            session_token: xml_text(&text, "SessionToken"),
        }),
        _ => Err(ProviderError::Other(format!(
            "STS AssumeRoleWithWebIdentity for {role_arn} answered without credentials"
        ))),
    }
}

/// The text of the first `<tag>` element, unescaped.
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut inside = false;
    loop {
        match reader.read_event().ok()? {
            quick_xml::events::Event::Start(e) if e.local_name().as_ref() == tag.as_bytes() => {
                inside = true;
            }
            quick_xml::events::Event::Text(t) if inside => {
                return t.unescape().ok().map(|s| s.trim().to_owned());
            }
            quick_xml::events::Event::End(_) if inside => return Some(String::new()),
            quick_xml::events::Event::Eof => return None,
            _ => {}
        }
    }
}

/// `YYYYMMDDTHHMMSSZ` for a Unix time in seconds.
fn amz_date(secs: i64) -> String {
    gantry_protocol::time::rfc3339_secs(secs).replace(['-', ':'], "")
}

/// What [`sign`] signs.
pub(crate) struct Request<'a> {
    pub(crate) method: &'a str,
    /// The URI path, already URI-encoded.
    pub(crate) path: &'a str,
    /// The query string, already in canonical form (sorted, encoded).
    pub(crate) query: &'a str,
    /// Lower-case names; every one is signed.
    pub(crate) headers: &'a [(String, String)],
    pub(crate) body: &'a [u8],
    pub(crate) region: &'a str,
    pub(crate) service: &'a str,
    /// `YYYYMMDDTHHMMSSZ`.
    pub(crate) amz_date: &'a str,
    pub(crate) credentials: &'a Credentials,
}

/// The `Authorization` header of Signature Version 4.
pub(crate) fn sign(r: &Request<'_>) -> String {
    let mut headers: Vec<(String, String)> = r
        .headers
        .iter()
        .map(|(k, v)| {
            let value = v.split_whitespace().collect::<Vec<_>>().join(" ");
            (k.to_ascii_lowercase(), value)
        })
        .collect();
    headers.sort();
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let canonical = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        r.method,
        r.path,
        r.query,
        canonical_headers,
        signed,
        hex(digest::digest(&digest::SHA256, r.body).as_ref())
    );
    let date = r.amz_date.get(..8).unwrap_or(r.amz_date);
    let scope = format!("{date}/{}/{}/aws4_request", r.region, r.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        r.amz_date,
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let mac = |key: &[u8], data: &str| -> Vec<u8> {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
            .as_ref()
            .to_vec()
    };
    let k_date = mac(
        format!("AWS4{}", r.credentials.secret_access_key).as_bytes(),
        date,
    );
    let k_region = mac(&k_date, r.region);
    let k_service = mac(&k_region, r.service);
    let k_signing = mac(&k_service, "aws4_request");
    let signature = hex(&mac(&k_signing, &to_sign));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
        r.credentials.access_key_id
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's worked example ("Create a signed AWS API request", IAM `ListUsers`,
    /// 2015-08-30): the signature it publishes.
    #[test]
    fn the_signature_matches_aws_published_example() {
        let credentials = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let headers = vec![
            (
                "content-type".to_owned(),
                "application/x-www-form-urlencoded; charset=utf-8".to_owned(),
            ),
            ("host".to_owned(), "iam.amazonaws.com".to_owned()),
            ("x-amz-date".to_owned(), "20150830T123600Z".to_owned()),
        ];
        let authorization = sign(&Request {
            method: "GET",
            path: "/",
            query: "Action=ListUsers&Version=2010-05-08",
            headers: &headers,
            body: b"",
            region: "us-east-1",
            service: "iam",
            amz_date: "20150830T123600Z",
            credentials: &credentials,
        });
        assert_eq!(
            authorization,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
        );
    }

    #[test]
    fn amz_dates() {
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
    }

    #[test]
    fn shared_credentials_file_profiles() {
        let text = "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n[ci]\naws_access_key_id=C\naws_secret_access_key=D\naws_session_token=E\n";
        assert_eq!(
            profile_credentials(text, "ci"),
            Some(Credentials {
                access_key_id: "C".into(),
                secret_access_key: "D".into(),
                session_token: Some("E".into()),
            })
        );
        assert_eq!(
            profile_credentials(text, "default").map(|c| c.access_key_id),
            Some("A".into())
        );
        assert_eq!(profile_credentials(text, "none"), None);
    }

    #[test]
    fn sts_answers_are_read() {
        let xml = "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleWithWebIdentityResult><Credentials><SessionToken>tok&amp;en</SessionToken><SecretAccessKey>sk</SecretAccessKey><AccessKeyId>ASIA1</AccessKeyId></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        assert_eq!(xml_text(xml, "AccessKeyId").as_deref(), Some("ASIA1"));
        assert_eq!(xml_text(xml, "SessionToken").as_deref(), Some("tok&en"));
        assert_eq!(xml_text(xml, "Missing"), None);
    }
}
