//! Artifacts (runner API §6): uploads of a running job (archive and reports, with
//! `expire_in`), downloads by dependent jobs, and dotenv reports turned into variables for
//! the jobs that depend on the uploader (`ci-yaml.md` §5.8), within GitLab's limits.
//!
//! Blobs: `artifacts/<job id>/<type>` holds the upload, `dotenv/<job id>.json` the parsed
//! variables of a dotenv report.
//!
//! The service ([`Artifacts`], `Coordinator::artifacts`) owns the uploads, their blobs,
//! expiry and removal; it calls the store and the blob store only. The coordinator keeps
//! what needs more: a runner's upload and download (the job token, the job token scope,
//! `needs:project`, a deploy job's URL from its dotenv report), erasing a job (its log
//! too), the latest successful job of a ref.

use std::io::Read as _;
use std::sync::Arc;

use gantry_protocol::{ArtifactType, ArtifactUploadParams};
use gantry_store::{ArtifactSelection, NewArtifact};

use super::error::{CoordinatorError, Result};
use super::job_token_scope::JobTokenUse;
use super::time::now_ms;
use super::views::{Artifact, JobView};
use super::{Coordinator, token};
use sha2::{Digest as _, Sha256};

/// GitLab's `dotenv_variables` limit (default plan limit).
pub(crate) const DOTENV_MAX_VARIABLES: usize = 20;
/// GitLab's `dotenv_size` limit, bytes.
pub(crate) const DOTENV_MAX_BYTES: usize = 5 * 1024;
/// Instance default of `expire_in` (GitLab: 30 days).
const DEFAULT_EXPIRE_SECS: i64 = 30 * 24 * 60 * 60;

fn artifact_key(job_id: i64, t: ArtifactType) -> String {
    format!("artifacts/{job_id}/{}", t.as_str())
}

fn dotenv_key(job_id: i64) -> String {
    format!("dotenv/{job_id}.json")
}

/// Why a dotenv report is rejected (GitLab's messages).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum DotenvError {
    #[error("Dotenv Artifact Too Big. Maximum Allowable Size: {DOTENV_MAX_BYTES}")]
    TooBig,
    #[error("Dotenv files cannot have more than {DOTENV_MAX_VARIABLES} variables")]
    TooManyVariables,
    #[error("Invalid Format: line {0} is not KEY=VALUE")]
    InvalidFormat(usize),
    #[error("Invalid Key: `{0}` (letters, digits and `_` only)")]
    InvalidKey(String),
    #[error("Invalid Encoding: the report is not UTF-8 text")]
    Encoding,
}

/// The text of a dotenv upload: a multi-member gzip stream (what gitlab-runner sends),
/// or plain text from other clients.
fn dotenv_text(data: &[u8]) -> std::result::Result<String, DotenvError> {
    let bytes = if data.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(data)
            .take(DOTENV_MAX_BYTES as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|_| DotenvError::Encoding)?;
        out
    } else {
        data.to_vec()
    };
    if bytes.len() > DOTENV_MAX_BYTES {
        return Err(DotenvError::TooBig);
    }
    String::from_utf8(bytes).map_err(|_| DotenvError::Encoding)
}

/// GitLab's `Ci::ParseDotenvArtifactService`: every line `KEY=VALUE` (split at the first
/// `=`, both sides stripped; no blank lines or comments), at most 20 variables, a later
/// line replaces an earlier one of the same key.
pub(crate) fn parse_dotenv(data: &[u8]) -> std::result::Result<Vec<(String, String)>, DotenvError> {
    if data.len() > DOTENV_MAX_BYTES {
        return Err(DotenvError::TooBig);
    }
    let text = dotenv_text(data)?;
    let mut vars: indexmap::IndexMap<String, String> = indexmap::IndexMap::new();
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let line = line.trim_end_matches('\n').trim_end_matches('\r');
        let Some((k, v)) = line.split_once('=') else {
            return Err(DotenvError::InvalidFormat(n + 1));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(DotenvError::InvalidKey(k.to_owned()));
        }
        vars.insert(k.to_owned(), v.to_owned());
    }
    if vars.len() > DOTENV_MAX_VARIABLES {
        return Err(DotenvError::TooManyVariables);
    }
    Ok(vars.into_iter().collect())
}

