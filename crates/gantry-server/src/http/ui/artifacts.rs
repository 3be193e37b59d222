//! A job's artifacts, at GitLab's addresses: `/{project}/-/jobs/{id}/artifacts/download`
//! (the archive), `…/artifacts/browse[/{dir}]` (a directory of the zip archive),
//! `…/artifacts/file/{path}` (a page showing one file's text) and `…/artifacts/raw/{path}`
//! (the file as a download).
//!
//! The archive is read by the coordinator (`coordinator/artifacts.rs`: its central
//! directory for a listing, one entry decompressed for a file), never here. Limits: a
//! listing holds at most `MAX_ARTIFACT_ENTRIES` entries of the archive, a file page
//! shows the first [`PREVIEW`] bytes (the rest through `raw`). Files are only ever sent
//! as `application/octet-stream` attachments (`nosniff`), so a file of a job is never
//! a page of this server's; names are HTML-escaped and percent-encoded in links. Cost:
//! O(entries) per listing, O(file) per file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read as _;

use axum::http::StatusCode;
use axum::response::Response;

use crate::coordinator::{ArtifactEntry, CoordinatorError};

use super::super::AppState;
use super::super::artifacts::{file_response, named_file_response};
use super::super::error::ApiError;
use super::job::job_of;
use super::shell::{escape, html, not_done, not_found, project_link};

/// The bytes of a file its page shows.
pub(super) const PREVIEW: u64 = 64 * 1024;

/// What an artifacts address asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum View {
    Download,
    /// A directory (`""`: the archive's top).
    Browse(String),
    File(String),
    Raw(String),
}

impl View {
    /// The view of `kind` and the percent-encoded `rest` of an address; `None` for an
    /// unknown kind, a bad encoding or a path with `..`.
    pub(super) fn parse(kind: &str, rest: &str) -> Option<View> {
        let path = decode_path(rest)?;
        if path.split('/').any(|s| s == "..") {
            return None;
        }
        match kind {
            "download" if path.is_empty() => Some(View::Download),
            "browse" => Some(View::Browse(path)),
            "file" if !path.is_empty() => Some(View::File(path)),
            "raw" if !path.is_empty() => Some(View::Raw(path)),
            _ => None,
        }
    }
}

/// `path` with every byte but unreserved ones and `/` percent-encoded.
pub(super) fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `text` percent-decoded; `None` when an escape or the UTF-8 is bad.
fn decode_path(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .ok()
        .map(|s| s.trim_matches('/').to_owned())
}

/// A size in bytes for people.
pub(super) fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30)),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20)),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// The page or file an artifacts address names.
pub(super) async fn artifacts(
    state: &AppState,
    path: &str,
    id: i64,
    view: View,
) -> Result<Response, ApiError> {
    let Some((project, j)) = job_of(state, path, id).await? else {
        return Ok(not_found());
    };
    let job_url = format!("/{}/-/jobs/{id}", project.path_with_namespace);
    let refused = |e: CoordinatorError| match e {
        CoordinatorError::NotFound(_) => Ok(not_found()),
        CoordinatorError::Invalid(why) => Ok(not_done(StatusCode::BAD_REQUEST, &why, &job_url)),
        e => Err(ApiError::from(e)),
    };
    match view {
        View::Download => match state.coordinator.artifacts().job_artifact(id).await {
            Ok((artifact, blob)) => Ok(file_response(&artifact, blob)),
            Err(e) => refused(e),
        },
        View::Raw(file) => match state.coordinator.artifacts().artifact_file(id, &file).await {
            Ok((name, blob)) => Ok(named_file_response(&name, blob)),
            Err(e) => refused(e),
        },
        View::File(file) => {
            let (_, blob) = match state.coordinator.artifacts().artifact_file(id, &file).await {
                Ok(found) => found,
                Err(e) => return refused(e),
            };
            let len = blob.len;
            let head = tokio::task::spawn_blocking(move || {
                let mut head = Vec::new();
                (&blob.file)
                    .take(PREVIEW)
                    .read_to_end(&mut head)
                    .map(|_| head)
            })
            .await
            .map_err(|e| ApiError::from(CoordinatorError::Io(std::io::Error::other(e))))?
            .map_err(|e| ApiError::from(CoordinatorError::Io(e)))?;
            let raw = format!("{job_url}/artifacts/raw/{}", encode_path(&file));
            let shown = if head.contains(&0) {
                "<p>A binary file: download it.</p>".to_owned()
            } else {
                let cut = if len > PREVIEW {
                    format!(
                        "<p class=\"why\">The first {} of {}: download it for the rest.</p>",
                        size(PREVIEW),
                        size(len)
                    )
                } else {
                    String::new()
                };
                format!(
                    "{cut}<pre class=\"file\">{}</pre>",
                    escape(&String::from_utf8_lossy(&head))
                )
            };
            let dir = file.rsplit_once('/').map_or("", |(d, _)| d);
            Ok(html(
                StatusCode::OK,
                &file,
                false,
                &format!(
                    "<p>{} · <a href=\"{}\">{}</a> · <a href=\"{}/artifacts/browse/{}\">artifacts</a></p>\
                     <h1 class=\"path\">{}</h1><p>{} · <a class=\"download\" href=\"{}\">Download</a></p>{shown}",
                    project_link(&project),
                    escape(&job_url),
                    escape(&j.name),
                    escape(&job_url),
                    escape(&encode_path(dir)),
                    escape(&file),
                    size(len),
                    escape(&raw),
                ),
            ))
        }
        View::Browse(dir) => {
            let (entries, cut) = match state.coordinator.artifacts().artifact_entries(id).await {
                Ok(listed) => listed,
                Err(e) => return refused(e),
            };
            let Some(rows) = listing(&entries, &dir, &job_url) else {
                return Ok(not_found());
            };
            let up = match dir.rsplit_once('/') {
                Some((parent, _)) => format!(
                    "<tr><td><a href=\"{}/artifacts/browse/{}\">..</a></td><td></td></tr>",
                    escape(&job_url),
                    escape(&encode_path(parent))
                ),
                None if !dir.is_empty() => format!(
                    "<tr><td><a href=\"{}/artifacts/browse\">..</a></td><td></td></tr>",
                    escape(&job_url)
                ),
                None => String::new(),
            };
            let cut = if cut {
                format!(
                    "<p class=\"why\">The archive has more than {} entries: only the first are listed; download it for the rest.</p>",
                    crate::coordinator::MAX_ARTIFACT_ENTRIES
                )
            } else {
                String::new()
            };
            Ok(html(
                StatusCode::OK,
                "Artifacts",
                false,
                &format!(
                    "<p>{} · <a href=\"{}\">{}</a></p><h1>Artifacts <span class=\"path\">/{}</span></h1>\
                     <p><a class=\"download\" href=\"{}/artifacts/download\">Download the archive</a></p>{cut}\
                     <table class=\"files\"><tr><th>Name</th><th>Size</th></tr>{up}{rows}</table>",
                    project_link(&project),
                    escape(&job_url),
                    escape(&j.name),
                    escape(&dir),
                    escape(&job_url),
                ),
            ))
        }
    }
}

