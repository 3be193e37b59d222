//! Job logs on disk: one append-only file per job, `data_dir/traces/<job id>.log`.
//!
//! The file holds the bytes; the database holds how many of them are the log (the job's
//! `trace_size`, see `gantry_store::TraceState`). The protocol, in [`super::traces`]:
//! an append writes its bytes at offset `trace_size` (cutting off whatever lies past
//! it), then commits the new size. So a crash between the two leaves bytes past the
//! committed size, which no reader sees (a reader reads exactly `trace_size` bytes) and
//! the next append cuts off and overwrites. Nothing committed is ever written again.
//!
//! Durability: everything committed survives a crash of the process (the bytes are in
//! the page cache before their size is committed). A crash of the machine may lose the
//! last appends, as it may the database's last commits (SQLite in WAL mode with
//! `synchronous = NORMAL`), and as nothing orders the two on disk, the database may keep
//! a size whose last bytes the file lost: a reader then gets fewer bytes than
//! `trace_size` and the job's next append leaves zeros in the gap. No `fsync` per patch:
//! it would cost more than the patch. One per job instead: when the runner reports the
//! job's final state, its file is `fsync`ed before that state is committed
//! ([`TraceFiles::sync`]; on coordinators that keep blobs durable,
//! `CoordinatorConfig::durable_blobs`), so a finished job's log is on disk before the job
//! is shown finished.
//!
//! Methods are blocking; the coordinator calls them from blocking tasks. Appends to one
//! job are serialized by [`TraceFiles::lock`].
//!
//! The committed sizes this process knows ([`TraceFiles::known_size`]): noted when it
//! hands a job out (the size the assignment returned) and when it commits an append;
//! forgotten while an append writes (until its commit), and when the job stops
//! executing. A runner's next append starts from it without reading the job's row
//! again, when the file is exactly that long: longer, another process sharing this data
//! directory appended, and the store is read as before. The append's commit is still a
//! compare-and-set on the stored size. (With shared blobs, logs go to the database and
//! no size is kept here.) At most [`MAX_KNOWN_SIZES`] are kept; past it they are
//! forgotten at once.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

/// Striped per-job locks: appends to one job run one at a time (different jobs rarely
/// share a stripe, and then just wait for each other).
const STRIPES: usize = 64;

/// Most committed sizes [`TraceFiles`] keeps.
pub(crate) const MAX_KNOWN_SIZES: usize = 100_000;

pub(crate) struct TraceFiles {
    dir: PathBuf,
    locks: Vec<Arc<tokio::sync::Mutex<()>>>,
    /// Job id → its log's committed size, as this process last handed it out or committed it.
    sizes: std::sync::Mutex<std::collections::HashMap<i64, u64>>,
}

impl TraceFiles {
    pub(crate) fn new(dir: PathBuf) -> TraceFiles {
        TraceFiles {
            dir,
            locks: (0..STRIPES)
                .map(|_| Arc::new(tokio::sync::Mutex::new(())))
                .collect(),
            sizes: std::sync::Mutex::default(),
        }
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<i64, u64>> {
        self.sizes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The job's log has `size` bytes committed (its file's log, see the module docs).
    pub(crate) fn note_size(&self, job_id: i64, size: u64) {
        let mut sizes = self.sizes();
        if sizes.len() >= MAX_KNOWN_SIZES && !sizes.contains_key(&job_id) {
            sizes.clear();
        }
        sizes.insert(job_id, size);
    }

    /// The job's committed log size as this process last noted it, when its file is
    /// exactly that long (no file: nothing written yet). One `stat`, made on the
    /// caller's thread: cheaper than a blocking task's hand-off.
    pub(crate) fn known_size(&self, job_id: i64) -> Option<u64> {
        let size = self.sizes().get(&job_id).copied()?;
        let on_disk = match std::fs::metadata(self.path(job_id)) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(_) => return None,
        };
        (on_disk == size).then_some(size)
    }

    /// The job stopped executing, or its size moved elsewhere: read the store next time.
    pub(crate) fn forget_size(&self, job_id: i64) {
        self.sizes().remove(&job_id);
    }

    /// Held from reading the job's size to committing the new one.
    pub(crate) async fn lock(&self, job_id: i64) -> tokio::sync::OwnedMutexGuard<()> {
        let stripe = usize::try_from(job_id.rem_euclid(STRIPES as i64)).unwrap_or(0);
        Arc::clone(&self.locks[stripe]).lock_owned().await
    }

