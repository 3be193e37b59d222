//! The pipeline facts service: what a pipeline is compiled and its jobs are run with,
//! besides its files and variables — the project's row and group, the pipeline's row, and
//! its predefined facts ([`PipelineInfo`]: ref, commit, who, where it comes from, its
//! merge request). Pipeline creation, the CI lint, downstream pipelines, releases and the
//! job payload all read these here, so a job's `CI_*` variables are the ones its
//! pipeline's `rules:` saw.
//!
//! It owns the rows it keeps (each [`Kept`]: at most [`MAX_KEPT`], trusted for
//! [`KEPT_TTL`] — another replica's change is seen within it; this process's own changes
//! at once, through `forget_*`): project rows, group ids (never change once given),
//! pipeline rows (only their fixed facts — ref, commit, variables — are read from them),
//! and each pipeline's merge request facts. It calls the store, and the `Settings`
//! (protected branches of a merge request) and `Sources` (commit facts) services its
//! callers pass; never the rest of the coordinator. Reached as `Coordinator::facts()`.
//!
//! Cost: a kept fact is a hash lookup under this service's own locks (none held across an
//! `await`); a job's payload reads its pipeline's merge request facts once per pipeline
//! (two indexed reads), not once per job.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gantry_pipeline::{
    ExternalPullRequestInfo, MergeRequestDiff, MergeRequestEventType, MergeRequestInfo,
    PipelineInfo, Source,
};
use gantry_store::{MergeRequest, MergeRequestLink, Store};

use super::error::{CoordinatorError, Result};
use super::git::{CommitInfo, ResolvedRef};
use super::merge_requests::{MAX_OPEN_MERGE_REQUESTS_REFS, event_type, is_pull_request};
use super::pages::PagesUrls;
use super::projects::{full_path, project_path};
use super::settings::Settings;
use super::sources::Sources;
use super::time::now_ms;
use super::{CoordinatorConfig, PipelineUser};

/// Longest a kept row is trusted (rows other processes may change).
pub(crate) const KEPT_TTL: Duration = Duration::from_secs(60);
/// Most entries a [`Kept`] holds; past it, it is emptied whole.
pub(crate) const MAX_KEPT: usize = 10_000;

/// Values kept for [`KEPT_TTL`], at most [`MAX_KEPT`] (emptied whole when full, so a
/// burst of new keys costs one reread each, never an eviction scan). Its own lock, held
/// for a lookup or an insertion only.
pub(crate) struct Kept<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> Default for Kept<K, V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> Kept<K, V> {
    fn entries(&self) -> MutexGuard<'_, HashMap<K, (Instant, V)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value of `key` when kept less than [`KEPT_TTL`] ago.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        self.entries()
            .get(key)
            .filter(|(at, _)| at.elapsed() < KEPT_TTL)
            .map(|(_, v)| v.clone())
    }

    /// The value of `key` however old (for what never changes once kept, or a best-effort
    /// answer).
    pub(crate) fn get_any_age(&self, key: &K) -> Option<V> {
        self.read_any_age(key, V::clone)
    }

    /// What `f` reads of the value of `key`, however old, without cloning the value.
    pub(crate) fn read_any_age<T>(&self, key: &K, f: impl FnOnce(&V) -> T) -> Option<T> {
        self.entries().get(key).map(|(_, v)| f(v))
    }

    pub(crate) fn keep(&self, key: K, value: V) {
        let mut entries = self.entries();
        if entries.len() >= MAX_KEPT && !entries.contains_key(&key) {
            entries.clear();
        }
        entries.insert(key, (Instant::now(), value));
    }

    pub(crate) fn forget(&self, key: &K) {
        self.entries().remove(key);
    }

    pub(crate) fn forget_all(&self) {
        self.entries().clear();
    }
}

