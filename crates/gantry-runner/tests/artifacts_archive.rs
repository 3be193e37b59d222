//! Building upload files (zip, gzip, raw) from payload entries, and extracting
//! downloads: round trips, and archives that try to escape the build directory.

#![allow(clippy::panic)]

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use gantry_protocol::{ArtifactFormat, JobArtifact};
use gantry_runner::artifacts::{
    ArtifactError, ExtractSummary, Note, extract_archive, prepare_upload, should_upload,
    upload_file_name,
};

fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

fn artifact(json: &str) -> JobArtifact {
    serde_json::from_str(json).expect("artifact JSON")
}

fn no_vars(_: &str) -> Option<String> {
    None
}

/// The build directory of §3.6's example job.
fn build_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    write(root, "coverage/index.html", "<html>coverage</html>");
    write(root, "coverage/cache/skip.bin", "skip");
    write(root, "coverage/run.sh", "#!/bin/sh\necho hi\n");
    fs::set_permissions(
        root.join("coverage/run.sh"),
        fs::Permissions::from_mode(0o750),
    )
    .expect("chmod");
    symlink("index.html", root.join("coverage/latest.html")).expect("symlink");
    write(root, "rspec.xml", "<testsuite name=\"rspec\"/>");
    dir
}

const ARCHIVE: &str = r#"{"name": "coverage", "untracked": false, "paths": ["coverage/"],
    "exclude": ["coverage/cache/**/*"], "when": "on_success", "expire_in": "1 week",
    "artifact_type": "archive", "artifact_format": "zip"}"#;
const JUNIT: &str = r#"{"name": "junit.xml", "paths": ["rspec.xml"], "when": "always",
    "expire_in": "1 week", "artifact_type": "junit", "artifact_format": "gzip"}"#;

#[test]
fn the_archive_entry_becomes_a_zip_with_modes_and_symlinks() {
    let dir = build_dir();
    let out = tempfile::tempdir().expect("temp dir");
    let prepared = prepare_upload(&artifact(ARCHIVE), dir.path(), None, out.path(), &no_vars)
        .expect("prepared");
    assert_eq!(prepared.file_name, "coverage.zip");
    assert_eq!(
        prepared.params.to_query(),
        "artifact_format=zip&artifact_type=archive&expire_in=1+week"
    );
    assert_eq!(prepared.files, 3);
    let path = prepared.path.clone().expect("an archive was written");
    assert_eq!(
        prepared.upload_bytes,
        fs::metadata(&path).expect("stat").len()
    );

    let mut zip = zip::ZipArchive::new(File::open(&path).expect("open")).expect("valid zip");
    let mut listing = Vec::new();
    for index in 0..zip.len() {
        let mut entry = zip.by_index(index).expect("entry");
        let mode = entry.unix_mode().expect("unix mode stored");
        let mut content = String::new();
        entry.read_to_string(&mut content).expect("read");
        listing.push(format!("{} {:o} {content}", entry.name(), mode));
    }
    assert_eq!(
        listing,
        [
            "coverage/ 40755 ",
            "coverage/cache/ 40755 ",
            "coverage/index.html 100644 <html>coverage</html>",
            "coverage/latest.html 120777 index.html",
            "coverage/run.sh 100750 #!/bin/sh\necho hi\n",
        ]
    );
}

