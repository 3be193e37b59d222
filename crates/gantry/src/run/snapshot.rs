//! The sources `gantry run` builds: a commit holding the working tree as it is now, a
//! bare repository the coordinator mirrors, and a directory every job gets a copy of.
//!
//! ```text
//! checkout ──git add -A (temporary index)──► snapshot commit (parent: HEAD)
//!                                             │  objects in <tmp>/src.git, which borrows
//!                                             │  the checkout's objects (alternates)
//!         <tmp>/src.git  refs/heads/<ref> ────┘  ← the coordinator's project repository
//!         <tmp>/snapshot  checkout of the commit + a minimal .git ← copied into each job
//! ```
//!
//! Nothing is written to the checkout: the temporary index and the new objects live in
//! the run's temporary directory. With a clean working tree the commit is `HEAD` itself;
//! `--committed` always uses `HEAD` (or the tag's commit). Ignored files are left out;
//! untracked files that are not ignored, uncommitted changes and file modes are in.
//! Submodules are not checked out (as with `GIT_SUBMODULE_STRATEGY: none`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the pipeline runs for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RunRef {
    Branch(String),
    Tag(String),
}

impl RunRef {
    pub(crate) fn name(&self) -> &str {
        match self {
            RunRef::Branch(name) | RunRef::Tag(name) => name,
        }
    }

    fn full(&self) -> String {
        match self {
            RunRef::Branch(name) => format!("refs/heads/{name}"),
            RunRef::Tag(name) => format!("refs/tags/{name}"),
        }
    }
}

/// The prepared sources.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The bare repository the coordinator's project points at.
    pub(crate) repo: PathBuf,
    /// The directory each job's project directory is a copy of.
    pub(crate) dir: PathBuf,
    /// The commit the pipeline runs for.
    pub(crate) sha: String,
    /// Whether that commit holds changes that are not in `HEAD`.
    pub(crate) uncommitted: bool,
}

/// Why the sources could not be prepared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    #[error("run `git {command}` in {}: {message}", dir.display())]
    Git { command: String, dir: PathBuf, message: String },
    #[error("{0}")]
    Usage(String),
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A git command with extra environment.
struct Git<'a> {
    dir: &'a Path,
    env: Vec<(&'static str, String)>,
}

impl<'a> Git<'a> {
    fn in_dir(dir: &'a Path) -> Self {
        Git { dir, env: Vec::new() }
    }

