//! Writing a zip archive of collected entries, streamed to a file.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

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
    let (year, month, day) = civil_from_days(days);
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
        u64::from(time.year()),
        u64::from(time.month()),
        u64::from(time.day()),
    )?;
    let seconds = days * 86_400
        + u64::from(time.hour()) * 3600
        + u64::from(time.minute()) * 60
        + u64::from(time.second());
    UNIX_EPOCH.checked_add(std::time::Duration::from_secs(seconds))
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant).
fn civil_from_days(days: u64) -> (u64, u8, u8) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (
        year,
        u8::try_from(month).unwrap_or(1),
        u8::try_from(day).unwrap_or(1),
    )
}

/// (year ≥ 1970, month, day) → days since 1970-01-01.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || year < 1970 {
        return None;
    }
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
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
