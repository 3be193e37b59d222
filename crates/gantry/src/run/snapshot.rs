//! The sources `gantry run` builds: a commit holding the working tree as it is now, a
//! bare repository the coordinator uses as the project's mirror, and a directory every
//! job gets a copy of.
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
//! `--committed` always uses `HEAD` (or the tag's commit). Ignored files are left out, and
//! so are changes under `.gantry/` (Gantry's state in the checkout); untracked files that
//! are not ignored, uncommitted changes and file modes are in.
//! Submodules are not checked out (as with `GIT_SUBMODULE_STRATEGY: none`).
//!
//! Speed: every `git` process costs milliseconds, so the facts about the checkout are
//! read by four processes started together ([`Checkout::read`]), a clean tree needs no
//! commit, and the two repositories are laid out as files (`HEAD`, `config`, loose refs,
//! `objects/info/alternates` — git's documented repository layout) with one `git
//! read-tree` to check the commit out.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Gantry's own folder in a checkout (the offline include cache, `.gantry/includes`) is
/// not part of what jobs get, as gitlab-ci-local leaves its state folder out: a pathspec
/// for `git status` and `git add` (what is already committed there stays).
const STATE_DIR_EXCLUDED: &str = ":(top,exclude).gantry";

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

impl Snapshot {
    /// Writes branch `name` of `checkout` into the snapshot's repository (a merge
    /// request's target branch, which the coordinator reads there) and returns its
    /// commit; `None` when the checkout has no such branch.
    pub(crate) fn add_branch(
        &self,
        checkout: &Checkout,
        name: &str,
    ) -> Result<Option<String>, SnapshotError> {
        let full = format!("refs/heads/{name}");
        let Some(r) = checkout.find_ref(&full) else {
            return Ok(None);
        };
        write_ref(&self.repo, &full, &r.object)?;
        Ok(Some(r.object.clone()))
    }

    /// Brings the snapshot directory to commit `sha` of the snapshot's repository (a
    /// merged result the coordinator made there): `read-tree --reset -u`, as
    /// [`prepare`] checks a commit out.
    pub(crate) fn check_out(&mut self, sha: &str) -> Result<(), SnapshotError> {
        let head = self.dir.join(".git").join("HEAD");
        std::fs::write(&head, format!("{sha}\n")).map_err(io("write", &head))?;
        Git::in_dir(&self.dir).run(&["read-tree", "--reset", "-u", sha])?;
        self.sha = sha.to_owned();
        Ok(())
    }
}

