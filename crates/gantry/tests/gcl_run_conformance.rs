//! The gitlab-ci-local corpus (`../shared/conformance/gitlab-ci-local/`) run through
//! `gantry run --executor shell`: every record of GitLab scope that runs jobs without
//! Docker or network (`needs_docker: false`, `needs_network: false`). How a record is run
//! and what is adapted from gcl's conventions: `tests/gcl_run_support/mod.rs`.
//!
//! Records that do not pass are listed in `tests/gcl-run-exceptions.txt`
//! (`<id> — [gitlab] <reason>` where the record expects gcl's behaviour and GitLab's
//! differs, `<id> — [gantry] <reason>` for what Gantry does not do). Besides the suite's
//! checks, the test fails when fewer than 95% of the records where GitLab agrees with gcl
//! (all but the `[gitlab]` ones) pass. It prints `gitlab-ci-local run records: N/M passed`.

#![allow(clippy::panic, clippy::unwrap_used)]

use crate::gcl_run_support;

use gcl_run_support::{Suite, is_run_record, needs_docker, run_suite};

#[test]
fn gitlab_ci_local_run_records() {
    let suite = Suite {
        name: "run",
        executor: "shell",
        select: |rec| is_run_record(rec) && !needs_docker(rec),
        selected: 132,
        exceptions: "gcl-run-exceptions.txt",
        tags: &["[gitlab]", "[gantry]"],
        check_run: |_| Vec::new(),
    };
    let Some(summary) = run_suite(&suite) else {
        return;
    };
    // Records where GitLab's behaviour differs from gcl's: Gantry follows GitLab.
    let gitlab_differs = summary
        .exceptions
        .values()
        .filter(|r| r.starts_with("[gitlab]"))
        .count();
    let (passed, comparable) = (summary.passed, summary.total - gitlab_differs);
    println!(
        "gitlab-ci-local run records where GitLab agrees with gcl: {passed}/{comparable} passed ({gitlab_differs} records expect gcl's behaviour where GitLab's differs)"
    );
    assert!(
        passed * 100 >= comparable * 95,
        "only {passed}/{comparable} of the records where GitLab agrees with gcl pass (target: 95%)"
    );
}
