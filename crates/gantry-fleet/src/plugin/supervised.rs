//! A plugin process that is started again when it dies (spec `fleet.md` §2.7: "restart
//! the plugin with back-off, and re-run `Init` … before scaling again").
//!
//! [`SupervisedPlugin`] is an [`InstanceGroup`] over a [`PluginClient`]. Every call
//! first checks that the process is alive; a dead one is logged, started again and
//! given the `Init` it had (plugin config and connector settings), then the call goes
//! to the new process. Starts that fail wait before the next try: 1 s, doubling up to
//! 60 s; calls meanwhile fail at once saying when the next try is. The taskscaler's
//! next `Update` then lists the group as the new process sees it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Map;
use tokio::time::Instant;

use super::{LogLevel, PluginClient, PluginError, PluginLog, PluginOptions};
use crate::provider::{
    ConnectInfo, ConnectorConfig, Instance, InstanceGroup, Partial, ProviderError, ProviderInfo,
};

/// The first wait after a failed restart.
pub const RESTART_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest wait between restarts.
pub const RESTART_BACKOFF_MAX: Duration = Duration::from_secs(60);

struct State {
    client: Option<Arc<PluginClient>>,
    /// What `init` was given, for a restarted process.
    init: Option<(serde_json::Value, ConnectorConfig)>,
    backoff: Duration,
    next_try: Option<Instant>,
    restarts: u32,
}

/// A plugin that is restarted when its process exits.
pub struct SupervisedPlugin {
    path: PathBuf,
    options: PluginOptions,
    state: tokio::sync::Mutex<State>,
}

impl std::fmt::Debug for SupervisedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SupervisedPlugin")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SupervisedPlugin {
    /// Starts the plugin at `path`.
    pub async fn start(path: &Path, options: PluginOptions) -> Result<Self, PluginError> {
        let client = PluginClient::start(path, options.clone()).await?;
        Ok(Self {
            path: path.to_owned(),
            options,
            state: tokio::sync::Mutex::new(State {
                client: Some(Arc::new(client)),
                init: None,
                backoff: RESTART_BACKOFF_MIN,
                next_try: None,
                restarts: 0,
            }),
        })
    }

    /// How many times the process was started again.
    pub async fn restarts(&self) -> u32 {
        self.state.lock().await.restarts
    }

    /// The process id of the current plugin process, if one runs.
    pub async fn pid(&self) -> Option<u32> {
        let state = self.state.lock().await;
        state
            .client
            .as_ref()
            .filter(|c| c.exit_status().is_none())
            .map(|c| c.pid())
    }

    /// Stops the plugin process (see [`PluginClient::kill`]).
    pub async fn kill(self) {
        let client = self.state.into_inner().client;
        if let Some(client) = client.and_then(|c| Arc::try_unwrap(c).ok()) {
            client.kill().await;
        }
    }

    fn log(&self, level: LogLevel, message: String) {
        (self.options.log)(PluginLog {
            plugin: self
                .path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            level,
            message,
            fields: Map::new(),
        });
    }

    /// The live client, restarting the process when it died.
    async fn client(&self) -> Result<Arc<PluginClient>, ProviderError> {
        let mut state = self.state.lock().await;
        if let Some(client) = &state.client {
            match client.exit_status() {
                None => return Ok(Arc::clone(client)),
                Some(status) => {
                    self.log(
                        LogLevel::Error,
                        format!(
                            "the plugin process (pid {}) exited unexpectedly ({status}); starting it again",
                            client.pid()
                        ),
                    );
                    state.client = None;
                }
            }
        }
        if let Some(at) = state.next_try
            && Instant::now() < at
        {
            return Err(ProviderError::Failed(format!(
                "the plugin {} is not running; next start in {:.0?}",
                self.path.display(),
                at.saturating_duration_since(Instant::now())
            )));
        }
        let started = async {
            let client = PluginClient::start(&self.path, self.options.clone())
                .await
                .map_err(|error| ProviderError::Failed(format!("start it again: {error}")))?;
            if let Some((config, settings)) = &state.init {
                client
                    .init(config, settings.clone())
                    .await
                    .map_err(|error| {
                        ProviderError::Failed(format!("Init after a restart: {error}"))
                    })?;
            }
            Ok::<_, ProviderError>(client)
        }
        .await;
        match started {
            Ok(client) => {
                let client = Arc::new(client);
                state.client = Some(Arc::clone(&client));
                state.restarts += 1;
                state.backoff = RESTART_BACKOFF_MIN;
                state.next_try = None;
                self.log(
                    LogLevel::Info,
                    format!("the plugin runs again (pid {})", client.pid()),
                );
                Ok(client)
            }
            Err(error) => {
                let wait = state.backoff;
                state.next_try = Some(Instant::now() + wait);
                state.backoff = (wait * 2).min(RESTART_BACKOFF_MAX);
                self.log(
                    LogLevel::Error,
                    format!(
                        "the plugin could not be started again: {error}; next try in {wait:.0?}"
                    ),
                );
                Err(error)
            }
        }
    }
}

fn partial<T: Default>(error: ProviderError) -> Partial<T> {
    Partial {
        done: T::default(),
        error: Some(error),
    }
}

#[async_trait]
impl InstanceGroup for SupervisedPlugin {
    async fn init(
        &self,
        config: &serde_json::Value,
        settings: ConnectorConfig,
    ) -> Result<ProviderInfo, ProviderError> {
        self.state.lock().await.init = Some((config.clone(), settings.clone()));
        self.client().await?.init(config, settings).await
    }

    async fn update(&self) -> Result<Vec<Instance>, ProviderError> {
        self.client().await?.update().await
    }

    async fn increase(&self, delta: u32) -> Partial<u32> {
        match self.client().await {
            Ok(client) => client.increase(delta).await,
            Err(error) => partial(error),
        }
    }

    async fn decrease(&self, ids: &[String]) -> Partial<Vec<String>> {
        match self.client().await {
            Ok(client) => client.decrease(ids).await,
            Err(error) => partial(error),
        }
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, ProviderError> {
        self.client().await?.connect_info(id).await
    }

    async fn heartbeat(&self, id: &str) -> Result<(), ProviderError> {
        self.client().await?.heartbeat(id).await
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        self.client().await?.shutdown().await
    }

    async fn suspend(&self, ids: &[String]) -> Partial<Vec<String>> {
        match self.client().await {
            Ok(client) => client.suspend(ids).await,
            Err(error) => partial(error),
        }
    }

    async fn resume(&self, ids: &[String]) -> Partial<Vec<String>> {
        match self.client().await {
            Ok(client) => client.resume(ids).await,
            Err(error) => partial(error),
        }
    }
}
