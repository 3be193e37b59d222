//! The integration tests of `gantry-steps`, one test binary (`autotests = false` in
//! `Cargo.toml`): each file of `tests/` is a module here, and the shared harnesses
//! (`tests/*/mod.rs`) are modules the files reach as `crate::…`. Why one binary:
//! `gantry-test-support`'s documentation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod engine;

gantry_test_support::binary_checks!(no_module_cycle);
