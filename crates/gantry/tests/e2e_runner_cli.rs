//! The `gantry runner` commands against our coordinator, as an operator uses them:
//! `register` (with a `glrt-` token created through the API, and with the legacy
//! registration token), `verify`, `list`, `run` (the binary runs a pipeline; SIGQUIT
//! lets the running job finish, SIGTERM interrupts it with `after_script`), and
//! `unregister`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e_runner_support::*;
use nix::sys::signal::Signal;
use reqwest::Method;

/// Edits a registered config.toml: builds and cache under `dir`, `check_interval = 1`.
fn local_dirs(config: &Path, dir: &Path) {
    let (mut loaded, warnings) = gantry_runner::config::Config::load(config).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    loaded.check_interval = Duration::from_secs(1);
    for runner in &mut loaded.runners {
        runner.builds_dir = Some(dir.join("builds"));
        runner.cache_dir = Some(dir.join("cache"));
    }
    loaded.save(config).unwrap();
}

const PIPELINE: &str = r#"
stages: [first, second]

quick:
  stage: first
  variables:
    GIT_STRATEGY: none
  script:
    - echo "quick job on $CI_RUNNER_DESCRIPTION"

slow:
  stage: second
  variables:
    GIT_STRATEGY: none
  script:
    - echo "slow job started"
    - sleep 3
    - echo "slow job done"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn register_verify_list_run_and_unregister_against_the_coordinator() {
    let setup = Setup::new(PIPELINE, &[]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");

    // register with a glrt- token: verified with the coordinator, written to config.toml.
    let out = runner_command(
        &config,
        &[
            "register",
            "--url",
            &server.url,
            "--token",
            &setup.runner_token,
            "--name",
            "cli-runner",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Runner cli-runner"),
        "{}",
        text(&out.stderr)
    );
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains(&format!("url = \"{}\"", server.url)),
        "{written}"
    );
    assert!(written.contains(&setup.runner_token), "{written}");
    assert!(dir.path().join(".runner_system_id").is_file());
    // Builds in the temp dir, not in the working directory; ask every second.
    local_dirs(&config, dir.path());

    let out = runner_command(&config, &["verify"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("cli-runner") && text(&out.stdout).contains("is valid"),
        "{}",
        text(&out.stdout)
    );

    let out = runner_command(&config, &["list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = text(&out.stdout);
    assert!(
        listed.contains("cli-runner") && listed.contains("executor=shell"),
        "{listed}"
    );
    assert!(
        !listed.contains(&setup.runner_token),
        "list must not print the token: {listed}"
    );

    // run: the binary takes both jobs; SIGQUIT during the slow one lets it finish.
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (slow, _) = server
        .wait_running(setup.project, pipeline, "slow", "slow job started")
        .await;
    runner.signal(Signal::SIGQUIT);
    let (code, stderr) = runner.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    let done = server.pipeline(setup.project, pipeline).await;
    assert_eq!(done["status"], "success", "{done}\n{stderr}");
    let quick = server.job_named(setup.project, pipeline, "quick").await;
    let log = server
        .trace(setup.project, quick["id"].as_i64().unwrap())
        .await;
    assert!(
        log.contains("Running with gantry-runner") && log.contains("on cli-runner"),
        "{log}"
    );
    assert!(log.contains("quick job on e2e"), "{log}");
    let log = server.trace(setup.project, slow).await;
    assert!(
        log.contains("slow job done") && log.contains("Job succeeded"),
        "{log}"
    );
    assert!(stderr.contains("not taking new jobs"), "{stderr}");

    // unregister: a glrt- runner's manager goes; the entry leaves the configuration.
    let out = runner_command(&config, &["unregister", "--name", "cli-runner"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let left = std::fs::read_to_string(&config).unwrap();
    assert!(!left.contains(&setup.runner_token), "{left}");
    let out = runner_command(&config, &["verify"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "no runners left: {}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registration_token_creates_a_tagged_runner_and_sigterm_interrupts_its_job() {
    let ci = r#"
tagged:
  tags: [linux, e2e]
  variables:
    GIT_STRATEGY: none
  script:
    - echo "tagged job started"
    - sleep 120
    - echo "never"
  after_script:
    - echo "after_script saw CI_JOB_STATUS=$CI_JOB_STATUS"
"#;
    let setup = Setup::new(ci, &[]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let out = runner_command(
        &config,
        &[
            "register",
            "--url",
            &server.url,
            "--token",
            &server.registration,
            "--name",
            "legacy",
            "--tag-list",
            "linux, e2e",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        !written.contains(&server.registration),
        "the registration token is not the runner's: {written}"
    );
    let (_, runners) = server.call(Method::GET, "runners/all", None).await;
    let legacy = runners
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["description"] == "legacy")
        .unwrap_or_else(|| panic!("{runners}"))
        .clone();
    assert_eq!(
        legacy["tag_list"],
        serde_json::json!(["linux", "e2e"]),
        "{legacy}"
    );
    local_dirs(&config, dir.path());

    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (id, _) = server
        .wait_running(setup.project, pipeline, "tagged", "tagged job started")
        .await;
    let interrupted_at = Instant::now();
    runner.signal(Signal::SIGTERM);
    let (code, stderr) = runner.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        interrupted_at.elapsed() < Duration::from_secs(30),
        "{stderr}"
    );

    let job = server.job(setup.project, id).await;
    assert_eq!(job["status"], "failed", "{job}");
    assert_eq!(job["failure_reason"], "runner_interrupted", "{job}");
    let log = server.trace(setup.project, id).await;
    assert!(
        log.contains("after_script saw CI_JOB_STATUS=canceled"),
        "{log}"
    );
    assert!(!log.contains("\nnever"), "{log}");
}

/// `gantry runner list | head -0`: a closed standard output ends the listing quietly
/// (`println!` panicked with exit status 101).
#[test]
fn list_into_a_closed_pipe_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let mut toml = String::from("concurrent = 1\n");
    for name in ["one", "two", "three"] {
        toml.push_str(&format!(
            "[[runners]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:1\"\ntoken = \"glrt-{name}-0123456789abcdef\"\nexecutor = \"shell\"\n"
        ));
    }
    std::fs::write(&config, toml).unwrap();
    // A pipe whose reading end is closed before the command starts.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = gantry()
        .args(["runner", "list", "--config"])
        .arg(&config)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        text(&out.stderr)
    );
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}
