//! The user API client shared by `gantry project` and `gantry pipeline`: where the
//! server is, which token to send, and how its answers become messages.

use clap::Args;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::env;
use crate::exit::Failure;

/// `--server` / `--token`, falling back to `GANTRY_URL` / `GANTRY_TOKEN`.
#[derive(Args, Clone, Debug)]
pub(crate) struct ServerArgs {
    /// The Gantry server's URL [env: GANTRY_URL] [default: http://127.0.0.1:8080].
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// The admin token `gantry server` printed on first start [env: GANTRY_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
}

/// How long a refused connection is tried again: a server started in the background a
/// moment ago (`gantry server … &`, then a client command, as the README's quick start
/// does) is not listening yet. A server that is down costs a command this long to fail.
const CONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

/// A connection to the user API (`/api/v4`) with the admin token.
pub(crate) struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl ApiClient {
    /// Resolves flags and environment; a missing token is a usage error naming both.
    pub(crate) fn new(args: &ServerArgs) -> Result<Self, Failure> {
        let base = args
            .server
            .clone()
            .or_else(|| env::var(env::GANTRY_URL))
            .unwrap_or_else(|| env::DEFAULT_URL.to_owned());
        let token = args.token.clone().or_else(|| env::var(env::GANTRY_TOKEN)).ok_or_else(|| {
            Failure::Usage(format!(
                "no API token given\n\
                 pass --token TOKEN or set {}: the admin token `gantry server` printed on its first start, or a new one from `gantry server admin-token`",
                env::GANTRY_TOKEN
            ))
        })?;
        Self::with_token(&base, token)
    }

    /// A client of the server at `base` with `token` (`gantry runner register` with a
    /// personal access token).
    pub(crate) fn with_token(base: &str, token: String) -> Result<Self, Failure> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Failure::Usage(format!(
                "the server URL `{base}` is not an http:// or https:// URL\n\
                 pass --server URL or set {}",
                env::GANTRY_URL
            )));
        }
        let http = reqwest::Client::builder()
            .user_agent(concat!("gantry/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Failure::Failed(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Self { http, base, token })
    }

    /// `GET /api/v4/<path>`.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Failure> {
        let request = self.http.get(self.url(path));
        self.send(request).await
    }

    /// `GET /api/v4/<path>` of a text answer (a job's log), as the bytes sent.
    pub(crate) async fn get_bytes(&self, path: &str) -> Result<Vec<u8>, Failure> {
        let request = self.http.get(self.url(path));
        let (_, _, bytes) = self.send_raw(request).await?;
        Ok(bytes)
    }

    /// `POST /api/v4/<path>` with a JSON body.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, Failure> {
        let request = self.http.post(self.url(path)).json(body);
        self.send(request).await
    }

    /// `POST /api/v4/<path>` with a form-encoded body (`name=value&…`, in order).
    pub(crate) async fn post_form<T: DeserializeOwned>(
        &self,
        path: &str,
        fields: &[(String, String)],
    ) -> Result<T, Failure> {
        let request = self.http.post(self.url(path)).form(fields);
        self.send(request).await
    }

    /// `PUT /api/v4/<path>` with a JSON body.
    pub(crate) async fn put<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
    ) -> Result<T, Failure> {
        let request = self.http.put(self.url(path)).json(body);
        self.send(request).await
    }

    /// `DELETE /api/v4/<path>` (an empty answer reads as `null`).
    pub(crate) async fn delete(&self, path: &str) -> Result<Value, Failure> {
        let request = self.http.delete(self.url(path));
        self.send(request).await
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v4/{}", self.base, path.trim_start_matches('/'))
    }

    /// `GET /api/v4/<path>` of a paginated list: every page (100 items each), followed
    /// through GitLab's `X-Next-Page` header.
    pub(crate) async fn get_all(&self, path: &str) -> Result<Vec<Value>, Failure> {
        let mut all = Vec::new();
        let mut page: u64 = 1;
        loop {
            let request = self
                .http
                .get(self.url(path))
                .query(&[("per_page", "100".to_owned()), ("page", page.to_string())]);
            let (headers, items): (reqwest::header::HeaderMap, Vec<Value>) =
                self.send_with_headers(request).await?;
            all.extend(items);
            let next = headers
                .get("x-next-page")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            match next {
                Some(next) if next > page => page = next,
                _ => return Ok(all),
            }
        }
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, Failure> {
        self.send_with_headers(request).await.map(|(_, body)| body)
    }

    async fn send_with_headers<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(reqwest::header::HeaderMap, T), Failure> {
        let (url, headers, bytes) = self.send_raw(request).await?;
        let bytes = if bytes.is_empty() {
            b"null".as_slice()
        } else {
            &bytes
        };
        let body = serde_json::from_slice(bytes).map_err(|e| {
            Failure::Failed(format!("the answer to {url} is not the expected JSON: {e}"))
        })?;
        Ok((headers, body))
    }

    /// Sends `request` with the token; a success's path, headers and body, or the
    /// server's error as a message.
    async fn send_raw(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(String, reqwest::header::HeaderMap, Vec<u8>), Failure> {
        let request = request.header("PRIVATE-TOKEN", &self.token);
        let deadline = std::time::Instant::now() + CONNECT_PATIENCE;
        let response = loop {
            // Every body this client sends is in memory, so a request can be cloned.
            let attempt = request
                .try_clone()
                .ok_or_else(|| Failure::Failed("the request cannot be sent again".to_owned()))?;
            match attempt.send().await {
                Ok(response) => break response,
                Err(e) if e.is_connect() && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => {
                    return Err(Failure::Failed(format!(
                        "cannot reach the Gantry server at {}: {e}\n\
                         is `gantry server` running there? Pass --server URL or set {}",
                        self.base,
                        env::GANTRY_URL
                    )));
                }
            }
        };
        let status = response.status();
        let url = response.url().path().to_owned();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Failure::Failed(format!("read the answer to {url}: {e}")))?;
        if !status.is_success() {
            let detail = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|body| {
                    let message = body.get("message").or_else(|| body.get("error"))?;
                    Some(match message {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    })
                })
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
            let hint = if status.as_u16() == 401 {
                format!(
                    "\ncheck the token (--token or {}); a lost admin token is replaced with `gantry server admin-token --data-dir DIR`",
                    env::GANTRY_TOKEN
                )
            } else {
                String::new()
            };
            return Err(Failure::Failed(format!(
                "the server answered {status} to {url}: {detail}{hint}"
            )));
        }
        Ok((url, headers, bytes.to_vec()))
    }
}

/// Runs one client command to completion on a small runtime.
pub(crate) fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Failed(format!("cannot start the async runtime: {e}")))?;
    Ok(runtime.block_on(future))
}

/// URL path segment encoding (GitLab addresses projects by id or URL-encoded path).
pub(crate) fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte))
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// Reports a client command's failure on stderr and picks the exit code.
pub(crate) fn exit_code(result: Result<(), Failure>) -> u8 {
    crate::exit::status(result.map(|()| crate::exit::OK))
}
