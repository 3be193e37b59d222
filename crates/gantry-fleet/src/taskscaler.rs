//! The taskscaler (spec `fleet.md` §4): turns jobs into instance slots and keeps the
//! group the right size.
//!
//! * Each instance offers `capacity_per_instance` **slots**; a job holds one (an
//!   [`Acquisition`]) while it runs. [`Taskscaler::acquire`] picks the first instance in
//!   creation order that is running, ready, healthy, not being removed and has a free
//!   slot and uses left, and takes its lowest free slot; otherwise the job waits as
//!   **pending demand** until a slot appears or `instance_acquire_timeout` passes.
//! * Before asking the coordinator for a job the runner takes a [`Reservation`]
//!   ([`Taskscaler::reserve`]). In preemptive mode it needs a free slot on a ready
//!   instance (so no job is asked for while nothing is idle); otherwise it needs only
//!   that the group could still grow to hold the job.
//! * A background task polls the plugin's `Update` (every `update_interval`, every
//!   `update_interval_when_expecting` while something is in flight) and after each
//!   change decides (`Core::plan`):
//!
//! ```text
//! C        = capacity_per_instance
//! demand   = acquired + pending                       (slots)
//! required = demand + idle_target                     (idle_target from the active policy)
//! want     = ceil((required + unavailable) / C)       (unavailable: free slots no job can get)
//! want     = min(want, max_instances − instances being deleted, provider max_size)
//! increase = want − (instances creating or running + increases not yet listed)
//! ```
//!
//! Scale-down removes instances oldest first, only ones with no job whose idle time
//! (since their last job, or since they became ready) reached `idle_time`, while more
//! instances exist than `ceil((required + reserved + unavailable) / C)`. Removed
//! whatever the numbers say: an instance whose uses reached `max_use_count` (after its
//! last job), one with `failure_threshold` consecutive connection failures (after its
//! last job), one whose readiness check failed, one the plugin reports `timeout`, and
//! every instance found at start (no state storage: a used instance could otherwise be
//! handed out again).
//!
//! **Choices where GitLab's behaviour is unconfirmed** (spec §4.4, §4.5): reservations
//! do not count as demand for scale-up (a long poll does not create an instance; the
//! job it brings does) but do hold capacity against scale-down; a deletion the next
//! `Update` shows had no effect is asked again after `deletion_retry_interval`.
//! Policies' `periods` are read on the wall clock of the policy's `timezone` (default: the
//! host's, as gitlab-runner's), by `gantry-cron`, the cron of pipeline schedules too.
//!
//! In the code: `Core` is the pure bookkeeping — `plan` (the rule above and the removals),
//! `take_slot`, `try_reserve`, `reconcile` (an `Update` listing), `restore` (adopting what
//! the `state_storage` file lists), `Bucket` (`scale_throttle`) — tested without clock or
//! plugin; readiness checks are `ReadyCheck`s. `Reservation` and `Acquisition` give their
//! capacity back on drop; `Acquisition::lost` completes when the instance vanishes.

pub use gantry_cron as cron;

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::provider::{
    ConnectInfo, ConnectorConfig, Instance, InstanceGroup, ProviderError, ProviderInfo, State,
};
use cron::Cron;

/// How long `Init` may take (GitLab Runner's budget for creating a scaler).
pub const INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// One `[[runners.autoscaler.policy]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// When the policy applies (empty: always).
    pub periods: Vec<Cron>,
    /// The zone whose wall clock `periods` are read on.
    pub timezone: cron::TimeZone,
    /// Free slots to keep ready.
    pub idle_count: u32,
    /// How long an instance may stay idle before it can be removed.
    pub idle_time: Duration,
    /// Extra idle slots as a fraction of the slots in use.
    pub scale_factor: f64,
    /// Upper bound of the scale-factor result (0: none).
    pub scale_factor_limit: u32,
    /// Ask for jobs only while a slot is free (default: `idle_count > 0`).
    pub preemptive_mode: Option<bool>,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            periods: Vec::new(),
            timezone: cron::TimeZone::UTC,
            idle_count: 0,
            idle_time: Duration::ZERO,
            scale_factor: 0.0,
            scale_factor_limit: 0,
            preemptive_mode: None,
        }
    }
}

impl Policy {
    /// Whether the policy asks for jobs only while a slot is free.
    pub fn preemptive(&self) -> bool {
        self.preemptive_mode.unwrap_or(self.idle_count > 0)
    }

    /// The idle slots to keep while `in_use` slots are acquired.
    pub fn idle_target(&self, in_use: u32) -> u32 {
        if self.scale_factor <= 0.0 {
            return self.idle_count;
        }
        let scaled = (f64::from(in_use) * self.scale_factor).ceil();
        let mut target = if scaled >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            scaled as u32
        };
        if self.scale_factor_limit > 0 {
            target = target.min(self.scale_factor_limit);
        }
        target.max(self.idle_count)
    }

    fn active_at(&self, unix_seconds: i64) -> bool {
        self.periods.is_empty()
            || self
                .periods
                .iter()
                .any(|p| p.matches(unix_seconds.saturating_mul(1000), &self.timezone))
    }
}

/// The taskscaler's settings (`[runners.autoscaler]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalerConfig {
    /// Concurrent jobs per instance (at least 1).
    pub capacity_per_instance: u32,
    /// Jobs an instance may serve before it is removed (0: unlimited).
    pub max_use_count: u32,
    /// The most instances in any state (0: unlimited).
    pub max_instances: u32,
    /// Delete every instance when the scaler shuts down.
    pub delete_instances_on_shutdown: bool,
    /// How long a job waits for a slot.
    pub instance_acquire_timeout: Duration,
    /// `Update` cadence.
    pub update_interval: Duration,
    /// `Update` cadence while instances are in transition or jobs wait.
    pub update_interval_when_expecting: Duration,
    /// When to ask again for a deletion that had no effect.
    pub deletion_retry_interval: Duration,
    /// Poll interval while deleting at shutdown.
    pub shutdown_deletion_interval: Duration,
    /// Polls to confirm the deletions at shutdown.
    pub shutdown_deletion_retries: u32,
    /// Consecutive connection failures before an instance is replaced.
    pub failure_threshold: u32,
    /// The policies; the last one whose periods match applies.
    pub policies: Vec<Policy>,
    /// How fast new instances may be asked for.
    pub scale_throttle: ScaleThrottle,
    /// Where instance records are kept across restarts (`None`: instances found at start
    /// are removed).
    pub state_storage: Option<StateStorage>,
}

