//! `CI_DEBUG_TRACE`: every script traces its commands (`set -o xtrace`, as gitlab-runner's
//! bash shell), masked values stay masked, and the trace patches say `debug_trace=true`;
//! an entry with `debug_trace_disabled = true` ignores it and says so.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use mock_support::*;

const SECRET: &str = "sup3r-s3cret-value";

async fn run_traced(extra: &str) -> (String, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "traced",
        &["greeting=hello", "echo \"$greeting from the script\""],
        &["echo after"],
        &[
            ("CI_DEBUG_TRACE", "true", false),
            ("API_SECRET", SECRET, true),
        ],
    );
    run_jobs(
        config(front.url(), dir.path(), "", extra),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;
    let queries = front
        .exchanges()
        .into_iter()
        .filter(|e| e.is_trace_patch())
        .map(|e| e.query)
        .collect();
    (log_text(&job), queries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ci_debug_trace_traces_every_command_and_keeps_secrets_masked() {
    let (log, queries) = run_traced("").await;
    for needle in [
        "+ greeting=hello",
        "+ echo 'hello from the script'",
        "hello from the script",
        "+ echo after",
        "[MASKED]",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    assert!(!log.contains(SECRET), "{log}");
    assert!(
        !queries.is_empty() && queries.iter().all(|q| q.contains("debug_trace=true")),
        "{queries:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn debug_trace_disabled_ignores_ci_debug_trace_and_says_so() {
    let (log, queries) = run_traced("debug_trace_disabled = true").await;
    assert!(
        log.contains("CI_DEBUG_TRACE: usage is disabled on this runner"),
        "{log}"
    );
    assert!(log.contains("hello from the script"), "{log}");
    assert!(!log.contains("+ echo"), "{log}");
    assert!(
        queries.iter().all(|q| !q.contains("debug_trace=true")),
        "{queries:?}"
    );
}
