//! The pipeline processor, scenario by scenario (spec `ci-yaml.md` §5, runner API §9).
//!
//! Every scenario in [`SCENARIOS`] is a `.gitlab-ci.yml` compiled by `gantry-pipeline` and a
//! script of events with expectations, run through the one function [`check`]. Each names
//! the §5 rules it exercises; [`every_rule_has_a_scenario`] keeps [`RULES`] covered.
//! Scenarios marked `snapshot` also pin their whole transition log with insta
//! (`tests/snapshots/scenarios__<name>.snap`).
//!
//! Script language, one command per line (`#` starts a comment; job names with spaces go in
//! double quotes; `name#N` is attempt N of a job, plain `name` its latest attempt):
//!
//! - `expect k=v ...` — `JOB=status`, `pipeline=status`, `stage:NAME=status` (a `success`
//!   with warnings reads `success+warnings`), `JOB.reason=`, `JOB.exit=`,
//!   `JOB.allow_failure=`, `JOB.scheduled_at=`, `JOB.timeout=`, `JOB.attempts=`
//!   (`none` for an absent value).
//! - events: `start JOB [graceful] [runner_max=S]`, `ok JOB`, `fail JOB [exit=N]
//!   [reason=R]` (default `script_failure`, exit 1), `pass JOB` (= start + ok), `lost JOB`,
//!   `timeout JOB`, `stuck JOB`, `touch JOB`, `assign JOB`, `due JOB`, `cancel JOB`,
//!   `force-cancel JOB`, `cancel-pipeline`, `cancel-interruptible`, `play JOB`,
//!   `retry JOB`, `retry-pipeline`, `unschedule JOB`.
//! - `tick S` — advance the clock S seconds and apply what [`due_events`] says is due.
//! - `reject <event>` — the event must be refused (state unchanged).
//! - `hold <event>` — apply without running the processing loop; `process` runs it.
//!
//! After every event (except under `hold`) the harness runs the processing loop and checks
//! that running it again decides nothing: one pass reaches the fixed point.
//!
//! `SCENARIO=<substring>` runs only matching scenarios. New snapshot:
//! `INSTA_UPDATE=always cargo nextest run -p gantry-server scenarios::`, then read it.
//!
//! [`gitlab_processing`] runs GitLab's own processing test cases (its YAML files,
//! unchanged) through the same processor.

#![allow(clippy::panic, clippy::unwrap_used)]

#[path = "gitlab_processing/mod.rs"]
mod gitlab_processing;

use std::collections::BTreeMap;

use gantry_pipeline::{Context, Loader, Options, PipelineInfo, compile};
use gantry_server::processor::{
    CancelCause, CancelScope, Event, FailureReason, JobId, JobState, PipelineFacts, PipelineState,
    Status, Summary, Timestamp, Watchdog, apply, due_events, effective_timeout, on_new_commit,
    pipeline_status, process,
};

/// Project default timeout used when a runner picks a job.
const PROJECT_TIMEOUT: u64 = 3600;

struct Scenario {
    name: &'static str,
    /// Ids from [`RULES`], space-separated.
    rules: &'static str,
    yaml: &'static str,
    script: &'static str,
    snapshot: bool,
}

