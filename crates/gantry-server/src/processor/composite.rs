//! The COMPOSITE status of a set of jobs (spec §5.6, GitLab
//! `Gitlab::Ci::Status::Composite`): how a stage, a pipeline, or the `prev` of a job in the
//! processing loop gets one status from many.
//!
//! "Passed with warnings" is **not** a status of its own: the result is
//! [`Summary`]`{ status: Success, warnings: true }`, as GitLab stores `success` and computes
//! `has_warnings?` beside it. `warnings` is true whenever some job counted is failed or
//! canceled with `allow_failure` (whatever the overall status is).

use serde::Serialize;

use super::status::Status;

/// A composite status, and whether some job counted only as a warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub status: Status,
    pub warnings: bool,
}

/// How `prev` is computed: stage mode, or DAG mode (the job has `needs`, even `[]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Stage,
    Dag,
}

/// One job as COMPOSITE sees it: its mapped key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Status(Status),
    /// `allow_failure` and failed or canceled.
    SuccessWithWarnings,
    /// `allow_failure` and manual (an optional manual job).
    Ignored,
}

impl Key {
    fn of(status: Status, allow_failure: bool) -> Key {
        match (allow_failure, status) {
            (true, Status::Failed | Status::Canceled) => Key::SuccessWithWarnings,
            (true, Status::Manual) => Key::Ignored,
            _ => Key::Status(status),
        }
    }

    fn bit(self) -> u16 {
        1 << self.slot()
    }

    fn slot(self) -> usize {
        match self {
            Key::Status(s) => s as usize,
            Key::SuccessWithWarnings => 13,
            Key::Ignored => 14,
        }
    }
}

/// The set S of mapped keys.
#[derive(Clone, Copy, Default)]
struct Set(u16);

impl Set {
    fn has(self, k: Key) -> bool {
        self.0 & k.bit() != 0
    }
    fn any(self, s: Status) -> bool {
        self.has(Key::Status(s))
    }
    /// `only(X)`: S non-empty and S ⊆ X.
    fn only(self, statuses: &[Status], sww: bool, ignored: bool) -> bool {
        let mut allowed: u16 = statuses.iter().fold(0, |m, s| m | Key::Status(*s).bit());
        if sww {
            allowed |= Key::SuccessWithWarnings.bit();
        }
        if ignored {
            allowed |= Key::Ignored.bit();
        }
        self.0 != 0 && self.0 & !allowed == 0
    }
}

/// COMPOSITE of `(status, allow_failure)` pairs. `None` for an empty set (the processor
/// then treats `prev` as `success`).
pub fn composite(jobs: impl IntoIterator<Item = (Status, bool)>, mode: Mode) -> Option<Summary> {
    let mut set = Set::default();
    for (status, allow_failure) in jobs {
        set.0 |= Key::of(status, allow_failure).bit();
    }
    of_set(set, mode)
}

/// How many distinct keys COMPOSITE maps jobs to (the slots of a [`KeyCounts`]).
const KEYS: usize = 15;

/// The jobs of a set counted by the key COMPOSITE maps each to: COMPOSITE of the set is a
/// function of which counts are non-zero, so a set kept counted answers it in O(keys)
/// whatever its size (how [`super::PipelineState`] keeps stage and pipeline statuses
/// current without visiting every job).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeyCounts([u32; KEYS]);

impl KeyCounts {
    pub(crate) fn add(&mut self, status: Status, allow_failure: bool) {
        let k = Key::of(status, allow_failure).slot();
        self.0[k] = self.0[k].saturating_add(1);
    }

    pub(crate) fn remove(&mut self, status: Status, allow_failure: bool) {
        let k = Key::of(status, allow_failure).slot();
        self.0[k] = self.0[k].saturating_sub(1);
    }

    /// Add every count of `other`.
    pub(crate) fn absorb(&mut self, other: &KeyCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a = a.saturating_add(b);
        }
    }

    /// COMPOSITE of the counted jobs (`None` for none), as [`composite`] of them.
    pub(crate) fn composite(&self, mode: Mode) -> Option<Summary> {
        let mut set = Set::default();
        for (slot, n) in self.0.iter().enumerate() {
            if *n > 0 {
                set.0 |= 1 << slot;
            }
        }
        of_set(set, mode)
    }
}

