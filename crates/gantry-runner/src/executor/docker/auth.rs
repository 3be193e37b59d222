//! Registry credentials for image pulls, resolved as gitlab-runner's
//! `helpers/docker/auth` does. Sources, first one wins per registry:
//!
//! 1. `DOCKER_AUTH_CONFIG` among the job's variables (job, project, group, instance
//!    variables, and the runner's `environment = [...]`), a Docker `config.json` text;
//! 2. the runner user's `~/.docker/config.json` (else `~/.dockercfg`, same format);
//! 3. the payload's `credentials` of type `registry` (the coordinator's registry).
//!
//! In a `config.json`, `auths` entries give `auth` (base64 `user:password`) or
//! `username`/`password`, `identitytoken`, `registrytoken`; `credsStore` asks
//! `docker-credential-<store> list` then `get` for every registry it has, and `credHelpers`
//! asks `docker-credential-<helper> get` for its registry (the Docker credential-helper
//! protocol: the server URL on stdin, `{"ServerURL","Username","Secret"}` on stdout, a
//! `<token>` user meaning an identity token). A helper name with a `/` is refused, as
//! gitlab-runner refuses path traversal; a source that cannot be read is skipped with a
//! warning naming it.
//!
//! An image's registry path is its name without tag, `docker.io/` prepended for Docker
//! Hub names, `index.docker.io` read as `docker.io`, the host lower-cased; the credentials
//! whose path is the longest prefix (by path segments) of it are used, and the job log
//! says where they came from ("Authenticating with credentials from …").
//!
//! Cost: parsing the sources once per job (one process per helper entry), a prefix walk
//! per image.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use gantry_protocol::{Credential, JobVariable};
use serde_json::Value;

/// gitlab-runner's source name for the variable.
pub const SOURCE_VARIABLE: &str = "$DOCKER_AUTH_CONFIG";
/// gitlab-runner's source name for the payload's credentials.
pub const SOURCE_PAYLOAD: &str = "job payload (GitLab Registry)";

/// One registry's credentials and where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryInfo {
    /// Normalized registry path (`registry.example.com:5000`, `docker.io`, `host/group`).
    pub path: String,
    /// `$DOCKER_AUTH_CONFIG`, a file path, or the payload.
    pub source: String,
    /// What the engine gets as `X-Registry-Auth`.
    pub credentials: DockerCredentials,
}

/// Every known registry, in the order found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registries(Vec<RegistryInfo>);

impl Registries {
    /// Reads the sources. `home` is the runner user's home directory; `warn` gets a line
    /// for each source that could not be read.
    pub async fn resolve(
        variables: &[JobVariable],
        credentials: &[Credential],
        home: Option<&Path>,
        helpers: HelperPath<'_>,
        warn: &mut (dyn FnMut(&str) + Send),
    ) -> Registries {
        let mut out = Registries::default();
        let variable = gantry_protocol::variable(variables, "DOCKER_AUTH_CONFIG")
            .filter(|v| !v.trim().is_empty())
            .map(str::to_owned);
        if let Some(text) = variable {
            match read_config(&text, helpers).await {
                Ok(entries) => out.extend(SOURCE_VARIABLE, entries),
                Err(why) => warn(&format!(
                    "Failed to resolve credentials from {SOURCE_VARIABLE}: {why}. Credentials from this source will not be used."
                )),
            }
        }
        if let Some(home) = home {
            let files: [PathBuf; 2] = [home.join(".docker/config.json"), home.join(".dockercfg")];
            if let Some((file, text)) = files
                .iter()
                .find_map(|f| std::fs::read_to_string(f).ok().map(|t| (f, t)))
            {
                let source = file.display().to_string();
                match read_config(&text, helpers).await {
                    Ok(entries) => out.extend(&source, entries),
                    Err(why) => warn(&format!(
                        "Failed to resolve credentials from {source}: {why}. Credentials from this source will not be used."
                    )),
                }
            }
        }
        let payload: Vec<(String, DockerCredentials)> = credentials
            .iter()
            .filter(|c| c.kind == "registry")
            .map(|c| {
                (
                    c.url.clone(),
                    DockerCredentials {
                        username: Some(c.username.clone()),
                        password: Some(c.password.clone()),
                        serveraddress: Some(c.url.clone()),
                        ..DockerCredentials::default()
                    },
                )
            })
            .collect();
        out.extend(SOURCE_PAYLOAD, payload);
        out
    }

