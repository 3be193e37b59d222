//! The resolved layer: what the runner runs with. Every value has its default applied,
//! every closed set is an enum, every range is checked.

use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

pub use super::schema::{AzureCacheConfig, GcsCacheConfig, S3CacheConfig};

/// Default `concurrent`.
pub const DEFAULT_CONCURRENT: usize = 1;
/// Default `check_interval` (also used when the file says ≤ 0).
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(3);
/// Default `shutdown_timeout` (also used when the file says ≤ 0).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `output_limit` in KiB (also used when the file says ≤ 0).
pub const DEFAULT_OUTPUT_LIMIT_KIB: u64 = 4096;
/// Default `[runners.docker] wait_for_services_timeout`.
pub const DEFAULT_WAIT_FOR_SERVICES_TIMEOUT: Duration = Duration::from_secs(30);
/// Default timeout of the custom executor's config/prepare/cleanup programs.
pub const DEFAULT_CUSTOM_EXEC_TIMEOUT: Duration = Duration::from_secs(3600);
/// Default graceful and force kill timeouts of the custom executor.
pub const DEFAULT_CUSTOM_KILL_TIMEOUT: Duration = Duration::from_secs(600);

/// The runner configuration (`config.toml`), resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Jobs that may run at once across all runner entries (≥ 1).
    pub concurrent: NonZeroUsize,
    /// How often each runner entry asks for a job.
    pub check_interval: Duration,
    /// Log verbosity.
    pub log_level: LogLevel,
    /// Metrics/health listener, if any.
    pub listen_address: Option<ListenAddress>,
    /// How long a graceful shutdown may take.
    pub shutdown_timeout: Duration,
    /// Global `labels`: sent by every entry (see [`Config::labels_of`]).
    pub labels: std::collections::BTreeMap<String, String>,
    /// `[[runners]]`, in file order.
    pub runners: Vec<RunnerConfig>,
    /// `[otel]`: tracing as the file sets it (the binary puts it over the `OTEL_*`
    /// variables).
    pub telemetry: gantry_telemetry::Settings,
}

impl Config {
    /// The labels entry `runner` sends with its requests (`info.labels`): the global
    /// ones, and its own over them.
    pub fn labels_of(&self, runner: &RunnerConfig) -> std::collections::BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.extend(runner.labels.clone());
        labels
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            concurrent: NonZeroUsize::MIN,
            check_interval: DEFAULT_CHECK_INTERVAL,
            log_level: LogLevel::Info,
            listen_address: None,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            labels: std::collections::BTreeMap::new(),
            runners: Vec::new(),
            telemetry: gantry_telemetry::Settings::default(),
        }
    }
}

/// `log_level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// `trace`.
    Trace,
    /// `debug`.
    Debug,
    /// `info` (default).
    Info,
    /// `warn` (also spelled `warning`).
    Warn,
    /// `error`.
    Error,
    /// `fatal`.
    Fatal,
    /// `panic`.
    Panic,
}

impl LogLevel {
    /// Every value, as written in the file.
    pub const NAMES: &'static [&'static str] =
        &["trace", "debug", "info", "warn", "error", "fatal", "panic"];

    /// The file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
            Self::Fatal => "fatal",
            Self::Panic => "panic",
        }
    }

    /// The executor named `value` (`shell`, `docker`, `custom`).
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "trace" => Self::Trace,
            "debug" => Self::Debug,
            "info" => Self::Info,
            "warn" | "warning" => Self::Warn,
            "error" => Self::Error,
            "fatal" => Self::Fatal,
            "panic" => Self::Panic,
            _ => return None,
        })
    }
}

