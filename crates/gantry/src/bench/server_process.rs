//! A `gantry server` started as a child process of this executable, so that its CPU time
//! and memory are its own: `/proc/<pid>/stat` (user + system time of all its threads)
//! and `/proc/<pid>/status` (`VmRSS`, and `VmHWM`, the peak). Linux only: elsewhere the
//! figures read as errors.
//!
//! The server listens on an ephemeral loopback port with `--poll-interval 0` (no push
//! polling); its stderr is read by a thread, for the listening line, the admin token of
//! a first start, and to show what it said when it fails to start.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};

/// How long a server may take to say it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How a server is started.
pub(super) struct ServerOptions<'a> {
    pub(super) data_dir: &'a Path,
    /// `--database-url`; `None`: SQLite in the data directory.
    pub(super) database_url: Option<&'a str>,
    /// Connections the bench opens (all from 127.0.0.1): the server's caps
    /// (`--max-connections-per-ip`, `--max-connections`) are raised to let them in.
    pub(super) connections: usize,
}

pub(super) struct ServerProcess {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(super) url: String,
    /// The admin token the server printed on its first start on this database.
    pub(super) admin_token: Option<String>,
    /// Every line of its stderr so far.
    said: Arc<Mutex<Vec<String>>>,
    data_dir: PathBuf,
}

/// CPU time and memory of a process, from `/proc`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Usage {
    /// User + system CPU time of all its threads, dead ones included.
    pub(super) cpu: Duration,
    /// Resident memory now (`VmRSS`), bytes.
    pub(super) rss: u64,
    /// Peak resident memory (`VmHWM`), bytes.
    pub(super) peak_rss: u64,
}

impl ServerProcess {
    pub(super) fn start(options: &ServerOptions<'_>) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("find this executable")?;
        let mut command = Command::new(&exe);
        command
            .args(["server", "--listen", "127.0.0.1:0", "--poll-interval", "0"])
            .arg("--max-connections-per-ip")
            .arg((options.connections + 64).to_string())
            .arg("--max-connections")
            .arg((options.connections + 128).to_string())
            .arg("--data-dir")
            .arg(options.data_dir)
            .env_remove(crate::env::GANTRY_DATABASE_URL)
            .env_remove(crate::env::GANTRY_BLOBS_URL)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(url) = options.database_url {
            command.args(["--database-url", url]);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("start {} server", exe.display()))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("the server's stderr is not a pipe"))?;
        let said = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = std::sync::mpsc::channel();
        {
            let said = Arc::clone(&said);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    said.lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(line.clone());
                    // The receiver goes once the server started; keep collecting.
                    let _ = tx.send(line);
                }
            });
        }
        let mut server = Self {
            child,
            url: String::new(),
            admin_token: None,
            said,
            data_dir: options.data_dir.to_owned(),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("gantry server: listening on ") {
                        rest.split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .clone_into(&mut server.url);
                    } else if server.admin_token.is_none() {
                        server.admin_token = admin_token(&line);
                    }
                    // The first start's text follows the listening line; the admin
                    // token is its first token.
                    if !server.url.is_empty()
                        && (server.admin_token.is_some() || line.starts_with("Runner registration"))
                    {
                        break;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    // A restart on a database that has its admin token says no more
                    // than that it listens.
                    if !server.url.is_empty() {
                        break;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let status = server.child.wait().ok();
                    bail!(
                        "the server exited ({}) before listening; it said:\n{}",
                        status.map(|s| s.to_string()).unwrap_or_default(),
                        server.said()
                    );
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "the server did not say it listens within {} s; it said:\n{}",
                    START_TIMEOUT.as_secs(),
                    server.said()
                );
            }
        }
        eprintln!(
            "gantry bench: server (pid {}) on {}, data in {}",
            server.child.id(),
            server.url,
            server.data_dir.display()
        );
        Ok(server)
    }

    /// Its stderr so far.
    pub(super) fn said(&self) -> String {
        self.said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join("\n")
    }

    /// Its CPU time and memory now; an error once it exited (naming its last words).
    pub(super) fn usage(&mut self) -> anyhow::Result<Usage> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!(
                "the server exited ({status}); it said:\n{}",
                last_lines(&self.said(), 20)
            );
        }
        usage(self.child.id())
    }

    /// Open file descriptors (sockets included).
    pub(super) fn open_files(&self) -> anyhow::Result<usize> {
        let dir = format!("/proc/{}/fd", self.child.id());
        Ok(std::fs::read_dir(&dir)
            .with_context(|| format!("list {dir}"))?
            .count())
    }

    /// Its limit of open files (`Max open files` of `/proc/<pid>/limits`, the soft one).
    pub(super) fn open_files_limit(&self) -> anyhow::Result<u64> {
        let path = format!("/proc/{}/limits", self.child.id());
        let limits = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        limits
            .lines()
            .find_map(|l| {
                l.strip_prefix("Max open files")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .ok_or_else(|| anyhow!("{path}: no `Max open files` line"))
    }

    /// Established TCP connections to its port, from `/proc/<pid>/net/tcp` (IPv4: it
    /// listens on 127.0.0.1).
    pub(super) fn connections(&self) -> anyhow::Result<usize> {
        let port = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| anyhow!("no port in {}", self.url))?;
        let path = format!("/proc/{}/net/tcp", self.child.id());
        let table = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
        Ok(established_to(&table, port))
    }

    /// SIGTERM, then wait up to 10 s for it to stop (SIGKILL after that).
    pub(super) fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX));
        if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_ok() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// The `glpat-` token in a line of the first start's text.
