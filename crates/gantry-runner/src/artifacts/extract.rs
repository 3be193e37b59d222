//! Extracting downloaded archives (zip, gzip, tar.zst) into the build directory,
//! refusing anything that would land outside it ([`Destination`] keeps the rules).
//!
//! Regular files, directories and symbolic links are extracted. Other entries — tar
//! hard links, character and block devices, fifos, sockets (zip and tar) — are skipped
//! with a warning in the job log, `File ignored: "<name>" (<kind>)`, as gitlab-runner
//! does (its zip extractor logs `File ignored`, its tar.zst one skips them): a device
//! or a hard link is never made, so no archive can name a file outside the directory
//! that way.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ArtifactError;
use super::Note;
use super::dest::{Destination, entry_path};
use super::gzip::{Member, for_each_member};
use super::zip_archive::system_time;

/// The format of a downloaded archive, from its first bytes (§6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveKind {
    /// `PK` — zip.
    Zip,
    /// `1f 8b` — (multi-member) gzip.
    Gzip,
    /// `28 b5 2f fd` — zstd, holding a tar stream.
    TarZstd,
}

/// What an extraction wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtractSummary {
    /// Regular files written.
    pub files: usize,
    /// Directories created or kept.
    pub dirs: usize,
    /// Symbolic links created.
    pub symlinks: usize,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Lines for the job log: a warning per entry skipped (module docs).
    pub notes: Vec<Note>,
}

impl ExtractSummary {
    fn skip(&mut self, name: &str, kind: &str) {
        self.notes.push(Note::Warning(format!(
            "File ignored: {name:?} ({kind}; only files, directories and symbolic links are extracted)"
        )));
    }
}

/// Detects the format of the archive at `path` from its magic bytes.
pub fn detect_archive_kind(path: &Path) -> Result<ArchiveKind, ArtifactError> {
    let mut file = File::open(path).map_err(|e| ArtifactError::io("open", path, e))?;
    let mut magic = [0u8; 4];
    let mut read = 0;
    while read < magic.len() {
        match file.read(&mut magic[read..]) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(ArtifactError::io("read", path, error)),
        }
    }
    match &magic[..read] {
        [b'P', b'K', ..] => Ok(ArchiveKind::Zip),
        [0x1f, 0x8b, ..] => Ok(ArchiveKind::Gzip),
        [0x28, 0xb5, 0x2f, 0xfd] => Ok(ArchiveKind::TarZstd),
        _ => Err(ArtifactError::UnknownFormat {
            path: path.to_path_buf(),
        }),
    }
}

/// Extracts the downloaded archive at `archive` into `build_dir` (rules in the
/// [module docs](crate::artifacts)). Entries before an unsafe one stay extracted; the
/// unsafe one and everything after it are not.
pub fn extract_archive(archive: &Path, build_dir: &Path) -> Result<ExtractSummary, ArtifactError> {
    let dest = Destination::new(build_dir)?;
    match detect_archive_kind(archive)? {
        ArchiveKind::Zip => extract_zip(archive, &dest),
        ArchiveKind::Gzip => extract_gzip(archive, &dest),
        ArchiveKind::TarZstd => {
            let file = File::open(archive).map_err(|e| ArtifactError::io("open", archive, e))?;
            let decoder =
                zstd::stream::read::Decoder::new(file).map_err(|e| ArtifactError::Corrupt {
                    path: archive.to_path_buf(),
                    detail: e.to_string(),
                })?;
            extract_tar(archive, decoder, &dest)
        }
    }
}

const S_IFMT: u32 = 0o170_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFIFO: u32 = 0o010_000;
const S_IFCHR: u32 = 0o020_000;
const S_IFBLK: u32 = 0o060_000;
const S_IFSOCK: u32 = 0o140_000;

/// What a zip entry's Unix mode makes of it when it is no file, directory or link.
fn irregular_zip_kind(mode: Option<u32>) -> Option<&'static str> {
    match mode? & S_IFMT {
        S_IFIFO => Some("a fifo"),
        S_IFCHR => Some("a character device"),
        S_IFBLK => Some("a block device"),
        S_IFSOCK => Some("a socket"),
        _ => None,
    }
}
/// Longest symlink target we read from an archive.
const MAX_LINK_TARGET: u64 = 4096;

