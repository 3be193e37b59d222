//! Job records: what `gantry runner run` keeps on disk about each job while it runs, so
//! that a runner that died with jobs running (SIGKILL, the OOM killer, a crash, the
//! machine rebooting) ends them when it starts again.
//!
//! Without it, such a job stays `running` on the coordinator until the stuck-job timer
//! fails it an hour later (GitLab's behaviour), and the job's processes — a shell
//! executor's script, a deploy waiting on something — go on running with nobody
//! watching, possibly in the build directory the next job is given.
//!
//! A record is a JSON file per job in the journal directory (`.runner_jobs/` next to
//! the configuration file, mode 0700; the file holds the job token, mode 0600). It is
//! written, and synced to disk, when the job is received, names the process groups of
//! the job's stages while they run, and is removed when the job's task ends (after the
//! final update, or when the coordinator ended the job). When the runner starts, every
//! record it finds is a job a previous runner process lost:
//!
//! 1. its process groups still running are killed — only processes proven to be the
//!    same ones: same boot (`/proc/sys/kernel/random/boot_id`) and the same start time
//!    (`/proc/<pid>/stat`), so a reused pid is never signalled;
//! 2. the coordinator is told: a line at the end of the job's log, then the final update
//!    `failed` with `runner_system_failure` (so `retry: {when: runner_system_failure}`
//!    retries it at once);
//! 3. the record is removed (also when the coordinator had already ended the job).
//!
//! A record whose runner process is still alive (another `gantry runner run` with the
//! same configuration) is left alone. Docker containers are removed by their runner
//! label ([`crate::executor::docker::remove_leftovers`]), except those of the jobs taken over;
//! processes a job started on a fleet instance end with the instance.
//!
//! Jobs of the shell, custom, Docker, instance and docker-autoscaler executors are
//! *taken over* instead, when they can go on ([`takeover_point`], [`goes_on`]; applied by
//! `Poller::take_over` in [`crate::poll`]):
//! their script stages ran detached (`crate::executor::shell::detached`; the Docker executor's in
//! its build container, named in the record's [`DockerRecord`]; the instance executor's
//! on its fleet instance, whose acquisition the record's [`InstanceRecord`] names; the
//! docker-autoscaler executor's in its build container on its fleet instance, both
//! records kept), and the restarted runner goes on with them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

mod recovery;

pub use recovery::{
    Appended, LostJobEnd, TakeoverAt, append_to_log, end_lost_job, goes_on, kill_lost_groups,
    lost_job_message, takeover_message, takeover_point,
};

/// The journal's directory, next to the configuration file.
pub const JOURNAL_DIR: &str = ".runner_jobs";

/// Records larger than this are not read (a record is well under 1 KiB plus its groups).
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// Payloads larger than this are not read back (a payload with its variables,
/// dependencies and steps is rarely above a few hundred KiB).
const MAX_PAYLOAD_BYTES: u64 = 64 * 1024 * 1024;

/// Process groups one record names at most (a job runs one stage at a time; services and
/// helpers add a few).
const MAX_GROUPS: usize = 64;

/// The journal directory at `config_path`'s side.
pub fn journal_dir(config_path: &Path) -> PathBuf {
    match config_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(JOURNAL_DIR),
        _ => PathBuf::from(JOURNAL_DIR),
    }
}

