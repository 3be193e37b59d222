//! [`Meters`]: one OpenTelemetry meter provider per process, exporting over OTLP (gRPC,
//! HTTP protobuf or HTTP JSON, as the traces) every `OTEL_METRIC_EXPORT_INTERVAL`
//! (60 s by default) from the SDK's periodic reader (its own thread), cumulative
//! temporality. `None` when no endpoint is configured or `OTEL_METRICS_EXPORTER=none`:
//! a caller then holds no instrument and records nothing.
//!
//! The instruments themselves belong to their callers (the coordinator's and the
//! runner's `metrics` modules), which record each figure both here and in their
//! Prometheus registry: one event, two encodings. Names come from [`crate::names`]
//! (the CI/CD semantic conventions' `cicd.*` where one exists).

use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};

use crate::provider::{TelemetryError, resource, with_http, with_tonic};
use crate::settings::{Protocol, Settings};

pub use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableGauge, UpDownCounter};

/// A process's meter provider. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Meters {
    provider: SdkMeterProvider,
    meter: Meter,
}

impl Meters {
    /// The process's meters, or `None` when `settings` export no metrics. Must run inside
    /// a tokio runtime when metrics go over gRPC (tonic's channel lives there).
    pub fn start(settings: &Settings, service: &str) -> Result<Option<Meters>, TelemetryError> {
        if !settings.metrics_on() {
            return Ok(None);
        }
        let url = settings.metrics_url().unwrap_or_default();
        let headers = settings.metrics_headers();
        let built = match settings.metrics_protocol() {
            Protocol::Grpc => with_tonic(
                opentelemetry_otlp::MetricExporter::builder()
                    .with_temporality(Temporality::Cumulative)
                    .with_tonic(),
                &url,
                &headers,
            )?
            .build(),
            protocol @ (Protocol::HttpProtobuf | Protocol::HttpJson) => with_http(
                opentelemetry_otlp::MetricExporter::builder()
                    .with_temporality(Temporality::Cumulative)
                    .with_http(),
                &url,
                protocol,
                &headers,
            )
            .build(),
        };
        let exporter = built.map_err(|e| TelemetryError::Exporter {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(settings.metric_interval.unwrap_or(Duration::from_secs(60)))
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource(settings, service))
            .build();
        let meter = provider.meter("gantry");
        Ok(Some(Meters { provider, meter }))
    }

    /// The meter the caller builds its instruments from.
    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// Exports what was measured now, without stopping (blocks).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }

    /// Exports a last time and stops (blocks; from async code through `spawn_blocking`).
    pub fn shutdown(&self) {
        let _ = self.provider.shutdown();
    }
}

/// Histogram bucket bounds (seconds) for waits and durations from 0.1 s to 3 h: queue
/// waits are often under a second, jobs and pipelines run for minutes to hours.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 10800.0,
];
