//! The runner-local cache (spec `runner-api.md` §3.5.9, `ci-yaml.md` §3 `cache`):
//! restoring before the script and saving after it, one archive per key.
//!
//! # Layout
//!
//! ```text
//! <cache_dir>/<project path>/<key>/cache.tar.zst
//! ```
//!
//! * `<project path>` is chosen by the caller (the project's build-directory path,
//!   e.g. `gitlab.example.com/acme/widget`); it must be relative with no `..`.
//! * `<key>` is the sanitized key ([`sanitize_key`], gitlab-runner's rules). It may
//!   contain `/` — the default key `<job name>/<ref>` does — giving nested folders.
//! * `cache.tar.zst` is a POSIX/GNU tar stream compressed with zstd at level 1 (fast).
//!   Entries are the collected paths relative to the build directory, sorted:
//!   directories, regular files (mode and mtime kept) and symlinks (stored as links).
//!   Paths are collected exactly as for artifacts (`paths` globs, `untracked`; see
//!   [`crate::artifacts`]).
//! * An archive is written to `.cache.tar.zst.<pid>.<n>.tmp` in the key folder, synced,
//!   then renamed over `cache.tar.zst`: readers see the old archive or the new one,
//!   never a partial one; concurrent jobs saving the same key leave the last complete
//!   archive.
//!
//! # Keys, fallbacks, policy, when
//!
//! The key comes from the payload already resolved by the coordinator: `key:files`
//! (the hash of the named files) and `key:prefix` are computed at pipeline creation,
//! and the `-<index>`/`-protected`/`-non_protected` suffixes are appended by the
//! server (§3.5.9), so the runner never sees `files`. The runner expands `$VARS` in
//! the key, uses `<job name>/<ref>` when it is empty, and sanitizes it.
//!
//! Restore tries the key, then each `fallback_keys` entry (expanded, sanitized) in
//! order, then the `CACHE_FALLBACK_KEY` variable (refused when it ends in
//! `-protected`, which is reserved for protected refs). The first archive found is
//! extracted: [`RestoreOutcome::Hit`] or [`RestoreOutcome::FallbackHit`]; none is
//! [`RestoreOutcome::Miss`]. A corrupt archive is a warning and the next key is tried.
//!
//! `policy` may be a `$VARIABLE`, expanded before use; `pull` skips saving, `push`
//! skips restoring, anything unknown fails the stage (as in gitlab-runner). `when`
//! (`on_success`, `on_failure`, `always`) decides whether to save for the job's
//! result. Nothing to save (no `paths`, no `untracked`, or no matching files) leaves
//! the previous archive in place.
//!
//! A shared cache (`[runners.cache] Type = "s3"`): `for_job` attaches a `RemoteArchives`
//! store (`S3Archives`, `cache/remote.rs`) that the local folder then mirrors — an archive
//! is fetched before its key is tried and uploaded after it is written.
//!
//! Log lines follow gitlab-runner: `Checking cache for <key>...`,
//! `Successfully extracted cache`, `WARNING: Cache not found for <key>`,
//! `Not downloading cache <key> due to policy`, `Creating cache <key>...`,
//! `Created cache`, `WARNING: Failed to create cache: …`.

mod key;
mod local;
mod policy;
mod remote;

pub use key::{KeyError, default_key, sanitize_key};
pub use local::{
    ARCHIVE_FILE, CacheContext, CacheError, CacheSpec, LocalCache, RemoteArchives, RestoreOutcome,
    RestoreReport, SaveOutcome, SaveReport, SkipReason,
};
pub use remote::{RemoteCacheError, S3Archives};

/// The job's cache: the local folder of its project, mirroring the shared S3 cache when
/// the runner has one (`[runners.cache] Type = "s3"`). `Err`: why not.
/// Types Gantry does not support yet (`gcs`, `azure`) use the local cache; `warn` says so.
pub fn for_job(
    cache_dir: &std::path::Path,
    project_path: &str,
    runner: &crate::config::RunnerConfig,
    project_id: i64,
    warn: &dyn Fn(&str),
) -> Result<LocalCache, CacheError> {
    let local = LocalCache::new(cache_dir, project_path)?;
    match runner.cache.kind {
        None => Ok(local),
        Some(crate::config::CacheType::S3) => {
            let short = crate::config::short_token(&runner.token);
            let remote = S3Archives::new(&runner.cache, &short, project_id)?;
            Ok(local.with_remote(std::sync::Arc::new(remote)))
        }
        Some(kind) => {
            warn(&format!(
                "[runners.cache] Type = \"{}\" is not supported yet; using the local cache in {}",
                kind.as_str(),
                cache_dir.display()
            ));
            Ok(local)
        }
    }
}
pub use policy::resolve_policy;
