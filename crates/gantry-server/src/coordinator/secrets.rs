//! Secrets at rest: project and instance CI/CD variable values are stored encrypted (AES-256-GCM, a
//! random 96-bit nonce per value), as GitLab stores them (`attr_encrypted` with its
//! `db_key_base`). The key is `CoordinatorConfig::db_key` (`gantry server` reads
//! `GANTRY_DB_KEY`, 64 hex digits) or, without one, `data_dir/db_key`, made with a random
//! key (mode 0600) on first start: back it up with the database — without it the values
//! cannot be read.
//!
//! A stored value is `gantry:v1:` + hex(nonce ‖ ciphertext ‖ tag). A value without that
//! prefix was written before encryption: it is read as it is, and encrypted at start.
//!
//! `DbKey` is the key. Variable values are sealed and opened in `variables.rs` (project and
//! group variables; a pipeline's variables, one sealed JSON per pipeline row,
//! `seal_variables`/`pipeline_variables`; a manual job's, `manual_variables`) and in
//! `instance_variables.rs`; `schedules.rs` opens a schedule's sealed variables, and the
//! instance's ID-token signing key (`id_tokens.rs`) is sealed with it too. Plain values of
//! older versions are sealed at `Coordinator::open`.

use std::io;
use std::path::Path;

use aes_gcm::aead::{Aead as _, KeyInit as _};
use aes_gcm::{Aes256Gcm, Nonce};
use rand::RngCore as _;

use super::token::hex;

/// What starts an encrypted value.
pub const PREFIX: &str = "gantry:v1:";
/// The key file in the data directory.
pub const KEY_FILE: &str = "db_key";
const NONCE_LEN: usize = 12;

/// The 256-bit key values are encrypted with.
#[derive(Clone)]
pub struct DbKey([u8; 32]);

impl std::fmt::Debug for DbKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DbKey(..)")
    }
}

impl DbKey {
    /// A new random key.
    pub fn random() -> DbKey {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        DbKey(key)
    }

    /// A key written as 64 hex digits (`GANTRY_DB_KEY`, the key file).
    pub fn parse(text: &str) -> Result<DbKey, String> {
        let text = text.trim();
        let bytes = unhex(text)
            .filter(|b| b.len() == 32)
            .ok_or_else(|| {
                format!(
                    "a database key is 64 hex digits (32 bytes), not {} characters: make one with `openssl rand -hex 32`",
                    text.len()
                )
            })?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&bytes);
        Ok(DbKey(key))
    }

    /// The key in `path`, made (random, mode 0600) when the file does not exist.
    pub fn load_or_create(path: &Path) -> io::Result<DbKey> {
        match std::fs::read_to_string(path) {
            Ok(text) => DbKey::parse(&text).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: {e}", path.display()),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let key = DbKey::random();
                write_private(path, &hex(&key.0))?;
                Ok(key)
            }
            Err(e) => Err(e),
        }
    }

    /// `plain` encrypted, as stored.
    pub fn encrypt(&self, plain: &str) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let cipher = Aes256Gcm::new((&self.0).into());
        // Encrypting a message in memory fails only past GCM's 64 GiB.
        let sealed = cipher
            .encrypt(Nonce::from_slice(&nonce), plain.as_bytes())
            .unwrap_or_default();
        format!("{PREFIX}{}{}", hex(&nonce), hex(&sealed))
    }

    /// The value `stored` holds: decrypted, or as it is when it was stored before
    /// encryption (no prefix). `Err` when it does not decrypt with this key.
    pub fn decrypt(&self, stored: &str) -> Result<String, String> {
        let Some(sealed) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_owned());
        };
        let bytes = unhex(sealed)
            .filter(|b| b.len() > NONCE_LEN)
            .ok_or("the stored value is damaged")?;
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let cipher = Aes256Gcm::new((&self.0).into());
        let plain = cipher
            .decrypt(Nonce::from_slice(nonce), sealed)
            .map_err(|_| "it does not decrypt with this server's database key (GANTRY_DB_KEY or data_dir/db_key): restore the key it was stored with".to_owned())?;
        String::from_utf8(plain).map_err(|_| "the decrypted value is not UTF-8".to_owned())
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Writes `text` to a new file only its owner may read.
fn write_private(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_never_show_in_what_is_stored() {
        let key = DbKey::random();
        let stored = key.encrypt("s3cr3t-value");
        assert!(stored.starts_with(PREFIX), "{stored}");
        assert!(!stored.contains("s3cr3t"));
        assert_ne!(stored, key.encrypt("s3cr3t-value"), "a nonce per value");
        assert_eq!(key.decrypt(&stored).as_deref(), Ok("s3cr3t-value"));
        assert_eq!(key.decrypt(&key.encrypt("")).as_deref(), Ok(""));
        // Written before encryption: read as it is.
        assert_eq!(key.decrypt("plain").as_deref(), Ok("plain"));
    }

    #[test]
    fn another_key_or_a_damaged_value_is_an_error() {
        let key = DbKey::random();
        let stored = key.encrypt("value");
        let other = DbKey::random();
        let e = other.decrypt(&stored).unwrap_err();
        assert!(e.contains("restore the key"), "{e}");
        let mut tampered = stored.clone();
        let last = tampered.pop().unwrap_or('0');
        tampered.push(if last == '0' { '1' } else { '0' });
        assert!(key.decrypt(&tampered).is_err());
        assert!(key.decrypt("gantry:v1:zz").is_err());
        assert!(key.decrypt("gantry:v1:00").is_err());
    }

    #[test]
    fn keys_are_64_hex_digits_and_the_key_file_is_made_once_and_private() {
        assert!(DbKey::parse(&"ab".repeat(32)).is_ok());
        let short = DbKey::parse("abcd").unwrap_err();
        assert!(short.contains("64 hex digits"), "{short}");
        assert!(DbKey::parse(&"zz".repeat(32)).is_err());

        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(KEY_FILE);
        let first = DbKey::load_or_create(&path).expect("made");
        let again = DbKey::load_or_create(&path).expect("read");
        assert_eq!(again.decrypt(&first.encrypt("v")).as_deref(), Ok("v"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "nope").expect("write");
        assert!(DbKey::load_or_create(&path).is_err());
    }
}
