//! `[runners.feature_flags]`: a flag set in the runner's configuration wins over the
//! job's variable of that name (gitlab-runner gives the configuration precedence), the
//! job's scripts see the value in force, and the runner acts on it (`FF_TIMESTAMPS`
//! timestamps every log line).

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use mock_support::*;

async fn run_with(extra: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "flags",
        &["echo \"timestamps=$FF_TIMESTAMPS network=${FF_NETWORK_PER_BUILD:-unset}\""],
        &[],
        &[("FF_TIMESTAMPS", "false", false)],
    );
    run_jobs(
        config(front.url(), dir.path(), "", extra),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;
    log_text(&job)
}

/// Whether `line` starts with gitlab-runner's timestamp (`2026-11-28T05:20:00.123456Z`).
fn timestamped(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.len() > 27
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[10] == b'T'
        && line[..32.min(line.len())].contains('Z')
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_configuration_s_flags_win_over_the_job_s() {
    let log =
        run_with("[runners.feature_flags]\nFF_TIMESTAMPS = true\nFF_NETWORK_PER_BUILD = true\n")
            .await;
    assert!(
        log.contains("timestamps=true network=true"),
        "the job sees the configuration's values:\n{log}"
    );
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.iter().all(|line| timestamped(line)),
        "every line is timestamped:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_section_the_job_s_variable_decides() {
    let log = run_with("").await;
    assert!(log.contains("timestamps=false network=unset"), "{log}");
    assert!(
        !log.lines().any(timestamped),
        "no line is timestamped:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_configured_flag_changes_what_is_masked() {
    const TOKEN: &str = "glrt-t1_AbCdEfGhIjKlMnOpQrSt";
    for (extra, masked) in [
        ("", false),
        (
            "[runners.feature_flags]\nFF_MASK_ALL_DEFAULT_TOKENS = true\n",
            true,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mock, front) = mock_and_front().await;
        let job = enqueue(
            &mock,
            "tokens",
            &[&format!("echo \"printed: {TOKEN}\"")],
            &[],
            &[],
        );
        run_jobs(
            config(front.url(), dir.path(), "", extra),
            dir.path(),
            1,
            Duration::from_secs(60),
        )
        .await;
        let log = log_text(&job);
        let output = log
            .lines()
            .find(|line| line.starts_with("printed: "))
            .unwrap_or_else(|| panic!("no output line:\n{log}"));
        assert_eq!(
            !output.contains(TOKEN),
            masked,
            "with {extra:?} the runner token prefix is masked: {masked}\n{log}"
        );
    }
}
