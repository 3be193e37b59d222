//! `LocalCache`: restore and save cache entries under `cache_dir`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use gantry_protocol::{Cache, CachePolicy, When};

use super::key::{default_key, sanitize_key};
use super::policy::resolve_policy;
use super::remote::RemoteCacheError;
use crate::artifacts::tar_zstd::{extract_tar_zstd, write_tar_zstd};
use crate::artifacts::{ArtifactError, CollectSpec, ExtractSummary, Lookup, Note, collect, expand};

/// File name of an archive inside its key folder.
pub const ARCHIVE_FILE: &str = "cache.tar.zst";

/// One `cache[]` entry of the payload, with `policy` kept as text so a `$VARIABLE`
/// policy can be resolved here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheSpec {
    /// Key as sent (may hold `$VARS`; empty = `<job name>/<ref>`).
    pub key: String,
    /// Paths (globs) to cache.
    pub paths: Vec<String>,
    /// Also cache untracked files.
    pub untracked: bool,
    /// `pull`, `push`, `pull-push`, empty, or a `$VARIABLE` naming one of them.
    pub policy: String,
    /// When to save.
    pub when: When,
    /// Keys to try in order when `key` has no archive.
    pub fallback_keys: Vec<String>,
}

impl From<&Cache> for CacheSpec {
    fn from(cache: &Cache) -> Self {
        Self {
            key: cache.key.clone(),
            paths: cache.paths.clone(),
            untracked: cache.untracked,
            policy: cache.policy.as_str().to_owned(),
            when: cache.when,
            fallback_keys: cache.fallback_keys.clone(),
        }
    }
}

/// What the cache needs to know about the job.
#[derive(Clone, Copy)]
pub struct CacheContext<'a> {
    /// `job_info.name`, for the default key.
    pub job_name: &'a str,
    /// `git_info.ref`, for the default key.
    pub git_ref: &'a str,
    /// The job's variables (key, fallback keys, policy, `CACHE_FALLBACK_KEY`, paths).
    pub lookup: Lookup<'a>,
    /// The build directory as the job sees it, when that is another path (a container's
    /// `/builds/<project>`): absolute `paths` under it name files under the build
    /// directory.
    pub seen_dir: Option<&'a Path>,
}

/// A cache problem that fails the stage (everything else is a warning).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// `policy` is none of `pull`, `push`, `pull-push` after expansion.
    #[error("use cache {key}: unknown cache policy {policy:?} (expected pull, push or pull-push)")]
    UnknownPolicy {
        /// The expanded policy.
        policy: String,
        /// The cache key.
        key: String,
    },
    /// The project path given to [`LocalCache::new`] is not a relative path.
    #[error(
        "use cache folder for project {path:?}: the project path must be relative without `..`"
    )]
    BadProjectPath {
        /// The path given.
        path: String,
    },
    /// The shared cache (`[runners.cache]` with a `Type`) cannot be opened.
    #[error("open the shared cache: {0}")]
    Remote(#[from] super::remote::RemoteCacheError),
}

/// Why a cache entry was not restored or saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// No `paths` and no `untracked`: nothing is cached.
    NothingToCache,
    /// The key is unusable after sanitizing.
    InvalidKey,
    /// `policy: push` (restore) or `policy: pull` (save).
    Policy,
    /// `when` does not match the job's result (save only).
    When,
    /// No file matched (save only); the previous archive is kept.
    NoFiles,
}

/// The result of [`LocalCache::restore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreOutcome {
    /// The archive of the job's own key was extracted.
    Hit {
        /// The key.
        key: String,
        /// What was written.
        summary: ExtractSummary,
    },
    /// The job's key had no archive; a fallback key's was extracted.
    FallbackHit {
        /// The fallback key used.
        key: String,
        /// What was written.
        summary: ExtractSummary,
    },
    /// No key had a (readable) archive.
    Miss,
    /// Nothing was attempted.
    Skipped(SkipReason),
}

/// What [`LocalCache::restore`] did, with its log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreReport {
    /// The sanitized key (`None` when unusable or not computed).
    pub key: Option<String>,
    /// Hit, fallback hit, miss or skipped.
    pub outcome: RestoreOutcome,
    /// Log lines in order.
    pub notes: Vec<Note>,
}

