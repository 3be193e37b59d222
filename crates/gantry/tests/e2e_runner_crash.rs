//! A runner process that dies with a job running (SIGKILL: the OOM killer, a crash) and is
//! started again, when the job cannot go on (here: a custom executor job in a `hooks:`
//! script, before its script — its driver may have made what a new start would make
//! again; see `e2e_runner_takeover.rs` for jobs that go on): the job's processes, which
//! outlived it, are killed; the job fails with `runner_system_failure` at once, its log
//! saying why, instead of staying `running` for the coordinator's stuck-job hour;
//! `retry: {when: runner_system_failure}` runs it again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e_runner_support::*;
use nix::sys::signal::Signal;

/// The pid the script printed as `first attempt pid <pid>`.
fn script_pid(log: &str) -> u32 {
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("first attempt pid "))
        .unwrap_or_else(|| panic!("no pid in:\n{log}"));
    line.trim().parse().unwrap()
}

/// The job records (`.json`; a shell job's payload is kept beside its record).
fn records(journal: &Path) -> Vec<String> {
    std::fs::read_dir(journal)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|name| name.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default()
}

/// A `config.toml` for one custom executor runner of `setup`'s coordinator in `dir`
/// whose driver runs the job's scripts on this machine, and where its journal is kept.
fn write_custom_config(setup: &Setup, dir: &Path) -> (PathBuf, PathBuf) {
    let programs = [
        ("config.sh", "printf '{}'\n".to_owned()),
        ("prepare.sh", "true\n".to_owned()),
        ("run.sh", "bash \"$1\"\n".to_owned()),
        ("cleanup.sh", "true\n".to_owned()),
    ];
    (
        custom_driver_config(setup, dir, &programs),
        dir.join(".runner_jobs"),
    )
}

async fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_of_a_killed_runner_is_failed_and_its_processes_ended_when_the_runner_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("first-attempt-ran");
    let pipeline = format!(
        r#"
lost:
  variables:
    GIT_STRATEGY: none
  retry:
    max: 1
    when: runner_system_failure
  script:
    - echo done
  hooks:
    pre_get_sources_script:
    - |
      if [ -e "{mark}" ]; then
        echo "second attempt"
      else
        touch "{mark}"
        echo "first attempt pid $$"
        sleep 300
      fi
"#,
        mark = mark.display()
    );
    let setup = Setup::new(&pipeline, &[]).await;
    let server = &setup.server;
    let (config, journal) = write_custom_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (first, log) = server
        .wait_running(setup.project, pipeline, "lost", "first attempt pid")
        .await;
    let pid = script_pid(&log);
    assert_eq!(records(&journal).len(), 1, "the running job is recorded");

    // The runner dies; the script's shell (and its sleep) outlive it, unwatched.
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    assert!(alive(pid), "the job's shell outlived the runner");
    assert_eq!(
        server.job(setup.project, first).await["status"],
        "running",
        "the coordinator does not know"
    );
    assert_eq!(records(&journal).len(), 1, "the record stays");

    // Started again, the runner ends the lost job before taking any.
    let runner = start_run(&config, dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed = loop {
        let job = server.job(setup.project, first).await;
        if job["status"] != "running" {
            break job;
        }
        assert!(Instant::now() < deadline, "the lost job stays running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(
        failed["failure_reason"], "runner_system_failure",
        "{failed}"
    );
    let log = server.trace(setup.project, first).await;
    assert!(
        log.contains("first attempt pid") && log.contains("stopped while this job ran"),
        "{log}"
    );
    wait_until(
        "the orphaned shell is killed",
        Duration::from_secs(10),
        || !alive(pid),
    )
    .await;

    // The retry runs on the same runner, and the record of the lost job is gone.
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    assert_eq!(done["status"], "success", "{done}");
    let jobs = server.jobs(setup.project, pipeline).await;
    let retry = jobs
        .iter()
        .find(|j| j["id"].as_i64() != Some(first))
        .expect("the retry");
    let retry_log = server
        .trace(setup.project, retry["id"].as_i64().unwrap())
        .await;
    assert!(retry_log.contains("second attempt"), "{retry_log}");
    wait_until("the records are removed", Duration::from_secs(10), || {
        records(&journal).is_empty()
    })
    .await;

    let stderr = runner.quit();
    assert!(
        stderr.contains(&format!(
            "job {first} was running when this runner last stopped; killed 1 process group(s) it left running; ran the custom executor's cleanup_exec; failed it (runner_system_failure)"
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_runners_record_is_kept_and_a_lost_job_being_canceled_ends_canceled() {
    let setup = Setup::new(
        "slow:\n  variables: {GIT_STRATEGY: none}\n  hooks:\n    pre_get_sources_script: [echo started, sleep 300]\n  script: [echo done]\n",
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal) = write_custom_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "slow", "started")
        .await;

    // A second runner process on the same configuration while the first one lives: the
    // first one's record is not a lost job.
    let second = start_run(&config, dir.path());
    tokio::time::sleep(Duration::from_secs(2)).await;
    second.signal(Signal::SIGQUIT);
    let (_, stderr) = second.wait(Duration::from_secs(30));
    assert!(!stderr.contains("was running when"), "{stderr}");
    assert_eq!(server.job(setup.project, job).await["status"], "running");
    assert_eq!(records(&journal).len(), 1);

    // The first dies; the job is canceled meanwhile (no runner to tell it to).
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    server.cancel_job(setup.project, job).await;
    let [record] = records(&journal).try_into().unwrap();
    let saved = std::fs::read(journal.join(&record)).unwrap();
    let runner = start_run(&config, dir.path());
    wait_until("the record is dropped", Duration::from_secs(30), || {
        records(&journal).is_empty()
    })
    .await;
    let stderr = runner.quit();
    assert!(
        stderr.contains(&format!(
            "job {job} was running when this runner last stopped; killed 1 process group(s) it left running; ran the custom executor's cleanup_exec; it was being canceled: ended it as canceled"
        )),
        "{stderr}"
    );
    assert_eq!(server.job(setup.project, job).await["status"], "canceled");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("stopped while this job ran"), "{log}");

    // The same record again (a runner that died before removing it): the job has
    // ended, its processes are gone; the record is dropped and nothing changes (the
    // driver's directory is gone too: `cleanup_exec` cannot run again, and says so).
    std::fs::write(journal.join(&record), saved).unwrap();
    let runner = start_run(&config, dir.path());
    wait_until("the record is dropped", Duration::from_secs(30), || {
        records(&journal).is_empty()
    })
    .await;
    let stderr = runner.quit();
    assert!(
        stderr.contains(&format!(
            "job {job} was running when this runner last stopped; cleanup_exec failed: read the environment of the lost job's driver programs"
        )) && stderr.contains("No such file or directory (os error 2); the coordinator had already ended it"),
        "{stderr}"
    );
    assert_eq!(server.trace(setup.project, job).await, log);
}

/// A custom executor's job whose runner dies: at the next start, `cleanup_exec` runs in
/// the environment the job's `prepare_exec` made (its `CUSTOM_ENV_*` variables and
/// `job_env`), once, and the job's temporary directory is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_custom_executor_job_is_cleaned_up_by_its_driver() {
    let setup = Setup::new(
        "vm:\n  variables: {GIT_STRATEGY: none, VM_NAME: build-vm-7}\n  hooks:\n    pre_get_sources_script: [echo started, sleep 300]\n  script: [echo done]\n",
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let programs = [
        (
            "config.sh",
            "printf '{\"job_env\": {\"DRIVER_STATE\": \"from-config\"}}'\n".to_owned(),
        ),
        (
            "prepare.sh",
            format!(
                "echo \"$CUSTOM_ENV_VM_NAME\" > {marks}/created\n",
                marks = marks.display()
            ),
        ),
        ("run.sh", "bash \"$1\"\n".to_owned()),
        (
            "cleanup.sh",
            format!(
                "echo \"removing $CUSTOM_ENV_VM_NAME\"\n\
                 echo \"$CUSTOM_ENV_VM_NAME $CUSTOM_ENV_CI_JOB_ID $DRIVER_STATE $(basename \"$PWD\")\" >> {marks}/cleaned\n",
                marks = marks.display()
            ),
        ),
    ];
    let config = custom_driver_config(&setup, dir.path(), &programs);
    let journal = dir.path().join(".runner_jobs");

    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "vm", "started")
        .await;
    assert_eq!(
        std::fs::read_to_string(marks.join("created")).unwrap(),
        "build-vm-7\n"
    );
    let [record] = records(&journal).try_into().unwrap();
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(journal.join(&record)).unwrap()).unwrap();
    let temp_dir = PathBuf::from(saved["custom"]["temp_dir"].as_str().expect("recorded"));
    assert!(temp_dir.is_dir());

    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    assert!(!marks.join("cleaned").exists());
    assert!(temp_dir.is_dir(), "a killed runner leaves the directory");

    let runner = start_run(&config, dir.path());
    wait_until("the record is dropped", Duration::from_secs(30), || {
        records(&journal).is_empty()
    })
    .await;
    let failed = server.job(setup.project, job).await;
    assert_eq!(
        failed["failure_reason"], "runner_system_failure",
        "{failed}"
    );
    let temp_name = temp_dir.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        std::fs::read_to_string(marks.join("cleaned")).unwrap(),
        format!("build-vm-7 {job} from-config {temp_name}\n"),
        "cleanup_exec ran once, where and as the job's programs ran"
    );
    assert!(!temp_dir.exists(), "the job's directory is removed");
    let stderr = runner.quit();
    assert!(
        stderr.contains(&format!(
            "job {job} was running when this runner last stopped; killed 1 process group(s) it left running; ran the custom executor's cleanup_exec; failed it (runner_system_failure)"
        )),
        "{stderr}"
    );
}
