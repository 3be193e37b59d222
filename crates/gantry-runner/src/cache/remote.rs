//! The shared cache in S3 or an S3-compatible server (`[runners.cache] Type = "s3"`,
//! gitlab-runner's keys), through `object_store`: what autoscaled runners need, whose
//! machines do not outlive a job.
//!
//! Object names follow gitlab-runner's layout, with Gantry's archive file name (its
//! archives are tar + zstd, not gitlab-runner's zip, so the two never read each other's):
//!
//! ```text
//! [<Path>/]runner/<short token>/project/<project id>/<key>/cache.tar.zst   (Shared = false)
//! [<Path>/]project/<project id>/<key>/cache.tar.zst                        (Shared = true)
//! ```
//!
//! `[runners.cache.s3]`: `BucketName` (required), `ServerAddress` (`host[:port]` of an
//! S3-compatible server; AWS when absent), `Insecure` (plain HTTP), `BucketLocation` (the
//! region, default `us-east-1`), `AccessKey` + `SecretKey` (otherwise the `AWS_*`
//! environment and the instance's role, as `AuthenticationType = "iam"`).
//! `MaxUploadedArchiveSize` refuses larger uploads.

use std::path::Path;
use std::sync::Arc;

use futures_util::StreamExt as _;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use tokio::io::AsyncWriteExt as _;

use super::local::{ARCHIVE_FILE, RemoteArchives};
use crate::config::CacheConfig;

/// Why the shared cache store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RemoteCacheError {
    /// `[runners.cache.s3]` cannot be used as it is: what to fix.
    #[error("{0}")]
    Config(String),
    /// The store answered with an error (or could not be reached).
    #[error(transparent)]
    Store(#[from] object_store::Error),
    /// A local file of the archive could not be read or written.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done (`read`, `create`, `download into`, …).
        what: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The archive is larger than `MaxUploadedArchiveSize`.
    #[error("the archive is {size} bytes, more than MaxUploadedArchiveSize ({max})")]
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RemoteCacheError {
    let path = path.to_path_buf();
    move |source| RemoteCacheError::Io { what, path, source }
}

/// Cache archives under one prefix of a bucket.
pub struct S3Archives {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    max_upload: Option<u64>,
    runtime: tokio::runtime::Handle,
}

impl S3Archives {
    /// The archives of project `project_id` for the runner whose token starts with
    /// `short_token`. Call it inside the runner's Tokio runtime.
    pub fn new(
        cfg: &CacheConfig,
        short_token: &str,
        project_id: i64,
    ) -> Result<Self, RemoteCacheError> {
        let s3 = cfg.s3.clone().unwrap_or_default();
        let bucket = s3.bucket_name.filter(|b| !b.is_empty()).ok_or_else(|| {
            RemoteCacheError::Config(
                "[runners.cache.s3] BucketName is missing: name the bucket".to_owned(),
            )
        })?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            RemoteCacheError::Config(
                "the S3 cache is opened inside the runner's async runtime".to_owned(),
            )
        })?;
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_region(
                s3.bucket_location
                    .filter(|r| !r.is_empty())
                    .unwrap_or_else(|| "us-east-1".to_owned()),
            );
        let insecure = s3.insecure.unwrap_or(false);
        if let Some(address) = s3.server_address.filter(|a| !a.is_empty()) {
            let scheme = if insecure { "http" } else { "https" };
            builder = builder
                .with_endpoint(format!("{scheme}://{address}"))
                .with_allow_http(insecure)
                .with_virtual_hosted_style_request(false);
        }
        if let (Some(key), Some(secret)) = (s3.access_key, s3.secret_key) {
            builder = builder
                .with_access_key_id(key)
                .with_secret_access_key(secret);
        }
        let store = builder
            .build()
            .map_err(|e| RemoteCacheError::Config(format!("[runners.cache.s3]: {e}")))?;
        let mut parts: Vec<String> = Vec::new();
        if let Some(path) = cfg.path.as_deref().map(|p| p.trim_matches('/')) {
            if !path.is_empty() {
                parts.push(path.to_owned());
            }
        }
        if !cfg.shared {
            parts.push(format!("runner/{short_token}"));
        }
        parts.push(format!("project/{project_id}"));
        Ok(Self {
            store: Arc::new(store),
            prefix: parts.join("/"),
            max_upload: cfg.max_uploaded_archive_size,
            runtime,
        })
    }

    fn object(&self, key: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{key}/{ARCHIVE_FILE}", self.prefix))
    }

    async fn download(&self, key: &str, dest: &Path) -> Result<bool, RemoteCacheError> {
        let found = match self.store.get(&self.object(key)).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let dir = dest.parent().unwrap_or(Path::new("."));
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(io("create", dir))?;
        let temp = dir.join(format!(".{ARCHIVE_FILE}.{}.download", std::process::id()));
        let written = async {
            let mut file = tokio::fs::File::create(&temp).await?;
            let mut stream = found.into_stream();
            while let Some(chunk) = stream.next().await {
                file.write_all(&chunk.map_err(std::io::Error::other)?)
                    .await?;
            }
            file.flush().await?;
            tokio::fs::rename(&temp, dest).await
        }
        .await;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(io("download into", dest)(e));
        }
        Ok(true)
    }

    async fn upload(&self, key: &str, archive: &Path) -> Result<(), RemoteCacheError> {
        let len = tokio::fs::metadata(archive)
            .await
            .map_err(io("read", archive))?
            .len();
        if let Some(max) = self.max_upload.filter(|max| len > *max) {
            return Err(RemoteCacheError::TooLarge { size: len, max });
        }
        let mut file = tokio::fs::File::open(archive)
            .await
            .map_err(io("open", archive))?;
        // One request for a small archive, a multipart upload for a large one.
        let mut writer =
            object_store::buffered::BufWriter::new(Arc::clone(&self.store), self.object(key));
        let copied = tokio::io::copy(&mut file, &mut writer).await;
        match copied {
            Ok(_) => writer.shutdown().await.map_err(io("upload", archive)),
            Err(e) => {
                let _ = writer.abort().await;
                Err(io("upload", archive)(e))
            }
        }
    }
}

impl RemoteArchives for S3Archives {
    fn fetch(&self, key: &str, dest: &Path) -> Result<bool, RemoteCacheError> {
        self.runtime.block_on(self.download(key, dest))
    }

    fn store(&self, key: &str, archive: &Path) -> Result<(), RemoteCacheError> {
        self.runtime.block_on(self.upload(key, archive))
    }
}