/// The result of [`LocalCache::save`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaveOutcome {
    /// The archive was written.
    Saved {
        /// The key.
        key: String,
        /// The archive file.
        path: PathBuf,
        /// Files and symlinks archived.
        files: usize,
        /// Bytes of content archived.
        content_bytes: u64,
        /// Size of the archive.
        archive_bytes: u64,
    },
    /// Nothing was written on purpose.
    Skipped(SkipReason),
    /// Writing failed (a warning in the job log; the job goes on).
    Failed {
        /// The key.
        key: String,
        /// What went wrong.
        error: String,
    },
}

/// What [`LocalCache::save`] did, with its log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveReport {
    /// The sanitized key (`None` when unusable or not computed).
    pub key: Option<String>,
    /// Saved, skipped or failed.
    pub outcome: SaveOutcome,
    /// Log lines in order.
    pub notes: Vec<Note>,
}

/// A shared store of cache archives (`[runners.cache] Type = "s3"`): the local folder
/// mirrors it. Calls block (caches are restored and saved on blocking threads).
pub trait RemoteArchives: Send + Sync {
    /// Downloads the archive of `key` into `dest` (replacing it, atomically); `false`
    /// when the store has none.
    fn fetch(&self, key: &str, dest: &Path) -> Result<bool, RemoteCacheError>;
    /// Uploads `archive` as the archive of `key`.
    fn store(&self, key: &str, archive: &Path) -> Result<(), RemoteCacheError>;
}

/// The cache folder of one project: `<cache_dir>/<project path>`, mirroring a
/// [`RemoteArchives`] store when the runner has one.
#[derive(Clone)]
pub struct LocalCache {
    dir: PathBuf,
    remote: Option<std::sync::Arc<dyn RemoteArchives>>,
}

