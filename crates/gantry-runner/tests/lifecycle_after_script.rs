//! `after_script`: its own shell (nothing leaks from the script's shell), runs after a
//! failure, sees `CI_JOB_STATUS`, and its own failure never changes the job's result.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gantry_runner::job::JobEnding;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_script_sees_the_job_status_in_its_own_shell() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let after = [
        "echo \"status=$CI_JOB_STATUS\"",
        "echo \"shell-variable=${FROM_SCRIPT:-unset}\"",
        "echo \"job-variable=$PLAIN\"",
    ];
    let vars = [("PLAIN", "plain-value", false)];
    let passing = enqueue(
        &mock,
        "passing",
        &[
            "export FROM_SCRIPT=leaked",
            "echo \"script sees $CI_JOB_STATUS\"",
        ],
        &after,
        &vars,
    );
    let failing = enqueue(
        &mock,
        "failing",
        &["export FROM_SCRIPT=leaked", "exit 4"],
        &after,
        &vars,
    );
    let after_fails = enqueue(
        &mock,
        "after-fails",
        &["echo ok"],
        &["echo about to fail", "exit 7"],
        &[],
    );

    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        3,
        Duration::from_secs(90),
    )
    .await;

    let log = log_text(&passing);
    for needle in [
        "script sees running",
        "status=success",
        "shell-variable=unset",
        "job-variable=plain-value",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    let log = log_text(&failing);
    for needle in [
        "status=failed",
        "shell-variable=unset",
        "ERROR: Job failed: exit code 4",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    assert_eq!(front.final_update(failing.id())["exit_code"], 4);

    let log = log_text(&after_fails);
    assert!(
        log.contains("after_script failed, but job will continue unaffected: exit code 7"),
        "{log}"
    );
    assert_eq!(after_fails.state(), MockJobState::Success);

    let endings: Vec<_> = summary
        .jobs
        .iter()
        .map(|r| (r.job_id, r.ending.clone()))
        .collect();
    assert!(
        endings.contains(&(passing.id() as i64, JobEnding::Success)),
        "{endings:?}"
    );
    assert!(
        endings.contains(&(
            failing.id() as i64,
            JobEnding::ScriptFailure { exit_code: 4 }
        )),
        "{endings:?}"
    );
    assert!(
        endings.contains(&(after_fails.id() as i64, JobEnding::Success)),
        "{endings:?}"
    );
}
