//! The `get_sources` stage itself.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use gantry_protocol::{GitInfo, ObjectFormat, RefType};

use super::credentials::RepoUrl;
use super::git::{Git, Output};
use super::settings::{GitSettings, GitStrategy, SubmoduleStrategy};

/// Everything `get_sources` needs for one job.
#[derive(Debug, Clone, Copy)]
pub struct SourcesJob<'a> {
    /// The payload's `git_info`.
    pub git_info: &'a GitInfo,
    /// The resolved `GIT_*` settings.
    pub settings: &'a GitSettings,
    /// The project directory (`$CI_PROJECT_DIR`).
    pub project_dir: &'a Path,
    /// Environment for git: the job's variables (`GIT_SSL_NO_VERIFY`, `GIT_TRACE`,
    /// `GIT_CONFIG_*`, …), as gitlab-runner exports them to its shell.
    pub env: &'a [(String, String)],
    /// `http.userAgent`, e.g. `gantry-runner 0.1.0 linux/amd64`.
    pub user_agent: &'a str,
    /// A prepared directory to copy instead of fetching with git (see the module docs).
    pub snapshot: Option<&'a Path>,
    /// The entry's TLS files: git trusts and shows them to the repository's server.
    pub tls: &'a crate::config::TlsFiles,
}

/// Why `get_sources` failed (the job fails with `runner_system_failure`… or, for a
/// bad variable, `runner_configuration_error`, as the lifecycle decides).
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    /// `GIT_STRATEGY` or `GIT_SUBMODULE_STRATEGY` has an unknown value.
    #[error("get sources: unknown {variable} {value:?} (expected {expected})")]
    UnknownStrategy {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// The accepted values.
        expected: &'static str,
    },
    /// git exited with an error (its output was forwarded already).
    #[error("get sources: `{command}` failed with {status}")]
    Git {
        /// The command, credentials masked, `-c` options left out.
        command: String,
        /// e.g. `exit status 128`.
        status: String,
    },
    /// git could not be started.
    #[error("get sources: run `{command}` in {}: {source}", dir.display())]
    Spawn {
        /// The command, credentials masked.
        command: String,
        /// Its working directory.
        dir: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A file system operation on the project directory failed.
    #[error("get sources: {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> SourcesError + 'a {
    move |source| SourcesError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Gets the job's sources into `job.project_dir` (see the [module docs](super)).
/// Lines go to `output` as they are produced, credentials masked.
pub async fn get_sources(job: &SourcesJob<'_>, output: Output<'_>) -> Result<(), SourcesError> {
    let settings = job.settings;
    let dir = job.project_dir;
    let repo = RepoUrl::parse(&job.git_info.repo_url);
    let git = Git::new(job.env, &repo, !settings.lfs_disabled, job.tls);
    match settings.strategy {
        GitStrategy::None => {
            output("Skipping Git repository setup");
            fs::create_dir_all(dir).map_err(io_error("create", dir))?;
            return Ok(());
        }
        GitStrategy::Empty => {
            output("Skipping Git repository setup and creating an empty build directory");
            remove_dir(dir)?;
            fs::create_dir_all(dir).map_err(io_error("create", dir))?;
            return Ok(());
        }
        GitStrategy::Clone => remove_dir(dir)?,
        GitStrategy::Fetch => {}
    }
    if let Some(snapshot) = job.snapshot {
        // `clone` emptied the directory above; `fetch` brings what an earlier job left
        // back to the snapshot in place (see `sync_tree`), as `git clean` + checkout would.
        output("Copying the working tree snapshot...");
        let (from, to) = (snapshot.to_path_buf(), dir.to_path_buf());
        let copied = tokio::task::spawn_blocking(move || super::sync_tree(&from, &to))
            .await
            .map_err(|error| io_error("copy the snapshot into", dir)(io::Error::other(error)))?
            .map_err(io_error("copy the snapshot into", dir))?;
        output(&format!(
            "Copied {} files ({} bytes)",
            copied.files, copied.bytes
        ));
        return Ok(());
    }
    remove_stale_locks(dir, settings.submodule_strategy != SubmoduleStrategy::None);
    fetch(job, &git, &repo, output).await?;
    if settings.checkout {
        checkout(job, &git, output).await?;
    } else {
        output("Skipping Git checkout");
    }
    match settings.submodule_strategy {
        SubmoduleStrategy::None => output("Skipping Git submodules setup"),
        SubmoduleStrategy::Normal => update_submodules(job, &git, false, output).await?,
        SubmoduleStrategy::Recursive => update_submodules(job, &git, true, output).await?,
    }
    Ok(())
}

fn remove_dir(dir: &Path) -> Result<(), SourcesError> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error("remove", dir)(error)),
    }
}