impl std::fmt::Debug for LocalCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalCache")
            .field("dir", &self.dir)
            .field("remote", &self.remote.is_some())
            .finish()
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl LocalCache {
    /// The cache of the project at `project_path` (relative, e.g.
    /// `gitlab.example.com/acme/widget`) inside `cache_dir`. Creates nothing yet.
    pub fn new(cache_dir: &Path, project_path: &str) -> Result<Self, CacheError> {
        let bad = || CacheError::BadProjectPath {
            path: project_path.to_owned(),
        };
        if project_path.starts_with('/') || project_path.contains('\0') {
            return Err(bad());
        }
        let mut dir = cache_dir.to_path_buf();
        for part in project_path.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err(bad()),
                part => dir.push(part),
            }
        }
        Ok(Self { dir, remote: None })
    }

    /// Keys are looked up in `remote` first (its archive, or its lack of one, wins over
    /// the local copy) and saved archives are uploaded to it.
    pub fn with_remote(mut self, remote: std::sync::Arc<dyn RemoteArchives>) -> Self {
        self.remote = Some(remote);
        self
    }

    /// `<cache_dir>/<project path>`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the archive of a (sanitized) key lives.
    pub fn archive_path(&self, key: &str) -> PathBuf {
        self.dir.join(key).join(ARCHIVE_FILE)
    }

    /// Resolves the job's key: expanded, defaulted, sanitized. Warnings go to `notes`.
    fn resolve_key(
        &self,
        spec: &CacheSpec,
        cx: &CacheContext<'_>,
        notes: &mut Vec<Note>,
        action: &str,
    ) -> Option<String> {
        let raw = if spec.key.is_empty() {
            default_key(cx.job_name, cx.git_ref)
        } else {
            expand(&spec.key, cx.lookup)
        };
        sanitize(&raw, notes, action)
    }

    /// Restores `spec` into `build_dir`: the key, then the fallback keys, then
    /// `CACHE_FALLBACK_KEY`. Only an unknown policy is an error; a miss or a corrupt
    /// archive is reported in the outcome and the notes.
    pub fn restore(
        &self,
        spec: &CacheSpec,
        cx: &CacheContext<'_>,
        build_dir: &Path,
    ) -> Result<RestoreReport, CacheError> {
        let mut notes = Vec::new();
        if spec.paths.is_empty() && !spec.untracked {
            return Ok(report(
                None,
                RestoreOutcome::Skipped(SkipReason::NothingToCache),
                notes,
            ));
        }
        let Some(key) = self.resolve_key(spec, cx, &mut notes, "extraction") else {
            return Ok(report(
                None,
                RestoreOutcome::Skipped(SkipReason::InvalidKey),
                notes,
            ));
        };
        let policy = resolve_policy(&spec.policy, cx.lookup).map_err(|policy| {
            CacheError::UnknownPolicy {
                policy,
                key: key.clone(),
            }
        })?;
        if policy == CachePolicy::Push {
            notes.push(Note::Info(format!(
                "Not downloading cache {key} due to policy"
            )));
            return Ok(report(
                Some(key),
                RestoreOutcome::Skipped(SkipReason::Policy),
                notes,
            ));
        }

        let mut candidates = vec![key.clone()];
        for fallback in &spec.fallback_keys {
            if fallback.is_empty() {
                continue;
            }
            if let Some(fallback) = sanitize(&expand(fallback, cx.lookup), &mut notes, "extraction")
            {
                candidates.push(fallback);
            }
        }
        if let Some(global) = (cx.lookup)("CACHE_FALLBACK_KEY").filter(|k| !k.is_empty()) {
            let global = expand(&global, cx.lookup);
            if global.ends_with("-protected") {
                notes.push(Note::Warning(format!(
                    "CACHE_FALLBACK_KEY {global:?} not allowed to end in \"-protected\""
                )));
            } else if let Some(global) = sanitize(&global, &mut notes, "extraction") {
                candidates.push(global);
            }
        }

        for (index, candidate) in candidates.iter().enumerate() {
            if index > 0 && candidates[..index].contains(candidate) {
                continue;
            }
            notes.push(Note::Info(format!("Checking cache for {candidate}...")));
            let archive = self.archive_path(candidate);
            if let Some(remote) = &self.remote {
                match remote.fetch(candidate, &archive) {
                    Ok(true) => {}
                    // The shared cache has none: neither has this runner.
                    Ok(false) => {
                        let _ = fs::remove_file(&archive);
                    }
                    Err(error) => notes.push(Note::Warning(format!(
                        "Failed to download cache {candidate}: {error}"
                    ))),
                }
            }
            if !archive.is_file() {
                notes.push(Note::Warning(format!("Cache not found for {candidate}")));
                continue;
            }
            match extract_tar_zstd(&archive, build_dir) {
                Ok(summary) => {
                    notes.extend(summary.notes.iter().cloned());
                    notes.push(Note::Info("Successfully extracted cache".to_owned()));
                    let outcome = if index == 0 {
                        RestoreOutcome::Hit {
                            key: candidate.clone(),
                            summary,
                        }
                    } else {
                        RestoreOutcome::FallbackHit {
                            key: candidate.clone(),
                            summary,
                        }
                    };
                    return Ok(report(Some(key), outcome, notes));
                }
                Err(error) => {
                    notes.push(Note::Warning(format!(
                        "Failed to extract cache: failed to {error}"
                    )));
                }
            }
        }
        Ok(report(Some(key), RestoreOutcome::Miss, notes))
    }

    /// Saves `spec` from `build_dir` for a job that `succeeded` (or not). Only an
    /// unknown policy is an error; a failure to write is reported as
    /// [`SaveOutcome::Failed`] (gitlab-runner: "Failed to create cache", not fatal).
    pub fn save(
        &self,
        spec: &CacheSpec,
        cx: &CacheContext<'_>,
        build_dir: &Path,
        succeeded: bool,
    ) -> Result<SaveReport, CacheError> {
        let mut notes = Vec::new();
        let Some(key) = self.resolve_key(spec, cx, &mut notes, "archiving") else {
            return Ok(save_report(
                None,
                SaveOutcome::Skipped(SkipReason::InvalidKey),
                notes,
            ));
        };
        let policy = resolve_policy(&spec.policy, cx.lookup).map_err(|policy| {
            CacheError::UnknownPolicy {
                policy,
                key: key.clone(),
            }
        })?;
        if policy == CachePolicy::Pull {
            notes.push(Note::Info(format!(
                "Not uploading cache {key} due to policy"
            )));
            return Ok(save_report(
                Some(key),
                SaveOutcome::Skipped(SkipReason::Policy),
                notes,
            ));
        }
        let wanted = match spec.when {
            When::Always => true,
            When::OnSuccess => succeeded,
            When::OnFailure => !succeeded,
        };
        if !wanted {
            notes.push(Note::Info(format!(
                "Skipping cache {key}: `when: {}` and the job {}",
                spec.when,
                if succeeded { "succeeded" } else { "failed" }
            )));
            return Ok(save_report(
                Some(key),
                SaveOutcome::Skipped(SkipReason::When),
                notes,
            ));
        }
        if spec.paths.is_empty() && !spec.untracked {
            return Ok(save_report(
                Some(key),
                SaveOutcome::Skipped(SkipReason::NothingToCache),
                notes,
            ));
        }

        notes.push(Note::Info(format!("Creating cache {key}...")));
        let paths: Vec<String> = spec.paths.iter().map(|p| expand(p, cx.lookup)).collect();
        let collected = collect(
            build_dir,
            &CollectSpec {
                paths: &paths,
                exclude: &[],
                untracked: spec.untracked,
                seen_dir: cx.seen_dir,
            },
        );
        notes.extend(collected.notes.iter().cloned());
        if collected.is_empty() {
            notes.push(Note::Warning(format!(
                "No files to cache; the previous archive for {key} (if any) is kept"
            )));
            return Ok(save_report(
                Some(key),
                SaveOutcome::Skipped(SkipReason::NoFiles),
                notes,
            ));
        }
        let archive = self.archive_path(&key);
        match write_atomically(&archive, |temp| {
            write_tar_zstd(build_dir, &collected.entries, temp)
        }) {
            Ok(archive_bytes) => {
                if let Some(remote) = &self.remote {
                    if let Err(error) = remote.store(&key, &archive) {
                        notes.push(Note::Warning(format!(
                            "Failed to upload cache {key}: {error}"
                        )));
                        return Ok(save_report(
                            Some(key.clone()),
                            SaveOutcome::Failed {
                                key,
                                error: error.to_string(),
                            },
                            notes,
                        ));
                    }
                    notes.push(Note::Info(format!("Uploaded cache {key}")));
                }
                notes.push(Note::Info("Created cache".to_owned()));
                let outcome = SaveOutcome::Saved {
                    key: key.clone(),
                    path: archive,
                    files: collected.file_count(),
                    content_bytes: collected.total_bytes(),
                    archive_bytes,
                };
                Ok(save_report(Some(key), outcome, notes))
            }
            Err(error) => {
                let error = format!("failed to {error}");
                notes.push(Note::Warning(format!("Failed to create cache: {error}")));
                Ok(save_report(
                    Some(key.clone()),
                    SaveOutcome::Failed { key, error },
                    notes,
                ))
            }
        }
    }
}

