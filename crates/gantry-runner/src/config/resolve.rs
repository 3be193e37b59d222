//! File layer → resolved settings (defaults, ranges, enums), and back for `save`.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::key_path::KeyPath;
use super::schema::{
    AutoscalerFile, CacheFile, ConfigFile, ConnectorFile, CustomBuildDirFile, CustomFile,
    DockerFile, OtelFile, RunnerFile,
};
use super::settings::*;

/// A value that cannot be used, before it is given a file position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawProblem {
    pub key: KeyPath,
    pub message: String,
}

/// Something the runner will ignore, before it is given a file position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawNotice {
    pub key: KeyPath,
    pub message: String,
}

#[derive(Default)]
struct Cx {
    problems: Vec<RawProblem>,
    notices: Vec<RawNotice>,
}

impl Cx {
    fn problem(&mut self, key: KeyPath, message: impl Into<String>) {
        self.problems.push(RawProblem {
            key,
            message: message.into(),
        });
    }

    fn notice(&mut self, key: KeyPath, message: impl Into<String>) {
        self.notices.push(RawNotice {
            key,
            message: message.into(),
        });
    }
}

fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// Resolves the file layer. Every problem is collected, not just the first.
pub(crate) fn resolve(file: &ConfigFile) -> Result<(Config, Vec<RawNotice>), Vec<RawProblem>> {
    let mut cx = Cx::default();
    let root = KeyPath::root();

    let concurrent = match file.concurrent {
        None => NonZeroUsize::MIN,
        Some(n) => match usize::try_from(n).ok().and_then(NonZeroUsize::new) {
            Some(n) => n,
            None => {
                cx.problem(
                    root.key("concurrent"),
                    format!("expected a positive number of jobs that may run at once, found {n}"),
                );
                NonZeroUsize::MIN
            }
        },
    };
    let check_interval = seconds_or_default(file.check_interval, DEFAULT_CHECK_INTERVAL);
    let log_level = match &file.log_level {
        None => LogLevel::Info,
        Some(value) => LogLevel::parse(value).unwrap_or_else(|| {
            cx.problem(
                root.key("log_level"),
                format!("expected {}, found {value:?}", one_of(LogLevel::NAMES)),
            );
            LogLevel::Info
        }),
    };
    let listen_address = file.listen_address.as_ref().and_then(|value| {
        let parsed = ListenAddress::parse(value);
        if parsed.is_none() {
            cx.problem(
                root.key("listen_address"),
                format!("expected `host:port` (e.g. `:9252` or `127.0.0.1:9252`), found {value:?}"),
            );
        }
        parsed
    });
    let shutdown_timeout = seconds_or_default(file.shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT);

    let labels = file.labels.clone().unwrap_or_default();
    if let Err(e) = gantry_protocol::validate_labels(&labels) {
        cx.problem(root.key("labels"), e.to_string());
    }
    let runners: Vec<RunnerConfig> = file
        .runners
        .iter()
        .enumerate()
        .map(|(i, runner)| resolve_runner(&mut cx, &root.key("runners").index(i), runner))
        .collect();
    for (i, runner) in runners.iter().enumerate() {
        let mut all = labels.clone();
        all.extend(runner.labels.clone());
        if let Err(e) = gantry_protocol::validate_labels(&all) {
            cx.problem(root.key("runners").index(i).key("labels"), e.to_string());
        }
    }

    let telemetry = file
        .otel
        .as_ref()
        .map(|otel| resolve_otel(&mut cx, &root.key("otel"), otel))
        .unwrap_or_default();

    if !cx.problems.is_empty() {
        return Err(cx.problems);
    }
    Ok((
        Config {
            concurrent,
            check_interval,
            log_level,
            listen_address,
            shutdown_timeout,
            labels,
            runners,
            telemetry,
        },
        cx.notices,
    ))
}

/// `[otel]` → tracing settings (each key as its `OTEL_*` variable reads).
fn resolve_otel(cx: &mut Cx, at: &KeyPath, otel: &OtelFile) -> gantry_telemetry::Settings {
    let mut settings = gantry_telemetry::Settings {
        endpoint: otel.endpoint.clone().filter(|v| !v.is_empty()),
        traces_endpoint: otel.traces_endpoint.clone().filter(|v| !v.is_empty()),
        service_name: otel.service_name.clone().filter(|v| !v.is_empty()),
        headers: otel
            .headers
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        resource_attributes: otel
            .resource_attributes
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ..gantry_telemetry::Settings::default()
    };
    if let Some(value) = &otel.protocol {
        match gantry_telemetry::Protocol::parse(value, "protocol") {
            Ok(p) => settings.protocol = Some(p),
            Err(e) => cx.problem(
                at.key("protocol"),
                format!("expected {}, found {value:?}", e.expected),
            ),
        }
    }
    if let Some(name) = &otel.sampler {
        match gantry_telemetry::SamplerSetting::parse(name, otel.sampler_arg.as_deref(), "sampler")
        {
            Ok(s) => settings.sampler = Some(s),
            Err(e) => {
                let key = if e.place == "sampler" {
                    "sampler"
                } else {
                    "sampler_arg"
                };
                cx.problem(
                    at.key(key),
                    format!("expected {}, found {:?}", e.expected, e.value),
                );
            }
        }
    }
    settings
}

