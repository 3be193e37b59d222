//! Error answers: every failure is JSON with `Content-Type: application/json`
//! (`runner-api.md` §0.2), `{"message": "403 Forbidden"}` in Grape's style, or
//! `{"error": "..."}` for a bad parameter. Client mistakes are 4xx; a 5xx means the
//! server itself failed (database, disk, git), and says so without leaking details.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use gantry_protocol::ErrorResponse;
use gantry_protocol::header;

use crate::coordinator::CoordinatorError;

/// A failed request, ready to be sent (boxed: handlers pass it around in `Result`s).
#[derive(Debug)]
pub(crate) struct ApiError(Box<Parts>);

#[derive(Debug)]
struct Parts {
    status: StatusCode,
    body: ErrorResponse,
    headers: HeaderMap,
}

impl ApiError {
    /// `{"message": "<code> <text>"}`, GitLab's form, e.g. `403 Forbidden`.
    pub(crate) fn message(status: StatusCode, text: impl AsRef<str>) -> Self {
        let text = text.as_ref();
        let message = if text.is_empty() {
            format!(
                "{} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            )
        } else {
            format!("{} {}", status.as_u16(), text)
        };
        Self(Box::new(Parts {
            status,
            body: ErrorResponse::message(message.trim_end()),
            headers: HeaderMap::new(),
        }))
    }

    /// `{"error": "<text>"}`: a parameter error (GitLab's Grape validation form).
    pub(crate) fn param(text: impl Into<String>) -> Self {
        Self(Box::new(Parts {
            status: StatusCode::BAD_REQUEST,
            body: ErrorResponse {
                message: None,
                error: Some(text.into()),
            },
            headers: HeaderMap::new(),
        }))
    }

    /// `400 Bad Request` with a message.
    pub(crate) fn bad_request(text: impl AsRef<str>) -> Self {
        Self::message(
            StatusCode::BAD_REQUEST,
            format!("Bad request - {}", text.as_ref()),
        )
    }

    /// `401 Unauthorized` (user API without a valid token).
    pub(crate) fn unauthorized() -> Self {
        Self::message(StatusCode::UNAUTHORIZED, "Unauthorized")
    }

    /// `403 Forbidden`.
    pub(crate) fn forbidden() -> Self {
        Self::message(StatusCode::FORBIDDEN, "Forbidden")
    }

    /// `403 Forbidden - <why>`.
    pub(crate) fn forbidden_because(why: impl AsRef<str>) -> Self {
        Self::message(
            StatusCode::FORBIDDEN,
            format!("Forbidden - {}", why.as_ref()),
        )
    }

    /// `404 <What> Not Found`, e.g. `404 Project Not Found`.
    pub(crate) fn not_found(what: &str) -> Self {
        Self::message(StatusCode::NOT_FOUND, format!("{what} Not Found"))
    }

    /// `409 Conflict`.
    pub(crate) fn conflict(text: impl AsRef<str>) -> Self {
        Self::message(StatusCode::CONFLICT, text)
    }

    /// `413 Request Entity Too Large`.
    pub(crate) fn too_large(text: impl AsRef<str>) -> Self {
        Self::message(StatusCode::PAYLOAD_TOO_LARGE, text)
    }

    /// `500 Internal Server Error`; the cause goes to stderr, not to the client.
    pub(crate) fn internal(cause: &dyn std::fmt::Display) -> Self {
        eprintln!("gantry server: internal error: {cause}");
        Self::message(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
    }

    /// Adds a response header (e.g. `Job-Status`, `Range`).
    pub(crate) fn with_header(mut self, name: &'static str, value: impl AsRef<str>) -> Self {
        if let Ok(value) = HeaderValue::from_str(value.as_ref()) {
            self.0.headers.insert(HeaderName::from_static(name), value);
        }
        self
    }

    /// Adds `Job-Status: <status>` (§1.2, §4.2, §5.2).
    pub(crate) fn with_job_status(self, status: crate::processor::Status) -> Self {
        self.with_header(header::JOB_STATUS, status.as_str())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let Parts {
            status,
            body,
            headers,
        } = *self.0;
        let body = serde_json::to_vec(&body).unwrap_or_else(|_| b"{}".to_vec());
        let mut response = (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        response.headers_mut().extend(headers);
        response
    }
}

impl ApiError {
    /// A coordinator error where a failing `git` command means the client named a bad
    /// repository or ref (project and pipeline creation): `400`, not `500`.
    pub(crate) fn from_git_input(error: CoordinatorError) -> Self {
        match error {
            CoordinatorError::Git(why) => Self::bad_request(why),
            other => other.into(),
        }
    }
}

impl ApiError {
    /// A coordinator error of a pipeline creation: a failing `git` command there is the
    /// server's own (its mirror of the project, its disk), so `500`. `admin` callers are
    /// told the cause; others (a trigger token) only that the server failed, since the
    /// cause names the server's paths. Either way it goes to the server's log.
    pub(crate) fn from_creation(error: CoordinatorError, admin: bool) -> Self {
        match error {
            CoordinatorError::Git(cause) if admin => {
                eprintln!("gantry server: creating a pipeline failed: {cause}");
                Self::message(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Internal Server Error - no pipeline was created: {cause}"),
                )
            }
            other => other.into(),
        }
    }
}

impl From<CoordinatorError> for ApiError {
    fn from(error: CoordinatorError) -> Self {
        match error {
            CoordinatorError::NotFound(what) => Self::not_found(&capitalize(what)),
            CoordinatorError::Forbidden(why) => Self::forbidden_because(why),
            CoordinatorError::Invalid(why) | CoordinatorError::InvalidInputs(why) => {
                Self::bad_request(why)
            }
            CoordinatorError::UnknownJob(why) => Self::bad_request(why.to_string()),
            CoordinatorError::Conflict(why) => Self::conflict(why),
            CoordinatorError::TooLarge(why) => Self::too_large(why),
            CoordinatorError::RangeMismatch { size } => {
                Self::message(StatusCode::RANGE_NOT_SATISFIABLE, "Range Not Satisfiable")
                    .with_header(header::RANGE, format!("0-{size}"))
            }
            CoordinatorError::Git(_)
            | CoordinatorError::Store(_)
            | CoordinatorError::Io(_)
            | CoordinatorError::Batch(_) => Self::internal(&error),
        }
    }
}

impl From<crate::coordinator::SettingsError> for ApiError {
    fn from(error: crate::coordinator::SettingsError) -> Self {
        CoordinatorError::from(error).into()
    }
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Result of a handler.
pub(crate) type ApiResult<T> = Result<T, ApiError>;
