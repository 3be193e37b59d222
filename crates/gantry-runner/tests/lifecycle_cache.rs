//! The cache stages against the mock (whose payloads carry no cache: the front adds
//! one): saved after a successful job, restored into an emptied directory by the next,
//! with a `$VARIABLE` policy expanded by the runner; an unknown policy fails the job as
//! a configuration error.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gantry_runner::job::JobEnding;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cache_is_saved_restored_and_its_variable_policy_expanded() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(|payload| {
        current_failure_reasons(payload);
        payload["cache"] = serde_json::json!([{
            "key": "deps-$CI_COMMIT_REF_SLUG-non_protected",
            "untracked": false,
            "paths": ["vendor/"],
            "policy": "$CACHE_POLICY",
            "when": "on_success",
            "fallback_keys": []
        }]);
    });
    let policy = ("CACHE_POLICY", "pull-push", false);
    let slug = ("CI_COMMIT_REF_SLUG", "main", false);
    let producer = enqueue(
        &mock,
        "producer",
        &["mkdir -p vendor && echo cached-content > vendor/lib.txt"],
        &[],
        &[policy, slug],
    );
    let consumer = enqueue(
        &mock,
        "consumer",
        &["cat vendor/lib.txt"],
        &[],
        &[policy, slug, ("GIT_STRATEGY", "empty", false)],
    );
    let misconfigured = enqueue(
        &mock,
        "misconfigured",
        &["echo never"],
        &[],
        &[("CACHE_POLICY", "sometimes", false), slug],
    );
    let (summary, _) = run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        3,
        Duration::from_secs(90),
    )
    .await;

    let log = log_text(&producer);
    assert!(log.contains(":archive_cache\r\x1b[0K"), "{log}");
    assert!(
        log.contains("Creating cache deps-main-non_protected..."),
        "{log}"
    );
    // `<cache_dir>/<host>/<project path>/<key>/cache.tar.zst`; the mock's repository is
    // `https://bla/dummy.git`.
    assert!(
        dir.path()
            .join("cache/bla/dummy/deps-main-non_protected/cache.tar.zst")
            .exists()
    );
    let log = log_text(&consumer);
    assert!(log.contains(":restore_cache\r\x1b[0K"), "{log}");
    assert!(log.contains("Successfully extracted cache"), "{log}");
    assert!(log.contains("\ncached-content\n"), "{log}");
    assert_eq!(consumer.state(), MockJobState::Success);

    assert_eq!(misconfigured.state(), MockJobState::Failed);
    let log = log_text(&misconfigured);
    assert!(log.contains("unknown cache policy \"sometimes\""), "{log}");
    assert!(!log.contains("\nnever"), "{log}");
    assert_eq!(
        front.final_update(misconfigured.id())["failure_reason"],
        "runner_configuration_error"
    );
    assert!(
        summary
            .jobs
            .iter()
            .any(|r| matches!(&r.ending, JobEnding::ConfigurationError { .. }))
    );
}
