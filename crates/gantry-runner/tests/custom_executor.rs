//! The custom executor against the mock: a driver of four bash programs (config,
//! prepare, run, cleanup) that records every call, run through the whole protocol —
//! config's JSON moving the build directory, `job_env`, `CUSTOM_ENV_*`, the stage names
//! `run_exec` gets, `BUILD_EXIT_CODE_FILE`, system failures, preparation retries,
//! cleanup always, a timeout's SIGTERM reaching the driver.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use gantry_runner::config::Config;
use gantry_runner::job::JobEvent;
use gantry_runner::poll::PollEvent;
use gitlab_runner_mock::MockJobState;
use mock_support::*;

/// The driver's programs, recording their calls in `<dir>/calls`; they behave by the
/// job variable `MODE` (`CUSTOM_ENV_MODE`).
struct Driver {
    dir: PathBuf,
}

impl Driver {
    fn new(dir: &Path) -> Self {
        let dir = dir.join("driver");
        std::fs::create_dir_all(&dir).unwrap();
        let calls = dir.join("calls");
        let builds = dir.join("vm-builds");
        let cache = dir.join("vm-cache");
        let write = |name: &str, body: String| {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.join(name);
            std::fs::write(
                &path,
                format!("#!/usr/bin/env bash\nLOG={}\n{body}", calls.display()),
            )
            .unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        write(
            "config.sh",
            format!(
                r#"echo "config $CUSTOM_ENV_JOB" >> "$LOG"
echo "config says hello on stderr" >&2
case "$CUSTOM_ENV_MODE" in
  bad-json) echo "builds_dir=/nope" ;;
  unshared) printf '{{"builds_dir": "{builds}", "builds_dir_is_shared": false, "driver": {{"name": "test-driver"}}}}' ;;
  *) printf '{{"builds_dir": "{builds}", "cache_dir": "{cache}", "driver": {{"name": "test-driver", "version": "v1"}}, "job_env": {{"DRIVER_SECRET": "from-config"}}}}' ;;
esac
"#,
                builds = builds.display(),
                cache = cache.display(),
            ),
        );
        write(
            "prepare.sh",
            format!(
                r#"echo "prepare $CUSTOM_ENV_JOB" >> "$LOG"
echo "preparing job $CUSTOM_ENV_CI_JOB_ID with DRIVER_SECRET=$DRIVER_SECRET in $PWD"
case "$CUSTOM_ENV_MODE" in
  flaky)
    counter={dir}/counter-$CUSTOM_ENV_CI_JOB_ID
    n=$(( $(cat "$counter" 2>/dev/null || echo 0) + 1 ))
    echo "$n" > "$counter"
    if [ "$n" -lt 3 ]; then echo "the VM is not up yet ($n)" >&2; exit "$SYSTEM_FAILURE_EXIT_CODE"; fi ;;
  refuse) echo "this job may not run here" >&2; exit "$BUILD_FAILURE_EXIT_CODE" ;;
esac
exit 0
"#,
                dir = dir.display()
            ),
        );
        write(
            "run.sh",
            r#"echo "run $CUSTOM_ENV_JOB $2 $JOB_RESPONSE_FILE" >> "$LOG"
trap 'echo "run $CUSTOM_ENV_JOB $2 got TERM" >> "$LOG"; exit 1' TERM
if [ "$2" = build_script ]; then
  case "$CUSTOM_ENV_MODE" in
    system) echo "the VM went away" >&2; exit "$SYSTEM_FAILURE_EXIT_CODE" ;;
    odd) exit 7 ;;
  esac
  grep -q "\"id\":$CUSTOM_ENV_CI_JOB_ID," "$JOB_RESPONSE_FILE" && echo "the job response names job $CUSTOM_ENV_CI_JOB_ID"
fi
bash "$1"
code=$?
if [ "$code" -ne 0 ]; then
  echo "$code" > "$BUILD_EXIT_CODE_FILE"
  exit "$BUILD_FAILURE_EXIT_CODE"
