//! The runner configuration, gitlab-runner's `config.toml`.
//!
//! Two layers (STYLE.md §5):
//!
//! 1. [`ConfigFile`] — the file schema: every key optional, only TOML types checked.
//!    The CLI may override fields here before resolving.
//! 2. [`Config`] — resolved settings: defaults applied (gitlab-runner's: `concurrent`
//!    1, `check_interval` 3 s, `output_limit` 4096 KiB, …), closed sets as enums
//!    ([`ExecutorKind`] is chosen here, once), ranges checked.
//!
//! Loading never stops at the first mistake: every bad value is reported in one
//! [`ConfigError::Invalid`], each naming its dotted key (`runners[0].limit`), its
//! line and column, and what was expected. Unknown keys are not errors: they come back
//! as [`ConfigWarning`]s naming the key, so a config written for a newer gitlab-runner
//! still loads.
//!
//! [`Config::save`] writes every resolved value explicitly, atomically (temporary file +
//! rename) with mode 0600, because the file holds tokens. Keys gantry does not know
//! are not written back.
//!
//! Two resolved values reach far: `TlsFiles` (`tls-ca-file`, `tls-cert-file`,
//! `tls-key-file`, read at load) go into `Client::with_tls`, git's `GIT_SSL_*` and the
//! job's `CI_SERVER_TLS_*_FILE`; `[runners.feature_flags]` is applied in the job's
//! variables (`job::variables::job_variables`), where each replaces the job's own `FF_*`
//! value, so every reader of a flag sees the value in force.
//!
//! ```
//! use gantry_runner::config::{Config, ExecutorKind};
//! use std::path::Path;
//!
//! let text = r#"
//! concurrent = 4
//! [[runners]]
//! url = "https://gitlab.example.com/"
//! token = "glrt-abc"
//! executor = "shell"
//! colour = "blue"
//! "#;
//! let (config, warnings) = Config::from_toml(text, Path::new("config.toml")).unwrap();
//! assert_eq!(config.concurrent.get(), 4);
//! assert_eq!(config.runners[0].executor, ExecutorKind::Shell);
//! assert_eq!(config.runners[0].output_limit_bytes(), 4096 * 1024);
//! assert_eq!(warnings[0].to_string(), "unknown key `runners[0].colour` (line 7, column 1) is ignored");
//! ```

mod go_duration;
pub mod gpus;
mod key_path;
mod resolve;
mod schema;
mod settings;
mod token;

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub(crate) use go_duration::{format_duration, parse_go_duration};
pub use key_path::{KeyPath, Location, Segment};
pub use schema::{
    AutoscalerFile, CacheFile, ConfigFile, ConnectorFile, CustomFile, DockerFile, PolicyFile,
    RunnerFile, ScaleThrottleFile, StateStorageFile,
};
pub use settings::*;
pub use token::short_token;

/// gitlab-runner keys gantry recognises but does not implement: the warning says so
/// instead of calling them unknown.
const UNSUPPORTED_TOP_LEVEL: &[&str] = &[
    "log_format",
    "sentry_dsn",
    "connection_max_age",
    "session_server",
    "experimental",
];
const UNSUPPORTED_RUNNER: &[&str] = &[
    "referees",
    "kubernetes",
    "machine",
    "ssh",
    "parallels",
    "virtualbox",
    "strict_check_interval",
];

/// `[runners.autoscaler]` keys of gitlab-runner that gantry's taskscaler does not
/// implement (yet).
const UNSUPPORTED_AUTOSCALER: &[&str] = &[
    "vm_isolation",
    "reservation_throttling",
    "instance_operation_time_buckets",
    "instance_creation_time_buckets",
    "instance_is_running_time_buckets",
    "instance_deletion_time_buckets",
    "instance_readiness_time_buckets",
    "instance_life_duration_buckets",
];