/// A process, identified beyond its pid: the boot it runs in and when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStamp {
    /// The pid (for a process group: its leader, whose pid is the group id).
    pub pid: i32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat`, field 22).
    pub start: u64,
    /// `/proc/sys/kernel/random/boot_id` when it was recorded.
    pub boot: String,
}

impl ProcessStamp {
    /// The stamp of the running process `pid`, if it can be read.
    pub fn of(pid: i32) -> Option<Self> {
        Some(Self {
            pid,
            start: start_ticks(pid)?,
            boot: boot_id()?,
        })
    }

    /// Whether this very process still runs: same boot, same pid, same start time.
    pub fn alive(&self) -> bool {
        boot_id().as_deref() == Some(self.boot.as_str())
            && start_ticks(self.pid) == Some(self.start)
    }

    /// Whether this very process still runs and has not exited (an exited process
    /// its parent has not reaped yet is [alive](Self::alive), as a zombie).
    pub fn running(&self) -> bool {
        self.alive()
            && std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
                .ok()
                .and_then(|stat| parse_state(&stat))
                .is_some_and(|state| !matches!(state, 'Z' | 'X' | 'x'))
    }

    /// Sends `signal` to the process group this process leads, while it is that group:
    /// the leader still runs (or is a zombie), or it exited and processes it left in
    /// its group (started after it, in this boot) still hold the group id — which the
    /// kernel does not give to a new process while they do, so the group cannot be
    /// somebody else's. Returns whether a group was signaled.
    pub fn signal_group(&self, signal: nix::sys::signal::Signal) -> bool {
        use nix::sys::signal::killpg;
        use nix::unistd::Pid;
        if !self.alive() {
            // The pid runs another process (reused), or the group has no member left
            // that this leader could have started.
            if boot_id().as_deref() != Some(self.boot.as_str())
                || start_ticks(self.pid).is_some()
                || !group_members(self.pid).any(|start| start >= self.start)
            {
                return false;
            }
        }
        killpg(Pid::from_raw(self.pid), signal).is_ok()
    }
}

/// The start times of the processes in group `pgid` that have not exited.
fn group_members(pgid: i32) -> impl Iterator<Item = u64> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(move |entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let (state, group, start) = parse_group_and_start(&stat)?;
            (group == pgid && !matches!(state, 'Z' | 'X' | 'x')).then_some(start)
        })
}

/// The state (field 3), process group (field 5) and start time (field 22) of a
/// `/proc/<pid>/stat` line.
fn parse_group_and_start(stat: &str) -> Option<(char, i32, u64)> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    let start = fields.nth(16)?.parse().ok()?;
    Some((state, group, start))
}

/// Field 3 of `/proc/<pid>/stat`: the process state.
fn parse_state(stat: &str) -> Option<char> {
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// Field 22 of `/proc/<pid>/stat`, counted after the command name (which may hold
/// spaces and parentheses: it ends at the last `)`).
fn start_ticks(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_ticks(&stat)
}

fn parse_start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state (3), ppid (4), … starttime (22): the 20th field here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// What is kept about one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The coordinator's URL (the `[[runners]]` entry's `url`).
    pub url: String,
    /// The job id.
    pub job_id: i64,
    /// The job token (to end the job).
    pub token: String,
    /// The runner process running the job.
    pub runner: ProcessStamp,
    /// The process groups of the job's stages running now.
    #[serde(default)]
    pub groups: Vec<ProcessStamp>,
    /// The custom executor's environment, from the start of `prepare_exec` until
    /// `cleanup_exec` ran: a runner that finds the job lost runs `cleanup_exec` there.
    #[serde(default)]
    pub custom: Option<CustomRecord>,
    /// What a restarted runner needs to take the job over (shell executor jobs; the
    /// payload is kept beside the record, [`payload_path`]).
    #[serde(default)]
    pub resume: Option<ResumeRecord>,
    /// The script stage running detached from the runner process now: a restarted
    /// runner reattaches to it.
    #[serde(default)]
    pub stage: Option<DetachedStage>,
    /// The job is past its steps (`after_script`, cache, artifacts): a restarted runner
    /// goes on from there.
    #[serde(default)]
    pub after: Option<AfterSteps>,
    /// The Docker executor's containers of the job, once it makes any.
    #[serde(default)]
    pub docker: Option<DockerRecord>,
    /// The fleet instance the job runs on (instance and docker-autoscaler executors),
    /// once acquired.
    #[serde(default)]
    pub instance: Option<InstanceRecord>,
}

/// The fleet instance an instance or docker-autoscaler executor job holds
/// ([`crate::executor::instance`]): a restarted runner restores the acquisition from the
/// taskscaler's state storage by its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// The instance's id.
    pub id: String,
    /// The acquisition's key in the taskscaler's state file.
    pub key: String,
}

/// What a Docker executor job made ([`crate::executor::docker`]): a restarted runner keeps it
/// and goes on in it, or removes it when the job starts again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerRecord {
    /// The `com.gantry.job.instance` label of everything the job made.
    pub instance: String,
    /// The build container, once made.
    #[serde(default)]
    pub container: Option<String>,
    /// Build containers made so far (names the next one).
    #[serde(default)]
    pub builds: usize,
}

/// How a job stood once its steps were over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfterSteps {
    /// The steps' ending.
    pub ending: RecordedEnding,
    /// Whether `after_script` is still due.
    pub after_script_due: bool,
}

/// The job's place among its entry's jobs, kept so that a restarted runner gives it
/// the same slot ([`crate::poll`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeRecord {
    /// The `[[runners]]` entry, by its short token.
    pub runner: String,
    /// `CI_CONCURRENT_ID`.
    pub concurrent_id: usize,
    /// `CI_CONCURRENT_PROJECT_ID`.
    pub concurrent_project_id: usize,
    /// When the job was received (Unix time, ms): its timeout counts from there.
    pub received_unix_ms: u64,
}

/// Which script stage runs detached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageAt {
    /// The job's step at this index (`script`, `release`, … in payload order, without
    /// `after_script`).
    Step(usize),
    /// `after_script`.
    AfterScript,
}

/// How the job stood before the detached stage: the steps' ending so far, or for
/// `after_script` the ending it reports as `CI_JOB_STATUS`. Mirrors
/// [`crate::job::JobEnding`] (whose `Aborted` never reaches a detached stage).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecordedEnding {
    /// Success.
    Success,
    /// A script failure.
    ScriptFailure {
        /// Its exit code.
        exit_code: i32,
    },
    /// A timeout.
    Timeout {
        /// The limit, in seconds.
        after_secs: u64,
    },
    /// A cancel.
    Canceled,
    /// A runner shutdown.
    Interrupted,
    /// A system failure.
    SystemFailure {
        /// The stage.
        stage: String,
        /// What went wrong.
        message: String,
    },
    /// An image pull failure.
    ImagePullFailure {
        /// What went wrong.
        message: String,
    },
    /// A configuration error.
    ConfigurationError {
        /// What is wrong.
        message: String,
    },
    /// A missing feature.
    Unsupported {
        /// What is missing.
        message: String,
    },
    /// An external service the job needs failed.
    ExternalDependencyFailure {
        /// What went wrong.
        message: String,
    },
}

/// Where a detached stage is and how far its output reached the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagePlace {
    /// Which stage.
    pub at: StageAt,
    /// Its section name (`step_script`, `after_script`, …).
    pub name: String,
    /// How the job stood before it.
    pub before: RecordedEnding,
    /// When its time is up (Unix time, ms).
    pub deadline_unix_ms: u64,
    /// The limit a timeout reports, in seconds.
    pub limit_secs: u64,
}

/// A script stage running detached: its shell's output goes to files and its exit
/// code to a third one, so it runs on when the runner process dies, and a restarted
/// runner reads on where the coordinator's log ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachedStage {
    /// Which stage.
    pub place: StagePlace,
    /// The group's leader (the wrapper shell writing the exit code); `None` for a
    /// stage in a container.
    #[serde(default)]
    pub group: Option<ProcessStamp>,
    /// The container running the stage (the Docker executor's build container).
    #[serde(default)]
    pub container: Option<String>,
    /// The stage's directory on the fleet instance (instance executor; the stages'
    /// directory for docker-autoscaler): its files are there, and `files` are their
    /// copies here.
    #[serde(default)]
    pub remote: Option<String>,
    /// The files: stdout, stderr, exit code.
    pub files: StageFiles,
    /// The output the coordinator holds for sure.
    #[serde(default)]
    pub checkpoint: Option<LogCheckpoint>,
    /// Later points the log was sent up to, not yet acknowledged: the coordinator's
    /// log ends at one of them, or at the checkpoint.
    #[serde(default)]
    pub points: Vec<LogCheckpoint>,
}

impl DetachedStage {
    /// Where the stage's output goes on when the coordinator's log has `log_len`
    /// bytes: the recorded point that ends there, with `true` (nothing is sent twice);
    /// else the last one before, with `false` (what the log holds past it comes again);
    /// `(None, true)` when the log ends before the stage's first point (none of its
    /// output was sent).
    pub fn resume_point(&self, log_len: u64) -> (Option<LogCheckpoint>, bool) {
        let known = self.checkpoint.iter().chain(&self.points);
        if let Some(exact) = known.clone().find(|p| p.log_len == log_len) {
            return (Some(*exact), true);
        }
        let before = known
            .clone()
            .filter(|p| p.log_len < log_len)
            .max_by_key(|p| p.log_len)
            .copied();
        // A log that ends before the stage's start holds none of its output.
        let before_start = before.is_none()
            && known
                .min_by_key(|p| p.log_len)
                .is_some_and(|p| p.out == 0 && p.err == 0);
        (before, before_start)
    }

    /// The file a stage in a container writes when its script begins (see
    /// [`began_path`]).
    pub fn began_path(&self) -> PathBuf {
        began_path(&self.files)
    }
}

/// Where a detached stage in a container marks that its script began: the Docker
/// executor's wrapper writes it once the whole script reached the container's shell.
pub fn began_path(files: &StageFiles) -> PathBuf {
    files.status.with_extension("began")
}

/// A detached stage's files (in the job's temporary directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageFiles {
    /// The script's standard output.
    pub out: PathBuf,
    /// Its standard error.
    pub err: PathBuf,
    /// Its exit code, written when it ends.
    pub status: PathBuf,
}

/// A point up to which a detached stage's output is in the coordinator's log: the
/// files' offsets (at line ends) and the log's length and CRC-32 at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCheckpoint {
    /// Bytes of standard output in the log.
    pub out: u64,
    /// Bytes of standard error in the log.
    pub err: u64,
    /// The log's length then.
    pub log_len: u64,
    /// Its CRC-32, when known.
    pub crc: Option<u32>,
}

/// What a lost job's `cleanup_exec` needs (`[runners.custom]`, see
/// `CustomExecutor::after_crash`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomRecord {
    /// The `[[runners]]` entry, by its short token (`short_token`).
    pub runner: String,
    /// The job's temporary directory: the driver programs' working directory, with the
    /// job payload and the environment the programs got.
    pub temp_dir: PathBuf,
}

/// What [`Journal::lost`] found.
#[derive(Debug, Default)]
pub struct LostJobs {
    /// The records of lost jobs, with their files.
    pub lost: Vec<(PathBuf, JobRecord)>,
    /// Files that are not readable records, and why.
    pub unreadable: Vec<(PathBuf, String)>,
}

/// The journal directory.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
    hand_over: Arc<HandOver>,
}

/// Raised when this runner process hands its jobs over to the next one
/// ([`Journal::hand_over`]).
#[derive(Debug, Default)]
struct HandOver {
    raised: AtomicBool,
    notify: tokio::sync::Notify,
}

/// Why the journal cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("keep job records in `{}`: {source}", dir.display())]
pub struct JournalError {
    dir: PathBuf,
    #[source]
    source: std::io::Error,
}

impl Journal {
    /// The journal at `dir`, created (mode 0700) when missing.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Self, JournalError> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = dir.into();
        let created = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir);
        match created {
            Ok(()) => Ok(Self {
                dir,
                hand_over: Arc::default(),
            }),
            Err(source) => Err(JournalError { dir, source }),
        }
    }

    /// This process hands its jobs over to the next runner process: from now on the
    /// detached stages of its jobs are left running when they end or this process
    /// exits, watched no more (their jobs stay in their stage), for the next process to
    /// take over (`crate::executor::shell::detached`).
    pub fn hand_over(&self) {
        self.hand_over.raised.store(true, Ordering::SeqCst);
        self.hand_over.notify.notify_waiters();
    }

    /// Where the journal is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records a job this process starts running; the record is on disk when this
    /// returns.
    pub fn start(&self, url: &str, job_id: i64, token: &str) -> std::io::Result<RunningJob> {
        self.start_with(url, job_id, token, None)
    }

    /// [`start`](Self::start), keeping what a restarted runner needs to take the job
    /// over: `job` beside the record, `resume` in it. Its script stages then run
    /// detached (`crate::executor::shell::detached`).
    pub fn start_resumable(
        &self,
        url: &str,
        job: &gantry_protocol::JobResponse,
        resume: ResumeRecord,
    ) -> std::io::Result<RunningJob> {
        self.start_with(url, job.id, &job.token, Some((job, resume)))
    }

    fn start_with(
        &self,
        url: &str,
        job_id: i64,
        token: &str,
        resumable: Option<(&gantry_protocol::JobResponse, ResumeRecord)>,
    ) -> std::io::Result<RunningJob> {
        let path = self.dir.join(record_name(url, job_id));
        let resume = match resumable {
            Some((job, resume)) => {
                let payload = serde_json::to_vec(job).map_err(std::io::Error::other)?;
                // Synced with the record's directory below.
                write_file(&payload_path(&path), &payload, false)?;
                Some(resume)
            }
            None => None,
        };
        let runner = ProcessStamp::of(i32::try_from(std::process::id()).unwrap_or(0))
            .ok_or_else(|| std::io::Error::other("this process's start time is unreadable"))?;
        let record = JobRecord {
            url: url.to_owned(),
            job_id,
            token: token.to_owned(),
            runner,
            groups: Vec::new(),
            custom: None,
            resume,
            stage: None,
            after: None,
            docker: None,
            instance: None,
        };
        if record.resume.is_some() {
            std::fs::File::open(payload_path(&path))?.sync_all()?;
        }
        write_record(&path, &record, true)?;
        Ok(RunningJob {
            path,
            record: Mutex::new(record),
            hand_over: Arc::clone(&self.hand_over),
        })
    }

    /// Takes over the lost job recorded at `path`: the record now names this process,
    /// and is on disk when this returns. Returns it with the job's payload.
    pub fn take_over(
        &self,
        path: &Path,
        record: &JobRecord,
    ) -> std::io::Result<(RunningJob, gantry_protocol::JobResponse)> {
        let payload = payload_path(path);
        let size = std::fs::metadata(&payload)?.len();
        if size > MAX_PAYLOAD_BYTES {
            return Err(std::io::Error::other(format!(
                "the job's payload has {size} bytes, more than {MAX_PAYLOAD_BYTES}"
            )));
        }
        let job: gantry_protocol::JobResponse =
            serde_json::from_slice(&std::fs::read(&payload)?).map_err(std::io::Error::other)?;
        let runner = ProcessStamp::of(i32::try_from(std::process::id()).unwrap_or(0))
            .ok_or_else(|| std::io::Error::other("this process's start time is unreadable"))?;
        let record = JobRecord {
            runner,
            ..record.clone()
        };
        write_record(path, &record, true)?;
        Ok((
            RunningJob {
                path: path.to_owned(),
                record: Mutex::new(record),
                hand_over: Arc::clone(&self.hand_over),
            },
            job,
        ))
    }

    /// The records left by runner processes that are gone, oldest job first, with the
    /// files that could not be read (and why).
    pub fn lost(&self) -> LostJobs {
        let mut lost = Vec::new();
        let mut unreadable = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return LostJobs { lost, unreadable };
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match read_record(&path) {
                Ok(record) if record.runner.alive() => {}
                Ok(record) => lost.push((path, record)),
                Err(error) => unreadable.push((path, error)),
            }
        }
        lost.sort_by_key(|(_, r)| r.job_id);
        LostJobs { lost, unreadable }
    }
}

/// Where the payload of the job recorded at `record` is kept (`job-….payload`, 0600).
pub fn payload_path(record: &Path) -> PathBuf {
    record.with_extension("payload")
}

/// Where the job keeps files beside its record (`job-….d`, 0700): copies of an
/// instance stage's output.
pub fn aside_dir(record: &Path) -> PathBuf {
    record.with_extension("d")
}

/// Removes the record at `path`, the payload and the directory beside it.
pub fn remove_record(path: &Path) {
    let _ = std::fs::remove_file(payload_path(path));
    let _ = std::fs::remove_dir_all(aside_dir(path));
    let _ = std::fs::remove_file(path);
}

/// `job-<id>-<8 hex digits of the URL's hash>.json`: job ids are unique per coordinator.
fn record_name(url: &str, job_id: i64) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(url.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("job-{job_id}-{hex}.json")
}