fn of_set(set: Set, mode: Mode) -> Option<Summary> {
    if set.0 == 0 {
        return None;
    }
    use Status::*;
    let status = if mode == Mode::Dag && (set.any(Skipped) || set.has(Key::Ignored)) {
        // 1. a need that did not run (skipped, or an optional manual job not played)
        Skipped
    } else if set.only(&[Skipped], false, true) {
        Skipped
    } else if set.only(&[Success, Skipped], true, true) {
        Success
    } else if set.only(&[Created], true, true) {
        Created
    } else if set.only(&[Preparing], true, true) {
        Preparing
    } else if set.only(&[Canceled, Success, Skipped], true, true) {
        Canceled
    } else if set.only(&[Pending, Created, Skipped], true, true) {
        Pending
    } else if set.any(Running) || set.any(Pending) {
        Running
    } else if set.any(WaitingForResource) {
        WaitingForResource
    } else if set.any(WaitingForCallback) {
        WaitingForCallback
    } else if set.any(Manual) {
        Manual
    } else if set.any(Scheduled) {
        Scheduled
    } else if set.any(Preparing) {
        Preparing
    } else if set.any(Created) {
        // some work done, more waiting for processing
        Running
    } else if set.any(Canceling) {
        Canceling
    } else {
        Failed
    };
    Some(Summary {
        status,
        warnings: set.has(Key::SuccessWithWarnings),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    /// `(jobs, mode, expected)`; jobs written `status` or `status!` (allow_failure).
    const TABLE: &[(&str, Mode, &str)] = &[
        // rule 1: DAG with skipped or ignored ⇒ skipped
        ("success skipped", Mode::Dag, "skipped"),
        ("success manual!", Mode::Dag, "skipped"),
        ("success manual!", Mode::Stage, "success"),
        ("failed skipped", Mode::Dag, "skipped"),
        // rule 2
        ("skipped manual!", Mode::Stage, "skipped"),
        ("manual!", Mode::Stage, "skipped"),
        // rule 3
        ("success skipped failed!", Mode::Stage, "success+warnings"),
        ("canceled!", Mode::Stage, "success+warnings"),
        ("success", Mode::Dag, "success"),
        // rule 4
        ("created failed!", Mode::Stage, "created"),
        ("created", Mode::Stage, "created"),
        // rule 5
        ("preparing manual!", Mode::Stage, "preparing"),
        // rule 6
        ("canceled success skipped", Mode::Stage, "canceled"),
        // rule 7
        ("pending created skipped", Mode::Stage, "pending"),
        // rule 8
        ("running created", Mode::Stage, "running"),
        ("pending failed", Mode::Stage, "running"),
        // rules 9..13
        (
            "waiting_for_resource success",
            Mode::Stage,
            "waiting_for_resource",
        ),
        (
            "waiting_for_callback success",
            Mode::Stage,
            "waiting_for_callback",
        ),
        ("manual success", Mode::Stage, "manual"),
        ("manual failed", Mode::Stage, "manual"),
        ("scheduled success", Mode::Stage, "scheduled"),
        ("preparing success", Mode::Stage, "preparing"),
        // rule 14: created + terminal ⇒ running
        ("created success", Mode::Stage, "running"),
        ("created failed", Mode::Stage, "running"),
        ("created canceled", Mode::Stage, "running"),
        // rule 15
        ("canceling success", Mode::Stage, "canceling"),
        // rule 16
        ("failed success", Mode::Stage, "failed"),
        ("failed canceled", Mode::Stage, "failed"),
        ("failed skipped", Mode::Stage, "failed"),
    ];

    fn parse(jobs: &str) -> Vec<(Status, bool)> {
        jobs.split_whitespace()
            .map(|j| {
                let (name, af) = j.strip_suffix('!').map_or((j, false), |n| (n, true));
                (Status::parse(name).expect("status"), af)
            })
            .collect()
    }

    #[test]
    fn every_rule() {
        for (jobs, mode, want) in TABLE {
            let got = composite(parse(jobs), *mode).expect("non-empty");
            let shown = if got.warnings && got.status == Success {
                "success+warnings".to_owned()
            } else {
                got.status.to_string()
            };
            assert_eq!(&shown, want, "COMPOSITE({jobs}) in {mode:?} mode");
        }
    }

    #[test]
    fn empty_set_has_no_status() {
        assert_eq!(composite([], Mode::Stage), None);
    }

    #[test]
    fn warnings_are_reported_even_when_not_success() {
        let s = composite([(Failed, true), (Running, false)], Mode::Stage).expect("non-empty");
        assert_eq!(s.status, Running);
        assert!(s.warnings);
    }
}
