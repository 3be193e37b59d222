//! The plugin side: what a Rust plugin's `main` runs (spec `fleet.md` §2.8).

use std::ffi::OsStr;
use std::fs::DirBuilder;
use std::future::Future;
use std::io::{Read, Write};
use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::{Request, Response, Status, Streaming};

use super::constants::{self, APP_PROTOCOL_VERSION, ENV_PROTOCOL_VERSIONS, ENV_UNIX_SOCKET_DIR};
use super::error::PluginError;
use super::handshake::{Handshake, Network};
use super::log::{LogLevel, log};
use super::proto::fleeting as pb;
use super::proto::fleeting::instance_group_server::{self, InstanceGroupServer};
use super::proto::go_plugin::grpc_broker_server::{GrpcBroker, GrpcBrokerServer};
use super::proto::go_plugin::grpc_controller_server::{GrpcController, GrpcControllerServer};
use super::proto::go_plugin::grpc_stdio_server::{GrpcStdio, GrpcStdioServer};
use super::proto::go_plugin::{ConnInfo, Empty, StdioData};
use super::proto::health::health_check_response::ServingStatus;
use super::proto::health::health_server::{Health, HealthServer};
use super::proto::health::{HealthCheckRequest, HealthCheckResponse};
use super::wire;
use crate::provider::InstanceGroup;

/// The app protocol versions this SDK serves, lowest first.
const SERVED_VERSIONS: &[u32] = &[APP_PROTOCOL_VERSION];

/// go-plugin's words for a plugin run by hand.
const NOT_A_PROGRAM: &str = "This binary is a plugin. These are not meant to be executed directly.\n\
Please execute the program that consumes these plugins, which will\n\
load any plugins automatically";

/// How long in-flight calls may take to finish once serving stops.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Serves `group` as a fleeting plugin until the host says `GRPCController.Shutdown`,
/// closes the plugin's stdin or dies; a Rust plugin's `main` calls this and exits 1 on
/// an error.
///
/// Checks the magic cookie (without it, prints go-plugin's "This binary is a plugin"
/// message to stderr and fails), negotiates the app protocol version, serves
/// go-plugin's services and the instance group on a Unix socket in a fresh temporary
/// directory, and prints the handshake line: the only thing ever written to stdout.
/// SIGINT is ignored, as go-plugin plugins do. Log with [`log`](super::log()).
pub async fn serve<G: InstanceGroup>(group: G) -> Result<(), PluginError> {
    let (key, value) = constants::cookie();
    if std::env::var_os(&key).as_deref() != Some(OsStr::new(&value)) {
        eprintln!("{NOT_A_PROGRAM}");
        return Err(PluginError::NotLaunchedByHost { key });
    }
    let app_version = negotiate(std::env::var(ENV_PROTOCOL_VERSIONS).ok().as_deref());

    let parent = std::env::var_os(ENV_UNIX_SOCKET_DIR)
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = parent.join(format!("plugin{:016x}", rand::random::<u64>()));
    DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|source| PluginError::Io {
            what: format!("create the socket directory {}", dir.display()),
            source,
        })?;
    let socket = dir.join("plugin.sock");
    let result = serve_on(group, &socket, app_version).await;
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_dir(&dir);
    result
}

async fn serve_on<G: InstanceGroup>(
    group: G,
    socket: &Path,
    app_version: u32,
) -> Result<(), PluginError> {
    let listener = UnixListener::bind(socket).map_err(|source| PluginError::Io {
        what: format!("listen on {}", socket.display()),
        source,
    })?;
    let (stop, stopped) = watch::channel(false);
    ignore_sigint();
    watch_stdin(stop.clone());
    watch_parent(stop.clone());

    let server = Server::builder()
        .add_service(HealthServer::new(HealthService))
        .add_service(GrpcControllerServer::new(ControllerService { stop }))
        .add_service(GrpcStdioServer::new(StdioService {
            stopped: stopped.clone(),
        }))
        .add_service(GrpcBrokerServer::new(BrokerService {
            stopped: stopped.clone(),
        }))
        .add_service(
            InstanceGroupServer::new(GroupService {
                group: Arc::new(group),
            })
            .max_decoding_message_size(i32::MAX as usize)
            .max_encoding_message_size(i32::MAX as usize),
        )
        .serve_with_incoming_shutdown(
            UnixListenerStream::new(listener),
            until_stopped(stopped.clone()),
        );

    let handshake = Handshake::new(app_version, Network::Unix, socket.to_string_lossy());
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{handshake}")
            .and_then(|()| stdout.flush())
            .map_err(|source| PluginError::Io {
                what: "print the handshake line on stdout".into(),
                source,
            })?;
    }
    tokio::select! {
        result = server => result.map_err(|source| PluginError::Serve { source }),
        // Calls still running after the grace are abandoned.
        () = async {
            until_stopped(stopped).await;
            tokio::time::sleep(STOP_GRACE).await;
        } => Ok(()),
    }
}

