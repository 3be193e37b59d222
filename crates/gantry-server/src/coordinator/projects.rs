//! Projects: their rows and settings (GitLab's project API: create, change, delete),
//! their names and paths (`namespace/name`, the default namespace), the views users get.
//! A project's mirror is the `Sources` service's, its kept row the `Facts` service's
//! (forgotten here when it changes).

use std::path::PathBuf;

use gantry_store::NewProject;

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::time::now_ms;
use super::views::{Namespace, Project};

/// Namespace of projects whose name has no `/`.
pub(crate) const DEFAULT_NAMESPACE: &str = "gantry";
/// Default job timeout of a new project (GitLab's default: 60 minutes).
const DEFAULT_PROJECT_TIMEOUT: i64 = 3600;

/// `(namespace, path)` of a project name: `acme/widget` → (`acme`, `widget`);
/// `widget` → (`gantry`, `widget`).
pub(crate) fn project_path(name: &str) -> (String, String) {
    match name.rsplit_once('/') {
        Some((ns, path)) => (ns.to_owned(), path.to_owned()),
        None => (DEFAULT_NAMESPACE.to_owned(), name.to_owned()),
    }
}

/// The stored name of the project `path` in the group `group` (a full path): `path`
/// alone in the default namespace, else `group/path` (the inverse of `project_path`).
pub fn project_name_in(group: &str, path: &str) -> String {
    if group == DEFAULT_NAMESPACE {
        path.to_owned()
    } else {
        format!("{group}/{path}")
    }
}

/// Group `ns` and the groups above it, outermost first: `a/b` → `a`, `a/b`.
fn ns_chain(ns: &str) -> impl Iterator<Item = &str> {
    ns.match_indices('/')
        .map(move |(i, _)| &ns[..i])
        .chain(std::iter::once(ns))
}

pub(crate) fn full_path(name: &str) -> String {
    let (ns, path) = project_path(name);
    format!("{ns}/{path}")
}

/// Whether the project named `name` is under the group whose full path is `group` (its
/// [`full_path`] starts with `group/`), without building that path: the queue asks it of
/// every held job a group runner's pick-up looks at.
pub(crate) fn under_group(name: &str, group: &str) -> bool {
    let namespace = name
        .rsplit_once('/')
        .map_or(DEFAULT_NAMESPACE, |(ns, _)| ns);
    namespace
        .strip_prefix(group)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

fn valid_project_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('/')
        && !name.ends_with('/')
        && !name.ends_with(".git")
        && name.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && !seg.starts_with('-')
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// A local path (not a URL nor `host:path` scp syntax).
pub(crate) fn is_local_path(repo: &str) -> bool {
    if repo.contains("://") {
        return false;
    }
    match repo.split_once(':') {
        // `C:\…` style or a plain path with a colon after a slash
        Some((before, _)) => before.contains('/') || before.len() == 1,
        None => true,
    }
}

/// Settings of a project to change ([`Coordinator::update_project`]); `None` leaves one
/// as it is.
#[derive(Clone, Debug, Default)]
pub struct ProjectSettings {
    pub default_branch: Option<String>,
    /// Empty: back to `.gitlab-ci.yml`.
    pub ci_config_path: Option<String>,
    /// The default job timeout, seconds.
    pub build_timeout: Option<i64>,
    pub keep_latest_artifact: Option<bool>,
    /// `fetch` or `clone`: what runners do without `GIT_STRATEGY`.
    pub build_git_strategy: Option<String>,
    /// The project's `GIT_DEPTH` (0 to 1000); `Some(None)` unsets it.
    pub ci_default_git_depth: Option<Option<i64>>,
    /// Auto-cancel redundant pipelines (`workflow:auto_cancel:on_new_commit`).
    pub auto_cancel_pending_pipelines: Option<bool>,
    /// Cache keys of protected and other refs kept apart.
    pub ci_separated_caches: Option<bool>,
    /// Outdated deployment jobs fail instead of deploying.
    pub ci_forward_deployment_enabled: Option<bool>,
}

/// GitLab's bounds of a project's default clone depth.
const MAX_GIT_DEPTH: i64 = 1000;

/// GitLab's bounds of a project's job timeout: at least 10 minutes, under a month
/// (Rails' `1.month`).
const MIN_BUILD_TIMEOUT: i64 = 600;
const MAX_BUILD_TIMEOUT: i64 = 2_629_746;

/// A project's CI configuration path: relative to the repository root, `.gitlab-ci.yml`
/// when not given or empty.
fn config_path(path: Option<&str>) -> std::result::Result<String, String> {
    match path {
        None | Some("") => Ok(".gitlab-ci.yml".to_owned()),
        Some(path) if path.starts_with('/') || path.split('/').any(|part| part == "..") => Err(
            format!("the CI configuration path `{path}` must be relative to the repository root"),
        ),
        Some(path) if path.len() > 255 => Err(format!(
            "the CI configuration path is {} bytes long; at most 255 are allowed",
            path.len()
        )),
        Some(path) => Ok(path.to_owned()),
    }
}

/// The default branch of a project to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum DefaultBranch {
    /// The repository's `HEAD` (`main` when it has none).
    #[default]
    Head,
    /// This branch, which must be one of the repository's when it has branches (a
    /// repository without any may get its first branch pushed later).
    Branch(String),
    /// This branch, not checked: the repository holds only some of the project's refs
    /// (`gantry run`'s snapshot of one ref).
    Declared(String),
}