/// Expired artifacts removed per pass of [`Artifacts::remove_expired_artifacts`].
pub const EXPIRED_PER_PASS: usize = 10_000;
/// Artifact rows taken per statement.
const EXPIRED_BATCH: i64 = 500;

/// What a pass of [`Artifacts::remove_expired_artifacts`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RemovedArtifacts {
    /// Artifacts removed from the database.
    pub artifacts: usize,
    /// Blobs that could not be deleted (key, why): storage left over, nothing lost.
    pub left_over: Vec<(String, String)>,
}

impl RemovedArtifacts {
    /// Tells the server's log about the blobs left over.
    pub fn report_left_over(&self) {
        for (key, error) in &self.left_over {
            eprintln!(
                "gantry: artifact blob `{key}` could not be deleted (its artifact is gone; the blob is left over): {error}"
            );
        }
    }
}

/// The artifacts service: a job's uploads (archives and reports) and their blobs,
/// downloads, expiry and removal, dotenv reports' variables. Owns the artifact size
/// limit and the flag of the removal pass; calls the store and the blob store only.
/// Reached through [`Coordinator::artifacts`]; what needs a job's token, its log or its
/// pipeline (uploads and downloads by runners, erasing a job) stays on the coordinator
/// and calls it.
pub struct Artifacts {
    store: gantry_store::Store,
    blobs: Arc<dyn super::BlobStore>,
    /// Largest upload, bytes (`CoordinatorConfig::artifact_limit`).
    limit: u64,
    /// A pass of expired artifact removal is running (`timers.rs`).
    pub(super) removal_running: std::sync::atomic::AtomicBool,
}

impl Artifacts {
    pub(super) fn new(
        store: gantry_store::Store,
        blobs: Arc<dyn super::BlobStore>,
        limit: u64,
    ) -> Self {
        Self {
            store,
            blobs,
            limit,
            removal_running: std::sync::atomic::AtomicBool::new(false),
        }
    }

    async fn blob_put(&self, key: String, data: Vec<u8>) -> Result<()> {
        let blobs = Arc::clone(&self.blobs);
        tokio::task::spawn_blocking(move || blobs.put(&key, &data))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??;
        Ok(())
    }

