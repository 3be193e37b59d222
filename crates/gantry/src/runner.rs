//! `gantry runner …`: the runner agent's commands, as gitlab-runner's: `register`,
//! `run`, `verify`, `list`, `unregister`. The work is in `gantry-runner`; this file
//! parses flags, picks the configuration file, maps signals and prints.
//!
//! The configuration file is, in order: `--config PATH`; `$GANTRY_RUNNER_CONFIG`;
//! `/etc/gantry-runner/config.toml` when running as root (a system service, like
//! gitlab-runner's `/etc/gitlab-runner/config.toml`); else `./config.toml` in the
//! current directory. The runner's system id is kept next to it (`.runner_system_id`).
//!
//! Exit status: `0` done; `1` `verify` found a runner the server does not accept; `2`
//! bad flags or a configuration that cannot be used (the error names the key, line and
//! column); `3` the server could not be reached or refused the request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, Subcommand};
use gantry_protocol::{RegisterRunnerRequest, TagList, token::is_created_runner_token};
use gantry_runner::client::{Client, ClientError};
use gantry_runner::config::short_token;
use gantry_runner::config::{
    Config, ConfigError, CustomConfig, CustomProgram, DEFAULT_CUSTOM_EXEC_TIMEOUT,
    DEFAULT_CUSTOM_KILL_TIMEOUT, DockerConfig, ExecutorKind, LogLevel, PullPolicy, RunnerConfig,
    ShellKind,
};
use gantry_runner::journal::{Journal, journal_dir};
use gantry_runner::poll::{
    Level, PollEvent, PollOptions, Poller, check_config, load_or_create_system_id, runner_name,
    system_id_path, version_info,
};

use crate::exit::Failure;
use crate::{env, exit};

/// Where the configuration is, for every subcommand.
#[derive(Args, Clone, Debug)]
pub(crate) struct ConfigArg {
    /// The runner's config.toml [env: GANTRY_RUNNER_CONFIG] [default:
    /// /etc/gantry-runner/config.toml as root, ./config.toml otherwise].
    #[arg(long, short = 'c', value_name = "PATH", global = true)]
    config: Option<PathBuf>,
}

/// `gantry runner …`.
#[derive(Subcommand, Debug)]
pub(crate) enum RunnerCommand {
    /// Register this machine with a GitLab-compatible server and write the
    /// configuration (a `glrt-` token is verified; a registration token creates a runner).
    Register(Box<RegisterArgs>),
    /// Poll for jobs and run them until stopped. SIGQUIT: finish running jobs, take no
    /// new ones. SIGTERM/SIGINT: interrupt running jobs (after_script still runs), twice
    /// to stop at once. SIGHUP: reload the configuration. SIGUSR2: hand the running
    /// jobs over to the next `gantry runner run` (stop without stopping them).
    Run(RunArgs),
    /// Check every configured runner's token with its server.
    Verify(VerifyArgs),
    /// List the configured runners.
    List(ConfigArg),
    /// Remove runners from their server and from the configuration.
    Unregister(UnregisterArgs),
}

