//! What turns tracing on and where spans go: the standard `OTEL_*` variables
//! ([`Settings::from_env`]), overridden field by field by a command's flags or a
//! `config.toml` section ([`Settings::over`]). Tracing is **off** unless an endpoint or a
//! trace file is given (the SDK's default endpoint would turn it on for everybody), and
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off again.
//!
//! Every `OTEL_*` name read is in [`VARIABLES`]; a bad value is an error naming the place
//! (the variable, the flag or the key) and what it takes.

use std::path::PathBuf;

/// The variables [`Settings::from_env`] reads, in the order the README lists them.
pub const VARIABLES: &[&str] = &[
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_METRICS_EXPORTER",
    "OTEL_METRIC_EXPORT_INTERVAL",
    "OTEL_SDK_DISABLED",
];

/// How spans travel to the collector (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `grpc`: OTLP/gRPC, default endpoint `http://localhost:4317`.
    Grpc,
    /// `http/protobuf` (the specification's default): POST `/v1/traces`, binary protobuf.
    HttpProtobuf,
    /// `http/json`: POST `/v1/traces`, OTLP JSON.
    HttpJson,
}

impl Protocol {
    pub fn parse(value: &str, place: &str) -> Result<Protocol, SettingsError> {
        match value.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "http/json" => Ok(Protocol::HttpJson),
            _ => Err(SettingsError::new(
                place,
                value,
                "`grpc`, `http/protobuf` or `http/json`",
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
        }
    }
}

/// `OTEL_TRACES_SAMPLER` (and its `_ARG`): which traces are recorded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SamplerSetting {
    AlwaysOn,
    AlwaysOff,
    /// A fraction of traces, by trace id (so every process decides the same).
    TraceIdRatio(f64),
    /// The parent's decision; a root decides by the inner setting (the default:
    /// `parentbased_always_on`).
    ParentBased(ParentRoot),
}

/// The root decision of a parent-based sampler.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ParentRoot {
    AlwaysOn,
    AlwaysOff,
    TraceIdRatio(f64),
}

impl SamplerSetting {
    /// `name` is the sampler's, `arg` the ratio (`OTEL_TRACES_SAMPLER_ARG`, default 1.0).
    pub fn parse(name: &str, arg: Option<&str>, place: &str) -> Result<Self, SettingsError> {
        let ratio = || -> Result<f64, SettingsError> {
            match arg.map(str::trim).filter(|a| !a.is_empty()) {
                None => Ok(1.0),
                Some(a) => a
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        SettingsError::new(
                            &format!("{place} argument"),
                            a,
                            "a ratio from 0 to 1, such as `0.25`",
                        )
                    }),
            }
        };
        Ok(match name.trim() {
            "always_on" => SamplerSetting::AlwaysOn,
            "always_off" => SamplerSetting::AlwaysOff,
            "traceidratio" => SamplerSetting::TraceIdRatio(ratio()?),
            "parentbased_always_on" => SamplerSetting::ParentBased(ParentRoot::AlwaysOn),
            "parentbased_always_off" => SamplerSetting::ParentBased(ParentRoot::AlwaysOff),
            "parentbased_traceidratio" => {
                SamplerSetting::ParentBased(ParentRoot::TraceIdRatio(ratio()?))
            }
            _ => {
                return Err(SettingsError::new(
                    place,
                    name,
                    "`always_on`, `always_off`, `traceidratio`, `parentbased_always_on`, \
                     `parentbased_always_off` or `parentbased_traceidratio`",
                ));
            }
        })
    }
}

