//! GitLab's `detailed_status` of a pipeline (`DetailedStatusEntity`, built by
//! `Gitlab::Ci::Status::Pipeline::Factory`): how a status is shown — icon, text, label,
//! group, tooltip, favicon — and where its details are. Pure: a status, whether the
//! pipeline has warnings, and the pipeline's path in; the entity out.
//!
//! The values are GitLab's core statuses (`lib/gitlab/ci/status/*.rb`), with the
//! pipeline factory's one group of extended statuses applied first match wins:
//! `SuccessWarning` (a success with failed jobs that were allowed to fail), `Delayed`
//! (`scheduled`) and `Blocked` (`manual`). A pipeline's status has details for any user
//! who can read it (Gantry's one user can), at the pipeline's page; core statuses have
//! no illustration (`null`). The favicon is the asset path GitLab's `image_path` gives
//! without an asset host, `/assets/ci_favicons/<name>.png` (GitLab's production assets
//! add a digest to the name).

use serde::Serialize;

use crate::processor::Status;

/// `detailed_status` of GitLab's pipeline JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DetailedStatus {
    pub icon: &'static str,
    pub text: &'static str,
    pub label: &'static str,
    pub group: &'static str,
    pub tooltip: &'static str,
    pub has_details: bool,
    pub details_path: Option<String>,
    /// Always `null`: GitLab's core statuses define none.
    pub illustration: Option<()>,
    pub favicon: String,
}

/// How one core status looks: text, label, icon, favicon name, group.
struct Look {
    text: &'static str,
    label: &'static str,
    icon: &'static str,
    favicon: &'static str,
    group: &'static str,
}

/// GitLab's core status classes.
fn core(status: Status) -> Look {
    let look = |text, label, icon, favicon, group| Look {
        text,
        label,
        icon,
        favicon,
        group,
    };
    match status {
        Status::Created => look(
            "Created",
            "created",
            "status_created",
            "favicon_status_created",
            "created",
        ),
        Status::WaitingForResource => look(
            "Waiting",
            "waiting for resource",
            "status_pending",
            "favicon_status_pending",
            "waiting-for-resource",
        ),
        Status::Preparing => look(
            "Preparing",
            "preparing",
            "status_preparing",
            "favicon_status_preparing",
            "preparing",
        ),
        Status::WaitingForCallback => look(
            "Waiting",
            "waiting for callback",
            "status_pending",
            "favicon_status_pending",
            "waiting-for-callback",
        ),
        Status::Pending => look(
            "Pending",
            "pending",
            "status_pending",
            "favicon_status_pending",
            "pending",
        ),
        Status::Running => look(
            "Running",
            "running",
            "status_running",
            "favicon_status_running",
            "running",
        ),
        Status::Success => look(
            "Passed",
            "passed",
            "status_success",
            "favicon_status_success",
            "success",
        ),
        Status::Failed => look(
            "Failed",
            "failed",
            "status_failed",
            "favicon_status_failed",
            "failed",
        ),
        Status::Canceling => look(
            "Canceling",
            "canceling",
            "status_canceled",
            "favicon_status_canceled",
            "canceling",
        ),
        Status::Canceled => look(
            "Canceled",
            "canceled",
            "status_canceled",
            "favicon_status_canceled",
            "canceled",
        ),
        Status::Skipped => look(
            "Skipped",
            "skipped",
            "status_skipped",
            "favicon_status_skipped",
            "skipped",
        ),
        Status::Manual => look(
            "Manual",
            "manual action",
            "status_manual",
            "favicon_status_manual",
            "manual",
        ),
        Status::Scheduled => look(
            "Scheduled",
            "scheduled",
            "status_scheduled",
            "favicon_status_scheduled",
            "scheduled",
        ),
    }
}

/// A pipeline's detailed status: `status`, whether some latest job failed or was
/// canceled with `allow_failure` (`warnings`), and the pipeline's page path
/// (`/group/project/-/pipelines/ID`).
pub fn pipeline_detailed_status(
    status: Status,
    warnings: bool,
    details_path: String,
) -> DetailedStatus {
    let mut look = core(status);
    match status {
        // `SuccessWarning` keeps the success favicon (it delegates what it does not
        // override to the status it extends).
        Status::Success if warnings => {
            look.text = "Warning";
            look.label = "passed with warnings";
            look.icon = "status_warning";
            look.group = "success-with-warnings";
        }
        Status::Scheduled => {
            look.text = "Delayed";
            look.label = "waiting for delayed job";
        }
        Status::Manual => {
            look.text = "Blocked";
            look.label = "waiting for manual action";
        }
        _ => {}
    }
    DetailedStatus {
        icon: look.icon,
        text: look.text,
        label: look.label,
        group: look.group,
        tooltip: look.label,
        has_details: true,
        details_path: Some(details_path),
        illustration: None,
        favicon: format!("/assets/ci_favicons/{}.png", look.favicon),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every status a pipeline can have, and a success with warnings, as the API shows
    /// them.
    #[test]
    fn every_pipeline_status_looks_as_gitlab_shows_it() {
        let statuses = [
            Status::Created,
            Status::WaitingForResource,
            Status::Preparing,
            Status::WaitingForCallback,
            Status::Pending,
            Status::Running,
            Status::Success,
            Status::Failed,
            Status::Canceling,
            Status::Canceled,
            Status::Skipped,
            Status::Manual,
            Status::Scheduled,
        ];
        let mut shown: Vec<(String, DetailedStatus)> = statuses
            .iter()
            .map(|s| {
                (
                    s.as_str().to_owned(),
                    pipeline_detailed_status(*s, false, "/g/app/-/pipelines/7".into()),
                )
            })
            .collect();
        shown.push((
            "success with warnings".into(),
            pipeline_detailed_status(Status::Success, true, "/g/app/-/pipelines/7".into()),
        ));
        // Warnings change nothing but a success.
        assert_eq!(
            pipeline_detailed_status(Status::Failed, true, "/p".into()),
            pipeline_detailed_status(Status::Failed, false, "/p".into())
        );
        insta::assert_yaml_snapshot!(shown);
    }
}
