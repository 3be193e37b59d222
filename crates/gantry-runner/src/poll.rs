//! The poll loop: asks the coordinator for jobs and runs them (spec `runner-api.md` §3,
//! §7).
//!
//! # The concurrency model
//!
//! Three settings, one rule: **a job request is only sent when the job it may bring
//! could start at once.** An in-flight request holds a job slot exactly like a running
//! job, so the runner never receives a job it has to queue, and never refuses one.
//!
//! * `concurrent` (global): running jobs + in-flight requests, over all `[[runners]]`
//!   entries, never exceed it.
//! * `limit` (per entry; unset or 0 = `concurrent`): the entry's running jobs + its
//!   in-flight requests never exceed it.
//! * `request_concurrency` (per entry, default 1): the entry's in-flight requests never
//!   exceed it. It matters with long polling, where the coordinator holds a request up
//!   to ~50 s when it has nothing: with 1, a second job for the entry waits for that
//!   hold to end.
//! * `check_interval` (global, default 3 s): an entry starts at most one new request
//!   per `check_interval` — except right after a request brought a job, when it asks
//!   again at once (while slots allow) to drain a busy queue.
//!
//! Each entry has one scheduler task that applies these checks
//! (`poll::slots` holds them as pure data and functions) and starts requests as their
//! own tasks; a request that brings a job turns into that job's task. The README's
//! "Runner concurrency" section walks through an example.
//!
//! # Requests
//!
//! `POST /jobs/request` with the entry's token, this process's `system_id` and the last
//! `X-GitLab-Last-Update` value the entry received (§3.3), so a long-polling coordinator
//! can hold the request until its queue changes. `204` waits for the gate; `409` (another
//! runner took the job) too; any other failure (network, `403`, `5xx`, `429`) makes the
//! entry wait with exponential back-off with jitter (from `check_interval` doubling up
//! to 60 s), reset by the next answer.
//!
//! In the code: `Entry::request_failed` gives the wait (back-off, or `unhealthy_interval`
//! once `unhealthy_requests_limit` failures in a row are reached),
//! `Entry::request_answered` resets it. Only `gantry runner run` keeps a job journal
//! (`PollOptions::journal`): `Poller::run` starts by ending or taking over the jobs a dead
//! runner process left (`end_lost_jobs`, see `crate::journal`); `gantry run` keeps none, so
//! its stages keep their pipes.
//!
//! # Signals (mapped by the binary onto a [`PollHandle`])
//!
//! * `SIGQUIT` → [`PollHandle::stop_taking_jobs`]: no new requests; requests in flight
//!   finish (a job they bring is run); running jobs finish; then [`Poller::run`]
//!   returns.
//! * `SIGTERM`/`SIGINT` → [`PollHandle::interrupt`]: requests in flight are dropped
//!   (their connections close, so a coordinator holding them gives their next job to
//!   another runner), running jobs get [`StopRequest::Interrupt`] (the script is
//!   stopped, `after_script` runs, the final update says `runner_interrupted`), and
//!   the loop waits up to `shutdown_timeout` for them. After that, or on a second
//!   interrupt, remaining jobs are aborted (killed, no final update).
//! * `SIGHUP` → [`PollHandle::reload`] with the re-read configuration: `concurrent`,
//!   `check_interval`, `shutdown_timeout` and the entries apply to new requests at
//!   once (entries are matched by URL and token; removed ones stop asking, their
//!   running jobs finish; new ones start). Running jobs keep the settings they started
//!   with. A configuration that cannot be used is refused with an event and the old one
//!   stays.

mod event;
mod identity;
mod recovery;
mod slots;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use gantry_protocol::JobResponse;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

pub use crate::level::Level;
pub use event::{PollEvent, PollEvents, PollSummary};
pub use identity::{
    DOCKER_FEATURES, FEATURES, SYSTEM_ID_FILE, load_or_create_system_id, system_id_path,
    version_info,
};

use crate::client::{Client, ClientError, JobRequestOutcome};

