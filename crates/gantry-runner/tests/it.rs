//! The integration tests of `gantry-runner`, one test binary (`autotests = false` in
//! `Cargo.toml`): each file of `tests/` is a module here, and the shared harnesses
//! (`tests/*/mod.rs`) are modules the files reach as `crate::…`. Why one binary:
//! `gantry-test-support`'s documentation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod artifacts_archive;
mod artifacts_collect;
mod artifacts_dotenv;
mod artifacts_extract;
mod cache_local;
mod config_load;
mod custom_executor;
mod docker_executor;
mod docker_support;
mod lifecycle_after_script;
mod lifecycle_artifacts;
mod lifecycle_cache;
mod lifecycle_cache_s3;
mod lifecycle_cancel;
mod lifecycle_clone_path;
mod lifecycle_debug_trace;
mod lifecycle_feature_flags;
mod lifecycle_functions;
mod lifecycle_masking;
mod lifecycle_output_limit;
mod lifecycle_protocol;
mod lifecycle_timeout;
mod mock_job_loop;
mod mock_resilience;
mod mock_support;
mod poll_requests;
mod poll_signals;
mod shell_exec;
mod shell_quote;
mod sources_git;
mod trace_masking;
mod trace_pipeline;

gantry_test_support::binary_checks!(no_module_cycle);

/// The job lifecycle knows no executor's internals: it reaches the executors only
/// through `executor`'s top (`Executor::prepare`/`resume`/`run`/`reattach`/`cleanup`
/// and the stage vocabulary), never `crate::executor::{shell, docker, custom, …}`.
#[test]
fn the_lifecycle_reaches_executors_only_through_their_seam() {
    gantry_test_support::assert_only_through_the_top_of(
        env!("CARGO_MANIFEST_DIR"),
        "job",
        "executor",
    );
}
