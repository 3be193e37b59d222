//! Running `git` with the job's environment and credentials, streaming masked output.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::credentials::{Masker, RepoUrl};
use super::flow::SourcesError;

/// A configured git invocation environment.
pub(crate) struct Git {
    env: Vec<(String, String)>,
    masker: Masker,
}

/// The output callback.
pub(crate) type Output<'a> = &'a mut (dyn FnMut(&str) + Send);

impl Git {
    /// `job_env` is exported to every git process (the job's variables, as
    /// gitlab-runner's shell does); the credentials of `repo` are added as an
    /// environment-only `http.<origin>.extraHeader`, and the entry's TLS files as
    /// `GIT_SSL_CAINFO`, `GIT_SSL_CERT` and `GIT_SSL_KEY`.
    pub(crate) fn new(
        job_env: &[(String, String)],
        repo: &RepoUrl,
        lfs_smudge_off: bool,
        tls: &crate::config::TlsFiles,
    ) -> Self {
        let mut env: Vec<(String, String)> = job_env
            .iter()
            .filter(|(key, _)| {
                !key.starts_with("GIT_CONFIG_KEY_")
                    && !key.starts_with("GIT_CONFIG_VALUE_")
                    && key != "GIT_CONFIG_COUNT"
            })
            .cloned()
            .collect();
        // Keep the job's own GIT_CONFIG_* entries, then append ours.
        let lookup = |name: &str| {
            job_env
                .iter()
                .rev()
                .find(|(key, _)| key == name)
                .map(|(_, v)| v.clone())
        };
        let mut count = lookup("GIT_CONFIG_COUNT")
            .and_then(|count| count.trim().parse::<usize>().ok())
            .unwrap_or(0);
        for index in 0..count {
            let key = lookup(&format!("GIT_CONFIG_KEY_{index}")).unwrap_or_default();
            let value = lookup(&format!("GIT_CONFIG_VALUE_{index}")).unwrap_or_default();
            env.push((format!("GIT_CONFIG_KEY_{index}"), key));
            env.push((format!("GIT_CONFIG_VALUE_{index}"), value));
        }
        let mut config = |key: String, value: String| {
            env.push((format!("GIT_CONFIG_KEY_{count}"), key));
            env.push((format!("GIT_CONFIG_VALUE_{count}"), value));
            count += 1;
        };
        config("credential.helper".to_owned(), String::new());
        if let (Some(origin), Some(header)) = (repo.origin.as_deref(), repo.authorization()) {
            config(
                format!("http.{origin}.extraHeader"),
                format!("Authorization: {header}"),
            );
        }
        // The TLS files go in git's environment: `http.<url>.sslCAInfo` in the
        // configuration is not honoured by every build of git (Debian's git 2.47 with
        // GnuTLS ignores it), `GIT_SSL_CAINFO` is. It replaces the CA file for every host
        // of the checkout (submodules too); the system's CA directory still applies.
        for (name, path) in [
            ("GIT_SSL_CAINFO", &tls.ca_file),
            ("GIT_SSL_CERT", &tls.cert_file),
            ("GIT_SSL_KEY", &tls.key_file),
        ] {
            if let Some(path) = path {
                env.push((name.to_owned(), path.to_string_lossy().into_owned()));
            }
        }
        env.push(("GIT_CONFIG_COUNT".to_owned(), count.to_string()));
        env.push(("GIT_TERMINAL_PROMPT".to_owned(), "0".to_owned()));
        env.push(("GCM_INTERACTIVE".to_owned(), "Never".to_owned()));
        env.push(("GIT_ASKPASS".to_owned(), String::new()));
        env.push(("SSH_ASKPASS".to_owned(), String::new()));
        if lfs_smudge_off {
            env.push(("GIT_LFS_SKIP_SMUDGE".to_owned(), "1".to_owned()));
        }
        Self {
            env,
            masker: repo.masker(),
        }
    }

    pub(crate) fn masker(&self) -> &Masker {
        &self.masker
    }

    fn command(&self, dir: &Path, args: &[String]) -> Command {
        let mut command = Command::new("git");
        command
            .args(args)
            .current_dir(dir)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        command
    }

