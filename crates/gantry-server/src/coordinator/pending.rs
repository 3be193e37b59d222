//! Why a job waits: for a `pending` job, what the runners are to it — none may take it
//! (and which of the queue's conditions stops them), or those that may are paused,
//! offline or busy, or it is simply next for one of them; for a `waiting_for_resource`
//! job, its resource group. Computed from the queue's own matching rules
//! ([`queue::runner_fit`], one implementation) over every runner when it is asked
//! (nothing is stored): the runners as this process keeps them for a few seconds (the
//! roster of `runners.rs`, read again at any change of runners here and when a runner
//! comes online), their executing jobs read each time. GitLab's wording where GitLab has one (its job page's
//! "stuck" block, `Ci::Build#stuck?`: pending and no online runner can pick it).
//!
//! Shown in the job API (`pending_reason`, Gantry's key: `null` when the job does not
//! wait), the web UI, `gantry pipeline show` and `gantry run`, which ends the run when no
//! runner it has could ever take a job ([`PendingReason::needs_another_runner`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::ser::SerializeStruct as _;
use serde::{Serialize, Serializer};

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::queue::{self, Fit, JobNeeds};
use super::spec::StoredSpec;
use super::views::Runner;
use crate::processor::Status;

/// Why a job is `pending` (or `waiting_for_resource`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// No runner serves the job's project (none of the instance, none of its groups,
    /// none of its own).
    NoRunner,
    /// Runners serve the project, but none has every one of the job's tags.
    NoRunnerMatchesTags { tags: Vec<String> },
    /// The job has no tags and no runner serving the project runs untagged jobs.
    NoRunnerRunsUntagged,
    /// The runners with the job's tags run only jobs of protected refs; its ref is not.
    RefNotProtected,
    /// The only runners with the job's tags belong to other projects or groups.
    RunnersLocked,
    /// Every runner that may take it is paused.
    RunnersPaused,
    /// Every runner that may take it (not paused) is offline: no contact in the last 2
    /// hours, or none yet.
    RunnersOffline,
    /// Every online runner that may take it is executing other jobs.
    RunnersBusy { runners: usize },
    /// Online runners that may take it exist, one of them is not busy: it is taken at
    /// its next job request.
    WaitingForRunner { runners: usize },
    /// Its resource group's resource is held by another job (or kept for one ahead of
    /// it in the group's `process_mode` order).
    ResourceGroupHeld { key: String },
}

impl PendingReason {
    /// A stable name for programs (`pending_reason.code` in the job API).
    pub fn code(&self) -> &'static str {
        match self {
            PendingReason::NoRunner => "no_runner",
            PendingReason::NoRunnerMatchesTags { .. } => "no_runner_matches_tags",
            PendingReason::NoRunnerRunsUntagged => "no_runner_runs_untagged",
            PendingReason::RefNotProtected => "ref_not_protected",
            PendingReason::RunnersLocked => "runners_locked",
            PendingReason::RunnersPaused => "runners_paused",
            PendingReason::RunnersOffline => "runners_offline",
            PendingReason::RunnersBusy { .. } => "runners_busy",
            PendingReason::WaitingForRunner { .. } => "waiting_for_runner",
            PendingReason::ResourceGroupHeld { .. } => "resource_group_held",
        }
    }

    /// GitLab's `stuck?`: no online, active runner can take the job as things are.
    pub fn stuck(&self) -> bool {
        match self {
            PendingReason::NoRunner
            | PendingReason::NoRunnerMatchesTags { .. }
            | PendingReason::NoRunnerRunsUntagged
            | PendingReason::RefNotProtected
            | PendingReason::RunnersLocked
            | PendingReason::RunnersPaused
            | PendingReason::RunnersOffline => true,
            PendingReason::RunnersBusy { .. }
            | PendingReason::WaitingForRunner { .. }
            | PendingReason::ResourceGroupHeld { .. } => false,
        }
    }

    /// No runner there is could take the job, whatever their state: only a new runner,
    /// or other settings of one, would. (Paused and offline runners may come back.)
    pub fn needs_another_runner(&self) -> bool {
        match self {
            PendingReason::NoRunner
            | PendingReason::NoRunnerMatchesTags { .. }
            | PendingReason::NoRunnerRunsUntagged
            | PendingReason::RefNotProtected
            | PendingReason::RunnersLocked => true,
            PendingReason::RunnersPaused
            | PendingReason::RunnersOffline
            | PendingReason::RunnersBusy { .. }
            | PendingReason::WaitingForRunner { .. }
            | PendingReason::ResourceGroupHeld { .. } => false,
        }
    }
}