/// `listen_address`: `host:port`; an empty host (`:9252`) means all interfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    /// Host name or IP (IPv6 without brackets); empty = all interfaces.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl ListenAddress {
    /// The address to bind: an empty host becomes `0.0.0.0`.
    pub fn bind_host(&self) -> &str {
        if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        let (host, port) = value.trim().rsplit_once(':')?;
        let port = port.parse().ok()?;
        let host = match host.strip_prefix('[') {
            Some(inner) => inner.strip_suffix(']')?,
            None if host.contains(':') => return None,
            None => host,
        };
        if host.chars().any(|c| c.is_whitespace() || c == '/') {
            return None;
        }
        Some(Self {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// One `[[runners]]` entry, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerConfig {
    /// Free-form name, if given.
    pub name: Option<String>,
    /// Server URL, as written (validated `http://` or `https://`).
    pub url: String,
    /// Runner id from registration, if known.
    pub id: Option<i64>,
    /// Runner authentication token (never empty).
    pub token: String,
    /// When the token was obtained (RFC 3339), if recorded.
    pub token_obtained_at: Option<String>,
    /// When the token expires (RFC 3339), if recorded.
    pub token_expires_at: Option<String>,
    /// Which executor runs this entry's jobs; chosen here, once.
    pub executor: ExecutorKind,
    /// Jobs this entry may run at once; `None` = only `concurrent` applies.
    pub limit: Option<NonZeroUsize>,
    /// Job requests this entry may have in flight at once.
    pub request_concurrency: NonZeroUsize,
    /// Where builds are checked out; `None` = the executor's default.
    pub builds_dir: Option<PathBuf>,
    /// Where the local cache lives; `None` = the executor's default.
    pub cache_dir: Option<PathBuf>,
    /// `tls-ca-file`, `tls-cert-file`, `tls-key-file`.
    pub tls: TlsFiles,
    /// Extra job variables from `environment`, in file order.
    pub environment: Vec<EnvVar>,
    /// `[runners.feature_flags]`: each job sees these values, whatever its own variables
    /// say (gitlab-runner gives the configuration precedence).
    pub feature_flags: std::collections::BTreeMap<String, bool>,
    /// Job log limit in KiB.
    pub output_limit_kib: u64,
    /// The shell the shell executor runs scripts with.
    pub shell: ShellKind,
    /// `debug_trace_disabled`: `CI_DEBUG_TRACE` is ignored (with a warning in the log).
    pub debug_trace_disabled: bool,
    /// `unhealthy_requests_limit` / `unhealthy_interval`; `None` (neither given): failed
    /// job requests are retried with a backoff of up to a minute.
    pub unhealthy: Option<Unhealthy>,
    /// This entry's own `labels` (the global ones are added when requests are made).
    pub labels: std::collections::BTreeMap<String, String>,
    /// `clone_url`: where git clones from instead of the job's repository URL (scheme,
    /// host and path prefix; the project's path is appended).
    pub clone_url: Option<String>,
    /// The entry's own scripts around the job's (`pre_get_sources_script`, …).
    pub scripts: RunnerScripts,
    /// `[runners.cache]`.
    pub cache: CacheConfig,
    /// `[runners.docker]`, if present (the docker executor uses defaults otherwise).
    pub docker: Option<DockerConfig>,
    /// `[runners.custom]`, if present (required by the custom executor).
    pub custom: Option<CustomConfig>,
    /// `[runners.autoscaler]`, if present (required by the instance executor).
    pub autoscaler: Option<AutoscalerConfig>,
    /// `[runners.custom_build_dir] enabled`; `None`: the executor's default
    /// ([`RunnerConfig::custom_build_dir_enabled`]).
    pub custom_build_dir: Option<bool>,
}

impl RunnerConfig {
    /// A new entry with defaults, as `register` creates it.
    pub fn new(url: impl Into<String>, token: impl Into<String>, executor: ExecutorKind) -> Self {
        Self {
            name: None,
            url: url.into(),
            id: None,
            token: token.into(),
            token_obtained_at: None,
            token_expires_at: None,
            executor,
            limit: None,
            request_concurrency: NonZeroUsize::MIN,
            builds_dir: None,
            cache_dir: None,
            tls: TlsFiles::default(),
            environment: Vec::new(),
            feature_flags: std::collections::BTreeMap::new(),
            output_limit_kib: DEFAULT_OUTPUT_LIMIT_KIB,
            shell: ShellKind::Bash,
            debug_trace_disabled: false,
            unhealthy: None,
            labels: std::collections::BTreeMap::new(),
            clone_url: None,
            scripts: RunnerScripts::default(),
            cache: CacheConfig::default(),
            docker: None,
            custom: None,
            autoscaler: None,
            custom_build_dir: None,
        }
    }

    /// Whether a job may set `GIT_CLONE_PATH` (`in_docker`: it runs in containers): as
    /// configured, else gitlab-runner's default (on in containers, where each slot has its
    /// own `/builds`; off for the shell, custom and instance executors).
    pub fn custom_build_dir_enabled(&self, in_docker: bool) -> bool {
        self.custom_build_dir.unwrap_or(in_docker)
    }

    /// `output_limit` in bytes (what the trace buffer enforces).
    pub fn output_limit_bytes(&self) -> u64 {
        self.output_limit_kib.saturating_mul(1024)
    }
}

/// An entry's scripts around the job's, as gitlab-runner runs them: each is one
/// command (several lines are one multi-line command).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerScripts {
    /// Before the job's `hooks:pre_get_sources_script` and the checkout (also read as
    /// `pre_clone_script`).
    pub pre_get_sources: Option<String>,
    /// After the checkout and the job's `hooks:post_get_sources_script` (also read as
    /// `post_clone_script`).
    pub post_get_sources: Option<String>,
    /// First in each job script stage (`step_script`: before `before_script`).
    pub pre_build: Option<String>,
    /// Last in each job script stage (after `script`; not in `after_script`).
    pub post_build: Option<String>,
}

/// gitlab-runner's TLS files of an entry: what the runner trusts and shows when it talks
/// to the server (API calls, artifacts, cache through the server, git).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `tls-ca-file`: PEM certificates trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// `tls-cert-file`: the client certificate (chain), PEM.
    pub cert_file: Option<PathBuf>,
    /// `tls-key-file`: its private key, PEM.
    pub key_file: Option<PathBuf>,
}

