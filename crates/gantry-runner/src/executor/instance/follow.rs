//! A detached stage's files on a fleet instance, followed into copies here. Shared by
//! the two executors whose detached stages write on an instance: the instance
//! executor's ([`super::detached`], the stage a process group there) and the
//! docker-autoscaler executor's (`crate::executor::docker`'s `job/detached.rs`, the stage in a
//! build container on the instance's engine, its files in the build directory bound
//! into it).
//!
//! One SSH command ([`FOLLOW`]) sends what the stage's output files hold past the
//! offsets it is given — standard output on its stdout, standard error on its stderr —
//! as it comes, and [`follow`] appends it to the copies here (beside the job's record,
//! [`crate::journal::aside_dir`]). The copies only ever grow by what the originals hold
//! next, so at every moment each is a prefix of its original, byte for byte, and a
//! follower started again (by a restarted runner) starts from the copies' ends: no byte
//! is lost and none is copied twice. The copies are read into the log as the shell
//! executor's detached files are ([`crate::executor::shell::detached::StageOutput`]).
//!
//! The follower ends (exit 0) after its last pass once the stage's exit code is there,
//! or — for a stage in a container, which has no process the follower can watch — once
//! the runner made the stage's *stop* file (the container stopped: nothing more comes).
//! With a process id file, a stage whose process is gone without an exit code ends it
//! with exit 3.
//!
//! Costs: the follower asks for the files' sizes every [`FOLLOW_POLL`] seconds and sends
//! only what was appended (O(new bytes) per pass, one SSH channel per stage). The
//! instance needs `wc`, `tail -c` and `head -c` (coreutils, busybox).

use std::io::Write;
use std::path::{Path, PathBuf};

use gantry_fleet::connector::{Exit, Session, Stream};

use super::InstanceError;
use crate::executor::quote;
use crate::journal::StageFiles;

/// How often the follower looks at the stage's files on the instance, in seconds.
const FOLLOW_POLL: &str = "0.1";

/// Sends what the files `$1` (out, on stdout) and `$2` (err, on stderr) hold past `$6`
/// and `$7` bytes, every `$8` seconds, until the exit code file `$3` or the stop file
/// `$5` (when given) exists and everything is sent (exit 0). With a process id file
/// `$4`, a process gone without an exit code ends it with exit 3 (as does a pid file
/// that does not come within 100 passes).
const FOLLOW: &str = r#"out=$1 err=$2 status=$3 pid=$4 stop=$5 o=$6 e=$7 poll=$8 waited=0
while :; do
  last=0; [ -e "$status" ] && last=1
  [ -n "$stop" ] && [ -e "$stop" ] && last=1
  n=$(($(wc -c <"$out"))) || exit 4
  if [ "$n" -gt "$o" ]; then tail -c +$((o + 1)) "$out" | head -c $((n - o)) || exit 4; o=$n; fi
  n=$(($(wc -c <"$err"))) || exit 4
  if [ "$n" -gt "$e" ]; then tail -c +$((e + 1)) "$err" | head -c $((n - e)) >&2 || exit 4; e=$n; fi
  [ "$last" = 1 ] && exit 0
  if [ -n "$pid" ]; then
    if p=$(cat "$pid" 2>/dev/null); then
      kill -0 "$p" 2>/dev/null || [ -e "$status" ] || exit 3
    else
      waited=$((waited + 1)); [ "$waited" -gt 100 ] && exit 3
    fi
  fi
  sleep "$poll"
done
"#;

/// A detached stage's files on the instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteFiles {
    /// Its standard output.
    pub(crate) out: String,
    /// Its standard error.
    pub(crate) err: String,
    /// Its exit code, once it ended.
    pub(crate) status: String,
    /// Its process (group) id, when a process on the instance runs it.
    pub(crate) pid: Option<String>,
    /// Made by the runner once the stage's container stopped (a stage in a container).
    pub(crate) stop: Option<String>,
}

impl RemoteFiles {
    /// An instance executor stage's files in its directory `dir` on the instance
    /// (`out`, `err`, `status`, `pid`; [`super::detached`]).
    pub(crate) fn in_dir(dir: &str) -> Self {
        Self {
            out: format!("{dir}/out"),
            err: format!("{dir}/err"),
            status: format!("{dir}/status"),
            pid: Some(format!("{dir}/pid")),
            stop: None,
        }
    }

    /// A container stage's files in `dir` on the instance, named as `files` are
    /// ([`crate::executor::shell::detached::stage_files`]), with a stop file beside them.
    pub(crate) fn in_container(files: &StageFiles) -> Self {
        let text = |path: &Path| path.to_string_lossy().into_owned();
        Self {
            out: text(&files.out),
            err: text(&files.err),
            status: text(&files.status),
            pid: None,
            stop: Some(text(&files.status.with_extension("stop"))),
        }
    }
}

