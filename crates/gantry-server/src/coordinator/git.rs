//! Repositories, through the `git` CLI (as gitlab-runner does). Each project has a bare
//! mirror under `data_dir/repos/<project id>.git`, fetched on demand. Configuration files
//! are read from a commit of the mirror ([`CommitLoader`]), never from a work tree.
//!
//! The mirror is also what runners clone (served over smart HTTP by the http layer):
//! every pipeline gets its persistent ref `refs/pipelines/<id>` there, as GitLab does.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::error::{CoordinatorError, Result};

fn describe(args: &[&str]) -> String {
    format!("git {}", args.join(" "))
}

/// Run git (async); stdout on success.
pub(crate) async fn git(dir: Option<&Path>, args: &[&str]) -> Result<Vec<u8>> {
    let mut cmd = tokio::process::Command::new("git");
    if let Some(dir) = dir {
        cmd.arg("-C").arg(dir);
    }
    cmd.args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = cmd.output().await.map_err(|e| {
        CoordinatorError::Git(format!(
            "run `{}`: {e} (is git installed and on PATH?)",
            describe(args)
        ))
    })?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(CoordinatorError::Git(format!(
            "run `{}`: {}",
            describe(args),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes)
        .trim_end_matches('\n')
        .to_owned()
}

/// The default branch of a remote repository (`git ls-remote --symref REPO HEAD`); `main`
/// for an empty repository.
pub(crate) async fn default_branch(repo: &str) -> Result<String> {
    let out = text(git(None, &["ls-remote", "--symref", "--", repo, "HEAD"]).await?);
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("ref: refs/heads/") {
            if let Some((branch, _)) = rest.split_once('\t') {
                return Ok(branch.to_owned());
            }
        }
    }
    Ok("main".to_owned())
}

/// A resolved ref.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResolvedRef {
    pub name: String,
    pub tag: bool,
    pub sha: String,
}

/// Facts about a commit, for predefined variables.
#[derive(Clone, Debug, Default)]
pub(crate) struct CommitInfo {
    pub author: String,
    pub timestamp: String,
    pub message: String,
    pub tag_message: Option<String>,
}

/// A project's bare mirror.
#[derive(Clone, Debug)]
pub(crate) struct Mirror {
    pub path: PathBuf,
}

impl Mirror {
    /// Create the mirror if needed and fetch branches and tags from `remote`. Pipeline
    /// refs (`refs/pipelines/*`) are outside the fetched refspecs, so `--prune` keeps them.
    pub async fn sync(&self, remote: &str) -> Result<()> {
        if !self.path.join("HEAD").exists() {
            if let Some(parent) = self.path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            let p = self.path.to_string_lossy().into_owned();
            // No template: hook samples are of no use in a mirror.
            git(None, &["init", "--bare", "--quiet", "--template=", &p]).await?;
            git(
                Some(&self.path),
                &["config", "uploadpack.allowAnySHA1InWant", "true"],
            )
            .await?;
            git(Some(&self.path), &["config", "http.receivepack", "false"]).await?;
            // `git http-backend` serves only exported repositories (or GIT_HTTP_EXPORT_ALL).
            tokio::fs::write(self.path.join("git-daemon-export-ok"), b"").await?;
        }
        git(
            Some(&self.path),
            &[
                "fetch",
                "--quiet",
                "--prune",
                "--force",
                "--no-write-fetch-head",
                "--",
                remote,
                "+refs/heads/*:refs/heads/*",
                "+refs/tags/*:refs/tags/*",
            ],
        )
        .await
        .map(|_| ())
    }

    /// Make the mirror `repo` itself (a symbolic link; see
    /// `CoordinatorConfig::local_repos_in_place`). Nothing to do when it is one already.
    pub async fn link_to(&self, repo: &Path) -> Result<()> {
        if tokio::fs::symlink_metadata(&self.path).await.is_ok() {
            return Ok(());
        }
        if let Some(parent) = self.path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        tokio::fs::symlink(repo, &self.path).await?;
        Ok(())
    }

    /// Point the mirror's HEAD at the default branch (what `git clone` checks out).
    pub async fn set_head(&self, branch: &str) -> Result<()> {
        git(
            Some(&self.path),
            &["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")],
        )
        .await
        .map(|_| ())
    }

    /// A branch or tag name (or `refs/heads/…` / `refs/tags/…`) → commit. A branch wins
    /// over a tag of the same name, as GitLab's API does.
    pub async fn resolve(&self, ref_name: &str) -> Result<Option<ResolvedRef>> {
        let candidates: Vec<(String, String, bool)> =
            if let Some(b) = ref_name.strip_prefix("refs/heads/") {
                vec![(b.to_owned(), ref_name.to_owned(), false)]
            } else if let Some(t) = ref_name.strip_prefix("refs/tags/") {
                vec![(t.to_owned(), ref_name.to_owned(), true)]
            } else {
                vec![
                    (ref_name.to_owned(), format!("refs/heads/{ref_name}"), false),
                    (ref_name.to_owned(), format!("refs/tags/{ref_name}"), true),
                ]
            };
        for (name, full, tag) in candidates {
            if name.is_empty() || name.starts_with('-') {
                continue;
            }
            let spec = format!("{full}^{{commit}}");
            if let Ok(out) = git(
                Some(&self.path),
                &["rev-parse", "--verify", "--quiet", &spec],
            )
            .await
            {
                let sha = text(out);
                if !sha.is_empty() {
                    return Ok(Some(ResolvedRef { name, tag, sha }));
                }
            }
        }
        Ok(None)
    }

    pub async fn commit_info(&self, r: &ResolvedRef) -> Result<CommitInfo> {
        let out = git(
            Some(&self.path),
            &["show", "-s", "--format=%an <%ae>%x00%aI%x00%B", &r.sha],
        )
        .await?;
        let out = String::from_utf8_lossy(&out).into_owned();
        let mut parts = out.splitn(3, '\0');
        let author = parts.next().unwrap_or_default().to_owned();
        let timestamp = parts.next().unwrap_or_default().to_owned();
        let message = parts
            .next()
            .unwrap_or_default()
            .trim_end_matches('\n')
            .to_owned();
        let tag_message = if r.tag {
            git(
                Some(&self.path),
                &[
                    "for-each-ref",
                    "--format=%(contents)",
                    &format!("refs/tags/{}", r.name),
                ],
            )
            .await
            .ok()
            .map(text)
        } else {
            None
        };
        Ok(CommitInfo {
            author,
            timestamp,
            message,
            tag_message,
        })
    }

    /// `refs/pipelines/<id>` → `sha` (what the runner's first refspec fetches).
    pub async fn create_pipeline_ref(&self, pipeline_id: i64, sha: &str) -> Result<()> {
        git(
            Some(&self.path),
            &["update-ref", &format!("refs/pipelines/{pipeline_id}"), sha],
        )
        .await
        .map(|_| ())
    }

    /// The last commit at `sha` that touched `path` (for `cache:key:files`).
    pub async fn last_commit_for(&self, sha: &str, path: &str) -> Option<String> {
        let out = git(
            Some(&self.path),
            &["log", "-1", "--format=%H", sha, "--", path],
        )
        .await
        .ok()?;
        Some(text(out)).filter(|s| !s.is_empty())
    }
}