/// A project to create.
#[derive(Clone, Debug, Default)]
pub struct ProjectRequest {
    /// `name` or `namespace/name`.
    pub name: String,
    /// A local path or a URL git can fetch.
    pub repo: String,
    /// The default branch.
    pub default_branch: DefaultBranch,
    /// The configuration file's path in the repository; `.gitlab-ci.yml` when `None`.
    pub ci_config_path: Option<String>,
}

impl Coordinator {
    /// The bare repository runners clone for `project` (`namespace/name`, with or without
    /// `.git`, or just the name). Serve it over smart HTTP (`git http-backend`). An
    /// unknown project gives a path that does not exist.
    pub async fn git_repo_path(&self, project: &str) -> PathBuf {
        match self.project_by_path(project).await {
            Ok(p) => self.sources().mirror(p.id).path,
            Err(_) => self
                .inner
                .cfg
                .data_dir
                .join("repos")
                .join("unknown-project.git"),
        }
    }

    /// A project by its path (`gantry/demo`, `gantry/demo.git`, `acme/widget`) or name.
    pub async fn project_by_path(
        &self,
        path: &str,
    ) -> std::result::Result<Project, CoordinatorError> {
        let path = path.trim_matches('/');
        let path = path.strip_suffix(".git").unwrap_or(path);
        match self.project_by_name(path).await {
            Err(CoordinatorError::NotFound(_)) => {
                let short = path
                    .strip_prefix(&format!("{DEFAULT_NAMESPACE}/"))
                    .filter(|s| !s.contains('/'));
                match short {
                    Some(name) => self.project_by_name(name).await,
                    None => Err(CoordinatorError::NotFound("project")),
                }
            }
            other => other,
        }
    }

    pub(crate) async fn project_view(&self, p: &gantry_store::Project) -> Result<Project> {
        let full = full_path(&p.name);
        let base = self.external_url();
        let (ns, path) = project_path(&p.name);
        // GitLab's `name_with_namespace`: each group's name from the top, then its own.
        let mut names = Vec::new();
        for group in ns_chain(&ns) {
            names.push(self.facts().group_name(group).await?);
        }
        let name_with_namespace = format!("{} / {path}", names.join(" / "));
        let namespace = Namespace {
            id: self.facts().group_id(&ns).await?,
            name: names.pop().unwrap_or_default(),
            path: ns.rsplit('/').next().unwrap_or(&ns).to_owned(),
            kind: "group",
            web_url: format!("{base}/groups/{ns}"),
            full_path: ns,
        };
        Ok(Project {
            namespace,
            id: p.id,
            // GitLab's name is the project's own (no namespace): its path here.
            name: path.clone(),
            name_with_namespace,
            path,
            path_with_namespace: full.clone(),
            default_branch: p.default_branch.clone(),
            http_url_to_repo: format!("{base}/{full}.git"),
            web_url: format!("{base}/{full}"),
            repo_url: p.repo_url.clone(),
            build_timeout: p.timeout_secs,
            ci_config_path: p.ci_config_path.clone(),
            keep_latest_artifact: p.keep_latest_artifact,
            build_git_strategy: p.build_git_strategy.clone(),
            ci_default_git_depth: p.ci_default_git_depth,
            auto_cancel_pending_pipelines: if p.auto_cancel_pending_pipelines {
                "enabled"
            } else {
                "disabled"
            },
            ci_separated_caches: p.ci_separated_caches,
            ci_forward_deployment_enabled: p.ci_forward_deployment_enabled,
            created_at: p.created_at,
        })
    }

