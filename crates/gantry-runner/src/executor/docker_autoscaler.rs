//! The docker-autoscaler executor: the Docker executor ([`crate::executor::docker`]) on the engine
//! of an instance of the entry's fleet ([`crate::fleet`], `[runners.autoscaler]`), as
//! gitlab-runner's `docker-autoscaler` does (spec `fleet.md` §5.1). Every
//! `[runners.docker]` key applies; the job's image is the containers' image, not the
//! instance's.
//!
//! * `prepare_executor`: a slot is acquired and an SSH session opened exactly as for the
//!   instance executor ([`crate::executor::instance`]). The Docker Engine API goes through that
//!   session: each HTTP connection of the client is `docker system dial-stdio` run on the
//!   instance (`docker -H <host> …` with `[runners.docker] host`), or — with the job
//!   variable `FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO=false` — a forward to the engine's
//!   Unix socket. The instance needs Docker Engine and its CLI, and the connector's user
//!   must be allowed to use the engine; it needs no gitlab-runner and no Gantry.
//! * Directories: the job sees gitlab-runner's Docker paths (`/builds/<project path>`).
//!   As with every executor, the runner fetches sources, restores and saves cache and
//!   moves artifacts on this machine; the slot directory travels to the instance's
//!   `$HOME/builds/<short token>/<concurrent id>` before the first stage and back
//!   before the runner's next step that reads it (`RemoteSlot`), and is bind-mounted
//!   from there into the job's containers at `/builds`.
//! * Stages, services, networks, volumes, pull policies, timeouts and cancellation are
//!   the Docker executor's, on the instance's engine. An instance that disappears under
//!   the job fails it as a system failure.
//! * The end: the job's containers, networks and volumes are removed from the
//!   instance's engine (by label), then the slot directory; the session closes and the
//!   slot is released (with `max_use_count`, the instance may then be removed).
//!
//!
//! **Takeover.** Under `gantry runner run` (a job record kept, [`crate::journal`]) the
//! acquisition is kept in the taskscaler's state file under the job's key and the record
//! names it ([`crate::journal::InstanceRecord`]), as for the instance executor; the
//! script stages run detached in the build container as the Docker executor's do, their
//! files in the build directory on the instance, followed over the session into copies
//! beside the record (`crate::executor::docker`'s `job/detached.rs`, `crate::executor::instance::follow`).
//! A runner that died and starts again restores the acquisition from the state file,
//! opens a new session and reaches the instance's engine through it, finds the job's
//! containers by the record, and reattaches to the stage where the coordinator's log
//! ends (or starts it again, had its script not begun); the instance's copy of the slot
//! directory is then the newer one. A job that had not reached its script, or whose
//! acquisition cannot be restored, is ended as lost ([`crate::poll`]).
//!
//! Not done (gitlab-runner's remaining docker-autoscaler keys): per-slot cgroups
//! (`use_slot_cgroups`), WinRM instances, and removing leftovers of a crashed runner from
//! instances' engines (the fleet removes instances it finds at start unless
//! `state_storage` keeps them).

use std::future::Future;
use std::sync::Arc;

use gantry_fleet::taskscaler::Acquisition;

use crate::config::{DockerConfig, ExecutorKind};
use crate::executor::docker::{DockerExecutor, EngineRoute, connect_through, prepare_containers};
use crate::executor::instance::{InstanceError, OnInstance, RemoteSlot, acquire, keep_acquisition};
use crate::executor::prepare::{Preparation, PrepareError, Prepared};
use crate::executor::{CancelReason, Executor, Stage, StageOutcome};
use crate::journal::{DetachedStage, RunningJob};
use crate::trace::Trace;

/// The docker-autoscaler executor of a new job: a slot on an instance of the entry's
/// fleet, an SSH session to it, the instance's Docker engine through that session, and
/// the Docker executor's preparation there. The job keeps its container paths
/// (`/builds/…`); what was made before a failure is removed at the end.
pub(crate) async fn prepare(prep: &Preparation<'_>) -> Prepared {
    let (on, engine) = match engine(prep).await {
        Ok(found) => found,
        Err(error) => return Prepared::failed(error),
    };
    let default_config = DockerConfig::default();
    let config = prep.runner.docker.as_ref().unwrap_or(&default_config);
    let short = prep.short_token();
    let mut docker = DockerExecutor::with_engine(engine, &short, prep.job.id, prep.kill_grace);
    // Recorded before anything is made, when a restarted runner could take the job
    // over: its script stages then run detached, their files on the instance.
    docker.detach_on_instance(
        (on.slot.session(), &tmp_on_instance(prep, &on)),
        &prep.dirs.seen.tmp_dir,
        prep.resumable(),
    );
    // The slot directory on the instance at /builds, as the Docker executor mounts its
    // local one.
    let binds = vec![format!(
        "{}:{}",
        on.slot.remote(),
        prep.dirs.seen.builds_dir.to_string_lossy()
    )];
    let result = prepare_containers(&mut docker, prep, config, binds).await;
    let executor =
        DockerAutoscalerExecutor::new(docker, on.slot, on.acquisition, prep.resumable().cloned());
    Prepared::made(Executor::DockerAutoscaler(Box::new(executor)), result)
}