fn otel_to_file(settings: &gantry_telemetry::Settings) -> Option<OtelFile> {
    if *settings == gantry_telemetry::Settings::default() {
        return None;
    }
    let (sampler, sampler_arg) = match settings.sampler {
        None => (None, None),
        Some(s) => {
            use gantry_telemetry::SamplerSetting as S;
            use gantry_telemetry::settings::ParentRoot;
            let (name, arg) = match s {
                S::AlwaysOn => ("always_on", None),
                S::AlwaysOff => ("always_off", None),
                S::TraceIdRatio(r) => ("traceidratio", Some(r)),
                S::ParentBased(ParentRoot::AlwaysOn) => ("parentbased_always_on", None),
                S::ParentBased(ParentRoot::AlwaysOff) => ("parentbased_always_off", None),
                S::ParentBased(ParentRoot::TraceIdRatio(r)) => {
                    ("parentbased_traceidratio", Some(r))
                }
            };
            (Some(name.to_owned()), arg.map(|r| r.to_string()))
        }
    };
    let map =
        |pairs: &[(String, String)]| (!pairs.is_empty()).then(|| pairs.iter().cloned().collect());
    Some(OtelFile {
        endpoint: settings.endpoint.clone(),
        traces_endpoint: settings.traces_endpoint.clone(),
        protocol: settings.protocol.map(|p| p.as_str().to_owned()),
        service_name: settings.service_name.clone(),
        sampler,
        sampler_arg,
        headers: map(&settings.headers),
        resource_attributes: map(&settings.resource_attributes),
    })
}

/// gitlab-runner's rule for interval-like settings: ≤ 0 means the default.
fn seconds_or_default(value: Option<i64>, default: Duration) -> Duration {
    match value {
        Some(secs) if secs > 0 => Duration::from_secs(secs.unsigned_abs()),
        _ => default,
    }
}

fn is_shell_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn non_empty_path(cx: &mut Cx, key: KeyPath, value: &Option<String>) -> Option<PathBuf> {
    match value.as_deref() {
        None => None,
        Some("") => {
            cx.problem(key, "expected a directory path, found an empty string");
            None
        }
        Some(path) => Some(PathBuf::from(path)),
    }
}

/// `http://…` or `https://…`, something after the scheme.
fn is_http_url(url: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
            && url.len() > scheme.len()
    })
}

/// `tls-ca-file`, `tls-cert-file`, `tls-key-file`: each read now, so a missing or
/// unreadable file is an error naming its key (not a failed request later); the
/// certificate and its key go together.
fn resolve_tls(cx: &mut Cx, at: &KeyPath, file: &RunnerFile) -> TlsFiles {
    let mut check = |key: &str, value: &Option<String>, marker: &str, what: &str| {
        let path = value.as_deref()?;
        let key = at.key(key);
        if path.is_empty() {
            cx.problem(key, "expected a file path, found an empty string");
            return None;
        }
        match std::fs::read(path) {
            Ok(bytes) if bytes.windows(marker.len()).any(|w| w == marker.as_bytes()) => {
                Some(PathBuf::from(path))
            }
            Ok(_) => {
                cx.problem(
                    key,
                    format!("`{path}` holds no {what} (expected PEM: a `{marker}` block)"),
                );
                None
            }
            Err(error) => {
                cx.problem(key, format!("cannot read `{path}`: {error}"));
                None
            }
        }
    };
    let ca_file = check(
        "tls-ca-file",
        &file.tls_ca_file,
        "-----BEGIN CERTIFICATE-----",
        "certificate",
    );
    let cert_file = check(
        "tls-cert-file",
        &file.tls_cert_file,
        "-----BEGIN CERTIFICATE-----",
        "certificate",
    );
    let key_file = check(
        "tls-key-file",
        &file.tls_key_file,
        "PRIVATE KEY-----",
        "private key",
    );
    match (&file.tls_cert_file, &file.tls_key_file) {
        (Some(_), None) => cx.problem(
            at.key("tls-cert-file"),
            "a client certificate needs its private key: set tls-key-file too",
        ),
        (None, Some(_)) => cx.problem(
            at.key("tls-key-file"),
            "a private key needs its certificate: set tls-cert-file too",
        ),
        _ => {}
    }
    TlsFiles {
        ca_file,
        cert_file,
        key_file,
    }
}

