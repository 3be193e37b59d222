//! Included files from outside the pipeline's commit, for every command that compiles a
//! configuration (`gantry server`, `gantry run`, `gantry lint`): one implementation of
//! [`gantry_pipeline::Loader`]'s `remote` and `project_file` ([`IncludeLoader`] over
//! [`IncludeSources`]).
//!
//! - `include:remote`: the offline include cache when it holds the URL
//!   (`<cache>/<host>[:<port>]/<url path>`), else an HTTP(S) GET (rustls) from the URL, or
//!   from a mirror named by a [`UrlRewrite`]. Limits (GitLab's `Gitlab::HTTP`: 10 s to
//!   connect, 30 s in all): [`REMOTE_CONNECT_TIMEOUT`], [`REMOTE_TIMEOUT`], and a body of at
//!   most [`REMOTE_MAX_BYTES`] (the limit of one YAML file). Up to 10 redirects are followed.
//!   A [`RemoteFetches`] shared by several compilations fetches each URL once for all
//!   of them (`gantry run`: its configuration check and its coordinator see the same
//!   text).
//! - `include:template`: the remote file [`GITLAB_TEMPLATES_URL`]`<name>`, through the
//!   same cache, mirrors and fetch.
//! - `include:project`: a project this server holds (its bare mirror, fetched from its
//!   remote once per compilation), matched on its full path without regard to case as
//!   GitLab does; else the include cache (`<cache>/<host>/<project path>/<ref>/<file>`,
//!   `HEAD` for no `ref`); else "not found". Every project the server holds is readable
//!   (the server has one user, the administrator).
//! - `include:component` needs no method of its own: the pipeline crate reads the component
//!   with `project_file`, and `project_commit` gives `$[[ component.sha ]]`.
//! - A remote or project include that cannot be read gets a hint
//!   ([`Loader::remote_hint`], [`Loader::project_hint`]): the path in the offline include
//!   cache that would hold it, or the setting that names one (`GANTRY_INCLUDE_CACHE` of
//!   `gantry server`), and the mirror setting (`GANTRY_REMOTE_INCLUDE_MIRROR`), or the
//!   mirror that was asked when one was.
//! - The offline include cache is `gantry run`'s and `gantry lint`'s `.gantry/includes`, or
//!   `gantry server`'s `GANTRY_INCLUDE_CACHE`.
//!
//! The pipeline crate is synchronous and compiles in a blocking task; a fetch runs its
//! future on a helper thread with its own small runtime ([`block_on_side`]), so it neither
//! needs nor blocks the caller's runtime, whichever context the loader is called from.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gantry_pipeline::{Loader, ProjectError, RemoteError};

use super::git::{CommitLoader, Mirror};

/// Connecting to the host of a remote include (GitLab's `open_timeout`).
pub const REMOTE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole fetch of a remote include (GitLab's `DEFAULT_READ_TOTAL_TIMEOUT`).
pub const REMOTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Where `include:template` names are read from: GitLab's own CI templates, as they are
/// on its default branch (GitLab serves the templates of the running version; a mirror
/// ([`UrlRewrite`]) or the include cache can pin other ones). The URL gitlab-ci-local
/// fetches, so its include cache serves here too.
pub const GITLAB_TEMPLATES_URL: &str =
    "https://gitlab.com/gitlab-org/gitlab/-/raw/HEAD/lib/gitlab/ci/templates/";

/// Largest remote include body: the limit of one YAML file (2 MiB).
pub const REMOTE_MAX_BYTES: u64 = 2 * 1024 * 1024;

/// The limits of one remote include fetch; the default is GitLab's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteLimits {
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub max_bytes: u64,
}

impl Default for RemoteLimits {
    fn default() -> Self {
        RemoteLimits {
            connect_timeout: REMOTE_CONNECT_TIMEOUT,
            timeout: REMOTE_TIMEOUT,
            max_bytes: REMOTE_MAX_BYTES,
        }
    }
}

/// The offline include cache (`gantry run`, `gantry lint`): files placed by hand, never
/// written by Gantry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncludeCache {
    /// `.gantry/includes` of the checkout.
    pub dir: PathBuf,
    /// The host `include:project` files are looked up under (the `origin` remote's host,
    /// `gitlab.com` for `git@gitlab.com:group/project.git`).
    pub host: String,
}

