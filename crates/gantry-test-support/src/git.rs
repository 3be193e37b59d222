//! Real git repositories for tests, made with the git CLI.

use std::path::Path;
use std::process::Command;

/// Runs `git` in `dir` and returns its standard output, trimmed; panics with git's
/// standard error when it fails. Commits are made by `Ada <ada@example.com>` (author and
/// committer, whatever the machine's configuration says) and the system's configuration
/// is not read, so a test sees the same repository on every machine; `file://` submodules
/// are allowed and `git init` starts on `main`.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        // Submodules of local paths (`file://`) and `git init` on `main` everywhere.
        .env("GIT_CONFIG_COUNT", "2")
        .env("GIT_CONFIG_KEY_0", "protocol.file.allow")
        .env("GIT_CONFIG_VALUE_0", "always")
        .env("GIT_CONFIG_KEY_1", "init.defaultBranch")
        .env("GIT_CONFIG_VALUE_1", "main")
        .env("GIT_AUTHOR_NAME", "Ada")
        .env("GIT_AUTHOR_EMAIL", "ada@example.com")
        .env("GIT_COMMITTER_NAME", "Ada")
        .env("GIT_COMMITTER_EMAIL", "ada@example.com")
        .output()
        .unwrap_or_else(|e| panic!("git {args:?} in {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Writes `files` (path relative to `repo`, text) and commits everything; returns the
/// commit's SHA. An empty `files` makes an empty commit.
pub fn commit(repo: &Path, files: &[(&str, &str)], message: &str) -> String {
    write_files(repo, files);
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "--allow-empty", "-m", message]);
    git(repo, &["rev-parse", "HEAD"])
}

fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let file = root.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
        }
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
    }
}

/// A git repository in a temp dir (removed on drop). Its `user.name`/`user.email` are
/// `Dev Eloper <dev@example.com>` (what `git config` answers, as for a developer's
/// checkout); its commits are [`git`]'s.
pub struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    /// `files` in one commit, `initial commit`, on `main`.
    pub fn new(files: &[(&str, &str)]) -> Self {
        let repo = Self::empty("main");
        repo.commit(files, "initial commit");
        repo
    }

    /// `.gitlab-ci.yml` = `ci`, plus `files`, in one commit on `main`.
    pub fn with_ci(ci: &str, files: &[(&str, &str)]) -> Self {
        let mut all = vec![(".gitlab-ci.yml", ci)];
        all.extend_from_slice(files);
        Self::new(&all)
    }

    /// A repository without any commit yet; its first commit goes on `branch`.
    pub fn empty(branch: &str) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let repo = Self { dir };
        repo.git(&["init", "-q", "-b", branch]);
        repo.git(&["config", "user.email", "dev@example.com"]);
        repo.git(&["config", "user.name", "Dev Eloper"]);
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// [`git`] in this repository.
    pub fn git(&self, args: &[&str]) -> String {
        git(self.path(), args)
    }

    /// [`commit`] in this repository.
    pub fn commit(&self, files: &[(&str, &str)], message: &str) -> String {
        commit(self.path(), files, message)
    }

    /// The SHA of `HEAD`.
    pub fn head(&self) -> String {
        self.git(&["rev-parse", "HEAD"])
    }

    /// Makes `path` executable, in a commit of its own.
    pub fn make_executable(&self, path: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let file = self.path().join(path);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", file.display()));
        self.git(&["add", path]);
        self.git(&["commit", "-q", "-m", "make it executable"]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repo_commits_its_files_as_ada_on_main() {
        let repo = Repo::with_ci("job: {script: [true]}\n", &[("dir/a.txt", "a")]);
        assert_eq!(repo.git(&["rev-parse", "--abbrev-ref", "HEAD"]), "main");
        assert_eq!(
            repo.git(&["log", "-1", "--format=%an <%ae> %s"]),
            "Ada <ada@example.com> initial commit"
        );
        assert_eq!(repo.git(&["config", "user.email"]), "dev@example.com");
        let files = repo.git(&["ls-files"]);
        assert_eq!(files, ".gitlab-ci.yml\ndir/a.txt");
        let second = repo.commit(&[], "empty");
        assert_eq!(second, repo.head());
        assert_eq!(second.len(), 40);
    }
}
