//! Merge request pipelines (`merge_request_event`), as GitLab creates them
//! (`MergeRequests::CreatePipelineService`): for a merge request of the project — one
//! `gantry run --merge-request` opens, or one a forge's webhook describes
//! (`forge_hooks.rs`) — a pipeline of its source branch's head, or of the merge of its
//! source into its target branch.
//!
//! What GitLab does and this module keeps:
//! - the pipeline's ref is `refs/merge-requests/<iid>/head` (`detached`) or
//!   `refs/merge-requests/<iid>/merge` (`merged_result`), written in the project's mirror,
//!   so `CI_COMMIT_REF_NAME` is the source branch but there is no `CI_COMMIT_BRANCH`;
//!   the ref is never protected (GitLab's `protect_merge_request_pipelines` is off by
//!   default), so protected variables stay out;
//! - `rules:changes` compare the source head with the merge base of the two branches
//!   (`MergeRequest#modified_paths`), and `CI_MERGE_REQUEST_DIFF_BASE_SHA` is that base;
//! - a merged result is the merge commit of the target's head and the source's head
//!   (`git merge-tree --write-tree`, then `git commit-tree` with both parents, GitLab's
//!   message); when the branches do not merge cleanly the pipeline is `detached` instead,
//!   as GitLab falls back when it cannot make the merge ref;
//!   `CI_MERGE_REQUEST_SOURCE_BRANCH_SHA`/`TARGET_BRANCH_SHA` are set only then;
//! - a merge request has one pipeline per source head and event type: a forge's
//!   `synchronize` event and the push it reports (`pushes.rs`: each push to a branch
//!   re-runs its open merge requests) make one pipeline;
//! - `CI_OPEN_MERGE_REQUESTS` names the open merge requests from the pipeline's branch,
//!   newest first, at most [`MAX_OPEN_MERGE_REQUESTS_REFS`], on branch and merge request
//!   pipelines (`Ci::Pipeline#open_merge_requests_refs`); child pipelines keep their
//!   parent's merge request (`Ci::Bridge#downstream_pipeline_params`).
//!
//! Where Gantry chooses: there are no merge request diff versions, so
//! `CI_MERGE_REQUEST_DIFF_ID` is the merge request's id; merge requests have no
//! assignees or milestones here; a pull request of GitHub or Gitea/Forgejo is also given
//! GitLab's `CI_EXTERNAL_PULL_REQUEST_*` variables (what GitLab sets for a GitHub
//! project's pull request, whose pipelines are `external_pull_request_event`), while its
//! pipeline stays `merge_request_event`, which is what configurations' rules test.
//!
//! Cost: creating a pipeline adds three git processes (merge base, changed paths, the
//! ref; two more for a merged result); a job's payload adds two indexed reads (the
//! pipeline's merge request, the branch's open ones, at most four rows).

use std::path::Path;

use gantry_pipeline::{MergeRequestEventType, PipelineInputs, Source};
use gantry_store::{MergeRequest, MergeRequestLink, NewMergeRequest};
use serde::Serialize;

use super::Coordinator;
use super::creation::{Creation, JobSelection};
use super::error::CoordinatorError;
use super::git::{ResolvedRef, changed_paths, git};
use super::projects::{full_path, is_local_path};
use super::time::{iso8601, now_ms};
use super::views::PipelineView;

/// GitLab's `Ci::Pipeline::MAX_OPEN_MERGE_REQUESTS_REFS`.
pub const MAX_OPEN_MERGE_REQUESTS_REFS: i64 = 4;

/// What a merge request pipeline is created with besides its merge request.
#[derive(Clone, Debug, Default)]
pub struct MergeRequestPipelineRequest {
    /// `merged_result` asks for the merge of the source into the target branch (a
    /// `detached` pipeline when they do not merge cleanly); else `detached`.
    pub merged_result: bool,
    /// Pipeline variables (highest precedence).
    pub variables: Vec<(String, String)>,
    /// Only some jobs (`gantry run JOB...`).
    pub jobs: Option<JobSelection>,
    /// Values for the configuration's `spec:inputs`.
    pub inputs: PipelineInputs,
}

/// What a merge request pipeline's creation carries to `persist_creation`.
pub(crate) struct MergeRequestFacts {
    pub link: MergeRequestLink,
    pub request: MergeRequest,
    /// The merge request's changed paths, for `rules:changes`.
    pub changed_files: Option<Vec<String>>,
}