/// Fetch remote includes starting with `from` from `to` instead (git's `insteadOf`), e.g.
/// `https://gitlab.com/` → `http://mirror.internal/gitlab/`. Messages still name the URL
/// as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlRewrite {
    pub from: String,
    pub to: String,
}

impl UrlRewrite {
    /// `FROM=TO` pairs separated by white space (`GANTRY_REMOTE_INCLUDE_MIRROR`); `None`
    /// with the offending item when one has no `=`.
    pub fn parse_list(s: &str) -> Result<Vec<UrlRewrite>, String> {
        s.split_whitespace()
            .map(|item| match item.split_once('=') {
                Some((from, to)) if !from.is_empty() && !to.is_empty() => Ok(UrlRewrite {
                    from: from.to_owned(),
                    to: to.to_owned(),
                }),
                _ => Err(format!("`{item}` is not FROM=TO")),
            })
            .collect()
    }
}

/// A repository `include:project` can read: a project of the server (or the checkout
/// `gantry run`/`gantry lint` work in).
#[derive(Clone, Debug)]
pub struct ProjectRepo {
    /// Full path, `group/sub/name`.
    pub path: String,
    /// Its git directory (a bare mirror or a checkout's `.git`).
    pub git_dir: PathBuf,
    /// The branch read when an include names no `ref`.
    pub default_branch: String,
    /// Fetch the mirror from this remote before the first read; `None` when it is
    /// current (or used in place).
    pub sync_from: Option<String>,
}

/// `(project path lower-cased, ref)` → its commit, `None` when there is no such ref.
type Commits = HashMap<(String, Option<String>), Option<String>>;

/// Remote includes already fetched, by URL as written, shared by the compilations that
/// hold a clone: a URL is fetched once for all of them, and all of them see the text (or
/// the error) that one fetch gave. For one short-lived command (`gantry run`), not for a
/// server, which fetches anew for every pipeline as GitLab does.
#[derive(Clone, Debug, Default)]
pub struct RemoteFetches(Arc<Mutex<HashMap<String, Result<String, RemoteError>>>>);

impl RemoteFetches {
    fn get(&self, url: &str) -> Option<Result<String, RemoteError>> {
        self.0.lock().ok()?.get(url).cloned()
    }

    fn insert(&self, url: &str, fetched: &Result<String, RemoteError>) {
        if let Ok(mut map) = self.0.lock() {
            map.insert(url.to_owned(), fetched.clone());
        }
    }

    /// How many URLs were fetched.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where `include:remote` and `include:project` look; built per compilation.
#[derive(Debug, Default)]
pub struct IncludeSources {
    projects: Vec<ProjectRepo>,
    cache: Option<IncludeCache>,
    rewrites: Vec<UrlRewrite>,
    /// `(project, ref)` → commit, so every file of one project and ref comes from one
    /// commit; `None` = no such ref.
    commits: Mutex<Commits>,
    /// Remote includes fetched by earlier compilations of the same command.
    fetched: Option<RemoteFetches>,
}

impl IncludeSources {
    pub fn new(
        projects: Vec<ProjectRepo>,
        cache: Option<IncludeCache>,
        rewrites: Vec<UrlRewrite>,
    ) -> Self {
        IncludeSources {
            projects,
            cache,
            rewrites,
            commits: Mutex::default(),
            fetched: None,
        }
    }

    /// Fetch each remote URL once for every compilation sharing `fetched`.
    pub fn sharing(mut self, fetched: Option<RemoteFetches>) -> Self {
        self.fetched = fetched;
        self
    }

    fn project(&self, path: &str) -> Option<&ProjectRepo> {
        self.projects
            .iter()
            .find(|p| p.path.eq_ignore_ascii_case(path))
    }

