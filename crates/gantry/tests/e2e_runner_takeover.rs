//! A runner process that dies while a shell executor job's script runs (SIGKILL: the OOM
//! killer, a crash, an upgrade gone wrong) and is started again: the script was never
//! tied to it — it runs on, detached, its output kept in files — and the new runner
//! process takes the job over where it stands. GitLab's runner cannot reconnect to a
//! running job; here the job ends as if nothing had happened, plus one warning line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e_runner_support::*;
use nix::sys::signal::Signal;

fn write_config(setup: &Setup, dir: &Path) -> (PathBuf, PathBuf) {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        config_text(&setup.server.url, &setup.runner_token, dir, "", ""),
    )
    .unwrap();
    (config, dir.join(".runner_jobs"))
}

fn records(journal: &Path) -> Vec<String> {
    std::fs::read_dir(journal)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

/// The pid of the detached stage's shell in the one job record in `journal`.
fn recorded_stage_leader(journal: &Path) -> i32 {
    let name = records(journal)
        .into_iter()
        .find(|name| name.ends_with(".json"))
        .unwrap();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(journal.join(name)).unwrap()).unwrap();
    i32::try_from(record["stage"]["group"]["pid"].as_i64().unwrap()).unwrap()
}

/// Once `journal` holds no record (every job ended), stops `runner` ([`Child::quit`]).
async fn stop_once_done(runner: Child, journal: &Path) -> String {
    wait_for(Duration::from_secs(10), "the records are removed", || {
        records(journal).is_empty()
    })
    .await;
    runner.quit()
}

/// Starts a runner on `config` (in `dir`), waits for job `name` of `pipeline` to print
/// `<prefix><pid>`, kills the runner (SIGKILL) and checks that the process `pid`
/// outlived it; returns the job's id and `pid`.
async fn kill_runner_once_printed(
    server: &Server,
    (project, pipeline): (i64, i64),
    (config, dir): (&Path, &Path),
    name: &str,
    prefix: &str,
) -> (i64, u32) {
    let runner = start_run(config, dir);
    let (job, log) = server.wait_running(project, pipeline, name, prefix).await;
    let pid: u32 = log
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    assert!(alive(pid), "{pid} outlived the runner");
    (job, pid)
}