/// Why the sources could not be prepared.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    #[error("run `git {command}` in {}: {message}", dir.display())]
    Git {
        command: String,
        dir: PathBuf,
        message: String,
    },
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
        Git {
            dir,
            env: Vec::new(),
        }
    }

    fn env(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    /// Starts git; [`Git::finish`] collects its answer.
    fn spawn(&self, args: &[&str]) -> Result<Child, SnapshotError> {
        Command::new("git")
            .arg("-C")
            .arg(self.dir)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| SnapshotError::Git {
                command: args.join(" "),
                dir: self.dir.to_owned(),
                message: format!("{e} (is git installed and on PATH?)"),
            })
    }

    /// Waits for `child` (started by [`Git::spawn`] with `args`): its stdout, trailing
    /// newlines removed.
    fn finish(&self, child: Child, args: &[&str]) -> Result<String, SnapshotError> {
        let failure = |message: String| SnapshotError::Git {
            command: args.join(" "),
            dir: self.dir.to_owned(),
            message,
        };
        let out = child
            .wait_with_output()
            .map_err(|e| failure(e.to_string()))?;
        if !out.status.success() {
            return Err(failure(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .trim_end_matches('\n')
            .to_owned())
    }

    fn run(&self, args: &[&str]) -> Result<String, SnapshotError> {
        let child = self.spawn(args)?;
        self.finish(child, args)
    }

    fn try_run(&self, args: &[&str]) -> Option<String> {
        self.run(args).ok().filter(|s| !s.is_empty())
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SnapshotError {
    let path = path.to_owned();
    move |source| SnapshotError::Io {
        action,
        path,
        source,
    }
}

/// What the checkout says about itself: read once, by four `git` processes that run at
/// the same time.
#[derive(Clone, Debug)]
pub(crate) struct Checkout {
    /// The top of the work tree.
    pub(crate) root: PathBuf,
    /// `sha1` or `sha256`.
    object_format: String,
    /// The checkout's object directory (absolute).
    objects: String,
    /// The checkout's index file.
    index: PathBuf,
    /// The commit `HEAD` points at; `None` before the first commit.
    head: Option<String>,
    /// The checked-out branch; `None` when `HEAD` is detached.
    pub(crate) branch: Option<String>,
    /// Whether `git status` shows nothing: no change, no untracked file.
    clean: bool,
    /// `refs/heads/*`, `refs/tags/<asked for>` and `refs/remotes/origin/HEAD`: name →
    /// (object, object peeled once for an annotated tag, symref target).
    refs: Vec<RefLine>,
    /// `remote.origin.url`.
    pub(crate) origin_url: Option<String>,
    /// `user.name`, `user.email`.
    pub(crate) user_name: Option<String>,
    pub(crate) user_email: Option<String>,
}

#[derive(Clone, Debug)]
struct RefLine {
    name: String,
    object: String,
    peeled: String,
    symref: String,
}

impl Checkout {
    /// Reads the checkout containing `cwd`; `tag` is a tag the run may need. `Ok(None)`
    /// when `cwd` is not inside a git work tree.
    pub(crate) fn read(cwd: &Path, tag: Option<&str>) -> Result<Option<Checkout>, SnapshotError> {
        let tag_ref = tag.map(|t| format!("refs/tags/{t}"));
        let mut refs_args = vec![
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(*objectname)%00%(symref)",
            "refs/heads/",
            "refs/remotes/origin/HEAD",
        ];
        if let Some(t) = &tag_ref {
            refs_args.push(t);
        }
        let git = Git::in_dir(cwd);
        let paths_args = [
            "rev-parse",
            "--show-toplevel",
            "--show-object-format",
            "--path-format=absolute",
            "--git-path",
            "objects",
            "--git-path",
            "index",
        ];
        let status_args = [
            "--no-optional-locks",
            "status",
            "--porcelain=v2",
            "--branch",
            "-z",
            "--",
            ":(top)",
            STATE_DIR_EXCLUDED,
        ];
        let paths = git.spawn(&paths_args)?;
        let status = git.spawn(&status_args)?;
        let refs = git.spawn(&refs_args)?;
        let config = git.spawn(&[
            "config",
            "-z",
            "--get-regexp",
            r"^(remote\.origin\.url|user\.name|user\.email)$",
        ])?;

        let Ok(paths) = git.finish(paths, &paths_args) else {
            // Reap the others before answering.
            for child in [status, refs, config] {
                let _ = child.wait_with_output();
            }
            return Ok(None);
        };
        let mut lines = paths.lines();
        let mut next = || lines.next().map(str::to_owned).unwrap_or_default();
        let (root, object_format, objects, index) =
            (PathBuf::from(next()), next(), next(), PathBuf::from(next()));
        let status = git.finish(status, &status_args)?;
        let refs = git.finish(refs, &refs_args)?;
        // Exit status 1: none of the keys is set.
        let config = config
            .wait_with_output()
            .map(|o| o.stdout)
            .unwrap_or_default();

        let mut head = None;
        let mut branch = None;
        let mut clean = true;
        for entry in status.split('\0').filter(|e| !e.is_empty()) {
            if let Some(oid) = entry.strip_prefix("# branch.oid ") {
                head = (oid != "(initial)").then(|| oid.to_owned());
            } else if let Some(name) = entry.strip_prefix("# branch.head ") {
                branch = (name != "(detached)").then(|| name.to_owned());
            } else if !entry.starts_with('#') {
                clean = false;
            }
        }
        let refs = refs
            .lines()
            .filter_map(|line| {
                let mut f = line.split('\0');
                Some(RefLine {
                    name: f.next()?.to_owned(),
                    object: f.next()?.to_owned(),
                    peeled: f.next()?.to_owned(),
                    symref: f.next()?.to_owned(),
                })
            })
            .collect();
        let (mut origin_url, mut user_name, mut user_email) = (None, None, None);
        for entry in String::from_utf8_lossy(&config).split('\0') {
            // The last value of a key wins, as `git config KEY` answers.
            if let Some((key, value)) = entry.split_once('\n') {
                let slot = match key {
                    "remote.origin.url" => &mut origin_url,
                    "user.name" => &mut user_name,
                    "user.email" => &mut user_email,
                    _ => continue,
                };
                *slot = Some(value.to_owned()).filter(|v| !v.is_empty());
            }
        }
        Ok(Some(Checkout {
            root,
            object_format,
            objects,
            index,
            head,
            branch,
            clean,
            refs,
            origin_url,
            user_name,
            user_email,
        }))
    }

    fn find_ref(&self, name: &str) -> Option<&RefLine> {
        self.refs.iter().find(|r| r.name == name)
    }

    /// The default branch: `origin/HEAD` when known, else `main` or `master` when
    /// present, else the current branch, else `main`.
    pub(crate) fn default_branch(&self) -> String {
        if let Some(b) = self
            .find_ref("refs/remotes/origin/HEAD")
            .and_then(|r| r.symref.strip_prefix("refs/remotes/origin/"))
        {
            return b.to_owned();
        }
        for b in ["main", "master"] {
            if self.find_ref(&format!("refs/heads/{b}")).is_some() {
                return b.to_owned();
            }
        }
        self.branch.clone().unwrap_or_else(|| "main".to_owned())
    }
}

/// Whether git accepts `name` as a branch or tag name (`git check-ref-format`'s rules),
/// which also keeps it from naming a path outside `refs/`.
pub(crate) fn valid_ref_name(name: &str) -> bool {
    !name.is_empty()
        && name != "@"
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("@{")
        && !name.chars().any(|c| {
            c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')
        })
        && name
            .split('/')
            .all(|part| !part.starts_with('.') && !part.ends_with(".lock"))
}

/// A repository laid out as `git init` would (files only, no hooks or samples):
/// `HEAD`, `config`, `refs/`, and `objects/` borrowing `alternates`.
fn lay_out(
    git_dir: &Path,
    bare: bool,
    object_format: &str,
    alternates: &[&str],
    head: &str,
) -> Result<(), SnapshotError> {
    // Git needs `objects/` and `refs/`; the rest is made when something is written there
    // (fewer directories to copy into, and remove from, every job's directory).
    for sub in ["objects/info", "refs"] {
        let d = git_dir.join(sub);
        std::fs::create_dir_all(&d).map_err(io("create", &d))?;
    }
    let sha256 = object_format == "sha256";
    let config = format!(
        "[core]\n\trepositoryformatversion = {}\n\tfilemode = true\n\tbare = {bare}\n{}",
        u8::from(sha256),
        if sha256 {
            "[extensions]\n\tobjectformat = sha256\n"
        } else {
            ""
        }
    );
    for (name, text) in [
        ("config", config),
        ("HEAD", format!("{head}\n")),
        (
            "objects/info/alternates",
            alternates.iter().map(|a| format!("{a}\n")).collect(),
        ),
    ] {
        let path = git_dir.join(name);
        std::fs::write(&path, text).map_err(io("write", &path))?;
    }
    Ok(())
}

/// A loose ref (`refs/heads/a/b` → the file `refs/heads/a/b` holding the object name).
fn write_ref(git_dir: &Path, full: &str, object: &str) -> Result<(), SnapshotError> {
    let path = git_dir.join(full);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io("create", parent))?;
    }
    std::fs::write(&path, format!("{object}\n")).map_err(io("write", &path))
}

/// Builds the snapshot of `checkout` under `tmp`.
pub(crate) fn prepare(
    checkout: &Checkout,
    tmp: &Path,
    run_ref: &RunRef,
    committed: bool,
) -> Result<Snapshot, SnapshotError> {
    let default_branch = checkout.default_branch();
    for (what, name) in [
        ("--ref", run_ref.name()),
        ("the default branch", default_branch.as_str()),
    ] {
        if !valid_ref_name(name) {
            return Err(SnapshotError::Usage(format!(
                "{what} {name:?} is not a valid git branch or tag name"
            )));
        }
    }
    let root = checkout.root.as_path();
    let objects = checkout.objects.as_str();
    let user = Git::in_dir(root);

    let repo = tmp.join("src.git");
    let default_ref = format!("refs/heads/{default_branch}");
    lay_out(
        &repo,
        true,
        &checkout.object_format,
        &[objects],
        &format!("ref: {default_ref}"),
    )?;
    let own_objects = repo.join("objects").to_string_lossy().into_owned();

    let (sha, target, uncommitted) = if committed {
        let (sha, target) = match run_ref {
            RunRef::Tag(tag) => {
                let r = checkout.find_ref(&run_ref.full()).ok_or_else(|| {
                    SnapshotError::Usage(format!("--tag {tag}: no such tag in this repository"))
                })?;
                let sha = if r.peeled.is_empty() {
                    r.object.clone()
                } else {
                    r.peeled.clone()
                };
                (sha, r.object.clone())
            }
            RunRef::Branch(_) => {
                let head = checkout.head.clone().ok_or_else(|| {
                    SnapshotError::Usage("--committed: this repository has no commit yet; commit first, or run without --committed".to_owned())
                })?;
                (head.clone(), head)
            }
        };
        (sha, target, false)
    } else if let (true, Some(head)) = (checkout.clean, &checkout.head) {
        (head.clone(), head.clone(), false)
    } else {
        // `git add -A` into a temporary copy of the index, objects into src.git.
        let index = tmp.join("index");
        if checkout.index.is_file() {
            std::fs::copy(&checkout.index, &index).map_err(io("copy the index to", &index))?;
        }
        let staged = Git::in_dir(root)
            .env("GIT_INDEX_FILE", index.to_string_lossy())
            .env("GIT_OBJECT_DIRECTORY", own_objects.clone())
            .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", objects);
        staged.run(&["add", "--all", "--", ":(top)", STATE_DIR_EXCLUDED])?;
        let tree = staged.run(&["write-tree"])?;
        let head = checkout.head.as_ref();
        let head_tree = head.and_then(|h| user.try_run(&["rev-parse", &format!("{h}^{{tree}}")]));
        match (head, head_tree) {
            // Only what `git add` does not see changed (a submodule's work tree, say).
            (Some(head), Some(head_tree)) if head_tree == tree => {
                (head.clone(), head.clone(), false)
            }
            (parent, _) => {
                let mut args = vec!["commit-tree", tree.as_str(), "-m"];
                let message = match parent {
                    Some(p) => format!(
                        "gantry run: the working tree on top of {}",
                        &p[..p.len().min(8)]
                    ),
                    None => "gantry run: the working tree".to_owned(),
                };
                args.push(&message);
                if let Some(p) = parent {
                    args.extend(["-p", p.as_str()]);
                }
                let mut commit = staged;
                if checkout.user_name.is_none() {
                    commit = commit
                        .env("GIT_AUTHOR_NAME", "gantry")
                        .env("GIT_COMMITTER_NAME", "gantry");
                }
                if checkout.user_email.is_none() {
                    commit = commit
                        .env("GIT_AUTHOR_EMAIL", "gantry@localhost")
                        .env("GIT_COMMITTER_EMAIL", "gantry@localhost");
                }
                let sha = commit.run(&args)?;
                (sha.clone(), sha, true)
            }
        }
    };

    // The refs the coordinator reads: the run's ref, and the default branch so the
    // project knows it.
    write_ref(&repo, &run_ref.full(), &target)?;
    if run_ref.full() != default_ref {
        if let Some(r) = checkout.find_ref(&default_ref) {
            write_ref(&repo, &default_ref, &r.object)?;
        }
    }

    // The directory each job copies: a checkout of the commit with a minimal .git that
    // borrows every object. It may be an earlier run's, kept: `read-tree --reset -u`
    // brings its files to this commit (what differs rewritten, what it lacks removed).
    let dir = tmp.join("snapshot");
    let git_dir = dir.join(".git");
    lay_out(
        &git_dir,
        false,
        &checkout.object_format,
        &[&own_objects, objects],
        &sha,
    )?;
    let packed = git_dir.join("packed-refs");
    if let RunRef::Branch(branch) = run_ref {
        // A packed ref: one file instead of two directories and a file.
        std::fs::write(&packed, format!("# pack-refs with: peeled fully-peeled sorted \n{sha} refs/remotes/origin/{branch}\n"))
            .map_err(io("write", &packed))?;
    } else if packed.exists() {
        // The refs of an earlier run's snapshot (a kept directory, see `run.rs`) go.
        std::fs::remove_file(&packed).map_err(io("remove", &packed))?;
    }
    Git::in_dir(&dir).run(&["read-tree", "--reset", "-u", &sha])?;
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

    fn checkout(dir: &Path) -> Checkout {
        Checkout::read(dir, None).unwrap().unwrap()
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
    fn an_earlier_runs_snapshot_directory_is_brought_to_the_new_commit() {
        let repo = repo();
        std::fs::write(repo.path().join("gone.txt"), "soon gone\n").unwrap();
        git(repo.path(), &["add", "."]);
        git(repo.path(), &["commit", "-qm", "two"]);
        let tmp = tempfile::tempdir().unwrap();
        let main = RunRef::Branch("main".into());
        let first = prepare(&checkout(repo.path()), tmp.path(), &main, false).unwrap();
        let inode = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).unwrap().ino()
        };
        let same_before = inode(&first.dir.join(".gitignore"));
        // Uncommitted changes, a deleted file, a new one; then a tag.
        std::fs::write(repo.path().join("a.txt"), "changed\n").unwrap();
        std::fs::remove_file(repo.path().join("gone.txt")).unwrap();
        std::fs::write(repo.path().join("new.txt"), "new\n").unwrap();
        let second = prepare(&checkout(repo.path()), tmp.path(), &main, false).unwrap();
        assert!(second.uncommitted);
        assert_eq!(
            std::fs::read_to_string(second.dir.join("a.txt")).unwrap(),
            "changed\n"
        );
        assert!(!second.dir.join("gone.txt").exists());
        assert_eq!(
            std::fs::read_to_string(second.dir.join("new.txt")).unwrap(),
            "new\n"
        );
        assert_eq!(git(&second.dir, &["rev-parse", "HEAD"]), second.sha);
        assert_eq!(git(&second.dir, &["status", "--porcelain"]), "");
        // What did not change is the same file.
        assert_eq!(inode(&second.dir.join(".gitignore")), same_before);
        git(repo.path(), &["tag", "v1"]);
        let tagged = prepare(
            &Checkout::read(repo.path(), Some("v1")).unwrap().unwrap(),
            tmp.path(),
            &RunRef::Tag("v1".into()),
            true,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(tagged.dir.join("a.txt")).unwrap(),
            "committed\n"
        );
        assert!(tagged.dir.join("gone.txt").exists());
        assert!(!tagged.dir.join("new.txt").exists());
        // No remote ref of the branch runs is left.
        assert!(!tagged.dir.join(".git/packed-refs").exists());
        assert_eq!(git(&tagged.dir, &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_clean_tree_runs_head_and_writes_nothing_to_the_checkout() {
        let repo = repo();
        // Gantry's own folder does not make the tree unclean.
        std::fs::create_dir_all(repo.path().join(".gantry/includes")).unwrap();
        std::fs::write(repo.path().join(".gantry/includes/x.yml"), "x: 1\n").unwrap();
        let before = git(repo.path(), &["count-objects"]);
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(
            &checkout(repo.path()),
            tmp.path(),
            &RunRef::Branch("main".into()),
            false,
        )
        .unwrap();
        assert_eq!(s.sha, git(repo.path(), &["rev-parse", "HEAD"]));
        assert!(!s.uncommitted);
        assert_eq!(
            std::fs::read_to_string(s.dir.join("a.txt")).unwrap(),
            "committed\n"
        );
        assert_eq!(git(&s.dir, &["rev-parse", "HEAD"]), s.sha);
        assert_eq!(
            git(&s.dir, &["rev-parse", "refs/remotes/origin/main"]),
            s.sha
        );
        assert_eq!(git(&s.dir, &["status", "--porcelain"]), "");
        // A job can make branches and tags in its copy.
        git(&s.dir, &["branch", "topic"]);
        git(&s.dir, &["tag", "t1"]);
        assert_eq!(git(repo.path(), &["count-objects"]), before);
        assert_eq!(git(repo.path(), &["status", "--porcelain"]), "?? .gantry/");
    }

    #[test]
    fn uncommitted_and_untracked_files_and_modes_are_in_ignored_files_are_not() {
        let repo = repo();
        std::fs::write(repo.path().join("a.txt"), "changed\n").unwrap();
        std::fs::write(repo.path().join("new.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(repo.path().join("ignored.txt"), "secret\n").unwrap();
        std::fs::create_dir_all(repo.path().join(".gantry/includes/gitlab.com")).unwrap();
        std::fs::write(
            repo.path().join(".gantry/includes/gitlab.com/x.yml"),
            "x: 1\n",
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                repo.path().join("new.sh"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        }
        let status_before = git(repo.path(), &["status", "--porcelain"]);
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(
            &checkout(repo.path()),
            tmp.path(),
            &RunRef::Branch("main".into()),
            false,
        )
        .unwrap();
        assert!(s.uncommitted);
        assert_eq!(
            std::fs::read_to_string(s.dir.join("a.txt")).unwrap(),
            "changed\n"
        );
        assert!(s.dir.join("new.sh").is_file());
        assert!(!s.dir.join("ignored.txt").exists());
        assert!(
            !s.dir.join(".gantry").exists(),
            "Gantry's own folder stays out"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(s.dir.join("new.sh"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o111, 0o111);
        }
        // The snapshot's parent is HEAD; the checkout is untouched.
        assert_eq!(
            git(&s.dir, &["rev-parse", "HEAD^"]),
            git(repo.path(), &["rev-parse", "HEAD"])
        );
        assert_eq!(git(repo.path(), &["status", "--porcelain"]), status_before);
        // The bare repository has the ref.
        assert_eq!(git(&s.repo, &["rev-parse", "refs/heads/main"]), s.sha);
    }

    #[test]
    fn committed_ignores_the_working_tree() {
        let repo = repo();
        std::fs::write(repo.path().join("a.txt"), "changed\n").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(
            &checkout(repo.path()),
            tmp.path(),
            &RunRef::Branch("main".into()),
            true,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(s.dir.join("a.txt")).unwrap(),
            "committed\n"
        );
        assert!(!s.uncommitted);
    }

    #[test]
    fn a_repository_without_commits_is_snapshotted_from_the_working_tree() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main"]);
        std::fs::write(dir.path().join(".gitlab-ci.yml"), "job: {script: [x]}\n").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(
            &checkout(dir.path()),
            tmp.path(),
            &RunRef::Branch("main".into()),
            false,
        )
        .unwrap();
        assert!(s.dir.join(".gitlab-ci.yml").is_file());
        let err = prepare(
            &checkout(dir.path()),
            tempfile::tempdir().unwrap().path(),
            &RunRef::Branch("main".into()),
            true,
        )
        .unwrap_err();
        assert!(err.to_string().contains("no commit yet"), "{err}");
    }

    #[test]
    fn the_checkout_is_read_in_one_go() {
        let repo = repo();
        git(
            repo.path(),
            &["remote", "add", "origin", "git@example.com:g/p.git"],
        );
        git(repo.path(), &["config", "user.email", "dev@example.com"]);
        git(repo.path(), &["tag", "-a", "v1", "-m", "one"]);
        std::fs::create_dir(repo.path().join("sub")).unwrap();
        let c = Checkout::read(&repo.path().join("sub"), Some("v1"))
            .unwrap()
            .unwrap();
        assert_eq!(
            c.root.canonicalize().unwrap(),
            repo.path().canonicalize().unwrap()
        );
        assert_eq!(c.branch.as_deref(), Some("main"));
        assert_eq!(
            c.head.as_deref(),
            Some(git(repo.path(), &["rev-parse", "HEAD"]).as_str())
        );
        assert!(c.clean);
        assert_eq!(c.default_branch(), "main");
        assert_eq!(c.origin_url.as_deref(), Some("git@example.com:g/p.git"));
        assert_eq!(c.user_email.as_deref(), Some("dev@example.com"));
        let tag = c.find_ref("refs/tags/v1").unwrap();
        assert_eq!(tag.peeled, git(repo.path(), &["rev-parse", "v1^{commit}"]));
        assert_ne!(tag.object, tag.peeled);
        // A tagged run with --committed gets the tag object as its ref and its commit.
        let tmp = tempfile::tempdir().unwrap();
        let s = prepare(&c, tmp.path(), &RunRef::Tag("v1".into()), true).unwrap();
        assert_eq!(s.sha, tag.peeled);
        assert_eq!(git(&s.repo, &["cat-file", "-t", "refs/tags/v1"]), "tag");
        assert_eq!(git(&s.dir, &["rev-parse", "HEAD"]), s.sha);
        assert_eq!(git(&s.dir, &["status", "--porcelain"]), "");
        // Untracked files make the tree unclean.
        std::fs::write(repo.path().join("sub/new.txt"), "x").unwrap();
        assert!(!checkout(repo.path()).clean);
        let outside = tempfile::tempdir().unwrap();
        assert!(Checkout::read(outside.path(), None).unwrap().is_none());
    }

    #[test]
    fn ref_names_are_checked_as_git_does() {
        for ok in ["main", "feature/x", "v1.2.3", "a-b_c"] {
            assert!(valid_ref_name(ok), "{ok}");
        }
        for bad in [
            "", "@", "../x", "a/../b", "a..b", "/a", "a/", "a.", ".a", "a/.b", "a.lock", "a b",
            "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "a@{1}", "a//b", "a\u{7}",
        ] {
            assert!(!valid_ref_name(bad), "{bad:?}");
        }
        let repo = repo();
        let tmp = tempfile::tempdir().unwrap();
        let err = prepare(
            &checkout(repo.path()),
            tmp.path(),
            &RunRef::Branch("../../x".into()),
            false,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("not a valid git branch or tag name"),
            "{err}"
        );
    }
}
