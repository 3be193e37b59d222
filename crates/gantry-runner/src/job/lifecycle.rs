//! The stages of a job, in gitlab-runner's order and with its section names, from
//! `prepare_executor` to `cleanup_file_variables` (see the [module docs](super)).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gantry_protocol::{HookName, JobResponse, JobVariable, SectionOptions, StepName, When};
use tokio::time::Instant;

use super::dependencies::{DEFAULT_DOWNLOAD_ATTEMPTS, download_dependencies};
use super::variables::get;
use super::{JobContext, JobEnding, JobEvent, Placement, StopRequest, StopSignal};
use crate::cache::{CacheContext, CacheSpec, LocalCache, RestoreOutcome};
use crate::config::{ExecutorKind, format_duration, parse_go_duration};
use crate::dirs::BuildDirs;
use crate::executor::{
    CancelReason, CancelSource, CiJobStatus, DriverLog, Executor, Preparation, PrepareError,
    Prepared, PreparedVariables, Stage, StageOutcome, prepare_variables_seen_at,
};
use crate::sources::{
    GitSettings, GitStrategy, SourcesError, SourcesJob, clone_url_repository, get_sources,
};
use crate::trace::{ANSI_BOLD_CYAN, ANSI_RESET, Trace};

/// gitlab-runner's default `RUNNER_AFTER_SCRIPT_TIMEOUT`.
pub(crate) const DEFAULT_AFTER_SCRIPT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// One job's run through its stages.
pub(crate) struct Lifecycle<'a> {
    pub(crate) job: &'a JobResponse,
    pub(crate) cx: &'a JobContext,
    pub(crate) trace: &'a Trace,
    /// Places the job again when its executor moves it ([`crate::executor::Placer`]).
    pub(crate) placement: &'a Placement<'a>,
    pub(crate) dirs: BuildDirs,
    /// Expanded job variables.
    pub(crate) variables: Vec<JobVariable>,
    /// The local cache's base directory.
    pub(crate) cache_dir: PathBuf,
    /// `CI_DEBUG_TRACE` in effect: scripts trace their commands.
    pub(crate) debug_trace: bool,
    pub(crate) deadline: Instant,
    pub(crate) timeout: Duration,
    pub(crate) executor: Option<Executor>,
    pub(crate) prepared: Option<PreparedVariables>,
    /// The job execution span, the parent of each section's (`None`: tracing off).
    pub(crate) span: Option<gantry_telemetry::SpanContext>,
    /// The job's resource use, fed by the executors' stages ([`crate::resources`]).
    pub(crate) meter: crate::resources::JobMeter,
    /// The coordinator's answer to the job's acceptance, sent beside the preparation:
    /// awaited before the job's own code runs ([`Lifecycle::accepted`]).
    pub(crate) accepted: super::uplink::Accepted,
}

/// A section that closes itself, and its span (ended when it is dropped).
pub(crate) struct Section<'t> {
    trace: &'t Trace,
    name: &'static str,
    markers: bool,
    span: gantry_telemetry::LiveSpan,
}

impl Section<'_> {
    /// The section's span context (`None`: tracing off).
    pub(crate) fn span_context(&self) -> Option<gantry_telemetry::SpanContext> {
        self.span.context()
    }
}

impl Drop for Section<'_> {
    fn drop(&mut self) {
        if self.markers {
            let _ = self.trace.section_end(self.name);
        }
    }
}

fn stop_ending(request: StopRequest) -> JobEnding {
    match request {
        StopRequest::Interrupt => JobEnding::Interrupted,
        StopRequest::Abort => JobEnding::Aborted,
        StopRequest::None | StopRequest::Cancel => JobEnding::Canceled,
    }
}

impl<'a> Lifecycle<'a> {
    pub(crate) fn stop(&self) -> &StopSignal {
        &self.cx.stop
    }