/// What a pipeline's predefined variables take from merge requests (two reads of the
/// store): the merge request it runs for, with the ref name and kind that gives it, and
/// the open merge requests from its branch. The same for every job of the pipeline, so
/// kept per pipeline until a merge request of this process changes
/// ([`Facts::forget_merge_requests`]), or [`KEPT_TTL`] for another replica's change.
#[derive(Clone)]
struct MergeRequestPart {
    ref_name: String,
    is_tag: bool,
    merge_request: Option<MergeRequestInfo>,
    open_merge_requests: Vec<String>,
}

impl MergeRequestPart {
    fn of(info: &PipelineInfo) -> Self {
        Self {
            ref_name: info.ref_name.clone(),
            is_tag: info.is_tag,
            merge_request: info.merge_request.clone(),
            open_merge_requests: info.open_merge_requests.clone(),
        }
    }

    fn apply_to(&self, info: &mut PipelineInfo) {
        info.ref_name.clone_from(&self.ref_name);
        info.is_tag = self.is_tag;
        info.merge_request.clone_from(&self.merge_request);
        info.open_merge_requests
            .clone_from(&self.open_merge_requests);
    }
}

/// The pipeline facts service: see the module docs.
pub struct Facts {
    store: Store,
    /// `CI_SERVER_URL`: the external URL without a trailing `/`.
    server_url: String,
    /// Who pipelines are attributed to (`GITLAB_USER_*`).
    user: PipelineUser,
    /// `CI_REGISTRY`.
    registry: Option<String>,
    /// Where Pages sites are served: `CoordinatorConfig::pages_url`, else
    /// `<external URL>/-/pages`.
    pages_base: String,
    projects: Kept<i64, gantry_store::Project>,
    group_ids: Kept<String, i64>,
    /// The names of the groups made with `POST /groups`, by full path (one entry, key
    /// `()`): what a project's namespace is called.
    group_names: Kept<(), Arc<HashMap<String, String>>>,
    pipelines: Kept<i64, Arc<gantry_store::Pipeline>>,
    merge_requests: Kept<i64, Arc<MergeRequestPart>>,
}

impl Facts {
    pub(super) fn new(store: Store, cfg: &CoordinatorConfig) -> Self {
        let server_url = cfg.external_url.trim_end_matches('/').to_owned();
        let pages_base = match &cfg.pages_url {
            Some(u) => u.trim_end_matches('/').to_owned(),
            None => format!("{server_url}/-/pages"),
        };
        Self {
            store,
            server_url,
            user: cfg.user.clone(),
            registry: cfg.registry.clone(),
            pages_base,
            projects: Kept::default(),
            group_ids: Kept::default(),
            group_names: Kept::default(),
            pipelines: Kept::default(),
            merge_requests: Kept::default(),
        }
    }

    /// The Pages base URL (see [`Facts::new`]).
    pub(crate) fn pages_base(&self) -> &str {
        &self.pages_base
    }

