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
//!
//! A job in containers (the Docker executor) sees these directories where
//! gitlab-runner's Docker executor puts them: the slot directory is mounted at
//! [`CONTAINER_BUILDS_DIR`], so `$CI_BUILDS_DIR` is `/builds` and `$CI_PROJECT_DIR`
//! `/builds/<project path>` ([`BuildDirs::in_container`], [`BuildDirs::seen`]).

use std::path::{Path, PathBuf};

use crate::config::short_token;
use crate::sources::RepoUrl;

/// Where a job's containers see its slot directory (gitlab-runner's Docker executor's
/// `builds_dir`).
pub const CONTAINER_BUILDS_DIR: &str = "/builds";

/// How a job's directories sit under `builds_dir`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `<builds_dir>/<short token>/<concurrent id>/<project path>`: concurrent jobs
    /// share `builds_dir` (the shell executor, the custom executor by default).
    Shared,
    /// `<builds_dir>/<project path>`: the environment is the job's own (the custom
    /// executor when `config_exec` says `"builds_dir_is_shared": false`).
    Unshared,
    /// The shared layout on this machine, seen by the job's containers at
    /// [`CONTAINER_BUILDS_DIR`] ([`BuildDirs::in_container`]).
    Container,
}

/// The directories of one job, on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildDirs {
    /// The entry's `builds_dir`.
    pub builds_dir: PathBuf,
    /// The checkout.
    pub project_dir: PathBuf,
    /// `<project dir>.tmp`: job scripts, file variables, archives being transferred.
    pub tmp_dir: PathBuf,
    /// The project's relative path (`acme/widget` or `project-42`).
    pub project_path: String,
    /// The project's folder in the local cache (`gitlab.example.com/acme/widget`).
    pub cache_path: String,
    /// `<builds_dir>/<short token>/<concurrent id>` (`builds_dir` in the unshared layout):
    /// the directory holding the project and its `.tmp` sibling (what the Docker executor
    /// mounts).
    slot: PathBuf,
    /// The same directories as the job's scripts see them: `$CI_BUILDS_DIR`,
    /// `$CI_PROJECT_DIR`, file variables' paths, the scripts' working directory.
    pub seen: SeenDirs,
}

/// [`BuildDirs`] as the job's scripts see them: the same paths in the shell, the
/// mounted ones in containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenDirs {
    /// `$CI_BUILDS_DIR`.
    pub builds_dir: PathBuf,
    /// `$CI_PROJECT_DIR`.
    pub project_dir: PathBuf,
    /// `<project dir>.tmp`.
    pub tmp_dir: PathBuf,
    /// The slot directory.
    slot: PathBuf,
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
        let slot = builds_dir
            .join(short_token(runner_token))
            .join(concurrent_id.to_string());
        let project_dir = slot.join(&project_path);
        let tmp_dir = tmp_sibling(&project_dir);
        Self {
            builds_dir: builds_dir.to_owned(),
            seen: SeenDirs {
                builds_dir: builds_dir.to_owned(),
                project_dir: project_dir.clone(),
                tmp_dir: tmp_dir.clone(),
                slot: slot.clone(),
            },
            slot,
            project_dir,
            tmp_dir,
            project_path,
            cache_path,
        }
    }

    /// The same directories for a job in containers, where the slot directory
    /// ([`BuildDirs::slot_dir`]) is mounted at [`CONTAINER_BUILDS_DIR`].
    pub fn in_container(mut self) -> Self {
        let builds_dir = PathBuf::from(CONTAINER_BUILDS_DIR);
        let project_dir = builds_dir.join(&self.project_path);
        self.seen = SeenDirs {
            tmp_dir: tmp_sibling(&project_dir),
            project_dir,
            slot: builds_dir.clone(),
            builds_dir,
        };
        self
    }

    /// gitlab-runner's `GIT_CLONE_PATH` (allowed by `[runners.custom_build_dir]`): the
    /// checkout at `path` as the job sees it, which must lie below `$CI_BUILDS_DIR` (as
    /// gitlab-runner requires; the builds directory itself is refused too, as the checkout
    /// is emptied between jobs). In containers it lies in the mounted slot directory.
    pub fn with_clone_path(self, path: &str) -> Result<Self, String> {
        let outside = || {
            format!(
                "the GIT_CLONE_PATH=\"{path}\" has to be within \"{}\"",
                self.seen.builds_dir.display()
            )
        };
        let relative = below(&self.seen.builds_dir, Path::new(path)).ok_or_else(outside)?;
        // The directory the job sees as `$CI_BUILDS_DIR`, on this machine: the slot where
        // the job sees its slot as the builds directory (containers, the unshared layout).
        let root = if self.seen.slot == self.seen.builds_dir {
            self.slot.clone()
        } else {
            self.builds_dir.clone()
        };
        let project_dir = root.join(&relative);
        let seen_project_dir = self.seen.builds_dir.join(&relative);
        Ok(Self {
            tmp_dir: tmp_sibling(&project_dir),
            project_dir,
            seen: SeenDirs {
                tmp_dir: tmp_sibling(&seen_project_dir),
                project_dir: seen_project_dir,
                ..self.seen
            },
            ..self
        })
    }
}

impl BuildDirs {
    /// The same job on a fleet instance: the slot directory's layout under
    /// `remote_builds_dir` (`$HOME/builds` on the instance), as its scripts see it.
    pub fn on_instance(mut self, remote_builds_dir: &Path) -> Self {
        let remote =
            |dir: &Path| remote_builds_dir.join(dir.strip_prefix(&self.builds_dir).unwrap_or(dir));
        let project_dir = remote(&self.project_dir);
        self.seen = SeenDirs {
            tmp_dir: tmp_sibling(&project_dir),
            project_dir,
            slot: remote(&self.slot),
            builds_dir: remote_builds_dir.to_owned(),
        };
        self
    }