    /// Opens a section (markers only when the server asked for `trace_sections`).
    pub(crate) fn section(&self, name: &'static str, header: &str) -> Section<'a> {
        let markers = self.job.features.trace_sections;
        if markers {
            let _ = self
                .trace
                .section_start(name, header, SectionOptions::default());
        } else {
            self.trace
                .runner_line(&format!("{ANSI_BOLD_CYAN}{header}{ANSI_RESET}"));
        }
        Section {
            trace: self.trace,
            name,
            markers,
            span: super::telemetry::section_span(self.cx, self.span.as_ref(), name),
        }
    }

    /// The section a runner process that died opened: only its end is written here.
    pub(crate) fn section_resumed(&self, name: &'static str) -> Section<'a> {
        Section {
            trace: self.trace,
            name,
            markers: self.job.features.trace_sections,
            span: super::telemetry::section_span(self.cx, self.span.as_ref(), name),
        }
    }

    fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
        |name| get(&self.variables, name).map(str::to_owned)
    }

    /// Fails when a stop was requested or the deadline has passed.
    fn check_stop(&self) -> Result<(), JobEnding> {
        match self.stop().current() {
            StopRequest::None => {}
            request => return Err(stop_ending(request)),
        }
        if Instant::now() >= self.deadline {
            return Err(JobEnding::Timeout {
                after: self.timeout,
            });
        }
        Ok(())
    }

    /// Runs `stage` until it ends, the job's deadline passes, or a stop is requested.
    async fn guarded<T>(
        &self,
        stage: impl Future<Output = Result<T, JobEnding>>,
    ) -> Result<T, JobEnding> {
        tokio::select! {
            result = stage => result,
            () = tokio::time::sleep_until(self.deadline) => Err(JobEnding::Timeout { after: self.timeout }),
            request = self.stop().reached(StopRequest::Cancel) => Err(stop_ending(request)),
        }
    }

    /// The whole job; returns how it ended.
    pub(crate) async fn run(&mut self) -> JobEnding {
        let before = self.before_script().await;
        let script_ran = before.is_ok();
        let ending = match before {
            Ok(()) => self.steps(0, JobEnding::Success, None).await,
            Err(ending) => ending,
        };
        self.after_steps(ending, script_ran, None).await
    }

    /// The job a runner process that died left at `at`: in a detached stage (see
    /// [`crate::executor::shell::detached`]) the stage is watched again, and the job goes on from
    /// there as if nothing had happened; before its script, it starts again.
    pub(crate) async fn resume(&mut self, at: super::TakeoverAt) -> JobEnding {
        let stage = match at {
            super::TakeoverAt::Start => {
                // What the first start had made goes: it is made again.
                Executor::forget_first_start(&self.cx.runner, self.cx.journal.as_ref(), self.trace)
                    .await;
                return self.run().await;
            }
            super::TakeoverAt::Stage(stage) => stage,
            super::TakeoverAt::AfterSteps(after) => {
                return match self.prepare_resumed().await {
                    Ok(()) => {
                        let ending = JobEnding::from_record(&after.ending);
                        self.after_steps(ending, after.after_script_due, None).await
                    }
                    Err(ending) => self.after_steps(ending, false, None).await,
                };
            }
        };
        if let Err(ending) = self.prepare_resumed().await {
            return self.after_steps(ending, false, None).await;
        }
        let before = JobEnding::from_record(&stage.place.before);
        match stage.place.at {
            crate::journal::StageAt::Step(index) => {
                let ending = self.steps(index, before, Some(&stage)).await;
                self.after_steps(ending, true, None).await
            }
            crate::journal::StageAt::AfterScript => {
                self.after_steps(before, true, Some(&stage)).await
            }
        }
    }

    /// The job's record, when a restarted runner could take the job over.
    fn resumable_record(&self) -> Option<&Arc<crate::journal::RunningJob>> {
        self.cx.journal.as_ref().filter(|job| job.resumable())
    }

    /// The executor and the prepared variables of a job taken over after a runner
    /// restart (the directories, sources and files are there already).
    async fn prepare_resumed(&mut self) -> Result<(), JobEnding> {
        // The stages still to run need the secrets, and the log goes on masking them.
        self.resolve_secrets(false).await?;
        let kind = ExecutorKind::for_job(&self.cx.runner, self.job);
        let prepared = Executor::resume(kind, &self.preparation()).await;
        self.adopt(prepared)?;
        let prepared = prepare_variables_seen_at(
            &self.variables,
            &self.dirs.tmp_dir.join("variables"),
            &self.dirs.seen.tmp_dir.join("variables"),
        )
        .map_err(|e| JobEnding::SystemFailure {
            stage: "prepare_script",
            message: e.to_string(),
        })?;
        self.prepared = Some(prepared.with_debug_trace(self.debug_trace));
        Ok(())
    }

    /// Where a script stage runs when it may run detached: the job's record lets a
    /// restarted runner take it over ([`crate::executor::shell::detached`]).
    fn detach(
        &self,
        at: crate::journal::StageAt,
        name: &str,
        before: &JobEnding,
        timeout: Duration,
        limit: Duration,
    ) -> Option<crate::journal::StagePlace> {
        self.cx.journal.as_ref()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Some(crate::journal::StagePlace {
            at,
            name: name.to_owned(),
            before: before.to_record()?,
            deadline_unix_ms: u64::try_from((now + timeout).as_millis()).unwrap_or(u64::MAX),
            limit_secs: limit.as_secs(),
        })
    }

    /// Runs a script stage, or reattaches to it when `reattach` names it.
    async fn run_stage(
        &self,
        executor: &Executor,
        stage: &Stage<'_>,
        reattach: Option<&crate::journal::DetachedStage>,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        match reattach {
            Some(detached) => executor.reattach(detached, stage, self.trace, cancel).await,
            None => executor.run(stage, self.trace, cancel).await,
        }
    }

    /// `after_script` (when due), cache, artifacts and clean-up, after the steps ended
    /// with `ending`; `reattach` names a detached `after_script` to watch again.
    async fn after_steps(
        &mut self,
        mut ending: JobEnding,
        script_ran: bool,
        reattach: Option<&crate::journal::DetachedStage>,
    ) -> JobEnding {
        let after_script = match &ending {
            // gitlab-runner: not after a timeout (by default), never after an abort.
            JobEnding::Timeout { .. } | JobEnding::Aborted => false,
            _ => script_ran,
        };
        if let (Some(job), Some(recorded)) = (self.resumable_record(), ending.to_record()) {
            job.steps_ended(crate::journal::AfterSteps {
                ending: recorded,
                after_script_due: after_script,
            });
        }
        if after_script {
            self.after_script(&ending, reattach).await;
            if let Some(job) = self.resumable_record() {
                job.after_script_done();
            }
        }
        if self.stop().current() == StopRequest::Abort {
            ending = JobEnding::Aborted;
        }
        match ending {
            JobEnding::Canceled | JobEnding::Interrupted | JobEnding::Aborted => {}
            _ => {
                // Cache and artifacts are made here from what the stages left.
                if let Err(failure) = self.to_host("archive_cache").await {
                    if ending.is_success() {
                        ending = failure;
                    } else {
                        self.trace.warning(&failure.to_string());
                    }
                }
                self.archive_cache(&ending).await;
                ending = self.upload_artifacts(ending).await;
            }
        }
        self.cleanup_file_variables();
        if let Some(executor) = &self.executor {
            executor.cleanup(self.trace, self.driver_log()).await;
        }
        if self.stop().current() == StopRequest::Abort {
            ending = JobEnding::Aborted;
        }
        ending
    }

    async fn before_script(&mut self) -> Result<(), JobEnding> {
        self.resolve_secrets(true).await?;
        self.check_stop()?;
        self.prepare_executor().await?;
        self.check_stop()?;
        self.prepare_script().await?;
        self.accepted().await?;
        self.guarded(self.get_sources()).await?;
        self.guarded(self.restore_cache()).await?;
        self.guarded(self.download_artifacts()).await?;
        Ok(())
    }

    /// Waits for the acceptance's answer (§4.6). Everything before this point prepares
    /// the job without running any of its code — secrets read, the executor prepared
    /// (image pulled, services started, a fleet instance taken), directories and file
    /// variables written — so it overlaps the round trip; from `get_sources` on (its
    /// hooks, then the scripts) the job acts on the world, and it does so only for a
    /// coordinator that has said to run it. A refusal has raised the stop request by
    /// the time the answer is in: the job ends here, and what was prepared is cleaned up.
    async fn accepted(&self) -> Result<(), JobEnding> {
        let mut accepted = self.accepted.clone();
        self.guarded(async move {
            accepted.answer().await;
            Ok(())
        })
        .await?;
        self.check_stop()
    }

    /// gitlab-runner's `resolve_secrets` stage: the job's `secrets:` become masked
    /// variables (see [`super::secrets`]). `logged`: in its own section with
    /// gitlab-runner's lines (a job taken over resolves them again silently).
    async fn resolve_secrets(&mut self, logged: bool) -> Result<(), JobEnding> {
        use super::secrets::{SecretsError, process_environment, resolve};
        let Some(secrets) = self.job.secrets.as_ref().filter(|s| !s.is_empty()) else {
            return Ok(());
        };
        let _section = logged.then(|| self.section("resolve_secrets", "Resolving secrets"));
        let trace = self.trace;
        let mut log = |line: &str| {
            if logged {
                trace.runner_line(line);
            }
        };
        let resolved = self
            .guarded(async {
                resolve(secrets, &self.variables, &process_environment, &mut log)
                    .await
                    .map_err(|error| {
                        let message = format!("resolving secrets: {error}");
                        match error {
                            SecretsError::Unsupported { .. } => JobEnding::Unsupported { message },
                            SecretsError::Invalid { .. } | SecretsError::Configuration { .. } => {
                                JobEnding::ConfigurationError { message }
                            }
                            SecretsError::External { .. } => {
                                JobEnding::ExternalDependencyFailure { message }
                            }
                            SecretsError::System { .. } => JobEnding::SystemFailure {
                                stage: "resolve_secrets",
                                message,
                            },
                        }
                    })
            })
            .await?;
        if let Err(error) = self
            .trace
            .mask_values(resolved.iter().map(|v| v.value.as_str()))
        {
            return Err(JobEnding::SystemFailure {
                stage: "resolve_secrets",
                message: format!("masking the secrets: {error}"),
            });
        }
        for variable in resolved {
            self.variables.retain(|v| v.key != variable.key);
            self.variables.push(variable);
        }
        Ok(())
    }

    async fn prepare_executor(&mut self) -> Result<(), JobEnding> {
        let kind = ExecutorKind::for_job(&self.cx.runner, self.job);
        let _section = self.section(
            "prepare_executor",
            &format!("Preparing the \"{}\" executor", kind.as_str()),
        );
        let prepared = Executor::prepare(kind, &self.preparation()).await;
        self.adopt(prepared)
    }

    /// What the executor needs from the job to prepare itself.
    fn preparation(&self) -> Preparation<'_> {
        Preparation {
            runner: &self.cx.runner,
            job: self.job,
            trace: self.trace,
            dirs: &self.dirs,
            variables: &self.variables,
            cache_dir: &self.cache_dir,
            kill_grace: self.cx.kill_grace,
            login_shell: self.cx.login_shell,
            journal: self.cx.journal.as_ref(),
            fleet: self.cx.fleet.as_ref(),
            deadline: self.deadline,
            cancel: self.cancel_source(),
            placer: self.placement,
            driver_log: self.driver_log(),
        }
    }

