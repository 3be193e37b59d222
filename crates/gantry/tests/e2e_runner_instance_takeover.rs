//! A runner process that dies (SIGKILL) while an instance executor job runs, and is
//! started again: the job's stage runs on on its fleet instance (its output and exit
//! code go to files there), the instance outlives the plugin process
//! (`fleeting-plugin-local` with `keep_instances`, as a cloud's machines outlive
//! theirs), and the new runner process restores the job's acquisition from the
//! taskscaler's state storage, opens a new SSH session and takes the job over, its log
//! going on from exactly where the coordinator's ends. A job whose instance is gone
//! meanwhile fails, saying why. The same for a docker-autoscaler job, whose stage runs
//! on in its build container on the instance's Docker engine (the local engine, reached
//! through the instance's SSH session). Real processes throughout: coordinator, `gantry
//! runner run`, the plugin over gRPC, OpenSSH servers (`scripts/test-sshd.sh install`),
//! Docker with the local test images (`scripts/test-images.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e_runner_support::*;
use nix::sys::signal::Signal;

const PIPELINE: &str = r#"
chatty:
  variables: {GIT_STRATEGY: none}
  script:
    - for i in $(seq 1 60); do echo "line $i"; echo "err $i" >&2; sleep 0.1; done
    - echo "script ran over ${SSH_CONNECTION%% *}" >> "$CI_PROJECT_DIR/../runs"
  after_script:
    - echo "after_script sees $CI_JOB_STATUS"
"#;

/// An instance runner's configuration in `dir` whose instances outlive the plugin and
/// whose taskscaler keeps its state; returns its path, the journal's and the plugin's
/// directory.
fn write_config(setup: &Setup, dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    write_fleet_config(setup, dir, ("instance", "", ""))
}

/// The same for `executor`, with its instances' ready command and more sections.
fn write_fleet_config(
    setup: &Setup,
    dir: &Path,
    (executor, ready, sections): (&str, &str, &str),
) -> (PathBuf, PathBuf, PathBuf) {
    let plugin_dir = dir.join("instances");
    let text = local_fleet_config(
        &setup.server.url,
        &setup.runner_token,
        dir,
        executor,
        ready,
        sections,
    )
    .replace(
        "boot_delay_ms = 200\n",
        &format!(
            "boot_delay_ms = 200\ndir = \"{}\"\nkeep_instances = true\n",
            plugin_dir.display()
        ),
    );
    let text = format!("{text}\n[runners.autoscaler.state_storage]\nenabled = true\n");
    let config = dir.join("config.toml");
    std::fs::write(&config, text).unwrap();
    (config, dir.join(".runner_jobs"), plugin_dir)
}

/// The one job record in `journal`, if any.
fn record(journal: &Path) -> Option<serde_json::Value> {
    let name = std::fs::read_dir(journal)
        .ok()?
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.ends_with(".json"))?;
    serde_json::from_slice(&std::fs::read(journal.join(name)).ok()?).ok()
}

/// The job once it has ended (not `running`).
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

/// The numbers of the lines `<prefix> N` in `log`, in order.
fn numbered(log: &str, prefix: &str) -> Vec<u32> {
    log.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|n| n.trim().parse().unwrap())
        .collect()
}

/// The pids of the instances' sshd servers the plugin kept in `plugin_dir`.
fn kept_sshds(plugin_dir: &Path) -> Vec<i32> {
    let Ok(bytes) = std::fs::read(plugin_dir.join("instances.json")) else {
        return Vec::new();
    };
    let kept: Vec<serde_json::Value> = serde_json::from_slice(&bytes).unwrap();
    kept.iter()
        .map(|i| i32::try_from(i["pid"].as_u64().unwrap()).unwrap())
        .collect()
}

