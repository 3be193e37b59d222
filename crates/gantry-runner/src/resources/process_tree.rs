//! The shell executor's measure: a process and its descendants, read from `/proc`
//! (Linux). O(processes of the job) small file reads per sample.
//!
//! * CPU: `utime`/`stime` of each live process plus its `cutime`/`cstime` (the children
//!   it reaped; a reaped process is in no live one's list, so nothing counts twice).
//! * I/O: `read_bytes`/`write_bytes` of `/proc/PID/io` (bytes that went to or came from
//!   storage; a reaped child's count is in its parent's).
//! * Memory: the larger of the biggest process's `VmHWM` (its peak RSS) and the tree's
//!   summed `VmRSS`.
//!
//! [`exited`] reads a shell that has exited but is not reaped yet (a zombie keeps its
//! CPU times and I/O counts, not its memory): the exact totals of everything it waited
//! for.

use std::path::PathBuf;

use gantry_protocol::JobResources;
use nix::sys::wait::{Id, WaitPidFlag, waitid};
use nix::unistd::{Pid, SysconfVar, sysconf};

/// One process's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct ProcessFigures {
    user_ticks: u64,
    system_ticks: u64,
    rss_bytes: u64,
    hwm_bytes: u64,
    read_bytes: u64,
    written_bytes: u64,
}

fn proc_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}"))
}

fn ticks_per_second() -> f64 {
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(ticks)) if ticks > 0 => ticks as f64,
        _ => 100.0,
    }
}

/// `utime stime cutime cstime rss` of `/proc/PID/stat` (fields 14–17 and 24); the
/// command name may hold spaces and parentheses, so fields count from the last `)`.
fn parse_stat(stat: &str) -> Option<(u64, u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let user = field(14)? + field(16)?;
    let system = field(15)? + field(17)?;
    let rss_pages = fields
        .get(24 - 3)
        .and_then(|f| f.parse::<i64>().ok())
        .unwrap_or(0);
    Some((user, system, u64::try_from(rss_pages).unwrap_or(0)))
}

/// A `Key: value kB` line of `/proc/PID/status`, in bytes.
fn status_kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// A `key: value` line of `/proc/PID/io`.
fn io_field(io: &str, key: &str) -> u64 {
    io.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

fn read_process(pid: u32, page_size: u64) -> Option<ProcessFigures> {
    let dir = proc_dir(pid);
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let (user_ticks, system_ticks, rss_pages) = parse_stat(&stat)?;
    let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
    let io = std::fs::read_to_string(dir.join("io")).unwrap_or_default();
    Some(ProcessFigures {
        user_ticks,
        system_ticks,
        rss_bytes: rss_pages * page_size,
        hwm_bytes: status_kib(&status, "VmHWM"),
        read_bytes: io_field(&io, "read_bytes"),
        written_bytes: io_field(&io, "write_bytes"),
    })
}

/// The children of `pid` (every thread's `children` list).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(proc_dir(pid).join("task")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            found.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    found
}

fn page_size() -> u64 {
    match sysconf(SysconfVar::PAGE_SIZE) {
        Ok(Some(size)) if size > 0 => size.unsigned_abs(),
        _ => 4096,
    }
}

fn to_resources(
    user_ticks: u64,
    system_ticks: u64,
    peak: u64,
    read: u64,
    written: u64,
) -> JobResources {
    let hz = ticks_per_second();
    JobResources {
        cpu_user_seconds: user_ticks as f64 / hz,
        cpu_system_seconds: system_ticks as f64 / hz,
        peak_memory_bytes: peak,
        read_bytes: read,
        written_bytes: written,
    }
}

/// The use of `root` and its live descendants now; `None` when `root` is gone.
pub(crate) fn sample(root: u32) -> Option<JobResources> {
    let page_size = page_size();
    let first = read_process(root, page_size)?;
    let mut total = first;
    let mut biggest = first.hwm_bytes;
    let mut rss = first.rss_bytes;
    let mut pending = children(root);
    let mut seen = 0usize;
    // A bound against a pid reused into a loop while walking.
    while let Some(pid) = pending.pop() {
        seen += 1;
        if seen > 100_000 {
            break;
        }
        let Some(figures) = read_process(pid, page_size) else {
            continue;
        };
        total.user_ticks += figures.user_ticks;
        total.system_ticks += figures.system_ticks;
        total.read_bytes += figures.read_bytes;
        total.written_bytes += figures.written_bytes;
        biggest = biggest.max(figures.hwm_bytes);
        rss += figures.rss_bytes;
        pending.extend(children(pid));
    }
    Some(to_resources(
        total.user_ticks,
        total.system_ticks,
        biggest.max(rss),
        total.read_bytes,
        total.written_bytes,
    ))
}

/// Blocks until `pid` (a child of this process) has exited, without reaping it, and
/// reads its final CPU and I/O totals (its own and its reaped children's; memory 0: a
/// zombie has none). `None` when it cannot be waited for or read (already reaped).
pub(crate) fn exited(pid: u32) -> Option<JobResources> {
    let raw = i32::try_from(pid).ok()?;
    waitid(
        Id::Pid(Pid::from_raw(raw)),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT,
    )
    .ok()?;
    let figures = read_process(pid, page_size())?;
    Some(to_resources(
        figures.user_ticks,
        figures.system_ticks,
        0,
        figures.read_bytes,
        figures.written_bytes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 30 12 3 20 0 1 0 5 1000 77 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((262, 33, 77)));
    }

    #[test]
    fn this_process_is_measured() {
        let now = sample(std::process::id()).unwrap();
        assert!(now.peak_memory_bytes > 0);
    }
}