    /// Create a project that mirrors `repo` (a local path or a URL git can fetch). The
    /// default branch is read with `git ls-remote --symref REPO HEAD`.
    pub async fn create_project(
        &self,
        name: &str,
        repo: &str,
    ) -> std::result::Result<Project, CoordinatorError> {
        self.create_project_with(&ProjectRequest {
            name: name.to_owned(),
            repo: repo.to_owned(),
            ..ProjectRequest::default()
        })
        .await
    }

    /// Create a project with settings beyond its name and repository.
    pub async fn create_project_with(
        &self,
        request: &ProjectRequest,
    ) -> std::result::Result<Project, CoordinatorError> {
        let (name, repo) = (request.name.as_str(), request.repo.as_str());
        if !valid_project_name(name) {
            return Err(CoordinatorError::Invalid(format!(
                "create project `{name}`: a name is 1-255 characters of letters, digits, `.`, `_`, `-`, in `/`-separated parts (not ending in `.git`)"
            )));
        }
        let ci_config_path = config_path(request.ci_config_path.as_deref())
            .map_err(|e| CoordinatorError::Invalid(format!("create project `{name}`: {e}")))?;
        let repo_url = if is_local_path(repo) {
            let abs = std::fs::canonicalize(repo).map_err(|e| {
                CoordinatorError::Invalid(format!(
                    "create project `{name}`: the repository {repo} cannot be read: {e}"
                ))
            })?;
            abs.to_string_lossy().into_owned()
        } else {
            repo.to_owned()
        };
        let unreadable = |e: CoordinatorError| {
            CoordinatorError::Invalid(format!(
                "create project `{name}`: {repo} is not a git repository git can read ({e})"
            ))
        };
        let default_branch = match &request.default_branch {
            DefaultBranch::Declared(branch) => branch.clone(),
            DefaultBranch::Head => super::git::default_branch(&repo_url)
                .await
                .map_err(unreadable)?,
            DefaultBranch::Branch(branch) => {
                let refs = super::git::list_refs(&repo_url).await.map_err(unreadable)?;
                let branches: Vec<&str> = refs
                    .iter()
                    .filter_map(|(r, _)| r.strip_prefix("refs/heads/"))
                    .collect();
                if !branches.is_empty() && !branches.contains(&branch.as_str()) {
                    return Err(CoordinatorError::Invalid(format!(
                        "create project `{name}`: the default branch `{branch}` is no branch of {repo}"
                    )));
                }
                branch.clone()
            }
        };
        let p = self
            .inner
            .store
            .create_project(
                &NewProject {
                    name: name.to_owned(),
                    repo_url,
                    // GitLab's default branch protection: the default branch starts protected.
                    protected_branches: vec![default_branch.clone()],
                    default_branch,
                    timeout_secs: DEFAULT_PROJECT_TIMEOUT,
                    ci_config_path,
                },
                now_ms(),
            )
            .await?;
        // Pushes from now on create pipelines. Should the repository not answer now,
        // the first look records what it holds then.
        if let Err(e) = self.record_first_refs(&p).await {
            eprintln!("gantry: project {name}: could not record its branches and tags yet: {e}");
        }
        self.project_view(&p).await
    }

    /// Change a project's settings (GitLab's `PUT /projects/:id`): the default branch (a
    /// branch of its repository), the CI configuration path (empty: `.gitlab-ci.yml`), the
    /// default job timeout (10 minutes to under a month, as GitLab allows), whether new
    /// pipelines keep their latest artifacts, the git strategy and depth, auto-cancel,
    /// separated caches and forward deployments. What is not given stays; nothing changes
    /// when one setting is refused.
    pub async fn update_project(
        &self,
        id: i64,
        settings: &ProjectSettings,
    ) -> std::result::Result<Project, CoordinatorError> {
        let project = self.inner.store.project(id).await?;
        let name = &project.name;
        let invalid =
            |e: String| CoordinatorError::Invalid(format!("update project `{name}`: {e}"));
        let ci_config_path = match settings.ci_config_path.as_deref() {
            Some(path) => Some(config_path(Some(path)).map_err(invalid)?),
            None => None,
        };
        if let Some(secs) = settings.build_timeout
            && !(MIN_BUILD_TIMEOUT..MAX_BUILD_TIMEOUT).contains(&secs)
        {
            return Err(invalid(format!(
                "build_timeout needs to be between 10 minutes and 1 month ({MIN_BUILD_TIMEOUT} to {} seconds), not {secs}",
                MAX_BUILD_TIMEOUT - 1
            )));
        }
        if let Some(strategy) = &settings.build_git_strategy
            && !matches!(strategy.as_str(), "fetch" | "clone")
        {
            return Err(invalid(format!(
                "build_git_strategy does not have a valid value: give fetch or clone, not `{strategy}`"
            )));
        }
        if let Some(Some(depth)) = settings.ci_default_git_depth
            && !(0..=MAX_GIT_DEPTH).contains(&depth)
        {
            return Err(invalid(format!(
                "ci_default_git_depth must be between 0 and {MAX_GIT_DEPTH}, not {depth}"
            )));
        }
        if let Some(branch) = &settings.default_branch {
            let mirror = self.sources().sync_mirror(&project).await?;
            let found = match branch.as_str() {
                "" => None,
                b => mirror.resolve(&format!("refs/heads/{b}")).await?,
            };
            if found.is_none() {
                return Err(invalid(format!(
                    "the default branch `{branch}` is no branch of {}",
                    project.repo_url
                )));
            }
        }
        let p = self
            .inner
            .store
            .update_project(
                id,
                &gantry_store::ProjectChanges {
                    default_branch: settings.default_branch.clone(),
                    ci_config_path,
                    timeout_secs: settings.build_timeout,
                    keep_latest_artifact: settings.keep_latest_artifact,
                    build_git_strategy: settings.build_git_strategy.clone(),
                    ci_default_git_depth: settings.ci_default_git_depth,
                    auto_cancel_pending_pipelines: settings.auto_cancel_pending_pipelines,
                    ci_separated_caches: settings.ci_separated_caches,
                    ci_forward_deployment_enabled: settings.ci_forward_deployment_enabled,
                    ci_inbound_job_token_scope_enabled: None,
                },
            )
            .await?;
        self.facts().forget_project(id);
        self.project_view(&p).await
    }

