//! Push pipelines: commits turn into pipelines. The coordinator looks at a project's
//! repository ([`Coordinator::pull_mirror`]: every poll interval of `gantry server`, and
//! whenever `POST /projects/:id/mirror/pull` asks, which is what a forge's push webhook
//! calls) and creates a `push` pipeline for each branch or tag that moved since the last
//! look, as GitLab does for a push (and for a pull mirror's update with "trigger
//! pipelines for mirror updates").
//!
//! `pull_mirror` fetches the mirror, compares its refs (`git ls-remote`) with those
//! recorded in `project_refs`, and creates each pipeline through the same `create_at` as
//! every other (`Creation::push`: the before SHA, the pushed paths, `[skip ci]`);
//! `spawn_push_poller` (`gantry server --poll-interval`) and `http/mirror.rs` call it.
//!
//! GitLab's rules for a push, kept here:
//! - a moved branch's pipeline has the previous head as `CI_COMMIT_BEFORE_SHA` and the
//!   paths changed between the two commits for `rules:changes`; a new branch or a tag
//!   has `CI_COMMIT_BEFORE_SHA` of zeros and unknown changes (`rules:changes` holds);
//! - a deleted branch or tag creates nothing; a deleted branch stops the environments it
//!   deployed last (with their stop jobs);
//! - a commit message with `[skip ci]` / `[ci skip]` (any case, ` `, `_` or `-`) creates a
//!   `skipped` pipeline without jobs when the configuration file exists;
//! - at most [`PUSH_PIPELINE_LIMIT`] pipelines per push (GitLab's
//!   `PIPELINE_PROCESS_LIMIT`): the changes of one look count as one push, branches
//!   first, then tags, each by name;
//! - what the project's repository held when it was first looked at creates nothing;
//! - a branch that moved re-runs its open merge requests (`merge_requests.rs`,
//!   `refresh_merge_requests`), as GitLab's `MergeRequests::RefreshService` does.
//!
//! Each change is taken once: the pipeline and the ref's new position are one
//! transaction (`project_refs`), so two coordinators looking at once create one
//! pipeline, and a change whose pipeline failed to be stored is tried again next time.

use gantry_pipeline::{PipelineInputs, Source};
use gantry_store::{RefChange, StoreError};
use serde::Serialize;

use super::creation::{Creation, PushFacts};
use super::error::{CoordinatorError, Result};
use super::git::{Mirror, changed_paths, list_refs};
use super::projects::is_local_path;
use super::time::now_ms;
use super::{Coordinator, stripe};

/// Pipelines created by one push, at most (GitLab's `PIPELINE_PROCESS_LIMIT`); further
/// changes are recorded without one.
pub const PUSH_PIPELINE_LIMIT: usize = 4;

/// One branch or tag that moved, and what came of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PushedRef {
    /// `refs/heads/…` or `refs/tags/…`.
    #[serde(rename = "ref")]
    pub ref_name: String,
    /// The commit before (`None`: the ref is new).
    pub before: Option<String>,
    /// The commit now (`None`: the ref was deleted).
    pub after: Option<String>,
    /// The pipeline created for it.
    pub pipeline_id: Option<i64>,
    /// Why there is none (deleted, over the limit, GitLab's "not created" message, …).
    pub reason: Option<String>,
}

