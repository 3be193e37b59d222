//! Git smart HTTP for the runner's clone URL: `git http-backend` run as a CGI program
//! over the project's bare mirror (read-only: `info/refs` and `git-upload-pack`).
//!
//! The runner clones `http://gitlab-ci-token:<job token>@host/<path>.git`; git sends
//! the credentials only after a `401` challenge, so an unauthenticated request gets
//! `401` with `WWW-Authenticate: Basic`. A job token opens its own project's
//! repository and those whose CI/CD job token allowlist names its project, and only
//! while the job runs (the coordinator revokes it after).

use std::path::Path;
use std::process::Stdio;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::error::ApiError;

/// The user name GitLab expects with a job token on git URLs (§1.1).
pub(crate) const JOB_TOKEN_USER: &str = "gitlab-ci-token";

/// What a git request asks for, after the `<repo>.git` part of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GitService {
    /// `GET <repo>.git/info/refs?service=git-upload-pack`
    InfoRefs,
    /// `POST <repo>.git/git-upload-pack`
    UploadPack,
}

/// Splits `/<repo>.git/<rest>` into the repository path (without `.git`) and the
/// service; `None` for anything that is not a read-only smart HTTP request.
pub(crate) fn parse_git_path(path: &str) -> Option<(&str, GitService)> {
    let path = path.trim_start_matches('/');
    let (repo, rest) = path.split_once(".git/")?;
    if repo.is_empty() {
        return None;
    }
    let service = match rest {
        "info/refs" => GitService::InfoRefs,
        "git-upload-pack" => GitService::UploadPack,
        _ => return None,
    };
    Some((repo, service))
}

/// `401` asking git for the credentials of the clone URL.
pub(crate) fn challenge() -> Response {
    let mut response = ApiError::unauthorized().into_response();
    response.headers_mut().insert(
        axum::http::header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"Gantry\""),
    );
    response
}

/// Runs `git http-backend` for one request against the bare repository `repo`.
pub(crate) async fn serve(
    repo: &Path,
    service: GitService,
    method: &Method,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Bytes,
    user: &str,
) -> Result<Response, ApiError> {
    let (Some(root), Some(name)) = (repo.parent(), repo.file_name()) else {
        return Err(ApiError::not_found("Repository"));
    };
    let expected = match service {
        GitService::InfoRefs => Method::GET,
        GitService::UploadPack => Method::POST,
    };
    if method != expected {
        return Err(ApiError::message(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed",
        ));
    }
    if service == GitService::InfoRefs
        && !query
            .unwrap_or("")
            .split('&')
            .any(|pair| pair == "service=git-upload-pack")
    {
        // Dumb HTTP and pushes are not served.
        return Err(ApiError::forbidden_because(
            "only git-upload-pack is served",
        ));
    }
    let suffix = match service {
        GitService::InfoRefs => "info/refs",
        GitService::UploadPack => "git-upload-pack",
    };
    let path_info = format!("/{}/{suffix}", name.to_string_lossy());
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", path_info)
        .env("REQUEST_METHOD", method.as_str())
        .env("QUERY_STRING", query.unwrap_or(""))
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("HTTP_GIT_PROTOCOL", header("git-protocol"))
        .env("REMOTE_USER", user)
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| ApiError::internal(&format!("start git http-backend: {e}")))?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let write = async move {
        if let Some(stdin) = stdin.as_mut() {
            // A client that sent a bad pack request makes git exit early; that shows in
            // the answer, not here.
            let _ = stdin.write_all(&body).await;
            let _ = stdin.shutdown().await;
        }
        drop(stdin);
    };
    let read_out = async move {
        let mut out = Vec::new();
        if let Some(stdout) = stdout.as_mut() {
            stdout.read_to_end(&mut out).await?;
        }
        Ok::<_, std::io::Error>(out)
    };
    let read_err = async move {
        let mut err = Vec::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.read_to_end(&mut err).await;
        }
        err
    };
    let ((), out, err) = tokio::join!(write, read_out, read_err);
    let out = out.map_err(|e| ApiError::internal(&format!("read git http-backend output: {e}")))?;
    let status = child
        .wait()
        .await
        .map_err(|e| ApiError::internal(&format!("wait for git http-backend: {e}")))?;
    if !status.success() && out.is_empty() {
        let message = String::from_utf8_lossy(&err);
        return Err(ApiError::internal(&format!(
            "git http-backend failed: {}",
            message.trim()
        )));
    }
    Ok(parse_cgi_response(&out))
}

/// A CGI answer: header lines, an empty line, the body. `Status: 404 Not Found` sets the
/// status (default 200).
fn parse_cgi_response(out: &[u8]) -> Response {
    let (head, body) = split_head(out);
    let mut status = StatusCode::OK;
    let mut headers = HeaderMap::new();
    for line in String::from_utf8_lossy(head).lines() {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value
                .split_whitespace()
                .next()
                .and_then(|c| c.parse::<u16>().ok());
            if let Some(code) = code.and_then(|c| StatusCode::from_u16(c).ok()) {
                status = code;
            }
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.trim()),
            HeaderValue::from_str(value),
        ) {
            headers.append(name, value);
        }
    }
    (status, headers, Bytes::copy_from_slice(body)).into_response()
}

fn split_head(out: &[u8]) -> (&[u8], &[u8]) {
    for (i, window) in out.windows(2).enumerate() {
        if window == b"\n\n" {
            return (&out[..i], &out[i + 2..]);
        }
        if i + 4 <= out.len() && &out[i..i + 4] == b"\r\n\r\n" {
            return (&out[..i], &out[i + 4..]);
        }
    }
    (out, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_paths() {
        assert_eq!(
            parse_git_path("/acme/widget.git/info/refs"),
            Some(("acme/widget", GitService::InfoRefs))
        );
        assert_eq!(
            parse_git_path("/w.git/git-upload-pack"),
            Some(("w", GitService::UploadPack))
        );
        assert_eq!(parse_git_path("/w.git/git-receive-pack"), None);
        assert_eq!(parse_git_path("/.git/info/refs"), None);
        assert_eq!(parse_git_path("/api/v4/projects"), None);
    }

    #[test]
    fn cgi_answer() {
        let response =
            parse_cgi_response(b"Status: 403 Forbidden\r\nContent-Type: text/plain\r\n\r\nno");
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let response = parse_cgi_response(
            b"Content-Type: application/x-git-upload-pack-advertisement\n\n001e",
        );
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()["content-type"],
            "application/x-git-upload-pack-advertisement"
        );
    }
}
