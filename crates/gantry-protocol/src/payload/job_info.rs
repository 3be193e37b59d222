//! `job_info` of the job payload (§3.5.1).

use serde::{Deserialize, Serialize};

use crate::json::zero_if_null;

/// `job_info` (§3.5.1). Older GitLab sends fewer keys; absent ones decode as zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobInfo {
    /// Job id (Rails exposes it; gitlab-runner ignores it).
    #[serde(deserialize_with = "zero_if_null")]
    pub id: i64,
    /// Job name, e.g. `rspec 1/2`.
    #[serde(deserialize_with = "zero_if_null")]
    pub name: String,
    /// Stage name.
    #[serde(deserialize_with = "zero_if_null")]
    pub stage: String,
    /// Pipeline id.
    #[serde(deserialize_with = "zero_if_null")]
    pub pipeline_id: i64,
    /// Project id; the runner uses it in build directory and container names.
    #[serde(deserialize_with = "zero_if_null")]
    pub project_id: i64,
    /// Project name.
    #[serde(deserialize_with = "zero_if_null")]
    pub project_name: String,
    /// `group/subgroup/project`.
    #[serde(deserialize_with = "zero_if_null")]
    pub project_full_path: String,
    /// Namespace id.
    #[serde(deserialize_with = "zero_if_null")]
    pub namespace_id: i64,
    /// Top-level namespace id.
    #[serde(deserialize_with = "zero_if_null")]
    pub root_namespace_id: i64,
    /// Organization id.
    #[serde(deserialize_with = "zero_if_null")]
    pub organization_id: i64,
    /// Anonymous instance id.
    #[serde(deserialize_with = "zero_if_null")]
    pub instance_id: String,
    /// Instance UUID.
    #[serde(deserialize_with = "zero_if_null")]
    pub instance_uuid: String,
    /// Triggering user.
    #[serde(deserialize_with = "zero_if_null")]
    pub user_id: i64,
    /// Composite-identity user; normally `null`.
    pub scoped_user_id: Option<i64>,
    /// Seconds the job waited in the queue.
    #[serde(deserialize_with = "zero_if_null")]
    pub time_in_queue_seconds: f64,
    /// `"+Inf"` for non-instance runners, else a count or `"<max>+"`.
    #[serde(deserialize_with = "zero_if_null")]
    pub project_jobs_running_on_instance_runners_count: String,
    /// Queue size when the job was picked.
    #[serde(deserialize_with = "zero_if_null")]
    pub queue_size: i64,
    /// Candidates examined before this job.
    #[serde(deserialize_with = "zero_if_null")]
    pub queue_depth: i64,
}
