//! The instance executor end to end: our coordinator, our runner's poll loop with an
//! `instance` entry whose `[runners.autoscaler]` fleet is `fleeting-plugin-local` (a
//! real plugin process over gRPC, instances that are real OpenSSH servers), and
//! pipelines whose scripts run over SSH. Nothing is mocked; sshd comes from Debian's
//! openssh-server (`scripts/test-sshd.sh install`, run by `scripts/test`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::time::Duration;

use e2e_runner_support::*;
use gantry_runner::job::JobEnding;

const PIPELINE: &str = r#"
stages: [build, test]

build:
  stage: build
  script:
    - echo "over ssh from ${SSH_CONNECTION%% *}"
    - echo "project dir $CI_PROJECT_DIR"
    - test "$CI_PROJECT_DIR" = "$HOME/builds/${CI_PROJECT_DIR#$HOME/builds/}"
    - cat input.txt > out.txt
    - echo "built on the instance" >> out.txt
    - mkdir -p bin && printf '#!/bin/sh\necho tool runs\n' > bin/tool && chmod +x bin/tool
    - i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done # some CPU on the instance
    - sleep 2 # the resource samples (one a second) arrive
  artifacts:
    paths: [out.txt, bin/]

test:
  stage: test
  script:
    - cat out.txt
    - ./bin/tool
    - exit 3
  allow_failure:
    exit_codes: [3]

slow:
  stage: test
  timeout: 5s
  script:
    - echo "sleeping on the instance"
    - sleep SLEEP
"#;

/// The slow job's `sleep` argument: 61 seconds and a fraction unique to this test process,
/// so that looking for a leftover `sleep` finds only this run's (another test run on the
/// machine has its own).
fn sleep_arg() -> String {
    format!("61.{:06}", std::process::id() % 1_000_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instance_jobs_run_over_ssh_on_autoscaled_instances() {
    let yaml = PIPELINE.replace("SLEEP", &sleep_arg());
    let setup = Setup::new(&yaml, &[("input.txt", "from git\n")]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let toml = local_fleet_config(
        &server.url,
        &setup.runner_token,
        dir.path(),
        "instance",
        "test -d \"$HOME\"",
        "",
    );
    let runner = Runner::from_text(dir, &toml);
    let pipeline = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(120))
        .await;
    let events = runner.events.clone();
    let summary = runner.stop(Duration::from_secs(60)).await;
    let texts = events.texts();
    assert_eq!(done["status"], "failed", "{done}\n{texts:#?}");

    let build = server.job_named(setup.project, pipeline, "build").await;
    assert_eq!(build["status"], "success", "{build}");
    let log = server
        .trace(setup.project, build["id"].as_i64().unwrap())
        .await;
    for needle in [
        "Preparing the \"instance\" executor",
        "Using Instance executor with fleeting plugin",
        "Acquired instance local-",
        "internal address: 127.0.0.1:",
        "over ssh from 127.0.0.1",
        "/builds/",
        "Moved the build directory:",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    // Its resource use was measured on the instance (its shell's process tree, over SSH).
    let used = &build["resources"];
    let cpu = used["cpu_user_seconds"].as_f64().unwrap_or(0.0)
        + used["cpu_system_seconds"].as_f64().unwrap_or(0.0);
    assert!(
        cpu > 0.1 && used["peak_memory_bytes"].as_u64().is_some_and(|b| b > 0),
        "no resource figures from the instance: {build}"
    );

    // The artifact (with its executable file) came back from the build's instance and
    // went to the test job's own instance.
    let test = server.job_named(setup.project, pipeline, "test").await;
    assert_eq!(test["status"], "failed", "{test}");
    assert_eq!(
        test["allow_failure"], true,
        "exit code 3 is allowed: {test}"
    );
    let log = server
        .trace(setup.project, test["id"].as_i64().unwrap())
        .await;
    for needle in [
        "from git\nbuilt on the instance",
        "tool runs",
        "exit code 3",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }

    // A timeout stops the script on the instance, not only the SSH channel.
    let slow = server.job_named(setup.project, pipeline, "slow").await;
    assert_eq!(slow["status"], "failed", "{slow}");
    assert_eq!(slow["failure_reason"], "job_execution_timeout", "{slow}");
    let still_sleeping = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {}", sleep_arg())])
        .output()
        .unwrap();
    assert!(
        !still_sleeping.status.success(),
        "the timed-out script still runs: {}",
        text(&still_sleeping.stdout)
    );

    // max_use_count = 1: three jobs, three instances, each removed after its job.
    let acquired: Vec<&String> = texts.iter().filter(|t| t.contains("scaling up")).collect();
    assert!(!acquired.is_empty(), "{texts:#?}");
    let removed = texts
        .iter()
        .filter(|t| t.contains("removing instance local-") && t.ends_with("max_use_count"))
        .count();
    assert_eq!(removed, 3, "{texts:#?}");
    assert_eq!(summary.jobs.len(), 3);
    assert!(
        summary
            .jobs
            .iter()
            .any(|job| matches!(job.ending, JobEnding::Timeout { .. }))
    );
}