    fn extend(&mut self, source: &str, entries: Vec<(String, DockerCredentials)>) {
        for (server, credentials) in entries {
            let path = registry_path(&server);
            if self.0.iter().any(|known| known.path == path) {
                continue; // the first source wins (gitlab-runner logs it at debug level)
            }
            self.0.push(RegistryInfo {
                path,
                source: source.to_owned(),
                credentials,
            });
        }
    }

    /// The credentials for `image`: the longest registry path that prefixes it.
    pub fn for_image(&self, image: &str) -> Option<&RegistryInfo> {
        let mut path = normalize_image(image);
        loop {
            if let Some(info) = self.0.iter().find(|i| i.path == path) {
                return Some(info);
            }
            match path.rfind('/') {
                Some(i) => path.truncate(i),
                None => return None,
            }
        }
    }

    /// Whether no registry is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Why a `config.json` text gave no credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    /// Not JSON, or not an object.
    #[error("not a Docker config.json: {0}")]
    Syntax(String),
    /// `auth` is not base64 of `user:password`.
    #[error("the auth of {server} is not base64 of user:password")]
    BadAuth {
        /// The registry.
        server: String,
    },
    /// A helper name that is a path.
    #[error("credential helper {0:?}: path traversal is not allowed")]
    PathTraversal(String),
    /// A helper that failed.
    #[error("docker-credential-{helper} {action}: {message}")]
    Helper {
        /// The helper's name.
        helper: String,
        /// `get` or `list`.
        action: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// Where credential helpers are looked up: `None` is the runner's `PATH`.
pub type HelperPath<'a> = Option<&'a std::ffi::OsStr>;

/// The credentials a `config.json` text gives, by server (sorted, as gitlab-runner's
/// `withStableOrder`).
pub async fn read_config(
    text: &str,
    helpers: HelperPath<'_>,
) -> Result<Vec<(String, DockerCredentials)>, AuthConfigError> {
    let config: Value =
        serde_json::from_str(text).map_err(|e| AuthConfigError::Syntax(e.to_string()))?;
    let Some(config) = config.as_object() else {
        return Err(AuthConfigError::Syntax("not a JSON object".into()));
    };
    let mut found: std::collections::BTreeMap<String, DockerCredentials> = Default::default();
    if let Some(auths) = config.get("auths").and_then(Value::as_object) {
        for (server, entry) in auths {
            let field = |k: &str| {
                entry
                    .get(k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            let mut credentials = DockerCredentials {
                username: field("username"),
                password: field("password"),
                identitytoken: field("identitytoken"),
                registrytoken: field("registrytoken"),
                email: field("email"),
                serveraddress: Some(server.clone()),
                ..DockerCredentials::default()
            };
            if let Some(auth) = field("auth") {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok());
                let Some((user, password)) = decoded.as_deref().and_then(|d| d.split_once(':'))
                else {
                    return Err(AuthConfigError::BadAuth {
                        server: server.clone(),
                    });
                };
                credentials.username = Some(user.to_owned());
                credentials.password = Some(password.trim_end_matches('\0').to_owned());
            }
            found.insert(server.clone(), credentials);
        }
    }
    if let Some(store) = config
        .get("credsStore")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        let listed = helper(store, "list", "", helpers).await?;
        let servers: Vec<String> = listed
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for server in servers {
            found.insert(server.clone(), helper_get(store, &server, helpers).await?);
        }
    }
    if let Some(per_registry) = config.get("credHelpers").and_then(Value::as_object) {
        for (server, name) in per_registry {
            let Some(name) = name.as_str() else { continue };
            found.insert(server.clone(), helper_get(name, server, helpers).await?);
        }
    }
    Ok(found.into_iter().collect())
}

/// `docker-credential-<name> get` for `server`.
async fn helper_get(
    name: &str,
    server: &str,
    helpers: HelperPath<'_>,
) -> Result<DockerCredentials, AuthConfigError> {
    let answer = helper(name, "get", server, helpers).await?;
    let text = |k: &str| {
        answer
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (user, secret) = (text("Username"), text("Secret"));
    let mut credentials = DockerCredentials {
        serveraddress: Some(server.to_owned()),
        ..DockerCredentials::default()
    };
    if user == "<token>" {
        credentials.identitytoken = Some(secret);
    } else {
        credentials.username = Some(user);
        credentials.password = Some(secret);
    }
    Ok(credentials)
}

/// Runs a credential helper (`PATH` lookup) with `input` on stdin; its JSON answer.
async fn helper(
    name: &str,
    action: &'static str,
    input: &str,
    helpers: HelperPath<'_>,
) -> Result<Value, AuthConfigError> {
    use tokio::io::AsyncWriteExt as _;
    if name.contains('/') || name.contains('\\') || name == ".." {
        return Err(AuthConfigError::PathTraversal(name.to_owned()));
    }
    let failed = |message: String| AuthConfigError::Helper {
        helper: name.to_owned(),
        action,
        message,
    };
    let mut command = tokio::process::Command::new(format!("docker-credential-{name}"));
    if let Some(path) = helpers {
        command.env("PATH", path);
    }
    let mut child = command
        .arg(action)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(e.to_string()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .await
            .map_err(|e| failed(e.to_string()))?;
    }
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
        .await
        .map_err(|_| failed("no answer within 30 s".into()))?
        .map_err(|e| failed(e.to_string()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said = if stdout.trim().is_empty() {
            stderr
        } else {
            stdout
        };
        return Err(failed(format!("{} ({})", said.trim(), output.status)));
    }
    serde_json::from_str(&stdout).map_err(|e| failed(format!("not JSON: {e}")))
}

/// gitlab-runner's `normalizeImageRef`: the image without its tag, `docker.io/` for Docker
/// Hub names, the host lower-cased.
pub fn normalize_image(image: &str) -> String {
    let image = image.split('@').next().unwrap_or(image);
    let (dir, last) = image.rsplit_once('/').map_or(("", image), |(d, l)| (d, l));
    let last = last.split(':').next().unwrap_or(last);
    let normalized = if dir.is_empty() {
        last.to_owned()
    } else {
        format!("{dir}/{last}")
    };
    let first = normalized.split('/').next().unwrap_or("");
    let docker_io = !normalized.contains('/')
        || (!first.contains('.')
            && !first.contains(':')
            && !first.eq_ignore_ascii_case("localhost"));
    let normalized = if docker_io {
        format!("docker.io/{normalized}")
    } else if first.eq_ignore_ascii_case("index.docker.io") {
        normalized
            .split_once('.')
            .map_or(normalized.clone(), |(_, rest)| rest.to_owned())
    } else {
        normalized
    };
    lower_host(&normalized)
}

/// gitlab-runner's `convertToRegistryPath`: a `config.json` key as a registry path.
pub fn registry_path(server: &str) -> String {
    let lower = server.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        let rest = server.split_once("://").map_or(server, |(_, r)| r);
        let host = rest.split('/').next().unwrap_or(rest).to_ascii_lowercase();
        return if host == "index.docker.io" {
            "docker.io".to_owned()
        } else {
            host
        };
    }
    let mut path = server.trim_end_matches('/').to_owned();
    if let (Some(tag), Some(slash)) = (path.rfind(':'), path.rfind('/')) {
        if tag > slash {
            path.truncate(tag);
        }
    }
    lower_host(&path)
}

fn lower_host(path: &str) -> String {
    match path.split_once('/') {
        Some((host, rest)) => format!("{}/{rest}", host.to_ascii_lowercase()),
        None => path.to_ascii_lowercase(),
    }
}

/// The runner user's home directory.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_normalize_as_gitlab_runner_does() {
        for (image, path) in [
            ("nginx", "docker.io/nginx"),
            ("nginx:1.27", "docker.io/nginx"),
            ("library/nginx", "docker.io/library/nginx"),
            ("index.docker.io/library/nginx:1", "docker.io/library/nginx"),
            (
                "Registry.Example.com:5000/Group/App:2",
                "registry.example.com:5000/Group/App",
            ),
            ("localhost/app", "localhost/app"),
            ("127.0.0.1:5000/private/img:1", "127.0.0.1:5000/private/img"),
        ] {
            assert_eq!(normalize_image(image), path, "{image}");
        }
        assert_eq!(registry_path("https://index.docker.io/v1/"), "docker.io");
        assert_eq!(registry_path("http://Registry:5000/v2/"), "registry:5000");
        assert_eq!(
            registry_path("registry.example.com/group/"),
            "registry.example.com/group"
        );
    }

    #[tokio::test]
    async fn the_longest_prefix_and_the_first_source_win() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:pw1");
        let text = format!(
            r#"{{"auths": {{"registry.example.com": {{"auth": "{auth}"}}, "registry.example.com/team": {{"username": "bob", "password": "pw2"}}}}}}"#
        );
        let variables = vec![JobVariable {
            key: "DOCKER_AUTH_CONFIG".into(),
            value: text,
            public: false,
            masked: false,
            file: false,
            raw: false,
        }];
        let payload = vec![Credential {
            kind: "registry".into(),
            url: "registry.example.com".into(),
            username: "gitlab-ci-token".into(),
            password: "job".into(),
        }];
        let mut warnings = Vec::new();
        let registries = Registries::resolve(&variables, &payload, None, None, &mut |w| {
            warnings.push(w.to_owned())
        })
        .await;
        assert!(warnings.is_empty(), "{warnings:?}");
        let team = registries
            .for_image("registry.example.com/team/app:1")
            .unwrap();
        assert_eq!(team.credentials.username.as_deref(), Some("bob"));
        let other = registries
            .for_image("registry.example.com/other/app")
            .unwrap();
        assert_eq!(
            (
                other.credentials.username.as_deref(),
                other.credentials.password.as_deref(),
                other.source.as_str()
            ),
            (Some("alice"), Some("pw1"), SOURCE_VARIABLE)
        );
        assert!(registries.for_image("nginx").is_none());
    }

