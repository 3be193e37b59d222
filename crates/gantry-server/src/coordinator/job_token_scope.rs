//! GitLab's CI/CD job token scope, the inbound one ("Limit access to this project",
//! `ci_inbound_job_token_scope_enabled`): which projects' job tokens may reach a
//! project's data. A project's allowlist names projects and groups (a group lets in
//! every project under it); the project itself is always on it. Direction as GitLab's:
//! the allowlist of project P lists the projects whose job tokens may access P.
//!
//! Where a job token reaches another project, one decision ([`Coordinator::job_token_refusal`]):
//!
//! * `needs:project` — the artifacts and dotenv variables of another project's latest
//!   successful job ([`JobTokenUse::NeedsProject`]): refused when that project limits
//!   access and its allowlist does not name the needing job's project. GitLab resolves
//!   the need with the pipeline user's rights and refuses only the runner's download
//!   (`403` at `download_artifacts`); Gantry refuses at resolution, since the need's
//!   dotenv variables reach the job through its payload, which no job token guards: the
//!   job fails `missing_dependency_failure` before it runs, the reason and the fix in its
//!   log, and the runner's download (`GET /jobs/:id/artifacts`) is `403` alike, checked
//!   again when it comes (an entry removed meanwhile counts).
//! * the artifacts API with a `JOB-TOKEN` (`/projects/:id/jobs/…/artifacts…`) and git
//!   over HTTP as `gitlab-ci-token` ([`JobTokenUse::Api`]): another project is reached
//!   only when its allowlist names the caller's project (or a group it is in). GitLab
//!   also lets any project in while the limit is off (the pipeline user's rights
//!   permitting, and Gantry's one user may read everything); Gantry does not: these
//!   never reached another project before the allowlist existed, and turning the limit
//!   off does not widen them. `403` naming the fix.
//!
//! `include:project`, `trigger:project` and `include:component` are read with the
//! server's rights when a pipeline is created, as GitLab reads them with the pipeline
//! user's (its job token scope does not apply to them).
//!
//! New projects limit access (GitLab's default since 15.9); projects made before
//! migration 0026 do not, so their `needs:project` reads go on as before — GitLab did
//! not turn it on for existing projects either. The API shapes (`http/job_token_scope.rs`)
//! and messages are GitLab's (`API::ProjectJobTokenScope`, `Ci::JobTokenScope::*Service`),
//! limits included: 200 projects and 200 groups per allowlist.

use serde::Serialize;

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::projects::full_path;
use super::time::now_ms;
use super::views::Project;

/// Most projects on one allowlist (GitLab's `PROJECT_LINK_DIRECTIONAL_LIMIT`).
pub const MAX_ALLOWLIST_PROJECTS: usize = 200;
/// Most groups on one allowlist (GitLab's `GROUP_LINK_LIMIT`).
pub const MAX_ALLOWLIST_GROUPS: usize = 200;

/// `GET /projects/:id/job_token_scope` (GitLab's `ProjectJobTokenScope` entity). The
/// outbound scope was removed in GitLab 18.0; Gantry never had it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct JobTokenScopeView {
    pub inbound_enabled: bool,
    pub outbound_enabled: bool,
}

/// A project added to an allowlist (GitLab's `ProjectScopeLink` entity): the
/// allowlist's project is `source_project_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ProjectScopeLink {
    pub source_project_id: i64,
    pub target_project_id: i64,
}

/// A group added to an allowlist (GitLab's `GroupScopeLink` entity).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct GroupScopeLink {
    pub source_project_id: i64,
    pub target_group_id: i64,
}

/// A group of an allowlist (GitLab's `BasicGroupDetails`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AllowedGroup {
    pub id: i64,
    pub web_url: String,
    pub name: String,
}

/// What a job token is used for in another project.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobTokenUse {
    /// `needs:project`: the artifacts and dotenv variables of its latest successful job.
    NeedsProject,
    /// The artifacts API and git over HTTP.
    Api,
}

/// How a job token of one project stands with another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JobTokenAccess {
    /// The job's own project.
    OwnProject,
    /// The other project's allowlist names the project or a group it is in.
    Allowlisted,
    /// The other project does not limit access, and does not name the project.
    Unlimited,
    /// The other project limits access to an allowlist that does not name the project.
    Denied,
}

impl JobTokenAccess {
    fn allows(self, used_for: JobTokenUse) -> bool {
        match (self, used_for) {
            (Self::OwnProject | Self::Allowlisted, _) => true,
            (Self::Unlimited, JobTokenUse::NeedsProject) => true,
            (Self::Unlimited, JobTokenUse::Api) | (Self::Denied, _) => false,
        }
    }
}

/// Whether the project at `path` is under the group at `group`.
fn under_group(path: &str, group: &str) -> bool {
    path.strip_prefix(group)
        .is_some_and(|rest| rest.starts_with('/'))
}