#[derive(Args, Debug)]
pub(crate) struct RegisterArgs {
    /// The server, e.g. https://gitlab.example.com.
    #[arg(long, value_name = "URL")]
    url: String,
    /// A runner authentication token (`glrt-…`, created in the UI or with
    /// `POST /user/runners`), a legacy registration token, or a personal access token
    /// with scope `api` (`glpat-…`, the admin token): an instance runner is then created
    /// with it (`POST /user/runners`) and registered with its new `glrt-` token.
    #[arg(long, value_name = "TOKEN")]
    token: String,
    /// How jobs run: `shell`, `docker`, `custom`, `instance` or `docker-autoscaler`.
    #[arg(long, default_value = "shell", value_name = "EXECUTOR")]
    executor: String,
    /// `docker`, `docker-autoscaler`: the image of jobs that name none (`[runners.docker]
    /// image`).
    #[arg(long, value_name = "IMAGE")]
    docker_image: Option<String>,
    /// `docker`, `docker-autoscaler`: when to pull a job's image (`[runners.docker]
    /// pull_policy`; repeatable, tried in order): `always` (gitlab-runner's default),
    /// `if-not-present` (use an image already on the engine; pull only when missing) or
    /// `never`.
    #[arg(long, value_name = "POLICY")]
    docker_pull_policy: Vec<String>,
    /// `custom`: the program that runs each stage's script (`[runners.custom]
    /// run_exec`; required with `--executor custom`).
    #[arg(long, value_name = "PATH")]
    custom_run_exec: Option<String>,
    /// `custom`: the program that prints the job's configuration as JSON (`config_exec`).
    #[arg(long, value_name = "PATH")]
    custom_config_exec: Option<String>,
    /// `custom`: the program that makes the job's environment (`prepare_exec`).
    #[arg(long, value_name = "PATH")]
    custom_prepare_exec: Option<String>,
    /// `custom`: the program that removes it (`cleanup_exec`).
    #[arg(long, value_name = "PATH")]
    custom_cleanup_exec: Option<String>,
    /// `instance`, `docker-autoscaler`: the fleeting plugin of its `[runners.autoscaler]`
    /// (a path, or NAME found as `fleeting-plugin-NAME` on PATH).
    #[arg(long, value_name = "PLUGIN")]
    autoscaler_plugin: Option<String>,
    /// PEM certificates to trust for the server besides the system's (`tls-ca-file`).
    #[arg(long, value_name = "PATH")]
    tls_ca_file: Option<std::path::PathBuf>,
    /// A client certificate for a server that asks for one (`tls-cert-file`; with
    /// --tls-key-file).
    #[arg(long, value_name = "PATH")]
    tls_cert_file: Option<std::path::PathBuf>,
    /// The client certificate's private key (`tls-key-file`).
    #[arg(long, value_name = "PATH")]
    tls_key_file: Option<std::path::PathBuf>,
    /// Where jobs' build directories go (`builds_dir`) [default: `builds` in the directory
    /// `gantry runner run` starts in, as gitlab-runner's shell executor].
    #[arg(long, value_name = "DIR")]
    builds_dir: Option<std::path::PathBuf>,
    /// Where the local cache goes (`cache_dir`) [default: `cache` in the directory
    /// `gantry runner run` starts in].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,
    /// A name for this runner [default: the host name].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Tags, comma-separated (registration and personal access tokens only: a `glrt-`
    /// runner's tags are set where it was created).
    #[arg(long, value_name = "TAGS")]
    tag_list: Option<String>,
    #[command(flatten)]
    config: ConfigArg,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Over `[otel]` in the configuration, over the `OTEL_*` variables.
    #[command(flatten)]
    otel: crate::otel::OtelArgs,
}

#[derive(Args, Debug)]
pub(crate) struct VerifyArgs {
    /// Only the runner with this name.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    #[command(flatten)]
    config: ConfigArg,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["name", "all"]))]
pub(crate) struct UnregisterArgs {
    /// The runner with this name.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Every configured runner.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    config: ConfigArg,
}

/// Runs a `gantry runner` command; returns the exit status.
pub(crate) fn run(command: &RunnerCommand) -> u8 {
    let runtime = match crate::exit::runtime(&mut tokio::runtime::Builder::new_multi_thread()) {
        Ok(runtime) => runtime,
        Err(failure) => return failure.report(),
    };
    let result = runtime.block_on(async {
        match command {
            RunnerCommand::Register(args) => register(args).await,
            RunnerCommand::Run(args) => run_runner(args).await,
            RunnerCommand::Verify(args) => verify(args).await,
            RunnerCommand::List(args) => list(args),
            RunnerCommand::Unregister(args) => unregister(args).await,
        }
    });
    // Jobs abandoned at shutdown are killed when their tasks are dropped here.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

/// The configuration path (see the module docs).
fn config_path(arg: &ConfigArg) -> PathBuf {
    if let Some(path) = &arg.config {
        return path.clone();
    }
    if let Some(path) = env::var(env::GANTRY_RUNNER_CONFIG) {
        return PathBuf::from(path);
    }
    if is_root() {
        PathBuf::from("/etc/gantry-runner/config.toml")
    } else {
        PathBuf::from("config.toml")
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status
                .lines()
                .find(|line| line.starts_with("Uid:"))?
                .to_owned();
            line.split_whitespace().nth(2).map(|euid| euid == "0")
        })
        .unwrap_or(false)
}