    pub async fn project(&self, id: i64) -> std::result::Result<Project, CoordinatorError> {
        self.project_view(&self.inner.store.project(id).await?)
            .await
    }

    pub async fn project_by_name(
        &self,
        name: &str,
    ) -> std::result::Result<Project, CoordinatorError> {
        self.project_view(&self.inner.store.project_by_name(name).await?)
            .await
    }

    pub async fn projects(&self) -> std::result::Result<Vec<Project>, CoordinatorError> {
        let rows = self.inner.store.projects().await?;
        let mut out = Vec::with_capacity(rows.len());
        for p in &rows {
            out.push(self.project_view(p).await?);
        }
        Ok(out)
    }

    /// Deletes a project (GitLab's `DELETE /projects/:id`): its active pipelines are
    /// canceled first, then its rows go in one transaction (`Store::delete_project`), and
    /// after it their artifact blobs, archived logs, log files and the project's mirror.
    /// Pipelines of other projects that it triggered stay.
    pub async fn delete_project(&self, id: i64) -> std::result::Result<(), CoordinatorError> {
        self.inner.store.project(id).await?;
        for p in self.inner.store.active_pipelines_of(id).await? {
            self.cancel_pipeline(p.id).await?;
        }
        let pages = self.inner.store.pages_blob_keys(id).await?;
        let deleted = self.inner.store.delete_project(id).await;
        // Its project runners went with it.
        self.inner.runner_cache.forget_all();
        let deleted = deleted?;
        self.settings().forget_kept();
        for (key, why) in self.artifacts().blob_delete(pages).await? {
            eprintln!("gantry: the pages site {key} of deleted project {id} is left over: {why}");
        }
        self.facts().forget_project(id);
        let mirror = self.sources().mirror(id).path;
        if let Err(e) = tokio::fs::remove_dir_all(&mirror).await {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!(
                    "gantry: the mirror {} of deleted project {id} is left over: {e}",
                    mirror.display()
                );
            }
        }
        self.remove_files_of(deleted).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `under_group` answers as the full path would: a prefix of whole segments, the
    /// default namespace for a name without one.
    #[test]
    fn a_project_is_under_a_group_by_whole_segments_of_its_full_path() {
        let names = [
            "widget",
            "acme/widget",
            "acme/tools/widget",
            "acmeco/widget",
            "a/b",
        ];
        let groups = [
            "gantry",
            "acme",
            "acme/tools",
            "acme/tool",
            "a",
            "a/b",
            "acme/widget",
        ];
        for name in names {
            for group in groups {
                let full = full_path(name);
                let expected = full
                    .strip_prefix(group)
                    .is_some_and(|rest| rest.starts_with('/'));
                assert_eq!(under_group(name, group), expected, "{name} under {group}");
            }
        }
        assert!(under_group("widget", "gantry"));
        assert!(under_group("acme/tools/widget", "acme"));
        assert!(!under_group("acmeco/widget", "acme"));
        assert!(!under_group("acme/widget", "acme/widget"));
    }
}