/// The highest version both sides speak; without a common one, the lowest served (the
/// host then refuses the handshake, as in go-plugin).
fn negotiate(offered: Option<&str>) -> u32 {
    let offered: Vec<u32> = offered
        .unwrap_or_default()
        .split(',')
        .filter_map(|version| version.trim().parse().ok())
        .collect();
    SERVED_VERSIONS
        .iter()
        .rev()
        .find(|version| offered.contains(version))
        .or(SERVED_VERSIONS.first())
        .copied()
        .unwrap_or(APP_PROTOCOL_VERSION)
}

async fn until_stopped(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stopped| *stopped).await;
}

/// go-plugin plugins ignore SIGINT: a Ctrl-C meant for the host must not kill them
/// before the host shut them down. Handling the signal replaces its default action.
fn ignore_sigint() {
    use tokio::signal::unix::{SignalKind, signal};
    if let Ok(mut interrupts) = signal(SignalKind::interrupt()) {
        tokio::spawn(async move { while interrupts.recv().await.is_some() {} });
    }
}

/// End of file on stdin means the host is gone, when stdin is a pipe (Gantry's host
/// keeps one open; a Go host passes its own stdin, often `/dev/null`, which says nothing).
/// A plain thread: a blocking read must not hold up the runtime's shutdown.
fn watch_stdin(stop: watch::Sender<bool>) {
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return;
    };
    let mut stdin = std::fs::File::from(fd);
    if !stdin
        .metadata()
        .is_ok_and(|meta| meta.file_type().is_fifo())
    {
        return;
    }
    std::thread::spawn(move || {
        let mut buffer = [0u8; 256];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) => break,
                Ok(_) => {}
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        log(
            LogLevel::Debug,
            "stdin closed: the host is gone, stopping",
            Map::new(),
        );
        stop.send_replace(true);
    });
}

/// Stops serving when the plugin is re-parented (its host died without closing stdin).
fn watch_parent(stop: watch::Sender<bool>) {
    let parent = nix::unistd::getppid();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if nix::unistd::getppid() != parent {
                log(
                    LogLevel::Debug,
                    "the host process died, stopping",
                    Map::new(),
                );
                stop.send_replace(true);
                return;
            }
        }
    });
}

/// A response stream that sends nothing and ends when serving stops.
struct UntilStopped<T> {
    stopped: Pin<Box<dyn Future<Output = ()> + Send>>,
    item: PhantomData<fn() -> T>,
}

impl<T> UntilStopped<T> {
    fn new(stopped: watch::Receiver<bool>) -> Self {
        Self {
            stopped: Box::pin(until_stopped(stopped)),
            item: PhantomData,
        }
    }
}

impl<T> Stream for UntilStopped<T> {
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.stopped.as_mut().poll(cx).map(|()| None)
    }
}

struct HealthService;

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        match request.get_ref().service.as_str() {
            "" | "plugin" => Ok(Response::new(HealthCheckResponse {
                status: ServingStatus::Serving as i32,
            })),
            other => Err(Status::not_found(format!("unknown service {other:?}"))),
        }
    }
}

struct ControllerService {
    stop: watch::Sender<bool>,
}

#[tonic::async_trait]
impl GrpcController for ControllerService {
    async fn shutdown(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        self.stop.send_replace(true);
        Ok(Response::new(Empty {}))
    }
}