    /// The commit of `ref_name` in a held project (synced first if needed).
    fn commit(
        &self,
        repo: &ProjectRepo,
        ref_name: Option<&str>,
    ) -> Result<Option<String>, ProjectError> {
        let key = (repo.path.to_lowercase(), ref_name.map(str::to_owned));
        if let Some(found) = self
            .commits
            .lock()
            .map_err(|_| ProjectError::Io("lock poisoned".into()))?
            .get(&key)
        {
            return Ok(found.clone());
        }
        if let Some(remote) = &repo.sync_from {
            let mirror = Mirror::new(repo.git_dir.clone());
            let synced =
                block_on_side(async { mirror.sync(remote).await.map_err(|e| e.to_string()) })
                    .and_then(|r| r);
            // A fetch racing another one (a pipeline of that project being created) may
            // fail on git's ref locks: the mirror as it is then serves.
            if let Err(e) = synced {
                if !repo.git_dir.join("HEAD").is_file() {
                    return Err(ProjectError::Io(format!(
                        "update the repository of {}: {e}",
                        repo.path
                    )));
                }
            }
        }
        let name = match ref_name {
            Some(r) if r.is_empty() || r.starts_with('-') || r.contains("..") => None,
            Some(r) => Some(r.to_owned()),
            None => Some(format!("refs/heads/{}", repo.default_branch)),
        };
        let sha = match name {
            Some(name) => rev_parse(&repo.git_dir, &name)?,
            None => None,
        };
        if let Ok(mut commits) = self.commits.lock() {
            commits.insert(key, sha.clone());
        }
        Ok(sha)
    }

    /// `<cache>/<host>/<project>/<ref or HEAD>`, when that is a safe path.
    fn cached_project_dir(
        &self,
        project: &str,
        ref_name: Option<&str>,
    ) -> Option<(PathBuf, PathBuf)> {
        let cache = self.cache.as_ref()?;
        let ref_dir = ref_name.unwrap_or("HEAD");
        if !safe_relative(project) || !safe_relative(ref_dir) || !safe_relative(&cache.host) {
            return None;
        }
        let project_dir = cache.dir.join(&cache.host).join(project);
        let ref_dir = project_dir.join(ref_dir);
        Some((project_dir, ref_dir))
    }

    /// The cached copy of a remote URL: `<cache>/<host>[:<port>]/<path>` (no query).
    fn cached_remote(&self, url: &str) -> Option<PathBuf> {
        let cache = self.cache.as_ref()?;
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))?;
        if rest.contains(['?', '#']) {
            return None;
        }
        let (host, path) = rest.split_once('/')?;
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        (safe_relative(host) && safe_relative(path)).then(|| cache.dir.join(host).join(path))
    }

    /// The URL a remote include is fetched from (after [`UrlRewrite`]s).
    fn fetch_url(&self, url: &str) -> String {
        for r in &self.rewrites {
            if let Some(rest) = url.strip_prefix(&r.from) {
                return format!("{}{rest}", r.to);
            }
        }
        url.to_owned()
    }
}

/// `https://host[:port]/` of a URL (the prefix a mirror rewrite replaces).
fn url_origin(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            format!("{scheme}://{host}/")
        }
        None => url.to_owned(),
    }
}

/// A relative path of plain components (no `.`, `..`, empty or absolute parts).
fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && p.split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\\'))
}

fn rev_parse(git_dir: &Path, name: &str) -> Result<Option<String>, ProjectError> {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{name}^{{commit}}"),
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ProjectError::Io(format!("run git: {e}")))?;
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    Ok((out.status.success() && !sha.is_empty()).then_some(sha))
}

fn read_cached(path: &Path) -> Result<Option<String>, String> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| format!("{} is not valid UTF-8", path.display())),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A [`Loader`] whose project files come from `files` and whose remote and other-project
/// files come from `sources`.
pub struct IncludeLoader<'a> {
    pub files: &'a dyn Loader,
    pub sources: &'a IncludeSources,
}

