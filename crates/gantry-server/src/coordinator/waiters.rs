//! Who waits for a job, grouped by what their runners can take, so that a job becoming
//! pending wakes only requests that can take it: at most as many of each group (plus a
//! margin) as it has new jobs fitting it, oldest waiter first.
//!
//! Runners are grouped by the facts job matching reads ([`super::queue::runner_fit`]):
//! scope (project, enabled projects or group), protected refs only, tags, `run_untagged`, any tags. A wake
//! checks each group once per new job (O(groups × new jobs), not O(waiters)); 10,000
//! runners registered alike are one group.
//!
//! No job is left behind: a woken request that goes away before it looked at the queue
//! hands its wake on ([`Woken`]); wakes without the new jobs' facts (a job put back,
//! a restart) wake everyone; and once a second the timers wake the oldest waiter of
//! every group ([`Waiters::wake_each_group`]), which catches a job that became pending
//! in another process (that process's wakes do not reach this one) within a second, as
//! the queue snapshot's own time to live does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::queue::{Fit, JobNeeds, runner_fit};
use super::views::Runner;

/// More waiters of a group woken than it has new fitting jobs: for the ones that lose
/// the job to a request of another group that also fits.
const WAKE_MARGIN: usize = 2;

/// The facts [`runner_fit`] reads of a runner: runners alike wait in one group.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FitKey {
    project_id: Option<i64>,
    enabled_projects: Vec<i64>,
    group: Option<String>,
    protected_only: bool,
    any_tags: bool,
    run_untagged: bool,
    tags: Vec<String>,
}

impl FitKey {
    fn of(runner: &Runner) -> FitKey {
        let mut tags = runner.tag_list.clone();
        tags.sort();
        tags.dedup();
        let mut enabled_projects = runner.enabled_projects.clone();
        enabled_projects.sort_unstable();
        FitKey {
            project_id: runner.project_id,
            enabled_projects,
            group: runner.groups.first().map(|g| g.full_path.clone()),
            protected_only: runner.protected_only(),
            any_tags: runner.any_tags,
            run_untagged: runner.run_untagged,
            tags,
        }
    }
}

struct Group {
    /// A runner of the group, for [`runner_fit`].
    sample: Runner,
    /// Waiters by ticket number: the oldest first.
    waiting: BTreeMap<u64, Arc<Notify>>,
}

/// A job that became pending, as far as waking goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewPending {
    pub project_id: i64,
    /// The project's path, for group runners (empty: unknown, every group runner is
    /// woken as if it fit).
    pub project_name: String,
    pub protected: bool,
    pub tags: Vec<String>,
}

/// The waiting job requests of this process.
#[derive(Default)]
pub(crate) struct Waiters {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    groups: HashMap<FitKey, Group>,
}

/// A request's place among the waiters; leaves on drop.
pub(crate) struct Ticket<'a> {
    waiters: &'a Waiters,
    key: FitKey,
    id: u64,
    notify: Arc<Notify>,
}

impl Ticket<'_> {
    /// Until a wake for this ticket (one sent before this call counts).
    pub(crate) async fn woken(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut inner = self.waiters.lock();
        if let Some(group) = inner.groups.get_mut(&self.key) {
            group.waiting.remove(&self.id);
            if group.waiting.is_empty() {
                inner.groups.remove(&self.key);
            }
        }
    }
}

/// A request woken for a job: dropped before it looked at the queue (its runner hung up),
/// it wakes another waiter of its group in its place.
pub(crate) struct Woken<'a> {
    waiters: &'a Waiters,
    key: Option<FitKey>,
}

impl Woken<'_> {
    /// The request looked at the queue: the wake was used.
    pub(crate) fn used(&mut self) {
        self.key = None;
    }
}

impl Drop for Woken<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut inner = self.waiters.lock();
            if let Some(group) = inner.groups.get_mut(&key) {
                wake(group, 1);
            }
        }
    }
}

