//! Where `gantry run` and `gantry lint` find `include:project` and `include:remote` files:
//! the checkout's offline include cache (`.gantry/includes`, laid out as
//! gitlab-ci-local's), the checkout's own project by its `origin` path, and remote URLs
//! (rewritten by `GANTRY_REMOTE_INCLUDE_MIRROR`). The fetching itself is
//! `gantry_server::coordinator::IncludeLoader`, the server's.

use std::path::{Path, PathBuf};

use gantry_server::coordinator::{
    IncludeCache, IncludeSources, ProjectRepo, RemoteFetches, UrlRewrite,
};

use crate::env;

/// The cache folder, relative to the checkout's root. Gantry only reads it.
pub(crate) const CACHE_DIR: &str = ".gantry/includes";

/// The cache and URL rewrites of a checkout whose server is `server_url` (the `origin`
/// remote's web address: its host names the cache's project folder).
pub(crate) fn cache_and_rewrites(
    root: &Path,
    server_url: &str,
) -> Result<(IncludeCache, Vec<UrlRewrite>), String> {
    let rewrites = match env::var(env::GANTRY_REMOTE_INCLUDE_MIRROR) {
        Some(v) => UrlRewrite::parse_list(&v)
            .map_err(|e| format!("{}: {e}", env::GANTRY_REMOTE_INCLUDE_MIRROR))?,
        None => Vec::new(),
    };
    Ok((
        IncludeCache {
            dir: root.join(CACHE_DIR),
            host: cache_host(server_url),
        },
        rewrites,
    ))
}

/// The host folder `include:project` files are cached under: the server URL's host (and
/// port), e.g. `gitlab.com` for `https://gitlab.com`.
pub(crate) fn cache_host(server_url: &str) -> String {
    server_url
        .split_once("://")
        .map_or(server_url, |(_, h)| h)
        .trim_end_matches('/')
        .to_owned()
}

/// The sources of a checkout: its own project (`project_path`, read from `git_dir`) and
/// the cache and rewrites of [`cache_and_rewrites`]; remote includes already in
/// `fetched` are not fetched again.
pub(crate) fn sources(
    root: &Path,
    server_url: &str,
    project_path: &str,
    git_dir: PathBuf,
    default_branch: &str,
    fetched: Option<RemoteFetches>,
) -> Result<IncludeSources, String> {
    let (cache, rewrites) = cache_and_rewrites(root, server_url)?;
    let own = ProjectRepo {
        path: project_path.to_owned(),
        git_dir,
        default_branch: default_branch.to_owned(),
        sync_from: None,
    };
    Ok(IncludeSources::new(vec![own], Some(cache), rewrites).sharing(fetched))
}