/// The job's id once it has ended (not `running`).
async fn wait_ended(server: &Server, project: i64, job: i64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
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

/// Files in the archive (a zip), by name.
fn archive_names(zip: &[u8]) -> Vec<String> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip)).unwrap();
    (0..archive.len())
        .map(|i| archive.by_index(i).unwrap().name().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_runners_running_script_is_taken_over_and_the_job_ends_as_it_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let pipeline = format!(
        r#"
build:
  variables:
    GIT_STRATEGY: none
  script:
    - echo "before the crash"
    - while [ ! -e "{go}" ]; do sleep 0.1; done
    - echo "after the crash"
    - echo "on stderr" >&2
    - mkdir -p out && echo made > out/result.txt
  after_script:
    - echo "after_script sees $CI_JOB_STATUS"
  artifacts:
    paths: [out/]
"#,
        go = go.display()
    );
    let setup = Setup::new(&pipeline, &[]).await;
    let server = &setup.server;
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "build", "before the crash")
        .await;

    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    assert_eq!(
        records(&journal).len(),
        2,
        "the record and the payload stay"
    );

    // Started again, the runner takes the job over while its script still waits.
    let runner = start_run(&config, dir.path());
    server
        .wait_trace(setup.project, job, "took it over", Duration::from_secs(30))
        .await;
    assert_eq!(server.job(setup.project, job).await["status"], "running");
    std::fs::write(&go, "").unwrap();

    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    for line in [
        "before the crash",
        "found the job's step_script still running on its own and took it over",
        "after the crash",
        "on stderr",
        "after_script sees success",
        "Uploading artifacts",
        "Job succeeded",
    ] {
        assert!(log.contains(line), "no {line:?} in:\n{log}");
    }
    // The section the first process opened is closed by the second, once.
    let ends = log.matches("section_end:").count();
    let starts = log.matches("section_start:").count();
    assert_eq!(starts, ends, "{log}");
    let zip = server.artifacts_archive(setup.project, job).await;
    assert!(
        archive_names(&zip).iter().any(|n| n == "out/result.txt"),
        "{:?}",
        archive_names(&zip)
    );
    let stderr = stop_once_done(runner, &journal).await;
    assert!(
        stderr.contains(&format!(
            "job {job} was running when this runner last stopped; its step_script still runs: took the job over"
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_script_that_ended_while_no_runner_ran_keeps_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let background = dir.path().join("background");
    let setup = Setup::new(
        &format!(
            r#"
fails:
  variables: {{GIT_STRATEGY: none, FF_TIMESTAMPS: "true"}}
  script:
    - echo started
    - sleep 300 & echo $! > "{background}"
    - while [ ! -e "{release}" ]; do sleep 0.1; done
    - echo "ended alone"
    - exit 3
  after_script:
    - echo "after_script sees $CI_JOB_STATUS"
"#,
            release = release.display(),
            background = background.display()
        ),
        &[],
    )
    .await;
    let server = &setup.server;
    let (config, journal) = write_config(&setup, dir.path());
    // The killed runner's stage becomes this process's child (it is the test's own
    // process under nextest).
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "fails", "started")
        .await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));

    // The script ends with nobody watching; its exit code is kept.
    std::fs::write(&release, "").unwrap();
    let status = wait_for_file(dir.path(), "stage_step_script.status").await;
    assert_eq!(std::fs::read_to_string(&status).unwrap().trim(), "3");
    // Where init reaps orphans, the stage's shell is gone by now, its background
    // process left in its group: this test process is the orphans' subreaper (set
    // below), and reaps the shell as such an init would.
    let shell = recorded_stage_leader(&journal);
    nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(shell), None).unwrap();

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["failure_reason"], "script_failure", "{done}");
    let log = server.trace(setup.project, job).await;
    for line in [
        "ended alone",
        "took it over",
        "exit code 3",
        "after_script sees failed",
    ] {
        assert!(log.contains(line), "no {line:?} in:\n{log}");
    }
    // With FF_TIMESTAMPS, the takeover line has its timestamp like every other line.
    let line = log.lines().find(|l| l.contains("took it over")).unwrap();
    assert!(line.starts_with("20") && line.contains("Z 00O"), "{line}");
    // What the script left running ended with its stage, though the stage's shell had
    // exited before the runner came back.
    let left: i32 = std::fs::read_to_string(&background)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let state = || {
        std::fs::read_to_string(format!("/proc/{left}/stat"))
            .ok()
            .and_then(|stat| {
                stat[stat.rfind(')')? + 1..]
                    .split_whitespace()
                    .next()
                    .map(str::to_owned)
            })
    };
    wait_for(
        Duration::from_secs(10),
        "the script's background process ends",
        || state().is_none_or(|s| s == "Z"),
    )
    .await;
    let stderr = stop_once_done(runner, &journal).await;
    assert!(
        stderr.contains("its step_script ended meanwhile: took the job over"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_canceled_while_no_runner_ran_is_canceled_by_the_runner_that_takes_it_over() {
    let setup = Setup::new(
        r#"
slow:
  variables: {GIT_STRATEGY: none}
  script:
    - echo "started pid $$"
    - sleep 300
  after_script:
    - echo "after_script sees $CI_JOB_STATUS"
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let (job, pid) = kill_runner_once_printed(
        server,
        (setup.project, pipeline),
        (&config, dir.path()),
        "slow",
        "started pid ",
    )
    .await;
    server.cancel_job(setup.project, job).await;

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "canceled", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("after_script sees canceled"), "{log}");
    wait_for(Duration::from_secs(10), "the script is ended", || {
        !alive(pid)
    })
    .await;
    stop_once_done(runner, &journal).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_scripts_output_is_all_in_the_log_after_a_takeover() {
    let setup = Setup::new(
        r#"
chatty:
  variables: {GIT_STRATEGY: none}
  script:
    - for i in $(seq 1 300); do echo "line $i"; echo "err $i" >&2; sleep 0.03; done
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    // The log is sent every second once watched: the runner dies with a checkpoint
    // behind it and output it had read but not sent.
    let (job, _) = server
        .wait_running(setup.project, pipeline, "chatty", "line 3\n")
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("took it over"), "{log}");
    assert!(!log.contains("may appear twice"), "{log}");
    // Every line is there once, in order: the coordinator's log ended at a point the
    // record names, and the new runner read on from exactly there.
    for stream in ["line", "err"] {
        let numbers: Vec<u32> = log
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{stream} ")))
            .map(|n| n.trim().parse().unwrap())
            .collect();
        assert_eq!(
            numbers,
            (1..=300).collect::<Vec<_>>(),
            "{stream}: {numbers:?}"
        );
    }
    runner.quit();
}

/// A shell job whose runner died before its script (here in a `hooks:` script) starts
/// again from its beginning when the runner comes back: what the dead runner started
/// is ended first, the log goes on, and the same job succeeds (no retry job).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_that_had_not_reached_its_script_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("first-attempt-ran");
    let setup = Setup::new(
        &format!(
            r#"
early:
  variables: {{GIT_STRATEGY: none}}
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
  script:
    - echo "script ran"
"#,
            mark = mark.display()
        ),
        &[],
    )
    .await;
    let server = &setup.server;
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let (job, pid) = kill_runner_once_printed(
        server,
        (setup.project, pipeline),
        (&config, dir.path()),
        "early",
        "first attempt pid ",
    )
    .await;

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    let order = [
        "first attempt pid",
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
    wait_for(
        Duration::from_secs(10),
        "the first attempt's shell is ended",
        || !alive(pid),
    )
    .await;
    assert_eq!(
        server.jobs(setup.project, pipeline).await.len(),
        1,
        "no retry"
    );
    let stderr = stop_once_done(runner, &journal).await;
    assert!(
        stderr.contains(&format!(
            "job {job} was running when this runner last stopped; it had not reached its script, started it again: took the job over"
        )),
        "{stderr}"
    );
}

/// A detached stage's output and error lines reach the log in the order the script
/// wrote them (its two files are read as soon as one is written), as from pipes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_detached_stage_keeps_its_output_and_error_lines_in_order() {
    let setup = Setup::new(
        r#"
mixed:
  variables: {GIT_STRATEGY: none}
  script:
    - for i in $(seq 1 12); do echo "out $i"; sleep 0.025; echo "err $i" >&2; sleep 0.025; done
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "mixed", "out 1\n")
        .await;
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("out ") || l.starts_with("err "))
        .collect();
    let wanted: Vec<String> = (1..=12)
        .flat_map(|i| [format!("out {i}"), format!("err {i}")])
        .collect();
    assert_eq!(lines, wanted, "{log}");
    runner.quit();
}

/// The custom executor's `run_exec` runs detached too: a job whose driver made a VM
/// goes on in it, and `cleanup_exec` runs once, at the end of the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_custom_executor_job_is_taken_over_and_cleaned_up_once_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let setup = Setup::new(
        &format!(
            r#"
vm:
  variables: {{GIT_STRATEGY: none, VM_NAME: build-vm-7}}
  script:
    - echo "before the crash in $VM_NAME"
    - while [ ! -e "{go}" ]; do sleep 0.1; done
    - echo "after the crash in $VM_NAME"
  after_script:
    - echo "after_script sees $CI_JOB_STATUS"
    - echo "after_script in $CI_PROJECT_DIR"
"#,
            go = go.display()
        ),
        &[],
    )
    .await;
    let server = &setup.server;
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let builds = dir.path().join("vm-builds");
    let programs = [
        (
            "config.sh",
            format!(
                "printf '{{\"builds_dir\": \"{builds}\", \"job_env\": {{\"DRIVER_STATE\": \"from-config\"}}}}'\n",
                builds = builds.display()
            ),
        ),
        (
            "prepare.sh",
            format!(
                "echo \"$CUSTOM_ENV_VM_NAME\" >> {marks}/created\n",
                marks = marks.display()
            ),
        ),
        (
            "run.sh",
            format!(
                "echo \"$2 $DRIVER_STATE\" >> {marks}/runs\nbash \"$1\"\n",
                marks = marks.display()
            ),
        ),
        (
            "cleanup.sh",
            format!(
                "echo \"$CUSTOM_ENV_VM_NAME $DRIVER_STATE\" >> {marks}/cleaned\n",
                marks = marks.display()
            ),
        ),
    ];
    let config = custom_driver_config(&setup, dir.path(), &programs);
    let journal = dir.path().join(".runner_jobs");

    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(
            setup.project,
            pipeline,
            "vm",
            "before the crash in build-vm-7",
        )
        .await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));

    let runner = start_run(&config, dir.path());
    server
        .wait_trace(setup.project, job, "took it over", Duration::from_secs(30))
        .await;
    std::fs::write(&go, "").unwrap();
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    for line in [
        "after the crash in build-vm-7",
        "after_script sees success",
        "Job succeeded",
    ] {
        assert!(log.contains(line), "no {line:?} in:\n{log}");
    }
    let read = |name: &str| std::fs::read_to_string(marks.join(name)).unwrap_or_default();
    assert_eq!(read("created"), "build-vm-7\n", "prepared once");
    assert_eq!(
        read("cleaned"),
        "build-vm-7 from-config\n",
        "cleaned up once, at the end"
    );
    // The driver's programs kept the environment config_exec gave, before and after.
    assert!(
        read("runs").lines().all(|l| l.ends_with(" from-config")),
        "{}",
        read("runs")
    );
    assert!(read("runs").contains("after_script"), "{}", read("runs"));
    // config_exec's builds_dir still applies to the taken-over job.
    assert!(
        log.contains(&format!("after_script in {}/", builds.display())),
        "{log}"
    );
    stop_once_done(runner, &journal).await;
}