/// The message a user reads.
impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const STUCK: &str = "This job is stuck because";
        match self {
            PendingReason::NoRunner => write!(
                f,
                "{STUCK} the project doesn't have any runners online assigned to it."
            ),
            PendingReason::NoRunnerMatchesTags { tags } => write!(
                f,
                "{STUCK} you don't have any active runners online or available with any of these tags assigned to them: {}",
                tags.join(" ")
            ),
            PendingReason::NoRunnerRunsUntagged => write!(
                f,
                "{STUCK} you don't have any active runners that can run this job: it has no tags, and no runner runs untagged jobs."
            ),
            PendingReason::RefNotProtected => write!(
                f,
                "{STUCK} the runners with its tags run only jobs of protected branches and tags, and its ref is not protected."
            ),
            PendingReason::RunnersLocked => write!(
                f,
                "{STUCK} the runners with its tags are locked to other projects or groups."
            ),
            PendingReason::RunnersPaused => {
                write!(f, "{STUCK} the runners that can run it are paused.")
            }
            PendingReason::RunnersOffline => write!(
                f,
                "{STUCK} the runners that can run it are offline: none asked for a job in the last 2 hours."
            ),
            PendingReason::RunnersBusy { runners: 1 } => write!(
                f,
                "This job is waiting for the runner that can run it, which is busy with other jobs."
            ),
            PendingReason::RunnersBusy { runners } => write!(
                f,
                "This job is waiting for the {runners} runners that can run it, which are all busy with other jobs."
            ),
            PendingReason::WaitingForRunner { .. } => write!(
                f,
                "This job is in pending state and is waiting to be picked by a runner."
            ),
            PendingReason::ResourceGroupHeld { key } => {
                write!(f, "This job is waiting for resource: {key}")
            }
        }
    }
}

/// `{"code": …, "message": …}`.
impl Serialize for PendingReason {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut out = s.serialize_struct("PendingReason", 2)?;
        out.serialize_field("code", self.code())?;
        out.serialize_field("message", &self.to_string())?;
        out.end()
    }
}

/// Why a `pending` job that asks `job` of a runner waits, given every runner and how
/// many jobs each is executing (`busy`, by runner id).
pub(crate) fn pending_reason(
    job: &JobNeeds<'_>,
    runners: &[Runner],
    busy: &HashMap<i64, i64>,
) -> PendingReason {
    let fits: Vec<(&Runner, Fit)> = runners
        .iter()
        .map(|r| (r, queue::runner_fit(r, job)))
        .collect();
    let able: Vec<&Runner> = fits
        .iter()
        .filter(|(_, fit)| fit.runs())
        .map(|(r, _)| *r)
        .collect();
    if able.is_empty() {
        // The condition that stops the runners closest to taking it.
        return if fits
            .iter()
            .any(|(_, fit)| !fit.scope && fit.tags && fit.protection)
        {
            PendingReason::RunnersLocked
        } else if fits.iter().any(|(_, fit)| fit.scope && fit.tags) {
            PendingReason::RefNotProtected
        } else if !fits.iter().any(|(_, fit)| fit.scope) {
            PendingReason::NoRunner
        } else if job.tags.is_empty() {
            PendingReason::NoRunnerRunsUntagged
        } else {
            PendingReason::NoRunnerMatchesTags {
                tags: job.tags.to_vec(),
            }
        };
    }
    let active: Vec<&Runner> = able.into_iter().filter(|r| !r.paused).collect();
    if active.is_empty() {
        return PendingReason::RunnersPaused;
    }
    let online: Vec<&Runner> = active.into_iter().filter(|r| r.online).collect();
    if online.is_empty() {
        return PendingReason::RunnersOffline;
    }
    let runners = online.len();
    if online
        .iter()
        .all(|r| busy.get(&r.id).is_some_and(|n| *n > 0))
    {
        PendingReason::RunnersBusy { runners }
    } else {
        PendingReason::WaitingForRunner { runners }
    }
}

