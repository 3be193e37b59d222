//! The Docker executor: each job in containers of the image it names, with its services
//! on a network of its own, on the local Docker engine (Docker Engine API through
//! `bollard`).
//!
//! # No helper image
//!
//! gitlab-runner's Docker executor starts a *helper* container (its own image, pulled
//! on first use) for every stage that is not the user's script: cloning, cache,
//! artifacts. Gantry does those on the host, in the job's build directory, exactly as
//! the shell executor does, and bind-mounts the slot directory holding it into the job's
//! containers at `/builds`, where gitlab-runner's Docker executor keeps its builds. So
//! the job sees `CI_BUILDS_DIR=/builds` and `CI_PROJECT_DIR=/builds/<project path>`
//! ([`crate::dirs::BuildDirs::in_container`]): no helper image to pull, no helper
//! container to create, start and remove per stage.
//!
//! ```text
//! host                                         container
//! <builds_dir>/<short token>/<concurrent id>/  ─bind─►  /builds/
//!    <project>        (git on the host)                    <project>      $CI_PROJECT_DIR
//!    <project>.tmp    file variables, archives in transit  <project>.tmp
//! <cache_dir>/                                 ─bind─►  <cache_dir>/
//! ```
//!
//! # A job
//!
//! * `prepare_executor`: the image (the job's `image:`, else `[runners.docker] image`)
//!   is checked against `allowed_images` and fetched per the pull policies
//!   ([`policy`]); with services, a network `gantry-<token>-<job>-<nonce>` is created
//!   and each service is started on it with its aliases ([`names::service_aliases`])
//!   and waited for (`services`); the job's build container joins it as `build`, as
//!   with gitlab-runner's network per build, so services can reach the job.
//! * `get_sources` (on the host): the checkout then gets the modes umask 0000 gives, as
//!   gitlab-runner's helper makes it (files 666, directories and executables 777), so any
//!   user of the image can write it (`umask`).
//! * every stage (hooks, `step_script`, `after_script`): the job's build container,
//!   made from the image for the first stage and started again for each later one (as
//!   gitlab-runner reuses it: what `step_script` leaves in `/tmp` is there for
//!   `after_script`), the script sent on its standard input and run by the image's bash
//!   (else sh), as the image's user unless `image:docker:user` or `[runners.docker]
//!   user` say otherwise; its exit code is the stage's. The job's variables are the
//!   container's environment as well, so the image's entrypoint sees them (those that
//!   hold the job token excepted: they would show in `docker inspect`). A timeout or
//!   cancellation sends SIGTERM to every process of the container, then SIGKILL after
//!   the grace period (`job`). Under `gantry runner run` (a job record kept) the
//!   script stages run detached: their output and exit code go to files in the build
//!   directory, so a runner killed or restarted leaves the container running and the
//!   next runner process takes the job over in it (`job::detached`).
//! * the end (also after an error, a timeout, a cancellation): every container, network
//!   and volume of the job is removed, found by its `com.gantry.job.instance` label.
//!
//! Everything created carries the labels of [`names`] (`com.gantry.runner=<short
//! token>`, `com.gantry.job=<id>`); [`remove_leftovers`] removes what a crashed
//! runner left behind when its poll loop starts, except the containers of the jobs it
//! takes over (recorded in their job records, [`crate::journal::DockerRecord`]).

pub mod auth;
mod client;
mod error;
mod image;
mod job;
mod leftovers;
pub mod names;
pub mod policy;
mod services;
mod stats;
mod umask;

pub use client::{
    EngineRoute, connect, connect_through, connect_to, docker_available, docker_available_at,
    docker_host,
};
pub use error::DockerError;
pub use leftovers::{Removed, container_exists, remove_instance, remove_leftovers};

pub(crate) use job::{DockerExecutor, DockerJobSpec};
pub(crate) use umask::share_owner_bits;

use std::sync::Arc;

use crate::config::{DockerConfig, RunnerConfig};
use crate::executor::Executor;
use crate::executor::prepare::{Preparation, PrepareError, Prepared};
use crate::journal::RunningJob;
use crate::trace::Trace;