/// The rows of directory `dir` (`""`: the top) of an archive listed as `entries`:
/// its subdirectories (also those only implied by deeper files' paths), then its files,
/// each by name. `None` when `dir` is not a directory of the archive.
fn listing(entries: &[ArtifactEntry], dir: &str, job_url: &str) -> Option<String> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let mut dirs: BTreeMap<&str, ()> = BTreeMap::new();
    let mut files: BTreeMap<&str, u64> = BTreeMap::new();
    let mut exists = dir.is_empty();
    for e in entries {
        let Some(rest) = e.path.strip_prefix(&prefix) else {
            continue;
        };
        exists = true;
        let rest = rest.trim_end_matches('/');
        if rest.is_empty() {
            continue;
        }
        match rest.split_once('/') {
            Some((sub, _)) => {
                dirs.insert(sub, ());
            }
            None if e.dir => {
                dirs.insert(rest, ());
            }
            None => {
                files.insert(rest, e.size);
            }
        }
    }
    if !exists {
        return None;
    }
    let mut rows = String::new();
    for name in dirs.keys() {
        let _ = write!(
            rows,
            "<tr><td><a class=\"dir\" href=\"{}/artifacts/browse/{}\">{}/</a></td><td></td></tr>",
            escape(job_url),
            escape(&encode_path(&format!("{prefix}{name}"))),
            escape(name)
        );
    }
    for (name, bytes) in &files {
        let _ = write!(
            rows,
            "<tr><td><a class=\"file\" href=\"{}/artifacts/file/{}\">{}</a></td><td>{}</td></tr>",
            escape(job_url),
            escape(&encode_path(&format!("{prefix}{name}"))),
            escape(name),
            size(*bytes)
        );
    }
    if rows.is_empty() {
        rows = "<tr><td colspan=\"2\">Empty.</td></tr>".to_owned();
    }
    Some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, size: u64) -> ArtifactEntry {
        ArtifactEntry {
            path: path.to_owned(),
            size,
            dir: path.ends_with('/'),
        }
    }

    #[test]
    fn addresses_decode_and_refuse_climbing() {
        assert_eq!(View::parse("download", ""), Some(View::Download));
        assert_eq!(View::parse("browse", ""), Some(View::Browse(String::new())));
        assert_eq!(
            View::parse("file", "out/a%20b%3C.txt"),
            Some(View::File("out/a b<.txt".to_owned()))
        );
        assert_eq!(View::parse("file", "out/../../x"), None);
        assert_eq!(View::parse("raw", "%zz"), None);
        assert_eq!(View::parse("file", ""), None);
        assert_eq!(encode_path("out/a b<\".txt"), "out/a%20b%3C%22.txt");
    }

    #[test]
    fn a_listing_shows_one_directory_escaped() {
        let entries = [
            entry("out/", 0),
            entry("out/report <1>.txt", 2048),
            entry("out/deep/x.bin", 3),
            entry("top.txt", 5),
        ];
        let top = listing(&entries, "", "/g/p/-/jobs/4").unwrap();
        insta::assert_snapshot!(top, @r#"<tr><td><a class="dir" href="/g/p/-/jobs/4/artifacts/browse/out">out/</a></td><td></td></tr><tr><td><a class="file" href="/g/p/-/jobs/4/artifacts/file/top.txt">top.txt</a></td><td>5 B</td></tr>"#);
        let out = listing(&entries, "out", "/g/p/-/jobs/4").unwrap();
        insta::assert_snapshot!(out, @r#"<tr><td><a class="dir" href="/g/p/-/jobs/4/artifacts/browse/out/deep">deep/</a></td><td></td></tr><tr><td><a class="file" href="/g/p/-/jobs/4/artifacts/file/out/report%20%3C1%3E.txt">report &lt;1&gt;.txt</a></td><td>2.0 KiB</td></tr>"#);
        assert_eq!(listing(&entries, "nothing", "/g/p/-/jobs/4"), None);
    }
}