    /// Keeps the executor preparing made (also after a failure: its cleanup releases
    /// what it made) and the place it moved the job to.
    fn adopt(&mut self, prepared: Prepared) -> Result<(), JobEnding> {
        if let Some(placed) = prepared.placed {
            self.dirs = placed.dirs;
            self.variables = placed.variables;
            self.cache_dir = placed.cache_dir;
        }
        self.executor = prepared.executor;
        prepared.result.map_err(|error| self.prepare_ending(error))
    }

    /// Brings the build directory here up to date before the runner works on it
    /// (the instance executor's stages changed it on the instance).
    pub(super) async fn to_host(&self, stage: &'static str) -> Result<(), JobEnding> {
        match &self.executor {
            Some(executor) => executor
                .to_host()
                .await
                .map_err(|error| JobEnding::SystemFailure {
                    stage,
                    message: error.to_string(),
                }),
            None => Ok(()),
        }
    }

    async fn prepare_script(&mut self) -> Result<(), JobEnding> {
        let _section = self.section("prepare_script", "Preparing environment");
        let names_its_host = self.executor.as_ref().is_some_and(Executor::names_its_host);
        if !names_its_host {
            self.trace
                .runner_line(&format!("Running on {}...", hostname()));
        }
        let failed = |message: String| JobEnding::SystemFailure {
            stage: "prepare_script",
            message,
        };
        for dir in [&self.dirs.builds_dir, &self.dirs.tmp_dir] {
            std::fs::create_dir_all(dir)
                .map_err(|e| failed(format!("create `{}`: {e}", dir.display())))?;
        }
        if let Some(parent) = self.dirs.project_dir.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| failed(format!("create `{}`: {e}", parent.display())))?;
        }
        let prepared = prepare_variables_seen_at(
            &self.variables,
            &self.dirs.tmp_dir.join("variables"),
            &self.dirs.seen.tmp_dir.join("variables"),
        )
        .map_err(|e| failed(e.to_string()))?;
        self.prepared = Some(prepared.with_debug_trace(self.debug_trace));
        // The custom driver's environment says where it is, and shows it can run a
        // script at all.
        self.executor_prepare_script().await
    }

    /// The executor's part of gitlab-runner's `prepare_script` stage (the custom
    /// driver's `run_exec`): a failure is the environment's, not the job's (a system
    /// failure).
    async fn executor_prepare_script(&self) -> Result<(), JobEnding> {
        let Some(executor) = &self.executor else {
            return Ok(());
        };
        let timeout = self.deadline.saturating_duration_since(Instant::now());
        let outcome = executor
            .prepare_script(&hostname(), self.trace, timeout, self.cancel())
            .await;
        match outcome {
            StageOutcome::ScriptFailure { exit_code } => Err(JobEnding::SystemFailure {
                stage: "prepare_script",
                message: format!(
                    "the custom executor's environment could not run the prepare_script stage (exit code {exit_code}); see run_exec's output above"
                ),
            }),
            other => self.stage_result("prepare_script", other, self.timeout),
        }
    }

    /// Completes when the job is canceled or the runner stops (graceful stops of the
    /// running stage).
    pub(super) fn cancel(&self) -> impl Future<Output = CancelReason> + 'static {
        let stop = self.stop().clone();
        async move {
            match stop.reached(StopRequest::Cancel).await {
                StopRequest::Interrupt => CancelReason::RunnerInterrupted,
                _ => CancelReason::JobCanceled,
            }
        }
    }

    /// Makes [`Lifecycle::cancel`]'s futures, for a [`Preparation`].
    fn cancel_source(&self) -> CancelSource {
        let stop = self.stop().clone();
        Arc::new(move || {
            let stop = stop.clone();
            Box::pin(async move {
                match stop.reached(StopRequest::Cancel).await {
                    StopRequest::Interrupt => CancelReason::RunnerInterrupted,
                    _ => CancelReason::JobCanceled,
                }
            })
        })
    }

    /// Where the custom executor's cleanup output goes: the runner's log.
    fn driver_log(&self) -> DriverLog {
        let (events, job_id) = (Arc::clone(&self.cx.events), self.job.id);
        Arc::new(move |stream: &str, line: &str| {
            events(JobEvent::DriverCleanup {
                job_id,
                stream: stream.to_owned(),
                line: line.to_owned(),
            });
        })
    }

    /// How a failed preparation ends the job.
    fn prepare_ending(&self, error: PrepareError) -> JobEnding {
        match error {
            PrepareError::Build { exit_code } => JobEnding::ScriptFailure { exit_code },
            PrepareError::System(message) => JobEnding::SystemFailure {
                stage: "prepare_executor",
                message,
            },
            PrepareError::Configuration(message) => JobEnding::ConfigurationError { message },
            PrepareError::ImagePull(message) => JobEnding::ImagePullFailure { message },
            PrepareError::Timeout => JobEnding::Timeout {
                after: self.timeout,
            },
            PrepareError::Canceled(reason) => self.canceled_ending(reason),
        }
    }

    /// How a stage stopped from outside ends the job.
    fn canceled_ending(&self, reason: CancelReason) -> JobEnding {
        match (self.stop().current(), reason) {
            (StopRequest::Abort, _) => JobEnding::Aborted,
            (_, CancelReason::RunnerInterrupted) => JobEnding::Interrupted,
            (_, CancelReason::JobCanceled) => JobEnding::Canceled,
        }
    }

    pub(super) fn executor(&self) -> Result<(&Executor, &PreparedVariables), JobEnding> {
        match (&self.executor, &self.prepared) {
            (Some(executor), Some(prepared)) => Ok((executor, prepared)),
            _ => Err(JobEnding::SystemFailure {
                stage: "prepare_script",
                message: "the executor was not prepared".to_owned(),
            }),
        }
    }

    /// Runs a hook (`pre_get_sources_script`, …) inside the current section: the
    /// entry's own script (config.toml) before the job's `hooks:` for `pre_`, after it
    /// for `post_`, as gitlab-runner orders them.
    async fn hook(&self, name: HookName, work_dir: &Path) -> Result<(), JobEnding> {
        let job_script = self
            .job
            .hooks
            .iter()
            .find(|h| h.name == name)
            .map(|h| h.script.as_slice())
            .unwrap_or_default();
        let scripts = &self.cx.runner.scripts;
        let commands: Vec<String> = match name {
            HookName::PreGetSourcesScript => scripts
                .pre_get_sources
                .iter()
                .chain(job_script)
                .cloned()
                .collect(),
            HookName::PostGetSourcesScript => job_script
                .iter()
                .chain(&scripts.post_get_sources)
                .cloned()
                .collect(),
        };
        if commands.is_empty() {
            return Ok(());
        }
        let (executor, prepared) = self.executor()?;
        let stage = Stage {
            name: name.as_str(),
            commands: &commands,
            variables: prepared,
            work_dir,
            timeout: self.deadline.saturating_duration_since(Instant::now()),
            job_status: CiJobStatus::Running,
            echo: true,
            detach: None,
            meter: Some(&self.meter),
        };
        let outcome = executor
            .run(&stage, self.trace, std::future::pending::<CancelReason>())
            .await;
        self.stage_result("get_sources", outcome, self.timeout)
    }

    pub(super) fn stage_result(
        &self,
        stage: &'static str,
        outcome: StageOutcome,
        timeout: Duration,
    ) -> Result<(), JobEnding> {
        match outcome {
            StageOutcome::Success => Ok(()),
            StageOutcome::ScriptFailure { exit_code } => {
                Err(JobEnding::ScriptFailure { exit_code })
            }
            StageOutcome::Timeout { .. } => Err(JobEnding::Timeout { after: timeout }),
            StageOutcome::Canceled { reason } => Err(self.canceled_ending(reason)),
            StageOutcome::SystemFailure { error } => Err(JobEnding::SystemFailure {
                stage,
                message: error.to_string(),
            }),
        }
    }

    async fn get_sources(&self) -> Result<(), JobEnding> {
        let _section = self.section("get_sources", "Getting source from Git repository");
        let lookup = self.lookup();
        let (settings, warnings) =
            GitSettings::from_variables(&lookup, self.job.allow_git_fetch, self.job.git_info.depth)
                .map_err(|error| JobEnding::ConfigurationError {
                    message: error.to_string(),
                })?;
        for warning in warnings {
            self.trace.warning(&warning);
        }
        let parent = self
            .dirs
            .seen
            .project_dir
            .parent()
            .unwrap_or(&self.dirs.seen.builds_dir)
            .to_owned();
        self.hook(HookName::PreGetSourcesScript, &parent).await?;
        self.to_host("get_sources").await?;
        let (_, prepared) = self.executor()?;
        let user_agent = format!(
            "gantry-runner {} {}",
            env!("CARGO_PKG_VERSION"),
            super::platform()
        );
        // `clone_url`: the runner reaches the server's git elsewhere than the payload
        // says (gitlab-runner's `GetRemoteURL`).
        let mut git_info = std::borrow::Cow::Borrowed(&self.job.git_info);
        if let Some(clone_url) = &self.cx.runner.clone_url {
            let repository = get(&self.variables, "CI_PROJECT_PATH")
                .and_then(|path| clone_url_repository(clone_url, &self.job.token, path));
            match repository {
                Some(repo_url) => git_info.to_mut().repo_url = repo_url,
                None => self.trace.warning(&format!(
                    "clone_url {clone_url:?} is not used: it needs an http(s) URL and the job's CI_PROJECT_PATH"
                )),
            }
        }
        let job = SourcesJob {
            git_info: &git_info,
            settings: &settings,
            project_dir: &self.dirs.project_dir,
            env: prepared.exports(),
            user_agent: &user_agent,
            snapshot: self.cx.snapshot.as_deref(),
            tls: &self.cx.runner.tls,
        };
        let trace = self.trace.clone();
        let mut output = move |line: &str| trace.runner_line(line);
        get_sources(&job, &mut output)
            .await
            .map_err(|error| match error {
                SourcesError::UnknownStrategy { .. } => JobEnding::ConfigurationError {
                    message: error.to_string(),
                },
                other => JobEnding::SystemFailure {
                    stage: "get_sources",
                    message: other.to_string(),
                },
            })?;
        if settings.strategy != GitStrategy::None {
            let (executor, _) = self.executor()?;
            executor
                .prepare_checkout(&self.dirs.project_dir)
                .map_err(|error| JobEnding::SystemFailure {
                    stage: "get_sources",
                    message: format!(
                        "set the modes of the checkout `{}`: {error}",
                        self.dirs.project_dir.display()
                    ),
                })?;
        }
        self.hook(HookName::PostGetSourcesScript, &self.dirs.seen.project_dir)
            .await
    }

    fn cache_specs(&self) -> Vec<CacheSpec> {
        self.job
            .cache
            .iter()
            .map(CacheSpec::from)
            .filter(|spec| !spec.paths.is_empty() || spec.untracked)
            .collect()
    }

    fn local_cache(&self) -> Result<LocalCache, crate::cache::CacheError> {
        crate::cache::for_job(
            &self.cache_dir,
            &self.dirs.cache_path,
            &self.cx.runner,
            self.job.job_info.project_id,
            &|w| self.trace.warning(w),
        )
    }

    async fn restore_cache(&self) -> Result<(), JobEnding> {
        self.to_host("restore_cache").await?;
        let specs = self.cache_specs();
        if specs.is_empty() {
            return Ok(());
        }
        let _section = self.section("restore_cache", "Restoring cache");
        let cache = self
            .local_cache()
            .map_err(|error| JobEnding::SystemFailure {
                stage: "restore_cache",
                message: error.to_string(),
            })?;
        let variables = self.variables.to_vec();
        let (job_name, git_ref) = (
            self.job.job_info.name.clone(),
            self.job.git_info.git_ref.clone(),
        );
        let project_dir = self.dirs.project_dir.clone();
        let seen_dir = self.dirs.seen.project_dir.clone();
        let reports = tokio::task::spawn_blocking(move || {
            let lookup = |name: &str| get(&variables, name).map(str::to_owned);
            let cx = CacheContext {
                job_name: &job_name,
                git_ref: &git_ref,
                lookup: &lookup,
                seen_dir: Some(&seen_dir),
            };
            specs
                .iter()
                .map(|spec| cache.restore(spec, &cx, &project_dir))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|join| JobEnding::SystemFailure {
            stage: "restore_cache",
            message: join.to_string(),
        })?;
        for report in reports {
            let report = report.map_err(|error| JobEnding::ConfigurationError {
                message: error.to_string(),
            })?;
            for note in &report.notes {
                write_note(self.trace, note);
            }
            if let RestoreOutcome::FallbackHit { key, .. } = &report.outcome {
                self.trace
                    .runner_line(&format!("Restored the cache of fallback key {key}"));
            }
        }
        Ok(())
    }

    async fn download_artifacts(&self) -> Result<(), JobEnding> {
        self.to_host("download_artifacts").await?;
        if !self
            .job
            .dependencies
            .iter()
            .any(|d| d.artifacts_file.is_some())
        {
            return Ok(());
        }
        let _section = self.section("download_artifacts", "Downloading artifacts");
        let attempts = get(&self.variables, "ARTIFACT_DOWNLOAD_ATTEMPTS")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(DEFAULT_DOWNLOAD_ATTEMPTS);
        download_dependencies(
            &self.cx.client,
            &self.job.token,
            &self.job.dependencies,
            &self.dirs.project_dir,
            &self.dirs.tmp_dir.join("downloads"),
            attempts,
            self.trace,
        )
        .await
        .map_err(|error| JobEnding::SystemFailure {
            stage: "download_artifacts",
            message: error.to_string(),
        })
    }

    /// `RUNNER_SCRIPT_TIMEOUT`, when set and valid.
    pub(super) fn script_timeout(&self) -> Option<Duration> {
        let value = get(&self.variables, "RUNNER_SCRIPT_TIMEOUT")?;
        match parse_go_duration(value) {
            Some(timeout) if !timeout.is_zero() => Some(timeout),
            _ => {
                self.trace.warning(&format!(
                    "RUNNER_SCRIPT_TIMEOUT={value:?} is not a duration like 30m or 1h30m; using the job timeout"
                ));
                None
            }
        }
    }

    /// The job's steps from the one at `first` on, the job standing at `ending`;
    /// `reattach` names the detached stage of step `first` to watch again.
    async fn steps(
        &self,
        first: usize,
        mut ending: JobEnding,
        mut reattach: Option<&crate::journal::DetachedStage>,
    ) -> JobEnding {
        let steps: Vec<_> = self
            .job
            .steps
            .iter()
            .flatten()
            .filter(|step| step.name != StepName::AfterScript)
            .cloned()
            .collect();
        match self.job.run_steps() {
            Ok(Some(run)) => return self.run_functions(&run).await,
            Ok(None) => {}
            Err(error) => {
                return JobEnding::ConfigurationError {
                    message: error.to_string(),
                };
            }
        }
        let script_timeout = self.script_timeout();
        for (index, step) in steps.iter().enumerate().skip(first) {
            let reattached = reattach.take().filter(|_| index == first);
            if matches!(
                ending,
                JobEnding::Canceled
                    | JobEnding::Interrupted
                    | JobEnding::Aborted
                    | JobEnding::Timeout { .. }
            ) {
                break;
            }
            let due = match step.when {
                When::OnSuccess => ending.is_success(),
                When::OnFailure => !ending.is_success(),
                When::Always => true,
            };
            if !due && reattached.is_none() {
                continue;
            }
            let (executor, prepared) = match self.executor() {
                Ok(pair) => pair,
                Err(failure) => return failure,
            };
            let name: &'static str = match step.name {
                StepName::Script => "step_script",
                StepName::Release => "step_release",
                StepName::Run => "step_run",
                StepName::AfterScript => continue,
            };
            let _section = match reattached {
                Some(_) => self.section_resumed(name),
                None => self.section(
                    name,
                    &format!("Executing \"{name}\" stage of the job script"),
                ),
            };
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            let (timeout, limit) = match script_timeout {
                Some(script) if script < remaining => (script, script),
                _ => (remaining, self.timeout),
            };
            // The entry's pre_build_script and post_build_script around the job's
            // commands, in the same shell (gitlab-runner's `writeUserScript`).
            let scripts = &self.cx.runner.scripts;
            let commands: Vec<String> = scripts
                .pre_build
                .iter()
                .chain(&step.script)
                .chain(&scripts.post_build)
                .cloned()
                .collect();
            let place = self.detach(
                crate::journal::StageAt::Step(index),
                name,
                &ending,
                timeout,
                limit,
            );
            let stage = Stage {
                name,
                commands: &commands,
                variables: prepared,
                work_dir: &self.dirs.seen.project_dir,
                timeout,
                job_status: CiJobStatus::Running,
                echo: true,
                detach: place.as_ref(),
                meter: Some(&self.meter),
            };
            let limit = match reattached {
                Some(detached) => Duration::from_secs(detached.place.limit_secs),
                None => limit,
            };
            let outcome = self
                .run_stage(executor, &stage, reattached, self.cancel())
                .await;
            if let Err(step_ending) = self.stage_result(name, outcome, limit) {
                if step.allow_failure && matches!(step_ending, JobEnding::ScriptFailure { .. }) {
                    self.trace.warning(&format!(
                        "{name} failed ({step_ending}), but it is allowed to fail"
                    ));
                } else {
                    ending = step_ending;
                }
            }
        }
        ending
    }

    /// `RUNNER_AFTER_SCRIPT_TIMEOUT`, default 5 minutes.
    fn after_script_timeout(&self) -> Duration {
        match get(&self.variables, "RUNNER_AFTER_SCRIPT_TIMEOUT") {
            None => DEFAULT_AFTER_SCRIPT_TIMEOUT,
            Some(value) => parse_go_duration(value)
                .filter(|t| !t.is_zero())
                .unwrap_or_else(|| {
                    self.trace.warning(&format!(
                        "RUNNER_AFTER_SCRIPT_TIMEOUT={value:?} is not a duration like 5m; using {}",
                        format_duration(DEFAULT_AFTER_SCRIPT_TIMEOUT)
                    ));
                    DEFAULT_AFTER_SCRIPT_TIMEOUT
                }),
        }
    }

    /// `after_script`: its own shell, its own timeout, `CI_JOB_STATUS` from the script's
    /// ending; only an abort stops it. Its failure never changes the job's ending.
    async fn after_script(
        &self,
        ending: &JobEnding,
        reattach: Option<&crate::journal::DetachedStage>,
    ) {
        let Some(step) = self
            .job
            .steps
            .iter()
            .flatten()
            .find(|step| step.name == StepName::AfterScript && !step.script.is_empty())
        else {
            return;
        };
        let Ok((executor, prepared)) = self.executor() else {
            return;
        };
        let _section = match reattach {
            Some(_) => self.section_resumed("after_script"),
            None => {
                let section = self.section("after_script", "Running after_script");
                self.trace.runner_line("Running after script...");
                section
            }
        };
        let timeout = self.after_script_timeout();
        let place = self.detach(
            crate::journal::StageAt::AfterScript,
            "after_script",
            ending,
            timeout,
            timeout,
        );
        let stage = Stage {
            name: "after_script",
            commands: &step.script,
            variables: prepared,
            work_dir: &self.dirs.seen.project_dir,
            timeout,
            job_status: ending.ci_job_status(),
            echo: true,
            detach: place.as_ref(),
            meter: Some(&self.meter),
        };
        let stop = self.stop().clone();
        let cancel = async move {
            stop.reached(StopRequest::Abort).await;
            CancelReason::JobCanceled
        };
        match self.run_stage(executor, &stage, reattach, cancel).await {
            StageOutcome::Success
            | StageOutcome::Canceled { .. }
            | StageOutcome::Timeout { .. } => {}
            StageOutcome::ScriptFailure { exit_code } => self.trace.warning(&format!(
                "after_script failed, but job will continue unaffected: exit code {exit_code}"
            )),
            StageOutcome::SystemFailure { error } => self.trace.warning(&format!(
                "after_script could not run, but job will continue unaffected: {error}"
            )),
        }
    }

    fn cleanup_file_variables(&self) {
        let Some(prepared) = &self.prepared else {
            return;
        };
        let _section = self.section(
            "cleanup_file_variables",
            "Cleaning up project directory and file based variables",
        );
        if let Err(error) = prepared.cleanup_file_variables() {
            self.trace.warning(&error.to_string());
        }
        if let Err(error) = clear_tmp_dir(&self.dirs.tmp_dir) {
            self.trace.warning(&format!(
                "remove `{}`: {error}",
                self.dirs.tmp_dir.display()
            ));
        }
    }
}

