//! `GIT_CLONE_PATH` with `[runners.custom_build_dir]` (gitlab-runner's custom build
//! directories): where the entry allows it, the checkout, `$CI_PROJECT_DIR` and the
//! scripts' working directory move to the path, which must lie below `$CI_BUILDS_DIR`;
//! where it does not (the shell executor's default), the job fails saying how to allow it.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use mock_support::*;

const SECTION: &str = "[runners.custom_build_dir]\nenabled = true\n";

/// Runs one job that sets `GIT_CLONE_PATH` to `clone_path` and checks out a real
/// repository; its final update and log.
async fn run_with(
    clone_path: &str,
    extra: &str,
) -> (serde_json::Value, String, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (repo, sha) = repository(&dir.path().join("repo"), &[("hello.txt", "hi\n")]);
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(use_repository(&repo, &sha));
    let job = enqueue(
        &mock,
        "moved",
        &["echo \"dir=$CI_PROJECT_DIR pwd=$(pwd) file=$(cat hello.txt)\""],
        &[],
        &[("GIT_CLONE_PATH", clone_path, false)],
    );
    run_jobs(
        config(front.url(), dir.path(), "", extra),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;
    let builds = dir.path().join("builds");
    (front.final_update(job.id()), log_text(&job), builds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_allowed_clone_path_moves_the_checkout() {
    let (update, log, builds) =
        run_with("$CI_BUILDS_DIR/go/src/$CI_CONCURRENT_ID/app", SECTION).await;
    assert_eq!(update["state"], "success", "{log}");
    let moved = builds.join("go/src/0/app");
    assert!(
        log.contains(&format!(
            "dir={} pwd={} file=hi",
            moved.display(),
            moved.display()
        )),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shell_executor_refuses_it_by_default() {
    let (update, log, _) = run_with("$CI_BUILDS_DIR/app", "").await;
    // `runner_configuration_error`, which the mock does not list among its supported
    // failure reasons, so it hears `script_failure` (as gitlab-runner would tell it).
    assert_eq!(
        (&update["state"], &update["failure_reason"]),
        (
            &serde_json::json!("failed"),
            &serde_json::json!("script_failure")
        ),
        "{log}"
    );
    assert!(
        log.contains("setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature"),
        "{log}"
    );
    assert!(!log.contains("file=hi"), "no script ran:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clone_path_outside_the_builds_dir_is_refused() {
    let (update, log, builds) = run_with("$CI_BUILDS_DIR/../elsewhere", SECTION).await;
    assert_eq!(update["state"], "failed", "{log}");
    assert!(
        log.contains(&format!(
            "the GIT_CLONE_PATH=\"{}/../elsewhere\" has to be within \"{}\"",
            builds.display(),
            builds.display()
        )),
        "{log}"
    );
    assert!(!builds.join("../elsewhere").exists());
}
