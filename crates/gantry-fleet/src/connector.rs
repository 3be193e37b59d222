//! SSH to fleet instances (spec `fleet.md` §5): the connector executors use once the
//! taskscaler has acquired an instance and the plugin has said how to reach it
//! ([`ConnectInfo`]).
//!
//! A [`Session`] is one authenticated SSH connection (russh, in process; no `ssh` binary).
//! On it, [`Session::run`] runs a command with stdin, streaming stdout and stderr as they
//! arrive (fleeting's `Run`); several runs may share the session at once, each on its own
//! channel, and a run whose future is dropped closes its channel. [`Session::upload_dir`]
//! and [`Session::download_dir`] move directory trees.
//!
//! Clones of a `Session` share its connection. `Session::dial_run` and `Session::dial_unix`
//! (fleeting's `DialRun` and `Dial`) give a `Tunnel`, a byte stream over one channel (the
//! docker-autoscaler executor's route to the instance's engine).
//!
//! Design decisions:
//!
//! * **No host key verification.** Instances are machines the fleet has just created (or
//!   re-created) from an image; their host keys are new each time and no trustworthy
//!   channel tells them to us in advance, so there is nothing to check against. fleeting's
//!   connector accepts any host key for the same reason. The private network and the
//!   per-instance credentials from the plugin are what the trust rests on.
//! * **Trees move as tar over `exec`, not SFTP.** The instance then needs nothing but a
//!   POSIX shell and `tar` — no SFTP subsystem, which minimal images and some sshd
//!   configurations lack — and a whole tree moves as one stream on one channel instead of
//!   a round trip per file. The tar is built and unpacked on blocking threads in bounded
//!   chunks, so large trees never sit in memory whole.
//! * **Retries while the instance boots.** Refused connections, timeouts and failed
//!   handshakes are retried about once a second until `connector.timeout`; an
//!   authentication failure is final (retrying cannot make a wrong key right).

mod address;
mod transfer;

use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use russh::client::{self, Handle, Msg};
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg};
use russh::{ChannelMsg, ChannelWriteHalf, Disconnect, Sig};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::provider::ConnectInfo;
use address::Target;
use transfer::{Chunk, ChunkReader, TreeError, shell_quote};

/// The TCP connect timeout of one attempt.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(10);
/// How long the SSH handshake of one attempt may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between connection attempts.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// How much of a failed remote command's stderr an error keeps.
const STDERR_LIMIT: usize = 16 * 1024;
/// How long [`Session::close`] waits for the server to end the connection.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which output stream of a remote command bytes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output (channel data).
    Stdout,
    /// Standard error (extended data, type 1).
    Stderr,
}

/// How a remote command ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal ended it (`TERM`, `KILL`, … without the `SIG` prefix).
    Signal(String),
    /// The channel closed without an exit status (the server or the command's session
    /// went away).
    Closed,
}

impl Exit {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Code(code) => write!(f, "exit status {code}"),
            Exit::Signal(signal) => write!(f, "killed by signal {signal}"),
            Exit::Closed => f.write_str("channel closed without an exit status"),
        }
    }
}