/// Wake the `n` oldest waiters of `group`; they leave it (they register again to wait
/// more).
fn wake(group: &mut Group, n: usize) -> usize {
    let mut woken = 0;
    while woken < n {
        let Some((_, notify)) = group.waiting.pop_first() else {
            break;
        };
        notify.notify_one();
        woken += 1;
    }
    woken
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Join the waiters for `runner`'s jobs. Register before looking at the queue: a job
    /// that becomes pending meanwhile then wakes this ticket.
    pub(crate) fn register(&self, runner: &Runner) -> Ticket<'_> {
        let key = FitKey::of(runner);
        let notify = Arc::new(Notify::new());
        let mut inner = self.lock();
        inner.next += 1;
        let id = inner.next;
        inner
            .groups
            .entry(key.clone())
            .or_insert_with(|| Group {
                sample: runner.clone(),
                waiting: BTreeMap::new(),
            })
            .waiting
            .insert(id, Arc::clone(&notify));
        Ticket {
            waiters: self,
            key,
            id,
            notify,
        }
    }

    /// A woken request's hand-off guard (see [`Woken`]).
    pub(crate) fn woken(&self, runner: &Runner) -> Woken<'_> {
        Woken {
            waiters: self,
            key: Some(FitKey::of(runner)),
        }
    }

    /// Jobs became pending: wake, in each group, as many waiters as the jobs that fit
    /// its runners, plus [`WAKE_MARGIN`]. Returns how many were woken.
    pub(crate) fn wake_for(&self, jobs: &[NewPending]) -> usize {
        let mut inner = self.lock();
        let mut woken = 0;
        for group in inner.groups.values_mut() {
            let fitting = jobs
                .iter()
                .filter(|j| {
                    let fit = runner_fit(
                        &group.sample,
                        &JobNeeds {
                            project_id: j.project_id,
                            project_name: &j.project_name,
                            protected: j.protected,
                            tags: &j.tags,
                        },
                    );
                    let unknown_path = j.project_name.is_empty() && !group.sample.groups.is_empty();
                    Fit {
                        scope: fit.scope || unknown_path,
                        ..fit
                    }
                    .runs()
                })
                .count();
            if fitting > 0 {
                woken += wake(group, fitting + WAKE_MARGIN);
            }
        }
        inner.groups.retain(|_, g| !g.waiting.is_empty());
        woken
    }

    /// Wake every waiter (a change whose jobs are not known: a job put back, a restart).
    pub(crate) fn wake_all(&self) -> usize {
        let mut inner = self.lock();
        let woken = inner.groups.values_mut().map(|g| wake(g, usize::MAX)).sum();
        inner.groups.clear();
        woken
    }

    /// Wake the oldest waiter of every group (the timers, once a second).
    pub(crate) fn wake_each_group(&self) -> usize {
        let mut inner = self.lock();
        let woken = inner.groups.values_mut().map(|g| wake(g, 1)).sum();
        inner.groups.retain(|_, g| !g.waiting.is_empty());
        woken
    }

    /// How many requests wait.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().groups.values().map(|g| g.waiting.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(id: i64, tags: &[&str], run_untagged: bool) -> Runner {
        Runner {
            run_untagged,
            ..Runner::online_instance(id, tags)
        }
    }

    fn job(tags: &[&str]) -> NewPending {
        NewPending {
            project_id: 1,
            project_name: "demo".to_owned(),
            protected: false,
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    fn is_woken(t: &Ticket<'_>) -> bool {
        let notified = t.notify.notified();
        tokio::pin!(notified);
        // A stored permit completes the future at once.
        poll_once(notified.as_mut())
    }

    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        f.poll(&mut cx).is_ready()
    }

    /// A job wakes only requests whose runners can take it, as many as it needs plus a
    /// margin, the oldest first, whatever the number waiting: 10,000 requests of runners
    /// alike are one group, checked once.
    #[test]
    fn a_job_wakes_only_waiters_that_can_take_it() {
        let waiters = Waiters::default();
        let gpu: Vec<Runner> = (0..10_000).map(|i| runner(i, &["gpu"], false)).collect();
        let linux = runner(20_000, &["linux"], true);
        let gpu_tickets: Vec<Ticket<'_>> = gpu.iter().map(|r| waiters.register(r)).collect();
        let linux_ticket = waiters.register(&linux);
        assert_eq!(waiters.len(), 10_001);
        assert_eq!(waiters.lock().groups.len(), 2);

        assert_eq!(waiters.wake_for(&[job(&["gpu"])]), 1 + WAKE_MARGIN);
        assert!(gpu_tickets[..=WAKE_MARGIN].iter().all(is_woken));
        assert!(!gpu_tickets[WAKE_MARGIN + 1..].iter().any(is_woken));
        assert!(!is_woken(&linux_ticket));

        // An untagged job: only the runner that runs untagged jobs.
        assert_eq!(waiters.wake_for(&[job(&[])]), 1);
        assert!(is_woken(&linux_ticket));
        // A job nobody can take wakes nobody.
        assert_eq!(waiters.wake_for(&[job(&["arm"])]), 0);
        assert_eq!(waiters.len(), 10_000 - 1 - WAKE_MARGIN);
    }

    /// A woken request that goes away before it looked hands its wake on; a ticket
    /// dropped leaves the waiters.
    #[test]
    fn a_lost_wake_is_handed_on() {
        let waiters = Waiters::default();
        let r = runner(1, &["docker"], false);
        let first = waiters.register(&r);
        let second = waiters.register(&r);
        assert_eq!(waiters.wake_for(&[job(&["docker"])]), 2);
        let third = waiters.register(&r);
        drop(first);
        drop(second);
        {
            let _woken = waiters.woken(&r); // the request went away before looking
        }
        assert!(is_woken(&third));
        let mut used = waiters.woken(&r);
        used.used();
        drop(used);
        drop(third);
        assert_eq!(waiters.len(), 0);
        // Once a second every group's oldest waiter looks.
        let a = waiters.register(&r);
        let b = waiters.register(&runner(2, &["gpu"], false));
        assert_eq!(waiters.wake_each_group(), 2);
        assert!(is_woken(&a) && is_woken(&b));
    }
}