fn sanitize(raw: &str, notes: &mut Vec<Note>, action: &str) -> Option<String> {
    match sanitize_key(raw) {
        Ok(key) if key.is_empty() => {
            notes.push(Note::Info(format!(
                "Skipping cache {action} due to empty cache key"
            )));
            None
        }
        Ok(key) => {
            if key != raw {
                notes.push(Note::Warning(format!(
                    "cache key {raw:?} sanitized to {key:?}"
                )));
            }
            Some(key)
        }
        Err(error) => {
            notes.push(Note::Info(format!(
                "Skipping cache {action} due to: failed to {error}"
            )));
            None
        }
    }
}

/// Writes through a temporary file next to `target`, then renames it into place.
fn write_atomically(
    target: &Path,
    write: impl FnOnce(&Path) -> Result<u64, ArtifactError>,
) -> Result<u64, ArtifactError> {
    let dir = target.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| ArtifactError::io("create directory", dir, e))?;
    let temp = dir.join(format!(
        ".{ARCHIVE_FILE}.{}.{}.tmp",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = write(&temp).and_then(|size| {
        fs::rename(&temp, target)
            .map(|()| size)
            .map_err(|e| ArtifactError::io("move archive into place at", target, e))
    });
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn report(key: Option<String>, outcome: RestoreOutcome, notes: Vec<Note>) -> RestoreReport {
    RestoreReport {
        key,
        outcome,
        notes,
    }
}

fn save_report(key: Option<String>, outcome: SaveOutcome, notes: Vec<Note>) -> SaveReport {
    SaveReport {
        key,
        outcome,
        notes,
    }
}
