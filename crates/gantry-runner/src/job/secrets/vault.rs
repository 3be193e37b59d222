//! HashiCorp Vault and OpenBao (the same HTTP API, `/v1/…`), as gitlab-runner's
//! `helpers/vault` uses them: a JWT login at `auth/<path>/login` with `{jwt, role}`
//! (`X-Vault-Namespace` when a namespace is set), then a read with the token it returns:
//! `<engine path>/data/<path>` for `kv-v2` (the value is `data.data`), `<engine path>/<path>`
//! for `kv-v1` and `generic` (the value is `data`). The secret is the `field` of that
//! value; a string as it is, another scalar as text, an object or array as JSON
//! (gitlab-runner prints those with Go's `%v`). Paths are joined as Go's `path.Join`
//! (duplicate and trailing slashes dropped).
//!
//! A 404 on the read, or a value without the field, is "not found"; a login without a
//! `client_token` is the server's fault.

use serde_json::Value;

use super::{ProviderError, field, scalar_text};

/// Reads one `vault` secret entry (already expanded, with its `server`).
pub(crate) async fn resolve(
    client: &reqwest::Client,
    entry: &Value,
) -> Result<String, ProviderError> {
    let url = field(entry, &["server", "url"]).trim_end_matches('/');
    if url.is_empty() {
        return Err(ProviderError::Invalid(
            "no Vault server URL: set VAULT_SERVER_URL".into(),
        ));
    }
    let namespace = field(entry, &["server", "namespace"]);
    let auth_name = field(entry, &["server", "auth", "name"]);
    if auth_name != "jwt" {
        return Err(ProviderError::Invalid(format!(
            "Vault auth method {auth_name:?} is not supported (jwt is)"
        )));
    }
    let auth_path = field(entry, &["server", "auth", "path"]);
    let data = entry
        .pointer("/server/auth/data")
        .cloned()
        .unwrap_or(Value::Null);
    if data
        .get("jwt")
        .and_then(Value::as_str)
        .unwrap_or("")
        .is_empty()
    {
        return Err(ProviderError::Invalid(
            "no JWT for the Vault login: give the job `id_tokens:` (and `secrets:token:` when it has several)".into(),
        ));
    }
    let engine = field(entry, &["engine", "name"]);
    let engine_path = field(entry, &["engine", "path"]);
    let path = field(entry, &["path"]);
    let wanted = field(entry, &["field"]);
    let read_path = match engine {
        "kv-v2" => join(&[engine_path, "data", path]),
        "kv-v1" | "generic" => join(&[engine_path, path]),
        other => {
            return Err(ProviderError::Invalid(format!(
                "Vault secrets engine {other:?} is not supported (kv-v2, kv-v1 and generic are)"
            )));
        }
    };

    let with_namespace = |request: reqwest::RequestBuilder| {
        if namespace.is_empty() {
            request
        } else {
            request.header("X-Vault-Namespace", namespace)
        }
    };
    let login_path = join(&["auth", auth_path, "login"]);
    let login = with_namespace(client.put(format!("{url}/v1/{login_path}")))
        .json(&data)
        .send()
        .await
        .map_err(|e| ProviderError::Other(format!("Vault login at {login_path}: {e}")))?;
    let status = login.status().as_u16();
    let body: Value = login.json().await.unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        return Err(ProviderError::Status(
            status,
            format!("Vault login at {login_path}: {}", errors(&body)),
        ));
    }
    let token = field(&body, &["auth", "client_token"]);
    if token.is_empty() {
        return Err(ProviderError::Other(format!(
            "Vault login at {login_path} returned no client token"
        )));
    }

    let read = with_namespace(client.get(format!("{url}/v1/{read_path}")))
        .header("X-Vault-Token", token)
        .send()
        .await
        .map_err(|e| ProviderError::Other(format!("Vault read of {read_path}: {e}")))?;
    let status = read.status().as_u16();
    let body: Value = read.json().await.unwrap_or(Value::Null);
    if status == 404 {
        return Err(ProviderError::NotFound(format!(
            "Vault has nothing at {read_path}"
        )));
    }
    if !(200..300).contains(&status) {
        return Err(ProviderError::Status(
            status,
            format!("Vault read of {read_path}: {}", errors(&body)),
        ));
    }
    let values = match engine {
        "kv-v2" => body.pointer("/data/data"),
        _ => body.get("data"),
    };
    match values.and_then(|v| v.get(wanted)) {
        Some(Value::Null) | None => Err(ProviderError::NotFound(format!(
            "{read_path} has no field {wanted:?}"
        ))),
        Some(value) => Ok(scalar_text(value).unwrap_or_else(|| value.to_string())),
    }
}

/// Vault's `{"errors": [...]}`, joined.
fn errors(body: &Value) -> String {
    match body.get("errors").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join("; "),
        _ => "no error message".into(),
    }
}

/// Go's `path.Join` for relative parts: empty and `.` segments dropped, `..` applied.
fn join(parts: &[&str]) -> String {
    let mut out: Vec<&str> = Vec::new();
    for segment in parts.iter().flat_map(|p| p.split('/')) {
        match segment {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    out.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_as_go_does() {
        assert_eq!(
            join(&["secret/", "data", "/app//db/"]),
            "secret/data/app/db"
        );
        assert_eq!(join(&["auth", "jwt", "login"]), "auth/jwt/login");
        assert_eq!(join(&["kv", "a/../b"]), "kv/b");
    }
}
