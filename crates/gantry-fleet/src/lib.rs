//! Gantry's fleet (spec `fleet.md`): the instances autoscaled executors run jobs on.
//!
//! * [`provider`] — the instance group contract (fleeting's `InstanceGroup`), one trait
//!   for plugins in another process and groups in this one.
//! * [`plugin`] — fleeting plugins: the go-plugin handshake, the host that starts a
//!   plugin and talks gRPC to it, and the SDK a Rust plugin serves with.
//! * [`taskscaler`] — capacity: reservations, acquisitions, scaling up and down.
//! * [`connector`] — SSH to an acquired instance: run commands, move directories.
//! * [`dummy`] — an in-memory group (fleeting's dummy plugin).
//!
//! The fleet never runs job scripts: executors ask it for an instance and a connection.

pub mod connector;
pub mod dummy;
pub mod local;
pub mod plugin;
pub mod provider;
pub mod sshd;
pub mod taskscaler;

pub use provider::{
    ConnectInfo, ConnectorConfig, Instance, InstanceGroup, Partial, ProviderError, ProviderInfo,
    State,
};
