//! Blobs in S3-compatible object storage against a real S3 server (moto's, which
//! `scripts/test-s3.sh start` runs; without it these tests fail, saying so): the same
//! contract as the local directory — keys, replacement, absence, staged uploads (one
//! request, and in parts above 16 MiB), downloads into an unlinked file — and the errors
//! a wrong URL or bucket gets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Read as _;

use gantry_server::coordinator::{BlobStore, ObjectBlobs, object_blob};

fn bucket_url() -> String {
    std::env::var(gantry_server::testing::TEST_S3_URL).unwrap_or_else(|_| {
        panic!(
            "GANTRY_TEST_S3_URL is not set: start the test S3 server with `eval \"$(scripts/test-s3.sh start)\"` (scripts/test does)"
        )
    })
}

/// A store under a prefix of its own; its staging directory in `dir`.
fn store(dir: &tempfile::TempDir) -> ObjectBlobs {
    let url = gantry_server::testing::s3_url(dir.path()).unwrap();
    ObjectBlobs::from_url(&url, dir.path().join("staging")).unwrap()
}

fn staged(blobs: &ObjectBlobs, name: &str, data: &[u8]) -> std::path::PathBuf {
    let path = blobs.staging_dir().join(name);
    std::fs::write(&path, data).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_behave_as_local_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let blobs = std::sync::Arc::new(store(&dir));
    blobs.check().await.expect("the bucket answers");
    let b = std::sync::Arc::clone(&blobs);
    // The trait is blocking, as the coordinator calls it: from blocking tasks.
    tokio::task::spawn_blocking(move || {
        let blobs = b;
        blobs.put("artifacts/1/archive", b"zip").unwrap();
        assert_eq!(
            blobs.get("artifacts/1/archive").unwrap().as_deref(),
            Some(&b"zip"[..])
        );
        assert_eq!(blobs.get("artifacts/2/archive").unwrap(), None);
        assert!(blobs.open("artifacts/2/archive").unwrap().is_none());
        for bad in ["", "../x", "a/../b", "/abs", "a//b", "a b"] {
            let e = blobs.put(bad, b"x").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad}");
        }

        // A staged upload replaces the object, and its file is gone.
        let file = staged(&blobs, "upload", b"zip2");
        blobs.put_file("artifacts/1/archive", &file).unwrap();
        assert!(!file.exists());
        let (mut f, len) = blobs.open("artifacts/1/archive").unwrap().unwrap();
        let mut read = String::new();
        f.read_to_string(&mut read).unwrap();
        assert_eq!((read.as_str(), len), ("zip2", 4));

        // Above 16 MiB, in parts; read back whole, through an unlinked file.
        let big: Vec<u8> = (0..(object_blob::SINGLE_PUT_MAX as usize + 3 * 1024 * 1024 + 7))
            .map(|i| (i % 251) as u8)
            .collect();
        let file = staged(&blobs, "big", &big);
        blobs.put_file("artifacts/3/archive", &file).unwrap();
        assert!(!file.exists());
        let (mut f, len) = blobs.open("artifacts/3/archive").unwrap().unwrap();
        assert_eq!(len, big.len() as u64);
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert!(back == big, "the object differs from what was uploaded");

        // A refused key leaves no staged file; nothing is left in the staging directory.
        let file = staged(&blobs, "refused", b"x");
        assert!(blobs.put_file("../x", &file).is_err());
        assert!(!file.exists());
        assert_eq!(std::fs::read_dir(blobs.staging_dir()).unwrap().count(), 0);

        blobs.delete("artifacts/1/archive").unwrap();
        blobs.delete("artifacts/1/archive").unwrap();
        assert_eq!(blobs.get("artifacts/1/archive").unwrap(), None);
        blobs.delete("artifacts/3/archive").unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn wrong_urls_and_buckets_are_errors_that_say_so() {
    let dir = tempfile::tempdir().unwrap();
    for (url, needle) in [
        ("gs://bucket", "write s3://BUCKET or s3://BUCKET/PREFIX"),
        ("s3://", "names no bucket"),
        ("s3://bucket/a/../b", "the prefix `a/../b`"),
    ] {
        let e = ObjectBlobs::from_url(url, dir.path().join("staging")).unwrap_err();
        assert!(e.contains(needle), "{url}: {e}");
    }
    let base = bucket_url();
    let missing = format!("{}-missing", base.trim_end_matches('/'));
    let blobs = ObjectBlobs::from_url(&missing, dir.path().join("staging")).unwrap();
    let e = blobs.check().await.unwrap_err().to_string();
    assert!(
        e.contains(&format!("object storage {missing}: list")),
        "{e}"
    );
}

#[test]
fn outside_a_runtime_the_store_says_where_to_open_it() {
    let dir = tempfile::tempdir().unwrap();
    let e = ObjectBlobs::from_url("s3://bucket", dir.path()).unwrap_err();
    assert!(e.contains("async runtime"), "{e}");
}
