//! The host side: start a plugin process, read its handshake, talk gRPC to it, kill it
//! (spec `fleet.md` §2.2–2.7).

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use hyper_util::rt::TokioIo;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::UnixStream;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, timeout, timeout_at};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

use super::constants::{
    self, APP_PROTOCOL_VERSION, ENV_MAX_PORT, ENV_MIN_PORT, ENV_PROTOCOL_VERSIONS, PORT_RANGE,
};
use super::error::PluginError;
use super::handshake::{Handshake, Network};
use super::log::{LogLevel, PluginLog, StderrParser};
use super::proto::fleeting as pb;
use super::proto::fleeting::instance_group_client::InstanceGroupClient;
use super::proto::go_plugin::grpc_controller_client::GrpcControllerClient;
use super::proto::go_plugin::grpc_stdio_client::GrpcStdioClient;
use super::proto::go_plugin::{Empty, stdio_data};
use super::proto::health::health_check_response::ServingStatus;
use super::proto::health::{HealthCheckRequest, health_client::HealthClient};
use super::wire;
use crate::provider::{
    ConnectInfo, ConnectorConfig, Instance, InstanceGroup, Partial, ProviderError, ProviderInfo,
};

/// go-plugin's host raises gRPC message limits to 2^31-1 (spec §2.4).
const MAX_MESSAGE: usize = i32::MAX as usize;
/// How many stderr lines an early-exit error quotes.
const STDERR_TAIL: usize = 20;

/// Where a plugin's log entries go.
pub type LogSink = Arc<dyn Fn(PluginLog) + Send + Sync>;

/// How to start a plugin.
#[derive(Clone)]
pub struct PluginOptions {
    /// How long to wait for the handshake line and the connection (default 60 s).
    pub start_timeout: Duration,
    /// How long [`PluginClient::kill`] waits for a graceful exit (default 2 s).
    pub kill_grace: Duration,
    /// Variables added to the inherited environment (credentials, `PLUGIN_UNIX_SOCKET_DIR`).
    pub env: Vec<(String, String)>,
    /// Receives the plugin's stderr logs, stray stdout lines and relayed stdio (default:
    /// one line per entry on the host's stderr).
    pub log: LogSink,
}

impl Default for PluginOptions {
    fn default() -> Self {
        Self {
            start_timeout: constants::START_TIMEOUT,
            kill_grace: constants::KILL_GRACE,
            env: Vec::new(),
            log: Arc::new(|entry: PluginLog| {
                let fields = if entry.fields.is_empty() {
                    String::new()
                } else {
                    format!(" {}", Value::Object(entry.fields))
                };
                eprintln!(
                    "{}: [{}] {}{fields}",
                    entry.plugin,
                    entry.level.as_str().to_ascii_uppercase(),
                    entry.message
                );
            }),
        }
    }
}

