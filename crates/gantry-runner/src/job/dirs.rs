//! Where a job runs: gitlab-runner's build directory layout for shared (shell)
//! executors, and the runner's short token.
//!
//! ```text
//! <builds_dir>/<short token>/<concurrent id>/<project path>        $CI_PROJECT_DIR
//! <builds_dir>/<short token>/<concurrent id>/<project path>.tmp    scripts, file variables,
//!                                                                  archives in transit
//! <cache_dir>/<host>/<project path>/<key>/cache.tar.zst            the local cache
//! ```
//!
//! `<project path>` is the path of `git_info.repo_url` without `.git`
//! (`acme/widget`); a URL without a host (`file://…`) or with a segment that is not a
//! plain name gives `project-<project id>`, as gitlab-runner does. The concurrent id is
//! the job's slot within its `[[runners]]` entry (0 .. `limit`), so two jobs of the same
//! project on the same entry never share a directory, and a later job in the same slot
//! reuses the checkout (`GIT_STRATEGY=fetch`).

use std::path::{Path, PathBuf};

use gantry_protocol::token::{
    CREATED_RUNNER_TOKEN_PREFIX, JOB_TOKEN_PREFIX, PARTITION_PREFIXES,
    REGISTERED_RUNNER_TOKEN_PREFIX,
};

use crate::sources::RepoUrl;

/// How many characters of a token identify it in logs and directory names.
const SHORT_TOKEN_LEN: usize = 9;

/// The short display id of a runner token (gitlab-runner's `ShortenToken`): prefixes
/// `glrt-`, `t1_`/`t2_`/`t3_`, `glrtr-`, `glcbt-` and `GR` + 7 hex digits removed, then
/// the first 9 characters.
pub fn short_token(token: &str) -> String {
    let mut rest = token;
    for prefix in [
        CREATED_RUNNER_TOKEN_PREFIX,
        REGISTERED_RUNNER_TOKEN_PREFIX,
        JOB_TOKEN_PREFIX,
    ] {
        if let Some(stripped) = rest.strip_prefix(prefix) {
            rest = stripped;
            break;
        }
    }
    for prefix in PARTITION_PREFIXES {
        if let Some(stripped) = rest.strip_prefix(prefix) {
            rest = stripped;
            break;
        }
    }
    let bytes = rest.as_bytes();
    if bytes.len() > 9 && bytes.starts_with(b"GR") && bytes[2..9].iter().all(u8::is_ascii_hexdigit)
    {
        rest = &rest[9..];
    }
    let short: String = rest
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .take(SHORT_TOKEN_LEN)
        .collect();
    if short.is_empty() {
        "runner".to_owned()
    } else {
        short
    }
}

/// The directories of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildDirs {
    /// `$CI_BUILDS_DIR`: the entry's `builds_dir`.
    pub builds_dir: PathBuf,
    /// `$CI_PROJECT_DIR`.
    pub project_dir: PathBuf,
    /// `<project dir>.tmp`: job scripts, file variables, archives being transferred.
    pub tmp_dir: PathBuf,
    /// The project's relative path (`acme/widget` or `project-42`).
    pub project_path: String,
    /// The project's folder in the local cache (`gitlab.example.com/acme/widget`).
    pub cache_path: String,
}

impl BuildDirs {
    /// The layout for a job of `project_id` fetched from `repo_url`, run by the runner
    /// with `runner_token` in slot `concurrent_id`.
    pub fn new(
        builds_dir: &Path,
        runner_token: &str,
        concurrent_id: usize,
        repo_url: &str,
        project_id: i64,
    ) -> Self {
        let repo = RepoUrl::parse(repo_url);
        let (host, path) = host_and_path(&repo.url);
        let project_path = match path {
            Some(path) if !host.is_empty() => path,
            _ => format!("project-{project_id}"),
        };
        let cache_path = if host.is_empty() {
            project_path.clone()
        } else {
            format!("{host}/{project_path}")
        };
        let project_dir = builds_dir
            .join(short_token(runner_token))
            .join(concurrent_id.to_string())
            .join(&project_path);
        let mut tmp = project_dir.clone().into_os_string();
        tmp.push(".tmp");
        Self {
            builds_dir: builds_dir.to_owned(),
            project_dir,
            tmp_dir: PathBuf::from(tmp),
            project_path,
            cache_path,
        }
    }
}

impl BuildDirs {
    /// `<builds_dir>/<short token>/<concurrent id>`: the directory holding the project
    /// and its `.tmp` sibling (what the Docker executor mounts).
    pub fn slot_dir(&self) -> PathBuf {
        let depth = self.project_path.split('/').count();
        self.project_dir
            .ancestors()
            .nth(depth)
            .map_or_else(|| self.builds_dir.clone(), Path::to_path_buf)
    }
}

/// `("gitlab.example.com", Some("acme/widget"))` from a URL without user info; the
/// path is `None` unless every segment is a plain name.
fn host_and_path(url: &str) -> (String, Option<String>) {
    let Some((_, after)) = url.split_once("://") else {
        return (String::new(), None);
    };
    let (authority, path) = after.split_at(after.find('/').unwrap_or(after.len()));
    let host: String = authority
        .chars()
        .map(|c| if c == ':' { '_' } else { c })
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let plain = |segment: &str| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    let valid = !path.is_empty() && path.split('/').all(plain);
    (host, valid.then(|| path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_tokens_drop_known_prefixes() {
        assert_eq!(short_token("glrt-t1_abcdefghijklmnop"), "abcdefghi");
        assert_eq!(short_token("glrt-abcdefghijklmnop"), "abcdefghi");
        assert_eq!(short_token("glrtr-zyxwvutsrqp"), "zyxwvutsr");
        assert_eq!(short_token("GR1348941abcdefghijk"), "abcdefghi");
        assert_eq!(short_token("fakerunnertoken"), "fakerunne");
        assert_eq!(short_token("../.."), "runner");
    }

    #[test]
    fn gitlab_runner_layout() {
        let dirs = BuildDirs::new(
            Path::new("/builds"),
            "glrt-t1_abcdefghijk",
            2,
            "https://gitlab-ci-token:glcbt-x@gitlab.example.com:8443/acme/widget.git",
            42,
        );
        assert_eq!(
            dirs.project_dir,
            Path::new("/builds/abcdefghi/2/acme/widget")
        );
        assert_eq!(
            dirs.tmp_dir,
            Path::new("/builds/abcdefghi/2/acme/widget.tmp")
        );
        assert_eq!(dirs.slot_dir(), Path::new("/builds/abcdefghi/2"));
        assert_eq!(dirs.cache_path, "gitlab.example.com_8443/acme/widget");
        let local = BuildDirs::new(Path::new("/b"), "t", 0, "file:///srv/repo", 7);
        assert_eq!(local.project_dir, Path::new("/b/t/0/project-7"));
        let sneaky = BuildDirs::new(Path::new("/b"), "t", 0, "https://h/a/../../etc.git", 7);
        assert_eq!(sneaky.project_path, "project-7");
    }
}
