//! The shell executor's core: run a job stage's commands in bash (or sh) on this
//! machine, stream the output into the [`Trace`], and end the way gitlab-runner does.
//!
//! * The script ([`generate_script`]) exports every variable, `cd`s into the build
//!   directory, echoes each command as `$ cmd` in bold green and stops at the first
//!   failing command (`errexit` + `pipefail`, like gitlab-runner).
//! * File-type variables are written to files by `prepare_variables` (the variable
//!   holds the path) and removed by `PreparedVariables::cleanup_file_variables`.
//! * Each stage runs in a new shell, alone in a new process group. On timeout or
//!   cancellation the whole group gets SIGTERM, then SIGKILL after the grace period.
//!   When a stage ends normally, background processes it left behind get the same
//!   treatment: nothing of a stage outlives it, and a forgotten `sleep &` holding the
//!   output pipe cannot hang the job.
//! * Every way a stage ends is a [`StageOutcome`], which maps to GitLab's
//!   `failure_reason` ([`StageOutcome::failure_reason`]) and to the `CI_JOB_STATUS`
//!   the `after_script` stage sees ([`StageOutcome::ci_job_status`]).
//!
//! The job lifecycle runs `before_script` + `script` as one stage (`step_script`) and
//! `after_script` as another with its own timeout (`RUNNER_AFTER_SCRIPT_TIMEOUT`)
//! and `job_status` from the first outcome.

pub(crate) mod detached;
pub(crate) mod process;
mod script;

use std::ffi::OsStr;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{ExecutorKind, ShellKind};
use crate::journal::RunningJob;
use crate::trace::Trace;
use detached::Detached;

use super::Executor;
use super::prepare::{Preparation, PrepareError, Prepared};
use super::stage::{CancelReason, DEFAULT_KILL_GRACE, Stage, StageOutcome};

pub use script::generate_script;

/// Where bash and sh are looked for first (gitlab-runner's detection order), before
/// `PATH`.
const BASH_PATHS: &[&str] = &["/usr/local/bin/bash", "/usr/bin/bash", "/bin/bash"];
const SH_PATHS: &[&str] = &["/usr/local/bin/sh", "/usr/bin/sh", "/bin/sh"];