/// Lock files a killed git leaves behind make the next fetch fail.
fn remove_stale_locks(dir: &Path, submodules: bool) {
    let git_dir = dir.join(".git");
    for name in [
        "index.lock",
        "shallow.lock",
        "HEAD.lock",
        "config.lock",
        "hooks/post-checkout",
    ] {
        let _ = fs::remove_file(git_dir.join(name));
    }
    remove_matching(&git_dir.join("refs"), &|name| name.ends_with(".lock"), 32);
    if submodules {
        remove_matching(
            &git_dir.join("modules"),
            &|name| {
                matches!(
                    name,
                    "index.lock" | "shallow.lock" | "HEAD.lock" | "config.lock" | "post-checkout"
                )
            },
            32,
        );
    }
}

fn remove_matching(dir: &Path, matches: &dyn Fn(&str) -> bool, depth: usize) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() && depth > 0 {
            remove_matching(&path, matches, depth - 1);
        } else if kind.is_file() && entry.file_name().to_str().is_some_and(matches) {
            let _ = fs::remove_file(&path);
        }
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

async fn fetch(
    job: &SourcesJob<'_>,
    git: &Git,
    repo: &RepoUrl,
    output: Output<'_>,
) -> Result<(), SourcesError> {
    let info = job.git_info;
    let dir = job.project_dir;
    if info.depth > 0 {
        output(&format!(
            "Fetching changes with git depth set to {}...",
            info.depth
        ));
    } else {
        output("Fetching changes...");
    }
    fs::create_dir_all(dir).map_err(io_error("create", dir))?;

    let mut init = strings(&["-c", "init.defaultBranch=none", "init"]);
    if info.repo_object_format == ObjectFormat::Sha256 {
        init.extend(strings(&["--object-format", "sha256"]));
    }
    init.push(".".to_owned());
    git.run(dir, &init, output).await?;
    for (key, value) in [
        ("fetch.recurseSubmodules", "false"),
        ("gc.autoDetach", "false"),
        ("credential.interactive", "never"),
    ] {
        git.run(dir, &strings(&["config", key, value]), output)
            .await?;
    }

    if git
        .quiet(dir, &strings(&["remote", "add", "origin", &repo.url]))
        .await
    {
        output("Created fresh repository.");
    } else {
        git.run(
            dir,
            &strings(&["remote", "set-url", "origin", &repo.url]),
            output,
        )
        .await?;
    }

    let mut args = vec![
        "-c".to_owned(),
        format!("http.userAgent={}", job.user_agent),
        "fetch".to_owned(),
        "origin".to_owned(),
        "--no-recurse-submodules".to_owned(),
    ];
    if info.refspecs.is_empty() {
        args.extend(default_refspecs(info));
    } else {
        args.extend(info.refspecs.iter().cloned());
    }
    if info.depth > 0 {
        args.extend(["--depth".to_owned(), info.depth.to_string()]);
    }
    args.extend(job.settings.fetch_flags.iter().cloned());
    if info.depth <= 0 && dir.join(".git/shallow").exists() {
        args.push("--unshallow".to_owned());
    }
    git.run(dir, &args, output).await
}