/// `executor`: resolved once when the configuration is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorKind {
    /// Scripts run in a local shell.
    Shell,
    /// Scripts run in Docker containers.
    Docker,
    /// Scripts run through the `[runners.custom]` programs.
    Custom,
    /// Scripts run over SSH on an instance of the `[runners.autoscaler]` fleet.
    Instance,
    /// Scripts run in Docker containers on the engine of an instance of the
    /// `[runners.autoscaler]` fleet, reached over SSH.
    DockerAutoscaler,
}

impl ExecutorKind {
    /// Every value, as written in the file.
    pub const NAMES: &'static [&'static str] =
        &["shell", "docker", "custom", "instance", "docker-autoscaler"];

    /// The file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Shell => "shell",
            Self::Docker => "docker",
            Self::Custom => "custom",
            Self::Instance => "instance",
            Self::DockerAutoscaler => "docker-autoscaler",
        }
    }

    /// Whether jobs run on instances of a `[runners.autoscaler]` fleet.
    pub fn uses_fleet(self) -> bool {
        matches!(self, Self::Instance | Self::DockerAutoscaler)
    }

    /// Whether jobs run in Docker containers (`[runners.docker]` applies).
    pub fn uses_docker(self) -> bool {
        matches!(self, Self::Docker | Self::DockerAutoscaler)
    }

    /// The executor named `value` (`shell`, `docker`, `custom`).
    pub fn parse(value: &str) -> Option<Self> {
        Some(match value {
            "shell" => Self::Shell,
            "docker" => Self::Docker,
            "custom" => Self::Custom,
            "instance" => Self::Instance,
            "docker-autoscaler" => Self::DockerAutoscaler,
            _ => return None,
        })
    }
}

impl fmt::Display for ExecutorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `shell`: the POSIX shells the shell executor supports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ShellKind {
    /// `bash` (default); falls back to `sh` when bash is not installed.
    #[default]
    Bash,
    /// `sh`.
    Sh,
}

impl ShellKind {
    /// Every value, as written in the file.
    pub const NAMES: &'static [&'static str] = &["bash", "sh"];

    /// The file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bash => "bash",
            Self::Sh => "sh",
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value {
            "bash" => Some(Self::Bash),
            "sh" => Some(Self::Sh),
            _ => None,
        }
    }
}

/// One `environment` entry, `NAME=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvVar {
    /// A shell variable name (`[A-Za-z_][A-Za-z0-9_]*`).
    pub name: String,
    /// The value (may be empty).
    pub value: String,
}

/// `[runners.cache]`, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheConfig {
    /// Remote cache backend; `None` = local cache in `cache_dir`.
    pub kind: Option<CacheType>,
    /// Prefix of object names.
    pub path: Option<String>,
    /// Share the cache between runners.
    pub shared: bool,
    /// Largest archive uploaded, in bytes; `None` = no limit.
    pub max_uploaded_archive_size: Option<u64>,
    /// `[runners.cache.s3]`.
    pub s3: Option<S3CacheConfig>,
    /// `[runners.cache.gcs]`.
    pub gcs: Option<GcsCacheConfig>,
    /// `[runners.cache.azure]`.
    pub azure: Option<AzureCacheConfig>,
}

/// `[runners.cache] Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheType {
    /// `s3`.
    S3,
    /// `gcs`.
    Gcs,
    /// `azure`.
    Azure,
}