    /// Deletes blobs `keys`; returns the keys that could not be deleted, with why (a
    /// missing blob is deleted already).
    pub(super) async fn blob_delete(&self, keys: Vec<String>) -> Result<Vec<(String, String)>> {
        let blobs = Arc::clone(&self.blobs);
        tokio::task::spawn_blocking(move || {
            keys.into_iter()
                .filter_map(|key| match blobs.delete(&key) {
                    Ok(()) => None,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => Some((key, e.to_string())),
                })
                .collect()
        })
        .await
        .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))
    }

    /// Removes artifacts that expired by `now_ms` (`artifacts:expire_in`) from the
    /// database and from the blobs, as GitLab's expired-artifact removal does: an expired
    /// artifact is gone for downloads, dependencies and reports already, this reclaims
    /// its storage. Artifacts of jobs still running wait until the job ends. At most
    /// [`EXPIRED_PER_PASS`] a pass, in batches; the rows go first, so a blob that cannot
    /// be deleted is left over (and reported), never an artifact without its blob.
    pub async fn remove_expired_artifacts(&self, now_ms: i64) -> Result<RemovedArtifacts> {
        self.remove_artifacts(ArtifactSelection::ExpiredBy(now_ms), EXPIRED_PER_PASS)
            .await
    }

    /// Deletes a finished job's artifacts (GitLab's `DELETE …/jobs/:id/artifacts`; its
    /// log stays). `Conflict` while the job runs: it may still upload them.
    pub async fn delete_job_artifacts(&self, job_id: i64) -> Result<RemovedArtifacts> {
        let job = self.store.job(job_id).await?;
        if !job.status.is_completed() {
            return Err(CoordinatorError::Conflict(format!(
                "job {job_id} is {}: delete its artifacts once it has finished",
                job.status
            )));
        }
        self.remove_artifacts(ArtifactSelection::OfJob(job_id), usize::MAX)
            .await
    }

    /// Deletes the artifacts of every finished job of a project (GitLab's
    /// `DELETE /projects/:id/artifacts`); running jobs keep theirs.
    pub async fn delete_project_artifacts(&self, project_id: i64) -> Result<RemovedArtifacts> {
        self.store.project(project_id).await?;
        self.remove_artifacts(ArtifactSelection::OfProject(project_id), usize::MAX)
            .await
    }

    /// Makes a job's artifacts never expire (GitLab's `POST …/artifacts/keep`).
    pub async fn keep_artifacts(&self, job_id: i64) -> Result<()> {
        self.store.job(job_id).await?;
        self.store.keep_artifacts(job_id).await?;
        Ok(())
    }

    /// Takes `which` artifacts in batches, up to `most`, rows first, then their blobs.
    pub(super) async fn remove_artifacts(
        &self,
        which: ArtifactSelection,
        most: usize,
    ) -> Result<RemovedArtifacts> {
        let mut removed = RemovedArtifacts::default();
        while removed.artifacts < most {
            let batch = self.store.take_artifacts(which, EXPIRED_BATCH).await?;
            if batch.is_empty() {
                break;
            }
            removed.artifacts += batch.len();
            removed
                .left_over
                .extend(self.delete_blobs_of(batch, &[]).await?);
        }
        Ok(removed)
    }

    /// Deletes the blobs of artifact rows already removed (`(job id, file type, blob
    /// key)`: the archive or report, and a dotenv report's parsed variables) and the
    /// archived logs of `jobs_gone`; returns the keys left over, with why.
    pub(super) async fn delete_blobs_of(
        &self,
        artifacts: Vec<(i64, String, String)>,
        jobs_gone: &[i64],
    ) -> Result<Vec<(String, String)>> {
        let mut keys = Vec::with_capacity(artifacts.len() + jobs_gone.len());
        for (job_id, file_type, key) in artifacts {
            if file_type == ArtifactType::Dotenv.as_str() {
                keys.push(dotenv_key(job_id));
            }
            keys.push(key);
        }
        keys.extend(jobs_gone.iter().map(|&job| super::traces::archive_key(job)));
        self.blob_delete(keys).await
    }

    pub(crate) async fn blob_get(&self, key: String) -> Result<Option<Vec<u8>>> {
        let blobs = Arc::clone(&self.blobs);
        Ok(tokio::task::spawn_blocking(move || blobs.get(&key))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??)
    }

    /// The dotenv variables a job reported (empty without a report).
    pub(crate) async fn dotenv_variables(&self, job_id: i64) -> Result<Vec<(String, String)>> {
        match self.blob_get(dotenv_key(job_id)).await? {
            Some(json) => serde_json::from_slice(&json)
                .map_err(|e| CoordinatorError::corrupt(format!("dotenv of job {job_id}: {e}"))),
            None => Ok(Vec::new()),
        }
    }

    /// A new, empty upload in the blob store's staging directory, limited to the
    /// configured artifact size: the HTTP handler writes the body into it as it arrives.
    pub async fn stage_artifact(&self) -> Result<StagedUpload> {
        let dir = self.blobs.staging_dir().to_owned();
        tokio::fs::create_dir_all(&dir).await?;
        let path = dir.join(format!("upload-{}", token::new_token("")));
        let file = tokio::fs::File::create(&path).await?;
        Ok(StagedUpload {
            file: Some(file),
            path: Some(path),
            size: 0,
            limit: self.limit,
            hasher: Sha256::new(),
        })
    }

    /// One file of a job's zip archive (`GET /projects/:id/jobs/:job_id/artifacts/*path`),
    /// decompressed into a staging file (at most `MAX_ARTIFACT_FILE` bytes) and
    /// returned open with its length. `NotFound` when the archive has no such file.
    pub async fn artifact_file(
        &self,
        job_id: i64,
        path: &str,
    ) -> std::result::Result<(String, ArtifactBlob), CoordinatorError> {
        let (artifact, blob) = self.job_artifact(job_id).await?;
        if artifact.file_format != "zip" {
            return Err(CoordinatorError::Invalid(format!(
                "the artifacts of job {job_id} are a {} archive: only files of zip archives can be read one by one; download the archive",
                artifact.file_format
            )));
        }
        let path = path.trim_start_matches('/').to_owned();
        let staging = self.blobs.staging_dir().to_owned();
        tokio::task::spawn_blocking(move || extract_one(blob, &path, &staging))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))?
    }

    /// The entries of a job's zip archive, for the web UI's browser: read from the
    /// archive's central directory only (nothing is decompressed), at most
    /// [`MAX_ARTIFACT_ENTRIES`]; the flag says the list was cut there. `Invalid` for an
    /// archive that is not a zip. Cost: O(entries) in the central directory.
    pub async fn artifact_entries(
        &self,
        job_id: i64,
    ) -> std::result::Result<(Vec<ArtifactEntry>, bool), CoordinatorError> {
        let (artifact, blob) = self.job_artifact(job_id).await?;
        if artifact.file_format != "zip" {
            return Err(CoordinatorError::Invalid(format!(
                "the artifacts of job {job_id} are a {} archive: only zip archives can be browsed; download the archive",
                artifact.file_format
            )));
        }
        tokio::task::spawn_blocking(move || list_entries(blob))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))?
    }

    /// A job's archive (users' `GET /projects/:id/jobs/:job_id/artifacts`; the caller
    /// authorizes). `NotFound` when there is none or it expired.
    pub async fn job_artifact(
        &self,
        job_id: i64,
    ) -> std::result::Result<(Artifact, ArtifactBlob), CoordinatorError> {
        self.store.job(job_id).await?;
        let now = now_ms();
        let row = self
            .store
            .artifacts(job_id)
            .await?
            .into_iter()
            .find(|a| a.file_type == ArtifactType::Archive.as_str())
            .ok_or(CoordinatorError::NotFound("artifact"))?;
        let view = Artifact::from_row(&row);
        if view.expired(now) {
            return Err(CoordinatorError::NotFound("artifact"));
        }
        let blobs = Arc::clone(&self.blobs);
        let key = row.blob_key.clone();
        let (file, len) = tokio::task::spawn_blocking(move || blobs.open(&key))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??
            .ok_or(CoordinatorError::NotFound("artifact"))?;
        Ok((view, ArtifactBlob { file, len }))
    }

    /// Stores a running job's upload (the caller checked the job): validates `params`,
    /// parses a dotenv report, moves the staged file into the blob store and records
    /// the artifact, replacing one of the same type. Returns a dotenv report's variables.
    pub(super) async fn store_upload(
        &self,
        job_id: i64,
        params: ArtifactUploadParams,
        filename: &str,
        mut staged: StagedUpload,
    ) -> Result<Option<Vec<(String, String)>>> {
        let store = &self.store;
        params
            .validate()
            .map_err(|e| CoordinatorError::Invalid(e.to_string()))?;
        let kind = params.effective_type();
        let format = params.effective_format();
        let now = now_ms();
        let expire_at = match params
            .expire_in
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            None => Some(now + DEFAULT_EXPIRE_SECS * 1000),
            Some(text) => match gantry_pipeline::duration::parse_expire_in(text) {
                Some(e) => e.seconds().map(|s| {
                    now.saturating_add(
                        i64::try_from(s)
                            .unwrap_or(i64::MAX / 2)
                            .saturating_mul(1000),
                    )
                }),
                None => {
                    return Err(CoordinatorError::Invalid(format!(
                        "upload artifacts of job {job_id}: expire_in `{text}` is not a duration (e.g. `1 week`, `30 days`, `never`)"
                    )));
                }
            },
        };
        let (size, sha256, path) = staged.finish().await?;
        let dotenv = if kind == ArtifactType::Dotenv {
            let parsed = if size > DOTENV_MAX_BYTES as u64 {
                Err(DotenvError::TooBig)
            } else {
                parse_dotenv(&tokio::fs::read(&path).await?)
            };
            Some(parsed.map_err(|e| {
                CoordinatorError::Invalid(format!("upload the dotenv report of job {job_id}: {e}"))
            })?)
        } else {
            None
        };
        let base = filename.rsplit(['/', '\\']).next().unwrap_or("").trim();
        let filename = if base.is_empty() || base == "." || base == ".." {
            format!(
                "{}{}",
                if kind == ArtifactType::Archive {
                    "artifacts"
                } else {
                    kind.as_str()
                },
                format.file_extension()
            )
        } else {
            base.to_owned()
        };
        let key = artifact_key(job_id, kind);
        {
            let (blobs, key, path) = (Arc::clone(&self.blobs), key.clone(), path.clone());
            tokio::task::spawn_blocking(move || blobs.put_file(&key, &path))
                .await
                .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??;
        }
        staged.path = None; // moved into the store
        let dotenv_vars = dotenv;
        if let Some(vars) = &dotenv_vars {
            let json = serde_json::to_vec(vars)
                .map_err(|e| CoordinatorError::Io(std::io::Error::other(e)))?;
            self.blob_put(dotenv_key(job_id), json).await?;
        }
        store
            .put_artifact(
                &NewArtifact {
                    job_id,
                    file_type: kind.as_str().to_owned(),
                    file_format: format.as_str().to_owned(),
                    filename,
                    size: i64::try_from(size).unwrap_or(i64::MAX),
                    sha256,
                    blob_key: key,
                    expire_at,
                },
                now,
            )
            .await?;
        Ok(dotenv_vars)
    }
}