    fn env(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    fn run(&self, args: &[&str]) -> Result<String, SnapshotError> {
        let out = Command::new("git")
            .arg("-C")
            .arg(self.dir)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .map_err(|e| SnapshotError::Git {
                command: args.join(" "),
                dir: self.dir.to_owned(),
                message: format!("{e} (is git installed and on PATH?)"),
            })?;
        if !out.status.success() {
            return Err(SnapshotError::Git {
                command: args.join(" "),
                dir: self.dir.to_owned(),
                message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim_end_matches('\n').to_owned())
    }

    fn try_run(&self, args: &[&str]) -> Option<String> {
        self.run(args).ok().filter(|s| !s.is_empty())
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let path = path.to_owned();
    move |source| SnapshotError::Io { action, path, source }
}

/// Builds the snapshot of `root` (the top of the checkout) under `tmp`.
pub(crate) fn prepare(
    root: &Path,
    tmp: &Path,
    run_ref: &RunRef,
    default_branch: &str,
    committed: bool,
) -> Result<Snapshot, SnapshotError> {
    let user = Git::in_dir(root);
    let objects = user.run(&["rev-parse", "--path-format=absolute", "--git-path", "objects"])?;
    let head = user.try_run(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]);

    let repo = tmp.join("src.git");
    let repo_str = repo.to_string_lossy().into_owned();
    Git::in_dir(tmp).run(&["init", "--bare", "--quiet", "--template=", &repo_str])?;
    let alternates = repo.join("objects/info/alternates");
    std::fs::create_dir_all(repo.join("objects/info")).map_err(io("create", &repo))?;
    std::fs::write(&alternates, format!("{objects}\n")).map_err(io("write", &alternates))?;
    let own_objects = repo.join("objects").to_string_lossy().into_owned();

    let (sha, target, uncommitted) = if committed {
        let target = match run_ref {
            RunRef::Tag(tag) => user
                .try_run(&["rev-parse", "--verify", "--quiet", &format!("refs/tags/{tag}")])
                .ok_or_else(|| SnapshotError::Usage(format!("--tag {tag}: no such tag in this repository")))?,
            RunRef::Branch(_) => head.clone().ok_or_else(|| {
                SnapshotError::Usage("--committed: this repository has no commit yet; commit first, or run without --committed".to_owned())
            })?,
        };
        let sha = user.run(&["rev-parse", &format!("{target}^{{commit}}")])?;
        (sha, target, false)
    } else {
        // `git add -A` into a temporary copy of the index, objects into src.git.
        let index = tmp.join("index");
        let user_index = PathBuf::from(user.run(&["rev-parse", "--path-format=absolute", "--git-path", "index"])?);
        if user_index.is_file() {
            std::fs::copy(&user_index, &index).map_err(io("copy the index to", &index))?;
        }
        let staged = Git::in_dir(root)
            .env("GIT_INDEX_FILE", index.to_string_lossy())
            .env("GIT_OBJECT_DIRECTORY", own_objects.clone())
            .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", objects.clone());
        staged.run(&["add", "--all", "--", "."])?;
        let tree = staged.run(&["write-tree"])?;
        let head_tree = head.as_ref().and_then(|h| user.try_run(&["rev-parse", &format!("{h}^{{tree}}")]));
        match (&head, head_tree) {
            (Some(head), Some(head_tree)) if head_tree == tree => (head.clone(), head.clone(), false),
            (parent, _) => {
                let mut args = vec!["commit-tree", tree.as_str(), "-m"];
                let message = match parent {
                    Some(p) => format!("gantry run: the working tree on top of {}", &p[..p.len().min(8)]),
                    None => "gantry run: the working tree".to_owned(),
                };
                args.push(&message);
                if let Some(p) = parent {
                    args.extend(["-p", p.as_str()]);
                }
                let mut commit = staged;
                if user.try_run(&["config", "user.name"]).is_none() {
                    commit = commit.env("GIT_AUTHOR_NAME", "gantry").env("GIT_COMMITTER_NAME", "gantry");
                }
                if user.try_run(&["config", "user.email"]).is_none() {
                    commit = commit
                        .env("GIT_AUTHOR_EMAIL", "gantry@localhost")
                        .env("GIT_COMMITTER_EMAIL", "gantry@localhost");
                }
                let sha = commit.run(&args)?;
                (sha.clone(), sha, true)
            }
        }
    };

    // The refs the coordinator fetches: the run's ref, and the default branch so the
    // project knows it.
    let bare = Git::in_dir(&repo);
    bare.run(&["update-ref", &run_ref.full(), &target])?;
    let default_ref = format!("refs/heads/{default_branch}");
    if run_ref.full() != default_ref {
        if let Some(default_sha) = user.try_run(&["rev-parse", "--verify", "--quiet", &format!("{default_ref}^{{commit}}")]) {
            bare.run(&["update-ref", &default_ref, &default_sha])?;
        }
    }
    bare.run(&["symbolic-ref", "HEAD", &default_ref])?;

    // The directory each job copies: a checkout of the commit with a minimal .git that
    // borrows every object.
    let dir = tmp.join("snapshot");
    let dir_str = dir.to_string_lossy().into_owned();
    Git::in_dir(tmp).run(&["init", "--quiet", "--template=", &dir_str])?;
    let snapshot_alternates = dir.join(".git/objects/info/alternates");
    std::fs::create_dir_all(dir.join(".git/objects/info")).map_err(io("create", &dir))?;
    std::fs::write(&snapshot_alternates, format!("{own_objects}\n{objects}\n")).map_err(io("write", &snapshot_alternates))?;
    let snap = Git::in_dir(&dir);
    snap.run(&["read-tree", &sha])?;
    snap.run(&["checkout-index", "--all", "--force"])?;
    snap.run(&["update-ref", "--no-deref", "HEAD", &sha])?;
    if let RunRef::Branch(branch) = run_ref {
        snap.run(&["update-ref", &format!("refs/remotes/origin/{branch}"), &sha])?;
    }
    Ok(Snapshot {
        repo,
        dir,
        sha,
        uncommitted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        Git::in_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .run(args)
            .unwrap()
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main"]);
        std::fs::write(dir.path().join("a.txt"), "committed\n").unwrap();
        std::fs::write(dir.path().join(".gitignore"), "ignored.txt\n").unwrap();
        git(dir.path(), &["add", "."]);
        git(dir.path(), &["commit", "-qm", "init"]);
        dir
    }

    #[test]
    fn a_clean_tree_runs_head_and_writes_nothing_to_the_checkout() {
        let repo = repo();
        let before = git(repo.path(), &["count-objects"]);
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(repo.path(), tmp.path(), &RunRef::Branch("main".into()), "main", false).unwrap();
        assert_eq!(s.sha, git(repo.path(), &["rev-parse", "HEAD"]));
        assert!(!s.uncommitted);
        assert_eq!(std::fs::read_to_string(s.dir.join("a.txt")).unwrap(), "committed\n");
        assert_eq!(git(&s.dir, &["rev-parse", "HEAD"]), s.sha);
        assert_eq!(git(repo.path(), &["count-objects"]), before);
        assert_eq!(git(repo.path(), &["status", "--porcelain"]), "");
    }

    #[test]
    fn uncommitted_and_untracked_files_and_modes_are_in_ignored_files_are_not() {
        let repo = repo();
        std::fs::write(repo.path().join("a.txt"), "changed\n").unwrap();
        std::fs::write(repo.path().join("new.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(repo.path().join("ignored.txt"), "secret\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(repo.path().join("new.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let status_before = git(repo.path(), &["status", "--porcelain"]);
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(repo.path(), tmp.path(), &RunRef::Branch("main".into()), "main", false).unwrap();
        assert!(s.uncommitted);
        assert_eq!(std::fs::read_to_string(s.dir.join("a.txt")).unwrap(), "changed\n");
        assert!(s.dir.join("new.sh").is_file());
        assert!(!s.dir.join("ignored.txt").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(s.dir.join("new.sh")).unwrap().permissions().mode();
            assert_eq!(mode & 0o111, 0o111);
        }
        // The snapshot's parent is HEAD; the checkout is untouched.
        assert_eq!(git(&s.dir, &["rev-parse", "HEAD^"]), git(repo.path(), &["rev-parse", "HEAD"]));
        assert_eq!(git(repo.path(), &["status", "--porcelain"]), status_before);
        // The bare repository has the ref.
        assert_eq!(git(&s.repo, &["rev-parse", "refs/heads/main"]), s.sha);
    }

    #[test]
    fn committed_ignores_the_working_tree() {
        let repo = repo();
        std::fs::write(repo.path().join("a.txt"), "changed\n").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(repo.path(), tmp.path(), &RunRef::Branch("main".into()), "main", true).unwrap();
        assert_eq!(std::fs::read_to_string(s.dir.join("a.txt")).unwrap(), "committed\n");
        assert!(!s.uncommitted);
    }

    #[test]
    fn a_repository_without_commits_is_snapshotted_from_the_working_tree() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main"]);
        std::fs::write(dir.path().join(".gitlab-ci.yml"), "job: {script: [x]}\n").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(dir.path(), tmp.path(), &RunRef::Branch("main".into()), "main", false).unwrap();
        assert!(s.dir.join(".gitlab-ci.yml").is_file());
        let err = prepare(dir.path(), tempfile::tempdir().unwrap().path(), &RunRef::Branch("main".into()), "main", true).unwrap_err();
        assert!(err.to_string().contains("no commit yet"), "{err}");
    }
}
