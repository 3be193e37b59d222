//! `fleeting-plugin-local`: a fleeting plugin whose instances are OpenSSH servers on
//! loopback ([`gantry_fleet::local`]). Point `[runners.autoscaler] plugin` at it to run
//! `instance` jobs and watch autoscaling on one machine. Run by a host, never by hand
//! (`--version` excepted).

use std::process::ExitCode;

use gantry_fleet::local::LocalGroup;
use gantry_fleet::plugin;

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("fleeting-plugin-local {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    match plugin::serve(LocalGroup::new()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fleeting-plugin-local: failed to {error}");
            ExitCode::FAILURE
        }
    }
}