/// Kills what a test leaves behind: the kept sshd servers (by the pids the plugin
/// listed) and the stage's process group (by the pid file the record names).
struct Leftovers {
    plugin_dir: PathBuf,
    stage_pid: Option<PathBuf>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, killpg};
        use nix::unistd::Pid;
        if let Some(pid) = self
            .stage_pid
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for pid in kept_sshds(&self.plugin_dir) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&*self.plugin_dir.to_string_lossy()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_job_outlives_its_killed_runner_with_every_line_once() {
    let setup = Setup::new(PIPELINE, &[]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal, plugin_dir) = write_config(&setup, dir.path());
    let mut leftovers = Leftovers {
        plugin_dir: plugin_dir.clone(),
        stage_pid: None,
    };
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    // Watched, the log is sent every 3 s: the runner dies with output sent, output
    // copied but not sent, and output not yet copied from the instance.
    let (job, _) = server
        .wait_running(setup.project, pipeline, "chatty", "line 5\n")
        .await;
    let remote = record(&journal).unwrap()["stage"]["remote"]
        .as_str()
        .unwrap()
        .to_owned();
    leftovers.stage_pid = Some(Path::new(&remote).join("pid"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    assert!(
        !Path::new(&remote).join("status").exists(),
        "the stage still runs on the instance"
    );
    let state = std::fs::read_to_string(
        dir.path()
            .join(".taskscaler")
            .read_dir()
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    assert!(state.contains("\"acquisitions\""), "{state}");

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    let log = server.trace(setup.project, job).await;
    if done["status"] != "success" {
        let stderr = runner.quit();
        panic!("{done}\n{log}\n{stderr}");
    }
    for needle in [
        "found the job's step_script still running on its own and took it over",
        "Restored the acquisition of instance local-1 (slot 0) from the taskscaler's state storage",
        "after_script sees success",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    assert!(!log.contains("may appear twice"), "{log}");
    for stream in ["line ", "err "] {
        assert_eq!(
            numbered(&log, stream),
            (1..=60).collect::<Vec<_>>(),
            "every {stream}line once, in order:\n{log}"
        );
    }
    // One instance for both runner processes, one run of the script, no second instance.
    assert_eq!(log.matches("Acquired instance").count(), 1, "{log}");
    assert!(!log.contains("local-2"), "{log}");
    wait_for(Duration::from_secs(10), "the record is removed", || {
        record(&journal).is_none()
    })
    .await;
    let stderr = runner.quit();
    assert!(
        stderr.contains("its step_script was left on its instance: took the job over"),
        "{stderr}"
    );
}

/// The instance is gone when the runner starts again (its server stopped with the
/// runner away): the acquisition cannot be restored, and the job fails as a runner
/// system failure whose log says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_job_whose_instance_is_gone_fails_saying_why() {
    let setup = Setup::new(PIPELINE, &[]).await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal, plugin_dir) = write_config(&setup, dir.path());
    let mut leftovers = Leftovers {
        plugin_dir: plugin_dir.clone(),
        stage_pid: None,
    };
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "chatty", "line 3\n")
        .await;
    let remote = record(&journal).unwrap()["stage"]["remote"]
        .as_str()
        .unwrap()
        .to_owned();
    leftovers.stage_pid = Some(Path::new(&remote).join("pid"));
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    // The instance goes away meanwhile (its server and what ran there).
    drop(Leftovers {
        plugin_dir: plugin_dir.clone(),
        stage_pid: leftovers.stage_pid.clone(),
    });
    wait_for(
        Duration::from_secs(10),
        "the instance's server is gone",
        || {
            kept_sshds(&plugin_dir).iter().all(|pid| {
                !Path::new(&format!("/proc/{pid}/cmdline")).exists()
                    || std::fs::read(format!("/proc/{pid}/cmdline"))
                        .unwrap_or_default()
                        .is_empty()
            })
        },
    )
    .await;

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert_eq!(done["failure_reason"], "runner_system_failure", "{done}");
    let log = server.trace(setup.project, job).await;
    assert!(
        log.contains("It could not go on: the acquisition of instance local-1 cannot be restored from the taskscaler's state storage: instance local-1 (in the taskscaler's state file) is no longer in the instance group."),
        "{log}"
    );
    wait_for(Duration::from_secs(10), "the record is removed", || {
        record(&journal).is_none()
    })
    .await;
    let _ = runner.quit();
}

/// `gantry runner` told to hand its jobs over (SIGUSR2, as an upgrade does) exits with
/// the instance job's stage running on its instance; the next process takes it over
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_hands_its_instance_job_over_to_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let setup = Setup::new(
        &format!(
            r#"
build:
  variables: {{GIT_STRATEGY: none}}
  script:
    - echo "started"
    - while [ ! -e {go} ]; do sleep 0.1; done
    - echo "finished by the next runner"
"#,
            go = go.display()
        ),
        &[],
    )
    .await;
    let server = &setup.server;
    let (config, journal, plugin_dir) = write_config(&setup, dir.path());
    let mut leftovers = Leftovers {
        plugin_dir,
        stage_pid: None,
    };
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "build", "started")
        .await;
    let remote = record(&journal).unwrap()["stage"]["remote"]
        .as_str()
        .unwrap()
        .to_owned();
    leftovers.stage_pid = Some(Path::new(&remote).join("pid"));

    runner.signal(Signal::SIGUSR2);
    let (code, stderr) = runner.wait(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("1 job(s) left running for the next `gantry runner run` to take over"),
        "{stderr}"
    );
    assert!(record(&journal).is_some(), "the record stays");

    let runner = start_run(&config, dir.path());
    server
        .wait_trace(setup.project, job, "took it over", Duration::from_secs(30))
        .await;
    std::fs::write(&go, "").unwrap();
    let done = wait_ended(server, setup.project, job).await;
    let log = server.trace(setup.project, job).await;
    assert_eq!(done["status"], "success", "{done}\n{log}");
    assert!(log.contains("finished by the next runner"), "{log}");
    assert!(
        log.contains("Restored the acquisition of instance"),
        "{log}"
    );
    assert_eq!(log.matches("\nstarted").count(), 1, "{log}");
    runner.quit();
}

