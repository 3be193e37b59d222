//! The pipeline's and the stages' own state machines (GitLab `Ci::Pipeline`'s and
//! `Ci::Stage`'s `state_machine :status`, spec §5.6): a pipeline's status is not only the
//! COMPOSITE of its jobs, it also remembers where the pipeline was.
//!
//! GitLab stores the pipeline status and moves it once per processing pass:
//! `AtomicProcessingService#update_pipeline!` calls `pipeline.set_status(status_of_all)`,
//! and `set_status` fires the state-machine event named after the composite (`pending` →
//! `enqueue`, `running` → `run`, `success` → `succeed`, `failed` → `drop`, `canceling` →
//! `start_cancel`, `canceled` → `cancel`, `skipped` → `skip`, `manual` → `block`,
//! `scheduled` → `delay`, `waiting_for_resource` → `request_resource`, `preparing` →
//! `prepare`, `waiting_for_callback` → `wait_for_callback`; `created` fires nothing). A
//! transition the machine does not allow from the current state is not taken (the
//! non-bang event returns false) and the status stays. [`next_pipeline_status`] is that
//! table; [`super::PipelineState::advance`] applies it at the end of every pass, and the
//! coordinator persists the result ([`super::pipeline_status`]).
//!
//! The table, from `app/models/ci/pipeline.rb` (the version with `waiting_for_callback`
//! and `canceling`):
//!
//! | composite | event | from → to |
//! |---|---|---|
//! | `created` | — | unchanged |
//! | `pending` | `enqueue` | created, manual, waiting_for_resource, preparing, skipped, scheduled → pending; success, failed, canceling, canceled, running → running; waiting_for_callback stays; pending stays |
//! | `canceling` | `start_cancel` | any but canceling, canceled → canceling; canceled stays |
//! | any other `X` | its event | any → `X` (`succeed` is `any => success`; the others are `any - [X] => X`, the same result) |
//!
//! What this changes in practice: retrying a job of a finished pipeline makes it `running`,
//! not `pending` (it has run before); a running pipeline whose jobs are all queued again
//! (an allowed failure with the next job pending) stays `running`.
//!
//! Choices where the source leaves room:
//!
//! - **Version.** The source was read from GitLab's public mirror (`gitlabhq/gitlabhq`)
//!   through an index without commit dates; older versions of the machine let fewer states
//!   `enqueue` (no `manual`, `waiting_for_resource` or `canceling`; no `running → running`
//!   loop). The newest one read (the one that knows `waiting_for_callback` and
//!   `canceling`) is implemented: a `manual` pipeline whose manual job is played becomes
//!   `pending`, as the later versions say.
//! - **`pending` from `pending`.** Not listed in `enqueue`, so the event is refused; the
//!   status is `pending` either way.
//! - **Stages.** GitLab's `Ci::Stage` has a machine of its own ([`next_stage_status`]):
//!   every event goes from any state to the composite (`enqueue` too), except that
//!   `created` fires nothing and `start_cancel` does not leave `canceled`. So a stage whose
//!   skipped jobs were reset and wait stays `skipped`, as GitLab's test cases expect. The
//!   coordinator stores no stage statuses (no API shows them): a state loaded from rows
//!   starts each stage at its jobs' COMPOSITE ([`super::PipelineState::from_parts`]).
//! - **When it moves.** Only at the end of a processing pass, as in GitLab: an event
//!   applied without processing (a retry's new attempt before the pass that enqueues it)
//!   leaves the pipeline and stage statuses where they were. The coordinator runs every
//!   decision through [`super::PipelineState::advance`] (up to a few passes, e.g. when a
//!   trigger job starts at once) and persists the status the last pass left; GitLab would
//!   store each pass's, which only shows between passes.

use super::status::Status;

/// The status a pipeline that was `previous` takes when a processing pass finds its jobs'
/// COMPOSITE to be `composite` (GitLab `Ci::Pipeline#set_status`).
pub fn next_pipeline_status(previous: Status, composite: Status) -> Status {
    use Status::*;
    match composite {
        // `set_status('created')` fires no event.
        Created => previous,
        // `enqueue`
        Pending => match previous {
            Created | Manual | WaitingForResource | Preparing | Skipped | Scheduled | Pending => {
                Pending
            }
            Success | Failed | Canceling | Canceled | Running => Running,
            WaitingForCallback => WaitingForCallback,
        },
        // `start_cancel`: any - [canceling, canceled] => canceling
        Canceling => match previous {
            Canceled => Canceled,
            Created | WaitingForResource | Preparing | WaitingForCallback | Pending | Running
            | Success | Failed | Canceling | Skipped | Manual | Scheduled => Canceling,
        },
        // `request_resource`, `prepare`, `wait_for_callback`, `run`, `succeed`, `drop`,
        // `cancel`, `skip`, `block`, `delay`: from any state to the composite.
        WaitingForResource | Preparing | WaitingForCallback | Running | Success | Failed
        | Canceled | Skipped | Manual | Scheduled => composite,
    }
}

/// The status a stage that was `previous` takes when a processing pass finds its jobs'
/// COMPOSITE to be `composite` (GitLab `Ci::Stage#set_status`).
pub fn next_stage_status(previous: Status, composite: Status) -> Status {
    match (previous, composite) {
        // `set_status('created')` fires no event.
        (p, Status::Created) => p,
        // `start_cancel`: any - [canceling, canceled] => canceling
        (Status::Canceled, Status::Canceling) => Status::Canceled,
        // every other event: any (but the target itself) => the composite
        (_, c) => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    /// Every (previous, composite) pair: the composite, except the rows of the table.
    #[test]
    fn every_pair() {
        for &previous in Status::ALL {
            for &composite in Status::ALL {
                let want = match (previous, composite) {
                    (p, Created) => p,
                    (Success | Failed | Canceling | Canceled | Running, Pending) => Running,
                    (WaitingForCallback, Pending) => WaitingForCallback,
                    (Canceled, Canceling) => Canceled,
                    (_, c) => c,
                };
                assert_eq!(
                    next_pipeline_status(previous, composite),
                    want,
                    "{previous} with composite {composite}"
                );
            }
        }
    }

    #[test]
    fn stages_follow_the_composite_but_keep_their_status_on_created() {
        for &previous in Status::ALL {
            for &composite in Status::ALL {
                let want = match (previous, composite) {
                    (p, Created) => p,
                    (Canceled, Canceling) => Canceled,
                    (_, c) => c,
                };
                assert_eq!(next_stage_status(previous, composite), want);
            }
        }
        assert_eq!(next_stage_status(Failed, Pending), Pending);
        assert_eq!(next_stage_status(Skipped, Created), Skipped);
    }

    #[test]
    fn a_retried_failed_pipeline_runs_again() {
        assert_eq!(next_pipeline_status(Failed, Pending), Running);
        assert_eq!(next_pipeline_status(Success, Pending), Running);
        assert_eq!(next_pipeline_status(Canceled, Pending), Running);
    }

    #[test]
    fn a_new_or_blocked_pipeline_is_queued() {
        assert_eq!(next_pipeline_status(Created, Pending), Pending);
        assert_eq!(next_pipeline_status(Manual, Pending), Pending);
        assert_eq!(next_pipeline_status(Scheduled, Pending), Pending);
        assert_eq!(next_pipeline_status(Skipped, Pending), Pending);
    }

    #[test]
    fn a_running_pipeline_stays_running_while_jobs_queue() {
        assert_eq!(next_pipeline_status(Running, Pending), Running);
    }
}
