//! Blobs in S3-compatible object storage (AWS S3, MinIO, Ceph RGW, …) through the
//! `object_store` crate: the second [`BlobStore`], for coordinators that share their
//! artifacts (DESIGN: "PostgreSQL and S3-compatible storage for scale-out").
//!
//! `s3://BUCKET[/PREFIX]` names the place; credentials, region and endpoint come from the
//! environment as AWS's own tools read them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ENDPOINT_URL` for an
//! S3-compatible server — addressed path-style — and `AWS_ALLOW_HTTP=true` when that
//! endpoint is plain HTTP). The bucket must exist.
//!
//! The trait's methods are blocking (the coordinator calls them from blocking tasks);
//! each waits for its request on the runtime the store was made in. Uploads are staged on
//! local disk first, as for [`LocalDir`](super::LocalDir), and sent in one request up to
//! [`SINGLE_PUT_MAX`], in parts of [`PART_SIZE`] above; [`BlobStore::open`] downloads the
//! object into an unlinked file in the staging directory, so a reader never holds an
//! archive in memory.

use std::io::{self, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt as _;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload};

use super::blob::{BlobStore, check_key};

/// Largest upload sent in one `PUT` (S3 takes up to 5 GiB; parts keep memory bounded).
pub const SINGLE_PUT_MAX: u64 = PART_SIZE as u64;
/// Size of each part of a larger upload (S3's minimum is 5 MiB).
pub const PART_SIZE: usize = 16 * 1024 * 1024;
/// Parts in flight at once for one upload.
const PARTS_IN_FLIGHT: usize = 2;

/// Blobs as objects under a prefix of a bucket.
pub struct ObjectBlobs {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    staging: PathBuf,
    runtime: tokio::runtime::Handle,
    url: String,
}

impl std::fmt::Debug for ObjectBlobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectBlobs")
            .field("url", &self.url)
            .finish()
    }
}

impl ObjectBlobs {
    /// The store at `url` (`s3://BUCKET[/PREFIX]`), configured from the environment;
    /// uploads are staged in `staging` (created). Call it inside the Tokio runtime the
    /// coordinator runs on.
    pub fn from_url(url: &str, staging: impl Into<PathBuf>) -> Result<Self, String> {
        let Some(rest) = url.strip_prefix("s3://") else {
            return Err(format!(
                "`{url}` is no object storage URL: write s3://BUCKET or s3://BUCKET/PREFIX"
            ));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let prefix = prefix.trim_matches('/').to_owned();
        if bucket.is_empty() {
            return Err(format!(
                "`{url}` names no bucket: write s3://BUCKET[/PREFIX]"
            ));
        }
        if !prefix.is_empty() && check_key(&prefix).is_err() {
            return Err(format!(
                "the prefix `{prefix}` of `{url}` may only hold `/`-separated segments of letters, digits, `.`, `_` and `-`"
            ));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            "object storage is opened inside the coordinator's async runtime".to_owned()
        })?;
        let mut builder = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        // `AWS_REGION` is what AWS's tools read first; object_store reads
        // `AWS_DEFAULT_REGION`. A custom endpoint is addressed path-style.
        if let Ok(region) = std::env::var("AWS_REGION") {
            builder = builder.with_region(region);
        }
        let store = builder
            .build()
            .map_err(|e| format!("object storage `{url}`: {e}"))?;
        let staging = staging.into();
        std::fs::create_dir_all(&staging).map_err(|e| {
            format!(
                "failed to create the upload staging directory {}: {e}",
                staging.display()
            )
        })?;
        Ok(Self {
            store: Arc::new(store),
            prefix,
            staging,
            runtime,
            url: url.to_owned(),
        })
    }

    /// Fails unless the bucket answers to these credentials (a listing of the prefix):
    /// a server started with a wrong bucket or key says so at once, not at the first
    /// artifact.
    pub async fn check(&self) -> io::Result<()> {
        let prefix = (!self.prefix.is_empty()).then(|| ObjectPath::from(self.prefix.as_str()));
        let mut listing = self.store.list(prefix.as_ref());
        match listing.next().await {
            Some(Err(e)) => Err(self.error("list", &e)),
            _ => Ok(()),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, key: &str) -> io::Result<ObjectPath> {
        let key = check_key(key)?;
        Ok(if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{key}", self.prefix))
        })
    }

    fn error(&self, what: &str, e: &object_store::Error) -> io::Error {
        io::Error::other(format!("object storage {}: {what}: {e}", self.url))
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    async fn upload(&self, path: &ObjectPath, staged: &Path) -> io::Result<()> {
        use tokio::io::AsyncWriteExt as _;
        let mut file = tokio::fs::File::open(staged).await?;
        // One request up to SINGLE_PUT_MAX, a multipart upload in PART_SIZE parts above
        // (object_store's BufWriter, as the runner's cache uploads).
        let mut writer = object_store::buffered::BufWriter::with_capacity(
            Arc::clone(&self.store),
            path.clone(),
            PART_SIZE,
        )
        .with_max_concurrency(PARTS_IN_FLIGHT);
        match tokio::io::copy(&mut file, &mut writer).await {
            Ok(_) => writer
                .shutdown()
                .await
                .map_err(|e| io::Error::other(format!("object storage {}: upload: {e}", self.url))),
            Err(e) => {
                let _ = writer.abort().await;
                Err(io::Error::other(format!(
                    "object storage {}: upload: {e}",
                    self.url
                )))
            }
        }
    }
}

impl BlobStore for ObjectBlobs {
    fn is_shared(&self) -> bool {
        true
    }

    fn put(&self, key: &str, data: &[u8]) -> io::Result<()> {
        let path = self.path(key)?;
        self.block_on(self.store.put(&path, PutPayload::from(data.to_vec())))
            .map(|_| ())
            .map_err(|e| self.error("upload", &e))
    }

    fn staging_dir(&self) -> &Path {
        &self.staging
    }

    fn put_file(&self, key: &str, staged: &Path) -> io::Result<()> {
        let result = self
            .path(key)
            .and_then(|path| self.block_on(self.upload(&path, staged)));
        let _ = std::fs::remove_file(staged);
        result
    }

    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let path = self.path(key)?;
        self.block_on(async {
            match self.store.get(&path).await {
                Ok(found) => found
                    .bytes()
                    .await
                    .map(|b| Some(b.to_vec()))
                    .map_err(|e| self.error("download", &e)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(self.error("download", &e)),
            }
        })
    }

    fn open(&self, key: &str) -> io::Result<Option<(std::fs::File, u64)>> {
        let path = self.path(key)?;
        self.block_on(async {
            let found = match self.store.get(&path).await {
                Ok(found) => found,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(self.error("download", &e)),
            };
            // An unlinked file: the reader's handle is all that is left of it.
            let local = self
                .staging
                .join(format!("get-{}", super::token::new_token("")));
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&local)?;
            let _ = std::fs::remove_file(&local);
            let mut stream = found.into_stream();
            let mut len = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.error("download", &e))?;
                file.write_all(&chunk)?;
                len += chunk.len() as u64;
            }
            file.rewind()?;
            Ok(Some((file, len)))
        })
    }

    fn delete(&self, key: &str) -> io::Result<()> {
        let path = self.path(key)?;
        match self.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", &e)),
        }
    }
}