    fn path(&self, job_id: i64) -> PathBuf {
        self.dir.join(format!("{job_id}.log"))
    }

    /// Removes the job's file (a deleted job's log); a missing file is removed already.
    pub(crate) fn remove(&self, job_id: i64) -> io::Result<()> {
        match std::fs::remove_file(self.path(job_id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The job's file, ready to append at `offset`: created with its directory if
    /// needed, cut at `offset` (bytes past it were never committed: an append that
    /// crashed or failed before its commit), positioned there.
    pub(crate) fn open_at(&self, job_id: i64, offset: u64) -> io::Result<File> {
        let path = self.path(job_id);
        let open = || {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
        };
        let mut file = match open() {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir_all(&self.dir)?;
                open()?
            }
            other => other?,
        };
        if file.metadata()?.len() > offset {
            file.set_len(offset)?;
        }
        file.seek(SeekFrom::Start(offset))?;
        Ok(file)
    }

    /// Flushes the job's file to disk (nothing to do when it has none: an empty log or
    /// one kept in the database).
    pub(crate) fn sync(&self, job_id: i64) -> io::Result<()> {
        match File::open(self.path(job_id)) {
            Ok(file) => file.sync_all(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The job's file opened for reading its first `size` bytes (the caller stops there;
    /// the file has fewer only if it lost bytes the database committed: a machine crash,
    /// see the module docs); `None` when there is nothing to read.
    pub(crate) fn open(&self, job_id: i64, size: u64) -> io::Result<Option<File>> {
        if size == 0 {
            return Ok(None);
        }
        match File::open(self.path(job_id)) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    use std::io::Read as _;

    impl TraceFiles {
        fn read(&self, job_id: i64, size: u64) -> io::Result<Vec<u8>> {
            let mut out = Vec::new();
            if let Some(file) = self.open(job_id, size)? {
                file.take(size).read_to_end(&mut out)?;
            }
            Ok(out)
        }
    }

    #[test]
    fn a_known_size_holds_while_the_file_is_that_long() {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = TraceFiles::new(dir.path().join("traces"));
        assert_eq!(files.known_size(1), None);
        files.note_size(1, 0);
        assert_eq!(files.known_size(1), Some(0), "no file yet: nothing written");
        files
            .open_at(1, 0)
            .and_then(|mut f| f.write_all(b"hello"))
            .expect("append");
        assert_eq!(
            files.known_size(1),
            None,
            "bytes past it: another appender's"
        );
        files.note_size(1, 5);
        assert_eq!(files.known_size(1), Some(5));
        files.forget_size(1);
        assert_eq!(files.known_size(1), None);
    }

    #[test]
    fn known_sizes_are_bounded() {
        let files = TraceFiles::new(PathBuf::from("/nonexistent"));
        for id in 0..MAX_KNOWN_SIZES as i64 {
            files.note_size(id, 0);
        }
        assert_eq!(files.sizes().len(), MAX_KNOWN_SIZES);
        // A known job's size moves without forgetting the others; a new one past the
        // bound starts again empty.
        files.note_size(5, 0);
        assert_eq!(files.sizes().len(), MAX_KNOWN_SIZES);
        files.note_size(-1, 0);
        assert_eq!(files.sizes().len(), 1);
        assert_eq!(files.known_size(-1), Some(0));
    }

    #[test]
    fn an_append_cuts_off_what_was_never_committed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = TraceFiles::new(dir.path().join("traces"));
        let append = |offset: u64, data: &[u8]| {
            files
                .open_at(7, offset)
                .and_then(|mut file| file.write_all(data))
                .expect("append");
        };
        append(0, b"hello ");
        // A torn append (crash before its commit) left bytes past the committed size 6.
        append(6, b"garbage that was never committed");
        assert_eq!(files.read(7, 6).expect("read"), b"hello ");
        append(6, b"world");
        assert_eq!(
            std::fs::read(dir.path().join("traces/7.log")).expect("file"),
            b"hello world"
        );
        assert_eq!(files.read(7, 11).expect("read"), b"hello world");
        assert_eq!(files.read(8, 0).expect("read"), b"");
        files.sync(7).expect("sync");
        files
            .sync(8)
            .expect("a job without a file has nothing to sync");
    }
}