fn resolve_runner(cx: &mut Cx, at: &KeyPath, file: &RunnerFile) -> RunnerConfig {
    let url = match file.url.as_deref().map(str::trim) {
        None | Some("") => {
            cx.problem(
                at.key("url"),
                "missing; expected the server URL, e.g. `https://gitlab.example.com/`",
            );
            String::new()
        }
        Some(url) => {
            if !is_http_url(url) {
                cx.problem(
                    at.key("url"),
                    format!("expected an `http://` or `https://` URL, found {url:?}"),
                );
            }
            url.to_owned()
        }
    };
    let token = match file.token.as_deref() {
        None | Some("") => {
            cx.problem(
                at.key("token"),
                "missing; register the runner with `gantry runner register` to obtain one",
            );
            String::new()
        }
        Some(token) => token.to_owned(),
    };
    let executor = match file.executor.as_deref() {
        None => {
            cx.problem(
                at.key("executor"),
                format!("missing; expected {}", one_of(ExecutorKind::NAMES)),
            );
            ExecutorKind::Shell
        }
        Some(value) => ExecutorKind::parse(value).unwrap_or_else(|| {
            let known_elsewhere = [
                "kubernetes",
                "docker+machine",
                "docker-autoscaler",
                "docker-windows",
                "ssh",
                "parallels",
                "virtualbox",
            ]
            .contains(&value);
            let note = if known_elsewhere {
                " (a gitlab-runner executor gantry does not provide)"
            } else {
                ""
            };
            cx.problem(
                at.key("executor"),
                format!(
                    "unsupported executor {value:?}{note}; expected {}",
                    one_of(ExecutorKind::NAMES)
                ),
            );
            ExecutorKind::Shell
        }),
    };
    let limit = match file.limit {
        None => None,
        Some(n) if n < 0 => {
            cx.problem(
                at.key("limit"),
                format!("expected a number of jobs ≥ 0 (0 = no limit), found {n}"),
            );
            None
        }
        Some(n) => usize::try_from(n).ok().and_then(NonZeroUsize::new),
    };
    let request_concurrency = file
        .request_concurrency
        .and_then(|n| usize::try_from(n).ok())
        .and_then(NonZeroUsize::new)
        .unwrap_or(NonZeroUsize::MIN);
    let environment = file
        .environment
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, entry)| {
            let key = at.key("environment").index(i);
            match entry.split_once('=') {
                Some((name, value)) if is_shell_name(name) => Some(EnvVar {
                    name: name.to_owned(),
                    value: value.to_owned(),
                }),
                Some((name, _)) => {
                    cx.problem(
                        key,
                        format!(
                            "expected `NAME=value` where NAME is a shell variable name \
                             (letters, digits, `_`; not starting with a digit), found name {name:?}"
                        ),
                    );
                    None
                }
                None => {
                    cx.problem(key, format!("expected `NAME=value`, found {entry:?}"));
                    None
                }
            }
        })
        .collect();
    let output_limit_kib = match file.output_limit {
        Some(kib) if kib > 0 => kib.unsigned_abs(),
        _ => DEFAULT_OUTPUT_LIMIT_KIB,
    };
    let shell = match file.shell.as_deref() {
        None | Some("") => ShellKind::Bash,
        Some(value) => ShellKind::parse(value).unwrap_or_else(|| {
            cx.problem(
                at.key("shell"),
                format!(
                    "unsupported shell {value:?}; expected {} (the shell executor runs POSIX shells)",
                    one_of(ShellKind::NAMES)
                ),
            );
            ShellKind::Bash
        }),
    };
    let clone_url = match file.clone_url.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(url) => {
            if !is_http_url(url) {
                cx.problem(
                    at.key("clone_url"),
                    format!(
                        "expected an `http://` or `https://` URL git can clone from (the project's path is appended), found {url:?}"
                    ),
                );
            }
            Some(url.to_owned())
        }
    };
    let mut script = |key: &str, old_key: &str, value: &Option<String>, old: &Option<String>| {
        let value = value.as_ref().filter(|v| !v.trim().is_empty());
        let old = old.as_ref().filter(|v| !v.trim().is_empty());
        match (value, old) {
            (Some(value), Some(_)) => {
                cx.notice(
                    at.key(old_key),
                    format!("the old name of `{key}`, which is also set: this one is ignored"),
                );
                Some(value.clone())
            }
            (Some(value), None) => Some(value.clone()),
            (None, Some(old)) => {
                cx.notice(
                    at.key(old_key),
                    format!(
                        "the old name of `{key}` (gitlab-runner renamed it); it is used all the same, rename it"
                    ),
                );
                Some(old.clone())
            }
            (None, None) => None,
        }
    };
    let scripts = RunnerScripts {
        pre_get_sources: script(
            "pre_get_sources_script",
            "pre_clone_script",
            &file.pre_get_sources_script,
            &file.pre_clone_script,
        ),
        post_get_sources: script(
            "post_get_sources_script",
            "post_clone_script",
            &file.post_get_sources_script,
            &file.post_clone_script,
        ),
        pre_build: script("pre_build_script", "", &file.pre_build_script, &None),
        post_build: script("post_build_script", "", &file.post_build_script, &None),
    };
    let tls = resolve_tls(cx, at, file);
    let mut feature_flags = std::collections::BTreeMap::new();
    for (name, value) in file.feature_flags.iter().flatten() {
        let key = at.key("feature_flags").key(name);
        let well_named = name.len() > 3
            && name.starts_with("FF_")
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !well_named {
            cx.problem(
                key,
                format!("{name:?} is not a feature flag name; they read FF_NAME in capitals, such as FF_TIMESTAMPS"),
            );
            continue;
        }
        match value {
            toml::Value::Boolean(on) => {
                feature_flags.insert(name.clone(), *on);
            }
            other => cx.problem(key, format!("expected true or false, found {other}")),
        }
    }
    let builds_dir = non_empty_path(cx, at.key("builds_dir"), &file.builds_dir);
    let cache_dir = non_empty_path(cx, at.key("cache_dir"), &file.cache_dir);
    let cache = file
        .cache
        .as_ref()
        .map(|cache| resolve_cache(cx, &at.key("cache"), cache))
        .unwrap_or_default();
    let docker = file
        .docker
        .as_ref()
        .map(|docker| resolve_docker(cx, &at.key("docker"), docker));
    let custom = match &file.custom {
        Some(custom) => resolve_custom(cx, &at.key("custom"), custom),
        None => {
            if executor == ExecutorKind::Custom {
                cx.problem(
                    at.key("custom"),
                    "missing; the custom executor needs a `[runners.custom]` section with `run_exec`",
                );
            }
            None
        }
    };
    let autoscaler = match &file.autoscaler {
        Some(autoscaler) => resolve_autoscaler(cx, &at.key("autoscaler"), autoscaler),
        None => {
            if executor.uses_fleet() {
                cx.problem(
                    at.key("autoscaler"),
                    format!("missing; the {executor} executor needs a `[runners.autoscaler]` section with `plugin`"),
                );
            }
            None
        }
    };
    if !executor.uses_fleet() && file.autoscaler.is_some() {
        cx.notice(
            at.key("autoscaler"),
            format!("the {executor} executor does not use this section"),
        );
    }
    if !executor.uses_docker() && file.docker.is_some() {
        cx.notice(
            at.key("docker"),
            format!("the {executor} executor does not use this section"),
        );
    }
    if executor != ExecutorKind::Custom && file.custom.is_some() {
        cx.notice(
            at.key("custom"),
            format!("the {executor} executor does not use this section"),
        );
    }

    RunnerConfig {
        name: file.name.clone(),
        url,
        id: file.id,
        token,
        token_obtained_at: file.token_obtained_at.as_ref().map(ToString::to_string),
        token_expires_at: file.token_expires_at.as_ref().map(ToString::to_string),
        executor,
        limit,
        request_concurrency,
        builds_dir,
        cache_dir,
        tls,
        environment,
        feature_flags,
        output_limit_kib,
        shell,
        debug_trace_disabled: file.debug_trace_disabled.unwrap_or(false),
        labels: file.labels.clone().unwrap_or_default(),
        unhealthy: (file.unhealthy_requests_limit.is_some() || file.unhealthy_interval.is_some())
            .then(|| Unhealthy {
                requests_limit: count(
                    cx,
                    at.key("unhealthy_requests_limit"),
                    file.unhealthy_requests_limit,
                    Unhealthy::DEFAULT_REQUESTS_LIMIT,
                    1,
                ),
                interval: go_duration(
                    cx,
                    at.key("unhealthy_interval"),
                    &file.unhealthy_interval,
                    Unhealthy::DEFAULT_INTERVAL,
                ),
            }),
        clone_url,
        scripts,
        cache,
        docker,
        custom,
        autoscaler,
        custom_build_dir: file.custom_build_dir.as_ref().and_then(|c| c.enabled),
    }
}

