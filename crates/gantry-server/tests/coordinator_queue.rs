//! The job queue: selection rules (tags, untagged, project runners, protected refs, fair
//! share), every pending job to exactly one runner under concurrency, and long polling.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use coordinator_support::*;
use gantry_server::coordinator::RunnerOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_requests_get_each_job_exactly_once() {
    let jobs: String = (0..30)
        .map(|i| format!("job{i}: {{script: [echo {i}]}}\n"))
        .collect();
    let e = env(&jobs).await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let mut runners = Vec::new();
    for _ in 0..20 {
        runners.push(e.any_runner().await);
    }
    let mut tasks = Vec::new();
    for runner in runners {
        let coord = e.coord.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(job) = coord
                .request_job(&runner, None, Duration::ZERO)
                .await
                .expect("request")
            {
                got.push((job.id, job.token));
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let ids: HashSet<i64> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(all.len(), 30, "every job handed out");
    assert_eq!(ids.len(), 30, "none twice");
    let tokens: HashSet<&String> = all.iter().map(|(_, t)| t).collect();
    assert_eq!(tokens.len(), 30, "every job its own token");
    assert!(e.statuses(p.id).await.values().all(|s| s == "running"));
    assert_eq!(e.status(p.id).await, "running");
}

#[tokio::test]
async fn a_waiting_request_wakes_when_a_job_becomes_pending() {
    let e =
        env("build: {stage: build, script: [make]}\ntest: {stage: test, script: [make test]}\n")
            .await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let build = e.take_some(&runner).await;
    // Nothing pending: a request with the current version holds.
    let version = e.coord.queue_version();
    let coord = e.coord.clone();
    let r = runner.clone();
    let waiting = tokio::spawn(async move {
        let start = Instant::now();
        let job = coord
            .request_job(&r, Some(&version), Duration::from_secs(30))
            .await
            .unwrap();
        (job, start.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "held while nothing is pending");
    let finished_at = Instant::now();
    let version_before = e.coord.queue_version();
    e.run(&build, true).await;
    assert_ne!(
        e.coord.queue_version(),
        version_before,
        "a job became pending: new version"
    );
    let (job, held) = waiting.await.unwrap();
    let job = job.expect("woken with the new job");
    assert_eq!(job.job_info.name, "test");
    assert!(held >= Duration::from_millis(300));
    assert!(
        finished_at.elapsed() < Duration::from_secs(5),
        "woke at once, not at the timeout"
    );
}

#[tokio::test]
async fn a_long_poll_ends_empty_after_its_wait() {
    let e = env("build: {script: [make], tags: [gpu]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let start = Instant::now();
    let got = e
        .coord
        .request_job(&runner, None, Duration::from_millis(400))
        .await
        .unwrap();
    assert!(got.is_none(), "an untagged runner never gets a tagged job");
    assert!(start.elapsed() >= Duration::from_millis(400));
    // The current version returns at once with no wait.
    let v = e.coord.queue_version();
    assert!(
        e.coord
            .request_job(&runner, Some(&v), Duration::ZERO)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn selection_follows_tags_scope_and_protection() {
    let e = env(r"
tagged: {script: [x], tags: [docker, linux]}
untagged: {script: [x]}
")
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let untagged_default = e.runner(RunnerOptions::default()).await;
    assert!(
        untagged_default.run_untagged,
        "a runner without tags runs untagged jobs (GitLab)"
    );
    let docker_only = e
        .runner(RunnerOptions {
            tags: vec!["docker".into()],
            run_untagged: false,
            ..RunnerOptions::default()
        })
        .await;
    assert!(!docker_only.run_untagged);
    assert!(
        e.take(&docker_only).await.is_none(),
        "needs every job tag, and no untagged jobs"
    );
    let both = e
        .runner(RunnerOptions {
            tags: vec!["linux".into(), "docker".into(), "big".into()],
            run_untagged: false,
            ..RunnerOptions::default()
        })
        .await;
    assert_eq!(e.take_some(&both).await.job_info.name, "tagged");
    assert!(e.take(&both).await.is_none());
    // A project runner of another project sees nothing.
    let repo2 = e.dir.path().join("repo2");
    std::fs::create_dir_all(&repo2).unwrap();
    git(&repo2, &["init", "-q", "-b", "main"]);
    commit(&repo2, &[(".gitlab-ci.yml", "x: {script: [x]}\n")], "x");
    let other = e
        .coord
        .create_project("other", repo2.to_str().unwrap())
        .await
        .unwrap();
    let theirs = e
        .runner(RunnerOptions {
            run_untagged: true,
            project_id: Some(other.id),
            locked: true,
            ..RunnerOptions::default()
        })
        .await;
    assert_eq!(theirs.runner_type, "project_type");
    assert!(e.take(&theirs).await.is_none());
    // A protected-only runner takes jobs of the default (protected) branch only.
    let protected = e
        .runner(RunnerOptions {
            run_untagged: true,
            protected_only: true,
            ..RunnerOptions::default()
        })
        .await;
    assert_eq!(e.take_some(&protected).await.job_info.name, "untagged");
    git(&e.repo, &["checkout", "-q", "-b", "topic"]);
    e.pipeline(project, "topic").await;
    assert!(e.take(&protected).await.is_none(), "topic is not protected");
    let _ = p;
}

/// Project `busy` with a pipeline of three pending jobs (`a0`..`a2`), project `quiet`
/// whose pipeline (`b0`) is not created yet, and a runner that takes any job.
async fn busy_and_quiet_projects() -> (
    Env,
    gantry_server::coordinator::Project,
    gantry_server::coordinator::Runner,
) {
    let many: String = (0..3).map(|i| format!("a{i}: {{script: [x]}}\n")).collect();
    let e = env(&many).await;
    let busy = e.project().await;
    e.pipeline(busy, "main").await;
    let repo2 = e.dir.path().join("repo2");
    std::fs::create_dir_all(&repo2).unwrap();
    git(&repo2, &["init", "-q", "-b", "main"]);
    commit(&repo2, &[(".gitlab-ci.yml", "b0: {script: [x]}\n")], "x");
    let quiet = e
        .coord
        .create_project("quiet", repo2.to_str().unwrap())
        .await
        .unwrap();
    let runner = e.any_runner().await;
    (e, quiet, runner)
}

#[tokio::test]
async fn fair_share_prefers_projects_with_fewer_running_jobs() {
    let (e, quiet, runner) = busy_and_quiet_projects().await;
    // FIFO first: the older project's first job.
    assert_eq!(e.take_some(&runner).await.job_info.name, "a0");
    // Created later, but its project runs nothing: it goes first now.
    e.pipeline(quiet.id, "main").await;
    assert_eq!(e.take_some(&runner).await.job_info.name, "b0");
    assert_eq!(e.take_some(&runner).await.job_info.name, "a1");
}

/// Fair share counts the jobs running when its queue holds several projects' jobs, also
/// those this process did not hand out (another replica's, or before a restart): the
/// counts are read from the store then, not only kept from this process's assignments.
#[tokio::test]
async fn fair_share_counts_the_jobs_another_process_started() {
    let (e, quiet, runner) = busy_and_quiet_projects().await;
    assert_eq!(e.take_some(&runner).await.job_info.name, "a0");
    e.pipeline(quiet.id, "main").await;
    // Another process over the same database, which started nothing itself.
    let other = open_coordinator(e.dir.path()).await;
    let take = || async {
        other
            .request_job(&runner, None, Duration::ZERO)
            .await
            .unwrap()
            .expect("a pending job")
            .job_info
            .name
    };
    assert_eq!(take().await, "b0", "its project runs nothing");
    assert_eq!(take().await, "a1");
}

/// A job this process's decision makes pending joins the queue's snapshot at once: the
/// request that takes it reads nothing of the queue (it read what was new before), and
/// the queue still hands out exactly what the store holds.
#[tokio::test]
async fn a_job_made_pending_here_is_taken_without_reading_the_queue() {
    let e = env("stages: [a, b]\nfirst: {stage: a, script: [x]}\nsecond: {stage: b, script: [x], variables: {V: v}}\nother: {stage: b, script: [x], tags: [gpu]}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let first = e.take_some(&runner).await;
    assert_eq!(first.job_info.name, "first");
    let reads = e.coord.queue_extension_reads();
    e.run(&first, true).await;
    let second = e.take_some(&runner).await;
    assert_eq!(second.job_info.name, "second");
    assert_eq!(e.coord.queue_extension_reads() - reads, 0);
    // The untagged runner cannot take the tagged job; nothing else is pending.
    assert!(e.take(&runner).await.is_none());
    let gpu = e
        .runner(RunnerOptions {
            description: "gpu".into(),
            tags: vec!["gpu".into()],
            ..RunnerOptions::default()
        })
        .await;
    assert_eq!(e.take_some(&gpu).await.job_info.name, "other");
    assert!(e.take(&gpu).await.is_none());
}

#[tokio::test]
async fn runner_tokens_and_registration() {
    let e = env("x: {script: [x]}\n").await;
    let boot = e.coord.bootstrap().await.unwrap();
    let admin = boot.admin_token.clone().unwrap();
    let registration = boot.registration_token.clone().unwrap();
    assert!(admin.starts_with("glpat-"));
    assert!(e.coord.is_admin(&admin).await.unwrap());
    assert!(!e.coord.is_admin("glpat-wrong").await.unwrap());
    assert!(!e.coord.is_admin("").await.unwrap());
    let again = e.coord.bootstrap().await.unwrap();
    assert_eq!(
        (again.admin_token, again.registration_token),
        (None, None),
        "plaintext only the first time"
    );

    let (r, t) = e
        .coord
        .create_runner(RunnerOptions::default())
        .await
        .unwrap();
    assert!(t.starts_with("glrt-t1_"), "{t}");
    assert_eq!(
        e.coord.runner_by_token(&t).await.unwrap().map(|r| r.id),
        Some(r.id)
    );
    assert_eq!(e.coord.runner_by_token("glrt-t1_nope").await.unwrap(), None);
    let err = e
        .coord
        .register_runner("wrong", RunnerOptions::default(), None)
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        gantry_server::coordinator::CoordinatorError::Forbidden(_)
    ));
    let (r2, t2) = e
        .coord
        .register_runner(&registration, RunnerOptions::default(), None)
        .await
        .unwrap();
    assert!(t2.starts_with("glrtr-"));
    assert_eq!(e.coord.runners().await.unwrap().len(), 2);
    let err = e
        .coord
        .create_runner(RunnerOptions {
            maximum_timeout: Some(60),
            ..RunnerOptions::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        gantry_server::coordinator::CoordinatorError::Invalid(_)
    ));

    // Deleting a runner fails the job it runs (runner_system_failure).
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let job = e.take_some(&r2).await;
    e.coord.delete_runner(r2.id).await.unwrap();
    let j = e.coord.job(job.id).await.unwrap();
    assert_eq!(
        (j.status.as_str(), j.failure_reason.as_deref()),
        ("failed", Some("runner_system_failure"))
    );
    assert_eq!(e.coord.runner_by_token(&t2).await.unwrap(), None);
    assert_eq!(e.status(p.id).await, "failed");
}

#[tokio::test]
async fn runner_maximum_timeout_caps_the_job_timeout() {
    let e = env("x: {script: [x], timeout: 3h}\n").await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e
        .runner(RunnerOptions {
            run_untagged: true,
            maximum_timeout: Some(1800),
            ..RunnerOptions::default()
        })
        .await;
    let job = e.take_some(&runner).await;
    assert_eq!(job.runner_info.timeout, 1800);
    assert_eq!(job.steps.as_ref().unwrap()[0].timeout, 1800);
    assert_eq!(e.coord.job(job.id).await.unwrap().timeout, Some(1800));
}

/// Concurrent pollers drain a pipeline: every job is handed out exactly once, and the rate is
/// printed. In CI it runs small (2 × 50 jobs, 10 pollers); for a measurement:
/// `GROUPS=5 POLLERS=50 cargo nextest run --release -p gantry-server
/// coordinator_queue::dispatch_throughput --no-capture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatch_throughput() {
    let env_num = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(d)
    };
    let pollers = env_num("POLLERS", 10);
    let groups = env_num("GROUPS", 2);
    let per_group = if groups > 2 { 200 } else { 50 };
    let expected = groups * per_group;
    let jobs: String = (0..groups)
        .map(|i| format!("job{i}: {{script: [x], parallel: {per_group}}}\n"))
        .collect();
    let e = env(&jobs).await;
    let project = e.project().await;
    let mut runners = Vec::new();
    for _ in 0..pollers {
        runners.push(e.any_runner().await);
    }
    let start = Instant::now();
    e.pipeline(project, "main").await;
    let created = start.elapsed();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for runner in runners {
        let coord = e.coord.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while coord
                .request_job(&runner, None, Duration::ZERO)
                .await
                .expect("request")
                .is_some()
            {
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let took = start.elapsed();
    println!(
        "created {expected} jobs in {created:?}; assigned {total} in {took:?}: {:.0} jobs/s",
        total as f64 / took.as_secs_f64()
    );
    assert_eq!(
        total, expected,
        "every pending job goes to exactly one runner"
    );
}

/// Why jobs wait is decided over every runner, which this process keeps for a few
/// seconds: views of waiting jobs polled again read the runners once, not once each (with
/// many runners that read was the cost of a view); a change of runners, and a runner
/// coming online, are seen at once.
#[tokio::test]
async fn why_jobs_wait_reads_the_runners_once_until_they_change() {
    let e = env("build: {script: [make]}\nlint: {script: [make lint]}\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    for n in 0..20 {
        e.runner(RunnerOptions {
            tags: vec![format!("t{n}")],
            run_untagged: false,
            ..RunnerOptions::default()
        })
        .await;
    }
    let codes = || async {
        let mut codes: Vec<&'static str> = e
            .coord
            .pending_reasons(p.id)
            .await
            .unwrap()
            .into_iter()
            .map(|(_, why)| why.code())
            .collect();
        codes.sort_unstable();
        codes
    };
    let reads = e.coord.runner_roster_reads();
    for _ in 0..10 {
        assert_eq!(
            codes().await,
            ["no_runner_runs_untagged", "no_runner_runs_untagged"]
        );
    }
    assert_eq!(e.coord.runner_roster_reads() - reads, 1, "read once");

    let runner = e.any_runner().await;
    assert_eq!(
        codes().await,
        ["runners_offline", "runners_offline"],
        "a new runner is seen at once"
    );
    assert_eq!(e.coord.runner_roster_reads() - reads, 2);
    // Its first request brings it online: the job it did not take waits for it.
    e.take_some(&runner).await;
    assert_eq!(codes().await, ["runners_busy"], "online, busy");
    assert_eq!(e.coord.runner_roster_reads() - reads, 3);
    assert_eq!(codes().await, ["runners_busy"]);
    assert_eq!(e.coord.runner_roster_reads() - reads, 3, "kept again");
}
