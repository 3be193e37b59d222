//! Signing in and out, and the checks every form post passes.
//!
//! * **Sign-in** (`POST /-/login` with the admin token) makes a server-side session
//!   (`coordinator/sessions.rs`: a random id, only its hash stored, expiring after
//!   `SESSION_TTL`) and sets the cookie [`COOKIE`] to its id: `HttpOnly`,
//!   `SameSite=Strict`, `Secure` when the external URL is `https`. The admin token is
//!   never in a cookie.
//! * **Sign-out** is a `POST /-/logout` with the CSRF token: the session is deleted, so
//!   its cookie is dead even if copied. `GET /-/logout` only shows a sign-out button (a
//!   link or an image elsewhere cannot sign anybody out).
//! * **Every form post** of a session carries its CSRF token (field `authenticity_token`,
//!   GitLab's name, or header `X-CSRF-Token`; derived from the session id,
//!   `coordinator::csrf_token`) and, when the browser sends `Origin`, comes from this
//!   server: `Origin`'s host must be the request's `Host` or the external URL's. Else
//!   `403` and nothing is done. The sign-in form has no session yet: its `Origin` is
//!   checked. A client with a `PRIVATE-TOKEN` (or `Authorization: Bearer`) header needs no
//!   CSRF token: another site cannot make a browser send that header.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;

use crate::coordinator::{SESSION_TTL, csrf_token};

use super::super::AppState;
use super::super::error::ApiError;
use super::super::extract;
use super::shell::{CSRF_FIELD, escape, html, not_done, redirect};

/// The session cookie (`gate.rs` lets a post with a live one send its body).
pub(crate) const COOKIE: &str = "gantry_session";

/// Who is asking for a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Who {
    /// A browser with a live session (its id).
    Session(String),
    /// A client with the admin token in a header.
    Token,
}

impl Who {
    /// The CSRF token forms of this caller carry (empty for a header token).
    pub(super) fn csrf(&self) -> String {
        match self {
            Who::Session(id) => csrf_token(id),
            Who::Token => String::new(),
        }
    }
}

fn cookie_value<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
}

/// Who is signed in: a live session's cookie, else the admin token in a header; `None`
/// for anybody else.
pub(super) async fn who(state: &AppState, headers: &HeaderMap) -> Result<Option<Who>, ApiError> {
    if let Some(id) = cookie_value(headers, COOKIE).filter(|id| !id.is_empty())
        && state.coordinator.ui_session_live(id).await?
    {
        return Ok(Some(Who::Session(id.to_owned())));
    }
    match extract::private_token(headers) {
        Some(token) if state.coordinator.is_admin(token).await? => Ok(Some(Who::Token)),
        _ => Ok(None),
    }
}

/// The host (`name[:port]`, lower case) of an `http(s)://` URL or origin.
fn authority(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Whether the request's `Origin`, when it has one, is this server: the `Host` it was
/// sent to, or the external URL's host.
pub(super) fn same_origin(headers: &HeaderMap, external_url: &str) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(origin) = origin.to_str().ok().and_then(authority) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_ascii_lowercase);
    host.as_deref() == Some(origin.as_str()) || authority(external_url).as_deref() == Some(&origin)
}

/// Whether the two strings are equal, in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The `403` of a post that fails the checks, or `None` when it passes them.
pub(super) fn refuse_post(
    who: &Who,
    headers: &HeaderMap,
    body: &[u8],
    external_url: &str,
    back: &str,
) -> Option<Response> {
    let Who::Session(id) = who else {
        return None;
    };
    if !same_origin(headers, external_url) {
        return Some(not_done(
            StatusCode::FORBIDDEN,
            "This form was sent from another site (its Origin is not this server's); nothing was done.",
            back,
        ));
    }
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(body).unwrap_or_default();
    let sent = fields
        .iter()
        .find(|(k, _)| k == CSRF_FIELD)
        .map(|(_, v)| v.as_str())
        .or_else(|| headers.get("x-csrf-token").and_then(|v| v.to_str().ok()))
        .unwrap_or_default();
    if !same_secret(sent, &csrf_token(id)) {
        return Some(not_done(
            StatusCode::FORBIDDEN,
            "This form lacks its CSRF token (authenticity_token) or the token is not this session's: reload the page and send it again.",
            back,
        ));
    }
    None
}

fn cookie(value: &str, secure: bool, max_age: u64) -> String {
    format!(
        "{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{}",
        if secure { "; Secure" } else { "" }
    )
}

pub(super) fn login_page(status: StatusCode, error: Option<&str>) -> Response {
    let error = error
        .map(|e| format!("<p class=\"error\">{}</p>", escape(e)))
        .unwrap_or_default();
    html(
        status,
        "Sign in",
        false,
        &format!(
            "<h1>Sign in</h1>{error}<form method=\"post\" action=\"/-/login\">\
             <label>Admin token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" size=\"40\"></label> \
             <button type=\"submit\">Sign in</button></form>"
        ),
    )
}

/// `POST /-/login`: a session for the admin token.
pub(super) async fn login(
    state: &AppState,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let config = state.coordinator.config();
    if !same_origin(headers, &config.external_url) {
        return Ok(login_page(
            StatusCode::FORBIDDEN,
            Some(
                "This sign-in form was sent from another site; sign in on this server's own page.",
            ),
        ));
    }
    let form: Vec<(String, String)> = serde_urlencoded::from_bytes(body).unwrap_or_default();
    let token = form
        .iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    if token.is_empty() || !state.coordinator.is_admin(&token).await? {
        return Ok(login_page(
            StatusCode::UNAUTHORIZED,
            Some("That is not the admin token: use the one the server printed at its first start."),
        ));
    }
    let id = state.coordinator.start_ui_session().await?;
    let secure = config.external_url.starts_with("https://");
    Ok(redirect(
        "/",
        Some(cookie(&id, secure, SESSION_TTL.as_secs())),
    ))
}

/// `GET /-/logout`: a page with the sign-out button (a `GET` signs nobody out).
pub(super) fn logout_page() -> Response {
    html(
        StatusCode::OK,
        "Sign out",
        false,
        &format!(
            "<h1>Sign out</h1><p>{}</p>",
            super::shell::button("/-/logout", "Sign out")
        ),
    )
}

/// `POST /-/logout` (checked by [`refuse_post`]): ends the session, clears the cookie.
pub(super) async fn logout(state: &AppState, who: &Who) -> Result<Response, ApiError> {
    if let Who::Session(id) = who {
        state.coordinator.end_ui_session(id).await?;
    }
    let secure = state
        .coordinator
        .config()
        .external_url
        .starts_with("https://");
    Ok(redirect("/-/login", Some(cookie("", secure, 0))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(origin: Option<&str>, host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        h
    }

    #[test]
    fn origins_must_be_this_server() {
        let ext = "https://ci.example.com/";
        assert!(same_origin(&headers(None, "x"), ext));
        assert!(same_origin(
            &headers(Some("http://127.0.0.1:8080"), "127.0.0.1:8080"),
            ext
        ));
        assert!(same_origin(
            &headers(Some("https://CI.example.com"), "10.0.0.1:80"),
            ext
        ));
        assert!(!same_origin(
            &headers(Some("https://evil.example"), "127.0.0.1:8080"),
            ext
        ));
        assert!(!same_origin(&headers(Some("null"), "127.0.0.1:8080"), ext));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("", "abc"));
    }
}