/// `[runners.autoscaler.state_storage]`: the scaler's instance records on disk, so a
/// restarted runner adopts its instances instead of deleting them (spec §4.8), and
/// restores the acquisitions of the jobs it takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStorage {
    /// The file (`<dir>/<short token>.json`); written atomically, mode 0600.
    pub file: std::path::PathBuf,
    /// Keep an instance that held jobs when the runner stopped (default: remove it; its
    /// jobs cannot be resumed and it may be in any state). Acquisitions listed in
    /// `resume` are not such jobs: they go on.
    pub keep_instance_with_acquisitions: bool,
    /// The keys ([`Acquisition::keep_as`]) of the acquisitions a restarted runner goes
    /// on with: restored at start, held for [`Taskscaler::resume`].
    pub resume: Vec<String>,
}

/// One instance as the state file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StoredInstance {
    id: String,
    uses: u32,
    acquired: u32,
    /// The acquisitions that have a key, with their slots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    acquisitions: Vec<StoredAcquisition>,
}

/// A keyed acquisition as the state file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StoredAcquisition {
    key: String,
    slot: usize,
}

/// The state file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StoredState {
    instances: Vec<StoredInstance>,
}

impl StoredState {
    fn read(file: &std::path::Path) -> Result<Self, String> {
        match std::fs::read(file) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| {
                format!(
                    "state file {} is not the taskscaler's JSON ({error}); move it away to start without it",
                    file.display()
                )
            }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(error) => Err(format!("read the state file {}: {error}", file.display())),
        }
    }

    fn write(&self, file: &std::path::Path) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let failed = |what: &str, error: std::io::Error| {
            format!("{what} the state file {}: {error}", file.display())
        };
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| failed("make the directory of", e))?;
        }
        let json = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        let temp = file.with_extension("json.tmp");
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .map_err(|e| failed("write", e))?;
        out.write_all(&json).map_err(|e| failed("write", e))?;
        out.sync_all().map_err(|e| failed("sync", e))?;
        std::fs::rename(&temp, file).map_err(|e| failed("replace", e))
    }
}

/// `[runners.autoscaler.scale_throttle]`: a token bucket on new instances.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleThrottle {
    /// New instances per second (`None`: unlimited).
    pub limit: Option<f64>,
    /// The most asked for at once.
    pub burst: u32,
}

impl ScaleThrottle {
    /// gitlab-runner's defaults: 100 per second, a burst of `max_instances` (else the
    /// limit).
    pub fn default_for(max_instances: u32) -> Self {
        Self {
            limit: Some(100.0),
            burst: if max_instances > 0 {
                max_instances
            } else {
                100
            },
        }
    }
}

/// The bucket's state.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Option<Instant>,
}

impl Bucket {
    /// Takes up to `wanted` tokens at `now` (refilled at `limit` per second up to
    /// `burst`); returns how many were taken.
    fn take(&mut self, throttle: ScaleThrottle, wanted: u32, now: Instant) -> u32 {
        let Some(limit) = throttle.limit else {
            return wanted;
        };
        let burst = f64::from(throttle.burst.max(1));
        self.tokens = match self.at {
            None => burst,
            Some(at) => {
                (self.tokens + now.saturating_duration_since(at).as_secs_f64() * limit).min(burst)
            }
        };
        self.at = Some(now);
        let granted = (self.tokens.floor() as u32).min(wanted);
        self.tokens -= f64::from(granted);
        granted
    }
}

impl Default for ScalerConfig {
    fn default() -> Self {
        Self {
            capacity_per_instance: 1,
            max_use_count: 0,
            max_instances: 0,
            delete_instances_on_shutdown: false,
            instance_acquire_timeout: Duration::from_secs(15 * 60),
            update_interval: Duration::from_secs(60),
            update_interval_when_expecting: Duration::from_secs(2),
            deletion_retry_interval: Duration::from_secs(60),
            shutdown_deletion_interval: Duration::from_secs(10),
            shutdown_deletion_retries: 3,
            failure_threshold: 3,
            policies: Vec::new(),
            scale_throttle: ScaleThrottle::default_for(0),
            state_storage: None,
        }
    }
}

impl ScalerConfig {
    /// The policy in force at `unix_seconds`: the last matching one, else the defaults.
    pub fn policy_at(&self, unix_seconds: i64) -> Policy {
        self.policies
            .iter()
            .rev()
            .find(|p| p.active_at(unix_seconds))
            .cloned()
            .unwrap_or_default()
    }
}

/// A readiness check run once on every new running instance (the runner's
/// `instance_ready_command` over SSH); an error removes the instance.
pub type ReadyCheck = Arc<
    dyn Fn(ConnectInfo) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send + Sync,
>;

/// Where the scaler reports what it does.
pub type EventSink = Arc<dyn Fn(ScalerEvent) + Send + Sync>;

/// Something the scaler did or saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalerEvent {
    /// Whether it is a problem.
    pub warning: bool,
    /// What happened (`scaling up by 2 instances`, `instance dummy-1 removed: idle_time`).
    pub message: String,
}