/// Every runner and how many jobs each executes, read once for the waiting jobs of a
/// view.
pub(crate) struct RunnerPool {
    runners: Arc<Vec<Runner>>,
    busy: HashMap<i64, i64>,
}

impl RunnerPool {
    /// Why `job` (of `project`, with its `spec`) waits; `None` unless it is `pending` or
    /// `waiting_for_resource`.
    pub(crate) fn reason(
        &self,
        job: &gantry_store::Job,
        project_name: &str,
        spec: Option<&StoredSpec>,
    ) -> Option<PendingReason> {
        // A trigger job is started by the coordinator, never by a runner.
        if spec.is_some_and(StoredSpec::is_bridge) {
            return None;
        }
        match job.status {
            Status::Pending => Some(pending_reason(
                &JobNeeds {
                    project_id: job.project_id,
                    project_name,
                    protected: job.protected,
                    tags: &job.tags,
                },
                &self.runners,
                &self.busy,
            )),
            Status::WaitingForResource => Some(PendingReason::ResourceGroupHeld {
                key: spec
                    .and_then(|s| s.job.resource_group.clone())
                    .unwrap_or_default(),
            }),
            _ => None,
        }
    }
}

/// Whether a job of this status has a [`PendingReason`].
pub(crate) fn waits(status: Status) -> bool {
    matches!(status, Status::Pending | Status::WaitingForResource)
}

impl Coordinator {
    /// Every runner (kept for a few seconds, `runners.rs`) and their executing jobs, for
    /// [`RunnerPool::reason`]: O(runners) in memory, O(executing jobs) read.
    pub(crate) async fn runner_pool(&self) -> Result<RunnerPool> {
        let store = &self.inner.store;
        let runners = self.runner_roster().await?;
        let busy = store
            .executing_jobs_per_runner()
            .await?
            .into_iter()
            .collect();
        Ok(RunnerPool { runners, busy })
    }

