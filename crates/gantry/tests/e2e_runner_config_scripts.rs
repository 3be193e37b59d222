//! The `[[runners]]` keys that change what a job runs, against our coordinator:
//! `pre_get_sources_script` / `post_get_sources_script` around the checkout (and the
//! job's own `hooks:pre_get_sources_script`, after the runner's),
//! `pre_build_script` / `post_build_script` around each script stage, and `clone_url`
//! for a coordinator whose own URL the runner cannot reach.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::time::Duration;

use e2e_runner_support::*;

const PIPELINE: &str = r#"
build:
  hooks:
    pre_get_sources_script: [echo "job pre-sources hook"]
  before_script: [echo "job before_script"]
  script:
    - cat input.txt
    - echo "job script"
  after_script: [echo "job after_script"]

broken:
  variables:
    GIT_STRATEGY: none
  script: [exit 3]
  after_script: [echo "broken after_script"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runner_scripts_wrap_the_jobs_and_clone_url_replaces_an_unreachable_host() {
    // Payloads name a host that does not resolve: only clone_url can fetch the sources.
    let options = ServerOptions {
        external_url: Some("http://gitlab.invalid:81".to_owned()),
        ..ServerOptions::default()
    };
    let setup = Setup::with(
        options,
        PIPELINE,
        &[("input.txt", "fetched through clone_url\n")],
    )
    .await;
    let server = &setup.server;
    let runner = setup.runner(
        "",
        &format!(
            r#"clone_url = "{}/"
pre_get_sources_script = "echo runner pre-sources"
post_get_sources_script = "echo runner post-sources"
pre_build_script = """
echo runner pre-build
export FROM_PRE_BUILD=seen-by-the-script"""
post_build_script = "echo runner post-build, $FROM_PRE_BUILD"
"#,
            server.url
        ),
    );
    let pipeline = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    runner.stop(Duration::from_secs(30)).await;
    assert_eq!(done["status"], "failed", "{done}");

    let build = server.job_named(setup.project, pipeline, "build").await;
    assert_eq!(build["status"], "success", "{build}");
    let log = server
        .trace(setup.project, build["id"].as_i64().unwrap())
        .await;
    // Output lines in the order they ran (not the echoed `$ …` command lines).
    let expected = [
        "runner pre-sources",
        "job pre-sources hook",
        "runner post-sources",
        "runner pre-build",
        "job before_script",
        "fetched through clone_url",
        "job script",
        "runner post-build, seen-by-the-script",
        "job after_script",
    ];
    let lines: Vec<&str> = log
        .lines()
        .map(|line| line.trim_end_matches('\r'))
        .filter(|line| expected.contains(line))
        .collect();
    assert_eq!(lines, expected, "{log}");
    assert!(!log.contains("gitlab.invalid"), "{log}");

    // post_build_script is part of the script stage: a failing script skips it.
    let broken = server.job_named(setup.project, pipeline, "broken").await;
    let log = server
        .trace(setup.project, broken["id"].as_i64().unwrap())
        .await;
    assert!(
        log.contains("runner pre-build") && log.contains("broken after_script"),
        "{log}"
    );
    assert!(!log.contains("runner post-build"), "{log}");
    assert!(log.contains("exit code 3"), "{log}");
}
