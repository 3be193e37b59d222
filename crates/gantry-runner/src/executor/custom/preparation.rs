//! The custom executor's `prepare_executor` stage: the driver's config stage (which may
//! move the job, see [`crate::executor::prepare`]) and prepare stage, tried up to
//! [`PREPARATION_ATTEMPTS`] times on a retryable system failure with the cleanup stage
//! between tries, as gitlab-runner does.

use std::path::PathBuf;
use std::sync::Arc;

use super::{
    CustomConfig, CustomError, CustomExecutor, DriverConfig, PREPARATION_ATTEMPTS,
    PREPARATION_RETRY_INTERVAL, PrepareFailure,
};
use crate::config::format_duration;
use crate::dirs::Layout;
use crate::executor::Executor;
use crate::executor::prepare::{Placed, Preparation, PrepareError, Prepared, UnmaskableVariable};

impl From<PrepareFailure> for PrepareError {
    fn from(failure: PrepareFailure) -> Self {
        match failure {
            PrepareFailure::Build { exit_code } => Self::Build { exit_code },
            PrepareFailure::System(error) => Self::System(error.to_string()),
            PrepareFailure::Configuration(message) => Self::Configuration(message),
            PrepareFailure::JobTimeout => Self::Timeout,
            PrepareFailure::Canceled(reason) => Self::Canceled(reason),
        }
    }
}

/// The custom executor of a new job. What the last try made is cleaned up at the end
/// of the job (the executor is kept, also when the try failed).
pub(crate) async fn prepare(prep: &Preparation<'_>) -> Prepared {
    let Some(config) = prep.runner.custom.clone() else {
        return Prepared::failed(PrepareError::Configuration(
            "executor = \"custom\" needs a [runners.custom] section with run_exec".to_owned(),
        ));
    };
    let mut attempt = 1;
    loop {
        let mut custom = match CustomExecutor::new(config.clone(), prep.runner.shell, prep.job) {
            Ok(custom) => custom,
            Err(error) => return Prepared::failed(PrepareError::System(error.to_string())),
        };
        custom.set_variables(prep.variables, &prep.job.services);
        custom.set_journal(prep.journal.cloned(), prep.short_token());
        let (placed, result) = prepare_once(&mut custom, &config, prep).await;
        match result {
            Err(PrepareFailure::System(error))
                if attempt < PREPARATION_ATTEMPTS && error.is_retryable() =>
            {
                prep.trace.warning(&format!("Preparation failed: {error}"));
                let executor = Executor::Custom(Box::new(custom));
                executor
                    .cleanup(prep.trace, Arc::clone(&prep.driver_log))
                    .await;
                prep.trace.runner_line(&format!(
                    "Will be retried in {} ...",
                    format_duration(PREPARATION_RETRY_INTERVAL)
                ));
                let waited = prep
                    .guarded(async {
                        tokio::time::sleep(PREPARATION_RETRY_INTERVAL).await;
                        Ok(())
                    })
                    .await;
                if let Err(error) = waited {
                    return Prepared::failed(error);
                }
                attempt += 1;
            }
            result => {
                return Prepared::made(
                    Executor::Custom(Box::new(custom)),
                    result.map_err(PrepareError::from),
                )
                .moved(placed);
            }
        }
    }
}

/// One try: `config_exec`, the move it asks for, `prepare_exec`.
async fn prepare_once(
    custom: &mut CustomExecutor,
    config: &CustomConfig,
    prep: &Preparation<'_>,
) -> (Option<Placed>, Result<(), PrepareFailure>) {
    let driver = match custom
        .configure(prep.trace, prep.remaining(), (prep.cancel)())
        .await
    {
        Ok(driver) => driver,
        Err(failure) => return (None, Err(failure)),
    };
    let mut placed = None;
    if let Some(driver) = &driver {
        custom.set_relocation(driver);
        match relocate(prep, config, driver) {
            Ok(moved) => placed = moved,
            Err(failure) => return (None, Err(failure)),
        }
        custom.set_job_env(driver.job_env.clone().unwrap_or_default());
        let variables = placed.as_ref().map_or(prep.variables, |p| &p.variables);
        custom.set_variables(variables, &prep.job.services);
    }
    prep.trace
        .runner_line(&DriverConfig::startup_message(driver.as_ref()));
    let result = custom
        .prepare(prep.trace, prep.remaining(), (prep.cancel)())
        .await;
    (placed, result)
}

/// The custom executor of a job a runner process that died left: its environment as
/// the job's record names it, and the job where `config_exec` had moved it.
pub(crate) fn resume(prep: &Preparation<'_>) -> Prepared {
    let (Some(config), Some(dir)) = (
        prep.runner.custom.clone(),
        prep.journal.and_then(|job| job.custom_dir()),
    ) else {
        return Prepared::failed(PrepareError::System(
            "the custom executor's environment of this job was not recorded".to_owned(),
        ));
    };
    let mut custom = match CustomExecutor::after_crash(config.clone(), prep.runner.shell, &dir) {
        Ok(custom) => custom,
        Err(error) => return Prepared::failed(PrepareError::System(error.to_string())),
    };
    let placed = match custom.relocation() {
        Some(driver) => match relocate(prep, &config, &driver) {
            Ok(placed) => placed,
            Err(failure) => return Prepared::failed(failure.into()),
        },
        None => None,
    };
    custom.set_journal(prep.journal.cloned(), prep.short_token());
    Prepared::ready(Executor::Custom(Box::new(custom))).moved(placed)
}

/// Where `config_exec`'s `builds_dir`, `builds_dir_is_shared` and `cache_dir` put the
/// job (`None`: where it was). A masked variable whose value would change with the new
/// directories (it uses `$CI_PROJECT_DIR`) cannot be masked any more: that fails the
/// job, and so does a `GIT_CLONE_PATH` outside the new builds directory (a
/// configuration error, as when gitlab-runner's build starts in the directory
/// `config_exec` chose).
fn relocate(
    prep: &Preparation<'_>,
    config: &CustomConfig,
    driver: &DriverConfig,
) -> Result<Option<Placed>, PrepareFailure> {
    let cache_dir = driver
        .cache_dir
        .as_ref()
        .map_or_else(|| prep.cache_dir.to_owned(), PathBuf::from);
    if driver.builds_dir.is_none() && driver.builds_dir_is_shared.is_none() {
        return Ok(driver.cache_dir.is_some().then(|| Placed {
            dirs: prep.dirs.clone(),
            variables: prep.variables.to_vec(),
            cache_dir,
        }));
    }
    let builds_dir = driver
        .builds_dir
        .as_ref()
        .map_or_else(|| prep.dirs.builds_dir.clone(), PathBuf::from);
    let layout = match driver.builds_dir_is_shared {
        Some(false) => Layout::Unshared,
        _ => Layout::Shared,
    };
    let (dirs, variables) = prep
        .placer
        .place(&builds_dir, layout)
        .map_err(PrepareFailure::Configuration)?;
    prep.move_to(dirs, variables, cache_dir)
        .map(Some)
        .map_err(|UnmaskableVariable(variable)| {
            PrepareFailure::System(CustomError::UnmaskableVariable {
                program: config
                    .config
                    .as_ref()
                    .map(|program| program.exec.clone())
                    .unwrap_or_default(),
                variable,
            })
        })
}
