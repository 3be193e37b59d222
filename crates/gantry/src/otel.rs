//! The tracing flags `gantry server`, `gantry runner run` and `gantry run` share, and
//! the start of the process's tracer: flags over `config.toml`'s `[otel]` (the runner)
//! over the `OTEL_*` variables (`gantry_telemetry::settings::VARIABLES`, read here only).
//! Off unless an endpoint (or `gantry run --trace-file`) is given.

use clap::Args;
use gantry_telemetry::{Meters, Protocol, SamplerSetting, Settings, SettingsError, Telemetry};

#[derive(Args, Clone, Debug, Default)]
pub(crate) struct OtelArgs {
    /// Send OpenTelemetry traces of pipelines and jobs, and metrics, to this OTLP collector
    /// (`http://host:4318`; `http://host:4317` with --otel-protocol grpc)
    /// [default: $OTEL_EXPORTER_OTLP_ENDPOINT; none: tracing off].
    #[arg(long, value_name = "URL")]
    otel_endpoint: Option<String>,
    /// `grpc`, `http/protobuf` or `http/json` [default: $OTEL_EXPORTER_OTLP_PROTOCOL, else
    /// http/protobuf].
    #[arg(long, value_name = "PROTOCOL")]
    otel_protocol: Option<String>,
    /// A header sent with every export, `KEY=VALUE` (repeat for more)
    /// [default: $OTEL_EXPORTER_OTLP_HEADERS].
    #[arg(long = "otel-header", value_name = "KEY=VALUE")]
    otel_headers: Vec<String>,
    /// `service.name` of the spans [default: $OTEL_SERVICE_NAME, else gantry-server,
    /// gantry-runner or gantry-run].
    #[arg(long, value_name = "NAME")]
    otel_service_name: Option<String>,
    /// A resource attribute, `KEY=VALUE` (repeat for more)
    /// [default: $OTEL_RESOURCE_ATTRIBUTES].
    #[arg(long = "otel-resource-attribute", value_name = "KEY=VALUE")]
    otel_resource_attributes: Vec<String>,
    /// Which traces are kept: always_on, always_off, traceidratio,
    /// parentbased_always_on, parentbased_always_off, parentbased_traceidratio
    /// [default: $OTEL_TRACES_SAMPLER, else parentbased_always_on].
    #[arg(long, value_name = "SAMPLER")]
    otel_sampler: Option<String>,
    /// The ratio of the *traceidratio samplers, 0 to 1 [default: $OTEL_TRACES_SAMPLER_ARG].
    #[arg(long, value_name = "RATIO")]
    otel_sampler_arg: Option<String>,
}

impl OtelArgs {
    /// The flags' layer (what they set; the rest stays unset).
    pub(crate) fn settings(&self) -> Result<Settings, SettingsError> {
        let pairs =
            |values: &[String], flag: &str| -> Result<Vec<(String, String)>, SettingsError> {
                let mut pairs = Vec::new();
                for v in values {
                    pairs.extend(gantry_telemetry::settings::parse_pairs(v, flag)?);
                }
                Ok(pairs)
            };
        Ok(Settings {
            endpoint: self.otel_endpoint.clone(),
            protocol: self
                .otel_protocol
                .as_deref()
                .map(|p| Protocol::parse(p, "--otel-protocol"))
                .transpose()?,
            headers: pairs(&self.otel_headers, "--otel-header")?,
            service_name: self.otel_service_name.clone(),
            resource_attributes: pairs(
                &self.otel_resource_attributes,
                "--otel-resource-attribute",
            )?,
            sampler: match (&self.otel_sampler, &self.otel_sampler_arg) {
                (Some(name), arg) => Some(SamplerSetting::parse(
                    name,
                    arg.as_deref(),
                    "--otel-sampler",
                )?),
                (None, Some(_)) => {
                    // The ratio alone goes with the environment's sampler.
                    let name = crate::env::var("OTEL_TRACES_SAMPLER")
                        .unwrap_or_else(|| "parentbased_traceidratio".to_owned());
                    Some(SamplerSetting::parse(
                        &name,
                        self.otel_sampler_arg.as_deref(),
                        "--otel-sampler-arg",
                    )?)
                }
                (None, None) => None,
            },
            ..Settings::default()
        })
    }
}

/// `upper` (flags, then a file's section) over the `OTEL_*` variables.
pub(crate) fn resolve(upper: Settings) -> Result<Settings, SettingsError> {
    Ok(upper.over(Settings::from_env(crate::env::var)?))
}

/// Starts the process's tracer (inside the tokio runtime: gRPC needs it); `Err` is the
/// message for the user. Says where spans go when on.
pub(crate) fn start(settings: &Settings, service: &str) -> Result<Option<Telemetry>, String> {
    let telemetry = Telemetry::start(settings, service).map_err(|e| format!("failed to {e}"))?;
    if telemetry.is_some() {
        let mut to = Vec::new();
        if settings.endpoint.is_some() || settings.traces_endpoint.is_some() {
            to.push(format!(
                "{} over {}",
                settings
                    .traces_endpoint
                    .as_deref()
                    .or(settings.endpoint.as_deref())
                    .unwrap_or_default(),
                settings.protocol.unwrap_or(Protocol::HttpProtobuf).as_str()
            ));
        }
        if let Some(file) = &settings.trace_file {
            to.push(file.display().to_string());
        }
        eprintln!("info: traces to {}", to.join(" and "));
    }
    Ok(telemetry)
}

/// Flushes and stops the tracer (blocking work: off the async threads).
pub(crate) async fn stop(telemetry: Option<Telemetry>) {
    if let Some(t) = telemetry {
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
}

/// Starts the process's meters when metrics go over OTLP (inside the tokio runtime);
/// `Err` is the message for the user. Says where metrics go when on.
pub(crate) fn start_meters(settings: &Settings, service: &str) -> Result<Option<Meters>, String> {
    let meters = Meters::start(settings, service).map_err(|e| format!("failed to {e}"))?;
    if meters.is_some() {
        eprintln!(
            "info: metrics to {} every {} ms",
            settings
                .metrics_endpoint
                .as_deref()
                .or(settings.endpoint.as_deref())
                .unwrap_or_default(),
            settings.metric_interval.map_or(60_000, |i| i.as_millis())
        );
    }
    Ok(meters)
}

/// Exports the last figures and stops the meters (blocking work: off the async threads).
pub(crate) async fn stop_meters(meters: Option<Meters>) {
    if let Some(m) = meters {
        let _ = tokio::task::spawn_blocking(move || m.shutdown()).await;
    }
}
