//! Automatic retry decisions (spec §5.7, GitLab `Gitlab::Ci::Build::AutoRetry`).
//!
//! `max_allowed_retries` is, first match wins:
//! 1. 0 for reasons GitLab never retries ([`never_retried`]);
//! 2. `retry:max` if the failure reason matches `retry:when` **or** the exit code is in
//!    `retry:exit_codes` (either is enough);
//! 3. 2 for `scheduler_failure`;
//! 4. 0.
//!
//! `retry:when` absent means `[always]` unless `retry:exit_codes` is set, in which case only
//! the exit codes decide. The job is retried while the number of earlier attempts of the
//! same name (`retried` jobs) is below that maximum.

use gantry_pipeline::Retry;
use serde::{Deserialize, Serialize};

use super::FailureReason;

/// One `retry:when` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryWhen {
    Always,
    Reason(FailureReason),
}

/// A job's `retry` configuration.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// `retry:max`; `None` when no retry is configured (`retry: 0` reads the same: the
    /// compiled model does not tell them apart, so `scheduler_failure` keeps its default
    /// of 2 retries in both cases).
    pub max: Option<u8>,
    /// `retry:when` as written; empty = not written.
    pub when: Vec<RetryWhen>,
    pub exit_codes: Vec<i64>,
}

impl RetryPolicy {
    /// From the compiled `retry` (values the YAML processor validated; an unknown name,
    /// which it would have rejected, is dropped).
    pub fn from_model(r: &Retry) -> RetryPolicy {
        RetryPolicy {
            max: (r.max > 0).then_some(r.max),
            when: r
                .when
                .iter()
                .filter_map(|w| {
                    if w == "always" {
                        Some(RetryWhen::Always)
                    } else {
                        w.parse().ok().map(RetryWhen::Reason)
                    }
                })
                .collect(),
            exit_codes: r.exit_codes.clone(),
        }
    }

    /// The effective `retry:when` list.
    fn effective_when(&self) -> &[RetryWhen] {
        if self.when.is_empty() && self.exit_codes.is_empty() {
            &[RetryWhen::Always]
        } else {
            &self.when
        }
    }

    fn matches_reason(&self, reason: FailureReason) -> bool {
        self.effective_when().iter().any(|w| match w {
            RetryWhen::Always => true,
            RetryWhen::Reason(r) => *r == reason || legacy_alias(*r, reason),
        })
    }

    fn matches_exit_code(&self, exit_code: Option<i64>) -> bool {
        exit_code.is_some_and(|c| self.exit_codes.contains(&c))
    }

    /// How many retries a job that failed this way may have in total.
    pub fn max_allowed_retries(&self, reason: FailureReason, exit_code: Option<i64>) -> u8 {
        if never_retried(reason) {
            return 0;
        }
        if let Some(max) = self.max {
            if self.matches_reason(reason) || self.matches_exit_code(exit_code) {
                return max;
            }
        }
        if reason == FailureReason::SchedulerFailure {
            return 2;
        }
        0
    }

    /// Whether a job that failed this way, after `previous_attempts` retried attempts of
    /// the same name, is retried automatically.
    pub fn allows(
        &self,
        reason: FailureReason,
        exit_code: Option<i64>,
        previous_attempts: u32,
    ) -> bool {
        let max = u32::from(self.max_allowed_retries(reason, exit_code));
        max > 0 && previous_attempts < max
    }
}

/// Reasons GitLab never retries automatically (`RETRY_OVERRIDES`). The spec names
/// `ci_quota_exceeded` and `no_matching_runner`; GitLab's newest tests also never retry
/// `missing_dependency_failure`, `forward_deployment_failure` and
/// `environment_creation_failure`, and so do we (a retry cannot fix them).
pub fn never_retried(reason: FailureReason) -> bool {
    matches!(
        reason,
        FailureReason::CiQuotaExceeded
            | FailureReason::NoMatchingRunner
            | FailureReason::MissingDependencyFailure
            | FailureReason::ForwardDeploymentFailure
            | FailureReason::EnvironmentCreationFailure
    )
}

