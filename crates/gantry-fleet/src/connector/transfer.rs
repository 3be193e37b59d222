//! Directory trees as tar streams, built and unpacked on blocking threads and moved to and
//! from the async side in bounded chunks, so a large tree never sits in memory whole.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use tokio::sync::mpsc;

/// Size of the chunks moved between the tar thread and the SSH channel.
pub(crate) const CHUNK: usize = 64 * 1024;
/// Chunks in flight between the two sides (bounds memory to about 1 MiB).
pub(crate) const CHUNKS_IN_FLIGHT: usize = 16;

/// What the packing thread sends to the channel writer.
pub(crate) enum Chunk {
    /// The next bytes of the archive.
    Data(Vec<u8>),
    /// The archive is complete.
    Done,
    /// Packing failed (the packer returns why); the archive must not be finished, or the
    /// remote side would take a truncated tree for a whole one.
    Failed,
}

/// A failure while packing or unpacking a local tree.
#[derive(Debug)]
pub(crate) enum TreeError {
    /// A local file operation failed (`what` names it and the path).
    Io { what: String, source: io::Error },
    /// An archive entry would land outside the target directory.
    Unsafe { entry: PathBuf },
}

impl TreeError {
    fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> TreeError {
        let what = what.into();
        move |source| TreeError::Io { what, source }
    }
}

/// Writes a tar of the tree under `root` (not following symlinks) into `tx`; returns the
/// bytes of regular file content archived. Sends [`Chunk::Done`] or [`Chunk::Failed`] last.
pub(crate) fn pack(root: &Path, tx: mpsc::Sender<Chunk>) -> Result<u64, TreeError> {
    let result = pack_into(root, ChunkWriter::new(tx.clone()));
    let last = if result.is_ok() {
        Chunk::Done
    } else {
        Chunk::Failed
    };
    // The receiver is gone only when the upload was abandoned; nothing to tell then.
    let _ = tx.blocking_send(last);
    result
}

fn pack_into(root: &Path, writer: ChunkWriter) -> Result<u64, TreeError> {
    let meta = fs::metadata(root).map_err(TreeError::io(format!("read {}", root.display())))?;
    if !meta.is_dir() {
        return Err(TreeError::Io {
            what: format!("read {}", root.display()),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
        });
    }
    let mut builder = tar::Builder::new(writer);
    builder.mode(tar::HeaderMode::Complete);
    builder.follow_symlinks(false);
    let mut bytes = 0;
    walk(root, Path::new(""), &mut builder, &mut bytes)?;
    let mut writer = builder
        .into_inner()
        .map_err(TreeError::io("finish the archive"))?;
    writer.flush().map_err(TreeError::io("send the archive"))?;
    Ok(bytes)
}

fn walk(
    root: &Path,
    rel: &Path,
    builder: &mut tar::Builder<ChunkWriter>,
    bytes: &mut u64,
) -> Result<(), TreeError> {
    let dir = root.join(rel);
    let mut names = fs::read_dir(&dir)
        .map_err(TreeError::io(format!("list {}", dir.display())))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(TreeError::io(format!("list {}", dir.display())))?;
    names.sort();
    for name in names {
        let rel_path = rel.join(&name);
        let path = root.join(&rel_path);
        let meta = fs::symlink_metadata(&path)
            .map_err(TreeError::io(format!("read {}", path.display())))?;
        let mut header = tar::Header::new_gnu();
        header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
        // Owned by whoever unpacks: the instance's login user, whatever our uid is.
        header.set_uid(0);
        header.set_gid(0);
        let file_type = meta.file_type();
        let what = format!("archive {}", path.display());
        if file_type.is_dir() {
            header.set_size(0);
            builder
                .append_data(&mut header, &rel_path, io::empty())
                .map_err(TreeError::io(what))?;
            walk(root, &rel_path, builder, bytes)?;
        } else if file_type.is_symlink() {
            let target = fs::read_link(&path)
                .map_err(TreeError::io(format!("read link {}", path.display())))?;
            header.set_size(0);
            builder
                .append_link(&mut header, &rel_path, &target)
                .map_err(TreeError::io(what))?;
        } else if file_type.is_file() {
            let file =
                File::open(&path).map_err(TreeError::io(format!("open {}", path.display())))?;
            let size = meta.len();
            *bytes += size;
            let reader = ExactReader {
                inner: file,
                left: size,
            };
            builder
                .append_data(&mut header, &rel_path, reader)
                .map_err(TreeError::io(what))?;
        }
        // Sockets, fifos and devices have no content to move: skipped.
    }
    Ok(())
}

/// Reads exactly `left` bytes: a file that shrinks while archived is an error, not a
/// corrupt archive; one that grows is cut at the size in its header.
struct ExactReader {
    inner: File,
    left: u64,
}

