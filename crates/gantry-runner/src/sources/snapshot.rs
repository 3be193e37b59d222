//! Sources from a prepared snapshot directory instead of git: what `gantry run` uses to
//! give every job a fresh, isolated copy of the working tree as it is now (tracked and
//! untracked-not-ignored files, uncommitted changes, file modes), without a clone.
//!
//! The snapshot is a plain directory (with its own minimal `.git`, prepared by the
//! caller). [`sync_tree`] makes a job's project directory an exact replica of it:
//! regular files with their permission bits, directories, and symbolic links as links;
//! special files (sockets, FIFOs, devices) are left out. What an earlier job left in
//! the directory goes: entries the snapshot lacks are removed, an entry of another kind
//! is replaced, every file is rewritten. It is what gitlab-runner's `fetch` strategy
//! does with `git clean -ffdx` and `git checkout -f` in a reused build directory, without
//! git: the same directories and files (inodes) serve job after job, which on a disk file
//! system costs far less than removing a tree and creating it again (ext4 scans past
//! every recently freed inode when it allocates one). Copying in-process takes about a
//! millisecond for a small project, where `git init` + `fetch` + `checkout` spawn
//! several processes.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::Path;

/// Deepest directory nesting copied (deeper trees are an error, not a stack overflow).
pub const MAX_SNAPSHOT_DEPTH: usize = 256;

/// What a copy did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyStats {
    /// Regular files copied.
    pub files: u64,
    /// Bytes in them.
    pub bytes: u64,
}

/// Makes `to` (created when missing, with its parents) an exact replica of the tree at
/// `from` (see the module docs).
pub fn sync_tree(from: &Path, to: &Path) -> io::Result<CopyStats> {
    let mut stats = CopyStats::default();
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    sync_dir(from, to, 0, &mut stats)?;
    Ok(stats)
}

/// The kinds of entry a snapshot holds; anything else is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
}

fn kind_of(kind: fs::FileType) -> Option<Kind> {
    if kind.is_dir() {
        Some(Kind::Dir)
    } else if kind.is_file() {
        Some(Kind::File)
    } else if kind.is_symlink() {
        Some(Kind::Link)
    } else {
        None
    }
}

fn sync_dir(from: &Path, to: &Path, depth: usize, stats: &mut CopyStats) -> io::Result<()> {
    if depth > MAX_SNAPSHOT_DEPTH {
        return Err(io::Error::other(format!(
            "{} is nested deeper than {MAX_SNAPSHOT_DEPTH} directories",
            from.display()
        )));
    }
    let mode_before = prepare_dir(to)?;
    let mut wanted: HashMap<OsString, Kind> = HashMap::new();
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        if let Some(kind) = kind_of(entry.file_type()?) {
            wanted.insert(entry.file_name(), kind);
        }
    }
    // What the snapshot lacks, or has as another kind of entry, goes first.
    for entry in fs::read_dir(to)? {
        let entry = entry?;
        let kind = kind_of(entry.file_type()?);
        if kind.is_none() || wanted.get(&entry.file_name()) != kind.as_ref() {
            remove_entry(&entry.path(), kind)?;
        }
    }
    for (name, kind) in wanted {
        let (source, target) = (from.join(&name), to.join(&name));
        match kind {
            Kind::Dir => sync_dir(&source, &target, depth + 1, stats)?,
            Kind::File => {
                stats.bytes += copy_file(&source, &target)?;
                stats.files += 1;
            }
            Kind::Link => copy_link(&source, &target)?,
        }
    }
    // The directory's own mode (e.g. a read-only directory) after its content is in;
    // left alone when it already is (a change of mode is an inode write, which a disk
    // file system journals).
    let mode = fs::metadata(from)?.permissions();
    if mode_before.as_ref() != Some(&mode) {
        fs::set_permissions(to, mode)?;
    }
    Ok(())
}

/// `to` as a directory we can write into: created when missing, a non-directory in its
/// place removed, a directory an earlier copy (or job) made read-only opened up again.
/// Returns the mode of a directory that was there and needed no opening up (`None`: a
/// new or changed directory, whose mode is to be set).
fn prepare_dir(to: &Path) -> io::Result<Option<fs::Permissions>> {
    match fs::symlink_metadata(to) {
        Ok(meta) if meta.is_dir() => make_writable(to, &meta),
        Ok(_) => {
            fs::remove_file(to)?;
            fs::create_dir(to).map(|()| None)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => fs::create_dir(to).map(|()| None),
        Err(error) => Err(error),
    }
}

/// Opens `dir` up for its owner; returns its mode when that needed no change.
#[cfg(unix)]
fn make_writable(dir: &Path, meta: &fs::Metadata) -> io::Result<Option<fs::Permissions>> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o700))?;
        return Ok(None);
    }
    Ok(Some(meta.permissions()))
}

