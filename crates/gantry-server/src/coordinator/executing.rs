//! What this process remembers of the jobs executing on runners, beyond their rows: the
//! token hash it issued or saw for each (until the job stops executing), which runners
//! cancel gracefully, the first final update of a job whose log was still incomplete
//! (§4.4), and the token hashes of stopped jobs (bounded), so a late call with one is
//! answered `403` with the job's status (§4.2, §4.5).
//!
//! Lost on restart, with safe defaults: a job taken over after a restart is cancelled
//! hard, its final update waits its whole accept window again, and a late call with an
//! old token is answered `403` without `Job-Status`. Its own lock, held for a few map
//! operations and never across an `await`; every operation is O(1) but
//! [`Executing::graceful_among`], O(the rows given).

use std::collections::{HashMap, HashSet};

/// Most token hashes of stopped jobs remembered; past it they are forgotten at once.
pub(crate) const MAX_ENDED_TOKENS: usize = 100_000;

/// See the module docs.
#[derive(Default)]
pub(crate) struct Executing {
    /// Jobs whose runner advertised `cancel_gracefully`.
    graceful: HashSet<i64>,
    /// First final update of a job whose trace was still incomplete, Unix ms.
    pending_final: HashMap<i64, i64>,
    /// Token hash and pipeline of each job handed out or seen executing, until it stops.
    issued: HashMap<i64, Issued>,
    /// Token hashes of stopped jobs → job id.
    ended: HashMap<String, i64>,
}

/// A token this process issued or saw for an executing job.
#[derive(Debug)]
struct Issued {
    token_hash: String,
    pipeline_id: i64,
}

impl Executing {
    /// `job_id` of `pipeline_id` was handed to a runner with the token of hash
    /// `token_hash`.
    pub(crate) fn handed_out(
        &mut self,
        (job_id, pipeline_id): (i64, i64),
        token_hash: String,
        graceful: bool,
    ) {
        self.issued.insert(
            job_id,
            Issued {
                token_hash,
                pipeline_id,
            },
        );
        if graceful {
            self.graceful.insert(job_id);
        }
    }

    /// A runner called with the token of `job_id` of `pipeline_id` (after a restart: the
    /// first time this process sees it).
    pub(crate) fn seen(&mut self, (job_id, pipeline_id): (i64, i64), token_hash: String) {
        self.issued.entry(job_id).or_insert(Issued {
            token_hash,
            pipeline_id,
        });
    }

    /// The pipeline of `job_id` when `token_hash` is the token this process knows it by.
    /// Only a first filter: another process may have put the job back in the queue and
    /// handed it out again, so a write made on its strength checks the token itself
    /// (`gantry_store::JobTokenGuard`).
    pub(crate) fn pipeline_of(&self, job_id: i64, token_hash: &str) -> Option<i64> {
        self.issued
            .get(&job_id)
            .filter(|issued| issued.token_hash == token_hash)
            .map(|issued| issued.pipeline_id)
    }

    /// The job a token belonged to, when it has stopped executing since.
    pub(crate) fn ended_job(&self, token_hash: &str) -> Option<i64> {
        self.ended.get(token_hash).copied()
    }

    /// The jobs among `job_ids` whose runners cancel gracefully.
    pub(crate) fn graceful_among(&self, job_ids: impl Iterator<Item = i64>) -> HashSet<i64> {
        job_ids.filter(|id| self.graceful.contains(id)).collect()
    }

    /// When the first final update of `job_id` came while its log was incomplete
    /// (`now` for this one if none came before).
    pub(crate) fn first_final_update(&mut self, job_id: i64, now: i64) -> i64 {
        *self.pending_final.entry(job_id).or_insert(now)
    }

    /// The final update of `job_id` is applied.
    pub(crate) fn final_applied(&mut self, job_id: i64) {
        self.pending_final.remove(&job_id);
    }

    /// `job_id` stopped executing (it ended, or went back to the queue): its token is
    /// remembered as an ended job's.
    pub(crate) fn stopped(&mut self, job_id: i64) {
        self.graceful.remove(&job_id);
        self.pending_final.remove(&job_id);
        if let Some(Issued {
            token_hash: hash, ..
        }) = self.issued.remove(&job_id)
        {
            if self.ended.len() >= MAX_ENDED_TOKENS {
                self.ended.clear();
            }
            self.ended.insert(hash, job_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_jobs_token_is_remembered_within_the_bound() {
        let mut e = Executing::default();
        e.handed_out((1, 7), "h1".into(), true);
        assert_eq!(e.pipeline_of(1, "h1"), Some(7));
        assert_eq!(e.pipeline_of(1, "h2"), None, "another token");
        assert_eq!(e.graceful_among([1, 2].into_iter()), HashSet::from([1]));
        assert_eq!(e.first_final_update(1, 10), 10);
        assert_eq!(e.first_final_update(1, 20), 10);
        e.stopped(1);
        assert_eq!(e.ended_job("h1"), Some(1));
        assert_eq!(e.pipeline_of(1, "h1"), None, "a stopped job's token");
        assert!(e.graceful_among([1].into_iter()).is_empty());
        assert_eq!(e.first_final_update(1, 30), 30, "forgotten when it stopped");
        // Past the bound the old ones go at once, the newest stays.
        for id in 2..=i64::try_from(MAX_ENDED_TOKENS).unwrap() + 1 {
            e.seen((id, 7), format!("h{id}"));
            e.stopped(id);
        }
        assert!(e.ended.len() <= MAX_ENDED_TOKENS);
        let last = i64::try_from(MAX_ENDED_TOKENS).unwrap() + 1;
        assert_eq!(e.ended_job(&format!("h{last}")), Some(last));
    }
}