/// Loads the configuration, printing warnings; a bad file is a usage error (exit 2).
fn load(path: &Path) -> Result<Config, Failure> {
    match Config::load(path) {
        Ok((config, warnings)) => {
            for warning in warnings {
                eprintln!("warning: {}: {warning}", path.display());
            }
            Ok(config)
        }
        Err(error @ ConfigError::Read { .. }) => Err(Failure::usage(format!(
            "failed to {error}\nregister a runner with `gantry runner register --url URL --token TOKEN`, or pass --config PATH"
        ))),
        Err(error) => Err(Failure::usage(format!("failed to {error}"))),
    }
}

fn system_id(path: &Path) -> Result<String, Failure> {
    let at = system_id_path(path);
    load_or_create_system_id(&at).map_err(|error| {
        Failure::usage(format!(
            "failed to keep the runner's system id in `{}`: {error}\nmake the configuration's directory writable",
            at.display()
        ))
    })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "gantry-runner".to_owned())
}

/// Now as RFC 3339 (`2026-01-31T10:00:00Z`), for `token_obtained_at`.
fn rfc3339_now() -> String {
    gantry_protocol::time::rfc3339_secs(gantry_protocol::time::now_millis().div_euclid(1000))
}

fn describe_refusal(error: &ClientError) -> String {
    match error {
        ClientError::Refused { status: 403, .. } => {
            format!(
                "{error}\nthe server does not accept this token: check it, or create a new runner"
            )
        }
        ClientError::Refused { status: 410, .. } => format!(
            "{error}\nthis server no longer accepts registration tokens: create a runner in the UI (or with POST /user/runners) and register with its glrt- token"
        ),
        other => other.to_string(),
    }
}

/// `[runners.docker]` and `[runners.custom]` from `register`'s flags: each flag only
/// with its executor, `--custom-run-exec` required by `custom`.
fn executor_sections(args: &RegisterArgs, runner: &mut RunnerConfig) -> Result<(), Failure> {
    let custom_flags = [
        ("--custom-run-exec", &args.custom_run_exec),
        ("--custom-config-exec", &args.custom_config_exec),
        ("--custom-prepare-exec", &args.custom_prepare_exec),
        ("--custom-cleanup-exec", &args.custom_cleanup_exec),
    ];
    let misplaced = |flag: &str, executor: &str| {
        Failure::usage(format!(
            "{flag} is for --executor {executor}; this runner uses --executor {}",
            runner.executor
        ))
    };
    if !runner.executor.uses_docker() && args.docker_image.is_some() {
        return Err(misplaced("--docker-image", "docker"));
    }
    if !runner.executor.uses_docker() && !args.docker_pull_policy.is_empty() {
        return Err(misplaced("--docker-pull-policy", "docker"));
    }
    let mut pull_policy = Vec::new();
    for value in &args.docker_pull_policy {
        let policy = PullPolicy::parse(value).ok_or_else(|| {
            Failure::usage(format!(
                "--docker-pull-policy {value:?} is not a pull policy; expected one of {}",
                PullPolicy::NAMES.join(", ")
            ))
        })?;
        pull_policy.push(policy);
    }
    if runner.executor != ExecutorKind::Custom
        && let Some((flag, _)) = custom_flags.iter().find(|(_, value)| value.is_some())
    {
        return Err(misplaced(flag, "custom"));
    }
    if !runner.executor.uses_fleet() && args.autoscaler_plugin.is_some() {
        return Err(misplaced("--autoscaler-plugin", "instance"));
    }
    if runner.executor.uses_docker() {
        runner.docker = Some(DockerConfig {
            image: args.docker_image.clone(),
            pull_policy,
            ..DockerConfig::default()
        });
    }
    if runner.executor.uses_fleet() {
        let plugin = args.autoscaler_plugin.clone().ok_or_else(|| {
            Failure::usage(format!(
                "--executor {} needs --autoscaler-plugin PLUGIN: the fleeting plugin that manages its instances (e.g. fleeting-plugin-local); tune [runners.autoscaler] in the file afterwards",
                runner.executor
            ))
        })?;
        runner.autoscaler = Some(gantry_runner::config::AutoscalerConfig::with_plugin(plugin));
    }
    match runner.executor {
        ExecutorKind::Shell
        | ExecutorKind::Docker
        | ExecutorKind::Instance
        | ExecutorKind::DockerAutoscaler => {}
        ExecutorKind::Custom => {
            let program = |exec: &Option<String>| {
                exec.clone().map(|exec| CustomProgram {
                    exec,
                    args: Vec::new(),
                    timeout: DEFAULT_CUSTOM_EXEC_TIMEOUT,
                })
            };
            let run = program(&args.custom_run_exec).ok_or_else(|| {
                Failure::usage(
                    "--executor custom needs --custom-run-exec PATH: the program that runs each stage's script",
                )
            })?;
            runner.custom = Some(CustomConfig {
                config: program(&args.custom_config_exec),
                prepare: program(&args.custom_prepare_exec),
                run,
                cleanup: program(&args.custom_cleanup_exec),
                graceful_kill_timeout: DEFAULT_CUSTOM_KILL_TIMEOUT,
                force_kill_timeout: DEFAULT_CUSTOM_KILL_TIMEOUT,
            });
        }
    }
    Ok(())
}

