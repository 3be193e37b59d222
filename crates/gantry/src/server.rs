//! `gantry server`: the coordinator with its HTTP API, on an embedded SQLite database
//! and a local blob directory. Zero configuration: the first start creates the data
//! directory, an admin token and a runner registration token, and says how to use them.
//!
//! # Who can read the data directory
//!
//! The data directory holds the database (tokens' hashes, sealed variables, the key that
//! opens them unless `GANTRY_DB_KEY` is set), job logs, artifacts and the projects'
//! mirrors: it is the server user's alone. The server sets its umask to `077` before it
//! creates anything, so every directory it makes is `0700` and every file `0600` —
//! the database and SQLite's `-wal`/`-shm` (SQLite gives them the database's mode),
//! logs, staged uploads, blobs, and the mirrors under `repos` (git creates its files
//! through the umask: `core.sharedRepository` defaults to `umask`). One setting covers
//! what other programs create for the server, which explicit modes on its own `open`
//! calls would not. The server runs no jobs, so no job sees this umask (`gantry runner`
//! keeps its own handling, `crates/gantry-runner/src/docker/umask.rs`).
//!
//! # A lost admin token
//!
//! The admin token is shown once, at first start; the database keeps only its hash.
//! `gantry server admin-token --data-dir DIR` adds a new one straight to the server's
//! database and prints it on stdout (`--revoke-others` removes every earlier one in the
//! same transaction). Anyone who can write the data directory (or the database) is the
//! administrator anyway, so this asks for nothing more. The server need not be stopped:
//! it reads admin tokens from the database on every request (SQLite's write lock and
//! `busy_timeout` keep the two processes apart), so the new token works at once. On an
//! empty directory it creates the database first: the quick start makes the token
//! before or after the first start, as it likes.
//!
//! A data directory that already exists with group or other permission bits (made by
//! an earlier version, or by hand) is reported at start with the `chmod` that closes
//! it, and left as it is: the server does not change the modes of what an
//! administrator made (PostgreSQL, whose data directory has the same role, also checks
//! it at start rather than changing it). A directory closed to others hides
//! everything below it, whatever the modes there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use gantry_server::coordinator::{Bootstrap, Coordinator, CoordinatorConfig, ObjectBlobs};
use gantry_store::Store;

use crate::exit::Failure;
use crate::{env, exit};