    /// The URLs of project `name`'s site (or its `prefix` deployment).
    pub(crate) fn pages_urls(&self, project_name: &str, prefix: Option<&str>) -> PagesUrls {
        let base = &self.pages_base;
        let full = full_path(project_name);
        let url = match prefix.filter(|p| !p.is_empty()) {
            Some(p) => format!("{base}/{full}/{p}"),
            None => format!("{base}/{full}"),
        };
        let domain = base
            .split_once("://")
            .map_or(base.as_str(), |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        PagesUrls { url, domain }
    }

    /// `CI_PAGES_DOMAIN`, `CI_PAGES_HOSTNAME` and `CI_PAGES_URL` of a project (no
    /// prefix), as `rules:` see them at creation.
    pub(crate) fn pages_predefined(&self, project_name: &str) -> Vec<(String, String)> {
        let urls = self.pages_urls(project_name, None);
        vec![
            ("CI_PAGES_DOMAIN".to_owned(), urls.domain.clone()),
            ("CI_PAGES_HOSTNAME".to_owned(), urls.domain),
            ("CI_PAGES_URL".to_owned(), urls.url),
        ]
    }

    /// A project's row, kept.
    pub(crate) async fn project(&self, id: i64) -> Result<gantry_store::Project> {
        if let Some(p) = self.projects.get(&id) {
            return Ok(p);
        }
        let p = self.store.project(id).await?;
        self.projects.keep(id, p.clone());
        Ok(p)
    }

    /// The project's name as job matching reads it ([`gantry_store::QueuedJob::project_name`])
    /// when its row is kept (of any age: a project's name changes only by this
    /// process's `forget_project`); empty otherwise (waking then treats group runners
    /// as fitting).
    pub(crate) fn project_name(&self, id: i64) -> String {
        self.projects
            .read_any_age(&id, |p| p.name.clone())
            .unwrap_or_default()
    }

    /// A project changed (its settings, its job token scope) or is gone.
    pub(crate) fn forget_project(&self, id: i64) {
        self.projects.forget(&id);
    }

    /// The name of group `path`: the one it was made with (`POST /groups`), else its last
    /// path segment (a group that exists because a project is in it). The made groups'
    /// names are read once per [`KEPT_TTL`], not per call.
    pub(crate) async fn group_name(
        &self,
        path: &str,
    ) -> std::result::Result<String, CoordinatorError> {
        let names = match self.group_names.get(&()) {
            Some(names) => names,
            None => {
                let names: HashMap<String, String> = self
                    .store
                    .created_groups()
                    .await?
                    .into_iter()
                    .map(|g| (g.path, g.name))
                    .collect();
                let names = Arc::new(names);
                self.group_names.keep((), Arc::clone(&names));
                names
            }
        };
        Ok(names
            .get(path)
            .cloned()
            .unwrap_or_else(|| path.rsplit('/').next().unwrap_or(path).to_owned()))
    }

    /// A group was made or deleted here: its name is read again.
    pub(crate) fn forget_group_names(&self) {
        self.group_names.forget_all();
    }

    /// The id of group `path` (kept once read; given on first sight).
    pub(crate) async fn group_id(&self, path: &str) -> std::result::Result<i64, CoordinatorError> {
        let key = path.to_owned();
        if let Some(id) = self.group_ids.get_any_age(&key) {
            return Ok(id);
        }
        let ids = self
            .store
            .group_ids(std::slice::from_ref(&key), now_ms())
            .await?;
        let id = ids
            .first()
            .map(|(_, id)| *id)
            .ok_or(CoordinatorError::NotFound("group"))?;
        self.group_ids.keep(key, id);
        Ok(id)
    }

    /// A pipeline row for what never changes in it (ref, commit, variables, origin): its
    /// status and times are not to be trusted.
    pub(crate) async fn pipeline(&self, id: i64) -> Result<Arc<gantry_store::Pipeline>> {
        if let Some(p) = self.pipelines.get(&id) {
            return Ok(p);
        }
        let p = Arc::new(self.store.pipeline(id).await?);
        self.pipelines.keep(id, Arc::clone(&p));
        Ok(p)
    }

    /// A merge request of this process changed: its pipelines' predefined variables
    /// (title, labels, open merge requests) are read again.
    pub(crate) fn forget_merge_requests(&self) {
        self.merge_requests.forget_all();
    }

    /// The facts a pipeline of `project` at `r` is compiled and run with (its predefined
    /// variables) that need no read: one place for pipeline creation, the CI lint, and
    /// the payloads of the pipeline's jobs. [`Facts::complete_info`] and
    /// [`Facts::complete_merge_request_info`] add what the store holds.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn predefined_info(
        &self,
        project: &gantry_store::Project,
        r: &ResolvedRef,
        commit: CommitInfo,
        protected: bool,
        source: Source,
        before_sha: Option<String>,
        iid: u64,
    ) -> PipelineInfo {
        let (namespace, path) = project_path(&project.name);
        PipelineInfo {
            ref_name: r.name.clone(),
            is_tag: r.tag,
            source,
            sha: r.sha.clone(),
            before_sha,
            default_branch: project.default_branch.clone(),
            ref_protected: protected,
            commit_message: commit.message,
            commit_author: commit.author,
            commit_timestamp: commit.timestamp,
            tag_message: commit.tag_message,
            project_name: path,
            project_namespace: namespace,
            project_id: u64::try_from(project.id).unwrap_or(0),
            server_url: self.server_url.clone(),
            config_path: project.ci_config_path.clone(),
            user_login: self.user.login.clone(),
            user_name: self.user.name.clone(),
            user_email: self.user.email.clone(),
            user_id: self.user.id,
            pipeline_iid: iid,
            // From the store: `complete_merge_request_info`.
            merge_request: None,
            // From the store: `complete_info`.
            namespace_id: 0,
            schedule_description: None,
            upstream: None,
            registry: self.registry.clone(),
            open_merge_requests: Vec::new(),
            // From the store: `complete_info`.
            release_description: None,
        }
    }

