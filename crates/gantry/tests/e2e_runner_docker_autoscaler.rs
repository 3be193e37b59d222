//! The docker-autoscaler executor end to end: our coordinator, our runner's poll loop
//! with a `docker-autoscaler` entry whose `[runners.autoscaler]` fleet is
//! `fleeting-plugin-local` (a real plugin process over gRPC, instances that are real
//! OpenSSH servers on this machine), and jobs in containers on each instance's Docker
//! engine, reached through the SSH session (`docker system dial-stdio`, or the engine's
//! socket forwarded). Nothing is mocked. Needs sshd (`scripts/test-sshd.sh install`),
//! a Docker engine with its CLI, and the local test images (`scripts/test-images.sh`),
//! all provided by `scripts/test`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::time::Duration;

use e2e_runner_support::*;
use gantry_runner::job::JobEnding;

const PIPELINE: &str = r#"
stages: [build, test]

default:
  image: gantry-test/busybox:latest

build:
  stage: build
  services:
    - name: gantry-test/http:latest
      alias: web
  script:
    - echo "in a container at $CI_PROJECT_DIR"
    - test -f /.dockerenv
    - case "$CI_PROJECT_DIR" in /builds/*) ;; *) exit 9 ;; esac
    - wget -q -O service.txt http://web:8080/
    - cat input.txt > out.txt
    - echo "built in a container" >> out.txt
    - sleep 3 # long enough for the resource samples (one a second) to arrive
  artifacts:
    paths: [out.txt, service.txt]

test:
  stage: test
  variables:
    FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO: "false"
  script:
    - cat out.txt service.txt
    - exit 3
  allow_failure:
    exit_codes: [3]

slow:
  stage: test
  timeout: 5s
  script:
    - echo "sleeping in a container"
    - sleep 61
"#;

fn docker(args: &[&str]) -> String {
    let output = std::process::Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("docker {args:?}: {e}"));
    assert!(
        output.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn docker_autoscaler_jobs_run_in_containers_on_autoscaled_instances() {
    let setup = Setup::new(PIPELINE, &[("input.txt", "from git\n")]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let toml = local_fleet_config(
        &server.url,
        &setup.runner_token,
        dir.path(),
        "docker-autoscaler",
        "docker info > /dev/null",
        "[runners.docker]\npull_policy = [\"if-not-present\"]\n",
    );
    let runner = Runner::from_text(dir, &toml);
    let pipeline = server.create_pipeline(setup.project).await;
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(180))
        .await;
    let events = runner.events.clone();
    let summary = runner.stop(Duration::from_secs(60)).await;
    let texts = events.texts();
    assert_eq!(done["status"], "failed", "{done}\n{texts:#?}");

    let build = server.job_named(setup.project, pipeline, "build").await;
    let log = server
        .trace(setup.project, build["id"].as_i64().unwrap())
        .await;
    assert_eq!(build["status"], "success", "{build}\n{log}");
    for needle in [
        "Preparing the \"docker-autoscaler\" executor",
        "Using Docker Autoscaler executor with fleeting plugin",
        "Acquired instance local-",
        "Using Docker executor with image gantry-test/busybox:latest",
        "in a container at /builds/",
        "Moved the build directory:",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    // Its resource use was measured on the instance's engine (its build container and
    // its service's).
    let used = &build["resources"];
    assert!(
        used["peak_memory_bytes"].as_u64().is_some_and(|b| b > 0)
            && used["cpu_user_seconds"].is_number(),
        "no resource figures: {build}"
    );

    // The artifacts (one made with the service's answer) came back from the build's
    // instance and went to the test job's own instance, whose engine it reached
    // through the forwarded socket instead of dial-stdio.
    let test = server.job_named(setup.project, pipeline, "test").await;
    let log = server
        .trace(setup.project, test["id"].as_i64().unwrap())
        .await;
    assert_eq!(test["status"], "failed", "{test}\n{log}");
    assert_eq!(
        test["allow_failure"], true,
        "exit code 3 is allowed: {test}"
    );
    for needle in [
        "from git\nbuilt in a container",
        "hello from the service",
        "exit code 3",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }

    // A timeout stops the container on the instance's engine.
    let slow = server.job_named(setup.project, pipeline, "slow").await;
    assert_eq!(slow["status"], "failed", "{slow}");
    assert_eq!(slow["failure_reason"], "job_execution_timeout", "{slow}");

    // Every container, network and volume of the jobs is gone from the engine.
    let token = gantry_runner::config::short_token(&setup.runner_token);
    let label = format!("label=com.gantry.runner={token}");
    for kind in [
        &["ps", "-a", "-q", "--filter"][..],
        &["network", "ls", "-q", "--filter"][..],
        &["volume", "ls", "-q", "--filter"][..],
    ] {
        let mut args = kind.to_vec();
        args.push(&label);
        assert_eq!(docker(&args).trim(), "", "left behind: docker {args:?}");
    }

    // max_use_count = 1: three jobs, three instances, each removed after its job.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_writes_the_docker_and_autoscaler_sections() {
    let setup = Setup::new(PIPELINE, &[]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let register = |extra: &[&str]| {
        let mut args = vec![
            "register",
            "--url",
            &server.url,
            "--token",
            &setup.runner_token,
            "--executor",
            "docker-autoscaler",
        ];
        args.extend(extra);
        runner_command(&config, &args)
    };
    let out = register(&["--docker-image", "debian:bookworm"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--executor docker-autoscaler needs --autoscaler-plugin PLUGIN"),
        "{}",
        text(&out.stderr)
    );
    assert!(!config.exists(), "nothing was registered");

    let out = register(&[
        "--docker-image",
        "debian:bookworm",
        "--autoscaler-plugin",
        "local",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (loaded, warnings) = gantry_runner::config::Config::load(&config).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let runner = &loaded.runners[0];
    assert_eq!(
        runner.executor,
        gantry_runner::config::ExecutorKind::DockerAutoscaler
    );
    assert_eq!(
        runner.docker.as_ref().and_then(|d| d.image.as_deref()),
        Some("debian:bookworm")
    );
    assert_eq!(runner.autoscaler.as_ref().unwrap().plugin, "local");
}