/// `register --token glpat-…`: creates an instance runner with the personal access token
/// (`POST /api/v4/user/runners`, as GitLab's "New instance runner" page does) and returns
/// its `glrt-` token. Tags and whether it runs untagged jobs are set here, as the page
/// sets them.
async fn create_runner(
    args: &RegisterArgs,
    runner: &RunnerConfig,
    name: &str,
    tags: &TagList,
) -> Result<String, Failure> {
    if args.tls_ca_file.is_some() || args.tls_cert_file.is_some() {
        return Err(Failure::usage(
            "--tls-ca-file and --tls-cert-file cannot be used with a personal access token: create the runner with POST /user/runners and register with its glrt- token",
        ));
    }
    let client = crate::client::ApiClient::with_token(&runner.url, args.token.clone())
        .map_err(|error| Failure::usage(error.to_string()))?;
    let body = serde_json::json!({
        "runner_type": "instance_type",
        "description": name,
        "tag_list": tags.0.join(","),
        "run_untagged": tags.is_empty(),
    });
    let created: serde_json::Value = client
        .post("user/runners", &body)
        .await
        .map_err(|error| {
            Failure::failed(format!(
                "failed to create a runner with the personal access token: {error}\nthe token needs scope `api` on {}",
                runner.url
            ))
        })?;
    created["token"].as_str().map(str::to_owned).ok_or_else(|| {
        Failure::failed("the server's answer to POST /api/v4/user/runners has no `token`")
    })
}

