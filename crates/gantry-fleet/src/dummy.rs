//! An in-memory instance group, like fleeting's `fleeting-plugin-dummy`: instances are
//! names that exist only in this process. A new instance is `creating` until the next
//! `Update`, then `running`; a deleted one is `deleting` until the next `Update`, then
//! gone. For tests of the taskscaler and the plugin protocol, and served as the
//! `fleeting-plugin-dummy` binary.
//!
//! Plugin configuration (JSON), every key optional:
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `max_size` | 10 | the most instances the group holds (creating, running, deleting) |
//! | `address` | `127.0.0.1` | the `internal_addr` every instance reports |
//! | `name` | `dummy` | the group's name, in its id `dummy/<name>` |

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use serde::Deserialize;

use crate::provider::{
    ConnectInfo, ConnectorConfig, Instance, InstanceGroup, Partial, ProviderError, ProviderInfo,
    State,
};

/// The dummy's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DummyConfig {
    /// The most instances at a time.
    pub max_size: u64,
    /// The address every instance reports.
    pub address: String,
    /// The group's name.
    pub name: String,
}

impl Default for DummyConfig {
    fn default() -> Self {
        Self {
            max_size: 10,
            address: "127.0.0.1".into(),
            name: "dummy".into(),
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    config: Option<DummyConfig>,
    settings: ConnectorConfig,
    instances: BTreeMap<String, State>,
    next: u64,
    /// Every call, in order, for tests: `increase 2`, `decrease dummy-1`, …
    calls: Vec<String>,
    /// Instances whose heartbeat fails.
    unhealthy: std::collections::BTreeSet<String>,
}

/// The in-memory group.
#[derive(Debug, Default)]
pub struct DummyGroup {
    inner: Mutex<Inner>,
}

impl DummyGroup {
    /// A group with no instances; `init` configures it.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls made so far (`init`, `update`, `increase N`, `decrease a,b`, …).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    /// The instances now, with their states.
    pub fn instances(&self) -> Vec<Instance> {
        self.lock()
            .instances
            .iter()
            .map(|(id, state)| Instance {
                id: id.clone(),
                state: *state,
            })
            .collect()
    }

    /// Makes the heartbeat of instance `id` fail (a machine that stopped answering
    /// while the listing still says it runs).
    pub fn fail_heartbeat(&self, id: &str) {
        self.lock().unhealthy.insert(id.to_owned());
    }

    /// Sets an instance's state, as a cloud might change it behind the host's back
    /// (`Deleted` removes it).
    pub fn set_state(&self, id: &str, state: State) {
        let mut inner = self.lock();
        if state == State::Deleted {
            inner.instances.remove(id);
        } else {
            inner.instances.insert(id.to_owned(), state);
        }
    }
}

#[async_trait]
impl InstanceGroup for DummyGroup {
    async fn init(
        &self,
        config: &serde_json::Value,
        settings: ConnectorConfig,
    ) -> Result<ProviderInfo, ProviderError> {
        let config: DummyConfig = if config.is_null() {
            DummyConfig::default()
        } else {
            serde_json::from_value(config.clone()).map_err(|error| {
                ProviderError::Failed(format!(
                    "plugin_config: {error} (keys: max_size, address, name)"
                ))
            })?
        };
        let mut inner = self.lock();
        inner.calls.push("init".into());
        let info = ProviderInfo {
            id: format!("dummy/{}", config.name),
            max_size: config.max_size,
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: "gantry fleeting-plugin-dummy".into(),
            capabilities: Vec::new(),
        };
        inner.config = Some(config);
        inner.settings = settings;
        Ok(info)
    }

    async fn update(&self) -> Result<Vec<Instance>, ProviderError> {
        let mut inner = self.lock();
        inner.calls.push("update".into());
        let listing = inner
            .instances
            .iter()
            .map(|(id, state)| Instance {
                id: id.clone(),
                state: *state,
            })
            .collect();
        // The next listing shows the transitions as done.
        inner.instances.retain(|_, state| *state != State::Deleting);
        for state in inner.instances.values_mut() {
            if *state == State::Creating {
                *state = State::Running;
            }
        }
        Ok(listing)
    }

    async fn increase(&self, delta: u32) -> Partial<u32> {
        let mut inner = self.lock();
        inner.calls.push(format!("increase {delta}"));
        let max = inner.config.as_ref().map_or(0, |c| c.max_size);
        let room = max.saturating_sub(inner.instances.len() as u64);
        let granted = u32::try_from(room).unwrap_or(u32::MAX).min(delta);
        for _ in 0..granted {
            inner.next += 1;
            let id = format!("dummy-{}", inner.next);
            inner.instances.insert(id, State::Creating);
        }
        Partial {
            done: granted,
            error: (granted < delta)
                .then(|| ProviderError::Failed(format!("the group is at its max_size of {max}"))),
        }
    }

    async fn decrease(&self, ids: &[String]) -> Partial<Vec<String>> {
        let mut inner = self.lock();
        inner.calls.push(format!("decrease {}", ids.join(",")));
        for id in ids {
            if let Some(state) = inner.instances.get_mut(id) {
                *state = State::Deleting;
            }
        }
        Partial::complete(ids.to_vec())
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, ProviderError> {
        let inner = self.lock();
        match inner.instances.get(id) {
            Some(State::Running) => Ok(ConnectInfo {
                connector: inner.settings.clone(),
                id: id.to_owned(),
                internal_addr: inner
                    .config
                    .as_ref()
                    .map(|c| c.address.clone())
                    .unwrap_or_default(),
                external_addr: String::new(),
                expires: None,
            }),
            Some(state) => Err(ProviderError::Unhealthy(format!("{id} is {state}"))),
            None => Err(ProviderError::Unhealthy(format!("{id} does not exist"))),
        }
    }

    async fn heartbeat(&self, id: &str) -> Result<(), ProviderError> {
        let inner = self.lock();
        if inner.unhealthy.contains(id) {
            return Err(ProviderError::Unhealthy(format!("{id} does not answer")));
        }
        match inner.instances.get(id) {
            Some(State::Running) => Ok(()),
            Some(state) => Err(ProviderError::Unhealthy(format!("{id} is {state}"))),
            None => Err(ProviderError::Unhealthy(format!("{id} does not exist"))),
        }
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        self.lock().calls.push("shutdown".into());
        Ok(())
    }
}
