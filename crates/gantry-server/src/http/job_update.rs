//! What a runner sends about its job: `PUT /api/v4/jobs/:id` (status, §4) and
//! `PATCH /api/v4/jobs/:id/trace` (log, §5). Both need the job's token and answer with
//! `Job-Status`, so a canceled job is noticed on the next call.

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use gantry_protocol::update_interval::format_trace_update_interval;
use gantry_protocol::{TraceRange, UpdateJobRequest, header};
use serde::Deserialize;

use crate::coordinator::{AppendError, CoordinatorError, UpdateResult};

use super::edge::StalledBody;
use super::error::{ApiError, ApiResult};
use super::extract::{self, Body};
use super::gate::VerifiedJob;
use super::{AppState, MAX_TRACE_PATCH, auth};

/// `token` (and `debug_trace`) as query parameters.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TokenQuery {
    #[serde(default)]
    token: Option<String>,
}

fn with_headers(mut response: Response, headers: &[(&'static str, String)]) -> Response {
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
    }
    response
}

/// A JSON body of just the status code, as GitLab's `200` / `202` bodies read.
fn status_body(status: StatusCode) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        status.as_u16().to_string(),
    )
        .into_response()
}

/// `PUT /api/v4/jobs/:id` (§4): `200` applied, `202` final state waiting for the trace
/// (re-send after `X-GitLab-Trace-Update-Interval`), `403` + `Job-Status` when the job no
/// longer runs.
pub(crate) async fn update(
    State(state): State<AppState>,
    Path(job_id): Path<i64>,
    verified: Option<Extension<VerifiedJob>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<Response> {
    let mut req: UpdateJobRequest = extract::params(&headers, &body).await?;
    let token = extract::job_token(Some(req.token.as_str()), &headers);
    let verified = verified.as_ref().map(|Extension(v)| v);
    // An update with its token in the body is checked by its own write where that is
    // safe; one whose token the gate looked up already, or that was not, goes the checked
    // way.
    if verified.is_none()
        && let Some(token) = token
        && let Some(result) = state
            .coordinator
            .update_job_by_token(job_id, token, &req)
            .await?
    {
        return Ok(answer(result));
    }
    let job = auth::require_job(&state.coordinator, job_id, token, verified).await?;
    if let Some(full) = req.trace.take() {
        extend_trace(&state, job_id, full.into_bytes()).await?;
    }
    let result = match state.coordinator.update_job_as(job.row, req).await {
        Ok(result) => result,
        Err(CoordinatorError::Forbidden(why)) => {
            return Err(auth::forbidden_with_status(&state.coordinator, job_id, why).await);
        }
        Err(other) => return Err(other.into()),
    };
    Ok(answer(result))
}

/// The answer to an applied (`200`) or deferred (`202`) update, with `Job-Status` and
/// the retry interval of a deferred one.
fn answer(result: UpdateResult) -> Response {
    let mut headers = vec![(header::JOB_STATUS, result.job_status.as_str().to_owned())];
    if let Some(interval) = result.update_interval {
        headers.push((
            header::TRACE_UPDATE_INTERVAL,
            format_trace_update_interval(interval),
        ));
    }
    let status = if result.accepted {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    with_headers(status_body(status), &headers)
}

/// The whole log a runner of GitLab's 13.x era sends with `PUT /jobs/:id` (`trace`): the
/// part past the stored log is appended when the stored log is its beginning; otherwise
/// it is ignored, as is a log a concurrent patch has just extended (a log is never
/// rewritten).
async fn extend_trace(state: &AppState, job_id: i64, full: Vec<u8>) -> Result<(), ApiError> {
    let stored = match state.coordinator.traces().trace_source(job_id).await? {
        crate::coordinator::TraceSource::Bytes(bytes) => bytes,
        crate::coordinator::TraceSource::File { file, len } => {
            if usize::try_from(len).is_ok_and(|len| len >= full.len()) {
                return Ok(());
            }
            tokio::task::spawn_blocking(move || {
                use std::io::Read as _;
                let mut bytes = Vec::new();
                file.take(len).read_to_end(&mut bytes).map(|_| bytes)
            })
            .await
            .map_err(|e| ApiError::internal(&format!("read the log of job {job_id}: {e}")))?
            .map_err(|e| ApiError::internal(&format!("read the log of job {job_id}: {e}")))?
        }
    };
    if full.len() <= stored.len() || !full.starts_with(&stored) {
        return Ok(());
    }
    let start = stored.len() as u64;
    let rest = Bytes::from(full).slice(stored.len()..);
    let length = rest.len() as u64;
    let appended = match state
        .coordinator
        .begin_trace_append(job_id, start, Some(length))
        .await
    {
        Ok(append) => append
            .write(futures_util::stream::once(async move {
                Ok::<_, std::convert::Infallible>(rest)
            }))
            .await
            .map_err(AppendError::into_refusal),
        Err(e) => Err(e),
    };
    match appended {
        Ok(_) | Err(CoordinatorError::RangeMismatch { .. }) => Ok(()),
        Err(CoordinatorError::Forbidden(why)) => {
            Err(auth::forbidden_with_status(&state.coordinator, job_id, why).await)
        }
        Err(other) => Err(other.into()),
    }
}

/// `PATCH /api/v4/jobs/:id/trace` (§5): append at `Content-Range` start, which must be
/// the stored length (else `416` with `Range: 0-<length>`); `202` with `Range`,
/// `Job-Status` and `X-GitLab-Trace-Update-Interval`. Past the trace limit the job
/// fails and the answer is `403`; a body over [`MAX_TRACE_PATCH`] is `413`.
///
/// The patch is checked before its body is read, which is then written to the log as it
/// arrives (see `coordinator::traces`); a refused patch's body is still read (up to the limit
/// and [`super::OVERSIZE_DRAIN`] more) so the runner gets the answer, not a reset connection.
pub(crate) async fn patch_trace(
    State(state): State<AppState>,
    Path(job_id): Path<i64>,
    Query(query): Query<TokenQuery>,
    verified: Option<Extension<VerifiedJob>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let mut body = Some(body);
    let token = query.token.as_deref();
    let verified = verified.as_ref().map(|Extension(v)| v);
    let answer = append_patch(&state, job_id, (token, verified), &headers, &mut body).await;
    if let Some(unread) = body {
        drain(unread).await;
    }
    answer
}

async fn append_patch(
    state: &AppState,
    job_id: i64,
    (token, verified): (Option<&str>, Option<&VerifiedJob>),
    headers: &HeaderMap,
    body: &mut Option<axum::body::Body>,
) -> ApiResult<Response> {
    let too_large = || ApiError::too_large("Request Entity Too Large");
    let length = content_length(headers)?;
    if length.is_some_and(|length| length > MAX_TRACE_PATCH as u64) {
        return Err(too_large());
    }
    let token = extract::job_token(token, headers);
    let job = auth::require_job(&state.coordinator, job_id, token, verified).await?;
    let start = content_range_start(headers)?;
    let appended = match state
        .coordinator
        .begin_checked_trace_append(job_id, job.row.status, start, length)
        .await
    {
        Ok(append) => match append.write(limited(body.take())).await {
            Ok(size) => Ok(size),
            Err(AppendError::Refused(refused)) => Err(refused),
            Err(AppendError::Body(PatchBodyError::TooLarge)) => return Err(too_large()),
            Err(AppendError::Body(PatchBodyError::Stalled(answer))) => return Err(answer),
            Err(AppendError::Body(PatchBodyError::Unreadable(why))) => {
                Err(CoordinatorError::Invalid(format!(
                    "append to the trace of job {job_id}: the patch could not be read: {why}"
                )))
            }
        },
        Err(e) => Err(e),
    };
    let size = match appended {
        Ok(size) => size,
        Err(CoordinatorError::Forbidden(why)) => {
            return Err(auth::forbidden_with_status(&state.coordinator, job_id, why).await);
        }
        Err(CoordinatorError::RangeMismatch { size }) => {
            return Err(ApiError::message(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "Range Not Satisfiable",
            )
            .with_header(header::RANGE, TraceRange { length: size }.to_string())
            .with_job_status(job.row.status));
        }
        Err(other) => return Err(other.into()),
    };
    let interval = state.trace_update_interval(job_id);
    Ok(with_headers(
        status_body(StatusCode::ACCEPTED),
        &[
            (header::JOB_STATUS, job.row.status.as_str().to_owned()),
            (header::RANGE, TraceRange { length: size }.to_string()),
            (
                header::TRACE_UPDATE_INTERVAL,
                format_trace_update_interval(interval),
            ),
        ],
    ))
}

/// How a trace patch's body failed, and so how the patch is answered.
#[derive(Debug)]
enum PatchBodyError {
    /// Past [`MAX_TRACE_PATCH`]: `413`.
    TooLarge,
    /// The client stopped sending ([`StalledBody`]): its `408`.
    Stalled(ApiError),
    /// The body could not be read (why): `400`.
    Unreadable(String),
}

/// The body's frames, ending with [`PatchBodyError::TooLarge`] past [`MAX_TRACE_PATCH`]
/// or with the body's own error. Before `TooLarge` the rest of the body is read and
/// dropped (up to [`super::OVERSIZE_DRAIN`] more), as [`drain`] does for a refused
/// patch: a chunked patch (no `Content-Length` to refuse it early) past the limit gets
/// its `413`, not a reset.
fn limited(
    body: Option<axum::body::Body>,
) -> impl futures_util::Stream<Item = Result<Bytes, PatchBodyError>> + Send + 'static {
    let frames = body.unwrap_or_default().into_data_stream();
    futures_util::stream::unfold(Some((frames, 0usize)), move |state| async move {
        let (mut frames, seen) = state?;
        let frame = match frames.next().await? {
            Ok(frame) => frame,
            Err(e) => {
                let error = match StalledBody::in_chain(&e) {
                    Some(stall) => PatchBodyError::Stalled(stall.answer()),
                    None => PatchBodyError::Unreadable(e.to_string()),
                };
                return Some((Err(error), None));
            }
        };
        let seen = seen.saturating_add(frame.len());
        if seen <= MAX_TRACE_PATCH {
            return Some((Ok(frame), Some((frames, seen))));
        }
        drain_frames(&mut frames, seen).await;
        Some((Err(PatchBodyError::TooLarge), None))
    })
}

/// Reads and drops what is left of a body, up to [`MAX_TRACE_PATCH`] +
/// [`super::OVERSIZE_DRAIN`] bytes, so a client still sending an oversized patch hears the
/// answer rather than a broken pipe.
async fn drain(body: axum::body::Body) {
    drain_frames(&mut body.into_data_stream(), 0).await;
}

/// Reads and drops frames until the body ends or `seen` passes [`MAX_TRACE_PATCH`] +
/// [`super::OVERSIZE_DRAIN`].
async fn drain_frames(frames: &mut axum::body::BodyDataStream, mut seen: usize) {
    let bound = MAX_TRACE_PATCH
        .saturating_add(usize::try_from(super::OVERSIZE_DRAIN).unwrap_or(usize::MAX));
    while seen <= bound {
        match frames.next().await {
            Some(Ok(frame)) => seen = seen.saturating_add(frame.len()),
            _ => break,
        }
    }
}

/// `Content-Length`, when sent; a value that is not a number is `400`.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(value) = headers.get(axum::http::header::CONTENT_LENGTH) else {
        return Ok(None);
    };
    let value = value.to_str().unwrap_or("").trim();
    value.parse().map(Some).map_err(|_| {
        ApiError::bad_request(format!("Content-Length `{value}` is not a number of bytes"))
    })
}

