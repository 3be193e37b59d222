//! The cache's archive format: tar + zstd (level 1).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::UNIX_EPOCH;

use super::{ArtifactError, Destination, Entry, EntryKind, ExtractSummary, extract_tar};

/// zstd level of cache archives: fast, still a good ratio for source trees.
pub(crate) const ZSTD_LEVEL: i32 = 1;

/// Writes `entries` (relative to `build_dir`) as tar + zstd to `dest` (created or
/// truncated, synced). Returns the archive size.
pub(crate) fn write_tar_zstd(
    build_dir: &Path,
    entries: &[Entry],
    dest: &Path,
) -> Result<u64, ArtifactError> {
    let file = File::create(dest).map_err(|e| ArtifactError::io("create archive", dest, e))?;
    let write_error = |e: io::Error| ArtifactError::io("write archive", dest, e);
    let encoder =
        zstd::stream::write::Encoder::new(BufWriter::new(file), ZSTD_LEVEL).map_err(write_error)?;
    let mut tar = tar::Builder::new(encoder);
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.mode);
        header.set_mtime(
            entry
                .modified
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        );
        match &entry.kind {
            EntryKind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                tar.append_data(&mut header, format!("{}/", entry.path), io::empty())
                    .map_err(write_error)?;
            }
            EntryKind::Symlink { target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                tar.append_link(&mut header, &entry.path, target)
                    .map_err(write_error)?;
            }
            EntryKind::File { .. } => {
                let source_path = build_dir.join(&entry.path);
                let source = File::open(&source_path)
                    .map_err(|e| ArtifactError::io("read", &source_path, e))?;
                let size = source
                    .metadata()
                    .map_err(|e| ArtifactError::io("inspect", &source_path, e))?
                    .len();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(size);
                // A file that grows while being read must not corrupt the stream.
                tar.append_data(&mut header, &entry.path, io::Read::take(source, size))
                    .map_err(|e| ArtifactError::io("archive", &source_path, e))?;
            }
        }
    }
    let encoder = tar.into_inner().map_err(write_error)?;
    let mut writer = encoder.finish().map_err(write_error)?;
    writer.flush().map_err(write_error)?;
    let file = writer
        .into_inner()
        .map_err(|e| ArtifactError::io("write archive", dest, e.into_error()))?;
    file.sync_all().map_err(write_error)?;
    file.metadata()
        .map(|meta| meta.len())
        .map_err(|e| ArtifactError::io("inspect", dest, e))
}

/// Extracts the cache archive at `archive` into `build_dir`.
pub(crate) fn extract_tar_zstd(
    archive: &Path,
    build_dir: &Path,
) -> Result<ExtractSummary, ArtifactError> {
    let dest = Destination::new(build_dir)?;
    let file = File::open(archive).map_err(|e| ArtifactError::io("open", archive, e))?;
    let decoder = zstd::stream::read::Decoder::new(file).map_err(|e| ArtifactError::Corrupt {
        path: archive.to_path_buf(),
        detail: e.to_string(),
    })?;
    extract_tar(archive, decoder, &dest)
}
