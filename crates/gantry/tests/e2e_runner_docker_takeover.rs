//! A runner process that dies (SIGKILL) while a Docker executor job runs, and is
//! started again: the job's build container was never tied to it — the stage's output
//! goes to files in the build directory, its exit code too — and the new runner process
//! takes the job over in the same container, its log going on from exactly where the
//! coordinator's ends. A job whose containers are gone meanwhile ends as a lost one.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e_runner_support::*;
use nix::sys::signal::Signal;

const IMAGE: &str = "gantry-test/busybox:latest";

/// Fails (loudly) unless the engine answers and the test image exists.
fn require_docker() {
    let ok = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "these tests need a Docker engine and the image {IMAGE}: start the engine and run scripts/test-images.sh"
    );
}

/// A Docker runner's configuration in `dir`; returns its path and the journal's.
fn write_config(setup: &Setup, dir: &Path) -> (PathBuf, PathBuf) {
    let config = dir.join("config.toml");
    let text = config_text(
        &setup.server.url,
        &setup.runner_token,
        dir,
        "",
        &format!("[runners.docker]\nimage = \"{IMAGE}\"\npull_policy = [\"if-not-present\"]\n"),
    )
    .replace("executor = \"shell\"", "executor = \"docker\"");
    std::fs::write(&config, text).unwrap();
    (config, dir.join(".runner_jobs"))
}

/// The one job record in `journal`, if any.
fn record(journal: &Path) -> Option<serde_json::Value> {
    let name = std::fs::read_dir(journal)
        .ok()?
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.ends_with(".json"))?;
    serde_json::from_slice(&std::fs::read(journal.join(name)).ok()?).ok()
}

/// `docker ps` of job `job`'s containers (of the runner `token`): `(id, state)`.
fn containers((token, job): (&str, i64)) -> Vec<(String, String)> {
    let short = gantry_runner::config::short_token(token);
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("label=com.gantry.runner={short}"),
            "--filter",
            &format!("label=com.gantry.job={job}"),
            "--format",
            "{{.ID}} {{.State}}",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(id, state)| (id.to_owned(), state.to_owned()))
        .collect()
}