/// `(entry name, endpoint, HTTP status)` of each request ([`PollOptions::api_observer`]).
pub type ApiRequests = Arc<dyn Fn(&str, &'static str, Option<u16>) + Send + Sync>;
use crate::config::{Config, ExecutorKind, RunnerConfig, short_token};
use crate::executor::DEFAULT_KILL_GRACE;
use crate::fleet::{Fleet, FleetLease};
use crate::job::{
    Backoff, JobContext, JobReport, StopRequest, StopSignal, fail_undecodable_job, run_job,
};
use crate::journal::{JobRecord, Journal, LostJobEnd, end_lost_job, kill_lost_groups};
use recovery::resumable;
use slots::{Decision, EntryKey, Slots};

/// How often a runner handing its jobs over looks whether they all are in a detached
/// stage.
const HAND_OVER_CHECK: Duration = Duration::from_millis(100);

/// Longest wait between job requests of an entry whose requests fail.
const MAX_REQUEST_BACKOFF: Duration = Duration::from_secs(60);

/// After aborting jobs (shutdown timeout, second interrupt), how long to wait for their
/// processes to be killed before returning.
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// How the poll loop runs, beyond the configuration file.
#[derive(Clone)]
pub struct PollOptions {
    /// This process's `system_id` (see [`load_or_create_system_id`]).
    pub system_id: String,
    /// Where events go.
    pub events: PollEvents,
    /// Stop taking jobs after this many (then finish them and return).
    pub max_jobs: Option<usize>,
    /// Relative `builds_dir`/`cache_dir`, and their defaults `builds` and `cache`, are
    /// taken from here (gitlab-runner's shell executor uses its working directory).
    pub work_dir: PathBuf,
    /// Time between SIGTERM and SIGKILL when a job's stage is stopped.
    pub kill_grace: Duration,
    /// Jobs copy this directory instead of fetching with git (`gantry run`).
    pub snapshot: Option<PathBuf>,
    /// Sees every job's log bytes as they are appended.
    pub trace_tap: Option<crate::job::TraceTap>,
    /// Shell executor scripts in a login shell (default true; see [`JobContext`]).
    pub login_shell: bool,
    /// Where running jobs are recorded, so that a later start ends the jobs of a runner
    /// process that died ([`crate::journal`]). `None` (the default; `gantry run`, whose
    /// coordinator dies with it) keeps no records.
    pub journal: Option<Journal>,
    /// Told of every request the entries' clients send: `(entry name, endpoint, status)`
    /// (the runner's metrics; see `crate::client::ApiObserver`).
    pub api_observer: Option<ApiRequests>,
    /// The process's tracer (`None`, the default: tracing off).
    pub telemetry: Option<gantry_telemetry::Telemetry>,
}

impl PollOptions {
    /// Options with no event sink, no job limit, the current directory and the default
    /// kill grace period.
    pub fn new(system_id: impl Into<String>) -> Self {
        Self {
            system_id: system_id.into(),
            events: Arc::new(|_| {}),
            max_jobs: None,
            work_dir: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            kill_grace: DEFAULT_KILL_GRACE,
            snapshot: None,
            trace_tap: None,
            login_shell: true,
            journal: None,
            api_observer: None,
            telemetry: None,
        }
    }
}

/// Why polling cannot start (or a configuration cannot be reloaded).
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// Nothing to poll.
    #[error(
        "start the runner: the configuration has no [[runners]] entry\nregister one with `gantry runner register --url URL --token TOKEN`"
    )]
    NoRunners,
    /// A custom entry without its driver programs (a configuration built in code; a
    /// file gets this error when it is read).
    #[error(
        "start the runner: `runners[{index}]` ({name}) uses executor = \"custom\" without a [runners.custom] section\nadd one with at least run_exec, the program that runs each stage's script"
    )]
    NoCustomSection {
        /// Position in the file.
        index: usize,
        /// Its name or short token.
        name: String,
    },
    /// The HTTP client of an entry could not be built.
    #[error("start the runner: `runners[{index}]` ({name}): {source}")]
    Client {
        /// Position in the file.
        index: usize,
        /// Its name or short token.
        name: String,
        /// Why.
        #[source]
        source: ClientError,
    },
}

/// The display name of an entry: its `name`, else its short token.
pub fn runner_name(runner: &RunnerConfig) -> String {
    runner
        .name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| short_token(&runner.token))
}