impl Coordinator {
    /// The artifacts service.
    pub fn artifacts(&self) -> &Artifacts {
        &self.inner.artifacts
    }

    /// Erases a finished job's log and artifacts (GitLab's `POST …/jobs/:id/erase`);
    /// returns the job as it now is. `Forbidden` when it has not finished or has nothing
    /// to erase (GitLab's "Job is not erasable!").
    pub async fn erase_job(&self, job_id: i64) -> Result<JobView> {
        let job = self.inner.store.job(job_id).await?;
        let finished = job.status.is_completed();
        let has_artifacts = !self.inner.store.artifacts(job_id).await?.is_empty();
        if !finished || (job.trace_size == 0 && !has_artifacts) {
            return Err(CoordinatorError::Forbidden(format!(
                "Job is not erasable!: job {job_id} is {} and {}",
                job.status,
                if finished {
                    "has neither a log nor artifacts"
                } else {
                    "has not finished"
                }
            )));
        }
        self.artifacts()
            .remove_artifacts(ArtifactSelection::OfJob(job_id), usize::MAX)
            .await?
            .report_left_over();
        if self.inner.store.erase_job_log(job_id, now_ms()).await? {
            if let Err(e) = self.traces().remove(job_id) {
                eprintln!("gantry: the log file of erased job {job_id} is left over: {e}");
            }
            super::RemovedArtifacts {
                artifacts: 0,
                left_over: self
                    .artifacts()
                    .delete_blobs_of(Vec::new(), &[job_id])
                    .await?,
            }
            .report_left_over();
        }
        self.job_view_by_id(job_id).await
    }