#[test]
fn zip_round_trips_through_extraction() {
    let dir = build_dir();
    let out = tempfile::tempdir().expect("temp dir");
    let prepared = prepare_upload(&artifact(ARCHIVE), dir.path(), None, out.path(), &no_vars)
        .expect("prepared");
    let target = tempfile::tempdir().expect("temp dir");
    let summary =
        extract_archive(&prepared.path.expect("archive"), target.path()).expect("extracts");
    assert_eq!(
        summary,
        ExtractSummary {
            files: 2,
            dirs: 2,
            symlinks: 1,
            bytes: 21 + 18,
            notes: Vec::new(),
        }
    );
    let root = target.path();
    assert_eq!(
        fs::read_to_string(root.join("coverage/index.html")).expect("read"),
        "<html>coverage</html>"
    );
    assert_eq!(
        fs::read_link(root.join("coverage/latest.html")).expect("link"),
        PathBuf::from("index.html")
    );
    let mode = fs::metadata(root.join("coverage/run.sh"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o750);
    let original = fs::metadata(dir.path().join("coverage/index.html"))
        .expect("stat")
        .modified()
        .expect("mtime");
    let restored = fs::metadata(root.join("coverage/index.html"))
        .expect("stat")
        .modified()
        .expect("mtime");
    let drift = original
        .duration_since(restored)
        .unwrap_or_else(|e| e.duration());
    assert!(drift.as_secs() <= 2, "zip keeps mtimes to 2 s: {drift:?}");
}

#[test]
fn reports_are_gzip_members_named_after_their_paths() {
    let dir = build_dir();
    write(dir.path(), "more/résumé.xml", "<testsuite name=\"é\"/>");
    let out = tempfile::tempdir().expect("temp dir");
    let mut report = artifact(JUNIT);
    report.paths.push("more/*.xml".to_owned());
    let prepared =
        prepare_upload(&report, dir.path(), None, out.path(), &no_vars).expect("prepared");
    assert_eq!(prepared.file_name, "junit.xml.gz");
    assert_eq!(
        prepared.params.to_query(),
        "artifact_format=gzip&artifact_type=junit&expire_in=1+week"
    );
    let path = prepared.path.expect("written");

    // Each member carries its name and path in the gzip header.
    let bytes = fs::read(&path).expect("read");
    let mut members = Vec::new();
    let mut rest: &[u8] = &bytes;
    while !rest.is_empty() {
        let mut decoder = flate2::bufread::GzDecoder::new(rest);
        let header = decoder.header().expect("header").clone();
        let mut content = String::new();
        decoder.read_to_string(&mut content).expect("member");
        members.push((
            String::from_utf8_lossy(header.filename().expect("name")).into_owned(),
            String::from_utf8_lossy(header.comment().expect("comment")).into_owned(),
            content,
        ));
        rest = decoder.into_inner();
    }
    assert_eq!(
        members,
        [
            (
                "e:r%C3%A9sum%C3%A9.xml".to_owned(),
                "e:more%2Fr%C3%A9sum%C3%A9.xml".to_owned(),
                "<testsuite name=\"é\"/>".to_owned()
            ),
            (
                "rspec.xml".to_owned(),
                "rspec.xml".to_owned(),
                "<testsuite name=\"rspec\"/>".to_owned()
            ),
        ]
    );

    let target = tempfile::tempdir().expect("temp dir");
    let summary = extract_archive(&path, target.path()).expect("gzip extracts");
    assert_eq!(summary.files, 2);
    assert_eq!(
        fs::read_to_string(target.path().join("more/résumé.xml")).expect("read"),
        "<testsuite name=\"é\"/>"
    );
}

#[test]
fn raw_reports_take_exactly_one_file() {
    let dir = build_dir();
    let out = tempfile::tempdir().expect("temp dir");
    let sast = artifact(
        r#"{"name": "gl-sast-report.json", "paths": ["rspec.xml"], "when": "always",
        "artifact_type": "sast", "artifact_format": "raw"}"#,
    );
    let prepared = prepare_upload(&sast, dir.path(), None, out.path(), &no_vars).expect("prepared");
    assert_eq!(prepared.file_name, "gl-sast-report.json");
    assert_eq!(
        fs::read_to_string(prepared.path.expect("written")).expect("read"),
        "<testsuite name=\"rspec\"/>"
    );

    let mut two = sast.clone();
    two.paths = vec!["coverage/*.html".to_owned(), "rspec.xml".to_owned()];
    let error =
        prepare_upload(&two, dir.path(), None, out.path(), &no_vars).expect_err("two files");
    assert_eq!(
        error.to_string(),
        "build the `sast` artifact: format `raw` takes exactly one file, 2 matched"
    );
}

#[test]
fn names_and_paths_expand_variables_and_nothing_matched_uploads_nothing() {
    let dir = build_dir();
    let out = tempfile::tempdir().expect("temp dir");
    let lookup = |name: &str| match name {
        "CI_JOB_NAME" => Some("rspec".to_owned()),
        "DIR" => Some("coverage".to_owned()),
        _ => None,
    };
    let mut entry = artifact(ARCHIVE);
    entry.name = Some("$CI_JOB_NAME-results".to_owned());
    entry.paths = vec!["${DIR}/index.html".to_owned()];
    let prepared = prepare_upload(&entry, dir.path(), None, out.path(), &lookup).expect("prepared");
    assert_eq!(prepared.file_name, "rspec-results.zip");
    assert_eq!(prepared.files, 1);

    entry.paths = vec!["nothing/here".to_owned()];
    let prepared = prepare_upload(&entry, dir.path(), None, out.path(), &lookup).expect("prepared");
    assert_eq!(prepared.path, None);
    assert_eq!(
        prepared.notes.last(),
        Some(&Note::Warning("No files to upload".to_owned()))
    );
}

