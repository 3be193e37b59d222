//! The `gzip` artifact format (§6.2): a multi-member gzip stream, one member per
//! file, header `name` = base name, `comment` = relative path.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::UNIX_EPOCH;

use flate2::{Compression, GzBuilder};

use super::{ArtifactError, Entry, EntryKind};

/// Writes each regular file of `entries` as one gzip member to `dest`. Returns the
/// archive size.
pub(crate) fn write_gzip(
    build_dir: &Path,
    entries: &[Entry],
    dest: &Path,
) -> Result<u64, ArtifactError> {
    let file = File::create(dest).map_err(|e| ArtifactError::io("create archive", dest, e))?;
    let mut out = BufWriter::new(file);
    for entry in entries {
        if !matches!(entry.kind, EntryKind::File { .. }) {
            continue;
        }
        let source_path = build_dir.join(&entry.path);
        let mut source =
            File::open(&source_path).map_err(|e| ArtifactError::io("read", &source_path, e))?;
        let base = entry.path.rsplit('/').next().unwrap_or(&entry.path);
        let mtime = entry
            .modified
            .duration_since(UNIX_EPOCH)
            .map(|d| u32::try_from(d.as_secs()).unwrap_or(0))
            .unwrap_or(0);
        let mut encoder = GzBuilder::new()
            .filename(header_text(base))
            .comment(header_text(&entry.path))
            .mtime(mtime)
            .write(&mut out, Compression::default());
        io::copy(&mut source, &mut encoder)
            .map_err(|e| ArtifactError::io("archive", &source_path, e))?;
        encoder
            .finish()
            .map_err(|e| ArtifactError::io("write archive", dest, e))?;
    }
    out.flush()
        .map_err(|e| ArtifactError::io("write archive", dest, e))?;
    let file = out
        .into_inner()
        .map_err(|e| ArtifactError::io("write archive", dest, e.into_error()))?;
    file.sync_all()
        .map_err(|e| ArtifactError::io("write archive", dest, e))?;
    file.metadata()
        .map(|meta| meta.len())
        .map_err(|e| ArtifactError::io("inspect", dest, e))
}

/// gzip header strings are Latin-1: ASCII goes as is, anything else as
/// `e:<percent-escaped UTF-8>` (Go's `url.PathEscape`).
fn header_text(text: &str) -> Vec<u8> {
    if text.is_ascii() && !text.contains('\0') {
        return text.as_bytes().to_vec();
    }
    let mut out = String::from("e:");
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'-'
            | b'_'
            | b'.'
            | b'~'
            | b'$'
            | b'&'
            | b'+'
            | b':'
            | b'='
            | b'@' => out.push(char::from(byte)),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out.into_bytes()
}

/// Reverses [`header_text`].
fn decode_header_text(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    let Some(escaped) = text.strip_prefix("e:") else {
        return Some(text.to_owned());
    };
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = escaped.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One member of a gzip stream read by [`for_each_member`].
pub(crate) struct Member<'a> {
    /// The relative path (header comment, else name).
    pub(crate) path: String,
    /// Modification time, seconds since the epoch (0 = unknown).
    pub(crate) mtime: u32,
    /// The decompressed content.
    pub(crate) reader: &'a mut dyn Read,
}

/// Calls `visit` for each member of the multi-member gzip file at `archive`.
pub(crate) fn for_each_member(
    archive: &Path,
    visit: &mut dyn FnMut(Member<'_>) -> Result<(), ArtifactError>,
) -> Result<(), ArtifactError> {
    let file = File::open(archive).map_err(|e| ArtifactError::io("open", archive, e))?;
    let corrupt = |detail: String| ArtifactError::Corrupt {
        path: archive.to_path_buf(),
        detail,
    };
    let mut reader = BufReader::new(file);
    let mut index = 0usize;
    loop {
        let more = reader
            .fill_buf()
            .map_err(|e| ArtifactError::io("read", archive, e))?;
        if more.is_empty() {
            return Ok(());
        }
        index += 1;
        let mut decoder = flate2::bufread::GzDecoder::new(reader);
        let header = decoder
            .header()
            .ok_or_else(|| corrupt(format!("gzip member {index} has no valid header")))?;
        let raw_name = header
            .comment()
            .filter(|c| !c.is_empty())
            .or_else(|| header.filename())
            .ok_or_else(|| corrupt(format!("gzip member {index} has no file name")))?;
        let path = decode_header_text(raw_name)
            .ok_or_else(|| corrupt(format!("gzip member {index} has an undecodable file name")))?;
        let mtime = header.mtime();
        visit(Member {
            path,
            mtime,
            reader: &mut decoder,
        })?;
        // Drain what the visitor left so the next member starts at the right place.
        io::copy(&mut decoder, &mut io::sink()).map_err(|e| corrupt(e.to_string()))?;
        reader = decoder.into_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_text_escapes_non_ascii() {
        assert_eq!(header_text("junit.xml"), b"junit.xml".to_vec());
        assert_eq!(
            header_text("résumé.xml"),
            b"e:r%C3%A9sum%C3%A9.xml".to_vec()
        );
        assert_eq!(header_text("a/é"), b"e:a%2F%C3%A9".to_vec());
        assert_eq!(decode_header_text(b"e:a%2F%C3%A9").as_deref(), Some("a/é"));
        assert_eq!(
            decode_header_text(b"plain/x.xml").as_deref(),
            Some("plain/x.xml")
        );
        assert_eq!(decode_header_text(b"e:%ZZ"), None);
    }
}