/// Checks that there is something to poll, and that every entry has what its executor
/// needs (every executor a configuration can name is implemented).
pub fn check_config(config: &Config) -> Result<(), PollError> {
    if config.runners.is_empty() {
        return Err(PollError::NoRunners);
    }
    for (index, runner) in config.runners.iter().enumerate() {
        if runner.executor == ExecutorKind::Custom && runner.custom.is_none() {
            return Err(PollError::NoCustomSection {
                index,
                name: runner_name(runner),
            });
        }
    }
    Ok(())
}

enum Command {
    StopTakingJobs,
    Interrupt,
    Reload(Box<Config>),
    HandOver,
}

/// Controls a running [`Poller`] (the binary maps signals onto it).
#[derive(Clone)]
pub struct PollHandle {
    commands: mpsc::UnboundedSender<Command>,
}

impl PollHandle {
    /// SIGQUIT: take no new jobs; finish the running ones.
    pub fn stop_taking_jobs(&self) {
        let _ = self.commands.send(Command::StopTakingJobs);
    }

    /// SIGTERM/SIGINT: interrupt running jobs (`runner_interrupted`, `after_script`
    /// still runs) and stop; a second call stops at once.
    pub fn interrupt(&self) {
        let _ = self.commands.send(Command::Interrupt);
    }

    /// SIGHUP: use `config` for everything new.
    pub fn reload(&self, config: Config) {
        let _ = self.commands.send(Command::Reload(Box::new(config)));
    }

    /// SIGUSR2: hand the running jobs over to the next runner process (an upgrade, a
    /// restart) instead of waiting for them: take no new jobs, and stop as soon as
    /// every running job is in a detached stage (`crate::executor::shell::detached`) — those
    /// are left running, for the next `gantry runner run` to take over. Jobs that
    /// cannot be handed over (other executors, other stages) are waited for first.
    pub fn hand_over(&self) {
        let _ = self.commands.send(Command::HandOver);
    }
}

/// The runtime data of an entry (parallel to `Slots::entries`).
struct Entry {
    name: String,
    config: Arc<RunnerConfig>,
    client: Client,
    builds_dir: PathBuf,
    cache_dir: PathBuf,
    last_update: Option<String>,
    backoff: Backoff,
    /// Job requests that failed in a row (for `unhealthy_requests_limit`).
    failures: u32,
}

impl Entry {
    /// A job request was answered (a job, none, or `409`): the backoff and the failure
    /// count start again.
    fn request_answered(&mut self) {
        self.backoff.reset();
        self.failures = 0;
    }

    /// A job request failed: how long to wait before the next, and, when this failure
    /// made the entry unhealthy (`unhealthy_requests_limit` in a row), the event that
    /// says so. The wait is then `unhealthy_interval`, after which the count starts again
    /// (gitlab-runner's health check).
    fn request_failed(&mut self) -> (Duration, Option<PollEvent>) {
        self.failures = self.failures.saturating_add(1);
        match self.config.unhealthy {
            Some(u) if self.failures >= u.requests_limit => {
                let failures = self.failures;
                self.failures = 0;
                self.backoff.reset();
                let event = PollEvent::RunnerUnhealthy {
                    runner: self.name.clone(),
                    failures,
                    disabled_for: u.interval,
                };
                (u.interval, Some(event))
            }
            _ => (self.backoff.next_delay(), None),
        }
    }
}

struct State {
    slots: Slots,
    entries: Vec<Entry>,
    jobs: HashMap<i64, StopSignal>,
    /// The records of the running jobs that have one.
    records: HashMap<i64, Arc<crate::journal::RunningJob>>,
    /// Handing the jobs over ([`PollHandle::hand_over`]).
    handing_over: bool,
    reports: Vec<JobReport>,
    interrupted: bool,
    shutdown_timeout: Duration,
}

struct Shared {
    state: Mutex<State>,
    changed: Notify,
    interrupt: watch::Sender<bool>,
    options: PollOptions,
    /// The fleets of `instance` entries, started by their first job request.
    fleets: Mutex<HashMap<EntryKey, Arc<tokio::sync::OnceCell<Arc<Fleet>>>>>,
    /// The acquisition keys of the instance jobs taken over at start, per entry: their
    /// fleet restores them from its state file when it starts.
    resuming: Mutex<HashMap<EntryKey, Vec<String>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn emit(&self, event: PollEvent) {
        (self.options.events)(&event);
    }

