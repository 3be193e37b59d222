//! OpenTelemetry traces of pipelines, jobs and their sections, and metrics, shared by `gantry
//! server`, `gantry runner` and `gantry run` (one implementation of the concern).
//!
//! - [`settings`]: the standard `OTEL_*` variables and their flag / `config.toml`
//!   equivalents → [`Settings`]; off unless an endpoint or a trace file is given.
//! - [`provider`]: [`Telemetry`], the process's tracer provider (OTLP over gRPC, HTTP
//!   protobuf or HTTP JSON; [`file`]'s OTLP JSON lines), recorded and live spans.
//! - [`ids`]: a pipeline's stored trace id, the span ids derived from it (the choice is
//!   written there), W3C `traceparent`.
//! - [`metrics`]: [`Meters`], the process's meter provider (OTLP, periodic export);
//!   the instruments are the callers'.
//! - [`names`]: span and attribute names (OpenTelemetry CI/CD semantic conventions
//!   v1.44, GitLab's identifiers) and GitLab status → convention result.
//!
//! Knows nothing of the coordinator, the runner or HTTP routes: callers pass facts in.
//! Cost when off: callers hold `Option<Telemetry>` = `None` and build no attribute.

mod file;
pub mod ids;
pub mod metrics;
pub mod names;
pub mod provider;
pub mod settings;

pub use ids::{PipelineTrace, parse_traceparent, traceparent};
pub use metrics::Meters;
pub use opentelemetry::KeyValue;
pub use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceId};
pub use provider::{LiveSpan, Recorded, Telemetry, TelemetryError};
pub use settings::{Protocol, SamplerSetting, Settings, SettingsError};
