//! The custom executor end to end, as an operator sets it up: `gantry runner register
//! --executor custom --custom-…-exec` against our coordinator, `gantry runner run`, and
//! a two-stage pipeline whose artifact passes between jobs run by a driver that moves
//! them into its own build directory and runs each script with an emptied environment.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use e2e_runner_support::*;
use nix::sys::signal::Signal;

const PIPELINE: &str = r#"
stages: [build, test]

build:
  stage: build
  image: sandbox/$FLAVOUR:1
  variables:
    FLAVOUR: alpine
  script:
    - echo "built in $CI_PROJECT_DIR" > out.txt
    - cat input.txt >> out.txt
    - test -z "$RUNNER_ONLY" && echo "the runner's environment stayed outside"
  artifacts:
    paths: [out.txt]

test:
  stage: test
  variables:
    GIT_STRATEGY: none
  script:
    - cat out.txt
"#;

/// A driver: config moves jobs under `<dir>/sandbox`, run executes the script with an
/// empty environment (only `PATH`), every call is recorded in `<dir>/calls`.
fn write_driver(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let calls = dir.join("calls");
    let sandbox = dir.join("sandbox");
    let programs = [
        (
            "config.sh",
            format!(
                "echo \"sandbox image: ${{CUSTOM_ENV_CI_JOB_IMAGE:-none}}\" >&2\n\
                 printf '{{\"builds_dir\": \"{}\", \"driver\": {{\"name\": \"sandbox\", \"version\": \"0.1\"}}}}'\n",
                sandbox.display()
            ),
        ),
        (
            "run.sh",
            format!(
                "echo \"$CUSTOM_ENV_CI_JOB_NAME $2\" >> {calls}\n\
                 env -i PATH=\"$PATH\" bash \"$1\" || {{ echo $? > \"$BUILD_EXIT_CODE_FILE\"; exit \"$BUILD_FAILURE_EXIT_CODE\"; }}\n",
                calls = calls.display()
            ),
        ),
        (
            "cleanup.sh",
            format!(
                "echo \"$CUSTOM_ENV_CI_JOB_NAME cleanup\" >> {}\n",
                calls.display()
            ),
        ),
    ];
    for (name, body) in programs {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/usr/bin/env bash\n{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registered_custom_runner_runs_a_pipeline_through_its_driver() {
    let setup = Setup::new(PIPELINE, &[("input.txt", "from git\n")]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let driver = dir.path().join("driver");
    std::fs::create_dir_all(&driver).unwrap();
    write_driver(&driver);
    let config = dir.path().join("config.toml");
    let program = |name: &str| driver.join(name).to_string_lossy().into_owned();

    // Flags of another executor, or custom without its run program: usage errors.
    for (flags, message) in [
        (
            ["--docker-image", "alpine"],
            "--docker-image is for --executor docker",
        ),
        (
            ["--executor", "custom"],
            "--executor custom needs --custom-run-exec PATH",
        ),
    ] {
        let mut args = vec![
            "register",
            "--url",
            &server.url,
            "--token",
            &setup.runner_token,
        ];
        args.extend(flags);
        let out = runner_command(&config, &args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains(message), "{}", text(&out.stderr));
    }
    assert!(!config.exists(), "nothing was registered");

    let out = runner_command(
        &config,
        &[
            "register",
            "--url",
            &server.url,
            "--token",
            &setup.runner_token,
            "--name",
            "custom-runner",
            "--executor",
            "custom",
            "--custom-config-exec",
            &program("config.sh"),
            "--custom-run-exec",
            &program("run.sh"),
            "--custom-cleanup-exec",
            &program("cleanup.sh"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains("executor = \"custom\"")
            && written.contains("[runners.custom]")
            && written.contains(&format!("run_exec = \"{}\"", program("run.sh"))),
        "{written}"
    );
    let (mut loaded, warnings) = gantry_runner::config::Config::load(&config).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    loaded.check_interval = Duration::from_secs(1);
    loaded.runners[0].cache_dir = Some(dir.path().join("cache"));
    loaded.save(&config).unwrap();

    let pipeline = server.create_pipeline(setup.project).await;
    let child = gantry()
        .args(["runner", "run", "--config"])
        .arg(&config)
        .current_dir(dir.path())
        .env("RUNNER_ONLY", "the runner's own environment")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map(Child)
        .expect("gantry runs");
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(90))
        .await;
    child.signal(Signal::SIGQUIT);
    let (code, stderr) = child.wait(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(done["status"], "success", "{done}\n{stderr}");

    let build = server.job_named(setup.project, pipeline, "build").await;
    let log = server
        .trace(setup.project, build["id"].as_i64().unwrap())
        .await;
    let sandbox = dir.path().join("driver/sandbox");
    for needle in [
        "Preparing the \"custom\" executor",
        "Using Custom executor with driver sandbox 0.1...",
        // CI_JOB_IMAGE as written, expanded by the runner: the driver picks its image.
        "sandbox image: sandbox/alpine:1",
        "Running on ",
        "the runner's environment stayed outside",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    let test = server.job_named(setup.project, pipeline, "test").await;
    let log = server
        .trace(setup.project, test["id"].as_i64().unwrap())
        .await;
    assert!(log.contains("sandbox image: none"), "{log}");
    // The artifact came from the build job's directory in the driver's sandbox.
    assert!(
        log.contains(&format!("built in {}/", sandbox.display())) && log.contains("from git"),
        "{log}"
    );
    let calls = std::fs::read_to_string(dir.path().join("driver/calls")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "build prepare_script",
            "build build_script",
            "build cleanup",
            "test prepare_script",
            "test build_script",
            "test cleanup"
        ],
        "{calls}"
    );
}
