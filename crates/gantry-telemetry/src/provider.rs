//! [`Telemetry`]: one tracer provider per process (the server's, a runner's, `gantry
//! run`'s), `None` when tracing is off, so a caller's whole cost when off is one
//! `Option` test. Spans go through the SDK's batch processor (its own thread; the OTLP
//! exporter over tonic or reqwest's blocking client, the file exporter) and are flushed
//! by [`Telemetry::shutdown`].
//!
//! Two kinds of spans: [`Telemetry::record`] emits a span that already happened with
//! given ids and times (the coordinator's job and pipeline spans, from the stored
//! times, in whichever replica sees the end); [`Telemetry::start`] opens a live span
//! ([`LiveSpan`]), ended when its work ends (sections, creation steps). The SDK takes a
//! span's ids from its id generator only, so a recorded span's ids are handed to
//! `Ids` through a thread-local just before the span is built on the same thread.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, SdkTracer, SdkTracerProvider,
    ShouldSample as _,
};

use crate::file::JsonLinesExporter;
use crate::settings::{ParentRoot, Protocol, SamplerSetting, Settings};

/// Tracing could not start: what failed, for the command's error message.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("set up the OTLP exporter to {url}: {reason}")]
    Exporter { url: String, reason: String },
    #[error("create the trace file {path}: {source}")]
    File {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// A process's tracer. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    sampler: Sampler,
}

/// A span that already happened: its ids, parent, times and facts.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub name: String,
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// `None`: the trace's root.
    pub parent: Option<SpanId>,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub status: Status,
}

impl Telemetry {
    /// The process's tracer, or `None` when `settings` turn nothing on. Must run inside
    /// a tokio runtime when spans go over gRPC (tonic's channel lives there).
    pub fn start(settings: &Settings, service: &str) -> Result<Option<Telemetry>, TelemetryError> {
        if !settings.is_on() {
            return Ok(None);
        }
        let sampler = sampler_of(settings.sampler);
        let mut builder = SdkTracerProvider::builder()
            .with_sampler(sampler.clone())
            .with_id_generator(Ids)
            .with_resource(resource(settings, service));
        if settings.exports_otlp() {
            builder = builder.with_batch_exporter(otlp_exporter(settings)?);
        }
        if let Some(path) = &settings.trace_file {
            let exporter =
                JsonLinesExporter::create(path).map_err(|source| TelemetryError::File {
                    path: path.clone(),
                    source,
                })?;
            builder = builder.with_batch_exporter(exporter);
        }
        let provider = builder.build();
        let tracer = provider.tracer("gantry");
        Ok(Some(Telemetry {
            inner: Arc::new(Inner {
                provider,
                tracer,
                sampler,
            }),
        }))
    }

    /// Whether a trace that starts here (no parent) is sampled: the configured root
    /// decision, a function of the trace id only for the standard samplers, so every
    /// replica decides the same for one pipeline.
    pub fn samples(&self, trace_id: TraceId) -> bool {
        let result =
            self.inner
                .sampler
                .should_sample(None, trace_id, "", &SpanKind::Server, &[], &[]);
        matches!(result.decision, SamplingDecision::RecordAndSample)
    }