    #[tokio::test]
    async fn unreadable_sources_are_skipped_with_a_warning() {
        let variables = vec![JobVariable {
            key: "DOCKER_AUTH_CONFIG".into(),
            value: "{not json".into(),
            public: false,
            masked: false,
            file: false,
            raw: false,
        }];
        let mut warnings = Vec::new();
        let registries = Registries::resolve(&variables, &[], None, None, &mut |w| {
            warnings.push(w.to_owned())
        })
        .await;
        assert!(registries.is_empty());
        assert!(
            warnings[0].starts_with(
                "Failed to resolve credentials from $DOCKER_AUTH_CONFIG: not a Docker config.json"
            ),
            "{warnings:?}"
        );
        assert_eq!(
            read_config(r#"{"credHelpers": {"r": "../evil"}}"#, None).await,
            Err(AuthConfigError::PathTraversal("../evil".into()))
        );
    }

    /// Credential helpers as Docker's protocol has them: programs on `PATH`, `credsStore`
    /// listed then asked, `credHelpers` asked for their registry, `<token>` users.
    #[tokio::test]
    async fn credential_helpers_answer_over_stdin_and_stdout() {
        let dir = tempfile::tempdir().unwrap();
        let helper = dir.path().join("docker-credential-gantrytest");
        std::fs::write(
            &helper,
            "#!/bin/sh\ncase \"$1\" in\nlist) echo '{\"reg.test:5000\":\"carol\",\"tok.test\":\"<token>\"}' ;;\nget) read server\n  case \"$server\" in\n  reg.test:5000) echo '{\"ServerURL\":\"reg.test:5000\",\"Username\":\"carol\",\"Secret\":\"pw3\"}' ;;\n  tok.test) echo '{\"ServerURL\":\"tok.test\",\"Username\":\"<token>\",\"Secret\":\"idtok\"}' ;;\n  *) echo 'credentials not found in native keychain'; exit 1 ;;\n  esac ;;\nesac\n",
        )
        .unwrap();
        std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = std::ffi::OsString::from(format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        ));
        let found = read_config(r#"{"credsStore": "gantrytest"}"#, Some(&path))
            .await
            .unwrap();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].1.username.as_deref(), Some("carol"));
        assert_eq!(found[0].1.password.as_deref(), Some("pw3"));
        assert_eq!(found[1].1.identitytoken.as_deref(), Some("idtok"));
        let asked = read_config(
            r#"{"credHelpers": {"reg.test:5000": "gantrytest"}}"#,
            Some(&path),
        )
        .await
        .unwrap();
        assert_eq!(asked[0].1.password.as_deref(), Some("pw3"));
        let missing = read_config(
            r#"{"credHelpers": {"other.test": "gantrytest"}}"#,
            Some(&path),
        )
        .await
        .unwrap_err();
        assert!(
            missing
                .to_string()
                .contains("credentials not found in native keychain"),
            "{missing}"
        );
    }
}