fn resolve_cache(cx: &mut Cx, at: &KeyPath, file: &CacheFile) -> CacheConfig {
    let kind = match file.kind.as_deref() {
        None | Some("") => None,
        Some(value) => {
            let kind = CacheType::parse(value);
            if kind.is_none() {
                cx.problem(
                    at.key("Type"),
                    format!(
                        "unsupported cache type {value:?}; expected {} (or no `Type` for the local cache)",
                        one_of(CacheType::NAMES)
                    ),
                );
            }
            kind
        }
    };
    let max_uploaded_archive_size = match file.max_uploaded_archive_size {
        None | Some(0) => None,
        Some(n) if n < 0 => {
            cx.problem(
                at.key("MaxUploadedArchiveSize"),
                format!("expected a size in bytes ≥ 0 (0 = no limit), found {n}"),
            );
            None
        }
        Some(n) => Some(n.unsigned_abs()),
    };
    CacheConfig {
        kind,
        path: file.path.clone(),
        shared: file.shared.unwrap_or(false),
        max_uploaded_archive_size,
        s3: file.s3.clone(),
        gcs: file.gcs.clone(),
        azure: file.azure.clone(),
    }
}

fn pull_policies(cx: &mut Cx, at: &KeyPath, values: &Option<Vec<String>>) -> Vec<PullPolicy> {
    values
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, value)| {
            let policy = PullPolicy::parse(value);
            if policy.is_none() {
                cx.problem(
                    at.index(i),
                    format!(
                        "unknown pull policy {value:?}; expected {}",
                        one_of(PullPolicy::NAMES)
                    ),
                );
            }
            policy
        })
        .collect()
}