#[derive(Args)]
pub(crate) struct ServerArgs {
    #[command(subcommand)]
    command: Option<ServerCommand>,
    /// Address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the database (gantry.db), artifacts, logs and repository mirrors live.
    #[arg(long, value_name = "DIR", default_value = "./gantry-data")]
    data_dir: PathBuf,
    /// The database: postgres://user:password@host/database, or sqlite:///path.db
    /// [default: $GANTRY_DATABASE_URL, else sqlite in the data directory]. Artifacts,
    /// logs and mirrors stay in the data directory either way.
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// Keep artifacts in S3-compatible object storage, `s3://BUCKET[/PREFIX]`, instead of
    /// the data directory [default: $GANTRY_BLOBS_URL]. Credentials, region and endpoint
    /// come from the AWS_* environment variables (AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, AWS_REGION; AWS_ENDPOINT_URL for MinIO and other
    /// S3-compatible servers, with AWS_ALLOW_HTTP=true for a plain-HTTP one).
    #[arg(long, value_name = "URL")]
    blobs_url: Option<String>,
    /// How runners and users reach this server (clone URLs, CI_SERVER_URL, web URLs)
    /// [default: http://<listen address>].
    #[arg(long, value_name = "URL")]
    external_url: Option<String>,
    /// An external container registry the jobs use, `host[:port]` (a scheme is dropped):
    /// jobs see it as CI_REGISTRY and their project's image as CI_REGISTRY_IMAGE
    /// (`host/group/project`). Jobs log in with their own credentials
    /// (DOCKER_AUTH_CONFIG); Gantry issues no registry tokens.
    #[arg(long, value_name = "HOST")]
    registry_url: Option<String>,
    /// Serve GitLab Pages sites on a domain of their own, `http[s]://HOST[:PORT]`: requests
    /// for that host are Pages requests and sites are `URL/<group>/<project>/`
    /// (CI_PAGES_URL, CI_PAGES_DOMAIN) [default: <external URL>/-/pages]. Point the
    /// domain at this server.
    #[arg(long, value_name = "URL")]
    pages_url: Option<String>,
    /// Largest artifact a job may upload, in MiB (GitLab's "Maximum artifacts size";
    /// 1–1048576). Uploads are streamed to disk, so this bounds disk, not memory.
    #[arg(long, value_name = "MB", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    max_artifacts_size: u64,
    /// How often every project's repository is fetched to look for pushes, in seconds:
    /// each branch or tag that moved gets a `push` pipeline (0: never; `POST
    /// /api/v4/projects/:id/mirror/pull` looks at once, for a forge's push webhook).
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(0..=86_400))]
    poll_interval: u64,
    /// How long a job handed to a runner waits for the runner's first update before it
    /// goes back to the queue (the runner died, or never received it), in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(5..=3_600))]
    job_ack_timeout: u64,
    /// How long a client has to send a whole request head, from its first byte, in
    /// seconds; then `408` and the connection is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    header_timeout: u64,
    /// How long a request body read, or a response write, waits for the client, in
    /// seconds; then the request fails and the connection is closed.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    body_timeout: u64,
    /// How long a connection may stay open without a request, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 65,
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    keepalive_timeout: u64,
    /// Open connections in all. At the cap, the connection waiting longest without a
    /// request is closed to make room; lowered to what the open-file limit allows.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Open connections from one client address; past it, `503`.
    #[arg(long, value_name = "N", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections_per_ip: u64,
    /// On SIGTERM or Ctrl-C, how long requests in flight may take to finish, in seconds;
    /// then the connections still open are closed and the server exits.
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(0..=3_600))]
    shutdown_timeout: u64,
    #[command(flatten)]
    otel: crate::otel::OtelArgs,
}

#[derive(Subcommand)]
pub(crate) enum ServerCommand {
    /// Print a new admin token for the server of a data directory (the first one is shown
    /// only at first start). Works while the server runs; the token works at once.
    AdminToken(AdminTokenArgs),
}

#[derive(Args)]
pub(crate) struct AdminTokenArgs {
    /// The server's data directory (created with its database when missing).
    #[arg(long, value_name = "DIR", default_value = "./gantry-data")]
    data_dir: PathBuf,
    /// The server's database, when it is not the data directory's SQLite file
    /// [default: $GANTRY_DATABASE_URL].
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// Remove every other admin token (one that may have leaked), keeping personal access
    /// tokens.
    #[arg(long)]
    revoke_others: bool,
}

/// File descriptors kept for the database, blobs, logs and `git` besides the
/// connections (each connection takes one: `http/peer.rs` shares its socket, no
/// duplicate; `http_long_poll::a_held_request_costs_the_server_one_file_descriptor`).
const RESERVED_FDS: u64 = 256;

impl ServerArgs {
    /// The HTTP limits, with the connection cap fitted to the open-file limit (raised to
    /// its hard maximum first, as Go programs such as gitlab-runner do).
    fn limits(&self) -> gantry_server::http::Limits {
        use std::time::Duration;
        let mut max_connections = self.max_connections;
        let wanted = max_connections.saturating_add(RESERVED_FDS);
        match raise_open_files(wanted) {
            Ok(have) if have < wanted => {
                let fits = have.saturating_sub(RESERVED_FDS);
                eprintln!(
                    "warning: the open-file limit ({have}) allows {fits} connections, not --max-connections {max_connections}: serving at most {fits}\n\
                     raise the limit (LimitNOFILE= in a systemd unit, ulimit -n) to serve more"
                );
                max_connections = fits.max(1);
            }
            Ok(_) => {}
            Err(e) => eprintln!("warning: failed to read the open-file limit: {e}"),
        }
        gantry_server::http::Limits {
            header_timeout: Duration::from_secs(self.header_timeout),
            body_timeout: Duration::from_secs(self.body_timeout),
            keepalive_timeout: Duration::from_secs(self.keepalive_timeout),
            max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            max_connections_per_ip: usize::try_from(self.max_connections_per_ip)
                .unwrap_or(usize::MAX),
            shutdown_timeout: Duration::from_secs(self.shutdown_timeout),
        }
    }
}

