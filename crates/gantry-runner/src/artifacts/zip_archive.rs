//! Writing a zip archive of collected entries, streamed to a file.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use gantry_protocol::time::{civil_from_days, days_from_civil};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use super::{ArtifactError, Entry, EntryKind};

/// Writes `entries` (relative to `build_dir`) as a zip archive to `dest`. Returns the
/// archive's size in bytes.
pub(crate) fn write_zip(
    build_dir: &Path,
    entries: &[Entry],
    dest: &Path,
) -> Result<u64, ArtifactError> {
    let file = File::create(dest).map_err(|e| ArtifactError::io("create archive", dest, e))?;
    let mut zip = ZipWriter::new(BufWriter::new(file));
    let zip_error = |error: zip::result::ZipError| {
        ArtifactError::io("write archive", dest, io::Error::other(error))
    };
    for entry in entries {
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .unix_permissions(entry.mode)
            .last_modified_time(zip_time(entry.modified));
        match &entry.kind {
            EntryKind::Dir => zip
                .add_directory(format!("{}/", entry.path), options)
                .map_err(zip_error)?,
            EntryKind::Symlink { target } => zip
                .add_symlink(entry.path.as_str(), target.as_str(), options)
                .map_err(zip_error)?,
            EntryKind::File { size } => {
                let source_path = build_dir.join(&entry.path);
                let mut source = File::open(&source_path)
                    .map_err(|e| ArtifactError::io("read", &source_path, e))?;
                zip.start_file(
                    entry.path.as_str(),
                    options.large_file(*size >= u64::from(u32::MAX)),
                )
                .map_err(zip_error)?;
                io::copy(&mut source, &mut zip)
                    .map_err(|e| ArtifactError::io("archive", &source_path, e))?;
            }
        }
    }
    let writer = zip.finish().map_err(zip_error)?;
    let file = writer
        .into_inner()
        .map_err(|e| ArtifactError::io("write archive", dest, e.into_error()))?;
    file.sync_all()
        .map_err(|e| ArtifactError::io("write archive", dest, e))?;
    let size = file
        .metadata()
        .map_err(|e| ArtifactError::io("inspect", dest, e))?
        .len();
    Ok(size)
}

/// A modification time as a zip (MS-DOS, UTC) timestamp, clamped to 1980–2107.
pub(crate) fn zip_time(time: SystemTime) -> DateTime {
    let seconds = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    let (year, month, day) = civil_from_days(i64::try_from(days).unwrap_or(i64::MAX / 86_400));
    let (month, day) = (
        u8::try_from(month).unwrap_or(1),
        u8::try_from(day).unwrap_or(1),
    );
    let clamped = if year < 1980 {
        DateTime::from_date_and_time(1980, 1, 1, 0, 0, 0)
    } else if year > 2107 {
        DateTime::from_date_and_time(2107, 12, 31, 23, 59, 58)
    } else {
        DateTime::from_date_and_time(
            u16::try_from(year).unwrap_or(1980),
            month,
            day,
            u8::try_from(rest / 3600).unwrap_or(0),
            u8::try_from(rest % 3600 / 60).unwrap_or(0),
            u8::try_from(rest % 60).unwrap_or(0),
        )
    };
    clamped.unwrap_or_default()
}

/// A zip timestamp as a `SystemTime` (UTC), `None` when out of range.
pub(crate) fn system_time(time: DateTime) -> Option<SystemTime> {
    let days = days_from_civil(
        i64::from(time.year()),
        u32::from(time.month()),
        u32::from(time.day()),
    )
    .and_then(|d| u64::try_from(d).ok())?;
    let seconds = days * 86_400
        + u64::from(time.hour()) * 3600
        + u64::from(time.minute()) * 60
        + u64::from(time.second());
    UNIX_EPOCH.checked_add(std::time::Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_round_trip() {
        // 2024-02-29 13:45:10 UTC
        let time = UNIX_EPOCH + Duration::from_secs(1_709_214_310);
        let zip = zip_time(time);
        assert_eq!(
            (
                zip.year(),
                zip.month(),
                zip.day(),
                zip.hour(),
                zip.minute(),
                zip.second()
            ),
            (2024, 2, 29, 13, 45, 10)
        );
        assert_eq!(system_time(zip), Some(time));
        assert_eq!(zip_time(UNIX_EPOCH).year(), 1980);
    }
}
