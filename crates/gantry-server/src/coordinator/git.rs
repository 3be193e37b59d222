//! Repositories, through the `git` CLI (as gitlab-runner does). Each project has a bare
//! mirror under `data_dir/repos/<project id>.git`, fetched on demand. Configuration files
//! are read from a commit of the mirror ([`CommitLoader`]), never from a work tree.
//!
//! The mirror is also what runners clone (served over smart HTTP by the http layer):
//! every pipeline gets its persistent ref `refs/pipelines/<id>` there, as GitLab does.
//!
//! A pipeline's creation reads its configuration through one `git cat-file --batch`
//! process, shared with the resolution of its ref through the `Mirror` value
//! (`CommitLoader::of`). `changes_since` (`git diff --merge-base` in the pipeline's
//! repository) is the one implementation of `rules:changes:compare_to`'s diff, for the
//! server and for `gantry run`'s and `gantry lint`'s loaders.

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

/// The branches and tags of a repository (a URL or path git can read), `(refs/…,
/// commit)` sorted by name: an annotated tag by the commit it names (`git ls-remote`).
pub(crate) async fn list_refs(repo: &str) -> Result<Vec<(String, String)>> {
    let out = text(git(None, &["ls-remote", "--heads", "--tags", "--", repo]).await?);
    let mut refs = std::collections::BTreeMap::new();
    for line in out.lines() {
        let Some((sha, name)) = line.split_once('\t') else {
            continue;
        };
        match name.strip_suffix("^{}") {
            // The peeled line follows its tag's: the commit wins over the tag object.
            Some(tag) => {
                refs.insert(tag.to_owned(), sha.to_owned());
            }
            None => {
                refs.entry(name.to_owned())
                    .or_insert_with(|| sha.to_owned());
            }
        }
    }
    Ok(refs.into_iter().collect())
}

/// The commit `rev` (a branch, tag, `refs/…` name or commit) names in `repo`; `None` when
/// it names none. Blocking.
pub(crate) fn resolve_commit(
    repo: &Path,
    rev: &str,
) -> std::result::Result<Option<String>, String> {
    if rev.is_empty() || rev.starts_with('-') || rev.contains(['\0', '\n']) {
        return Ok(None);
    }
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
        .arg(format!("{rev}^{{commit}}"))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("run git rev-parse: {e}"))?;
    Ok(out
        .status
        .success()
        .then(|| text(out.stdout))
        .filter(|sha| !sha.is_empty()))
}

