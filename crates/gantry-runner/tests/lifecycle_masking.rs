//! Masking in the uploaded trace: a masked value printed in pieces (across writes and
//! across trace patches) and a value straddling the 1 MiB patch boundary never reach
//! the coordinator, not even in part.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::mock_support;

use std::time::Duration;

use gitlab_runner_mock::MockJobState;
use mock_support::*;

const SECRET: &str = "s3cr3t-VALUE-0123456789";

fn patches_containing(front: &Front, needle: &str) -> usize {
    front
        .exchanges()
        .iter()
        .filter(|e| e.is_trace_patch())
        .filter(|e| String::from_utf8_lossy(&e.body).contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_secret_printed_in_pieces_across_patches_is_masked() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    let job = enqueue(
        &mock,
        "secretive",
        &[
            // First half, then a pause longer than several update intervals (patches go
            // out meanwhile), then the second half — in one command, so no echoed
            // command line comes between; built from pieces, so the echoed command line
            // does not hold them.
            "A=s3cr3t; B=-VAL; C=UE-01234; D=56789; printf \"before $A$B\"; sleep 5; printf \"$C$D after\\n\"",
            // (The mock masks the word `token` itself: its registry password is `token`.)
            "echo \"job-token-variable: $CI_JOB_TOKEN\"",
            "echo \"whole: $MY_SECRET\"",
        ],
        &[],
        &[("MY_SECRET", SECRET, true)],
    );
    run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(job.state(), MockJobState::Success);
    let log = log_text(&job);
    assert!(log.contains("before [MASKED] after"), "{log}");
    assert!(log.contains("whole: [MASKED]"), "{log}");
    assert!(log.contains("job-[MASKED]-variable: [MASKED]"), "{log}");
    assert!(job.log_patches() >= 2, "the secret should span patches");
    // Neither half, as printed, ever left the runner.
    assert_eq!(
        patches_containing(&front, "s3cr3t-VAL"),
        0,
        "the first half was sent"
    );
    assert_eq!(
        patches_containing(&front, "UE-0123456789"),
        0,
        "the second half was sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_secret_at_the_patch_size_boundary_is_masked() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, front) = mock_and_front().await;
    // 1 MiB patches: put the secret where the first patch would end.
    let job = enqueue(
        &mock,
        "big",
        &[
            "head -c 1048000 /dev/zero | tr '\\0' x; printf \"$MY_SECRET\\n\"; head -c 600000 /dev/zero | tr '\\0' y; echo",
        ],
        &[],
        &[("MY_SECRET", SECRET, true)],
    );
    run_jobs(
        config(front.url(), dir.path(), "", ""),
        dir.path(),
        1,
        Duration::from_secs(60),
    )
    .await;

    assert_eq!(job.state(), MockJobState::Success);
    let log = log_text(&job);
    assert!(
        log.contains("x[MASKED]\ny"),
        "the secret was not masked at the boundary"
    );
    assert_eq!(patches_containing(&front, "s3cr"), 0);
    assert!(job.log_patches() >= 2);
    let update = front.final_update(job.id());
    assert_eq!(update["output"]["bytesize"], job.log().len());
    assert_eq!(update["output"]["checksum"], checksum(&job.log()));
}
