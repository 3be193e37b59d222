//! A throw-away OpenSSH server on loopback, owned by this process.
//!
//! [`LocalSshd`] is how the SSH connector is tested against the real thing, and how a plugin
//! can make "instances" out of local sshd processes (one per instance, each with its own
//! host key, authorized key and port). Everything it needs lives in one directory the caller
//! owns: the host key, `sshd_config`, `authorized_keys`, the pid file and `sshd.log`.
//!
//! The server runs in the foreground (`sshd -D -e`) as a child of this process, in its own
//! process group, listening on `127.0.0.1` on a port chosen free by the kernel. Only public
//! key authentication is enabled, for the current user. Stopping it (or dropping it) ends the
//! listener and the per-connection sshd processes it forked; commands those connections
//! started are not tracked (they end when their session's channels close).
//!
//! A server can also be [kept](LocalSshd::keep): dropping it then leaves it running, and
//! another process [adopts](LocalSshd::adopt) it by its pid and directory (its command
//! line names its `sshd_config`, so a reused pid is never taken for it).
//!
//! The binary is found as `$GANTRY_SSHD`, `/usr/sbin/sshd` or `sshd` on `PATH`;
//! `scripts/test-sshd.sh install` installs it on Debian.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

/// How long [`LocalSshd::start`] waits for the server to accept TCP connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a start retries with another port after losing a race for the one it chose.
const PORT_ATTEMPTS: u32 = 5;
/// How long [`LocalSshd::stop`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A failure of [`LocalSshd`] or [`generate_key`]; messages read after "failed to".
#[derive(Debug, thiserror::Error)]
pub enum SshdError {
    /// No sshd binary.
    #[error(
        "find the OpenSSH server: no sshd at {tried}\n\
         install it with `scripts/test-sshd.sh install` (or `apt-get install openssh-server`), \
         or point GANTRY_SSHD at the binary"
    )]
    NotFound {
        /// The places looked at.
        tried: String,
    },
    /// A program (`ssh-keygen`, `sshd`, `id`) could not be started.
    #[error("run {program}: {source}\nis OpenSSH installed? (`scripts/test-sshd.sh install`)")]
    Spawn {
        /// The program.
        program: String,
        /// Why it could not be started.
        source: io::Error,
    },
    /// A program ran and failed.
    #[error("run {command} ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// A file or directory of the server could not be written or read.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done (`write`, `create directory`, …).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// sshd exited while starting.
    #[error("start sshd (config {config}): it exited ({status}); its log:\n{log}")]
    Exited {
        /// The `sshd_config` it ran with.
        config: PathBuf,
        /// How it ended.
        status: ExitStatus,
        /// The content of `sshd.log`.
        log: String,
    },
    /// sshd did not accept connections in time.
    #[error(
        "start sshd (config {config}): 127.0.0.1:{port} did not accept connections within {}s; its log:\n{log}",
        START_TIMEOUT.as_secs()
    )]
    NotListening {
        /// The `sshd_config` it ran with.
        config: PathBuf,
        /// The port it was told to listen on.
        port: u16,
        /// The content of `sshd.log`.
        log: String,
    },
    /// Every port tried was taken by someone else before sshd could bind it.
    #[error(
        "start sshd (config {config}): {PORT_ATTEMPTS} free ports were taken before sshd bound them; its log:\n{log}"
    )]
    PortRace {
        /// The `sshd_config` it ran with.
        config: PathBuf,
        /// The content of `sshd.log` of the last attempt.
        log: String,
    },
    /// Signalling or waiting for sshd failed.
    #[error("stop sshd (pid {pid}): {source}")]
    Stop {
        /// Its pid.
        pid: u32,
        /// The error.
        source: io::Error,
    },
}

/// A running OpenSSH server on `127.0.0.1`, killed when dropped.
#[derive(Debug)]
pub struct LocalSshd {
    /// `None` for an adopted server (another process's child).
    child: Option<Child>,
    /// Dropping it leaves the server running.
    kept: bool,
    pid: u32,
    port: u16,
    user: String,
    dir: PathBuf,
}