    /// The facts of `info` that need the store: the project's group id, where the
    /// pipeline comes from — the trigger job of a downstream pipeline (`CI_UPSTREAM_*`),
    /// the schedule of a scheduled one (`CI_PIPELINE_SCHEDULE_DESCRIPTION`; none once
    /// the schedule is deleted) —, and a tag's release (`CI_RELEASE_DESCRIPTION`, read
    /// each time as GitLab reads it per job: a release a job made shows in the jobs after
    /// it). A fact that cannot be read is left out.
    pub(crate) async fn complete_info(
        &self,
        info: &mut PipelineInfo,
        project: &gantry_store::Project,
        parent_job_id: Option<i64>,
        schedule_id: Option<i64>,
    ) {
        let (namespace, _) = project_path(&project.name);
        if let Some(id) = self
            .group_id(&namespace)
            .await
            .ok()
            .and_then(|id| u64::try_from(id).ok())
        {
            info.namespace_id = id;
        }
        if let Some(job_id) = parent_job_id {
            if let Ok(job) = self.store.job(job_id).await {
                let id = |n: i64| u64::try_from(n).unwrap_or(0);
                info.upstream = Some(gantry_pipeline::Upstream {
                    pipeline_id: id(job.pipeline_id),
                    project_id: id(job.project_id),
                    job_id: id(job.id),
                });
            }
        }
        if let Some(schedule_id) = schedule_id {
            if let Ok(schedule) = self.store.pipeline_schedule(project.id, schedule_id).await {
                info.schedule_description = Some(schedule.description);
            }
        }
        if info.is_tag {
            if let Ok(release) = self.store.release(project.id, &info.ref_name).await {
                info.release_description = Some(gantry_pipeline::context::release_description(
                    &release.description,
                ));
            }
        }
    }