/// `docker ps` of job `job`'s containers (of the runner `token`): `(id, state)`.
fn containers((token, job): (&str, i64)) -> Vec<(String, String)> {
    let short = gantry_runner::config::short_token(token);
    let out = std::process::Command::new("docker")
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

/// Removes a job's containers (what a failed test leaves on the engine).
struct LeftContainers<'a>(&'a str, i64);

impl Drop for LeftContainers<'_> {
    fn drop(&mut self) {
        let ids: Vec<String> = containers((self.0, self.1))
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        if !ids.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f"])
                .args(&ids)
                .output();
        }
    }
}

/// A docker-autoscaler job whose runner is killed (SIGKILL) mid-script: its build
/// container runs on on the instance's engine, the new runner process restores the
/// acquisition, reaches the engine through a new session, follows the stage's files on
/// the instance from where the copies end and finishes the job — every line once —
/// then releases the instance (removed at its `max_use_count`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_docker_autoscaler_job_outlives_its_killed_runner_with_every_line_once() {
    let setup = Setup::new(
        r#"
chatty:
  image: gantry-test/busybox:latest
  variables: {GIT_STRATEGY: none}
  script:
    - for i in $(seq 1 60); do echo "line $i"; echo "err $i" >&2; sleep 0.1; done
    - echo "script ran in $HOSTNAME" >> /builds/runs
  after_script:
    - echo "after_script sees $CI_JOB_STATUS in $HOSTNAME"
"#,
        &[],
    )
    .await;
    let server = &setup.server;
    let dir = tempfile::tempdir().unwrap();
    let (config, journal, plugin_dir) = write_fleet_config(
        &setup,
        dir.path(),
        (
            "docker-autoscaler",
            "docker info > /dev/null",
            "[runners.docker]\npull_policy = [\"if-not-present\"]\n",
        ),
    );
    let _leftovers = Leftovers {
        plugin_dir: plugin_dir.clone(),
        stage_pid: None,
    };
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = start_run(&config, dir.path());
    let (job, _) = server
        .wait_running(setup.project, pipeline, "chatty", "line 5\n")
        .await;
    let _left = LeftContainers(&setup.runner_token, job);
    let stage = record(&journal).unwrap()["stage"].clone();
    let remote = stage["remote"].as_str().unwrap().to_owned();
    assert!(remote.ends_with(".tmp/stages"), "{stage}");
    // Killed with output sent, output copied but not sent, and output not yet copied
    // from the instance.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    runner.signal(Signal::SIGKILL);
    let _ = runner.wait(Duration::from_secs(10));
    let left = containers((&setup.runner_token, job));
    assert!(
        left.iter().any(|(_, state)| state == "running"),
        "the build container runs on: {left:?}"
    );
    assert!(
        !Path::new(&remote).join("stage_step_script.status").exists(),
        "the stage still runs"
    );

    let runner = start_run(&config, dir.path());
    let done = wait_ended(server, setup.project, job).await;
    let log = server.trace(setup.project, job).await;
    if done["status"] != "success" {
        let stderr = runner.quit();
        panic!("{done}\n{log}\n{stderr}");
    }
    for needle in [
        "found the job's step_script still running on its own and took it over",
        "Restored the acquisition of instance local-1 (slot 0) from the taskscaler's state storage",
        "Job succeeded",
    ] {
        assert!(log.contains(needle), "missing {needle:?}:\n{log}");
    }
    assert!(!log.contains("may appear twice"), "{log}");
    for stream in ["line ", "err "] {
        assert_eq!(
            numbered(&log, stream),
            (1..=60).collect::<Vec<_>>(),
            "every {stream}line once, in order:\n{log}"
        );
    }
    // One instance, one build container for both runner processes: after_script ran
    // where the script did, and the script once.
    assert_eq!(log.matches("Acquired instance").count(), 1, "{log}");
    assert!(!log.contains("local-2"), "{log}");
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
    // The job's containers are removed from the instance's engine, then the instance
    // is released (and removed: max_use_count = 1).
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
        stderr.contains("its step_script was left on its instance: took the job over"),
        "{stderr}"
    );
    assert!(
        stderr.contains("removing instance local-1: max_use_count"),
        "the instance is released: {stderr}"
    );
}

/// The first file named `name` under `dir`.
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
