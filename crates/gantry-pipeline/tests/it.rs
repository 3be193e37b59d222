//! The integration tests of `gantry-pipeline`, one test binary (`autotests = false` in
//! `Cargo.toml`): each file of `tests/` is a module here, and the shared harnesses
//! (`tests/*/mod.rs`) are modules the files reach as `crate::…`. Why one binary:
//! `gantry-test-support`'s documentation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cases;
mod compare_to;
mod conformance;
mod file_list;
mod fuzz_regressions;
mod gcl_conformance;
mod limits;
mod merged;
mod pipeline_inputs;

gantry_test_support::binary_checks!(no_module_cycle);
