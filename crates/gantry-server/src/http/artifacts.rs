//! Artifacts on the runner API (`runner-api.md` §6): `POST /api/v4/jobs/:id/artifacts`
//! (multipart, one `file` part; `artifact_type`, `artifact_format`, `expire_in` from the
//! query or the form) and `GET /api/v4/jobs/:id/artifacts` (a dependent job downloads
//! the archive with its own token).

use std::str::FromStr;

use axum::Extension;
use axum::extract::multipart::{MultipartError, MultipartRejection};
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_protocol::{ArtifactFormat, ArtifactType, ArtifactUploadParams};
use serde::Deserialize;

use crate::coordinator::{Artifact, ArtifactBlob, CoordinatorError, StageError, StagedUpload};

use super::edge::StalledBody;
use super::error::{ApiError, ApiResult};
use super::extract;
use super::gate::VerifiedJob;
use super::{AppState, auth};

/// Parameters GitLab reads from the query string (the runner) or the form (others).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ArtifactQuery {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    artifact_type: Option<String>,
    #[serde(default)]
    artifact_format: Option<String>,
    #[serde(default)]
    expire_in: Option<String>,
}

impl ArtifactQuery {
    fn set(&mut self, name: &str, value: String) {
        let slot = match name {
            "token" => &mut self.token,
            "artifact_type" => &mut self.artifact_type,
            "artifact_format" => &mut self.artifact_format,
            "expire_in" => &mut self.expire_in,
            _ => return,
        };
        // The query string wins over the form, as it does in Grape's merge.
        if slot.as_deref().is_none_or(str::is_empty) {
            *slot = Some(value);
        }
    }

    fn params(&self) -> Result<ArtifactUploadParams, ApiError> {
        fn parse<T: FromStr<Err = gantry_protocol::ProtocolError>>(
            value: Option<&str>,
        ) -> Result<Option<T>, ApiError> {
            match value.map(str::trim).filter(|v| !v.is_empty()) {
                Some(value) => value
                    .parse()
                    .map(Some)
                    .map_err(|e: gantry_protocol::ProtocolError| ApiError::param(e.to_string())),
                None => Ok(None),
            }
        }
        Ok(ArtifactUploadParams {
            artifact_type: parse::<ArtifactType>(self.artifact_type.as_deref())?,
            artifact_format: parse::<ArtifactFormat>(self.artifact_format.as_deref())?,
            expire_in: self.expire_in.clone().filter(|e| !e.trim().is_empty()),
        })
    }
}

fn multipart_error(status: StatusCode, text: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large("Request Entity Too Large - the artifact exceeds the size limit")
    } else {
        ApiError::message(status, text)
    }
}

/// An upload whose body failed midway: `408` when the client stalled, `413` past the
/// limit, else `400` (axum calls a body that stopped arriving a `500`; it is the
/// client's doing, not the server's).
fn upload_error(error: &MultipartError) -> ApiError {
    if let Some(stalled) = StalledBody::in_chain(error) {
        return stalled.answer();
    }
    let status = error.status();
    if status.is_server_error() {
        return ApiError::bad_request(format!("the upload could not be read: {error}"));
    }
    multipart_error(status, error.body_text())
}

