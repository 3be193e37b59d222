//! `gantry bench dispatch` with tiny numbers, so the benchmark keeps working: the real
//! binary starts its server, pollers take every job exactly once, and the report has its
//! shape (figures and verdicts replaced in the snapshot).

#![allow(clippy::panic)]

use std::process::Command;

/// Every number becomes `[N]` and every verdict `[verdict]`; the words stay.
fn shape(report: &str) -> String {
    report
        .replace("NOT met", "met")
        .lines()
        .map(|line| {
            line.split(' ')
                .map(|word| {
                    let core =
                        word.trim_matches(|c: char| matches!(c, '(' | ')' | ',' | ';' | ':'));
                    let replacement = if core.parse::<f64>().is_ok() {
                        "[N]"
                    } else if core == "met" {
                        "[verdict]"
                    } else {
                        return word.to_owned();
                    };
                    word.replacen(core, replacement, 1)
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn bench_dispatch_runs_and_reports() {
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args([
            "bench",
            "dispatch",
            "--pollers",
            "3",
            "--samples",
            "4",
            "--jobs",
            "12",
        ])
        .output()
        .expect("gantry runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    insta::assert_snapshot!(shape(&stdout));

    let usage = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .args(["bench", "dispatch", "--pollers", "0"])
        .output()
        .expect("gantry runs");
    assert_eq!(usage.status.code(), Some(2));
    insta::assert_snapshot!("zero_pollers", String::from_utf8_lossy(&usage.stderr));
}
