//! Reaching the engine: `DOCKER_HOST` (unix or tcp) or the default socket, with the API
//! version negotiated down to the engine's.

use std::time::Duration;

use bollard::Docker;

use super::error::{DockerError, describe};

/// How long the first request (the version check) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long any later request may take to be answered (streams — output, waiting,
/// pulls — run longer: only their first answer counts).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// `DOCKER_HOST`, else the default socket.
pub fn docker_host() -> String {
    std::env::var("DOCKER_HOST")
        .ok()
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned())
}

/// Connects to the engine of `DOCKER_HOST` (default `unix:///var/run/docker.sock`)
/// and negotiates the API version; fails with a message that says why and what to do.
pub async fn connect() -> Result<Docker, DockerError> {
    connect_to(&docker_host()).await
}

/// Connects to the engine at `host` (`unix:///path` or `tcp://host:port`).
pub async fn connect_to(host: &str) -> Result<Docker, DockerError> {
    let docker = Docker::connect_with_host(host).map_err(|error| unavailable(host, &error))?;
    let docker = docker
        .with_timeout(CONNECT_TIMEOUT)
        .negotiate_version()
        .await
        .map_err(|error| unavailable(host, &error))?;
    Ok(docker.with_timeout(REQUEST_TIMEOUT))
}

/// `Ok` when a Docker engine answers at `DOCKER_HOST` or the default socket (what
/// `gantry run --executor auto` checks); otherwise the error says why not (no socket,
/// permission denied, not running, unsupported `DOCKER_HOST`) and what to do.
pub async fn docker_available() -> Result<(), DockerError> {
    docker_available_at(&docker_host()).await
}

/// [`docker_available`] for the engine at `host`.
pub async fn docker_available_at(host: &str) -> Result<(), DockerError> {
    let docker = connect_to(host).await?;
    docker
        .ping()
        .await
        .map_err(|error| DockerError::Unavailable {
            host: host.to_owned(),
            reason: describe(&error),
            hint: "the engine answered the version check but not a ping; check `docker info`"
                .to_owned(),
        })?;
    Ok(())
}

/// The engine at `host` could not be reached because of `error`: its text, and a hint
/// chosen from what failed (the error's kind, or an I/O error's in its chain).
fn unavailable(host: &str, error: &bollard::errors::Error) -> DockerError {
    DockerError::Unavailable {
        host: host.to_owned(),
        reason: describe(error),
        hint: Unreachable::of(error).hint().to_owned(),
    }
}

/// Why an engine could not be reached, as far as the error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreachable {
    NoSocket,
    NotPermitted,
    NothingListens,
    UnsupportedScheme,
    TimedOut,
    Unknown,
}

impl Unreachable {
    fn of(error: &bollard::errors::Error) -> Self {
        use bollard::errors::Error as E;
        match error {
            E::SocketNotFoundError(_) => return Self::NoSocket,
            E::UnsupportedURISchemeError { .. } => return Self::UnsupportedScheme,
            E::RequestTimeoutError => return Self::TimedOut,
            // Transparent: its `source()` skips the I/O error itself.
            E::IOError { err } => return Self::of_io(err).unwrap_or(Self::Unknown),
            _ => {}
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(cause) = source {
            if let Some(kind) = cause.downcast_ref::<std::io::Error>().and_then(Self::of_io) {
                return kind;
            }
            source = cause.source();
        }
        Self::Unknown
    }

    fn of_io(error: &std::io::Error) -> Option<Self> {
        match error.kind() {
            std::io::ErrorKind::NotFound => Some(Self::NoSocket),
            std::io::ErrorKind::PermissionDenied => Some(Self::NotPermitted),
            std::io::ErrorKind::ConnectionRefused => Some(Self::NothingListens),
            std::io::ErrorKind::TimedOut => Some(Self::TimedOut),
            _ => None,
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Self::NoSocket => {
                "is Docker installed and its engine running? (`systemctl start docker`), or point DOCKER_HOST at an engine"
            }
            Self::NotPermitted => {
                "this user may not use the Docker socket: add it to the `docker` group, or run the runner as root"
            }
            Self::NothingListens => {
                "nothing listens there: start the Docker engine (`systemctl start docker`), or fix DOCKER_HOST"
            }
            Self::UnsupportedScheme => {
                "gantry-runner speaks to unix:// and tcp:// engines; set DOCKER_HOST to one of those"
            }
            Self::TimedOut => "the engine did not answer in time; check `docker info`",
            Self::Unknown => "check that `docker info` works for this user",
        }
    }
}

/// How the docker-autoscaler executor reaches an instance's engine through the SSH
/// session (spec `fleet.md` §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineRoute {
    /// Run this command on the instance (`docker system dial-stdio`, or `docker -H
    /// <host> system dial-stdio`) and speak the API over its standard input and output:
    /// gitlab-runner's default (`FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO`).
    DialStdio(String),
    /// Forward to the engine's Unix socket on the instance.
    Socket(String),
}

impl EngineRoute {
    /// The route for `[runners.docker] host` (`None`: the instance's default engine),
    /// with `dial_stdio` as the feature flag says. Without dial-stdio only a Unix socket
    /// can be forwarded: a `tcp://` host is still reached through `docker -H`.
    pub fn new(host: Option<&str>, dial_stdio: bool) -> Self {
        let host = host.map(str::trim).filter(|h| !h.is_empty());
        if !dial_stdio {
            match host {
                None => return Self::Socket("/var/run/docker.sock".to_owned()),
                Some(host) => {
                    if let Some(path) = host.strip_prefix("unix://") {
                        return Self::Socket(path.to_owned());
                    }
                }
            }
        }
        Self::DialStdio(match host {
            Some(host) => format!(
                "docker -H {} system dial-stdio",
                crate::executor::quote(host)
            ),
            None => "docker system dial-stdio".to_owned(),
        })
    }