/// The docker-autoscaler executor of a job taken over: the restored acquisition, a new
/// session and the engine through it, and the job's containers as its record names
/// them.
pub(crate) async fn resume(prep: &Preparation<'_>) -> Prepared {
    let Some(record) = prep.journal.and_then(|job| job.docker()) else {
        return Prepared::failed(PrepareError::System(
            "the Docker containers of this job were not recorded".to_owned(),
        ));
    };
    let (on, engine) = match engine(prep).await {
        Ok(found) => found,
        Err(error) => return Prepared::failed(error),
    };
    let short = prep.short_token();
    let resumed =
        DockerExecutor::resume_on(engine, (&short, prep.job.id), prep.kill_grace, &record).await;
    let mut docker = match resumed {
        Ok(docker) => docker,
        Err(error) => return Prepared::failed(PrepareError::System(error.to_string())),
    };
    docker.detach_on_instance(
        (on.slot.session(), &tmp_on_instance(prep, &on)),
        &prep.dirs.seen.tmp_dir,
        prep.resumable(),
    );
    let executor =
        DockerAutoscalerExecutor::new(docker, on.slot, on.acquisition, prep.resumable().cloned());
    Prepared::ready(Executor::DockerAutoscaler(Box::new(executor)))
}

/// A slot on an instance, an SSH session to it and the instance's Docker engine
/// through that session; the acquisition kept for a takeover.
async fn engine(prep: &Preparation<'_>) -> Result<(OnInstance, bollard::Docker), PrepareError> {
    let on = acquire(prep, ExecutorKind::DockerAutoscaler).await?;
    keep_acquisition(prep, &on);
    let host = prep.runner.docker.as_ref().and_then(|d| d.host.clone());
    let dial_stdio =
        crate::executor::variable_flag(prep.variables, "FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO")
            .unwrap_or(true);
    let route = EngineRoute::new(host.as_deref(), dial_stdio);
    let session = on.slot.session().clone();
    // On a failure the slot directory was never sent; nothing else to remove.
    prep.guarded(async {
        connect_through(&session, &route)
            .await
            .map_err(PrepareError::from)
    })
    .await
    .map(|engine| (on, engine))
}

/// The job's `.tmp` directory on the instance: the slot directory there is the
/// containers' `/builds`.
fn tmp_on_instance(prep: &Preparation<'_>, on: &OnInstance) -> String {
    let relative = prep
        .dirs
        .seen
        .tmp_dir
        .strip_prefix(&prep.dirs.seen.builds_dir)
        .unwrap_or(std::path::Path::new(""));
    std::path::Path::new(on.slot.remote())
        .join(relative)
        .to_string_lossy()
        .into_owned()
}

/// A prepared docker-autoscaler executor (see the module docs).
pub(crate) struct DockerAutoscalerExecutor {
    docker: DockerExecutor,
    slot: RemoteSlot,
    acquisition: Acquisition,
    /// The job's record, when a restarted runner could take the job over.
    job: Option<Arc<RunningJob>>,
}

impl DockerAutoscalerExecutor {
    /// The Docker executor `docker` (connected through the slot's session, prepared)
    /// on the acquired instance; `job`: the job's record, when it can be taken over.
    pub(crate) fn new(
        docker: DockerExecutor,
        slot: RemoteSlot,
        acquisition: Acquisition,
        job: Option<Arc<RunningJob>>,
    ) -> Self {
        Self {
            docker,
            slot,
            acquisition,
            job,
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
        let detached = stage.detach.is_some();
        self.on_instance(detached, self.docker.run(stage, trace, cancel))
            .await
    }

    /// Goes on with the detached stage a runner process that died recorded in
    /// `detached` (see the module docs).
    pub(crate) async fn reattach(
        &self,
        detached: &DetachedStage,
        stage: &Stage<'_>,
        trace: &Trace,
        cancel: impl Future<Output = CancelReason>,
    ) -> StageOutcome {
        self.on_instance(true, self.docker.reattach(detached, stage, trace, cancel))
            .await
    }

    /// `stage` while the instance is there: a lost instance fails it. A job handed over
    /// to the next runner process in a `detached` stage keeps its acquisition for it
    /// (the stage then never ends in this process).
    async fn on_instance(
        &self,
        detached: bool,
        stage: impl Future<Output = StageOutcome>,
    ) -> StageOutcome {
        let handed_over = async {
            if let Some(job) = self.job.as_ref().filter(|_| detached) {
                job.handed_over().await;
                self.acquisition.hand_over();
            }
            std::future::pending::<()>().await;
        };
        tokio::select! {
            outcome = stage => outcome,
            reason = self.acquisition.lost() => StageOutcome::SystemFailure {
                error: InstanceError::Lost(reason).into(),
            },
            () = handed_over => StageOutcome::Success,
        }
    }

    /// Removes the job's containers, networks and volumes from the instance's engine,
    /// then its directory from the instance. Problems become warnings.
    pub(crate) async fn cleanup(&self, trace: &Trace) {
        self.docker.cleanup_logged(trace).await;
        self.slot.cleanup(&[], trace).await;
    }
}
