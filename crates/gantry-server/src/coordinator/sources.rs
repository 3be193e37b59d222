//! The sources service: where a pipeline's files come from — each project's mirror
//! (`git.rs`: a bare repository under `data_dir/repos`, fetched from the project's
//! repository, serialized per project), the facts of its commits (message, author,
//! tag message: what predefined variables say), and where `include:project` and
//! `include:remote` look (`includes.rs`: every project's mirror, the include cache, URL
//! rewrites).
//!
//! It owns its state: the repositories' directory and per-project locks, the commit facts
//! read so far (a `Kept`, at most `MAX_KEPT`, dropped whole past it; a commit's facts never
//! change, so they are kept whatever their age), the include settings.
//! It calls git and the store's project rows, never the rest of the coordinator; the
//! coordinator reaches it through [`Coordinator::sources`]. Its errors are the git ones of
//! [`CoordinatorError`] (`Git`, `Io`) and the store's.
//!
//! [`CoordinatorError`]: super::CoordinatorError

use std::path::{Path, PathBuf};

use gantry_store::Store;

use super::error::Result;
use super::facts::Kept;
use super::git::{CommitInfo, Mirror, ResolvedRef};
use super::includes::{IncludeCache, IncludeSources, ProjectRepo, RemoteFetches, UrlRewrite};
use super::projects::{full_path, is_local_path};
use super::{Coordinator, STRIPES, stripe};

/// How a coordinator reads its projects' files: see the module docs.
pub struct Sources {
    store: Store,
    /// `data_dir/repos`: `<project id>.git` each.
    repos: PathBuf,
    /// One fetch at a time per project (striped).
    locks: Vec<tokio::sync::Mutex<()>>,
    /// A project whose repository is a local path is its own mirror (`gantry run`).
    in_place: bool,
    include_cache: Option<IncludeCache>,
    remote_include_rewrites: Vec<UrlRewrite>,
    /// Remote includes fetched once for every pipeline (`gantry run`).
    remote_fetches: Option<RemoteFetches>,
    /// Commit facts by `project:sha:ref`.
    commits: Kept<String, CommitInfo>,
}

impl Sources {
    pub(super) fn new(store: Store, cfg: &super::CoordinatorConfig) -> Self {
        Self {
            store,
            repos: cfg.data_dir.join("repos"),
            locks: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            in_place: cfg.local_repos_in_place(),
            include_cache: cfg.include_cache.clone(),
            remote_include_rewrites: cfg.remote_include_rewrites.clone(),
            remote_fetches: cfg.remote_fetches().cloned(),
            commits: Kept::default(),
        }
    }

    /// Project `project_id`'s mirror (it may not exist yet).
    pub(crate) fn mirror(&self, project_id: i64) -> Mirror {
        Mirror::new(self.repos.join(format!("{project_id}.git")))
    }

    /// Whether `repo_url` is used where it is, never fetched.
    fn used_in_place(&self, repo_url: &str) -> bool {
        self.in_place && is_local_path(repo_url)
    }

    /// Fetch the project's repository into its mirror (serialized per project).
    pub(crate) async fn sync_mirror(&self, project: &gantry_store::Project) -> Result<Mirror> {
        let mirror = self.mirror(project.id);
        let _g = self.locks[stripe(project.id)].lock().await;
        if self.used_in_place(&project.repo_url) {
            mirror.link_to(Path::new(&project.repo_url)).await?;
            return Ok(mirror);
        }
        mirror.sync(&project.repo_url).await?;
        let _ = mirror.set_head(&project.default_branch).await;
        Ok(mirror)
    }

    /// Where `include:project` and `include:remote` of a pipeline of `project` look: every
    /// project of the server (its mirror; the others are fetched before their first read),
    /// the include cache and URL rewrites of the configuration.
    pub(crate) async fn include_sources(
        &self,
        project: &gantry_store::Project,
    ) -> Result<IncludeSources> {
        let repos = self
            .store
            .projects()
            .await?
            .into_iter()
            .map(|p| {
                let in_place = self.used_in_place(&p.repo_url);
                ProjectRepo {
                    path: full_path(&p.name),
                    git_dir: if in_place {
                        PathBuf::from(&p.repo_url)
                    } else {
                        self.mirror(p.id).path
                    },
                    default_branch: p.default_branch.clone(),
                    sync_from: (p.id != project.id && !in_place).then(|| p.repo_url.clone()),
                }
            })
            .collect();
        Ok(IncludeSources::new(
            repos,
            self.include_cache.clone(),
            self.remote_include_rewrites.clone(),
        )
        .sharing(self.remote_fetches.clone()))
    }

    /// Commit facts for predefined variables (kept per commit; read with git on a miss;
    /// a commit git cannot read has empty facts).
    pub(crate) async fn commit_facts(&self, project_id: i64, r: &ResolvedRef) -> CommitInfo {
        let key = format!("{project_id}:{}:{}", r.sha, r.name);
        if let Some(c) = self.commits.get_any_age(&key) {
            return c;
        }
        let info = self
            .mirror(project_id)
            .commit_info(r)
            .await
            .unwrap_or_default();
        self.remember_commit(project_id, r, &info);
        info
    }

    /// Keeps what [`Sources::commit_facts`] answers for `r` (pipeline creation has read
    /// it already).
    pub(crate) fn remember_commit(&self, project_id: i64, r: &ResolvedRef, info: &CommitInfo) {
        let key = format!("{project_id}:{}:{}", r.sha, r.name);
        self.commits.keep(key, info.clone());
    }
}

impl Coordinator {
    /// The sources service (mirrors, commit facts, include sources).
    pub fn sources(&self) -> &Sources {
        &self.inner.sources
    }
}