/// GitLab's refspecs (§3.5.2) for a payload that sent none, without the pipeline ref.
fn default_refspecs(info: &GitInfo) -> Vec<String> {
    if info.depth > 0 {
        let r = &info.git_ref;
        match info.ref_type {
            RefType::Tag => vec![format!("+refs/tags/{r}:refs/tags/{r}")],
            RefType::Branch => vec![format!("+refs/heads/{r}:refs/remotes/origin/{r}")],
        }
    } else {
        vec![
            "+refs/heads/*:refs/remotes/origin/*".to_owned(),
            "+refs/tags/*:refs/tags/*".to_owned(),
        ]
    }
}

async fn checkout(job: &SourcesJob<'_>, git: &Git, output: Output<'_>) -> Result<(), SourcesError> {
    let info = job.git_info;
    let dir = job.project_dir;
    let short = info.sha.get(..8).unwrap_or(&info.sha);
    output(&git.masker().mask(&format!(
        "Checking out {short} as detached HEAD (ref is {})...",
        info.git_ref
    )));
    git.run(
        dir,
        &strings(&[
            "-c",
            "submodule.recurse=false",
            "checkout",
            "-f",
            "-q",
            &info.sha,
        ]),
        output,
    )
    .await?;
    let flags = &job.settings.clean_flags;
    if !flags.is_empty() {
        let mut clean = vec!["clean".to_owned()];
        clean.extend(flags.iter().cloned());
        git.run(dir, &clean, output).await?;
    }
    if !job.settings.lfs_disabled && git.quiet(dir, &strings(&["lfs", "version"])).await {
        git.run(dir, &strings(&["lfs", "pull"]), output).await?;
    }
    Ok(())
}

async fn update_submodules(
    job: &SourcesJob<'_>,
    git: &Git,
    recursive: bool,
    output: Output<'_>,
) -> Result<(), SourcesError> {
    let settings = job.settings;
    let dir = job.project_dir;
    let depth = settings.submodule_depth;
    output(&match (recursive, depth > 0) {
        (true, true) => {
            format!("Updating/initializing submodules recursively with git depth set to {depth}...")
        }
        (true, false) => "Updating/initializing submodules recursively...".to_owned(),
        (false, true) => {
            format!("Updating/initializing submodules with git depth set to {depth}...")
        }
        (false, false) => "Updating/initializing submodules...".to_owned(),
    });
    let mut paths = Vec::new();
    if !settings.submodule_paths.is_empty() {
        paths.push("--".to_owned());
        paths.extend(settings.submodule_paths.iter().cloned());
    }
    let with_recursive = |base: &[&str]| {
        let mut args = strings(base);
        if recursive {
            args.push("--recursive".to_owned());
        }
        args
    };

    git.run(dir, &strings(&["submodule", "init"]), output)
        .await?;
    let mut sync = with_recursive(&["submodule", "sync"]);
    sync.extend(paths.iter().cloned());
    git.run(dir, &sync, output).await?;

    let clean_flags = if settings.clean_flags.is_empty() {
        "-ffdx".to_owned()
    } else {
        settings.clean_flags.join(" ")
    };
    let foreach = |command: &str| {
        let mut args = with_recursive(&["submodule", "foreach"]);
        args.push(command.to_owned());
        args
    };
    git.run(dir, &foreach(&format!("git clean {clean_flags}")), output)
        .await?;
    git.run(dir, &foreach("git reset --hard"), output).await?;

    let mut update = with_recursive(&["submodule", "update", "--init"]);
    if depth > 0 {
        update.extend(["--depth".to_owned(), depth.to_string()]);
    }
    update.extend(settings.submodule_update_flags.iter().cloned());
    update.extend(paths.iter().cloned());
    if git.status(dir, &update, output).await?.success() {
        output("Updated submodules");
        git.run(dir, &sync, output).await?;
    } else {
        output("WARNING: Updating submodules failed. Retrying...");
        git.run(dir, &sync, output).await?;
        git.run(dir, &update, output).await?;
        output("Updated submodules");
    }
    git.run(dir, &foreach(&format!("git clean {clean_flags}")), output)
        .await?;
    if !settings.lfs_disabled && git.quiet(dir, &strings(&["lfs", "version"])).await {
        git.run(dir, &foreach("git lfs pull"), output).await?;
    }
    Ok(())
}
