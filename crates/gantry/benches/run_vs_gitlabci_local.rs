//! `gantry run` against gitlabci-local (PyPI, host mode: `gitlabci-local -H -p`) on the
//! same shell pipelines, side by side in one run, with the ratio.
//!
//! ```sh
//! cargo bench -p gantry --bench run_vs_gitlabci_local            # 7 rounds
//! BENCH_ROUNDS=15 cargo bench -p gantry --bench run_vs_gitlabci_local
//! ```
//!
//! gitlabci-local is installed into `target/gitlabci-local-venv` on first use (pip from
//! PyPI); `GITLABCI_LOCAL=/path/to/gitlabci-local` uses another one. Both tools run the
//! pipeline from a fresh process each round, in the same git checkout; the figure is the
//! median wall time of the whole command. Target (issue 5): Gantry at least 3× faster on
//! the 21-job pipeline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "git {args:?} failed");
}

/// A checkout holding `yaml` as `.gitlab-ci.yml`.
fn checkout(yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join(".gitlab-ci.yml"), yaml).expect("write the pipeline");
    std::fs::write(dir.path().join("README.md"), "bench\n").expect("write a file");
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "bench"]);
    dir
}

fn one_job() -> String {
    "job:\n  script:\n    - echo hello\n".to_owned()
}

/// 21 jobs in 3 stages of 7.
fn twenty_one_jobs() -> String {
    let mut yaml = String::from("stages: [build, test, deploy]\n");
    for stage in ["build", "test", "deploy"] {
        for i in 1..=7 {
            yaml.push_str(&format!(
                "{stage}-{i}:\n  stage: {stage}\n  script:\n    - echo {stage} {i}\n"
            ));
        }
    }
    yaml
}

fn gitlabci_local() -> PathBuf {
    if let Some(path) = std::env::var_os("GITLABCI_LOCAL") {
        return PathBuf::from(path);
    }
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let venv = target.join("gitlabci-local-venv");
    let bin = venv.join("bin/gitlabci-local");
    if !bin.exists() {
        eprintln!(
            "installing gitlabci-local from PyPI into {} ...",
            venv.display()
        );
        let ok = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
            && Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "gitlabci-local"])
                .status()
                .is_ok_and(|s| s.success());
        assert!(
            ok,
            "could not install gitlabci-local (python3 -m venv + pip install gitlabci-local)"
        );
    }
    bin
}

/// Wall time of one run; panics when the pipeline does not succeed.
fn time(mut cmd: Command, what: &str) -> Duration {
    let start = Instant::now();
    let out = cmd.output().expect("start the command");
    let elapsed = start.elapsed();
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    elapsed
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a name filter may follow.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
        .max(1);
    let gantry = PathBuf::from(env!("CARGO_BIN_EXE_gantry"));
    let gcl = gitlabci_local();
    let home = tempfile::tempdir().expect("a temp dir");
    println!(
        "gantry run vs gitlabci-local -H -p: median of {rounds} rounds, wall time per pipeline run"
    );
    println!(
        "{:<26} {:>4} {:>16} {:>12} {:>8}",
        "pipeline", "jobs", "gitlabci-local", "gantry run", "ratio"
    );
    // The same runs with TMPDIR on a tmpfs (as /tmp is by default on Debian 13, Fedora,
    // Arch): `gantry run` keeps its store, snapshot and job directories under TMPDIR; the
    // row shows what the disk file system costs (little since job directories are reused).
    let shm = Path::new("/dev/shm");
    let tmpfs = shm.is_dir() && tempfile::tempdir_in(shm).is_ok();
    let mut cases = vec![
        ("1 job", 1, one_job(), None),
        ("21 jobs in 3 stages", 21, twenty_one_jobs(), None),
    ];
    if tmpfs {
        cases.push(("21 jobs, TMPDIR=/dev/shm", 21, twenty_one_jobs(), Some(shm)));
    }
    for (name, jobs, yaml, tmpdir) in cases {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        let dir = checkout(&yaml);
        let gantry_cmd = || {
            let mut c = Command::new(&gantry);
            c.args(["run", "--executor", "shell", "--no-color"])
                .current_dir(dir.path())
                .env("HOME", home.path())
                .env("GANTRY_CACHE_DIR", home.path().join("gantry-cache"))
                .stdin(Stdio::null());
            if let Some(t) = tmpdir {
                c.env("TMPDIR", t);
            }
            c
        };
        let gcl_cmd = || {
            let mut c = Command::new(&gcl);
            c.args(["-H", "-p"])
                .current_dir(dir.path())
                .env("HOME", home.path())
                .stdin(Stdio::null());
            if let Some(t) = tmpdir {
                c.env("TMPDIR", t);
            }
            c
        };
        // Warm-up (page cache, first-run files), then alternate the tools each round.
        time(gantry_cmd(), "gantry run");
        time(gcl_cmd(), "gitlabci-local");
        let (mut g, mut l) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            l.push(time(gcl_cmd(), "gitlabci-local"));
            g.push(time(gantry_cmd(), "gantry run"));
        }
        let (g, l) = (median(g), median(l));
        println!(
            "{name:<26} {jobs:>4} {:>13.0} ms {:>9.0} ms {:>7.1}×",
            l.as_secs_f64() * 1e3,
            g.as_secs_f64() * 1e3,
            l.as_secs_f64() / g.as_secs_f64()
        );
    }
    println!(
        "ratio = gitlabci-local time / gantry run time (higher: Gantry faster); target ≥ 3× on 21 jobs"
    );
}