    /// [`Coordinator::upload_staged_artifact`] of bytes in memory.
    pub async fn upload_artifact(
        &self,
        job_id: i64,
        params: ArtifactUploadParams,
        filename: &str,
        data: &[u8],
    ) -> std::result::Result<(), CoordinatorError> {
        let mut staged = self.artifacts().stage_artifact().await?;
        staged.write(data).await.map_err(|e| e.for_job(job_id))?;
        self.upload_staged_artifact(job_id, params, filename, staged)
            .await
    }

    /// A running job uploads an artifact (`POST /jobs/:id/artifacts`, the caller checked
    /// the job token), written to `staged` as it arrived. `params` from the query or the
    /// form; type and format must match (§6.2); `expire_in` defaults to 30 days (`never`
    /// keeps it). An upload replaces an earlier one of the same type. A dotenv report is
    /// parsed now: an invalid one is rejected (`400`), a valid one feeds dependent jobs'
    /// variables. Whatever is refused, the staged file is removed.
    pub async fn upload_staged_artifact(
        &self,
        job_id: i64,
        params: ArtifactUploadParams,
        filename: &str,
        staged: StagedUpload,
    ) -> std::result::Result<(), CoordinatorError> {
        let store = &self.inner.store;
        let job = store.job(job_id).await?;
        if !job.status.is_executing() {
            return Err(CoordinatorError::Forbidden(format!(
                "upload artifacts of job {job_id}: it is {}",
                job.status
            )));
        }
        let dotenv_vars = self
            .artifacts()
            .store_upload(job_id, params, filename, staged)
            .await?;
        store.touch_job(job_id, now_ms()).await?;
        // The report is stored whatever this does: the upload succeeded.
        if let Some(vars) = &dotenv_vars
            && let Err(e) = self.renew_deployment_url(&job, vars).await
        {
            eprintln!("gantry: the environment URL of job {job_id} is left as it was: {e}");
        }
        Ok(())
    }