    /// Emits a span that already happened (see the module docs); its parent (by id) is
    /// sampled as the trace's root decision says.
    pub fn record(&self, span: Recorded) {
        let parent = match span.parent {
            Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                span.trace_id,
                parent,
                TraceFlags::new(u8::from(self.samples(span.trace_id))),
                false,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        self.record_in(span, &parent);
    }

    /// Emits a span that already happened under a live span's `parent` (its trace and
    /// sampling decision; `span.trace_id` and `span.parent` are taken from it).
    pub fn record_under(&self, mut span: Recorded, parent: &SpanContext) {
        span.trace_id = parent.trace_id();
        span.parent = Some(parent.span_id());
        self.record_in(
            span,
            &Context::new().with_remote_span_context(parent.clone()),
        );
    }

    /// A fresh random span id, for a recorded span whose children are recorded too.
    pub fn new_span_id(&self) -> SpanId {
        RandomIdGenerator::default().new_span_id()
    }

    fn record_in(&self, span: Recorded, parent: &Context) {
        NEXT_IDS.with(|n| n.set((Some(span.trace_id), Some(span.span_id))));
        let builder = self
            .inner
            .tracer
            .span_builder(span.name)
            .with_kind(span.kind)
            .with_start_time(span.start)
            .with_attributes(span.attributes);
        let mut built = self.inner.tracer.build_with_context(builder, parent);
        NEXT_IDS.with(|n| n.set((None, None)));
        built.set_status(span.status);
        built.end_with_timestamp(span.end.max(span.start));
    }

    /// Opens a live span under `parent` (`None`: a new trace).
    pub fn start_span(
        &self,
        name: impl Into<String>,
        parent: Option<&SpanContext>,
        kind: SpanKind,
        attributes: Vec<KeyValue>,
    ) -> LiveSpan {
        let cx = match parent {
            Some(p) => Context::new().with_remote_span_context(p.clone()),
            None => Context::new(),
        };
        let builder = self
            .inner
            .tracer
            .span_builder(name.into())
            .with_kind(kind)
            .with_attributes(attributes);
        LiveSpan {
            span: Some(self.inner.tracer.build_with_context(builder, &cx)),
        }
    }

    /// Exports what is buffered and stops the exporters (blocks; from async code call it
    /// through `spawn_blocking`). Later spans are dropped.
    pub fn shutdown(&self) {
        let _ = self.inner.provider.shutdown();
    }

    /// Exports what is buffered now, without stopping.
    pub fn flush(&self) {
        let _ = self.inner.provider.force_flush();
    }
}

/// A span being timed; ends when [`LiveSpan::end`] is called or it is dropped. The
/// `Default` span records nothing (tracing off).
#[derive(Debug, Default)]
pub struct LiveSpan {
    span: Option<opentelemetry_sdk::trace::Span>,
}

impl LiveSpan {
    /// A span that records nothing (tracing off): its methods do nothing.
    pub fn none() -> LiveSpan {
        LiveSpan { span: None }
    }

    /// Its context, the parent of its children; `None` when it records nothing.
    pub fn context(&self) -> Option<SpanContext> {
        self.span
            .as_ref()
            .map(|s| s.span_context().clone())
            .filter(SpanContext::is_valid)
    }

    pub fn set_attribute(&mut self, attribute: KeyValue) {
        if let Some(s) = &mut self.span {
            s.set_attribute(attribute);
        }
    }

    pub fn set_status(&mut self, status: Status) {
        if let Some(s) = &mut self.span {
            s.set_status(status);
        }
    }