/// The paths that differ between the merge base of `base` and `sha`, and `sha` (git's
/// `diff --merge-base`; without common history, between the two commits); a renamed
/// file counts under both names, as GitLab's `diff_stats(…).paths`. Blocking.
pub(crate) fn changed_paths(
    repo: &Path,
    base: &str,
    sha: &str,
) -> std::result::Result<Vec<String>, String> {
    let diff = |merge_base: bool| {
        let mut cmd = std::process::Command::new("git");
        cmd.arg("-C").arg(repo).args([
            "diff",
            "--name-only",
            "--no-renames",
            "--no-ext-diff",
            "-z",
        ]);
        if merge_base {
            cmd.arg("--merge-base");
        }
        cmd.args([base, sha, "--"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run git diff: {e}"))
    };
    let mut out = diff(true)?;
    if !out.status.success() {
        out = diff(false)?;
    }
    if !out.status.success() {
        return Err(format!(
            "git diff {base} {sha}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect())
}

/// `rules:changes:compare_to` ([`gantry_pipeline::Loader::changed_since`]) for commit
/// `sha` of `repo`: `compare_to` resolved in `repo`, else in the repositories of `also`
/// (which must share their objects with `repo`), then the paths changed since the merge
/// base (`changed_paths`). Blocking.
pub fn changes_since(
    repo: &Path,
    also: &[PathBuf],
    sha: &str,
    compare_to: &str,
) -> std::result::Result<Vec<String>, gantry_pipeline::CompareError> {
    use gantry_pipeline::CompareError;
    let mut base = None;
    for r in std::iter::once(repo).chain(also.iter().map(PathBuf::as_path)) {
        base = resolve_commit(r, compare_to).map_err(CompareError::Io)?;
        if base.is_some() {
            break;
        }
    }
    let base = base.ok_or(CompareError::InvalidRef)?;
    changed_paths(repo, &base, sha).map_err(CompareError::Io)
}

/// A resolved ref.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResolvedRef {
    pub name: String,
    pub tag: bool,
    pub sha: String,
}

/// Facts about a commit, for predefined variables and the API's commit objects.
#[derive(Clone, Debug, Default)]
pub(crate) struct CommitInfo {
    /// `Name <email>`.
    pub author: String,
    /// When it was committed, in the committer's zone (git's `%cI`).
    pub timestamp: String,
    pub message: String,
    pub tag_message: Option<String>,
    /// When it was authored, in the author's zone (git's `%aI`).
    pub authored_at: String,
    /// `Name <email>`.
    pub committer: String,
    pub parent_ids: Vec<String>,
}

/// A project's bare mirror. A value lives for one task (a pipeline's creation, a push):
/// its reads and the [`CommitLoader`]s made from it ([`CommitLoader::of`]) share one
/// `git cat-file --batch` ([`ObjectReader`]), which ends with the last of them.
#[derive(Clone, Debug)]
pub(crate) struct Mirror {
    pub path: PathBuf,
    reader: ObjectReader,
}

/// A `git cat-file --batch` started on the first read, shared by clones (each process
/// costs a millisecond or two to start); a reader that failed is not reused.
#[derive(Clone, Default)]
struct ObjectReader(std::sync::Arc<std::sync::Mutex<Option<CatFile>>>);

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ObjectReader")
    }
}

impl ObjectReader {
    /// `object` read from `repo` by the shared process (started now if there is none).
    fn get(
        &self,
        repo: &Path,
        object: &str,
        limit: u64,
    ) -> std::result::Result<Option<CatObject>, String> {
        let mut batch = self
            .0
            .lock()
            .map_err(|_| "the git reader failed earlier".to_owned())?;
        let cat = match batch.as_mut() {
            Some(cat) => cat,
            None => batch.insert(CatFile::start(repo)?),
        };
        cat.get(object, limit).map_err(|e| {
            *batch = None;
            e.to_string()
        })
    }

    /// Ends the process (the next read starts another).
    fn reset(&self) {
        if let Ok(mut batch) = self.0.lock() {
            *batch = None;
        }
    }
}

impl Mirror {
    pub fn new(path: PathBuf) -> Self {
        Mirror {
            path,
            reader: ObjectReader::default(),
        }
    }

    /// Create the mirror if needed and fetch branches and tags from `remote`. Pipeline
    /// refs (`refs/pipelines/*`) are outside the fetched refspecs, so `--prune` keeps them.
    pub async fn sync(&self, remote: &str) -> Result<()> {
        // A reader started before the fetch could answer from what it read then.
        self.reader.reset();
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

    /// Objects by name (`<rev>`, `<rev>^{commit}`, …), read by the mirror's `git cat-file
    /// --batch` ([`ObjectReader`], which configuration files are read by too): `(object
    /// id, type, content)` for each, `None` for a name that names nothing (or an object
    /// over 1 MiB: commits and tags).
    async fn objects(&self, names: &[String]) -> Result<Vec<Option<(String, String, Vec<u8>)>>> {
        const LIMIT: u64 = 1 << 20;
        let (path, names, reader) = (self.path.clone(), names.to_vec(), self.reader.clone());
        tokio::task::spawn_blocking(move || {
            names
                .iter()
                .map(|name| {
                    let found = reader.get(&path, name, LIMIT).map_err(|e| {
                        CoordinatorError::Git(format!("read {name} with git cat-file: {e}"))
                    })?;
                    Ok(found.and_then(|(oid, kind, content)| Some((oid, kind, content?))))
                })
                .collect()
        })
        .await
        .map_err(|e| CoordinatorError::Git(format!("git cat-file task: {e}")))?
    }

    /// A branch or tag name (or `refs/heads/…` / `refs/tags/…`) → commit, with the facts
    /// of that commit (one `git cat-file --batch`). A branch wins over a tag of the same
    /// name, as GitLab's API does.
    pub async fn resolve(&self, ref_name: &str) -> Result<Option<(ResolvedRef, CommitInfo)>> {
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
        let candidates: Vec<_> = candidates
            .into_iter()
            .filter(|(name, _, _)| !name.is_empty() && !name.starts_with('-'))
            .collect();
        // Each candidate's commit, then (for a tag) what the tag names.
        let mut names = Vec::new();
        for (_, full, tag) in &candidates {
            names.push(format!("{full}^{{commit}}"));
            if *tag {
                names.push(full.clone());
            }
        }
        let mut objects = self.objects(&names).await?.into_iter();
        for (name, _, tag) in candidates {
            let commit = objects.next().flatten();
            let tagged = if tag { objects.next().flatten() } else { None };
            if let Some((sha, _, raw)) = commit {
                let mut info = parse_commit(&raw);
                info.tag_message = tagged.map(|(_, _, raw)| body(&raw));
                return Ok(Some((ResolvedRef { name, tag, sha }, info)));
            }
        }
        Ok(None)
    }

    /// The facts of `r`'s commit (one `git cat-file --batch`).
    pub async fn commit_info(&self, r: &ResolvedRef) -> Result<CommitInfo> {
        let mut names = vec![r.sha.clone()];
        if r.tag {
            names.push(format!("refs/tags/{}", r.name));
        }
        let mut objects = self.objects(&names).await?.into_iter();
        let Some((_, _, raw)) = objects.next().flatten() else {
            return Err(CoordinatorError::Git(format!(
                "commit {} is not in the repository",
                r.sha
            )));
        };
        let mut info = parse_commit(&raw);
        info.tag_message = objects.next().flatten().map(|(_, _, raw)| body(&raw));
        Ok(info)
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

    /// Whether a pipeline ref can be written now: one `git update-ref --stdin`
    /// transaction takes the lock of a ref under `refs/pipelines/` (a name of its own, so
    /// concurrent creations do not collide) and gives it up, so a read-only or
    /// unwritable mirror fails here, before a pipeline is stored, and nothing is left.
    pub async fn check_pipeline_refs(&self, sha: &str) -> Result<()> {
        let trial = format!("refs/pipelines/trial-{:016x}", rand::random::<u64>());
        use tokio::io::AsyncWriteExt as _;
        let args = ["update-ref", "--stdin"];
        let mut child = tokio::process::Command::new("git")
            .arg("-C")
            .arg(&self.path)
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                CoordinatorError::Git(format!(
                    "run `{}`: {e} (is git installed and on PATH?)",
                    describe(&args)
                ))
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            let script = format!("start\nupdate {trial} {sha}\nprepare\nabort\n");
            // A git that exits early closes its stdin; its status says why.
            let _ = stdin.write_all(script.as_bytes()).await;
        }
        let out = child.wait_with_output().await?;
        if out.status.success() {
            Ok(())
        } else {
            Err(CoordinatorError::Git(format!(
                "run `{}` (a trial write of {trial}): {}",
                describe(&args),
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }

    /// The file at `path` in commit `sha`: `(blob id, executable, content)`; `None` when
    /// the commit has no file there (a directory, a submodule, nothing). A file over
    /// `limit` bytes is [`CoordinatorError::Invalid`], naming the limit.
    pub async fn file_at(
        &self,
        sha: &str,
        path: &str,
        limit: u64,
    ) -> Result<Option<(String, bool, Vec<u8>)>> {
        if path.is_empty() || path.contains(['\0', '\n']) {
            return Ok(None);
        }
        // `<mode> <type> <id>\t<path>`: the mode says whether it is executable.
        let listed = text(git(Some(&self.path), &["ls-tree", sha, "--", path]).await?);
        let Some((meta, _)) = listed.lines().next().and_then(|l| l.split_once('\t')) else {
            return Ok(None);
        };
        let mut fields = meta.split(' ');
        let (Some(mode), Some("blob")) = (fields.next(), fields.next()) else {
            return Ok(None);
        };
        let executable = mode == "100755";
        let (repo, name, reader) = (
            self.path.clone(),
            format!("{sha}:{path}"),
            self.reader.clone(),
        );
        let found = tokio::task::spawn_blocking(move || reader.get(&repo, &name, limit))
            .await
            .map_err(|e| CoordinatorError::Git(format!("git cat-file task: {e}")))?
            .map_err(|e| CoordinatorError::Git(format!("read {path} with git cat-file: {e}")))?;
        match found {
            Some((oid, _, Some(content))) => Ok(Some((oid, executable, content))),
            Some((_, _, None)) => Err(CoordinatorError::Invalid(format!(
                "{path} is over {limit} bytes, the most the files API reads"
            ))),
            None => Ok(None),
        }
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
/// through one `git cat-file --batch` process, started on the first read (or the
/// mirror's, [`CommitLoader::of`]) and ended when the loader is dropped (a pipeline with
/// includes reads many files).
pub(crate) struct CommitLoader {
    repo: PathBuf,
    sha: String,
    batch: ObjectReader,
    /// Repositories whose refs `rules:changes:compare_to` also resolves in when `repo`
    /// lacks them (`gantry run`: the checkout, whose objects the snapshot borrows).
    compare_refs: Vec<PathBuf>,
}

/// What `git cat-file --batch` answers for a name: `(object id, type, content)`, the
/// content `None` when it was over the caller's limit.
type CatObject = (String, String, Option<Vec<u8>>);

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

    /// The object named `object` (`<rev>:<path>`, `<ref>^{commit}`, …): `(object id,
    /// type, content)`, `None` when it names nothing. Content larger than `limit` is
    /// skipped (answered as `None`).
    fn get(&mut self, object: &str, limit: u64) -> std::io::Result<Option<CatObject>> {
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
        let (Some(size), Some(kind), Some(oid)) = (fields.next(), fields.next(), fields.next())
        else {
            return Ok(None);
        };
        let Ok(size) = size.parse::<u64>() else {
            return Ok(None);
        };
        let (oid, kind) = (oid.to_owned(), kind.to_owned());
        let mut content = Vec::new();
        (&mut self.stdout)
            .take(size.min(limit))
            .read_to_end(&mut content)?;
        if size > limit {
            std::io::copy(
                &mut (&mut self.stdout).take(size - limit),
                &mut std::io::sink(),
            )?;
        }
        let mut newline = [0u8; 1];
        self.stdout.read_exact(&mut newline)?;
        Ok(Some((oid, kind, (size <= limit).then_some(content))))
    }
}

impl CommitLoader {
    pub(crate) fn new(repo: PathBuf, sha: String) -> Self {
        CommitLoader {
            repo,
            sha,
            batch: ObjectReader::default(),
            compare_refs: Vec::new(),
        }
    }

    /// A loader of `mirror`'s commit `sha` that reads through the mirror's reader (the
    /// one that resolved the ref: no second process).
    pub(crate) fn of(mirror: &Mirror, sha: String) -> Self {
        CommitLoader {
            repo: mirror.path.clone(),
            sha,
            batch: mirror.reader.clone(),
            compare_refs: Vec::new(),
        }
    }

    /// Resolve `compare_to` in these repositories too (see [`CommitLoader::compare_refs`]).
    pub(crate) fn comparing_in(mut self, repos: Vec<PathBuf>) -> Self {
        self.compare_refs = repos;
        self
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

/// The reader ends with the loader (in the blocking task that dropped it), also when it
/// is the mirror's.
impl Drop for CommitLoader {
    fn drop(&mut self) {
        self.batch.reset();
    }
}

impl gantry_pipeline::Loader for CommitLoader {
    fn read(&self, path: &str) -> std::result::Result<Option<String>, gantry_pipeline::ReadError> {
        let object = format!("{}:{}", self.sha, path.trim_start_matches('/'));
        // Larger than every configuration file together may be: the compiler reports
        // the size limit itself.
        let limit =
            u64::try_from(gantry_pipeline::include::MAX_TOTAL_BYTES).unwrap_or(u64::MAX) + 1;
        match self.batch.get(&self.repo, &object, limit) {
            Ok(Some((_, kind, Some(bytes)))) if kind == "blob" => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| gantry_pipeline::ReadError::NotText {
                    path: path.to_owned(),
                }),
            Ok(Some((_, kind, None))) if kind == "blob" => {
                Err(gantry_pipeline::ReadError::TooLarge {
                    path: path.to_owned(),
                    limit: limit - 1,
                })
            }
            Ok(_) => Ok(None),
            // A broken reader is not reused (ObjectReader::get ended it).
            Err(e) => Err(gantry_pipeline::ReadError::Io(format!(
                "read {path} with git cat-file: {e}"
            ))),
        }
    }

    fn changed_since(
        &self,
        compare_to: &str,
    ) -> std::result::Result<Vec<String>, gantry_pipeline::CompareError> {
        changes_since(&self.repo, &self.compare_refs, &self.sha, compare_to)
    }

    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        // A list that cannot be had is an error, never an empty project: `rules:exists`
        // would quietly be false and wildcard includes would include nothing.
        let failed = |why: String| {
            gantry_pipeline::ReadError::Io(format!(
                "list the files of commit {} with git ls-tree: {why}",
                self.sha
            ))
        };
        let out = self
            .git(&["ls-tree", "-r", "--name-only", "-z", &self.sha])
            .map_err(|e| failed(e.to_string()))?;
        if !out.status.success() {
            return Err(failed(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect())
    }
}

/// A commit as a list of pipelines shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitSummary {
    /// The message's first line.
    pub title: String,
    /// The author's name (git's `%an`).
    pub author: String,
}

impl super::Coordinator {
    /// The title and author of each of `shas` in project `project_id`'s mirror, `None`
    /// for one it does not hold (one `git cat-file --batch` for all: O(shas)).
    pub async fn commit_summaries(
        &self,
        project_id: i64,
        shas: &[String],
    ) -> Result<Vec<Option<CommitSummary>>> {
        let mirror = self.sources().mirror(project_id);
        if !mirror.path.exists() {
            return Ok(vec![None; shas.len()]);
        }
        Ok(mirror
            .objects(shas)
            .await?
            .into_iter()
            .map(|found| {
                let (_, kind, raw) = found?;
                (kind == "commit").then(|| {
                    let info = parse_commit(&raw);
                    CommitSummary {
                        title: info.message.lines().next().unwrap_or_default().to_owned(),
                        author: info
                            .author
                            .split_once(" <")
                            .map_or(info.author.as_str(), |(name, _)| name)
                            .to_owned(),
                    }
                })
            })
            .collect())
    }
}

/// What follows a commit's or tag's headers (git's `%B` / `%(contents)`), without trailing
/// line breaks.
fn body(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    match text.split_once("\n\n") {
        Some((_, body)) => body.trim_end_matches('\n').to_owned(),
        None => String::new(),
    }
}

/// A raw commit → its author (`Name <email>`, git's `%an <%ae>`: `CI_COMMIT_AUTHOR`), its
/// committer date in strict ISO 8601 in the committer's zone (`%cI`: GitLab's
/// `Commit#timestamp`, `committed_date.xmlschema` with Gitaly's zone, for
/// `CI_COMMIT_TIMESTAMP`) and message (`%B`).
fn parse_commit(raw: &[u8]) -> CommitInfo {
    let text = String::from_utf8_lossy(raw);
    let headers = text.split_once("\n\n").map_or(text.as_ref(), |(h, _)| h);
    // `Name <email> 1700000000 +0100`: the identity, and the time in its zone.
    let identity = |prefix: &str| -> Option<(String, String)> {
        let line = headers.lines().find_map(|l| l.strip_prefix(prefix))?;
        let end = line.rfind('>')?;
        let mut when = line[end + 1..].split_whitespace();
        let time = match (when.next().map(str::parse::<i64>), when.next()) {
            (Some(Ok(secs)), Some(zone)) => iso8601_in_zone(secs, zone),
            _ => String::new(),
        };
        Some((line[..=end].to_owned(), time))
    };
    let (author, authored_at) = identity("author ").unwrap_or_default();
    let (committer, timestamp) = identity("committer ").unwrap_or_default();
    CommitInfo {
        author,
        timestamp,
        message: body(raw),
        tag_message: None,
        authored_at,
        committer,
        parent_ids: headers
            .lines()
            .filter_map(|l| l.strip_prefix("parent "))
            .map(str::to_owned)
            .collect(),
    }
}

/// `1700000000`, `+0100` → `2023-11-14T23:13:20+01:00` (git's `%aI`, `%cI`).
fn iso8601_in_zone(secs: i64, zone: &str) -> String {
    let (sign, digits) = match zone.split_at_checked(1) {
        Some(("-", d)) => (-1, d),
        Some(("+", d)) => (1, d),
        _ => (1, "0000"),
    };
    let hours: i64 = digits.get(..2).and_then(|h| h.parse().ok()).unwrap_or(0);
    let minutes: i64 = digits.get(2..4).and_then(|m| m.parse().ok()).unwrap_or(0);
    let offset = sign * (hours * 60 + minutes) * 60;
    let utc_like = super::time::iso8601((secs + offset) * 1000);
    // `YYYY-MM-DDTHH:MM:SS.mmmZ` → `YYYY-MM-DDTHH:MM:SS±HH:MM`
    format!(
        "{}{}{hours:02}:{minutes:02}",
        utc_like.get(..19).unwrap_or_default(),
        if sign < 0 { '-' } else { '+' }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "Ada Lovelace")
            .env("GIT_AUTHOR_EMAIL", "ada@example.com")
            .env("GIT_AUTHOR_DATE", "1700000000 -0230")
            .env("GIT_COMMITTER_NAME", "C")
            .env("GIT_COMMITTER_EMAIL", "c@example.com")
            .env("GIT_COMMITTER_DATE", "1700003600 +0100")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .trim_end_matches('\n')
            .to_owned()
    }

    #[test]
    fn a_commits_file_list_that_git_cannot_give_is_an_error_not_an_empty_project() {
        use gantry_pipeline::Loader as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("Makefile"), "all:\n").unwrap();
        git(d, &["add", "Makefile"]);
        git(d, &["commit", "-qm", "one"]);
        let sha = git(d, &["rev-parse", "HEAD"]);
        let listed = CommitLoader::new(d.join(".git"), sha).files().unwrap();
        assert_eq!(listed, ["Makefile"]);
        let missing = "0123456789abcdef0123456789abcdef01234567".to_owned();
        let error = CommitLoader::new(d.join(".git"), missing.clone())
            .files()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!(
                "list the files of commit {missing} with git ls-tree"
            )),
            "{error}"
        );
    }

    #[tokio::test]
    async fn refs_and_commit_facts_read_by_cat_file_match_git_show() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("a"), "a").unwrap();
        git(d, &["add", "a"]);
        git(d, &["commit", "-qm", "subject\n\nbody line\n"]);
        git(d, &["tag", "-a", "v1", "-m", "release one\n\nnotes"]);
        git(d, &["tag", "light"]);
        let mirror = Mirror::new(d.join(".git"));
        let show = |rev: &str| git(d, &["show", "-s", "--format=%an <%ae>%x00%cI%x00%B", rev]);
        let expected = show("HEAD");
        let mut parts = expected.splitn(3, '\0');
        let (author, date, message) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );

        let (r, info) = mirror.resolve("main").await.unwrap().unwrap();
        assert_eq!((r.name.as_str(), r.tag), ("main", false));
        assert_eq!(r.sha, git(d, &["rev-parse", "HEAD"]));
        assert_eq!(info.author, author);
        assert_eq!(info.timestamp, date);
        // The committer's date (GitLab's `committed_date`), not the author's.
        assert_eq!(info.timestamp, "2023-11-15T00:13:20+01:00");
        assert_eq!(info.message, message.trim_end_matches('\n'));
        assert_eq!(info.tag_message, None);
        assert_eq!(
            info.authored_at,
            git(d, &["show", "-s", "--format=%aI", "HEAD"])
        );
        assert_eq!(
            info.committer,
            git(d, &["show", "-s", "--format=%cn <%ce>", "HEAD"])
        );
        assert!(info.parent_ids.is_empty(), "a root commit");

        let (r, info) = mirror.resolve("v1").await.unwrap().unwrap();
        assert!(r.tag);
        assert_eq!(r.sha, git(d, &["rev-parse", "HEAD"]));
        let contents = git(d, &["for-each-ref", "--format=%(contents)", "refs/tags/v1"]);
        assert_eq!(info.tag_message.as_deref(), Some(contents.as_str()));
        assert_eq!(
            mirror.commit_info(&r).await.unwrap().tag_message.as_deref(),
            Some(contents.as_str())
        );
        // A lightweight tag's contents are its commit's message, as for-each-ref says.
        let (_, info) = mirror.resolve("refs/tags/light").await.unwrap().unwrap();
        let contents = git(
            d,
            &["for-each-ref", "--format=%(contents)", "refs/tags/light"],
        );
        assert_eq!(info.tag_message.as_deref(), Some(contents.as_str()));

        assert!(mirror.resolve("nope").await.unwrap().is_none());
        assert!(mirror.resolve("main\nHEAD").await.unwrap().is_none());
        assert!(mirror.resolve("-x").await.unwrap().is_none());

        // A loader of the mirror reads through the process that resolved the ref, and
        // ends it when dropped; the mirror then starts another.
        let (r, _) = mirror.resolve("main").await.unwrap().unwrap();
        let pid = |m: &Mirror| {
            m.reader
                .0
                .lock()
                .unwrap()
                .as_ref()
                .map(|cat| cat.child.id())
        };
        let resolving = pid(&mirror).expect("a reader after resolving");
        let loader = CommitLoader::of(&mirror, r.sha.clone());
        use gantry_pipeline::Loader as _;
        assert_eq!(loader.read("a").unwrap().as_deref(), Some("a"));
        assert_eq!(loader.read("missing").unwrap(), None);
        assert_eq!(pid(&mirror), Some(resolving), "one process for both");
        drop(loader);
        assert_eq!(pid(&mirror), None);
        assert!(mirror.resolve("main").await.unwrap().is_some());
        assert_ne!(pid(&mirror), Some(resolving));
    }

    #[test]
    fn author_dates_keep_their_zone() {
        assert_eq!(iso8601_in_zone(0, "+0000"), "1970-01-01T00:00:00+00:00");
        assert_eq!(
            iso8601_in_zone(1_700_000_000, "+0100"),
            "2023-11-14T23:13:20+01:00"
        );
        assert_eq!(
            iso8601_in_zone(1_700_000_000, "-0800"),
            "2023-11-14T14:13:20-08:00"
        );
    }
}