    fn describe(&self) -> String {
        match self {
            Self::DialStdio(command) => format!("`{command}` over SSH"),
            Self::Socket(path) => format!("unix://{path} over SSH"),
        }
    }
}

/// The placeholder address gitlab-runner's client uses for a tunnelled engine.
const TUNNEL_ADDRESS: &str = "http://internal.tunnel.invalid";

/// Connects to the engine on an instance through `session`: every HTTP connection the
/// client opens is a new channel of the session (a `dial-stdio` process, or a socket
/// forward), kept for reuse while idle. The API version is negotiated as for a local
/// engine.
pub async fn connect_through(
    session: &gantry_fleet::connector::Session,
    route: &EngineRoute,
) -> Result<Docker, DockerError> {
    let connector = TunnelConnector {
        session: session.clone(),
        route: std::sync::Arc::new(route.clone()),
    };
    let client = std::sync::Arc::new(
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(connector),
    );
    let host = format!("{} on instance {}", route.describe(), session.instance_id());
    let docker = Docker::connect_with_custom_transport(
        move |request: bollard::BollardRequest| {
            let client = std::sync::Arc::clone(&client);
            async move {
                client
                    .request(request)
                    .await
                    .map_err(bollard::errors::Error::from)
            }
        },
        Some(TUNNEL_ADDRESS),
        REQUEST_TIMEOUT.as_secs(),
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|error| tunnel_unavailable(&host, &describe(&error)))?;
    let docker = docker
        .with_timeout(CONNECT_TIMEOUT)
        .negotiate_version()
        .await
        .map_err(|error| tunnel_unavailable(&host, &describe(&error)))?;
    Ok(docker.with_timeout(REQUEST_TIMEOUT))
}

fn tunnel_unavailable(host: &str, reason: &str) -> DockerError {
    DockerError::Unavailable {
        host: host.to_owned(),
        reason: reason.to_owned(),
        hint: "the instance's image needs Docker Engine installed and running, with the docker CLI on PATH, and the connector's user allowed to use it (a member of the `docker` group)".to_owned(),
    }
}

/// Opens channels to the engine for the HTTP client (a `tower` connector).
#[derive(Clone)]
struct TunnelConnector {
    session: gantry_fleet::connector::Session,
    route: std::sync::Arc<EngineRoute>,
}

type Dialing = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<
                    hyper_util::rt::TokioIo<gantry_fleet::connector::Tunnel>,
                    std::io::Error,
                >,
            > + Send,
    >,
>;

impl tower::Service<http::Uri> for TunnelConnector {
    type Response = hyper_util::rt::TokioIo<gantry_fleet::connector::Tunnel>;
    type Error = std::io::Error;
    type Future = Dialing;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let session = self.session.clone();
        let route = std::sync::Arc::clone(&self.route);
        Box::pin(async move {
            let tunnel = match &*route {
                EngineRoute::DialStdio(command) => session.dial_run(command).await,
                EngineRoute::Socket(path) => session.dial_unix(path).await,
            }
            .map_err(std::io::Error::other)?;
            Ok(hyper_util::rt::TokioIo::new(tunnel))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_follows_what_failed_not_the_message() {
        use bollard::errors::Error as E;
        use std::io::{Error, ErrorKind};
        let io = |kind: ErrorKind| E::IOError {
            err: Error::new(kind, "some words"),
        };
        assert_eq!(
            Unreachable::of(&io(ErrorKind::NotFound)),
            Unreachable::NoSocket
        );
        assert_eq!(
            Unreachable::of(&io(ErrorKind::PermissionDenied)),
            Unreachable::NotPermitted
        );
        assert_eq!(
            Unreachable::of(&io(ErrorKind::ConnectionRefused)),
            Unreachable::NothingListens
        );
        assert_eq!(Unreachable::of(&io(ErrorKind::Other)), Unreachable::Unknown);
        assert_eq!(
            Unreachable::of(&E::SocketNotFoundError("/x".to_owned())),
            Unreachable::NoSocket
        );
        assert_eq!(
            Unreachable::of(&E::RequestTimeoutError),
            Unreachable::TimedOut
        );
        // A message that merely mentions a reason does not choose the hint.
        let server = E::DockerResponseServerError {
            status_code: 500,
            message: "permission denied".to_owned(),
        };
        assert_eq!(Unreachable::of(&server), Unreachable::Unknown);
    }

    #[test]
    fn routes_follow_gitlab_runner() {
        assert_eq!(
            EngineRoute::new(None, true),
            EngineRoute::DialStdio("docker system dial-stdio".to_owned())
        );
        assert_eq!(
            EngineRoute::new(Some("tcp://10.0.0.2:2375"), true),
            EngineRoute::DialStdio("docker -H tcp://10.0.0.2:2375 system dial-stdio".to_owned())
        );
        assert_eq!(
            EngineRoute::new(None, false),
            EngineRoute::Socket("/var/run/docker.sock".to_owned())
        );
        assert_eq!(
            EngineRoute::new(Some("unix:///run/user/1000/docker.sock"), false),
            EngineRoute::Socket("/run/user/1000/docker.sock".to_owned())
        );
        assert_eq!(
            EngineRoute::new(Some("tcp://10.0.0.2:2375"), false),
            EngineRoute::DialStdio("docker -H tcp://10.0.0.2:2375 system dial-stdio".to_owned())
        );
    }
}
