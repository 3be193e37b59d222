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
    let docker =
        Docker::connect_with_host(host).map_err(|error| unavailable(host, &describe(&error)))?;
    let docker = docker
        .with_timeout(CONNECT_TIMEOUT)
        .negotiate_version()
        .await
        .map_err(|error| unavailable(host, &describe(&error)))?;
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

fn unavailable(host: &str, reason: &str) -> DockerError {
    let lower = reason.to_ascii_lowercase();
    let hint = if lower.contains("no such file") || lower.contains("socket not found") {
        "is Docker installed and its engine running? (`systemctl start docker`), or point DOCKER_HOST at an engine"
    } else if lower.contains("permission denied") {
        "this user may not use the Docker socket: add it to the `docker` group, or run the runner as root"
    } else if lower.contains("connection refused") {
        "nothing listens there: start the Docker engine (`systemctl start docker`), or fix DOCKER_HOST"
    } else if lower.contains("scheme") {
        "gantry-runner speaks to unix:// and tcp:// engines; set DOCKER_HOST to one of those"
    } else if lower.contains("timeout") {
        "the engine did not answer in time; check `docker info`"
    } else {
        "check that `docker info` works for this user"
    };
    DockerError::Unavailable {
        host: host.to_owned(),
        reason: reason.to_owned(),
        hint: hint.to_owned(),
    }
}
