//! Blob storage for artifacts (and parsed dotenv reports): a small trait so object storage
//! (S3 & co.) is a second implementation, and [`LocalDir`], files under `data_dir/blobs`.
//!
//! Keys are relative, `/`-separated, made of `[A-Za-z0-9._-]` segments (never `..`).
//! Methods are blocking; the coordinator calls them from blocking tasks.
//!
//! Large blobs (artifact archives) never pass through memory whole: an upload is written
//! to a file in [`BlobStore::staging_dir`] as it arrives and handed over with
//! [`BlobStore::put_file`]; a download reads the file [`BlobStore::open`] returns.
//!
//! The upload's file is a `StagedUpload`, hashed and size-checked as it arrives; with
//! `LocalDir::durable` (the server's default) the file and its directory are `fsync`ed
//! before the move, so no committed row points at a short file. A download is the open file
//! (`ArtifactBlob`), streamed by `http/artifacts.rs`. `BlobStore::is_shared` (object
//! storage) makes the coordinator archive a finished job's log as a blob too (`traces.rs`).
//! `gantry server --blobs-url` chooses the store; tests choose with `crate::testing`
//! (`GANTRY_TEST_BLOBS`).

use std::io;
use std::path::{Path, PathBuf};

pub trait BlobStore: Send + Sync + 'static {
    /// Store `data` under `key`, replacing what was there, atomically for readers.
    fn put(&self, key: &str, data: &[u8]) -> io::Result<()>;
    /// Where uploads are written before [`BlobStore::put_file`] (created by the store).
    fn staging_dir(&self) -> &Path;
    /// Store the file `staged` (in [`BlobStore::staging_dir`]) under `key`, replacing what
    /// was there, atomically for readers; `staged` is gone afterwards.
    fn put_file(&self, key: &str, staged: &Path) -> io::Result<()>;
    /// The blob, or `None` when there is none.
    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>>;
    /// The blob opened for reading, and its length, or `None` when there is none.
    fn open(&self, key: &str) -> io::Result<Option<(std::fs::File, u64)>>;
    /// Remove the blob (no error when absent).
    fn delete(&self, key: &str) -> io::Result<()>;
    /// Whether the blobs live outside this coordinator's data directory (object storage,
    /// shared by every coordinator of the deployment). Finished jobs' logs are archived
    /// into such a store.
    fn is_shared(&self) -> bool {
        false
    }
}

/// Blobs as files in a directory.
#[derive(Clone, Debug)]
pub struct LocalDir {
    root: PathBuf,
    staging: PathBuf,
    durable: bool,
}

impl LocalDir {
    /// Blobs under `root`; uploads are staged in `root/.staging` (the same file system, so
    /// [`BlobStore::put_file`] is a rename).
    pub fn new(root: impl Into<PathBuf>) -> LocalDir {
        let root = root.into();
        LocalDir {
            staging: root.join(".staging"),
            root,
            durable: true,
        }
    }

    /// Whether a blob is on disk before it is reported stored (default true).
    pub fn durable(mut self, durable: bool) -> LocalDir {
        self.durable = durable;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> io::Result<PathBuf> {
        check_key(key).map(|key| self.root.join(key))
    }
}

/// `key` when it is a safe relative key (`/`-separated `[A-Za-z0-9._-]` segments, never
/// `.` or `..`), for every store.
pub(crate) fn check_key(key: &str) -> io::Result<&str> {
    let valid = !key.is_empty()
        && key.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        });
    if valid {
        Ok(key)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("blob key `{key}` is not a safe relative path"),
        ))
    }
}

impl BlobStore for LocalDir {
    fn put(&self, key: &str, data: &[u8]) -> io::Result<()> {
        std::fs::create_dir_all(&self.staging)?;
        let tmp = self
            .staging
            .join(format!("put-{}", super::token::new_token("")));
        std::fs::write(&tmp, data)?;
        self.put_file(key, &tmp)
    }

    fn staging_dir(&self) -> &Path {
        &self.staging
    }

    fn put_file(&self, key: &str, staged: &Path) -> io::Result<()> {
        let moved = self.path(key).and_then(|path| {
            let dir = path.parent().unwrap_or(&self.root);
            std::fs::create_dir_all(dir)?;
            if self.durable {
                std::fs::File::open(staged)?.sync_all()?;
            }
            std::fs::rename(staged, &path)?;
            if self.durable {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        });
        if moved.is_err() {
            let _ = std::fs::remove_file(staged);
        }
        moved
    }

    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.path(key)?) {
            Ok(data) => Ok(Some(data)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn open(&self, key: &str) -> io::Result<Option<(std::fs::File, u64)>> {
        match std::fs::File::open(self.path(key)?) {
            Ok(file) => {
                let len = file.metadata()?.len();
                Ok(Some((file, len)))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn delete(&self, key: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path(key)?) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_inside_the_directory() {
        let dir = std::env::temp_dir().join(format!(
            "gantry-blob-{}",
            super::super::token::new_token("")
        ));
        let blobs = LocalDir::new(&dir);
        blobs.put("artifacts/1/archive", b"zip").expect("put");
        assert_eq!(
            blobs.get("artifacts/1/archive").expect("get").as_deref(),
            Some(&b"zip"[..])
        );
        assert_eq!(blobs.get("artifacts/2/archive").expect("get"), None);
        for bad in ["", "../x", "a/../b", "/abs", "a//b", "a b"] {
            assert!(blobs.put(bad, b"x").is_err(), "{bad}");
        }
        let (mut file, len) = blobs
            .open("artifacts/1/archive")
            .expect("open")
            .expect("there");
        let mut read = String::new();
        std::io::Read::read_to_string(&mut file, &mut read).expect("read");
        assert_eq!((read.as_str(), len), ("zip", 3));
        assert!(blobs.open("artifacts/2/archive").expect("open").is_none());

        let staged = blobs.staging_dir().join("upload");
        std::fs::write(&staged, b"zip2").expect("stage");
        blobs
            .put_file("artifacts/1/archive", &staged)
            .expect("put_file");
        assert!(!staged.exists());
        assert_eq!(
            blobs.get("artifacts/1/archive").expect("get").as_deref(),
            Some(&b"zip2"[..])
        );
        std::fs::write(&staged, b"x").expect("stage");
        assert!(blobs.put_file("../x", &staged).is_err());
        assert!(!staged.exists(), "a refused staged file is removed");
        assert_eq!(
            std::fs::read_dir(blobs.staging_dir())
                .expect("staging")
                .count(),
            0,
            "nothing is left in the staging directory"
        );

        blobs.delete("artifacts/1/archive").expect("delete");
        blobs.delete("artifacts/1/archive").expect("delete again");
        let _ = std::fs::remove_dir_all(dir);
    }
}
