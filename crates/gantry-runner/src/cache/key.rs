//! Cache key sanitization (gitlab-runner `cache/cachekey.Sanitize`).

/// A key that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Nothing usable is left after sanitizing (`.`, `..`, `/`, blanks, …).
    #[error("sanitize cache key {raw:?}: nothing usable is left")]
    Unusable {
        /// The key as given.
        raw: String,
    },
}

/// The key used when the job gives none: `<job name>/<ref>` (gitlab-runner's
/// `path.Join(JobInfo.Name, GitInfo.Ref)`, rooted so it cannot start with `..`).
pub fn default_key(job_name: &str, git_ref: &str) -> String {
    clean(&format!("/{job_name}/{git_ref}"))
        .trim_start_matches('/')
        .to_owned()
}

/// Sanitizes a cache key as gitlab-runner does:
///
/// * `%2f`/`%2F` become `/`, `%2e`/`%2E` become `.`, `\` becomes `/`;
/// * the path is cleaned against a virtual root, so `.`/`..` segments can never climb
///   out of the cache folder (`../x` → `x`, `a/b/..` → `a`);
/// * trailing whitespace is trimmed from the last segment, and segments that become
///   empty are dropped (`key/ ` → `key`); leading and inner whitespace stays.
///
/// Returns the key, or [`KeyError::Unusable`] when nothing is left. An empty input is
/// returned as is (the caller substitutes [`default_key`]).
pub fn sanitize_key(raw: &str) -> Result<String, KeyError> {
    if raw.is_empty() {
        return Ok(String::new());
    }
    let normalised = raw
        .replace("%2f", "/")
        .replace("%2F", "/")
        .replace("%2e", ".")
        .replace("%2E", ".")
        .replace('\\', "/");
    let cleaned = clean(&format!("/{normalised}"));
    let mut parts: Vec<&str> = cleaned.get(1..).unwrap_or_default().split('/').collect();
    while let Some(last) = parts.last_mut() {
        *last = last.trim_end_matches(char::is_whitespace);
        if last.is_empty() {
            parts.pop();
        } else {
            break;
        }
    }
    let key = parts.join("/");
    if key.is_empty() {
        Err(KeyError::Unusable {
            raw: raw.to_owned(),
        })
    } else {
        Ok(key)
    }
}

/// Go's `path.Clean` for a rooted path.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gitlab-runner's `TestSanitize` table.
    #[test]
    fn gitlab_runner_cases() {
        let ok = [
            ("fallback_key", "fallback_key"),
            ("some-job/some-ref", "some-job/some-ref"),
            (".../....", ".../...."),
            ("...", "..."),
            ("fallback_key/", "fallback_key"),
            ("fallback_key ", "fallback_key"),
            ("fallback_key\\", "fallback_key"),
            ("fallback_key/ \\", "fallback_key"),
            ("fallback_key/ / \\  \\", "fallback_key"),
            ("fallback_key/o", "fallback_key/o"),
            ("fallback_key / \\o", "fallback_key / /o"),
            ("\t foo bar \t\r", "\t foo bar"),
            (" foo / bar ", " foo / bar"),
            ("foo\r", "foo"),
            ("foo \t \r ", "foo"),
            ("something %2F something", "something / something"),
            ("some%2f../job/some/ref/.", "job/some/ref"),
            ("%2E%2E%2E", "..."),
            ("%5C", "%5C"),
            ("foo/./bar", "foo/bar"),
            ("foo/blipp/../bar", "foo/bar"),
            ("/foo/bar", "foo/bar"),
            ("//foo/bar", "foo/bar"),
            ("../foo/bar", "foo/bar"),
            ("foo/bar/../../../.././blerp", "blerp"),
            ("a/b/c/../../d", "a/d"),
            ("job\\name/git\\ref", "job/name/git/ref"),
            ("..\\foo\\bar", "foo/bar"),
            ("foo/ /bar", "foo/ /bar"),
            ("foo/ / /", "foo"),
        ];
        for (raw, expected) in ok {
            assert_eq!(sanitize_key(raw).as_deref(), Ok(expected), "{raw:?}");
        }
        let unusable = [
            "\\",
            "\\.",
            "/",
            " ",
            ".",
            "..",
            " / ",
            "//",
            "//\\",
            "../.",
            "foo\\bar\\..\\..",
            "foo/bar/../..",
            " \t\r\n",
            "%2E",
            "%2E%2E",
            "%2e",
            ".%2E",
        ];
        for raw in unusable {
            assert!(sanitize_key(raw).is_err(), "{raw:?}");
        }
        assert_eq!(sanitize_key(""), Ok(String::new()));
    }

    #[test]
    fn default_keys() {
        assert_eq!(default_key("rspec 1/2", "main"), "rspec 1/2/main");
        assert_eq!(default_key("../x", "main"), "x/main");
    }
}
