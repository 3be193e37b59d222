//! A container's resource use from the Engine API (`GET /containers/{id}/stats`,
//! `stream=false&one-shot=true`: one answer at once, no second sample for a CPU
//! percentage), for [`crate::resources`].
//!
//! * CPU: `cpu_stats.cpu_usage.usage_in_usermode` / `usage_in_kernelmode` (nanoseconds;
//!   cgroup v1 `cpuacct.stat` and v2 `cpu.stat` alike).
//! * Memory: `memory_stats.max_usage` (cgroup v1 `memory.max_usage_in_bytes`). cgroup v2
//!   has no peak in the engine's answer: the container's `memory.peak` file is read
//!   when this runner can see it (`/sys/fs/cgroup/system.slice/docker-ID.scope` with
//!   the systemd driver, `/sys/fs/cgroup/docker/ID` with cgroupfs); else the current
//!   `usage`, whose highest sample [`crate::resources::StageMeter`] keeps.
//! * I/O: `blkio_stats.io_service_bytes_recursive`, `read`/`write` entries (v1 spells
//!   them `Read`/`Write`, v2 lower case), summed over devices.
//!
//! One request per sample; a container that is gone answers an error or zeroes, and
//! records nothing.

use bollard::Docker;
use bollard::models::ContainerStatsResponse;
use bollard::query_parameters::StatsOptions;
use futures_util::StreamExt;
use gantry_protocol::JobResources;

/// The container `id`'s use now; `None` when the engine has nothing (not running).
pub(crate) async fn sample(docker: &Docker, id: &str) -> Option<JobResources> {
    let options = StatsOptions {
        stream: false,
        one_shot: true,
    };
    let mut answers = std::pin::pin!(docker.stats(id, Some(options)));
    let stats = answers.next().await?.ok()?;
    let mut figures = from_stats(&stats)?;
    if let Some(peak) = cgroup_v2_peak(id) {
        figures.peak_memory_bytes = figures.peak_memory_bytes.max(peak);
    }
    Some(figures)
}

/// The figures of one stats answer; `None` for a stopped container's empty answer.
fn from_stats(stats: &ContainerStatsResponse) -> Option<JobResources> {
    let usage = stats.cpu_stats.as_ref()?.cpu_usage.as_ref()?;
    let user = usage.usage_in_usermode.unwrap_or(0);
    let system = usage.usage_in_kernelmode.unwrap_or(0);
    let memory = stats.memory_stats.as_ref();
    let peak = memory.and_then(|m| m.max_usage.or(m.usage)).unwrap_or(0);
    if usage.total_usage.unwrap_or(0) == 0 && peak == 0 {
        return None;
    }
    let (mut read, mut written) = (0u64, 0u64);
    let entries = stats
        .blkio_stats
        .as_ref()
        .and_then(|b| b.io_service_bytes_recursive.as_ref());
    for entry in entries.into_iter().flatten() {
        let value = entry.value.unwrap_or(0);
        match entry.op.as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some("read") => read += value,
            Some("write") => written += value,
            _ => {}
        }
    }
    Some(JobResources {
        cpu_user_seconds: user as f64 / 1e9,
        cpu_system_seconds: system as f64 / 1e9,
        peak_memory_bytes: peak,
        read_bytes: read,
        written_bytes: written,
    })
}

/// `memory.peak` of the container's cgroup v2, where this process can read it.
fn cgroup_v2_peak(id: &str) -> Option<u64> {
    [
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope/memory.peak"),
        format!("/sys/fs/cgroup/docker/{id}/memory.peak"),
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok()?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_v1_answer_gives_cpu_peak_and_io() {
        let json = r#"{
            "cpu_stats": {"cpu_usage": {"total_usage": 2500000000, "usage_in_usermode": 2000000000, "usage_in_kernelmode": 500000000}},
            "memory_stats": {"usage": 1000, "max_usage": 209715200},
            "blkio_stats": {"io_service_bytes_recursive": [
                {"major": 8, "minor": 0, "op": "Read", "value": 4096},
                {"major": 8, "minor": 0, "op": "Write", "value": 8192},
                {"major": 8, "minor": 0, "op": "Total", "value": 12288}
            ]}
        }"#;
        let stats: ContainerStatsResponse = serde_json::from_str(json).unwrap();
        let figures = from_stats(&stats).unwrap();
        assert_eq!(figures.cpu_user_seconds, 2.0);
        assert_eq!(figures.cpu_system_seconds, 0.5);
        assert_eq!(figures.peak_memory_bytes, 209_715_200);
        assert_eq!((figures.read_bytes, figures.written_bytes), (4096, 8192));
    }

    #[test]
    fn a_stopped_container_answers_nothing() {
        let stats: ContainerStatsResponse = serde_json::from_str(
            r#"{"cpu_stats": {"cpu_usage": {"total_usage": 0}}, "memory_stats": {}}"#,
        )
        .unwrap();
        assert_eq!(from_stats(&stats), None);
    }
}
