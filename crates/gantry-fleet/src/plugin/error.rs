//! What can go wrong finding, starting, talking to and serving a plugin.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use super::handshake::HandshakeError;

/// A plugin could not be found, started or served. Messages read after "failed to".
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// No executable matched the reference.
    #[error(
        "find plugin {reference:?}: none of these exists:\n{}\n\
         Install it as fleeting-plugin-<name> on PATH or in $FLEETING_PLUGIN_PATH, \
         or give its path.",
        list(looked)
    )]
    NotFound {
        /// The configured reference.
        reference: String,
        /// Every path tried, in order.
        looked: Vec<PathBuf>,
    },
    /// An OCI reference (`registry/repository/name:constraint`) with no local binary.
    #[error(
        "find plugin {reference:?}: installing plugins from an OCI registry is not \
         supported yet\nPut the plugin binary on PATH as fleeting-plugin-<name> and set \
         `plugin = \"<name>\"`, or set `plugin` to the binary's path."
    )]
    OciNotSupported {
        /// The configured reference.
        reference: String,
    },
    /// The process could not be spawned.
    #[error("start plugin {}: {source}", path.display())]
    Spawn {
        /// The binary.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The process exited before its handshake.
    #[error(
        "start plugin {plugin}: it exited ({status}) before printing its handshake line{}",
        stderr_tail(stderr)
    )]
    ExitedBeforeHandshake {
        /// The plugin's name.
        plugin: String,
        /// How it exited.
        status: ExitStatus,
        /// The last lines it wrote to stderr.
        stderr: Vec<String>,
    },
    /// The plugin closed its stdout without a handshake but kept running.
    #[error("start plugin {plugin}: it closed its stdout without printing a handshake line")]
    NoHandshake {
        /// The plugin's name.
        plugin: String,
    },
    /// The handshake or the connection took longer than the start timeout.
    #[error(
        "start plugin {plugin}: no {waiting_for} within {timeout:?}\n\
         A plugin prints its handshake line as soon as it serves; check its stderr \
         output, or raise the start timeout."
    )]
    StartTimeout {
        /// The plugin's name.
        plugin: String,
        /// The start timeout.
        timeout: Duration,
        /// `handshake line`, `connection`.
        waiting_for: &'static str,
    },
    /// The handshake line was refused.
    #[error("start plugin {plugin}: {source}")]
    Handshake {
        /// The plugin's name.
        plugin: String,
        /// Why.
        source: HandshakeError,
    },
    /// The gRPC connection failed.
    #[error("connect to plugin {plugin} at {address}: {}", chain(source))]
    Connect {
        /// The plugin's name.
        plugin: String,
        /// The handshake's address.
        address: String,
        /// Why.
        source: tonic::transport::Error,
    },
    /// The health check did not report `SERVING` for `plugin`.
    #[error("start plugin {plugin}: its health check {detail}")]
    Unhealthy {
        /// The plugin's name.
        plugin: String,
        /// What the check said.
        detail: String,
    },
    /// The plugin binary was run without the magic cookie (not by a host).
    #[error(
        "serve as a fleeting plugin: the magic cookie {key} is not set to the expected value\n\
         This binary is a plugin: configure it as `plugin` of [runners.autoscaler] \
         instead of running it by hand."
    )]
    NotLaunchedByHost {
        /// The cookie's variable name.
        key: String,
    },
    /// Setting up or tearing down the plugin's socket failed.
    #[error("serve as a fleeting plugin: {what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// Why.
        source: io::Error,
    },
    /// The gRPC server failed.
    #[error("serve as a fleeting plugin: {}", chain(source))]
    Serve {
        /// Why.
        source: tonic::transport::Error,
    },
}

/// A transport error's own text ("transport error") says little: add its causes.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text.push_str(": ");
        text.push_str(&error.to_string());
        cause = error.source();
    }
    text
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|path| format!("  {}", path.display()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn stderr_tail(lines: &[String]) -> String {
    if lines.is_empty() {
        "; it wrote nothing to stderr".to_owned()
    } else {
        format!("; the end of its stderr:\n  {}", lines.join("\n  "))
    }
}