/// The §5 rules (and §9 timeouts) this suite must exercise. Ids are referenced from
/// scenarios' `rules`.
#[rustfmt::skip]
const RULES: &[(&str, &str)] = &[
    ("create", "5.2 every job starts `created`"),
    ("enqueue", "5.2 enqueue: created → pending"),
    ("enqueue-resource", "5.2 enqueue with resource_group → waiting_for_resource; resource assigned → pending"),
    ("actionize", "5.2 actionize: created → manual"),
    ("schedule", "5.2 schedule: created → scheduled, scheduled_at = now + start_in"),
    ("enqueue-scheduled", "5.2 enqueue_scheduled: scheduled → pending once scheduled_at is past"),
    ("unschedule", "5.2 unschedule: scheduled → manual"),
    ("run", "5.2 run: pending → running"),
    ("success", "5.2 success"),
    ("drop", "5.2 drop(reason): → failed with failure_reason and exit code"),
    ("skip", "5.2 skip: prev not in VALID"),
    ("cancel-graceful", "5.2 cancel: running on a graceful runner → canceling; any final update → canceled"),
    ("force-cancel", "5.2 canceling → canceled by force"),
    ("reset", "5.2 process: skipped → created when re-evaluated"),
    ("invalid-transition", "5.2 events that do not apply are refused"),
    ("stage-waits", "5.3/5.4 a stage job waits until every job of earlier stages is COMPLETED"),
    ("stage-parallel", "5.4 jobs of one stage run in parallel"),
    ("topological", "5.3 same-stage needs are processed first, in one pass"),
    ("fixed-point", "5.3 one pass reaches the fixed point (checked after every event)"),
    ("needs-overtake", "5.4 a job with needs ignores stages"),
    ("needs-empty", "5.4 needs: [] starts at once"),
    ("needs-parallel", "5.9 needing a parallel job waits for every instance"),
    ("needs-absent", "5.3 need names not in the pipeline are ignored (optional needs)"),
    ("stage-waits-dag", "5.4 later stage jobs still wait for DAG jobs of earlier stages"),
    ("pre-post", "5.4 .pre runs first, .post last"),
    ("valid-on-success-stage", "5.5 on_success (stage) runs after success or skipped"),
    ("valid-on-success-dag", "5.5 on_success (DAG) runs only after success; skipped need ⇒ skipped"),
    ("valid-on-failure", "5.5 on_failure runs only after failed"),
    ("valid-always", "5.5 always runs after success, failed or skipped"),
    ("valid-manual-delayed-skipped", "5.5 manual/delayed (stage) are processed after skipped"),
    ("prev-canceled", "5.5 prev canceled ⇒ even when: always is skipped"),
    ("prev-failed-waits-active", "5.5 stage prev is failed only when nothing earlier is active"),
    ("allow-failure", "5.5/5.6 an allowed failure counts as success (on_failure does not run)"),
    ("allow-failure-exit-codes", "3/5.2 allow_failure:exit_codes flips allow_failure at drop time"),
    ("warnings", "5.6 success with warnings"),
    ("canceled-allowed", "5.6 an allowed cancel is a warning"),
    ("composite-created-terminal", "5.6 created + terminal ⇒ running"),
    ("composite-only-ignored", "5.6 only optional manual jobs ⇒ skipped"),
    ("composite-skipped", "5.6 only skipped ⇒ skipped"),
    ("composite-canceled", "5.6 canceled + success ⇒ canceled"),
    ("composite-canceling", "5.6 canceling ⇒ canceling"),
    ("composite-scheduled", "5.6 scheduled ⇒ scheduled"),
    ("composite-waiting", "5.6 waiting_for_resource ⇒ waiting_for_resource"),
    ("pipeline-enqueue-again", "5.6 pipeline machine: a finished pipeline queued again is running"),
    ("pipeline-running-stays", "5.6 pipeline machine: a running pipeline whose jobs are all queued stays running"),
    ("pipeline-moves-when-processed", "5.6 pipeline machine: the pipeline status moves only in a processing pass"),
    ("retried-excluded", "5.1 retried jobs are excluded from every status"),
    ("retry-max", "5.7 auto-retry up to retry:max"),
    ("retry-when", "5.7 retry:when filters failure reasons"),
    ("retry-exit-codes", "5.7 retry:exit_codes"),
    ("retry-scheduler-default", "5.7 scheduler_failure retried twice by default"),
    ("retry-never", "5.7 no_matching_runner & co. are never retried"),
    ("retry-user", "5.7 a user retry: new attempt, old flagged retried"),
    ("retry-resets-skipped", "5.7 a retry resets skipped dependents (stage and DAG)"),
    ("retry-actionable", "5.7 a retried manual job is enqueued at once"),
    ("retry-pipeline", "5.7 retry pipeline: failed and canceled jobs, skipped reset"),
    ("retry-allow-failure", "a new attempt has the configured allow_failure"),
    ("cancel-pipeline", "5.11 cancel pipeline: cancelable and manual jobs; completed untouched"),
    ("cancel-interruptible", "5.11 safe cancel: interruptible jobs only"),
    ("on-job-failure", "5.11 on_job_failure: all cancels on a non-allowed failure"),
    ("on-job-failure-exempt", "5.11 allowed failures and auto-retried jobs do not auto-cancel"),
    ("manual-optional", "5.13 optional manual: later stages proceed, DAG dependents skipped"),
    ("manual-blocking", "5.13 blocking manual: later stages and dependents wait, pipeline manual"),
    ("manual-play-reset", "5.13 playing resets skipped dependents"),
    ("manual-replay", "5.13 playing a finished manual job starts a new attempt"),
    ("delayed-timer", "5.13 the delay starts when the job becomes eligible"),
    ("delayed-play", "5.13 play a delayed job early"),
    ("stale-schedule", "5.13 a schedule missed by long is dropped stale_schedule"),
    ("timeout", "9 past its effective timeout ⇒ job_execution_timeout"),
    ("stuck", "no updates / queued too long ⇒ stuck_or_timeout_failure"),
    ("runner-lost", "runner lost ⇒ runner_system_failure"),
    ("retried-canceling", "a runner still finishes an attempt retried while canceling"),
];

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "stage-order-success",
        rules: "create enqueue run success stage-waits stage-parallel",
        yaml: r"
stages: [build, test, deploy]
build: {stage: build, script: make}
unit: {stage: test, script: t}
lint: {stage: test, script: l}
deploy: {stage: deploy, script: d}
",
        script: r"