impl Coordinator {
    /// Fetch the project's repository and create a push pipeline for each branch or tag
    /// that moved since the last look (see the module's notes). The first look only
    /// records what is there. A project whose repository is used in place (`gantry run`)
    /// is never looked at: nothing is pushed to it.
    pub async fn pull_mirror(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<PushedRef>, CoordinatorError> {
        let project = self.inner.store.project(project_id).await?;
        if self.inner.cfg.local_repos_in_place() && is_local_path(&project.repo_url) {
            return Ok(Vec::new());
        }
        // One look at a time per project in this process; other processes are kept apart
        // by the ref's compare-and-set.
        let _g = self.inner.push_locks[stripe(project_id)].lock().await;
        let mirror = self.sources().sync_mirror(&project).await?;
        let now_refs = list_refs(&mirror.path.to_string_lossy()).await?;
        let Some(known) = self.inner.store.project_refs(project_id).await? else {
            self.inner
                .store
                .record_refs(project_id, &now_refs, now_ms())
                .await?;
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut created = 0usize;
        for change in ref_changes(&known, &now_refs) {
            let mut pushed = PushedRef {
                ref_name: change.ref_name.clone(),
                before: change.from.clone(),
                after: change.to.clone(),
                pipeline_id: None,
                reason: None,
            };
            let reason = if change.to.is_none() {
                Some("the ref was deleted".to_owned())
            } else if created >= PUSH_PIPELINE_LIMIT {
                Some(format!(
                    "a push creates at most {PUSH_PIPELINE_LIMIT} pipelines (GitLab's limit)"
                ))
            } else {
                created += 1;
                match self.push_pipeline(&project, &mirror, change.clone()).await {
                    Ok(Pushed::Created(id)) => {
                        pushed.pipeline_id = Some(id);
                        None
                    }
                    Ok(Pushed::Taken) => {
                        pushed.reason = Some("another coordinator took this change".to_owned());
                        out.push(pushed);
                        continue;
                    }
                    Ok(Pushed::Moved) => {
                        pushed.reason = Some(
                            "the ref moved again while it was read: the next look takes it"
                                .to_owned(),
                        );
                        out.push(pushed);
                        continue;
                    }
                    Err(CoordinatorError::Invalid(message)) => Some(message),
                    Err(other) => return Err(other),
                }
            };
            if let Some(reason) = reason {
                // No pipeline: the change is recorded on its own.
                if !self.inner.store.move_ref(project_id, &change).await? {
                    pushed.reason = Some("another coordinator took this change".to_owned());
                } else {
                    pushed.reason = Some(reason);
                    if let (None, Some(branch)) =
                        (&change.to, change.ref_name.strip_prefix("refs/heads/"))
                    {
                        // The push is recorded; stopping what the branch deployed follows
                        // it and does not undo it.
                        if let Err(e) = self.stop_environments_of_branch(project_id, branch).await {
                            eprintln!(
                                "gantry: project {project_id}: the environments of deleted branch `{branch}` were not stopped: {e}"
                            );
                        }
                    }
                }
            }
            // The branch's open merge requests get a pipeline of its new head, whether
            // the push made one or not (`workflow:rules` often keep only merge request
            // pipelines).
            if let (Some(to), Some(branch)) =
                (&change.to, change.ref_name.strip_prefix("refs/heads/"))
            {
                self.refresh_merge_requests(project_id, branch, to).await;
            }
            out.push(pushed);
        }
        Ok(out)
    }

    async fn push_pipeline(
        &self,
        project: &gantry_store::Project,
        mirror: &Mirror,
        change: RefChange,
    ) -> Result<Pushed> {
        let Some(to) = change.to.clone() else {
            return Ok(Pushed::Moved);
        };
        let Some((r, commit)) = mirror.resolve(&change.ref_name).await? else {
            return Ok(Pushed::Moved);
        };
        // A pipeline asked for through the API fetches too: the ref may be ahead already.
        if r.sha != to {
            return Ok(Pushed::Moved);
        }
        self.sources().remember_commit(project.id, &r, &commit);
        let changed_files = match (&change.from, r.tag) {
            (Some(from), false) => {
                let (repo, from, to) = (mirror.path.clone(), from.clone(), to.clone());
                let paths = tokio::task::spawn_blocking(move || changed_paths(&repo, &from, &to))
                    .await
                    .map_err(|e| CoordinatorError::Git(format!("git diff task: {e}")))?;
                // A commit the mirror no longer has (a force push pruned it): unknown.
                paths.ok()
            }
            _ => None,
        };
        let protected = self.settings().ref_protected(project.id, &r).await?;
        let created = self
            .create_at(Creation {
                project: project.clone(),
                mirror: mirror.clone(),
                r,
                commit,
                protected,
                variables: Vec::new(),
                file_variables: Vec::new(),
                raw_variables: Vec::new(),
                source: Source::Push,
                selection: None,
                parent_job_id: None,
                inputs: PipelineInputs::default(),
                child: None,
                push: Some(PushFacts {
                    change,
                    changed_files,
                }),
                schedule: None,
                fetched: None,
                merge_request: None,
                trigger_short_token: None,
            })
            .await;
        match created {
            Ok(view) => Ok(Pushed::Created(view.id)),
            Err(CoordinatorError::Store(StoreError::Stale)) => Ok(Pushed::Taken),
            Err(e) => Err(e),
        }
    }

    /// Look at every project's repository once ([`Coordinator::pull_mirror`]); the first
    /// error is returned after all were looked at.
    pub async fn pull_mirrors(&self) -> std::result::Result<(), CoordinatorError> {
        let mut first_error = None;
        for project in self.inner.store.projects().await? {
            if let Err(e) = self.pull_mirror(project.id).await {
                eprintln!("gantry: failed to look for pushes to {}: {e}", project.name);
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Call [`Coordinator::pull_mirrors`] every `interval` until the returned task is
    /// aborted (`gantry server --poll-interval`).
    pub fn spawn_push_poller(&self, interval: std::time::Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let _ = this.pull_mirrors().await;
            }
        })
    }

    /// Record what a new project's repository holds, so that the first push after its
    /// creation already creates a pipeline. Not for a repository used in place.
    pub(crate) async fn record_first_refs(&self, project: &gantry_store::Project) -> Result<()> {
        if self.inner.cfg.local_repos_in_place() && is_local_path(&project.repo_url) {
            return Ok(());
        }
        let refs = list_refs(&project.repo_url).await?;
        self.inner
            .store
            .record_refs(project.id, &refs, now_ms())
            .await?;
        Ok(())
    }
}

/// What [`Coordinator::push_pipeline`] did.
enum Pushed {
    Created(i64),
    /// Another coordinator recorded the change first.
    Taken,
    /// The ref is no longer where the look saw it.
    Moved,
}

/// The changes from `known` to `now` (both sorted by name): branches, then tags.
fn ref_changes(known: &[(String, String)], now: &[(String, String)]) -> Vec<RefChange> {
    let old: std::collections::BTreeMap<&str, &str> = known
        .iter()
        .map(|(name, sha)| (name.as_str(), sha.as_str()))
        .collect();
    let new: std::collections::BTreeMap<&str, &str> = now
        .iter()
        .map(|(name, sha)| (name.as_str(), sha.as_str()))
        .collect();
    let mut changes: Vec<RefChange> = new
        .iter()
        .filter(|(name, sha)| old.get(*name) != Some(*sha))
        .map(|(name, sha)| RefChange {
            ref_name: (*name).to_owned(),
            from: old.get(name).map(|s| (*s).to_owned()),
            to: Some((*sha).to_owned()),
        })
        .chain(
            old.iter()
                .filter(|(name, _)| !new.contains_key(*name))
                .map(|(name, sha)| RefChange {
                    ref_name: (*name).to_owned(),
                    from: Some((*sha).to_owned()),
                    to: None,
                }),
        )
        .filter(|c| c.ref_name.starts_with("refs/heads/") || c.ref_name.starts_with("refs/tags/"))
        .collect();
    changes.sort_by(|a, b| {
        let tag = |c: &RefChange| c.ref_name.starts_with("refs/tags/");
        (tag(a), &a.ref_name).cmp(&(tag(b), &b.ref_name))
    });
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, s)| ((*n).to_owned(), (*s).to_owned()))
            .collect()
    }

    #[test]
    fn changes_are_branches_then_tags_by_name() {
        let known = refs(&[
            ("refs/heads/gone", "1"),
            ("refs/heads/main", "1"),
            ("refs/heads/same", "1"),
            ("refs/tags/v1", "1"),
        ]);
        let now = refs(&[
            ("refs/heads/main", "2"),
            ("refs/heads/new", "3"),
            ("refs/heads/same", "1"),
            ("refs/tags/v1", "1"),
            ("refs/tags/v2", "2"),
        ]);
        let got: Vec<(String, Option<String>, Option<String>)> = ref_changes(&known, &now)
            .into_iter()
            .map(|c| (c.ref_name, c.from, c.to))
            .collect();
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(
            got,
            [
                ("refs/heads/gone".to_owned(), s("1"), None),
                ("refs/heads/main".to_owned(), s("1"), s("2")),
                ("refs/heads/new".to_owned(), None, s("3")),
                ("refs/tags/v2".to_owned(), None, s("2")),
            ]
        );
    }

    #[test]
    fn skip_ci_is_gitlabs_pattern() {
        use super::super::creation::skips_ci;
        for yes in [
            "fix [skip ci]",
            "[ci skip] docs",
            "x\n\n[CI-SKIP]",
            "[Skip_CI]",
            "a [skip-ci] b",
        ] {
            assert!(skips_ci(yes), "{yes}");
        }
        for no in ["skip ci", "[skipci]", "[ci  skip]", "(skip ci)", "[skip ci"] {
            assert!(!skips_ci(no), "{no}");
        }
    }
}