/// Raise the soft open-file limit towards `wanted` (at most the hard limit); the soft
/// limit now in force.
fn raise_open_files(wanted: u64) -> nix::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft >= wanted {
        return Ok(soft);
    }
    let target = wanted.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, target, hard)?;
    Ok(target)
}

pub(crate) fn run(args: &ServerArgs) -> u8 {
    // Before any thread or file exists: everything created from here on is this user's
    // alone (module docs).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let runtime = match crate::exit::runtime(&mut tokio::runtime::Builder::new_multi_thread()) {
        Ok(runtime) => runtime,
        Err(failure) => return failure.report(),
    };
    let served = match &args.command {
        Some(ServerCommand::AdminToken(admin)) => runtime.block_on(admin_token(admin)),
        None => runtime.block_on(serve(args)),
    };
    // Blocking work still running (a `git` process, a blob copy) may not hold the exit
    // past the shutdown deadline.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match served {
        Ok(()) => exit::OK,
        Err(failure) => failure.report(),
    }
}

/// The data directory, made when missing, as an absolute path.
fn data_dir(dir: &Path) -> Result<PathBuf, Failure> {
    std::fs::create_dir_all(dir).map_err(|e| {
        Failure::usage(format!(
            "failed to create the data directory {}: {e}\npass --data-dir with a writable directory",
            dir.display()
        ))
    })?;
    dir.canonicalize().map_err(|e| {
        Failure::usage(format!(
            "failed to resolve the data directory {}: {e}",
            dir.display()
        ))
    })
}

/// The database: `--database-url`, else `GANTRY_DATABASE_URL`, else SQLite in the data
/// directory; opened (and migrated).
async fn open_store(data_dir: &Path, database_url: Option<&String>) -> Result<Store, Failure> {
    let url = database_url
        .cloned()
        .or_else(|| crate::env::var(crate::env::GANTRY_DATABASE_URL))
        .unwrap_or_else(|| self::database_url(data_dir));
    Store::open(&url).await.map_err(|e| match e {
        gantry_store::StoreError::Open { .. } => Failure::failed(format!(
            "failed to {e}\n  hint: check that the database server is up and the URL (--database-url, GANTRY_DATABASE_URL) is right"
        )),
        gantry_store::StoreError::Unsupported(_) => Failure::failed(format!("failed to {e}")),
        other => Failure::failed(format!(
            "failed to {other} (database {})",
            gantry_store::redact_url(&url)
        )),
    })
}

/// `gantry server admin-token` (module docs): the token alone on stdout, for `$(…)`.
async fn admin_token(args: &AdminTokenArgs) -> Result<(), Failure> {
    let data_dir = data_dir(&args.data_dir)?;
    let store = open_store(&data_dir, args.database_url.as_ref()).await?;
    let token = gantry_server::coordinator::new_admin_token(&store, args.revoke_others)
        .await
        .map_err(|e| Failure::failed(format!("failed to add an admin token: {e}")))?;
    eprintln!(
        "gantry server: a new admin token for the server of {}{}; it is shown only now, and works at once (the server may be running)",
        data_dir.display(),
        if args.revoke_others {
            ", every earlier admin token removed"
        } else {
            ""
        }
    );
    crate::out_line(&token);
    Ok(())
}

