//! A job's resource use ([`JobResources`]): CPU seconds, peak memory and storage I/O,
//! measured by the executor while each stage runs and reported to the coordinator in the
//! job's updates (`resources` in `PUT /jobs/:id`, see [`crate::job`]'s uplink).
//!
//! [`JobMeter`] holds one job's figures: what its finished stages used, plus the latest
//! sample of each stage (or container) still running. Each stage gets a `StageMeter`
//! from it; a sampler task (`sample_every`) feeds it every `SAMPLE_INTERVAL` while
//! the stage runs, and the stage's last figure moves into the finished part when it ends.
//!
//! What each executor measures:
//!
//! | executor | while it runs | at its end |
//! |---|---|---|
//! | shell (and instance, over SSH) | the script's process tree in `/proc` (`process_tree`): `utime`/`stime` plus `cutime`/`cstime` (children it reaped), `read_bytes`/`write_bytes` of `/proc/PID/io`, memory as the larger of the biggest process's `VmHWM` and the tree's summed RSS | the shell's own figures read while it is a zombie (`waitid(WNOWAIT)`), so the CPU time and I/O of everything it waited for are exact; peak memory stays the sampled one |
//! | docker | the build container's stats from the Engine API, and each service container's (sampled from the first stage until cleanup, counted alongside the stages: CPU and I/O add up, peaks add up while both run) ([`crate::executor::docker`]): `cpu_stats.cpu_usage.usage_in_usermode`/`usage_in_kernelmode`, `memory_stats.max_usage` (cgroup v1) or the container's `memory.peak` (cgroup v2, when the runner can read it; else the highest `usage` sampled), `blkio_stats` read/write bytes | the last sample (a container's cgroup is gone once it stops, so the use of its last second can be missed) |
//!
//! Stages run detached (a runner with a job journal, for takeover) are measured the
//! same way; a stage a restarted runner reattached to is not (its figures so far are
//! lost with the runner that died). docker-autoscaler is the docker row on the instance's
//! engine (no `memory.peak` file there: the highest sampled `usage`). Not measured (no
//! figure sent): custom (the job runs wherever the driver sends it; the runner sees only
//! the driver's processes). The instance executor takes the shell's measure on the
//! instance: each sample runs `process_tree::dump_command` over the job's SSH session
//! (the stage shell's id is in its pid file there) and parses its output; its final
//! figure is the last sample. A container stage shorter than its first sample's round trip may send no
//! figure (the cgroup is gone once the container stops). Why no per-job cgroup for the
//! shell executor: the
//! runner would need a delegated cgroup v2 subtree with the `cpu`, `memory` and `io`
//! controllers; hosts and containers rarely give it one (the development containers run
//! on a hybrid hierarchy whose v2 part has no controllers), so the shell executor reads
//! what every Linux offers without privileges, `/proc`.
//!
//! Cost: one sample reads three small `/proc` files per process of the job (or makes one
//! Engine API call per container) every `SAMPLE_INTERVAL`, off the job's path; the
//! uplink reads the meter (a mutex and a sum over the running stages) once per update
//! interval.

pub(crate) mod process_tree;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use gantry_protocol::JobResources;

/// How often a running stage is sampled.
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// One job's resource use so far; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct JobMeter {
    state: Arc<Mutex<MeterState>>,
}

#[derive(Debug, Default)]
struct MeterState {
    /// Finished stages, `None` until one was measured.
    done: Option<JobResources>,
    /// The latest sample of each stage running now.
    running: BTreeMap<u64, JobResources>,
    next: u64,
}

impl JobMeter {
    /// The job's use so far; `None` when nothing was measured (an executor that does
    /// not measure, or no stage yet).
    pub fn snapshot(&self) -> Option<JobResources> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let running = state
            .running
            .values()
            .copied()
            .reduce(JobResources::alongside);
        match (state.done, running) {
            (Some(done), Some(running)) => Some(done.then(running)),
            (done, running) => done.or(running),
        }
    }

    /// A meter for one stage (or container) starting now.
    pub(crate) fn stage(&self) -> StageMeter {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let id = state.next;
        state.next += 1;
        StageMeter {
            meter: self.clone(),
            id,
        }
    }
}