/// Copies what the stage's files on the instance hold past the copies' ends onto the
/// copies, until the follower ends (see the module docs); its exit.
pub(crate) async fn follow(
    session: &Session,
    remote: &RemoteFiles,
    copies: &StageFiles,
) -> Result<Exit, InstanceError> {
    let open = |path: &PathBuf| {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|source| InstanceError::Local {
                path: path.clone(),
                source,
            })
    };
    let mut files = [open(&copies.out)?, open(&copies.err)?];
    let from = [
        files[0].metadata().map(|m| m.len()).unwrap_or(0),
        files[1].metadata().map(|m| m.len()).unwrap_or(0),
    ];
    let optional = |path: &Option<String>| quote(path.as_deref().unwrap_or(""));
    let command = format!(
        "sh -c {} gantry-follow {} {} {} {} {} {} {} {FOLLOW_POLL}",
        quote(FOLLOW),
        quote(&remote.out),
        quote(&remote.err),
        quote(&remote.status),
        optional(&remote.pid),
        optional(&remote.stop),
        from[0],
        from[1]
    );
    let mut failed: Option<(PathBuf, std::io::Error)> = None;
    let exit = session
        .run(&command, b"", &mut |stream, bytes: &[u8]| {
            let (index, path) = match stream {
                Stream::Stdout => (0, &copies.out),
                Stream::Stderr => (1, &copies.err),
            };
            if failed.is_some() {
                return;
            }
            if let Err(error) = files[index].write_all(bytes) {
                failed = Some((path.clone(), error));
            }
        })
        .await?;
    if let Some((path, source)) = failed {
        return Err(InstanceError::Local { path, source });
    }
    Ok(exit)
}

/// The exit code in the file `status` on the instance; `None` when there is none.
pub(crate) async fn remote_status(session: &Session, status: &str) -> Result<Option<i32>, String> {
    let mut said = Vec::new();
    let path = quote(status);
    let command = format!("[ -e {path} ] || exit 3; cat {path}");
    let exit = session
        .run(&command, b"", &mut |stream, bytes: &[u8]| {
            if stream == Stream::Stdout && said.len() < 64 {
                said.extend_from_slice(bytes);
            }
        })
        .await
        .map_err(|error| error.to_string())?;
    let text = String::from_utf8_lossy(&said);
    match (&exit, text.trim().parse::<i32>()) {
        (Exit::Code(3), _) => Ok(None),
        (Exit::Code(0), Ok(code)) => Ok(Some(code)),
        _ => Err(format!(
            "read the exit code in {status} on instance {}: {exit} {:?}",
            session.instance_id(),
            text.trim()
        )),
    }
}

/// Whether any of `paths` exists on the instance.
pub(crate) async fn any_exists(session: &Session, paths: &[&str]) -> Result<bool, InstanceError> {
    let tests: Vec<String> = paths
        .iter()
        .map(|path| format!("[ -e {} ]", quote(path)))
        .collect();
    let command = format!("{{ {}; }} && exit 0 || exit 1", tests.join(" || "));
    match session.run(&command, b"", &mut |_, _| {}).await? {
        Exit::Code(0) => Ok(true),
        Exit::Code(1) => Ok(false),
        other => Err(InstanceError::Closed {
            instance: format!("{} ({other})", session.instance_id()),
            stage: "looking for a stage's files".to_owned(),
        }),
    }
}

/// Empty copies of a stage's output here (0600), no exit code.
pub(crate) fn empty_copies(files: &StageFiles) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    for path in [&files.out, &files.err] {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
    }
    match std::fs::remove_file(&files.status) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Runs [`FOLLOW`] by a real shell on `files` from offsets `(o, e)` (for tests).
#[cfg(test)]
pub(crate) fn run_follow(files: &RemoteFiles, (o, e): (u64, u64)) -> std::process::Output {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(FOLLOW)
        .args([
            "gantry-follow",
            &files.out,
            &files.err,
            &files.status,
            files.pid.as_deref().unwrap_or(""),
            files.stop.as_deref().unwrap_or(""),
            &o.to_string(),
            &e.to_string(),
            "0.01",
        ])
        .output()
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container stage's follower sends what follows its offsets and ends at the
    /// exit code, or — without one — at the stop file.
    #[test]
    fn a_container_stage_is_followed_until_its_status_or_stop_file() {
        let dir = tempfile::tempdir().unwrap();
        let files = RemoteFiles::in_container(&crate::executor::shell::detached::stage_files(
            dir.path(),
            "step_script",
        ));
        assert!(
            files
                .stop
                .as_deref()
                .unwrap()
                .ends_with("stage_step_script.stop")
        );
        std::fs::write(&files.out, "one\ntwo\n").unwrap();
        std::fs::write(&files.err, "bad\n").unwrap();
        std::fs::write(&files.status, "0\n").unwrap();
        let all = run_follow(&files, (0, 0));
        assert_eq!(all.status.code(), Some(0));
        assert_eq!(
            (all.stdout.as_slice(), all.stderr.as_slice()),
            (&b"one\ntwo\n"[..], &b"bad\n"[..])
        );
        assert_eq!(run_follow(&files, (4, 4)).stdout, b"two\n");

        std::fs::remove_file(&files.status).unwrap();
        let stop = files.stop.clone().unwrap();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            std::fs::write(&stop, "").unwrap();
        });
        let rest = run_follow(&files, (8, 0));
        writer.join().unwrap();
        assert_eq!(rest.status.code(), Some(0), "ends at the stop file");
        assert_eq!(rest.stderr, b"bad\n");
    }
}
