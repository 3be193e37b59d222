//! Shared harness of the `coordinator_*` tests: a real SQLite file and data directory in a
//! temp dir, real git repositories made with the git CLI, and a simulated runner that
//! talks to the coordinator API the way gitlab-runner talks HTTP.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gantry_pipeline::Source;
use gantry_protocol::{
    JobResponse, JobState, JobTraceOutput, TraceChecksum, UpdateJobRequest, VersionInfo,
};
use gantry_server::coordinator::{
    Coordinator, CoordinatorConfig, PipelineView, Runner, RunnerOptions, UpdateResult,
};
use gantry_store::Store;

pub struct Env {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub coord: Coordinator,
}

pub use gantry_test_support::{commit, git};

/// The URL of the test's database (SQLite in `dir`, or the PostgreSQL database that
/// stands for it: the same one every call).
pub async fn test_database(dir: &Path) -> String {
    gantry_store::testing::database_url(&dir.join("gantry.db"))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

pub async fn open_coordinator(dir: &Path) -> Coordinator {
    let (store, cfg) = test_setup(dir).await;
    gantry_server::testing::open_coordinator(store, cfg)
        .await
        .expect("coordinator opens")
}

/// [`open_coordinator`] with its blobs in `dir/data/blobs` whatever `GANTRY_TEST_BLOBS`
/// says: for tests of what a coordinator that shares nothing keeps on its own disk.
pub async fn open_coordinator_with_local_blobs(dir: &Path) -> Coordinator {
    let (store, cfg) = test_setup(dir).await;
    let blobs = gantry_server::coordinator::LocalDir::new(cfg.data_dir.join("blobs"));
    Coordinator::open_with_blobs(store, cfg, std::sync::Arc::new(blobs))
        .await
        .expect("coordinator opens")
}

async fn test_setup(dir: &Path) -> (Store, CoordinatorConfig) {
    let url = test_database(dir).await;
    let store = Store::open(&url).await.expect("store opens");
    let mut cfg = CoordinatorConfig::new(dir.join("data"), "http://127.0.0.1:8080");
    cfg.trace_limit = 64 * 1024;
    cfg.trace_body_idle_timeout = std::time::Duration::from_millis(500);
    cfg.artifact_limit = 1024 * 1024;
    (store, cfg)
}

/// Another coordinator on `env`'s database, with a data directory (mirrors) of its own:
/// what a second replica of the server is.
pub async fn second_coordinator(env: &Env) -> Coordinator {
    let url = test_database(env.dir.path()).await;
    let store = Store::open(&url).await.expect("store opens");
    let cfg = CoordinatorConfig::new(env.dir.path().join("other"), "http://127.0.0.1:8080");
    gantry_server::testing::open_coordinator(store, cfg)
        .await
        .expect("second coordinator")
}

/// [`env`] with [`open_coordinator_with_local_blobs`].
pub async fn env_with_local_blobs(ci: &str) -> Env {
    let mut e = env(ci).await;
    e.coord = open_coordinator_with_local_blobs(e.dir.path()).await;
    e
}

/// A coordinator and a repository on branch `main` holding `ci` as `.gitlab-ci.yml`.
pub async fn env(ci: &str) -> Env {
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    commit(
        &repo,
        &[(".gitlab-ci.yml", ci)],
        "first commit\n\nwith a body",
    );
    let coord = open_coordinator(dir.path()).await;
    Env { dir, repo, coord }
}

impl Env {
    /// Create project `demo` from the repository.
    pub async fn project(&self) -> i64 {
        self.coord
            .create_project("demo", self.repo.to_str().unwrap())
            .await
            .expect("project")
            .id
    }

    pub async fn pipeline(&self, project: i64, r: &str) -> PipelineView {
        self.coord
            .create_pipeline(project, r, Vec::new(), Source::Api)
            .await
            .expect("pipeline")
    }

    pub async fn runner(&self, opts: RunnerOptions) -> Runner {
        self.coord.create_runner(opts).await.expect("runner").0
    }

    pub async fn any_runner(&self) -> Runner {
        self.runner(RunnerOptions {
            description: "any".into(),
            run_untagged: true,
            ..RunnerOptions::default()
        })
        .await
    }

    /// Job name → status (latest attempts).
    pub async fn statuses(&self, pipeline: i64) -> BTreeMap<String, String> {
        self.coord
            .pipeline_jobs(pipeline)
            .await
            .unwrap()
            .into_iter()
            .filter(|j| !j.retried)
            .map(|j| (j.name, j.status.as_str().to_owned()))
            .collect()
    }

    pub async fn status(&self, pipeline: i64) -> String {
        self.coord
            .pipeline(pipeline)
            .await
            .unwrap()
            .status
            .as_str()
            .to_owned()
    }

    /// Ask for a job without waiting.
    pub async fn take(&self, runner: &Runner) -> Option<JobResponse> {
        self.coord
            .request_job(runner, None, Duration::ZERO)
            .await
            .expect("request")
    }

    pub async fn take_some(&self, runner: &Runner) -> JobResponse {
        self.take(runner).await.expect("a pending job")
    }

    /// What gitlab-runner does: accept (`running`), stream a trace, send the final state.
    pub async fn run(&self, job: &JobResponse, success: bool) -> UpdateResult {
        self.update(job, JobState::Running, None).await;
        let log = format!("running {}\n", job.job_info.name);
        assert_eq!(
            self.coord
                .append_trace(job.id, 0, log.clone().into_bytes())
                .await
                .unwrap(),
            log.len() as u64
        );
        let mut sum = TraceChecksum::new();
        sum.update(log.as_bytes());
        let state = if success {
            JobState::Success
        } else {
            JobState::Failed
        };
        self.update(job, state, Some(sum.output())).await
    }

    pub async fn update(
        &self,
        job: &JobResponse,
        state: JobState,
        output: Option<JobTraceOutput>,
    ) -> UpdateResult {
        let mut req = UpdateJobRequest::new(job.token.clone(), state, VersionInfo::default());
        if let Some(o) = output {
            req.output = o;
        }
        if state == JobState::Failed {
            req.failure_reason = Some(gantry_protocol::FailureReason::ScriptFailure);
            req.exit_code = 1;
        }
        self.coord.update_job(job.id, req).await.expect("update")
    }
}

pub fn var<'a>(job: &'a JobResponse, key: &str) -> Option<&'a str> {
    job.variable(key).map(|v| v.value.as_str())
}

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
