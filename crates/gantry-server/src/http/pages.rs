//! GitLab Pages over HTTP: `GET /api/v4/projects/:id/pages` (GitLab's settings shape, admin
//! token) and the sites: `GET /-/pages/<project full path>/[<prefix>/]<file>`, or
//! any path on the host of `CoordinatorConfig::pages_url` when one is set (the resolution
//! is `coordinator/pages.rs`'s). No credential is asked: sites are public, as GitLab's
//! Pages without access control.
//!
//! A site shares the server's origin under `/-/pages`, so every answer carries
//! `Content-Security-Policy: sandbox …` without `allow-same-origin`: the site's scripts run
//! in an opaque origin and cannot act as a signed-in web UI user. A domain of its own
//! (`--pages-url`) is the better set-up; the sandbox stays on there too.

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::coordinator::{CoordinatorError, PagesAnswer};

use super::error::{ApiError, ApiResult};
use super::projects::admin_project_id;
use super::{AppState, json_response};

/// What sandboxed sites may still do.
const SANDBOX: &str = "sandbox allow-scripts allow-forms allow-popups allow-downloads allow-modals";

/// `GET /projects/:id/pages`.
pub(crate) async fn settings(
    State(state): State<AppState>,
    Path(project): Path<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let project = admin_project_id(&state, &headers, &project).await?;
    let settings = state.coordinator.pages_settings(project).await?;
    Ok(json_response(StatusCode::OK, &settings))
}

/// The path below the Pages base of a request that is one, else `None`.
pub(crate) fn pages_path<'a>(state: &AppState, request: &'a Request) -> Option<&'a str> {
    let path = request.uri().path();
    if let Some(host) = state.coordinator.pages_host() {
        let asked = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if asked.eq_ignore_ascii_case(&host) {
            return Some(path);
        }
    }
    path.strip_prefix("/-/pages/")
        .or_else(|| (path == "/-/pages").then_some(""))
}

/// Serves a Pages request (`GET`/`HEAD`).
pub(crate) async fn serve(state: &AppState, request: Request, path: &str) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return ApiError::message(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
            .into_response();
    }
    let head = request.method() == Method::HEAD;
    let answer = match state.coordinator.pages_file(path).await {
        Ok(answer) => answer,
        Err(CoordinatorError::NotFound(_)) => PagesAnswer::Missing,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let mut response = match answer {
        PagesAnswer::Redirect(to) => {
            let location = format!("{}/{}", state.coordinator.pages_path_base(), to);
            (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
        }
        PagesAnswer::Missing => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "404 Not Found: no Pages site or file here\n",
        )
            .into_response(),
        PagesAnswer::File {
            name,
            file,
            len,
            status,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            let body = if head {
                axum::body::Body::empty()
            } else {
                super::file_body(file, len)
            };
            (
                status,
                [
                    (header::CONTENT_TYPE, content_type(&name).to_owned()),
                    (header::CONTENT_LENGTH, len.to_string()),
                ],
                body,
            )
                .into_response()
        }
    };
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(SANDBOX),
    );
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The content type of a site's file, by its extension (GitLab Pages' common types).
fn content_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" | "map" => "application/json",
        "xml" => "application/xml",
        "txt" | "md" => "text/plain; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "pdf" => "application/pdf",
        "wasm" => "application/wasm",
        "webmanifest" => "application/manifest+json",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn content_types_by_extension() {
        assert_eq!(
            super::content_type("index.HTML"),
            "text/html; charset=utf-8"
        );
        assert_eq!(super::content_type("a/b.css"), "text/css; charset=utf-8");
        assert_eq!(super::content_type("noext"), "application/octet-stream");
    }
}