    fn changed(&self) {
        self.changed.notify_waiters();
    }
}

/// Asks the coordinator(s) for jobs and runs them until told to stop.
pub struct Poller {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
}

fn resolve_dir(work_dir: &Path, configured: Option<&Path>, default: &str) -> PathBuf {
    match configured {
        Some(dir) => work_dir.join(dir),
        None => work_dir.join(default),
    }
}

fn new_entry(
    index: usize,
    runner: &RunnerConfig,
    config: &Config,
    options: &PollOptions,
) -> Result<Entry, PollError> {
    let check_interval = config.check_interval;
    let name = runner_name(runner);
    let mut info = version_info(Some((runner.executor, runner.shell)));
    info.labels = config.labels_of(runner);
    let client =
        Client::with_tls(&runner.url, info, &runner.tls).map_err(|source| PollError::Client {
            index,
            name: name.clone(),
            source,
        })?;
    let client = match &options.api_observer {
        Some(observer) => {
            let (observer, runner) = (Arc::clone(observer), name.clone());
            client.observed_by(Arc::new(move |endpoint, status| {
                observer(&runner, endpoint, status)
            }))
        }
        None => client,
    };
    Ok(Entry {
        name,
        config: Arc::new(runner.clone()),
        client,
        builds_dir: resolve_dir(&options.work_dir, runner.builds_dir.as_deref(), "builds"),
        cache_dir: resolve_dir(&options.work_dir, runner.cache_dir.as_deref(), "cache"),
        last_update: None,
        backoff: Backoff::new(
            check_interval.max(Duration::from_secs(1)),
            MAX_REQUEST_BACKOFF,
        ),
        failures: 0,
    })
}

fn key(runner: &RunnerConfig) -> EntryKey {
    EntryKey {
        url: runner.url.clone(),
        token: runner.token.clone(),
    }
}