fn read_record(path: &Path) -> Result<JobRecord, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    if size > MAX_RECORD_BYTES {
        return Err(format!(
            "{size} bytes, more than a record holds ({MAX_RECORD_BYTES})"
        ));
    }
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    serde_json::from_slice(&text).map_err(|e| format!("not a job record: {e}"))
}

/// Writes `record` to a temporary file and renames it over `path` (a reader never sees
/// half a record); with `sync`, the file and the directory are synced first.
fn write_record(path: &Path, record: &JobRecord, sync: bool) -> std::io::Result<()> {
    let json = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    write_file(path, &json, sync)
}

/// Writes `bytes` to `path` (mode 0600) through a temporary file and a rename.
fn write_file(path: &Path, json: &[u8], sync: bool) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(json)?;
    if sync {
        file.sync_all()?;
    }
    drop(file);
    std::fs::rename(&tmp, path)?;
    if sync {
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
    }
    Ok(())
}

/// The record of a job this process runs. Dropping it keeps the file (a job whose task
/// was abandoned is still a lost job); [`RunningJob::finish`] removes it.
#[derive(Debug)]
pub struct RunningJob {
    path: PathBuf,
    record: Mutex<JobRecord>,
    hand_over: Arc<HandOver>,
}

impl RunningJob {
    /// Whether this process is handing its jobs over ([`Journal::hand_over`]).
    pub(crate) fn handing_over(&self) -> bool {
        self.hand_over.raised.load(Ordering::SeqCst)
    }