/// Why a stage could not be run at all (a system failure, not the script's).
#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// No usable shell on this machine.
    #[error("find a shell: neither bash nor sh was found in {searched} or on PATH")]
    NoShell {
        /// Where we looked.
        searched: String,
    },
    /// A file-type variable could not be written.
    #[error("write file variable {key} to `{}`: {source}", path.display())]
    FileVariable {
        /// Variable name.
        key: String,
        /// File.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The script file could not be written.
    #[error("write the job script `{}`: {source}", path.display())]
    WriteScript {
        /// File.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The shell could not be started.
    #[error("start `{}` in `{}`: {source}", shell.display(), work_dir.display())]
    Spawn {
        /// Shell binary.
        shell: PathBuf,
        /// Working directory.
        work_dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A detached stage cannot be watched (`detached`).
    #[error("{message}")]
    Detached {
        /// What went wrong.
        message: String,
    },
    /// Waiting for the shell failed.
    #[error("wait for `{}`: {source}", shell.display())]
    Wait {
        /// Shell binary.
        shell: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be removed.
    #[error("remove `{}`: {source}", path.display())]
    Cleanup {
        /// File.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A shell found on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedShell {
    /// bash or sh.
    pub kind: ShellKind,
    /// Its path.
    pub path: PathBuf,
}

/// Finds the shell for `preferred`: bash (falling back to sh, with a message saying so)
/// or sh. Looks in gitlab-runner's fixed locations first, then on `PATH`.
pub fn detect_shell(preferred: ShellKind) -> Result<(ResolvedShell, Option<String>), ShellError> {
    let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    let find = |fixed: &[&str], name: &str| {
        fixed
            .iter()
            .map(PathBuf::from)
            .chain(path_dirs.iter().map(|dir| dir.join(name)))
            .find(|candidate| is_executable(candidate))
    };
    let bash = match preferred {
        ShellKind::Bash => find(BASH_PATHS, "bash"),
        ShellKind::Sh => None,
    };
    if let Some(path) = bash {
        return Ok((
            ResolvedShell {
                kind: ShellKind::Bash,
                path,
            },
            None,
        ));
    }
    match find(SH_PATHS, "sh") {
        Some(path) => {
            let note = (preferred == ShellKind::Bash).then(|| {
                format!(
                    "bash was not found; running job scripts with {}",
                    path.display()
                )
            });
            Ok((
                ResolvedShell {
                    kind: ShellKind::Sh,
                    path,
                },
                note,
            ))
        }
        None => Err(ShellError::NoShell {
            searched: [BASH_PATHS, SH_PATHS].concat().join(", "),
        }),
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs stages in a local shell.
#[derive(Debug, Clone)]
pub struct ShellExecutor {
    shell: ResolvedShell,
    script_dir: PathBuf,
    login: bool,
    kill_grace: Duration,
    journal: Option<Arc<RunningJob>>,
}

impl ShellExecutor {
    /// An executor running `shell`, writing script files into `script_dir` (created
    /// when needed; a job's temporary directory). Scripts run in a login shell
    /// (`-l`), as gitlab-runner's shell executor does.
    pub fn new(shell: ResolvedShell, script_dir: impl Into<PathBuf>) -> Self {
        Self {
            shell,
            script_dir: script_dir.into(),
            login: true,
            kill_grace: DEFAULT_KILL_GRACE,
            journal: None,
        }
    }

    /// Name each stage's process group in the job's record while it runs
    /// ([`crate::journal`]).
    pub fn journal(mut self, job: Option<Arc<RunningJob>>) -> Self {
        self.journal = job;
        self
    }

    /// Whether to run a login shell (default true).
    pub fn login(mut self, login: bool) -> Self {
        self.login = login;
        self
    }

    /// Time between SIGTERM and SIGKILL (default [`DEFAULT_KILL_GRACE`]).
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// The shell in use.
    pub fn shell(&self) -> &ResolvedShell {
        &self.shell
    }

    /// Runs `stage`, writing its output (stdout and stderr) into `trace`, until it
    /// ends, its timeout passes, or `cancel` completes. All output is in the trace
    /// when this returns.
    pub async fn run(
        &self,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let script = stage_script(self.shell.kind, stage, trace);
        let script_path = match write_stage_script(&self.script_dir, stage.name, &script) {
            Ok(path) => path,
            Err(error) => {
                return StageOutcome::SystemFailure {
                    error: error.into(),
                };
            }
        };
        let outcome = self.run_script(stage, &script_path, trace, cancel).await;
        clear_script(&script_path);
        outcome
    }

    async fn run_script(
        &self,
        stage: &Stage<'_>,
        script_path: &Path,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let mut args: Vec<&OsStr> = Vec::new();
        if self.login {
            args.push(OsStr::new("-l"));
        }
        args.push(script_path.as_os_str());
        let detach = self
            .journal
            .as_ref()
            .filter(|job| job.resumable())
            .zip(stage.detach.cloned());
        if let Some((job, place)) = detach {
            let files = detached::stage_files(&self.script_dir, stage.name);
            let mut command = std::process::Command::new(&self.shell.path);
            command.args(&args).current_dir(stage.work_dir);
            return match Detached::spawn(&command, files, place, trace, job) {
                Ok(mut running) => {
                    if let Some(meter) = stage.meter {
                        running.measure(meter.stage());
                    }
                    self.watch_detached(running, stage.name, stage.timeout, trace, cancel)
                        .await
                }
                Err(source) => StageOutcome::SystemFailure {
                    error: ShellError::Spawn {
                        shell: self.shell.path.clone(),
                        work_dir: stage.work_dir.to_owned(),
                        source,
                    }
                    .into(),
                },
            };
        }
        let mut running = match process::spawn(&self.shell.path, &args, stage.work_dir, trace) {
            Ok(mut running) => {
                running.record_in(self.journal.as_ref());
                if let Some(meter) = stage.meter {
                    running.measure(meter.stage());
                }
                running
            }
            Err(source) => {
                return StageOutcome::SystemFailure {
                    error: ShellError::Spawn {
                        shell: self.shell.path.clone(),
                        work_dir: stage.work_dir.to_owned(),
                        source,
                    }
                    .into(),
                };
            }
        };

        let stop = running.wait_until(stage.timeout, cancel).await;
        let outcome = match stop {
            process::Stop::Ended(ended) => self.exit_outcome(ended),
            process::Stop::Timeout => {
                running.terminate(self.kill_grace).await;
                StageOutcome::Timeout {
                    after: stage.timeout,
                }
            }
            process::Stop::Canceled(reason) => {
                running.terminate(self.kill_grace).await;
                StageOutcome::Canceled { reason }
            }
        };
        running.finish(self.kill_grace).await;
        warn_on_timeout(trace, stage.name, outcome)
    }

    /// Reattaches to the detached stage a runner process that died left running (or
    /// ended meanwhile, its exit code kept): its output goes on into `trace` from the
    /// last checkpoint, until it ends, its deadline passes or `cancel` completes.
    pub(crate) async fn reattach(
        &self,
        stage: &crate::journal::DetachedStage,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let (running, timeout) = match Detached::reattach_with(stage, trace, self.journal.as_ref())
        {
            Ok(reattached) => reattached,
            Err(outcome) => return outcome,
        };
        let outcome = self
            .watch_detached(running, &stage.place.name, timeout, trace, cancel)
            .await;
        clear_script(&script_path(&self.script_dir, &stage.place.name));
        outcome
    }

    async fn watch_detached(
        &self,
        mut running: Detached,
        name: &str,
        timeout: Duration,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        let outcome = match running.wait_until(timeout, cancel).await {
            process::Stop::Ended(ended) => self.exit_outcome(ended),
            process::Stop::Timeout => {
                running.terminate(self.kill_grace).await;
                StageOutcome::Timeout { after: timeout }
            }
            process::Stop::Canceled(reason) => {
                running.terminate(self.kill_grace).await;
                StageOutcome::Canceled { reason }
            }
        };
        running.finish(self.kill_grace, true).await;
        warn_on_timeout(trace, name, outcome)
    }

    fn exit_outcome(&self, ended: process::Ended) -> StageOutcome {
        use std::os::unix::process::ExitStatusExt;
        match ended {
            process::Ended::Exited(status) => match (status.code(), status.signal()) {
                (Some(0), _) => StageOutcome::Success,
                (Some(code), _) => StageOutcome::ScriptFailure { exit_code: code },
                (None, Some(signal)) => StageOutcome::ScriptFailure {
                    exit_code: 128 + signal,
                },
                (None, None) => StageOutcome::ScriptFailure { exit_code: -1 },
            },
            process::Ended::Failed(source) => StageOutcome::SystemFailure {
                error: ShellError::Wait {
                    shell: self.shell.path.clone(),
                    source,
                }
                .into(),
            },
        }
    }
}

/// The script of `stage` for `shell`; the problems met preparing its variables are
/// written to `trace` as warnings first.
/// Says in the log that `stage` was stopped by its timeout, when `outcome` is one
/// (every executor's wording); returns `outcome`.
pub(crate) fn warn_on_timeout(trace: &Trace, stage: &str, outcome: StageOutcome) -> StageOutcome {
    if let StageOutcome::Timeout { after } = outcome {
        trace.warning(&format!(
            "{stage} could not run to completion because the timeout of {} was exceeded",
            crate::config::format_duration(after)
        ));
    }
    outcome
}

pub(crate) fn stage_script(shell: ShellKind, stage: &Stage<'_>, trace: &Trace) -> String {
    for warning in stage.variables.warnings() {
        trace.warning(warning);
    }
    generate_script(
        shell,
        stage.variables,
        stage.job_status.as_str(),
        stage.work_dir,
        stage.commands,
        stage.echo,
    )
}

/// Where stage `stage`'s script is written in `dir`: `script_<stage>.sh`.
pub(crate) fn script_path(dir: &Path, stage: &str) -> PathBuf {
    let name: String = stage
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    dir.join(format!("script_{name}.sh"))
}

/// Writes a stage's script as `script_<stage>.sh` (mode 0700) into `dir` (created,
/// mode 0700, when needed).
pub(crate) fn write_stage_script(
    dir: &Path,
    stage: &str,
    script: &str,
) -> Result<PathBuf, ShellError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

    let path = script_path(dir, stage);
    let failed = |source| ShellError::WriteScript {
        path: path.clone(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(failed)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o700)
        .open(&path)
        .map_err(failed)?;
    file.write_all(script.as_bytes()).map_err(failed)?;
    Ok(path)
}

/// Empties a stage's script once it ran: the script exports every variable, masked
/// ones included, so its text must not outlive the stage. The emptied file stays (the
/// next job in this build directory writes its script into the same file): creating and
/// deleting a file per stage costs more than rewriting one, most on an ext4 without a
/// journal, which skips recently deleted inodes when it allocates one. Removed when it
/// cannot be emptied.
pub(crate) fn clear_script(path: &Path) {
    let emptied = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(0));
    if emptied.is_err() {
        let _ = std::fs::remove_file(path);
    }
}

/// The shell executor of a new job: bash, else sh, on this machine.
pub(crate) fn prepare(prep: &Preparation<'_>) -> Prepared {
    if prep.runner.executor == ExecutorKind::Docker {
        prep.trace.runner_line(
            "The job has no image: running it on this machine ([runners.docker] shell_without_image = true)",
        );
    }
    let (shell, note) = match detect_shell(prep.runner.shell) {
        Ok(found) => found,
        Err(error) => return Prepared::failed(PrepareError::System(error.to_string())),
    };
    if let Some(note) = note {
        prep.trace.warning(&note);
    }
    prep.trace.runner_line(&format!(
        "Using Shell ({}) executor...",
        shell.kind.as_str()
    ));
    Prepared::ready(Executor::Shell(ShellExecutor::for_job(shell, prep)))
}

/// The shell executor of a job taken over (nothing to say: the log has it).
pub(crate) fn resume(prep: &Preparation<'_>) -> Prepared {
    match detect_shell(prep.runner.shell) {
        Ok((shell, _)) => Prepared::ready(Executor::Shell(ShellExecutor::for_job(shell, prep))),
        Err(error) => Prepared::failed(PrepareError::System(error.to_string())),
    }
}

impl ShellExecutor {
    /// The executor of the job `prep` describes, running `shell`.
    fn for_job(shell: ResolvedShell, prep: &Preparation<'_>) -> Self {
        Self::new(shell, prep.dirs.tmp_dir.clone())
            .kill_grace(prep.kill_grace)
            .login(prep.login_shell)
            .journal(prep.journal.cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::CiJobStatus;
    use gantry_protocol::FailureReason;

    #[test]
    fn outcomes_map_to_failure_reasons() {
        assert_eq!(StageOutcome::Success.failure_reason(), None);
        assert_eq!(
            StageOutcome::ScriptFailure { exit_code: 2 }.failure_reason(),
            Some(FailureReason::ScriptFailure)
        );
        assert_eq!(
            StageOutcome::Timeout {
                after: Duration::from_secs(1)
            }
            .failure_reason(),
            Some(FailureReason::JobExecutionTimeout)
        );
        assert_eq!(
            StageOutcome::Canceled {
                reason: CancelReason::RunnerInterrupted
            }
            .failure_reason(),
            Some(FailureReason::RunnerInterrupted)
        );
        assert_eq!(
            StageOutcome::Canceled {
                reason: CancelReason::JobCanceled
            }
            .ci_job_status(),
            CiJobStatus::Canceled
        );
    }
}