impl LocalSshd {
    /// Starts sshd with its files in `dir` (created if missing), accepting `authorized_key`
    /// (one OpenSSH public key line, e.g. the second value of [`generate_key`]) for the
    /// current user, and waits until it accepts TCP connections (10 s at most).
    pub async fn start(dir: &Path, authorized_key: &str) -> Result<LocalSshd, SshdError> {
        let sshd = find_sshd()?;
        create_dir(dir)?;
        ensure_privsep_dir()?;
        let user = current_user().await?;

        let host_key = dir.join("ssh_host_ed25519_key");
        if !host_key.exists() {
            let dir_owned = dir.to_path_buf();
            tokio::task::spawn_blocking(move || generate_key(&dir_owned, "ssh_host_ed25519_key"))
                .await
                .map_err(|e| SshdError::Spawn {
                    program: "ssh-keygen".into(),
                    source: io::Error::other(e),
                })??;
        }
        let authorized_keys = dir.join("authorized_keys");
        write_file(
            &authorized_keys,
            format!("{}\n", authorized_key.trim()).as_bytes(),
        )?;
        let config = dir.join("sshd_config");
        let log_path = dir.join("sshd.log");

        let mut last_log = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port().await.map_err(|source| SshdError::Io {
                action: "find a free port on",
                path: PathBuf::from("127.0.0.1"),
                source,
            })?;
            write_file(
                &config,
                sshd_config(dir, port, &host_key, &authorized_keys).as_bytes(),
            )?;
            let log = std::fs::File::create(&log_path).map_err(|source| SshdError::Io {
                action: "create",
                path: log_path.clone(),
                source,
            })?;

            let mut command = Command::new(&sshd);
            command
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .process_group(0)
                .kill_on_drop(true);
            let child = command.spawn().map_err(|source| SshdError::Spawn {
                program: sshd.display().to_string(),
                source,
            })?;
            let pid = child.id().unwrap_or(0);
            let mut server = LocalSshd {
                child: Some(child),
                kept: false,
                pid,
                port,
                user: user.clone(),
                dir: dir.to_path_buf(),
            };
            match server.wait_listening().await {
                Ok(()) => return Ok(server),
                Err(Waited::Exited(status)) => {
                    let log = read_log(&log_path);
                    if log.contains("Address already in use") {
                        last_log = log;
                        continue;
                    }
                    return Err(SshdError::Exited {
                        config,
                        status,
                        log,
                    });
                }
                Err(Waited::Timeout) => {
                    server.kill_all();
                    return Err(SshdError::NotListening {
                        config,
                        port,
                        log: read_log(&log_path),
                    });
                }
                Err(Waited::Io(source)) => {
                    server.kill_all();
                    return Err(SshdError::Stop { pid, source });
                }
            }
        }
        Err(SshdError::PortRace {
            config,
            log: last_log,
        })
    }

    /// The server another process started in `dir` and [kept](Self::keep), listening
    /// on `port` with pid `pid`: `None` unless that process still runs sshd with this
    /// directory's `sshd_config`.
    pub async fn adopt(dir: &Path, pid: u32, port: u16) -> Option<LocalSshd> {
        if !runs_config(pid, &dir.join("sshd_config")) {
            return None;
        }
        Some(LocalSshd {
            child: None,
            kept: false,
            pid,
            port,
            user: current_user().await.ok()?,
            dir: dir.to_path_buf(),
        })
    }

    /// From now on dropping this server leaves it running (for another process to
    /// [adopt](Self::adopt)); [`stop`](Self::stop) still stops it.
    pub fn keep(&mut self) {
        self.kept = true;
    }

    async fn wait_listening(&mut self) -> Result<(), Waited> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.try_wait().map_err(Waited::Io)? {
                return Err(Waited::Exited(status));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
                // The port might be someone else's (a lost race): sshd must still be alive.
                tokio::time::sleep(Duration::from_millis(20)).await;
                if let Some(status) = self.try_wait().map_err(Waited::Io)? {
                    return Err(Waited::Exited(status));
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Waited::Timeout);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The TCP port it listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, usable as a `ConnectInfo` address.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The process id of the listening sshd.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The user that may log in (the user this process runs as).
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The directory holding its files (`sshd_config`, `sshd.log`, keys).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What sshd has logged so far (`sshd.log`, errors only).
    pub fn log(&self) -> String {
        read_log(&self.dir.join("sshd.log"))
    }

    /// Whether the server process is still alive.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => runs_config(self.pid, &self.dir.join("sshd_config")),
        }
    }

    /// The child's exit status once it exited; an adopted server's is unknown (`None`
    /// while it runs, a made-up failure once it is gone).
    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        if let Some(child) = &mut self.child {
            return child.try_wait();
        }
        if runs_config(self.pid, &self.dir.join("sshd_config")) {
            Ok(None)
        } else {
            Ok(Some(ExitStatus::from_raw(1 << 8)))
        }
    }

    /// Stops the server: SIGTERM, then SIGKILL after 5 s; waits for it to exit. The
    /// per-connection sshd processes it forked are killed too.
    pub async fn stop(mut self) -> Result<(), SshdError> {
        let pid = self.pid;
        self.kill_connections();
        if self
            .try_wait()
            .map_err(|source| SshdError::Stop { pid, source })?
            .is_some()
        {
            return Ok(());
        }
        // The pid is our child's and it has not been reaped, so it cannot have been
        // reused; an adopted one's command line was checked just now.
        if let Err(errno) = signal::kill(Pid::from_raw(pid_i32(pid)), Signal::SIGTERM) {
            return Err(SshdError::Stop {
                pid,
                source: io::Error::from(errno),
            });
        }
        let Some(child) = &mut self.child else {
            let deadline = Instant::now() + STOP_GRACE;
            while self.is_running() {
                if Instant::now() >= deadline {
                    let _ = signal::kill(Pid::from_raw(pid_i32(pid)), Signal::SIGKILL);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            return Ok(());
        };
        match tokio::time::timeout(STOP_GRACE, child.wait()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(source)) => Err(SshdError::Stop { pid, source }),
            Err(_elapsed) => child
                .kill()
                .await
                .map_err(|source| SshdError::Stop { pid, source }),
        }
    }

    /// SIGKILLs the per-connection sshd processes (children of the listener, which put
    /// themselves in new sessions, so the process group does not reach them).
    fn kill_connections(&self) {
        for child in child_pids(self.pid) {
            let _ = signal::kill(Pid::from_raw(child), Signal::SIGKILL);
        }
    }

    fn kill_all(&mut self) {
        self.kill_connections();
        match &mut self.child {
            Some(child) => {
                let _ = child.start_kill();
                // Reap it when possible so no zombie stays behind.
                let _ = child.try_wait();
            }
            None => {
                if self.is_running() {
                    let _ = signal::kill(Pid::from_raw(pid_i32(self.pid)), Signal::SIGKILL);
                }
            }
        }
    }
}