    /// Completes once this process hands its jobs over.
    pub(crate) async fn handed_over(&self) {
        loop {
            let notified = self.hand_over.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.handing_over() {
                return;
            }
            notified.await;
        }
    }

    /// Whether a detached stage of the job runs now (a job that can be handed over).
    pub(crate) fn in_detached_stage(&self) -> bool {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stage
            .is_some()
    }

    /// A stage's process group started (its leader is `pid`).
    pub(crate) fn group_started(&self, pid: u32) {
        let Some(stamp) = i32::try_from(pid).ok().and_then(ProcessStamp::of) else {
            return;
        };
        self.update(|record| {
            if record.groups.len() < MAX_GROUPS {
                record.groups.push(stamp);
            }
        });
    }

    /// The process group led by `pid` is over (killed, or its leader exited and the
    /// group was ended).
    pub(crate) fn group_ended(&self, pid: u32) {
        let Ok(pid) = i32::try_from(pid) else { return };
        self.update(|record| record.groups.retain(|g| g.pid != pid));
    }

    /// The process groups a dead runner left were ended (a job started again).
    pub(crate) fn groups_ended(&self) {
        self.update(|record| record.groups.clear());
    }

    /// The custom executor's environment is about to be made (`prepare_exec`).
    pub(crate) fn custom_prepared(&self, custom: CustomRecord) {
        self.update(|record| record.custom = Some(custom));
    }