/// `POST /api/v4/jobs/:id/artifacts` → `201`; `400` bad parameters or type/format
/// mismatch, `403` bad token or job not running, `413` too large.
pub(crate) async fn upload(
    State(state): State<AppState>,
    Path(job_id): Path<i64>,
    Query(mut params): Query<ArtifactQuery>,
    verified: Option<Extension<VerifiedJob>>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Response> {
    // The token comes with the headers or the query, and is checked before a byte of
    // the body is read or staged: GitLab's Workhorse authorizes an upload the same way
    // (its `…/artifacts/authorize` call carries the request's headers and query, not its
    // body), so a token only in the form is refused there too.
    let token = extract::job_token(params.token.as_deref(), &headers);
    let verified = verified.as_ref().map(|Extension(v)| v);
    auth::require_job(&state.coordinator, job_id, token, verified).await?;
    let mut multipart = multipart
        .map_err(|rejection| multipart_error(rejection.status(), rejection.body_text()))?;
    let mut file: Option<(String, StagedUpload)> = None;
    loop {
        let field = multipart.next_field().await.map_err(|e| upload_error(&e))?;
        let Some(mut field) = field else { break };
        let name = field.name().unwrap_or("").to_owned();
        if name == gantry_protocol::artifact::UPLOAD_FILE_FIELD {
            if file.is_some() {
                return Err(ApiError::param("file is given more than once"));
            }
            let filename = field.file_name().unwrap_or("").to_owned();
            // Written to the blob store's staging directory as it arrives, never held
            // whole in memory.
            let mut staged = state.coordinator.artifacts().stage_artifact().await?;
            while let Some(chunk) = field.chunk().await.map_err(|e| upload_error(&e))? {
                match staged.write(&chunk).await {
                    Ok(()) => {}
                    Err(StageError::TooLarge(limit)) => {
                        // Read the rest (the route's body limit bounds it) so the client
                        // hears the answer.
                        while let Ok(Some(_)) = field.chunk().await {}
                        while let Ok(Some(mut rest)) = multipart.next_field().await {
                            while let Ok(Some(_)) = rest.chunk().await {}
                        }
                        return Err(ApiError::too_large(format!(
                            "Request Entity Too Large - the artifact exceeds the size limit of {limit} bytes"
                        )));
                    }
                    Err(StageError::Io(e)) => return Err(CoordinatorError::Io(e).into()),
                }
            }
            file = Some((filename, staged));
        } else {
            let value = field.text().await.map_err(|e| upload_error(&e))?;
            params.set(&name, value);
        }
    }
    let upload = params.params()?;
    let Some((filename, staged)) = file else {
        return Err(ApiError::param("file is missing"));
    };
    match state
        .coordinator
        .upload_staged_artifact(job_id, upload, &filename, staged)
        .await
    {
        Ok(()) => Ok((
            StatusCode::CREATED,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            "201",
        )
            .into_response()),
        Err(CoordinatorError::Forbidden(why)) => {
            Err(auth::forbidden_with_status(&state.coordinator, job_id, why).await)
        }
        Err(other) => Err(other.into()),
    }
}

/// `GET /api/v4/jobs/:id/artifacts` (§6.4): the archive of job `:id`, for a running job
/// of the same project (its token in `JOB-TOKEN` or `token`) or of a project whose job
/// names it with `needs:project` and that `:id`'s project's job token allowlist lets in
/// (`Coordinator::download_artifact`). `direct_download` is
/// accepted and ignored: the file is always served here.
pub(crate) async fn download(
    State(state): State<AppState>,
    Path(job_id): Path<i64>,
    Query(params): Query<ArtifactQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let Some(token) = extract::job_token(params.token.as_deref(), &headers) else {
        return Err(ApiError::forbidden_because("the job token is missing"));
    };
    let (artifact, blob) = state.coordinator.download_artifact(job_id, token).await?;
    Ok(file_response(&artifact, blob))
}

/// An artifact as a download, streamed from its blob.
pub(crate) fn file_response(artifact: &Artifact, blob: ArtifactBlob) -> Response {
    named_file_response(&artifact.filename, blob)
}

/// A file named `filename` as a download, streamed from `blob`.
pub(crate) fn named_file_response(filename: &str, blob: ArtifactBlob) -> Response {
    let filename: String = filename
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (
        StatusCode::OK,
        [
            (
                axum::http::header::CONTENT_TYPE,
                "application/octet-stream".to_owned(),
            ),
            (
                axum::http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
            (axum::http::header::CONTENT_LENGTH, blob.len.to_string()),
        ],
        super::file_body(blob.file, blob.len),
    )
        .into_response()
}