impl Loader for IncludeLoader<'_> {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        self.files.read(path)
    }

    fn artifact(&self, job: &str, path: &str) -> Result<String, gantry_pipeline::ArtifactError> {
        self.files.artifact(job, path)
    }

    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        self.files.files()
    }

    fn changed_since(
        &self,
        compare_to: &str,
    ) -> Result<Vec<String>, gantry_pipeline::CompareError> {
        self.files.changed_since(compare_to)
    }

    fn remote(&self, url: &str) -> Result<String, RemoteError> {
        if let Some(path) = self.sources.cached_remote(url) {
            match read_cached(&path) {
                Ok(Some(text)) if text.len() as u64 > REMOTE_MAX_BYTES => {
                    return Err(RemoteError::TooLarge(REMOTE_MAX_BYTES));
                }
                Ok(Some(text)) => return Ok(text),
                Ok(None) => {}
                Err(_) => return Err(RemoteError::NotText),
            }
        }
        if let Some(fetched) = self.sources.fetched.as_ref().and_then(|f| f.get(url)) {
            return fetched;
        }
        let target = self.sources.fetch_url(url);
        let fetched = block_on_side(fetch_remote(&target, RemoteLimits::default()))
            .unwrap_or_else(|e| Err(RemoteError::Http(e)));
        if let Some(memo) = &self.sources.fetched {
            memo.insert(url, &fetched);
        }
        fetched
    }

    fn template_url(&self, name: &str) -> Option<String> {
        Some(format!("{GITLAB_TEMPLATES_URL}{name}"))
    }

    fn remote_hint(&self, url: &str) -> Option<String> {
        let target = self.sources.fetch_url(url);
        let origin = url_origin(url);
        if target != url {
            let copy = match self.sources.cached_remote(url) {
                Some(path) => format!(
                    "or save it as {} (the offline include cache)",
                    path.display()
                ),
                None => {
                    "or keep a copy in the offline include cache (GANTRY_INCLUDE_CACHE)".to_owned()
                }
            };
            return Some(format!(
                "it was fetched from {target}, the mirror GANTRY_REMOTE_INCLUDE_MIRROR names for {origin}: check the mirror, {copy}"
            ));
        }
        let mirror = format!(
            "or fetch it from a mirror: GANTRY_REMOTE_INCLUDE_MIRROR='{origin}=http://mirror.example/'"
        );
        Some(match self.sources.cached_remote(url) {
            Some(path) => format!(
                "to read it offline, save it as {} (the offline include cache), {mirror}",
                path.display()
            ),
            None => format!(
                "to read it offline, start `gantry server` with GANTRY_INCLUDE_CACHE=DIR holding it as DIR/{}, {mirror}",
                url.split_once("://").map_or(url, |(_, rest)| rest)
            ),
        })
    }

    fn project_hint(&self, project: &str, ref_name: Option<&str>, path: &str) -> Option<String> {
        if self.sources.project(project).is_some() {
            // A project of the server (or the checkout itself): its repository answered.
            return None;
        }
        Some(match self.sources.cached_project_dir(project, ref_name) {
            Some((_, ref_dir)) => format!(
                "to read it offline, save it as {} (the offline include cache: <host>/<project>/<ref or HEAD>/<file>)",
                ref_dir.join(path).display()
            ),
            None => format!(
                "create the project on this server (`gantry project create {project} --repo URL`), or start `gantry server` with GANTRY_INCLUDE_CACHE=DIR holding the file as DIR/<server host>/{project}/{}/{path}",
                ref_name.unwrap_or("HEAD")
            ),
        })
    }

    fn reads_projects(&self) -> bool {
        true
    }

    fn project_commit(&self, project: &str, ref_name: Option<&str>) -> Option<String> {
        let repo = self.sources.project(project)?;
        self.sources.commit(repo, ref_name).ok().flatten()
    }

    fn project_file(
        &self,
        project: &str,
        ref_name: Option<&str>,
        path: &str,
    ) -> Result<Option<String>, ProjectError> {
        if let Some(repo) = self.sources.project(project) {
            let Some(sha) = self.sources.commit(repo, ref_name)? else {
                return Err(ProjectError::NoRef);
            };
            let loader = CommitLoader::new(repo.git_dir.clone(), sha);
            return loader
                .read(path)
                .map_err(|e| ProjectError::Io(e.to_string()));
        }
        let Some((project_dir, ref_dir)) = self.sources.cached_project_dir(project, ref_name)
        else {
            return Err(ProjectError::NotFound);
        };
        if !project_dir.is_dir() {
            return Err(ProjectError::NotFound);
        }
        if !ref_dir.is_dir() {
            return Err(ProjectError::NoRef);
        }
        read_cached(&ref_dir.join(path)).map_err(ProjectError::Io)
    }

    fn project_files(
        &self,
        project: &str,
        ref_name: Option<&str>,
    ) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        if let Some(repo) = self.sources.project(project) {
            return match self.sources.commit(repo, ref_name) {
                Ok(Some(sha)) => CommitLoader::new(repo.git_dir.clone(), sha).files(),
                // No such ref: the include's own read says so.
                _ => Ok(Vec::new()),
            };
        }
        let Some((_, ref_dir)) = self.sources.cached_project_dir(project, ref_name) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        list_files(&ref_dir, "", &mut out);
        Ok(out)
    }
}

