//! The code `build.rs` generates from `proto/`.

#![allow(
    dead_code,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::panic
)]

/// `grpc.health.v1` (Check only).
pub(crate) mod health {
    include!(concat!(env!("OUT_DIR"), "/grpc.health.v1.rs"));
}

/// go-plugin's package `plugin`: controller, stdio, broker.
pub(crate) mod go_plugin {
    include!(concat!(env!("OUT_DIR"), "/plugin.rs"));
}

/// The provisional `gantry.fleeting.v1` instance group.
pub(crate) mod fleeting {
    include!(concat!(env!("OUT_DIR"), "/gantry.fleeting.v1.rs"));
}
