//! `config.toml` loading: defaults, warnings for unknown keys, errors naming keys, and
//! save → load round trips. Error texts are snapshots: they are what a user sees.

use std::path::Path;
use std::time::Duration;

use gantry_runner::config::{
    Config, ConfigError, ExecutorKind, LogLevel, PullPolicy, RunnerConfig, ShellKind, Unhealthy,
    WarningKind,
};

fn load(text: &str) -> Result<(Config, Vec<String>), ConfigError> {
    Config::from_toml(text, Path::new("/etc/gantry/config.toml"))
        .map(|(config, warnings)| (config, warnings.iter().map(ToString::to_string).collect()))
}

fn error(text: &str) -> String {
    load(text)
        .map(|_| ())
        .expect_err("the text should be rejected")
        .to_string()
}

const MINIMAL: &str = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "shell"
"#;

#[test]
fn minimal_file_gets_gitlab_runner_defaults() {
    let (config, warnings) = load(MINIMAL).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(config.concurrent.get(), 1);
    assert_eq!(config.check_interval, Duration::from_secs(3));
    assert_eq!(config.shutdown_timeout, Duration::from_secs(30));
    assert_eq!(config.log_level, LogLevel::Info);
    assert_eq!(config.listen_address, None);
    let runner = &config.runners[0];
    assert_eq!(runner.executor, ExecutorKind::Shell);
    assert_eq!(runner.limit, None);
    assert_eq!(runner.request_concurrency.get(), 1);
    assert_eq!(runner.output_limit_kib, 4096);
    assert_eq!(runner.output_limit_bytes(), 4 * 1024 * 1024);
    assert_eq!(runner.shell, ShellKind::Bash);
    assert!(runner.docker.is_none());
}