/// Empties `<project dir>.tmp` after a job: file variables, archives and anything else
/// go; the directory and the stage scripts, already emptied by the executor, stay for
/// the next job of this build directory (fewer inodes created and freed per job).
fn clear_tmp_dir(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = entry.path();
        let empty_script = kind.is_file()
            && name.starts_with("script_")
            && name.ends_with(".sh")
            && entry.metadata()?.len() == 0;
        if empty_script {
            continue;
        }
        let removed = if kind.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Writes an artifacts/cache note (warnings with gitlab-runner's `WARNING: `).
pub(crate) fn write_note(trace: &Trace, note: &crate::artifacts::Note) {
    if note.is_warning() {
        trace.warning(note.text());
    } else {
        trace.runner_line(note.text());
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clearing_the_tmp_dir_keeps_only_emptied_stage_scripts() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("project.tmp");
        std::fs::create_dir_all(tmp.join("variables")).unwrap();
        std::fs::create_dir_all(tmp.join("artifacts/deep")).unwrap();
        std::fs::write(tmp.join("variables/CONFIG"), "secret").unwrap();
        std::fs::write(tmp.join("artifacts/deep/a.zip"), "zip").unwrap();
        std::fs::write(tmp.join("script_step_script.sh"), "").unwrap();
        // A job that ended mid-stage leaves its script whole: it goes.
        std::fs::write(tmp.join("script_after_script.sh"), "export SECRET=x").unwrap();
        std::fs::write(tmp.join("other"), "x").unwrap();
        clear_tmp_dir(&tmp).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["script_step_script.sh"]);
        // A job directory that never had one is fine.
        clear_tmp_dir(&dir.path().join("missing.tmp")).unwrap();
    }
}