/// Why an instance is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Idle longer than `idle_time` while not needed.
    IdleTime,
    /// Served `max_use_count` jobs.
    MaxUseCount,
    /// `failure_threshold` connection failures.
    Unhealthy,
    /// The readiness check failed.
    ReadyCommand,
    /// Found at start, not made by this scaler.
    Preexisting,
    /// The plugin gave up creating it.
    Timeout,
    /// The scaler shut down with `delete_instances_on_shutdown`.
    Shutdown,
    /// Restored from the state file while it held jobs (they cannot be resumed).
    RestoredAcquisitions,
}

impl Removal {
    /// The reason's name (the metrics label of spec §4.10).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IdleTime => "idle_time",
            Self::MaxUseCount => "max_use_count",
            Self::Unhealthy => "unhealthy",
            Self::ReadyCommand => "ready_command",
            Self::Preexisting => "preexisting",
            Self::Timeout => "timeout",
            Self::Shutdown => "shutdown",
            Self::RestoredAcquisitions => "restored_acquisitions",
        }
    }
}

/// A taskscaler failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScalerError {
    /// The plugin's `Init` failed or took too long.
    #[error("the fleeting plugin did not initialize: {0}")]
    Init(String),
    /// No capacity for another job now.
    #[error("no free capacity in the instance group")]
    NoCapacity,
    /// No slot within `instance_acquire_timeout`.
    #[error(
        "unable to acquire an instance within the configured timeout of {0:?} (raise [runners.autoscaler] instance_acquire_timeout, max_instances or capacity_per_instance)"
    )]
    AcquireTimeout(Duration),
    /// The scaler is shutting down.
    #[error("the instance group is shutting down")]
    ShuttingDown,
    /// An acquisition of a runner that stopped cannot be restored ([`Taskscaler::resume`]).
    #[error("{0}")]
    NotRestored(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Readiness {
    /// Not running yet.
    Waiting,
    /// The readiness check is running.
    Checking,
    Ready,
    Failed(String),
}

#[derive(Debug)]
struct Record {
    id: String,
    state: State,
    readiness: Readiness,
    slots: Vec<bool>,
    /// The key of each slot's acquisition, when it has one ([`Acquisition::keep_as`]).
    keys: Vec<Option<String>>,
    /// Held jobs of a runner that stopped which nobody resumes: no new jobs, removed
    /// once idle.
    drain: bool,
    uses: u32,
    idle_since: Instant,
    removing: Option<(Removal, Instant)>,
    failures: u32,
    lost: watch::Sender<Option<String>>,
}

impl Record {
    fn new(id: String, state: State, capacity: u32, now: Instant) -> Self {
        Self {
            id,
            state,
            readiness: Readiness::Waiting,
            slots: vec![false; capacity as usize],
            keys: vec![None; capacity as usize],
            drain: false,
            uses: 0,
            idle_since: now,
            removing: None,
            failures: 0,
            lost: watch::channel(None).0,
        }
    }

    fn acquired(&self) -> u32 {
        self.slots.iter().filter(|s| **s).count() as u32
    }

    /// Counts toward the group's size (not being removed, not failed).
    fn active(&self) -> bool {
        self.removing.is_none()
            && matches!(self.state, State::Creating | State::Running)
            && !matches!(self.readiness, Readiness::Failed(_))
    }
}

/// The scaler's bookkeeping: pure data and decisions, so they can be tested without a
/// clock or a plugin.
#[derive(Debug)]
struct Core {
    config: ScalerConfig,
    max_size: u64,
    records: Vec<Record>,
    reserved: u32,
    pending: u32,
    /// Instances `Increase` accepted that no `Update` has listed yet.
    requested: u32,
    shutting_down: bool,
    /// `scale_throttle`'s tokens.
    bucket: Bucket,
    /// Acquisitions restored from the state file, not yet resumed: key → (instance,
    /// slot).
    restored: std::collections::HashMap<String, (String, usize)>,
    /// Acquisitions to resume that could not be restored: key → why.
    unrestorable: std::collections::HashMap<String, String>,
}

/// What a tick decided.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    increase: u32,
    remove: Vec<(String, Removal)>,
}

impl Core {
    fn new(config: ScalerConfig, max_size: u64) -> Self {
        Self {
            config,
            max_size,
            records: Vec::new(),
            reserved: 0,
            pending: 0,
            requested: 0,
            shutting_down: false,
            bucket: Bucket {
                tokens: 0.0,
                at: None,
            },
            restored: std::collections::HashMap::new(),
            unrestorable: std::collections::HashMap::new(),
        }
    }

    fn capacity(&self) -> u32 {
        self.config.capacity_per_instance.max(1)
    }

    fn usable(&self, record: &Record) -> bool {
        record.state == State::Running
            && record.readiness == Readiness::Ready
            && record.removing.is_none()
            && !record.drain
            && record.failures < self.config.failure_threshold.max(1)
    }

    /// Free slots a job could get on `record` now.
    fn free_slots(&self, record: &Record) -> u32 {
        if !self.usable(record) {
            return 0;
        }
        let free = self.capacity().saturating_sub(record.acquired());
        if self.config.max_use_count == 0 {
            free
        } else {
            free.min(self.config.max_use_count.saturating_sub(record.uses))
        }
    }

    fn acquired(&self) -> u32 {
        self.records.iter().map(Record::acquired).sum()
    }

    /// Applies an `Update` listing. Returns the ids of instances that vanished while
    /// holding jobs. The first listing's instances are all pre-existing.
    fn reconcile(&mut self, listing: Vec<Instance>, now: Instant, first: bool) -> Vec<String> {
        let capacity = self.capacity();
        let mut seen = HashSet::new();
        for instance in listing {
            if instance.state == State::Deleted || !seen.insert(instance.id.clone()) {
                continue;
            }
            match self.records.iter_mut().find(|r| r.id == instance.id) {
                Some(record) => record.state = instance.state,
                None => {
                    let mut record = Record::new(instance.id, instance.state, capacity, now);
                    if first {
                        record.removing = Some((Removal::Preexisting, now));
                    }
                    self.records.push(record);
                }
            }
        }
        self.requested = 0;
        let mut lost = Vec::new();
        self.records.retain(|record| {
            if seen.contains(&record.id) {
                return true;
            }
            if record.acquired() > 0 {
                lost.push(record.id.clone());
                record
                    .lost
                    .send_replace(Some(format!("instance {} unexpectedly removed", record.id)));
            }
            false
        });
        lost
    }

