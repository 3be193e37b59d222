//! `prepare_upload`: from one payload `artifacts[]` entry to the file to POST.

use std::fs;
use std::path::{Path, PathBuf};

use gantry_protocol::{ArtifactFormat, ArtifactType, ArtifactUploadParams, JobArtifact, When};

use super::collect::{CollectSpec, Collected, EntryKind, collect};
use super::dotenv::{DotenvLimits, parse_dotenv_files};
use super::gzip::write_gzip;
use super::zip_archive::write_zip;
use super::{ArtifactError, Lookup, Note, expand};

/// An artifact ready to upload, or the reason there is nothing to upload.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedUpload {
    /// `artifact_type`.
    pub artifact_type: ArtifactType,
    /// `artifact_format` of the file built.
    pub format: ArtifactFormat,
    /// Query parameters of `POST /jobs/:id/artifacts` (§6.2).
    pub params: ArtifactUploadParams,
    /// The multipart file name, e.g. `coverage.zip` (§6.2).
    pub file_name: String,
    /// The file to stream; `None` when nothing matched ("No files to upload").
    pub path: Option<PathBuf>,
    /// Files and symlinks collected (directories not counted).
    pub files: usize,
    /// Bytes of file content collected.
    pub content_bytes: u64,
    /// Size of the file to upload.
    pub upload_bytes: u64,
    /// Log lines: what each path matched, warnings, dotenv problems.
    pub notes: Vec<Note>,
}

impl PreparedUpload {
    /// A line for the job log, e.g. `3 files (2048 bytes) in coverage.zip (812 bytes)`.
    pub fn summary(&self) -> String {
        format!(
            "{} files ({} bytes) in {} ({} bytes)",
            self.files, self.content_bytes, self.file_name, self.upload_bytes
        )
    }
}

/// Whether the entry is uploaded for a job that `succeeded` (or not): reports always,
/// the archive per its `when` (unset = `on_success`).
pub fn should_upload(artifact: &JobArtifact, job_succeeded: bool) -> bool {
    if artifact.artifact_type != ArtifactType::Archive {
        return true;
    }
    match artifact.effective_when() {
        When::Always => true,
        When::OnSuccess => job_succeeded,
        When::OnFailure => !job_succeeded,
    }
}

/// The multipart file name of an upload (§6.2): base name of `name` (`artifacts` when
/// unset, `default` when empty or `.`) plus the format's extension.
pub fn upload_file_name(name: Option<&str>, format: ArtifactFormat) -> String {
    let base = match name {
        None => "artifacts",
        Some(name) => {
            let trimmed = name.trim_end_matches('/');
            let base = trimmed.rsplit('/').next().unwrap_or(trimmed);
            if base.is_empty() || base == "." || base == ".." {
                "default"
            } else {
                base
            }
        }
    };
    format!("{base}{}", format.file_extension())
}

/// Collects the files of `artifact` under `build_dir`, writes the upload file into
/// `out_dir` (named after the artifact type) and describes it. Variables in `name`,
/// `paths` and `exclude` are expanded with `lookup`. Nothing matched is not an error:
/// [`PreparedUpload::path`] is `None` and a warning says so, as gitlab-runner does.
/// `seen_dir`: the build directory as the job sees it, when that is another path
/// ([`CollectSpec::seen_dir`]).
pub fn prepare_upload(
    artifact: &JobArtifact,
    build_dir: &Path,
    seen_dir: Option<&Path>,
    out_dir: &Path,
    lookup: Lookup<'_>,
) -> Result<PreparedUpload, ArtifactError> {
    let paths: Vec<String> = artifact.paths.iter().map(|p| expand(p, lookup)).collect();
    let exclude: Vec<String> = artifact.exclude.iter().map(|p| expand(p, lookup)).collect();
    let spec = CollectSpec {
        paths: &paths,
        exclude: &exclude,
        untracked: artifact.untracked.unwrap_or(false),
        seen_dir,
    };
    let collected = collect(build_dir, &spec);
    let name = artifact.name.as_deref().map(|name| expand(name, lookup));
    let format = artifact.artifact_format;
    let file_name = upload_file_name(name.as_deref(), format);
    let mut prepared = PreparedUpload {
        artifact_type: artifact.artifact_type,
        format,
        params: artifact.upload_params(),
        file_name,
        path: None,
        files: collected.file_count(),
        content_bytes: collected.total_bytes(),
        upload_bytes: 0,
        notes: collected.notes.clone(),
    };
    if collected.is_empty() {
        prepared
            .notes
            .push(Note::Warning("No files to upload".to_owned()));
        return Ok(prepared);
    }
    if artifact.artifact_type == ArtifactType::Dotenv {
        check_dotenv(build_dir, &collected, &mut prepared.notes);
    }
    fs::create_dir_all(out_dir).map_err(|e| ArtifactError::io("create directory", out_dir, e))?;
    let dest = out_dir.join(format!(
        "{}{}",
        artifact.artifact_type.as_str(),
        match format {
            ArtifactFormat::Zip | ArtifactFormat::Zipzstd => ".zip",
            ArtifactFormat::Gzip => ".gz",
            ArtifactFormat::Tarzstd => ".tar.zst",
            ArtifactFormat::Raw => ".raw",
        }
    ));
    prepared.upload_bytes = match format {
        ArtifactFormat::Zip | ArtifactFormat::Zipzstd => {
            write_zip(build_dir, &collected.entries, &dest)?
        }
        ArtifactFormat::Gzip => write_gzip(build_dir, &collected.entries, &dest)?,
        ArtifactFormat::Tarzstd => {
            super::tar_zstd::write_tar_zstd(build_dir, &collected.entries, &dest)?
        }
        ArtifactFormat::Raw => {
            let files: Vec<_> = collected
                .entries
                .iter()
                .filter(|entry| matches!(entry.kind, EntryKind::File { .. }))
                .collect();
            let [only] = files.as_slice() else {
                return Err(ArtifactError::RawNeedsOneFile {
                    artifact_type: artifact.artifact_type.as_str(),
                    count: files.len(),
                });
            };
            let source = build_dir.join(&only.path);
            fs::copy(&source, &dest).map_err(|e| ArtifactError::io("copy", &source, e))?
        }
    };
    prepared.path = Some(dest);
    Ok(prepared)
}

/// Warns (naming the line) when a dotenv report would be rejected by GitLab.
fn check_dotenv(build_dir: &Path, collected: &Collected, notes: &mut Vec<Note>) {
    let mut contents = Vec::new();
    for entry in &collected.entries {
        if let EntryKind::File { .. } = entry.kind {
            match fs::read(build_dir.join(&entry.path)) {
                Ok(content) => contents.push((entry.path.as_str(), content)),
                Err(error) => notes.push(Note::Warning(format!("{}: {error}", entry.path))),
            }
        }
    }
    let files = contents
        .iter()
        .map(|(path, content)| (Some(*path), content.as_slice()));
    if let Err(error) = parse_dotenv_files(files, DotenvLimits::default()) {
        notes.push(Note::Warning(format!(
            "the coordinator will reject this dotenv report: failed to {error}"
        )));
    }
}
