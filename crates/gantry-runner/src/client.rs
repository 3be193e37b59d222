//! The runner's side of the GitLab Runner API (`shared/spec/runner-api.md`): one HTTP
//! client, every call the runner makes, each answer classified with the protocol crate's
//! decision functions. Works against our coordinator and against GitLab-compatible
//! servers.
//!
//! Every call goes through `Client::send`, which tells the client's `ApiObserver`, when it
//! has one (the runner's metrics, `PollOptions::api_observer`), the endpoint and the
//! status.

use std::sync::Arc;
use std::time::Duration;

use crate::config::TlsFiles;

use gantry_protocol::{
    ArtifactUploadParams, JobRequest, JobResponse, PatchTraceParams, PatchTraceResponse,
    RegisterRunnerRequest, RegisterRunnerResponse, RunnerTokenRequest, UnregisterManagerRequest,
    UpdateJobRequest, UpdateJobResponse, VerifyRunnerRequest, VerifyRunnerResponse, VersionInfo,
    header, long_poll, parse_job_response,
};

/// Why a call could not be made or was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reach the server at {url}: {}", causes(.source))]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{what}: the server answered {status}: {body}")]
    Refused {
        what: &'static str,
        status: u16,
        body: String,
    },
    #[error("{0}")]
    Protocol(#[from] gantry_protocol::ProtocolError),
    #[error("build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    #[error("{what} `{}`: {source}", path.display())]
    File {
        what: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("use {key} `{}`: {reason}", path.display())]
    Tls {
        key: &'static str,
        path: std::path::PathBuf,
        reason: String,
    },
}

/// What went wrong, down to the root cause: reqwest's own message ("error sending
/// request for url …") hides it (`Connection refused`, a DNS failure, a TLS error).
fn causes(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl ClientError {
    /// Errors worth retrying with back-off (network trouble, server errors, throttling).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Refused { status, .. } => {
                *status >= 500 || *status == 429 || *status == 409
            }
            ClientError::Protocol(_)
            | ClientError::Build(_)
            | ClientError::File { .. }
            | ClientError::Tls { .. } => false,
        }
    }
}

/// An answer to `PUT /jobs/:id`: the HTTP status and what it means (§4.2). The status
/// matters for final updates: GitLab answers an applied `state=failed` with `200` and
/// `Job-Status: failed`, which [`UpdateJobResponse::classify`] reads as "abort" (right
/// for a job still running, but here it means "done").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateAnswer {
    /// HTTP status.
    pub status: u16,
    /// The classified answer.
    pub response: UpdateJobResponse,
}

