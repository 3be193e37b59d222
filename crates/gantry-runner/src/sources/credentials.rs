//! Keeping the job token out of git's configuration and out of the log.

/// A repository URL split into the URL git is given and the credentials kept apart.
#[derive(Clone, PartialEq, Eq)]
pub struct RepoUrl {
    /// The URL without user info, e.g. `https://gitlab.example.com/acme/widget.git`.
    pub url: String,
    /// `scheme://host[:port]/`, the scope of the credentials (`None` without a scheme).
    pub origin: Option<String>,
    /// Decoded user name, when the URL had user info.
    pub user: Option<String>,
    /// Decoded password (the job token), when the URL had one.
    pub password: Option<String>,
}

impl std::fmt::Debug for RepoUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepoUrl")
            .field("url", &self.url)
            .field("origin", &self.origin)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "[MASKED]"))
            .finish()
    }
}

/// The repository URL for a runner with `clone_url` (gitlab-runner's `GetRemoteURL`):
/// `clone_url`'s scheme, host and path, then the project's path and `.git`, with the
/// job token as `gitlab-ci-token`'s password. `None` when `clone_url` is not an
/// `http(s)://` URL.
pub fn clone_url_repository(clone_url: &str, token: &str, project_path: &str) -> Option<String> {
    let clone_url = clone_url.trim().trim_end_matches('/');
    let (scheme, rest) = clone_url.split_once("://")?;
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        || rest.is_empty()
    {
        return None;
    }
    let project_path = project_path.trim_matches('/');
    Some(format!(
        "{scheme}://gitlab-ci-token:{token}@{rest}/{project_path}.git"
    ))
}

impl RepoUrl {
    /// Splits `raw` (`scheme://[user[:password]@]host[:port]/path`). URLs without a
    /// scheme (`/srv/repo.git`, `git@host:path`) are kept as they are.
    pub fn parse(raw: &str) -> Self {
        let Some(scheme_end) = raw.find("://") else {
            return Self {
                url: raw.to_owned(),
                origin: None,
                user: None,
                password: None,
            };
        };
        let scheme = &raw[..scheme_end];
        let after = &raw[scheme_end + 3..];
        let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(authority_end);
        let (userinfo, host) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(info) => match info.split_once(':') {
                Some((user, password)) => {
                    (Some(percent_decode(user)), Some(percent_decode(password)))
                }
                None => (Some(percent_decode(info)), None),
            },
            None => (None, None),
        };
        Self {
            url: format!("{scheme}://{host}{rest}"),
            origin: Some(format!("{scheme}://{host}/")),
            user,
            password,
        }
    }

    /// The `Authorization` header value for the credentials, if any.
    pub fn authorization(&self) -> Option<String> {
        let user = self.user.as_deref()?;
        let password = self.password.as_deref().unwrap_or_default();
        Some(format!(
            "Basic {}",
            base64(format!("{user}:{password}").as_bytes())
        ))
    }

    /// A masker hiding these credentials (and any URL user info).
    pub fn masker(&self) -> Masker {
        let mut secrets = Vec::new();
        if let Some(password) = self.password.as_deref().filter(|p| !p.is_empty()) {
            secrets.push(password.to_owned());
            secrets.push(percent_encode(password));
        }
        if let Some(header) = self.authorization() {
            if let Some(value) = header.strip_prefix("Basic ") {
                secrets.push(value.to_owned());
            }
        }
        Masker::new(secrets)
    }
}

/// Replaces secrets and URL user info in text meant for the log.
#[derive(Clone, Default)]
pub struct Masker {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Masker({} secrets)", self.secrets.len())
    }
}

impl Masker {
    /// Masks each of `secrets` (empty ones ignored), longest first.
    pub fn new(secrets: Vec<String>) -> Self {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| !s.is_empty()).collect();
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets.dedup();
        Self { secrets }
    }

    /// `text` with URL user info and every secret replaced by `[MASKED]`.
    pub fn mask(&self, text: &str) -> String {
        let mut masked = mask_url_credentials(text);
        for secret in &self.secrets {
            if masked.contains(secret.as_str()) {
                masked = masked.replace(secret.as_str(), "[MASKED]");
            }
        }
        masked
    }
}

/// Replaces the user info of every `scheme://user[:password]@host` in `text` with
/// `[MASKED]`: `https://gitlab-ci-token:abc@host/x` → `https://[MASKED]@host/x`.
pub fn mask_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(position) = rest.find("://") {
        let (before, after) = rest.split_at(position + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| {
                c == '/'
                    || c == '?'
                    || c == '#'
                    || c.is_whitespace()
                    || c == '\''
                    || c == '"'
                    || c == '>'
            })
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(at) if at > 0 => {
                out.push_str("[MASKED]");
                out.push_str(&after[at..end]);
            }
            _ => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_url_keeps_its_prefix_and_takes_the_project_path() {
        assert_eq!(
            clone_url_repository(
                "https://git.internal:8443/mirror/",
                "glcbt-abc",
                "acme/widget"
            )
            .as_deref(),
            Some("https://gitlab-ci-token:glcbt-abc@git.internal:8443/mirror/acme/widget.git")
        );
        assert_eq!(
            clone_url_repository("http://10.0.0.5", "t", "/g/p/").as_deref(),
            Some("http://gitlab-ci-token:t@10.0.0.5/g/p.git")
        );
        assert_eq!(clone_url_repository("git@host:x", "t", "g/p"), None);
        assert_eq!(clone_url_repository("https://", "t", "g/p"), None);
    }

    #[test]
    fn splits_credentials_off() {
        let url = RepoUrl::parse(
            "https://gitlab-ci-token:glcbt-abc%2Fdef@gitlab.example.com:8443/acme/widget.git",
        );
        assert_eq!(url.url, "https://gitlab.example.com:8443/acme/widget.git");
        assert_eq!(
            url.origin.as_deref(),
            Some("https://gitlab.example.com:8443/")
        );
        assert_eq!(url.user.as_deref(), Some("gitlab-ci-token"));
        assert_eq!(url.password.as_deref(), Some("glcbt-abc/def"));
        assert!(!format!("{url:?}").contains("glcbt"));
        let plain = RepoUrl::parse("/srv/git/repo.git");
        assert_eq!(plain.url, "/srv/git/repo.git");
        assert_eq!(plain.authorization(), None);
    }

    #[test]
    fn base64_matches_rfc4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(
            RepoUrl::parse("http://user:pass@h/")
                .authorization()
                .as_deref(),
            Some("Basic dXNlcjpwYXNz")
        );
    }

    #[test]
    fn masks_urls_and_secrets() {
        assert_eq!(
            mask_url_credentials("fatal: unable to access 'https://u:secret@host/x.git/': boom"),
            "fatal: unable to access 'https://[MASKED]@host/x.git/': boom"
        );
        assert_eq!(
            mask_url_credentials("see https://host/x and ftp://a@b"),
            "see https://host/x and ftp://[MASKED]@b"
        );
        let masker = RepoUrl::parse("https://gitlab-ci-token:s3cr%3At@h/x").masker();
        assert_eq!(
            masker.mask("token s3cr:t and s3cr%3At"),
            "token [MASKED] and [MASKED]"
        );
    }
}
