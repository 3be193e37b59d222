//! `fleeting-plugin-local`: an instance group on this machine. Each instance is an
//! OpenSSH server the plugin starts on a loopback port ([`crate::sshd::LocalSshd`]),
//! logged into as the plugin's own user with a key pair the plugin makes at `Init`.
//!
//! What it is for: trying autoscaling and the `instance` executor on one machine, and
//! testing them with real processes, a real SSH server and real scaling (instances
//! really start, take time, and go away). Instances share this machine's file system
//! and users; they are not isolation. They live as long as the plugin process (a
//! cloud's machines would outlive it): when the runner stops the plugin, its instances
//! stop too — unless `keep_instances` is set: then they outlive it as a cloud's machines
//! do, listed in `<dir>/instances.json` (id, pid, port), and a plugin started later with
//! the same `dir` finds those whose sshd still runs (and the group's key pair, kept in
//! `<dir>/keys`). That is what a runner restarted after `kill -9` needs to take its
//! instance jobs over ([`crate::taskscaler::Taskscaler::resume`]).
//!
//! Plugin configuration (`[runners.autoscaler.plugin_config]`), every key optional:
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `name` | `local` | the group's name, in its id `local/<name>` |
//! | `max_size` | 8 | the most instances at a time |
//! | `dir` | a new temporary directory | where instances keep their sshd configuration and keys |
//! | `boot_delay_ms` | 0 | extra time an instance stays `creating` (to see scaling happen) |
//! | `keep_instances` | false | instances outlive the plugin process (needs `dir`) |
//!
//! Connector settings it fills in: `username` (this user), `key` (the generated private
//! key) unless `use_static_credentials` with a key of its own, `protocol` `ssh`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;

use crate::provider::{
    ConnectInfo, ConnectorConfig, Instance, InstanceGroup, Partial, ProviderError, ProviderInfo,
    State,
};
use crate::sshd::{LocalSshd, generate_key};

/// The plugin's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    /// The group's name.
    pub name: String,
    /// The most instances at a time.
    pub max_size: u64,
    /// Where instances keep their files (default: a temporary directory).
    pub dir: Option<PathBuf>,
    /// Extra milliseconds an instance stays `creating`.
    pub boot_delay_ms: u64,
    /// Instances outlive the plugin process; a later one with the same `dir` finds them.
    pub keep_instances: bool,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            name: "local".into(),
            max_size: 8,
            dir: None,
            boot_delay_ms: 0,
            keep_instances: false,
        }
    }
}

enum Slot {
    /// Starting (its task will put the server here).
    Creating,
    Running(Box<LocalSshd>),
    /// The server failed to start: reported as `timeout` so the host removes it.
    Failed(String),
    Deleting,
}

struct Setup {
    config: LocalConfig,
    settings: ConnectorConfig,
    public_key: String,
    dir: PathBuf,
    /// Keeps a temporary `dir` alive.
    _temp: Option<tempfile::TempDir>,
}

#[derive(Default)]
struct Inner {
    setup: Option<Arc<Setup>>,
    instances: BTreeMap<String, Slot>,
    next: u64,
}

/// The local instance group.
#[derive(Default, Clone)]
pub struct LocalGroup {
    inner: Arc<Mutex<Inner>>,
}

impl LocalGroup {
    /// A group with no instances; `init` configures it.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn setup(&self) -> Result<Arc<Setup>, ProviderError> {
        self.lock()
            .setup
            .clone()
            .ok_or_else(|| ProviderError::Failed("the plugin was not initialized".into()))
    }
}

/// One kept instance in `<dir>/instances.json`.
#[derive(Debug, serde::Serialize, Deserialize)]
struct KeptInstance {
    id: String,
    pid: u32,
    port: u16,
}

/// The file listing the kept instances.
const KEPT_FILE: &str = "instances.json";

impl LocalGroup {
    /// With `keep_instances`: writes the running instances to `<dir>/instances.json`
    /// (through a rename). Problems are ignored: the instances then are not found again.
    fn write_kept(&self) {
        let Ok(setup) = self.setup() else { return };
        if !setup.config.keep_instances {
            return;
        }
        let kept: Vec<KeptInstance> = self
            .lock()
            .instances
            .iter()
            .filter_map(|(id, slot)| match slot {
                Slot::Running(sshd) => Some(KeptInstance {
                    id: id.clone(),
                    pid: sshd.pid(),
                    port: sshd.port(),
                }),
                _ => None,
            })
            .collect();
        let Ok(json) = serde_json::to_vec(&kept) else {
            return;
        };
        let path = setup.dir.join(KEPT_FILE);
        let temp = setup.dir.join(format!("{KEPT_FILE}.tmp"));
        if std::fs::write(&temp, json).is_ok() {
            let _ = std::fs::rename(&temp, &path);
        }
    }

