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

/// Every file of the work tree that git would see: tracked, plus untracked and not ignored.
pub(crate) fn files(dir: &Path) -> Vec<String> {
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
    .unwrap_or_default()
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