/// Legacy `retry:when` names that also match newer, finer reasons.
fn legacy_alias(configured: FailureReason, actual: FailureReason) -> bool {
    use FailureReason::*;
    match configured {
        StuckOrTimeoutFailure => matches!(
            actual,
            StuckPendingWithMatchingRunners
                | StuckPendingNoMatchingRunners
                | NoUpdatesRunning
                | NoUpdatesCanceling
        ),
        JobExecutionTimeout => matches!(actual, ServerTimeoutRunning | ServerTimeoutCanceling),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureReason::*;

    fn policy(max: Option<u8>, when: &[RetryWhen], exit_codes: &[i64]) -> RetryPolicy {
        RetryPolicy {
            max,
            when: when.to_vec(),
            exit_codes: exit_codes.to_vec(),
        }
    }

    /// GitLab's own `AutoRetry#allowed?` table (spec/lib/gitlab/ci/build/auto_retry_spec.rb),
    /// plus the legacy aliases: `(description, previous attempts, policy, reason, exit code, allowed)`.
    #[test]
    #[rustfmt::skip]
    fn gitlab_table() {
        use RetryWhen::{Always, Reason};
        type Row = (&'static str, u32, RetryPolicy, FailureReason, Option<i64>, bool);
        let rows: Vec<Row> = vec![
            ("retries are disabled", 0, policy(None, &[], &[]), ScriptFailure, None, false),
            ("max equals count", 2, policy(Some(2), &[], &[]), ScriptFailure, None, false),
            ("max is higher than count", 1, policy(Some(2), &[], &[]), ScriptFailure, None, true),
            ("matching failure reason", 0, policy(Some(2), &[Reason(ApiFailure)], &[]), ApiFailure, None, true),
            ("matching with always", 0, policy(Some(2), &[Always], &[]), ApiFailure, None, true),
            ("not matching reason", 0, policy(Some(2), &[Reason(ScriptFailure)], &[]), ApiFailure, None, false),
            ("scheduler failure override", 1, policy(Some(1), &[Reason(SchedulerFailure)], &[]), SchedulerFailure, None, false),
            ("matching exit code", 0, policy(Some(2), &[], &[255, 137]), ScriptFailure, Some(137), true),
            ("not matching exit code", 0, policy(Some(2), &[], &[255]), ScriptFailure, Some(1), false),
            ("exit code without a code", 0, policy(Some(2), &[], &[255]), RunnerSystemFailure, None, false),
            ("matching EC & FR", 0, policy(Some(2), &[Reason(ScriptFailure)], &[3]), ScriptFailure, Some(3), true),
            ("matching EC only", 0, policy(Some(2), &[Reason(ScriptFailure)], &[3]), ApiFailure, Some(3), true),
            ("matching FR only", 0, policy(Some(2), &[Reason(ScriptFailure)], &[1]), ScriptFailure, Some(137), true),
            ("not matching EC & FR", 0, policy(Some(2), &[Reason(ScriptFailure)], &[1]), ApiFailure, Some(137), false),
            ("default for scheduler failure", 1, policy(None, &[], &[]), SchedulerFailure, None, true),
            ("scheduler failure default exhausted", 2, policy(None, &[], &[]), SchedulerFailure, None, false),
            ("quota is exceeded", 0, policy(Some(2), &[], &[]), CiQuotaExceeded, None, false),
            ("no matching runner", 0, policy(Some(2), &[], &[]), NoMatchingRunner, None, false),
            ("missing dependencies", 0, policy(Some(2), &[], &[]), MissingDependencyFailure, None, false),
            ("forward deployment failure", 0, policy(Some(2), &[], &[]), ForwardDeploymentFailure, None, false),
            ("environment creation failure", 0, policy(Some(2), &[], &[]), EnvironmentCreationFailure, None, false),
            ("legacy stuck alias", 0, policy(Some(1), &[Reason(StuckOrTimeoutFailure)], &[]), NoUpdatesRunning, None, true),
            ("legacy timeout alias", 0, policy(Some(1), &[Reason(JobExecutionTimeout)], &[]), ServerTimeoutRunning, None, true),
            ("no alias the other way", 0, policy(Some(1), &[Reason(NoUpdatesRunning)], &[]), StuckOrTimeoutFailure, None, false),
        ];
        for (what, previous, p, reason, code, want) in rows {
            assert_eq!(p.allows(reason, code, previous), want, "{what}");
        }
    }

    #[test]
    fn from_model_reads_the_compiled_retry() {
        let p = RetryPolicy::from_model(&Retry {
            max: 2,
            when: vec!["always".into(), "script_failure".into()],
            exit_codes: vec![137],
        });
        assert_eq!(p.max, Some(2));
        assert_eq!(
            p.when,
            [RetryWhen::Always, RetryWhen::Reason(ScriptFailure)]
        );
        let none = RetryPolicy::from_model(&Retry {
            max: 0,
            when: vec!["always".into()],
            exit_codes: vec![],
        });
        assert_eq!(none.max, None);
    }
}