async fn register(args: &RegisterArgs) -> Result<u8, Failure> {
    let path = config_path(&args.config);
    let executor = match ExecutorKind::parse(&args.executor) {
        Some(executor) => executor,
        None => {
            return Err(Failure::usage(format!(
                "--executor {:?} is not an executor; expected one of {}",
                args.executor,
                ExecutorKind::NAMES.join(", ")
            )));
        }
    };
    let mut config = if path.exists() {
        load(&path)?
    } else {
        Config::default()
    };
    let tags = TagList(
        args.tag_list
            .iter()
            .flat_map(|list| list.split(','))
            .map(str::trim)
            .filter(|tag| !tag.is_empty())
            .map(str::to_owned)
            .collect(),
    );
    let name = args.name.clone().unwrap_or_else(hostname);
    let mut runner = RunnerConfig::new(args.url.trim(), "placeholder", executor);
    runner.name = Some(name.clone());
    runner.builds_dir = args.builds_dir.clone();
    runner.cache_dir = args.cache_dir.clone();
    runner.tls = gantry_runner::config::TlsFiles {
        ca_file: args.tls_ca_file.clone(),
        cert_file: args.tls_cert_file.clone(),
        key_file: args.tls_key_file.clone(),
    };
    executor_sections(args, &mut runner)?;
    // Check the URL (and everything else) the way `run` will, before any request.
    let mut candidate = config.clone();
    candidate.runners.push(runner.clone());
    Config::from_file_layer(&candidate.to_file(), "", &path)
        .map_err(|error| Failure::usage(format!("failed to {error}")))?;

    let system_id = system_id(&path)?;
    let mut runner_token = args.token.clone();
    if args
        .token
        .starts_with(gantry_protocol::token::PERSONAL_ACCESS_TOKEN_PREFIX)
    {
        runner_token = create_runner(args, &runner, &name, &tags).await?;
    }
    let (id, token, expires_at) = if is_created_runner_token(&runner_token) {
        if !tags.is_empty() && runner_token == args.token {
            return Err(Failure::usage(
                "--tag-list cannot be used with a glrt- runner authentication token: the runner's tags are set where it was created (UI or POST /user/runners)",
            ));
        }
        let client = Client::with_tls(
            &runner.url,
            version_info(Some((executor, ShellKind::Bash))),
            &runner.tls,
        )
        .map_err(|error| Failure::failed(error.to_string()))?;
        let details = client
            .verify(&runner_token, &system_id)
            .await
            .map_err(|error| Failure::failed(format!("failed to {}", describe_refusal(&error))))?;
        (details.id, runner_token, details.token_expires_at)
    } else {
        let client = Client::with_tls(&runner.url, version_info(None), &runner.tls)
            .map_err(|error| Failure::failed(error.to_string()))?;
        let request = RegisterRunnerRequest {
            token: args.token.clone(),
            description: name.clone(),
            run_untagged: Some(tags.is_empty()),
            locked: Some(true),
            paused: Some(false),
            tag_list: tags,
            ..RegisterRunnerRequest::default()
        };
        let details = client
            .register(request)
            .await
            .map_err(|error| Failure::failed(format!("failed to {}", describe_refusal(&error))))?;
        (details.id, details.token, details.token_expires_at)
    };
    runner.id = (id != 0).then_some(id);
    runner.token = token;
    runner.token_obtained_at = Some(rfc3339_now());
    runner.token_expires_at = expires_at;
    config
        .runners
        .retain(|existing| existing.token != runner.token || existing.url != runner.url);
    config.runners.push(runner.clone());
    config
        .save(&path)
        .map_err(|error| Failure::usage(format!("failed to {error}")))?;
    eprintln!(
        "Runner {name} ({}) registered with {}; configuration saved to {}",
        short_token(&runner.token),
        runner.url,
        path.display()
    );
    eprintln!(
        "Start it with `gantry runner run --config {}`",
        path.display()
    );
    Ok(exit::OK)
}

fn level_allows(configured: LogLevel, level: Level) -> bool {
    let threshold = match configured {
        LogLevel::Trace | LogLevel::Debug => Level::Debug,
        LogLevel::Info => Level::Info,
        LogLevel::Warn => Level::Warn,
        LogLevel::Error | LogLevel::Fatal | LogLevel::Panic => Level::Error,
    };
    level >= threshold
}

fn print_event(log_level: LogLevel, event: &PollEvent) {
    let level = event.level();
    if !level_allows(log_level, level) {
        return;
    }
    let prefix = match level {
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warning",
        Level::Error => "error",
    };
    eprintln!("{prefix}: {event}");
}