    /// A dependent job downloads `job_id`'s archive (`GET /jobs/:id/artifacts`): the
    /// requester's token must belong to a running job of the same project (§6.4), or of a
    /// project whose job names it with `needs:project` and that `job_id`'s project's CI/CD
    /// job token allowlist lets in (`job_token_scope.rs`).
    pub async fn download_artifact(
        &self,
        job_id: i64,
        requester_job_token: &str,
    ) -> std::result::Result<(Artifact, ArtifactBlob), CoordinatorError> {
        let Some(requester) = self.job_by_token(requester_job_token).await? else {
            return Err(CoordinatorError::Forbidden(format!(
                "download artifacts of job {job_id}: the job token is not one of a running job"
            )));
        };
        let target = self.inner.store.job_without_spec(job_id).await?;
        if target.project_id != requester.project_id {
            if let Some(why) = self
                .job_token_refusal(
                    requester.project_id,
                    target.project_id,
                    JobTokenUse::NeedsProject,
                )
                .await?
            {
                return Err(CoordinatorError::Forbidden(format!(
                    "download artifacts of job {job_id}: {why}"
                )));
            }
            if !self.needs_from_project(requester.id, job_id).await? {
                return Err(CoordinatorError::Forbidden(format!(
                    "download artifacts of job {job_id}: job {} belongs to another project and does not name it with needs:project",
                    requester.id
                )));
            }
        }
        self.artifacts().job_artifact(job_id).await
    }

    /// Whether job `requester` depends on job `target` through `needs:project`.
    async fn needs_from_project(&self, requester: i64, target: i64) -> Result<bool> {
        let store = &self.inner.store;
        let row = store.job(requester).await?;
        let Ok(spec) = super::spec::StoredSpec::parse(&row.spec) else {
            return Ok(false);
        };
        if spec.job.cross_needs.iter().all(|n| n.project.is_none()) {
            return Ok(false);
        }
        let pipeline = store.pipeline(row.pipeline_id).await?;
        let project = store.project(row.project_id).await?;
        Ok(self
            .cross_pipeline_dependencies(&pipeline, &project, &spec)
            .await?
            .is_ok_and(|deps| deps.iter().any(|(id, _, _)| *id == target)))
    }

