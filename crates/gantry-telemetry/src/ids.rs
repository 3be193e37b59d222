//! Trace and span ids a coordinator can compute again in any process, and W3C
//! `traceparent`.
//!
//! **The choice.** A pipeline gets a random trace id when it is created, stored with it
//! (`pipelines.trace_id`); every other id the coordinator needs later is *derived* from
//! it: the pipeline span's id is `SHA-256(trace id ‖ "pipeline")[..8]`, a job span's
//! `SHA-256(trace id ‖ "job" ‖ job id)[..8]`. So any replica, at any time (the job's
//! `TRACEPARENT` at assignment, the job span when the job ends, the pipeline span when
//! the pipeline ends), names the same spans without storing a span id or sharing a
//! seed, and the pipeline's creation spans — emitted before the pipeline has an id —
//! already know their parent. Random at creation, not a hash of the pipeline id (the
//! Collector's GitLab receiver hashes `finished_at`), because a trace id must be known
//! before the pipeline ends for jobs to continue it (`spec/telemetry.md` §2.6).
//! Spans nobody refers to later (queue waits, sections, creation steps) get the SDK's
//! random ids.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
use sha2::{Digest, Sha256};

/// A pipeline's trace: its stored id and the spans derived from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineTrace {
    pub trace_id: TraceId,
}

impl PipelineTrace {
    /// A fresh random trace id (never all zero).
    pub fn random() -> PipelineTrace {
        let mut id = 0u128;
        while id == 0 {
            id = rand::random::<u128>();
        }
        PipelineTrace {
            trace_id: TraceId::from(id),
        }
    }

    /// As stored: 32 lower-case hex digits. `None` for anything else (a corrupt or empty
    /// column means "no trace", never an error a job fails on).
    pub fn parse(hex: &str) -> Option<PipelineTrace> {
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let trace_id = TraceId::from_hex(hex).ok()?;
        (trace_id != TraceId::INVALID).then_some(PipelineTrace { trace_id })
    }

    pub fn to_hex(self) -> String {
        self.trace_id.to_string()
    }

    /// The pipeline run span (the trace's root).
    pub fn pipeline_span(self) -> SpanId {
        self.derive(b"pipeline", None)
    }

    /// The span of job `job_id` (created → done), the parent of its runner's spans.
    pub fn job_span(self, job_id: i64) -> SpanId {
        self.derive(b"job", Some(job_id))
    }

    fn derive(self, tag: &[u8], n: Option<i64>) -> SpanId {
        let mut h = Sha256::new();
        h.update(self.trace_id.to_bytes());
        h.update(tag);
        if let Some(n) = n {
            h.update(n.to_be_bytes());
        }
        let digest = h.finalize();
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&digest[..8]);
        if bytes == [0; 8] {
            bytes[7] = 1;
        }
        SpanId::from_bytes(bytes)
    }
}

/// `00-<trace id>-<span id>-<flags>` (W3C Trace Context, version `00`).
pub fn traceparent(trace_id: TraceId, span_id: SpanId, sampled: bool) -> String {
    format!(
        "00-{trace_id}-{span_id}-{}",
        if sampled { "01" } else { "00" }
    )
}

/// The remote parent a `traceparent` names; `None` when it is malformed (the W3C rule:
/// an invalid header is ignored, a new trace starts).
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    let lower_hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2)
        || version == "ff"
        || !lower_hex(trace, 32)
        || !lower_hex(span, 16)
        || !lower_hex(flags, 2)
        || (version == "00" && parts.next().is_some())
    {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_stable_and_distinct() {
        let t = PipelineTrace::parse("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        assert_eq!(t.to_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.job_span(7), t.job_span(7));
        assert_ne!(t.job_span(7), t.job_span(8));
        assert_ne!(t.job_span(1), t.pipeline_span());
        assert_ne!(PipelineTrace::random(), PipelineTrace::random());
        assert_eq!(
            PipelineTrace::parse("00000000000000000000000000000000"),
            None
        );
        assert_eq!(PipelineTrace::parse("xyz"), None);
    }

    #[test]
    fn traceparent_round_trips_and_rejects_bad_headers() {
        let t = PipelineTrace::random();
        let header = traceparent(t.trace_id, t.job_span(3), true);
        let parsed = parse_traceparent(&header).unwrap();
        assert_eq!(parsed.trace_id(), t.trace_id);
        assert_eq!(parsed.span_id(), t.job_span(3));
        assert!(parsed.is_sampled() && parsed.is_remote());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        let unsampled =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.is_sampled());
    }
}