    /// The custom executor's `cleanup_exec` ran.
    pub(crate) fn custom_cleaned(&self) {
        self.update(|record| record.custom = None);
    }

    /// Whether a restarted runner could take the job over (see
    /// [`Journal::start_resumable`]): script stages then run detached.
    pub(crate) fn resumable(&self) -> bool {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .resume
            .is_some()
    }

    /// The custom executor's temporary directory named in the record.
    pub(crate) fn custom_dir(&self) -> Option<PathBuf> {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .custom
            .as_ref()
            .map(|c| c.temp_dir.clone())
    }

    /// A script stage now runs detached (synced: from now on a restarted runner
    /// reattaches instead of killing it).
    pub(crate) fn stage_detached(&self, stage: DetachedStage) {
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        record.stage = Some(stage);
        let _ = write_record(&self.path, &record, true);
    }

    /// The detached stage's output reached the coordinator up to `checkpoint` (when
    /// known), and may be sent up to the last of `points`.
    pub(crate) fn checkpoint(&self, checkpoint: Option<LogCheckpoint>, points: &[LogCheckpoint]) {
        self.update(|record| {
            if let Some(stage) = &mut record.stage {
                if checkpoint.is_some() {
                    stage.checkpoint = checkpoint;
                }
                stage.points = points.to_vec();
            }
        });
    }

