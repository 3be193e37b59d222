//! The docker-autoscaler executor: the Docker executor ([`crate::docker`]) on the engine
//! of an instance of the entry's fleet ([`crate::fleet`], `[runners.autoscaler]`), as
//! gitlab-runner's `docker-autoscaler` does (spec `fleet.md` §5.1). Every
//! `[runners.docker]` key applies; the job's image is the containers' image, not the
//! instance's.
//!
//! * `prepare_executor`: a slot is acquired and an SSH session opened exactly as for the
//!   instance executor ([`crate::instance`]). The Docker Engine API goes through that
//!   session: each HTTP connection of the client is `docker system dial-stdio` run on the
//!   instance (`docker -H <host> …` with `[runners.docker] host`), or — with the job
//!   variable `FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO=false` — a forward to the engine's
//!   Unix socket. The instance needs Docker Engine and its CLI, and the connector's user
//!   must be allowed to use the engine; it needs no gitlab-runner and no Gantry.
//! * Directories: the job sees gitlab-runner's Docker paths (`/builds/<project path>`).
//!   As with every executor, the runner fetches sources, restores and saves cache and
//!   moves artifacts on this machine; the slot directory travels to the instance's
//!   `$HOME/builds/<short token>/<concurrent id>` before the first stage and back
//!   before the runner's next step that reads it ([`RemoteSlot`]), and is bind-mounted
//!   from there into the job's containers at `/builds`.
//! * Stages, services, networks, volumes, pull policies, timeouts and cancellation are
//!   the Docker executor's, on the instance's engine. An instance that disappears under
//!   the job fails it as a system failure.
//! * The end: the job's containers, networks and volumes are removed from the
//!   instance's engine (by label), then the slot directory; the session closes and the
//!   slot is released (with `max_use_count`, the instance may then be removed).
//!
//! Not done (gitlab-runner's remaining docker-autoscaler keys): per-slot cgroups
//! (`use_slot_cgroups`), WinRM instances, and removing leftovers of a crashed runner from
//! instances' engines (the fleet removes instances it finds at start unless
//! `state_storage` keeps them).

use std::future::Future;

use gantry_fleet::taskscaler::Acquisition;

use crate::docker::DockerExecutor;
use crate::instance::{InstanceError, RemoteSlot};
use crate::shell::{CancelReason, Stage, StageOutcome};
use crate::trace::Trace;

/// A prepared docker-autoscaler executor (see the module docs).
pub(crate) struct DockerAutoscalerExecutor {
    docker: DockerExecutor,
    slot: RemoteSlot,
    acquisition: Acquisition,
}

impl DockerAutoscalerExecutor {
    /// The Docker executor `docker` (connected through the slot's session, prepared)
    /// on the acquired instance.
    pub(crate) fn new(docker: DockerExecutor, slot: RemoteSlot, acquisition: Acquisition) -> Self {
        Self {
            docker,
            slot,
            acquisition,
        }
    }

    /// Copies the slot directory back here when the instance has the newer copy.
    pub(crate) async fn to_host(&self) -> Result<(), InstanceError> {
        self.slot.to_host().await
    }

    /// Runs `stage` in the job's build container on the instance's engine, after the
    /// slot directory is there.
    pub(crate) async fn run(
        &self,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        if let Err(error) = self.slot.to_instance().await {
            return StageOutcome::SystemFailure {
                error: error.into(),
            };
        }
        tokio::select! {
            outcome = self.docker.run(stage, trace, cancel) => outcome,
            reason = self.acquisition.lost() => StageOutcome::SystemFailure {
                error: InstanceError::Lost(reason).into(),
            },
        }
    }

    /// Removes the job's containers, networks and volumes from the instance's engine,
    /// then its directory from the instance. Problems become warnings.
    pub(crate) async fn cleanup(&self, trace: &Trace) {
        self.docker.cleanup_logged(trace).await;
        self.slot.cleanup(&[], trace).await;
    }
}
