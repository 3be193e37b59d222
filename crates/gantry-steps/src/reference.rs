//! A step reference (`func:`/`step:`) after its expressions are expanded.
//!
//! | written | means |
//! |---|---|
//! | `./dir`, `../x/file.yml`, `/abs/dir` | a local directory (relative to the calling step's directory, or to the job's directory for a job's `run:`); a last segment ending `.yml` is the file, else `func.yml` (then `step.yml`) |
//! | `host/path@rev` | git `https://host/path` at `rev` (the last `@`), directory `steps/` |
//! | `host/path/-/dir/sub@rev` | the same repository, directory `steps/dir/sub` (or file `steps/dir/file.yml`) |
//! | `{git: {url, rev, dir, file}}` | git, `dir` from the repository's root |
//! | `{oci: {…}}`, `registry/repo:tag` | an OCI function image: not supported (no registry client) |
//! | `builtin://…` | a step compiled into the step-runner: Gantry has none |

use serde_json::Value;

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Local {
        /// As written.
        path: String,
    },
    Git {
        url: String,
        rev: String,
        /// Directory in the repository (`steps/…`), `None` for the root.
        dir: Option<String>,
        /// File name, `None` for `func.yml` then `step.yml`.
        file: Option<String>,
    },
}

/// Parses an expanded reference; the message says what is wrong and what works.
pub fn parse(raw: &Value) -> Result<Reference, String> {
    match raw {
        Value::String(s) => parse_short(s.trim()),
        Value::Object(o) => {
            let field =
                |body: &Value, k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
            if let Some(git) = o.get("git") {
                let (Some(url), Some(rev)) = (field(git, "url"), field(git, "rev")) else {
                    return Err("a git reference needs `url` and `rev`".to_owned());
                };
                Ok(Reference::Git {
                    url: with_scheme(&url),
                    rev,
                    dir: field(git, "dir")
                        .map(|d| d.trim_matches('/').to_owned())
                        .filter(|d| !d.is_empty()),
                    file: field(git, "file"),
                })
            } else if o.contains_key("oci") {
                Err(oci_unsupported())
            } else {
                Err("a reference object needs `git:` or `oci:`".to_owned())
            }
        }
        other => Err(format!(
            "a reference must be text or a mapping, not {other}"
        )),
    }
}

fn oci_unsupported() -> String {
    "OCI function images are not supported by Gantry yet (it has no registry client); use a local path (./dir) or a git reference (host/path@rev)".to_owned()
}

fn with_scheme(url: &str) -> String {
    if url.contains("://") || url.starts_with('/') {
        url.to_owned()
    } else {
        format!("https://{url}")
    }
}

fn parse_short(s: &str) -> Result<Reference, String> {
    if s.is_empty() {
        return Err("the reference is empty".to_owned());
    }
    if s.starts_with('.') || s.starts_with('/') {
        return Ok(Reference::Local { path: s.to_owned() });
    }
    if let Some(name) = s
        .strip_prefix("builtin://")
        .or_else(|| s.strip_prefix("dist://"))
    {
        return Err(format!(
            "`{name}` is a built-in step of GitLab's step-runner; Gantry has no built-in steps (write a `script:` step, or a step of your own)"
        ));
    }
    let Some((location, rev)) = s.rsplit_once('@') else {
        return Err(if s.contains(':') {
            oci_unsupported()
        } else {
            format!(
                "{s:?} is not a reference: a local path starts with ./ or /, a git reference is host/path@rev"
            )
        });
    };
    if rev.is_empty() || location.is_empty() {
        return Err(format!("{s:?}: a git reference is host/path@rev"));
    }
    let (repo, sub) = match location.split_once("/-/") {
        Some((repo, sub)) => (repo, Some(sub.trim_matches('/'))),
        None => (location, None),
    };
    let (dir, file) = match sub {
        None | Some("") => ("steps".to_owned(), None),
        Some(sub) if sub.ends_with(".yml") => match sub.rsplit_once('/') {
            Some((d, f)) => (format!("steps/{d}"), Some(f.to_owned())),
            None => ("steps".to_owned(), Some(sub.to_owned())),
        },
        Some(sub) => (format!("steps/{sub}"), None),
    };
    Ok(Reference::Git {
        url: with_scheme(repo),
        rev: rev.to_owned(),
        dir: Some(dir),
        file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn short_and_expanded_forms() {
        assert_eq!(
            parse(&json!("./tools/x")).unwrap(),
            Reference::Local {
                path: "./tools/x".into()
            }
        );
        assert_eq!(
            parse(&json!("gitlab.com/acme/steps@v1")).unwrap(),
            Reference::Git {
                url: "https://gitlab.com/acme/steps".into(),
                rev: "v1".into(),
                dir: Some("steps".into()),
                file: None
            }
        );
        assert_eq!(
            parse(&json!("gitlab.com/acme/steps/-/go/build@main")).unwrap(),
            Reference::Git {
                url: "https://gitlab.com/acme/steps".into(),
                rev: "main".into(),
                dir: Some("steps/go/build".into()),
                file: None
            }
        );
        assert_eq!(
            parse(&json!("gitlab.com/a/b/-/x/echo.yml@v1")).unwrap(),
            Reference::Git {
                url: "https://gitlab.com/a/b".into(),
                rev: "v1".into(),
                dir: Some("steps/x".into()),
                file: Some("echo.yml".into())
            }
        );
        assert_eq!(
            parse(&json!({"git": {"url": "file:///srv/steps.git", "rev": "v2", "dir": "/greet/"}}))
                .unwrap(),
            Reference::Git {
                url: "file:///srv/steps.git".into(),
                rev: "v2".into(),
                dir: Some("greet".into()),
                file: None
            }
        );
        assert!(
            parse(&json!("registry.gitlab.com/a/echo:1"))
                .unwrap_err()
                .starts_with("OCI function images")
        );
        assert!(
            parse(&json!({"oci": {}}))
                .unwrap_err()
                .starts_with("OCI function images")
        );
        assert!(
            parse(&json!("builtin://script_legacy"))
                .unwrap_err()
                .contains("no built-in steps")
        );
        assert_eq!(
            parse(&json!("echo")).unwrap_err(),
            "\"echo\" is not a reference: a local path starts with ./ or /, a git reference is host/path@rev"
        );
    }
}