/// Reads configuration files of one commit of a mirror (a [`gantry_pipeline::Loader`]).
/// Synchronous, as the loader trait is: call it from a blocking task. Files are read
/// through one `git cat-file --batch` process, started on the first read and ended when
/// the loader is dropped (a pipeline with includes reads many files).
pub(crate) struct CommitLoader {
    repo: PathBuf,
    sha: String,
    batch: std::sync::Mutex<Option<CatFile>>,
}

/// A running `git cat-file --batch`.
struct CatFile {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CatFile {
    fn start(repo: &Path) -> std::result::Result<CatFile, String> {
        let mut child = std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("run git cat-file: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("run git cat-file: no pipes".to_owned());
        };
        Ok(CatFile {
            child,
            stdin,
            stdout: std::io::BufReader::new(stdout),
        })
    }

    /// The object named `object` (`<rev>:<path>`): `(type, content)`, `None` when it
    /// does not exist. Content larger than `limit` is skipped (its type is answered with
    /// no content).
    fn get(
        &mut self,
        object: &str,
        limit: u64,
    ) -> std::io::Result<Option<(String, Option<Vec<u8>>)>> {
        use std::io::{BufRead as _, Read as _, Write as _};
        if object.contains('\n') {
            return Ok(None);
        }
        writeln!(self.stdin, "{object}")?;
        self.stdin.flush()?;
        let mut header = String::new();
        if self.stdout.read_line(&mut header)? == 0 {
            return Err(std::io::Error::other("git cat-file ended"));
        }
        // `<oid> <type> <size>`, or `<object> missing` / `<object> ambiguous`.
        let mut fields = header.trim_end().rsplitn(3, ' ');
        let (Some(size), Some(kind), Some(_)) = (fields.next(), fields.next(), fields.next())
        else {
            return Ok(None);
        };
        let Ok(size) = size.parse::<u64>() else {
            return Ok(None);
        };
        let kind = kind.to_owned();
        let mut content = Vec::new();
        (&mut self.stdout)
            .take(size.min(limit))
            .read_to_end(&mut content)?;
        if size > limit {
            std::io::copy(&mut (&mut self.stdout).take(size - limit), &mut std::io::sink())?;
        }
        let mut newline = [0u8; 1];
        self.stdout.read_exact(&mut newline)?;
        Ok(Some((kind, (size <= limit).then_some(content))))
    }
}

impl CommitLoader {
    pub(crate) fn new(repo: PathBuf, sha: String) -> Self {
        CommitLoader {
            repo,
            sha,
            batch: std::sync::Mutex::new(None),
        }
    }

    fn git(&self, args: &[&str]) -> std::result::Result<std::process::Output, String> {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&self.repo)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run git: {e}"))
    }
}

impl gantry_pipeline::Loader for CommitLoader {
    fn read(&self, path: &str) -> std::result::Result<Option<String>, String> {
        let object = format!("{}:{}", self.sha, path.trim_start_matches('/'));
        let mut batch = self
            .batch
            .lock()
            .map_err(|_| "the git reader failed earlier".to_owned())?;
        if batch.is_none() {
            *batch = Some(CatFile::start(&self.repo)?);
        }
        let Some(cat) = batch.as_mut() else {
            return Err("run git cat-file".to_owned());
        };
        // Larger than every configuration file together may be: the compiler reports
        // the size limit itself.
        let limit = u64::try_from(gantry_pipeline::include::MAX_TOTAL_BYTES).unwrap_or(u64::MAX) + 1;
        match cat.get(&object, limit) {
            Ok(Some((kind, Some(bytes)))) if kind == "blob" => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| format!("{path} is not valid UTF-8")),
            Ok(Some((kind, None))) if kind == "blob" => Err(format!(
                "{path} is larger than {} bytes",
                gantry_pipeline::include::MAX_TOTAL_BYTES
            )),
            Ok(_) => Ok(None),
            Err(e) => {
                // A broken reader is not reused.
                *batch = None;
                Err(format!("read {path} with git cat-file: {e}"))
            }
        }
    }

    fn files(&self) -> Vec<String> {
        match self.git(&["ls-tree", "-r", "--name-only", "-z", &self.sha]) {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
                .split('\0')
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    }
}