/// The Docker executor of a new job: connect, check the job's images against the
/// configuration, pull, start services, with the slot directory bound at `/builds` (the
/// job sees gitlab-runner's Docker paths, see [`crate::dirs::BuildDirs::in_container`])
/// and the local cache at its own path. What was made before a failure is removed at
/// the end (the executor is kept).
pub(crate) async fn prepare(prep: &Preparation<'_>) -> Prepared {
    let default_config = DockerConfig::default();
    let config = prep.runner.docker.as_ref().unwrap_or(&default_config);
    let short = prep.short_token();
    let connected = prep
        .guarded(async {
            DockerExecutor::connect(config.host.as_deref(), &short, prep.job.id, prep.kill_grace)
                .await
                .map_err(PrepareError::from)
        })
        .await;
    let mut docker = match connected {
        Ok(docker) => docker,
        Err(error) => return Prepared::failed(error),
    };
    let binds = match local_binds(prep) {
        Ok(binds) => binds,
        Err(error) => return Prepared::failed(error),
    };
    // Recorded before anything is made, when a restarted runner could take the job
    // over: its script stages then run detached (`job/detached.rs`).
    docker.detach_in(
        &prep.dirs.tmp_dir,
        &prep.dirs.seen.tmp_dir,
        prep.resumable(),
    );
    let result = prepare_containers(&mut docker, prep, config, binds).await;
    Prepared::made(Executor::Docker(Box::new(docker)), result)
}

/// `host:container` binds of the slot directory (at `/builds`) and the local cache (at
/// its own path), both made here first.
fn local_binds(prep: &Preparation<'_>) -> Result<Vec<String>, PrepareError> {
    let failed = PrepareError::System;
    let mut binds = Vec::new();
    for (dir, seen) in [
        (
            prep.dirs.slot_dir(),
            Some(prep.dirs.seen.builds_dir.clone()),
        ),
        (prep.cache_dir.to_owned(), None),
    ] {
        std::fs::create_dir_all(&dir)
            .map_err(|e| failed(format!("create `{}`: {e}", dir.display())))?;
        let dir = std::path::absolute(&dir)
            .map_err(|e| failed(format!("resolve `{}`: {e}", dir.display())))?;
        let seen = seen.unwrap_or_else(|| dir.clone());
        binds.push(format!(
            "{}:{}",
            dir.to_string_lossy(),
            seen.to_string_lossy()
        ));
    }
    Ok(binds)
}

/// The Docker executor's preparation (images, network, volumes, services) of the job
/// on `docker`'s engine, with the build directories bound as `binds`.
pub(crate) async fn prepare_containers(
    docker: &mut DockerExecutor,
    prep: &Preparation<'_>,
    config: &DockerConfig,
    binds: Vec<String>,
) -> Result<(), PrepareError> {
    let spec = DockerJobSpec {
        config,
        job: prep.job,
        variables: prep.variables,
        binds,
    };
    prep.guarded(async {
        docker
            .prepare(&spec, prep.trace)
            .await
            .map_err(PrepareError::from)
    })
    .await
}

/// The Docker executor of a job taken over: its containers as the job's record names
/// them.
pub(crate) async fn resume(prep: &Preparation<'_>) -> Prepared {
    let Some(record) = prep.journal.and_then(|job| job.docker()) else {
        return Prepared::failed(PrepareError::System(
            "the Docker containers of this job were not recorded".to_owned(),
        ));
    };
    let host = prep.runner.docker.as_ref().and_then(|d| d.host.clone());
    let short = prep.short_token();
    let resumed = DockerExecutor::resume(
        host.as_deref(),
        (&short, prep.job.id),
        prep.kill_grace,
        &record,
    )
    .await;
    match resumed {
        Ok(mut docker) => {
            docker.detach_in(
                &prep.dirs.tmp_dir,
                &prep.dirs.seen.tmp_dir,
                prep.resumable(),
            );
            Prepared::ready(Executor::Docker(Box::new(docker)))
        }
        Err(error) => Prepared::failed(PrepareError::System(error.to_string())),
    }
}

/// Removes what a Docker job's first start had made (a job taken over before its
/// script starts again from the beginning), and forgets it in the job's record.
pub(crate) async fn forget_first_start(
    runner: &RunnerConfig,
    journal: Option<&Arc<RunningJob>>,
    trace: &Trace,
) {
    let Some(job) = journal else {
        return;
    };
    let Some(docker) = job.docker() else {
        return;
    };
    let host = runner.docker.as_ref().and_then(|d| d.host.clone());
    if let Err(error) = remove_instance(host.as_deref(), &docker.instance).await {
        trace.warning(&format!(
            "remove the containers of the first start: failed to {error}"
        ));
    }
    job.docker_made(None);
}