impl Poller {
    /// A poller for `config`; fails when an entry cannot be polled.
    pub fn new(config: Config, options: PollOptions) -> Result<(Self, PollHandle), PollError> {
        check_config(&config)?;
        let now = Instant::now();
        let mut slots = Slots::new(
            config.concurrent.get(),
            config.check_interval,
            options.max_jobs,
        );
        let mut entries = Vec::new();
        for (index, runner) in config.runners.iter().enumerate() {
            let entry = new_entry(index, runner, &config, &options)?;
            let (position, new) = slots.upsert(
                key(runner),
                runner.limit.map(|l| l.get()),
                runner.request_concurrency.get(),
                now,
            );
            if new {
                entries.push(entry);
            } else {
                entries[position] = entry;
            }
        }
        let (sender, commands) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                slots,
                entries,
                jobs: HashMap::new(),
                records: HashMap::new(),
                handing_over: false,
                reports: Vec::new(),
                interrupted: false,
                shutdown_timeout: config.shutdown_timeout,
            }),
            changed: Notify::new(),
            interrupt: watch::Sender::new(false),
            options,
            fleets: Mutex::new(HashMap::new()),
            resuming: Mutex::new(HashMap::new()),
        });
        Ok((Self { shared, commands }, PollHandle { commands: sender }))
    }

    /// Polls until stopped (see the module docs); returns every job's report.
    pub async fn run(mut self) -> PollSummary {
        let (count, concurrent) = {
            let state = self.shared.lock();
            (state.slots.entries.len(), state.slots.concurrent)
        };
        self.end_lost_jobs();
        self.remove_docker_leftovers().await;
        for index in 0..count {
            tokio::spawn(schedule(Arc::clone(&self.shared), index));
        }
        self.shared.emit(PollEvent::Started {
            runners: count,
            concurrent,
        });
        let mut commands_open = true;
        let mut deadline: Option<Instant> = None;
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.lock().slots.idle() {
                break;
            }
            if let Some(jobs) = self.ready_to_hand_over() {
                self.shared.emit(PollEvent::HandedOver { jobs });
                let reports = std::mem::take(&mut self.shared.lock().reports);
                return PollSummary { jobs: reports };
            }
            let handing_over = self.shared.lock().handing_over;
            tokio::select! {
                command = self.commands.recv(), if commands_open => match command {
                    None => commands_open = false,
                    Some(Command::StopTakingJobs) => self.stop_taking_jobs(),
                    Some(Command::HandOver) => self.hand_over(),
                    Some(Command::Interrupt) => {
                        if deadline.is_some() {
                            let killed = self.abort_all();
                            self.shared.emit(PollEvent::Forced { killed });
                            self.settle().await;
                            break;
                        }
                        deadline = Some(self.interrupt());
                    }
                    Some(Command::Reload(config)) => self.reload(*config),
                },
                () = &mut notified => {}
                // Jobs enter their detached stages without a notification.
                () = tokio::time::sleep(HAND_OVER_CHECK), if handing_over => {}
                () = sleep_until_some(deadline) => {
                    let abandoned = self.abort_all();
                    self.shared.emit(PollEvent::ShutdownTimeout { abandoned });
                    self.settle().await;
                    break;
                }
            }
        }
        self.stop_fleets().await;
        let reports = std::mem::take(&mut self.shared.lock().reports);
        self.shared.emit(PollEvent::Stopped {
            jobs: reports.len(),
        });
        PollSummary { jobs: reports }
    }

    /// Starts handing the jobs over: no new jobs; detached stages are left running.
    fn hand_over(&self) {
        let Some(journal) = &self.shared.options.journal else {
            // Without records nothing can be taken over: the jobs are finished.
            self.stop_taking_jobs();
            return;
        };
        journal.hand_over();
        let running = {
            let mut state = self.shared.lock();
            state.handing_over = true;
            state.slots.taking_jobs = false;
            state.slots.running
        };
        self.shared.changed();
        self.shared.emit(PollEvent::HandingOver { running });
    }

    /// While handing over: the number of running jobs once every one is in a detached
    /// stage (and no job request is in flight).
    fn ready_to_hand_over(&self) -> Option<usize> {
        let state = self.shared.lock();
        if !state.handing_over || state.slots.requesting > 0 {
            return None;
        }
        let ready = state.jobs.keys().all(|id| {
            state
                .records
                .get(id)
                .is_some_and(|record| record.in_detached_stage())
        });
        ready.then_some(state.jobs.len())
    }

    /// Shuts down the fleets the entries started (their jobs have ended).
    async fn stop_fleets(&self) {
        let cells: Vec<_> = self
            .shared
            .fleets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        for (_, cell) in cells {
            let Some(fleet) = Arc::try_unwrap(cell)
                .ok()
                .and_then(|cell| cell.into_inner())
            else {
                continue;
            };
            // A job that outlived shutdown_timeout still holds it otherwise: its
            // plugin process is killed when the last holder drops it.
            if let Ok(fleet) = Arc::try_unwrap(fleet) {
                fleet.shutdown().await;
            }
        }
    }

    fn stop_taking_jobs(&self) {
        let (running, requesting) = {
            let mut state = self.shared.lock();
            state.slots.taking_jobs = false;
            (state.slots.running, state.slots.requesting)
        };
        self.shared.changed();
        self.shared.emit(PollEvent::StopTakingJobs {
            running,
            requesting,
        });
    }

    /// First interrupt: returns the deadline for running jobs.
    fn interrupt(&self) -> Instant {
        let (running, timeout) = {
            let mut state = self.shared.lock();
            state.slots.taking_jobs = false;
            state.interrupted = true;
            for stop in state.jobs.values() {
                stop.request(StopRequest::Interrupt);
            }
            (state.slots.running, state.shutdown_timeout)
        };
        self.shared.interrupt.send_replace(true);
        self.shared.changed();
        self.shared
            .emit(PollEvent::Interrupting { running, timeout });
        Instant::now() + timeout
    }

    fn abort_all(&self) -> usize {
        let mut state = self.shared.lock();
        state.slots.taking_jobs = false;
        for stop in state.jobs.values() {
            stop.request(StopRequest::Abort);
        }
        state.jobs.len()
    }

    /// Waits a little for aborted jobs to be killed.
    async fn settle(&self) {
        let until = Instant::now() + ABORT_GRACE.max(self.shared.options.kill_grace);
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.lock().slots.running == 0 {
                return;
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(until) => return,
            }
        }
    }

    fn reload(&self, config: Config) {
        if let Err(error) = check_config(&config) {
            self.shared.emit(PollEvent::ReloadRejected {
                error: error.to_string(),
            });
            return;
        }
        let mut fresh = Vec::new();
        for (index, runner) in config.runners.iter().enumerate() {
            match new_entry(index, runner, &config, &self.shared.options) {
                Ok(entry) => fresh.push((runner, entry)),
                Err(error) => {
                    self.shared.emit(PollEvent::ReloadRejected {
                        error: error.to_string(),
                    });
                    return;
                }
            }
        }
        let now = Instant::now();
        let mut start = Vec::new();
        let (runners, concurrent) = {
            let mut state = self.shared.lock();
            // Before the upserts: an entry without `limit` gets the new `concurrent`.
            state.slots.concurrent = config.concurrent.get();
            state.slots.check_interval = config.check_interval;
            state.shutdown_timeout = config.shutdown_timeout;
            let keys: Vec<EntryKey> = config.runners.iter().map(key).collect();
            for entry in &mut state.slots.entries {
                if !keys.contains(&entry.key) {
                    entry.removed = true;
                }
            }
            for (runner, mut entry) in fresh {
                let (index, scheduler_needed) = state.slots.upsert(
                    key(runner),
                    runner.limit.map(|l| l.get()),
                    runner.request_concurrency.get(),
                    now,
                );
                if index < state.entries.len() {
                    let old = &mut state.entries[index];
                    entry.last_update = old.last_update.take();
                    *old = entry;
                } else {
                    state.entries.push(entry);
                }
                if scheduler_needed {
                    start.push(index);
                }
            }
            (config.runners.len(), config.concurrent.get())
        };
        for index in start {
            tokio::spawn(schedule(Arc::clone(&self.shared), index));
        }
        self.shared.changed();
        self.shared.emit(PollEvent::Reloaded {
            runners,
            concurrent,
        });
    }
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// One entry's scheduler: starts requests when the model allows.
async fn schedule(shared: Arc<Shared>, index: usize) {
    loop {
        let notified = shared.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let decision = shared.lock().slots.decide(index, Instant::now());
        match decision {
            Decision::Request => {
                tokio::spawn(request(Arc::clone(&shared), index));
            }
            Decision::WaitUntil(at) => {
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            Decision::WaitForSlot => notified.await,
            Decision::Exit => return,
        }
    }
}

fn describe(error: &ClientError) -> String {
    match error {
        ClientError::Refused { status: 403, .. } => format!(
            "{error}\nthe coordinator does not accept this runner's token: the runner may have been deleted; check with `gantry runner verify`"
        ),
        other => other.to_string(),
    }
}

/// One job request; becomes the job when it brings one.
async fn request(shared: Arc<Shared>, index: usize) {
    let (client, token, last_update) = {
        let state = shared.lock();
        let entry = &state.entries[index];
        (
            entry.client.clone(),
            entry.config.token.clone(),
            entry.last_update.clone(),
        )
    };
    let mut interrupted = shared.interrupt.subscribe();
    let lease = match fleet_lease(&shared, index).await {
        Ok(lease) => lease,
        Err(NoLease::NoCapacity) => {
            // No capacity for another job now: ask again after check_interval.
            shared.lock().slots.no_job(index);
            shared.changed();
            return;
        }
        Err(NoLease::Unavailable(error)) => {
            let events = {
                let mut state = shared.lock();
                let name = state.entries[index].name.clone();
                let (retry_in, unhealthy) = state.entries[index].request_failed();
                state.slots.failed(index, Instant::now(), retry_in);
                [
                    Some(PollEvent::RequestFailed {
                        runner: name,
                        error,
                        retry_in,
                    }),
                    unhealthy,
                ]
            };
            shared.changed();
            for event in events.into_iter().flatten() {
                shared.emit(event);
            }
            return;
        }
    };
    let system_id = shared.options.system_id.clone();
    let outcome = tokio::select! {
        outcome = client.request_job(&token, &system_id, last_update.as_deref()) => outcome,
        _ = interrupted.wait_for(|interrupted| *interrupted) => {
            shared.lock().slots.no_job(index);
            shared.changed();
            return;
        }
    };
    match outcome {
        Ok(JobRequestOutcome::Job(job)) => run_received(shared, index, *job, lease).await,
        Ok(JobRequestOutcome::Undecodable { id, token, error }) => {
            let name = {
                let mut state = shared.lock();
                state.slots.no_job(index);
                state.entries[index].name.clone()
            };
            shared.changed();
            let error = error.to_string();
            shared.emit(PollEvent::UndecodableJob {
                runner: name.clone(),
                job_id: id,
                error: error.clone(),
            });
            if let (Some(id), Some(token)) = (id, token) {
                let events: crate::job::JobEvents = {
                    let shared = Arc::clone(&shared);
                    Arc::new(move |event| {
                        shared.emit(PollEvent::Job {
                            runner: name.clone(),
                            event,
                        })
                    })
                };
                let report = fail_undecodable_job(client, id, token, &error, events).await;
                shared.lock().reports.push(report);
            }
        }
        Ok(JobRequestOutcome::NoJob { last_update }) => {
            {
                let mut state = shared.lock();
                let entry = &mut state.entries[index];
                if let Some(value) = last_update.filter(|v| !v.is_empty()) {
                    entry.last_update = Some(value);
                }
                entry.request_answered();
                state.slots.no_job(index);
            }
            shared.changed();
        }
        Err(error) => {
            let events = {
                let mut state = shared.lock();
                let name = state.entries[index].name.clone();
                if matches!(error, ClientError::Refused { status: 409, .. }) {
                    state.entries[index].request_answered();
                    state.slots.no_job(index);
                    [Some(PollEvent::RequestConflict { runner: name }), None]
                } else {
                    let (retry_in, unhealthy) = state.entries[index].request_failed();
                    state.slots.failed(index, Instant::now(), retry_in);
                    [
                        Some(PollEvent::RequestFailed {
                            runner: name,
                            error: describe(&error),
                            retry_in,
                        }),
                        unhealthy,
                    ]
                }
            };
            shared.changed();
            for event in events.into_iter().flatten() {
                shared.emit(event);
            }
        }
    }
}

/// Why a job request of a fleet entry took no lease.
enum NoLease {
    /// No free capacity now: the entry asks again after `check_interval`.
    NoCapacity,
    /// The fleet cannot start (why): a failed request, tried again with back-off.
    Unavailable(String),
}

/// The entry's fleet and a reservation on it, for an `instance` or
/// `docker-autoscaler` entry (`Ok(None)` for others): the fleet is started by the
/// first request.
async fn fleet_lease(shared: &Arc<Shared>, index: usize) -> Result<Option<FleetLease>, NoLease> {
    let config = Arc::clone(&shared.lock().entries[index].config);
    if !config.executor.uses_fleet() {
        return Ok(None);
    }
    let fleet = fleet_of(shared, index)
        .await
        .map_err(NoLease::Unavailable)?;
    match fleet.reserve() {
        Ok(reservation) => Ok(Some(FleetLease::new(fleet, Some(reservation)))),
        Err(_) => Err(NoLease::NoCapacity),
    }
}

/// The fleet of entry `index`, started by the first caller.
async fn fleet_of(shared: &Arc<Shared>, index: usize) -> Result<Arc<Fleet>, String> {
    let (config, name) = {
        let state = shared.lock();
        let entry = &state.entries[index];
        (Arc::clone(&entry.config), entry.name.clone())
    };
    let Some(autoscaler) = &config.autoscaler else {
        return Err(format!(
            "the {} executor needs a [runners.autoscaler] section",
            config.executor
        ));
    };
    let cell = Arc::clone(
        shared
            .fleets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key(&config))
            .or_default(),
    );
    let fleet = cell
        .get_or_try_init(|| async {
            let events = Arc::clone(shared);
            let runner = name.clone();
            let log: crate::fleet::FleetLog = Arc::new(move |level, message| {
                events.emit(PollEvent::Fleet {
                    runner: runner.clone(),
                    level,
                    message,
                });
            });
            let short = crate::config::short_token(&config.token);
            let resume = shared
                .resuming
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key(&config))
                .cloned()
                .unwrap_or_default();
            Fleet::start(autoscaler, &shared.options.work_dir, &short, resume, log)
                .await
                .map(Arc::new)
        })
        .await
        .map_err(|error| format!("the fleet could not start: {error}"))?;
    Ok(Arc::clone(fleet))
}

