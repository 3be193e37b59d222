//! The file layer: `config.toml` exactly as written, every key optional.
//!
//! These types only check TOML types (a string where a string belongs). Meaning, ranges
//! and defaults are the job of [`super::resolve`]. Keys are gitlab-runner's, including
//! the CamelCase ones of `[runners.cache]`. Field order is the order `save` writes
//! (scalars before sub-tables, as TOML requires).

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigFile {
    /// Jobs that may run at once across all `[[runners]]`.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub concurrent: Option<i64>,
    /// Seconds between job requests of one runner entry (≤ 0 means 3).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub check_interval: Option<i64>,
    /// `debug`, `info`, `warn`, `error`, `fatal` or `panic`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// `host:port` of the metrics/health listener (`:9252` = all interfaces).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen_address: Option<String>,
    /// Seconds a graceful shutdown may take before jobs are forcefully canceled.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub shutdown_timeout: Option<i64>,
    /// Labels every entry sends with its requests (an entry's own win).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// `[[runners]]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runners: Vec<RunnerFile>,
    /// `[otel]`: OpenTelemetry traces of the jobs this runner runs (a Gantry key; the
    /// `OTEL_*` variables fill what it leaves out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otel: Option<OtelFile>,
}

/// `[otel]`: the `OTEL_*` variables' settings, by key (`endpoint` is
/// `OTEL_EXPORTER_OTLP_ENDPOINT`, …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OtelFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traces_endpoint: Option<String>,
    /// `grpc`, `http/protobuf` or `http/json`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// `OTEL_TRACES_SAMPLER`'s names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler_arg: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_attributes: Option<std::collections::BTreeMap<String, String>>,
}

/// One `[[runners]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunnerFile {
    /// Free-form name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Server URL (`https://gitlab.example.com/`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Runner id the server returned at registration.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub id: Option<i64>,
    /// Runner authentication token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// PEM certificates trusted for the server's TLS certificate, besides the system's.
    #[serde(rename = "tls-ca-file", skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<String>,
    /// PEM client certificate (chain) for servers that ask for one.
    #[serde(rename = "tls-cert-file", skip_serializing_if = "Option::is_none")]
    pub tls_cert_file: Option<String>,
    /// The PEM private key of `tls-cert-file`.
    #[serde(rename = "tls-key-file", skip_serializing_if = "Option::is_none")]
    pub tls_key_file: Option<String>,
    /// When the token was obtained (written by `register`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_obtained_at: Option<toml::value::Datetime>,
    /// When the token expires (written by `register`; the epoch or absent = never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_expires_at: Option<toml::value::Datetime>,
    /// `shell`, `docker` or `custom`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor: Option<String>,
    /// Jobs this entry may run at once (0 = no limit of its own).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub limit: Option<i64>,
    /// Job requests this entry may have in flight at once (≤ 0 means 1).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub request_concurrency: Option<i64>,
    /// Where builds are checked out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builds_dir: Option<String>,
    /// Where the local cache lives.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_dir: Option<String>,
    /// Extra job environment, `["NAME=value", …]`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub environment: Option<Vec<String>>,
    /// Job log limit in KiB (≤ 0 means 4096).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub output_limit: Option<i64>,
    /// `bash` or `sh`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Ignore `CI_DEBUG_TRACE` (no shell tracing in this entry's jobs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debug_trace_disabled: Option<bool>,
    /// Failed job requests in a row after which the entry stops asking for
    /// `unhealthy_interval` (gitlab-runner's health check).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub unhealthy_requests_limit: Option<i64>,
    /// How long an unhealthy entry stops asking, a Go duration (`"1h"`, `"90s"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_interval: Option<String>,
    /// Labels this entry sends with its requests (`info.labels`), over the global ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// The URL git clones from instead of the one in the job (its host and path prefix).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clone_url: Option<String>,
    /// Commands run before the job's `hooks:pre_get_sources_script` and the checkout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_get_sources_script: Option<String>,
    /// Commands run after the checkout and the job's `hooks:post_get_sources_script`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_get_sources_script: Option<String>,
    /// The deprecated name of `pre_get_sources_script`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_clone_script: Option<String>,
    /// The deprecated name of `post_get_sources_script`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_clone_script: Option<String>,
    /// Commands run before each job script stage (`before_script` + `script`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pre_build_script: Option<String>,
    /// Commands run after each job script stage, before `after_script`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post_build_script: Option<String>,
    /// `[runners.cache]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheFile>,
    /// `[runners.docker]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerFile>,
    /// `[runners.custom]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomFile>,
    /// `[runners.autoscaler]`: the fleet of the `instance` executor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<AutoscalerFile>,
    /// `[runners.feature_flags]`: `FF_NAME = true|false`, over the jobs' variables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_flags: Option<std::collections::BTreeMap<String, toml::Value>>,
    /// `[runners.custom_build_dir]`: whether jobs may set `GIT_CLONE_PATH`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_build_dir: Option<CustomBuildDirFile>,
}

