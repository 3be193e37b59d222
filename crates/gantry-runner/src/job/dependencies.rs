//! `download_artifacts`: the archives of the jobs this one depends on (§3.5.12, §6.4),
//! fetched with `GET /jobs/:id/artifacts` and extracted into the project directory with
//! [`extract_archive`], which refuses entries that would land outside it.
//!
//! The token sent is the dependency's `token` (current GitLab sends the running job's
//! own token there, older GitLab the dependency's), or the job's own token when it is
//! empty. `403`/`401` and `404` are final; other failures are retried
//! `ARTIFACT_DOWNLOAD_ATTEMPTS` times in all (default 3 here; gitlab-runner's variable),
//! one second apart.

use std::path::Path;
use std::time::Duration;

use gantry_protocol::Dependency;

use crate::artifacts::{ExtractSummary, extract_archive};
use crate::client::{Client, ClientError};
use crate::trace::Trace;

/// Attempts per dependency unless `ARTIFACT_DOWNLOAD_ATTEMPTS` says otherwise.
pub(crate) const DEFAULT_DOWNLOAD_ATTEMPTS: u32 = 3;

/// Why a dependency's artifacts could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DownloadError {
    #[error("download artifacts of {name} ({id}): {source}")]
    Transfer {
        name: String,
        id: i64,
        #[source]
        source: ClientError,
    },
    #[error("store artifacts of {name} ({id}) in `{}`: {source}", path.display())]
    Store {
        name: String,
        id: i64,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("extract artifacts of {name} ({id}): {message}")]
    Extract {
        name: String,
        id: i64,
        message: String,
    },
}

/// Downloads and extracts every dependency that has an archive.
pub(crate) async fn download_dependencies(
    client: &Client,
    job_token: &str,
    dependencies: &[Dependency],
    project_dir: &Path,
    download_dir: &Path,
    attempts: u32,
    trace: &Trace,
) -> Result<(), DownloadError> {
    for dependency in dependencies.iter().filter(|d| d.artifacts_file.is_some()) {
        let (name, id) = (dependency.name.clone(), dependency.id);
        trace.runner_line(&format!("Downloading artifacts for {name} ({id})..."));
        let token = if dependency.token.is_empty() {
            job_token
        } else {
            &dependency.token
        };
        let archive = download_dir.join(format!("{id}.archive"));
        if let Err(source) = tokio::fs::create_dir_all(download_dir).await {
            return Err(DownloadError::Store {
                name,
                id,
                path: download_dir.to_owned(),
                source,
            });
        }
        let size = download_with_retries(client, id, token, &archive, attempts.max(1), trace)
            .await
            .map_err(|source| DownloadError::Transfer {
                name: name.clone(),
                id,
                source,
            })?;
        trace.runner_line(&format!(
            "Downloading artifacts from coordinator... ok  id={id} size={size}"
        ));
        let extracted = {
            let (archive, project_dir) = (archive.clone(), project_dir.to_owned());
            tokio::task::spawn_blocking(move || extract_archive(&archive, &project_dir)).await
        };
        let _ = std::fs::remove_file(&archive);
        let summary: ExtractSummary = match extracted {
            Ok(Ok(summary)) => summary,
            Ok(Err(error)) => {
                return Err(DownloadError::Extract {
                    name,
                    id,
                    message: error.to_string(),
                });
            }
            Err(join) => {
                return Err(DownloadError::Extract {
                    name,
                    id,
                    message: join.to_string(),
                });
            }
        };
        for note in &summary.notes {
            super::lifecycle::write_note(trace, note);
        }
        trace.runner_line(&format!(
            "Extracted {} files, {} directories, {} symlinks ({} bytes)",
            summary.files, summary.dirs, summary.symlinks, summary.bytes
        ));
    }
    Ok(())
}

async fn download_with_retries(
    client: &Client,
    id: i64,
    token: &str,
    dest: &Path,
    attempts: u32,
    trace: &Trace,
) -> Result<u64, ClientError> {
    let mut attempt = 1;
    loop {
        match client.download_artifact(id, token, dest).await {
            Ok(size) => return Ok(size),
            Err(error) => {
                let permanent = matches!(
                    &error,
                    ClientError::Refused { status, .. } if matches!(status, 401 | 403 | 404)
                ) || matches!(&error, ClientError::File { .. });
                if permanent || attempt >= attempts {
                    return Err(error);
                }
                trace.warning(&format!(
                    "Downloading artifacts from coordinator failed ({error}); retrying ({attempt}/{attempts})"
                ));
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