/// A connector failure; messages read after "failed to" and name the instance and address.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The connector config asks for a protocol other than SSH.
    #[error(
        "connect to instance {id} at {address}: protocol {protocol:?} is not supported\n\
         Gantry's connector speaks only ssh; set connector_config protocol = \"ssh\""
    )]
    UnsupportedProtocol {
        /// The instance id.
        id: String,
        /// The address it would have dialed.
        address: String,
        /// The configured protocol.
        protocol: String,
    },
    /// The address cannot be dialed.
    #[error("connect to instance {id}: invalid address {address:?}: {reason}")]
    InvalidAddress {
        /// The instance id.
        id: String,
        /// The address as given (may be empty).
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The connector config has no usable credentials.
    #[error("connect to instance {id} at {address}: {reason}")]
    Credentials {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// What is missing or unreadable, and what to set.
        reason: String,
    },
    /// No SSH connection could be established within the connect timeout.
    #[error(
        "connect to instance {id} at {address}: {last} ({attempts} attempt(s) in {:.1}s)\n\
         is the instance up and its SSH port reachable? connector_config timeout allows {:.1}s",
        waited.as_secs_f64(),
        timeout.as_secs_f64()
    )]
    Unreachable {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// The last attempt's error.
        last: String,
        /// How many attempts were made.
        attempts: u32,
        /// How long they took.
        waited: Duration,
        /// The configured budget.
        timeout: Duration,
    },
    /// The server rejected every credential offered.
    #[error(
        "authenticate as {user:?} on instance {id} at {address}: the server rejected {offered}\n\
         check connector_config username and key: the instance must accept that key for that user"
    )]
    AuthRejected {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// The login user.
        user: String,
        /// What was offered (key type and fingerprint, password).
        offered: String,
    },
    /// An SSH protocol operation failed on an established session.
    #[error("{action} on instance {id} at {address}: {source}")]
    Ssh {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// What was being done.
        action: String,
        /// The SSH error (boxed: it is large).
        source: Box<russh::Error>,
    },
    /// The connection went away while a command ran.
    #[error("run {command:?} on instance {id} at {address}: the connection was lost")]
    Disconnected {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// The command.
        command: String,
    },
    /// The server refused to start the command (no shell, session limit, …).
    #[error("run {command:?} on instance {id} at {address}: the server refused to execute it")]
    ExecRefused {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// The command.
        command: String,
    },
    /// A remote command a transfer depends on failed.
    #[error(
        "{action} on instance {id} at {address}: the remote shell or tar ended with {exit}: {stderr}"
    )]
    Remote {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// What was being done (`upload /src to builds/x`).
        action: String,
        /// How it ended.
        exit: Exit,
        /// Its stderr (the first 16 KiB).
        stderr: String,
    },
    /// A remote path cannot be used for a transfer.
    #[error("{action} on instance {id} at {address}: {reason}")]
    RemotePath {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// What was being done.
        action: String,
        /// Why the path is refused.
        reason: String,
    },
    /// Reading or writing the local tree failed.
    #[error("{action} on instance {id} at {address}: {what}: {source}")]
    Local {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// What was being done.
        action: String,
        /// The local operation and path.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The remote archive holds an entry that would land outside the local directory.
    #[error(
        "{action} on instance {id} at {address}: the archive entry {entry:?} points outside the target directory; nothing outside it was written"
    )]
    UnsafeEntry {
        /// The instance id.
        id: String,
        /// The address.
        address: String,
        /// What was being done.
        action: String,
        /// The entry's path.
        entry: String,
    },
}

/// russh's client callbacks: accept any host key (see the module docs).
struct Client;

impl client::Handler for Client {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _server_public_key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// A byte stream through the session ([`Session::dial_run`], [`Session::dial_unix`]);
/// dropping it closes its channel. An HTTP client can use it as a connection (the
/// docker-autoscaler executor's Docker client does).
pub struct Tunnel(russh::ChannelStream<Msg>);

impl hyper_util::client::legacy::connect::Connection for Tunnel {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

impl fmt::Debug for Tunnel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tunnel")
    }
}

