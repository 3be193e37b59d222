//! `gantry run --trace-file FILE`: spans written without a collector, one
//! `ExportTraceServiceRequest` per line in the OTLP/HTTP JSON encoding (hex ids, integer
//! enums, 64-bit integers as strings: the `opentelemetry-proto` crate's serde), the
//! shape of the specification's file exporter (JSON Lines, `TracesData` per line, which
//! has the same one field). Each exported batch is one line.

use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

#[derive(Debug)]
pub(crate) struct JsonLinesExporter {
    file: Mutex<std::fs::File>,
    resource: ResourceAttributesWithSchema,
}

impl JsonLinesExporter {
    /// Creates (truncates) `path`.
    pub(crate) fn create(path: &Path) -> std::io::Result<JsonLinesExporter> {
        Ok(JsonLinesExporter {
            file: Mutex::new(std::fs::File::create(path)?),
            resource: ResourceAttributesWithSchema::default(),
        })
    }

    fn write(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        if batch.is_empty() {
            return Ok(());
        }
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        };
        let mut line = serde_json::to_vec(&request)
            .map_err(|e| OTelSdkError::InternalFailure(format!("encode spans as JSON: {e}")))?;
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| OTelSdkError::InternalFailure("trace file lock poisoned".into()))?;
        file.write_all(&line)
            .and_then(|()| file.flush())
            .map_err(|e| OTelSdkError::InternalFailure(format!("write the trace file: {e}")))
    }
}

impl SpanExporter for JsonLinesExporter {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        std::future::ready(self.write(batch))
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = ResourceAttributesWithSchema::from(resource);
    }
}