impl fmt::Debug for PluginOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginOptions")
            .field("start_timeout", &self.start_timeout)
            .field("kill_grace", &self.kill_grace)
            .field(
                "env",
                &self.env.iter().map(|(key, _)| key).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// A running plugin process and the gRPC connection to it: an [`InstanceGroup`].
///
/// Dropping it SIGKILLs the plugin's process group; [`PluginClient::kill`] stops it
/// gracefully first.
#[derive(Debug)]
pub struct PluginClient {
    name: String,
    pid: u32,
    handshake: Handshake,
    group: InstanceGroupClient<Channel>,
    controller: GrpcControllerClient<Channel>,
    exit: watch::Receiver<Option<ExitStatus>>,
    /// Sending or dropping it SIGKILLs the process group.
    kill: oneshot::Sender<()>,
    /// Kept open: a plugin may take end-of-file on stdin for its host's death.
    stdin: ChildStdin,
    kill_grace: Duration,
}

impl PluginClient {
    /// Starts the plugin at `path` (see [`resolve`](super::resolve)), reads its handshake,
    /// connects and checks its health.
    pub async fn start(path: &Path, options: PluginOptions) -> Result<Self, PluginError> {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        let deadline = Instant::now() + options.start_timeout;
        let (cookie_key, cookie_value) = constants::cookie();
        let mut child = Command::new(path)
            .env(cookie_key, cookie_value)
            .env(ENV_PROTOCOL_VERSIONS, APP_PROTOCOL_VERSION.to_string())
            .env(ENV_MIN_PORT, PORT_RANGE.0.to_string())
            .env(ENV_MAX_PORT, PORT_RANGE.1.to_string())
            .envs(options.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group: signals to the host's group do not reach it (spec §2.7).
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| PluginError::Spawn {
                path: path.into(),
                source,
            })?;
        let pipes = (
            child.id(),
            child.stdin.take(),
            child.stdout.take(),
            child.stderr.take(),
        );
        let (Some(pid), Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            return Err(PluginError::Spawn {
                path: path.into(),
                source: std::io::Error::other("the child has no pid or pipes"),
            });
        };
        // From here on, returning early drops `kill`, which kills the process group.
        let (exit, kill) = watch_process(child, pid);
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_task = tokio::spawn(read_stderr(
            stderr,
            name.clone(),
            options.log.clone(),
            tail.clone(),
        ));

        let mut stdout = BufReader::new(stdout).lines();
        let first = timeout_at(deadline, first_line(&mut stdout, exit.clone()))
            .await
            .map_err(|_| PluginError::StartTimeout {
                plugin: name.clone(),
                timeout: options.start_timeout,
                waiting_for: "handshake line",
            })?;
        let line = match first {
            FirstLine::Line(line) => line,
            FirstLine::Exited(status) => {
                // The exit closed stderr too: let its reader finish (bounded, as a
                // grandchild may hold the pipe).
                let _ = timeout(Duration::from_secs(1), stderr_task).await;
                let stderr = tail.lock().unwrap_or_else(PoisonError::into_inner);
                return Err(PluginError::ExitedBeforeHandshake {
                    plugin: name,
                    status,
                    stderr: stderr.iter().cloned().collect(),
                });
            }
            FirstLine::Closed => return Err(PluginError::NoHandshake { plugin: name }),
        };
        tokio::spawn(drain_stdout(stdout, name.clone(), options.log.clone()));

        let handshake = Handshake::parse(&line, &[APP_PROTOCOL_VERSION]).map_err(|source| {
            PluginError::Handshake {
                plugin: name.clone(),
                source,
            }
        })?;
        let channel = timeout_at(deadline, connect(&handshake))
            .await
            .map_err(|_| PluginError::StartTimeout {
                plugin: name.clone(),
                timeout: options.start_timeout,
                waiting_for: "connection and health check",
            })?
            .map_err(|source| PluginError::Connect {
                plugin: name.clone(),
                address: handshake.address.clone(),
                source,
            })?;
        let health = timeout_at(
            deadline,
            HealthClient::new(channel.clone()).check(HealthCheckRequest {
                service: "plugin".into(),
            }),
        )
        .await
        .map_err(|_| PluginError::StartTimeout {
            plugin: name.clone(),
            timeout: options.start_timeout,
            waiting_for: "answer to its health check",
        })?;
        match health.map(|response| response.into_inner().status()) {
            Ok(ServingStatus::Serving) => {}
            Ok(status) => {
                return Err(PluginError::Unhealthy {
                    plugin: name,
                    detail: format!("reports {} for service \"plugin\"", status.as_str_name()),
                });
            }
            Err(status) => {
                return Err(PluginError::Unhealthy {
                    plugin: name,
                    detail: format!("failed: {:?}: {}", status.code(), status.message()),
                });
            }
        }
        tokio::spawn(relay_stdio(channel.clone(), name.clone(), options.log));

        Ok(Self {
            group: InstanceGroupClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
            controller: GrpcControllerClient::new(channel),
            name,
            pid,
            handshake,
            exit,
            kill,
            stdin,
            kill_grace: options.kill_grace,
        })
    }

    /// The plugin's file name (`fleeting-plugin-aws`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The handshake it answered with.
    pub fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// How the process exited, once it has.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// Stops the plugin: `GRPCController.Shutdown`, up to the kill grace for it to exit,
    /// then SIGKILL to its process group; removes a Unix socket it left behind. Returns
    /// within the kill grace plus about a second, whatever the plugin does.
    pub async fn kill(self) {
        let Self {
            pid,
            handshake,
            mut controller,
            mut exit,
            kill,
            stdin,
            kill_grace,
            ..
        } = self;
        let deadline = Instant::now() + kill_grace;
        if exit.borrow().is_none() {
            let _ = timeout_at(deadline, controller.shutdown(Empty {})).await;
            drop(stdin);
            let _ = timeout_at(deadline, exit.wait_for(Option::is_some)).await;
        }
        // Kills the process if it is still running, and whatever it left in its group.
        let _ = kill.send(());
        kill_group(pid);
        let _ = timeout(Duration::from_secs(1), exit.wait_for(Option::is_some)).await;
        if handshake.network == Network::Unix {
            remove_socket(Path::new(&handshake.address));
        }
    }

    /// Runs one RPC, or fails at once when the plugin is no longer running.
    async fn call<T, F, Fut>(&self, rpc: F) -> Result<T, ProviderError>
    where
        F: FnOnce(InstanceGroupClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        if let Some(status) = self.exit_status() {
            return Err(self.died(status));
        }
        match rpc(self.group.clone()).await {
            Ok(response) => Ok(response.into_inner()),
            Err(status) => Err(self.failure(&status).await),
        }
    }

    /// The error for a failed RPC: a died plugin, or what the plugin answered.
    async fn failure(&self, status: &Status) -> ProviderError {
        if let Some(exited) = *self.exit.borrow() {
            return self.died(exited);
        }
        // A connection that broke because the process died (a local transport error
        // carries its cause as a source; an answer from the plugin never does): the exit
        // may be reaped a moment after the socket closed.
        let broken = matches!(
            status.code(),
            Code::Unavailable | Code::Cancelled | Code::Internal
        ) || std::error::Error::source(status).is_some();
        if broken {
            let wait = Duration::from_secs(1);
            let mut exit = self.exit.clone();
            if let Ok(Ok(exited)) = timeout(wait, exit.wait_for(Option::is_some)).await {
                if let Some(status) = *exited {
                    return self.died(status);
                }
            }
        }
        wire::provider_error(status)
    }

    fn died(&self, status: ExitStatus) -> ProviderError {
        ProviderError::Failed(format!(
            "plugin {} (pid {}) is not running: it exited ({status})",
            self.name, self.pid
        ))
    }
}

#[async_trait]
impl InstanceGroup for PluginClient {
    async fn init(
        &self,
        config: &Value,
        settings: ConnectorConfig,
    ) -> Result<ProviderInfo, ProviderError> {
        let config = serde_json::to_vec(config).map_err(|error| {
            ProviderError::Failed(format!("encode plugin_config as JSON: {error}"))
        })?;
        let request = pb::InitRequest {
            config,
            settings: Some(wire::connector_to_wire(settings)),
        };
        let response = self
            .call(|mut group| async move { group.init(request).await })
            .await?;
        Ok(wire::info_from_wire(response.info.unwrap_or_default()))
    }

    async fn update(&self) -> Result<Vec<Instance>, ProviderError> {
        let response = self
            .call(|mut group| async move { group.update(pb::UpdateRequest {}).await })
            .await?;
        response
            .instances
            .into_iter()
            .map(wire::instance_from_wire)
            .collect()
    }

    async fn increase(&self, delta: u32) -> Partial<u32> {
        let request = pb::IncreaseRequest { delta };
        match self
            .call(|mut group| async move { group.increase(request).await })
            .await
        {
            Ok(response) => wire::partial(response.succeeded, response.failure),
            Err(error) => Partial {
                done: 0,
                error: Some(error),
            },
        }
    }

    async fn decrease(&self, ids: &[String]) -> Partial<Vec<String>> {
        let request = pb::DecreaseRequest {
            instances: ids.to_vec(),
        };
        match self
            .call(|mut group| async move { group.decrease(request).await })
            .await
        {
            Ok(response) => wire::partial(response.succeeded, response.failure),
            Err(error) => failed(error),
        }
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, ProviderError> {
        let request = pb::ConnectInfoRequest {
            instance: id.to_owned(),
        };
        let response = self
            .call(|mut group| async move { group.connect_info(request).await })
            .await?;
        wire::connect_info_from_wire(response)
    }

    async fn heartbeat(&self, id: &str) -> Result<(), ProviderError> {
        let request = pb::HeartbeatRequest {
            instance: id.to_owned(),
        };
        self.call(|mut group| async move { group.heartbeat(request).await })
            .await
            .map(drop)
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        self.call(|mut group| async move { group.shutdown(pb::ShutdownRequest {}).await })
            .await
            .map(drop)
    }

    async fn suspend(&self, ids: &[String]) -> Partial<Vec<String>> {
        let request = pb::SuspendRequest {
            instances: ids.to_vec(),
        };
        match self
            .call(|mut group| async move { group.suspend(request).await })
            .await
        {
            Ok(response) => wire::partial(response.succeeded, response.failure),
            Err(error) => failed(error),
        }
    }

    async fn resume(&self, ids: &[String]) -> Partial<Vec<String>> {
        let request = pb::ResumeRequest {
            instances: ids.to_vec(),
        };
        match self
            .call(|mut group| async move { group.resume(request).await })
            .await
        {
            Ok(response) => wire::partial(response.succeeded, response.failure),
            Err(error) => failed(error),
        }
    }
}

fn failed(error: ProviderError) -> Partial<Vec<String>> {
    Partial {
        done: Vec::new(),
        error: Some(error),
    }
}

/// Owns the child: publishes its exit, and SIGKILLs its process group when `kill` is
/// sent or dropped before it exited.
fn watch_process(
    mut child: Child,
    pid: u32,
) -> (watch::Receiver<Option<ExitStatus>>, oneshot::Sender<()>) {
    let (exit_tx, exit_rx) = watch::channel(None);
    let (kill_tx, kill_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let status = tokio::select! {
            status = child.wait() => status,
            _ = kill_rx => {
                kill_group(pid);
                child.wait().await
            }
        };
        if let Ok(status) = status {
            exit_tx.send_replace(Some(status));
        }
    });
    (exit_rx, kill_tx)
}

fn kill_group(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        // ESRCH: nothing is left in the group.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

enum FirstLine {
    Line(String),
    Exited(ExitStatus),
    Closed,
}

async fn first_line(
    stdout: &mut tokio::io::Lines<BufReader<ChildStdout>>,
    mut exit: watch::Receiver<Option<ExitStatus>>,
) -> FirstLine {
    let line = tokio::select! {
        line = stdout.next_line() => line,
        exited = exit.wait_for(Option::is_some) => {
            return match exited.ok().and_then(|status| *status) {
                Some(status) => FirstLine::Exited(status),
                None => FirstLine::Closed,
            };
        }
    };
    match line {
        Ok(Some(line)) => FirstLine::Line(line),
        // End of stdout: the process is exiting, or closed stdout and lives on (the
        // caller's timeout ends the wait then).
        Ok(None) | Err(_) => match exit.wait_for(Option::is_some).await {
            Ok(status) => status.map_or(FirstLine::Closed, FirstLine::Exited),
            Err(_) => FirstLine::Closed,
        },
    }
}

/// Whatever the plugin prints on stdout after its handshake, at debug level (go-plugin
/// hosts drain it so the plugin never blocks).
async fn drain_stdout(
    mut stdout: tokio::io::Lines<BufReader<ChildStdout>>,
    plugin: String,
    log: LogSink,
) {
    while let Ok(Some(line)) = stdout.next_line().await {
        log(PluginLog {
            plugin: plugin.clone(),
            level: LogLevel::Debug,
            message: line,
            fields: Map::new(),
        });
    }
}

async fn read_stderr(
    stderr: ChildStderr,
    plugin: String,
    log: LogSink,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = BufReader::new(stderr).lines();
    let mut parser = StderrParser::default();
    while let Ok(Some(line)) = lines.next_line().await {
        {
            let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line.clone());
        }
        let (level, message, fields) = parser.parse(&line);
        log(PluginLog {
            plugin: plugin.clone(),
            level,
            message,
            fields,
        });
    }
}

async fn connect(handshake: &Handshake) -> Result<Channel, tonic::transport::Error> {
    match handshake.network {
        Network::Unix => {
            let socket = PathBuf::from(&handshake.address);
            // The URI is a placeholder: the connector dials the socket.
            Endpoint::from_static("http://[::]:50051")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let socket = socket.clone();
                    async move { UnixStream::connect(socket).await.map(TokioIo::new) }
                }))
                .await
        }
        Network::Tcp => {
            Endpoint::from_shared(format!("http://{}", handshake.address))?
                .connect()
                .await
        }
    }
}