    /// The Docker executor's containers of the job (synced: a restarted runner must
    /// know them before they run anything).
    pub(crate) fn docker_made(&self, docker: Option<DockerRecord>) {
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        record.docker = docker;
        let _ = write_record(&self.path, &record, true);
    }

    /// The job's key among its runner's jobs (its record's name): the key of its
    /// acquisition in the taskscaler's state file.
    pub(crate) fn key(&self) -> String {
        self.path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The directory beside the record ([`aside_dir`]), made (0700) when missing.
    pub(crate) fn aside(&self) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = aside_dir(&self.path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(dir)
    }

    /// The fleet instance the job holds (synced: a restarted runner must know it
    /// before the job runs anything there).
    pub(crate) fn instance_acquired(&self, instance: InstanceRecord) {
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        record.instance = Some(instance);
        let _ = write_record(&self.path, &record, true);
    }

    /// The fleet instance recorded for the job.
    pub(crate) fn instance(&self) -> Option<InstanceRecord> {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .instance
            .clone()
    }

    /// The Docker executor's containers recorded for the job.
    pub(crate) fn docker(&self) -> Option<DockerRecord> {
        self.record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .docker
            .clone()
    }

    /// The job's steps are over: `after_script` (when `after_script_due`), cache and
    /// artifacts follow.
    /// The stage before is replaced in the same write.
    pub(crate) fn steps_ended(&self, after: AfterSteps) {
        self.update(|record| {
            record.after = Some(after);
            record.stage = None;
        });
    }

    /// `after_script` ran (or was not due); its stage leaves the record.
    pub(crate) fn after_script_done(&self) {
        self.update(|record| {
            if let Some(after) = &mut record.after {
                after.after_script_due = false;
            }
            record.stage = None;
        });
    }

    /// The job's task is over: the record (and the payload) are removed.
    pub fn finish(&self) {
        remove_record(&self.path);
    }

    fn update(&self, change: impl FnOnce(&mut JobRecord)) {
        let mut record = self.record.lock().unwrap_or_else(PoisonError::into_inner);
        change(&mut record);
        // Not synced: after a reboot the groups are gone anyway, and a crash of this
        // process alone leaves the page cache to the kernel.
        let _ = write_record(&self.path, &record, false);
    }
}

/// Rewrites the lost job's record at `path` without its custom executor environment
/// (its `cleanup_exec` ran), so that it is not run twice.
pub fn forget_custom(path: &Path, record: &JobRecord) -> std::io::Result<()> {
    let record = JobRecord {
        custom: None,
        ..record.clone()
    };
    write_record(path, &record, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_start_time_is_read_past_a_name_with_spaces_and_parentheses() {
        let stat =
            "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_ticks(stat), Some(987_654));
        assert_eq!(parse_start_ticks("4242 (x) S 1"), None);
        assert_eq!(parse_start_ticks("no parenthesis"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_changed_stamp_is_not() {
        let me = ProcessStamp::of(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert!(me.alive());
        assert!(
            !ProcessStamp {
                start: me.start + 1,
                ..me.clone()
            }
            .alive()
        );
        assert!(
            !ProcessStamp {
                boot: "another-boot".into(),
                ..me.clone()
            }
            .alive()
        );
        assert!(ProcessStamp::of(-1).is_none());
    }

    #[test]
    fn records_are_kept_until_finished_and_only_lost_ones_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path().join("j")).unwrap();
        let running = journal
            .start("http://c.example/", 7, "glcbt-secret")
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(journal.dir()), 0o700);
        assert_eq!(mode(&running.path), 0o600);
        // This process owns it: not lost.
        assert!(journal.lost().lost.is_empty());

        // A record of a process that is gone.
        let mut gone = running.record.lock().unwrap().clone();
        gone.job_id = 3;
        gone.runner.start += 1;
        write_record(&dir.path().join("j/job-3-x.json"), &gone, false).unwrap();
        std::fs::write(dir.path().join("j/job-4-x.json"), "{").unwrap();
        std::fs::write(dir.path().join("j/other.txt"), "ignored").unwrap();
        let LostJobs { lost, unreadable } = journal.lost();
        assert_eq!(lost.len(), 1);
        assert_eq!(lost[0].1, gone);
        assert_eq!(unreadable.len(), 1);
        assert!(
            unreadable[0].1.contains("not a job record"),
            "{unreadable:?}"
        );

        running.group_started(std::process::id());
        assert_eq!(read_record(&running.path).unwrap().groups.len(), 1);
        running.group_ended(std::process::id());
        assert!(read_record(&running.path).unwrap().groups.is_empty());
        drop(running);
        let names = |d: &Path| {
            let mut n: Vec<_> = std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            n.sort();
            n
        };
        assert_eq!(names(journal.dir()).len(), 4, "dropping keeps the record");
        let again = journal
            .start("http://c.example/", 7, "glcbt-secret")
            .unwrap();
        again.finish();
        assert_eq!(
            names(journal.dir()),
            ["job-3-x.json", "job-4-x.json", "other.txt"]
        );
    }

    #[test]
    fn a_resumable_job_keeps_its_payload_and_is_taken_over_by_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path().join("j")).unwrap();
        let job = gantry_protocol::JobResponse {
            id: 12,
            token: "glcbt-12".into(),
            ..Default::default()
        };
        let resume = ResumeRecord {
            runner: "abc".into(),
            concurrent_id: 2,
            concurrent_project_id: 1,
            received_unix_ms: 1_000,
        };
        let running = journal
            .start_resumable("http://c.example/", &job, resume.clone())
            .unwrap();
        assert!(running.resumable());
        let payload = payload_path(&running.path);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&payload).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let place = StagePlace {
            at: StageAt::Step(0),
            name: "step_script".into(),
            before: RecordedEnding::Success,
            deadline_unix_ms: 5_000,
            limit_secs: 4,
        };
        running.stage_detached(DetachedStage {
            place: place.clone(),
            group: Some(ProcessStamp::of(i32::try_from(std::process::id()).unwrap()).unwrap()),
            container: None,
            remote: None,
            files: StageFiles {
                out: "o".into(),
                err: "e".into(),
                status: "s".into(),
            },
            checkpoint: None,
            points: Vec::new(),
        });
        let checkpoint = LogCheckpoint {
            out: 10,
            err: 0,
            log_len: 300,
            crc: Some(7),
        };
        let later = LogCheckpoint {
            out: 20,
            log_len: 310,
            ..checkpoint
        };
        running.checkpoint(Some(checkpoint), &[later]);
        let mut record = read_record(&running.path).unwrap();
        assert_eq!(record.resume, Some(resume));
        assert_eq!(record.stage.as_ref().unwrap().place, place);
        let stage = record.stage.as_ref().unwrap();
        assert_eq!(stage.checkpoint, Some(checkpoint));
        assert_eq!(stage.resume_point(310), (Some(later), true));
        assert_eq!(stage.resume_point(300), (Some(checkpoint), true));
        assert_eq!(stage.resume_point(305), (Some(checkpoint), false));
        assert_eq!(stage.resume_point(100), (None, false));
        let started = DetachedStage {
            checkpoint: None,
            points: vec![LogCheckpoint {
                out: 0,
                err: 0,
                log_len: 200,
                crc: None,
            }],
            ..stage.clone()
        };
        assert_eq!(
            started.resume_point(150),
            (None, true),
            "nothing of the stage was sent"
        );

        // Another process takes it over: the record names it, the payload comes back.
        record.runner.start += 1;
        let (again, back) = journal.take_over(&running.path, &record).unwrap();
        assert_eq!(back, job);
        assert!(read_record(&again.path).unwrap().runner.alive());
        again.steps_ended(AfterSteps {
            ending: RecordedEnding::Success,
            after_script_due: true,
        });
        let record = read_record(&again.path).unwrap();
        assert_eq!(record.stage, None, "replaced in the same write");
        assert!(record.after.is_some());
        again.finish();
        assert!(!payload.exists() && !again.path.exists());
    }