/// Every file under `dir`, as `/`-separated paths relative to it (symbolic links are not
/// followed).
fn list_files(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        match entry.file_type() {
            Ok(t) if t.is_dir() => list_files(&entry.path(), &rel, out),
            Ok(t) if t.is_file() => out.push(rel),
            _ => {}
        }
    }
}

/// GET `url` with GitLab's limits: the body as text, or why not.
pub async fn fetch_remote(url: &str, limits: RemoteLimits) -> Result<String, RemoteError> {
    let max_bytes = limits.max_bytes;
    let client = reqwest::Client::builder()
        .connect_timeout(limits.connect_timeout)
        .timeout(limits.timeout)
        .redirect(reqwest::redirect::Policy::limited(10))
        .build()
        .map_err(|e| RemoteError::Http(e.to_string()))?;
    let mut response = client.get(url).send().await.map_err(classify)?;
    let status = response.status();
    if status.as_u16() >= 400 {
        return Err(RemoteError::Status(status.as_u16()));
    }
    if response.content_length().is_some_and(|n| n > max_bytes) {
        return Err(RemoteError::TooLarge(max_bytes));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(classify)? {
        if (body.len() + chunk.len()) as u64 > max_bytes {
            return Err(RemoteError::TooLarge(max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    String::from_utf8(body).map_err(|_| RemoteError::NotText)
}

/// A reqwest error as GitLab tells them apart: timeout, socket (connecting), other HTTP.
fn classify(e: reqwest::Error) -> RemoteError {
    let detail = root_cause(&e);
    if e.is_timeout() {
        RemoteError::Timeout
    } else if e.is_connect() {
        RemoteError::Socket(detail)
    } else {
        RemoteError::Http(detail)
    }
}

/// The innermost error's text (`dns error: …`, `Connection refused (os error 111)`).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// Run `fut` to completion on a helper thread with its own current-thread runtime, from
/// any context (inside or outside a runtime, blocking allowed or not). `Err` when the
/// runtime cannot be built or the thread panicked.
pub fn block_on_side<F>(fut: F) -> Result<F::Output, String>
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map(|rt| rt.block_on(fut))
                .map_err(|e| format!("start a runtime: {e}"))
        })
        .join()
        .unwrap_or_else(|_| Err("the fetching thread panicked".to_owned()))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn short() -> RemoteLimits {
        RemoteLimits {
            connect_timeout: Duration::from_millis(500),
            timeout: Duration::from_millis(500),
            max_bytes: 64,
        }
    }

    /// A loopback server that answers every connection with `answer` after `delay`.
    async fn serve(answer: &'static [u8], delay: Duration) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = conn.read(&mut buf).await;
                    tokio::time::sleep(delay).await;
                    let _ = conn.write_all(answer).await;
                });
            }
        });
        format!("http://{addr}/ci.yml")
    }

    struct NoFiles;
    impl Loader for NoFiles {
        fn read(&self, _: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
            Ok(None)
        }
        fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
            Ok(Vec::new())
        }
    }

    /// A server without an include cache names the setting that makes one, and the
    /// mirror setting for the URL's host; a held project needs no hint.
    #[test]
    fn hints_of_a_server_without_an_include_cache() {
        let own = ProjectRepo {
            path: "acme/app".into(),
            git_dir: PathBuf::from("/nonexistent"),
            default_branch: "main".into(),
            sync_from: None,
        };
        let sources = IncludeSources::new(vec![own], None, Vec::new());
        let loader = IncludeLoader {
            files: &NoFiles,
            sources: &sources,
        };
        assert_eq!(
            loader
                .remote_hint("https://example.com:8443/ci/jobs.yml")
                .as_deref(),
            Some(
                "to read it offline, start `gantry server` with GANTRY_INCLUDE_CACHE=DIR holding it as DIR/example.com:8443/ci/jobs.yml, or fetch it from a mirror: GANTRY_REMOTE_INCLUDE_MIRROR='https://example.com:8443/=http://mirror.example/'"
            )
        );
        assert_eq!(
            loader
                .project_hint("group/templates", Some("v1"), "build.yml")
                .as_deref(),
            Some(
                "create the project on this server (`gantry project create group/templates --repo URL`), or start `gantry server` with GANTRY_INCLUDE_CACHE=DIR holding the file as DIR/<server host>/group/templates/v1/build.yml"
            )
        );
        assert_eq!(loader.project_hint("ACME/app", None, "x.yml"), None);
        assert_eq!(
            url_origin("http://h.example/a/b.yml?x=1"),
            "http://h.example/"
        );
    }

    #[tokio::test]
    async fn shared_fetches_get_each_url_once_for_every_compilation() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/ci.yml", listener.local_addr().unwrap());
        let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = conn.read(&mut buf).await;
                    let body = format!("n: {n}\n");
                    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                    let _ = conn.write_all(format!("{head}{body}").as_bytes()).await;
                });
            }
        });
        let fetch = move |fetched: Option<RemoteFetches>| {
            let url = url.clone();
            tokio::task::spawn_blocking(move || {
                let sources = IncludeSources::new(Vec::new(), None, Vec::new()).sharing(fetched);
                let loader = IncludeLoader {
                    files: &NoFiles,
                    sources: &sources,
                };
                loader.remote(&url)
            })
        };
        let shared = RemoteFetches::default();
        assert_eq!(
            fetch(Some(shared.clone())).await.unwrap(),
            Ok("n: 1\n".to_owned())
        );
        // A second compilation sharing them sees the first fetch's text, without a request.
        assert_eq!(
            fetch(Some(shared.clone())).await.unwrap(),
            Ok("n: 1\n".to_owned())
        );
        assert_eq!(shared.len(), 1);
        // Without sharing (a server), every compilation fetches.
        assert_eq!(fetch(None).await.unwrap(), Ok("n: 2\n".to_owned()));
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn fetch_failures_are_told_apart_as_gitlab_does() {
        let ok = serve(
            b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\na: {}\n",
            Duration::ZERO,
        )
        .await;
        assert_eq!(fetch_remote(&ok, short()).await, Ok("a: {}\n".to_owned()));
        let missing = serve(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
            Duration::ZERO,
        )
        .await;
        assert_eq!(
            fetch_remote(&missing, short()).await,
            Err(RemoteError::Status(404))
        );
        let slow = serve(
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(
            fetch_remote(&slow, short()).await,
            Err(RemoteError::Timeout)
        );
        // Announced too big, and too big without a length (read until the limit).
        let big = serve(
            b"HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n",
            Duration::ZERO,
        )
        .await;
        assert_eq!(
            fetch_remote(&big, short()).await,
            Err(RemoteError::TooLarge(64))
        );
        let chunked = serve(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n0123456789012345678901234567890123456789012345678901234567890123456789",
            Duration::ZERO,
        )
        .await;
        assert_eq!(
            fetch_remote(&chunked, short()).await,
            Err(RemoteError::TooLarge(64))
        );
        let binary = serve(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n\xff\xfe",
            Duration::ZERO,
        )
        .await;
        assert_eq!(
            fetch_remote(&binary, short()).await,
            Err(RemoteError::NotText)
        );
        // Nothing listens on port 9: refused.
        let refused = fetch_remote("http://127.0.0.1:9/ci.yml", short()).await;
        assert!(
            matches!(refused, Err(RemoteError::Socket(_))),
            "{refused:?}"
        );
    }

    #[test]
    fn rewrites_and_cache_paths() {
        let rewrites =
            UrlRewrite::parse_list("https://a.example/=http://127.0.0.1:1/m/ x=y").unwrap();
        assert!(UrlRewrite::parse_list("no-equals").is_err());
        let dir = PathBuf::from("/c");
        let s = IncludeSources::new(
            Vec::new(),
            Some(IncludeCache {
                dir: dir.clone(),
                host: "gitlab.com".into(),
            }),
            rewrites,
        );
        assert_eq!(
            s.fetch_url("https://a.example/g/p/ci.yml"),
            "http://127.0.0.1:1/m/g/p/ci.yml"
        );
        assert_eq!(
            s.fetch_url("https://b.example/ci.yml"),
            "https://b.example/ci.yml"
        );
        assert_eq!(
            s.cached_remote("https://h.example:8443/a/b.yml"),
            Some(dir.join("h.example:8443/a/b.yml"))
        );
        // Nothing outside the cache, no query strings.
        assert_eq!(s.cached_remote("https://h.example/a/../../b.yml"), None);
        assert_eq!(s.cached_remote("https://h.example/a.yml?x=1"), None);
        assert_eq!(
            s.cached_project_dir("g/p", None),
            Some((dir.join("gitlab.com/g/p"), dir.join("gitlab.com/g/p/HEAD")))
        );
        assert_eq!(s.cached_project_dir("g/p", Some("../x")), None);
    }
}