/// go-plugin's stdio relay: what the plugin writes to its redirected stdout (debug) and
/// stderr (warn) after it began serving. Plugins without it are fine.
async fn relay_stdio(channel: Channel, plugin: String, log: LogSink) {
    let stream = GrpcStdioClient::new(channel).stream_stdio(()).await;
    let mut stream = match stream {
        Ok(response) => response.into_inner(),
        Err(status) if status.code() == Code::Unimplemented => return,
        Err(status) => {
            log(PluginLog {
                plugin,
                level: LogLevel::Warn,
                message: format!("cannot relay the plugin's stdout and stderr: {status}"),
                fields: Map::new(),
            });
            return;
        }
    };
    while let Ok(Some(data)) = stream.message().await {
        let level = match data.channel() {
            stdio_data::Channel::Stdout => LogLevel::Debug,
            stdio_data::Channel::Stderr | stdio_data::Channel::Invalid => LogLevel::Warn,
        };
        log(PluginLog {
            plugin: plugin.clone(),
            level,
            message: String::from_utf8_lossy(&data.data).trim_end().to_owned(),
            fields: Map::new(),
        });
    }
}

/// Removes the plugin's socket if it left it behind (only a socket, never another file).
fn remove_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    if path
        .symlink_metadata()
        .is_ok_and(|meta| meta.file_type().is_socket())
    {
        let _ = std::fs::remove_file(path);
    }
}
