//! Resource groups (`resource_group:`; GitLab's `/projects/:id/resource_groups`): the key
//! expanded at pipeline creation (GitLab's `expanded_resource_group_key`), the groups'
//! `process_mode`, the order waiting jobs get a resource in ([`order_candidates`], used by
//! `assign_resources`), and the API's views.

use std::collections::HashMap;

use gantry_pipeline::expand::{Unknown, expand_server};
use serde::Serialize;

use super::error::{CoordinatorError, Result};
use super::time::now_ms;
use super::views::JobView;
use super::{Coordinator, iso8601};
use crate::processor::Status;

/// GitLab's process modes.
pub const PROCESS_MODES: [&str; 4] = [
    "unordered",
    "oldest_first",
    "newest_first",
    "newest_ready_first",
];

/// A resource group, shaped like GitLab's `GET /projects/:id/resource_groups/:key`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResourceGroupView {
    pub id: i64,
    pub key: String,
    pub process_mode: String,
    pub created_at: String,
    pub updated_at: String,
}

fn view(g: &gantry_store::ResourceGroup) -> ResourceGroupView {
    ResourceGroupView {
        id: g.id,
        key: g.key.clone(),
        process_mode: g.process_mode.clone(),
        created_at: iso8601(g.created_at),
        updated_at: iso8601(g.updated_at),
    }
}

/// `key` with `$VAR` references replaced from `variables` (unknown ones become empty, as
/// GitLab's `ExpandVariables`); `None` when nothing is left (the job then has no resource
/// group).
pub(crate) fn expand_key(key: &str, variables: &HashMap<String, String>) -> Option<String> {
    let expanded = expand_server(key, &|n: &str| variables.get(n).cloned(), Unknown::Empty);
    (!expanded.is_empty()).then_some(expanded)
}

/// A job of a resource group that is not done with it: waiting for the resource
/// (`ready`), or upcoming (`created` or `scheduled`: its pipeline has not reached it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) group: String,
    pub(crate) pipeline: i64,
    pub(crate) job: i64,
    pub(crate) ready: bool,
}

/// Whether `mode` counts upcoming jobs in its order (GitLab's
/// `waiting_for_resource_or_upcoming`): `oldest_first` and `newest_first` do, so a
/// pipeline ahead in line holds the resource back until its job is ready;
/// `unordered` and `newest_ready_first` look at ready jobs only.
fn counts_upcoming(mode: Option<&str>) -> bool {
    matches!(mode, Some("oldest_first" | "newest_first"))
}

/// GitLab's `upcoming_processables`: the candidates each group's `process_mode` looks
/// at, in its order — `newest_first` and `newest_ready_first` take newer pipelines
/// first, `oldest_first` and `unordered` (GitLab promises no order) older ones; within
/// a pipeline, ready jobs first, then in the order they were made. The first of a group
/// gets the resource when it is free, if it is ready; an upcoming one first in line
/// keeps it for itself.
pub(crate) fn order_candidates(
    candidates: Vec<Candidate>,
    modes: &HashMap<String, String>,
) -> Vec<Candidate> {
    let mode = |group: &str| modes.get(group).map(String::as_str);
    let newest_first =
        |group: &str| matches!(mode(group), Some("newest_first" | "newest_ready_first"));
    let mut kept: Vec<Candidate> = candidates
        .into_iter()
        .filter(|c| c.ready || counts_upcoming(mode(&c.group)))
        .collect();
    kept.sort_by(|a, b| {
        let pipelines = if newest_first(&a.group) && a.group == b.group {
            b.pipeline.cmp(&a.pipeline)
        } else {
            a.pipeline.cmp(&b.pipeline)
        };
        a.group
            .cmp(&b.group)
            .then(pipelines)
            .then(b.ready.cmp(&a.ready))
            .then(a.job.cmp(&b.job))
    });
    kept
}

impl super::environments::Environments<'_> {
    /// A project's resource groups, by key.
    pub async fn resource_groups(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<ResourceGroupView>, CoordinatorError> {
        self.store.project(project_id).await?;
        Ok(self
            .store
            .resource_groups(project_id)
            .await?
            .iter()
            .map(view)
            .collect())
    }

    pub async fn resource_group(
        &self,
        project_id: i64,
        key: &str,
    ) -> std::result::Result<ResourceGroupView, CoordinatorError> {
        Ok(view(&self.store.resource_group(project_id, key).await?))
    }
}