impl Drop for LocalSshd {
    fn drop(&mut self) {
        if self.kept {
            // Not killed when its handle goes (`kill_on_drop`): it outlives this process.
            if let Some(child) = self.child.take() {
                std::mem::forget(child);
            }
            return;
        }
        if matches!(self.try_wait(), Ok(None)) {
            self.kill_all();
        }
    }
}

/// Whether process `pid` runs sshd with `config` (its command line names it; sshd
/// rewrites its title, `sshd: /usr/sbin/sshd -D -e -f CONFIG [listener] …`, so the
/// path is looked for anywhere in it).
fn runs_config(pid: u32, config: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let config = config.as_os_str().as_encoded_bytes();
    !config.is_empty() && cmdline.windows(config.len()).any(|window| window == config)
}

enum Waited {
    Exited(ExitStatus),
    Timeout,
    Io(io::Error),
}

/// Generates an ed25519 key pair without passphrase as `dir/name` and `dir/name.pub`
/// (replacing existing files) with `ssh-keygen`; returns the private key's path and the
/// public key line (`ssh-ed25519 AAAA… gantry`). Blocks while `ssh-keygen` runs.
pub fn generate_key(dir: &Path, name: &str) -> Result<(PathBuf, String), SshdError> {
    create_dir(dir)?;
    let private = dir.join(name);
    let public = dir.join(format!("{name}.pub"));
    for path in [&private, &public] {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(SshdError::Io {
                    action: "remove",
                    path: path.clone(),
                    source,
                });
            }
        }
    }
    let args: [OsString; 9] = [
        "-q".into(),
        "-t".into(),
        "ed25519".into(),
        "-N".into(),
        "".into(),
        "-C".into(),
        "gantry".into(),
        "-f".into(),
        private.clone().into_os_string(),
    ];
    let output = std::process::Command::new("ssh-keygen")
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| SshdError::Spawn {
            program: "ssh-keygen".into(),
            source,
        })?;
    if !output.status.success() {
        return Err(SshdError::Command {
            command: format!("ssh-keygen -t ed25519 -f {}", private.display()),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    let line = std::fs::read_to_string(&public).map_err(|source| SshdError::Io {
        action: "read",
        path: public.clone(),
        source,
    })?;
    Ok((private, line.trim().to_string()))
}

fn find_sshd() -> Result<PathBuf, SshdError> {
    let mut tried = Vec::new();
    if let Some(path) = std::env::var_os("GANTRY_SSHD").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            // sshd re-executes itself and insists on an absolute path.
            return std::path::absolute(&path).map_err(|source| SshdError::Io {
                action: "resolve",
                path,
                source,
            });
        }
        tried.push(format!("{} ($GANTRY_SSHD)", path.display()));
    }
    let default = Path::new("/usr/sbin/sshd");
    if default.is_file() {
        return Ok(default.to_path_buf());
    }
    tried.push(default.display().to_string());
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("sshd");
            if candidate.is_file() && candidate.is_absolute() {
                return Ok(candidate);
            }
        }
    }
    tried.push("sshd on PATH".into());
    Err(SshdError::NotFound {
        tried: tried.join(", "),
    })
}

