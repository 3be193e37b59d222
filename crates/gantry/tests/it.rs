//! The integration tests of `gantry`, one test binary (`autotests = false` in
//! `Cargo.toml`): each file of `tests/` is a module here, and the shared harnesses
//! (`tests/*/mod.rs`) are modules the files reach as `crate::…`. Why one binary:
//! `gantry-test-support`'s documentation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bench_dispatch;
mod browser;
mod e2e_otel;
mod e2e_runner_bad_input;
mod e2e_runner_cli;
mod e2e_runner_config_scripts;
mod e2e_runner_crash;
mod e2e_runner_custom;
mod e2e_runner_docker_autoscaler;
mod e2e_runner_docker_takeover;
mod e2e_runner_instance;
mod e2e_runner_instance_takeover;
mod e2e_runner_lifecycle;
mod e2e_runner_lost_request;
mod e2e_runner_metrics;
mod e2e_runner_resilience;
mod e2e_runner_secrets;
mod e2e_runner_stop;
mod e2e_runner_support;
mod e2e_runner_takeover;
mod e2e_runner_tls;
mod e2e_runner_trace;
mod gcl_docker_conformance;
mod gcl_run_conformance;
mod gcl_run_support;
mod lint;
mod remote_include;
mod run_docker;
mod run_e2e;
mod server_cli;
mod server_crash;
mod step_cli;

gantry_test_support::binary_checks!(no_module_cycle);
