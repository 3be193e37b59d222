//! `gpus` and `service_gpus` of `[runners.docker]`: the Docker CLI's `--gpus` syntax
//! (gitlab-runner passes the text to the CLI's `opts.GpuOpts.Set`), turned into the
//! Engine API's `HostConfig.DeviceRequests`.
//!
//! The text is one CSV record. A field without `=` is the count (`all` or a number);
//! otherwise `count=`, `driver=`, `device=` (IDs, comma-separated — quote the field:
//! `"device=0,1"`), `capabilities=` (`gpu` is always added) or `options=` (a CSV of
//! `key=value`). Each key at most once. Without a count or devices the count is 1; without
//! capabilities they are `[["gpu"]]`. `all` is count `-1`. Empty text asks for nothing.

use std::collections::HashMap;

use bollard::models::DeviceRequest;

/// Why a `gpus` text cannot be used (the Docker CLI's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpusError {
    #[error("gpu request key '{0}' can be specified only once")]
    Repeated(String),
    #[error("count must be an integer, not {0:?}")]
    Count(String),
    #[error("unexpected key '{key}' in '{field}'")]
    UnknownKey { key: String, field: String },
    #[error("unterminated quote in {0:?}")]
    Quote(String),
}

/// The device request `text` asks for; `None` for empty text.
pub fn device_request(text: &str) -> Result<Option<DeviceRequest>, GpusError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let mut request = DeviceRequest::default();
    let mut seen: Vec<String> = Vec::new();
    for field in csv_fields(text)? {
        let (key, value) = match field.split_once('=') {
            Some((key, value)) => (key.to_owned(), Some(value.to_owned())),
            None => (field.clone(), None),
        };
        if seen.contains(&key) {
            return Err(GpusError::Repeated(key));
        }
        seen.push(key.clone());
        let Some(value) = value else {
            seen.push("count".to_owned());
            request.count = Some(count(&key)?);
            continue;
        };
        match key.as_str() {
            "driver" => request.driver = Some(value),
            "count" => request.count = Some(count(&value)?),
            "device" => request.device_ids = Some(value.split(',').map(str::to_owned).collect()),
            "capabilities" => {
                let mut all: Vec<String> = value.split(',').map(str::to_owned).collect();
                all.push("gpu".to_owned());
                request.capabilities = Some(vec![all]);
            }
            "options" => {
                let options: HashMap<String, String> = csv_fields(&value)?
                    .into_iter()
                    .map(|kv| match kv.split_once('=') {
                        Some((k, v)) => (k.to_owned(), v.to_owned()),
                        None => (kv, String::new()),
                    })
                    .collect();
                request.options = Some(options);
            }
            _ => return Err(GpusError::UnknownKey { key, field }),
        }
    }
    if !seen.iter().any(|k| k == "count") && request.device_ids.is_none() {
        request.count = Some(1);
    }
    request.options.get_or_insert_with(HashMap::new);
    request
        .capabilities
        .get_or_insert_with(|| vec![vec!["gpu".to_owned()]]);
    Ok(Some(request))
}

fn count(text: &str) -> Result<i64, GpusError> {
    if text == "all" {
        return Ok(-1);
    }
    text.parse().map_err(|_| GpusError::Count(text.to_owned()))
}

/// The fields of one CSV record (Go's `encoding/csv`: `,` separates, `"` quotes, `""` is a
/// quote inside quotes).
fn csv_fields(text: &str) -> Result<Vec<String>, GpusError> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut at_start = true;
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            '"' if quoted => quoted = false,
            '"' if at_start => quoted = true,
            ',' if !quoted => {
                fields.push(std::mem::take(&mut field));
                at_start = true;
                continue;
            }
            c => field.push(c),
        }
        at_start = false;
    }
    if quoted {
        return Err(GpusError::Quote(text.to_owned()));
    }
    fields.push(field);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(text: &str) -> DeviceRequest {
        device_request(text).unwrap().unwrap()
    }

    #[test]
    fn docker_cli_forms() {
        let all = req("all");
        assert_eq!(all.count, Some(-1));
        assert_eq!(all.capabilities, Some(vec![vec!["gpu".to_owned()]]));
        assert_eq!(all.options, Some(HashMap::new()));
        assert_eq!(req("2").count, Some(2));
        let devices = req(r#""device=0,2""#);
        assert_eq!(devices.count, None);
        assert_eq!(
            devices.device_ids,
            Some(vec!["0".to_owned(), "2".to_owned()])
        );
        let full = req(r#"count=1,driver=nvidia,capabilities=compute,"options=a=1,b=2""#);
        assert_eq!(full.count, Some(1));
        assert_eq!(full.driver.as_deref(), Some("nvidia"));
        assert_eq!(
            full.capabilities,
            Some(vec![vec!["compute".to_owned(), "gpu".to_owned()]])
        );
        assert_eq!(
            full.options.unwrap().get("b").map(String::as_str),
            Some("2")
        );
        assert_eq!(req("driver=nvidia").count, Some(1));
        assert_eq!(device_request("  ").unwrap(), None);
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(device_request("lots"), Err(GpusError::Count("lots".into())));
        assert_eq!(
            device_request("all,count=2"),
            Err(GpusError::Repeated("count".into()))
        );
        // The CLI's gotcha: an unquoted device list splits, its second ID read as a count.
        let split = req("device=0,1");
        assert_eq!(split.device_ids, Some(vec!["0".to_owned()]));
        assert_eq!(split.count, Some(1));
        // …and a later bare number replaces it (the CLI checks repeated keys by text).
        assert_eq!(req("device=0,1,2").count, Some(2));
        assert!(matches!(
            device_request("colour=red"),
            Err(GpusError::UnknownKey { .. })
        ));
        assert!(matches!(device_request("\"all"), Err(GpusError::Quote(_))));
    }
}