/// The events of jobs of the entry named `name`, as poll events.
fn job_events(shared: &Arc<Shared>, name: &str) -> crate::job::JobEvents {
    let (shared, name) = (Arc::clone(shared), name.to_owned());
    Arc::new(move |event| {
        shared.emit(PollEvent::Job {
            runner: name.clone(),
            event,
        })
    })
}

/// Milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX)
}

/// What a job of `entry` in `slot` runs with.
fn job_context(
    shared: &Shared,
    entry: &Entry,
    slot: &slots::RunningJob,
    stop: StopSignal,
    events: crate::job::JobEvents,
    fleet: Option<FleetLease>,
    journal: Option<Arc<crate::journal::RunningJob>>,
) -> JobContext {
    JobContext {
        client: entry.client.clone(),
        runner: Arc::clone(&entry.config),
        system_id: shared.options.system_id.clone(),
        concurrent_id: slot.concurrent_id,
        concurrent_project_id: slot.concurrent_project_id,
        builds_dir: entry.builds_dir.clone(),
        cache_dir: entry.cache_dir.clone(),
        stop,
        events,
        kill_grace: shared.options.kill_grace,
        snapshot: shared.options.snapshot.clone(),
        trace_tap: shared.options.trace_tap.clone(),
        login_shell: shared.options.login_shell,
        fleet,
        journal,
        telemetry: shared.options.telemetry.clone(),
    }
}