#[cfg(not(unix))]
fn make_writable(dir: &Path, meta: &fs::Metadata) -> io::Result<Option<fs::Permissions>> {
    let mut permissions = meta.permissions();
    if permissions.readonly() {
        #[allow(clippy::permissions_set_readonly_false)]
        permissions.set_readonly(false);
        fs::set_permissions(dir, permissions)?;
        return Ok(None);
    }
    Ok(Some(permissions))
}

/// Removes a file, link or whole directory, opening up read-only directories on the way
/// (a job may leave one behind).
fn remove_entry(path: &Path, kind: Option<Kind>) -> io::Result<()> {
    if kind != Some(Kind::Dir) {
        return fs::remove_file(path);
    }
    match fs::remove_dir_all(path) {
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
            open_up(path, 0)?;
            fs::remove_dir_all(path)
        }
        other => other,
    }
}

fn open_up(dir: &Path, depth: usize) -> io::Result<()> {
    if depth > MAX_SNAPSHOT_DEPTH {
        return Ok(());
    }
    make_writable(dir, &fs::symlink_metadata(dir)?)?;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            open_up(&entry.path(), depth + 1)?;
        }
    }
    Ok(())
}

/// Copies a regular file over `target`, reusing its inode when it is a file of its own
/// (a hard link would carry the new content to its other names, so it is replaced) and
/// leaving it alone when it already holds the same bytes (rewriting costs more: ext4
/// writes a file truncated to zero back at once). `fs::copy` keeps the permission bits
/// (the executable bit included).
fn copy_file(source: &Path, target: &Path) -> io::Result<u64> {
    match fs::symlink_metadata(target) {
        Ok(meta) if meta.is_file() && !has_other_links(&meta) => {
            let wanted = fs::metadata(source)?;
            if wanted.len() == meta.len() && same_bytes(source, target)? {
                if wanted.permissions() != meta.permissions() {
                    fs::set_permissions(target, wanted.permissions())?;
                }
                return Ok(wanted.len());
            }
            match fs::copy(source, target) {
                // A file a job made read-only (only root may write it in place).
                Err(error) if error.kind() == io::ErrorKind::PermissionDenied => {
                    fs::remove_file(target)?;
                    fs::copy(source, target)
                }
                other => other,
            }
        }
        Ok(_) => {
            fs::remove_file(target)?;
            fs::copy(source, target)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => fs::copy(source, target),
        Err(error) => Err(error),
    }
}

/// Whether two files of the same length hold the same bytes (a file the process may
/// not read counts as different).
fn same_bytes(a: &Path, b: &Path) -> io::Result<bool> {
    use std::io::Read;
    let mut b = match fs::File::open(b) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::PermissionDenied => return Ok(false),
        Err(error) => return Err(error),
    };
    let mut a = fs::File::open(a)?;
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }

    fn read_full(file: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match file.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(filled)
    }
}

#[cfg(unix)]
fn has_other_links(meta: &fs::Metadata) -> bool {
    std::os::unix::fs::MetadataExt::nlink(meta) > 1
}

#[cfg(not(unix))]
fn has_other_links(_meta: &fs::Metadata) -> bool {
    false
}

#[cfg(unix)]
fn copy_link(source: &Path, target: &Path) -> io::Result<()> {
    let link = fs::read_link(source)?;
    match fs::read_link(target) {
        Ok(existing) if existing == link => return Ok(()),
        Ok(_) => fs::remove_file(target)?,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        // Not a link: a file of the same name was removed above, so this is an error.
        Err(error) => return Err(error),
    }
    std::os::unix::fs::symlink(link, target)
}

