//! Reading requests without trusting them: bodies under a size limit, JSON decoded
//! with errors that name the field, tokens from the places GitLab reads them. Every
//! failure is an [`ApiError`] (a JSON 4xx), never axum's plain-text rejection.
//!
//! `params` reads a body for the user API and the Runner API alike: JSON, a URL-encoded
//! form or a multipart form with Rack's nested keys (`gantry_protocol::form`;
//! `multipart_pairs` also serves `triggers.rs`), typed parameters coerced as Grape does
//! (`gantry_protocol::grape`).

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;
use gantry_protocol::header;
use serde::de::DeserializeOwned;

use super::edge::StalledBody;
use super::error::ApiError;

/// Grape's coercion of typed parameters; see [`gantry_protocol::grape`].
pub(crate) use gantry_protocol::grape;

/// The raw request body, within the route's `DefaultBodyLimit`; an oversized body is a
/// JSON `413`.
pub(crate) struct Body(pub(crate) Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(request, state)
            .await
            .map(Body)
            .map_err(|rejection| {
                if let Some(stalled) = StalledBody::in_chain(&rejection) {
                    return stalled.answer();
                }
                let status = rejection.status();
                if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::too_large("Request Entity Too Large")
                } else {
                    ApiError::message(status, rejection.body_text())
                }
            })
    }
}

/// A body read with [`axum::body::to_bytes`] that failed: `408` when the client
/// stalled, `413` past `limit` bytes, else `400` (the client hung up or broke the
/// framing). `what` names the body (`git request`).
pub(crate) fn read_error(error: &axum::Error, what: &str, limit: usize) -> ApiError {
    if let Some(stalled) = StalledBody::in_chain(error) {
        return stalled.answer();
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return ApiError::too_large(format!(
                "Request Entity Too Large - the {what} is larger than {limit} bytes"
            ));
        }
        source = e.source();
    }
    ApiError::bad_request(format!("the {what} could not be read: {error}"))
}

/// Decodes a JSON body (§0.2: unknown fields ignored, `null` = zero value); a bad body
/// is `400 {"error": "..."}` naming the JSON path. An empty body decodes as `{}`, as
/// Grape treats a missing body as no parameters.
pub(crate) fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    gantry_protocol::parse_json(body).map_err(|error| ApiError::param(error.to_string()))
}

/// Decodes a body the way Grape reads parameters, for the user API and the Runner API
/// alike: a form — URL-encoded (`curl --data key=value`) or multipart (`curl --form
/// key=value`, as GitLab's documentation shows) — when the content type says so, with
/// Rack's nested keys (`info[name]=x`, `tag_list[]=a`) and Grape's coercion of text
/// ([`gantry_protocol::form`]); JSON otherwise.
pub(crate) async fn params<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, ApiError> {
    let content_type = header_str(headers, "content-type")
        .unwrap_or("")
        .to_ascii_lowercase();
    let decoded = if content_type.starts_with("application/x-www-form-urlencoded") {
        gantry_protocol::parse_form(body)
    } else if content_type.starts_with("multipart/form-data") {
        let pairs = multipart_pairs(headers, body.clone()).await?;
        gantry_protocol::parse_form_pairs(&pairs)
    } else {
        return json(body);
    };
    decoded.map_err(|error| ApiError::param(error.to_string()))
}

/// A `multipart/form-data` body's fields as `(name, text)` pairs, in order.
pub(crate) async fn multipart_pairs(
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Vec<(String, String)>, ApiError> {
    let mut request = axum::http::Request::new(axum::body::Body::from(body));
    if let Some(value) = headers.get("content-type") {
        request.headers_mut().insert("content-type", value.clone());
    }
    let mut form = axum::extract::Multipart::from_request(request, &())
        .await
        .map_err(|e| ApiError::param(format!("decode the form: {e}")))?;
    let mut pairs = Vec::new();
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| multipart_error(&e, "decode the form"))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        let value = field
            .text()
            .await
            .map_err(|e| multipart_error(&e, &format!("decode the form field `{name}`")))?;
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// A multipart body that could not be read: `408` when the client stalled
/// ([`StalledBody`]), `413` past the route's body limit, else `400` with `what` failed.
pub(crate) fn multipart_error(
    error: &axum::extract::multipart::MultipartError,
    what: &str,
) -> ApiError {
    if let Some(stalled) = StalledBody::in_chain(error) {
        return stalled.answer();
    }
    if error.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::too_large(format!("Request Entity Too Large - {what}: {error}"));
    }
    ApiError::param(format!("{what}: {error}"))
}

/// The value of a header as text, `None` when absent, empty or not visible ASCII.
pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|value| !value.is_empty())
}

/// A user API token: `PRIVATE-TOKEN: <t>` or `Authorization: Bearer <t>` (GitLab's
/// personal access token transports).
pub(crate) fn private_token(headers: &HeaderMap) -> Option<&str> {
    header_str(headers, header::PRIVATE_TOKEN).or_else(|| {
        let value = header_str(headers, "authorization")?;
        let (scheme, token) = value.split_once(' ')?;
        scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim())
            .filter(|t| !t.is_empty())
    })
}

/// A job token for a job-scoped call (§1.2): the `token` parameter (body or query)
/// first, else the `JOB-TOKEN` header.
pub(crate) fn job_token<'a>(param: Option<&'a str>, headers: &'a HeaderMap) -> Option<&'a str> {
    param
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .or_else(|| header_str(headers, header::JOB_TOKEN))
}

/// `user:password` of an `Authorization: Basic` header (git over HTTP).
pub(crate) fn basic_auth(headers: &HeaderMap) -> Option<(String, String)> {
    let value = header_str(headers, "authorization")?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(base64_decode(encoded.trim())?).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// Standard base64 (with or without padding); `None` on any other byte.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn value(byte: u8) -> Option<u32> {
        Some(u32::from(match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0u32;
    for byte in text.bytes() {
        buffer = (buffer << 6) | value(byte)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((buffer >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// An ISO 8601 time (`2019-03-15T08:00:00Z`; without an offset, or a date alone, in UTC)
/// as Unix ms.
pub(crate) fn time_ms(name: &str, value: &str) -> Result<i64, ApiError> {
    let parsed = value
        .parse::<jiff::Timestamp>()
        .ok()
        .or_else(|| {
            let civil = value.parse::<jiff::civil::DateTime>().ok()?;
            civil
                .to_zoned(jiff::tz::TimeZone::UTC)
                .ok()
                .map(|z| z.timestamp())
        })
        .or_else(|| {
            let date = value.parse::<jiff::civil::Date>().ok()?;
            date.to_zoned(jiff::tz::TimeZone::UTC)
                .ok()
                .map(|z| z.timestamp())
        });
    parsed.map(|t| t.as_millisecond()).ok_or_else(|| {
        ApiError::param(format!(
            "{name} is invalid: `{value}` is not an ISO 8601 time such as 2019-03-15T08:00:00Z"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_basic_credentials() {
        assert_eq!(
            base64_decode("Z2l0bGFiLWNpLXRva2VuOnNlY3JldA==").as_deref(),
            Some(b"gitlab-ci-token:secret".as_slice())
        );
        assert_eq!(base64_decode("YQ").as_deref(), Some(b"a".as_slice()));
        assert_eq!(base64_decode("!!"), None);
    }

    #[test]
    fn bearer_and_private_token() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(private_token(&headers), Some("abc"));
        headers.insert("private-token", "xyz".parse().unwrap());
        assert_eq!(private_token(&headers), Some("xyz"));
    }
}