/// A job's task is over: its record goes, its slot is free, its report is kept.
fn job_ended(
    shared: &Shared,
    index: usize,
    job_id: i64,
    journal: Option<Arc<crate::journal::RunningJob>>,
    report: Option<JobReport>,
) {
    if let Some(record) = journal {
        record.finish();
    }
    {
        let mut state = shared.lock();
        state.slots.job_finished(index, job_id);
        state.jobs.remove(&job_id);
        state.records.remove(&job_id);
        state.reports.extend(report);
    }
    shared.changed();
}

async fn run_received(
    shared: Arc<Shared>,
    index: usize,
    job: JobResponse,
    lease: Option<FleetLease>,
) {
    let job_id = job.id;
    let stop = StopSignal::new();
    let (cx, name, slot, stopped_taking) = {
        let mut state = shared.lock();
        let slot = state
            .slots
            .job_started(index, job_id, job.job_info.project_id, Instant::now());
        if state.interrupted {
            stop.request(StopRequest::Interrupt);
        }
        state.jobs.insert(job_id, stop.clone());
        let stopped_taking = !state.slots.taking_jobs
            && state
                .slots
                .max_jobs
                .is_some_and(|m| state.slots.received == m);
        let entry = &mut state.entries[index];
        entry.request_answered();
        let name = entry.name.clone();
        let events = job_events(&shared, &name);
        let journal = shared.options.journal.as_ref().and_then(|journal| {
            let started = if resumable(&entry.config, &job) {
                let resume = crate::journal::ResumeRecord {
                    runner: short_token(&entry.config.token),
                    concurrent_id: slot.concurrent_id,
                    concurrent_project_id: slot.concurrent_project_id,
                    received_unix_ms: unix_ms(),
                };
                journal.start_resumable(&entry.config.url, &job, resume)
            } else {
                journal.start(&entry.config.url, job_id, &job.token)
            };
            match started {
                Ok(record) => Some(Arc::new(record)),
                Err(error) => {
                    shared.emit(PollEvent::JournalFailed {
                        runner: name.clone(),
                        job_id,
                        error: format!("{}: {error}", journal.dir().display()),
                    });
                    None
                }
            }
        });
        if let Some(record) = &journal {
            state.records.insert(job_id, Arc::clone(record));
        }
        let entry = &state.entries[index];
        let cx = job_context(&shared, entry, &slot, stop, events, lease, journal);
        (cx, name, slot, stopped_taking)
    };
    shared.changed();
    shared.emit(PollEvent::JobReceived {
        runner: name,
        job_id,
        job_name: job.job_info.name.clone(),
        concurrent_id: slot.concurrent_id,
    });
    if stopped_taking {
        let (running, requesting) = {
            let state = shared.lock();
            (state.slots.running, state.slots.requesting)
        };
        shared.emit(PollEvent::StopTakingJobs {
            running,
            requesting,
        });
    }
    let journal = cx.journal.clone();
    let report = run_job(job, cx).await;
    job_ended(&shared, index, job_id, journal, Some(report));
}
