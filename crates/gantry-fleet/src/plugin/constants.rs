//! The protocol's constants and every environment variable it reads, in one place.
//!
//! The magic cookie and the app protocol version are fleeting's own choices and are
//! **provisional** (spec `fleet.md` §10.1): Gantry hosts and Gantry plugins agree on the
//! values below, and both sides let `GANTRY_FLEETING_COOKIE_KEY` /
//! `GANTRY_FLEETING_COOKIE_VALUE` replace them (to test against a real Go plugin once its
//! cookie is known).

use std::time::Duration;

/// go-plugin's core protocol version: the first handshake field is always this.
pub const CORE_PROTOCOL_VERSION: u32 = 1;

/// The app (fleeting) protocol version Gantry speaks. Provisional (spec §10.1).
pub const APP_PROTOCOL_VERSION: u32 = 1;

/// The magic cookie's variable name. Provisional (spec §10.1).
pub const DEFAULT_COOKIE_KEY: &str = "FLEETING_PLUGIN";

/// The magic cookie's value. Provisional (spec §10.1): a fixed value of Gantry's choice.
pub const DEFAULT_COOKIE_VALUE: &str = "6c3b0e1f8a9d47d2b5a4e7c1f0d9a8b3";

/// How long the host waits for the handshake line (go-plugin's default).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the host waits for the plugin to exit after `GRPCController.Shutdown` before it
/// kills the plugin's process group (go-plugin's default).
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// Overrides [`DEFAULT_COOKIE_KEY`], on the host and in the plugin.
pub const ENV_COOKIE_KEY: &str = "GANTRY_FLEETING_COOKIE_KEY";
/// Overrides [`DEFAULT_COOKIE_VALUE`], on the host and in the plugin.
pub const ENV_COOKIE_VALUE: &str = "GANTRY_FLEETING_COOKIE_VALUE";
/// Where installed plugins live (fleeting's variable); searched before `PATH`.
pub const ENV_PLUGIN_PATH: &str = "FLEETING_PLUGIN_PATH";
/// Comma-separated app protocol versions the host speaks (set by the host).
pub const ENV_PROTOCOL_VERSIONS: &str = "PLUGIN_PROTOCOL_VERSIONS";
/// Lowest TCP port a plugin may listen on (set by the host; TCP plugins only).
pub const ENV_MIN_PORT: &str = "PLUGIN_MIN_PORT";
/// Highest TCP port a plugin may listen on (set by the host; TCP plugins only).
pub const ENV_MAX_PORT: &str = "PLUGIN_MAX_PORT";
/// The directory a plugin creates its socket in (optional; default: a fresh temp dir).
pub const ENV_UNIX_SOCKET_DIR: &str = "PLUGIN_UNIX_SOCKET_DIR";

/// go-plugin's host defaults for [`ENV_MIN_PORT`] and [`ENV_MAX_PORT`].
pub(crate) const PORT_RANGE: (u16, u16) = (10000, 25000);

/// The magic cookie in force: the defaults unless the environment overrides them.
pub fn cookie() -> (String, String) {
    let key = std::env::var(ENV_COOKIE_KEY).unwrap_or_else(|_| DEFAULT_COOKIE_KEY.to_owned());
    let value = std::env::var(ENV_COOKIE_VALUE).unwrap_or_else(|_| DEFAULT_COOKIE_VALUE.to_owned());
    (key, value)
}
