//! Services: one container per `services:` entry on the job's network, reachable by
//! its aliases, and the wait for their ports before the job's script.
//!
//! The wait connects from the runner to each TCP port the service's image exposes (and
//! each `ports:` number of the job), on the service's address in the job's network:
//! no helper container, as the engine is on this machine. Like gitlab-runner, a
//! service that does not answer in `wait_for_services_timeout` is a warning with its
//! last log lines, not a failed job (images often expose ports they do not open, e.g.
//! `docker:dind`'s 2375); a service that exits during the wait is reported the same
//! way at once.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, EndpointSettings, HostConfig, NetworkingConfig};
use bollard::query_parameters::{CreateContainerOptions, LogsOptions};
use futures_util::StreamExt;
use gantry_protocol::Service;
use tokio::time::Instant;

use super::error::{DockerError, describe};
use super::names::{LABEL_ROLE, sanitize};
use crate::trace::Trace;

/// A service ready to be started.
pub(crate) struct ServicePlan<'a> {
    /// The payload's entry.
    pub service: &'a Service,
    /// Its image name, variables expanded.
    pub image: String,
    /// Network aliases: the job's `alias` list, then the name-derived ones.
    pub aliases: Vec<String>,
    /// Environment: the job's variables, then the service's.
    pub env: Vec<String>,
    /// TCP ports to wait for (filled once the image is known).
    pub ports: Vec<u16>,
}

/// A started service.
pub(crate) struct StartedService {
    pub image: String,
    pub aliases: Vec<String>,
    pub id: String,
    pub ports: Vec<u16>,
}

/// Where a service runs.
pub(crate) struct ServiceTarget<'a> {
    pub labels: &'a HashMap<String, String>,
    pub name: String,
    /// The job's network (with aliases), or `network_mode` from the configuration.
    pub network: Option<&'a str>,
    pub network_mode: Option<&'a str>,
    pub host_config: &'a HostConfig,
    pub platform: Option<&'a str>,
}

/// TCP ports an image exposes (`"5432/tcp"`).
pub(crate) fn exposed_tcp_ports(exposed: Option<&Vec<String>>) -> Vec<u16> {
    exposed
        .into_iter()
        .flatten()
        .filter_map(|port| {
            let (number, protocol) = port.split_once('/').unwrap_or((port, "tcp"));
            (protocol == "tcp").then(|| number.parse().ok()).flatten()
        })
        .collect()
}

pub(crate) async fn start_service(
    docker: &Docker,
    plan: &ServicePlan<'_>,
    target: &ServiceTarget<'_>,
    trace: &Trace,
) -> Result<StartedService, DockerError> {
    trace.runner_line(&format!(
        "Starting service {} ...{}",
        plan.image,
        if plan.aliases.is_empty() {
            String::new()
        } else {
            format!(" (aliases: {})", plan.aliases.join(", "))
        }
    ));
    let mut labels = target.labels.clone();
    labels.insert(LABEL_ROLE.to_owned(), "service".to_owned());
    let mut host_config = target.host_config.clone();
    host_config.binds = None;
    host_config.network_mode = target.network.or(target.network_mode).map(str::to_owned);
    let networking_config = target.network.map(|network| NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            network.to_owned(),
            EndpointSettings {
                aliases: Some(plan.aliases.clone()),
                ..EndpointSettings::default()
            },
        )])),
    });
    let body = ContainerCreateBody {
        image: Some(plan.image.clone()),
        entrypoint: plan.service.entrypoint.clone(),
        cmd: plan.service.command.clone(),
        env: Some(plan.env.clone()),
        labels: Some(labels),
        host_config: Some(host_config),
        networking_config,
        ..ContainerCreateBody::default()
    };
    let action = format!("start service {}", plan.image);
    let options = CreateContainerOptions {
        name: Some(sanitize(&target.name)),
        platform: target.platform.unwrap_or_default().to_owned(),
    };
    let created = docker
        .create_container(Some(options), body)
        .await
        .map_err(|error| DockerError::api(&action, &error))?;
    docker
        .start_container(&created.id, None)
        .await
        .map_err(|error| DockerError::api(&action, &error))?;
    Ok(StartedService {
        image: plan.image.clone(),
        aliases: plan.aliases.clone(),
        id: created.id,
        ports: plan.ports.clone(),
    })
}

