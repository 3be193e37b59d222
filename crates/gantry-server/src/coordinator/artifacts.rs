//! Artifacts (runner API §6): uploads of a running job (archive and reports, with
//! `expire_in`), downloads by dependent jobs, and dotenv reports turned into variables for
//! the jobs that depend on the uploader (`ci-yaml.md` §5.8), within GitLab's limits.
//!
//! Blobs: `artifacts/<job id>/<type>` holds the upload, `dotenv/<job id>.json` the parsed
//! variables of a dotenv report.

use std::io::Read as _;
use std::sync::Arc;

use gantry_protocol::{ArtifactType, ArtifactUploadParams};
use gantry_store::NewArtifact;

use super::error::{CoordinatorError, Result};
use super::time::now_ms;
use super::views::Artifact;
use super::{Coordinator, token};

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

impl Coordinator {
    async fn blob_put(&self, key: String, data: Vec<u8>) -> Result<()> {
        let blobs = Arc::clone(&self.inner.blobs);
        tokio::task::spawn_blocking(move || blobs.put(&key, &data))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??;
        Ok(())
    }

    pub(crate) async fn blob_get(&self, key: String) -> Result<Option<Vec<u8>>> {
        let blobs = Arc::clone(&self.inner.blobs);
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

    /// A running job uploads an artifact (`POST /jobs/:id/artifacts`, the caller checked
    /// the job token). `params` from the query or the form; type and format must match
    /// (§6.2); `expire_in` defaults to 30 days (`never` keeps it). An upload replaces an
    /// earlier one of the same type. A dotenv report is parsed now: an invalid one is
    /// rejected (`400`), a valid one feeds dependent jobs' variables.
    pub async fn upload_artifact(
        &self,
        job_id: i64,
        params: ArtifactUploadParams,
        filename: &str,
        data: &[u8],
    ) -> std::result::Result<(), CoordinatorError> {
        let store = &self.inner.store;
        let job = store.job(job_id).await?;
        if !crate::processor::Status::parse(&job.status)
            .is_some_and(crate::processor::Status::is_executing)
        {
            return Err(CoordinatorError::Forbidden(format!(
                "upload artifacts of job {job_id}: it is {}",
                job.status
            )));
        }
        params
            .validate()
            .map_err(|e| CoordinatorError::Invalid(e.to_string()))?;
        if data.len() as u64 > self.inner.cfg.artifact_limit {
            return Err(CoordinatorError::TooLarge(format!(
                "upload artifacts of job {job_id}: {} bytes exceed the limit of {} bytes",
                data.len(),
                self.inner.cfg.artifact_limit
            )));
        }
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
        let dotenv = if kind == ArtifactType::Dotenv {
            Some(parse_dotenv(data).map_err(|e| {
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
        self.blob_put(key.clone(), data.to_vec()).await?;
        if let Some(vars) = dotenv {
            let json = serde_json::to_vec(&vars)
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
                    size: i64::try_from(data.len()).unwrap_or(i64::MAX),
                    sha256: token::sha256_hex(data),
                    blob_key: key,
                    expire_at,
                },
                now,
            )
            .await?;
        store.touch_job(job_id, now).await?;
        Ok(())
    }

    /// A dependent job downloads `job_id`'s archive (`GET /jobs/:id/artifacts`): the
    /// requester's token must belong to a running job of the same project (§6.4), or of a
    /// project whose job names it with `needs:project`.
    pub async fn download_artifact(
        &self,
        job_id: i64,
        requester_job_token: &str,
    ) -> std::result::Result<(Artifact, Vec<u8>), CoordinatorError> {
        let Some(requester) = self.job_by_token(requester_job_token).await? else {
            return Err(CoordinatorError::Forbidden(format!(
                "download artifacts of job {job_id}: the job token is not one of a running job"
            )));
        };
        let target = self.inner.store.job_without_spec(job_id).await?;
        if target.project_id != requester.project_id
            && !self.needs_from_project(requester.id, job_id).await?
        {
            return Err(CoordinatorError::Forbidden(format!(
                "download artifacts of job {job_id}: job {} belongs to another project and does not name it with needs:project",
                requester.id
            )));
        }
        self.job_artifact(job_id).await
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

    /// A job's archive (users' `GET /projects/:id/jobs/:job_id/artifacts`; the caller
    /// authorizes). `NotFound` when there is none or it expired.
    pub async fn job_artifact(
        &self,
        job_id: i64,
    ) -> std::result::Result<(Artifact, Vec<u8>), CoordinatorError> {
        self.inner.store.job(job_id).await?;
        let now = now_ms();
        let row = self
            .inner
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
        let data = self
            .blob_get(row.blob_key.clone())
            .await?
            .ok_or(CoordinatorError::NotFound("artifact"))?;
        Ok((view, data))
    }
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