impl CacheType {
    /// Every value, as written in the file.
    pub const NAMES: &'static [&'static str] = &["s3", "gcs", "azure"];

    /// The file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Gcs => "gcs",
            Self::Azure => "azure",
        }
    }

    pub(crate) fn parse(value: &str) -> Option<Self> {
        match value {
            "s3" => Some(Self::S3),
            "gcs" => Some(Self::Gcs),
            "azure" => Some(Self::Azure),
            _ => None,
        }
    }
}

/// `[runners.docker]`, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerConfig {
    /// Default image when the job names none.
    pub image: Option<String>,
    /// Run containers privileged.
    pub privileged: bool,
    /// Extra volumes.
    pub volumes: Vec<String>,
    /// Pull policies tried in order (empty = the executor's default, `always`).
    pub pull_policy: Vec<PullPolicy>,
    /// Image patterns jobs may use (empty = any).
    pub allowed_images: Vec<String>,
    /// Service image patterns jobs may use (empty = any).
    pub allowed_services: Vec<String>,
    /// Pull policies jobs may ask for (empty = those of `pull_policy`).
    pub allowed_pull_policies: Vec<PullPolicy>,
    /// Memory limit.
    pub memory: Option<ByteSize>,
    /// CPU limit.
    pub cpus: Option<Cpus>,
    /// Docker network mode.
    pub network_mode: Option<String>,
    /// `host:ip` entries.
    pub extra_hosts: Vec<String>,
    /// DNS servers.
    pub dns: Vec<String>,
    /// Capabilities to add.
    pub cap_add: Vec<String>,
    /// Capabilities to drop.
    pub cap_drop: Vec<String>,
    /// GPUs for the build container (`--gpus` syntax, checked when read).
    pub gpus: Option<String>,
    /// GPUs for service containers.
    pub service_gpus: Option<String>,
    /// How long to wait for services; `None` = do not wait (`-1` in the file).
    pub wait_for_services_timeout: Option<Duration>,
    /// User the job's commands run as; `None` = the image's user (a job's
    /// `image:docker:user` wins over both).
    pub user: Option<String>,
    /// Gantry extension: a job whose payload has no `image` runs in the shell
    /// executor (`false`, the default, is gitlab-runner's behaviour: the default
    /// `image`, or an error when there is none).
    pub shell_without_image: bool,
    /// The engine's address (`None`: `DOCKER_HOST`, else the default socket; for
    /// docker-autoscaler, the instance's default engine).
    pub host: Option<String>,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            image: None,
            privileged: false,
            volumes: Vec::new(),
            pull_policy: Vec::new(),
            allowed_images: Vec::new(),
            allowed_services: Vec::new(),
            allowed_pull_policies: Vec::new(),
            memory: None,
            cpus: None,
            network_mode: None,
            extra_hosts: Vec::new(),
            dns: Vec::new(),
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            gpus: None,
            service_gpus: None,
            wait_for_services_timeout: Some(DEFAULT_WAIT_FOR_SERVICES_TIMEOUT),
            user: None,
            shell_without_image: false,
            host: None,
        }
    }
}

/// A Docker pull policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// `always`.
    Always,
    /// `never`.
    Never,
    /// `if-not-present`.
    IfNotPresent,
}

impl PullPolicy {
    /// Every value, as written in the file.
    pub const NAMES: &'static [&'static str] = &["always", "never", "if-not-present"];

    /// The file spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Never => "never",
            Self::IfNotPresent => "if-not-present",
        }
    }

    /// The policy a file (or `gantry runner register --docker-pull-policy`) names.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "always" => Some(Self::Always),
            "never" => Some(Self::Never),
            "if-not-present" => Some(Self::IfNotPresent),
            _ => None,
        }
    }
}

/// A size as Docker writes it (`512m`, `2g`, `1048576`): the bytes, and the text to
/// write back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteSize {
    /// Bytes.
    pub bytes: u64,
    /// As written in the file.
    pub text: String,
}

impl ByteSize {
    /// Parses a non-negative integer with an optional `b`, `k`, `m`, `g` (KiB, MiB, GiB)
    /// suffix, case-insensitive, with an optional trailing `b` (`512mb`).
    pub fn parse(text: &str) -> Option<Self> {
        let lower = text.trim().to_ascii_lowercase();
        let unit_start = lower
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(lower.len());
        let (digits, unit) = lower.split_at(unit_start);
        if digits.is_empty() {
            return None;
        }
        let number: u64 = digits.parse().ok()?;
        let factor: u64 = match unit {
            "" | "b" => 1,
            "k" | "kb" => 1 << 10,
            "m" | "mb" => 1 << 20,
            "g" | "gb" => 1 << 30,
            _ => return None,
        };
        Some(Self {
            bytes: number.checked_mul(factor)?,
            text: text.to_owned(),
        })
    }
}