/// SIGUSR2 (an upgrade): the runner stops at once without stopping its jobs, and the
/// next runner process takes them over.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_hands_its_jobs_over_to_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let setup = Setup::new(
        &format!(
            r#"
build:
  variables: {{GIT_STRATEGY: none}}
  script:
    - echo "started pid $$"
    - while [ ! -e "{go}" ]; do sleep 0.1; done
    - echo "finished by the next runner"
"#,
            go = go.display()
        ),
        &[],
    )
    .await;
    let server = &setup.server;
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, log) = server
        .wait_running(setup.project, pipeline, "build", "started pid")
        .await;
    let pid: u32 = log
        .lines()
        .find_map(|l| l.strip_prefix("started pid "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    runner.signal(Signal::SIGUSR2);
    let (code, stderr) = runner.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("1 job(s) left running for the next `gantry runner run` to take over"),
        "{stderr}"
    );
    assert!(alive(pid), "the script runs on");
    assert_eq!(server.job(setup.project, job).await["status"], "running");
    assert_eq!(
        records(&journal).len(),
        2,
        "the record and the payload stay"
    );

    let runner = start_run(&config, dir.path());
    server
        .wait_trace(setup.project, job, "took it over", Duration::from_secs(30))
        .await;
    std::fs::write(&go, "").unwrap();
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("finished by the next runner"), "{log}");
    runner.quit();
}

