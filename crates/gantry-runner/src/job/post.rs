//! The stages after the script: `archive_cache` / `archive_cache_on_failure` and
//! `upload_artifacts_on_success` / `upload_artifacts_on_failure`.
//!
//! Saving the cache never fails the job (gitlab-runner: `Failed to create cache` is a
//! warning). An artifact that cannot be built or uploaded fails a job that had
//! succeeded (`runner_system_failure`, naming the stage); a failed job keeps its own
//! ending and the problem is logged. Transient upload errors (network, `5xx`, `429`)
//! are retried twice, 1 s and 2 s apart; `403` and `413` are final.

use std::time::Duration;

use gantry_protocol::JobArtifact;

use super::JobEnding;
use super::lifecycle::{Lifecycle, write_note};
use super::variables::get;
use crate::artifacts::{PreparedUpload, prepare_upload, should_upload};
use crate::cache::{CacheContext, SaveOutcome};

/// Upload attempts per artifact.
const UPLOAD_ATTEMPTS: u32 = 3;

impl Lifecycle<'_> {
    pub(crate) async fn archive_cache(&self, ending: &JobEnding) {
        let specs: Vec<_> = self
            .job
            .cache
            .iter()
            .map(crate::cache::CacheSpec::from)
            .collect();
        if !specs
            .iter()
            .any(|spec| !spec.paths.is_empty() || spec.untracked)
        {
            return;
        }
        let succeeded = ending.is_success();
        let _section = if succeeded {
            self.section("archive_cache", "Saving cache for successful job")
        } else {
            self.section("archive_cache_on_failure", "Saving cache for failed job")
        };
        let cache = match crate::cache::for_job(
            &self.cx.cache_dir,
            &self.dirs.cache_path,
            &self.cx.runner,
            self.job.job_info.project_id,
            &|_| {},
        ) {
            Ok(cache) => cache,
            Err(error) => {
                self.trace
                    .warning(&format!("Failed to create cache: failed to {error}"));
                return;
            }
        };
        let variables = self.variables.to_vec();
        let (job_name, git_ref) = (
            self.job.job_info.name.clone(),
            self.job.git_info.git_ref.clone(),
        );
        let project_dir = self.dirs.project_dir.clone();
        let seen_dir = self.dirs.seen.project_dir.clone();
        let reports = tokio::task::spawn_blocking(move || {
            let lookup = |name: &str| get(&variables, name).map(str::to_owned);
            let cx = CacheContext {
                job_name: &job_name,
                git_ref: &git_ref,
                lookup: &lookup,
                seen_dir: Some(&seen_dir),
            };
            specs
                .iter()
                .map(|spec| cache.save(spec, &cx, &project_dir, succeeded))
                .collect::<Vec<_>>()
        })
        .await;
        let Ok(reports) = reports else {
            self.trace
                .warning("Failed to create cache: the archiver stopped unexpectedly");
            return;
        };
        for report in reports {
            match report {
                Ok(report) => {
                    for note in &report.notes {
                        write_note(self.trace, note);
                    }
                    if let SaveOutcome::Failed { key, error } = &report.outcome
                        && !report.notes.iter().any(|n| n.is_warning())
                    {
                        self.trace
                            .warning(&format!("Failed to create cache {key}: {error}"));
                    }
                }
                Err(error) => self
                    .trace
                    .warning(&format!("Failed to create cache: failed to {error}")),
            }
        }
    }

    pub(crate) async fn upload_artifacts(&self, ending: JobEnding) -> JobEnding {
        let succeeded = ending.is_success();
        let artifacts: Vec<JobArtifact> = self
            .job
            .artifacts
            .iter()
            .flatten()
            .filter(|artifact| should_upload(artifact, succeeded))
            .cloned()
            .collect();
        if artifacts.is_empty() {
            return ending;
        }
        let stage = if succeeded {
            "upload_artifacts_on_success"
        } else {
            "upload_artifacts_on_failure"
        };
        let _section = if succeeded {
            self.section(stage, "Uploading artifacts for successful job")
        } else {
            self.section(stage, "Uploading artifacts for failed job")
        };
        let mut ending = ending;
        for artifact in artifacts {
            if let Err(message) = self.upload_one(&artifact).await {
                self.trace.error(&message);
                if ending.is_success() {
                    ending = JobEnding::SystemFailure { stage, message };
                }
            }
        }
        ending
    }

    async fn upload_one(&self, artifact: &JobArtifact) -> Result<(), String> {
        let kind = artifact.artifact_type.as_str();
        self.trace.runner_line(
            if artifact.artifact_type == gantry_protocol::ArtifactType::Archive {
                "Uploading artifacts..."
            } else {
                "Uploading report artifacts..."
            },
        );
        let variables = self.variables.to_vec();
        let (artifact_owned, project_dir, seen_dir, out_dir) = (
            artifact.clone(),
            self.dirs.project_dir.clone(),
            self.dirs.seen.project_dir.clone(),
            self.dirs.tmp_dir.join("artifacts"),
        );
        let prepared = tokio::task::spawn_blocking(move || {
            let lookup = |name: &str| get(&variables, name).map(str::to_owned);
            prepare_upload(
                &artifact_owned,
                &project_dir,
                Some(&seen_dir),
                &out_dir,
                &lookup,
            )
        })
        .await
        .map_err(|join| format!("Uploading artifacts as \"{kind}\" failed: {join}"))?
        .map_err(|error| format!("Uploading artifacts as \"{kind}\" failed: failed to {error}"))?;
        for note in &prepared.notes {
            write_note(self.trace, note);
        }
        let Some(path) = prepared.path.clone() else {
            return Ok(());
        };
        let uploaded = self.upload_with_retries(artifact, &prepared, &path).await;
        let _ = tokio::fs::remove_file(&path).await;
        uploaded
    }

    /// Sends the archive at `path`, retrying as gitlab-runner does.
    async fn upload_with_retries(
        &self,
        artifact: &JobArtifact,
        prepared: &PreparedUpload,
        path: &std::path::Path,
    ) -> Result<(), String> {
        let kind = artifact.artifact_type.as_str();
        let mut attempt = 1;
        loop {
            let result = self
                .cx
                .client
                .upload_artifact(
                    self.job.id,
                    &self.job.token,
                    &prepared.params,
                    &prepared.file_name,
                    path,
                )
                .await;
            match result {
                Ok(()) => {
                    self.trace.runner_line(&format!(
                        "Uploading artifacts as \"{kind}\" to coordinator... 201 Created  id={} {}",
                        self.job.id,
                        prepared.summary()
                    ));
                    return Ok(());
                }
                Err(error) => {
                    let final_error = match &error {
                        crate::client::ClientError::Refused { status, .. } => {
                            matches!(status, 400 | 401 | 403 | 404 | 405 | 413)
                        }
                        _ => !error.is_transient(),
                    };
                    if final_error || attempt >= UPLOAD_ATTEMPTS {
                        let hint = match &error {
                            crate::client::ClientError::Refused { status: 413, .. } => {
                                " (too large archive: the coordinator's size limit was exceeded)"
                            }
                            _ => "",
                        };
                        return Err(format!(
                            "Uploading artifacts as \"{kind}\" to coordinator... failed{hint}: {error}"
                        ));
                    }
                    self.trace.warning(&format!(
                        "Uploading artifacts as \"{kind}\" to coordinator... failed ({error}); retrying ({attempt}/{UPLOAD_ATTEMPTS})"
                    ));
                    tokio::time::sleep(Duration::from_secs(u64::from(attempt))).await;
                    attempt += 1;
                }
            }
        }
    }
}
