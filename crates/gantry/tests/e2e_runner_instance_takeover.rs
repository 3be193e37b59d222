//! A runner process that dies (SIGKILL) while an instance executor job runs, and is
//! started again: the job's stage runs on on its fleet instance (its output and exit
//! code go to files there), the instance outlives the plugin process
//! (`fleeting-plugin-local` with `keep_instances`, as a cloud's machines outlive
//! theirs), and the new runner process restores the job's acquisition from the
//! taskscaler's state storage, opens a new SSH session and takes the job over, its log
//! going on from exactly where the coordinator's ends. A job whose instance is gone
//! meanwhile fails, saying why. Real processes throughout: coordinator, `gantry runner
//! run`, the plugin over gRPC, OpenSSH servers (`scripts/test-sshd.sh install`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod e2e_runner_support;

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
    let plugin_dir = dir.join("instances");
    let text = local_fleet_config(
        &setup.server.url,
        &setup.runner_token,
        dir,
        "instance",
        "",
        "",
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
