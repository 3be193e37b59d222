//! The pipeline processor: GitLab's job state machine as pure functions over a
//! [`PipelineState`] (spec `ci-yaml.md` §5). No database, no clock, no I/O: the store
//! loads a state, calls these functions with `now`, persists the returned
//! [`Transition`]s in one transaction, and commits them to its copy.
//!
//! - [`process`] — the processing loop: enqueue / actionize / schedule / skip `created`
//!   jobs (§5.3–§5.5). [`PipelineState::advance`] = a pass over what changed since the
//!   last one (deciding what a full [`process`] would) + commit + the statuses' state
//!   machines. The state keeps an index (dependents, per-stage COMPOSITE key counts) so a
//!   pass costs O(jobs it decides + their dependents + stages²), not O(stages × jobs).
//! - [`apply`] — an [`Event`] from a runner, a user or a timer (§5.2, §5.7, §5.11, §5.13).
//! - [`composite`], [`PipelineState::composite_status`], [`PipelineState::stage_composite`]
//!   — COMPOSITE (§5.6).
//! - [`pipeline_status`], [`PipelineState::stage_status`], [`next_pipeline_status`],
//!   [`next_stage_status`] — the pipeline's and the stages' own state machines (GitLab
//!   `Ci::Pipeline`, `Ci::Stage`): from the previous status to the COMPOSITE, once per pass.
//! - [`RetryPolicy`] — automatic retry decisions (§5.7).
//! - [`due_events`], [`effective_timeout`] — what time makes due; job timeouts.
//! - [`on_new_commit`] — auto-cancel of redundant pipelines (§5.11).
//!
//! Invariants: deterministic (no randomness; time is a parameter); one pass reaches a fixed
//! point (`tests/scenarios.rs` checks it after every event) and the incremental pass
//! decides what a full pass would (`process.rs`'s randomized lockstep test); retried rows
//! never count for a status, and user actions apply to a name's latest attempt only; stage
//! statuses are not stored (no API shows them). `FailureReason` is `gantry_protocol`'s: one
//! list of GitLab's `failure_reason` values for the runner, the wire and the processor.
//!
//! Tests: `tests/scenarios.rs`, YAML pipelines with event scripts, each citing the §5 rules
//! it covers (a rule without a scenario fails the suite), tricky ones as insta snapshots of
//! the transition log; its `gitlab_processing` module runs GitLab's own 60 processing test
//! cases, their YAML files unchanged (`tests/gitlab_processing/test_cases/`, `SOURCE.md`).

mod cancel;
mod composite;
mod events;
mod pipeline_machine;
mod process;
mod retry;
mod state;
mod status;
mod timeout;
mod transition;

pub use cancel::{AUTO_CANCEL_MAX_AGE, PipelineFacts, on_new_commit};
pub use composite::{Mode, Summary, composite};
pub use events::{CancelScope, Event, Rejected, apply};
/// Why a job failed: GitLab's `failure_reason` values, the protocol crate's one list
/// ([`FailureReason::is_stored_by_server`] tells the ones the coordinator records).
pub use gantry_protocol::FailureReason;
pub use pipeline_machine::{next_pipeline_status, next_stage_status};
pub use process::{process, valid_prev};
pub use retry::{RetryPolicy, RetryWhen, never_retried};
pub use state::{
    AutoCancel, InvalidState, JobId, JobState, OnJobFailure, OnNewCommit, PipelineState, Timestamp,
    pipeline_status,
};
pub use status::{JobStatus, PipelineStatus, Status};
pub use timeout::{EffectiveTimeout, TimeoutSource, Watchdog, due_events, effective_timeout};
pub use transition::{Attempt, CancelCause, Change, JobEvent, RetryCause, Transition};
