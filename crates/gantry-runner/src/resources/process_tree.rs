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
//! [`dump_command`] and [`from_dump`] take the same measure on a fleet instance, over
//! SSH (the instance executor): a shell command prints the tree's files, parsed here.
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

/// The use of `root` and its live descendants now; `None` when `root` is gone.
pub(crate) fn sample(root: u32) -> Option<JobResources> {
    let page_size = page_size();
    let first = read_process(root, page_size)?;
    let mut tree = vec![first];
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
        tree.push(figures);
        pending.extend(children(pid));
    }
    Some(total(&tree, ticks_per_second()))
}

/// A tree's figures: CPU and I/O summed, memory as the larger of the biggest peak and
/// the summed RSS.
fn total(tree: &[ProcessFigures], hz: f64) -> JobResources {
    let mut sum = ProcessFigures::default();
    let (mut biggest, mut rss) = (0, 0);
    for figures in tree {
        sum.user_ticks += figures.user_ticks;
        sum.system_ticks += figures.system_ticks;
        sum.read_bytes += figures.read_bytes;
        sum.written_bytes += figures.written_bytes;
        biggest = biggest.max(figures.hwm_bytes);
        rss += figures.rss_bytes;
    }
    JobResources {
        cpu_user_seconds: sum.user_ticks as f64 / hz,
        cpu_system_seconds: sum.system_ticks as f64 / hz,
        peak_memory_bytes: biggest.max(rss),
        read_bytes: sum.read_bytes,
        written_bytes: sum.written_bytes,
    }
}

/// A POSIX `sh` command printing the `/proc` files of the process whose id is in
/// `pid_file` (a path already quoted for `sh`) and of its descendants, for [`from_dump`]: the same measure taken on a
/// fleet instance over SSH (the instance executor). Prints nothing when the process is
/// gone.
pub(crate) fn dump_command(pid_file: &str) -> String {
    format!(
        "p=$(cat {pid_file} 2>/dev/null) && [ -d /proc/\"$p\" ] || exit 0; \
         walk() {{ for c in $(cat /proc/\"$1\"/task/*/children 2>/dev/null); do echo \"$c\"; walk \"$c\"; done; }}; \
         echo \"@@clock $(getconf CLK_TCK 2>/dev/null || echo 100) $(getconf PAGESIZE 2>/dev/null || echo 4096)\"; \
         for q in \"$p\" $(walk \"$p\"); do \
         echo \"@@stat\"; cat /proc/\"$q\"/stat 2>/dev/null; \
         echo \"@@status\"; grep -E '^Vm(HWM|RSS):' /proc/\"$q\"/status 2>/dev/null; \
         echo \"@@io\"; cat /proc/\"$q\"/io 2>/dev/null; done; exit 0"
    )
}

/// The figures of a [`dump_command`] output; `None` when it names no process.
pub(crate) fn from_dump(text: &str) -> Option<JobResources> {
    let mut hz = 100.0;
    let mut page = 4096u64;
    let mut tree: Vec<ProcessFigures> = Vec::new();
    let (mut stat, mut status, mut io) = (String::new(), String::new(), String::new());
    let mut part = 0u8;
    let mut flush = |stat: &mut String, status: &mut String, io: &mut String, page: u64| {
        if let Some((user_ticks, system_ticks, rss_pages)) = parse_stat(stat) {
            tree.push(ProcessFigures {
                user_ticks,
                system_ticks,
                rss_bytes: rss_pages * page,
                hwm_bytes: status_kib(status, "VmHWM"),
                read_bytes: io_field(io, "read_bytes"),
                written_bytes: io_field(io, "write_bytes"),
            });
        }
        stat.clear();
        status.clear();
        io.clear();
    };
    for line in text.lines() {
        if let Some(clock) = line.strip_prefix("@@clock ") {
            let mut words = clock.split_whitespace();
            hz = words
                .next()
                .and_then(|w| w.parse::<f64>().ok())
                .filter(|h| *h > 0.0)
                .unwrap_or(100.0);
            page = words
                .next()
                .and_then(|w| w.parse::<u64>().ok())
                .filter(|p| *p > 0)
                .unwrap_or(4096);
            continue;
        }
        match line {
            "@@stat" => {
                flush(&mut stat, &mut status, &mut io, page);
                part = 1;
            }
            "@@status" => part = 2,
            "@@io" => part = 3,
            _ => {
                let into = match part {
                    1 => &mut stat,
                    2 => &mut status,
                    3 => &mut io,
                    _ => continue,
                };
                into.push_str(line);
                into.push('\n');
            }
        }
    }
    flush(&mut stat, &mut status, &mut io, page);
    (!tree.is_empty()).then(|| total(&tree, hz))
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
    Some(total(
        &[ProcessFigures {
            rss_bytes: 0,
            hwm_bytes: 0,
            ..figures
        }],
        ticks_per_second(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_of_an_instances_tree_adds_up_as_a_local_one() {
        let dump = "@@clock 100 4096\n@@stat\n42 (sh) S 1 42 42 0 -1 0 0 0 0 0 150 50 10 5 20 0 1 0 5 1000 100 0\n@@status\nVmHWM:\t  2048 kB\nVmRSS:\t  400 kB\n@@io\nread_bytes: 4096\nwrite_bytes: 8192\n@@stat\n43 (python3 (x)) R 42 42 42 0 -1 0 0 0 0 0 100 0 0 0 20 0 1 0 6 1000 1000 0\n@@status\nVmHWM:\t  8192 kB\n@@io\nread_bytes: 0\nwrite_bytes: 100\n";
        let used = from_dump(dump).expect("two processes");
        // (150 + 10 + 100) user ticks, (50 + 5) system ticks at 100 Hz.
        assert!((used.cpu_user_seconds - 2.6).abs() < 1e-9, "{used:?}");
        assert!((used.cpu_system_seconds - 0.55).abs() < 1e-9, "{used:?}");
        // The biggest peak (8 MiB) beats the summed RSS (1,100 pages, 4.3 MiB).
        assert_eq!(used.peak_memory_bytes, 8192 * 1024);
        assert_eq!((used.read_bytes, used.written_bytes), (4096, 8292));
        assert_eq!(from_dump(""), None);
    }

    /// The command runs in `sh` here against this very process's tree.
    #[test]
    fn the_dump_command_reads_a_live_tree() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        std::fs::write(&pid_file, format!("{}\n", std::process::id())).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(dump_command(&crate::executor::quote(
                &pid_file.display().to_string(),
            )))
            .output()
            .unwrap();
        let used = from_dump(&String::from_utf8_lossy(&out.stdout)).expect("this process");
        assert!(used.peak_memory_bytes > 0, "{used:?}");
        std::fs::write(&pid_file, "999999999\n").unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(dump_command(&crate::executor::quote(
                &pid_file.display().to_string(),
            )))
            .output()
            .unwrap();
        assert_eq!(from_dump(&String::from_utf8_lossy(&out.stdout)), None);
    }

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