    #[test]
    fn group_and_start_are_read_past_the_name() {
        let stat =
            "4242 (a (b) c) S 1 4240 4239 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_group_and_start(stat), Some(('S', 4240, 987_654)));
        assert_eq!(parse_group_and_start("4242 (x) S 1 4240"), None);
        assert_eq!(parse_group_and_start("4242 (x) S 1 pg 1"), None);
    }

    /// A group whose leader exited is still signaled while processes it left are in
    /// it; a stamp that is not the leader's signals nothing.
    #[test]
    fn a_group_is_signaled_after_its_leader_exited_while_its_processes_are_left() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let left = dir.path().join("left");
        let mut leader = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(r#"sleep 60 & echo $! > "$1.part" && mv "$1.part" "$1""#)
            .arg("sh")
            .arg(&left)
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = i32::try_from(leader.id()).unwrap();
        let stamp = ProcessStamp::of(pid).unwrap();
        assert!(leader.wait().unwrap().success());
        let sleeper: i32 = std::fs::read_to_string(&left)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let sleeper = ProcessStamp::of(sleeper).unwrap();
        assert!(sleeper.running() && !stamp.alive());
        assert_eq!(group_members(pid).count(), 1);

        // Another leader's stamp (a later start) is not this group's.
        let later = ProcessStamp {
            start: sleeper.start + 1,
            ..stamp.clone()
        };
        assert!(!later.signal_group(nix::sys::signal::Signal::SIGKILL));
        assert!(sleeper.running());

        assert!(stamp.signal_group(nix::sys::signal::Signal::SIGKILL));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sleeper.running() {
            assert!(
                std::time::Instant::now() < deadline,
                "the left process still runs"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Nothing is left: nothing is signaled.
        assert!(!stamp.signal_group(nix::sys::signal::Signal::SIGKILL));
    }

    #[test]
    fn a_process_state_is_read_past_its_name() {
        assert_eq!(parse_state("42 (a) b) Z 1 2"), Some('Z'));
        assert_eq!(parse_state("42 (sh) S 1"), Some('S'));
        assert_eq!(parse_state("garbage"), None);
        let me = ProcessStamp::of(i32::try_from(std::process::id()).unwrap()).unwrap();
        assert!(me.running());
    }

    #[test]
    fn oversized_records_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job-1-x.json");
        std::fs::write(&path, vec![b' '; 70 * 1024]).unwrap();
        assert!(
            read_record(&path)
                .unwrap_err()
                .contains("more than a record holds")
        );
    }
}
