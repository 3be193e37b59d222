//! Personal access tokens (GitLab's `glpat-` tokens of a user): the administrator's tokens
//! beyond the admin token made at first start, so people and tools need not share that
//! one. A token has a name, scopes — `api` (everything the admin token may do) or
//! `read_api` (only reads) — an optional expiry date and can be revoked. Stored as
//! SHA-256 hashes only; the secret is shown once, when it is made.
//!
//! `token_access` is the one check of a user API token (the admin token or a personal
//! access token, giving a `TokenAccess`); the tokens are in `personal_access_tokens`
//! (migration 0025).
//!
//! [`new_admin_token`] makes another admin token straight in the database, without a
//! coordinator (`gantry server admin-token`, for a server whose first token was lost).
//!
//! Gantry has one user, the administrator ([`super::PipelineUser`], id 1): tokens of
//! other user ids do not exist.

use gantry_store::{AccessToken, NewAccessToken};
use serde::Serialize;

use super::error::{CoordinatorError, Result};
use super::time::{iso8601, now_ms};
use super::{Coordinator, token};

/// The scopes a personal access token may have, GitLab's names.
pub const ACCESS_TOKEN_SCOPES: [&str; 2] = ["api", "read_api"];

/// Adds an admin token to `store` (and with `revoke_others`, removes every other one,
/// in the same transaction); returns the new token, which exists in plaintext only here.
/// Safe while a server runs on the same database: tokens are read from the database on
/// every request, so the new one works at once and revoked ones stop at once.
pub async fn new_admin_token(store: &gantry_store::Store, revoke_others: bool) -> Result<String> {
    let secret = token::new_token(gantry_protocol::token::PERSONAL_ACCESS_TOKEN_PREFIX);
    store
        .add_admin_token_only(&token::hash(&secret), now_ms(), revoke_others)
        .await?;
    Ok(secret)
}

/// What a token lets its holder do on the user API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenAccess {
    /// The admin token, or a personal access token with scope `api`: every call.
    Full,
    /// A personal access token with scope `read_api` only: `GET` and `HEAD` calls.
    ReadOnly,
}

/// A personal access token as GitLab's API shows it (`PersonalAccessToken` entity); the
/// secret `token` only in the answer that made it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AccessTokenView {
    pub id: i64,
    pub name: String,
    pub revoked: bool,
    pub created_at: String,
    pub description: Option<String>,
    pub scopes: Vec<String>,
    pub user_id: i64,
    pub last_used_at: Option<String>,
    /// Neither revoked nor expired.
    pub active: bool,
    /// `YYYY-MM-DD`: the token stops working at the start of that day (UTC).
    pub expires_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl AccessTokenView {
    fn from_row(row: &AccessToken, today: &str) -> Self {
        AccessTokenView {
            id: row.id,
            name: row.name.clone(),
            revoked: row.revoked,
            created_at: iso8601(row.created_at),
            description: None,
            scopes: row.scopes.clone(),
            user_id: row.user_id,
            last_used_at: None,
            active: usable(row, today),
            expires_at: row.expires_at.clone(),
            token: None,
        }
    }
}

/// A new token's name, scopes and expiry date (`YYYY-MM-DD`, or none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessTokenRequest {
    pub name: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<String>,
}

/// Today's date in UTC, `YYYY-MM-DD`.
fn today() -> String {
    let now = jiff::Timestamp::from_millisecond(now_ms()).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    now.to_zoned(jiff::tz::TimeZone::UTC).date().to_string()
}

/// Not revoked, and `today` is before its expiry date (GitLab: a token expires at the
/// start of its `expires_at` day).
fn usable(row: &AccessToken, today: &str) -> bool {
    !row.revoked
        && row
            .expires_at
            .as_deref()
            .is_none_or(|expires| today < expires)
}

impl Coordinator {
    /// The administrator's user id (the only user).
    pub fn admin_user_id(&self) -> i64 {
        i64::try_from(self.inner.cfg.user.id).unwrap_or(1)
    }