/// `[runners.custom_build_dir]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CustomBuildDirFile {
    /// Jobs may set `GIT_CLONE_PATH` (default: on for the Docker executors, off for the
    /// others, as gitlab-runner has it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `[runners.cache]` (gitlab-runner spells these keys in CamelCase).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheFile {
    /// `s3`, `gcs` or `azure`; absent = local cache in `cache_dir`.
    #[serde(rename = "Type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Prefix of object names.
    #[serde(rename = "Path", skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Share the cache between runners.
    #[serde(rename = "Shared", skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    /// Largest archive uploaded, in bytes (0 = no limit).
    #[serde(
        rename = "MaxUploadedArchiveSize",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "int"
    )]
    pub max_uploaded_archive_size: Option<i64>,
    /// `[runners.cache.s3]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3CacheConfig>,
    /// `[runners.cache.gcs]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsCacheConfig>,
    /// `[runners.cache.azure]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureCacheConfig>,
}

/// `[runners.cache.s3]`: kept as written (plain strings, no defaults to resolve).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct S3CacheConfig {
    /// `host[:port]` of the S3-compatible server.
    #[serde(rename = "ServerAddress", skip_serializing_if = "Option::is_none")]
    pub server_address: Option<String>,
    /// Access key id.
    #[serde(rename = "AccessKey", skip_serializing_if = "Option::is_none")]
    pub access_key: Option<String>,
    /// Secret key.
    #[serde(rename = "SecretKey", skip_serializing_if = "Option::is_none")]
    pub secret_key: Option<String>,
    /// Bucket.
    #[serde(rename = "BucketName", skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,
    /// Region.
    #[serde(rename = "BucketLocation", skip_serializing_if = "Option::is_none")]
    pub bucket_location: Option<String>,
    /// Plain HTTP.
    #[serde(rename = "Insecure", skip_serializing_if = "Option::is_none")]
    pub insecure: Option<bool>,
    /// `access-key` or `iam`.
    #[serde(rename = "AuthenticationType", skip_serializing_if = "Option::is_none")]
    pub authentication_type: Option<String>,
}

/// `[runners.cache.gcs]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct GcsCacheConfig {
    /// Service account e-mail.
    #[serde(rename = "AccessID", skip_serializing_if = "Option::is_none")]
    pub access_id: Option<String>,
    /// Service account private key.
    #[serde(rename = "PrivateKey", skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
    /// Path of a credentials JSON file.
    #[serde(rename = "CredentialsFile", skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<String>,
    /// Bucket.
    #[serde(rename = "BucketName", skip_serializing_if = "Option::is_none")]
    pub bucket_name: Option<String>,
}

