//! Exponential back-off with jitter, for everything the runner retries: job requests
//! after errors (the poll loop), trace patches and job updates while the coordinator is
//! unreachable (the uplink).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Doubles from `base` up to `max`, each delay drawn uniformly from 75–125 % of the
/// nominal value (never above `max`), so runners that lost the same coordinator do not
/// come back in lockstep.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    max: Duration,
    attempt: u32,
    state: u64,
}

static SEED_COUNTER: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);

impl Backoff {
    /// A back-off starting at `base`, capped at `max`.
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let counter = SEED_COUNTER.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        Self {
            base,
            max: max.max(base),
            attempt: 0,
            state: nanos ^ counter ^ u64::from(std::process::id()),
        }
    }

    /// The delay before the next attempt; each call doubles the nominal delay.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let nominal = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        // 75 %..125 % of nominal.
        let factor = 0.75 + (self.random() % 1001) as f64 / 2000.0;
        nominal.mul_f64(factor).min(self.max)
    }

    /// Failed attempts since the last [`reset`](Self::reset).
    #[cfg(test)]
    pub(crate) fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Back to `base` after a success.
    pub(crate) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// splitmix64.
    fn random(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_with_jitter_up_to_the_cap() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let delays: Vec<Duration> = (0..8).map(|_| backoff.next_delay()).collect();
        assert!(
            delays[0] >= Duration::from_millis(750) && delays[0] <= Duration::from_millis(1250)
        );
        assert!(delays[2] >= Duration::from_secs(3) && delays[2] <= Duration::from_secs(5));
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(10)));
        assert!(delays[7] >= Duration::from_millis(7500));
        assert_eq!(backoff.attempts(), 8);
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(1250));
    }
}
