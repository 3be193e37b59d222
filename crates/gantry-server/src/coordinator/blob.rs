//! Blob storage for artifacts (and parsed dotenv reports): a small trait so object storage
//! (S3 & co.) is a second implementation, and [`LocalDir`], files under `data_dir/blobs`.
//!
//! Keys are relative, `/`-separated, made of `[A-Za-z0-9._-]` segments (never `..`).
//! Methods are blocking; the coordinator calls them from blocking tasks.

use std::io;
use std::path::{Path, PathBuf};

pub trait BlobStore: Send + Sync + 'static {
    /// Store `data` under `key`, replacing what was there, atomically for readers.
    fn put(&self, key: &str, data: &[u8]) -> io::Result<()>;
    /// The blob, or `None` when there is none.
    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>>;
    /// Remove the blob (no error when absent).
    fn delete(&self, key: &str) -> io::Result<()>;
}

/// Blobs as files in a directory.
#[derive(Clone, Debug)]
pub struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    pub fn new(root: impl Into<PathBuf>) -> LocalDir {
        LocalDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &str) -> io::Result<PathBuf> {
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
            Ok(self.root.join(key))
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("blob key `{key}` is not a safe relative path"),
            ))
        }
    }
}

impl BlobStore for LocalDir {
    fn put(&self, key: &str, data: &[u8]) -> io::Result<()> {
        let path = self.path(key)?;
        let dir = path.parent().unwrap_or(&self.root);
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(
            ".{}.tmp-{}",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            super::token::new_token("")
        ));
        std::fs::write(&tmp, data)?;
        std::fs::rename(&tmp, &path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.path(key)?) {
            Ok(data) => Ok(Some(data)),
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
        blobs.delete("artifacts/1/archive").expect("delete");
        blobs.delete("artifacts/1/archive").expect("delete again");
        let _ = std::fs::remove_dir_all(dir);
    }
}