    /// The instances a plugin before this one kept in `dir` whose sshd still runs.
    async fn find_kept(dir: &Path) -> Vec<(String, LocalSshd)> {
        let Ok(bytes) = std::fs::read(dir.join(KEPT_FILE)) else {
            return Vec::new();
        };
        let listed: Vec<KeptInstance> = serde_json::from_slice(&bytes).unwrap_or_default();
        let mut found = Vec::new();
        for kept in listed {
            if let Some(mut sshd) = LocalSshd::adopt(&dir.join(&kept.id), kept.pid, kept.port).await
            {
                sshd.keep();
                found.push((kept.id, sshd));
            }
        }
        found
    }
}

/// The group's key pair in `keys`: the one kept there (`keep_instances`), else a new one.
fn key_pair(keys: &Path, keep: bool) -> Result<(PathBuf, String), ProviderError> {
    let private = keys.join("instances");
    if keep {
        if let (Ok(_), Ok(public)) = (
            std::fs::metadata(&private),
            std::fs::read_to_string(keys.join("instances.pub")),
        ) {
            return Ok((private, public.trim().to_owned()));
        }
    }
    generate_key(keys, "instances").map_err(|e| failed("generate the instances' key pair", e))
}

fn failed(what: &str, error: impl std::fmt::Display) -> ProviderError {
    ProviderError::Failed(format!("{what}: {error}"))
}