    /// [`BuildDirs::slot_dir`] as the job sees it.
    pub fn seen_slot_dir(&self) -> PathBuf {
        self.seen.slot.clone()
    }
}

/// `path` relative to `root` when it lies below it, `.` and `..` resolved by name (as
/// gitlab-runner's `filepath.Rel` does): `None` for a relative path, `root` itself or a
/// path outside.
fn below(root: &Path, path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    if !path.is_absolute() {
        return None;
    }
    let mut clean = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    let relative = clean.strip_prefix(root).ok()?;
    (!relative.as_os_str().is_empty()).then(|| relative.to_path_buf())
}

/// `<dir>.tmp`.
fn tmp_sibling(dir: &Path) -> PathBuf {
    let mut tmp = dir.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

impl BuildDirs {
    /// The same job in the unshared layout: `<builds_dir>/<project path>`.
    pub fn unshared(self) -> Self {
        let project_dir = self.builds_dir.join(&self.project_path);
        let tmp_dir = tmp_sibling(&project_dir);
        Self {
            seen: SeenDirs {
                builds_dir: self.builds_dir.clone(),
                project_dir: project_dir.clone(),
                tmp_dir: tmp_dir.clone(),
                slot: self.builds_dir.clone(),
            },
            slot: self.builds_dir.clone(),
            project_dir,
            tmp_dir,
            ..self
        }
    }

    /// `<builds_dir>/<short token>/<concurrent id>` (`builds_dir` in the unshared layout):
    /// the directory holding the project and its `.tmp` sibling (what the Docker executor
    /// mounts).
    pub fn slot_dir(&self) -> PathBuf {
        self.slot.clone()
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
        assert_eq!(dirs.seen.project_dir, dirs.project_dir);
    }

    #[test]
    fn git_clone_path_moves_the_checkout_within_the_builds_dir() {
        let shared = BuildDirs::new(
            Path::new("/b"),
            "glrt-t1_abcdefghijk",
            1,
            "https://h/g/p.git",
            7,
        );
        let moved = shared
            .clone()
            .with_clone_path("/b/1/./mine/../custom/p")
            .unwrap();
        assert_eq!(moved.project_dir, Path::new("/b/1/custom/p"));
        assert_eq!(moved.tmp_dir, Path::new("/b/1/custom/p.tmp"));
        assert_eq!(moved.seen.project_dir, moved.project_dir);
        assert_eq!(moved.seen.builds_dir, Path::new("/b"));
        assert_eq!(moved.slot_dir(), shared.slot_dir());
        for refused in [
            "/elsewhere/p",
            "/b/../etc",
            "/b",
            "/b/x/../",
            "relative/p",
            "",
        ] {
            let error = shared.clone().with_clone_path(refused).unwrap_err();
            assert_eq!(
                error,
                format!("the GIT_CLONE_PATH=\"{refused}\" has to be within \"/b\"")
            );
        }

        // In containers `/builds` is the mounted slot directory.
        let container = shared.clone().in_container();
        let moved = container
            .clone()
            .with_clone_path("/builds/go/src/p")
            .unwrap();
        assert_eq!(moved.seen.project_dir, Path::new("/builds/go/src/p"));
        assert_eq!(moved.project_dir, Path::new("/b/abcdefghi/1/go/src/p"));
        assert_eq!(moved.slot_dir(), Path::new("/b/abcdefghi/1"));
        assert_eq!(moved.seen_slot_dir(), Path::new("/builds"));
        assert!(container.with_clone_path("/b/abcdefghi/1/p").is_err());

        // The unshared layout's builds directory is its own.
        let unshared = shared.unshared().with_clone_path("/b/x/p").unwrap();
        assert_eq!(unshared.project_dir, Path::new("/b/x/p"));
        assert_eq!(unshared.slot_dir(), Path::new("/b"));
    }

    #[test]
    fn containers_see_gitlab_runner_s_docker_paths() {
        let dirs = BuildDirs::new(
            Path::new("/srv/gantry/builds"),
            "glrt-t1_abcdefghijk",
            1,
            "http://127.0.0.1:8080/gcl/test-project.git",
            3,
        )
        .in_container();
        assert_eq!(
            dirs.project_dir,
            Path::new("/srv/gantry/builds/abcdefghi/1/gcl/test-project")
        );
        assert_eq!(dirs.seen.builds_dir, Path::new("/builds"));
        assert_eq!(dirs.seen.project_dir, Path::new("/builds/gcl/test-project"));
        let on_instance = dirs.clone().on_instance(Path::new("/home/ci/builds"));
        assert_eq!(
            on_instance.seen.project_dir,
            Path::new("/home/ci/builds/abcdefghi/1/gcl/test-project")
        );
        assert_eq!(
            on_instance.seen.tmp_dir,
            Path::new("/home/ci/builds/abcdefghi/1/gcl/test-project.tmp")
        );
        assert_eq!(
            on_instance.seen_slot_dir(),
            Path::new("/home/ci/builds/abcdefghi/1")
        );
        assert_eq!(on_instance.project_dir, dirs.project_dir);
        assert_eq!(dirs.seen.tmp_dir, Path::new("/builds/gcl/test-project.tmp"));
        // What the slot directory mounted at /builds shows there.
        assert_eq!(
            Path::new("/builds").join(dirs.project_dir.strip_prefix(dirs.slot_dir()).unwrap()),
            dirs.seen.project_dir
        );
    }
}
