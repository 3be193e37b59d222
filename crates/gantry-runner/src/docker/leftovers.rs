//! Removing what the executor created, found by label: at the end of every job (its
//! instance label) and when a runner starts (its runner label: what a crashed runner
//! left behind).

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions,
};

use super::client::connect;
use super::error::{DockerError, describe};
use super::names::LABEL_RUNNER;

/// What was removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    /// Containers (running ones were killed).
    pub containers: usize,
    /// Networks.
    pub networks: usize,
    /// Volumes.
    pub volumes: usize,
    /// What could not be removed, and why.
    pub failures: Vec<String>,
}

impl Removed {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.containers == 0 && self.networks == 0 && self.volumes == 0 && self.failures.is_empty()
    }
}

/// Removes every container, network and volume labelled
/// `com.gantry.runner=<short_token>`: call it before a runner takes jobs, when no job
/// of that runner can be running.
pub async fn remove_leftovers(
    host: Option<&str>,
    short_token: &str,
) -> Result<Removed, DockerError> {
    let docker = match host {
        Some(host) => super::client::connect_to(host).await?,
        None => connect().await?,
    };
    remove_labelled(&docker, LABEL_RUNNER, short_token).await
}

/// Removes everything labelled `key=value`: containers first (killed, with their
/// anonymous volumes), then networks, then volumes.
pub(crate) async fn remove_labelled(
    docker: &Docker,
    key: &str,
    value: &str,
) -> Result<Removed, DockerError> {
    let filters = HashMap::from([("label".to_owned(), vec![format!("{key}={value}")])]);
    let mut removed = Removed::default();
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..ListContainersOptions::default()
        }))
        .await
        .map_err(|error| {
            DockerError::api(
                format!("list the containers labelled {key}={value}"),
                &error,
            )
        })?;
    let removals = containers
        .iter()
        .filter_map(|c| c.id.as_deref())
        .map(|id| async move {
            let options = RemoveContainerOptions {
                force: true,
                v: true,
                ..RemoveContainerOptions::default()
            };
            (id, docker.remove_container(id, Some(options)).await)
        });
    for (id, result) in futures_util::future::join_all(removals).await {
        match result {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                removed.containers += 1;
            }
            Err(error) => removed
                .failures
                .push(format!("remove container {id}: {}", describe(&error))),
        }
    }
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters.clone()),
        }))
        .await
        .map_err(|error| {
            DockerError::api(format!("list the networks labelled {key}={value}"), &error)
        })?;
    for network in networks {
        let Some(id) = network.id.as_deref() else {
            continue;
        };
        match docker.remove_network(id).await {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                removed.networks += 1;
            }
            Err(error) => removed
                .failures
                .push(format!("remove network {id}: {}", describe(&error))),
        }
    }
    let volumes = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(filters),
        }))
        .await
        .map_err(|error| {
            DockerError::api(format!("list the volumes labelled {key}={value}"), &error)
        })?;
    for volume in volumes.volumes.into_iter().flatten() {
        match docker
            .remove_volume(&volume.name, Some(RemoveVolumeOptions { force: true }))
            .await
        {
            Ok(())
            | Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {
                removed.volumes += 1;
            }
            Err(error) => removed.failures.push(format!(
                "remove volume {}: {}",
                volume.name,
                describe(&error)
            )),
        }
    }
    Ok(removed)
}