fn extract_zip(archive: &Path, dest: &Destination) -> Result<ExtractSummary, ArtifactError> {
    let corrupt = |error: zip::result::ZipError| ArtifactError::Corrupt {
        path: archive.to_path_buf(),
        detail: error.to_string(),
    };
    let file = File::open(archive).map_err(|e| ArtifactError::io("open", archive, e))?;
    let mut zip = zip::ZipArchive::new(BufReader::new(file)).map_err(corrupt)?;
    let mut summary = ExtractSummary::default();
    for index in 0..zip.len() {
        let mut entry = zip.by_index(index).map_err(corrupt)?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let rel = entry_path(&name).map_err(|reason| ArtifactError::unsafe_entry(&name, reason))?;
        let mode = entry.unix_mode();
        let is_link = mode.is_some_and(|mode| mode & S_IFMT == S_IFLNK);
        if is_link {
            let mut target = String::new();
            entry
                .by_ref()
                .take(MAX_LINK_TARGET)
                .read_to_string(&mut target)
                .map_err(|e| ArtifactError::Corrupt {
                    path: archive.to_path_buf(),
                    detail: format!("`{name}`: {e}"),
                })?;
            dest.create_symlink(&name, &rel, &target)?;
            summary.symlinks += 1;
        } else if let Some(kind) = irregular_zip_kind(mode) {
            summary.skip(&name, kind);
        } else if entry.is_dir() {
            dest.create_dir(&name, &rel, mode)?;
            summary.dirs += 1;
        } else {
            let modified = entry.last_modified().and_then(system_time);
            let (mut out, path) = dest.create_file(&name, &rel, mode)?;
            let written = io::copy(&mut entry, &mut out).map_err(|e| ArtifactError::Corrupt {
                path: archive.to_path_buf(),
                detail: format!("`{name}`: {e}"),
            })?;
            finish_file(&out, &path, modified)?;
            summary.files += 1;
            summary.bytes += written;
        }
    }
    Ok(summary)
}

fn finish_file(out: &File, path: &Path, modified: Option<SystemTime>) -> Result<(), ArtifactError> {
    if let Some(modified) = modified {
        out.set_modified(modified)
            .map_err(|e| ArtifactError::io("set modification time of", path, e))?;
    }
    Ok(())
}

fn extract_gzip(archive: &Path, dest: &Destination) -> Result<ExtractSummary, ArtifactError> {
    let mut summary = ExtractSummary::default();
    for_each_member(archive, &mut |member: Member<'_>| {
        let rel = entry_path(&member.path)
            .map_err(|reason| ArtifactError::unsafe_entry(&member.path, reason))?;
        let (mut out, path) = dest.create_file(&member.path, &rel, None)?;
        let written = io::copy(member.reader, &mut out).map_err(|e| ArtifactError::Corrupt {
            path: archive.to_path_buf(),
            detail: format!("`{}`: {e}", member.path),
        })?;
        let modified =
            (member.mtime > 0).then(|| UNIX_EPOCH + Duration::from_secs(u64::from(member.mtime)));
        finish_file(&out, &path, modified)?;
        summary.files += 1;
        summary.bytes += written;
        Ok(())
    })?;
    Ok(summary)
}

/// Extracts a tar stream (the cache format, and tar.zst downloads) into `dest`.
/// Regular files, directories and symlinks only; other entries are skipped (module docs).
pub(crate) fn extract_tar(
    archive: &Path,
    reader: impl Read,
    dest: &Destination,
) -> Result<ExtractSummary, ArtifactError> {
    let corrupt = |error: io::Error| ArtifactError::Corrupt {
        path: archive.to_path_buf(),
        detail: error.to_string(),
    };
    let mut tar = tar::Archive::new(reader);
    let mut summary = ExtractSummary::default();
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let rel: PathBuf =
            entry_path(&name).map_err(|reason| ArtifactError::unsafe_entry(&name, reason))?;
        let header = entry.header();
        let mode = header.mode().ok();
        let modified = header
            .mtime()
            .ok()
            .map(|secs| UNIX_EPOCH + Duration::from_secs(secs));
        let kind = header.entry_type();
        if kind.is_dir() {
            dest.create_dir(&name, &rel, mode)?;
            summary.dirs += 1;
        } else if kind.is_symlink() {
            let target = entry
                .link_name_bytes()
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .unwrap_or_default();
            dest.create_symlink(&name, &rel, &target)?;
            summary.symlinks += 1;
        } else if kind.is_file() || kind.is_contiguous() {
            let (mut out, path) = dest.create_file(&name, &rel, mode)?;
            let written = io::copy(&mut entry, &mut out).map_err(corrupt)?;
            finish_file(&out, &path, modified)?;
            summary.files += 1;
            summary.bytes += written;
        } else if kind.is_pax_global_extensions()
            || kind.is_pax_local_extensions()
            || kind.is_gnu_longname()
            || kind.is_gnu_longlink()
        {
            // Metadata records; the tar crate applies them to the next entry.
        } else {
            let what = if kind.is_hard_link() {
                "a hard link"
            } else if kind.is_character_special() {
                "a character device"
            } else if kind.is_block_special() {
                "a block device"
            } else if kind.is_fifo() {
                "a fifo"
            } else {
                "an entry of an unsupported type"
            };
            summary.skip(&name, what);
        }
    }
    Ok(summary)
}
