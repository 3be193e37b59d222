//! The integration tests of `gantry-fleet`, one test binary (`autotests = false` in
//! `Cargo.toml`): each file of `tests/` is a module here, and the shared harnesses
//! (`tests/*/mod.rs`) are modules the files reach as `crate::…`. Why one binary:
//! `gantry-test-support`'s documentation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod connector_ssh;
mod connector_sshd;
mod plugin_failures;
mod plugin_lifecycle;
mod plugin_restart;

#[test]
fn every_test_file_is_a_module_of_this_binary() {
    gantry_test_support::assert_every_test_file_is_a_module(
        env!("CARGO_MANIFEST_DIR"),
        include_str!("it.rs"),
    );
}

/// No cycle among `src/`'s top-level modules (how it is read: `gantry_test_support::modules`).
#[test]
fn the_top_level_modules_form_no_cycle() {
    gantry_test_support::assert_no_module_cycle(env!("CARGO_MANIFEST_DIR"));
}