/// A merge request as GitLab's API shows one (`GET /projects/:id/merge_requests`: the
/// fields python-gitlab and GitLab's own clients read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergeRequestView {
    pub id: i64,
    pub iid: i64,
    pub project_id: i64,
    pub title: String,
    pub description: String,
    /// `opened`, `closed` or `merged`.
    pub state: String,
    pub created_at: String,
    pub updated_at: String,
    pub target_branch: String,
    pub source_branch: String,
    pub source_project_id: i64,
    pub target_project_id: i64,
    pub labels: Vec<String>,
    pub draft: bool,
    pub work_in_progress: bool,
    /// The source branch's head.
    pub sha: String,
    pub author: MergeRequestAuthor,
    pub references: MergeRequestReferences,
    pub web_url: String,
    /// Where it comes from: `local`, `gitlab`, `github` or `gitea` (Gantry's).
    pub forge: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergeRequestAuthor {
    pub username: String,
    pub name: String,
}

/// GitLab's `references`: `!3`, `!3`, `group/project!3`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MergeRequestReferences {
    pub short: String,
    pub relative: String,
    pub full: String,
}

pub(super) fn event_type(link: &MergeRequestLink) -> MergeRequestEventType {
    match link.event_type.as_str() {
        "merged_result" => MergeRequestEventType::MergedResult,
        "merge_train" => MergeRequestEventType::MergeTrain,
        _ => MergeRequestEventType::Detached,
    }
}

/// Whether a forge's request is a pull request (GitHub, Gitea/Forgejo): GitLab's
/// `external_pull_request` variables apply.
pub(super) fn is_pull_request(forge: &str) -> bool {
    matches!(forge, "github" | "gitea")
}

impl Coordinator {
    /// Creates the merge request `m` describes, or brings the one of its
    /// `(project, iid)` up to date; `m.iid` 0 takes the project's next number.
    pub async fn upsert_merge_request(
        &self,
        m: &NewMergeRequest,
    ) -> std::result::Result<MergeRequest, CoordinatorError> {
        let store = &self.inner.store;
        let mut m = m.clone();
        if m.iid == 0 {
            m.iid = store.next_merge_request_iid(m.project_id).await?;
        }
        let saved = store.upsert_merge_request(&m, now_ms()).await?;
        // Its pipelines' predefined variables (title, labels, open merge requests).
        self.facts().forget_merge_requests();
        Ok(saved)
    }

    /// A project's merge requests, newest first (`state`: only those).
    pub async fn merge_requests(
        &self,
        project_id: i64,
        state: Option<&str>,
    ) -> std::result::Result<Vec<MergeRequestView>, CoordinatorError> {
        let project = self.inner.store.project(project_id).await?;
        let rows = self.inner.store.merge_requests(project_id, state).await?;
        Ok(rows
            .iter()
            .map(|m| self.merge_request_view(&project, m))
            .collect())
    }

    /// One merge request of a project, by its iid.
    pub async fn merge_request(
        &self,
        project_id: i64,
        iid: i64,
    ) -> std::result::Result<MergeRequestView, CoordinatorError> {
        let project = self.inner.store.project(project_id).await?;
        let m = self
            .inner
            .store
            .merge_request_by_iid(project_id, iid)
            .await?;
        Ok(self.merge_request_view(&project, &m))
    }

    /// The pipelines of merge request `iid` of the project, newest first.
    pub async fn merge_request_pipelines(
        &self,
        project_id: i64,
        iid: i64,
    ) -> std::result::Result<Vec<PipelineView>, CoordinatorError> {
        let store = &self.inner.store;
        let m = store.merge_request_by_iid(project_id, iid).await?;
        let mut out = Vec::new();
        for p in store.merge_request_pipelines(m.id).await? {
            out.push(self.pipeline_view(&p).await?);
        }
        Ok(out)
    }

    fn merge_request_view(
        &self,
        project: &gantry_store::Project,
        m: &MergeRequest,
    ) -> MergeRequestView {
        let full = full_path(&project.name);
        let web_url = if m.web_url.is_empty() {
            format!("{}/{full}/-/merge_requests/{}", self.external_url(), m.iid)
        } else {
            m.web_url.clone()
        };
        MergeRequestView {
            id: m.id,
            iid: m.iid,
            project_id: m.project_id,
            title: m.title.clone(),
            description: m.description.clone(),
            state: m.state.clone(),
            created_at: iso8601(m.created_at),
            updated_at: iso8601(m.updated_at),
            target_branch: m.target_branch.clone(),
            source_branch: m.source_branch.clone(),
            source_project_id: m.project_id,
            target_project_id: m.project_id,
            labels: m.labels.clone(),
            draft: m.draft,
            work_in_progress: m.draft,
            sha: m.source_sha.clone(),
            author: MergeRequestAuthor {
                username: m.author.clone(),
                name: m.author.clone(),
            },
            references: MergeRequestReferences {
                short: format!("!{}", m.iid),
                relative: format!("!{}", m.iid),
                full: format!("{full}!{}", m.iid),
            },
            web_url,
            forge: m.forge.clone(),
        }
    }