impl Coordinator {
    /// The job token scope of project `project_id`.
    pub async fn job_token_scope(&self, project_id: i64) -> Result<JobTokenScopeView> {
        let project = self.inner.store.project(project_id).await?;
        Ok(JobTokenScopeView {
            inbound_enabled: project.ci_inbound_job_token_scope_enabled,
            outbound_enabled: false,
        })
    }

    /// Turns "Limit access to this project" on or off.
    pub async fn set_job_token_scope(&self, project_id: i64, enabled: bool) -> Result<()> {
        self.inner
            .store
            .update_project(
                project_id,
                &gantry_store::ProjectChanges {
                    ci_inbound_job_token_scope_enabled: Some(enabled),
                    ..gantry_store::ProjectChanges::default()
                },
            )
            .await?;
        self.facts().forget_project(project_id);
        Ok(())
    }

    /// The projects whose job tokens may reach project `project_id`: itself and those
    /// its allowlist names, by id (GitLab's `inbound_projects`, ordered as its pages are).
    pub async fn job_token_allowlist(&self, project_id: i64) -> Result<Vec<Project>> {
        let store = &self.inner.store;
        let own = store.project(project_id).await?;
        let mut ids = store.job_token_allowlist(project_id).await?.projects;
        ids.push(own.id);
        ids.sort_unstable();
        ids.dedup();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            match store.project(id).await {
                Ok(p) => out.push(self.project_view(&p).await?),
                // Deleted since it was read: its entries went with it.
                Err(gantry_store::StoreError::NotFound(_)) => {}
                Err(other) => return Err(other.into()),
            }
        }
        Ok(out)
    }

    /// The groups of project `project_id`'s allowlist, by id. An entry whose path is no
    /// group any more (a made group deleted, the last project of a namespace gone) lets
    /// no project in and is not listed; it applies again if a group of that path returns
    /// (a path keeps its id).
    pub async fn job_token_groups_allowlist(&self, project_id: i64) -> Result<Vec<AllowedGroup>> {
        let store = &self.inner.store;
        store.project(project_id).await?;
        let groups = store.job_token_allowlist(project_id).await?.groups;
        let existing = self.group_paths().await?;
        let mut out = Vec::new();
        for (_, path) in groups.iter().filter(|(_, path)| existing.contains(path)) {
            let group = self.group(path).await?;
            out.push(AllowedGroup {
                id: group.id,
                web_url: group.web_url,
                name: group.name,
            });
        }
        Ok(out)
    }

    /// Adds project `target_project_id` to project `project_id`'s allowlist.
    /// `NotFound("target_project_id")` when there is no such project; `Invalid` with
    /// GitLab's message for the project itself, one already there, or a full list.
    pub async fn allow_job_token_project(
        &self,
        project_id: i64,
        target_project_id: i64,
    ) -> Result<ProjectScopeLink> {
        let store = &self.inner.store;
        store.project(project_id).await?;
        match store.project(target_project_id).await {
            Ok(_) => {}
            Err(gantry_store::StoreError::NotFound(_)) => {
                return Err(CoordinatorError::NotFound("target_project_id"));
            }
            Err(other) => return Err(other.into()),
        }
        if project_id == target_project_id {
            return Err(CoordinatorError::Invalid(
                "Validation failed: Target project can't be the same as the source project"
                    .to_owned(),
            ));
        }
        match store
            .add_job_token_project(
                project_id,
                target_project_id,
                MAX_ALLOWLIST_PROJECTS,
                now_ms(),
            )
            .await?
        {
            gantry_store::LinkAdded::Added => Ok(ProjectScopeLink {
                source_project_id: project_id,
                target_project_id,
            }),
            gantry_store::LinkAdded::AlreadyThere => Err(CoordinatorError::Invalid(
                "Target project is already in the job token scope".to_owned(),
            )),
            gantry_store::LinkAdded::Full => Err(CoordinatorError::Invalid(format!(
                "Validation failed: Source project exceeds the allowable number of project links in this direction ({MAX_ALLOWLIST_PROJECTS}): remove one first"
            ))),
        }
    }

    /// Takes project `target_project_id` off project `project_id`'s allowlist.
    /// `NotFound("project")` when either project does not exist; `Invalid` with GitLab's
    /// message for the project itself or one not on it.
    pub async fn disallow_job_token_project(
        &self,
        project_id: i64,
        target_project_id: i64,
    ) -> Result<()> {
        let store = &self.inner.store;
        store.project(project_id).await?;
        store.project(target_project_id).await?;
        if project_id == target_project_id {
            return Err(CoordinatorError::Invalid(
                "Source project cannot be removed from the job token scope".to_owned(),
            ));
        }
        if !store
            .remove_job_token_project(project_id, target_project_id)
            .await?
        {
            return Err(CoordinatorError::Invalid(
                "Target project is not in the job token scope".to_owned(),
            ));
        }
        Ok(())
    }

    /// Adds group `group_id` to project `project_id`'s allowlist.
    /// `NotFound("target_group_id")` when no group has that id.
    pub async fn allow_job_token_group(
        &self,
        project_id: i64,
        group_id: i64,
    ) -> Result<GroupScopeLink> {
        let store = &self.inner.store;
        store.project(project_id).await?;
        match self.group_path(&group_id.to_string()).await {
            Ok(_) => {}
            Err(CoordinatorError::NotFound(_)) => {
                return Err(CoordinatorError::NotFound("target_group_id"));
            }
            Err(other) => return Err(other),
        }
        match store
            .add_job_token_group(project_id, group_id, MAX_ALLOWLIST_GROUPS, now_ms())
            .await?
        {
            gantry_store::LinkAdded::Added => Ok(GroupScopeLink {
                source_project_id: project_id,
                target_group_id: group_id,
            }),
            gantry_store::LinkAdded::AlreadyThere => Err(CoordinatorError::Invalid(
                "Target group is already in the job token scope".to_owned(),
            )),
            gantry_store::LinkAdded::Full => Err(CoordinatorError::Invalid(format!(
                "Validation failed: Source project exceeds the allowable number of group links ({MAX_ALLOWLIST_GROUPS}): remove one first"
            ))),
        }
    }

    /// Takes group `group_id` off project `project_id`'s allowlist (also an entry whose
    /// path is no group any more). `NotFound("target_group_id")` when no group ever had
    /// that id.
    pub async fn disallow_job_token_group(&self, project_id: i64, group_id: i64) -> Result<()> {
        let store = &self.inner.store;
        store.project(project_id).await?;
        if store.group_path(group_id).await?.is_none() {
            return Err(CoordinatorError::NotFound("target_group_id"));
        }
        if !store.remove_job_token_group(project_id, group_id).await? {
            return Err(CoordinatorError::Invalid(
                "Target group is not in the job token scope".to_owned(),
            ));
        }
        Ok(())
    }

    /// Why a job token of project `source_project_id` may not be used for `used_for` in
    /// project `target_project_id`, with the fix; `None` when it may. Read from the
    /// database each time (no cache): an entry removed counts at once.
    pub(crate) async fn job_token_refusal(
        &self,
        source_project_id: i64,
        target_project_id: i64,
        used_for: JobTokenUse,
    ) -> Result<Option<String>> {
        let access = if source_project_id == target_project_id {
            JobTokenAccess::OwnProject
        } else {
            self.job_token_access(source_project_id, target_project_id)
                .await?
        };
        if access.allows(used_for) {
            return Ok(None);
        }
        let store = &self.inner.store;
        let source_path = full_path(&store.project(source_project_id).await?.name);
        let target_path = full_path(&store.project(target_project_id).await?.name);
        let add = format!(
            "add it to the allowlist (POST /api/v4/projects/{target_project_id}/job_token_scope/allowlist with target_project_id={source_project_id})"
        );
        Ok(Some(if access == JobTokenAccess::Denied {
            format!(
                "project `{target_path}` limits CI/CD job token access to its allowlist, which does not name `{source_path}`: {add}, or turn the limit off (PATCH /api/v4/projects/{target_project_id}/job_token_scope with enabled=false)"
            )
        } else {
            format!(
                "a job token of `{source_path}` reaches project `{target_path}` only through its CI/CD job token allowlist, which does not name `{source_path}`: {add}"
            )
        }))
    }

    /// How a job token of another project, `source_project_id`, stands with project
    /// `target_project_id`.
    async fn job_token_access(
        &self,
        source_project_id: i64,
        target_project_id: i64,
    ) -> Result<JobTokenAccess> {
        let store = &self.inner.store;
        let source = store.project(source_project_id).await?;
        let target = store.project(target_project_id).await?;
        let source_path = full_path(&source.name);
        let allowlist = store.job_token_allowlist(target.id).await?;
        Ok(
            if allowlist.projects.contains(&source.id)
                || allowlist
                    .groups
                    .iter()
                    .any(|(_, group)| under_group(&source_path, group))
            {
                JobTokenAccess::Allowlisted
            } else if target.ci_inbound_job_token_scope_enabled {
                JobTokenAccess::Denied
            } else {
                JobTokenAccess::Unlimited
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_project_is_under_its_groups_only() {
        assert!(under_group("acme/platform/app", "acme"));
        assert!(under_group("acme/platform/app", "acme/platform"));
        assert!(!under_group("acme/platform/app", "acme/platform/app"));
        assert!(!under_group("acme-labs/app", "acme"));
        assert!(!under_group("acme", "acme"));
    }

    #[test]
    fn each_use_has_its_rule() {
        use JobTokenAccess::*;
        use JobTokenUse::*;
        let table: Vec<(JobTokenAccess, bool, bool)> = [OwnProject, Allowlisted, Unlimited, Denied]
            .into_iter()
            .map(|a| (a, a.allows(NeedsProject), a.allows(Api)))
            .collect();
        assert_eq!(
            table,
            [
                (OwnProject, true, true),
                (Allowlisted, true, true),
                (Unlimited, true, false),
                (Denied, false, false),
            ]
        );
    }
}
