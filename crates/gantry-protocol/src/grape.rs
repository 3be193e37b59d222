//! Grape's coercion of typed parameters (GitLab declares them `Boolean` or `Integer`):
//! a JSON string or a form value reads as the type, as it does on GitLab, so
//! `{"masked": "true"}`, `-d masked=1` and `{"build_timeout": "900"}` are what they say.
//! For `#[serde(default, deserialize_with = "…")]` on `Option` fields of what users and
//! automation send (the user API, and the registration bodies GitLab reads with Grape).

use serde::Deserializer;
use serde::de::{Error, Unexpected, Visitor};

/// dry-types' `Params::Bool` (what Grape uses): these words, any case as written
/// there; JSON `true`/`false`, and the numbers 1 and 0.
const TRUE: &[&str] = &["1", "on", "t", "true", "y", "yes"];
const FALSE: &[&str] = &["0", "off", "f", "false", "n", "no"];
const BOOL: &str =
    "a boolean: true or false (also 1/0, yes/no, on/off, t/f, y/n, as GitLab reads them)";

/// A text value as dry-types reads a `Boolean` (`None`: not one of its words).
pub(crate) fn bool_word(text: &str) -> Option<bool> {
    let word = text.trim().to_ascii_lowercase();
    if TRUE.contains(&word.as_str()) {
        Some(true)
    } else if FALSE.contains(&word.as_str()) {
        Some(false)
    } else {
        None
    }
}

/// What a `Boolean` parameter accepts, for error messages.
pub(crate) const BOOL_EXPECTED: &str = BOOL;

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
        // dry-types' `Params` types read an empty value (`-d paused=`) as not given.
        if v.trim().is_empty() {
            return Ok(None);
        }
        match bool_word(v) {
            Some(b) => Ok(Some(b)),
            None => Err(E::invalid_value(Unexpected::Str(v), &BOOL)),
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
pub fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
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
        if v.trim().is_empty() {
            return Ok(None);
        }
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
pub fn opt_i64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
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
        assert_eq!(form("on=&n="), p(None, None));
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