/// Waits for every service's ports; writes a warning per service that did not come up.
pub(crate) async fn wait_for_services(
    docker: &Docker,
    services: &[StartedService],
    network: Option<&str>,
    timeout: Duration,
    trace: &Trace,
) {
    if services.iter().all(|s| s.ports.is_empty()) {
        return;
    }
    trace.runner_line(&format!(
        "Waiting for services to be up and running (timeout {} seconds)...",
        timeout.as_secs()
    ));
    let deadline = Instant::now() + timeout;
    let waits = services
        .iter()
        .map(|service| wait_for(docker, service, network, deadline, timeout));
    let results = futures_util::future::join_all(waits).await;
    for (service, result) in services.iter().zip(results) {
        if let Err(problem) = result {
            let logs = tail_logs(docker, &service.id).await;
            trace.warning(&format!(
                "Service {} probably didn't start properly.\n\nHealth check error:\n{problem}\n\nService container logs:\n{logs}",
                service.image
            ));
        }
    }
}

async fn wait_for(
    docker: &Docker,
    service: &StartedService,
    network: Option<&str>,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), String> {
    if service.ports.is_empty() {
        return Ok(());
    }
    let mut address = None;
    let mut last_state_check = Instant::now() - Duration::from_secs(1);
    let mut pending = service.ports.clone();
    while !pending.is_empty() {
        if last_state_check.elapsed() >= Duration::from_millis(500) || address.is_none() {
            last_state_check = Instant::now();
            let inspect = docker
                .inspect_container(&service.id, None)
                .await
                .map_err(|error| describe(&error))?;
            if let Some(state) = &inspect.state
                && state.running != Some(true)
            {
                return Err(format!(
                    "the service container exited with code {} before its port{} {} answered",
                    state.exit_code.unwrap_or(-1),
                    if pending.len() == 1 { "" } else { "s" },
                    join(&pending)
                ));
            }
            let networks = inspect
                .network_settings
                .and_then(|n| n.networks)
                .unwrap_or_default();
            let ip = network
                .and_then(|n| networks.get(n))
                .and_then(|e| e.ip_address.clone())
                .filter(|ip| !ip.is_empty())
                .or_else(|| {
                    networks
                        .values()
                        .filter_map(|e| e.ip_address.clone())
                        .find(|ip| !ip.is_empty())
                });
            address = Some(ip.unwrap_or_else(|| "127.0.0.1".to_owned()));
        }
        let ip = address.clone().unwrap_or_else(|| "127.0.0.1".to_owned());
        let port = pending[0];
        let attempt = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect((ip.as_str(), port)),
        )
        .await;
        if matches!(attempt, Ok(Ok(_))) {
            pending.remove(0);
            continue;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "service {:?} did not answer on port{} {} within {} seconds (wait_for_services_timeout)",
                service.aliases.first().unwrap_or(&service.image),
                if pending.len() == 1 { "" } else { "s" },
                join(&pending),
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn join(ports: &[u16]) -> String {
    ports
        .iter()
        .map(|p| format!("{p}/tcp"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn tail_logs(docker: &Docker, id: &str) -> String {
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        tail: "20".to_owned(),
        ..LogsOptions::default()
    };
    let mut stream = docker.logs(id, Some(options));
    let mut text = String::new();
    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&chunk.to_string());
    }
    if text.trim().is_empty() {
        "(no output)".to_owned()
    } else {
        text.trim_end().to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tcp_ports_are_waited_for() {
        let exposed = vec!["80/tcp".to_owned(), "53/udp".to_owned(), "8080".to_owned()];
        assert_eq!(exposed_tcp_ports(Some(&exposed)), [80, 8080]);
    }
}