/// Resolved tracing settings; `Default` is off.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: the collector's base URL (HTTP adds `/v1/traces`).
    pub endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the traces URL, used as it is.
    pub traces_endpoint: Option<String>,
    /// `None`: `http/protobuf`, the specification's default.
    pub protocol: Option<Protocol>,
    /// Extra request headers (gRPC metadata), e.g. an API key.
    pub headers: Vec<(String, String)>,
    /// `None`: the command's own name (`gantry-server`, `gantry-runner`, `gantry-run`).
    pub service_name: Option<String>,
    pub resource_attributes: Vec<(String, String)>,
    /// `None`: `parentbased_always_on`.
    pub sampler: Option<SamplerSetting>,
    /// `gantry run --trace-file`: OTLP JSON lines written without a collector.
    pub trace_file: Option<PathBuf>,
    /// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    pub disabled: bool,
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`: the metrics URL, used as it is.
    pub metrics_endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL` (`None`: [`Settings::protocol`]).
    pub metrics_protocol: Option<Protocol>,
    /// `OTEL_EXPORTER_OTLP_METRICS_HEADERS`, over [`Settings::headers`].
    pub metrics_headers: Vec<(String, String)>,
    /// `OTEL_SDK_DISABLED=true` or `OTEL_METRICS_EXPORTER=none`.
    pub metrics_disabled: bool,
    /// `OTEL_METRIC_EXPORT_INTERVAL` (milliseconds; `None`: 60 s, the specification's).
    pub metric_interval: Option<std::time::Duration>,
}