#[test]
fn upload_decisions_and_file_names() {
    let archive = artifact(ARCHIVE);
    assert!(should_upload(&archive, true));
    assert!(!should_upload(&archive, false));
    let mut on_failure = archive.clone();
    on_failure.when = Some(gantry_protocol::When::OnFailure);
    assert!(!should_upload(&on_failure, true));
    assert!(should_upload(&on_failure, false));
    let mut unset = archive.clone();
    unset.when = None;
    assert!(should_upload(&unset, true));
    assert!(!should_upload(&unset, false));
    let junit = artifact(JUNIT);
    assert!(should_upload(&junit, false));

    assert_eq!(upload_file_name(None, ArtifactFormat::Zip), "artifacts.zip");
    assert_eq!(
        upload_file_name(Some(""), ArtifactFormat::Zip),
        "default.zip"
    );
    assert_eq!(
        upload_file_name(Some("."), ArtifactFormat::Gzip),
        "default.gz"
    );
    assert_eq!(
        upload_file_name(Some("dir/sub/name"), ArtifactFormat::Tarzstd),
        "name.tar.zst"
    );
    assert_eq!(
        upload_file_name(Some("report.json"), ArtifactFormat::Raw),
        "report.json"
    );
}

// ---- hostile archives -------------------------------------------------------------

enum ZipItem<'a> {
    File(&'a str, &'a str),
    Link(&'a str, &'a str),
}

fn hostile_zip(dir: &Path, items: &[ZipItem<'_>]) -> PathBuf {
    let path = dir.join("hostile.zip");
    let mut zip = zip::ZipWriter::new(File::create(&path).expect("create"));
    let options = zip::write::SimpleFileOptions::default();
    for item in items {
        match item {
            ZipItem::File(name, content) => {
                zip.start_file(*name, options).expect("start");
                zip.write_all(content.as_bytes()).expect("write");
            }
            ZipItem::Link(name, target) => zip.add_symlink(*name, *target, options).expect("link"),
        }
    }
    zip.finish().expect("finish");
    path
}

fn refused(result: Result<ExtractSummary, ArtifactError>) -> String {
    match result {
        Err(error @ ArtifactError::UnsafeEntry { .. }) => error.to_string(),
        other => panic!("expected an unsafe-entry refusal, got {other:?}"),
    }
}

#[test]
fn zip_entries_that_escape_are_refused() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let build = scratch.path().join("build");
    let cases: [(&[ZipItem<'_>], &str); 5] = [
        (
            &[ZipItem::File("../evil.txt", "x")],
            "extract `../evil.txt`: the path leaves the build directory (`..`)",
        ),
        (
            &[ZipItem::File("a/../../evil.txt", "x")],
            "extract `a/../../evil.txt`: the path leaves the build directory (`..`)",
        ),
        (
            &[ZipItem::File("a\\..\\..\\evil.txt", "x")],
            "extract `a\\..\\..\\evil.txt`: the path leaves the build directory (`..`)",
        ),
        (
            &[ZipItem::Link("link", "../../etc")],
            "extract `link`: the symbolic link points outside the build directory (`../../etc`)",
        ),
        (
            &[ZipItem::Link("sub/link", "/etc")],
            "extract `sub/link`: the symbolic link points to the absolute path `/etc`",
        ),
    ];
    for (items, message) in cases {
        let archive = hostile_zip(scratch.path(), items);
        assert_eq!(refused(extract_archive(&archive, &build)), message);
    }
    assert!(!scratch.path().join("evil.txt").exists());
    assert!(!build.join("link").exists());
}

#[test]
fn extraction_never_writes_through_a_link_that_leads_outside() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let build = scratch.path().join("build");
    let outside = scratch.path().join("outside");
    fs::create_dir_all(&build).expect("mkdir");
    fs::create_dir_all(&outside).expect("mkdir");
    write(&outside, "target.txt", "precious");
    // Left by the repository or an earlier job.
    symlink(&outside, build.join("out")).expect("symlink");
    symlink(outside.join("target.txt"), build.join("victim.txt")).expect("symlink");

    let archive = hostile_zip(scratch.path(), &[ZipItem::File("out/pwned.txt", "x")]);
    assert_eq!(
        refused(extract_archive(&archive, &build)),
        "extract `out/pwned.txt`: `out` is a symbolic link leading outside the build directory"
    );
    assert!(!outside.join("pwned.txt").exists());

    // A link at the final path is replaced, its target untouched.
    let archive = hostile_zip(scratch.path(), &[ZipItem::File("victim.txt", "new")]);
    extract_archive(&archive, &build).expect("extracts");
    assert_eq!(
        fs::read_to_string(outside.join("target.txt")).expect("read"),
        "precious"
    );
    assert_eq!(
        fs::read_to_string(build.join("victim.txt")).expect("read"),
        "new"
    );
    assert!(
        !fs::symlink_metadata(build.join("victim.txt"))
            .expect("stat")
            .file_type()
            .is_symlink()
    );

    // Links that stay inside are fine, and can be written through.
    let archive = hostile_zip(
        scratch.path(),
        &[
            ZipItem::File("real/a.txt", "a"),
            ZipItem::Link("alias", "real"),
            ZipItem::File("alias/b.txt", "b"),
        ],
    );
    let summary = extract_archive(&archive, &build).expect("extracts");
    assert_eq!(summary.symlinks, 1);
    assert_eq!(
        fs::read_to_string(build.join("real/b.txt")).expect("read"),
        "b"
    );
}

#[test]
fn tar_zst_and_gzip_entries_that_escape_are_refused() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let build = scratch.path().join("build");

    // tar.zst with a raw `../escaped.txt` name (the tar crate refuses to write it).
    let path = scratch.path().join("hostile.tar.zst");
    let encoder =
        zstd::stream::write::Encoder::new(File::create(&path).expect("create"), 1).expect("zstd");
    let mut tar = tar::Builder::new(encoder);
    let mut header = tar::Header::new_gnu();
    let name = b"../escaped.txt";
    header.as_gnu_mut().expect("gnu header").name[..name.len()].copy_from_slice(name);
    header.set_size(1);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    tar.append(&header, &b"x"[..]).expect("append");
    tar.into_inner().expect("tar").finish().expect("zstd");
    assert_eq!(
        refused(extract_archive(&path, &build)),
        "extract `../escaped.txt`: the path leaves the build directory (`..`)"
    );

    // gzip member whose comment (the path) climbs out.
    let path = scratch.path().join("hostile.gz");
    let mut encoder = flate2::GzBuilder::new()
        .filename("x.xml")
        .comment("../../x.xml")
        .write(
            File::create(&path).expect("create"),
            flate2::Compression::default(),
        );
    encoder.write_all(b"<x/>").expect("write");
    encoder.finish().expect("finish");
    assert_eq!(
        refused(extract_archive(&path, &build)),
        "extract `../../x.xml`: the path leaves the build directory (`..`)"
    );
    assert!(!scratch.path().join("escaped.txt").exists());
    assert!(!scratch.path().join("x.xml").exists());
}

