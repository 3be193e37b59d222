//! A `run:` job (GitLab Functions / CI steps): the `step_run` stage. The step runner
//! (`gantry-steps`) runs here, in the runner, and launches each step's program as a stage
//! of the job's executor — in the shell, the build container or the custom driver's
//! environment — so a `run:` job works on every executor, with the job's timeout,
//! cancellation and log masking.
//!
//! Each program is a stage script with echo off: the job's variables exported (as for
//! every script: steps see them in their environment as well as in `${{ vars.X }}`), then
//! the step's environment, then `exec` of the argv (or the step's script text). Step
//! files, output and export files and fetched git steps are under `<project dir>.tmp`,
//! which a container sees too (`PathMap`).
//!
//! The engine runs in the runner process; its `Launcher` is an `ExecutorLauncher` that runs
//! each program as a `step_run` stage of the job's `Executor` (`Stage::echo` off).
//! Sensitive step values are added to the log's masks as they appear (`Trace::mask_values`:
//! writers made afterwards use the extended set).
//!
//! With `CI_STEPS_DEBUG` true the step results are written to `step-results.json` in the
//! project directory (as `step-runner ci --write-steps-results`), where `artifacts:` can
//! pick them up; masked variables and sensitive inputs and outputs are masked in it as in
//! the log.

use std::path::Path;
use std::sync::Mutex;

use gantry_steps::engine::{Launch, Launched, Launcher, Program};
use gantry_steps::{Engine, JobContext, Loader, PathMap, Status, parse_run_list};
use indexmap::IndexMap;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::JobEnding;
use super::lifecycle::Lifecycle;
use crate::executor::Executor;
use crate::executor::{CiJobStatus, Stage, StageOutcome};
use crate::executor::{PreparedVariables, quote};
use crate::trace::Trace;

/// The stage name every step program runs under.
const STAGE: &str = "step_run";

struct ExecutorLauncher<'l, 'a> {
    lifecycle: &'l Lifecycle<'a>,
    executor: &'l Executor,
    prepared: &'l PreparedVariables,
    trace: &'l Trace,
    /// When the stage must end (the job timeout, or `RUNNER_SCRIPT_TIMEOUT`).
    deadline: Instant,
    /// How a stopped program ended (the engine gets its description).
    stopped: Mutex<Option<StageOutcome>>,
}

impl Launcher for ExecutorLauncher<'_, '_> {
    type Stop = String;

    async fn launch(&self, launch: Launch<'_>) -> Launched<String> {
        let mut commands: Vec<String> = launch
            .env
            .iter()
            .map(|(k, v)| format!("export {k}={}", quote(v)))
            .collect();
        commands.push(match launch.program {
            Program::Exec(argv) => {
                let words: Vec<String> = argv.iter().map(|a| quote(a)).collect();
                format!("exec {}", words.join(" "))
            }
            Program::Script(text) => text.to_owned(),
        });
        let stage = Stage {
            name: STAGE,
            commands: &commands,
            variables: self.prepared,
            work_dir: launch.work_dir,
            timeout: self.deadline.saturating_duration_since(Instant::now()),
            job_status: CiJobStatus::Running,
            echo: false,
            detach: None,
            meter: Some(&self.lifecycle.meter),
        };
        let mut outcome = self
            .executor
            .run(&stage, self.trace, self.lifecycle.cancel())
            .await;
        // The engine reads the step's output and export files here (the instance
        // executor wrote them on the instance).
        if matches!(
            outcome,
            StageOutcome::Success | StageOutcome::ScriptFailure { .. }
        ) && let Err(error) = self.executor.to_host().await
        {
            outcome = StageOutcome::SystemFailure {
                error: error.into(),
            };
        }
        match outcome {
            StageOutcome::Success => Launched::Exited(0),
            StageOutcome::ScriptFailure { exit_code } => Launched::Exited(exit_code),
            other => {
                let text = match &other {
                    StageOutcome::Timeout { .. } => "the job's time ran out".to_owned(),
                    StageOutcome::Canceled { .. } => "the job was canceled".to_owned(),
                    StageOutcome::SystemFailure { error } => error.to_string(),
                    StageOutcome::Success | StageOutcome::ScriptFailure { .. } => String::new(),
                };
                if let Ok(mut stopped) = self.stopped.lock() {
                    *stopped = Some(other);
                }
                Launched::Stopped(text)
            }
        }
    }