/// A runner that dies past the script (here while uploading artifacts to a
/// coordinator that is away): the next runner process goes on from there — the
/// artifacts are uploaded and the job ends as it would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_job_past_its_script_is_taken_over_for_its_artifacts() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let mut setup = Setup::new(
        &format!(
            r#"
build:
  variables: {{GIT_STRATEGY: none}}
  script:
    - echo started
    - while [ ! -e "{go}" ]; do sleep 0.1; done
    - mkdir -p out && echo made > out/result.txt
  artifacts:
    paths: [out/]
"#,
            go = go.display()
        ),
        &[],
    )
    .await;
    let (config, journal) = write_config(&setup, dir.path());
    let pipeline = setup.server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = setup
        .server
        .wait_running(setup.project, pipeline, "build", "started")
        .await;

    // The coordinator goes away; the script ends; the runner is stuck past it.
    setup.server.stop().await;
    std::fs::write(&go, "").unwrap();
    let record = |journal: &Path| -> Option<serde_json::Value> {
        let name = records(journal)
            .into_iter()
            .find(|n| n.ends_with(".json"))?;
        serde_json::from_slice(&std::fs::read(journal.join(name)).ok()?).ok()
    };
    wait_for(
        Duration::from_secs(30),
        "the record says the steps are over",
        || record(&journal).is_some_and(|r| r["after"].is_object() && r["stage"].is_null()),
    )
    .await;
    let after = record(&journal).unwrap()["after"].clone();
    assert_eq!(after["ending"]["kind"], "success", "{after}");
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));

    setup.server.restart().await;
    let server = &setup.server;
    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(log.contains("the job's script stages were over"), "{log}");
    let zip = server.artifacts_archive(setup.project, job).await;
    assert!(
        archive_names(&zip).iter().any(|n| n == "out/result.txt"),
        "{:?}",
        archive_names(&zip)
    );
    let stderr = runner.quit();
    assert!(
        stderr.contains("it was past its script: took the job over"),
        "{stderr}"
    );
}

/// Waits for a file named `name` somewhere below `dir`; returns its path.
async fn wait_for_file(dir: &Path, name: &str) -> PathBuf {
    fn find(dir: &Path, name: &str) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == name) {
                return Some(path);
            }
            if entry.file_type().ok()?.is_dir()
                && let Some(found) = find(&path, name)
            {
                return Some(found);
            }
        }
        None
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(path) = find(dir, name) {
            return path;
        }
        if Instant::now() > deadline {
            let tree = std::process::Command::new("find")
                .arg(dir)
                .output()
                .unwrap();
            panic!(
                "no {name} below:\n{}",
                String::from_utf8_lossy(&tree.stdout)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
