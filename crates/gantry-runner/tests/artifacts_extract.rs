//! Extraction of hostile archives, built here entry by entry and extracted onto a real
//! file system: link chains, links to links, absolute links, `..` through links, hard
//! links, devices and fifos, names with NUL bytes and newlines, parents that are links
//! out, links left by an earlier archive. After every case no link under the build
//! directory resolves outside it and nothing was written outside.

#![allow(clippy::panic)]

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use gantry_runner::artifacts::{ArtifactError, ExtractSummary, Note, extract_archive};

/// One entry of a test archive.
#[derive(Clone, Copy)]
enum Item<'a> {
    File(&'a str, &'a str),
    Dir(&'a str),
    Link(&'a str, &'a str),
    /// tar only: a hard link to the named path.
    HardLink(&'a str, &'a str),
    /// tar only: a character device.
    CharDevice(&'a str),
    /// tar only: a fifo.
    Fifo(&'a str),
}

/// A scratch directory with `build/` (the extraction root) and `outside/` beside it.
struct Scratch {
    dir: tempfile::TempDir,
    count: std::cell::Cell<usize>,
    /// Links the test put there itself, as the repository or a job would (may lead out).
    planted: std::cell::RefCell<Vec<PathBuf>>,
}

impl Scratch {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(dir.path().join("build")).expect("mkdir");
        fs::create_dir_all(dir.path().join("outside")).expect("mkdir");
        fs::write(dir.path().join("outside/precious.txt"), "precious").expect("write");
        Self {
            dir,
            count: std::cell::Cell::new(0),
            planted: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// A link at `rel` under the build directory, made as the repository would.
    fn plant(&self, rel: &str, target: impl AsRef<Path>) {
        symlink(target, self.build().join(rel)).expect("symlink");
        let resolved = fs::canonicalize(self.build()).expect("resolve").join(rel);
        self.planted.borrow_mut().push(resolved);
    }

    fn build(&self) -> PathBuf {
        self.dir.path().join("build")
    }

    fn outside(&self) -> PathBuf {
        self.dir.path().join("outside")
    }

    fn next_name(&self, suffix: &str) -> PathBuf {
        self.count.set(self.count.get() + 1);
        self.dir
            .path()
            .join(format!("archive-{}.{suffix}", self.count.get()))
    }

    /// A zip of `items` (files, directories, links).
    fn zip(&self, items: &[Item<'_>]) -> PathBuf {
        let path = self.next_name("zip");
        let mut zip = zip::ZipWriter::new(File::create(&path).expect("create"));
        let options = zip::write::SimpleFileOptions::default();
        for item in items {
            match *item {
                Item::File(name, content) => {
                    zip.start_file(name, options).expect("start");
                    zip.write_all(content.as_bytes()).expect("write");
                }
                Item::Dir(name) => zip.add_directory(name, options).expect("dir"),
                Item::Link(name, target) => zip.add_symlink(name, target, options).expect("link"),
                _ => panic!("zip archives hold files, directories and links"),
            }
        }
        zip.finish().expect("finish");
        path
    }

    /// A tar.zst of `items`, names and link targets written as given.
    fn tar_zst(&self, items: &[Item<'_>]) -> PathBuf {
        let path = self.next_name("tar.zst");
        let encoder = zstd::stream::write::Encoder::new(File::create(&path).expect("create"), 1)
            .expect("zstd");
        let mut tar = tar::Builder::new(encoder);
        for item in items {
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o644);
            header.set_size(0);
            let (name, content, kind, link) = match *item {
                Item::File(name, content) => (name, content, tar::EntryType::Regular, None),
                Item::Dir(name) => (name, "", tar::EntryType::Directory, None),
                Item::Link(name, target) => (name, "", tar::EntryType::Symlink, Some(target)),
                Item::HardLink(name, target) => (name, "", tar::EntryType::Link, Some(target)),
                Item::CharDevice(name) => {
                    header.set_device_major(1).expect("major");
                    header.set_device_minor(3).expect("minor");
                    (name, "", tar::EntryType::Char, None)
                }
                Item::Fifo(name) => (name, "", tar::EntryType::Fifo, None),
            };
            let gnu = header.as_gnu_mut().expect("gnu header");
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_entry_type(kind);
            if let Some(link) = link {
                header.set_link_name_literal(link).expect("link name");
            }
            header.set_size(content.len() as u64);
            header.set_cksum();
            tar.append(&header, content.as_bytes()).expect("append");
        }
        tar.into_inner().expect("tar").finish().expect("zstd");
        path
    }

    /// Every symlink under the build directory resolves inside it (or nowhere), and
    /// `outside/` holds only what it started with.
    fn assert_contained(&self) {
        let build = fs::canonicalize(self.build()).expect("resolve");
        let mut todo = vec![build.clone()];
        while let Some(dir) = todo.pop() {
            for entry in fs::read_dir(&dir).expect("list").flatten() {
                let path = entry.path();
                let meta = fs::symlink_metadata(&path).expect("stat");
                if meta.file_type().is_symlink() && !self.planted.borrow().contains(&path) {
                    if let Ok(resolved) = fs::canonicalize(&path) {
                        assert!(
                            resolved.starts_with(&build),
                            "`{}` resolves to {}",
                            path.display(),
                            resolved.display()
                        );
                    }
                } else if meta.is_dir() {
                    todo.push(path);
                }
            }
        }
        let outside: Vec<_> = fs::read_dir(self.outside())
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(outside, ["precious.txt"]);
        assert_eq!(
            fs::read_to_string(self.outside().join("precious.txt")).expect("read"),
            "precious"
        );
    }

    fn extract(&self, archive: &Path) -> Result<ExtractSummary, ArtifactError> {
        let result = extract_archive(archive, &self.build());
        self.assert_contained();
        result
    }
}

fn refused(result: Result<ExtractSummary, ArtifactError>) -> String {
    match result {
        Err(error @ ArtifactError::UnsafeEntry { .. }) => error.to_string(),
        other => panic!("expected an unsafe-entry refusal, got {other:?}"),
    }
}

fn is_link(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// The report's chain: each link's text alone stays inside (`d/l/..` is `d`, `u1/..` is
/// the root), yet `u2` climbed one level above the build directory and `u9` reached `/`.
#[test]
fn the_link_chain_is_refused_at_its_first_unsafe_link() {
    let scratch = Scratch::new();
    let mut items = vec![
        Item::Dir("d/"),
        Item::Link("d/l", "."),
        Item::Link("u1", "d/l/.."),
    ];
    let names: Vec<String> = (2..=9).map(|i| format!("u{i}")).collect();
    let targets: Vec<String> = (1..=8).map(|i| format!("u{i}/..")).collect();
    for (name, target) in names.iter().zip(&targets) {
        items.push(Item::Link(name, target));
    }
    for archive in [scratch.zip(&items), scratch.tar_zst(&items)] {
        assert_eq!(
            refused(scratch.extract(&archive)),
            "extract `u1`: the symbolic link's target `d/l/..` has a `..` after the symbolic link `d/l`: where it leads could change with a later entry (a `..` may follow only real directories)"
        );
        assert!(!is_link(&scratch.build().join("u1")));
        assert!(!is_link(&scratch.build().join("u9")));
    }

    // The same links one archive at a time, in any order, fare no better.
    let scratch = Scratch::new();
    scratch
        .extract(&scratch.zip(&[Item::Link("u1", "d/l/..")]))
        .expect_err("`..` after a name that does not exist yet");
    scratch
        .extract(&scratch.zip(&[Item::Dir("d/"), Item::Link("d/l", ".")]))
        .expect("d/l -> . is fine");
    let message = refused(scratch.extract(&scratch.zip(&[Item::Link("u2", "u1/..")])));
    assert_eq!(
        message,
        "extract `u2`: the symbolic link's target `u1/..` has a `..` after `u1`, which does not exist: where it leads could change with a later entry (a `..` may follow only real directories)"
    );
}

#[test]
fn links_to_links_resolve_through_what_is_on_disk() {
    let scratch = Scratch::new();
    let build = scratch.build();
    // A chain of links inside: fine, and written through.
    let summary = scratch
        .extract(&scratch.zip(&[
            Item::Dir("real/"),
            Item::Link("c", "real"),
            Item::Link("b", "c"),
            Item::Link("a", "b"),
            Item::File("a/through.txt", "through"),
            Item::Dir("bin/"),
            Item::Link("bin/tool", "../real/tool"),
            Item::Link("sub", "real/../real"),
        ]))
        .expect("extracts");
    assert_eq!(summary.symlinks, 5);
    assert_eq!(
        fs::read_to_string(build.join("real/through.txt")).expect("read"),
        "through"
    );

    // A link whose target goes through an existing link that leads out.
    scratch.plant("repo_out", "../outside");
    assert_eq!(
        refused(scratch.extract(&scratch.zip(&[Item::Link("via", "repo_out/precious.txt")]))),
        "extract `via`: the symbolic link points outside the build directory through the link `repo_out` (`repo_out/precious.txt`)"
    );
    // Through a chain of links, the last of which climbs out.
    scratch.plant("real/up", "..");
    scratch.plant("real/up2", "../..");
    assert_eq!(
        refused(scratch.extract(&scratch.zip(&[Item::Link("far", "a/up2/x")]))),
        "extract `far`: the symbolic link points outside the build directory through the link `real/up2` (`a/up2/x`)"
    );
    fs::remove_file(build.join("real/up2")).expect("rm");
    fs::remove_file(build.join("repo_out")).expect("rm");

    // 41 links in a row behind a new link: more than the kernel follows (40).
    let names: Vec<String> = (0..=42).map(|i| format!("hop{i}")).collect();
    let mut items: Vec<Item<'_>> = vec![Item::Dir("hop42/")];
    for i in (0..42).rev() {
        items.push(Item::Link(&names[i], &names[i + 1]));
    }
    let long = scratch.tar_zst(&items);
    assert_eq!(
        refused(scratch.extract(&long)),
        "extract `hop0`: the symbolic link's target `hop1` passes too many levels of symbolic links (at `hop1`)"
    );
    // Written the other way round, each link is fine alone; a file through all of them
    // is not.
    let scratch = Scratch::new();
    let build = scratch.build();
    let mut items: Vec<Item<'_>> = vec![Item::Dir("hop42/")];
    for i in 0..42 {
        items.push(Item::Link(&names[i], &names[i + 1]));
    }
    scratch
        .extract(&scratch.tar_zst(&items))
        .expect("one link at a time");
    assert_eq!(
        refused(scratch.extract(&scratch.zip(&[Item::File("hop0/x.txt", "x")]))),
        "extract `hop0/x.txt`: `hop0`: too many levels of symbolic links"
    );
    assert!(!build.join("hop42/x.txt").exists());
}

#[test]
fn absolute_links_are_refused_even_into_the_build_directory() {
    let scratch = Scratch::new();
    let inside = fs::canonicalize(scratch.build())
        .expect("resolve")
        .join("x")
        .to_string_lossy()
        .into_owned();
    for target in ["/etc", "/", inside.as_str()] {
        assert_eq!(
            refused(scratch.extract(&scratch.tar_zst(&[Item::Link("abs", target)]))),
            format!("extract `abs`: the symbolic link points to the absolute path `{target}`")
        );
    }
    assert!(!is_link(&scratch.build().join("abs")));
}

#[test]
fn dot_dot_climbs_only_out_of_real_directories() {
    let scratch = Scratch::new();
    let build = scratch.build();
    scratch
        .extract(&scratch.zip(&[
            Item::Dir("a/b/"),
            Item::Link("a/b/up", "../.."),
            Item::Link("a/b/side", "../b/../b"),
            Item::Link("lib", "a/b"),
        ]))
        .expect("`..` out of real directories");
    assert_eq!(
        fs::canonicalize(build.join("a/b/up")).expect("resolve"),
        fs::canonicalize(&build).expect("resolve")
    );
    let cases = [
        (
            Item::Link("a/b/out", "../../.."),
            "extract `a/b/out`: the symbolic link points outside the build directory (`../../..`)",
        ),
        (
            Item::Link("x", "lib/.."),
            "extract `x`: the symbolic link's target `lib/..` has a `..` after the symbolic link `lib`: where it leads could change with a later entry (a `..` may follow only real directories)",
        ),
        (
            Item::Link("lib/y", "../z"),
            "extract `lib/y`: the symbolic link's target `../z` has a `..` after the symbolic link `lib`: where it leads could change with a later entry (a `..` may follow only real directories)",
        ),
        (
            Item::Link("a/b/up/w", ".."),
            "extract `a/b/up/w`: the symbolic link's target `..` has a `..` after the symbolic link `a/b/up`: where it leads could change with a later entry (a `..` may follow only real directories)",
        ),
        (
            Item::Link("n", "later/.."),
            "extract `n`: the symbolic link's target `later/..` has a `..` after `later`, which does not exist: where it leads could change with a later entry (a `..` may follow only real directories)",
        ),
    ];
    for (item, message) in cases {
        assert_eq!(refused(scratch.extract(&scratch.zip(&[item]))), message);
    }
    // Written through, a link's own `..` is the kernel's: beneath the root it is fine.
    scratch
        .extract(&scratch.zip(&[Item::File("a/b/up/top.txt", "top")]))
        .expect("through a/b/up");
    assert_eq!(
        fs::read_to_string(build.join("top.txt")).expect("read"),
        "top"
    );
}

#[test]
fn a_file_under_a_link_out_is_refused() {
    let scratch = Scratch::new();
    let build = scratch.build();
    // Left by the repository: relative and absolute links out.
    scratch.plant("rel_out", "../outside");
    scratch.plant("abs_out", scratch.outside());
    scratch.plant("dangling", "nothing/here");
    let cases = [
        (
            "rel_out/x.txt",
            "extract `rel_out/x.txt`: `rel_out` is a symbolic link leading outside the build directory",
        ),
        (
            "rel_out/deep/er/x.txt",
            "extract `rel_out/deep/er/x.txt`: `rel_out` is a symbolic link leading outside the build directory",
        ),
        (
            "abs_out/precious.txt",
            "extract `abs_out/precious.txt`: `abs_out` is a symbolic link leading outside the build directory",
        ),
        (
            "dangling/x.txt",
            "extract `dangling/x.txt`: `dangling` is a dangling symbolic link",
        ),
    ];
    for (name, message) in cases {
        assert_eq!(
            refused(scratch.extract(&scratch.zip(&[Item::File(name, "pwned")]))),
            message
        );
        assert_eq!(
            refused(scratch.extract(&scratch.tar_zst(&[Item::File(name, "pwned")]))),
            message
        );
    }
    // A directory entry there is refused too; the link itself is replaced only by a
    // directory entry at its own name.
    assert_eq!(
        refused(scratch.extract(&scratch.zip(&[Item::Dir("rel_out/sub/")]))),
        "extract `rel_out/sub/`: `rel_out` is a symbolic link leading outside the build directory"
    );
    scratch
        .extract(&scratch.zip(&[Item::Dir("rel_out/")]))
        .expect("the link is replaced by a directory");
    assert!(build.join("rel_out").is_dir() && !is_link(&build.join("rel_out")));
}

#[test]
fn links_left_by_an_earlier_archive_are_replaced_never_written_through() {
    let scratch = Scratch::new();
    let build = scratch.build();
    scratch
        .extract(&scratch.zip(&[
            Item::File("real/keep.txt", "keep"),
            Item::Link("l", "real"),
            Item::Link("f", "real/keep.txt"),
        ]))
        .expect("first archive");
    // A file at a link's name replaces the link; the target is untouched.
    scratch
        .extract(&scratch.zip(&[Item::File("f", "new")]))
        .expect("second archive");
    assert!(!is_link(&build.join("f")));
    assert_eq!(fs::read_to_string(build.join("f")).expect("read"), "new");
    assert_eq!(
        fs::read_to_string(build.join("real/keep.txt")).expect("read"),
        "keep"
    );
    // A directory entry at a link to a directory inside keeps the link, and files go
    // through it; a link at the same name replaces it.
    scratch
        .extract(&scratch.tar_zst(&[Item::Dir("l/"), Item::File("l/more.txt", "more")]))
        .expect("third archive");
    assert!(is_link(&build.join("l")));
    assert_eq!(
        fs::read_to_string(build.join("real/more.txt")).expect("read"),
        "more"
    );
    scratch
        .extract(&scratch.zip(&[Item::Dir("other/"), Item::Link("l", "other")]))
        .expect("fourth archive");
    assert_eq!(
        fs::read_link(build.join("l")).expect("readlink"),
        Path::new("other")
    );
    // An earlier link replaced by one pointing elsewhere inside cannot carry a later
    // link out: `..` never follows a link.
    assert!(
        refused(scratch.extract(&scratch.zip(&[Item::Link("up", "l/..")])))
            .contains("has a `..` after the symbolic link `l`")
    );
}

#[test]
fn hard_links_devices_and_fifos_are_skipped_with_a_warning() {
    let scratch = Scratch::new();
    let build = scratch.build();
    let summary = scratch
        .extract(&scratch.tar_zst(&[
            Item::File("ok.txt", "ok"),
            Item::HardLink("passwd", "/etc/passwd"),
            Item::HardLink("alias.txt", "ok.txt"),
            Item::HardLink("up.txt", "../outside/precious.txt"),
            Item::CharDevice("null"),
            Item::Fifo("pipe"),
            Item::File("after.txt", "after"),
        ]))
        .expect("extracts");
    assert_eq!((summary.files, summary.bytes), (2, 7));
    let warnings: Vec<String> = summary.notes.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            r#"WARNING: File ignored: "passwd" (a hard link; only files, directories and symbolic links are extracted)"#,
            r#"WARNING: File ignored: "alias.txt" (a hard link; only files, directories and symbolic links are extracted)"#,
            r#"WARNING: File ignored: "up.txt" (a hard link; only files, directories and symbolic links are extracted)"#,
            r#"WARNING: File ignored: "null" (a character device; only files, directories and symbolic links are extracted)"#,
            r#"WARNING: File ignored: "pipe" (a fifo; only files, directories and symbolic links are extracted)"#,
        ]
    );
    assert!(summary.notes.iter().all(Note::is_warning));
    for skipped in ["passwd", "alias.txt", "up.txt", "null", "pipe"] {
        assert!(
            fs::symlink_metadata(build.join(skipped)).is_err(),
            "{skipped}"
        );
    }
    assert_eq!(
        fs::read_to_string(build.join("after.txt")).expect("read"),
        "after"
    );
}

#[test]
fn names_with_nul_bytes_and_newlines() {
    let scratch = Scratch::new();
    let build = scratch.build();
    // A newline is a valid name character: extracted as is.
    scratch
        .extract(&scratch.zip(&[Item::File("line\nbreak.txt", "x")]))
        .expect("extracts");
    assert_eq!(
        fs::read_to_string(build.join("line\nbreak.txt")).expect("read"),
        "x"
    );
    // In a message it is escaped, so a name cannot forge a line of the job log.
    let message =
        refused(scratch.extract(&scratch.zip(&[Item::File("../x\nWARNING: all good", "x")])));
    assert_eq!(
        message,
        "extract `../x\\nWARNING: all good`: the path leaves the build directory (`..`)"
    );
    assert!(!message.contains('\n'));
    // NUL: in a zip name, in a tar PAX path, in a link target.
    assert_eq!(
        refused(scratch.extract(&scratch.zip(&[Item::File("a\0b", "x")]))),
        "extract `a\\u{0}b`: the name contains a NUL byte"
    );
    let pax = scratch.next_name("tar.zst");
    {
        let encoder = zstd::stream::write::Encoder::new(File::create(&pax).expect("create"), 1)
            .expect("zstd");
        let mut tar = tar::Builder::new(encoder);
        tar.append_pax_extensions([("path", &b"evil\0.txt"[..])])
            .expect("pax");
        let mut header = tar::Header::new_ustar();
        header.set_path("placeholder.txt").expect("path");
        header.set_size(1);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append(&header, &b"x"[..]).expect("append");
        tar.into_inner().expect("tar").finish().expect("zstd");
    }
    assert_eq!(
        refused(scratch.extract(&pax)),
        "extract `evil\\u{0}.txt`: the name contains a NUL byte"
    );
    assert_eq!(
        refused(scratch.extract(&scratch.zip(&[Item::Link("l", "ok\0/../../..")]))),
        "extract `l`: the symbolic link's target `ok\\u{0}/../../..` contains a NUL byte"
    );
    assert!(!build.join("evil").exists() && !build.join("placeholder.txt").exists());
}