/// Answer to a job request.
#[derive(Debug)]
pub enum JobRequestOutcome {
    /// `201`: a job.
    Job(Box<JobResponse>),
    /// `204`: no job now; echo `last_update` in the next request.
    NoJob { last_update: Option<String> },
    /// `201`, but the payload does not decode. The job is assigned to this runner all the
    /// same: its `id` and `token`, when they can be read, let the runner fail it with the
    /// reason instead of leaving it to time out.
    Undecodable {
        /// The job id, if readable.
        id: Option<i64>,
        /// The job token, if readable.
        token: Option<String>,
        /// What is wrong, naming the JSON path.
        error: gantry_protocol::ProtocolError,
    },
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    info: VersionInfo,
    observer: Option<ApiObserver>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// Told of every request a [`Client`] sends: its endpoint (gitlab-runner's names:
/// `request_job`, `update_job`, `patch_trace`, …) and the answer's HTTP status, `None` when
/// no answer came (the network). The runner's metrics count them.
pub type ApiObserver = Arc<dyn Fn(&'static str, Option<u16>) + Send + Sync>;

fn header_str(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Whether `url` is plain `http` to a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`).
fn plain_loopback(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default();
    url.scheme() == "http"
        && (host.eq_ignore_ascii_case("localhost")
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()))
}

impl Client {
    /// A client for the server at `url` (`https://gitlab.example.com` or with a trailing
    /// `/`; the `/api/v4` prefix is added here).
    pub fn new(url: &str, info: VersionInfo) -> Result<Self, ClientError> {
        Self::with_tls(url, info, &TlsFiles::default())
    }

    /// [`Client::new`] trusting `tls.ca_file`'s certificates besides the system's roots
    /// and showing `tls.cert_file` + `tls.key_file` to a server that asks for a client
    /// certificate (gitlab-runner's `tls-ca-file`, `tls-cert-file`, `tls-key-file`).
    pub fn with_tls(url: &str, info: VersionInfo, tls: &TlsFiles) -> Result<Self, ClientError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(long_poll::RUNNER_RESPONSE_HEADER_TIMEOUT)
            .user_agent(format!("gantry-runner {}", env!("CARGO_PKG_VERSION")));
        if plain_loopback(url) {
            // No certificate is ever checked on plain HTTP to this machine: loading the
            // system's roots (every file of /etc/ssl/certs) took ≈ 5 ms of each
            // `gantry run`. A redirect to an `https` URL then fails verification.
            builder = builder.tls_built_in_root_certs(false);
        }
        let read = |key: &'static str, path: &std::path::Path| {
            std::fs::read(path).map_err(|error| ClientError::Tls {
                key,
                path: path.to_owned(),
                reason: error.to_string(),
            })
        };
        if let Some(path) = &tls.ca_file {
            let pem = read("tls-ca-file", path)?;
            let certificates =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|error| ClientError::Tls {
                    key: "tls-ca-file",
                    path: path.clone(),
                    reason: format!("not PEM certificates: {error}"),
                })?;
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
            let mut pem = read("tls-cert-file", cert)?;
            pem.push(b'\n');
            pem.extend(read("tls-key-file", key)?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|error| ClientError::Tls {
                key: "tls-cert-file",
                path: cert.clone(),
                reason: format!("not a PEM certificate with its private key: {error}"),
            })?;
            builder = builder.identity(identity);
        }
        let http = builder.build().map_err(ClientError::Build)?;
        Ok(Self {
            http,
            base: format!("{}/api/v4", url.trim_end_matches('/')),
            info,
            observer: None,
        })
    }

    /// This client, telling `observer` of every request it sends.
    #[must_use]
    pub fn observed_by(mut self, observer: ApiObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Sends `request` (to `endpoint`, for the observer).
    async fn send(
        &self,
        endpoint: &'static str,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let sent = request.send().await;
        if let Some(observer) = &self.observer {
            observer(endpoint, sent.as_ref().ok().map(|r| r.status().as_u16()));
        }
        sent.map_err(|e| self.unreachable(e))
    }

    /// The `info` object this client sends (§2.8).
    pub fn info(&self) -> &VersionInfo {
        &self.info
    }

    /// The API base, `<server>/api/v4`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn unreachable(&self, e: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.base.clone(),
            source: e,
        }
    }

    async fn refused(what: &'static str, r: reqwest::Response) -> ClientError {
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        ClientError::Refused {
            what,
            status,
            body: body.chars().take(500).collect(),
        }
    }

    /// `POST /runners` with a (legacy) registration token.
    pub async fn register(
        &self,
        mut req: RegisterRunnerRequest,
    ) -> Result<RegisterRunnerResponse, ClientError> {
        req.info = self.info.clone();
        let r = self
            .send(
                "register_runner",
                self.http.post(self.url("/runners")).json(&req),
            )
            .await?;
        if r.status().as_u16() != 201 {
            return Err(Self::refused("register the runner", r).await);
        }
        let bytes = r.bytes().await.map_err(|e| self.unreachable(e))?;
        Ok(gantry_protocol::parse_json(&bytes)?)
    }

    /// `POST /runners/verify`: is this runner token valid?
    pub async fn verify(
        &self,
        token: &str,
        system_id: &str,
    ) -> Result<VerifyRunnerResponse, ClientError> {
        let req = VerifyRunnerRequest {
            token: token.to_owned(),
            system_id: system_id.to_owned(),
            info: self.info.clone(),
        };
        let r = self
            .send(
                "verify_runner",
                self.http.post(self.url("/runners/verify")).json(&req),
            )
            .await?;
        if r.status().as_u16() != 200 {
            return Err(Self::refused("verify the runner token", r).await);
        }
        let bytes = r.bytes().await.map_err(|e| self.unreachable(e))?;
        if bytes.is_empty() {
            return Ok(VerifyRunnerResponse::default());
        }
        Ok(gantry_protocol::parse_json(&bytes)?)
    }

    /// `DELETE /runners`: remove this runner from the server.
    pub async fn unregister(&self, token: &str) -> Result<(), ClientError> {
        let req = RunnerTokenRequest {
            token: token.to_owned(),
        };
        let r = self
            .send(
                "unregister_runner",
                self.http.delete(self.url("/runners")).json(&req),
            )
            .await?;
        if r.status().as_u16() != 204 {
            return Err(Self::refused("unregister the runner", r).await);
        }
        Ok(())
    }

    /// `DELETE /runners/managers`: remove only this runner manager (`system_id`), the
    /// unregistration of `glrt-` runners, which belong to the UI/API (§2.5).
    pub async fn unregister_manager(
        &self,
        token: &str,
        system_id: &str,
    ) -> Result<(), ClientError> {
        let req = UnregisterManagerRequest {
            token: token.to_owned(),
            system_id: system_id.to_owned(),
        };
        let r = self
            .send(
                "unregister_runner_manager",
                self.http.delete(self.url("/runners/managers")).json(&req),
            )
            .await?;
        if r.status().as_u16() != 204 {
            return Err(Self::refused("unregister the runner manager", r).await);
        }
        Ok(())
    }

    /// `POST /jobs/request`: long-polls for a job (§3).
    pub async fn request_job(
        &self,
        token: &str,
        system_id: &str,
        last_update: Option<&str>,
    ) -> Result<JobRequestOutcome, ClientError> {
        let req = JobRequest {
            info: self.info.clone(),
            token: token.to_owned(),
            system_id: system_id.to_owned(),
            last_update: last_update.unwrap_or_default().to_owned(),
            session: None,
        };
        let r = self
            .send(
                "request_job",
                self.http.post(self.url("/jobs/request")).json(&req),
            )
            .await?;
        match r.status().as_u16() {
            201 => {
                let bytes = r.bytes().await.map_err(|e| self.unreachable(e))?;
                match parse_job_response(&bytes) {
                    Ok(job) => Ok(JobRequestOutcome::Job(Box::new(job))),
                    Err(error) => {
                        let value: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
                        let field = |name: &str| value.as_ref().and_then(|v| v.get(name).cloned());
                        Ok(JobRequestOutcome::Undecodable {
                            id: field("id").and_then(|v| v.as_i64()),
                            token: field("token").and_then(|v| v.as_str().map(str::to_owned)),
                            error,
                        })
                    }
                }
            }
            204 => Ok(JobRequestOutcome::NoJob {
                last_update: header_str(&r, header::LAST_UPDATE),
            }),
            _ => Err(Self::refused("request a job", r).await),
        }
    }

    /// `PUT /jobs/:id`: state update; the answer is classified (§4.2).
    pub async fn update_job(
        &self,
        job_id: i64,
        req: &UpdateJobRequest,
    ) -> Result<UpdateAnswer, ClientError> {
        let r = self
            .send(
                "update_job",
                self.http
                    .put(self.url(&format!("/jobs/{job_id}")))
                    .json(req),
            )
            .await?;
        let status = r.status().as_u16();
        Ok(UpdateAnswer {
            status,
            response: UpdateJobResponse::classify(
                status,
                header_str(&r, header::JOB_STATUS).as_deref(),
                header_str(&r, header::TRACE_UPDATE_INTERVAL).as_deref(),
            ),
        })
    }

    /// `PATCH /jobs/:id/trace?debug_trace=…`: append `data` at byte `start` (§5).
    pub async fn patch_trace(
        &self,
        job_id: i64,
        job_token: &str,
        params: PatchTraceParams,
        start: u64,
        data: Vec<u8>,
    ) -> Result<PatchTraceResponse, ClientError> {
        let len = u64::try_from(data.len()).unwrap_or(u64::MAX);
        let range = gantry_protocol::ContentRange::for_chunk(start, len)
            .map(|r| r.to_string())
            .unwrap_or_else(|| format!("{start}-{start}"));
        let r = self
            .send(
                "patch_trace",
                self.http
                    .patch(format!(
                        "{}?{}",
                        self.url(&format!("/jobs/{job_id}/trace")),
                        params.to_query()
                    ))
                    .header(header::JOB_TOKEN, job_token)
                    .header(header::CONTENT_RANGE, range)
                    .header("content-type", "text/plain")
                    .body(data),
            )
            .await?;
        Ok(PatchTraceResponse::classify(
            r.status().as_u16(),
            header_str(&r, header::JOB_STATUS).as_deref(),
            header_str(&r, header::RANGE).as_deref(),
            header_str(&r, header::TRACE_UPDATE_INTERVAL).as_deref(),
        ))
    }

    /// `POST /jobs/:id/artifacts` (multipart, §6.2). The parameters go in the query, as
    /// gitlab-runner sends them; `artifact_type` and `artifact_format` are repeated as form
    /// fields before the file, as gitlab-runner-rs sends them (Rails merges both, §6.2),
    /// so servers that read only one of the two places get them too. `expire_in` stays in
    /// the query only. The file at `path` is streamed, never read whole into memory.
    pub async fn upload_artifact(
        &self,
        job_id: i64,
        job_token: &str,
        params: &ArtifactUploadParams,
        filename: &str,
        path: &std::path::Path,
    ) -> Result<(), ClientError> {
        let file_error = |source| ClientError::File {
            what: "read the archive",
            path: path.to_owned(),
            source,
        };
        let file = tokio::fs::File::open(path).await.map_err(file_error)?;
        let len = file.metadata().await.map_err(file_error)?.len();
        let part =
            reqwest::multipart::Part::stream_with_length(file, len).file_name(filename.to_owned());
        let mut form = reqwest::multipart::Form::new();
        if let Some(kind) = params.artifact_type {
            form = form.text("artifact_type", kind.as_str());
        }
        if let Some(format) = params.artifact_format {
            form = form.text("artifact_format", format.as_str());
        }
        let form = form.part("file", part);
        let r = self
            .send(
                "upload_artifacts",
                self.http
                    .post(format!(
                        "{}?{}",
                        self.url(&format!("/jobs/{job_id}/artifacts")),
                        params.to_query()
                    ))
                    .header(header::JOB_TOKEN, job_token)
                    .multipart(form),
            )
            .await?;
        if r.status().as_u16() != 201 {
            return Err(Self::refused("upload artifacts", r).await);
        }
        Ok(())
    }

    /// `GET /jobs/:id/artifacts` with the downloading job's token (§6.4), streamed into a
    /// new file at `dest` (never held whole in memory); its size. A failed download
    /// leaves no file.
    pub async fn download_artifact(
        &self,
        job_id: i64,
        job_token: &str,
        dest: &std::path::Path,
    ) -> Result<u64, ClientError> {
        let r = self
            .send(
                "download_artifacts",
                self.http
                    .get(self.url(&format!("/jobs/{job_id}/artifacts")))
                    .header(header::JOB_TOKEN, job_token),
            )
            .await?;
        if r.status().as_u16() != 200 {
            return Err(Self::refused("download artifacts", r).await);
        }
        let written = self.save_body(r, dest).await;
        if written.is_err() {
            let _ = tokio::fs::remove_file(dest).await;
        }
        written
    }

    async fn save_body(
        &self,
        mut r: reqwest::Response,
        dest: &std::path::Path,
    ) -> Result<u64, ClientError> {
        use tokio::io::AsyncWriteExt as _;
        let file_error = |source| ClientError::File {
            what: "write the archive",
            path: dest.to_owned(),
            source,
        };
        let mut out = tokio::fs::File::create(dest).await.map_err(file_error)?;
        let mut size = 0u64;
        while let Some(chunk) = r.chunk().await.map_err(|e| self.unreachable(e))? {
            out.write_all(&chunk).await.map_err(file_error)?;
            size += chunk.len() as u64;
        }
        out.flush().await.map_err(file_error)?;
        Ok(size)
    }
}

#[cfg(test)]
mod tests {
    use super::plain_loopback;

    #[test]
    fn only_plain_http_to_this_machine_skips_the_system_roots() {
        for url in [
            "http://127.0.0.1:8080",
            "http://127.1.2.3/",
            "http://localhost:3000",
            "http://LOCALHOST",
            "http://[::1]:9000/gitlab",
        ] {
            assert!(plain_loopback(url), "{url}");
        }
        for url in [
            "https://127.0.0.1:8080",
            "https://localhost",
            "http://gitlab.example.com",
            "http://10.0.0.1",
            "http://localhost.example.com",
            "http://[::2]",
            "not a url",
        ] {
            assert!(!plain_loopback(url), "{url}");
        }
    }
}