fn resolve_docker(cx: &mut Cx, at: &KeyPath, file: &DockerFile) -> DockerConfig {
    let memory = file.memory.as_ref().and_then(|text| {
        let size = ByteSize::parse(text);
        if size.is_none() {
            cx.problem(
                at.key("memory"),
                format!(
                    "expected a size such as `512m` or `2g` (suffix b, k, m or g), found {text:?}"
                ),
            );
        }
        size
    });
    let cpus = file.cpus.as_ref().and_then(|text| {
        let cpus = Cpus::parse(text);
        if cpus.is_none() {
            cx.problem(
                at.key("cpus"),
                format!("expected a positive number of CPUs such as \"1.5\", found {text:?}"),
            );
        }
        cpus
    });
    let wait_for_services_timeout = match file.wait_for_services_timeout {
        None | Some(0) => Some(DEFAULT_WAIT_FOR_SERVICES_TIMEOUT),
        Some(-1) => None,
        Some(n) if n < 0 => {
            cx.problem(
                at.key("wait_for_services_timeout"),
                format!("expected seconds ≥ 0, or -1 to not wait, found {n}"),
            );
            None
        }
        Some(n) => Some(Duration::from_secs(n.unsigned_abs())),
    };
    for key in ["allowed_images", "allowed_services"] {
        let patterns = if key == "allowed_images" {
            &file.allowed_images
        } else {
            &file.allowed_services
        };
        for (i, pattern) in patterns.iter().flatten().enumerate() {
            if let Err(error) = globset::Glob::new(pattern) {
                cx.problem(
                    at.key(key).index(i),
                    format!(
                        "{pattern:?} is not a glob pattern ({}); use `*`, `**`, `?` and `[…]`",
                        error.kind()
                    ),
                );
            }
        }
    }
    if let Some(host) = file
        .host
        .as_deref()
        .map(str::trim)
        .filter(|h| !h.is_empty())
        && !(host.starts_with("unix://") || host.starts_with("tcp://"))
    {
        cx.problem(
            at.key("host"),
            format!("{host:?} is not an engine address Gantry can reach; use unix:///path/to/docker.sock or tcp://host:port"),
        );
    }
    for (i, volume) in file.volumes.iter().flatten().enumerate() {
        if let Err(message) = check_volume(volume) {
            cx.problem(at.key("volumes").index(i), message);
        }
    }
    let mut gpus = |key: &str, text: &Option<String>| {
        let text = text.as_deref().map(str::trim).filter(|t| !t.is_empty())?;
        match super::gpus::device_request(text) {
            Ok(_) => Some(text.to_owned()),
            Err(error) => {
                cx.problem(
                    at.key(key),
                    format!("{text:?} is not a `--gpus` request: {error}; use `all`, a count, or `\"device=0,1\"`"),
                );
                None
            }
        }
    };
    let build_gpus = gpus("gpus", &file.gpus);
    let service_gpus = gpus("service_gpus", &file.service_gpus);
    let list = |values: &Option<Vec<String>>| values.clone().unwrap_or_default();
    DockerConfig {
        image: file.image.clone().filter(|image| !image.is_empty()),
        privileged: file.privileged.unwrap_or(false),
        volumes: list(&file.volumes),
        pull_policy: pull_policies(cx, &at.key("pull_policy"), &file.pull_policy),
        allowed_images: list(&file.allowed_images),
        allowed_services: list(&file.allowed_services),
        allowed_pull_policies: pull_policies(
            cx,
            &at.key("allowed_pull_policies"),
            &file.allowed_pull_policies,
        ),
        memory,
        cpus,
        network_mode: file.network_mode.clone().filter(|mode| !mode.is_empty()),
        extra_hosts: list(&file.extra_hosts),
        dns: list(&file.dns),
        cap_add: list(&file.cap_add),
        cap_drop: list(&file.cap_drop),
        gpus: build_gpus,
        service_gpus,
        wait_for_services_timeout,
        user: file.user.clone().filter(|user| !user.is_empty()),
        shell_without_image: file.shell_without_image.unwrap_or(false),
        host: file
            .host
            .as_deref()
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(str::to_owned),
    }
}

/// A `volumes` entry: `/path/in/container` (a volume made for the job) or
/// `/host/path:/path/in/container[:ro|rw]`.
fn check_volume(volume: &str) -> Result<(), String> {
    let parts: Vec<&str> = volume.split(':').collect();
    let (host, container, mode) = match parts.as_slice() {
        [container] => (None, *container, None),
        [host, container] => (Some(*host), *container, None),
        [host, container, mode] => (Some(*host), *container, Some(*mode)),
        _ => {
            return Err(format!(
                "{volume:?} has too many `:`; expected `/container/path` or `/host/path:/container/path[:ro]`"
            ));
        }
    };
    if !container.starts_with('/') {
        return Err(format!(
            "{volume:?}: the container path {container:?} must be absolute"
        ));
    }
    if host.is_some_and(str::is_empty) {
        return Err(format!("{volume:?}: the host path is empty"));
    }
    if let Some(mode) = mode
        && !mode.split(',').all(|m| {
            matches!(
                m,
                "ro" | "rw"
                    | "z"
                    | "Z"
                    | "shared"
                    | "slave"
                    | "private"
                    | "rshared"
                    | "rslave"
                    | "rprivate"
                    | "nocopy"
            )
        })
    {
        return Err(format!(
            "{volume:?}: unknown mode {mode:?}; expected `ro` or `rw`"
        ));
    }
    Ok(())
}

/// A Go duration (`"15m"`, `"2s"`) or the default.
fn go_duration(cx: &mut Cx, key: KeyPath, value: &Option<String>, default: Duration) -> Duration {
    match value.as_deref() {
        None => default,
        Some(text) => super::parse_go_duration(text).unwrap_or_else(|| {
            cx.problem(
                key,
                format!(
                    "expected a duration such as \"90s\", \"15m\" or \"1h30m\", found {text:?}"
                ),
            );
            default
        }),
    }
}

