//! The instance group contract: fleeting's `provider.InstanceGroup` (spec `fleet.md` §3)
//! as a Rust trait. A plugin process implements it and serves it
//! ([`crate::plugin::serve`]); the host talks to a plugin through the same trait
//! ([`crate::plugin::PluginClient`]), so the taskscaler never knows whether its group
//! is in another process or in this one.

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// What a plugin says about its group at `Init` (fleeting's `ProviderInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderInfo {
    /// Stable identifier of the group (`hetzner/<location>/<name>`, `local/<name>`).
    pub id: String,
    /// The most instances the provider can supply; the host never asks for more.
    pub max_size: u64,
    /// The plugin's version.
    pub version: String,
    /// Free-form build description.
    pub build_info: String,
    /// Optional capabilities; only `suspend_resume` is defined.
    pub capabilities: Vec<String>,
}

/// How the host reaches an instance (fleeting's `ConnectorConfig`, from
/// `[runners.autoscaler.connector_config]`; the plugin may fill in defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectorConfig {
    /// `linux`, `windows`, `darwin`, …
    pub os: String,
    /// `amd64`, `arm64`, …
    pub arch: String,
    /// `ssh` (the only protocol Gantry's connector speaks), `winrm`, `winrm+https`.
    pub protocol: String,
    /// The port of `protocol` (0: the protocol's default, 22 for SSH).
    pub protocol_port: u16,
    /// Login user.
    pub username: String,
    /// Password (password authentication).
    pub password: String,
    /// Private key, PEM or OpenSSH format (the content of `key_path`).
    pub key: Vec<u8>,
    /// Use the configured credentials as they are instead of ones the plugin provisions.
    pub use_static_credentials: bool,
    /// Transport keepalive interval (zero: none).
    pub keepalive: Duration,
    /// Budget for establishing a connection (retries while the instance boots).
    pub timeout: Duration,
}

/// Everything needed to open a connection to one instance (fleeting's `ConnectInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectInfo {
    /// The connector settings for this instance.
    pub connector: ConnectorConfig,
    /// The instance id.
    pub id: String,
    /// Private address, `host` or `host:port`.
    pub internal_addr: String,
    /// Public address.
    pub external_addr: String,
    /// When the credentials stop working; the host asks again after that.
    pub expires: Option<SystemTime>,
}

impl ConnectInfo {
    /// The address to dial: `external_addr` when `use_external_addr` and it is set,
    /// else `internal_addr`; when only one is set, that one (spec §3.2).
    pub fn address(&self, use_external_addr: bool) -> &str {
        match (self.internal_addr.is_empty(), self.external_addr.is_empty()) {
            (true, _) => &self.external_addr,
            (false, true) => &self.internal_addr,
            (false, false) if use_external_addr => &self.external_addr,
            (false, false) => &self.internal_addr,
        }
    }
}

/// An instance's state as `Update` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Requested or booting: capacity in flight.
    Creating,
    /// Up (readiness still to be checked by the host).
    Running,
    /// Being removed.
    Deleting,
    /// Gone.
    Deleted,
    /// The provider gave up creating it; the host removes it.
    Timeout,
    /// Being suspended.
    Suspending,
    /// Stopped with its disk kept.
    Suspended,
    /// Being resumed.
    Resuming,
}

impl State {
    /// The wire spelling (`creating`, `running`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Running => "running",
            Self::Deleting => "deleting",
            Self::Deleted => "deleted",
            Self::Timeout => "timeout",
            Self::Suspending => "suspending",
            Self::Suspended => "suspended",
            Self::Resuming => "resuming",
        }
    }

    /// Whether the host should poll fast while an instance is in this state.
    pub fn is_transitional(self) -> bool {
        matches!(
            self,
            Self::Creating | Self::Deleting | Self::Suspending | Self::Resuming
        )
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One instance of an `Update` listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Its id, accepted by `Decrease`, `ConnectInfo` and `Heartbeat`.
    pub id: String,
    /// Its state.
    pub state: State,
}

/// A provider's error, with fleeting's sentinels kept apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// `ErrInstanceUnhealthy`: the instance is gone or not usable.
    #[error("instance unhealthy: {0}")]
    Unhealthy(String),
    /// `ErrSuspendResumeNotSupported` / `ErrCapabilityNotSupported`.
    #[error("not supported: {0}")]
    NotSupported(String),
    /// Anything else (the cloud API failed, bad configuration, …).
    #[error("{0}")]
    Failed(String),
}

/// A result that may be partial: what succeeded, and the error that stopped the rest
/// (`Increase` and `Decrease` may do part of what was asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial<T> {
    /// What succeeded: a count for `Increase`, ids for `Decrease`.
    pub done: T,
    /// Why the rest did not, if it did not.
    pub error: Option<ProviderError>,
}

impl<T> Partial<T> {
    /// Everything succeeded.
    pub fn complete(done: T) -> Self {
        Self { done, error: None }
    }
}

/// A fleeting instance group (the nine methods of `provider.InstanceGroup`).
#[async_trait]
pub trait InstanceGroup: Send + Sync + 'static {
    /// Validates `config` (the JSON of `[runners.autoscaler.plugin_config]`), connects to
    /// the provider and prepares group-wide resources. Called once.
    async fn init(
        &self,
        config: &serde_json::Value,
        settings: ConnectorConfig,
    ) -> Result<ProviderInfo, ProviderError>;

    /// Every instance the group owns, with its state. An owned instance missing from
    /// the list is deleted.
    async fn update(&self) -> Result<Vec<Instance>, ProviderError>;

    /// Asks for `delta` more instances; returns how many requests were accepted.
    async fn increase(&self, delta: u32) -> Partial<u32>;

    /// Deletes the named instances; returns the ids whose deletion was accepted (an id
    /// that no longer exists counts as deleted).
    async fn decrease(&self, ids: &[String]) -> Partial<Vec<String>>;

    /// How to connect to instance `id`.
    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, ProviderError>;

    /// A cheap provider-side health check of instance `id`.
    async fn heartbeat(&self, id: &str) -> Result<(), ProviderError>;

    /// Releases the group-wide resources `init` made (never the instances).
    async fn shutdown(&self) -> Result<(), ProviderError>;

    /// Stops instances keeping their disks (only with the `suspend_resume` capability).
    async fn suspend(&self, ids: &[String]) -> Partial<Vec<String>> {
        let _ = ids;
        Partial {
            done: Vec::new(),
            error: Some(ProviderError::NotSupported("suspend".into())),
        }
    }

    /// Starts suspended instances again.
    async fn resume(&self, ids: &[String]) -> Partial<Vec<String>> {
        let _ = ids;
        Partial {
            done: Vec::new(),
            error: Some(ProviderError::NotSupported("resume".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_follows_use_external_addr_unless_only_one_is_set() {
        let both = ConnectInfo {
            internal_addr: "10.0.0.1".into(),
            external_addr: "203.0.113.1".into(),
            ..ConnectInfo::default()
        };
        assert_eq!(both.address(false), "10.0.0.1");
        assert_eq!(both.address(true), "203.0.113.1");
        let internal = ConnectInfo {
            internal_addr: "10.0.0.1".into(),
            ..ConnectInfo::default()
        };
        assert_eq!(internal.address(true), "10.0.0.1");
        let external = ConnectInfo {
            external_addr: "203.0.113.1".into(),
            ..ConnectInfo::default()
        };
        assert_eq!(external.address(false), "203.0.113.1");
    }
}