expect build=pending unit=created lint=created deploy=created pipeline=pending
start build
expect build=running pipeline=running stage:build=running
ok build
expect build=success unit=pending lint=pending deploy=created stage:build=success stage:test=pending pipeline=running
pass unit
expect deploy=created stage:test=running
pass lint
expect deploy=pending
pass deploy
expect pipeline=success stage:deploy=success
",
        snapshot: false,
    },
    Scenario {
        name: "stage-failure-flow",
        rules: "drop skip valid-on-failure valid-always prev-failed-waits-active",
        yaml: r"
stages: [build, test, cleanup]
build: {stage: build, script: make}
test: {stage: test, script: t}
notify: {stage: test, script: n, when: on_failure}
cleanup: {stage: cleanup, script: c, when: always}
",
        script: r"
start build
fail build exit=2
expect build=failed build.reason=script_failure build.exit=2 test=skipped notify=pending cleanup=created pipeline=running
pass notify
expect cleanup=pending
pass cleanup
expect pipeline=failed stage:build=failed stage:test=success stage:cleanup=success
",
        snapshot: true,
    },
    Scenario {
        name: "success-skips-on-failure",
        rules: "valid-on-failure valid-always skip",
        yaml: r"
stages: [build, deploy]
build: {stage: build, script: make}
rollback: {stage: deploy, script: r, when: on_failure}
always: {stage: deploy, script: a, when: always}
",
        script: r"
pass build
expect rollback=skipped always=pending
pass always
expect pipeline=success stage:deploy=success
",
        snapshot: false,
    },
    Scenario {
        name: "skipped-prev-in-stage-mode",
        rules: "valid-on-success-stage valid-manual-delayed-skipped valid-always actionize schedule",
        yaml: r"
stages: [first, second]
rescue: {stage: first, script: r, when: on_failure}
next: {stage: second, script: n}
gate: {stage: second, script: g, when: manual}
later: {stage: second, script: l, when: delayed, start_in: 10 minutes}
finally: {stage: second, script: f, when: always}
",
        script: r"
expect rescue=skipped stage:first=skipped next=pending gate=manual later=scheduled later.scheduled_at=600 finally=pending
",
        snapshot: false,
    },
    Scenario {
        name: "prev-failed-waits-for-active",
        rules: "prev-failed-waits-active valid-on-failure",
        yaml: r"
stages: [test, cleanup]
a: {stage: test, script: a}
b: {stage: test, script: b}
report: {stage: cleanup, script: r, when: on_failure}
",
        script: r"
start a
start b
fail a
expect a=failed b=running report=created stage:test=running pipeline=running
ok b
expect report=pending stage:test=failed
",
        snapshot: false,
    },
    Scenario {
        name: "needs-overtake-stages",
        rules: "needs-overtake stage-waits-dag stage-waits",
        yaml: r"
stages: [build, test, deploy]
build_a: {stage: build, script: a}
build_b: {stage: build, script: b}
test_a: {stage: test, script: t, needs: [build_a]}
test_b: {stage: test, script: t}
deploy: {stage: deploy, script: d}
",
        script: r"
pass build_a
expect test_a=pending test_b=created build_b=pending
pass build_b
expect test_b=pending
pass test_b
# test_a (a DAG job of an earlier stage) still holds deploy back
expect deploy=created
pass test_a
expect deploy=pending
",
        snapshot: false,
    },
    Scenario {
        name: "needs-empty-pre-post",
        rules: "needs-empty pre-post stage-waits-dag",
        yaml: r"
stages: [build, deploy]
prepare: {stage: .pre, script: p}
build: {stage: build, script: b}
docs: {stage: deploy, script: d, needs: []}
report: {stage: .post, script: r}
",
        script: r"
expect prepare=pending docs=pending build=created report=created
pass prepare
expect build=pending
pass build
expect report=created
pass docs
expect report=pending
pass report
expect pipeline=success stage:.pre=success stage:.post=success
",
        snapshot: false,
    },
    Scenario {
        name: "dag-on-success-needs-success",
        rules: "valid-on-success-dag valid-always composite-skipped",
        yaml: r"
stages: [build, test]
maybe: {stage: build, script: m, when: on_failure}
after_maybe: {stage: test, script: x, needs: [maybe]}
always_after_maybe: {stage: test, script: x, needs: [maybe], when: always}
",
        script: r"
expect maybe=skipped after_maybe=skipped always_after_maybe=pending pipeline=pending
pass always_after_maybe
expect pipeline=success stage:build=skipped
",
        snapshot: false,
    },
    Scenario {
        name: "dag-need-failed",
        rules: "valid-on-success-dag valid-on-failure valid-always needs-overtake",
        yaml: r"
stages: [build, test]
compile: {stage: build, script: c}
other: {stage: build, script: o}
unit: {stage: test, script: u, needs: [compile]}
diagnose: {stage: test, script: d, needs: [compile], when: on_failure}
collect: {stage: test, script: c, needs: [compile], when: always}
",
        script: r"
start compile
fail compile
expect unit=skipped diagnose=pending collect=pending other=pending
pass diagnose
pass collect
pass other
expect pipeline=failed
",
        snapshot: true,
    },
    Scenario {
        name: "only-skipped-pipeline",
        rules: "composite-skipped valid-on-failure",
        yaml: r"
rescue: {script: r, when: on_failure}
",
        script: r"
expect rescue=skipped pipeline=skipped
",
        snapshot: false,
    },
    Scenario {
        name: "same-stage-needs-in-one-pass",
        rules: "topological fixed-point valid-on-success-dag",
        yaml: r"
stages: [test]
b: {stage: test, script: b, needs: [a]}
a: {stage: test, script: a, when: on_failure}
c: {stage: test, script: c, needs: [b], when: always}
",
        script: r"
expect a=skipped b=skipped c=pending
",
        snapshot: false,
    },
    Scenario {
        name: "needs-parallel-instances",
        rules: "needs-parallel needs-overtake",
        yaml: r"
stages: [build, test, deploy]
build: {stage: build, script: b, parallel: 2}
slow: {stage: build, script: s}
test: {stage: test, script: t, needs: [build]}
",
        script: r#"
expect "build 1/2"=pending "build 2/2"=pending test=created
pass "build 1/2"
expect test=created
pass "build 2/2"
expect test=pending slow=pending
"#,
        snapshot: false,
    },
    Scenario {
        name: "optional-need-absent",
        rules: "needs-absent",
        yaml: r"
stages: [build, test]
build: {stage: build, script: b}
docs:
  stage: build
  script: d
  rules:
    - if: $NEVER_SET
test:
  stage: test
  script: t
  needs:
    - job: docs
      optional: true
",
        script: r"
expect build=pending test=pending
",
        snapshot: false,
    },
    Scenario {
        name: "allow-failure-counts-as-success",
        rules: "allow-failure warnings",
        yaml: r"
stages: [test, deploy]
flaky: {stage: test, script: f, allow_failure: true}
deploy: {stage: deploy, script: d}
rollback: {stage: deploy, script: r, when: on_failure}
",
        script: r"
start flaky
fail flaky
expect flaky=failed deploy=pending rollback=skipped stage:test=success+warnings
pass deploy
expect pipeline=success+warnings
",
        snapshot: false,
    },
    Scenario {
        name: "allow-failure-exit-code-matches",
        rules: "allow-failure-exit-codes warnings",
        yaml: r"
stages: [test, deploy]
check: {stage: test, script: c, allow_failure: {exit_codes: [3, 4]}}
deploy: {stage: deploy, script: d}
",
        script: r"
expect check.allow_failure=false
start check
fail check exit=3
expect check=failed check.allow_failure=true check.exit=3 deploy=pending
pass deploy
expect pipeline=success+warnings
",
        snapshot: false,
    },
    Scenario {
        name: "allow-failure-exit-code-misses",
        rules: "allow-failure-exit-codes",
        yaml: r"
stages: [test, deploy]
check: {stage: test, script: c, allow_failure: {exit_codes: [3, 4]}}
deploy: {stage: deploy, script: d}
",
        script: r"
start check
fail check exit=1
expect check=failed check.allow_failure=false deploy=skipped pipeline=failed
",
        snapshot: false,
    },
    Scenario {
        name: "canceled-allowed-job-is-a-warning",
        rules: "canceled-allowed warnings",
        yaml: r"
stages: [test, deploy]
optional: {stage: test, script: o, allow_failure: true}
deploy: {stage: deploy, script: d}
",
        script: r"
cancel optional
expect optional=canceled deploy=pending
pass deploy
expect pipeline=success+warnings
",
        snapshot: false,
    },
    Scenario {
        name: "created-plus-terminal-is-running",
        rules: "composite-created-terminal pipeline-moves-when-processed",
        yaml: r"
stages: [build, test]
slow: {stage: build, script: s}
quick: {stage: test, script: q, needs: []}
late: {stage: test, script: l, needs: [slow]}
",
        script: r"
start slow
pass quick
expect quick=success late=created stage:test=running
hold ok slow
expect slow=success stage:build=running # not processed yet: stages and pipeline stay
process
expect late=pending stage:build=success stage:test=running pipeline=running
",
        snapshot: false,
    },
    Scenario {
        name: "pipeline-state-machine",
        rules: "pipeline-enqueue-again pipeline-running-stays",
        yaml: r"
stages: [build, test]
lint: {stage: build, script: l, allow_failure: true}
test: {stage: test, script: t}
",
        script: r"
expect pipeline=pending
start lint
expect pipeline=running
fail lint              # composite pending (a warning, a queued job); it was running
expect test=pending stage:build=success+warnings pipeline=running
fail test
expect pipeline=failed
retry test             # composite pending again; enqueue from failed is running
expect test=pending pipeline=running
pass test
expect pipeline=success+warnings
reject cancel-pipeline # nothing to cancel
expect pipeline=success+warnings
",
        snapshot: true,
    },
    Scenario {
        name: "optional-manual",
        rules: "manual-optional manual-play-reset reset enqueue actionize",
        yaml: r"
stages: [build, deploy, verify]
build: {stage: build, script: b}
deploy: {stage: deploy, script: d, when: manual}
smoke: {stage: verify, script: s, needs: [deploy]}
audit: {stage: verify, script: a}
",
        script: r"
pass build
expect deploy=manual deploy.allow_failure=true smoke=skipped audit=pending stage:deploy=skipped
pass audit
expect pipeline=success
play deploy
expect deploy=pending smoke=created pipeline=running
pass deploy
expect smoke=pending
pass smoke
expect pipeline=success
",
        snapshot: true,
    },
    Scenario {
        name: "blocking-manual",
        rules: "manual-blocking",
        yaml: r"
stages: [build, deploy, verify]
build: {stage: build, script: b}
deploy:
  stage: deploy
  script: d
  rules:
    - when: manual
smoke: {stage: verify, script: s, needs: [deploy]}
audit: {stage: verify, script: a}
",
        script: r"
pass build
expect deploy=manual deploy.allow_failure=false smoke=created audit=created stage:deploy=manual pipeline=manual
play deploy
expect deploy=pending pipeline=running
pass deploy
expect smoke=pending audit=pending
",
        snapshot: false,
    },
    Scenario {
        name: "only-optional-manual-is-skipped",
        rules: "composite-only-ignored",
        yaml: r"
deploy: {script: d, when: manual}
",
        script: r"
expect deploy=manual pipeline=skipped
",
        snapshot: false,
    },
    Scenario {
        name: "manual-replay-and-retry",
        rules: "retry-actionable manual-replay retry-user warnings",
        yaml: r"
deploy: {script: d, when: manual}
",
        script: r"
play deploy
start deploy
fail deploy
expect deploy=failed pipeline=success+warnings
retry deploy
# the manual gate is not asked again
expect deploy#1=failed deploy=pending deploy.attempts=2 pipeline=running # it ran before
pass deploy
expect pipeline=success
play deploy
expect deploy#2=success deploy=pending deploy.attempts=3
",
        snapshot: false,
    },
    Scenario {
        name: "delayed-job",
        rules: "schedule enqueue-scheduled delayed-timer composite-scheduled",
        yaml: r"
stages: [build, deploy]
build: {stage: build, script: b}
deploy: {stage: deploy, script: d, when: delayed, start_in: 30 minutes}
",
        script: r"
tick 100
pass build
expect deploy=scheduled deploy.scheduled_at=1900 pipeline=scheduled
tick 1799
expect deploy=scheduled
reject due deploy
tick 1
expect deploy=pending deploy.scheduled_at=none
",
        snapshot: true,
    },
    Scenario {
        name: "delayed-play-unschedule",
        rules: "delayed-play unschedule manual-blocking",
        yaml: r"
early: {script: e, when: delayed, start_in: 1 hour}
stopped: {script: s, when: delayed, start_in: 1 hour}
",
        script: r"
expect early=scheduled stopped=scheduled
play early
expect early=pending
unschedule stopped
# a delayed job is not allowed to fail, so once unscheduled it blocks
expect stopped=manual stopped.scheduled_at=none
pass early
expect pipeline=manual
play stopped
expect stopped=pending
",
        snapshot: false,
    },
    Scenario {
        name: "stale-schedule",
        rules: "stale-schedule",
        yaml: r"
late: {script: l, when: delayed, start_in: 1 minute}
",
        script: r"
tick 3660
expect late=failed late.reason=stale_schedule pipeline=failed
",
        snapshot: false,
    },
    Scenario {
        name: "retry-max",
        rules: "retry-max retried-excluded",
        yaml: r"
test: {script: t, retry: 2}
",
        script: r"
start test
fail test
expect test#1=failed test=pending test.attempts=2 pipeline=running # it stays running
start test
fail test
expect test#2=failed test=pending test.attempts=3
start test
fail test
expect test=failed test.attempts=3 pipeline=failed
",
        snapshot: false,
    },
    Scenario {
        name: "retry-then-pass",
        rules: "retried-excluded retry-max",
        yaml: r"
test: {script: t, retry: 1}
",
        script: r"
start test
fail test
pass test
expect test#1=failed test=success pipeline=success
",
        snapshot: false,
    },
    Scenario {
        name: "retry-when",
        rules: "retry-when runner-lost",
        yaml: r"
test: {script: t, retry: {max: 2, when: runner_system_failure}}
",
        script: r"
start test
lost test
expect test#1=failed test#1.reason=runner_system_failure test=pending
start test
fail test
expect test=failed test.attempts=2 pipeline=failed
",
        snapshot: false,
    },
    Scenario {
        name: "retry-exit-codes",
        rules: "retry-exit-codes",
        yaml: r"
oom: {script: t, retry: {max: 1, exit_codes: [137]}}
plain: {script: t, retry: {max: 1, exit_codes: [137]}}
",
        script: r"
start oom
fail oom exit=137
expect oom=pending oom.attempts=2
start oom
fail oom exit=137
expect oom=failed oom.attempts=2
start plain
fail plain exit=1
expect plain=failed plain.attempts=1
",
        snapshot: false,
    },
    Scenario {
        name: "retry-scheduler-default-and-never",
        rules: "retry-scheduler-default retry-never",
        yaml: r"
a: {script: a}
b: {script: b, retry: 2}
",
        script: r"
fail a reason=scheduler_failure
fail a reason=scheduler_failure
expect a=pending a.attempts=3
fail a reason=scheduler_failure
expect a=failed a.attempts=3
fail b reason=no_matching_runner
expect b=failed b.attempts=1
",
        snapshot: false,
    },
    Scenario {
        name: "user-retry-resets-stage-dependents",
        rules: "retry-user retry-resets-skipped reset invalid-transition",
        yaml: r"
stages: [build, test]
build: {stage: build, script: b}
test: {stage: test, script: t}
",
        script: r"
start build
fail build
expect test=skipped pipeline=failed
retry build
expect build#1=failed build=pending test=created pipeline=running # failed, then queued again
reject fail build#1
start build
reject retry build
ok build
expect test=pending
",
        snapshot: false,
    },
    Scenario {
        name: "user-retry-resets-dag-dependents",
        rules: "retry-resets-skipped valid-on-success-dag",
        yaml: r"
stages: [build, test]
build: {stage: build, script: b}
other: {stage: build, script: o}
test: {stage: test, script: t, needs: [build]}
",
        script: r"
start build
fail build
expect test=skipped
pass other
expect pipeline=failed
retry build
expect test=created
pass build
expect test=pending
",
        snapshot: false,
    },
    Scenario {
        name: "retry-pipeline",
        rules: "retry-pipeline reset",
        yaml: r"
stages: [build, test, deploy]
a: {stage: build, script: a}
b: {stage: build, script: b}
test: {stage: test, script: t}
deploy: {stage: deploy, script: d}
",
        script: r"
start a
fail a
cancel b
expect a=failed b=canceled test=skipped deploy=skipped pipeline=failed
retry-pipeline
expect a=pending b=pending test=created deploy=created a.attempts=2 b.attempts=2 pipeline=running # failed, then queued
reject retry-pipeline
",
        snapshot: true,
    },
    Scenario {
        name: "retry-restores-configured-allow-failure",
        rules: "retry-allow-failure allow-failure-exit-codes retry-exit-codes",
        yaml: r"
check: {script: c, allow_failure: {exit_codes: [3]}, retry: {max: 1, exit_codes: [3]}}
",
        script: r"
start check
fail check exit=3
expect check#1.allow_failure=true check=pending check.allow_failure=false
start check
fail check exit=1
expect check=failed pipeline=failed
",
        snapshot: false,
    },
    Scenario {
        name: "cancel-pipeline",
        rules: "cancel-pipeline cancel-graceful composite-canceling composite-canceled invalid-transition",
        yaml: r"
stages: [build, test, deploy]
a: {stage: build, script: a}
b: {stage: build, script: b}
c: {stage: build, script: c}
gate: {stage: build, script: g, when: manual}
test: {stage: test, script: t}
deploy: {stage: deploy, script: d, when: always}
",
        script: r"
pass a
start b graceful
start c
cancel-pipeline
expect a=success b=canceling c=canceled gate=canceled test=canceled deploy=canceled pipeline=canceling
touch b
fail b
expect b=canceled b.reason=none pipeline=canceled
reject ok c
reject cancel-pipeline
",
        snapshot: true,
    },
    Scenario {
        name: "canceled-prev-skips-always",
        rules: "prev-canceled composite-canceled",
        yaml: r"
stages: [build, cleanup]
build: {stage: build, script: b}
cleanup: {stage: cleanup, script: c, when: always}
",
        script: r"
start build
cancel build
expect build=canceled cleanup=skipped pipeline=canceled
",
        snapshot: false,
    },
    Scenario {
        name: "force-cancel",
        rules: "force-cancel cancel-graceful",
        yaml: r"
a: {script: a}
b: {script: b}
",
        script: r"
start a graceful
cancel a
expect a=canceling
force-cancel a
expect a=canceled
start b graceful
cancel b
ok b
expect b=canceled pipeline=canceled
reject force-cancel b
",
        snapshot: false,
    },
    Scenario {
        name: "cancel-interruptible-only",
        rules: "cancel-interruptible",
        yaml: r"
a: {script: a, interruptible: true}
b: {script: b}
",
        script: r"
cancel-interruptible
expect a=canceled b=pending
",
        snapshot: false,
    },
    Scenario {
        name: "on-job-failure-all",
        rules: "on-job-failure on-job-failure-exempt",
        yaml: r"
workflow:
  auto_cancel:
    on_job_failure: all
stages: [test, deploy]
flaky: {stage: test, script: f, allow_failure: true}
retrying: {stage: test, script: r, retry: 1}
unit: {stage: test, script: u}
slow: {stage: test, script: s}
deploy: {stage: deploy, script: d}
",
        script: r"
start flaky
fail flaky
expect unit=pending slow=pending
start retrying
fail retrying
expect retrying=pending unit=pending
start slow
start unit
fail unit
expect slow=canceled retrying=canceled deploy=canceled pipeline=failed
",
        snapshot: true,
    },
    Scenario {
        name: "resource-group",
        rules: "enqueue-resource composite-waiting",
        yaml: r"
deploy: {script: d, resource_group: production}
",
        script: r"
expect deploy=waiting_for_resource pipeline=waiting_for_resource
reject start deploy
assign deploy
expect deploy=pending
",
        snapshot: false,
    },
    Scenario {
        name: "timeouts-and-lost-runners",
        rules: "timeout stuck runner-lost",
        yaml: r"
build: {script: b, timeout: 10 minutes}
test: {script: t}
lint: {script: l}
queued: {script: q}
capped: {script: c, timeout: 3 hours}
",
        script: r"
start build
start test
start lint
start capped runner_max=1800
expect build.timeout=600 test.timeout=3600 capped.timeout=1800
tick 899
expect build=running
tick 1
expect build=failed build.reason=job_execution_timeout
touch test
tick 1200
expect capped=failed capped.reason=job_execution_timeout
tick 1500
expect lint=failed lint.reason=stuck_or_timeout_failure test=running
lost test
expect test.reason=runner_system_failure
tick 82800
expect queued=failed queued.reason=stuck_or_timeout_failure pipeline=failed
",
        snapshot: false,
    },
    Scenario {
        name: "retry-while-canceling",
        rules: "retried-canceling retry-user cancel-graceful retried-excluded",
        yaml: r"
a: {script: a}
",
        script: r"
start a graceful
cancel a
retry a
expect a#1=canceling a=pending a.attempts=2 pipeline=running # canceling, then queued
touch a#1
ok a#1
expect a#1=canceled a=pending pipeline=running
reject cancel a#1
",
        snapshot: false,
    },
    Scenario {
        name: "canceling-without-updates",
        rules: "stuck cancel-graceful",
        yaml: r"
a: {script: a}
",
        script: r"
start a graceful
cancel a
tick 3599
expect a=canceling
tick 1
expect a=canceled a.reason=none pipeline=canceled
",
        snapshot: false,
    },
    Scenario {
        name: "refused-events",
        rules: "invalid-transition",
        yaml: r"
stages: [build, test]
build: {stage: build, script: b}
test: {stage: test, script: t}
",
        script: r"
reject start test
reject unschedule build
reject play build
reject retry build
reject assign build
reject touch build
start build
reject start build
ok build
reject ok build
reject fail build
reject cancel build
reject retry-pipeline
",
        snapshot: true,
    },
];

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

