//! Facts about a git checkout, read with the `git` CLI (as gitlab-runner does).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Run `git` in `dir`; stdout trimmed, or `None` when git fails.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .trim_end_matches('\n')
            .to_owned(),
    )
}

/// The top of the work tree containing `dir`.
pub(crate) fn toplevel(dir: &Path) -> Option<PathBuf> {
    git(dir, &["rev-parse", "--show-toplevel"]).map(PathBuf::from)
}

/// The checked-out branch, `None` when HEAD is detached.
pub(crate) fn current_branch(dir: &Path) -> Option<String> {
    git(dir, &["symbolic-ref", "--quiet", "--short", "HEAD"])
}

/// The default branch: `origin/HEAD` when known, else `main` or `master` when present,
/// else the current branch.
pub(crate) fn default_branch(dir: &Path) -> String {
    if let Some(r) = git(
        dir,
        &[
            "symbolic-ref",
            "--quiet",
            "--short",
            "refs/remotes/origin/HEAD",
        ],
    ) {
        if let Some(b) = r.strip_prefix("origin/") {
            return b.to_owned();
        }
    }
    for b in ["main", "master"] {
        if git(
            dir,
            &[
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("refs/heads/{b}"),
            ],
        )
        .is_some()
        {
            return b.to_owned();
        }
    }
    current_branch(dir).unwrap_or_else(|| "main".to_owned())
}

/// Every file of the work tree that git would see: tracked, plus untracked and not ignored;
/// `None` when git cannot list them (`dir` is no work tree, git failed).
pub(crate) fn files(dir: &Path) -> Option<Vec<String>> {
    git(
        dir,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )
    .map(|s| {
        s.split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect()
    })
}

/// The commit a branch names: the local branch, else `origin`'s; `None` when neither exists.
pub(crate) fn branch_commit(dir: &Path, branch: &str) -> Option<String> {
    if branch.is_empty() || branch.starts_with('-') {
        return None;
    }
    [
        format!("refs/heads/{branch}^{{commit}}"),
        format!("refs/remotes/origin/{branch}^{{commit}}"),
    ]
    .iter()
    .find_map(|rev| {
        git(
            dir,
            &["rev-parse", "--verify", "--quiet", "--end-of-options", rev],
        )
    })
}

/// The best common ancestor of two commits; `None` when they share no history.
pub(crate) fn merge_base(dir: &Path, a: &str, b: &str) -> Option<String> {
    git(dir, &["merge-base", "--end-of-options", a, b])
}

/// The merge of `source` into `target` as a commit (parents: the target, then the
/// source), as a merged results pipeline runs it; `None` when they do not merge cleanly.
/// Writes the merge's objects (unreferenced: `git gc` removes them) and nothing else.
pub(crate) fn merge_commit(
    dir: &Path,
    target: &str,
    source: &str,
    message: &str,
) -> Option<String> {
    let tree = git(dir, &["merge-tree", "--write-tree", target, source])?;
    let tree = tree.lines().next()?.trim().to_owned();
    git(
        dir,
        &[
            "-c",
            "user.name=gantry",
            "-c",
            "user.email=gantry@localhost",
            "commit-tree",
            &tree,
            "-p",
            target,
            "-p",
            source,
            "-m",
            message,
        ],
    )
}

/// What the `origin` remote's URL (`origin_url`) says about the project: the server's URL
/// (`git@gitlab.com:group/project.git` → `https://gitlab.com`) and `namespace/name`.
/// Without a usable remote: `http://localhost` and `local/<directory name>`.
///
/// The server URL is what jobs see as `CI_SERVER_URL` (as on the real server), and it
/// keeps the runner's local cache paths (`<host>/<project>/<key>`) the same from one run
/// to the next; the runner itself talks to the loopback address.
pub(crate) fn origin(root: &Path, origin_url: Option<&str>) -> (String, String) {
    let dir = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "project".to_owned());
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .trim_start_matches(['-', '.'])
            .trim_end_matches(".git")
            .to_owned()
    };
    if let Some(url) = origin_url {
        let url = url.trim().trim_end_matches('/').trim_end_matches(".git");
        let (server, path) = match url.split_once("://") {
            Some((scheme, rest)) => {
                let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
                let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
                let scheme = if scheme == "http" { "http" } else { "https" };
                // ssh://git@host:2222/… → the web server is https://host.
                let host = if scheme == "https" && url.starts_with("ssh") {
                    host.split(':').next().unwrap_or(host)
                } else {
                    host
                };
                (format!("{scheme}://{host}"), path)
            }
            None => match url.split_once(':') {
                Some((user_host, path)) if !user_host.contains('/') => {
                    let host = user_host.rsplit_once('@').map_or(user_host, |(_, h)| h);
                    (format!("https://{host}"), path)
                }
                _ => ("http://localhost".to_owned(), ""),
            },
        };
        let parts: Vec<String> = path
            .split('/')
            .filter(|p| !p.is_empty())
            .map(clean)
            .filter(|p| !p.is_empty())
            .collect();
        let host_ok = server.len() > "https://".len() && !server.ends_with("://");
        if parts.len() >= 2 && host_ok {
            return (server, parts.join("/"));
        }
    }
    let dir = clean(&dir);
    (
        "http://localhost".to_owned(),
        format!("local/{}", if dir.is_empty() { "project" } else { &dir }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_origin_remote_gives_the_server_and_the_project() {
        let dir = tempfile::tempdir().unwrap();
        let name = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches('.')
            .to_owned();
        assert_eq!(
            origin(dir.path(), None),
            ("http://localhost".to_owned(), format!("local/{name}"))
        );
        for (url, server, project) in [
            (
                "git@gitlab.com:gcl/test-project.git",
                "https://gitlab.com",
                "gcl/test-project",
            ),
            (
                "https://user:pw@gitlab.example.com:8443/a/b/c.git",
                "https://gitlab.example.com:8443",
                "a/b/c",
            ),
            (
                "http://localhost:8080/group/proj",
                "http://localhost:8080",
                "group/proj",
            ),
            (
                "ssh://git@host.example:2222/g/p.git",
                "https://host.example",
                "g/p",
            ),
        ] {
            assert_eq!(
                origin(dir.path(), Some(url)),
                (server.to_owned(), project.to_owned()),
                "{url}"
            );
        }
    }
}