/// `[runners.cache.azure]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AzureCacheConfig {
    /// Storage account.
    #[serde(rename = "AccountName", skip_serializing_if = "Option::is_none")]
    pub account_name: Option<String>,
    /// Account key.
    #[serde(rename = "AccountKey", skip_serializing_if = "Option::is_none")]
    pub account_key: Option<String>,
    /// Container.
    #[serde(rename = "ContainerName", skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
    /// Storage domain (default `blob.core.windows.net`).
    #[serde(rename = "StorageDomain", skip_serializing_if = "Option::is_none")]
    pub storage_domain: Option<String>,
}

/// `[runners.docker]`: the common keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerFile {
    /// Default image when the job names none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Run containers privileged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    /// Extra volumes (`/host:/container[:ro]` or `/container`).
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub volumes: Option<Vec<String>>,
    /// `always`, `never`, `if-not-present`: one, or a list tried in order.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "one_or_many"
    )]
    pub pull_policy: Option<Vec<String>>,
    /// Image patterns jobs may use.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub allowed_images: Option<Vec<String>>,
    /// Service image patterns jobs may use.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub allowed_services: Option<Vec<String>>,
    /// Pull policies jobs may ask for.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub allowed_pull_policies: Option<Vec<String>>,
    /// Memory limit, e.g. `512m`, `2g`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// CPU limit, e.g. `1.5`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// Docker network mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_mode: Option<String>,
    /// `host:ip` entries.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub extra_hosts: Option<Vec<String>>,
    /// DNS servers.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub dns: Option<Vec<String>>,
    /// Capabilities to add.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub cap_add: Option<Vec<String>>,
    /// Capabilities to drop.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub cap_drop: Option<Vec<String>>,
    /// GPUs for the job's containers, in the Docker CLI's `--gpus` syntax (`all`,
    /// `"device=0,1"`, `count=2,capabilities=compute`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<String>,
    /// GPUs for the job's service containers, the same syntax.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_gpus: Option<String>,
    /// Seconds to wait for services (default 30; -1 = do not wait).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub wait_for_services_timeout: Option<i64>,
    /// User the job's commands run as (default: the image's user).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Gantry extension: jobs without `image:` run in the shell executor instead of
    /// the default image (default false, gitlab-runner's behaviour).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shell_without_image: Option<bool>,
    /// The engine's address (`unix:///path` or `tcp://host:port`; default
    /// `DOCKER_HOST`, else the default socket). For docker-autoscaler: the engine's
    /// address on the instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// `[runners.custom]`: the custom executor's programs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CustomFile {
    /// Config stage program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_exec: Option<String>,
    /// Its arguments.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub config_args: Option<Vec<String>>,
    /// Its timeout in seconds (default 3600).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub config_exec_timeout: Option<i64>,
    /// Prepare stage program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare_exec: Option<String>,
    /// Its arguments.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub prepare_args: Option<Vec<String>>,
    /// Its timeout in seconds (default 3600).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub prepare_exec_timeout: Option<i64>,
    /// Run stage program (required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_exec: Option<String>,
    /// Its arguments.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub run_args: Option<Vec<String>>,
    /// Cleanup stage program.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup_exec: Option<String>,
    /// Its arguments.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub cleanup_args: Option<Vec<String>>,
    /// Its timeout in seconds (default 3600).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub cleanup_exec_timeout: Option<i64>,
    /// Seconds between SIGTERM and SIGKILL (default 600).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub graceful_kill_timeout: Option<i64>,
    /// Seconds to wait after SIGKILL (default 600).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub force_kill_timeout: Option<i64>,
}

