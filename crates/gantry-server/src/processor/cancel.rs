//! `workflow:auto_cancel:on_new_commit` (spec §5.11): when a pipeline is created on a ref,
//! what happens to an older pipeline of the same ref. The answer is a
//! [`Event::CancelPipeline`](super::Event::CancelPipeline) scope to apply to it, or nothing.
//!
//! The project setting ("auto-cancel redundant pipelines"), the child-pipeline exemption,
//! the 3000-pipeline window and cascading to downstream pipelines are the caller's: they
//! need other pipelines and project settings.

use serde::Serialize;

use super::events::CancelScope;
use super::state::{OnNewCommit, PipelineState, Timestamp};

/// What the decision needs to know about a pipeline besides its jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PipelineFacts {
    /// Creation time; for a `parent_pipeline` source, the root ancestor's.
    pub created_at: Timestamp,
    pub sha: String,
    /// A CI source (push, web, schedule, merge request, ...), not e.g. `webide` or
    /// `ondemand_dast_scan`, which are never auto-canceled.
    pub ci_source: bool,
}

/// Older pipelines than this are left alone.
pub const AUTO_CANCEL_MAX_AGE: u64 = 7 * 24 * 60 * 60;

/// How the newer pipeline `new` (on the same ref, whose head is `ref_head_sha`) cancels
/// `old`, at `now`:
///
/// - keep `old` if it was created at or after `new`, is not from a CI source, has `new`'s
///   SHA or the ref's head SHA, is older than 7 days, or is not in a cancelable status;
/// - otherwise by **`old`'s** `on_new_commit`: `none` keeps it; `conservative` cancels it
///   whole only if no job without `interruptible: true` has started; `interruptible`
///   cancels its interruptible jobs.
pub fn on_new_commit(
    old: &PipelineState,
    old_facts: &PipelineFacts,
    new: &PipelineFacts,
    ref_head_sha: &str,
    now: Timestamp,
) -> Option<CancelScope> {
    let keep = old_facts.created_at >= new.created_at
        || !old_facts.ci_source
        || old_facts.sha == new.sha
        || old_facts.sha == ref_head_sha
        || now > old_facts.created_at.plus(AUTO_CANCEL_MAX_AGE);
    if keep || !super::pipeline_status(old).status.is_cancelable() {
        return None;
    }
    match old.auto_cancel().on_new_commit {
        OnNewCommit::None => None,
        OnNewCommit::Conservative => {
            let started_uninterruptible = old
                .jobs()
                .iter()
                .any(|j| !j.interruptible && j.started_at.is_some());
            (!started_uninterruptible).then_some(CancelScope::All)
        }
        OnNewCommit::Interruptible => old
            .current_jobs()
            .any(|j| j.interruptible && j.status.accepts_cancel())
            .then_some(CancelScope::InterruptibleOnly),
    }
}
