//! Removing what the executor created, found by label: at the end of every job (its
//! instance label) and when a runner starts (its runner label: what a crashed runner
//! left behind, except the jobs the new runner process takes over).

use std::collections::HashMap;

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions,
};

use super::client::connect;
use super::error::{DockerError, describe};
use super::names::{LABEL_INSTANCE, LABEL_JOB, LABEL_RUNNER};

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
/// `com.gantry.runner=<short_token>`, except those of the jobs in `kept` (their
/// `com.gantry.job` label: jobs this runner process took over, see
/// [`crate::journal`]): call it before a runner takes jobs, when no other job of that
/// runner can be running.
pub async fn remove_leftovers(
    host: Option<&str>,
    short_token: &str,
    kept: &[i64],
) -> Result<Removed, DockerError> {
    let docker = engine(host).await?;
    let kept: Vec<String> = kept.iter().map(ToString::to_string).collect();
    let keep = |labels: Option<&HashMap<String, String>>| {
        labels
            .and_then(|l| l.get(LABEL_JOB))
            .is_some_and(|job| kept.contains(job))
    };
    remove_labelled_but(&docker, (LABEL_RUNNER, short_token), &keep).await
}

/// Removes everything one run of a job made (its `com.gantry.job.instance` label).
pub async fn remove_instance(host: Option<&str>, instance: &str) -> Result<Removed, DockerError> {
    let docker = engine(host).await?;
    remove_labelled(&docker, LABEL_INSTANCE, instance).await
}

/// Whether the container `id` exists (running or not).
pub async fn container_exists(host: Option<&str>, id: &str) -> Result<bool, DockerError> {
    let docker = engine(host).await?;
    match docker.inspect_container(id, None).await {
        Ok(_) => Ok(true),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(false),
        Err(error) => Err(DockerError::api(
            format!("inspect the container {id}"),
            &error,
        )),
    }
}

/// The engine at `host` (`None`: `DOCKER_HOST`, else the default socket).
async fn engine(host: Option<&str>) -> Result<Docker, DockerError> {
    match host {
        Some(host) => super::client::connect_to(host).await,
        None => connect().await,
    }
}

/// Removes everything labelled `key=value`: containers first (killed, with their
/// anonymous volumes), then networks, then volumes.
pub(crate) async fn remove_labelled(
    docker: &Docker,
    key: &str,
    value: &str,
) -> Result<Removed, DockerError> {
    remove_labelled_but(docker, (key, value), &|_| false).await
}

/// Whether an object is kept, by its labels.
type Keep<'a> = dyn Fn(Option<&HashMap<String, String>>) -> bool + Sync + 'a;

/// [`remove_labelled`], leaving what `keep` says to keep (by its labels).
async fn remove_labelled_but(
    docker: &Docker,
    (key, value): (&str, &str),
    keep: &Keep<'_>,
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
        .filter(|c| !keep(c.labels.as_ref()))
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
    for network in networks.iter().filter(|n| !keep(n.labels.as_ref())) {
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
    let volumes = volumes.volumes.into_iter().flatten();
    for volume in volumes.filter(|v| !keep(Some(&v.labels))) {
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