impl tokio::io::AsyncRead for Tunnel {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Tunnel {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// One authenticated SSH connection to an instance. Clones share the connection (the
/// docker-autoscaler executor's Docker client dials through it while the job's directory
/// moves over it).
#[derive(Clone)]
pub struct Session {
    /// Shared with the tasks that open channels (see [`Session::open_channel`]).
    handle: Arc<Handle<Client>>,
    id: String,
    address: String,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

enum Credential {
    Key(Arc<PrivateKey>),
    Password(String),
}

impl Session {
    /// Connects and authenticates to the instance `info` describes, at
    /// `info.address(use_external_addr)`. The port is the address's, else
    /// `connector.protocol_port`, else 22. Authenticates as `connector.username` with
    /// `connector.key` (OpenSSH or PEM private key, unencrypted) and, when that is rejected
    /// or there is no key, `connector.password`. Refused connections, timeouts and failed
    /// handshakes are retried about once a second until `connector.timeout` has passed
    /// (zero: one attempt); an authentication failure is returned at once.
    pub async fn connect(
        info: &ConnectInfo,
        use_external_addr: bool,
    ) -> Result<Session, ConnectError> {
        let connector = &info.connector;
        let id = info.id.clone();
        let raw_address = info.address(use_external_addr).to_string();
        match connector.protocol.as_str() {
            "" | "ssh" => {}
            other => {
                return Err(ConnectError::UnsupportedProtocol {
                    id,
                    address: raw_address,
                    protocol: other.to_string(),
                });
            }
        }
        let default_port = if connector.protocol_port == 0 {
            22
        } else {
            connector.protocol_port
        };
        let target = address::parse(&raw_address, default_port).map_err(|reason| {
            ConnectError::InvalidAddress {
                id: id.clone(),
                address: raw_address.clone(),
                reason,
            }
        })?;
        let address = target.to_string();
        let credentials_error = |reason: String| ConnectError::Credentials {
            id: id.clone(),
            address: address.clone(),
            reason,
        };
        if connector.username.is_empty() {
            return Err(credentials_error(
                "no username; set connector_config username (or let the plugin provide one)".into(),
            ));
        }
        let mut credentials = Vec::new();
        if !connector.key.is_empty() {
            let text = std::str::from_utf8(&connector.key).map_err(|_| {
                credentials_error(
                    "the private key is not text (expected OpenSSH or PEM format)".into(),
                )
            })?;
            let key = russh::keys::decode_secret_key(text, None).map_err(|e| {
                credentials_error(format!(
                    "cannot read the private key: {e}\n\
                     expected an unencrypted OpenSSH or PEM private key (ed25519, ecdsa or rsa)"
                ))
            })?;
            credentials.push(Credential::Key(Arc::new(key)));
        }
        if !connector.password.is_empty() {
            credentials.push(Credential::Password(connector.password.clone()));
        }
        if credentials.is_empty() {
            return Err(credentials_error(
                "neither a private key nor a password; set connector_config key_path or password"
                    .into(),
            ));
        }

        let mut handle = dial(&id, &address, &target, connector).await?;
        let user = connector.username.clone();
        let ssh_error = |action: &str, source: russh::Error| ConnectError::Ssh {
            id: id.clone(),
            address: address.clone(),
            action: action.to_string(),
            source: Box::new(source),
        };
        let mut offered = Vec::new();
        for credential in credentials {
            let result = match credential {
                Credential::Key(key) => {
                    let hash = if key.algorithm().is_rsa() {
                        handle
                            .best_supported_rsa_hash()
                            .await
                            .map_err(|e| ssh_error("negotiate the RSA signature hash", e))?
                            .flatten()
                    } else {
                        None
                    };
                    offered.push(format!(
                        "the {} key {}",
                        key.algorithm(),
                        key.public_key().fingerprint(HashAlg::Sha256)
                    ));
                    handle
                        .authenticate_publickey(&user, PrivateKeyWithHashAlg::new(key, hash))
                        .await
                        .map_err(|e| ssh_error("authenticate with the private key", e))?
                }
                Credential::Password(password) => {
                    offered.push("the password".into());
                    handle
                        .authenticate_password(&user, password)
                        .await
                        .map_err(|e| ssh_error("authenticate with the password", e))?
                }
            };
            if result.success() {
                return Ok(Session {
                    handle: Arc::new(handle),
                    id,
                    address,
                });
            }
        }
        let _ = handle
            .disconnect(Disconnect::ByApplication, "authentication failed", "en")
            .await;
        Err(ConnectError::AuthRejected {
            id,
            address,
            user,
            offered: offered.join(" and "),
        })
    }

    /// The instance id this session is connected to.
    pub fn instance_id(&self) -> &str {
        &self.id
    }

    /// The `host:port` this session dialed.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Runs `command` (through the login user's shell), writes `stdin` to it then closes
    /// its stdin, and hands its stdout and stderr to `output` as they arrive. Returns how it
    /// ended; a non-zero exit status is not an error. Dropping the returned future kills
    /// the command (SIGKILL through the SSH `signal` request) and closes the channel;
    /// processes the command started in the background are not tracked.
    pub async fn run(
        &self,
        command: &str,
        stdin: &[u8],
        output: &mut (dyn FnMut(Stream, &[u8]) + Send),
    ) -> Result<Exit, ConnectError> {
        self.exec(command, Input::Bytes(stdin), &mut Output::Callback(output))
            .await
    }