    fn describe(&self, args: &[String]) -> String {
        // `-c key=value` options are noise in an error message.
        let mut shown = Vec::new();
        let mut skip = false;
        for arg in args {
            if skip {
                skip = false;
                continue;
            }
            if arg == "-c" {
                skip = true;
                continue;
            }
            shown.push(arg.as_str());
        }
        self.masker.mask(&format!("git {}", shown.join(" ")))
    }

    /// Runs git in `dir`, forwarding each output line (masked); fails on a non-zero exit.
    pub(crate) async fn run(
        &self,
        dir: &Path,
        args: &[String],
        output: Output<'_>,
    ) -> Result<(), SourcesError> {
        let status = self.status(dir, args, output).await?;
        if status.success() {
            Ok(())
        } else {
            Err(SourcesError::Git {
                command: self.describe(args),
                status: status_text(status),
            })
        }
    }

    /// Runs git in `dir`, forwarding output; returns the exit status.
    pub(crate) async fn status(
        &self,
        dir: &Path,
        args: &[String],
        output: Output<'_>,
    ) -> Result<ExitStatus, SourcesError> {
        let mut child = self
            .command(dir, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| SourcesError::Spawn {
                command: self.describe(args),
                dir: PathBuf::from(dir),
                source,
            })?;
        // Dropping this future (job cancelled, timed out) kills git *and* its helpers
        // (`git-remote-http` would otherwise keep waiting on a stalled server).
        let mut group = ProcessGroup::of(&child);
        let mut stdout = child.stdout.take().map(BufReader::new);
        let mut stderr = child.stderr.take().map(BufReader::new);
        let mut out_buf = Vec::new();
        let mut err_buf = Vec::new();
        while stdout.is_some() || stderr.is_some() {
            tokio::select! {
                more = next_line(&mut stdout, &mut out_buf), if stdout.is_some() => {
                    if !more {
                        stdout = None;
                    }
                    self.emit(&mut out_buf, stdout.is_none(), output);
                }
                more = next_line(&mut stderr, &mut err_buf), if stderr.is_some() => {
                    if !more {
                        stderr = None;
                    }
                    self.emit(&mut err_buf, stderr.is_none(), output);
                }
            }
        }
        let status = child.wait().await.map_err(|source| SourcesError::Spawn {
            command: self.describe(args),
            dir: PathBuf::from(dir),
            source,
        });
        group.disarm();
        status
    }

    /// Sends the complete lines in `buf` (all of it at end of stream).
    fn emit(&self, buf: &mut Vec<u8>, eof: bool, output: Output<'_>) {
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            self.say_bytes(&line, output);
        }
        if eof && !buf.is_empty() {
            let line = std::mem::take(buf);
            self.say_bytes(&line, output);
        }
    }

    fn say_bytes(&self, line: &[u8], output: Output<'_>) {
        let text = String::from_utf8_lossy(line);
        output(&self.masker.mask(text.trim_end_matches(['\n', '\r'])));
    }

    /// Runs git without forwarding anything; true on success.
    pub(crate) async fn quiet(&self, dir: &Path, args: &[String]) -> bool {
        self.command(dir, args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|status| status.success())
    }
}

/// SIGKILLs a process group when dropped, unless disarmed after a normal exit.
struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    fn of(child: &tokio::process::Child) -> Self {
        Self(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .map(Pid::from_raw),
        )
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// Reads up to the next line break of an open stream into `buf`; false at the end of
/// the stream (or on a read error, which ends it too).
async fn next_line<R: AsyncBufRead + Unpin>(reader: &mut Option<R>, buf: &mut Vec<u8>) -> bool {
    match reader {
        Some(reader) => matches!(reader.read_until(b'\n', buf).await, Ok(n) if n > 0),
        None => false,
    }
}

fn status_text(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => {
            use std::os::unix::process::ExitStatusExt;
            match status.signal() {
                Some(signal) => format!("killed by signal {signal}"),
                None => "unknown exit status".to_owned(),
            }
        }
    }
}
