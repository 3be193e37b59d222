//! A job's resource use, sent by Gantry's runner in the `resources` field of
//! `PUT /api/v4/jobs/:id` (an extra field: GitLab's Grape API ignores fields it does not
//! declare, so a Gantry runner still talks to GitLab). Figures are cumulative over the
//! whole job so far: every update carries the job's use up to then, the final update
//! its total.

use serde::{Deserialize, Serialize};

/// CPU, peak memory and storage I/O of one job (§4.1 extension).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobResources {
    /// CPU time spent in user mode, seconds.
    pub cpu_user_seconds: f64,
    /// CPU time spent in the kernel on the job's behalf, seconds.
    pub cpu_system_seconds: f64,
    /// The highest memory use seen, bytes (what each executor measures is in its
    /// module documentation).
    pub peak_memory_bytes: u64,
    /// Bytes read from storage.
    pub read_bytes: u64,
    /// Bytes written to storage.
    pub written_bytes: u64,
}

impl JobResources {
    /// Total CPU seconds (user + system).
    pub fn cpu_seconds(&self) -> f64 {
        self.cpu_user_seconds + self.cpu_system_seconds
    }

    /// `self` followed by `later` (another stage or container of the same job): CPU and
    /// I/O add up, the peak is the higher one.
    #[must_use]
    pub fn then(self, later: Self) -> Self {
        Self {
            cpu_user_seconds: self.cpu_user_seconds + later.cpu_user_seconds,
            cpu_system_seconds: self.cpu_system_seconds + later.cpu_system_seconds,
            peak_memory_bytes: self.peak_memory_bytes.max(later.peak_memory_bytes),
            read_bytes: self.read_bytes + later.read_bytes,
            written_bytes: self.written_bytes + later.written_bytes,
        }
    }

    /// `self` alongside `other` (a service container running at the same time): every
    /// figure adds up, the peaks included (an upper bound of the joint peak).
    #[must_use]
    pub fn alongside(self, other: Self) -> Self {
        Self {
            peak_memory_bytes: self.peak_memory_bytes + other.peak_memory_bytes,
            ..self.then(other)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_without_resources_omits_the_field_and_an_unknown_one_decodes() {
        let json = r#"{"cpu_user_seconds":1.5,"cpu_system_seconds":0.25,"peak_memory_bytes":10,"read_bytes":1,"written_bytes":2,"future":3}"#;
        let decoded: JobResources = serde_json::from_str(json).unwrap();
        assert_eq!(decoded.cpu_seconds(), 1.75);
        assert_eq!(decoded.written_bytes, 2);
        let later = JobResources {
            peak_memory_bytes: 4,
            ..decoded
        };
        assert_eq!(decoded.then(later).peak_memory_bytes, 10);
        assert_eq!(decoded.alongside(later).peak_memory_bytes, 14);
    }
}
