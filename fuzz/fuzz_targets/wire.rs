//! The wire formats the server reads, without a server around them (many more
//! executions per second than the `http` target): the first byte picks the reader, the
//! rest is its input.
//!
//! - Runner API request bodies (`POST /runners`, `/runners/verify`, `DELETE /runners`,
//!   `/runners/managers`, `POST /jobs/request`, `PUT /jobs/:id`) as JSON
//!   ([`gantry_protocol::parse_json`]) and as URL-encoded forms
//!   ([`gantry_protocol::parse_form`]), the two ways the server decodes them. What
//!   decodes must encode back to JSON that decodes to the same value: what a runner
//!   sends is what the server reads.
//! - `Content-Range` of a trace patch and the `Range` answer: what parses formats back
//!   to text that parses to the same range.
//! - A job payload as the runner reads it ([`gantry_protocol::parse_job_response`]).
//!
//! Checked: no panic, and the round trips above.

#![no_main]

use gantry_protocol::{
    ContentRange, JobRequest, RegisterRunnerRequest, RunnerTokenRequest, TraceRange,
    UnregisterManagerRequest, UpdateJobRequest, VerifyRunnerRequest,
};
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Decode `body` as JSON and as a form; whatever decodes must survive a JSON round trip.
fn body<T>(body: &[u8])
where
    T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug,
{
    let json = gantry_protocol::parse_json::<T>(body);
    let form = gantry_protocol::parse_form::<T>(body);
    for decoded in [json, form].into_iter().flatten() {
        let encoded = serde_json::to_vec(&decoded).expect("a decoded body encodes");
        let again = gantry_protocol::parse_json::<T>(&encoded).unwrap_or_else(|e| {
            panic!(
                "{} does not decode ({e}) from {decoded:?}",
                String::from_utf8_lossy(&encoded)
            )
        });
        assert_eq!(
            again,
            decoded,
            "the JSON round trip changed the value: {}",
            String::from_utf8_lossy(&encoded)
        );
    }
}

fn ranges(text: &str) {
    if let Ok(range) = ContentRange::parse(text) {
        assert!(range.start() <= range.end());
        assert_eq!(ContentRange::parse(&range.to_string()).ok(), Some(range));
        // (`len` saturates for `0-18446744073709551615`.)
        if range.end() - range.start() < u64::MAX {
            assert_eq!(
                ContentRange::for_chunk(range.start(), range.len()),
                Some(range)
            );
        }
    }
    if let Ok(range) = TraceRange::parse(text) {
        assert_eq!(TraceRange::parse(&range.to_string()).ok(), Some(range));
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&which, rest)) = input.split_first() else {
        return;
    };
    match which % 8 {
        0 => body::<RegisterRunnerRequest>(rest),
        1 => body::<VerifyRunnerRequest>(rest),
        2 => body::<RunnerTokenRequest>(rest),
        3 => body::<UnregisterManagerRequest>(rest),
        4 => body::<JobRequest>(rest),
        5 => body::<UpdateJobRequest>(rest),
        6 => ranges(&String::from_utf8_lossy(rest)),
        _ => {
            let _ = gantry_protocol::parse_job_response(rest);
        }
    }
});
