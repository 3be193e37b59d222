//! The fleet of an `instance` entry: its fleeting plugin process and its taskscaler
//! (`gantry_fleet`), started when the entry first asks for a job and stopped when the
//! poll loop ends.
//!
//! * The plugin named by `[runners.autoscaler] plugin` is found
//!   ([`gantry_fleet::plugin::resolve`]), started and initialized with
//!   `plugin_config` (as JSON) and `connector_config` (the private key read from
//!   `key_path`). Its log lines become poll events. A plugin process that dies is
//!   started again and re-initialized ([`SupervisedPlugin`]).
//! * `instance_ready_command` runs once on every new instance over SSH; a non-zero exit
//!   removes the instance.
//! * Before each job request the entry takes a [`Reservation`]; no capacity means no
//!   request this time (preemptive mode, or the group cannot grow). A job that arrives
//!   turns it into an acquisition in the instance executor ([`crate::executor::instance`]).
//! * A runner restarted after it died hands the fleet the keys of the acquisitions of
//!   the instance jobs it takes over: the taskscaler restores them from its state
//!   file (`Fleet::resume`; `[runners.autoscaler.state_storage]` must be enabled).
//! * At the end: the taskscaler shuts down (deleting instances with
//!   `delete_instances_on_shutdown`), the plugin's `Shutdown` runs, the plugin process
//!   is stopped.

use std::sync::{Arc, Mutex, PoisonError};

use gantry_fleet::InstanceGroup;
use gantry_fleet::connector::Session;
use gantry_fleet::plugin::{LogLevel, PluginOptions, SupervisedPlugin};
use gantry_fleet::taskscaler::{
    Acquisition, ReadyCheck, Reservation, ScalerError, ScalerEvent, Taskscaler,
};

use crate::config::AutoscalerConfig;
use crate::level::Level;

/// Where the fleet reports: `(level, message)`.
pub(crate) type FleetLog = Arc<dyn Fn(Level, String) + Send + Sync>;

/// A running fleet.
pub struct Fleet {
    scaler: Taskscaler,
    plugin: Arc<SupervisedPlugin>,
    config: AutoscalerConfig,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("plugin", &self.config.plugin)
            .finish_non_exhaustive()
    }
}

/// What an instance job gets from the poll loop: the fleet and, when the entry took
/// one before asking, its reservation.
#[derive(Clone)]
pub struct FleetLease {
    /// The entry's fleet.
    pub(crate) fleet: Arc<Fleet>,
    /// The capacity reserved before the job request (taken by the first acquire).
    pub(crate) reservation: Arc<Mutex<Option<Reservation>>>,
    /// The acquisition of a job taken over, restored from the state file.
    restored: Arc<Mutex<Option<Acquisition>>>,
}

impl std::fmt::Debug for FleetLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetLease")
            .field("fleet", &self.fleet)
            .finish_non_exhaustive()
    }
}

impl FleetLease {
    /// A lease on `fleet` holding `reservation`.
    pub(crate) fn new(fleet: Arc<Fleet>, reservation: Option<Reservation>) -> Self {
        Self {
            fleet,
            reservation: Arc::new(Mutex::new(reservation)),
            restored: Arc::default(),
        }
    }

    /// A lease on `fleet` holding the `restored` acquisition of a job taken over.
    pub(crate) fn restored(fleet: Arc<Fleet>, restored: Acquisition) -> Self {
        Self {
            fleet,
            reservation: Arc::default(),
            restored: Arc::new(Mutex::new(Some(restored))),
        }
    }

