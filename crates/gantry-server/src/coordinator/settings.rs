//! The settings service: what a project, its groups and the instance are configured
//! with that jobs see — CI/CD variables (instance: `instance_variables.rs`; projects and
//! groups: `variables.rs`), protected branches and tags (`protected.rs`) — and the
//! encryption of secrets at rest (`secrets.rs`'s database key).
//!
//! It owns its state: the database key and the cache of settings variables
//! ([`SettingsCache`]: every change made through it drops the cache; other replicas see a
//! change within its TTL). It calls the store only, never the rest of the coordinator;
//! the coordinator reaches it through [`Coordinator::settings`], the HTTP layer the same
//! way. Its errors are its own ([`SettingsError`]); the coordinator's callers get them as
//! [`CoordinatorError`]s.

use gantry_store::{Store, StoreError};

use super::Coordinator;
use super::error::CoordinatorError;
use super::secrets::DbKey;
use super::variables::SettingsCache;

/// What can go wrong with a setting, in the service's words.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The project, group, variable or protected ref does not exist.
    #[error("find the {0}")]
    NotFound(&'static str),
    /// A rule is broken: a name, a value, a scope, a limit, a key taken; the message names
    /// the field and the fix.
    #[error("{0}")]
    Invalid(String),
    /// The ref is protected already.
    #[error("{0}")]
    Conflict(String),
    /// A stored value does not decrypt with this server's key (another server's key, a
    /// damaged value); the message says which value.
    #[error("read stored data: {0}")]
    Undecryptable(String),
    /// The database failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for SettingsError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => SettingsError::NotFound(what),
            StoreError::Conflict(m) => SettingsError::Conflict(m),
            other => SettingsError::Store(other),
        }
    }
}

impl From<SettingsError> for CoordinatorError {
    fn from(e: SettingsError) -> Self {
        match e {
            SettingsError::NotFound(what) => CoordinatorError::NotFound(what),
            SettingsError::Invalid(m) => CoordinatorError::Invalid(m),
            SettingsError::Conflict(m) => CoordinatorError::Conflict(m),
            SettingsError::Undecryptable(what) => CoordinatorError::corrupt(what),
            SettingsError::Store(e) => CoordinatorError::Store(e),
        }
    }
}

/// CI/CD variables, protected refs, encryption at rest: see the module docs.
pub struct Settings {
    pub(super) store: Store,
    /// Encrypts variable values and the other secrets the database keeps.
    pub(super) key: DbKey,
    /// Settings variables as last read (`variables.rs`).
    pub(super) cache: SettingsCache,
}

impl Settings {
    pub(super) fn new(store: Store, key: DbKey) -> Self {
        Self {
            store,
            key,
            cache: SettingsCache::default(),
        }
    }

    /// `plain`, encrypted with the database key (what the database keeps of a secret).
    pub(crate) fn seal(&self, plain: &str) -> String {
        self.key.encrypt(plain)
    }

    /// A value [`Settings::seal`] made, opened; the error says why it does not open
    /// (another server's key, a damaged value).
    pub(crate) fn open(&self, sealed: &str) -> Result<String, String> {
        self.key.decrypt(sealed)
    }

    /// A project or a group went away: what was kept of settings variables is dropped.
    pub(crate) fn forget_kept(&self) {
        self.cache.changed();
    }
}

impl Coordinator {
    /// The settings service (CI/CD variables, protected refs, encryption at rest).
    pub fn settings(&self) -> &Settings {
        &self.inner.settings
    }
}