    /// The job whose archive GitLab's `GET /projects/:id/jobs/artifacts/:ref_name/download?job=…`
    /// serves: the one named `job` with an archive in the ref's latest successful pipeline
    /// or its child pipelines ([`gantry_store::Store::latest_artifacts_job_of_ref`]).
    pub async fn latest_successful_job_id(
        &self,
        project_id: i64,
        ref_name: &str,
        job: &str,
    ) -> std::result::Result<i64, CoordinatorError> {
        self.inner
            .store
            .latest_artifacts_job_of_ref(project_id, ref_name, job)
            .await?
            .ok_or(CoordinatorError::NotFound("job"))
    }
}

/// An upload being written into the blob store's staging directory, with its size and
/// SHA-256 kept as it arrives ([`Artifacts::stage_artifact`]). Dropped before it is
/// stored, its file is removed.
#[derive(Debug)]
pub struct StagedUpload {
    file: Option<tokio::fs::File>,
    path: Option<std::path::PathBuf>,
    size: u64,
    limit: u64,
    hasher: Sha256,
}

/// Why writing to a [`StagedUpload`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("the upload exceeds the artifact size limit of {0} bytes")]
    TooLarge(u64),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl StageError {
    /// The coordinator's error for an upload of `job_id`.
    pub fn for_job(self, job_id: i64) -> CoordinatorError {
        match self {
            StageError::TooLarge(limit) => CoordinatorError::TooLarge(format!(
                "upload artifacts of job {job_id}: the upload exceeds the limit of {limit} bytes"
            )),
            StageError::Io(e) => CoordinatorError::Io(e),
        }
    }
}