impl Read for ExactReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let Some(buf) = buf.get_mut(..want) else {
            return Ok(0);
        };
        let n = self.inner.read(buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while it was archived",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A blocking `Write` that forwards [`CHUNK`]-sized pieces to the async side.
struct ChunkWriter {
    tx: mpsc::Sender<Chunk>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn new(tx: mpsc::Sender<Chunk>) -> Self {
        Self {
            tx,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let full = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.tx
            .blocking_send(Chunk::Data(full))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the upload was abandoned"))
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = CHUNK - self.buf.len();
        let n = room.min(data.len());
        self.buf
            .extend_from_slice(data.get(..n).unwrap_or_default());
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

/// A blocking `Read` over chunks coming from the async side; end of stream when the
/// sender is dropped.
pub(crate) struct ChunkReader {
    rx: mpsc::Receiver<Vec<u8>>,
    current: Vec<u8>,
    pos: usize,
}

impl ChunkReader {
    pub(crate) fn new(rx: mpsc::Receiver<Vec<u8>>) -> Self {
        Self {
            rx,
            current: Vec::new(),
            pos: 0,
        }
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos >= self.current.len() {
            match self.rx.blocking_recv() {
                Some(chunk) => {
                    self.current = chunk;
                    self.pos = 0;
                }
                None => return Ok(0),
            }
        }
        let available = self.current.get(self.pos..).unwrap_or_default();
        let n = available.len().min(buf.len());
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), available.get(..n)) {
            dst.copy_from_slice(src);
        }
        self.pos += n;
        Ok(n)
    }
}

/// Empties `local` (creating it when missing) and unpacks the tar read from `reader` into
/// it, keeping modes and symlinks; refuses entries that would land outside `local`.
/// Returns the bytes of regular file content unpacked.
pub(crate) fn unpack(reader: impl Read, local: &Path) -> Result<u64, TreeError> {
    clear_dir(local)?;
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_overwrite(true);
    let mut bytes = 0;
    // Directory modes are applied last: a read-only directory must still receive its files.
    let mut dirs: Vec<(PathBuf, u32)> = Vec::new();
    let entries = archive
        .entries()
        .map_err(TreeError::io("read the archive"))?;
    for entry in entries {
        let mut entry = entry.map_err(TreeError::io("read the archive"))?;
        let path = entry
            .path()
            .map_err(TreeError::io("read an archive entry's path"))?
            .into_owned();
        let mut rel = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => rel.push(part),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(TreeError::Unsafe { entry: path });
                }
            }
        }
        if rel.as_os_str().is_empty() {
            continue; // `./`, the root itself
        }
        let header = entry.header();
        let kind = header.entry_type();
        if kind.is_dir() {
            let mode = header.mode().unwrap_or(0o755);
            let dir = local.join(&rel);
            fs::create_dir_all(&dir).map_err(TreeError::io(format!("create {}", dir.display())))?;
            dirs.push((dir, mode));
            continue;
        }
        if kind.is_file() {
            bytes += entry.size();
        }
        let unpacked = entry
            .unpack_in(local)
            .map_err(TreeError::io(format!("unpack {}", rel.display())))?;
        if !unpacked {
            return Err(TreeError::Unsafe { entry: path });
        }
    }
    // The remote tar pads its output; read it so its writer does not see a closed pipe.
    io::copy(&mut archive.into_inner(), &mut io::sink())
        .map_err(TreeError::io("read the end of the archive"))?;
    for (dir, mode) in dirs.iter().rev() {
        set_mode(dir, *mode)?;
    }
    Ok(bytes)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), TreeError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o7777))
        .map_err(TreeError::io(format!("set the mode of {}", path.display())))
}

fn clear_dir(local: &Path) -> Result<(), TreeError> {
    match fs::symlink_metadata(local) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return fs::create_dir_all(local)
                .map_err(TreeError::io(format!("create {}", local.display())));
        }
        Err(source) => {
            return Err(TreeError::Io {
                what: format!("read {}", local.display()),
                source,
            });
        }
        Ok(meta) if !meta.is_dir() => {
            return Err(TreeError::Io {
                what: format!("replace the content of {}", local.display()),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
            });
        }
        Ok(_) => {}
    }
    let entries =
        fs::read_dir(local).map_err(TreeError::io(format!("list {}", local.display())))?;
    for entry in entries {
        let entry = entry.map_err(TreeError::io(format!("list {}", local.display())))?;
        let path = entry.path();
        let file_type = entry
            .file_type()
            .map_err(TreeError::io(format!("read {}", path.display())))?;
        let removed = if file_type.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(TreeError::io(format!("remove {}", path.display())))?;
    }
    Ok(())
}

/// `value` as one POSIX shell word.
pub(crate) fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    /// A tar with one regular file whose name is written raw (the builder refuses `..`).
    fn archive_with_entry(name: &str) -> Vec<u8> {
        let mut header = tar::Header::new_old();
        let bytes = name.as_bytes();
        if let Some(slot) = header.as_old_mut().name.get_mut(..bytes.len()) {
            slot.copy_from_slice(bytes);
        }
        header.set_size(3);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        let mut out = header.as_bytes().to_vec();
        out.extend_from_slice(b"bad");
        out.resize(512 * 2, 0);
        out.resize(out.len() + 1024, 0);
        out
    }

    #[test]
    fn unpack_refuses_entries_escaping_the_target() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let target = dir.path().join("target");
        for name in ["../escape", "/abs/escape", "a/../../escape"] {
            match unpack(&archive_with_entry(name)[..], &target) {
                Err(TreeError::Unsafe { entry }) => assert_eq!(entry, Path::new(name)),
                Err(TreeError::Io { what, source }) => {
                    return Err(format!("{name}: {what}: {source}"));
                }
                Ok(_) => return Err(format!("{name} was unpacked")),
            }
        }
        assert!(!dir.path().join("escape").exists());
        match unpack(&archive_with_entry("ok/file")[..], &target) {
            Ok(3) => {}
            Ok(n) => return Err(format!("unpacked {n} bytes")),
            Err(TreeError::Io { what, source }) => return Err(format!("{what}: {source}")),
            Err(TreeError::Unsafe { entry }) => return Err(format!("refused {}", entry.display())),
        }
        let content = fs::read(target.join("ok/file")).map_err(|e| e.to_string())?;
        assert_eq!(content, b"bad");
        Ok(())
    }
}