impl Coordinator {
    /// Sets a resource group's `process_mode` (GitLab's `PUT …/resource_groups/:key`).
    pub async fn update_resource_group(
        &self,
        project_id: i64,
        key: &str,
        process_mode: Option<&str>,
    ) -> std::result::Result<ResourceGroupView, CoordinatorError> {
        let Some(mode) = process_mode else {
            return self.environments().resource_group(project_id, key).await;
        };
        if !PROCESS_MODES.contains(&mode) {
            return Err(CoordinatorError::Invalid(format!(
                "process_mode does not have a valid value: give one of {}, not `{mode}`",
                PROCESS_MODES.join(", ")
            )));
        }
        let g = self
            .inner
            .store
            .set_process_mode(project_id, key, mode, now_ms())
            .await?;
        // A new order may hand the resource to another waiting job at once.
        self.assign_resources(project_id).await?;
        Ok(view(&g))
    }

    /// The jobs waiting for a resource group, in the order they will get it (GitLab's
    /// `upcoming_jobs`; for `oldest_first` and `newest_first` with the upcoming jobs
    /// the order waits for).
    pub async fn upcoming_jobs(
        &self,
        project_id: i64,
        key: &str,
    ) -> std::result::Result<Vec<JobView>, CoordinatorError> {
        let group = self.inner.store.resource_group(project_id, key).await?;
        let (candidates, _) = self.resource_use(project_id).await?;
        let candidates = candidates
            .into_iter()
            .filter(|c| c.group == group.key)
            .collect();
        let ordered = order_candidates(
            candidates,
            &HashMap::from([(group.key.clone(), group.process_mode.clone())]),
        );
        let mut out = Vec::with_capacity(ordered.len());
        for candidate in ordered {
            out.push(self.job_view_by_id(candidate.job).await?);
        }
        Ok(out)
    }

    /// A project's jobs of resource groups that wait for their resource or are still to
    /// come ([`Candidate`]), and the groups whose resource a job holds (pending, running
    /// or canceling). One indexed read ([`gantry_store::Store::resource_jobs`]):
    /// O(the project's jobs not done with a resource), not O(the jobs of its active
    /// pipelines), so a resource event costs the same in a pipeline of 10 jobs or 10,000.
    pub(crate) async fn resource_use(
        &self,
        project_id: i64,
    ) -> Result<(Vec<Candidate>, std::collections::HashSet<String>)> {
        let mut held = std::collections::HashSet::new();
        let mut candidates = Vec::new();
        for j in self.inner.store.resource_jobs(project_id).await? {
            let status = j.status;
            match status {
                Status::WaitingForResource | Status::Created | Status::Scheduled => {
                    if !j.retried {
                        candidates.push(Candidate {
                            group: j.group,
                            pipeline: j.pipeline_id,
                            job: j.id,
                            ready: status == Status::WaitingForResource,
                        });
                    }
                }
                _ => {
                    held.insert(j.group);
                }
            }
        }
        Ok((candidates, held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_expanded_and_empty_ones_dropped() {
        let vars: HashMap<String, String> =
            [("CI_ENVIRONMENT_NAME".to_owned(), "prod".to_owned())].into();
        assert_eq!(
            expand_key("deploy-$CI_ENVIRONMENT_NAME", &vars).as_deref(),
            Some("deploy-prod")
        );
        assert_eq!(expand_key("$MISSING", &vars), None);
        assert_eq!(expand_key("static", &vars).as_deref(), Some("static"));
    }

    #[test]
    fn candidates_are_ordered_by_their_groups_mode() {
        let modes: HashMap<String, String> = [
            ("new".to_owned(), "newest_first".to_owned()),
            ("old".to_owned(), "oldest_first".to_owned()),
            ("ready".to_owned(), "newest_ready_first".to_owned()),
        ]
        .into();
        let c = |group: &str, pipeline, job, ready| Candidate {
            group: group.to_owned(),
            pipeline,
            job,
            ready,
        };
        let candidates = vec![
            c("new", 1, 10, true),
            c("old", 2, 21, true),
            c("new", 3, 30, true),
            c("old", 1, 11, false),
            c("new", 3, 29, true),
            c("new", 3, 28, false),
            c("ready", 1, 40, true),
            c("ready", 2, 41, false),
            c("free", 1, 50, false),
            c("free", 2, 51, true),
        ];
        let jobs: Vec<i64> = order_candidates(candidates, &modes)
            .iter()
            .map(|c| c.job)
            .collect();
        // `free` (unordered) and `ready` (newest_ready_first) leave upcoming jobs out;
        // ready jobs come before upcoming ones of the same pipeline.
        assert_eq!(jobs, [51, 29, 30, 28, 10, 11, 21, 40]);
    }
}
