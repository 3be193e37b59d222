//! Credentials before bodies: no request body is read for a client the server does not
//! know. Runs before every handler (`build` in `mod.rs`).
//!
//! A request with a body is let through whole when a credential in its headers or query
//! string is one the server issued ([`known_credential`]: the admin token, a job's
//! token, a live session of the web UI — the handler still decides what it may do).
//! A job token found here travels on with the request as [`VerifiedJob`], so the
//! handler does not look it up again: one lookup per request.
//! Otherwise:
//! - on the routes whose credential travels in the body ([`token_in_body`]: the runner
//!   API's JSON, trigger forms, the UI's sign-in) the body is read only up to
//!   [`SMALL_BODY`], enough for the token; a longer one is `413`, sent after up to
//!   [`DRAIN`] more of it is read and dropped so the client sees the answer;
//! - everywhere else the handler gets an empty body in its place, so it answers with
//!   its own `401`/`403`/`404` before a byte of the body is read (hyper then closes the
//!   connection rather than read the rest).

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gantry_protocol::header;

use super::AppState;
use super::error::ApiError;
use super::extract;

/// How much of a body is read, before its token is known, on a route whose token is in
/// the body. The runner API's JSON bodies are a few KiB (`POST /jobs/request` allows 32
/// KiB, as Workhorse does).
pub(crate) const SMALL_BODY: usize = 64 * 1024;

use super::ui::SESSION_COOKIE;

/// A job token of the request the gate found to be a running job's, and that job's row
/// when the request came (a request extension: [`super::auth::require_job`] takes it
/// instead of looking the token up again).
#[derive(Clone, Debug)]
pub(crate) struct VerifiedJob {
    pub(crate) token: String,
    pub(crate) row: gantry_store::Job,
}

/// What the gate made of a request's credentials.
enum Credential {
    Unknown,
    Known,
    Job(Box<VerifiedJob>),
}

pub(crate) async fn credentials_first(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    if http_body::Body::is_end_stream(request.body()) {
        return next.run(request).await;
    }
    let tokens = candidates(request.headers(), request.uri().query());
    let session = ui_session(request.headers());
    let known = match known_credential(&state, tokens, session).await {
        Ok(known) => known,
        Err(error) => return error.into_response(),
    };
    match known {
        Credential::Unknown => {}
        Credential::Known => return next.run(request).await,
        Credential::Job(job) => {
            request.extensions_mut().insert(*job);
            return next.run(request).await;
        }
    }
    if token_in_body(request.method(), request.uri().path()) {
        let declared = request
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > SMALL_BODY as u64) {
            return too_large().into_response();
        }
        let (parts, body) = request.into_parts();
        return match read_small(body).await {
            Ok(bytes) => {
                next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                    .await
            }
            Err(refused) => refused.into_response(),
        };
    }
    let (parts, _unread) = request.into_parts();
    next.run(Request::from_parts(parts, axum::body::Body::empty()))
        .await
}

/// After a body passes [`SMALL_BODY`], up to this much more of it is read and dropped
/// before the `413` is sent: a client still writing its body when the server closes the
/// connection with unread bytes gets it reset, often before it reads the answer. (Go's
/// `net/http` reads up to 256 KiB of an unread body for the same reason.) A longer body
/// is cut there; the edge's body timeout bounds the time.
const DRAIN: usize = 256 * 1024;