    /// Why each waiting job (the current attempts, `pending` or `waiting_for_resource`)
    /// of pipeline `pipeline_id` waits, by job id: what a view following a running
    /// pipeline asks when one of its jobs stays pending. Reads nothing more when none
    /// waits.
    pub async fn pending_reasons(
        &self,
        pipeline_id: i64,
    ) -> std::result::Result<Vec<(i64, PendingReason)>, CoordinatorError> {
        let (rows, specs) = self.rows_with_specs(pipeline_id).await?;
        let waiting: Vec<(&gantry_store::Job, &Arc<StoredSpec>)> = rows
            .iter()
            .zip(&specs)
            .filter(|(j, _)| !j.retried && waits(j.status))
            .collect();
        let Some((first, _)) = waiting.first() else {
            return Ok(Vec::new());
        };
        let project = self.facts().project(first.project_id).await?;
        let pool = self.runner_pool().await?;
        Ok(waiting
            .into_iter()
            .filter_map(|(job, spec)| {
                Some((
                    job.id,
                    pool.reason(job, &project.name, Some(spec.as_ref()))?,
                ))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::views::RunnerGroup;

    fn runner(id: i64, tags: &[&str]) -> Runner {
        Runner::online_instance(id, tags)
    }

    fn reason(tags: &[&str], protected: bool, runners: &[Runner], busy: &[i64]) -> PendingReason {
        let tags: Vec<String> = tags.iter().map(|t| (*t).to_owned()).collect();
        let busy = busy.iter().map(|id| (*id, 1)).collect();
        pending_reason(
            &JobNeeds {
                project_id: 7,
                project_name: "acme/widget",
                protected,
                tags: &tags,
            },
            runners,
            &busy,
        )
    }

    #[test]
    fn a_job_whose_tags_no_runner_has_is_stuck_with_gitlabs_message() {
        let why = reason(&["docker", "linux"], false, &[runner(1, &["docker"])], &[]);
        assert_eq!(
            why,
            PendingReason::NoRunnerMatchesTags {
                tags: vec!["docker".into(), "linux".into()]
            }
        );
        assert_eq!(
            why.to_string(),
            "This job is stuck because you don't have any active runners online or available with any of these tags assigned to them: docker linux"
        );
        assert!(why.stuck() && why.needs_another_runner());
        assert_eq!(
            serde_json::to_value(&why).ok(),
            Some(serde_json::json!({"code": "no_runner_matches_tags", "message": why.to_string()}))
        );
    }

    #[test]
    fn the_closest_runners_say_what_stops_them() {
        assert_eq!(reason(&[], false, &[], &[]), PendingReason::NoRunner);
        let tagged_only = Runner {
            run_untagged: false,
            ..runner(1, &["docker"])
        };
        assert_eq!(
            reason(&[], false, &[tagged_only], &[]),
            PendingReason::NoRunnerRunsUntagged
        );
        let protected = Runner {
            access_level: "ref_protected",
            ..runner(1, &["docker"])
        };
        assert_eq!(
            reason(&["docker"], false, std::slice::from_ref(&protected), &[]),
            PendingReason::RefNotProtected
        );
        assert_eq!(
            reason(&["docker"], true, &[protected], &[]),
            PendingReason::WaitingForRunner { runners: 1 }
        );
        let elsewhere = Runner {
            project_id: Some(8),
            ..runner(2, &["docker"])
        };
        let other_group = Runner {
            groups: vec![RunnerGroup {
                name: "other".into(),
                full_path: "other".into(),
            }],
            ..runner(3, &["docker"])
        };
        assert_eq!(
            reason(&["docker"], false, &[runner(1, &[]), elsewhere], &[]),
            PendingReason::RunnersLocked
        );
        assert_eq!(
            reason(&["docker"], false, &[other_group], &[]),
            PendingReason::RunnersLocked
        );
    }

    #[test]
    fn runners_that_may_take_it_are_paused_offline_busy_or_about_to() {
        let paused = Runner {
            paused: true,
            active: false,
            ..runner(1, &[])
        };
        let offline = Runner {
            online: false,
            status: "offline",
            ..runner(2, &[])
        };
        assert_eq!(
            reason(&[], false, std::slice::from_ref(&paused), &[]),
            PendingReason::RunnersPaused
        );
        assert_eq!(
            reason(&[], false, &[paused, offline.clone()], &[]),
            PendingReason::RunnersOffline
        );
        let two = [runner(3, &[]), runner(4, &[]), offline];
        assert_eq!(
            reason(&[], false, &two, &[3, 4]),
            PendingReason::RunnersBusy { runners: 2 }
        );
        assert_eq!(
            reason(&[], false, &two, &[3]),
            PendingReason::WaitingForRunner { runners: 2 }
        );
        assert!(!PendingReason::RunnersOffline.needs_another_runner());
    }

    #[test]
    fn a_runner_taking_any_tags_takes_tagged_and_untagged_jobs() {
        let any = Runner {
            any_tags: true,
            run_untagged: false,
            ..runner(1, &["unrelated"])
        };
        assert_eq!(
            reason(&["docker", "linux"], false, std::slice::from_ref(&any), &[]),
            PendingReason::WaitingForRunner { runners: 1 }
        );
        assert_eq!(
            reason(&[], false, &[any], &[]),
            PendingReason::WaitingForRunner { runners: 1 }
        );
    }
}
