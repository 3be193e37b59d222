//! The job log as the coordinator stores it: a masked variable never reaches it, even
//! when the job prints the value in two pieces with a trace patch in between, or
//! thousands of times across the runner's pipe reads and more than one patch; and past
//! the runner's `output_limit` the log says so, the job keeps running and keeps its
//! result, and the coordinator holds exactly what the runner reported.
//!
//! The masked variable is `CI_JOB_TOKEN` (our coordinator sends it with `masked: true`;
//! it has no user-defined masked variables yet). The job also prints it in hex, which
//! no mask catches, so the test can learn the value and look for it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::e2e_runner_support;

use std::time::Duration;

use e2e_runner_support::*;
use gantry_runner::job::{Delivery, JobEnding};

const MASKING: &str = r#"
job:
  variables:
    GIT_STRATEGY: none
  script:
    - echo "hex $(printf '%s' "$CI_JOB_TOKEN" | od -An -tx1 -v | tr -d ' \n') xeh"
    - half=$(( ${#CI_JOB_TOKEN} / 2 ))
    - |
      printf '%s: %s' "first-half" "${CI_JOB_TOKEN:0:$half}"; sleep 7; printf '%s %s\n' "${CI_JOB_TOKEN:$half}" ":second-half"
    - |
      for i in $(seq 1 20000); do printf '%*s%s|\n' $(( i % 97 )) '' "$CI_JOB_TOKEN"; done
    - |
      echo "whole: $CI_JOB_TOKEN"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_masked_variable_split_across_writes_and_patches_never_reaches_the_coordinator() {
    let setup = Setup::new(MASKING, &[]).await;
    let server = &setup.server;
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "");
    let job = server
        .wait_job_status(
            setup.project,
            pipeline,
            "job",
            "running",
            Duration::from_secs(30),
        )
        .await;
    let id = job["id"].as_i64().unwrap();

    // During the sleep: the text before the first half has been patched to the
    // coordinator; the first half is held back (it may be the start of the secret).
    let partial = server
        .wait_trace(setup.project, id, "first-half: ", Duration::from_secs(30))
        .await;
    let token: String = {
        let line = partial
            .lines()
            .find(|l| l.starts_with("hex "))
            .expect("the token in hex");
        let hex = line.trim_start_matches("hex ").trim_end_matches(" xeh");
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        String::from_utf8(bytes).unwrap()
    };
    assert!(token.starts_with("glcbt-") && token.len() > 20, "{token}");
    let half = token.len() / 2;
    let (first, second) = token.split_at(half);
    let after = &partial[partial.find("first-half: ").unwrap() + "first-half: ".len()..];
    assert!(
        !after.contains(first) && !partial.contains(first),
        "the first half reached the coordinator:\n{partial}"
    );
    assert!(
        !partial.contains(" :second-half\n"),
        "still sleeping:\n{partial}"
    );

    server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    let summary = runner.stop(Duration::from_secs(30)).await;
    let job = server.job(setup.project, id).await;
    assert_eq!(job["status"], "success", "{job}");

    let stored = server.trace_bytes(setup.project, id).await;
    let log = String::from_utf8(stored.clone()).unwrap();
    for (what, secret) in [
        ("the token", token.as_str()),
        ("its first half", first),
        ("its second half", second),
    ] {
        assert!(
            !log.contains(secret),
            "{what} reached the coordinator:\n{log}"
        );
    }
    assert!(log.contains("first-half: [MASKED] :second-half\n"), "{log}");
    assert!(log.contains("whole: [MASKED]\n"), "{log}");
    // 20 000 copies on lines of varying length: many straddle the boundaries of the
    // runner's reads from the job's pipe, and the log spans more than one 1 MiB patch.
    assert_eq!(
        log.matches("[MASKED]|\n").count(),
        20_000,
        "every copy is masked"
    );
    assert!(
        stored.len() > 1024 * 1024,
        "the log spans more than one patch"
    );

    let report = &summary.jobs[0];
    assert_eq!(report.delivery, Delivery::Accepted);
    assert_eq!(report.trace_bytes, stored.len() as u64);
    assert_eq!(report.trace_checksum, checksum(&stored));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn output_past_output_limit_is_announced_and_the_job_keeps_its_result() {
    let ci = r#"
job:
  variables:
    GIT_STRATEGY: none
  script:
    - for i in $(seq 1 3000); do echo "line $i of a job that prints far more than its runner keeps"; done
    - echo "tail-marker"
    - touch "$CI_PROJECT_DIR/../script-completed"
"#;
    let setup = Setup::new(ci, &[]).await;
    let server = &setup.server;
    let pipeline = server.create_pipeline(setup.project).await;
    let runner = setup.runner("", "output_limit = 64");
    let done = server
        .wait_pipeline(setup.project, pipeline, Duration::from_secs(60))
        .await;
    // The script ran to its end.
    let completed = walk(&runner.builds_dir())
        .into_iter()
        .any(|p| p.ends_with("script-completed"));
    assert!(completed, "the job kept running past the limit");
    let summary = runner.stop(Duration::from_secs(30)).await;

    assert_eq!(done["status"], "success", "{done}");
    let job = server.job_named(setup.project, pipeline, "job").await;
    let stored = server
        .trace_bytes(setup.project, job["id"].as_i64().unwrap())
        .await;
    let log = String::from_utf8(stored.clone()).unwrap();
    assert!(
        log.contains("Job's log exceeded limit of 65536 bytes."),
        "{log}"
    );
    assert!(
        log.contains("Job execution will continue but no more output will be collected"),
        "{log}"
    );
    assert!(
        !log.contains("tail-marker") && !log.contains("line 3000 "),
        "{log}"
    );
    assert!(log.contains("Job succeeded"), "{log}");
    let report = &summary.jobs[0];
    assert_eq!(report.ending, JobEnding::Success);
    assert!(report.output_limit_exceeded);
    assert!(report.dropped_bytes > 100_000, "{}", report.dropped_bytes);
    assert!(
        log.contains(&format!("The job log exceeded output_limit (65536 bytes): {} bytes of output were not collected", report.dropped_bytes)),
        "{log}"
    );
    assert!(
        stored.len() < 65536 + 64 * 1024,
        "{} bytes stored",
        stored.len()
    );
    assert_eq!(report.trace_bytes, stored.len() as u64);
    assert_eq!(report.trace_checksum, checksum(&stored));
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            }
            out.push(path);
        }
    }
    out
}