/// Nothing is redirected: the stream stays silent until serving stops.
struct StdioService {
    stopped: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl GrpcStdio for StdioService {
    type StreamStdioStream = UntilStopped<StdioData>;

    async fn stream_stdio(
        &self,
        _: Request<()>,
    ) -> Result<Response<Self::StreamStdioStream>, Status> {
        Ok(Response::new(UntilStopped::new(self.stopped.clone())))
    }
}

/// Fleeting needs no callbacks: accept the stream, never send on it.
struct BrokerService {
    stopped: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl GrpcBroker for BrokerService {
    type StartStreamStream = UntilStopped<ConnInfo>;

    async fn start_stream(
        &self,
        request: Request<Streaming<ConnInfo>>,
    ) -> Result<Response<Self::StartStreamStream>, Status> {
        let mut incoming = request.into_inner();
        tokio::spawn(async move { while let Ok(Some(_)) = incoming.message().await {} });
        Ok(Response::new(UntilStopped::new(self.stopped.clone())))
    }
}

struct GroupService<G> {
    group: Arc<G>,
}

#[tonic::async_trait]
impl<G: InstanceGroup> instance_group_server::InstanceGroup for GroupService<G> {
    async fn init(
        &self,
        request: Request<pb::InitRequest>,
    ) -> Result<Response<pb::InitResponse>, Status> {
        let request = request.into_inner();
        let config = if request.config.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&request.config).map_err(|error| {
                Status::invalid_argument(format!("plugin_config is not JSON: {error}"))
            })?
        };
        let settings = wire::connector_from_wire(request.settings.unwrap_or_default())
            .map_err(wire::status)?;
        let info = self
            .group
            .init(&config, settings)
            .await
            .map_err(wire::status)?;
        Ok(Response::new(pb::InitResponse {
            info: Some(wire::info_to_wire(info)),
        }))
    }

    async fn update(
        &self,
        _: Request<pb::UpdateRequest>,
    ) -> Result<Response<pb::UpdateResponse>, Status> {
        let instances = self.group.update().await.map_err(wire::status)?;
        Ok(Response::new(pb::UpdateResponse {
            instances: instances.into_iter().map(wire::instance_to_wire).collect(),
        }))
    }

    async fn increase(
        &self,
        request: Request<pb::IncreaseRequest>,
    ) -> Result<Response<pb::IncreaseResponse>, Status> {
        let partial = self.group.increase(request.get_ref().delta).await;
        Ok(Response::new(pb::IncreaseResponse {
            succeeded: partial.done,
            failure: wire::failure(partial.error),
        }))
    }

    async fn decrease(
        &self,
        request: Request<pb::DecreaseRequest>,
    ) -> Result<Response<pb::DecreaseResponse>, Status> {
        let partial = self.group.decrease(&request.get_ref().instances).await;
        Ok(Response::new(pb::DecreaseResponse {
            succeeded: partial.done,
            failure: wire::failure(partial.error),
        }))
    }

    async fn connect_info(
        &self,
        request: Request<pb::ConnectInfoRequest>,
    ) -> Result<Response<pb::ConnectInfoResponse>, Status> {
        let info = self
            .group
            .connect_info(&request.get_ref().instance)
            .await
            .map_err(wire::status)?;
        Ok(Response::new(wire::connect_info_to_wire(info)))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        self.group
            .heartbeat(&request.get_ref().instance)
            .await
            .map_err(wire::status)?;
        Ok(Response::new(pb::HeartbeatResponse {}))
    }

    async fn shutdown(
        &self,
        _: Request<pb::ShutdownRequest>,
    ) -> Result<Response<pb::ShutdownResponse>, Status> {
        self.group.shutdown().await.map_err(wire::status)?;
        Ok(Response::new(pb::ShutdownResponse {}))
    }

    async fn suspend(
        &self,
        request: Request<pb::SuspendRequest>,
    ) -> Result<Response<pb::SuspendResponse>, Status> {
        let partial = self.group.suspend(&request.get_ref().instances).await;
        Ok(Response::new(pb::SuspendResponse {
            succeeded: partial.done,
            failure: wire::failure(partial.error),
        }))
    }

    async fn resume(
        &self,
        request: Request<pb::ResumeRequest>,
    ) -> Result<Response<pb::ResumeResponse>, Status> {
        let partial = self.group.resume(&request.get_ref().instances).await;
        Ok(Response::new(pb::ResumeResponse {
            succeeded: partial.done,
            failure: wire::failure(partial.error),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_common_version_wins_and_no_common_one_gives_the_lowest_served() {
        assert_eq!(negotiate(Some("1")), 1);
        assert_eq!(negotiate(Some(" 1 , 2")), 1);
        assert_eq!(negotiate(Some("7,8")), 1);
        assert_eq!(negotiate(None), 1);
    }
}