/// Serves `GET /metrics` on `listen_address` (gitlab-runner's metrics server) until the
/// returned task is aborted; says where on stderr.
async fn serve_metrics(
    address: &gantry_runner::config::ListenAddress,
    metrics: Arc<gantry_runner::metrics::RunnerMetrics>,
) -> Result<tokio::task::JoinHandle<()>, Failure> {
    let listener = tokio::net::TcpListener::bind((address.bind_host(), address.port))
        .await
        .map_err(|error| {
            Failure::failed(format!(
                "failed to listen on {address} (listen_address, for the metrics): {error}"
            ))
        })?;
    let bound = listener
        .local_addr()
        .map_err(|error| Failure::failed(format!("failed to listen on {address}: {error}")))?;
    eprintln!("info: metrics at http://{bound}/metrics");
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = Arc::clone(&metrics);
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        gantry_runner::metrics::CONTENT_TYPE,
                    )],
                    metrics.encode(),
                )
            }
        }),
    );
    Ok(tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("error: the metrics server stopped: {error}");
        }
    }))
}

async fn run_runner(args: &RunArgs) -> Result<u8, Failure> {
    use tokio::signal::unix::{SignalKind, signal};

    let path = config_path(&args.config);
    let config = load(&path)?;
    check_config(&config).map_err(|error| Failure::usage(format!("failed to {error}")))?;
    let system_id = system_id(&path)?;
    let log_level = config.log_level;
    let mut options = PollOptions::new(system_id);
    // Tracing and metrics: flags over `[otel]` over `OTEL_*`; read at start (a reload
    // keeps them).
    let tracing = args
        .otel
        .settings()
        .map(|flags| flags.over(config.telemetry.clone()))
        .and_then(crate::otel::resolve)
        .map_err(|error| Failure::usage(error.to_string()))?;
    options.telemetry = crate::otel::start(&tracing, "gantry-runner").map_err(Failure::failed)?;
    let telemetry = options.telemetry.clone();
    let meters = crate::otel::start_meters(&tracing, "gantry-runner").map_err(Failure::failed)?;
    let metrics = Arc::new(gantry_runner::metrics::RunnerMetrics::with_meters(
        meters.as_ref(),
    ));
    let metrics_server = match &config.listen_address {
        Some(address) => Some(serve_metrics(address, Arc::clone(&metrics)).await?),
        None => None,
    };
    let journal = Journal::open(journal_dir(&path)).map_err(|error| {
        Failure::usage(format!(
            "failed to {error}\nmake the configuration's directory writable"
        ))
    })?;
    options.journal = Some(journal);
    let counted = Arc::clone(&metrics);
    options.api_observer = Some(Arc::new(move |runner, endpoint, status| {
        counted.observe_api(runner, endpoint, status);
    }));
    let observed = Arc::clone(&metrics);
    options.events = Arc::new(move |event: &PollEvent| {
        observed.observe(event);
        print_event(log_level, event);
    });
    let (poller, handle) = Poller::new(config, options)
        .map_err(|error| Failure::usage(format!("failed to {error}")))?;

    let mut signals = Vec::new();
    for kind in [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::quit(),
        SignalKind::hangup(),
        SignalKind::user_defined2(),
    ] {
        let stream = signal(kind)
            .map_err(|error| Failure::failed(format!("failed to listen for signals: {error}")))?;
        signals.push(stream);
    }
    let [mut term, mut int, mut quit, mut hup, mut usr2] = match <[_; 5]>::try_from(signals) {
        Ok(streams) => streams,
        Err(_) => return Err(Failure::failed("failed to listen for signals")),
    };
    let reload_path = path.clone();
    let signals = tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = term.recv() => handle.interrupt(),
                Some(()) = int.recv() => handle.interrupt(),
                Some(()) = quit.recv() => handle.stop_taking_jobs(),
                Some(()) = usr2.recv() => handle.hand_over(),
                Some(()) = hup.recv() => match Config::load(&reload_path) {
                    Ok((config, warnings)) => {
                        for warning in warnings {
                            eprintln!("warning: {}: {warning}", reload_path.display());
                        }
                        handle.reload(config);
                    }
                    Err(error) => eprintln!("error: configuration not reloaded (keeping the old one): failed to {error}"),
                },
                else => break,
            }
        }
    });
    poller.run().await;
    signals.abort();
    if let Some(metrics_server) = metrics_server {
        metrics_server.abort();
    }
    crate::otel::stop(telemetry).await;
    crate::otel::stop_meters(meters).await;
    Ok(exit::OK)
}

