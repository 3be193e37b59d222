//! Fleeting plugins over go-plugin gRPC (spec `fleet.md` §2 and §3).
//!
//! A fleeting plugin is a separate executable that a host starts, then drives over gRPC on
//! a Unix socket. Both ends live here, sharing one wire module:
//!
//! * **host** — [`resolve`] finds the binary, [`PluginClient::start`] spawns it (own
//!   process group, piped stdio, the magic cookie), reads its [`Handshake`] line,
//!   connects, checks `grpc.health.v1.Health` and relays its logs to
//!   [`PluginOptions::log`]; the client then *is* an [`InstanceGroup`](crate::InstanceGroup),
//!   and [`PluginClient::kill`] stops it (`GRPCController.Shutdown`, grace, SIGKILL to the
//!   group).
//! * **plugin SDK** — [`serve`] is a Rust plugin's `main`: cookie check, version
//!   negotiation, go-plugin's services plus the instance group, the handshake line on
//!   stdout (nothing else ever goes there), [`log()`] for hclog-shaped stderr lines.
//!   The `fleeting-plugin-dummy` binary serves [`DummyGroup`](crate::dummy::DummyGroup)
//!   with it.
//!
//! What is confirmed and what is provisional (spec §10):
//!
//! | Piece | Status |
//! |---|---|
//! | Handshake line format and parsing rules, core version 1 | confirmed (go-plugin) |
//! | Env vars `PLUGIN_PROTOCOL_VERSIONS`, `PLUGIN_MIN_PORT`/`MAX_PORT`, own process group | confirmed (go-plugin) |
//! | `grpc.health.v1.Health`, `plugin.GRPCController`, `plugin.GRPCStdio`, `plugin.GRPCBroker` | confirmed (go-plugin's protos) |
//! | hclog JSON on stderr, `[LEVEL]` prefixes, the `panic: ` rule | confirmed (go-plugin) |
//! | Start timeout 60 s, kill grace 2 s | confirmed (go-plugin defaults) |
//! | Magic cookie key and value | **provisional**: [`DEFAULT_COOKIE_KEY`]/[`DEFAULT_COOKIE_VALUE`], overridable by `GANTRY_FLEETING_COOKIE_KEY`/`_VALUE` |
//! | App protocol version 1 | **provisional** (most likely right) |
//! | The instance-group service `gantry.fleeting.v1.InstanceGroup` | **provisional**: Gantry's own descriptor; Go plugins will not understand it until it is replaced by the dumped real one |
//! | Sentinel errors as gRPC codes, partial results in the response | **provisional** (ours) |
//! | OCI plugin installation | not implemented: [`resolve`] says so |
//! | Auto-mTLS, broker multiplexing | not used (the host never asks for them) |

mod client;
mod constants;
mod error;
mod handshake;
mod log;
mod proto;
mod resolve;
mod serve;
mod supervised;
mod wire;

pub use client::{LogSink, PluginClient, PluginOptions};
pub use constants::{
    APP_PROTOCOL_VERSION, CORE_PROTOCOL_VERSION, DEFAULT_COOKIE_KEY, DEFAULT_COOKIE_VALUE,
    ENV_COOKIE_KEY, ENV_COOKIE_VALUE, ENV_MAX_PORT, ENV_MIN_PORT, ENV_PLUGIN_PATH,
    ENV_PROTOCOL_VERSIONS, ENV_UNIX_SOCKET_DIR, KILL_GRACE, START_TIMEOUT, cookie,
};
pub use error::PluginError;
pub use handshake::{Handshake, HandshakeError, Network, Protocol};
pub use log::{LogLevel, PluginLog, log};
pub use resolve::resolve;
pub use serve::serve;
pub use supervised::{RESTART_BACKOFF_MAX, RESTART_BACKOFF_MIN, SupervisedPlugin};