fn admin_token(line: &str) -> Option<String> {
    let prefix = gantry_protocol::token::PERSONAL_ACCESS_TOKEN_PREFIX;
    let trimmed = line.trim();
    (trimmed.starts_with(prefix) && !trimmed.contains(' ')).then(|| trimmed.to_owned())
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Rows of a `/proc/net/tcp` table whose local port is `port` and whose state is
/// `01` (established).
fn established_to(table: &str, port: u16) -> usize {
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let address = fields.next().unwrap_or_default();
            let state = fields.nth(1).unwrap_or_default();
            address.ends_with(&local) && state == "01"
        })
        .count()
}

/// Clock ticks a second of `/proc/<pid>/stat`'s times (`sysconf(_SC_CLK_TCK)`).
fn clock_ticks() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|t| u64::try_from(t).ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// The CPU time and memory of process `pid`.
pub(super) fn usage(pid: u32) -> anyhow::Result<Usage> {
    let stat_path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&stat_path).with_context(|| format!("read {stat_path}"))?;
    let ticks =
        cpu_ticks(&stat).ok_or_else(|| anyhow!("{stat_path}: no utime and stime in `{stat}`"))?;
    let status_path = format!("/proc/{pid}/status");
    let status =
        std::fs::read_to_string(&status_path).with_context(|| format!("read {status_path}"))?;
    let kb =
        |key: &str| status_kb(&status, key).ok_or_else(|| anyhow!("{status_path}: no {key} line"));
    let per_tick = 1_000_000_000 / clock_ticks();
    Ok(Usage {
        cpu: Duration::from_nanos(ticks.saturating_mul(per_tick)),
        rss: kb("VmRSS")? * 1024,
        peak_rss: kb("VmHWM")? * 1024,
    })
}

/// `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces: fields are counted after its `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The value of a `Key:   1234 kB` line of `/proc/<pid>/status`, in kB.
fn status_kb(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_ticks_after_the_command_name() {
        let stat = "4242 (gantry (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 100 200 300";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn reads_status_kilobytes() {
        let status = "Name:\tgantry\nVmHWM:\t   51234 kB\nVmRSS:\t   40000 kB\n";
        assert_eq!(status_kb(status, "VmHWM"), Some(51234));
        assert_eq!(status_kb(status, "VmRSS"), Some(40000));
        assert_eq!(status_kb(status, "VmSwap"), None);
    }

    #[test]
    fn counts_established_connections_to_a_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:A001 06 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 20 4 30 10 -1
";
        // Port 8080 = 1F90: the listener (0A) and a TIME_WAIT (06) are not counted, nor
        // the client's end of the connection.
        assert_eq!(established_to(table, 8080), 1);
        assert_eq!(established_to(table, 40960), 1);
    }

    #[test]
    fn this_process_has_usage() {
        let mine = usage(std::process::id()).expect("/proc/self");
        assert!(mine.peak_rss >= mine.rss && mine.rss > 0, "{mine:?}");
    }

    #[test]
    fn finds_the_admin_token_line() {
        assert_eq!(
            admin_token("    glpat-abcDEF123"),
            Some("glpat-abcDEF123".to_owned())
        );
        assert_eq!(admin_token("Use it with the CLI"), None);
        assert_eq!(admin_token("    export GANTRY_TOKEN=glpat-x"), None);
    }
}