/// `[runners.autoscaler]` (spec `fleet.md` §4.2). Durations are Go durations
/// (`"15m"`, `"2s"`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AutoscalerFile {
    /// The fleeting plugin: a path, or a name found as `fleeting-plugin-<name>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// Concurrent jobs per instance (default 1).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub capacity_per_instance: Option<i64>,
    /// Jobs an instance may serve before it is removed (0: unlimited).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub max_use_count: Option<i64>,
    /// The most instances in any state (0: unlimited).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub max_instances: Option<i64>,
    /// Delete every instance when the runner stops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete_instances_on_shutdown: Option<bool>,
    /// Run on every new instance; a non-zero exit removes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_ready_command: Option<String>,
    /// How long a job waits for an instance (default `15m`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_acquire_timeout: Option<String>,
    /// `Update` cadence (default `1m`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_interval: Option<String>,
    /// `Update` cadence while instances change (default `2s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_interval_when_expecting: Option<String>,
    /// When to ask again for a deletion that had no effect (default `1m`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deletion_retry_interval: Option<String>,
    /// Poll interval while deleting at shutdown (default `10s`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_deletion_interval: Option<String>,
    /// Polls to confirm deletions at shutdown (default 3).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub shutdown_deletion_retries: Option<i64>,
    /// Consecutive connection failures before an instance is replaced (default 3).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub failure_threshold: Option<i64>,
    /// Print the instance's internal address in the job log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_internal_ip: Option<bool>,
    /// Print the instance's external address in the job log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_external_ip: Option<bool>,
    /// `[runners.autoscaler.plugin_config]`: passed to the plugin as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_config: Option<toml::Table>,
    /// `[runners.autoscaler.connector_config]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connector_config: Option<ConnectorFile>,
    /// `[runners.autoscaler.scale_throttle]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_throttle: Option<ScaleThrottleFile>,
    /// `[runners.autoscaler.state_storage]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_storage: Option<StateStorageFile>,
    /// `[[runners.autoscaler.policy]]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Vec<PolicyFile>>,
}

/// `[runners.autoscaler.state_storage]`: keep instance records across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StateStorageFile {
    /// Keep them (default false: instances found at start are removed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Where (default `.taskscaler`, next to the configuration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Keep instances that held jobs when the runner stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_instance_with_acquisitions: Option<bool>,
}

/// `[runners.autoscaler.scale_throttle]`: how fast instances may be asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScaleThrottleFile {
    /// New instances per second (0: 100; -1: unlimited).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub limit: Option<i64>,
    /// The most at once (0: `max_instances`, else the limit).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub burst: Option<i64>,
}

/// `[runners.autoscaler.connector_config]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectorFile {
    /// `linux`, `windows`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// `amd64`, `arm64`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// `ssh` (the only one Gantry speaks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The protocol's port (default 22).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub protocol_port: Option<i64>,
    /// Login user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// Private key file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_path: Option<String>,
    /// Use these credentials as they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_static_credentials: Option<bool>,
    /// Keepalive interval (Go duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<String>,
    /// Connection budget (Go duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Dial the external address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_external_addr: Option<bool>,
}

/// One `[[runners.autoscaler.policy]]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyFile {
    /// Cron periods (default: always).
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "string_list"
    )]
    pub periods: Option<Vec<String>>,
    /// The periods' time zone (only `UTC`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Idle slots to keep.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub idle_count: Option<i64>,
    /// Idle time before removal (Go duration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_time: Option<String>,
    /// Extra idle slots per slot in use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale_factor: Option<f64>,
    /// Upper bound of the scale factor's result.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "int")]
    pub scale_factor_limit: Option<i64>,
    /// Ask for jobs only while a slot is free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptive_mode: Option<bool>,
}

/// An integer of any sign; ranges are checked when resolving.
fn int<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    struct Int;
    impl Visitor<'_> for Int {
        type Value = i64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
            Ok(v)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
            i64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
        }
    }
    deserializer.deserialize_i64(Int).map(Some)
}

/// An array of strings.
fn string_list<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    struct List;
    impl<'de> Visitor<'de> for List {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of strings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_seq(List).map(Some)
}

/// A string or an array of strings (gitlab-runner's `pull_policy`).
fn one_or_many<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    struct OneOrMany;
    impl<'de> Visitor<'de> for OneOrMany {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or an array of strings")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
            Ok(vec![v.to_owned()])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    deserializer.deserialize_any(OneOrMany).map(Some)
}