async fn serve(args: &ServerArgs) -> Result<(), Failure> {
    let data_dir = data_dir(&args.data_dir)?;
    warn_if_open(&data_dir);
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| {
        Failure::usage(format!(
            "failed to listen on {}: {e}\nis another server using the port? Pass --listen ADDR:PORT",
            args.listen
        ))
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::failed(format!("failed to read the listening address: {e}")))?;
    let external_url = match &args.external_url {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            url.trim_end_matches('/').to_owned()
        }
        Some(url) => {
            return Err(Failure::usage(format!(
                "--external-url `{url}` is not an http:// or https:// URL"
            )));
        }
        None => {
            if local.ip().is_unspecified() {
                eprintln!(
                    "warning: listening on {local} without --external-url: runners will be told to clone from http://{local}\n\
                     pass --external-url with the address runners reach this machine at"
                );
            }
            format!("http://{local}")
        }
    };
    let mut cfg = CoordinatorConfig::new(&data_dir, external_url.clone());
    let tracing = args
        .otel
        .settings()
        .and_then(crate::otel::resolve)
        .map_err(|e| Failure::usage(e.to_string()))?;
    cfg.telemetry = crate::otel::start(&tracing, "gantry-server").map_err(Failure::failed)?;
    let telemetry = cfg.telemetry.clone();
    cfg.meters = crate::otel::start_meters(&tracing, "gantry-server").map_err(Failure::failed)?;
    let meters = cfg.meters.clone();
    cfg.artifact_limit = args.max_artifacts_size * 1024 * 1024;
    cfg.job_ack_timeout = std::time::Duration::from_secs(args.job_ack_timeout);
    cfg.registry = match args.registry_url.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(url) => {
            let host = url
                .split_once("://")
                .map_or(url, |(_, rest)| rest)
                .trim_end_matches('/');
            if host.is_empty() || host.contains(char::is_whitespace) {
                return Err(Failure::usage(format!(
                    "--registry-url `{url}`: give the registry's host[:port], e.g. registry.example.com:5000"
                )));
            }
            Some(host.to_owned())
        }
    };
    cfg.pages_url = match args.pages_url.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(url) => {
            let origin = url.trim_end_matches('/');
            let host = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"))
                .unwrap_or_default();
            if host.is_empty()
                || host.contains(['/', '?', '#'])
                || host.contains(char::is_whitespace)
            {
                return Err(Failure::usage(format!(
                    "--pages-url `{url}`: give an origin without a path, e.g. https://pages.example.com"
                )));
            }
            Some(origin.to_owned())
        }
    };
    if let Some(key) = crate::env::var(crate::env::GANTRY_DB_KEY) {
        cfg.db_key = Some(
            gantry_server::coordinator::secrets::DbKey::parse(&key)
                .map_err(|e| Failure::usage(format!("{}: {e}", crate::env::GANTRY_DB_KEY)))?,
        );
    }
    if let Some(v) = crate::env::var(crate::env::GANTRY_REMOTE_INCLUDE_MIRROR) {
        cfg.remote_include_rewrites = gantry_server::coordinator::UrlRewrite::parse_list(&v)
            .map_err(|e| {
                Failure::usage(format!("{}: {e}", crate::env::GANTRY_REMOTE_INCLUDE_MIRROR))
            })?;
    }
    if let Some(dir) = crate::env::var(crate::env::GANTRY_INCLUDE_CACHE) {
        let dir = PathBuf::from(dir);
        if !dir.is_dir() {
            return Err(Failure::usage(format!(
                "{}: `{}` is not a directory: create it (laid out as `.gantry/includes`), or unset the variable",
                crate::env::GANTRY_INCLUDE_CACHE,
                dir.display()
            )));
        }
        cfg.include_cache = Some(gantry_server::coordinator::IncludeCache {
            dir,
            host: crate::includes::cache_host(&external_url),
        });
    }
    let store = open_store(&data_dir, args.database_url.as_ref()).await?;
    let blobs_url = args
        .blobs_url
        .clone()
        .or_else(|| crate::env::var(crate::env::GANTRY_BLOBS_URL));
    let coordinator = match &blobs_url {
        None => Coordinator::open(store, cfg).await,
        Some(url) => {
            let blobs = ObjectBlobs::from_url(url, data_dir.join("blob-staging"))
                .map_err(|e| Failure::usage(format!("--blobs-url: {e}")))?;
            blobs.check().await.map_err(|e| {
                Failure::failed(format!(
                    "{e}\n  hint: check the bucket and the AWS_* credentials (AWS_ENDPOINT_URL for an S3-compatible server)"
                ))
            })?;
            Coordinator::open_with_blobs(store, cfg, std::sync::Arc::new(blobs)).await
        }
    }
    .map_err(|e| Failure::failed(format!("failed to start the coordinator: {e}")))?;
    let tokens = coordinator
        .bootstrap()
        .await
        .map_err(|e| Failure::failed(format!("failed to create the first tokens: {e}")))?;
    coordinator.resume().await.map_err(|e| {
        Failure::failed(format!(
            "failed to resume the pipelines that were active: {e}"
        ))
    })?;
    let timers = coordinator.spawn_background();
    let poller = (args.poll_interval > 0)
        .then(|| coordinator.spawn_push_poller(std::time::Duration::from_secs(args.poll_interval)));
    eprintln!(
        "gantry server: listening on {external_url} (bound to {local}), data in {}{}",
        data_dir.display(),
        blobs_url
            .as_deref()
            .map(|u| format!(", artifacts in {u}"))
            .unwrap_or_default()
    );
    print_first_start(&tokens, &external_url);
    let limits = args.limits();
    let served =
        gantry_server::http::serve_with(listener, coordinator, limits, shutdown_signal()).await;
    timers.abort();
    if let Some(poller) = poller {
        poller.abort();
    }
    crate::otel::stop(telemetry).await;
    crate::otel::stop_meters(meters).await;
    served.map_err(|e| Failure::failed(format!("the server stopped: {e}")))?;
    eprintln!("gantry server: stopped");
    Ok(())
}