    /// Runs `command` on the instance and gives its standard input and output as one
    /// byte stream (fleeting's `DialRun`): what is written goes to its stdin, what it
    /// prints is read; its stderr is dropped. The docker-autoscaler executor speaks the
    /// Docker Engine API this way, through `docker system dial-stdio`. Dropping the
    /// stream closes the channel, which ends the command's stdin.
    pub async fn dial_run(&self, command: &str) -> Result<Tunnel, ConnectError> {
        let channel = self
            .open_channel()
            .await
            .map_err(|e| self.ssh_error(format!("open a channel to run {command:?}"), e))?;
        let mut channel = channel;
        channel
            .exec(true, command)
            .await
            .map_err(|e| self.ssh_error(format!("run {command:?}"), e))?;
        // The server answers the exec request before any output: a refusal (no shell,
        // session limit) is reported here rather than as an empty stream.
        loop {
            match channel.wait().await {
                Some(ChannelMsg::Success) => break,
                Some(ChannelMsg::Failure) => {
                    return Err(ConnectError::ExecRefused {
                        id: self.id.clone(),
                        address: self.address.clone(),
                        command: command.to_string(),
                    });
                }
                Some(ChannelMsg::WindowAdjusted { .. }) => {}
                Some(_) => break,
                None => {
                    return Err(ConnectError::Disconnected {
                        id: self.id.clone(),
                        address: self.address.clone(),
                        command: command.to_string(),
                    });
                }
            }
        }
        Ok(Tunnel(channel.into_stream()))
    }

    /// A byte stream to the Unix socket `path` on the instance (fleeting's `Dial("unix",
    /// path)`, OpenSSH's `direct-streamlocal@openssh.com` forwarding; sshd must allow
    /// `AllowStreamLocalForwarding`, its default).
    pub async fn dial_unix(&self, path: &str) -> Result<Tunnel, ConnectError> {
        let channel = self
            .handle
            .channel_open_direct_streamlocal(path)
            .await
            .map_err(|e| self.ssh_error(format!("forward to the socket {path}"), e))?;
        Ok(Tunnel(channel.into_stream()))
    }

    /// Replaces the remote directory `remote` (relative paths: from the login user's home)
    /// with a copy of the local directory `local`: regular files with their modes,
    /// directories (empty ones too) and symlinks as links (never followed); sockets, fifos
    /// and devices are skipped. Runs `rm -rf`, `mkdir -p` and `tar -x` on the instance and
    /// streams the archive into it. Returns the bytes of file content sent.
    pub async fn upload_dir(
        &self,
        local: &std::path::Path,
        remote: &str,
    ) -> Result<u64, ConnectError> {
        let action = format!("upload {} to {remote}", local.display());
        self.check_remote_path(remote, &action)?;
        let quoted = shell_quote(remote);
        let command =
            format!("rm -rf -- {quoted} && mkdir -p -- {quoted} && tar -x -f - -C {quoted}");

        let (tx, rx) = mpsc::channel(transfer::CHUNKS_IN_FLIGHT);
        let root = local.to_path_buf();
        let packer = tokio::task::spawn_blocking(move || transfer::pack(&root, tx));
        let mut output = Output::Capture { stderr: Vec::new() };
        let exit = self.exec(&command, Input::Chunks(rx), &mut output).await;
        let stderr = output.into_stderr();
        // The packer ends on its own: it finished, or its receiver is gone.
        let packed = packer.await.map_err(|e| {
            self.local_error(&action, "archive the tree".into(), std::io::Error::other(e))
        })?;
        let exit = exit?;
        let bytes = match packed {
            Ok(bytes) if exit.success() => bytes,
            // The remote side failed first (the packer then only saw the channel go away).
            Ok(_) | Err(_) if exit != Exit::Closed => {
                return Err(self.remote_error(action, exit, stderr));
            }
            Err(e) => return Err(self.tree_error(&action, e)),
            Ok(_) => {
                return Err(self.remote_error(action, exit, stderr));
            }
        };
        Ok(bytes)
    }