/// Why a configuration cannot be used. Messages read after "failed to".
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("read runner configuration `{}`: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file is not valid TOML.
    #[error(
        "parse runner configuration `{}`{}: {message}\nfix the TOML syntax at that position",
        path.display(),
        location.map(|l| format!(" ({l})")).unwrap_or_default()
    )]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Where, when known.
        location: Option<Location>,
        /// The TOML parser's message.
        message: String,
    },
    /// Values are missing, of the wrong type, or out of range.
    #[error(
        "load runner configuration `{}`: {}",
        path.display(),
        Problems(problems)
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every bad value, in file order of discovery.
        problems: Vec<Problem>,
    },
    /// The configuration could not be turned into TOML.
    #[error("serialize runner configuration: {message}")]
    Serialize {
        /// Why.
        message: String,
    },
    /// The file could not be written.
    #[error("write runner configuration `{}`: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// One bad value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The dotted key, e.g. `runners[0].limit`.
    pub key: KeyPath,
    /// Where the key (or its closest written ancestor) is in the file.
    pub location: Option<Location>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.key)?;
        if let Some(location) = self.location {
            write!(f, " ({location})")?;
        }
        write!(f, ": {}", self.message)
    }
}

struct Problems<'a>(&'a [Problem]);

impl fmt::Display for Problems<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "{one}")?,
            many => {
                write!(f, "{} invalid values", many.len())?;
                for problem in many {
                    write!(f, "\n  {problem}")?;
                }
            }
        }
        f.write_str("\nfix the file and try again")
    }
}

/// Something in the file the runner ignores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The dotted key.
    pub key: KeyPath,
    /// Where it is written.
    pub location: Option<Location>,
    /// Why it is ignored.
    pub kind: WarningKind,
}

/// Why a key is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WarningKind {
    /// Neither gantry nor gitlab-runner knows it (a typo?).
    UnknownKey,
    /// A gitlab-runner setting gantry does not implement.
    Unsupported,
    /// A known section the chosen executor does not use.
    Unused {
        /// Why.
        reason: String,
    },
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.location.map(|l| format!(" ({l})")).unwrap_or_default();
        match &self.kind {
            WarningKind::UnknownKey => write!(f, "unknown key `{}`{at} is ignored", self.key),
            WarningKind::Unsupported => write!(
                f,
                "`{}`{at} is a gitlab-runner setting gantry does not support; it is ignored",
                self.key
            ),
            WarningKind::Unused { reason } => write!(f, "`{}`{at}: {reason}", self.key),
        }
    }
}

fn classify_ignored(key: &KeyPath) -> WarningKind {
    let supported_elsewhere = match key.segments() {
        [Segment::Key(name)] => UNSUPPORTED_TOP_LEVEL.contains(&name.as_str()),
        [Segment::Key(runners), Segment::Index(_), Segment::Key(name)] if runners == "runners" => {
            UNSUPPORTED_RUNNER.contains(&name.as_str())
        }
        [
            Segment::Key(runners),
            Segment::Index(_),
            Segment::Key(autoscaler),
            Segment::Key(name),
            ..,
        ] if runners == "runners" && autoscaler == "autoscaler" => {
            UNSUPPORTED_AUTOSCALER.contains(&name.as_str())
        }
        _ => false,
    };
    if supported_elsewhere {
        WarningKind::Unsupported
    } else {
        WarningKind::UnknownKey
    }
}

/// Sort key: file position, unknown positions last (stable sorts keep their order).
fn file_order(location: Option<Location>) -> (usize, usize) {
    location.map_or((usize::MAX, usize::MAX), |l| (l.line, l.column))
}

