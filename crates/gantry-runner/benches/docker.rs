//! Per-job overhead of the Docker executor against `docker run --rm IMAGE true`, in the
//! same run, on the same engine.
//!
//! * **baseline**: `docker run --rm gantry-test/busybox:latest true` (the CLI: create,
//!   attach, start, wait, remove), timed from outside; half the samples before the jobs,
//!   half after, so a machine that gets busier or quieter affects both sides.
//! * **engine floor**: the same cycle through the Engine API (create, start, wait,
//!   remove; no CLI process), for reference.
//! * **gantry job**: a whole job through our coordinator (in-process, loopback HTTP) and
//!   our runner's poll loop with `executor = "docker"`, `script: [true]`, from the job's
//!   `Started` event (accepted) to `Finished` (final update delivered): connecting to the
//!   engine, checking the image, the git fetch of the sources on the host, the stage's
//!   container (create, attach, start, script on stdin, wait, remove), the clean-up by
//!   label, the trace and the final update. The first job is a warm-up and not counted.
//!
//! Run: `scripts/test-images.sh && cargo bench -p gantry-runner --bench docker`
//! (`GANTRY_BENCH_JOBS`, default 20, sets the samples per side). Prints medians and the
//! ratio gantry job / baseline (target ≤ 1.5).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/docker_support/mod.rs"]
mod docker_support;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::RemoveContainerOptions;
use docker_support::{BUSYBOX, Repo, TestServer, require_docker};
use futures_util::StreamExt;
use gantry_runner::config::Config;
use gantry_runner::job::{JobEnding, JobEvent};
use gantry_runner::poll::{PollEvent, PollOptions, Poller};

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn summary(name: &str, samples: &mut [Duration]) -> Duration {
    let m = median(samples);
    println!(
        "{name:<58} median {:>7}   min {:>7}   max {:>7}   (n = {})",
        ms(m),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
    m
}

fn docker_run_true(samples: usize) -> Vec<Duration> {
    (0..samples)
        .map(|_| {
            let started = Instant::now();
            let status = Command::new("docker")
                .args(["run", "--rm", BUSYBOX, "true"])
                .status()
                .expect("run docker");
            assert!(status.success(), "docker run --rm {BUSYBOX} true failed");
            started.elapsed()
        })
        .collect()
}

async fn api_cycle(samples: usize) -> Vec<Duration> {
    let docker = gantry_runner::executor::docker::connect()
        .await
        .expect("engine");
    let mut out = Vec::new();
    for _ in 0..samples {
        let started = Instant::now();
        let body = ContainerCreateBody {
            image: Some(BUSYBOX.to_owned()),
            cmd: Some(vec!["true".to_owned()]),
            labels: Some(HashMap::from([(
                "com.gantry.bench".to_owned(),
                "1".to_owned(),
            )])),
            ..ContainerCreateBody::default()
        };
        let id = docker
            .create_container(None, body)
            .await
            .expect("create")
            .id;
        docker.start_container(&id, None).await.expect("start");
        let _ = docker.wait_container(&id, None).next().await;
        let remove = RemoveContainerOptions {
            force: true,
            ..RemoveContainerOptions::default()
        };
        docker
            .remove_container(&id, Some(remove))
            .await
            .expect("remove");
        out.push(started.elapsed());
    }
    out
}

/// Per job id: when it started, and when it finished.
type JobTimes = Arc<Mutex<HashMap<i64, (Instant, Option<Instant>)>>>;

async fn gantry_jobs(samples: usize) -> Vec<Duration> {
    let jobs = samples + 1;
    let ci: String = (0..jobs)
        .map(|i| format!("job-{i:03}:\n  script: [\"true\"]\n"))
        .collect();
    let repo = Repo::new(&[(".gitlab-ci.yml", &ci), ("README.md", "bench\n")]);
    let server = TestServer::start().await;
    server.project_with_pipeline(&repo).await;
    let token = server.runner_token().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let text = format!(
        "concurrent = 1\ncheck_interval = 1\n\n[[runners]]\nurl = \"{}\"\ntoken = \"{token}\"\nexecutor = \"docker\"\n\n[runners.docker]\nimage = \"{BUSYBOX}\"\npull_policy = \"if-not-present\"\n",
        server.url
    );
    let (config, _) = Config::from_toml(&text, &dir.path().join("config.toml")).expect("config");
    let mut options = PollOptions::new("s_be4c4d0c4e21");
    options.max_jobs = Some(jobs);
    options.work_dir = dir.path().to_owned();
    let times: JobTimes = Arc::default();
    let seen = Arc::clone(&times);
    options.events = Arc::new(move |event: &PollEvent| {
        if let PollEvent::Job { event, .. } = event {
            let now = Instant::now();
            let mut times = seen.lock().unwrap();
            match event {
                JobEvent::Started { job_id, .. } => {
                    times.insert(*job_id, (now, None));
                }
                JobEvent::Finished { job_id, .. } => {
                    if let Some(entry) = times.get_mut(job_id) {
                        entry.1 = Some(now);
                    }
                }
                _ => {}
            }
        }
    });
    let (poller, _handle) = Poller::new(config, options).expect("poller");
    let summary = poller.run().await;
    assert_eq!(summary.jobs.len(), jobs);
    for report in &summary.jobs {
        assert_eq!(report.ending, JobEnding::Success, "job {}", report.job_id);
    }
    let times = times.lock().unwrap();
    let mut ordered: Vec<_> = times.iter().collect();
    ordered.sort_by_key(|(id, _)| **id);
    ordered
        .into_iter()
        .skip(1)
        .map(|(_, (start, end))| end.expect("finished").duration_since(*start))
        .collect()
}

fn main() {
    let samples: usize = std::env::var("GANTRY_BENCH_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n >= 2)
        .unwrap_or(20);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(require_docker());
    println!("Docker executor overhead, {samples} samples per side ({BUSYBOX})");
    let mut baseline = docker_run_true(samples / 2);
    let mut floor = runtime.block_on(api_cycle(samples));
    let mut jobs = runtime.block_on(gantry_jobs(samples));
    baseline.extend(docker_run_true(samples - samples / 2));
    let base = summary("docker run --rm IMAGE true (baseline)", &mut baseline);
    summary("container create+start+wait+remove via the API", &mut floor);
    let job = summary(
        "gantry job, docker executor, script `true` (whole job)",
        &mut jobs,
    );
    println!(
        "ratio gantry job / baseline: {:.2}x (target <= 1.5x)",
        job.as_secs_f64() / base.as_secs_f64()
    );
}