struct Memory(BTreeMap<String, String>);

impl Loader for Memory {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        Ok(self.0.get(path).cloned())
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        Ok(self.0.keys().cloned().collect())
    }
}

fn compile_pipeline(yaml: &str) -> Result<gantry_pipeline::Pipeline, String> {
    let files = BTreeMap::from([(".gitlab-ci.yml".to_owned(), yaml.to_owned())]);
    let ctx = Context::new(&PipelineInfo::default(), &[], None);
    let c = compile(&Options::default(), &ctx, &Memory(files));
    if !c.errors.is_empty() {
        let msgs: Vec<String> = c.errors.into_iter().map(|e| e.message).collect();
        return Err(format!("pipeline does not compile: {}", msgs.join("; ")));
    }
    c.pipeline.ok_or_else(|| "no pipeline".to_owned())
}

struct Run {
    state: PipelineState,
    now: Timestamp,
    log: Vec<String>,
}

/// Split on whitespace, keeping "double quoted" parts together (quotes removed).
fn tokens(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

fn show(s: Option<Summary>) -> String {
    match s {
        None => "none".to_owned(),
        Some(Summary {
            status: Status::Success,
            warnings: true,
        }) => "success+warnings".to_owned(),
        Some(s) => s.status.to_string(),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

impl Run {
    fn new(yaml: &str) -> Result<Run, String> {
        let p = compile_pipeline(yaml)?;
        let mut run = Run {
            state: PipelineState::from_pipeline(&p),
            now: Timestamp(0),
            log: Vec::new(),
        };
        run.log.push("t=0 > (pipeline created)".to_owned());
        run.advance()?;
        Ok(run)
    }

    fn job_ref(&self, r: &str) -> Result<&JobState, String> {
        if let Some((name, n)) = r.rsplit_once('#') {
            let attempt: u32 = n.parse().map_err(|_| format!("bad attempt in `{r}`"))?;
            return self
                .state
                .jobs()
                .iter()
                .find(|j| j.name == name && j.attempt == attempt)
                .ok_or_else(|| format!("no attempt {attempt} of `{name}`"));
        }
        self.state.current(r).ok_or_else(|| format!("no job `{r}`"))
    }

    fn id(&self, r: &str) -> Result<JobId, String> {
        self.job_ref(r).map(|j| j.id)
    }

    fn record(&mut self, ts: &[gantry_server::Transition]) {
        for t in ts {
            let line = format!("  {}", t.describe(&self.state));
            self.log.push(line);
        }
    }

    /// Process, log, and check the fixed point.
    fn advance(&mut self) -> Result<(), String> {
        let ts = self.state.advance(self.now);
        self.record(&ts);
        let again = process(&self.state, self.now);
        if !again.is_empty() {
            return Err(format!(
                "processing again still decides: {}",
                again
                    .iter()
                    .map(|t| t.describe(&self.state))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let summary = pipeline_status(&self.state);
        self.log
            .push(format!("  = pipeline {}", show(Some(summary))));
        Ok(())
    }

    /// The events a command stands for.
    fn events(&self, words: &[String]) -> Result<Vec<Event>, String> {
        let cmd = words.first().ok_or("empty command")?.as_str();
        let arg = |i: usize| -> Result<&str, String> {
            words
                .get(i)
                .map(String::as_str)
                .ok_or_else(|| format!("`{cmd}` needs a job"))
        };
        let opt_arg = |key: &str| -> Option<&str> {
            words[1..]
                .iter()
                .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        };
        let job = |i: usize| -> Result<JobId, String> { self.id(arg(i)?) };
        let started = |job: JobId| -> Result<Event, String> {
            let j = self.state.job(job).ok_or("no job")?;
            let runner_max = opt_arg("runner_max")
                .map(|v| v.parse::<u64>().map_err(|e| e.to_string()))
                .transpose()?;
            let t = effective_timeout(j.timeout, PROJECT_TIMEOUT, runner_max);
            Ok(Event::JobStarted {
                job,
                timeout: Some(t.seconds),
                graceful_cancel: words.iter().any(|w| w == "graceful"),
            })
        };
        Ok(match cmd {
            "start" => vec![started(job(1)?)?],
            "ok" => vec![Event::JobSucceeded { job: job(1)? }],
            "pass" => {
                let id = job(1)?;
                vec![started(id)?, Event::JobSucceeded { job: id }]
            }
            "fail" => {
                let reason = match opt_arg("reason") {
                    Some(r) => r.parse::<FailureReason>().map_err(|e| e.to_string())?,
                    None => FailureReason::ScriptFailure,
                };
                let exit_code = match opt_arg("exit") {
                    Some(c) => Some(c.parse::<i64>().map_err(|e| e.to_string())?),
                    None => (reason == FailureReason::ScriptFailure).then_some(1),
                };
                vec![Event::JobFailed {
                    job: job(1)?,
                    reason,
                    exit_code,
                }]
            }
            "lost" => vec![Event::RunnerLost { job: job(1)? }],
            "timeout" => vec![Event::JobTimedOut { job: job(1)? }],
            "stuck" => vec![Event::JobStuck { job: job(1)? }],
            "touch" => vec![Event::JobTouched { job: job(1)? }],
            "assign" => vec![Event::ResourceAssigned { job: job(1)? }],
            "due" => vec![Event::ScheduledTimeReached { job: job(1)? }],
            "cancel" => vec![Event::CancelJob { job: job(1)? }],
            "force-cancel" => vec![Event::ForceCancelJob { job: job(1)? }],
            "cancel-pipeline" => vec![Event::CancelPipeline {
                scope: CancelScope::All,
                cause: CancelCause::User,
            }],
            "cancel-interruptible" => vec![Event::CancelPipeline {
                scope: CancelScope::InterruptibleOnly,
                cause: CancelCause::User,
            }],
            "play" => vec![Event::PlayJob { job: job(1)? }],
            "retry" => vec![Event::RetryJob { job: job(1)? }],
            "retry-pipeline" => vec![Event::RetryPipeline],
            "unschedule" => vec![Event::UnscheduleJob { job: job(1)? }],
            other => return Err(format!("unknown command `{other}`")),
        })
    }

    fn apply_logged(&mut self, event: &Event) -> Result<(), String> {
        let ts = apply(&mut self.state, event, self.now).map_err(|e| format!("refused: {e}"))?;
        self.record(&ts);
        Ok(())
    }

    fn exec(&mut self, line: &str) -> Result<(), String> {
        let words = tokens(line);
        let Some(cmd) = words.first() else {
            return Ok(());
        };
        self.log.push(format!("t={} > {line}", self.now));
        match cmd.as_str() {
            "expect" => {
                for w in &words[1..] {
                    let (key, want) = w
                        .split_once('=')
                        .ok_or_else(|| format!("`{w}` is not key=value"))?;
                    let got = self.observe(key)?;
                    if got != want {
                        return Err(format!("{key}: expected {want}, got {got}"));
                    }
                }
                Ok(())
            }
            "process" => self.advance(),
            "tick" => {
                let secs: u64 = words
                    .get(1)
                    .ok_or("tick needs seconds")?
                    .parse()
                    .map_err(|e| format!("tick: {e}"))?;
                self.now = self.now.plus(secs);
                for event in due_events(&self.state, self.now, &Watchdog::default()) {
                    self.log.push(format!("  (due) {}", event_name(&event)));
                    self.apply_logged(&event)?;
                }
                self.advance()
            }
            "reject" => {
                let before = self.state.clone();
                for event in self.events(&words[1..])? {
                    match apply(&mut self.state, &event, self.now) {
                        Ok(ts) => {
                            self.record(&ts);
                            return Err(format!("`{line}`: the event was accepted"));
                        }
                        Err(e) => self.log.push(format!("  refused: {e}")),
                    }
                }
                if self.state != before {
                    return Err(format!("`{line}`: a refused event changed the state"));
                }
                Ok(())
            }
            "hold" => {
                for event in self.events(&words[1..])? {
                    self.apply_logged(&event)?;
                }
                Ok(())
            }
            _ => {
                for event in self.events(&words)? {
                    self.apply_logged(&event)?;
                    self.advance()?;
                }
                Ok(())
            }
        }
    }

    fn observe(&self, key: &str) -> Result<String, String> {
        if key == "pipeline" {
            return Ok(show(Some(pipeline_status(&self.state))));
        }
        if let Some(stage) = key.strip_prefix("stage:") {
            let idx = self
                .state
                .stages()
                .iter()
                .position(|s| s == stage)
                .ok_or_else(|| format!("no stage `{stage}`"))?;
            return Ok(show(self.state.stage_status(idx)));
        }
        let (job, field) = match key.rsplit_once('.') {
            // `.pre`/`.post` are stage names, never job fields
            Some((j, f)) if !j.is_empty() => (j, Some(f)),
            _ => (key, None),
        };
        let j = self.job_ref(job)?;
        Ok(match field {
            None => j.status.to_string(),
            Some("reason") => opt(j.failure_reason),
            Some("exit") => opt(j.exit_code),
            Some("allow_failure") => j.allow_failure.to_string(),
            Some("scheduled_at") => opt(j.scheduled_at),
            Some("timeout") => opt(j.effective_timeout),
            Some("attempts") => self
                .state
                .jobs()
                .iter()
                .filter(|r| r.name == j.name)
                .count()
                .to_string(),
            Some(other) => return Err(format!("unknown field `{other}`")),
        })
    }
}

fn event_name(e: &Event) -> String {
    let s = format!("{e:?}");
    s.split_whitespace().next().unwrap_or_default().to_owned()
}

/// Run one scenario; `Ok(log)` or the first failure (with the log so far).
fn check(s: &Scenario) -> Result<String, String> {
    let mut run = Run::new(s.yaml)?;
    for (n, raw) in s.script.lines().enumerate() {
        // `#` starts a comment at the start of a line or after whitespace (`job#2` is an attempt).
        let line = raw.trim();
        let line = if line.starts_with('#') {
            ""
        } else {
            line.split(" #").next().unwrap_or_default().trim()
        };
        if line.is_empty() {
            continue;
        }
        if let Err(e) = run.exec(line) {
            return Err(format!(
                "script line {}: `{line}`: {e}\n--- log ---\n{}",
                n + 1,
                run.log.join("\n")
            ));
        }
    }
    Ok(run.log.join("\n"))
}

#[test]
fn scenarios() {
    let filter = std::env::var("SCENARIO").unwrap_or_default();
    let mut failures = Vec::new();
    let mut snapshots = Vec::new();
    let mut ran = 0;
    for s in SCENARIOS.iter().filter(|s| s.name.contains(&filter)) {
        ran += 1;
        match check(s) {
            Ok(log) if s.snapshot => snapshots.push((s.name, log)),
            Ok(_) => {}
            Err(e) => failures.push(format!("scenario `{}`: {e}", s.name)),
        }
    }
    assert!(ran > 0, "no scenario matches SCENARIO={filter}");
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    for (name, log) in snapshots {
        insta::assert_snapshot!(name, log);
    }
}

#[test]
fn every_rule_has_a_scenario() {
    let missing: Vec<&str> = RULES
        .iter()
        .filter(|(id, _)| {
            !SCENARIOS
                .iter()
                .any(|s| s.rules.split_whitespace().any(|r| r == *id))
        })
        .map(|(_, what)| *what)
        .collect();
    assert!(missing.is_empty(), "rules without a scenario: {missing:#?}");
    let unknown: Vec<&str> = SCENARIOS
        .iter()
        .flat_map(|s| s.rules.split_whitespace())
        .filter(|r| !RULES.iter().any(|(id, _)| id == r))
        .collect();
    assert!(
        unknown.is_empty(),
        "scenarios cite unknown rules: {unknown:?}"
    );
    let mut names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names.len(),
        SCENARIOS.len(),
        "scenario names must be unique"
    );
}

/// `on_new_commit` (§5.11): `(case, old pipeline's on_new_commit, script run on it, its
/// created_at, its sha, CI source, expected scope)`. The new pipeline: created at 1000,
/// sha `new`; the ref head is `head`.
#[test]
#[rustfmt::skip]
fn auto_cancel_on_new_commit() {
    use CancelScope::{All, InterruptibleOnly};
    type Row = (&'static str, &'static str, &'static str, i64, &'static str, bool, Option<CancelScope>);
    let rows: &[Row] = &[
        ("nothing started", "conservative", "", 10, "old", true, Some(All)),
        ("an interruptible job started", "conservative", "start safe", 10, "old", true, Some(All)),
        ("a non-interruptible job started", "conservative", "start unsafe", 10, "old", true, None),
        ("a non-interruptible job finished", "conservative", "pass unsafe", 10, "old", true, None),
        ("interruptible mode", "interruptible", "start unsafe", 10, "old", true, Some(InterruptibleOnly)),
        ("none", "none", "", 10, "old", true, None),
        ("same sha as the new pipeline", "conservative", "", 10, "new", true, None),
        ("sha is the ref head", "conservative", "", 10, "head", true, None),
        ("created at the same time", "conservative", "", 1000, "old", true, None),
        ("not a CI source", "conservative", "", 10, "old", false, None),
        ("finished pipeline", "conservative", "pass safe\npass unsafe", 10, "old", true, None),
        ("older than 7 days", "conservative", "", 1000 - 7 * 24 * 3600 - 1, "old", true, None),
    ];
    let new = PipelineFacts { created_at: Timestamp(1000), sha: "new".into(), ci_source: true };
    for &(case, mode, script, created, sha, ci_source, want) in rows {
        let yaml = format!(
            "workflow:\n  auto_cancel:\n    on_new_commit: {mode}\nsafe: {{script: s, interruptible: true}}\nunsafe: {{script: u}}\n"
        );
        let mut run = Run::new(&yaml).unwrap();
        for line in script.lines() {
            run.exec(line).unwrap();
        }
        let old = PipelineFacts { created_at: Timestamp(created), sha: sha.into(), ci_source };
        assert_eq!(on_new_commit(&run.state, &old, &new, "head", Timestamp(1000)), want, "{case}");
    }
}