#[test]
fn corrupt_and_unknown_archives_are_errors_never_panics() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let build = scratch.path().join("build");
    let write_bytes = |name: &str, bytes: &[u8]| {
        let path = scratch.path().join(name);
        fs::write(&path, bytes).expect("write");
        path
    };
    let empty = write_bytes("empty", b"");
    assert!(matches!(
        extract_archive(&empty, &build),
        Err(ArtifactError::UnknownFormat { .. })
    ));
    let text = write_bytes("text", b"hello world");
    assert_eq!(
        extract_archive(&text, &build)
            .expect_err("unknown")
            .to_string(),
        format!(
            "extract {}: unknown archive format (expected zip, gzip or tar.zst)",
            text.display()
        )
    );
    let fake_zip = write_bytes("fake.zip", b"PK\x03\x04 this is not a zip");
    assert!(matches!(
        extract_archive(&fake_zip, &build),
        Err(ArtifactError::Corrupt { .. })
    ));
    let missing = scratch.path().join("missing.zip");
    assert!(matches!(
        extract_archive(&missing, &build),
        Err(ArtifactError::Io { .. })
    ));

    // Every truncation and every single-byte corruption of real archives: an error or
    // a (partial) success, never a panic or a write outside `build`.
    let source = build_dir();
    let out = tempfile::tempdir().expect("temp dir");
    let zip = prepare_upload(
        &artifact(ARCHIVE),
        source.path(),
        None,
        out.path(),
        &no_vars,
    )
    .expect("zip")
    .path
    .expect("zip");
    let gz = prepare_upload(&artifact(JUNIT), source.path(), None, out.path(), &no_vars)
        .expect("gz")
        .path
        .expect("gz");
    for original in [zip, gz] {
        let bytes = fs::read(&original).expect("read");
        for cut in (0..bytes.len()).step_by(7) {
            let path = write_bytes("truncated", &bytes[..cut]);
            let _ = extract_archive(&path, &build);
        }
        for position in (0..bytes.len()).step_by(3) {
            let mut corrupted = bytes.clone();
            corrupted[position] ^= 0x5a;
            let path = write_bytes("corrupted", &corrupted);
            let _ = extract_archive(&path, &build);
        }
    }
    let entries: Vec<_> = fs::read_dir(scratch.path())
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    for name in entries {
        let name = name.to_string_lossy().into_owned();
        assert!(
            [
                "build",
                "empty",
                "text",
                "fake.zip",
                "truncated",
                "corrupted"
            ]
            .contains(&name.as_str()),
            "unexpected file {name} next to the build directory"
        );
    }
}