    /// Decides the next scaling step at `now` under `policy`, and marks the instances
    /// it removes.
    fn plan(&mut self, now: Instant, policy: &Policy) -> Plan {
        let c = self.capacity();
        let threshold = self.config.failure_threshold.max(1);
        let max_use = self.config.max_use_count;
        let mut plan = Plan::default();

        // Removals whatever the numbers say.
        for record in &mut self.records {
            if record.removing.is_some() {
                continue;
            }
            let idle = record.acquired() == 0;
            let reason = match (&record.readiness, record.state) {
                (_, State::Timeout) => Some(Removal::Timeout),
                (Readiness::Failed(_), _) => Some(Removal::ReadyCommand),
                _ if idle && max_use > 0 && record.uses >= max_use => Some(Removal::MaxUseCount),
                _ if idle && record.failures >= threshold => Some(Removal::Unhealthy),
                _ if idle && record.drain => Some(Removal::RestoredAcquisitions),
                _ => None,
            };
            if let Some(reason) = reason {
                record.removing = Some((reason, now));
                plan.remove.push((record.id.clone(), reason));
            }
        }

        let acquired = self.acquired();
        let demand = acquired + self.pending;
        let idle_target = policy.idle_target(acquired);
        let mut unavailable = 0u32;
        let mut active = 0u32;
        let mut deleting = 0u32;
        for record in &self.records {
            if record.active() {
                active += 1;
                let free = c.saturating_sub(record.acquired());
                let usable = if record.failures >= threshold || record.drain {
                    0
                } else if max_use > 0 {
                    free.min(max_use.saturating_sub(record.uses))
                } else {
                    free
                };
                unavailable += free - usable;
            } else if record.removing.is_some() || record.state == State::Deleting {
                deleting += 1;
            }
        }
        let instances = active + self.requested;
        let slots_to_instances = |slots: u32| slots.div_ceil(c);
        let mut want = slots_to_instances(
            demand
                .saturating_add(idle_target)
                .saturating_add(unavailable),
        );
        if self.config.max_instances > 0 {
            want = want.min(self.config.max_instances.saturating_sub(deleting));
        }
        let provider_max = u32::try_from(self.max_size).unwrap_or(u32::MAX);
        want = want.min(provider_max.saturating_sub(deleting));
        let wanted = want.saturating_sub(instances);
        plan.increase = if wanted == 0 {
            0
        } else {
            self.bucket.take(self.config.scale_throttle, wanted, now)
        };

        // Scale-down: oldest first, idle long enough, while more than needed exist
        // (reservations hold their capacity).
        let keep = slots_to_instances(
            demand
                .saturating_add(idle_target)
                .saturating_add(self.reserved)
                .saturating_add(unavailable),
        );
        let mut excess = instances.saturating_sub(keep.max(want));
        let idle_time = policy.idle_time;
        for record in &mut self.records {
            if excess == 0 {
                break;
            }
            let eligible = record.removing.is_none()
                && record.state == State::Running
                && record.readiness == Readiness::Ready
                && record.acquired() == 0
                && now.saturating_duration_since(record.idle_since) >= idle_time;
            if eligible {
                record.removing = Some((Removal::IdleTime, now));
                plan.remove.push((record.id.clone(), Removal::IdleTime));
                excess -= 1;
            }
        }
        plan
    }

    /// Takes a free slot for a job: the first usable instance in creation order, its
    /// lowest free slot.
    fn take_slot(&mut self) -> Option<(String, usize, watch::Receiver<Option<String>>)> {
        let index = self.records.iter().position(|r| self.free_slots(r) > 0)?;
        let record = &mut self.records[index];
        let slot = record.slots.iter().position(|s| !*s)?;
        record.slots[slot] = true;
        record.keys[slot] = None;
        record.uses += 1;
        Some((record.id.clone(), slot, record.lost.subscribe()))
    }

    fn release(&mut self, id: &str, slot: usize, now: Instant) {
        if let Some(record) = self.records.iter_mut().find(|r| r.id == id) {
            if let Some(taken) = record.slots.get_mut(slot) {
                *taken = false;
            }
            if let Some(key) = record.keys.get_mut(slot) {
                *key = None;
            }
            record.idle_since = now;
        }
    }

    fn try_reserve(&mut self, policy: &Policy) -> bool {
        if self.shutting_down {
            return false;
        }
        let possible = if policy.preemptive() {
            let free: u32 = self.records.iter().map(|r| self.free_slots(r)).sum();
            free > self.reserved
        } else {
            let instances = match (self.config.max_instances, self.max_size) {
                (0, max) => max,
                (limit, max) => u64::from(limit).min(max),
            };
            let most = instances.saturating_mul(u64::from(self.capacity()));
            u64::from(self.reserved + self.acquired() + self.pending) < most
        };
        if possible {
            self.reserved += 1;
        }
        possible
    }