/// Reports a data directory other users can enter or read (module docs).
fn warn_if_open(data_dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(data_dir) {
        Ok(meta) if meta.permissions().mode() & 0o077 != 0 => eprintln!(
            "warning: the data directory {dir} is open to other users (mode {mode:04o}): they may read the database, job logs and artifacts\n\
             close it with: chmod -R go= {dir}",
            dir = data_dir.display(),
            mode = meta.permissions().mode() & 0o7777,
        ),
        Ok(_) => {}
        Err(e) => eprintln!(
            "warning: failed to read the mode of the data directory {}: {e}",
            data_dir.display()
        ),
    }
}

/// `sqlite:///abs/path/gantry.db`.
pub(crate) fn database_url(data_dir: &Path) -> String {
    format!("sqlite://{}", data_dir.join("gantry.db").display())
}

/// The tokens exist only now in plaintext (the database keeps hashes): say what they are
/// for, on stderr.
fn print_first_start(tokens: &Bootstrap, url: &str) {
    if let Some(admin) = &tokens.admin_token {
        eprintln!();
        eprintln!(
            "First start: created an admin token. It is shown only now; keep it (a lost one is replaced with `gantry server admin-token --data-dir DIR`):"
        );
        eprintln!("    {admin}");
        eprintln!(
            "Use it with the CLI and the API (header PRIVATE-TOKEN or Authorization: Bearer):"
        );
        eprintln!(
            "    export {}={url} {}={admin}",
            env::GANTRY_URL,
            env::GANTRY_TOKEN
        );
        eprintln!("    gantry project create demo --repo /path/to/git/repository");
        eprintln!("    gantry pipeline create --project demo --ref main");
        eprintln!("    gantry pipeline watch --project demo");
        eprintln!(
            "Register a runner (the token creates an instance runner; its glrt- token goes into config.toml):"
        );
        eprintln!("    gantry runner register --url {url} --token {admin}");
    }
    if let Some(registration) = &tokens.registration_token {
        eprintln!();
        eprintln!(
            "Runner registration token (legacy `gitlab-runner register --registration-token`):"
        );
        eprintln!("    {registration}");
        eprintln!();
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
    eprintln!("gantry server: shutting down (finishing requests in flight)");
}
