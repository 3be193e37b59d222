//! The integration tests of `gantry-server`, one test binary (`autotests = false` in
//! `Cargo.toml`): each file of `tests/` is a module here, and the shared harnesses
//! (`tests/*/mod.rs`) are modules the files reach as `crate::…`. Why one binary:
//! `gantry-test-support`'s documentation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod coordinator_deletion;
mod coordinator_downstream;
mod coordinator_payload;
mod coordinator_pipelines;
mod coordinator_pushes;
mod coordinator_queue;
mod coordinator_runner_api;
mod coordinator_schedules;
mod coordinator_secrets;
mod coordinator_shared_traces;
mod coordinator_support;
mod coordinator_traces;
mod http_artifacts_api;
mod http_auth;
mod http_ci_lint;
mod http_environments;
mod http_forge_hooks;
mod http_git;
mod http_gitlab_runner;
mod http_group_variables;
mod http_id_tokens;
mod http_instance_variables;
mod http_job_token_scope;
mod http_long_poll;
mod http_malformed;
mod http_metrics;
mod http_pipeline_inputs;
mod http_project_jobs;
mod http_project_settings;
mod http_project_variables;
mod http_protected_refs;
mod http_repository;
mod http_resource_groups;
mod http_runner_api;
mod http_runner_settings;
mod http_schedules;
mod http_state_machine;
mod http_support;
mod http_triggers;
mod http_ui;
mod http_user_api;
mod object_storage;
mod scenarios;

gantry_test_support::binary_checks!(no_module_cycle);
