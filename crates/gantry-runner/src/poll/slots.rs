//! The concurrency model as data: who may ask for a job, and when. Pure (time is a
//! parameter), so the worked example of the README is a unit test.

use std::time::Duration;

use tokio::time::Instant;

/// Identifies a `[[runners]]` entry across reloads: its URL and token.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EntryKey {
    pub(crate) url: String,
    pub(crate) token: String,
}

/// One job running in an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunningJob {
    pub(crate) job_id: i64,
    pub(crate) project_id: i64,
    pub(crate) concurrent_id: usize,
    pub(crate) concurrent_project_id: usize,
}

/// The counters of one entry.
#[derive(Debug, Clone)]
pub(crate) struct EntrySlots {
    pub(crate) key: EntryKey,
    /// Jobs this entry may run (`limit`, or `concurrent` when unset).
    pub(crate) limit: usize,
    /// Job requests this entry may have in flight.
    pub(crate) request_concurrency: usize,
    pub(crate) running: Vec<RunningJob>,
    pub(crate) requesting: usize,
    /// No new request before this (the `check_interval` gate, or back-off).
    pub(crate) next_request_at: Instant,
    /// Gone from the configuration: no new requests; running jobs finish.
    pub(crate) removed: bool,
}

/// What an entry's scheduler should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Start a job request (a slot has been reserved).
    Request,
    /// Nothing before this time (the slots are free, the gate is not open yet).
    WaitUntil(Instant),
    /// Wait for a slot to free up.
    WaitForSlot,
    /// Stop scheduling (not taking jobs, or the entry was removed).
    Exit,
}

/// All counters.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    pub(crate) concurrent: usize,
    pub(crate) check_interval: Duration,
    pub(crate) taking_jobs: bool,
    pub(crate) max_jobs: Option<usize>,
    pub(crate) received: usize,
    pub(crate) running: usize,
    pub(crate) requesting: usize,
    pub(crate) entries: Vec<EntrySlots>,
}

impl Slots {
    pub(crate) fn new(
        concurrent: usize,
        check_interval: Duration,
        max_jobs: Option<usize>,
    ) -> Self {
        Self {
            concurrent,
            check_interval,
            taking_jobs: max_jobs != Some(0),
            max_jobs,
            received: 0,
            running: 0,
            requesting: 0,
            entries: Vec::new(),
        }
    }

    /// Adds an entry, or updates (and revives) the one with the same key; returns its
    /// index and whether it is new.
    pub(crate) fn upsert(
        &mut self,
        key: EntryKey,
        limit: Option<usize>,
        request_concurrency: usize,
        now: Instant,
    ) -> (usize, bool) {
        let limit = limit.unwrap_or(self.concurrent).max(1);
        let request_concurrency = request_concurrency.max(1);
        if let Some(index) = self.entries.iter().position(|e| e.key == key) {
            let entry = &mut self.entries[index];
            let revived = entry.removed;
            entry.limit = limit;
            entry.request_concurrency = request_concurrency;
            entry.removed = false;
            return (index, revived);
        }
        self.entries.push(EntrySlots {
            key,
            limit,
            request_concurrency,
            running: Vec::new(),
            requesting: 0,
            next_request_at: now,
            removed: false,
        });
        (self.entries.len() - 1, true)
    }

    /// Whether everything is over: no new jobs, nothing running or asked for.
    pub(crate) fn idle(&self) -> bool {
        !self.taking_jobs && self.running == 0 && self.requesting == 0
    }

    /// May entry `index` start a job request at `now`? Reserves the slot when it may.
    ///
    /// A request is started only if the job it may bring could start at once: it
    /// counts against `concurrent` and the entry's `limit` like a running job.
    pub(crate) fn decide(&mut self, index: usize, now: Instant) -> Decision {
        let within_max = self
            .max_jobs
            .is_none_or(|max| self.received + self.requesting < max);
        let Some(entry) = self.entries.get(index) else {
            return Decision::Exit;
        };
        if !self.taking_jobs || entry.removed {
            return Decision::Exit;
        }
        let global_free = self.running + self.requesting < self.concurrent;
        let entry_free = entry.running.len() + entry.requesting < entry.limit
            && entry.requesting < entry.request_concurrency;
        if !(global_free && entry_free && within_max) {
            return Decision::WaitForSlot;
        }
        if now < entry.next_request_at {
            return Decision::WaitUntil(entry.next_request_at);
        }
        let check_interval = self.check_interval;
        let entry = &mut self.entries[index];
        entry.requesting += 1;
        entry.next_request_at = now + check_interval;
        self.requesting += 1;
        Decision::Request
    }

    fn release(&mut self, index: usize) {
        if let Some(entry) = self.entries.get_mut(index) {
            entry.requesting = entry.requesting.saturating_sub(1);
        }
        self.requesting = self.requesting.saturating_sub(1);
    }

    /// The request got no job (`204`, `409`) or was given up: free the reservation;
    /// the gate set when it started still holds.
    pub(crate) fn no_job(&mut self, index: usize) {
        self.release(index);
    }

    /// The request failed: free the reservation and keep the entry quiet until
    /// `now + delay`.
    pub(crate) fn failed(&mut self, index: usize, now: Instant, delay: Duration) {
        self.release(index);
        if let Some(entry) = self.entries.get_mut(index) {
            entry.next_request_at = entry.next_request_at.max(now + delay);
        }
    }