    /// Completes `info` with its merge request, when the pipeline has one (its ref name
    /// becomes the source branch's), and the open merge requests from its branch
    /// (`CI_OPEN_MERGE_REQUESTS`). A fact that cannot be read is left out.
    pub(crate) async fn complete_merge_request_info(
        &self,
        settings: &Settings,
        info: &mut PipelineInfo,
        project: &gantry_store::Project,
        merge_request: Option<(&MergeRequestLink, &MergeRequest)>,
    ) {
        let full = full_path(&project.name);
        if let Some((link, m)) = merge_request {
            let branch = |name: &str| ResolvedRef {
                name: name.to_owned(),
                tag: false,
                sha: String::new(),
            };
            let source_protected = settings
                .ref_protected(project.id, &branch(&m.source_branch))
                .await
                .unwrap_or(false);
            let target_protected = settings
                .ref_protected(project.id, &branch(&m.target_branch))
                .await
                .unwrap_or(false);
            let event = event_type(link);
            let merged = event != MergeRequestEventType::Detached;
            info.ref_name = m.source_branch.clone();
            info.is_tag = false;
            info.merge_request = Some(MergeRequestInfo {
                id: u64::try_from(m.id).unwrap_or(0),
                iid: u64::try_from(m.iid).unwrap_or(0),
                title: m.title.clone(),
                description: m.description.clone(),
                source_branch: m.source_branch.clone(),
                target_branch: m.target_branch.clone(),
                source_branch_protected: source_protected,
                target_branch_protected: target_protected,
                event_type: event,
                source_sha: merged.then(|| link.source_sha.clone()),
                target_sha: merged.then(|| link.target_sha.clone()),
                diff: link.base_sha.clone().map(|base_sha| MergeRequestDiff {
                    id: u64::try_from(m.id).unwrap_or(0),
                    base_sha,
                }),
                labels: m.labels.clone(),
                assignees: Vec::new(),
                milestone: None,
                squash_on_merge: false,
                draft: m.draft,
                external: is_pull_request(&m.forge).then(|| ExternalPullRequestInfo {
                    iid: u64::try_from(m.iid).unwrap_or(0),
                    source_repository: m.source_repository.clone(),
                    target_repository: m.target_repository.clone(),
                    source_sha: link.source_sha.clone(),
                    target_sha: link.target_sha.clone(),
                }),
            });
        }
        if info.is_tag {
            return;
        }
        if let Ok(open) = self
            .store
            .open_merge_requests_from(project.id, &info.ref_name, MAX_OPEN_MERGE_REQUESTS_REFS)
            .await
        {
            info.open_merge_requests = open.iter().map(|m| format!("{full}!{}", m.iid)).collect();
        }
    }

    /// The predefined facts a stored pipeline was compiled with (§6.7 "P" and "L"), for
    /// its jobs' payloads, its downstream pipelines and its releases.
    pub(crate) async fn pipeline_info(
        &self,
        sources: &Sources,
        settings: &Settings,
        project: &gantry_store::Project,
        pipeline: &gantry_store::Pipeline,
    ) -> PipelineInfo {
        let r = ResolvedRef {
            name: pipeline.ref_name.clone(),
            tag: pipeline.tag,
            sha: pipeline.sha.clone(),
        };
        let commit = sources.commit_facts(project.id, &r).await;
        let mut info = self.predefined_info(
            project,
            &r,
            commit,
            pipeline.protected,
            Source::parse(&pipeline.source).unwrap_or(Source::Api),
            Some(pipeline.before_sha.clone()),
            u64::try_from(pipeline.iid).unwrap_or(1),
        );
        self.complete_info(
            &mut info,
            project,
            pipeline.parent_job_id,
            pipeline.schedule_id,
        )
        .await;
        match self.merge_requests.get(&pipeline.id) {
            Some(part) => part.apply_to(&mut info),
            None => {
                let merge_request = self
                    .store
                    .pipeline_merge_request(pipeline.id)
                    .await
                    .ok()
                    .flatten();
                self.complete_merge_request_info(
                    settings,
                    &mut info,
                    project,
                    merge_request.as_ref().map(|(link, m)| (link, m)),
                )
                .await;
                self.merge_requests
                    .keep(pipeline.id, Arc::new(MergeRequestPart::of(&info)));
            }
        }
        info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_value_is_forgotten_alone_or_with_all_and_the_full_map_is_emptied() {
        let kept: Kept<i64, i64> = Kept::default();
        kept.keep(1, 10);
        kept.keep(2, 20);
        assert_eq!(kept.get(&1), Some(10));
        kept.forget(&1);
        assert_eq!(kept.get(&1), None);
        assert_eq!(kept.get(&2), Some(20));
        kept.forget_all();
        assert_eq!(kept.get_any_age(&2), None);
        let max = i64::try_from(MAX_KEPT).unwrap_or(i64::MAX);
        for k in 0..max {
            kept.keep(k, k);
        }
        // Replacing a kept key never empties the map; a new key past the bound does.
        kept.keep(5, 6);
        assert_eq!(kept.get(&5), Some(6));
        kept.keep(max, 0);
        assert_eq!(kept.get(&0), None);
        assert_eq!(kept.get(&max), Some(0));
    }
}