    /// Replaces the content of the local directory `local` (created when missing) with the
    /// remote directory `remote`'s: runs `tar -c` on the instance and unpacks its output,
    /// keeping modes and symlinks. Entries that would land outside `local` (`..`, absolute
    /// paths, paths through symlinks) are refused. Returns the bytes of file content received.
    pub async fn download_dir(
        &self,
        remote: &str,
        local: &std::path::Path,
    ) -> Result<u64, ConnectError> {
        let action = format!("download {remote} to {}", local.display());
        self.check_remote_path(remote, &action)?;
        let command = format!("tar -c -f - -C {} .", shell_quote(remote));

        let (tx, rx) = mpsc::channel(transfer::CHUNKS_IN_FLIGHT);
        let root = local.to_path_buf();
        let unpacker =
            tokio::task::spawn_blocking(move || transfer::unpack(ChunkReader::new(rx), &root));
        let mut output = Output::Pipe {
            stdout: tx,
            stderr: Vec::new(),
        };
        let exit = self.exec(&command, Input::Bytes(&[]), &mut output).await;
        let stderr = output.into_stderr(); // drops the sender: the unpacker sees the end
        let unpacked = unpacker.await.map_err(|e| {
            self.local_error(&action, "unpack the tree".into(), std::io::Error::other(e))
        })?;
        let exit = exit?;
        if !exit.success() && exit != Exit::Closed {
            return Err(self.remote_error(action, exit, stderr));
        }
        let bytes = unpacked.map_err(|e| self.tree_error(&action, e))?;
        if !exit.success() {
            return Err(self.remote_error(action, exit, stderr));
        }
        Ok(bytes)
    }

    /// A remote command of a transfer that failed.
    fn remote_error(&self, action: String, exit: Exit, stderr: String) -> ConnectError {
        ConnectError::Remote {
            id: self.id.clone(),
            address: self.address.clone(),
            action,
            exit,
            stderr,
        }
    }

    /// Ends the session: tells the server and waits (5 s at most) for the connection to end.
    pub async fn close(self) -> Result<(), ConnectError> {
        let Session {
            handle,
            id,
            address,
        } = self;
        if let Err(source) = handle.disconnect(Disconnect::ByApplication, "", "en").await {
            // Already gone: nothing left to close.
            if handle.is_closed() {
                return Ok(());
            }
            return Err(ConnectError::Ssh {
                id,
                address,
                action: "disconnect".into(),
                source: Box::new(source),
            });
        }
        // A channel-opening task of a cancelled run may still hold the handle for a moment;
        // the disconnect is sent either way, only the wait for the end is skipped then.
        let Ok(handle) = Arc::try_unwrap(handle) else {
            return Ok(());
        };
        match tokio::time::timeout(CLOSE_TIMEOUT, handle).await {
            Ok(Ok(())) | Err(_) => Ok(()),
            // The session task reports the disconnect it was asked for as an error.
            Ok(Err(russh::Error::Disconnect)) => Ok(()),
            Ok(Err(source)) => Err(ConnectError::Ssh {
                id,
                address,
                action: "disconnect".into(),
                source: Box::new(source),
            }),
        }
    }

    /// Opens a session channel in a task of its own: when the caller's future is dropped
    /// while the server has not confirmed the channel yet, the task still receives the
    /// channel and closes it, instead of leaving it open on the server.
    async fn open_channel(&self) -> Result<russh::Channel<Msg>, russh::Error> {
        let handle = Arc::clone(&self.handle);
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let opened = handle.channel_open_session().await;
            if let Err(Ok(channel)) = tx.send(opened) {
                let _ = channel.close().await;
            }
        });
        rx.await.unwrap_or(Err(russh::Error::SendError))
    }