    fn log(&self, line: &str) {
        self.trace.runner_line(line);
    }

    fn mask(&self, value: &str) {
        if let Err(error) = self.trace.mask_values([value]) {
            self.trace.warning(&error.to_string());
        }
    }
}

impl Lifecycle<'_> {
    /// Runs the job's `run:` list; the job's ending.
    pub(super) async fn run_functions(&self, run: &[Value]) -> JobEnding {
        let _section = self.section(STAGE, "Executing \"step_run\" stage of the job script");
        let steps = match parse_run_list(&Value::Array(run.to_vec()), "") {
            Ok(steps) => steps,
            Err(problems) => {
                for p in &problems {
                    self.trace.error(&format!(
                        "{}: {}",
                        gantry_steps::load::describe_pointer(&p.pointer),
                        p.message
                    ));
                }
                return JobEnding::ScriptFailure { exit_code: 1 };
            }
        };
        let (executor, prepared) = match self.executor() {
            Ok(pair) => pair,
            Err(failure) => return failure,
        };
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let (timeout, limit) = match self.script_timeout() {
            Some(script) if script < remaining => (script, script),
            _ => (remaining, self.timeout),
        };
        let launcher = ExecutorLauncher {
            lifecycle: self,
            executor,
            prepared,
            trace: self.trace,
            deadline: Instant::now() + timeout,
            stopped: Mutex::new(None),
        };
        let mut paths = PathMap::identity();
        for (host, seen) in [
            (&self.dirs.project_dir, &self.dirs.seen.project_dir),
            (&self.dirs.tmp_dir, &self.dirs.seen.tmp_dir),
        ] {
            if host != seen {
                paths = paths.with(host, seen);
            }
        }
        let env: IndexMap<String, String> = prepared.exports().iter().cloned().collect();
        let vars: Map<String, Value> = env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let engine = Engine::new(
            &launcher,
            Loader {
                paths,
                cache_dir: self.dirs.tmp_dir.join("steps-cache"),
            },
            JobContext {
                work_dir: self.dirs.project_dir.clone(),
                vars,
                env,
                files_dir: self.dirs.tmp_dir.join("steps"),
            },
        );
        let result = engine.run(&steps).await;
        super::telemetry::record_steps(self.cx, _section.span_context().as_ref(), &result);
        if let Err(ending) = self.to_host(STAGE).await {
            return ending;
        }
        if prepared
            .get("CI_STEPS_DEBUG")
            .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
        {
            write_results(&self.dirs.project_dir, &result, self.trace);
        }
        if let Some(outcome) = launcher.stopped.into_inner().ok().flatten() {
            return match self.stage_result(STAGE, outcome, limit) {
                Ok(()) => JobEnding::Success,
                Err(ending) => ending,
            };
        }
        match result.status {
            Status::Success => JobEnding::Success,
            _ => JobEnding::ScriptFailure {
                exit_code: result.failed_exit_code().unwrap_or(1),
            },
        }
    }
}

fn write_results(project_dir: &Path, result: &gantry_steps::StepResult, trace: &Trace) {
    let path = project_dir.join("step-results.json");
    let written = serde_json::to_vec_pretty(result)
        .map_err(std::io::Error::other)
        .and_then(|json| std::fs::write(&path, trace.mask(&json)));
    match written {
        Ok(()) => trace.runner_line("Step results written to step-results.json"),
        Err(e) => trace.warning(&format!("write {}: {e}", path.display())),
    }
}