/// sshd refuses to start as root without its privilege separation directory, which Debian
/// creates at boot (tmpfiles) — not in containers where the package was just installed.
/// A non-root sshd does not need it (and could not create it).
fn ensure_privsep_dir() -> Result<(), SshdError> {
    let dir = Path::new("/run/sshd");
    if dir.is_dir() {
        return Ok(());
    }
    match std::fs::create_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        Err(source) => Err(SshdError::Io {
            action: "create sshd's privilege separation directory",
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// The user this process runs as (`$USER`, else `id -un`): who logs in to a [`LocalSshd`].
pub async fn current_user() -> Result<String, SshdError> {
    if let Some(user) = std::env::var("USER").ok().filter(|u| !u.is_empty()) {
        return Ok(user);
    }
    let output = Command::new("id")
        .arg("-un")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| SshdError::Spawn {
            program: "id".into(),
            source,
        })?;
    if !output.status.success() {
        return Err(SshdError::Command {
            command: "id -un".into(),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

async fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    Ok(listener.local_addr()?.port())
}

fn sshd_config(dir: &Path, port: u16, host_key: &Path, authorized_keys: &Path) -> String {
    format!(
        "# Written by gantry-fleet's LocalSshd; a throw-away server for one process.\n\
         ListenAddress 127.0.0.1:{port}\n\
         HostKey {host_key}\n\
         AuthorizedKeysFile {authorized_keys}\n\
         PidFile {pid_file}\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PermitRootLogin prohibit-password\n\
         UsePAM no\n\
         StrictModes no\n\
         UseDNS no\n\
         PrintMotd no\n\
         PrintLastLog no\n\
         MaxSessions 20\n\
         MaxStartups 100\n\
         LogLevel ERROR\n\
         Subsystem sftp internal-sftp\n",
        host_key = host_key.display(),
        authorized_keys = authorized_keys.display(),
        pid_file = dir.join("sshd.pid").display(),
    )
}

fn create_dir(dir: &Path) -> Result<(), SshdError> {
    std::fs::create_dir_all(dir).map_err(|source| SshdError::Io {
        action: "create directory",
        path: dir.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, content: &[u8]) -> Result<(), SshdError> {
    std::fs::write(path, content).map_err(|source| SshdError::Io {
        action: "write",
        path: path.to_path_buf(),
        source,
    })
}

fn read_log(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) if bytes.is_empty() => "(empty)".into(),
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim_end().to_string(),
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

fn pid_i32(pid: u32) -> i32 {
    i32::try_from(pid).unwrap_or(i32::MAX)
}

/// The pids whose parent is `parent` (Linux `/proc`; empty elsewhere).
fn child_pids(parent: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
        let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 1..)) else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(parent) {
            pids.push(pid);
        }
    }
    pids
}