    /// What the state file keeps: every instance not being removed.
    fn stored(&self) -> StoredState {
        StoredState {
            instances: self
                .records
                .iter()
                .filter(|r| r.removing.is_none())
                .map(|r| StoredInstance {
                    id: r.id.clone(),
                    uses: r.uses,
                    acquired: r.acquired(),
                    acquisitions: r
                        .slots
                        .iter()
                        .zip(&r.keys)
                        .enumerate()
                        .filter_map(|(slot, (taken, key))| {
                            Some(StoredAcquisition {
                                key: key.clone().filter(|_| *taken)?,
                                slot,
                            })
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Applies the state file to the first listing: its instances are adopted (their
    /// uses kept; ready if running) instead of removed, except those that held jobs
    /// nobody resumes (without `keep_with_acquisitions`). The acquisitions whose keys
    /// are in `resume` are restored on their running instances, held for
    /// [`Taskscaler::resume`]; an instance that also held other jobs then takes no new
    /// ones and is removed once idle.
    fn restore(
        &mut self,
        stored: &StoredState,
        (keep_with_acquisitions, resume): (bool, &[String]),
        now: Instant,
    ) {
        for saved in &stored.instances {
            let resumed: Vec<&StoredAcquisition> = saved
                .acquisitions
                .iter()
                .filter(|a| resume.contains(&a.key))
                .collect();
            let Some(record) = self.records.iter_mut().find(|r| r.id == saved.id) else {
                for acquisition in resumed {
                    self.unrestorable.insert(
                        acquisition.key.clone(),
                        format!(
                            "instance {} (in the taskscaler's state file) is no longer in the instance group",
                            saved.id
                        ),
                    );
                }
                continue;
            };
            let running = record.state == State::Running;
            let resumed: Vec<&StoredAcquisition> = if running {
                resumed
            } else {
                for acquisition in resumed {
                    self.unrestorable.insert(
                        acquisition.key.clone(),
                        format!("instance {} is {:?}, not running", saved.id, record.state),
                    );
                }
                Vec::new()
            };
            let stale = saved.acquired.saturating_sub(resumed.len() as u32) > 0;
            if stale && resumed.is_empty() && !keep_with_acquisitions {
                record.removing = Some((Removal::RestoredAcquisitions, now));
                continue;
            }
            record.removing = None;
            record.uses = saved.uses;
            if running {
                record.readiness = Readiness::Ready;
            }
            record.drain = stale && !keep_with_acquisitions;
            for acquisition in resumed {
                let slot = Some(acquisition.slot)
                    .filter(|s| record.slots.get(*s) == Some(&false))
                    .or_else(|| record.slots.iter().position(|taken| !*taken));
                let Some(slot) = slot else {
                    self.unrestorable.insert(
                        acquisition.key.clone(),
                        format!("instance {} has no free slot left for it", saved.id),
                    );
                    continue;
                };
                record.slots[slot] = true;
                record.keys[slot] = Some(acquisition.key.clone());
                self.restored
                    .insert(acquisition.key.clone(), (record.id.clone(), slot));
            }
        }
        for key in resume {
            if !self.restored.contains_key(key) && !self.unrestorable.contains_key(key) {
                self.unrestorable.insert(
                    key.clone(),
                    "the taskscaler's state file lists no acquisition of it".to_owned(),
                );
            }
        }
    }

    /// Whether the loop should poll at the fast cadence.
    fn expecting(&self) -> bool {
        self.pending > 0
            || self.requested > 0
            || self.records.iter().any(|r| {
                r.state.is_transitional()
                    || r.removing.is_some()
                    || matches!(r.readiness, Readiness::Checking)
                    || (r.state == State::Running && r.readiness == Readiness::Waiting)
            })
    }
}

struct Shared {
    group: Arc<dyn InstanceGroup>,
    core: Mutex<Core>,
    /// Something changed that the loop should act on.
    wake: Notify,
    /// A slot may have become free.
    slots_changed: Notify,
    shutdown: watch::Sender<bool>,
    events: EventSink,
    ready: Option<ReadyCheck>,
    /// The state file's last content (written only when it changes).
    persisted: Mutex<Option<StoredState>>,
}

impl Shared {
    /// Writes the state file when state storage is on and the records changed (not
    /// after shutdown: the file keeps what the scaler left).
    fn persist(&self) {
        self.write_state(false);
    }

    fn write_state(&self, at_shutdown: bool) {
        let (file, state) = {
            let core = self.lock();
            let Some(storage) = core
                .config
                .state_storage
                .as_ref()
                .filter(|_| at_shutdown || !core.shutting_down)
            else {
                return;
            };
            (storage.file.clone(), core.stored())
        };
        let mut persisted = self
            .persisted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if persisted.as_ref() == Some(&state) {
            return;
        }
        match state.write(&file) {
            Ok(()) => *persisted = Some(state),
            Err(error) => self.warn(error),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn info(&self, message: String) {
        (self.events)(ScalerEvent {
            warning: false,
            message,
        });
    }

    fn warn(&self, message: String) {
        (self.events)(ScalerEvent {
            warning: true,
            message,
        });
    }

    fn policy(&self, core: &Core) -> Policy {
        core.config.policy_at(unix_now())
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A state of one instance, for status output and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceStatus {
    /// Its id.
    pub id: String,
    /// What the plugin last said.
    pub state: State,
    /// Whether jobs can get it.
    pub ready: bool,
    /// Jobs on it now.
    pub acquired: u32,
    /// Jobs it has served.
    pub uses: u32,
    /// Why it is being removed.
    pub removing: Option<Removal>,
}

/// The scaler's numbers at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Instances in creation order.
    pub instances: Vec<InstanceStatus>,
    /// Reservations held.
    pub reserved: u32,
    /// Jobs waiting for a slot.
    pub pending: u32,
}

/// The taskscaler of one `[[runners]]` entry.
pub struct Taskscaler {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    info: ProviderInfo,
}

impl Taskscaler {
    /// Initializes `group` with `plugin_config` and `settings`, removes the instances
    /// it already had (no state storage) and starts scaling.
    pub async fn start(
        group: Arc<dyn InstanceGroup>,
        config: ScalerConfig,
        plugin_config: &serde_json::Value,
        settings: ConnectorConfig,
        ready: Option<ReadyCheck>,
        events: EventSink,
    ) -> Result<Self, ScalerError> {
        let info = tokio::time::timeout(INIT_TIMEOUT, group.init(plugin_config, settings))
            .await
            .map_err(|_| ScalerError::Init(format!("Init took longer than {INIT_TIMEOUT:?}")))?
            .map_err(|error| ScalerError::Init(error.to_string()))?;
        let listing = group
            .update()
            .await
            .map_err(|error| ScalerError::Init(format!("the first Update failed: {error}")))?;
        let now = Instant::now();
        let mut core = Core::new(config, info.max_size);
        core.reconcile(listing, now, true);
        if let Some(storage) = core.config.state_storage.clone() {
            let stored = StoredState::read(&storage.file).map_err(ScalerError::Init)?;
            core.restore(
                &stored,
                (storage.keep_instance_with_acquisitions, &storage.resume),
                now,
            );
        }
        let adopted = core.records.iter().filter(|r| r.removing.is_none()).count();
        let preexisting: Vec<(String, Removal)> = core
            .records
            .iter()
            .filter_map(|r| r.removing.map(|(reason, _)| (r.id.clone(), reason)))
            .collect();
        let shared = Arc::new(Shared {
            group,
            core: Mutex::new(core),
            wake: Notify::new(),
            slots_changed: Notify::new(),
            shutdown: watch::channel(false).0,
            events,
            ready,
            persisted: Mutex::new(None),
        });
        shared.info(format!(
            "instance group {} ready (plugin {}, max_size {})",
            info.id, info.version, info.max_size
        ));
        if adopted > 0 {
            shared.info(format!("adopted {adopted} instance(s) from the state file"));
        }
        if !preexisting.is_empty() {
            remove(&shared, preexisting).await;
        }
        shared.persist();
        let task = tokio::spawn(run_loop(Arc::clone(&shared)));
        Ok(Self { shared, task, info })
    }

    /// What the plugin said at `Init`.
    pub fn provider(&self) -> &ProviderInfo {
        &self.info
    }

    /// Reserves capacity for a job about to be asked for; `NoCapacity` when there is
    /// none (preemptive mode: no free ready slot beyond the reservations held).
    pub fn reserve(&self) -> Result<Reservation, ScalerError> {
        let mut core = self.shared.lock();
        let policy = self.shared.policy(&core);
        if core.try_reserve(&policy) {
            Ok(Reservation {
                shared: Arc::clone(&self.shared),
                held: true,
            })
        } else if core.shutting_down {
            Err(ScalerError::ShuttingDown)
        } else {
            Err(ScalerError::NoCapacity)
        }
    }

    /// Acquires a slot for a job without a reservation.
    pub async fn acquire(&self) -> Result<Acquisition, ScalerError> {
        acquire(&self.shared).await
    }

    /// The acquisition kept as `key` ([`Acquisition::keep_as`]) by a runner that
    /// stopped, restored from the state file at start ([`StateStorage::resume`]): the
    /// same instance and slot, counted once. `NotRestored` says why not: state storage
    /// is off, the instance is gone or not running, or the file does not list it.
    pub fn resume(&self, key: &str) -> Result<Acquisition, ScalerError> {
        let mut core = self.shared.lock();
        if core.config.state_storage.is_none() {
            return Err(ScalerError::NotRestored(
                "the taskscaler keeps no state ([runners.autoscaler.state_storage] is not enabled), so the instances a restarted runner finds are removed".to_owned(),
            ));
        }
        if let Some(reason) = core.unrestorable.remove(key) {
            return Err(ScalerError::NotRestored(reason));
        }
        let Some((id, slot)) = core.restored.remove(key) else {
            return Err(ScalerError::NotRestored(format!(
                "the acquisition {key} was not restored when the runner started"
            )));
        };
        let Some(record) = core.records.iter().find(|r| r.id == id) else {
            return Err(ScalerError::NotRestored(format!(
                "instance {id} left the instance group since the runner started"
            )));
        };
        let lost = record.lost.subscribe();
        drop(core);
        Ok(Acquisition {
            shared: Arc::clone(&self.shared),
            id,
            slot,
            lost,
            released: false,
            handed_over: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The numbers now.
    pub fn status(&self) -> Status {
        let core = self.shared.lock();
        Status {
            instances: core
                .records
                .iter()
                .map(|r| InstanceStatus {
                    id: r.id.clone(),
                    state: r.state,
                    ready: r.readiness == Readiness::Ready,
                    acquired: r.acquired(),
                    uses: r.uses,
                    removing: r.removing.map(|(reason, _)| reason),
                })
                .collect(),
            reserved: core.reserved,
            pending: core.pending,
        }
    }

    /// Stops scaling (carrying out the removals due now, such as an instance whose last
    /// use just ended); with `delete_instances_on_shutdown` deletes every instance and
    /// waits (per `shutdown_deletion_interval`/`_retries`) for them to go; then calls
    /// the plugin's `Shutdown`. Returns the group (to stop a plugin process).
    pub async fn shutdown(self) -> Arc<dyn InstanceGroup> {
        let shared = self.shared;
        shared.lock().shutting_down = true;
        shared.shutdown.send_replace(true);
        shared.slots_changed.notify_waiters();
        let _ = self.task.await;
        // Removals the loop had no tick left for (a used-up instance released just
        // now must not serve again after a restart); no scaling up any more.
        let removals = {
            let mut core = shared.lock();
            let policy = shared.policy(&core);
            core.plan(Instant::now(), &policy).remove
        };
        if !removals.is_empty() {
            remove(&shared, removals).await;
        }
        shared.write_state(true);
        let (delete, interval, retries) = {
            let core = shared.lock();
            (
                core.config.delete_instances_on_shutdown,
                core.config.shutdown_deletion_interval,
                core.config.shutdown_deletion_retries,
            )
        };
        if delete {
            for attempt in 0..=retries {
                let ids: Vec<String> = shared.lock().records.iter().map(|r| r.id.clone()).collect();
                if ids.is_empty() {
                    break;
                }
                if attempt == retries {
                    shared.warn(format!(
                        "instances still present after shutdown deletion: {}",
                        ids.join(", ")
                    ));
                    break;
                }
                let partial = shared.group.decrease(&ids).await;
                if let Some(error) = partial.error {
                    shared.warn(format!("deleting instances at shutdown: {error}"));
                }
                tokio::time::sleep(interval).await;
                match shared.group.update().await {
                    Ok(listing) => {
                        shared.lock().reconcile(listing, Instant::now(), false);
                    }
                    Err(error) => shared.warn(format!("Update during shutdown: {error}")),
                }
            }
        }
        if let Err(error) = shared.group.shutdown().await {
            shared.warn(format!("the plugin's Shutdown failed: {error}"));
        }
        Arc::clone(&shared.group)
    }
}

/// Capacity promised to a job about to be asked for. Dropping it gives it back.
pub struct Reservation {
    shared: Arc<Shared>,
    held: bool,
}

impl Reservation {
    /// Turns the reservation into a slot for the job that arrived.
    pub async fn acquire(mut self) -> Result<Acquisition, ScalerError> {
        self.give_back();
        acquire(&self.shared).await
    }

    fn give_back(&mut self) {
        if std::mem::take(&mut self.held) {
            let mut core = self.shared.lock();
            core.reserved = core.reserved.saturating_sub(1);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.give_back();
        self.shared.wake.notify_one();
    }
}

async fn acquire(shared: &Arc<Shared>) -> Result<Acquisition, ScalerError> {
    let timeout = shared.lock().config.instance_acquire_timeout;
    let deadline = Instant::now() + timeout;
    let mut shutdown = shared.shutdown.subscribe();
    let mut counted = false;
    let result = loop {
        let notified = shared.slots_changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let mut core = shared.lock();
            if core.shutting_down {
                break Err(ScalerError::ShuttingDown);
            }
            if let Some((id, slot, lost)) = core.take_slot() {
                drop(core);
                shared.persist();
                break Ok(Acquisition {
                    shared: Arc::clone(shared),
                    id,
                    slot,
                    lost,
                    released: false,
                    handed_over: std::sync::atomic::AtomicBool::new(false),
                });
            }
            if !counted {
                core.pending += 1;
                counted = true;
                shared.wake.notify_one();
            }
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => break Err(ScalerError::AcquireTimeout(timeout)),
            _ = shutdown.changed() => {}
        }
    };
    if counted {
        let mut core = shared.lock();
        core.pending = core.pending.saturating_sub(1);
    }
    shared.wake.notify_one();
    result
}

/// A job's slot on an instance. Dropping it releases the slot.
pub struct Acquisition {
    shared: Arc<Shared>,
    id: String,
    slot: usize,
    lost: watch::Receiver<Option<String>>,
    released: bool,
    /// Dropping it keeps the slot ([`Acquisition::hand_over`]).
    handed_over: std::sync::atomic::AtomicBool,
}

impl Acquisition {
    /// The instance's id.
    pub fn instance_id(&self) -> &str {
        &self.id
    }

    /// The slot number on the instance (0-based).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// How to connect to the instance, asked of the plugin now (addresses and
    /// credentials may change).
    pub async fn connect_info(&self) -> Result<ConnectInfo, ProviderError> {
        self.shared.group.connect_info(&self.id).await
    }

    /// Records a failed connection to the instance; at `failure_threshold` in a row it
    /// gets no new jobs and is replaced.
    pub fn report_failure(&self) {
        let mut core = self.shared.lock();
        if let Some(record) = core.records.iter_mut().find(|r| r.id == self.id) {
            record.failures += 1;
        }
        drop(core);
        self.shared.wake.notify_one();
    }

    /// Keeps this acquisition in the state file as `key` (when state storage is on), so
    /// that a restarted runner can [resume](Taskscaler::resume) it; the file is on disk
    /// when this returns.
    pub fn keep_as(&self, key: &str) {
        {
            let mut core = self.shared.lock();
            let slot = self.slot;
            if let Some(record) = core.records.iter_mut().find(|r| r.id == self.id) {
                if let Some(kept) = record.keys.get_mut(slot) {
                    *kept = Some(key.to_owned());
                }
            }
        }
        self.shared.persist();
    }

    /// This runner process hands the job over to the next one: dropping the
    /// acquisition from now on keeps its slot, here and in the state file, for the next
    /// process to [resume](Taskscaler::resume).
    pub fn hand_over(&self) {
        self.handed_over
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Records a working connection (resets the failure count).
    pub fn report_success(&self) {
        let mut core = self.shared.lock();
        if let Some(record) = core.records.iter_mut().find(|r| r.id == self.id) {
            record.failures = 0;
        }
    }

    /// Completes when the instance disappears while this job holds it, with the reason.
    pub async fn lost(&self) -> String {
        let mut lost = self.lost.clone();
        loop {
            if let Some(reason) = lost.borrow_and_update().clone() {
                return reason;
            }
            if lost.changed().await.is_err() {
                // The record is gone without a reason: the scaler dropped it.
                return format!("instance {} is no longer tracked", self.id);
            }
        }
    }
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        if self.handed_over.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        if !std::mem::replace(&mut self.released, true) {
            self.shared
                .lock()
                .release(&self.id, self.slot, Instant::now());
            self.shared.persist();
            self.shared.slots_changed.notify_waiters();
            self.shared.wake.notify_one();
        }
    }
}

/// Marks nothing: asks the plugin to delete `ids` (already marked) and reports it.
async fn remove(shared: &Arc<Shared>, ids: Vec<(String, Removal)>) {
    for (id, reason) in &ids {
        shared.info(format!("removing instance {id}: {}", reason.as_str()));
    }
    let names: Vec<String> = ids.into_iter().map(|(id, _)| id).collect();
    let partial = shared.group.decrease(&names).await;
    if let Some(error) = partial.error {
        shared.warn(format!(
            "deleting {} of {} instances failed: {error}",
            names.len() - partial.done.len(),
            names.len()
        ));
    }
}

async fn run_loop(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut next_update = Instant::now();
    let mut next_heartbeat = Instant::now();
    let mut heartbeats = true;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let now = Instant::now();
        if now >= next_update {
            match shared.group.update().await {
                Ok(listing) => {
                    let lost = shared.lock().reconcile(listing, Instant::now(), false);
                    for id in lost {
                        shared.warn(format!(
                            "instance {id} unexpectedly removed while running jobs"
                        ));
                    }
                }
                Err(error) => shared.warn(format!("Update failed: {error}")),
            }
            let (fast, slow, expecting) = {
                let core = shared.lock();
                (
                    core.config.update_interval_when_expecting,
                    core.config.update_interval,
                    core.expecting(),
                )
            };
            next_update = Instant::now() + if expecting { fast } else { slow };
        }
        if heartbeats && Instant::now() >= next_heartbeat {
            heartbeats = heartbeat_idle(&shared).await;
            next_heartbeat = Instant::now() + shared.lock().config.update_interval;
        }
        check_readiness(&shared);
        tick(&shared).await;
        shared.persist();
        shared.slots_changed.notify_waiters();
        // A tick may have put something in flight: poll soon.
        if shared.lock().expecting() {
            let fast = shared.lock().config.update_interval_when_expecting;
            next_update = next_update.min(Instant::now() + fast);
        }
        tokio::select! {
            () = tokio::time::sleep_until(next_update) => {}
            () = shared.wake.notified() => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// Asks the plugin about every idle ready instance (`Heartbeat`); one it says is
/// unhealthy is replaced. Returns false when the plugin does not support heartbeats.
async fn heartbeat_idle(shared: &Arc<Shared>) -> bool {
    let idle: Vec<String> = shared
        .lock()
        .records
        .iter()
        .filter(|r| {
            r.state == State::Running
                && r.readiness == Readiness::Ready
                && r.removing.is_none()
                && r.acquired() == 0
        })
        .map(|r| r.id.clone())
        .collect();
    for id in idle {
        match shared.group.heartbeat(&id).await {
            Ok(()) => {}
            Err(ProviderError::NotSupported(_)) => return false,
            Err(ProviderError::Unhealthy(reason)) => {
                shared.warn(format!("instance {id} failed its heartbeat: {reason}"));
                let mut core = shared.lock();
                let threshold = core.config.failure_threshold.max(1);
                if let Some(record) = core.records.iter_mut().find(|r| r.id == id) {
                    record.failures = record.failures.max(threshold);
                }
            }
            Err(error) => shared.warn(format!("Heartbeat of instance {id} failed: {error}")),
        }
    }
    shared.wake.notify_one();
    true
}

/// Starts the readiness check of every instance that is newly running.
fn check_readiness(shared: &Arc<Shared>) {
    let started: Vec<String> = {
        let mut core = shared.lock();
        let check = shared.ready.is_some();
        let now = Instant::now();
        let mut started = Vec::new();
        for record in &mut core.records {
            if record.state == State::Running
                && record.readiness == Readiness::Waiting
                && record.removing.is_none()
            {
                if check {
                    record.readiness = Readiness::Checking;
                    started.push(record.id.clone());
                } else {
                    record.readiness = Readiness::Ready;
                    record.idle_since = now;
                }
            }
        }
        started
    };
    let Some(ready) = shared.ready.clone() else {
        return;
    };
    for id in started {
        let shared = Arc::clone(shared);
        let ready = Arc::clone(&ready);
        tokio::spawn(async move {
            let outcome = match shared.group.connect_info(&id).await {
                Ok(info) => ready(info).await,
                Err(error) => Err(format!("ConnectInfo failed: {error}")),
            };
            {
                let mut core = shared.lock();
                if let Some(record) = core.records.iter_mut().find(|r| r.id == id) {
                    record.readiness = match &outcome {
                        Ok(()) => Readiness::Ready,
                        Err(error) => Readiness::Failed(error.clone()),
                    };
                    record.idle_since = Instant::now();
                }
            }
            match outcome {
                Ok(()) => shared.info(format!("instance {id} is ready")),
                Err(error) => {
                    shared.warn(format!("instance {id} failed its readiness check: {error}"))
                }
            }
            shared.wake.notify_one();
        });
    }
}

/// One scaling decision, carried out.
async fn tick(shared: &Arc<Shared>) {
    let (plan, retry) = {
        let mut core = shared.lock();
        let policy = shared.policy(&core);
        let now = Instant::now();
        let plan = core.plan(now, &policy);
        // Deletions an Update shows had no effect.
        let retry_after = core.config.deletion_retry_interval;
        let mut retry = Vec::new();
        for record in &mut core.records {
            if let Some((reason, asked)) = record.removing
                && record.state != State::Deleting
                && now.saturating_duration_since(asked) >= retry_after
            {
                record.removing = Some((reason, now));
                retry.push((record.id.clone(), reason));
            }
        }
        (plan, retry)
    };
    if plan.increase > 0 {
        shared.info(format!("scaling up by {} instance(s)", plan.increase));
        let partial = shared.group.increase(plan.increase).await;
        shared.lock().requested += partial.done;
        if let Some(error) = partial.error {
            shared.warn(format!(
                "Increase({}) created {}: {error}",
                plan.increase, partial.done
            ));
        }
    }
    let mut removals = plan.remove;
    removals.extend(retry);
    if !removals.is_empty() {
        remove(shared, removals).await;
    }
}

#[cfg(test)]
mod tests;