/// `d` as a Go duration that [`go_duration`] reads back (`"3600s"`, `"1500ms"`).
fn go_duration_text(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A count in `0..=u32::MAX` or the default.
fn count(cx: &mut Cx, key: KeyPath, value: Option<i64>, default: u32, min: u32) -> u32 {
    match value {
        None => default,
        Some(n) => match u32::try_from(n) {
            Ok(n) if n >= min => n,
            _ => {
                cx.problem(
                    key,
                    format!("expected a whole number of at least {min}, found {n}"),
                );
                default
            }
        },
    }
}

fn resolve_autoscaler(
    cx: &mut Cx,
    at: &KeyPath,
    file: &AutoscalerFile,
) -> Option<AutoscalerConfig> {
    use gantry_fleet::taskscaler::{Policy, ScalerConfig, cron, cron::Cron};

    let defaults = ScalerConfig::default();
    let plugin = match file.plugin.as_deref().map(str::trim) {
        Some(plugin) if !plugin.is_empty() => Some(plugin.to_owned()),
        _ => {
            cx.problem(
                at.key("plugin"),
                "missing; expected the fleeting plugin: a path, or a name such as \"aws\" found as `fleeting-plugin-aws` on PATH",
            );
            None
        }
    };
    let mut policies = Vec::new();
    for (index, policy) in file.policy.iter().flatten().enumerate() {
        let at = at.key("policy").index(index);
        let timezone = match policy.timezone.as_deref() {
            // gitlab-runner's default: the host's zone.
            None | Some("") => cron::TimeZone::system(),
            Some(name) => cron::zone(name).unwrap_or_else(|| {
                cx.problem(
                    at.key("timezone"),
                    format!("{name:?} is no time zone: give an IANA name such as \"UTC\" or \"Europe/Berlin\""),
                );
                cron::TimeZone::UTC
            }),
        };
        let mut periods = Vec::new();
        for (i, text) in policy.periods.iter().flatten().enumerate() {
            match Cron::parse(text) {
                Ok(cron) => periods.push(cron),
                Err(error) => cx.problem(at.key("periods").index(i), error.to_string()),
            }
        }
        let scale_factor = policy.scale_factor.unwrap_or(0.0);
        if !(scale_factor.is_finite() && scale_factor >= 0.0) {
            cx.problem(
                at.key("scale_factor"),
                format!("expected a number of at least 0, found {scale_factor}"),
            );
        }
        policies.push(Policy {
            periods,
            timezone,
            idle_count: count(cx, at.key("idle_count"), policy.idle_count, 0, 0),
            idle_time: go_duration(cx, at.key("idle_time"), &policy.idle_time, Duration::ZERO),
            scale_factor: scale_factor.max(0.0),
            scale_factor_limit: count(
                cx,
                at.key("scale_factor_limit"),
                policy.scale_factor_limit,
                0,
                0,
            ),
            preemptive_mode: policy.preemptive_mode,
        });
    }
    let max_instances = count(cx, at.key("max_instances"), file.max_instances, 0, 0);
    let mut scale_throttle = gantry_fleet::taskscaler::ScaleThrottle::default_for(max_instances);
    if let Some(throttle) = &file.scale_throttle {
        let tat = at.key("scale_throttle");
        match throttle.limit {
            None | Some(0) => {}
            Some(-1) => scale_throttle.limit = None,
            Some(n) if n > 0 => {
                scale_throttle.limit = Some(n as f64);
                if max_instances == 0 {
                    scale_throttle.burst = u32::try_from(n).unwrap_or(u32::MAX);
                }
            }
            Some(n) => cx.problem(
                tat.key("limit"),
                format!("expected new instances per second (0 for the default 100, -1 for no limit), found {n}"),
            ),
        }
        match throttle.burst {
            None | Some(0) => {}
            Some(n) => match u32::try_from(n) {
                Ok(n) => scale_throttle.burst = n,
                Err(_) => cx.problem(
                    tat.key("burst"),
                    format!("expected the most instances asked for at once (≥ 0), found {n}"),
                ),
            },
        }
    }
    let scaler = ScalerConfig {
        capacity_per_instance: count(
            cx,
            at.key("capacity_per_instance"),
            file.capacity_per_instance,
            defaults.capacity_per_instance,
            1,
        ),
        max_use_count: count(cx, at.key("max_use_count"), file.max_use_count, 0, 0),
        max_instances,
        delete_instances_on_shutdown: file.delete_instances_on_shutdown.unwrap_or(false),
        instance_acquire_timeout: go_duration(
            cx,
            at.key("instance_acquire_timeout"),
            &file.instance_acquire_timeout,
            defaults.instance_acquire_timeout,
        ),
        update_interval: go_duration(
            cx,
            at.key("update_interval"),
            &file.update_interval,
            defaults.update_interval,
        ),
        update_interval_when_expecting: go_duration(
            cx,
            at.key("update_interval_when_expecting"),
            &file.update_interval_when_expecting,
            defaults.update_interval_when_expecting,
        ),
        deletion_retry_interval: go_duration(
            cx,
            at.key("deletion_retry_interval"),
            &file.deletion_retry_interval,
            defaults.deletion_retry_interval,
        ),
        shutdown_deletion_interval: go_duration(
            cx,
            at.key("shutdown_deletion_interval"),
            &file.shutdown_deletion_interval,
            defaults.shutdown_deletion_interval,
        ),
        shutdown_deletion_retries: count(
            cx,
            at.key("shutdown_deletion_retries"),
            file.shutdown_deletion_retries,
            defaults.shutdown_deletion_retries,
            0,
        ),
        failure_threshold: count(
            cx,
            at.key("failure_threshold"),
            file.failure_threshold,
            defaults.failure_threshold,
            1,
        ),
        policies,
        scale_throttle,
        // Placed under the runner's working directory when the fleet starts.
        state_storage: None,
    };
    if scaler.update_interval.is_zero() || scaler.update_interval_when_expecting.is_zero() {
        cx.problem(
            at.key("update_interval"),
            "update intervals must be longer than 0s",
        );
    }
    let plugin_config = match &file.plugin_config {
        None => serde_json::Value::Object(serde_json::Map::new()),
        Some(table) => serde_json::to_value(table).unwrap_or_else(|error| {
            cx.problem(
                at.key("plugin_config"),
                format!("cannot be passed to the plugin as JSON: {error}"),
            );
            serde_json::Value::Null
        }),
    };
    let default_connector = ConnectorFile::default();
    let c = file.connector_config.as_ref().unwrap_or(&default_connector);
    let cat = at.key("connector_config");
    let protocol = c.protocol.clone().unwrap_or_default();
    if !matches!(protocol.as_str(), "" | "ssh") {
        cx.problem(
            cat.key("protocol"),
            format!("{protocol:?} is not supported; gantry connects to instances with \"ssh\""),
        );
    }
    let protocol_port = match c.protocol_port {
        None => 0,
        Some(port) => u16::try_from(port).unwrap_or_else(|_| {
            cx.problem(
                cat.key("protocol_port"),
                format!("expected a port number (0-65535), found {port}"),
            );
            0
        }),
    };
    let connector = gantry_fleet::ConnectorConfig {
        os: c.os.clone().unwrap_or_default(),
        arch: c.arch.clone().unwrap_or_default(),
        protocol,
        protocol_port,
        username: c.username.clone().unwrap_or_default(),
        password: c.password.clone().unwrap_or_default(),
        key: Vec::new(),
        use_static_credentials: c.use_static_credentials.unwrap_or(false),
        keepalive: go_duration(
            cx,
            cat.key("keepalive"),
            &c.keepalive,
            DEFAULT_CONNECTOR_KEEPALIVE,
        ),
        timeout: go_duration(
            cx,
            cat.key("timeout"),
            &c.timeout,
            DEFAULT_CONNECTOR_TIMEOUT,
        ),
    };
    let key_path = non_empty_path(cx, cat.key("key_path"), &c.key_path);
    Some(AutoscalerConfig {
        plugin: plugin?,
        scaler,
        plugin_config,
        connector,
        key_path,
        use_external_addr: c.use_external_addr.unwrap_or(false),
        instance_ready_command: file
            .instance_ready_command
            .clone()
            .filter(|command| !command.trim().is_empty()),
        log_internal_ip: file.log_internal_ip.unwrap_or(false),
        log_external_ip: file.log_external_ip.unwrap_or(false),
        state_storage: file
            .state_storage
            .as_ref()
            .filter(|storage| storage.enabled.unwrap_or(false))
            .map(|storage| {
                (
                    PathBuf::from(storage.dir.as_deref().unwrap_or(".taskscaler")),
                    storage.keep_instance_with_acquisitions.unwrap_or(false),
                )
            }),
        file: file.clone(),
    })
}

fn resolve_custom(cx: &mut Cx, at: &KeyPath, file: &CustomFile) -> Option<CustomConfig> {
    let program = |exec: &Option<String>, args: &Option<Vec<String>>, timeout: Option<i64>| {
        exec.as_ref()
            .filter(|exec| !exec.is_empty())
            .map(|exec| CustomProgram {
                exec: exec.clone(),
                args: args.clone().unwrap_or_default(),
                timeout: seconds_or_default(timeout, DEFAULT_CUSTOM_EXEC_TIMEOUT),
            })
    };
    let run = program(&file.run_exec, &file.run_args, None);
    let Some(run) = run else {
        cx.problem(
            at.key("run_exec"),
            "missing; expected the path of the program that runs job scripts",
        );
        return None;
    };
    Some(CustomConfig {
        config: program(
            &file.config_exec,
            &file.config_args,
            file.config_exec_timeout,
        ),
        prepare: program(
            &file.prepare_exec,
            &file.prepare_args,
            file.prepare_exec_timeout,
        ),
        run,
        cleanup: program(
            &file.cleanup_exec,
            &file.cleanup_args,
            file.cleanup_exec_timeout,
        ),
        graceful_kill_timeout: seconds_or_default(
            file.graceful_kill_timeout,
            DEFAULT_CUSTOM_KILL_TIMEOUT,
        ),
        force_kill_timeout: seconds_or_default(
            file.force_kill_timeout,
            DEFAULT_CUSTOM_KILL_TIMEOUT,
        ),
    })
}

fn secs(duration: Duration) -> Option<i64> {
    i64::try_from(duration.as_secs()).ok()
}

fn non_empty(list: &[String]) -> Option<Vec<String>> {
    (!list.is_empty()).then(|| list.to_vec())
}

fn datetime(value: &Option<String>) -> Option<toml::value::Datetime> {
    value.as_deref().and_then(|text| text.parse().ok())
}

/// The file layer that `save` writes: every resolved value, explicitly.
pub(crate) fn to_file(config: &Config) -> ConfigFile {
    ConfigFile {
        concurrent: i64::try_from(config.concurrent.get()).ok(),
        check_interval: secs(config.check_interval),
        log_level: Some(config.log_level.as_str().to_owned()),
        listen_address: config.listen_address.as_ref().map(ToString::to_string),
        shutdown_timeout: secs(config.shutdown_timeout),
        labels: (!config.labels.is_empty()).then(|| config.labels.clone()),
        runners: config.runners.iter().map(runner_to_file).collect(),
        otel: otel_to_file(&config.telemetry),
    }
}

fn runner_to_file(runner: &RunnerConfig) -> RunnerFile {
    RunnerFile {
        name: runner.name.clone(),
        url: Some(runner.url.clone()),
        id: runner.id,
        token: Some(runner.token.clone()),
        tls_ca_file: runner
            .tls
            .ca_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        tls_cert_file: runner
            .tls
            .cert_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        tls_key_file: runner
            .tls
            .key_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        token_obtained_at: datetime(&runner.token_obtained_at),
        token_expires_at: datetime(&runner.token_expires_at),
        executor: Some(runner.executor.as_str().to_owned()),
        limit: Some(
            runner
                .limit
                .map_or(0, |n| i64::try_from(n.get()).unwrap_or(i64::MAX)),
        ),
        request_concurrency: i64::try_from(runner.request_concurrency.get()).ok(),
        builds_dir: runner
            .builds_dir
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        cache_dir: runner
            .cache_dir
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        environment: (!runner.environment.is_empty()).then(|| {
            runner
                .environment
                .iter()
                .map(|var| format!("{}={}", var.name, var.value))
                .collect()
        }),
        output_limit: i64::try_from(runner.output_limit_kib).ok(),
        feature_flags: (!runner.feature_flags.is_empty()).then(|| {
            runner
                .feature_flags
                .iter()
                .map(|(name, on)| (name.clone(), toml::Value::Boolean(*on)))
                .collect()
        }),
        shell: Some(runner.shell.as_str().to_owned()),
        debug_trace_disabled: runner.debug_trace_disabled.then_some(true),
        unhealthy_requests_limit: runner.unhealthy.map(|u| i64::from(u.requests_limit)),
        unhealthy_interval: runner.unhealthy.map(|u| go_duration_text(u.interval)),
        labels: (!runner.labels.is_empty()).then(|| runner.labels.clone()),
        clone_url: runner.clone_url.clone(),
        pre_get_sources_script: runner.scripts.pre_get_sources.clone(),
        post_get_sources_script: runner.scripts.post_get_sources.clone(),
        pre_clone_script: None,
        post_clone_script: None,
        pre_build_script: runner.scripts.pre_build.clone(),
        post_build_script: runner.scripts.post_build.clone(),
        cache: Some(CacheFile {
            kind: runner.cache.kind.map(|kind| kind.as_str().to_owned()),
            path: runner.cache.path.clone(),
            shared: runner.cache.shared.then_some(true),
            max_uploaded_archive_size: runner
                .cache
                .max_uploaded_archive_size
                .and_then(|n| i64::try_from(n).ok()),
            s3: runner.cache.s3.clone(),
            gcs: runner.cache.gcs.clone(),
            azure: runner.cache.azure.clone(),
        })
        .filter(|cache| *cache != CacheFile::default()),
        docker: runner.docker.as_ref().map(docker_to_file),
        custom: runner.custom.as_ref().map(custom_to_file),
        autoscaler: runner.autoscaler.as_ref().map(|a| a.file.clone()),
        custom_build_dir: runner.custom_build_dir.map(|enabled| CustomBuildDirFile {
            enabled: Some(enabled),
        }),
    }
}

fn docker_to_file(docker: &DockerConfig) -> DockerFile {
    let policies = |list: &[PullPolicy]| {
        (!list.is_empty()).then(|| list.iter().map(|p| p.as_str().to_owned()).collect())
    };
    DockerFile {
        image: docker.image.clone(),
        privileged: Some(docker.privileged),
        volumes: non_empty(&docker.volumes),
        pull_policy: policies(&docker.pull_policy),
        allowed_images: non_empty(&docker.allowed_images),
        allowed_services: non_empty(&docker.allowed_services),
        allowed_pull_policies: policies(&docker.allowed_pull_policies),
        memory: docker.memory.as_ref().map(|m| m.text.clone()),
        cpus: docker.cpus.as_ref().map(|c| c.text.clone()),
        network_mode: docker.network_mode.clone(),
        extra_hosts: non_empty(&docker.extra_hosts),
        dns: non_empty(&docker.dns),
        cap_add: non_empty(&docker.cap_add),
        cap_drop: non_empty(&docker.cap_drop),
        gpus: docker.gpus.clone(),
        service_gpus: docker.service_gpus.clone(),
        wait_for_services_timeout: Some(
            docker
                .wait_for_services_timeout
                .map_or(-1, |d| secs(d).unwrap_or(i64::MAX)),
        ),
        user: docker.user.clone(),
        shell_without_image: docker.shell_without_image.then_some(true),
        host: docker.host.clone(),
    }
}

fn custom_to_file(custom: &CustomConfig) -> CustomFile {
    let exec = |p: &Option<CustomProgram>| p.as_ref().map(|p| p.exec.clone());
    let args = |p: &Option<CustomProgram>| p.as_ref().and_then(|p| non_empty(&p.args));
    let timeout = |p: &Option<CustomProgram>| p.as_ref().and_then(|p| secs(p.timeout));
    CustomFile {
        config_exec: exec(&custom.config),
        config_args: args(&custom.config),
        config_exec_timeout: timeout(&custom.config),
        prepare_exec: exec(&custom.prepare),
        prepare_args: args(&custom.prepare),
        prepare_exec_timeout: timeout(&custom.prepare),
        run_exec: Some(custom.run.exec.clone()),
        run_args: non_empty(&custom.run.args),
        cleanup_exec: exec(&custom.cleanup),
        cleanup_args: args(&custom.cleanup),
        cleanup_exec_timeout: timeout(&custom.cleanup),
        graceful_kill_timeout: secs(custom.graceful_kill_timeout),
        force_kill_timeout: secs(custom.force_kill_timeout),
    }
}