    fn check_remote_path(&self, remote: &str, action: &str) -> Result<(), ConnectError> {
        let trimmed = remote.trim_end_matches('/');
        let reason = if remote.trim().is_empty() {
            Some("the remote path is empty")
        } else if trimmed.is_empty() || trimmed == "~" || trimmed == "." || trimmed == ".." {
            Some("refusing to replace the root, home or current directory; name a subdirectory")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(ConnectError::RemotePath {
                id: self.id.clone(),
                address: self.address.clone(),
                action: action.to_string(),
                reason: reason.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn local_error(&self, action: &str, what: String, source: std::io::Error) -> ConnectError {
        ConnectError::Local {
            id: self.id.clone(),
            address: self.address.clone(),
            action: action.to_string(),
            what,
            source,
        }
    }

    fn tree_error(&self, action: &str, error: TreeError) -> ConnectError {
        match error {
            TreeError::Io { what, source } => self.local_error(action, what, source),
            TreeError::Unsafe { entry } => ConnectError::UnsafeEntry {
                id: self.id.clone(),
                address: self.address.clone(),
                action: action.to_string(),
                entry: entry.display().to_string(),
            },
        }
    }

    fn ssh_error(&self, action: String, source: russh::Error) -> ConnectError {
        ConnectError::Ssh {
            id: self.id.clone(),
            address: self.address.clone(),
            action,
            source: Box::new(source),
        }
    }

    /// Runs `command` on a new channel: feeds it `input` while handing what it writes to
    /// `output`, until the channel closes.
    async fn exec(
        &self,
        command: &str,
        input: Input<'_>,
        output: &mut Output<'_>,
    ) -> Result<Exit, ConnectError> {
        let channel = self
            .open_channel()
            .await
            .map_err(|e| self.ssh_error(format!("open a channel to run {command:?}"), e))?;
        let (mut read, write) = channel.split();
        let write = Arc::new(write);
        let mut guard = ChannelGuard {
            write: Arc::clone(&write),
            closed: false,
        };
        write
            .exec(true, command)
            .await
            .map_err(|e| self.ssh_error(format!("run {command:?}"), e))?;

        // The writer never finishes by itself: once stdin is sent it waits, and the reader
        // (which ends when the channel closes) decides. A command that exits without reading
        // its stdin must not leave us blocked on a full window.
        let writer = async {
            match input {
                Input::Bytes(bytes) => {
                    if !bytes.is_empty() {
                        // Errors: the command ended before reading it all; its exit says how.
                        let _ = write.data(bytes).await;
                    }
                    let _ = write.eof().await;
                }
                Input::Chunks(mut rx) => loop {
                    match rx.recv().await {
                        Some(Chunk::Data(data)) => {
                            if write.data(&data[..]).await.is_err() {
                                break;
                            }
                        }
                        Some(Chunk::Done) => {
                            let _ = write.eof().await;
                            break;
                        }
                        // Never EOF a failed or abandoned archive: the remote tar would
                        // take what it got for a whole tree. The caller reports the failure.
                        Some(Chunk::Failed) | None => {
                            return Err(());
                        }
                    }
                },
            }
            std::future::pending::<Result<Infallible, ()>>().await
        };
        let reader = async {
            let mut exit = Exit::Closed;
            loop {
                match read.wait().await {
                    Some(ChannelMsg::Data { data }) => {
                        if !output.stdout(&data).await {
                            return Ok((exit, false));
                        }
                    }
                    Some(ChannelMsg::ExtendedData { data, ext }) => {
                        if ext == 1 {
                            output.stderr(&data);
                        }
                    }
                    Some(ChannelMsg::ExitStatus { exit_status }) => {
                        exit = Exit::Code(i32::try_from(exit_status).unwrap_or(i32::MAX));
                    }
                    Some(ChannelMsg::ExitSignal { signal_name, .. }) => {
                        exit = Exit::Signal(signal_text(&signal_name));
                    }
                    Some(ChannelMsg::Failure) => {
                        return Err(ConnectError::ExecRefused {
                            id: self.id.clone(),
                            address: self.address.clone(),
                            command: command.to_string(),
                        });
                    }
                    Some(ChannelMsg::Close) => return Ok((exit, true)),
                    Some(_) => {}
                    None => {
                        if self.handle.is_closed() && exit == Exit::Closed {
                            return Err(ConnectError::Disconnected {
                                id: self.id.clone(),
                                address: self.address.clone(),
                                command: command.to_string(),
                            });
                        }
                        return Ok((exit, true));
                    }
                }
            }
        };
        let outcome = tokio::select! {
            outcome = reader => outcome,
            Err(()) = writer => Ok((Exit::Closed, false)),
        };
        let (exit, closed) = outcome?;
        guard.closed = closed;
        Ok(exit)
    }
}

/// Establishes the SSH transport (no authentication yet), retrying within the budget.
async fn dial(
    id: &str,
    address: &str,
    target: &Target,
    connector: &crate::provider::ConnectorConfig,
) -> Result<Handle<Client>, ConnectError> {
    let config = Arc::new(client::Config {
        keepalive_interval: (!connector.keepalive.is_zero()).then_some(connector.keepalive),
        nodelay: true,
        ..client::Config::default()
    });
    let started = Instant::now();
    let deadline = started + connector.timeout;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let connect_timeout = if connector.timeout.is_zero() {
            CONNECT_ATTEMPT
        } else {
            remaining.clamp(Duration::from_millis(100), CONNECT_ATTEMPT)
        };
        let error = match tokio::time::timeout(
            connect_timeout,
            TcpStream::connect((target.host.as_str(), target.port)),
        )
        .await
        {
            Err(_) => format!(
                "TCP connect timed out after {:.1}s",
                connect_timeout.as_secs_f64()
            ),
            Ok(Err(e)) => format!("TCP connect: {e}"),
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                match tokio::time::timeout(
                    HANDSHAKE_TIMEOUT,
                    client::connect_stream(config.clone(), stream, Client),
                )
                .await
                {
                    Ok(Ok(handle)) => return Ok(handle),
                    Ok(Err(e)) => format!("SSH handshake: {e}"),
                    Err(_) => format!(
                        "SSH handshake timed out after {}s",
                        HANDSHAKE_TIMEOUT.as_secs()
                    ),
                }
            }
        };
        let now = Instant::now();
        if connector.timeout.is_zero() || now >= deadline {
            return Err(ConnectError::Unreachable {
                id: id.to_string(),
                address: address.to_string(),
                last: error,
                attempts,
                waited: now.duration_since(started),
                timeout: connector.timeout,
            });
        }
        tokio::time::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(now))).await;
    }
}

fn signal_text(signal: &Sig) -> String {
    match signal {
        Sig::Custom(name) => name.clone(),
        other => format!("{other:?}"),
    }
}

/// What a command's stdin gets.
enum Input<'a> {
    /// These bytes, then EOF.
    Bytes(&'a [u8]),
    /// Chunks from a packing thread; EOF only after [`Chunk::Done`].
    Chunks(mpsc::Receiver<Chunk>),
}

/// Where a command's output goes.
enum Output<'a> {
    /// The caller's callback ([`Session::run`]).
    Callback(&'a mut (dyn FnMut(Stream, &[u8]) + Send)),
    /// Stdout ignored, stderr kept for the error.
    Capture { stderr: Vec<u8> },
    /// Stdout to an unpacking thread, stderr kept for the error.
    Pipe {
        stdout: mpsc::Sender<Vec<u8>>,
        stderr: Vec<u8>,
    },
}

impl Output<'_> {
    /// Hands over stdout bytes; false when the receiving side has gone (stop reading).
    async fn stdout(&mut self, data: &[u8]) -> bool {
        match self {
            Output::Callback(callback) => {
                callback(Stream::Stdout, data);
                true
            }
            Output::Capture { .. } => true,
            Output::Pipe { stdout, .. } => stdout.send(data.to_vec()).await.is_ok(),
        }
    }

