//! Preparing the executors on fleet instances: a slot on an instance of the entry's
//! fleet, an SSH session to it, the login user's `$HOME` there, and the job's
//! directories as they lie on the instance (`$HOME/builds`, laid out as here), logged
//! as gitlab-runner logs them. Shared by the instance and docker-autoscaler executors.

use std::path::Path;

use gantry_fleet::connector::{Session, Stream};
use gantry_fleet::taskscaler::Acquisition;

use super::{InstanceExecutor, RemoteSlot};
use crate::config::ExecutorKind;
use crate::dirs::BuildDirs;
use crate::executor::Executor;
use crate::executor::prepare::{Preparation, PrepareError, Prepared, UnmaskableVariable};

/// What the executors on fleet instances start from: the acquired slot, the job's slot
/// directory here and there (over the session), and the job's directories as they lie
/// on the instance.
pub(crate) struct OnInstance {
    pub(crate) acquisition: Acquisition,
    pub(crate) slot: RemoteSlot,
    pub(crate) dirs: BuildDirs,
}

/// The instance executor (see [`crate::executor::instance`]): a slot on an instance,
/// an SSH session to it, and the job moved to `$HOME/builds` there. The same for a job
/// taken over, whose acquisition is restored from the taskscaler's state file.
pub(crate) async fn prepare(prep: &Preparation<'_>) -> Prepared {
    let on = match acquire(prep, ExecutorKind::Instance).await {
        Ok(on) => on,
        Err(error) => return Prepared::failed(error),
    };
    keep_acquisition(prep, &on);
    let variables = prep.placer.variables(&on.dirs);
    let placed = match prep.move_to(on.dirs, variables, prep.cache_dir.to_owned()) {
        Ok(placed) => placed,
        Err(UnmaskableVariable(variable)) => {
            return Prepared::failed(PrepareError::System(format!(
                "the masked variable {variable} uses the job's directories, which are different on the instance; it cannot be masked any more"
            )));
        }
    };
    let mut executor =
        InstanceExecutor::new(on.slot, on.acquisition, prep.runner.shell, prep.kill_grace);
    executor.detach_in(prep.resumable());
    Prepared::ready(Executor::Instance(Box::new(executor))).moved(Some(placed))
}

/// A slot on an instance of the entry's fleet and an SSH session to it for `kind`
/// (instance or docker-autoscaler); a restored acquisition when the job is taken over.
pub(crate) async fn acquire(
    prep: &Preparation<'_>,
    kind: ExecutorKind,
) -> Result<OnInstance, PrepareError> {
    let failed = PrepareError::System;
    let lease = prep.fleet.ok_or_else(|| {
        failed(format!(
            "the {} executor runs jobs only under `gantry runner`, which starts the entry's [runners.autoscaler] fleet",
            kind.as_str()
        ))
    })?;
    let config = lease.fleet.config();
    let what = if kind == ExecutorKind::Instance {
        "Instance"
    } else {
        "Docker Autoscaler"
    };
    let trace = prep.trace;
    trace.runner_line(&format!(
        "Using {what} executor with fleeting plugin {}...",
        config.plugin
    ));
    trace.runner_line("Preparing instance...");
    let acquisition = match lease.take_restored() {
        Some(restored) => {
            trace.runner_line(&format!(
                "Restored the acquisition of instance {} (slot {}) from the taskscaler's state storage",
                restored.instance_id(),
                restored.slot()
            ));
            restored
        }
        None => {
            let acquisition = prep
                .guarded(async { lease.acquire().await.map_err(|e| failed(e.to_string())) })
                .await?;
            trace.runner_line(&format!(
                "Acquired instance {} (slot {})",
                acquisition.instance_id(),
                acquisition.slot()
            ));
            acquisition
        }
    };
    let id = acquisition.instance_id().to_owned();
    let info = prep
        .guarded(async {
            acquisition.connect_info().await.map_err(|e| {
                failed(format!(
                    "ask the plugin how to connect to instance {id}: {e}"
                ))
            })
        })
        .await?;
    if config.log_internal_ip && !info.internal_addr.is_empty() {
        trace.runner_line(&format!(
            "Instance {id} internal address: {}",
            info.internal_addr
        ));
    }
    if config.log_external_ip && !info.external_addr.is_empty() {
        trace.runner_line(&format!(
            "Instance {id} external address: {}",
            info.external_addr
        ));
    }
    let connected = prep
        .guarded(async {
            Session::connect(&info, config.use_external_addr)
                .await
                .map_err(|e| failed(e.to_string()))
        })
        .await;
    let session = match connected {
        Ok(session) => {
            acquisition.report_success();
            session
        }
        Err(error) => {
            if matches!(error, PrepareError::System(_)) {
                acquisition.report_failure();
            }
            return Err(error);
        }
    };
    let home = login_home(&session, &id).await?;
    // The slot directory's place on the instance: `$HOME/builds`, laid out as here.
    // (A job with `GIT_CLONE_PATH` does not get here: fleet instances refuse it.)
    let on_instance = prep
        .dirs
        .clone()
        .on_instance(Path::new(&format!("{home}/builds")));
    let remote_slot = on_instance.seen_slot_dir().to_string_lossy().into_owned();
    trace.runner_line(&format!(
        "Running on instance {id} ({}) in {remote_slot}",
        info.address(config.use_external_addr)
    ));
    Ok(OnInstance {
        acquisition,
        slot: RemoteSlot::new(session, prep.dirs.slot_dir(), remote_slot),
        dirs: on_instance,
    })
}

/// The login user's home directory on instance `id`, without a trailing `/`.
async fn login_home(session: &Session, id: &str) -> Result<String, PrepareError> {
    let mut home = Vec::new();
    let asked = session
        .run("printf '%s' \"$HOME\"", b"", &mut |stream, bytes: &[u8]| {
            if stream == Stream::Stdout {
                home.extend_from_slice(bytes);
            }
        })
        .await;
    match asked {
        Ok(exit) if exit.success() && home.starts_with(b"/") => Ok(String::from_utf8_lossy(&home)
            .trim_end_matches('/')
            .to_owned()),
        Ok(exit) => Err(PrepareError::System(format!(
            "find the login user's home directory on instance {id}: `printf $HOME` ended with {exit} and printed {:?}",
            String::from_utf8_lossy(&home)
        ))),
        Err(error) => Err(PrepareError::System(error.to_string())),
    }
}

/// Keeps `on`'s acquisition in the taskscaler's state file under the job's key and
/// names it in the job's record, when a restarted runner could take the job over;
/// whether it was restored (the job is taken over: the stages ran on the instance,
/// whose copy of the slot directory is then the newer one).
pub(crate) fn keep_acquisition(prep: &Preparation<'_>, on: &OnInstance) -> bool {
    let restored = prep.journal.and_then(|job| job.instance()).is_some();
    if let Some(job) = prep.resumable() {
        // Before anything runs there: a restarted runner restores the acquisition by
        // this key ([`crate::executor::instance`]).
        let key = job.key();
        on.acquisition.keep_as(&key);
        job.instance_acquired(crate::journal::InstanceRecord {
            id: on.acquisition.instance_id().to_owned(),
            key,
        });
    }
    if restored {
        on.slot.instance_is_current();
    }
    restored
}
