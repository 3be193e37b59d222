//! Long polling of `POST /jobs/request` (§3.3).
//!
//! The coordinator keeps an opaque *queue version* per runner and changes it whenever a
//! job the runner could pick becomes pending. Every `204` carries it in
//! [`header::LAST_UPDATE`](crate::header::LAST_UPDATE); the runner echoes it as
//! [`JobRequest::last_update`](crate::JobRequest::last_update) without interpreting
//! it. When the echoed value equals the current version, the coordinator holds the
//! request until the version changes (then matches and answers `201` or `204`) or
//! [`DEFAULT_HOLD`] elapses (`204`).

use std::time::Duration;

/// How long the coordinator holds a job request whose `last_update` is current
/// (GitLab's recommended Workhorse `-apiCiLongPollingDuration`).
pub const DEFAULT_HOLD: Duration = Duration::from_secs(50);

/// Largest job request body Workhorse reads while long polling is enabled; larger
/// bodies get `413` (§3.2).
pub const MAX_REQUEST_BODY_BYTES: usize = 32 * 1024;

/// How long the runner's HTTP client waits for response headers; a hold must stay
/// well below this (§3.3, §7.5).
pub const RUNNER_RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// How long the runner's HTTP client allows one request (§7.5).
pub const RUNNER_REQUEST_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Lifetime of GitLab's queue version key (`runner:build_queue:<token>`) in Redis.
pub const QUEUE_VERSION_TTL: Duration = Duration::from_secs(60 * 60);