impl Settings {
    /// Reads [`VARIABLES`] through `get` (the process environment in the binary).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let protocol = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
            Some(v) => Some(Protocol::parse(&v, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?),
            None => var("OTEL_EXPORTER_OTLP_PROTOCOL")
                .map(|v| Protocol::parse(&v, "OTEL_EXPORTER_OTLP_PROTOCOL"))
                .transpose()?,
        };
        let mut headers = match var("OTEL_EXPORTER_OTLP_HEADERS") {
            Some(v) => parse_pairs(&v, "OTEL_EXPORTER_OTLP_HEADERS")?,
            None => Vec::new(),
        };
        if let Some(v) = var("OTEL_EXPORTER_OTLP_TRACES_HEADERS") {
            for (k, v) in parse_pairs(&v, "OTEL_EXPORTER_OTLP_TRACES_HEADERS")? {
                headers.retain(|(old, _)| !old.eq_ignore_ascii_case(&k));
                headers.push((k, v));
            }
        }
        let sampler = var("OTEL_TRACES_SAMPLER")
            .map(|name| {
                SamplerSetting::parse(
                    &name,
                    var("OTEL_TRACES_SAMPLER_ARG").as_deref(),
                    "OTEL_TRACES_SAMPLER",
                )
            })
            .transpose()?;
        let sdk_disabled =
            var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let disabled =
            sdk_disabled || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
        let metrics_disabled =
            sdk_disabled || var("OTEL_METRICS_EXPORTER").is_some_and(|v| v.trim() == "none");
        let metrics_protocol = var("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
            .map(|v| Protocol::parse(&v, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"))
            .transpose()?;
        let metrics_headers = match var("OTEL_EXPORTER_OTLP_METRICS_HEADERS") {
            Some(v) => parse_pairs(&v, "OTEL_EXPORTER_OTLP_METRICS_HEADERS")?,
            None => Vec::new(),
        };
        let metric_interval = var("OTEL_METRIC_EXPORT_INTERVAL")
            .map(|v| {
                v.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map(std::time::Duration::from_millis)
                    .ok_or_else(|| {
                        SettingsError::new(
                            "OTEL_METRIC_EXPORT_INTERVAL",
                            &v,
                            "a number of milliseconds above 0, such as `60000`",
                        )
                    })
            })
            .transpose()?;
        Ok(Settings {
            endpoint: var("OTEL_EXPORTER_OTLP_ENDPOINT"),
            traces_endpoint: var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            protocol,
            headers,
            service_name: var("OTEL_SERVICE_NAME"),
            resource_attributes: match var("OTEL_RESOURCE_ATTRIBUTES") {
                Some(v) => parse_pairs(&v, "OTEL_RESOURCE_ATTRIBUTES")?,
                None => Vec::new(),
            },
            sampler,
            trace_file: None,
            disabled,
            metrics_endpoint: var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
            metrics_protocol,
            metrics_headers,
            metrics_disabled,
            metric_interval,
        })
    }

    /// `self` (flags, a configuration file) over `lower` (the environment): each field
    /// `self` sets wins; lists are taken whole.
    pub fn over(self, lower: Settings) -> Settings {
        Settings {
            endpoint: self.endpoint.or(lower.endpoint),
            traces_endpoint: self.traces_endpoint.or(lower.traces_endpoint),
            protocol: self.protocol.or(lower.protocol),
            headers: if self.headers.is_empty() {
                lower.headers
            } else {
                self.headers
            },
            service_name: self.service_name.or(lower.service_name),
            resource_attributes: if self.resource_attributes.is_empty() {
                lower.resource_attributes
            } else {
                self.resource_attributes
            },
            sampler: self.sampler.or(lower.sampler),
            trace_file: self.trace_file.or(lower.trace_file),
            disabled: self.disabled || lower.disabled,
            metrics_endpoint: self.metrics_endpoint.or(lower.metrics_endpoint),
            metrics_protocol: self.metrics_protocol.or(lower.metrics_protocol),
            metrics_headers: if self.metrics_headers.is_empty() {
                lower.metrics_headers
            } else {
                self.metrics_headers
            },
            metrics_disabled: self.metrics_disabled || lower.metrics_disabled,
            metric_interval: self.metric_interval.or(lower.metric_interval),
        }
    }

    /// Whether metrics are exported over OTLP: an endpoint, and not disabled.
    pub fn metrics_on(&self) -> bool {
        !self.metrics_disabled && (self.endpoint.is_some() || self.metrics_endpoint.is_some())
    }

    /// How metrics travel: their own protocol, else the traces'.
    pub(crate) fn metrics_protocol(&self) -> Protocol {
        self.metrics_protocol
            .or(self.protocol)
            .unwrap_or(Protocol::HttpProtobuf)
    }

    /// The URL metrics are sent to: the metrics endpoint as it is, else the endpoint
    /// (with `/v1/metrics` over HTTP).
    pub(crate) fn metrics_url(&self) -> Option<String> {
        if let Some(url) = &self.metrics_endpoint {
            return Some(url.clone());
        }
        let base = self.endpoint.as_deref()?;
        Some(match self.metrics_protocol() {
            Protocol::Grpc => base.to_owned(),
            Protocol::HttpProtobuf | Protocol::HttpJson => {
                format!("{}/v1/metrics", base.trim_end_matches('/'))
            }
        })
    }

    /// The headers of metric exports: the metrics' own over the common ones.
    pub(crate) fn metrics_headers(&self) -> Vec<(String, String)> {
        let mut headers = self.headers.clone();
        for (k, v) in &self.metrics_headers {
            headers.retain(|(old, _)| !old.eq_ignore_ascii_case(k));
            headers.push((k.clone(), v.clone()));
        }
        headers
    }

    /// Whether anything is exported: a collector or a file, and not disabled.
    pub fn is_on(&self) -> bool {
        !self.disabled && (self.exports_otlp() || self.trace_file.is_some())
    }

    pub(crate) fn exports_otlp(&self) -> bool {
        self.endpoint.is_some() || self.traces_endpoint.is_some()
    }

    /// The URL spans are sent to: the traces endpoint as it is, else the endpoint (with
    /// `/v1/traces` over HTTP).
    pub(crate) fn url(&self) -> Option<String> {
        if let Some(url) = &self.traces_endpoint {
            return Some(url.clone());
        }
        let base = self.endpoint.as_deref()?;
        Some(match self.protocol.unwrap_or(Protocol::HttpProtobuf) {
            Protocol::Grpc => base.to_owned(),
            Protocol::HttpProtobuf | Protocol::HttpJson => {
                format!("{}/v1/traces", base.trim_end_matches('/'))
            }
        })
    }
}

/// `k1=v1,k2=v2` with percent-encoded values (the W3C Baggage form the specification
/// uses for `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`).
pub fn parse_pairs(value: &str, place: &str) -> Result<Vec<(String, String)>, SettingsError> {
    let mut pairs = Vec::new();
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((k, v)) = item.split_once('=') else {
            return Err(SettingsError::new(
                place,
                item,
                "`key=value` pairs separated by commas",
            ));
        };
        let key = percent_decode(k.trim());
        if key.is_empty() {
            return Err(SettingsError::new(place, item, "`key=value` with a key"));
        }
        pairs.push((key, percent_decode(v.trim())));
    }
    Ok(pairs)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A tracing setting that cannot be used: where it was given, the value, what it takes.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{place}: `{value}` is not valid; give {expected}")]
pub struct SettingsError {
    pub place: String,
    pub value: String,
    pub expected: String,
}

impl SettingsError {
    pub fn new(place: &str, value: &str, expected: &str) -> Self {
        SettingsError {
            place: place.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::from_env(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn off_without_an_endpoint_and_when_disabled() {
        assert!(!env(&[]).unwrap().is_on());
        assert!(!env(&[("OTEL_SERVICE_NAME", "x")]).unwrap().is_on());
        assert!(
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])
                .unwrap()
                .is_on()
        );
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert!(
                !env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), off])
                    .unwrap()
                    .is_on()
            );
        }
    }

    #[test]
    fn urls_headers_attributes_and_samplers() {
        let s = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "X=2"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=ci,team=infra",
            ),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ])
        .unwrap();
        assert_eq!(s.url().as_deref(), Some("http://c:4318/v1/traces"));
        assert_eq!(
            s.headers,
            [
                ("api-key".to_owned(), "a b".to_owned()),
                ("X".to_owned(), "2".to_owned())
            ]
        );
        assert_eq!(s.resource_attributes.len(), 2);
        assert_eq!(
            s.sampler,
            Some(SamplerSetting::ParentBased(ParentRoot::TraceIdRatio(0.25)))
        );
        let grpc = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap();
        assert_eq!(grpc.url().as_deref(), Some("http://c:4317"));
        let exact = env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c/t")]).unwrap();
        assert_eq!(exact.url().as_deref(), Some("http://c/t"));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "udp")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "OTEL_EXPORTER_OTLP_PROTOCOL: `udp` is not valid; give `grpc`, `http/protobuf` or `http/json`"
        );
        let e = env(&[
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
        ])
        .unwrap_err();
        assert_eq!(e.place, "OTEL_TRACES_SAMPLER argument");
        assert!(env(&[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")]).is_err());
    }

    #[test]
    fn metrics_have_their_own_endpoint_protocol_interval_and_switch() {
        let s = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b=2"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "B=3"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "250"),
        ])
        .unwrap();
        assert!(s.metrics_on());
        assert_eq!(s.metrics_url().as_deref(), Some("http://c:4318/v1/metrics"));
        assert_eq!(
            s.metrics_headers(),
            [
                ("a".to_owned(), "1".to_owned()),
                ("B".to_owned(), "3".to_owned())
            ]
        );
        assert_eq!(
            s.metric_interval,
            Some(std::time::Duration::from_millis(250))
        );
        let grpc = env(&[
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:4317"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])
        .unwrap();
        assert!(grpc.metrics_on() && !grpc.is_on());
        assert_eq!(grpc.metrics_url().as_deref(), Some("http://m:4317"));
        let off = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ])
        .unwrap();
        assert!(off.is_on() && !off.metrics_on());
        assert_eq!(
            env(&[("OTEL_METRIC_EXPORT_INTERVAL", "soon")])
                .unwrap_err()
                .to_string(),
            "OTEL_METRIC_EXPORT_INTERVAL: `soon` is not valid; give a number of milliseconds above 0, such as `60000`"
        );
    }

    #[test]
    fn flags_win_over_the_environment() {
        let lower = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env"),
            ("OTEL_SERVICE_NAME", "env"),
        ])
        .unwrap();
        let upper = Settings {
            endpoint: Some("http://flag".to_owned()),
            ..Settings::default()
        };
        let s = upper.over(lower);
        assert_eq!(s.endpoint.as_deref(), Some("http://flag"));
        assert_eq!(s.service_name.as_deref(), Some("env"));
    }
}