fi
"#
            .to_owned(),
        );
        write(
            "cleanup.sh",
            r#"echo "cleanup $CUSTOM_ENV_JOB" >> "$LOG"
echo "removing the VM of $CUSTOM_ENV_JOB"
echo "cleanup warning of $CUSTOM_ENV_JOB" >&2
[ "$CUSTOM_ENV_MODE" = dirty ] && exit 5
exit 0
"#
            .to_owned(),
        );
        Self { dir }
    }

    fn builds(&self) -> PathBuf {
        self.dir.join("vm-builds")
    }

    /// The calls for job `name`, without the job's name.
    fn calls(&self, name: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.join("calls")).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let (call, rest) = line.split_once(' ')?;
                let rest = rest.strip_prefix(name)?;
                (rest.is_empty() || rest.starts_with(' ')).then(|| format!("{call}{rest}"))
            })
            .collect()
    }

    /// A runner configuration with one custom entry using these programs.
    fn config(&self, url: &str, dir: &Path, runner_extra: &str) -> Config {
        let text = format!(
            r#"concurrent = 1
check_interval = 1
shutdown_timeout = 30

[[runners]]
name = "custom-runner"
url = "{url}"
token = "fakerunnertoken"
executor = "custom"
builds_dir = "{builds}"
cache_dir = "{cache}"
{runner_extra}
[runners.custom]
config_exec = "{d}/config.sh"
prepare_exec = "{d}/prepare.sh"
run_exec = "{d}/run.sh"
cleanup_exec = "{d}/cleanup.sh"
graceful_kill_timeout = 5
force_kill_timeout = 5
"#,
            builds = dir.join("builds").display(),
            cache = dir.join("cache").display(),
            d = self.dir.display(),
        );
        let (config, warnings) = Config::from_toml(&text, Path::new("config.toml")).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        config
    }
}

