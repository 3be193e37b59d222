//! [`Level`]: how much a runner event matters — the poll loop's events
//! ([`crate::poll::PollEvent`]) and the fleet's log lines ([`crate::fleet`]) share it.

/// How important an event is (compared with the config's `log_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Details: every request outcome.
    Debug,
    /// Normal operation.
    Info,
    /// Something is wrong but handled.
    Warn,
    /// Something failed.
    Error,
}
