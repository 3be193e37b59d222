//! Job logs on disk: one append-only file per job, `data_dir/traces/<job id>.log`.
//!
//! The file holds the bytes; the database holds how many of them are the log (the job's
//! `trace_size`, see `gantry_store::TraceState`). The protocol, in [`super::traces`]:
//! an append writes its bytes at offset `trace_size` (cutting off whatever lies past
//! it), then commits the new size. So a crash between the two leaves bytes past the
//! committed size, which no reader sees (a reader reads exactly `trace_size` bytes) and
//! the next append cuts off and overwrites. Nothing committed is ever written again.
//!
//! Durability is the database's (SQLite in WAL mode with `synchronous = NORMAL`): all of
//! it survives a crash of the process; after a crash of the machine the last appends
//! may be lost, as may the database's last commits. No `fsync` per patch: it would cost
//! more than the patch.
//!
//! Methods are blocking; the coordinator calls them from blocking tasks. Appends to one
//! job are serialized by [`TraceFiles::lock`].

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

/// Striped per-job locks: appends to one job run one at a time (different jobs rarely
/// share a stripe, and then just wait for each other).
const STRIPES: usize = 64;

pub(crate) struct TraceFiles {
    dir: PathBuf,
    locks: Vec<tokio::sync::Mutex<()>>,
}

impl TraceFiles {
    pub(crate) fn new(dir: PathBuf) -> TraceFiles {
        TraceFiles {
            dir,
            locks: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        }
    }

    /// Held from reading the job's size to committing the new one.
    pub(crate) async fn lock(&self, job_id: i64) -> tokio::sync::MutexGuard<'_, ()> {
        let stripe = usize::try_from(job_id.rem_euclid(STRIPES as i64)).unwrap_or(0);
        self.locks[stripe].lock().await
    }

    fn path(&self, job_id: i64) -> PathBuf {
        self.dir.join(format!("{job_id}.log"))
    }

    /// Write `data` at `offset` of the job's file (created with its directory if
    /// needed), first cutting off anything past `offset`: bytes there were never
    /// committed (an append that crashed or failed before its commit).
    pub(crate) fn write_at(&self, job_id: i64, offset: u64, data: &[u8]) -> io::Result<()> {
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
        file.write_all(data)
    }

    /// The first `size` bytes of the job's file (fewer only if the file lost bytes the
    /// database committed: a machine crash, see the module docs).
    pub(crate) fn read(&self, job_id: i64, size: u64) -> io::Result<Vec<u8>> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let file = match File::open(self.path(job_id)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(size).read_to_end(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_append_cuts_off_what_was_never_committed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let files = TraceFiles::new(dir.path().join("traces"));
        files.write_at(7, 0, b"hello ").expect("write");
        // A torn append (crash before its commit) left bytes past the committed size 6.
        files
            .write_at(7, 6, b"garbage that was never committed")
            .expect("write");
        assert_eq!(files.read(7, 6).expect("read"), b"hello ");
        files.write_at(7, 6, b"world").expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("traces/7.log")).expect("file"),
            b"hello world"
        );
        assert_eq!(files.read(7, 11).expect("read"), b"hello world");
        assert_eq!(files.read(8, 0).expect("read"), b"");
    }
}