/// The job variables of a job named `name` in mode `mode` (`JOB` names it in the
/// driver's records).
fn vars(name: &'static str, mode: &'static str) -> [(&'static str, &'static str, bool); 2] {
    [("JOB", name, false), ("MODE", mode, false)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_driver_runs_jobs_through_config_prepare_run_and_cleanup() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::new(dir.path());
    let (repo, sha) = repository(
        &dir.path().join("repo"),
        &[("README.md", "from the repository")],
    );
    let (mock, front) = mock_and_front().await;
    let rewrite = use_repository(&repo, &sha);
    front.rewrite_payload(move |payload| {
        rewrite(payload);
        current_failure_reasons(payload);
    });
    let happy = enqueue(
        &mock,
        "happy",
        &["echo \"project=$CI_PROJECT_DIR\"", "cat README.md"],
        &["echo \"after $CI_JOB_STATUS\""],
        &vars("happy", "ok"),
    );
    let exit_code = enqueue(
        &mock,
        "exit-code",
        &["exit 42"],
        &[],
        &vars("exit-code", "ok"),
    );
    let unshared = enqueue(
        &mock,
        "unshared",
        &["echo \"project=$CI_PROJECT_DIR\""],
        &[],
        &vars("unshared", "unshared"),
    );
    let dirty = enqueue(&mock, "dirty", &["echo fine"], &[], &vars("dirty", "dirty"));

    let (summary, events) = run_jobs(
        driver.config(front.url(), dir.path(), ""),
        dir.path(),
        4,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(summary.jobs.len(), 4, "{summary:?}");

    // The whole protocol, in order; step_script reaches the driver as build_script.
    let log = log_text(&happy);
    assert_eq!(happy.state(), MockJobState::Success, "{log}");
    let calls = driver.calls("happy");
    let stages: Vec<&str> = calls
        .iter()
        .map(|c| c.split(' ').take(2).last().unwrap_or(c))
        .collect();
    assert_eq!(
        stages,
        [
            "config",
            "prepare",
            "prepare_script",
            "build_script",
            "after_script",
            "cleanup"
        ],
        "{calls:?}"
    );
    for needle in [
        "config says hello on stderr",
        "Using Custom executor with driver test-driver v1...",
        &format!(
            "preparing job {} with DRIVER_SECRET=from-config",
            happy.id()
        ),
        "Running on ",
        &format!("the job response names job {}", happy.id()),
        // config_exec moved the job (shared layout: short token and concurrent id).
        &format!("project={}/fakerunne/0/project-", driver.builds().display()),
        // Sources are fetched by the runner, into the moved directory.
        "from the repository",
        "after success",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    // The job's temporary directory (with JOB_RESPONSE_FILE) is gone.
    let response = calls[2].rsplit(' ').next().unwrap();
    assert!(response.ends_with("response.json"), "{calls:?}");
    assert!(!Path::new(response).exists(), "{response} was left behind");
    // cleanup_exec's output went to the runner's log, not the job's.
    assert!(!log.contains("removing the VM"), "{log}");
    let cleanup_lines: Vec<(String, String)> = events
        .all()
        .into_iter()
        .filter_map(|event| match event {
            PollEvent::Job {
                event:
                    JobEvent::DriverCleanup {
                        job_id,
                        stream,
                        line,
                    },
                ..
            } if job_id == i64::try_from(happy.id()).unwrap() => Some((stream, line)),
            _ => None,
        })
        .collect();
    assert!(
        cleanup_lines.contains(&("stdout".to_owned(), "removing the VM of happy".to_owned()))
            && cleanup_lines
                .contains(&("stderr".to_owned(), "cleanup warning of happy".to_owned())),
        "{cleanup_lines:?}"
    );

    // BUILD_EXIT_CODE_FILE carries the script's own exit code.
    let log = log_text(&exit_code);
    assert_eq!(exit_code.state(), MockJobState::Failed, "{log}");
    let update = front.final_update(exit_code.id());
    assert_eq!(update["exit_code"], 42, "{update}");
    assert_eq!(update["failure_reason"], "script_failure", "{update}");
    assert!(log.contains("ERROR: Job failed: exit code 42"), "{log}");

    // builds_dir_is_shared = false: <builds_dir>/<project path>.
    let log = log_text(&unshared);
    assert!(
        log.contains(&format!("project={}/project-", driver.builds().display())),
        "{log}"
    );
    assert!(
        log.contains("Using Custom executor with driver test-driver..."),
        "{log}"
    );

    // A failing cleanup is a warning; the job's result stays.
    let log = log_text(&dirty);
    assert_eq!(dirty.state(), MockJobState::Success, "{log}");
    assert!(
        log.contains("Cleanup script failed: cleanup_exec program `")
            && log.contains("exited with 5"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn driver_failures_are_system_failures_and_preparation_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::new(dir.path());
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(current_failure_reasons);
    let system = enqueue(
        &mock,
        "system",
        &["echo never"],
        &[],
        &vars("system", "system"),
    );
    let odd = enqueue(&mock, "odd", &["echo never"], &[], &vars("odd", "odd"));
    let flaky = enqueue(
        &mock,
        "flaky",
        &["echo finally"],
        &[],
        &vars("flaky", "flaky"),
    );
    let refuse = enqueue(
        &mock,
        "refuse",
        &["echo never"],
        &[],
        &vars("refuse", "refuse"),
    );
    let bad_json = enqueue(
        &mock,
        "bad-json",
        &["echo never"],
        &[],
        &vars("bad-json", "bad-json"),
    );
    // A masked value built from $CI_PROJECT_DIR would change when config_exec moves
    // the job, and could not be masked any more.
    let masked = enqueue(
        &mock,
        "masked",
        &["echo \"$TOKEN_PATH\""],
        &[],
        &[
            ("JOB", "masked", false),
            ("MODE", "ok", false),
            ("TOKEN_PATH", "$CI_PROJECT_DIR/s3cr3t-t0ken", true),
        ],
    );
    // A GIT_CLONE_PATH below the runner's builds_dir but not below the one config_exec
    // chose: refused once config_exec has moved the job, a configuration error.
    let clone_path = format!("{}/app", dir.path().join("builds").display());
    let moved_away = enqueue(
        &mock,
        "moved-away",
        &["echo never"],
        &[],
        &[
            ("JOB", "moved-away", false),
            ("MODE", "ok", false),
            ("GIT_CLONE_PATH", &clone_path, false),
        ],
    );

    let (summary, _) = run_jobs(
        driver.config(
            front.url(),
            dir.path(),
            "[runners.custom_build_dir]\nenabled = true\n",
        ),
        dir.path(),
        7,
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(summary.jobs.len(), 7, "{summary:?}");

    let log = log_text(&system);
    assert_eq!(
        front.final_update(system.id())["failure_reason"],
        "runner_system_failure",
        "{log}"
    );
    assert!(log.contains("the VM went away"), "{log}");
    assert!(
        log.contains("run_exec (build_script) program `")
            && log.contains("exited with SYSTEM_FAILURE_EXIT_CODE (2)"),
        "{log}"
    );
    assert_eq!(
        driver.calls("system").last().map(String::as_str),
        Some("cleanup")
    );

    let log = log_text(&odd);
    assert_eq!(
        front.final_update(odd.id())["failure_reason"],
        "runner_system_failure",
        "{log}"
    );
    assert!(
        log.contains("exited with 7; a driver exits with 0, $BUILD_FAILURE_EXIT_CODE (1)"),
        "{log}"
    );

    // Two system failures of prepare_exec, each followed by cleanup, then success.
    let log = log_text(&flaky);
    assert_eq!(flaky.state(), MockJobState::Success, "{log}");
    assert_eq!(
        log.matches("Preparation failed: prepare_exec program")
            .count(),
        2,
        "{log}"
    );
    assert_eq!(log.matches("Will be retried in 3s ...").count(), 2, "{log}");
    assert!(
        log.contains("the VM is not up yet (2)") && log.contains("finally"),
        "{log}"
    );
    let calls: Vec<String> = driver
        .calls("flaky")
        .into_iter()
        .map(|c| c.split(' ').take(2).last().unwrap().to_owned())
        .collect();
    assert_eq!(
        calls,
        [
            "config",
            "prepare",
            "cleanup",
            "config",
            "prepare",
            "cleanup",
            "config",
            "prepare",
            "prepare_script",
            "build_script",
            "cleanup"
        ],
    );

    // BUILD_FAILURE_EXIT_CODE from prepare_exec fails the job as a script would, at once.
    let log = log_text(&refuse);
    let update = front.final_update(refuse.id());
    assert_eq!(update["failure_reason"], "script_failure", "{log}");
    assert!(log.contains("this job may not run here"), "{log}");
    assert_eq!(driver.calls("refuse"), ["config", "prepare", "cleanup"]);

    // Output that is not JSON: three tries, then a system failure naming the program.
    let log = log_text(&bad_json);
    assert_eq!(
        front.final_update(bad_json.id())["failure_reason"],
        "runner_system_failure",
        "{log}"
    );
    assert!(
        log.contains("config_exec program `")
            && log.contains("printed on stdout what is not its configuration")
            && log.contains("expected a JSON object"),
        "{log}"
    );
    assert_eq!(
        driver
            .calls("bad-json")
            .iter()
            .filter(|c| *c == "config")
            .count(),
        3
    );

    let log = log_text(&masked);
    assert_eq!(
        front.final_update(masked.id())["failure_reason"],
        "runner_system_failure",
        "{log}"
    );
    assert!(
        log.contains("which changes the value of the masked variable TOKEN_PATH"),
        "{log}"
    );
    assert!(!log.contains("Preparation failed"), "not retried: {log}");
    assert!(!log.contains("s3cr3t-t0ken"), "{log}");

    let log = log_text(&moved_away);
    assert_eq!(
        front.final_update(moved_away.id())["failure_reason"],
        "runner_configuration_error",
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "the GIT_CLONE_PATH={clone_path:?} has to be within {:?}",
            driver.builds().display().to_string()
        )),
        "{log}"
    );
    assert_eq!(driver.calls("moved-away"), ["config", "cleanup"], "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_timeout_terminates_the_driver_and_still_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Driver::new(dir.path());
    let (mock, front) = mock_and_front().await;
    front.rewrite_payload(|payload| {
        current_failure_reasons(payload);
        payload["runner_info"]["timeout"] = 3.into();
    });
    let marker = dir.path().join("still-running");
    let slow = enqueue(
        &mock,
        "slow",
        &[&format!(
            "(sleep 8; touch {}) ; echo done",
            marker.display()
        )],
        &[],
        &vars("slow", "ok"),
    );
    let (summary, _) = run_jobs(
        driver.config(front.url(), dir.path(), ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(summary.jobs.len(), 1);
    let log = log_text(&slow);
    assert_eq!(
        front.final_update(slow.id())["failure_reason"],
        "job_execution_timeout",
        "{log}"
    );
    let calls = driver.calls("slow");
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("run build_script") && c.ends_with("got TERM")),
        "the driver got no SIGTERM: {calls:?}"
    );
    assert_eq!(
        calls.last().map(String::as_str),
        Some("cleanup"),
        "{calls:?}"
    );
    // The script's whole process group went with it.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(
        !marker.exists(),
        "a process of the timed-out stage survived"
    );
}