/// The start offset of `Content-Range: <start>-<end>`. Like Rails, only the start
/// matters (the end follows from the body); a missing or non-numeric start is `400`.
fn content_range_start(headers: &HeaderMap) -> Result<u64, ApiError> {
    let Some(value) = headers.get(header::CONTENT_RANGE) else {
        return Err(ApiError::message(
            StatusCode::BAD_REQUEST,
            "Missing header Content-Range",
        ));
    };
    let value = value.to_str().unwrap_or("").trim();
    let start = value
        .split_once('-')
        .map_or(value, |(start, _)| start)
        .trim();
    if start.is_empty() || !start.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::bad_request(format!(
            "Content-Range `{value}` is not `<start>-<end>` with byte offsets"
        )));
    }
    start.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "Content-Range `{value}`: the start offset is too large"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(range: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("content-range", range.parse().unwrap());
        h
    }

    #[test]
    fn range_start() {
        assert_eq!(content_range_start(&headers("0-1023")).ok(), Some(0));
        assert_eq!(content_range_start(&headers("1024-2047")).ok(), Some(1024));
        assert_eq!(content_range_start(&headers("17")).ok(), Some(17));
        assert!(content_range_start(&headers("bytes 0-1")).is_err());
        assert!(content_range_start(&headers("-5-6")).is_err());
        assert!(content_range_start(&headers("99999999999999999999999-1")).is_err());
        assert!(content_range_start(&HeaderMap::new()).is_err());
    }
}