    /// Creates a `merge_request_event` pipeline for merge request `merge_request_id` at
    /// its source head (see the module's notes). The source head (and the target
    /// branch, or its recorded head) must be in the project's repository already.
    pub async fn create_merge_request_pipeline(
        &self,
        merge_request_id: i64,
        request: MergeRequestPipelineRequest,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let store = &self.inner.store;
        let m = store.merge_request(merge_request_id).await?;
        let project = store.project(m.project_id).await?;
        let mirror = if self.inner.cfg.local_repos_in_place() && is_local_path(&project.repo_url) {
            self.sources().sync_mirror(&project).await?
        } else {
            self.sources().mirror(project.id)
        };
        let source = ResolvedRef {
            name: m.source_branch.clone(),
            tag: false,
            sha: m.source_sha.clone(),
        };
        if mirror.commit_info(&source).await.is_err() {
            return Err(CoordinatorError::Invalid(format!(
                "create a merge request pipeline: the source branch's head {} of !{} is not in the repository of {}",
                m.source_sha,
                m.iid,
                full_path(&project.name)
            )));
        }
        // The target branch's head as the repository has it now, else the one the
        // forge's event named.
        let target_sha = match mirror
            .resolve(&format!("refs/heads/{}", m.target_branch))
            .await?
        {
            Some((r, _)) => r.sha,
            None if !m.target_sha.is_empty() => m.target_sha.clone(),
            None => {
                return Err(CoordinatorError::Invalid(format!(
                    "create a merge request pipeline: the target branch `{}` of !{} is not a branch of {}",
                    m.target_branch,
                    m.iid,
                    full_path(&project.name)
                )));
            }
        };
        let base_sha = merge_base(&mirror.path, &target_sha, &m.source_sha).await;
        let merged = if request.merged_result {
            let message = format!(
                "Merge branch '{}' into '{}'\n\n{}\n\nSee merge request {}!{}",
                m.source_branch,
                m.target_branch,
                m.title,
                full_path(&project.name),
                m.iid
            );
            merge_commit(
                &mirror.path,
                &target_sha,
                &m.source_sha,
                &message,
                &self.inner.cfg.user,
            )
            .await
        } else {
            None
        };
        let (event, sha, ref_name) = match merged {
            Some(merge) => (
                MergeRequestEventType::MergedResult,
                merge,
                format!("refs/merge-requests/{}/merge", m.iid),
            ),
            None => (
                MergeRequestEventType::Detached,
                m.source_sha.clone(),
                format!("refs/merge-requests/{}/head", m.iid),
            ),
        };
        if store
            .merge_request_pipeline_exists(m.id, event.as_str(), &m.source_sha)
            .await?
        {
            return Err(CoordinatorError::Conflict(format!(
                "!{} has a {} pipeline for {} already",
                m.iid,
                event.as_str(),
                m.source_sha
            )));
        }
        // GitLab keeps `refs/merge-requests/<iid>/head` at the source head, and the
        // merge ref at the merged result.
        git(
            Some(&mirror.path),
            &[
                "update-ref",
                &format!("refs/merge-requests/{}/head", m.iid),
                &m.source_sha,
            ],
        )
        .await?;
        if event == MergeRequestEventType::MergedResult {
            git(Some(&mirror.path), &["update-ref", &ref_name, &sha]).await?;
        }
        let r = ResolvedRef {
            name: ref_name,
            tag: false,
            sha,
        };
        let commit = mirror.commit_info(&r).await?;
        self.sources().remember_commit(project.id, &r, &commit);
        let changed_files = {
            let (repo, from, to) = (
                mirror.path.clone(),
                target_sha.clone(),
                m.source_sha.clone(),
            );
            tokio::task::spawn_blocking(move || changed_paths(&repo, &from, &to))
                .await
                .map_err(|e| CoordinatorError::Git(format!("git diff task: {e}")))?
                .ok()
        };
        let link = MergeRequestLink {
            merge_request_id: m.id,
            event_type: event.as_str().to_owned(),
            source_sha: m.source_sha.clone(),
            target_sha,
            base_sha,
        };
        self.create_at(Creation {
            project,
            mirror,
            r,
            commit,
            protected: false,
            variables: request.variables,
            file_variables: Vec::new(),
            raw_variables: Vec::new(),
            source: Source::MergeRequestEvent,
            selection: request.jobs,
            parent_job_id: None,
            child: None,
            inputs: request.inputs,
            push: None,
            schedule: None,
            fetched: None,
            merge_request: Some(MergeRequestFacts {
                link,
                request: m,
                changed_files,
            }),
            trigger_short_token: None,
        })
        .await
    }

