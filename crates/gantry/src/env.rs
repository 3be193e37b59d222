//! Every environment variable the binary reads, declared in one place.

/// URL of the Gantry server for client commands (`gantry project`, `gantry pipeline`);
/// `--server` wins.
pub(crate) const GANTRY_URL: &str = "GANTRY_URL";

/// Admin token for client commands; `--token` wins.
pub(crate) const GANTRY_TOKEN: &str = "GANTRY_TOKEN";

/// Where client commands look when neither `--server` nor `GANTRY_URL` is given: the
/// address `gantry server` listens on by default.
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// The runner's config.toml for `gantry runner …`; `--config` wins.
pub(crate) const GANTRY_RUNNER_CONFIG: &str = "GANTRY_RUNNER_CONFIG";

/// `gantry run`'s cache directory (default: under `$XDG_CACHE_HOME` or `~/.cache`).
pub(crate) const GANTRY_CACHE_DIR: &str = "GANTRY_CACHE_DIR";

/// Mirrors `include:remote` (and `include:template`) URLs are fetched from instead
/// (`gantry run`, `gantry lint`, `gantry server`):
/// `FROM=TO` prefix pairs separated by white space, e.g.
/// `https://gitlab.com/=http://mirror.internal/gitlab/` (git's `insteadOf`).
pub(crate) const GANTRY_REMOTE_INCLUDE_MIRROR: &str = "GANTRY_REMOTE_INCLUDE_MIRROR";

/// `gantry server`'s offline include cache: a folder laid out as `gantry run`'s
/// `.gantry/includes` (remote URLs, templates, projects the server does not hold).
pub(crate) const GANTRY_INCLUDE_CACHE: &str = "GANTRY_INCLUDE_CACHE";

/// `gantry server`: the key project variable values are encrypted with at rest (64 hex
/// digits); without it, `<data dir>/db_key`, made on first start.
pub(crate) const GANTRY_DB_KEY: &str = "GANTRY_DB_KEY";

/// `gantry server`'s database when `--database-url` is not given (`postgres://…` or
/// `sqlite://…`); default: `gantry.db` in the data directory.
pub(crate) const GANTRY_DATABASE_URL: &str = "GANTRY_DATABASE_URL";
/// `gantry server --blobs-url`.
pub(crate) const GANTRY_BLOBS_URL: &str = "GANTRY_BLOBS_URL";

/// OpenTelemetry tracing (`gantry server`, `gantry runner run`, `gantry run`): the
/// standard `OTEL_EXPORTER_OTLP_*`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
/// `OTEL_TRACES_SAMPLER` variables, read by `otel.rs`; the `--otel-*` flags win.
#[allow(dead_code)]
pub(crate) const OTEL_VARIABLES: &[&str] = gantry_telemetry::settings::VARIABLES;

/// A per-user base directory of the XDG layout: `$XDG_CACHE_HOME` (`xdg`) if set, else
/// `~/.cache` (`fallback` under `$HOME`); `None` without either.
pub(crate) fn user_dir(xdg: &str, fallback: &str) -> Option<std::path::PathBuf> {
    std::env::var_os(xdg)
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| std::path::PathBuf::from(h).join(fallback))
        })
}

/// The value of a declared variable; unset and empty are the same.
pub(crate) fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}