    /// The request brought a job: the reservation becomes a running job, and the entry
    /// may ask again at once. Returns its slot.
    pub(crate) fn job_started(
        &mut self,
        index: usize,
        job_id: i64,
        project_id: i64,
        now: Instant,
    ) -> RunningJob {
        self.release(index);
        self.running += 1;
        self.received += 1;
        if self.max_jobs.is_some_and(|max| self.received >= max) {
            self.taking_jobs = false;
        }
        let Some(entry) = self.entries.get_mut(index) else {
            return RunningJob {
                job_id,
                project_id,
                concurrent_id: 0,
                concurrent_project_id: 0,
            };
        };
        let lowest_free = |taken: Vec<usize>| (0..).find(|id| !taken.contains(id)).unwrap_or(0);
        let concurrent_id = lowest_free(entry.running.iter().map(|j| j.concurrent_id).collect());
        let concurrent_project_id = lowest_free(
            entry
                .running
                .iter()
                .filter(|j| j.project_id == project_id)
                .map(|j| j.concurrent_project_id)
                .collect(),
        );
        let job = RunningJob {
            job_id,
            project_id,
            concurrent_id,
            concurrent_project_id,
        };
        entry.running.push(job);
        entry.next_request_at = now;
        job
    }

    /// A job a runner process that died was running, taken over with its slot: it
    /// counts as running, in the slot it had.
    pub(crate) fn job_resumed(&mut self, index: usize, job: RunningJob) {
        self.running += 1;
        if let Some(entry) = self.entries.get_mut(index) {
            entry.running.push(job);
        }
    }

    /// A job ended.
    pub(crate) fn job_finished(&mut self, index: usize, job_id: i64) {
        if let Some(entry) = self.entries.get_mut(index)
            && let Some(position) = entry.running.iter().position(|j| j.job_id == job_id)
        {
            entry.running.remove(position);
        }
        self.running = self.running.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> EntryKey {
        EntryKey {
            url: "https://gitlab.example.com".to_owned(),
            token: name.to_owned(),
        }
    }

    /// The worked example of the README's "Runner concurrency" section.
    #[test]
    fn readme_worked_example() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut slots = Slots::new(4, s(3), None);
        let (a, _) = slots.upsert(key("a"), Some(3), 2, t0);
        let (b, _) = slots.upsert(key("b"), None, 1, t0);
        assert_eq!(slots.entries[b].limit, 4, "no limit = concurrent");

        // t=0: A starts one request and must wait check_interval for a second one;
        // B starts its only one.
        assert_eq!(slots.decide(a, t0), Decision::Request);
        assert_eq!(slots.decide(a, t0), Decision::WaitUntil(t0 + s(3)));
        assert_eq!(slots.decide(b, t0), Decision::Request);
        assert_eq!(
            slots.decide(b, t0),
            Decision::WaitForSlot,
            "request_concurrency 1"
        );

        // t=3: A's second request (long polls may hold the first for up to 50 s).
        assert_eq!(slots.decide(a, t0 + s(3)), Decision::Request);
        assert_eq!(
            slots.decide(a, t0 + s(3)),
            Decision::WaitForSlot,
            "request_concurrency 2"
        );

        // t=5: A's first request brings job 1: A may ask again at once.
        slots.job_started(a, 1, 10, t0 + s(5));
        assert_eq!((slots.running, slots.requesting), (1, 2));
        assert_eq!(slots.decide(a, t0 + s(5)), Decision::Request);
        // Now 1 running + 3 requests in flight = concurrent: nobody may ask.
        assert_eq!(slots.decide(b, t0 + s(5)), Decision::WaitForSlot);

        // Both of A's requests bring jobs: A runs 3 = its limit; B's request holds the
        // 4th slot.
        slots.job_started(a, 2, 10, t0 + s(6));
        slots.job_started(a, 3, 11, t0 + s(6));
        assert_eq!(slots.entries[a].running.len(), 3);
        assert_eq!(slots.decide(a, t0 + s(6)), Decision::WaitForSlot, "limit 3");
        let ids: Vec<_> = slots.entries[a]
            .running
            .iter()
            .map(|j| (j.concurrent_id, j.concurrent_project_id))
            .collect();
        assert_eq!(ids, [(0, 0), (1, 1), (2, 0)]);

        // B's request comes back empty at t=7. Its gate was set when the request started
        // (t=0 + check_interval = t=3), so it is open: B asks again with the last free slot.
        slots.no_job(b);
        assert_eq!(slots.decide(b, t0 + s(7)), Decision::Request);
        slots.job_started(b, 4, 12, t0 + s(8));
        assert_eq!(slots.running, 4);
        assert_eq!(
            slots.decide(b, t0 + s(8)),
            Decision::WaitForSlot,
            "concurrent 4 reached"
        );

        // Job 2 ends: slot 1 of A is free again and is reused by the next job.
        slots.job_finished(a, 2);
        assert_eq!(slots.decide(a, t0 + s(9)), Decision::Request);
        let job = slots.job_started(a, 5, 10, t0 + s(9));
        assert_eq!(job.concurrent_id, 1);
    }

    #[test]
    fn failures_back_off_and_stopping_exits() {
        let t0 = Instant::now();
        let mut slots = Slots::new(1, Duration::from_secs(3), Some(1));
        let (a, _) = slots.upsert(key("a"), None, 1, t0);
        assert_eq!(slots.decide(a, t0), Decision::Request);
        slots.failed(a, t0, Duration::from_secs(20));
        assert_eq!(
            slots.decide(a, t0 + Duration::from_secs(4)),
            Decision::WaitUntil(t0 + Duration::from_secs(20))
        );
        assert_eq!(
            slots.decide(a, t0 + Duration::from_secs(20)),
            Decision::Request
        );
        slots.job_started(a, 1, 1, t0);
        assert!(!slots.taking_jobs, "max_jobs reached");
        assert_eq!(slots.decide(a, t0), Decision::Exit);
        assert!(!slots.idle());
        slots.job_finished(a, 1);
        assert!(slots.idle());
    }
}