/// The job once it has ended (not `running`).
async fn wait_ended(server: &Server, project: i64, job: i64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let value = server.job(project, job).await;
        if !matches!(
            value["status"].as_str(),
            Some("running" | "pending" | "canceling")
        ) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} still {}",
            value["status"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The numbers of the lines `<prefix> N` in `log`, in order.
fn numbered(log: &str, prefix: &str) -> Vec<u32> {
    log.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_docker_job_outlives_its_killed_runner_with_every_line_once() {
    require_docker();
    let setup = Setup::new(
        r#"
chatty:
  variables: {GIT_STRATEGY: none}
  script:
    - for i in $(seq 1 80); do echo "line $i"; echo "err $i" >&2; sleep 0.1; done
    - echo "script ran in $HOSTNAME" >> /builds/runs
  after_script:
    - echo "after_script sees $CI_JOB_STATUS in $HOSTNAME"
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    // Watched, the log is sent every second: the runner dies with output sent, output
    // read but not sent, and output not yet read.
    let (job, _) = server
        .wait_running(setup.project, pipeline, "chatty", "line 5\n")
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    let left = containers((&setup.runner_token, job));
    assert!(
        left.iter().any(|(_, state)| state == "running"),
        "the build container runs on: {left:?}\n{}",
        server.trace(setup.project, job).await
    );

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(
        log.contains("found the job's step_script still running on its own and took it over"),
        "{log}"
    );
    assert!(!log.contains("may appear twice"), "{log}");
    for stream in ["line ", "err "] {
        assert_eq!(
            numbered(&log, stream),
            (1..=80).collect::<Vec<_>>(),
            "every {stream}line once, in order:\n{log}"
        );
    }
    // One build container for both runners: after_script ran where the script did.
    let host = log
        .lines()
        .find_map(|l| l.strip_prefix("after_script sees success in "))
        .unwrap_or_else(|| panic!("no after_script line in:\n{log}"))
        .trim()
        .to_owned();
    let runs = find_file(&dir.path().join("builds"), "runs").unwrap();
    assert_eq!(
        std::fs::read_to_string(runs).unwrap(),
        format!("script ran in {host}\n")
    );
    assert!(log.contains("Job succeeded"), "{log}");
    wait_for(
        Duration::from_secs(20),
        "the job's containers are removed",
        || containers((&setup.runner_token, job)).is_empty(),
    )
    .await;
    wait_for(Duration::from_secs(10), "the record is removed", || {
        record(&journal).is_none()
    })
    .await;
    let stderr = runner.quit();
    assert!(
        stderr.contains("its step_script was left in its container: took the job over"),
        "{stderr}"
    );
}

/// The runner dies once the script stage is recorded but before the container's shell
/// has it (the image's entrypoint still sleeping, its first time): the next runner
/// process waits for that container run to end, finds that the script never began, and
/// runs the stage again — once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_docker_stage_that_had_not_begun_is_started_again() {
    require_docker();
    let setup = Setup::new(
        &format!(
            r#"
late:
  variables: {{GIT_STRATEGY: none}}
  image:
    name: {IMAGE}
    entrypoint:
      - sh
      - -c
      - 'if [ ! -e /builds/first-start ]; then touch /builds/first-start; sleep 8; exec "$@" </dev/null; fi; exec "$@"'
      - "--"
  script:
    - echo "script ran" >> /builds/runs
    - echo "the script ran"
"#
        ),
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    // The container started for the script stage: its entrypoint sleeps.
    wait_for(
        Duration::from_secs(60),
        "the record names the script stage and its container started",
        || {
            record(&journal).is_some_and(|r| r["stage"]["place"]["name"] == "step_script")
                && find_file(&dir.path().join("builds"), "first-start").is_some()
        },
    )
    .await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    let job = record(&journal).unwrap()["job_id"].as_i64().unwrap();
    assert!(
        find_file(&dir.path().join("builds"), "stage_step_script.began").is_none(),
        "the script has not begun"
    );

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("took it over"), "{log}");
    assert_eq!(log.matches("\nthe script ran").count(), 1, "{log}");
    let runs = find_file(&dir.path().join("builds"), "runs").unwrap();
    assert_eq!(std::fs::read_to_string(runs).unwrap(), "script ran\n");
    assert_eq!(
        server.jobs(setup.project, pipeline).await.len(),
        1,
        "no retry"
    );
    wait_for(
        Duration::from_secs(20),
        "the job's containers are removed",
        || containers((&setup.runner_token, job)).is_empty(),
    )
    .await;
    runner.quit();
}

/// A Docker job whose runner died before its script (here in a `hooks:` script, run
/// in the build container) starts again: the first start's containers are removed, the
/// log goes on, and the same job runs its stages again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_docker_job_that_had_not_reached_its_script_starts_again() {
    require_docker();
    let setup = Setup::new(
        r#"
early:
  variables: {GIT_STRATEGY: none}
  hooks:
    pre_get_sources_script:
    - |
      if [ -e /builds/first-attempt ]; then
        echo "second attempt"
      else
        touch /builds/first-attempt
        echo "first attempt in $HOSTNAME"
        sleep 300
      fi
  script:
    - echo "script ran"
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, log) = server
        .wait_running(setup.project, pipeline, "early", "first attempt in ")
        .await;
    let first: String = log
        .lines()
        .find_map(|l| l.strip_prefix("first attempt in "))
        .unwrap()
        .trim()
        .to_owned();
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    let left = containers((&setup.runner_token, job));
    assert!(
        left.iter()
            .any(|(id, state)| first.starts_with(id.as_str()) && state == "running"),
        "the hook's container runs on: {left:?} ({first})"
    );

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    let order = [
        "first attempt in",
        "had not reached its script",
        "second attempt",
        "script ran",
    ];
    let at: Vec<usize> = order
        .iter()
        .map(|line| {
            log.find(line)
                .unwrap_or_else(|| panic!("no {line:?} in:\n{log}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{log}");
    assert_eq!(
        log.matches("Running with gantry-runner").count(),
        1,
        "one header: {log}"
    );
    assert_eq!(
        server.jobs(setup.project, pipeline).await.len(),
        1,
        "no retry"
    );
    wait_for(
        Duration::from_secs(20),
        "the job's containers are removed",
        || containers((&setup.runner_token, job)).is_empty(),
    )
    .await;
    wait_for(Duration::from_secs(10), "the record is removed", || {
        record(&journal).is_none()
    })
    .await;
    runner.quit();
}

/// The job's containers removed while no runner ran: nothing to go on in, the job
/// fails `runner_system_failure`, as before takeovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_docker_job_whose_containers_are_gone_fails_as_lost() {
    require_docker();
    let setup = Setup::new(
        r#"
gone:
  variables: {GIT_STRATEGY: none}
  script:
    - echo "started"
    - sleep 300
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "gone", "started")
        .await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    let left = containers((&setup.runner_token, job));
    assert!(!left.is_empty());
    for (id, _) in &left {
        let out = Command::new("docker")
            .args(["rm", "-f", id])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["failure_reason"], "runner_system_failure", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("stopped while this job ran"), "{log}");
    assert!(!log.contains("took it over"), "{log}");
    wait_for(Duration::from_secs(10), "the record is removed", || {
        record(&journal).is_none()
    })
    .await;
    let stderr = runner.quit();
    assert!(stderr.contains("is gone"), "{stderr}");
}

/// SIGUSR2 (an upgrade): the runner leaves its Docker job running in its container and
/// stops; the next runner process takes it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_hands_its_docker_job_over_to_the_next_one() {
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup::new(
        r#"
build:
  variables: {GIT_STRATEGY: none}
  script:
    - echo "started"
    - while [ ! -e /builds/go ]; do sleep 0.1; done
    - echo "finished by the next runner"
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "build", "started")
        .await;

    runner.signal(Signal::SIGUSR2);
    let (code, stderr) = runner.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("1 job(s) left running for the next `gantry runner run` to take over"),
        "{stderr}"
    );
    let left = containers((&setup.runner_token, job));
    assert!(
        left.iter().any(|(_, state)| state == "running"),
        "the build container runs on: {left:?}"
    );
    assert!(record(&journal).is_some(), "the record stays");

    let runner = start_run(&config, dir.path());
    server
        .wait_trace(setup.project, job, "took it over", Duration::from_secs(30))
        .await;
    // `/builds` in the container: the job's slot directory here.
    let slot = dir
        .path()
        .join("builds")
        .join(gantry_runner::config::short_token(&setup.runner_token))
        .join("0");
    std::fs::write(slot.join("go"), "").unwrap();
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("finished by the next runner"), "{log}");
    assert_eq!(log.matches("\nstarted").count(), 1, "{log}");
    runner.quit();
}

/// A file named `name` somewhere below `dir`.
fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
        if entry.file_type().ok()?.is_dir()
            && let Some(found) = find_file(&path, name)
        {
            return Some(found);
        }
    }
    None
}
