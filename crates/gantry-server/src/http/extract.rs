//! Reading requests without trusting them: bodies under a size limit, JSON decoded
//! with errors that name the field, tokens from the places GitLab reads them. Every
//! failure is an [`ApiError`] (a JSON 4xx), never axum's plain-text rejection.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;
use gantry_protocol::header;
use serde::de::DeserializeOwned;

use super::error::ApiError;

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
                let status = rejection.status();
                if status == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::too_large("Request Entity Too Large")
                } else {
                    ApiError::message(status, rejection.body_text())
                }
            })
    }
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

/// Decodes a user API body the way Grape reads parameters: form-encoded
/// (`curl --data key=value`, as GitLab's documentation shows) when the content type says
/// so, JSON otherwise.
pub(crate) fn params<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, ApiError> {
    let form = header_str(headers, "content-type").is_some_and(|ct| {
        ct.to_ascii_lowercase()
            .starts_with("application/x-www-form-urlencoded")
    });
    if form {
        serde_urlencoded::from_bytes(body)
            .map_err(|e| ApiError::param(format!("decode the form parameters: {e}")))
    } else {
        json(body)
    }
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

/// Grape's coercion of typed parameters (GitLab declares them `Boolean` or `Integer`):
/// a JSON string or a form value reads as the type, as it does on GitLab, so
/// `{"masked": "true"}`, `-d masked=1` and `{"build_timeout": "900"}` are what they say.
/// For `#[serde(default, deserialize_with = "…")]` on `Option` fields.
pub(crate) mod grape {
    use serde::Deserializer;
    use serde::de::{Error, Unexpected, Visitor};

    /// dry-types' `Params::Bool` (what Grape uses): these words, any case as written
    /// there; JSON `true`/`false`, and the numbers 1 and 0.
    const TRUE: &[&str] = &["1", "on", "t", "true", "y", "yes"];
    const FALSE: &[&str] = &["0", "off", "f", "false", "n", "no"];
    const BOOL: &str =
        "a boolean: true or false (also 1/0, yes/no, on/off, t/f, y/n, as GitLab reads them)";

    struct Bool;

    impl<'de> Visitor<'de> for Bool {
        type Value = Option<bool>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(BOOL)
        }
        fn visit_bool<E: Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<Self::Value, E> {
            match v {
                0 => Ok(Some(false)),
                1 => Ok(Some(true)),
                _ => Err(E::invalid_value(Unexpected::Unsigned(v), &BOOL)),
            }
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<Self::Value, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &BOOL)),
            }
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
            let word = v.trim().to_ascii_lowercase();
            if TRUE.contains(&word.as_str()) {
                Ok(Some(true))
            } else if FALSE.contains(&word.as_str()) {
                Ok(Some(false))
            } else {
                Err(E::invalid_value(Unexpected::Str(v), &BOOL))
            }
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Bool)
        }
    }

    /// A `Boolean` parameter (`null`: not given).
    pub(crate) fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
        d.deserialize_any(Bool)
    }

    struct Int;

    impl<'de> Visitor<'de> for Int {
        type Value = Option<i64>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an integer")
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<Self::Value, E> {
            i64::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &"an integer"))
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
            v.trim()
                .parse()
                .map(Some)
                .map_err(|_| E::invalid_value(Unexpected::Str(v), &"an integer"))
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Int)
        }
    }

    /// An `Integer` parameter (`null`: not given).
    pub(crate) fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        d.deserialize_any(Int)
    }

    #[cfg(test)]
    mod tests {
        use serde::Deserialize;

        #[derive(Debug, Default, Deserialize, PartialEq)]
        #[serde(default)]
        struct Params {
            #[serde(deserialize_with = "super::opt_bool")]
            on: Option<bool>,
            #[serde(deserialize_with = "super::opt_i64")]
            n: Option<i64>,
        }

        fn json(text: &str) -> Result<Params, String> {
            serde_json::from_str(text).map_err(|e| e.to_string())
        }

        fn form(text: &str) -> Result<Params, String> {
            serde_urlencoded::from_str(text).map_err(|e| e.to_string())
        }

        #[test]
        fn json_and_forms_read_as_grape_reads_them() {
            let p = |on, n| Ok(Params { on, n });
            assert_eq!(json(r#"{"on": true, "n": 900}"#), p(Some(true), Some(900)));
            assert_eq!(
                json(r#"{"on": "false", "n": "900"}"#),
                p(Some(false), Some(900))
            );
            assert_eq!(
                json(r#"{"on": "YES", "n": " -5 "}"#),
                p(Some(true), Some(-5))
            );
            assert_eq!(json(r#"{"on": 0}"#), p(Some(false), None));
            assert_eq!(json(r#"{"on": null, "n": null}"#), p(None, None));
            assert_eq!(json("{}"), p(None, None));
            assert_eq!(form("on=1&n=7200"), p(Some(true), Some(7200)));
            assert_eq!(form("on=off"), p(Some(false), None));
            for bad in [r#"{"on": "maybe"}"#, r#"{"on": 2}"#, r#"{"on": []}"#] {
                let e = json(bad).unwrap_err();
                assert!(e.contains("expected a boolean"), "{bad}: {e}");
            }
            for bad in [r#"{"n": "9.5"}"#, r#"{"n": true}"#, r#"{"n": 1.5}"#] {
                let e = json(bad).unwrap_err();
                assert!(e.contains("expected an integer"), "{bad}: {e}");
            }
            assert!(form("on=maybe").is_err());
        }
    }
}