#[async_trait]
impl InstanceGroup for LocalGroup {
    async fn init(
        &self,
        config: &serde_json::Value,
        mut settings: ConnectorConfig,
    ) -> Result<ProviderInfo, ProviderError> {
        let config: LocalConfig = if config.is_null() {
            LocalConfig::default()
        } else {
            serde_json::from_value(config.clone()).map_err(|error| {
                ProviderError::Failed(format!(
                    "plugin_config: {error} (keys: name, max_size, dir, boot_delay_ms, keep_instances)"
                ))
            })?
        };
        if config.keep_instances && config.dir.is_none() {
            return Err(ProviderError::Failed(
                "plugin_config: keep_instances needs a dir to keep them in".to_owned(),
            ));
        }
        let (dir, temp) = match &config.dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| failed(&format!("create {}", dir.display()), e))?;
                (dir.clone(), None)
            }
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("fleeting-plugin-local")
                    .tempdir()
                    .map_err(|e| failed("create a temporary directory", e))?;
                (temp.path().to_owned(), Some(temp))
            }
        };
        let public_key = if settings.use_static_credentials && !settings.key.is_empty() {
            public_key_of(&dir, &settings.key).await?
        } else {
            let keys = dir.join("keys");
            std::fs::create_dir_all(&keys)
                .map_err(|e| failed(&format!("create {}", keys.display()), e))?;
            let (private, public) = key_pair(&keys, config.keep_instances)?;
            settings.key =
                std::fs::read(&private).map_err(|e| failed("read the generated key", e))?;
            public
        };
        if settings.username.is_empty() {
            settings.username = crate::sshd::current_user()
                .await
                .map_err(|e| failed("find this user's name", e))?;
        }
        settings.protocol = "ssh".into();
        let info = ProviderInfo {
            id: format!("local/{}", config.name),
            max_size: config.max_size,
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: "gantry fleeting-plugin-local (OpenSSH servers on loopback)".into(),
            capabilities: Vec::new(),
        };
        let kept = if config.keep_instances {
            Self::find_kept(&dir).await
        } else {
            Vec::new()
        };
        {
            let mut inner = self.lock();
            for (id, sshd) in kept {
                let number = id
                    .strip_prefix("local-")
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                inner.next = inner.next.max(number);
                inner.instances.insert(id, Slot::Running(Box::new(sshd)));
            }
            inner.setup = Some(Arc::new(Setup {
                config,
                settings,
                public_key,
                dir,
                _temp: temp,
            }));
        }
        self.write_kept();
        Ok(info)
    }

    async fn update(&self) -> Result<Vec<Instance>, ProviderError> {
        let mut inner = self.lock();
        let listing = inner
            .instances
            .iter()
            .map(|(id, slot)| Instance {
                id: id.clone(),
                state: match slot {
                    Slot::Creating => State::Creating,
                    Slot::Running(_) => State::Running,
                    Slot::Failed(_) => State::Timeout,
                    Slot::Deleting => State::Deleting,
                },
            })
            .collect();
        // A server that died is reported gone from now on.
        inner.instances.retain(|_, slot| match slot {
            Slot::Running(sshd) => sshd.is_running(),
            _ => true,
        });
        Ok(listing)
    }

    async fn increase(&self, delta: u32) -> Partial<u32> {
        let setup = match self.setup() {
            Ok(setup) => setup,
            Err(error) => {
                return Partial {
                    done: 0,
                    error: Some(error),
                };
            }
        };
        let mut started = 0;
        for _ in 0..delta {
            let id = {
                let mut inner = self.lock();
                if inner.instances.len() as u64 >= setup.config.max_size {
                    break;
                }
                inner.next += 1;
                let id = format!("local-{}", inner.next);
                inner.instances.insert(id.clone(), Slot::Creating);
                id
            };
            started += 1;
            let group = self.clone();
            let setup = Arc::clone(&setup);
            tokio::spawn(async move {
                let dir = setup.dir.join(&id);
                let outcome = async {
                    std::fs::create_dir_all(&dir)
                        .map_err(|e| format!("create {}: {e}", dir.display()))?;
                    if setup.config.boot_delay_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(setup.config.boot_delay_ms)).await;
                    }
                    LocalSshd::start(&dir, &setup.public_key)
                        .await
                        .map_err(|e| e.to_string())
                }
                .await;
                // Deleted while it was starting: stop it again.
                let unwanted = {
                    let mut inner = group.lock();
                    match (inner.instances.get(&id), outcome) {
                        (None | Some(Slot::Deleting), Ok(sshd)) => {
                            inner.instances.remove(&id);
                            Some(sshd)
                        }
                        (Some(_), Ok(mut sshd)) => {
                            if setup.config.keep_instances {
                                sshd.keep();
                            }
                            inner.instances.insert(id, Slot::Running(Box::new(sshd)));
                            None
                        }
                        (Some(Slot::Deleting), Err(_)) => {
                            inner.instances.remove(&id);
                            None
                        }
                        (Some(_), Err(error)) => {
                            inner.instances.insert(id, Slot::Failed(error));
                            None
                        }
                        (None, Err(_)) => None,
                    }
                };
                if let Some(sshd) = unwanted {
                    let _ = sshd.stop().await;
                    let _ = std::fs::remove_dir_all(&dir);
                }
                group.write_kept();
            });
        }
        Partial {
            done: started,
            error: (started < delta).then(|| {
                ProviderError::Failed(format!(
                    "the group is at its max_size of {}",
                    setup.config.max_size
                ))
            }),
        }
    }

    async fn decrease(&self, ids: &[String]) -> Partial<Vec<String>> {
        let setup = self.setup().ok();
        let mut stopping = Vec::new();
        {
            let mut inner = self.lock();
            for id in ids {
                match inner.instances.remove(id) {
                    Some(Slot::Running(sshd)) => {
                        inner.instances.insert(id.clone(), Slot::Deleting);
                        stopping.push((id.clone(), Some(sshd)));
                    }
                    Some(Slot::Creating) => {
                        // Its start task sees the deletion and stops the server.
                        inner.instances.insert(id.clone(), Slot::Deleting);
                    }
                    Some(Slot::Failed(_) | Slot::Deleting) | None => {
                        stopping.push((id.clone(), None));
                    }
                }
            }
        }
        for (id, sshd) in stopping {
            let group = self.clone();
            let dir = setup.as_ref().map(|s| s.dir.join(&id));
            tokio::spawn(async move {
                if let Some(sshd) = sshd {
                    let _ = sshd.stop().await;
                }
                if let Some(dir) = dir {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                {
                    let mut inner = group.lock();
                    if matches!(inner.instances.get(&id), Some(Slot::Deleting)) {
                        inner.instances.remove(&id);
                    }
                }
                group.write_kept();
            });
        }
        Partial::complete(ids.to_vec())
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, ProviderError> {
        let setup = self.setup()?;
        let inner = self.lock();
        match inner.instances.get(id) {
            Some(Slot::Running(sshd)) => Ok(ConnectInfo {
                connector: setup.settings.clone(),
                id: id.to_owned(),
                internal_addr: sshd.address(),
                external_addr: String::new(),
                expires: None,
            }),
            Some(Slot::Failed(error)) => Err(ProviderError::Unhealthy(format!(
                "{id} did not start: {error}"
            ))),
            Some(_) => Err(ProviderError::Unhealthy(format!("{id} is not running"))),
            None => Err(ProviderError::Unhealthy(format!("{id} does not exist"))),
        }
    }

    async fn heartbeat(&self, id: &str) -> Result<(), ProviderError> {
        match self.lock().instances.get_mut(id) {
            Some(Slot::Running(sshd)) => {
                if sshd.is_running() {
                    Ok(())
                } else {
                    Err(ProviderError::Unhealthy(format!("{id}'s sshd exited")))
                }
            }
            Some(_) => Err(ProviderError::Unhealthy(format!("{id} is not running"))),
            None => Err(ProviderError::Unhealthy(format!("{id} does not exist"))),
        }
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        // Group-wide resources: the key pair, removed with the directory when it is a
        // temporary one. Instances are left alone (they stop with this process).
        Ok(())
    }
}

/// The OpenSSH public key line of a private key (`ssh-keygen -y`).
async fn public_key_of(dir: &Path, key: &[u8]) -> Result<String, ProviderError> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("static-key");
    std::fs::write(&path, key).map_err(|e| failed("write the static key", e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| failed("protect the static key", e))?;
    let output = tokio::process::Command::new("ssh-keygen")
        .arg("-y")
        .arg("-f")
        .arg(&path)
        .output()
        .await
        .map_err(|e| failed("run ssh-keygen -y", e))?;
    let _ = std::fs::remove_file(&path);
    if !output.status.success() {
        return Err(ProviderError::Failed(format!(
            "connector_config key_path: ssh-keygen cannot read the key: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
