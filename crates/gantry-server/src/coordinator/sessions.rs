//! Sessions of the web UI: signing in with the admin token makes a session — a random
//! id (160 bits, [`token::new_token`]) the browser keeps in an `HttpOnly` cookie — and
//! the cookie never holds the admin token. The store keeps only the id's SHA-256 hash
//! with its expiry ([`SESSION_TTL`] after sign-in, GitLab's default `session_expire_delay`
//! of one week); signing out deletes it, so a copied cookie stops working at once.
//!
//! The CSRF token of a session is derived from its id (`SHA-256("csrf:" + id)`), so it
//! needs no storage and is useless without the cookie, which another site can neither
//! read nor (being `SameSite=Strict`) send.

use std::time::Duration;

use super::error::Result;
use super::time::now_ms;
use super::{Coordinator, token};

/// How long a session lives after sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Prefix of session ids (so one found in a log says what it is).
const SESSION_PREFIX: &str = "gsess-";

impl Coordinator {
    /// A new session; its id (the cookie's value).
    pub async fn start_ui_session(&self) -> Result<String> {
        let id = token::new_token(SESSION_PREFIX);
        let now = now_ms();
        let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
        self.inner
            .store
            .create_ui_session(&token::hash(&id), now, now.saturating_add(ttl))
            .await?;
        Ok(id)
    }

    /// Whether `id` names a live session (made, not ended, not expired).
    pub async fn ui_session_live(&self, id: &str) -> Result<bool> {
        if !id.starts_with(SESSION_PREFIX) {
            return Ok(false);
        }
        let expiry = self.inner.store.ui_session_expiry(&token::hash(id)).await?;
        Ok(expiry.is_some_and(|at| at > now_ms()))
    }

    /// Ends the session `id` (signing out); nothing when there is none.
    pub async fn end_ui_session(&self, id: &str) -> Result<()> {
        self.inner.store.delete_ui_session(&token::hash(id)).await?;
        Ok(())
    }
}

/// The CSRF token of the session `id`: what every form of its pages carries.
pub fn csrf_token(id: &str) -> String {
    token::sha256_hex(format!("csrf:{id}").as_bytes())
}
