//! Resource groups (`resource_group:`; GitLab's `/projects/:id/resource_groups`): the key
//! expanded at pipeline creation (GitLab's `expanded_resource_group_key`), the groups'
//! `process_mode`, the order waiting jobs get a resource in ([`order_waiting`], used by
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

/// Sorts waiting jobs `(group, pipeline id, job id)` into the order they get their
/// resource: `newest_first` and `newest_ready_first` take newer pipelines first,
/// `oldest_first` and `unordered` (GitLab promises no order) older ones; within a
/// pipeline, jobs in the order they were made.
pub(crate) fn order_waiting(waiting: &mut [(String, i64, i64)], modes: &HashMap<String, String>) {
    let newest_first = |group: &str| {
        matches!(
            modes.get(group).map(String::as_str),
            Some("newest_first" | "newest_ready_first")
        )
    };
    waiting.sort_by(|(ga, pa, ja), (gb, pb, jb)| {
        let pipelines = if newest_first(ga) && ga == gb {
            pb.cmp(pa)
        } else {
            pa.cmp(pb)
        };
        ga.cmp(gb).then(pipelines).then(ja.cmp(jb))
    });
}

impl Coordinator {
    /// A project's resource groups, by key.
    pub async fn resource_groups(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<ResourceGroupView>, CoordinatorError> {
        self.inner.store.project(project_id).await?;
        Ok(self
            .inner
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
        Ok(view(
            &self.inner.store.resource_group(project_id, key).await?,
        ))
    }

    /// Sets a resource group's `process_mode` (GitLab's `PUT …/resource_groups/:key`).
    pub async fn update_resource_group(
        &self,
        project_id: i64,
        key: &str,
        process_mode: Option<&str>,
    ) -> std::result::Result<ResourceGroupView, CoordinatorError> {
        let Some(mode) = process_mode else {
            return self.resource_group(project_id, key).await;
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
    /// `upcoming_jobs`).
    pub async fn upcoming_jobs(
        &self,
        project_id: i64,
        key: &str,
    ) -> std::result::Result<Vec<JobView>, CoordinatorError> {
        let group = self.inner.store.resource_group(project_id, key).await?;
        let (waiting, _) = self.resource_use(project_id).await?;
        let mut waiting: Vec<_> = waiting
            .into_iter()
            .filter(|(g, _, _)| *g == group.key)
            .collect();
        order_waiting(
            &mut waiting,
            &HashMap::from([(group.key.clone(), group.process_mode.clone())]),
        );
        let mut out = Vec::with_capacity(waiting.len());
        for (_, _, job) in waiting {
            out.push(self.job_view_by_id(job).await?);
        }
        Ok(out)
    }

    /// A project's jobs waiting for a resource `(group, pipeline, job)`, and the groups
    /// whose resource a job holds (pending, running or canceling).
    pub(crate) async fn resource_use(
        &self,
        project_id: i64,
    ) -> Result<(Vec<(String, i64, i64)>, std::collections::HashSet<String>)> {
        let store = &self.inner.store;
        let mut held = std::collections::HashSet::new();
        let mut waiting = Vec::new();
        for p in store
            .active_pipelines()
            .await?
            .into_iter()
            .filter(|p| p.project_id == project_id)
        {
            for j in store.pipeline_jobs(p.id).await? {
                let Some(status) = Status::parse(&j.status) else {
                    continue;
                };
                if !matches!(
                    status,
                    Status::WaitingForResource
                        | Status::Pending
                        | Status::Running
                        | Status::Canceling
                ) {
                    continue;
                }
                let Some(group) = super::spec::StoredSpec::parse(&j.spec)
                    .ok()
                    .and_then(|s| s.job.resource_group)
                else {
                    continue;
                };
                if status == Status::WaitingForResource {
                    if !j.retried {
                        waiting.push((group, p.id, j.id));
                    }
                } else {
                    held.insert(group);
                }
            }
        }
        Ok((waiting, held))
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
    fn waiting_jobs_are_ordered_by_their_groups_mode() {
        let modes: HashMap<String, String> = [
            ("new".to_owned(), "newest_first".to_owned()),
            ("old".to_owned(), "oldest_first".to_owned()),
        ]
        .into();
        let mut waiting = vec![
            ("new".to_owned(), 1, 10),
            ("old".to_owned(), 2, 21),
            ("new".to_owned(), 3, 30),
            ("old".to_owned(), 1, 11),
            ("new".to_owned(), 3, 29),
        ];
        order_waiting(&mut waiting, &modes);
        let jobs: Vec<i64> = waiting.iter().map(|w| w.2).collect();
        assert_eq!(jobs, [29, 30, 10, 11, 21]);
    }
}