    /// Re-runs the open merge requests from `branch` after a push moved it to `sha`
    /// (GitLab's `MergeRequests::RefreshService`): each gets its new head and a
    /// pipeline of the kind its last one was. A failure is written to stderr and does
    /// not undo the push's own pipeline.
    pub(crate) async fn refresh_merge_requests(&self, project_id: i64, branch: &str, sha: &str) {
        let store = &self.inner.store;
        let open = match store
            .open_merge_requests_from(project_id, branch, MAX_OPEN_MERGE_REQUESTS_REFS)
            .await
        {
            Ok(open) => open,
            Err(e) => {
                eprintln!(
                    "gantry: project {project_id}: the merge requests from `{branch}` were not read: {e}"
                );
                return;
            }
        };
        for m in open {
            if m.source_sha == sha {
                continue;
            }
            let merged_result = matches!(
                store.merge_request_pipelines(m.id).await.ok().and_then(|p| p.first().cloned()),
                Some(p) if p.ref_name.ends_with("/merge")
            );
            let moved = NewMergeRequest {
                project_id,
                iid: m.iid,
                forge: m.forge.clone(),
                state: m.state.clone(),
                title: m.title.clone(),
                description: m.description.clone(),
                source_branch: m.source_branch.clone(),
                target_branch: m.target_branch.clone(),
                source_sha: sha.to_owned(),
                target_sha: m.target_sha.clone(),
                source_repository: m.source_repository.clone(),
                target_repository: m.target_repository.clone(),
                draft: m.draft,
                labels: m.labels.clone(),
                author: m.author.clone(),
                web_url: m.web_url.clone(),
            };
            let created = match self.upsert_merge_request(&moved).await {
                Ok(row) => {
                    self.create_merge_request_pipeline(
                        row.id,
                        MergeRequestPipelineRequest {
                            merged_result,
                            ..MergeRequestPipelineRequest::default()
                        },
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            match created {
                Ok(_) | Err(CoordinatorError::Conflict(_)) => {}
                // `workflow:rules` filtered it, or the configuration is missing: no
                // pipeline, as on GitLab.
                Err(CoordinatorError::Invalid(_)) => {}
                Err(e) => eprintln!(
                    "gantry: project {project_id}: no pipeline for !{} after the push to `{branch}`: {e}",
                    m.iid
                ),
            }
        }
    }
}

/// The merge base of two commits; `None` without common history.
async fn merge_base(repo: &Path, a: &str, b: &str) -> Option<String> {
    let out = git(Some(repo), &["merge-base", a, b]).await.ok()?;
    let sha = String::from_utf8_lossy(&out).trim().to_owned();
    (!sha.is_empty()).then_some(sha)
}

/// The merge of `source` into `target` as a commit of `repo` (GitLab's merge ref:
/// parents the target's head, then the source's), by `user`; `None` when the two do not
/// merge cleanly (or git cannot say).
async fn merge_commit(
    repo: &Path,
    target: &str,
    source: &str,
    message: &str,
    user: &super::PipelineUser,
) -> Option<String> {
    let tree = git(Some(repo), &["merge-tree", "--write-tree", target, source])
        .await
        .ok()?;
    let tree = String::from_utf8_lossy(&tree)
        .lines()
        .next()?
        .trim()
        .to_owned();
    let name = format!("user.name={}", user.name);
    let email = format!(
        "user.email={}",
        if user.email.is_empty() {
            "gantry@localhost"
        } else {
            &user.email
        }
    );
    let commit = git(
        Some(repo),
        &[
            "-c",
            &name,
            "-c",
            &email,
            "commit-tree",
            &tree,
            "-p",
            target,
            "-p",
            source,
            "-m",
            message,
        ],
    )
    .await
    .ok()?;
    let sha = String::from_utf8_lossy(&commit).trim().to_owned();
    (!sha.is_empty()).then_some(sha)
}
