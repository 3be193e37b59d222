//! `fleeting-plugin-dummy`: the in-memory [`DummyGroup`] served as a fleeting plugin, for
//! tests of the host and the taskscaler. Run by a host, never by hand
//! (`--version` excepted).

use std::process::ExitCode;

use gantry_fleet::dummy::DummyGroup;
use gantry_fleet::plugin;

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("fleeting-plugin-dummy {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    match plugin::serve(DummyGroup::new()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fleeting-plugin-dummy: failed to {error}");
            ExitCode::FAILURE
        }
    }
}