    /// Ends it now with `status`.
    pub fn end(mut self, status: Status) {
        if let Some(mut s) = self.span.take() {
            s.set_status(status);
            s.end();
        }
    }
}

thread_local! {
    /// The ids of the span [`Telemetry::record`] is building on this thread.
    static NEXT_IDS: Cell<(Option<TraceId>, Option<SpanId>)> = const { Cell::new((None, None)) };
}

/// The SDK's random ids, except for a span [`Telemetry::record`] builds.
#[derive(Debug)]
struct Ids;

impl IdGenerator for Ids {
    fn new_trace_id(&self) -> TraceId {
        let (trace, span) = NEXT_IDS.with(Cell::get);
        match trace {
            Some(t) => {
                NEXT_IDS.with(|n| n.set((None, span)));
                t
            }
            None => RandomIdGenerator::default().new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        let (trace, span) = NEXT_IDS.with(Cell::get);
        match span {
            Some(s) => {
                NEXT_IDS.with(|n| n.set((trace, None)));
                s
            }
            None => RandomIdGenerator::default().new_span_id(),
        }
    }
}

fn sampler_of(setting: Option<SamplerSetting>) -> Sampler {
    let root = |r: ParentRoot| match r {
        ParentRoot::AlwaysOn => Sampler::AlwaysOn,
        ParentRoot::AlwaysOff => Sampler::AlwaysOff,
        ParentRoot::TraceIdRatio(f) => Sampler::TraceIdRatioBased(f),
    };
    match setting.unwrap_or(SamplerSetting::ParentBased(ParentRoot::AlwaysOn)) {
        SamplerSetting::AlwaysOn => Sampler::AlwaysOn,
        SamplerSetting::AlwaysOff => Sampler::AlwaysOff,
        SamplerSetting::TraceIdRatio(f) => Sampler::TraceIdRatioBased(f),
        SamplerSetting::ParentBased(r) => Sampler::ParentBased(Box::new(root(r))),
    }
}

pub(crate) fn resource(settings: &Settings, service: &str) -> Resource {
    let mut attributes: Vec<KeyValue> = settings
        .resource_attributes
        .iter()
        .filter(|(k, _)| k != "service.name" || settings.service_name.is_none())
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    attributes.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    let named = settings
        .resource_attributes
        .iter()
        .any(|(k, _)| k == "service.name");
    let mut builder = Resource::builder_empty().with_attributes(attributes);
    if let Some(name) = &settings.service_name {
        builder = builder.with_service_name(name.clone());
    } else if !named {
        builder = builder.with_service_name(service.to_owned());
    }
    builder.build()
}

fn otlp_exporter(settings: &Settings) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let url = settings.url().unwrap_or_default();
    let built = match settings.protocol.unwrap_or(Protocol::HttpProtobuf) {
        Protocol::Grpc => with_tonic(
            opentelemetry_otlp::SpanExporter::builder().with_tonic(),
            &url,
            &settings.headers,
        )?
        .build(),
        protocol @ (Protocol::HttpProtobuf | Protocol::HttpJson) => with_http(
            opentelemetry_otlp::SpanExporter::builder().with_http(),
            &url,
            protocol,
            &settings.headers,
        )
        .build(),
    };
    built.map_err(|e| TelemetryError::Exporter {
        url: url.clone(),
        reason: e.to_string(),
    })
}

/// An OTLP/gRPC exporter's builder (spans or metrics) sending to `url` with `headers`
/// as metadata, over TLS with the system's roots for `https://`.
pub(crate) fn with_tonic<B>(
    builder: B,
    url: &str,
    headers: &[(String, String)],
) -> Result<B, TelemetryError>
where
    B: WithTonicConfig + WithExportConfig,
{
    let fail = |reason: String| TelemetryError::Exporter {
        url: url.to_owned(),
        reason,
    };
    let mut metadata = opentelemetry_otlp::tonic_types::metadata::MetadataMap::new();
    for (k, v) in headers {
        let key = k
            .to_ascii_lowercase()
            .parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>()
            .map_err(|e| fail(format!("header `{k}`: {e}")))?;
        let value = v
            .parse()
            .map_err(|e| fail(format!("header `{k}` value: {e}")))?;
        metadata.insert(key, value);
    }
    let mut builder = builder.with_endpoint(url).with_metadata(metadata);
    if url.starts_with("https://") {
        builder = builder.with_tls_config(
            opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new().with_native_roots(),
        );
    }
    Ok(builder)
}

/// An OTLP/HTTP exporter's builder (spans or metrics) posting to `url`.
pub(crate) fn with_http<B>(
    builder: B,
    url: &str,
    protocol: Protocol,
    headers: &[(String, String)],
) -> B
where
    B: WithHttpConfig + WithExportConfig,
{
    builder
        .with_endpoint(url)
        .with_protocol(if protocol == Protocol::HttpJson {
            opentelemetry_otlp::Protocol::HttpJson
        } else {
            opentelemetry_otlp::Protocol::HttpBinary
        })
        .with_headers(headers.iter().cloned().collect::<HashMap<_, _>>())
}
