//! How a running job is told to stop, by the coordinator (through the uplink) or by the
//! runner process (through the poll loop): one value per job that only ever rises.

use std::sync::Arc;

use tokio::sync::watch;

/// Why a job should stop, in rising order of force. A job only ever moves up this
/// list: a later, weaker request does not undo a stronger one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopRequest {
    /// Keep running.
    None,
    /// The coordinator answered `Job-Status: canceling` (§4.5): stop the script, still
    /// run `after_script`, report the job as canceled.
    Cancel,
    /// The runner is shutting down (SIGTERM/SIGINT): stop the script, still run
    /// `after_script`, report `runner_interrupted`.
    Interrupt,
    /// The coordinator no longer wants this job (`403`, `Job-Status: canceled` or
    /// `failed`, §4.2): kill everything now, skip `after_script`, send no final update.
    Abort,
}

/// A job's stop request: shared by the job, its uplink and the poll loop.
#[derive(Debug, Clone)]
pub struct StopSignal {
    sender: Arc<watch::Sender<StopRequest>>,
}

impl Default for StopSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl StopSignal {
    /// A signal at [`StopRequest::None`].
    pub fn new() -> Self {
        Self {
            sender: Arc::new(watch::Sender::new(StopRequest::None)),
        }
    }

    /// Raises the request to `request` (ignored when it is not stronger than the
    /// current one). Returns whether it changed.
    pub fn request(&self, request: StopRequest) -> bool {
        self.sender.send_if_modified(|current| {
            if request > *current {
                *current = request;
                true
            } else {
                false
            }
        })
    }

    /// The current request.
    pub fn current(&self) -> StopRequest {
        *self.sender.borrow()
    }

    /// Waits until the request is at least `at_least`, and returns it.
    pub async fn reached(&self, at_least: StopRequest) -> StopRequest {
        let mut receiver = self.sender.subscribe();
        let result = receiver
            .wait_for(|current| *current >= at_least)
            .await
            .map(|current| *current);
        match result {
            Ok(current) => current,
            // The sender lives as long as `self`: unreachable, but never hang forever
            // on it either.
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_only_rise() {
        let signal = StopSignal::new();
        assert!(signal.request(StopRequest::Interrupt));
        assert!(!signal.request(StopRequest::Cancel));
        assert_eq!(signal.current(), StopRequest::Interrupt);
        assert_eq!(
            signal.reached(StopRequest::Cancel).await,
            StopRequest::Interrupt
        );
        let waiter = {
            let signal = signal.clone();
            tokio::spawn(async move { signal.reached(StopRequest::Abort).await })
        };
        signal.request(StopRequest::Abort);
        assert_eq!(waiter.await.unwrap(), StopRequest::Abort);
    }
}