    /// The restored acquisition of a job taken over (once).
    pub(crate) fn take_restored(&self) -> Option<Acquisition> {
        self.restored
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// A slot for the job: through the reservation when there is one.
    pub(crate) async fn acquire(&self) -> Result<Acquisition, ScalerError> {
        let reservation = self
            .reservation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match reservation {
            Some(reservation) => reservation.acquire().await,
            None => self.fleet.scaler.acquire().await,
        }
    }
}

impl Fleet {
    /// Starts the plugin and the taskscaler of `config`; a state file goes under
    /// `work_dir`, named after the entry's `short_token`; the acquisitions kept there
    /// as `resume` are restored.
    pub(crate) async fn start(
        config: &AutoscalerConfig,
        work_dir: &std::path::Path,
        short_token: &str,
        resume: Vec<String>,
        log: FleetLog,
    ) -> Result<Self, String> {
        let path = gantry_fleet::plugin::resolve(&config.plugin)
            .map_err(|error| format!("[runners.autoscaler] plugin: {error}"))?;
        let mut connector = config.connector.clone();
        if let Some(key_path) = &config.key_path {
            connector.key = tokio::fs::read(key_path).await.map_err(|error| {
                format!(
                    "[runners.autoscaler.connector_config] key_path: read `{}`: {error}",
                    key_path.display()
                )
            })?;
        }
        let plugin_log = Arc::clone(&log);
        let options = PluginOptions {
            log: Arc::new(move |line| {
                let level = match line.level {
                    LogLevel::Trace | LogLevel::Debug => Level::Debug,
                    LogLevel::Info => Level::Info,
                    LogLevel::Warn => Level::Warn,
                    LogLevel::Error => Level::Error,
                };
                let mut message = format!("plugin {}: {}", line.plugin, line.message);
                for (key, value) in &line.fields {
                    message.push_str(&format!(" {key}={value}"));
                }
                plugin_log(level, message);
            }),
            ..PluginOptions::default()
        };
        let plugin = Arc::new(
            SupervisedPlugin::start(&path, options)
                .await
                .map_err(|error| format!("start the fleeting plugin: {error}"))?,
        );
        let ready = config.instance_ready_command.clone().map(|command| {
            let use_external_addr = config.use_external_addr;
            Arc::new(move |info: gantry_fleet::ConnectInfo| {
                let command = command.clone();
                Box::pin(async move { ready_command(&info, use_external_addr, &command).await })
                    as std::pin::Pin<
                        Box<dyn std::future::Future<Output = Result<(), String>> + Send>,
                    >
            }) as ReadyCheck
        });
        let scaler_log = Arc::clone(&log);
        let events = Arc::new(move |event: ScalerEvent| {
            let level = if event.warning {
                Level::Warn
            } else {
                Level::Info
            };
            scaler_log(level, event.message);
        });
        let group: Arc<dyn InstanceGroup> = plugin.clone();
        let mut scaler_config = config.scaler.clone();
        scaler_config.state_storage = config.state_storage.as_ref().map(|(dir, keep)| {
            gantry_fleet::taskscaler::StateStorage {
                file: work_dir.join(dir).join(format!("{short_token}.json")),
                keep_instance_with_acquisitions: *keep,
                resume: resume.clone(),
            }
        });
        let scaler = match Taskscaler::start(
            group,
            scaler_config,
            &config.plugin_config,
            connector,
            ready,
            events,
        )
        .await
        {
            Ok(scaler) => scaler,
            Err(error) => {
                stop_plugin(plugin).await;
                return Err(error.to_string());
            }
        };
        Ok(Self {
            scaler,
            plugin,
            config: config.clone(),
        })
    }

    /// Reserves capacity before a job request.
    pub(crate) fn reserve(&self) -> Result<Reservation, ScalerError> {
        self.scaler.reserve()
    }

    /// The acquisition a runner that died kept as `key`, restored from the state file.
    pub(crate) fn resume(&self, key: &str) -> Result<Acquisition, ScalerError> {
        self.scaler.resume(key)
    }

    /// The entry's `[runners.autoscaler]`.
    pub(crate) fn config(&self) -> &AutoscalerConfig {
        &self.config
    }

    /// Stops scaling, the plugin's group and the plugin process.
    pub(crate) async fn shutdown(self) {
        drop(self.scaler.shutdown().await);
        stop_plugin(self.plugin).await;
    }
}

/// Stops the plugin process once nothing else holds the client (a readiness check
/// still running keeps it; the process is then killed when the last holder drops it).
async fn stop_plugin(plugin: Arc<SupervisedPlugin>) {
    if let Ok(plugin) = Arc::try_unwrap(plugin) {
        plugin.kill().await;
    }
}

/// Runs `instance_ready_command` on a new instance.
async fn ready_command(
    info: &gantry_fleet::ConnectInfo,
    use_external_addr: bool,
    command: &str,
) -> Result<(), String> {
    let session = Session::connect(info, use_external_addr)
        .await
        .map_err(|error| error.to_string())?;
    let mut output = Vec::new();
    let exit = session
        .run(command, b"", &mut |_, bytes: &[u8]| {
            if output.len() < 4096 {
                output.extend_from_slice(bytes);
            }
        })
        .await
        .map_err(|error| error.to_string());
    let _ = session.close().await;
    match exit? {
        gantry_fleet::connector::Exit::Code(0) => Ok(()),
        other => Err(format!(
            "instance_ready_command {command:?} ended with {other:?}: {}",
            String::from_utf8_lossy(&output).trim()
        )),
    }
}