/// A CPU count as Docker writes it (`1.5`): the value, and the text to write back.
#[derive(Debug, Clone, PartialEq)]
pub struct Cpus {
    /// CPUs (> 0).
    pub value: f64,
    /// As written in the file.
    pub text: String,
}

impl Cpus {
    /// Parses a positive decimal number.
    pub fn parse(text: &str) -> Option<Self> {
        let value: f64 = text.trim().parse().ok()?;
        (value.is_finite() && value > 0.0).then(|| Self {
            value,
            text: text.to_owned(),
        })
    }
}

/// `[runners.custom]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomConfig {
    /// Config stage program, if any.
    pub config: Option<CustomProgram>,
    /// Prepare stage program, if any.
    pub prepare: Option<CustomProgram>,
    /// Run stage program (runs every job stage's script; no timeout of its own).
    pub run: CustomProgram,
    /// Cleanup stage program, if any.
    pub cleanup: Option<CustomProgram>,
    /// Time between SIGTERM and SIGKILL.
    pub graceful_kill_timeout: Duration,
    /// Time to wait after SIGKILL.
    pub force_kill_timeout: Duration,
}

/// One program of the custom executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomProgram {
    /// Program path.
    pub exec: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Timeout (the run program uses the job's timeout instead).
    pub timeout: Duration,
}

/// `[runners.autoscaler]`, resolved: the instance executor's fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscalerConfig {
    /// The plugin reference (a path, or a name found as `fleeting-plugin-<name>`).
    pub plugin: String,
    /// The taskscaler's settings and policies.
    pub scaler: gantry_fleet::taskscaler::ScalerConfig,
    /// `[runners.autoscaler.plugin_config]` as JSON.
    pub plugin_config: serde_json::Value,
    /// `[runners.autoscaler.connector_config]` (its `key` is read from `key_path` when
    /// the fleet starts).
    pub connector: gantry_fleet::ConnectorConfig,
    /// The private key file of `connector_config`.
    pub key_path: Option<PathBuf>,
    /// Dial instances at their external address.
    pub use_external_addr: bool,
    /// Run on every new instance; a non-zero exit removes it.
    pub instance_ready_command: Option<String>,
    /// Print the instance's internal address in the job log.
    pub log_internal_ip: bool,
    /// Print the instance's external address in the job log.
    pub log_external_ip: bool,
    /// `[runners.autoscaler.state_storage]` when enabled: the directory (relative to the
    /// runner's working directory) and whether instances that held jobs are kept.
    pub state_storage: Option<(PathBuf, bool)>,
    /// The section as written, for `save`.
    pub file: super::AutoscalerFile,
}

/// `connector_config.keepalive` when not set.
pub const DEFAULT_CONNECTOR_KEEPALIVE: Duration = Duration::from_secs(30);
/// `connector_config.timeout` when not set.
pub const DEFAULT_CONNECTOR_TIMEOUT: Duration = Duration::from_secs(10 * 60);

impl AutoscalerConfig {
    /// The defaults for `plugin` (what `gantry runner register --executor instance`
    /// writes; the rest is edited in the file).
    pub fn with_plugin(plugin: impl Into<String>) -> Self {
        let plugin = plugin.into();
        Self {
            plugin: plugin.clone(),
            scaler: gantry_fleet::taskscaler::ScalerConfig::default(),
            plugin_config: serde_json::Value::Object(serde_json::Map::new()),
            connector: gantry_fleet::ConnectorConfig {
                keepalive: DEFAULT_CONNECTOR_KEEPALIVE,
                timeout: DEFAULT_CONNECTOR_TIMEOUT,
                ..gantry_fleet::ConnectorConfig::default()
            },
            key_path: None,
            use_external_addr: false,
            instance_ready_command: None,
            log_internal_ip: false,
            log_external_ip: false,
            state_storage: None,
            file: super::AutoscalerFile {
                plugin: Some(plugin),
                ..super::AutoscalerFile::default()
            },
        }
    }
}

/// gitlab-runner's health check of an entry: after `requests_limit` failed job requests
/// in a row, the entry asks no more for `interval`, then counts again from zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unhealthy {
    pub requests_limit: u32,
    pub interval: Duration,
}

impl Unhealthy {
    /// gitlab-runner's defaults, for the key not given.
    pub const DEFAULT_REQUESTS_LIMIT: u32 = 3;
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60 * 60);
}