impl StagedUpload {
    /// Appends `chunk`; past the limit nothing more is written and the upload is refused.
    pub async fn write(&mut self, chunk: &[u8]) -> std::result::Result<(), StageError> {
        use tokio::io::AsyncWriteExt as _;
        let size = self.size.saturating_add(chunk.len() as u64);
        if size > self.limit {
            return Err(StageError::TooLarge(self.limit));
        }
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the upload is already finished"))?;
        file.write_all(chunk).await?;
        self.hasher.update(chunk);
        self.size = size;
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Closes the file: its size, SHA-256 (hex) and path.
    async fn finish(&mut self) -> Result<(u64, String, std::path::PathBuf)> {
        use tokio::io::AsyncWriteExt as _;
        if let Some(mut file) = self.file.take() {
            file.flush().await?;
        }
        let path = self
            .path
            .clone()
            .ok_or_else(|| std::io::Error::other("the upload is already stored"))?;
        let sha256 = token::hex(&std::mem::take(&mut self.hasher).finalize());
        Ok((self.size, sha256, path))
    }
}

impl Drop for StagedUpload {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// An artifact's bytes: the open file of its blob and its length. The coordinator never
/// reads an archive whole; the HTTP layer streams the file.
#[derive(Debug)]
pub struct ArtifactBlob {
    pub file: std::fs::File,
    pub len: u64,
}

impl ArtifactBlob {
    /// All of it in memory (small archives; tests).
    pub fn into_bytes(mut self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        std::io::Read::read_to_end(&mut self.file, &mut out)?;
        Ok(out)
    }
}

/// The most a single file read out of an archive may decompress to.
pub const MAX_ARTIFACT_FILE: u64 = 512 * 1024 * 1024;

/// The most entries [`Artifacts::artifact_entries`] lists.
pub const MAX_ARTIFACT_ENTRIES: usize = 10_000;

/// One entry of a zip archive: its path in the archive (`/`-separated, a directory's
/// ending in `/`), its size unpacked, whether it is a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactEntry {
    pub path: String,
    pub size: u64,
    pub dir: bool,
}

/// The entries of the zip `blob` (its central directory), at most
/// [`MAX_ARTIFACT_ENTRIES`], and whether there were more.
fn list_entries(
    blob: ArtifactBlob,
) -> std::result::Result<(Vec<ArtifactEntry>, bool), CoordinatorError> {
    let corrupt = |e: zip::result::ZipError| {
        CoordinatorError::corrupt(format!("the artifacts archive cannot be read: {e}"))
    };
    let mut archive = zip::ZipArchive::new(blob.file).map_err(corrupt)?;
    let count = archive.len();
    let mut entries = Vec::with_capacity(count.min(MAX_ARTIFACT_ENTRIES));
    for i in 0..count.min(MAX_ARTIFACT_ENTRIES) {
        let entry = archive.by_index_raw(i).map_err(corrupt)?;
        entries.push(ArtifactEntry {
            path: entry.name().to_owned(),
            size: entry.size(),
            dir: entry.is_dir(),
        });
    }
    Ok((entries, count > MAX_ARTIFACT_ENTRIES))
}

/// `path` out of the zip `blob`, into an unlinked file of `staging`.
fn extract_one(
    blob: ArtifactBlob,
    path: &str,
    staging: &std::path::Path,
) -> std::result::Result<(String, ArtifactBlob), CoordinatorError> {
    use std::io::{Read as _, Seek as _};
    let corrupt = |e: zip::result::ZipError| {
        CoordinatorError::corrupt(format!("the artifacts archive cannot be read: {e}"))
    };
    let mut archive = zip::ZipArchive::new(blob.file).map_err(corrupt)?;
    let mut entry = match archive.by_name(path) {
        Ok(entry) if entry.is_file() => entry,
        Ok(_) | Err(zip::result::ZipError::FileNotFound) => {
            return Err(CoordinatorError::NotFound("file"));
        }
        Err(e) => return Err(corrupt(e)),
    };
    std::fs::create_dir_all(staging)?;
    let mut out = tempfile_in(staging)?;
    let copied = std::io::copy(&mut (&mut entry).take(MAX_ARTIFACT_FILE + 1), &mut out)?;
    if copied > MAX_ARTIFACT_FILE {
        return Err(CoordinatorError::Invalid(format!(
            "`{path}` is larger than {MAX_ARTIFACT_FILE} bytes unpacked: download the archive instead"
        )));
    }
    out.rewind()?;
    let name = path.rsplit('/').next().unwrap_or(path).to_owned();
    Ok((
        name,
        ArtifactBlob {
            file: out,
            len: copied,
        },
    ))
}

/// A new file in `dir`, already unlinked: it goes when it is closed.
pub(super) fn tempfile_in(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    let path = dir.join(format!("file-{}", super::token::new_token("")));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gz(members: &[&str]) -> Vec<u8> {
        use std::io::Write as _;
        let mut out = Vec::new();
        for m in members {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(m.as_bytes()).expect("write");
            out.extend(e.finish().expect("finish"));
        }
        out
    }

    #[test]
    fn dotenv_like_gitlab() {
        let ok = parse_dotenv(&gz(&["A=1\n B = two words \n", "C=x=y\nA=3\n"])).expect("valid");
        assert_eq!(
            ok,
            [
                ("A".into(), "3".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "x=y".into())
            ]
        );
        assert_eq!(
            parse_dotenv(b"A=1\n\nB=2\n"),
            Err(DotenvError::InvalidFormat(2))
        );
        assert_eq!(
            parse_dotenv(b"# comment\n"),
            Err(DotenvError::InvalidFormat(1))
        );
        assert_eq!(
            parse_dotenv(b"A B=1\n"),
            Err(DotenvError::InvalidKey("A B".into()))
        );
        let many: String = (0..21).map(|i| format!("V{i}=x\n")).collect();
        assert_eq!(
            parse_dotenv(many.as_bytes()),
            Err(DotenvError::TooManyVariables)
        );
        assert_eq!(parse_dotenv(&vec![b'a'; 6000]), Err(DotenvError::TooBig));
        let bomb = gz(&[&"A=".repeat(10_000)]);
        assert_eq!(parse_dotenv(&bomb), Err(DotenvError::TooBig));
    }
}
