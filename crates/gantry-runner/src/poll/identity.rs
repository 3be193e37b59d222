//! Who this runner process is: its `system_id` (§1.3) and the `info` object it sends
//! (§2.8).

use std::io;
use std::path::{Path, PathBuf};

use gantry_protocol::{ConfigInfo, Feature, Features, VersionInfo, token::is_valid_system_id};
use sha2::{Digest, Sha256};

use crate::config::{ExecutorKind, ShellKind};
use crate::job::go_arch;

/// The file next to `config.toml` that keeps the system id, as gitlab-runner names it.
pub const SYSTEM_ID_FILE: &str = ".runner_system_id";

/// What this runner supports (§8.1): everything the shell executor and the job
/// lifecycle implement. Not advertised: `image`, `services`, `session`, `terminal`,
/// `proxy`, `native_steps_integration` and the service options.
pub const FEATURES: &[Feature] = &[
    Feature::Variables,
    Feature::Artifacts,
    Feature::Cache,
    Feature::FallbackCacheKeys,
    Feature::Shared,
    Feature::UploadMultipleArtifacts,
    Feature::UploadRawArtifacts,
    Feature::Refspecs,
    Feature::Masking,
    Feature::RawVariables,
    Feature::ArtifactsExclude,
    Feature::MultiBuildSteps,
    Feature::TraceReset,
    Feature::TraceChecksum,
    Feature::TraceSize,
    Feature::Cancelable,
    Feature::ReturnExitCode,
    Feature::CancelGracefully,
    Feature::TwoPhaseJobCommit,
    // `secrets:` from Vault / OpenBao and AWS Secrets Manager (`job/secrets.rs`).
    Feature::VaultSecrets,
    // `${{ job.inputs.* }}` (`job/inputs.rs`).
    Feature::JobInputs,
];

/// What the Docker executor adds to [`FEATURES`].
pub const DOCKER_FEATURES: &[Feature] = &[
    Feature::Image,
    Feature::Services,
    Feature::ServiceVariables,
    Feature::ServiceMultipleAliases,
    Feature::ImageExecutorOpts,
    Feature::ServiceExecutorOpts,
];

/// The `info` object of this runner for an entry with `executor` and `shell` (empty
/// executor and shell for `POST /runners`, as gitlab-runner sends it).
pub fn version_info(executor: Option<(ExecutorKind, ShellKind)>) -> VersionInfo {
    let mut features = FEATURES.to_vec();
    if executor.is_some_and(|(kind, _)| kind.uses_docker()) {
        features.extend_from_slice(DOCKER_FEATURES);
    }
    let (executor, shell) = match executor {
        Some((executor, shell)) => (executor.as_str().to_owned(), shell.as_str().to_owned()),
        None => (String::new(), String::new()),
    };
    VersionInfo {
        name: "gantry-runner".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        revision: option_env!("GANTRY_REVISION")
            .unwrap_or("unknown")
            .to_owned(),
        platform: std::env::consts::OS.to_owned(),
        architecture: go_arch().to_owned(),
        executor,
        shell,
        features: Features::advertise(&features),
        config: ConfigInfo::default(),
        labels: Default::default(),
    }
}

/// Where the system id of the configuration at `config_path` is kept.
pub fn system_id_path(config_path: &Path) -> PathBuf {
    match config_path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(SYSTEM_ID_FILE),
        _ => PathBuf::from(SYSTEM_ID_FILE),
    }
}

/// Reads the system id kept at `path`, or makes one and keeps it: `s_` + 12 hex digits
/// derived from `/etc/machine-id` (stable for the machine), else `r_` + 12 random
/// alphanumerics (gitlab-runner's forms). An invalid stored value is replaced.
pub fn load_or_create_system_id(path: &Path) -> io::Result<String> {
    if let Ok(stored) = std::fs::read_to_string(path) {
        let stored = stored.trim();
        if is_valid_system_id(stored) {
            return Ok(stored.to_owned());
        }
    }
    let id = new_system_id();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, format!("{id}\n"))?;
    Ok(id)
}

fn new_system_id() -> String {
    let machine = std::fs::read_to_string("/etc/machine-id")
        .or_else(|_| std::fs::read_to_string("/var/lib/dbus/machine-id"))
        .ok()
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty());
    match machine {
        Some(machine) => {
            let digest = Sha256::digest(format!("gantry-runner:{machine}").as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("s_{}", &hex[..12])
        }
        None => {
            let seed = format!(
                "{:?}{}{:p}",
                std::time::SystemTime::now(),
                std::process::id(),
                &machine
            );
            let digest = Sha256::digest(seed.as_bytes());
            const ALPHABET: &[u8] =
                b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
            let random: String = digest
                .iter()
                .take(12)
                .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
                .collect();
            format!("r_{random}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_ids_are_kept_and_valid() {
        let dir = tempfile::tempdir().unwrap();
        let path = system_id_path(&dir.path().join("config.toml"));
        let first = load_or_create_system_id(&path).unwrap();
        assert!(is_valid_system_id(&first), "{first}");
        assert_eq!(load_or_create_system_id(&path).unwrap(), first);
        std::fs::write(&path, "garbage").unwrap();
        let replaced = load_or_create_system_id(&path).unwrap();
        assert!(is_valid_system_id(&replaced));
        let info = version_info(Some((ExecutorKind::Shell, ShellKind::Bash)));
        assert!(info.features.has(Feature::Refspecs));
        assert!(info.features.has(Feature::CancelGracefully));
        assert!(!info.features.has(Feature::Image));
        assert_eq!(info.executor, "shell");
        let docker = version_info(Some((ExecutorKind::Docker, ShellKind::Bash)));
        assert!(
            docker.features.has(Feature::Image)
                && docker.features.has(Feature::ServiceMultipleAliases)
        );
    }
}