/// One stage's part of a [`JobMeter`]; its last figure joins the job's finished part
/// when it is dropped.
#[derive(Debug)]
pub(crate) struct StageMeter {
    meter: JobMeter,
    id: u64,
}

impl StageMeter {
    /// Records a sample of the stage's use so far (cumulative). CPU and I/O are taken
    /// as they are (the latest figure is the total); the peak never goes down.
    pub(crate) fn record(&self, sample: JobResources) {
        let mut state = self
            .meter
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = state.running.entry(self.id).or_default();
        *entry = JobResources {
            peak_memory_bytes: entry.peak_memory_bytes.max(sample.peak_memory_bytes),
            cpu_user_seconds: entry.cpu_user_seconds.max(sample.cpu_user_seconds),
            cpu_system_seconds: entry.cpu_system_seconds.max(sample.cpu_system_seconds),
            read_bytes: entry.read_bytes.max(sample.read_bytes),
            written_bytes: entry.written_bytes.max(sample.written_bytes),
        };
    }
}

impl Drop for StageMeter {
    fn drop(&mut self) {
        let mut state = self
            .meter
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = state.running.remove(&self.id) {
            state.done = Some(match state.done {
                Some(done) => done.then(last),
                None => last,
            });
        }
    }
}

/// Samples with `probe` into `stage` at once and then every [`SAMPLE_INTERVAL`] until
/// the returned task is aborted (or dropped through [`Sampler`]). A probe that finds
/// nothing (`None`: the process or container is gone) records nothing.
pub(crate) fn sample_every<P, F>(stage: Arc<StageMeter>, mut probe: P) -> Sampler
where
    P: FnMut() -> F + Send + 'static,
    F: Future<Output = Option<JobResources>> + Send + 'static,
{
    Sampler(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if let Some(sample) = probe().await {
                stage.record(sample);
            }
        }
    }))
}

/// A stage's process tree under measure (the shell executor): sampled from `/proc`
/// until [`ProcessMeter::exited`] reads the final figures or it is dropped.
#[derive(Debug)]
pub(crate) struct ProcessMeter {
    stage: Arc<StageMeter>,
    pid: u32,
    _sampler: Sampler,
}

impl ProcessMeter {
    /// Starts sampling the tree of `pid` into `stage`.
    pub(crate) fn start(stage: StageMeter, pid: u32) -> Self {
        let stage = Arc::new(stage);
        let sampler = sample_every(Arc::clone(&stage), move || async move {
            process_tree::sample(pid)
        });
        Self {
            stage,
            pid,
            _sampler: sampler,
        }
    }

    /// Waits until the process (a child of this one) exits, without reaping it, and
    /// records its final figures (see [`process_tree::exited`]); then the sampling stops.
    /// Only for a child this process will reap afterwards.
    pub(crate) async fn exited(self) {
        let pid = self.pid;
        if let Ok(Some(last)) = tokio::task::spawn_blocking(move || process_tree::exited(pid)).await
        {
            self.stage.record(last);
        }
    }
}

/// A running sampler task, stopped when dropped.
#[derive(Debug)]
pub(crate) struct Sampler(tokio::task::JoinHandle<()>);

impl Drop for Sampler {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(cpu: f64, peak: u64) -> JobResources {
        JobResources {
            cpu_user_seconds: cpu,
            peak_memory_bytes: peak,
            ..JobResources::default()
        }
    }

    #[test]
    fn stages_add_up_and_the_peak_is_the_highest_seen() {
        let meter = JobMeter::default();
        assert_eq!(meter.snapshot(), None);
        let first = meter.stage();
        first.record(figures(1.0, 100));
        first.record(figures(2.0, 50));
        assert_eq!(meter.snapshot(), Some(figures(2.0, 100)));
        drop(first);
        let second = meter.stage();
        second.record(figures(0.5, 300));
        assert_eq!(meter.snapshot(), Some(figures(2.5, 300)));
        drop(second);
        assert_eq!(meter.snapshot(), Some(figures(2.5, 300)));
    }
}