impl ConfigFile {
    /// Parses the file layer from TOML. Unknown keys become warnings; values of the
    /// wrong TOML type are an [`ConfigError::Invalid`] naming the key. `origin` names
    /// the file in messages.
    pub fn from_toml(text: &str, origin: &Path) -> Result<(Self, Vec<ConfigWarning>), ConfigError> {
        let table = toml::de::DeTable::parse(text).map_err(|error| ConfigError::Syntax {
            path: origin.to_owned(),
            location: error
                .span()
                .map(|span| Location::of_offset(text, span.start)),
            message: error.message().trim().to_owned(),
        })?;
        let deserializer = toml::de::Deserializer::from(table);
        let mut ignored = Vec::new();
        let mut record = |path: serde_ignored::Path<'_>| ignored.push(KeyPath::from_ignored(&path));
        let ignoring = serde_ignored::Deserializer::new(deserializer, &mut record);
        let file: Self = serde_path_to_error::deserialize(ignoring).map_err(|error| {
            let key = KeyPath::from_tracked(error.path());
            let inner = error.inner();
            let location = inner
                .span()
                .map(|span| Location::of_offset(text, span.start))
                .or_else(|| key_path::locate(text, &key));
            ConfigError::Invalid {
                path: origin.to_owned(),
                problems: vec![Problem {
                    key,
                    location,
                    message: inner.message().trim().to_owned(),
                }],
            }
        })?;
        let mut warnings: Vec<ConfigWarning> = ignored
            .into_iter()
            .map(|key| ConfigWarning {
                location: key_path::locate(text, &key),
                kind: classify_ignored(&key),
                key,
            })
            .collect();
        warnings.sort_by_key(|w| file_order(w.location));
        Ok((file, warnings))
    }
}

impl Config {
    /// Reads, parses and resolves `path`.
    pub fn load(path: &Path) -> Result<(Self, Vec<ConfigWarning>), ConfigError> {
        let text = fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parses and resolves TOML text; `origin` names the file in messages.
    pub fn from_toml(text: &str, origin: &Path) -> Result<(Self, Vec<ConfigWarning>), ConfigError> {
        let (file, mut warnings) = ConfigFile::from_toml(text, origin)?;
        let (config, more) = Self::from_file_layer(&file, text, origin)?;
        warnings.extend(more);
        Ok((config, warnings))
    }

    /// Resolves a file layer (possibly overridden by CLI flags). `text` is the file it
    /// came from, used only to give positions in messages (may be empty).
    pub fn from_file_layer(
        file: &ConfigFile,
        text: &str,
        origin: &Path,
    ) -> Result<(Self, Vec<ConfigWarning>), ConfigError> {
        match resolve::resolve(file) {
            Ok((config, notices)) => {
                let mut warnings: Vec<ConfigWarning> = notices
                    .into_iter()
                    .map(|notice| ConfigWarning {
                        location: key_path::locate(text, &notice.key),
                        key: notice.key,
                        kind: WarningKind::Unused {
                            reason: notice.message,
                        },
                    })
                    .collect();
                warnings.sort_by_key(|w| file_order(w.location));
                Ok((config, warnings))
            }
            Err(problems) => {
                let mut problems: Vec<Problem> = problems
                    .into_iter()
                    .map(|problem| Problem {
                        location: key_path::locate(text, &problem.key),
                        key: problem.key,
                        message: problem.message,
                    })
                    .collect();
                problems.sort_by_key(|p| file_order(p.location));
                Err(ConfigError::Invalid {
                    path: origin.to_owned(),
                    problems,
                })
            }
        }
    }

    /// The file layer `save` writes: every resolved value, explicitly.
    pub fn to_file(&self) -> ConfigFile {
        resolve::to_file(self)
    }

    /// The TOML text `save` writes.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string(&self.to_file()).map_err(|error| ConfigError::Serialize {
            message: error.to_string(),
        })
    }

    /// Writes the configuration to `path` atomically (a temporary file in the same
    /// directory, synced, then renamed over `path`) with mode 0600. Creates the parent
    /// directory if needed.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let text = self.to_toml()?;
        write_atomic(path, text.as_bytes()).map_err(|source| ConfigError::Write {
            path: path.to_owned(),
            source,
        })
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let temp = dir.join(format!(
        ".{}.{}.{nanos}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        // `mode` is filtered by the umask; the file holds tokens, so be exact.
        file.set_permissions(fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result?;
    if let Ok(dir) = fs::File::open(&dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}