#[cfg(not(unix))]
fn copy_link(source: &Path, target: &Path) -> io::Result<()> {
    fs::copy(source, target).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_files_modes_links_and_nested_directories() {
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        fs::create_dir_all(src.path().join("a/b")).unwrap();
        fs::write(src.path().join("a/b/file.txt"), "hello").unwrap();
        fs::write(src.path().join("run.sh"), "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(src.path().join("run.sh"), fs::Permissions::from_mode(0o755))
                .unwrap();
            std::os::unix::fs::symlink("a/b/file.txt", src.path().join("link")).unwrap();
        }
        let out = dst.path().join("project");
        let stats = sync_tree(src.path(), &out).unwrap();
        assert_eq!(stats.files, 2);
        assert_eq!(
            fs::read_to_string(out.join("a/b/file.txt")).unwrap(),
            "hello"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(out.join("run.sh"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o755);
            assert_eq!(
                fs::read_link(out.join("link")).unwrap(),
                Path::new("a/b/file.txt")
            );
        }
    }

    /// A directory an earlier job used: every trace of that job goes, the snapshot's
    /// content comes back, and files outside the tree are never written through.
    #[cfg(unix)]
    #[test]
    fn sync_over_a_used_directory_leaves_an_exact_replica() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
        let src = tempfile::tempdir().unwrap();
        let dst = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let s = src.path();
        fs::create_dir_all(s.join("dir/sub")).unwrap();
        fs::write(s.join("dir/sub/keep.txt"), "keep").unwrap();
        fs::write(s.join("was-dir"), "now a file").unwrap();
        fs::create_dir(s.join("was-file")).unwrap();
        fs::write(s.join("script.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(s.join("script.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(s.join("linked.txt"), "snapshot").unwrap();
        fs::write(s.join("locked.txt"), "snapshot").unwrap();
        fs::write(s.join("same-size.txt"), "snapshot").unwrap();
        std::os::unix::fs::symlink("dir/sub/keep.txt", s.join("link")).unwrap();
        let out = dst.path().join("project");
        sync_tree(s, &out).unwrap();

        // An earlier job's leftovers and changes.
        fs::write(
            out.join("dir/sub/keep.txt"),
            "changed by a job, longer than before",
        )
        .unwrap();
        fs::write(out.join("dir/new.txt"), "new").unwrap();
        fs::write(out.join("same-size.txt"), "SNAPSHOT").unwrap();
        fs::create_dir_all(out.join("build/ro/deep")).unwrap();
        fs::write(out.join("build/ro/deep/out.o"), "obj").unwrap();
        fs::set_permissions(out.join("build/ro"), fs::Permissions::from_mode(0o555)).unwrap();
        fs::remove_file(out.join("was-dir")).unwrap();
        fs::create_dir_all(out.join("was-dir/inner")).unwrap();
        fs::remove_dir(out.join("was-file")).unwrap();
        fs::write(out.join("was-file"), "a file now").unwrap();
        fs::set_permissions(out.join("script.sh"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::remove_file(out.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", out.join("link")).unwrap();
        fs::remove_file(out.join("linked.txt")).unwrap();
        fs::write(outside.path().join("precious"), "outside").unwrap();
        fs::hard_link(outside.path().join("precious"), out.join("linked.txt")).unwrap();
        fs::set_permissions(out.join("locked.txt"), fs::Permissions::from_mode(0o400)).unwrap();
        fs::set_permissions(out.join("dir"), fs::Permissions::from_mode(0o500)).unwrap();
        mkfifo(&out.join("fifo"));

        let stats = sync_tree(s, &out).unwrap();
        assert_eq!(stats.files, 6);
        assert_eq!(
            fs::read_to_string(out.join("dir/sub/keep.txt")).unwrap(),
            "keep"
        );
        assert!(!out.join("dir/new.txt").exists());
        assert!(!out.join("build").exists());
        assert!(!out.join("fifo").exists());
        assert_eq!(
            fs::read_to_string(out.join("was-dir")).unwrap(),
            "now a file"
        );
        assert!(out.join("was-file").is_dir());
        assert_eq!(mode(&out.join("script.sh")), 0o755);
        assert_eq!(mode(&out.join("dir")), mode(&s.join("dir")));
        assert_eq!(
            fs::read_link(out.join("link")).unwrap(),
            Path::new("dir/sub/keep.txt")
        );
        assert_eq!(
            fs::read_to_string(out.join("linked.txt")).unwrap(),
            "snapshot"
        );
        assert_eq!(
            fs::read_to_string(outside.path().join("precious")).unwrap(),
            "outside"
        );
        assert_eq!(
            fs::read_to_string(out.join("locked.txt")).unwrap(),
            "snapshot"
        );
        assert_eq!(
            fs::read_to_string(out.join("same-size.txt")).unwrap(),
            "snapshot"
        );
        let listing = |root: &Path| {
            let mut names: Vec<_> = walk(root)
                .into_iter()
                .map(|p| p.strip_prefix(root).unwrap().to_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(listing(&out), listing(s));
    }

    #[cfg(unix)]
    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn walk(root: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for entry in fs::read_dir(root).unwrap() {
            let entry = entry.unwrap();
            out.push(entry.path());
            if entry.file_type().unwrap().is_dir() {
                out.extend(walk(&entry.path()));
            }
        }
        out
    }
}