    /// What `token` may do: the admin token and live personal access tokens; `None` for
    /// anything else (unknown, revoked, expired, or a token with neither scope).
    pub async fn token_access(&self, token: &str) -> Result<Option<TokenAccess>> {
        if token.is_empty() {
            return Ok(None);
        }
        let hash = token::hash(token);
        if self.inner.store.is_admin_token(&hash).await? {
            return Ok(Some(TokenAccess::Full));
        }
        let Some(row) = self.inner.store.access_token_by_hash(&hash).await? else {
            return Ok(None);
        };
        if !usable(&row, &today()) {
            return Ok(None);
        }
        let has = |scope: &str| row.scopes.iter().any(|s| s == scope);
        Ok(if has("api") {
            Some(TokenAccess::Full)
        } else if has("read_api") {
            Some(TokenAccess::ReadOnly)
        } else {
            None
        })
    }

    /// The personal access token `token` is, if it is one (live or not).
    pub async fn access_token_of(&self, token: &str) -> Result<Option<AccessTokenView>> {
        let row = self
            .inner
            .store
            .access_token_by_hash(&token::hash(token))
            .await?;
        let today = today();
        Ok(row.map(|row| AccessTokenView::from_row(&row, &today)))
    }

    /// Makes a personal access token for user `user_id`; the answer holds its secret,
    /// shown this once. `Invalid` for a missing name, no or unknown scopes, or an expiry
    /// date that is not a future `YYYY-MM-DD`; `NotFound` for another user.
    pub async fn create_access_token(
        &self,
        user_id: i64,
        req: &AccessTokenRequest,
    ) -> Result<AccessTokenView> {
        if user_id != self.admin_user_id() {
            return Err(CoordinatorError::NotFound("user"));
        }
        let what = "create the personal access token";
        let name = req.name.trim();
        if name.is_empty() {
            return Err(CoordinatorError::Invalid(format!(
                "{what}: name is missing"
            )));
        }
        if req.scopes.is_empty() {
            return Err(CoordinatorError::Invalid(format!(
                "{what}: scopes is missing: give `api` or `read_api`"
            )));
        }
        if let Some(bad) = req
            .scopes
            .iter()
            .find(|s| !ACCESS_TOKEN_SCOPES.contains(&s.as_str()))
        {
            return Err(CoordinatorError::Invalid(format!(
                "{what}: scope `{bad}` is not one Gantry has: give `api` (every call) or `read_api` (reads only)"
            )));
        }
        let today = today();
        let expires_at = match req.expires_at.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(date) => {
                let parsed: jiff::civil::Date = date.parse().map_err(|_| {
                    CoordinatorError::Invalid(format!(
                        "{what}: expires_at `{date}` is not a date such as 2030-12-31"
                    ))
                })?;
                let date = parsed.to_string();
                if date <= today {
                    return Err(CoordinatorError::Invalid(format!(
                        "{what}: expires_at {date} is not in the future (today is {today}, UTC)"
                    )));
                }
                Some(date)
            }
        };
        let secret = token::new_token(gantry_protocol::token::PERSONAL_ACCESS_TOKEN_PREFIX);
        let mut scopes = req.scopes.clone();
        scopes.dedup();
        let row = self
            .inner
            .store
            .create_access_token(
                &NewAccessToken {
                    user_id,
                    name,
                    token_hash: &token::hash(&secret),
                    scopes: &scopes,
                    expires_at: expires_at.as_deref(),
                },
                now_ms(),
            )
            .await?;
        let mut view = AccessTokenView::from_row(&row, &today);
        view.token = Some(secret);
        Ok(view)
    }

    /// Every personal access token, oldest first.
    pub async fn access_tokens(&self) -> Result<Vec<AccessTokenView>> {
        let today = today();
        Ok(self
            .inner
            .store
            .access_tokens()
            .await?
            .iter()
            .map(|row| AccessTokenView::from_row(row, &today))
            .collect())
    }

    /// The personal access token `id`.
    pub async fn access_token(&self, id: i64) -> Result<AccessTokenView> {
        let row = self.inner.store.access_token(id).await?;
        Ok(AccessTokenView::from_row(&row, &today()))
    }

    /// Revokes the personal access token `id`: it stops working at once. `NotFound` when
    /// there is no such token or it was revoked already.
    pub async fn revoke_access_token(&self, id: i64) -> Result<()> {
        Ok(self.inner.store.revoke_access_token(id).await?)
    }
}
