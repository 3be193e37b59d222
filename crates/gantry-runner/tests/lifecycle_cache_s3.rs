//! The shared cache in S3 (`[runners.cache] Type = "s3"`) against a real S3-compatible
//! server (moto's, which `scripts/test-s3.sh start` runs; without it this test fails,
//! saying so): one runner saves the cache, another with an empty cache directory — a new
//! autoscaled machine — restores it from the bucket; an archive over
//! `MaxUploadedArchiveSize` is not uploaded, with the reason in the log.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gitlab_runner_mock::MockJobState;
use mock_support::*;

/// `[runners.cache]` for the test server, under a prefix of this test's own.
fn s3_cache(prefix: &str, extra: &str) -> String {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap_or_else(|_| {
        panic!("AWS_ENDPOINT_URL is not set: start the test S3 server with `eval \"$(scripts/test-s3.sh start)\"` (scripts/test does)")
    });
    let address = endpoint.trim_start_matches("http://");
    format!(
        "[runners.cache]\nType = \"s3\"\nPath = \"{prefix}\"\nShared = true\n{extra}[runners.cache.s3]\nServerAddress = \"{address}\"\nAccessKey = \"gantry-test\"\nSecretKey = \"gantry-test\"\nBucketName = \"gantry-test\"\nInsecure = true\n"
    )
}

fn with_cache(payload: &mut serde_json::Value) {
    current_failure_reasons(payload);
    payload["cache"] = serde_json::json!([{
        "key": "deps-non_protected",
        "untracked": false,
        "paths": ["vendor/"],
        "policy": "pull-push",
        "when": "on_success",
        "fallback_keys": []
    }]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_with_an_empty_cache_dir_restores_the_shared_cache() {
    let prefix = format!(
        "runner-tests/{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(with_cache);

    let first = tempfile::tempdir().unwrap();
    let producer = enqueue(
        &mock,
        "producer",
        &["mkdir -p vendor && echo shared-content > vendor/lib.txt"],
        &[],
        &[],
    );
    run_jobs(
        config(front.url(), first.path(), "", &s3_cache(&prefix, "")),
        first.path(),
        1,
        Duration::from_secs(90),
    )
    .await;
    let log = log_text(&producer);
    assert!(log.contains("Uploaded cache deps-non_protected"), "{log}");
    assert_eq!(producer.state(), MockJobState::Success);

    // Another machine: nothing in its cache directory.
    let second = tempfile::tempdir().unwrap();
    let consumer = enqueue(
        &mock,
        "consumer",
        &["cat vendor/lib.txt"],
        &[],
        &[("GIT_STRATEGY", "empty", false)],
    );
    run_jobs(
        config(front.url(), second.path(), "", &s3_cache(&prefix, "")),
        second.path(),
        1,
        Duration::from_secs(90),
    )
    .await;
    let log = log_text(&consumer);
    assert!(log.contains("Successfully extracted cache"), "{log}");
    assert!(log.contains("\nshared-content\n"), "{log}");
    assert_eq!(consumer.state(), MockJobState::Success);

    // The bucket is the cache: a local archive the bucket lacks is not used.
    let third = tempfile::tempdir().unwrap();
    let local = third.path().join("cache/bla/dummy/deps-non_protected");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::copy(
        second
            .path()
            .join("cache/bla/dummy/deps-non_protected/cache.tar.zst"),
        local.join("cache.tar.zst"),
    )
    .unwrap();
    let stale = enqueue(
        &mock,
        "stale",
        &["test ! -e vendor/lib.txt && echo no-cache && mkdir vendor && echo new > vendor/lib.txt"],
        &[],
        &[("GIT_STRATEGY", "empty", false)],
    );
    run_jobs(
        config(
            front.url(),
            third.path(),
            "",
            &s3_cache(&format!("{prefix}-other"), "MaxUploadedArchiveSize = 10\n"),
        ),
        third.path(),
        1,
        Duration::from_secs(90),
    )
    .await;
    let log = log_text(&stale);
    assert!(
        log.contains("Cache not found for deps-non_protected"),
        "{log}"
    );
    assert!(log.contains("\nno-cache\n"), "{log}");
    // Saving: the archive is over MaxUploadedArchiveSize, so it is not uploaded.
    assert!(
        log.contains("Failed to upload cache deps-non_protected: the archive is"),
        "{log}"
    );
    assert!(
        log.contains("more than MaxUploadedArchiveSize (10)"),
        "{log}"
    );
}