    fn stderr(&mut self, data: &[u8]) {
        match self {
            Output::Callback(callback) => callback(Stream::Stderr, data),
            Output::Capture { stderr } | Output::Pipe { stderr, .. } => {
                let room = STDERR_LIMIT.saturating_sub(stderr.len());
                stderr.extend_from_slice(data.get(..room.min(data.len())).unwrap_or_default());
            }
        }
    }

    fn into_stderr(self) -> String {
        match self {
            Output::Callback(_) => String::new(),
            Output::Capture { stderr } | Output::Pipe { stderr, .. } => {
                let text = String::from_utf8_lossy(&stderr).trim().to_string();
                if text.is_empty() {
                    "(no stderr)".into()
                } else {
                    text
                }
            }
        }
    }
}

/// Ends its channel when dropped, unless the server already closed it: a cancelled
/// [`Session::run`] must not leave a channel (and a session slot on the server) behind.
/// Closing alone is not enough: OpenSSH keeps a session until its command exits, and a
/// command that neither reads stdin nor writes (`sleep 30`) never notices the close. So the
/// command is sent SIGKILL first (the SSH `signal` request, OpenSSH 7.9+), then the close.
struct ChannelGuard {
    write: Arc<ChannelWriteHalf<Msg>>,
    closed: bool,
}

impl Drop for ChannelGuard {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        let write = Arc::clone(&self.write);
        // Drop cannot await: hand the close to the runtime (there is one: we were polled on it).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = write.signal(Sig::KILL).await;
                let _ = write.close().await;
            });
        }
    }
}