#[test]
fn a_gitlab_runner_config_loads() {
    // As `gitlab-runner register` writes it.
    let text = r#"
concurrent = 4
check_interval = 0
shutdown_timeout = 0
log_level = "warning"
listen_address = ":9252"

[session_server]
  session_timeout = 1800

[[runners]]
  name = "build-box"
  url = "https://gitlab.example.com"
  id = 42
  token = "glrt-t3_abcdef"
  token_obtained_at = 2025-01-02T03:04:05Z
  token_expires_at = 0001-01-01T00:00:00Z
  executor = "docker"
  limit = 2
  request_concurrency = 3
  environment = ["GIT_DEPTH=10", "EMPTY="]
  output_limit = 8192
  [runners.cache]
    MaxUploadedArchiveSize = 0
    Type = "s3"
    Shared = true
    [runners.cache.s3]
      ServerAddress = "minio:9000"
      BucketName = "cache"
      Insecure = true
  [runners.docker]
    tls_verify = false
    image = "alpine:3.20"
    privileged = false
    disable_cache = false
    volumes = ["/cache"]
    pull_policy = ["if-not-present", "always"]
    memory = "2g"
    cpus = "1.5"
    shm_size = 0
    wait_for_services_timeout = -1
"#;
    let (config, warnings) = load(text).unwrap();
    assert_eq!(config.concurrent.get(), 4);
    assert_eq!(config.check_interval, Duration::from_secs(3));
    assert_eq!(config.log_level, LogLevel::Warn);
    assert_eq!(
        config.listen_address.as_ref().unwrap().bind_host(),
        "0.0.0.0"
    );
    assert_eq!(config.listen_address.as_ref().unwrap().port, 9252);
    let runner = &config.runners[0];
    assert_eq!(runner.executor, ExecutorKind::Docker);
    assert_eq!(runner.limit.map(|n| n.get()), Some(2));
    assert_eq!(runner.request_concurrency.get(), 3);
    assert_eq!(runner.environment[0].name, "GIT_DEPTH");
    assert_eq!(runner.environment[1].value, "");
    assert_eq!(runner.output_limit_bytes(), 8192 * 1024);
    assert_eq!(
        runner.token_obtained_at.as_deref(),
        Some("2025-01-02T03:04:05Z")
    );
    assert!(runner.cache.shared);
    assert_eq!(
        runner.cache.s3.as_ref().unwrap().bucket_name.as_deref(),
        Some("cache")
    );
    let docker = runner.docker.as_ref().unwrap();
    assert_eq!(
        docker.pull_policy,
        vec![PullPolicy::IfNotPresent, PullPolicy::Always]
    );
    assert_eq!(docker.memory.as_ref().unwrap().bytes, 2 << 30);
    assert_eq!(docker.cpus.as_ref().unwrap().value, 1.5);
    assert_eq!(docker.wait_for_services_timeout, None);
    insta::assert_snapshot!(warnings.join("\n"), @r"
    `session_server` (line 8, column 2) is a gitlab-runner setting gantry does not support; it is ignored
    unknown key `runners[0].docker.tls_verify` (line 32, column 5) is ignored
    unknown key `runners[0].docker.disable_cache` (line 35, column 5) is ignored
    unknown key `runners[0].docker.shm_size` (line 40, column 5) is ignored
    ");
}

#[test]
fn unknown_keys_are_warnings_naming_the_full_path() {
    let text = r#"
concurrency = 3
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-x"
executor = "shell"
limmit = 2
referees = 3
[runners.cache]
Typo = "s3"
[runners.custom]
run_exec = "/bin/run"
"#;
    let (config, warnings) = load(text).unwrap();
    assert_eq!(config.runners.len(), 1);
    insta::assert_snapshot!(warnings.join("\n"), @r"
    unknown key `concurrency` (line 2, column 1) is ignored
    unknown key `runners[0].limmit` (line 7, column 1) is ignored
    `runners[0].referees` (line 8, column 1) is a gitlab-runner setting gantry does not support; it is ignored
    unknown key `runners[0].cache.Typo` (line 10, column 1) is ignored
    `runners[0].custom` (line 11, column 10): the shell executor does not use this section
    ");
    let (_, typed) = Config::from_toml(text, Path::new("c.toml")).unwrap();
    assert_eq!(typed[0].kind, WarningKind::UnknownKey);
    assert_eq!(typed[2].kind, WarningKind::Unsupported);
}

#[test]
fn a_value_of_the_wrong_type_names_the_key_and_the_expected_type() {
    insta::assert_snapshot!(error("concurrent = \"four\"\n"), @r#"
    load runner configuration `/etc/gantry/config.toml`: `concurrent` (line 1, column 14): invalid type: string "four", expected an integer
    fix the file and try again
    "#);
    insta::assert_snapshot!(error(&format!("{MINIMAL}limit = 1.5\n")), @r"
    load runner configuration `/etc/gantry/config.toml`: `runners[0].limit` (line 6, column 9): invalid type: floating point `1.5`, expected an integer
    fix the file and try again
    ");
    insta::assert_snapshot!(error(&format!("{MINIMAL}environment = \"A=B\"\n")), @r#"
    load runner configuration `/etc/gantry/config.toml`: `runners[0].environment` (line 6, column 15): invalid type: string "A=B", expected an array of strings
    fix the file and try again
    "#);
    insta::assert_snapshot!(error(&format!("{MINIMAL}environment = [\"A=B\", 3]\n")), @r"
    load runner configuration `/etc/gantry/config.toml`: `runners[0].environment[1]` (line 6, column 23): invalid type: integer `3`, expected a string
    fix the file and try again
    ");
    insta::assert_snapshot!(error(&format!("{MINIMAL}[runners.docker]\nprivileged = \"yes\"\n")), @r#"
    load runner configuration `/etc/gantry/config.toml`: `runners[0].docker.privileged` (line 7, column 14): invalid type: string "yes", expected a boolean
    fix the file and try again
    "#);
}

const INSTANCE: &str = r#"
concurrent = 4
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "instance"
[runners.autoscaler]
plugin = "aws"
capacity_per_instance = 2
max_use_count = 5
max_instances = 3
instance_ready_command = "cloud-init status --wait"
instance_acquire_timeout = "10m"
update_interval_when_expecting = "5s"
delete_instances_on_shutdown = true
[runners.autoscaler.plugin_config]
name = "ci"
server_type = ["cpx42", "cpx52"]
[runners.autoscaler.plugin_config.labels]
team = "infra"
[runners.autoscaler.connector_config]
username = "ci"
key_path = "/etc/gantry/key"
use_external_addr = true
timeout = "5m"
[[runners.autoscaler.policy]]
idle_count = 2
idle_time = "20m"
[[runners.autoscaler.policy]]
periods = ["* 7-19 * * mon-fri"]
timezone = "Europe/Berlin"
idle_count = 8
scale_factor = 0.5
scale_factor_limit = 16
[runners.autoscaler.scale_throttle]
limit = 1
burst = 5
[runners.autoscaler.state_storage]
enabled = true
[runners.autoscaler.vm_isolation]
enabled = true
"#;

#[test]
fn an_instance_runner_gets_its_autoscaler() {
    let (config, warnings) = load(INSTANCE).unwrap();
    assert_eq!(
        warnings,
        [
            "`runners[0].autoscaler.vm_isolation` (line 40, column 21) is a gitlab-runner setting gantry does not support; it is ignored"
        ]
    );
    let runner = &config.runners[0];
    assert_eq!(runner.executor, ExecutorKind::Instance);
    let autoscaler = runner.autoscaler.as_ref().unwrap();
    assert_eq!(autoscaler.plugin, "aws");
    let scaler = &autoscaler.scaler;
    assert_eq!(
        (
            scaler.capacity_per_instance,
            scaler.max_use_count,
            scaler.max_instances
        ),
        (2, 5, 3)
    );
    assert_eq!(scaler.instance_acquire_timeout, Duration::from_secs(600));
    assert_eq!(scaler.update_interval, Duration::from_secs(60));
    assert_eq!(
        scaler.update_interval_when_expecting,
        Duration::from_secs(5)
    );
    assert!(scaler.delete_instances_on_shutdown);
    assert_eq!(
        autoscaler.state_storage,
        Some((Path::new(".taskscaler").to_path_buf(), false))
    );
    assert_eq!(scaler.scale_throttle.limit, Some(1.0));
    assert_eq!(scaler.scale_throttle.burst, 5);
    assert_eq!(scaler.policies.len(), 2);
    assert_eq!(scaler.policies[1].idle_count, 8);
    assert_eq!(
        scaler.policies[1].periods[0].to_string(),
        "* 7-19 * * mon-fri"
    );
    // Friday 2026-11-27, 06:30 UTC is 07:30 in Berlin: office hours there, not in UTC.
    let friday = 1_795_737_600;
    assert_eq!(scaler.policy_at(friday + 6 * 3600 + 1800).idle_count, 8);
    assert_eq!(scaler.policy_at(friday + 5 * 3600 + 1800).idle_count, 2);
    assert_eq!(
        autoscaler.plugin_config,
        serde_json::json!({"name": "ci", "server_type": ["cpx42", "cpx52"], "labels": {"team": "infra"}})
    );
    assert_eq!(autoscaler.connector.username, "ci");
    assert_eq!(autoscaler.connector.timeout, Duration::from_secs(300));
    assert_eq!(autoscaler.connector.keepalive, Duration::from_secs(30));
    assert!(autoscaler.use_external_addr);
    assert_eq!(
        autoscaler.key_path.as_deref(),
        Some(Path::new("/etc/gantry/key"))
    );
    assert_eq!(
        autoscaler.instance_ready_command.as_deref(),
        Some("cloud-init status --wait")
    );

    // Saved and loaded again: the same section.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    config.save(&path).unwrap();
    let (again, _) = Config::load(&path).unwrap();
    assert_eq!(again.runners[0].autoscaler, runner.autoscaler);
}

#[test]
fn a_docker_autoscaler_runner_takes_both_sections() {
    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "docker-autoscaler"
[runners.docker]
image = "debian:bookworm"
host = "unix:///run/user/1000/docker.sock"
pull_policy = ["if-not-present"]
[runners.autoscaler]
plugin = "aws"
capacity_per_instance = 4
"#;
    let (config, warnings) = load(text).unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    let runner = &config.runners[0];
    assert_eq!(runner.executor, ExecutorKind::DockerAutoscaler);
    assert!(runner.executor.uses_fleet() && runner.executor.uses_docker());
    let docker = runner.docker.as_ref().unwrap();
    assert_eq!(docker.image.as_deref(), Some("debian:bookworm"));
    assert_eq!(
        docker.host.as_deref(),
        Some("unix:///run/user/1000/docker.sock")
    );
    assert_eq!(runner.autoscaler.as_ref().unwrap().plugin, "aws");

    // Saved and loaded again: the same sections.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    config.save(&path).unwrap();
    let (again, _) = Config::load(&path).unwrap();
    assert_eq!(again.runners[0].docker, runner.docker);
    assert_eq!(again.runners[0].autoscaler, runner.autoscaler);
}

#[test]
fn a_docker_autoscaler_runner_needs_a_fleet_and_a_reachable_host() {
    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "docker-autoscaler"
[runners.docker]
host = "ssh://ci@builder"
"#;
    insta::assert_snapshot!(error(text), @r#"
    load runner configuration `/etc/gantry/config.toml`: 2 invalid values
      `runners[0].autoscaler` (line 2, column 1): missing; the docker-autoscaler executor needs a `[runners.autoscaler]` section with `plugin`
      `runners[0].docker.host` (line 7, column 1): "ssh://ci@builder" is not an engine address Gantry can reach; use unix:///path/to/docker.sock or tcp://host:port
    fix the file and try again
    "#);
}

#[test]
fn gpus_are_checked_when_read_and_saved_as_written() {
    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "docker"
[runners.docker]
gpus = "all"
service_gpus = '"device=0,1"'
"#;
    let (config, warnings) = load(text).unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    let docker = config.runners[0].docker.as_ref().unwrap();
    assert_eq!(docker.gpus.as_deref(), Some("all"));
    assert_eq!(docker.service_gpus.as_deref(), Some("\"device=0,1\""));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    config.save(&path).unwrap();
    let (again, _) = Config::load(&path).unwrap();
    assert_eq!(again.runners[0].docker, config.runners[0].docker);

    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "docker"
[runners.docker]
gpus = "lots"
service_gpus = "colour=red"
"#;
    insta::assert_snapshot!(error(text));
}

#[test]
fn feature_flags_are_booleans_with_ff_names() {
    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "shell"
[runners.feature_flags]
FF_TIMESTAMPS = true
FF_NETWORK_PER_BUILD = false
"#;
    let (config, warnings) = load(text).unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    let flags = &config.runners[0].feature_flags;
    assert_eq!(
        flags
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<Vec<_>>(),
        [("FF_NETWORK_PER_BUILD", false), ("FF_TIMESTAMPS", true)]
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    config.save(&path).unwrap();
    let (again, _) = Config::load(&path).unwrap();
    assert_eq!(&again.runners[0].feature_flags, flags);

    let bad = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "shell"
[runners.feature_flags]
FF_TIMESTAMPS = "yes"
timestamps = true
"#;
    insta::assert_snapshot!(error(bad), @r#"
    load runner configuration `/etc/gantry/config.toml`: 2 invalid values
      `runners[0].feature_flags.FF_TIMESTAMPS` (line 7, column 1): expected true or false, found "yes"
      `runners[0].feature_flags.timestamps` (line 8, column 1): "timestamps" is not a feature flag name; they read FF_NAME in capitals, such as FF_TIMESTAMPS
    fix the file and try again
    "#);
}

#[test]
fn tls_files_are_read_when_the_configuration_loads() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let not_pem = dir.path().join("key.der");
    std::fs::write(&not_pem, [0x30, 0x82, 0x01]).unwrap();
    let text = format!(
        r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "shell"
tls-ca-file = "{ca}"
"#,
        ca = ca.display()
    );
    let (config, warnings) = load(&text).unwrap();
    assert_eq!(warnings, Vec::<String>::new());
    assert_eq!(config.runners[0].tls.ca_file.as_deref(), Some(ca.as_path()));
    let saved = dir.path().join("config.toml");
    config.save(&saved).unwrap();
    let (again, _) = Config::load(&saved).unwrap();
    assert_eq!(again.runners[0].tls, config.runners[0].tls);

    let bad = format!(
        r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "shell"
tls-ca-file = "/nonexistent/ca.pem"
tls-key-file = "{key}"
"#,
        key = not_pem.display()
    );
    let message = error(&bad).replace(&dir.path().display().to_string(), "<dir>");
    insta::assert_snapshot!(message, @r"
    load runner configuration `/etc/gantry/config.toml`: 3 invalid values
      `runners[0].tls-ca-file` (line 6, column 1): cannot read `/nonexistent/ca.pem`: No such file or directory (os error 2)
      `runners[0].tls-key-file` (line 7, column 1): `<dir>/key.der` holds no private key (expected PEM: a `PRIVATE KEY-----` block)
      `runners[0].tls-key-file` (line 7, column 1): a private key needs its certificate: set tls-cert-file too
    fix the file and try again
    ");
}

#[test]
fn bad_autoscaler_values_name_their_keys() {
    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t1_abc"
executor = "instance"
[runners.autoscaler]
capacity_per_instance = 0
instance_acquire_timeout = "ten minutes"
[runners.autoscaler.connector_config]
protocol = "winrm"
protocol_port = 70000
[[runners.autoscaler.policy]]
periods = ["* 25 * * *"]
timezone = "Mars/Olympus"
idle_count = -1

[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-t2_abc"
executor = "instance"
"#;
    insta::assert_snapshot!(error(text), @r#"
    load runner configuration `/etc/gantry/config.toml`: 9 invalid values
      `runners[0].autoscaler.plugin` (line 6, column 10): missing; expected the fleeting plugin: a path, or a name such as "aws" found as `fleeting-plugin-aws` on PATH
      `runners[0].autoscaler.capacity_per_instance` (line 7, column 1): expected a whole number of at least 1, found 0
      `runners[0].autoscaler.instance_acquire_timeout` (line 8, column 1): expected a duration such as "90s", "15m" or "1h30m", found "ten minutes"
      `runners[0].autoscaler.connector_config.protocol` (line 10, column 1): "winrm" is not supported; gantry connects to instances with "ssh"
      `runners[0].autoscaler.connector_config.protocol_port` (line 11, column 1): expected a port number (0-65535), found 70000
      `runners[0].autoscaler.policy[0].periods[0]` (line 13, column 12): cron `* 25 * * *` is invalid syntax: hour `25`: 25 is outside 0-23
      `runners[0].autoscaler.policy[0].timezone` (line 14, column 1): "Mars/Olympus" is no time zone: give an IANA name such as "UTC" or "Europe/Berlin"
      `runners[0].autoscaler.policy[0].idle_count` (line 15, column 1): expected a whole number of at least 0, found -1
      `runners[1].autoscaler` (line 17, column 1): missing; the instance executor needs a `[runners.autoscaler]` section with `plugin`
    fix the file and try again
    "#);
}

#[test]
fn every_bad_value_is_reported_at_once() {
    let text = r#"
concurrent = 0
log_level = "loud"
listen_address = "nope"

[[runners]]
url = "ftp://gitlab.example.com"
executor = "kubernetes"
shell = "pwsh"
limit = -1
environment = ["OK=1", "NOEQUALS", "1BAD=x"]
[runners.cache]
Type = "dropbox"
[runners.docker]
memory = "lots"
cpus = "0"
pull_policy = "sometimes"
wait_for_services_timeout = -5

[[runners]]
token = "glrt-y"
executor = "custom"
"#;
    insta::assert_snapshot!(error(text), @r#"
    load runner configuration `/etc/gantry/config.toml`: 17 invalid values
      `concurrent` (line 2, column 1): expected a positive number of jobs that may run at once, found 0
      `log_level` (line 3, column 1): expected `trace`, `debug`, `info`, `warn`, `error`, `fatal` or `panic`, found "loud"
      `listen_address` (line 4, column 1): expected `host:port` (e.g. `:9252` or `127.0.0.1:9252`), found "nope"
      `runners[0].token` (line 6, column 1): missing; register the runner with `gantry runner register` to obtain one
      `runners[0].url` (line 7, column 1): expected an `http://` or `https://` URL, found "ftp://gitlab.example.com"
      `runners[0].executor` (line 8, column 1): unsupported executor "kubernetes" (a gitlab-runner executor gantry does not provide); expected `shell`, `docker`, `custom`, `instance` or `docker-autoscaler`
      `runners[0].shell` (line 9, column 1): unsupported shell "pwsh"; expected `bash` or `sh` (the shell executor runs POSIX shells)
      `runners[0].limit` (line 10, column 1): expected a number of jobs ≥ 0 (0 = no limit), found -1
      `runners[0].environment[1]` (line 11, column 24): expected `NAME=value`, found "NOEQUALS"
      `runners[0].environment[2]` (line 11, column 36): expected `NAME=value` where NAME is a shell variable name (letters, digits, `_`; not starting with a digit), found name "1BAD"
      `runners[0].cache.Type` (line 13, column 1): unsupported cache type "dropbox"; expected `s3`, `gcs` or `azure` (or no `Type` for the local cache)
      `runners[0].docker.memory` (line 15, column 1): expected a size such as `512m` or `2g` (suffix b, k, m or g), found "lots"
      `runners[0].docker.cpus` (line 16, column 1): expected a positive number of CPUs such as "1.5", found "0"
      `runners[0].docker.pull_policy[0]` (line 17, column 1): unknown pull policy "sometimes"; expected `always`, `never` or `if-not-present`
      `runners[0].docker.wait_for_services_timeout` (line 18, column 1): expected seconds ≥ 0, or -1 to not wait, found -5
      `runners[1].url` (line 20, column 1): missing; expected the server URL, e.g. `https://gitlab.example.com/`
      `runners[1].custom` (line 20, column 1): missing; the custom executor needs a `[runners.custom]` section with `run_exec`
    fix the file and try again
    "#);
}

#[test]
fn syntax_errors_give_a_position() {
    insta::assert_snapshot!(error("concurrent = \n[[runners]]\n"), @r"
    parse runner configuration `/etc/gantry/config.toml` (line 1, column 14): string values must be quoted, expected literal string
    fix the TOML syntax at that position
    ");
}

#[test]
fn a_missing_file_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.toml");
    let message = Config::load(&path).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("read runner configuration `{}`: ", path.display())),
        "{message}"
    );
}

#[test]
fn save_is_atomic_private_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("etc").join("config.toml");
    let mut config = Config::default();
    let mut runner = RunnerConfig::new(
        "https://gitlab.example.com/",
        "glrt-t1_secret",
        ExecutorKind::Shell,
    );
    runner.name = Some("laptop".into());
    runner.id = Some(7);
    runner.token_obtained_at = Some("2025-01-02T03:04:05Z".into());
    config.runners.push(runner);
    config.save(&path).unwrap();

    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let entries: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(entries.len(), 1, "temporary files left behind");

    let (loaded, warnings) = Config::load(&path).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(loaded, config);
    insta::assert_snapshot!(std::fs::read_to_string(&path).unwrap(), @r#"
    concurrent = 1
    check_interval = 3
    log_level = "info"
    shutdown_timeout = 30

    [[runners]]
    name = "laptop"
    url = "https://gitlab.example.com/"
    id = 7
    token = "glrt-t1_secret"
    token_obtained_at = 2025-01-02T03:04:05Z
    executor = "shell"
    limit = 0
    request_concurrency = 1
    output_limit = 4096
    shell = "bash"
    "#);

    // Saving over an existing file replaces it.
    config.concurrent = std::num::NonZeroUsize::new(8).unwrap();
    config.save(&path).unwrap();
    assert_eq!(Config::load(&path).unwrap().0.concurrent.get(), 8);
}

#[test]
fn a_full_config_round_trips() {
    let text = r#"
concurrent = 2
log_level = "debug"
listen_address = "127.0.0.1:9252"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-x"
executor = "docker"
environment = ["A=1"]
builds_dir = "/builds"
cache_dir = "/cache"
clone_url = "https://git.internal/mirror"
debug_trace_disabled = true
unhealthy_requests_limit = 5
unhealthy_interval = "10m"
pre_get_sources_script = "git config --global http.sslVerify true"
post_get_sources_script = "git log -1"
pre_build_script = """
echo one
echo two"""
post_build_script = "echo done"
[runners.cache]
Type = "gcs"
Path = "prefix"
[runners.cache.gcs]
BucketName = "b"
[runners.docker]
image = "alpine"
memory = "512m"
cpus = "2"
pull_policy = "never"
allowed_pull_policies = ["never"]
cap_add = ["NET_ADMIN"]
[[runners]]
url = "http://localhost:8080"
token = "glrt-y"
executor = "custom"
[runners.custom]
run_exec = "/opt/run.sh"
run_args = ["--fast"]
prepare_exec = "/opt/prepare.sh"
prepare_exec_timeout = 60
"#;
    let (config, warnings) = load(text).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let saved = config.to_toml().unwrap();
    let (again, warnings) = Config::from_toml(&saved, Path::new("saved.toml")).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(again, config);
    let custom = again.runners[1].custom.as_ref().unwrap();
    assert_eq!(
        custom.prepare.as_ref().unwrap().timeout,
        Duration::from_secs(60)
    );
    assert_eq!(custom.run.args, vec!["--fast".to_owned()]);
    let scripts = &again.runners[0].scripts;
    assert_eq!(scripts.pre_build.as_deref(), Some("echo one\necho two"));
    assert_eq!(scripts.post_get_sources.as_deref(), Some("git log -1"));
    assert_eq!(
        again.runners[0].clone_url.as_deref(),
        Some("https://git.internal/mirror")
    );
    assert!(again.runners[0].debug_trace_disabled);
    assert_eq!(
        again.runners[0].unhealthy,
        Some(Unhealthy {
            requests_limit: 5,
            interval: Duration::from_secs(600)
        })
    );
    assert_eq!(again.runners[1].unhealthy, None, "Gantry's backoff");
}

/// `labels`, global and per entry (the entry's own win when requests are made), checked
/// by GitLab's rules when the file loads.
#[test]
fn labels_merge_and_break_no_rule() {
    let text = |global: &str, own: &str| {
        format!(
            "{global}\n[[runners]]\nurl = \"https://gitlab.example.com/\"\ntoken = \"glrt-x\"\nexecutor = \"shell\"\n{own}\n"
        )
    };
    let (config, warnings) = load(&text(
        "labels = { zone = \"eu-1\", team = \"ci\" }",
        "labels = { zone = \"us-2\" }",
    ))
    .unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let labels = config.labels_of(&config.runners[0]);
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        [
            ("team".to_owned(), "ci".to_owned()),
            ("zone".to_owned(), "us-2".to_owned())
        ]
    );
    let saved = config.to_toml().unwrap();
    let (again, _) = Config::from_toml(&saved, Path::new("saved.toml")).unwrap();
    assert_eq!(again, config);

    let message = error(&text("", "labels = { \"-bad\" = \"x\" }"));
    assert!(
        message.contains("runners[0].labels") && message.contains("validate runner label `-bad`"),
        "{message}"
    );
    let many: String = (0..20).map(|i| format!("k{i:02} = \"v\", ")).collect();
    let more: String = (20..40).map(|i| format!("k{i:02} = \"v\", ")).collect();
    let message = error(&text(
        &format!("labels = {{ {} }}", many.trim_end_matches(", ")),
        &format!("labels = {{ {} }}", more.trim_end_matches(", ")),
    ));
    assert!(message.contains("at most 32 labels"), "{message}");
}

/// gitlab-runner's health check: either key turns it on, the other taking
/// gitlab-runner's default; a bad value names its key.
#[test]
fn unhealthy_settings_take_gitlab_runners_defaults_and_name_bad_values() {
    let entry = |keys: &str| {
        format!(
            "[[runners]]\nurl = \"https://gitlab.example.com/\"\ntoken = \"glrt-x\"\nexecutor = \"shell\"\n{keys}\n"
        )
    };
    let unhealthy = |keys: &str| load(&entry(keys)).unwrap().0.runners[0].unhealthy;
    assert_eq!(
        unhealthy("unhealthy_requests_limit = 10"),
        Some(Unhealthy {
            requests_limit: 10,
            interval: Unhealthy::DEFAULT_INTERVAL
        })
    );
    assert_eq!(
        unhealthy("unhealthy_interval = \"90s\""),
        Some(Unhealthy {
            requests_limit: Unhealthy::DEFAULT_REQUESTS_LIMIT,
            interval: Duration::from_secs(90)
        })
    );
    let message = error(&entry(
        "unhealthy_requests_limit = 0\nunhealthy_interval = \"soon\"",
    ));
    assert!(
        message.contains("runners[0].unhealthy_requests_limit")
            && message.contains("expected a whole number of at least 1, found 0")
            && message.contains("runners[0].unhealthy_interval")
            && message.contains("\"soon\""),
        "{message}"
    );
}

#[test]
fn old_names_of_the_get_sources_scripts_still_work_and_say_so() {
    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-x"
executor = "shell"
pre_clone_script = "echo old pre"
post_clone_script = "echo old post"
post_get_sources_script = "echo new post"
"#;
    let (config, warnings) = load(text).unwrap();
    let scripts = &config.runners[0].scripts;
    assert_eq!(scripts.pre_get_sources.as_deref(), Some("echo old pre"));
    assert_eq!(scripts.post_get_sources.as_deref(), Some("echo new post"));
    insta::assert_snapshot!(warnings.join("\n"), @r"
    `runners[0].pre_clone_script` (line 6, column 1): the old name of `pre_get_sources_script` (gitlab-runner renamed it); it is used all the same, rename it
    `runners[0].post_clone_script` (line 7, column 1): the old name of `post_get_sources_script`, which is also set: this one is ignored
    ");
}

#[test]
fn a_clone_url_git_cannot_use_is_an_error_naming_the_key() {
    let text = r#"
[[runners]]
url = "https://gitlab.example.com/"
token = "glrt-x"
executor = "shell"
clone_url = "git@gitlab.example.com:mirror"
"#;
    let message = error(text);
    assert!(
        message.contains("`runners[0].clone_url` (line 6, column 1): expected an `http://` or `https://` URL git can clone from"),
        "{message}"
    );
}

#[test]
fn nothing_panics_on_odd_input() {
    for text in [
        "",
        "[[runners]]",
        "runners = 3",
        "runners = [1, 2]",
        "[runners]\nx = 1",
        "concurrent = 99999999999999999999",
        "concurrent = -9223372036854775808",
        "[[runners]]\n[runners.docker]\nmemory = \"99999999999999999999g\"",
        "\u{feff}concurrent = 1",
        "\0",
        "[[runners]]\nurl = \"https://\"\ntoken=\"t\"\nexecutor=\"shell\"",
    ] {
        let _ = load(text);
    }
}

/// `[otel]`: the `OTEL_*` variables' settings by key (issue 37); kept by `save`, and a bad
/// value names its key.
#[test]
fn the_otel_section_loads_round_trips_and_names_bad_keys() {
    let text = format!(
        "{MINIMAL}\n[otel]\nendpoint = \"http://collector:4317\"\nprotocol = \"grpc\"\nservice_name = \"runner-eu\"\nsampler = \"parentbased_traceidratio\"\nsampler_arg = \"0.5\"\n[otel.headers]\nx-api-key = \"k\"\n[otel.resource_attributes]\n\"deployment.environment\" = \"ci\"\n"
    );
    let (config, warnings) = load(&text).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let t = &config.telemetry;
    assert_eq!(t.endpoint.as_deref(), Some("http://collector:4317"));
    assert_eq!(t.protocol, Some(gantry_telemetry::Protocol::Grpc));
    assert_eq!(t.service_name.as_deref(), Some("runner-eu"));
    assert_eq!(t.headers, [("x-api-key".to_owned(), "k".to_owned())]);
    assert!(t.is_on());
    let saved = config.to_toml().unwrap();
    let (again, _) = load(&saved).unwrap();
    assert_eq!(again.telemetry, config.telemetry, "{saved}");
    // Without the section: off.
    assert!(!load(MINIMAL).unwrap().0.telemetry.is_on());
    let bad = error(&format!("{MINIMAL}\n[otel]\nprotocol = \"udp\"\n"));
    assert!(bad.contains("otel.protocol"), "{bad}");
    assert!(
        bad.contains("`grpc`, `http/protobuf` or `http/json`"),
        "{bad}"
    );
    let bad = error(&format!(
        "{MINIMAL}\n[otel]\nsampler = \"traceidratio\"\nsampler_arg = \"2\"\n"
    ));
    assert!(bad.contains("otel.sampler_arg"), "{bad}");
}
