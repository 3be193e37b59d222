//! Blob stores for tests, in one place (as `gantry_store::testing` chooses databases):
//! `GANTRY_TEST_BLOBS` picks where a test coordinator keeps artifacts — `local` (the
//! default: `data_dir/blobs`) or `s3`, a prefix of its own in the bucket
//! `GANTRY_TEST_S3_URL` names (`scripts/test-s3.sh start` starts an S3-compatible server
//! and prints that variable and the `AWS_*` ones).

use std::path::Path;
use std::sync::Arc;

use gantry_store::Store;

use crate::coordinator::{
    BlobStore, Coordinator, CoordinatorConfig, CoordinatorError, LocalDir, ObjectBlobs,
};

/// Names the blob store test coordinators use.
pub const TEST_BLOBS: &str = "GANTRY_TEST_BLOBS";
/// `s3://BUCKET` of the S3-compatible server for tests.
pub const TEST_S3_URL: &str = "GANTRY_TEST_S3_URL";

/// The prefix of the test S3 bucket that stands for `data_dir`: the same directory (a
/// coordinator restarted on it) gets the same prefix, another directory another one.
pub fn s3_url(data_dir: &Path) -> Result<String, String> {
    let bucket = std::env::var(TEST_S3_URL).map_err(|_| {
        format!(
            "{TEST_S3_URL} is not set: start the test S3 server with `eval \"$(scripts/test-s3.sh start)\"` (scripts/test does)"
        )
    })?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data_dir.to_string_lossy().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    Ok(format!("{}/tests/{h:016x}", bucket.trim_end_matches('/')))
}

/// The blob store a test coordinator on `cfg.data_dir` uses (see [`TEST_BLOBS`]).
pub fn blobs(cfg: &CoordinatorConfig) -> Result<Arc<dyn BlobStore>, String> {
    match std::env::var(TEST_BLOBS).as_deref() {
        Ok("s3") => {
            let url = s3_url(&cfg.data_dir)?;
            let blobs = ObjectBlobs::from_url(&url, cfg.data_dir.join("blob-staging"))?;
            Ok(Arc::new(blobs))
        }
        Ok("local") | Err(_) => {
            let dir = cfg.data_dir.join("blobs");
            std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
            Ok(Arc::new(LocalDir::new(dir).durable(cfg.durable_blobs())))
        }
        Ok(other) => Err(format!("{TEST_BLOBS}={other}: expected local or s3")),
    }
}

/// [`Coordinator::open`] with the blobs [`TEST_BLOBS`] chooses.
pub async fn open_coordinator(
    store: Store,
    cfg: CoordinatorConfig,
) -> Result<Coordinator, CoordinatorError> {
    let blobs = blobs(&cfg).map_err(CoordinatorError::Invalid)?;
    Coordinator::open_with_blobs(store, cfg, blobs).await
}