fn selected<'a>(config: &'a Config, name: Option<&str>) -> Result<Vec<&'a RunnerConfig>, Failure> {
    let runners: Vec<_> = config
        .runners
        .iter()
        .filter(|runner| name.is_none_or(|name| runner.name.as_deref() == Some(name)))
        .collect();
    match (runners.is_empty(), name) {
        (true, Some(name)) => Err(Failure::usage(format!(
            "no runner named {name:?} in the configuration"
        ))),
        (true, None) => Err(Failure::usage("the configuration has no runners")),
        _ => Ok(runners),
    }
}

async fn verify(args: &VerifyArgs) -> Result<u8, Failure> {
    let path = config_path(&args.config);
    let config = load(&path)?;
    let system_id = system_id(&path)?;
    let mut code = exit::OK;
    for runner in selected(&config, args.name.as_deref())? {
        let client = Client::with_tls(
            &runner.url,
            version_info(Some((runner.executor, runner.shell))),
            &runner.tls,
        )
        .map_err(|error| Failure::failed(error.to_string()))?;
        let who = format!("{} ({})", runner_name(runner), short_token(&runner.token));
        match client.verify(&runner.token, &system_id).await {
            Ok(_) => crate::out_line(&format!("{who} is valid")),
            Err(ClientError::Refused { status: 403, .. }) => {
                crate::out_line(&format!(
                    "{who} is not valid: the server does not accept its token (removed?)"
                ));
                code = code.max(exit::INVALID);
            }
            Err(error) => {
                eprintln!("error: {who}: failed to {error}");
                code = exit::FAILED;
            }
        }
    }
    Ok(code)
}

fn list(arg: &ConfigArg) -> Result<u8, Failure> {
    let path = config_path(arg);
    let config = load(&path)?;
    eprintln!("Listing configured runners (config: {})", path.display());
    for runner in &config.runners {
        crate::out_line(&format!(
            "{}\texecutor={}\turl={}\ttoken={}",
            runner_name(runner),
            runner.executor,
            runner.url,
            short_token(&runner.token)
        ));
    }
    Ok(exit::OK)
}

async fn unregister(args: &UnregisterArgs) -> Result<u8, Failure> {
    let path = config_path(&args.config);
    let mut config = load(&path)?;
    let system_id = system_id(&path)?;
    let chosen: Vec<RunnerConfig> =
        selected(&config, if args.all { None } else { args.name.as_deref() })?
            .into_iter()
            .cloned()
            .collect();
    let mut code = exit::OK;
    for runner in chosen {
        let client = Client::with_tls(&runner.url, version_info(None), &runner.tls)
            .map_err(|error| Failure::failed(error.to_string()))?;
        let who = format!("{} ({})", runner_name(&runner), short_token(&runner.token));
        // A `glrt-` runner belongs to the UI/API: only this machine's manager goes (§2.5).
        let result = if is_created_runner_token(&runner.token) {
            client.unregister_manager(&runner.token, &system_id).await
        } else {
            client.unregister(&runner.token).await
        };
        match result {
            Ok(()) => eprintln!("Unregistered {who}"),
            Err(ClientError::Refused {
                status: 403 | 404, ..
            }) => {
                eprintln!(
                    "warning: the server no longer knows {who}; removing it from the configuration"
                );
            }
            Err(error) => {
                eprintln!("error: {who}: failed to {error}\nit stays in the configuration");
                code = exit::FAILED;
                continue;
            }
        }
        config
            .runners
            .retain(|existing| existing.token != runner.token || existing.url != runner.url);
    }
    config
        .save(&path)
        .map_err(|error| Failure::usage(format!("failed to {error}")))?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_now_has_the_config_layer_s_shape() {
        let now = rfc3339_now();
        let bytes = now.as_bytes();
        assert_eq!(now.len(), 20, "{now}");
        assert_eq!(
            (
                bytes[4], bytes[7], bytes[10], bytes[13], bytes[16], bytes[19]
            ),
            (b'-', b'-', b'T', b':', b':', b'Z'),
            "{now}"
        );
        assert!(now.starts_with("20"), "{now}");
    }
}