/// The body of a request whose token is in it, read whole while it is at most
/// [`SMALL_BODY`]; a longer one is drained (up to [`DRAIN`] more) and refused `413`. A
/// body that cannot be read within the cap is the read's own error (`408` when the
/// client stalled).
async fn read_small(mut body: axum::body::Body) -> Result<axum::body::Bytes, ApiError> {
    use http_body_util::BodyExt as _;
    let mut kept: Vec<u8> = Vec::new();
    let mut dropped: Option<usize> = None;
    while let Some(frame) = body.frame().await {
        let frame = match (frame, dropped) {
            (Ok(frame), _) => frame,
            (Err(e), None) => return Err(extract::read_error(&e, "request body", SMALL_BODY)),
            (Err(_), Some(_)) => return Err(too_large()),
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        match dropped.as_mut() {
            None if kept.len() + data.len() <= SMALL_BODY => kept.extend_from_slice(&data),
            None => dropped = Some(data.len()),
            Some(n) => {
                *n += data.len();
                if *n > DRAIN {
                    break;
                }
            }
        }
    }
    match dropped {
        None => Ok(kept.into()),
        Some(_) => Err(too_large()),
    }
}

fn too_large() -> ApiError {
    ApiError::too_large(format!(
        "Request Entity Too Large - a request without a credential in its headers may send at most {SMALL_BODY} bytes"
    ))
}

/// Whether the route takes its credential from the body (the token in the runner API's
/// JSON, a trigger token in a form, the admin token on the UI's sign-in page, a forge's
/// webhook signed over its body).
fn token_in_body(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    matches!(
        (method, segments.as_slice()),
        (&Method::POST | &Method::DELETE, ["api", "v4", "runners"])
            | (&Method::POST, ["api", "v4", "runners", "verify"])
            | (&Method::DELETE, ["api", "v4", "runners", "managers"])
            | (&Method::POST, ["api", "v4", "jobs", "request"])
            | (&Method::PUT, ["api", "v4", "jobs", _])
            | (
                &Method::POST,
                ["api", "v4", "projects", _, "trigger", "pipeline"]
            )
            | (
                &Method::POST,
                ["api", "v4", "projects", _, "ref", _, "trigger", "pipeline"]
            )
            | (&Method::POST, ["-", "login"])
            | (&Method::POST, ["api", "v4", "projects", _, "forge_hook"])
    )
}

/// Whether one of `tokens` (from [`candidates`]) is a credential the server issued —
/// the admin token, or the token of a running job — or `session` is a live session of
/// the web UI.
/// A job token (by its prefix) is looked up as one first, then as the admin token.
async fn known_credential(
    state: &AppState,
    tokens: Vec<String>,
    session: Option<&str>,
) -> Result<Credential, ApiError> {
    if let Some(id) = session
        && state.coordinator.ui_session_live(id).await?
    {
        return Ok(Credential::Known);
    }
    for token in tokens {
        if gantry_protocol::token::is_job_token(&token)
            && let Some(row) = state.coordinator.executing_job_by_token(&token).await?
        {
            return Ok(Credential::Job(Box::new(VerifiedJob { token, row })));
        }
        if state.coordinator.is_admin(&token).await? {
            return Ok(Credential::Known);
        }
    }
    Ok(Credential::Unknown)
}

/// At most this many credentials of one request are looked up.
const MAX_CANDIDATES: usize = 4;

/// The tokens a request carries outside its body, where GitLab reads them:
/// `PRIVATE-TOKEN`, `Authorization: Bearer` or `Basic` (git), `JOB-TOKEN`, and the
/// `private_token`, `job_token` and `token` query parameters.
fn candidates(headers: &HeaderMap, query: Option<&str>) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut add = |token: &str| {
        let token = token.trim();
        if !token.is_empty() && found.len() < MAX_CANDIDATES && !found.iter().any(|t| t == token) {
            found.push(token.to_owned());
        }
    };
    if let Some(token) = extract::private_token(headers) {
        add(token);
    }
    if let Some(token) = extract::header_str(headers, header::JOB_TOKEN) {
        add(token);
    }
    if let Some((_, password)) = extract::basic_auth(headers) {
        add(&password);
    }
    if let Some(query) = query {
        for (name, value) in
            serde_urlencoded::from_str::<Vec<(String, String)>>(query).unwrap_or_default()
        {
            if matches!(name.as_str(), "private_token" | "job_token" | "token") {
                add(&value);
            }
        }
    }
    found
}

/// The web UI's session id, from its cookie.
fn ui_session(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, value)| *name == SESSION_COOKIE && !value.is_empty())
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_whose_token_is_in_the_body() {
        for (method, path) in [
            (Method::POST, "/api/v4/runners"),
            (Method::DELETE, "/api/v4/runners"),
            (Method::POST, "/api/v4/runners/verify"),
            (Method::DELETE, "/api/v4/runners/managers"),
            (Method::POST, "/api/v4/jobs/request"),
            (Method::PUT, "/api/v4/jobs/12"),
            (Method::POST, "/api/v4/projects/7/trigger/pipeline"),
            (
                Method::POST,
                "/api/v4/projects/g%2Fp/ref/main/trigger/pipeline",
            ),
            (Method::POST, "/-/login"),
            (Method::POST, "/api/v4/projects/7/forge_hook"),
        ] {
            assert!(token_in_body(&method, path), "{method} {path}");
        }
        for (method, path) in [
            (Method::POST, "/api/v4/jobs/12/artifacts"),
            (Method::PATCH, "/api/v4/jobs/12/trace"),
            (Method::POST, "/api/v4/projects"),
            (Method::POST, "/api/v4/projects/7/pipeline"),
            (Method::PUT, "/api/v4/jobs/12/extra"),
            (Method::POST, "/demo.git/git-upload-pack"),
            (Method::PUT, "/api/v4/projects/7/forge_hook"),
        ] {
            assert!(!token_in_body(&method, path), "{method} {path}");
        }
    }

    #[test]
    fn credentials_come_from_headers_cookie_and_query() {
        let mut headers = HeaderMap::new();
        headers.insert("private-token", "a".parse().unwrap());
        headers.insert("job-token", "b".parse().unwrap());
        headers.insert("cookie", "x=1; gantry_session=c".parse().unwrap());
        let found = candidates(&headers, Some("ref=main&token=d&private_token=a"));
        assert_eq!(found, ["a", "b", "d"]);
        assert_eq!(ui_session(&headers), Some("c"));
        assert!(candidates(&HeaderMap::new(), Some("ref=main")).is_empty());
    }
}
