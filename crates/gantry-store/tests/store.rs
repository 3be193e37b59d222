//! The store against real databases: each test runs twice, on an SQLite file in a temp
//! dir and on a database of its own in the PostgreSQL server named by
//! `GANTRY_TEST_POSTGRES_URL` (`scripts/test` starts one with `scripts/test-postgres.sh`;
//! without it the PostgreSQL half fails, saying so).

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;

use gantry_store::*;

#[derive(Clone, Copy, Debug)]
enum Db {
    Sqlite,
    Postgres,
}

/// A fresh, migrated store on `db`.
async fn open(db: Db) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = match db {
        Db::Sqlite => format!("sqlite://{}", dir.path().join("gantry.db").display()),
        Db::Postgres => testing::postgres_database()
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    };
    let store = Store::open(&url).await.expect("store opens");
    assert_eq!(
        store.backend(),
        match db {
            Db::Sqlite => Backend::Sqlite,
            Db::Postgres => Backend::Postgres,
        }
    );
    (dir, store)
}

/// Each test once per backend: `sqlite::<name>` and `postgres::<name>`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::Db::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::Db::Postgres).await
                }
            )*
        }
    };
}

/// An instance runner (untagged jobs, no limits) with this token hash; description `builder`.
fn runner(token_hash: &str) -> NewRunner {
    NewRunner {
        token_hash: token_hash.to_owned(),
        description: "builder".into(),
        tags: vec![],
        run_untagged: true,
        locked: false,
        protected_only: false,
        project_id: None,
        group_path: None,
        maximum_timeout: None,
        paused: false,
        any_tags: false,
        name: None,
        maintenance_note: None,
    }
}

fn project(name: &str) -> NewProject {
    NewProject {
        name: name.into(),
        repo_url: "/tmp/repo".into(),
        default_branch: "main".into(),
        timeout_secs: 3600,
        ci_config_path: ".gitlab-ci.yml".into(),
        protected_branches: vec!["main".into()],
    }
}

fn job(name: &str, status: &str) -> NewJob {
    NewJob {
        name: name.into(),
        stage: "test".into(),
        stage_idx: 2,
        status: st(status),
        attempt: 1,
        allow_failure: false,
        spec: "{}".into(),
        tags: vec!["linux".into()],
        protected: false,
        bridge: false,
        failure_reason: None,
        environment: None,
        resource_group: None,
    }
}

/// A job of `name` with an environment (`action`), its URL `https://<env>.example.com`.
fn env_job(name: &str, env: &str, action: &str, on_stop: Option<&str>) -> NewJob {
    NewJob {
        environment: Some(NewJobEnvironment {
            name: env.into(),
            slug: env.replace('/', "-"),
            action: action.into(),
            initial_tier: "development".into(),
            declared_tier: None,
            url: Some(format!("https://{}.example.com", env.replace('/', "-"))),
            auto_stop_in: Some(60_000),
            on_stop: on_stop.map(str::to_owned),
        }),
        ..job(name, "created")
    }
}

fn pipeline(project_id: i64) -> NewPipeline {
    NewPipeline {
        project_id,
        iid: 0, // `create` takes one
        ref_name: "main".into(),
        tag: false,
        sha: "a".repeat(40),
        before_sha: "0".repeat(40),
        source: "push".into(),
        status: st("created"),
        failure_reason: None,
        yaml_errors: None,
        variables: "{}".into(),
        protected: true,
        parent_job_id: None,
        push: None,
        schedule: None,
        trace_id: None,
        trigger_short_token: None,
        merge_request: None,
    }
}

/// A SQLite database in `dir` migrated up to (not including) migration `below` — of which
/// there are `count` before it — holding the rows `sql` inserts: the database an older
/// Gantry left. Returns its URL (the store then opens it and migrates the rest).
async fn database_before(dir: &tempfile::TempDir, below: i64, count: usize, sql: &str) -> String {
    use sqlx::Executor as _;

    let url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.expect("connect");
    let mut migrator = sqlx::migrate::Migrator::new(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/migrations/sqlite"
    )))
    .await
    .expect("migrations");
    let before: Vec<_> = migrator
        .migrations
        .iter()
        .filter(|m| m.version < below)
        .cloned()
        .collect();
    assert_eq!(before.len(), count, "migrations before {below}");
    migrator.migrations = before.into();
    migrator.run(&pool).await.expect("migrate the old database");
    pool.execute(sql).await.expect("the old rows");
    pool.close().await;
    url
}

/// Create `p` with the project's next `iid`, as the coordinator does.
async fn create(
    s: &Store,
    p: &NewPipeline,
    jobs: &[NewJob],
    now: i64,
) -> gantry_store::Result<(Pipeline, Vec<Job>)> {
    let iid = s.allocate_pipeline_iid(p.project_id).await?;
    let pipeline = s
        .create_pipeline(&NewPipeline { iid, ..p.clone() }, jobs, now)
        .await?;
    let jobs = s.pipeline_jobs(pipeline.id).await?;
    Ok((pipeline, jobs))
}

async fn projects_are_unique_by_name(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("created");
    assert_eq!(s.project_by_name("demo").await.expect("found"), p);
    let err = s
        .create_project(&project("demo"), 2)
        .await
        .expect_err("duplicate");
    assert!(matches!(err, StoreError::Conflict(_)), "{err}");
    assert!(matches!(
        s.project(999).await,
        Err(StoreError::NotFound("project"))
    ));
}

async fn pipelines_get_per_project_iids_and_their_jobs(db: Db) {
    let (_d, s) = open(db).await;
    let a = s.create_project(&project("a"), 1).await.expect("a");
    let b = s.create_project(&project("b"), 1).await.expect("b");
    let (p1, jobs) = create(
        &s,
        &pipeline(a.id),
        &[job("build", "created"), job("test", "created")],
        10,
    )
    .await
    .expect("p1");
    // A traced pipeline keeps its trace id (the coordinator derives span ids from it).
    let traced = NewPipeline {
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        ..pipeline(a.id)
    };
    let (p2, _) = create(&s, &traced, &[], 11).await.expect("p2");
    assert_eq!(
        s.pipeline(p2.id).await.expect("p2").trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    assert_eq!(p1.trace_id, None);
    let (p3, _) = create(&s, &pipeline(b.id), &[], 12).await.expect("p3");
    assert_eq!((p1.iid, p2.iid, p3.iid), (1, 2, 1));
    assert_eq!(
        jobs.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
        ["build", "test"]
    );
    assert_eq!(jobs[0].tags, ["linux"]);
    let (of_a, total) = s
        .pipelines_page(a.id, &PipelineFilter::default(), 0, 100)
        .await
        .expect("list");
    assert_eq!((of_a.len(), total), (2, 2));
    assert_eq!(s.active_pipelines().await.expect("active").len(), 3);
    let of_b = s.active_pipelines_of(b.id).await.expect("active of b");
    assert_eq!(of_b.iter().map(|p| p.id).collect::<Vec<_>>(), [p3.id]);

    // An iid no pipeline got is given back, unless a later one was taken meanwhile.
    let unused = s.allocate_pipeline_iid(a.id).await.expect("allocate");
    assert_eq!(unused, 3);
    s.release_pipeline_iid(a.id, unused).await.expect("release");
    assert_eq!(s.allocate_pipeline_iid(a.id).await.expect("again"), 3);
    let later = s.allocate_pipeline_iid(a.id).await.expect("later");
    s.release_pipeline_iid(a.id, 3)
        .await
        .expect("release an older one");
    assert_eq!(
        s.allocate_pipeline_iid(a.id).await.expect("next"),
        later + 1
    );
    assert!(matches!(
        s.allocate_pipeline_iid(999).await,
        Err(StoreError::NotFound("project"))
    ));
}

/// A pipeline's jobs go in by the hundred per statement: each keeps its own row and
/// what it brings along (its environment, its resource group), across the batches.
async fn a_large_pipeline_keeps_each_jobs_row_environment_and_resource_group(db: Db) {
    let (_d, s) = open(db).await;
    let a = s.create_project(&project("a"), 1).await.expect("a");
    let jobs: Vec<NewJob> = (0..250)
        .map(|i| {
            let name = format!("job {i}");
            match i % 50 {
                7 => env_job(&name, &format!("review/{i}"), "start", None),
                8 => NewJob {
                    resource_group: Some(format!("group-{i}")),
                    ..job(&name, "created")
                },
                9 => NewJob {
                    failure_reason: Some("unmet_prerequisites".into()),
                    ..job(&name, "failed")
                },
                _ => NewJob {
                    stage_idx: i,
                    allow_failure: i % 2 == 0,
                    ..job(&name, "created")
                },
            }
        })
        .collect();
    let (p, rows) = create(&s, &pipeline(a.id), &jobs, 1)
        .await
        .expect("pipeline");
    assert_eq!(rows.len(), 250);
    let names: Vec<String> = (0..250).map(|i| format!("job {i}")).collect();
    assert_eq!(
        rows.iter().map(|j| j.name.clone()).collect::<Vec<_>>(),
        names
    );
    assert!(rows.windows(2).all(|w| w[0].id < w[1].id), "ids in order");
    let envs = s
        .environments_page(a.id, &EnvironmentFilter::default(), 0, 10)
        .await
        .expect("environments")
        .0;
    assert_eq!(envs.len(), 5);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row.pipeline_id, p.id);
        match i % 50 {
            7 => {
                let env = envs
                    .iter()
                    .find(|e| e.name == format!("review/{i}"))
                    .expect("its environment");
                assert_eq!(row.environment_id, Some(env.id), "{}", row.name);
                let deployment = s.job_deployment(row.id).await.expect("read").expect("one");
                assert_eq!(deployment.job_id, Some(row.id));
            }
            8 => {
                assert_eq!(row.environment_id, None);
                s.resource_group(a.id, &format!("group-{i}"))
                    .await
                    .expect("its resource group");
            }
            9 => {
                // Created failed: finished when it is created.
                assert_eq!(row.status.as_str(), "failed");
                assert_eq!(row.failure_reason.as_deref(), Some("unmet_prerequisites"));
                assert_eq!(row.finished_at, Some(1), "{}", row.name);
            }
            _ => {
                assert_eq!(row.finished_at, None, "{}", row.name);
                assert_eq!(row.environment_id, None);
                assert_eq!(row.stage_idx, i64::try_from(i).unwrap());
                assert_eq!(row.allow_failure, i % 2 == 0);
            }
        }
    }
    assert_eq!(s.resource_groups(a.id).await.expect("groups").len(), 5);
    // The jobs not done with a resource are read by their column, nothing else.
    let waiting = s.resource_jobs(a.id).await.expect("resource jobs");
    assert_eq!(
        waiting
            .iter()
            .map(|j| (j.id, j.group.clone(), j.status))
            .collect::<Vec<_>>(),
        rows.iter()
            .enumerate()
            .filter(|(i, _)| i % 50 == 8)
            .map(|(i, r)| (r.id, format!("group-{i}"), st("created")))
            .collect::<Vec<_>>()
    );
    assert!(waiting.iter().all(|j| j.pipeline_id == p.id && !j.retried));
}

async fn a_trigger_job_creates_one_downstream_pipeline_at_most(db: Db) {
    let (_d, s) = open(db).await;
    let a = s.create_project(&project("a"), 1).await.expect("a");
    let (parent, jobs) = create(&s, &pipeline(a.id), &[job("trigger", "running")], 1)
        .await
        .expect("parent");
    let child = NewPipeline {
        parent_job_id: Some(jobs[0].id),
        source: "parent_pipeline".into(),
        ..pipeline(a.id)
    };
    let (created, _) = create(&s, &child, &[job("inner", "created")], 2)
        .await
        .expect("child");
    assert_eq!(created.parent_job_id, Some(jobs[0].id));
    assert_eq!(
        s.pipeline(parent.id).await.expect("read").parent_job_id,
        None
    );
    match create(&s, &child, &[job("inner", "created")], 3).await {
        Err(StoreError::Conflict(m)) => assert!(m.contains("already created"), "{m}"),
        other => panic!("a second child of one trigger job: {other:?}"),
    }
    // Nothing of the refused one was kept.
    let (of_a, total) = s
        .pipelines_page(a.id, &PipelineFilter::default(), 0, 100)
        .await
        .expect("list");
    assert_eq!((of_a.len(), total), (2, 2));
    assert_eq!(
        s.pipeline_by_parent_job(jobs[0].id)
            .await
            .expect("by job")
            .map(|p| p.id),
        Some(created.id)
    );
    let down = s.downstream_pipelines(parent.id).await.expect("downstream");
    assert_eq!(down.iter().map(|p| p.id).collect::<Vec<_>>(), [created.id]);
    assert!(
        s.downstream_pipelines(created.id)
            .await
            .expect("none")
            .is_empty()
    );
}

async fn apply_is_atomic_and_optimistically_locked(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let (pl, jobs) = create(&s, &pipeline(p.id), &[job("build", "created")], 1)
        .await
        .expect("pipeline");
    let change = PipelineChange {
        status: st("pending"),
        started_at: None,
        finished_at: None,
        jobs: vec![JobUpdate {
            id: jobs[0].id,
            status: st("pending"),
            queued_at: Some(5),
            ..JobUpdate::default()
        }],
        new_jobs: vec![],
        ended: false,
        guard: None,
    };
    s.apply(pl.id, pl.lock_version, &change, 5)
        .await
        .expect("applied");
    // A second writer holding the old version must not overwrite.
    let mut late = change.clone();
    late.jobs[0].queued_at = Some(6);
    let err = s
        .apply(pl.id, pl.lock_version, &late, 6)
        .await
        .expect_err("stale");
    assert!(matches!(err, StoreError::Stale));
    assert_eq!(s.job(jobs[0].id).await.expect("job").queued_at, Some(5));
    let pl2 = s.pipeline(pl.id).await.expect("pipeline");
    assert_eq!(
        (pl2.status.as_str(), pl2.lock_version),
        ("pending", pl.lock_version + 1)
    );
    // A failing statement rolls the whole change back (job id that violates nothing but a
    // new job row with a unique token is fine; force failure with a bad pipeline id).
    assert!(s.apply(9999, 0, &change, 7).await.is_err());
    assert_eq!(
        s.job(jobs[0].id).await.expect("job").status.as_str(),
        "pending"
    );
    // Retry: old attempt flagged, new row inserted, in one step.
    let retry = PipelineChange {
        status: st("running"),
        jobs: vec![JobUpdate {
            id: jobs[0].id,
            status: st("failed"),
            retried: true,
            ..JobUpdate::default()
        }],
        new_jobs: vec![NewJob {
            attempt: 2,
            ..job("build", "pending")
        }],
        ..PipelineChange::default()
    };
    s.apply(pl.id, pl2.lock_version, &retry, 8)
        .await
        .expect("retry");
    let all = s.pipeline_jobs(pl.id).await.expect("jobs");
    assert_eq!(all.len(), 2);
    assert!(all[0].retried && !all[1].retried && all[1].attempt == 2);
}

/// A change that moves more jobs than one statement updates (a stage of 250 jobs): every
/// row gets its own values, an absent exit code, failure reason, time or manual variables
/// keeps what the row had, a job that stops executing loses its token while one that is
/// `canceling` keeps it, and a job named twice ends as its last update says.
async fn a_change_to_many_jobs_updates_each_row(db: Db) {
    let (_d, s) = open(db).await;
    let p = s.create_project(&project("a"), 1).await.expect("a");
    let jobs: Vec<NewJob> = (0..250)
        .map(|i| job(&format!("job {i}"), "created"))
        .collect();
    let (pl, rows) = create(&s, &pipeline(p.id), &jobs, 1)
        .await
        .expect("pipeline");
    let queue = PipelineChange {
        status: st("pending"),
        jobs: rows
            .iter()
            .enumerate()
            .map(|(i, j)| JobUpdate {
                id: j.id,
                status: st("pending"),
                allow_failure: i % 3 == 0,
                queued_at: Some(1000 + i64::try_from(i).unwrap()),
                scheduled_at: Some(7),
                manual_variables: (i == 5).then(|| "[{\"key\":\"A\"}]".to_owned()),
                ..JobUpdate::default()
            })
            .collect(),
        ..PipelineChange::default()
    };
    s.apply(pl.id, pl.lock_version, &queue, 2)
        .await
        .expect("queued");
    let runner = s.create_runner(&runner("r"), 1).await.expect("runner");
    for i in [3, 150, 249] {
        assert!(
            s.assign_job(rows[i].id, runner.id, &format!("tok-{i}"), 3600, 3)
                .await
                .expect("assign")
                .is_some()
        );
    }
    let mut updates: Vec<JobUpdate> = rows
        .iter()
        .enumerate()
        .filter(|(i, _)| ![3, 150, 249].contains(i))
        .map(|(i, j)| JobUpdate {
            id: j.id,
            status: st(if i < 100 { "skipped" } else { "pending" }),
            retried: i == 200,
            allow_failure: i % 3 == 0,
            failure_reason: (i == 120).then(|| "unknown_failure".to_owned()),
            ..JobUpdate::default()
        })
        .collect();
    updates.push(JobUpdate {
        id: rows[3].id,
        status: st("success"),
        allow_failure: true,
        exit_code: Some(0),
        finished_at: Some(9),
        ..JobUpdate::default()
    });
    updates.push(JobUpdate {
        id: rows[150].id,
        status: st("canceling"),
        allow_failure: true,
        ..JobUpdate::default()
    });
    // Named twice, within one batch of a hundred: the last update wins. (Jobs 3, 150
    // and 249 are among those allowed to fail.)
    updates.push(JobUpdate {
        id: rows[249].id,
        status: st("running"),
        allow_failure: true,
        ..JobUpdate::default()
    });
    updates.push(JobUpdate {
        id: rows[249].id,
        status: st("failed"),
        allow_failure: true,
        exit_code: Some(3),
        failure_reason: Some("script_failure".into()),
        finished_at: Some(10),
        ..JobUpdate::default()
    });
    let pl = s.pipeline(pl.id).await.expect("pipeline");
    let change = PipelineChange {
        status: st("running"),
        jobs: updates,
        ..PipelineChange::default()
    };
    s.apply(pl.id, pl.lock_version, &change, 4)
        .await
        .expect("applied");
    for (i, row) in s
        .pipeline_jobs(pl.id)
        .await
        .expect("jobs")
        .iter()
        .enumerate()
    {
        assert_eq!(row.id, rows[i].id);
        let want = match i {
            3 => "success",
            150 => "canceling",
            249 => "failed",
            0..100 => "skipped",
            _ => "pending",
        };
        assert_eq!(row.status.as_str(), want, "{}", row.name);
        assert_eq!(
            row.queued_at,
            Some(1000 + i64::try_from(i).unwrap()),
            "{}",
            row.name
        );
        assert_eq!(row.scheduled_at, None, "{}", row.name);
        assert_eq!(row.allow_failure, i % 3 == 0, "{}", row.name);
        assert_eq!(row.retried, i == 200, "{}", row.name);
        let (exit_code, reason, finished) = match i {
            3 => (Some(0), None, Some(9)),
            249 => (Some(3), Some("script_failure"), Some(10)),
            120 => (None, Some("unknown_failure"), None),
            _ => (None, None, None),
        };
        assert_eq!(row.exit_code, exit_code, "{}", row.name);
        assert_eq!(row.failure_reason.as_deref(), reason, "{}", row.name);
        assert_eq!(row.finished_at, finished, "{}", row.name);
        assert_eq!(
            row.started_at,
            [3, 150, 249].contains(&i).then_some(3),
            "{}",
            row.name
        );
        assert_eq!(row.manual_variables.is_some(), i == 5, "{}", row.name);
    }
    // The job still canceling answers to its token; the ended ones do not.
    for (i, holds) in [(3, false), (150, true), (249, false)] {
        let found = s
            .job_by_token_hash(&format!("tok-{i}"))
            .await
            .expect("read")
            .map(|j| j.id);
        assert_eq!(found, holds.then_some(rows[i].id), "job {i}");
    }
}

async fn every_pending_job_goes_to_exactly_one_runner(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let n_jobs = 60;
    let jobs: Vec<NewJob> = (0..n_jobs)
        .map(|i| job(&format!("job{i}"), "pending"))
        .collect();
    let (_, created) = create(&s, &pipeline(p.id), &jobs, 1)
        .await
        .expect("pipeline");
    let mut runner_ids = Vec::new();
    for i in 0..16 {
        let r = s
            .create_runner(&runner(&format!("runner-{i}")), 1)
            .await
            .expect("runner");
        runner_ids.push(r.id);
    }
    let s = Arc::new(s);
    let mut tasks = Vec::new();
    for runner in runner_ids {
        let s = Arc::clone(&s);
        let ids: Vec<i64> = created.iter().map(|j| j.id).collect();
        tasks.push(tokio::spawn(async move {
            let mut won = Vec::new();
            for id in ids {
                match s
                    .assign_job(id, runner, &format!("tok-{runner}-{id}"), 3600, 2)
                    .await
                {
                    Ok(Some(_)) => won.push(id),
                    Ok(None) => {}
                    Err(e) => panic!("assign failed: {e}"),
                }
            }
            won
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), n_jobs, "each job assigned once in total");
    assert_eq!(unique.len(), n_jobs, "no job assigned twice");
}

async fn assignments_in_one_statement(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let jobs = vec![
        job("a", "pending"),
        job("b", "pending"),
        job("c", "created"),
    ];
    let (pl, created) = create(&s, &pipeline(p.id), &jobs, 1)
        .await
        .expect("pipeline");
    let (a, b, c) = (created[0].id, created[1].id, created[2].id);
    let mut runners = Vec::new();
    for i in 0..2 {
        let r = s
            .create_runner(&runner(&format!("runner-{i}")), 1)
            .await
            .expect("runner");
        runners.push(r.id);
    }
    let assign = |job_id: i64, runner_id: i64, token: &str| Assignment {
        job_id,
        runner_id,
        runner_manager_id: None,
        token_hash: token.to_owned(),
        timeout_secs: 600,
    };
    // `a` named twice goes to its first assignment; `c` is not pending.
    let won = s
        .assign_jobs(
            &[
                assign(a, runners[0], "t-a0"),
                assign(a, runners[1], "t-a1"),
                assign(b, runners[1], "t-b1"),
                assign(c, runners[0], "t-c0"),
            ],
            42,
        )
        .await
        .expect("assign");
    let mut ids: Vec<i64> = won.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![a, b]);
    assert!(
        won.values()
            .all(|w| w.pipeline_status == pl.status && w.pipeline_id == pl.id),
        "{won:?}"
    );
    // One step of the pipeline's lock for the batch, however many of its jobs it holds:
    // a decision over rows read before it is stale.
    let after = s.pipeline(pl.id).await.expect("pipeline");
    assert_eq!(after.lock_version, pl.lock_version + 1);
    assert!(won.values().all(|w| w.lock_version == after.lock_version));
    assert!(matches!(
        s.apply(pl.id, pl.lock_version, &PipelineChange::default(), 42)
            .await,
        Err(StoreError::Stale)
    ));
    let ja = s.job(a).await.expect("a");
    assert_eq!(
        (
            ja.status.as_str(),
            ja.runner_id,
            ja.started_at,
            ja.timeout_secs
        ),
        ("running", Some(runners[0]), Some(42), Some(600))
    );
    let by_token = s
        .job_by_token_hash("t-a0")
        .await
        .expect("lookup")
        .expect("a's token");
    assert_eq!(
        (
            by_token.id,
            by_token.status.as_str(),
            by_token.spec.as_str()
        ),
        (a, "running", "")
    );
    // The token's lookup is a hot read (SQLite: the in-thread connection): every column
    // reads as the pool's read gives it.
    assert_eq!(
        by_token,
        Job {
            spec: String::new(),
            ..ja.clone()
        }
    );
    assert!(s.job_by_token_hash("t-a1").await.expect("lookup").is_none());
    assert_eq!(s.job(b).await.expect("b").runner_id, Some(runners[1]));
    assert_eq!(s.job_status(c).await.expect("c").as_str(), "created");
    // Taken jobs are not taken again; an empty batch is nothing.
    assert_eq!(
        s.assign_job(a, runners[1], "t-a2", 600, 43)
            .await
            .expect("again"),
        None
    );
    assert!(s.assign_jobs(&[], 44).await.expect("empty").is_empty());
}

async fn trace_sizes_move_by_compare_and_set(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let (_, jobs) = create(&s, &pipeline(p.id), &[job("build", "running")], 1)
        .await
        .expect("pipeline");
    let id = jobs[0].id;
    let state = s.trace_state(id).await.expect("state");
    assert_eq!(
        state,
        TraceState {
            status: st("running"),
            size: 0,
            in_db: false
        }
    );
    assert!(
        s.commit_trace_size(id, 0, 6, false, 5)
            .await
            .expect("commit")
    );
    assert!(
        s.commit_trace_size(id, 6, 12, false, 6)
            .await
            .expect("commit")
    );
    // Another writer got there first: nothing changes.
    assert!(
        !s.commit_trace_size(id, 6, 20, false, 7)
            .await
            .expect("stale commit")
    );
    assert!(
        s.commit_trace_size(id, 12, 12, false, 8)
            .await
            .expect("empty append")
    );
    assert!(matches!(
        s.commit_trace_size(id, 12, 3, false, 9).await,
        Err(StoreError::Conflict(_))
    ));
    let stored = s.job(id).await.expect("job");
    assert_eq!((stored.trace_size, stored.last_contact_at), (12, Some(8)));
    assert_eq!(
        s.trace_snapshot(id).await.expect("snapshot"),
        TraceSnapshot {
            size: 12,
            in_db: None
        }
    );
    assert!(matches!(
        s.trace_state(id + 100).await,
        Err(StoreError::NotFound("job"))
    ));

    // A shared log: bytes and size in one transaction, by compare-and-set.
    let (_, jobs) = create(&s, &pipeline(p.id), &[job("shared", "running")], 1)
        .await
        .expect("pipeline");
    let shared = jobs[0].id;
    let rows = [b"one ".to_vec(), Vec::new(), b"two ".to_vec()];
    assert!(
        s.append_trace_chunks(shared, 0, 8, &rows, 10)
            .await
            .expect("append")
    );
    assert!(
        !s.append_trace_chunks(shared, 4, 9, &[b"x".to_vec()], 11)
            .await
            .expect("stale append"),
        "another replica moved the size: nothing is written"
    );
    assert!(
        s.append_trace_chunks(shared, 8, 14, &[b"three\n".to_vec()], 12)
            .await
            .expect("append")
    );
    assert!(matches!(
        s.append_trace_chunks(shared, 14, 2, &[], 13).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        s.trace_snapshot(shared).await.expect("snapshot"),
        TraceSnapshot {
            size: 14,
            in_db: Some(b"one two three\n".to_vec())
        }
    );
    // Dropped once archived — not when the log moved meanwhile.
    assert!(!s.drop_trace_chunks(shared, 8).await.expect("stale drop"));
    assert!(s.drop_trace_chunks(shared, 14).await.expect("drop"));
    assert_eq!(
        s.trace_snapshot(shared).await.expect("snapshot"),
        TraceSnapshot {
            size: 14,
            in_db: None
        }
    );
    assert!(!s.drop_trace_chunks(shared, 14).await.expect("nothing left"));
}

/// A database from before migration 0004 kept its logs in `trace_chunks`: they stay
/// readable, and a job's first append after the upgrade takes them out of the database.
#[tokio::test]
async fn logs_stored_in_the_database_before_0004_stay_readable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = database_before(
        &dir,
        4,
        3,
        "INSERT INTO projects (id, name, repo_url, default_branch, timeout_secs, created_at) VALUES (1, 'old', '/r', 'main', 60, 1);
         INSERT INTO pipelines (id, project_id, iid, ref_name, tag, sha, before_sha, source, status, variables, protected, created_at, updated_at)
           VALUES (1, 1, 1, 'main', 0, 'abc', '000', 'push', 'running', '[]', 0, 1, 1);
         INSERT INTO jobs (id, pipeline_id, project_id, name, stage, stage_idx, status, attempt, allow_failure, spec, tags, protected, created_at, trace_size)
           VALUES (1, 1, 1, 'done', 'test', 0, 'success', 1, 0, '{}', '[]', 0, 1, 12),
                  (2, 1, 1, 'running', 'test', 0, 'running', 1, 0, '{}', '[]', 0, 1, 4),
                  (3, 1, 1, 'silent', 'test', 0, 'running', 1, 0, '{}', '[]', 0, 1, 0);
         INSERT INTO trace_chunks (job_id, seq, data) VALUES (1, 0, X'68656c6c6f20'), (1, 1, X'776f726c640a'), (2, 0, X'6f6c6421');",
    )
    .await;
    let s = Store::open(&url).await.expect("open and migrate");
    assert_eq!(
        s.trace_snapshot(1).await.expect("done"),
        TraceSnapshot {
            size: 12,
            in_db: Some(b"hello world\n".to_vec())
        }
    );
    assert_eq!(
        s.trace_state(2).await.expect("running"),
        TraceState {
            status: st("running"),
            size: 4,
            in_db: true
        }
    );
    assert_eq!(
        s.trace_snapshot(3).await.expect("silent"),
        TraceSnapshot {
            size: 0,
            in_db: None
        }
    );
    // The running job's next append: its old bytes went to its file with the new ones.
    assert_eq!(s.trace_in_db(2).await.expect("old bytes"), b"old!");
    assert!(
        !s.commit_trace_size(2, 4, 9, false, 2)
            .await
            .expect("not without moving")
    );
    assert!(s.commit_trace_size(2, 4, 9, true, 2).await.expect("moved"));
    assert_eq!(
        s.trace_state(2).await.expect("moved"),
        TraceState {
            status: st("running"),
            size: 9,
            in_db: false
        }
    );
    assert_eq!(s.trace_in_db(2).await.expect("chunks deleted"), b"");
    assert_eq!(
        s.trace_snapshot(1)
            .await
            .expect("untouched")
            .in_db
            .as_deref(),
        Some(&b"hello world\n"[..])
    );
}

async fn runners_tokens_and_artifacts(db: Db) {
    let (_d, s) = open(db).await;
    let r = s
        .create_runner(
            &NewRunner {
                tags: vec!["docker".into(), "linux".into()],
                run_untagged: false,
                locked: true,
                protected_only: true,
                maximum_timeout: Some(600),
                group_path: Some("acme/platform".into()),
                any_tags: true,
                ..runner("hash1")
            },
            1,
        )
        .await
        .expect("runner");
    assert_eq!(r.group_path.as_deref(), Some("acme/platform"));
    assert!(r.any_tags);
    assert_eq!(
        s.runner_by_token_hash("hash1").await.expect("lookup"),
        Some(r.clone())
    );
    assert_eq!(s.runner_by_token_hash("nope").await.expect("lookup"), None);
    assert!(s.delete_runner(r.id).await.expect("delete"));
    assert!(!s.delete_runner(r.id).await.expect("delete again"));

    assert!(
        s.init_setting("registration_token_hash", "x")
            .await
            .expect("init")
    );
    assert!(
        !s.init_setting("registration_token_hash", "y")
            .await
            .expect("init again")
    );
    assert_eq!(
        s.setting("registration_token_hash")
            .await
            .expect("get")
            .as_deref(),
        Some("x")
    );
    s.add_admin_token("admin-hash", 1).await.expect("admin");
    assert!(s.is_admin_token("admin-hash").await.expect("check"));
    assert_eq!(s.admin_token_count().await.expect("count"), 1);

    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let (_, jobs) = create(&s, &pipeline(p.id), &[job("build", "running")], 1)
        .await
        .expect("pipeline");
    let a = NewArtifact {
        job_id: jobs[0].id,
        file_type: "archive".into(),
        file_format: "zip".into(),
        filename: "artifacts.zip".into(),
        size: 10,
        sha256: "ab".into(),
        blob_key: "artifacts/1/archive".into(),
        expire_at: None,
    };
    s.put_artifact(&a, 2).await.expect("artifact");
    s.put_artifact(
        &NewArtifact {
            size: 20,
            ..a.clone()
        },
        3,
    )
    .await
    .expect("replace");
    let list = s.artifacts(jobs[0].id).await.expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].size, 20);
}

/// A job's dependencies' artifacts are read by job id, O(dependencies): past one
/// statement's worth of ids the read goes on in chunks, and jobs not named (of the same
/// pipeline) are not read.
async fn artifacts_of_jobs_reads_the_jobs_named_in_chunks(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("many"), 1)
        .await
        .expect("project");
    let names: Vec<String> = (0..1_200).map(|i| format!("j{i}")).collect();
    let new_jobs: Vec<NewJob> = names.iter().map(|n| job(n, "success")).collect();
    let (_, jobs) = create(&s, &pipeline(p.id), &new_jobs, 1)
        .await
        .expect("pipeline");
    let with_artifacts = [0usize, 499, 500, 1_001, 1_199];
    for &i in &with_artifacts {
        for file_type in ["archive", "dotenv"] {
            s.put_artifact(
                &NewArtifact {
                    job_id: jobs[i].id,
                    file_type: file_type.into(),
                    file_format: "zip".into(),
                    filename: "a.zip".into(),
                    size: 1,
                    sha256: "ab".into(),
                    blob_key: format!("artifacts/{}/{file_type}", jobs[i].id),
                    expire_at: None,
                },
                2,
            )
            .await
            .expect("artifact");
        }
    }
    // Every job but the 1,001st: three statements' worth of ids.
    let named: Vec<i64> = jobs
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1_001)
        .map(|(_, j)| j.id)
        .collect();
    let got: Vec<(i64, String)> = s
        .artifacts_of_jobs(&named)
        .await
        .expect("artifacts")
        .into_iter()
        .map(|a| (a.job_id, a.file_type))
        .collect();
    let want: Vec<(i64, String)> = [0usize, 499, 500, 1_199]
        .iter()
        .flat_map(|&i| ["archive", "dotenv"].map(|t| (jobs[i].id, t.to_owned())))
        .collect();
    assert_eq!(got, want);
    assert!(s.artifacts_of_jobs(&[]).await.expect("none").is_empty());
}

#[tokio::test]
async fn reopening_keeps_data_and_rejects_other_backends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("g.db").display());
    {
        let s = Store::open(&url).await.expect("open");
        s.create_project(&project("kept"), 1)
            .await
            .expect("project");
    }
    let s = Store::open(&url).await.expect("reopen");
    assert_eq!(s.projects().await.expect("projects").len(), 1);
    let err = Store::open("mysql://gantry:hunter2@localhost/db")
        .await
        .expect_err("unsupported");
    assert_eq!(
        err.to_string(),
        "use the database: database URL `mysql://gantry:***@localhost/db`: expected sqlite:///path/to/gantry.db or postgres://user:password@host/database"
    );
}

/// A status Gantry never writes (a hand-edited row, a newer version's) is an error that
/// names the column and the value, for that row only: no panic, no guess.
#[tokio::test]
async fn an_unknown_status_in_a_row_is_an_error_naming_it() {
    use sqlx::Executor as _;

    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("g.db").display());
    let s = Store::open(&url).await.expect("open");
    let p = s.create_project(&project("odd"), 1).await.expect("project");
    let (pipeline, jobs) = create(
        &s,
        &pipeline(p.id),
        &[job("a", "created"), job("b", "created")],
        1,
    )
    .await
    .expect("pipeline");
    let raw = sqlx::AnyPool::connect(&url).await.expect("connect");
    raw.execute(
        format!(
            "UPDATE jobs SET status = 'blocked' WHERE id = {}",
            jobs[0].id
        )
        .as_str(),
    )
    .await
    .expect("edit the row");
    match s.job(jobs[0].id).await {
        Err(StoreError::Unreadable { column, value }) => {
            assert_eq!((column, value.as_str()), ("jobs.status", "blocked"));
        }
        other => panic!("expected Unreadable, got {other:?}"),
    }
    let message = s
        .pipeline_jobs(pipeline.id)
        .await
        .expect_err("a job is unreadable")
        .to_string();
    assert_eq!(
        message,
        "read jobs.status: it holds \"blocked\", which is not a known value"
    );
    assert_eq!(
        s.job(jobs[1].id).await.expect("the other job").status,
        st("created")
    );
    assert_eq!(
        s.pipeline(pipeline.id).await.expect("the pipeline").status,
        st("created")
    );
}

/// The API's lists page in SQL: newest first, filters and totals in the query, trigger
/// jobs left out of a project's jobs.
async fn lists_page_in_the_database(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("paged"), 1)
        .await
        .expect("project");
    for i in 0..5 {
        let mut new = pipeline(p.id);
        if i % 2 == 1 {
            new.ref_name = "dev".into();
        }
        let jobs = [
            job("build", "success"),
            job("test", if i == 4 { "failed" } else { "success" }),
            NewJob {
                bridge: true,
                ..job("deploy", "success")
            },
        ];
        create(&s, &new, &jobs, 10 + i).await.expect("pipeline");
    }
    let (page, total) = s
        .pipelines_page(p.id, &PipelineFilter::default(), 1, 2)
        .await
        .expect("page");
    assert_eq!(total, 5);
    assert_eq!(page.iter().map(|p| p.iid).collect::<Vec<_>>(), [4, 3]);
    let (page, total) = s
        .pipelines_page(
            p.id,
            &PipelineFilter {
                ref_name: Some("dev".into()),
                status: Some(st("created")),
                ..PipelineFilter::default()
            },
            0,
            10,
        )
        .await
        .expect("filtered");
    assert_eq!(total, 2);
    assert!(page.iter().all(|p| p.ref_name == "dev"));
    let iids = |filter: PipelineFilter| {
        let s = &s;
        async move {
            let (page, total) = s.pipelines_page(p.id, &filter, 0, 10).await.expect("page");
            (page.iter().map(|p| p.iid).collect::<Vec<_>>(), total)
        }
    };
    assert_eq!(
        iids(PipelineFilter {
            scope: Some(PipelineScope::Branches),
            ..PipelineFilter::default()
        })
        .await,
        (vec![5, 4], 2),
        "the newest of each branch"
    );
    assert_eq!(
        iids(PipelineFilter {
            scope: Some(PipelineScope::Tags),
            ..PipelineFilter::default()
        })
        .await,
        (vec![], 0)
    );
    assert_eq!(
        iids(PipelineFilter {
            created_after: Some(13),
            ascending: true,
            ..PipelineFilter::default()
        })
        .await,
        (vec![4, 5], 2)
    );
    assert_eq!(
        iids(PipelineFilter {
            order: PipelineOrder::Ref,
            ascending: true,
            yaml_errors: Some(false),
            ..PipelineFilter::default()
        })
        .await,
        (vec![2, 4, 1, 3, 5], 5),
        "by ref, then id"
    );
    let (page, total) = s
        .jobs_page(JobsOf::Project(p.id), &[], JobsOrder::NewestFirst, 0, 3)
        .await
        .expect("jobs");
    assert_eq!(total, 10, "trigger jobs are left out");
    assert_eq!(page.len(), 3);
    assert!(page.windows(2).all(|w| w[0].id > w[1].id), "newest first");
    assert!(page.iter().all(|j| j.name != "deploy"));
    let (page, total) = s
        .jobs_page(
            JobsOf::Project(p.id),
            &["failed".to_owned(), "canceled".to_owned()],
            JobsOrder::NewestFirst,
            0,
            20,
        )
        .await
        .expect("scoped");
    assert_eq!((total, page.len()), (1, 1));
    assert_eq!(page[0].name, "test");
    let (page, total) = s
        .jobs_page(JobsOf::Project(p.id), &[], JobsOrder::NewestFirst, 100, 20)
        .await
        .expect("past the end");
    assert_eq!((total, page.len()), (10, 0));

    // A runner's jobs: those it took.
    let r = s
        .create_runner(&runner("lists-runner"), 1)
        .await
        .expect("runner");
    let (_, pending) = create(
        &s,
        &pipeline(p.id),
        &[job("a", "pending"), job("b", "pending")],
        20,
    )
    .await
    .expect("pipeline");
    s.assign_job(pending[1].id, r.id, "tok-b", 3600, 21)
        .await
        .expect("assign")
        .expect("won");
    let (page, total) = s
        .jobs_page(JobsOf::Runner(r.id), &[], JobsOrder::NewestFirst, 0, 20)
        .await
        .expect("runner's jobs");
    assert_eq!(total, 1);
    assert_eq!(
        page.iter().map(|j| j.id).collect::<Vec<_>>(),
        [pending[1].id]
    );
    s.assign_job(pending[0].id, r.id, "tok-a", 3600, 22)
        .await
        .expect("assign")
        .expect("won");
    for (order, ids) in [
        (JobsOrder::NewestFirst, [pending[1].id, pending[0].id]),
        (JobsOrder::OldestFirst, [pending[0].id, pending[1].id]),
    ] {
        let (page, total) = s
            .jobs_page(JobsOf::Runner(r.id), &[], order, 0, 20)
            .await
            .expect("runner's jobs");
        assert_eq!(total, 2);
        assert_eq!(
            page.iter().map(|j| j.id).collect::<Vec<_>>(),
            ids,
            "{order:?}"
        );
    }
}

/// Instance variables: one per key instance-wide, created, listed by key, updated (also
/// renamed), their raw values replaced by compare-and-set, deleted.
async fn instance_variables_are_unique_by_key(db: Db) {
    let (_d, s) = open(db).await;
    assert!(s.instance_variables().await.expect("none").is_empty());
    let mut token = InstanceVariable::new("TOKEN", "t0ken-value");
    token.masked = true;
    token.protected = true;
    token.variable_type = "file".into();
    token.description = Some("the deploy token".into());
    s.create_instance_variable(&token, 1).await.expect("token");
    s.create_instance_variable(&InstanceVariable::new("API_URL", "https://x"), 2)
        .await
        .expect("url");
    let err = s
        .create_instance_variable(&InstanceVariable::new("TOKEN", "again"), 3)
        .await
        .expect_err("duplicate");
    match &err {
        StoreError::Conflict(m) => assert!(m.contains("(TOKEN) has already been taken"), "{m}"),
        other => panic!("expected a conflict: {other}"),
    }
    let all = s.instance_variables().await.expect("list");
    assert_eq!(
        all.iter().map(|v| v.key.as_str()).collect::<Vec<_>>(),
        ["API_URL", "TOKEN"]
    );
    assert_eq!(all[1], token);

    // Update, rename onto a free key, onto a taken one, and a missing one.
    let mut changed = token.clone();
    changed.value = "other-value".into();
    changed.masked = false;
    s.update_instance_variable("TOKEN", &changed)
        .await
        .expect("update");
    changed.key = "DEPLOY_TOKEN".into();
    s.update_instance_variable("TOKEN", &changed)
        .await
        .expect("rename");
    changed.key = "API_URL".into();
    assert!(matches!(
        s.update_instance_variable("DEPLOY_TOKEN", &changed).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        s.update_instance_variable("NOPE", &changed).await,
        Err(StoreError::NotFound(_))
    ));
    let all = s.instance_variables().await.expect("list");
    assert_eq!(all[1].key, "DEPLOY_TOKEN");
    assert_eq!(
        (all[1].value.as_str(), all[1].masked),
        ("other-value", false)
    );

    // Values without the prefix are found; the compare-and-set loses to a change.
    let plain = s
        .instance_variables_without_prefix("gantry:v1:")
        .await
        .expect("plain");
    assert_eq!(plain.len(), 2);
    s.replace_instance_variable_value("API_URL", "https://x", "gantry:v1:00")
        .await
        .expect("replaced");
    s.replace_instance_variable_value("DEPLOY_TOKEN", "stale", "gantry:v1:11")
        .await
        .expect("no-op");
    let plain = s
        .instance_variables_without_prefix("gantry:v1:")
        .await
        .expect("plain");
    assert_eq!(
        plain,
        [("DEPLOY_TOKEN".to_owned(), "other-value".to_owned())]
    );

    s.delete_instance_variable("API_URL").await.expect("delete");
    assert!(matches!(
        s.delete_instance_variable("API_URL").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.instance_variables().await.expect("list").len(), 1);
}

/// Protected branches and tags: the project's first ones stored with it; one row per kind
/// and name; removed by kind and name; gone with their project's other data.
async fn protected_refs_are_kept_per_kind(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let names = |refs: Vec<ProtectedRef>| -> Vec<String> {
        refs.into_iter()
            .map(|r| format!("{}:{}", r.kind.as_str(), r.name))
            .collect()
    };
    assert_eq!(
        names(s.protected_refs(p.id).await.expect("list")),
        ["branch:main"]
    );
    s.protect_ref(p.id, RefKind::Branch, "release/*", 2)
        .await
        .expect("protect");
    let tag = s
        .protect_ref(p.id, RefKind::Tag, "main", 3)
        .await
        .expect("tag");
    assert_eq!(
        (tag.kind, tag.name.as_str(), tag.created_at),
        (RefKind::Tag, "main", 3)
    );
    assert!(matches!(
        s.protect_ref(p.id, RefKind::Branch, "release/*", 4).await,
        Err(StoreError::Conflict(m)) if m.contains("the branch `release/*` is protected already")
    ));
    assert_eq!(
        names(s.protected_refs(p.id).await.expect("list")),
        ["branch:main", "branch:release/*", "tag:main"]
    );
    s.unprotect_ref(p.id, RefKind::Branch, "main")
        .await
        .expect("unprotect");
    assert!(matches!(
        s.unprotect_ref(p.id, RefKind::Branch, "main").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        names(s.protected_refs(p.id).await.expect("list")),
        ["branch:release/*", "tag:main"]
    );
    // A project whose name is taken stores none of its protections.
    assert!(s.create_project(&project("demo"), 5).await.is_err());
    let other = s
        .create_project(&project("other"), 5)
        .await
        .expect("project");
    assert_eq!(
        names(s.protected_refs(other.id).await.expect("list")),
        ["branch:main"]
    );
}

/// Group variables: unique per group, key and scope; read for all of a project's groups in
/// one query; found with the project's when stored in plain text; updated and deleted by
/// their group only.
async fn group_variables_are_kept_per_group(db: Db) {
    let (_d, s) = open(db).await;
    let acme = VariableOwner::Group("acme".into());
    let platform = VariableOwner::Group("acme/platform".into());
    let other = VariableOwner::Group("other".into());
    let scoped = |key: &str, value: &str, scope: &str| ProjectVariable {
        environment_scope: scope.into(),
        ..ProjectVariable::new(key, value)
    };
    for (owner, v) in [
        (&acme, ProjectVariable::new("TEAM", "acme")),
        (&acme, scoped("TEAM", "acme-prod", "production")),
        (&platform, ProjectVariable::new("TEAM", "platform")),
        (&other, ProjectVariable::new("TEAM", "other")),
    ] {
        s.create_variable(owner, &v, 1).await.expect("created");
    }
    assert!(matches!(
        s.create_variable(&platform, &ProjectVariable::new("TEAM", "again"), 1).await,
        Err(StoreError::Conflict(m)) if m.contains("the group has a variable `TEAM`")
    ));
    // A project's variable of the same key is another row.
    let p = s
        .create_project(&project("acme/widget"), 1)
        .await
        .expect("project");
    let widget = VariableOwner::Project(p.id);
    s.create_variable(&widget, &ProjectVariable::new("TEAM", "widget"), 1)
        .await
        .expect("created");
    let plain = s
        .variables_without_prefix("gantry:v1:")
        .await
        .expect("plain");
    assert_eq!(plain.len(), 5);
    assert!(
        plain
            .iter()
            .any(|v| v.owner == widget && v.value == "widget")
    );
    s.replace_variable_value(&platform, "TEAM", "*", "platform", "gantry:v1:00")
        .await
        .expect("replaced");
    s.replace_variable_value(&acme, "TEAM", "*", "stale", "gantry:v1:11")
        .await
        .expect("no-op");
    let plain = s
        .variables_without_prefix("gantry:v1:")
        .await
        .expect("plain");
    assert_eq!(plain.len(), 4);
    assert!(!plain.iter().any(|v| v.owner == platform));

    s.update_variable(
        &acme,
        "TEAM",
        "production",
        &scoped("TEAM", "acme-live", "live"),
    )
    .await
    .expect("updated");
    assert!(matches!(
        s.update_variable(
            &other,
            "TEAM",
            "production",
            &ProjectVariable::new("TEAM", "x")
        )
        .await,
        Err(StoreError::NotFound(_))
    ));
    let scopes: Vec<String> = s
        .variables(&acme)
        .await
        .expect("list")
        .into_iter()
        .map(|v| format!("{}={}", v.environment_scope, v.value))
        .collect();
    assert_eq!(scopes, ["*=acme", "live=acme-live"]);
    s.delete_variable(&other, "TEAM", "*")
        .await
        .expect("deleted");
    assert!(matches!(
        s.delete_variable(&other, "TEAM", "*").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.variables(&acme).await.expect("list").len(), 2);
}

/// A hidden project variable stays hidden (and masked) through an update that does not
/// mention it: `hidden` is set at creation only.
async fn hidden_project_variables_stay_hidden(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let mut secret = ProjectVariable::new("SECRET", "s3cr3t-value");
    secret.masked = true;
    secret.hidden = true;
    s.create_variable(&VariableOwner::Project(p.id), &secret, 1)
        .await
        .expect("created");
    s.create_variable(
        &VariableOwner::Project(p.id),
        &ProjectVariable::new("PLAIN", "x"),
        1,
    )
    .await
    .expect("created");
    let all = s
        .variables(&VariableOwner::Project(p.id))
        .await
        .expect("list");
    assert_eq!(all, [ProjectVariable::new("PLAIN", "x"), secret.clone()]);
    let mut changed = secret.clone();
    changed.value = "other-value".into();
    changed.hidden = false;
    s.update_variable(&VariableOwner::Project(p.id), "SECRET", "*", &changed)
        .await
        .expect("updated");
    let all = s
        .variables(&VariableOwner::Project(p.id))
        .await
        .expect("list");
    assert_eq!(
        (all[1].value.as_str(), all[1].hidden),
        ("other-value", true)
    );
}

/// Pipeline schedules: the per-project limit, due ones earliest first, and a run that
/// moves `next_run_at` with its pipeline only from where it was (once, among racers).
async fn schedules_are_limited_and_run_once(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let schedule = |next: Option<i64>| PipelineSchedule {
        id: 0,
        project_id: p.id,
        description: "nightly".into(),
        ref_name: "refs/heads/main".into(),
        cron: "0 3 * * *".into(),
        cron_timezone: "UTC".into(),
        active: next.is_some(),
        next_run_at: next,
        variables: "{}".into(),
        created_at: 1,
        updated_at: 1,
    };
    let a = s
        .create_pipeline_schedule(&schedule(Some(200)), 2)
        .await
        .expect("a");
    let b = s
        .create_pipeline_schedule(&schedule(Some(100)), 2)
        .await
        .expect("b");
    let over = s.create_pipeline_schedule(&schedule(None), 2).await;
    assert!(
        matches!(&over, Err(StoreError::Conflict(m)) if m.contains("at most 2")),
        "{over:?}"
    );
    let due: Vec<i64> = s
        .due_pipeline_schedules(150, 10)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(due, [b.id]);
    let due: Vec<i64> = s
        .due_pipeline_schedules(250, 10)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(due, [b.id, a.id]);

    let run = NewPipeline {
        source: "schedule".into(),
        schedule: Some(ScheduleRun {
            schedule_id: b.id,
            due: Some(100),
            next: Some(1_000),
        }),
        ..pipeline(p.id)
    };
    let (created, _) = create(&s, &run, &[], 150).await.expect("the run");
    // The same run again (another coordinator that saw it due): nothing is stored.
    let again = create(&s, &run, &[], 151).await;
    assert!(matches!(again, Err(StoreError::Stale)), "{again:?}");
    let (left, _) = s
        .pipelines_page(p.id, &PipelineFilter::default(), 0, 100)
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(
        s.pipeline_schedule(p.id, b.id).await.unwrap().next_run_at,
        Some(1_000)
    );
    let ran: Vec<i64> = s
        .schedule_pipelines(b.id, 10)
        .await
        .unwrap()
        .iter()
        .map(|x| x.id)
        .collect();
    assert_eq!(ran, [created.id]);
    // Without a pipeline (its ref was gone): moved once.
    assert!(
        s.move_pipeline_schedule(a.id, 200, Some(2_000), 250)
            .await
            .unwrap()
    );
    assert!(
        !s.move_pipeline_schedule(a.id, 200, Some(2_000), 250)
            .await
            .unwrap()
    );
    s.delete_pipeline_schedule(p.id, a.id)
        .await
        .expect("deleted");
    assert!(matches!(
        s.delete_pipeline_schedule(p.id, a.id).await,
        Err(StoreError::NotFound("pipeline schedule"))
    ));
}

/// A runner's keep-alive and a job's end made for its token are checked by their own
/// writes: the token, the job's status, the contact's age; a guarded change tells a
/// token the job no longer holds from a pipeline that changed meanwhile.
async fn a_runners_writes_check_its_token(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let (pl, created) = create(&s, &pipeline(p.id), &[job("build", "pending")], 1)
        .await
        .expect("pipeline");
    let id = created[0].id;
    let r = s.create_runner(&runner("runner"), 1).await.expect("runner");
    s.assign_job(id, r.id, "t-1", 600, 10)
        .await
        .expect("assign")
        .expect("won");
    let contact = |token: &'static str, now: i64| {
        let s = &s;
        async move { s.contact_job(id, token, now, 1000).await.expect("contact") }
    };
    assert_eq!(contact("t-other", 11).await, None, "another token");
    assert_eq!(contact("t-1", 11).await, Some((st("running"), pl.id)));
    assert_eq!(s.job(id).await.expect("job").last_contact_at, Some(11));
    assert_eq!(contact("t-1", 500).await, None, "within the resolution");
    assert_eq!(s.job(id).await.expect("job").last_contact_at, Some(11));
    assert_eq!(contact("t-1", 1011).await, Some((st("running"), pl.id)));

    let pl = s.pipeline(pl.id).await.expect("pipeline");
    // (The pipeline goes on: a change of job rows and status only, which SQLite sends in
    // one round trip.)
    let ended = |token: &str| PipelineChange {
        status: st("running"),
        jobs: vec![JobUpdate {
            id,
            status: st("success"),
            finished_at: Some(2000),
            ..JobUpdate::default()
        }],
        guard: Some(JobTokenGuard {
            job_id: id,
            token_hash: token.to_owned(),
        }),
        ..PipelineChange::default()
    };
    match s
        .apply(pl.id, pl.lock_version, &ended("t-other"), 2000)
        .await
    {
        Err(StoreError::TokenRevoked { job_id }) => assert_eq!(job_id, id),
        other => panic!("another token: {other:?}"),
    }
    match s
        .apply(pl.id, pl.lock_version - 1, &ended("t-1"), 2000)
        .await
    {
        Err(StoreError::Stale) => {}
        other => panic!("an old version: {other:?}"),
    }
    assert_eq!(s.job(id).await.expect("job").status.as_str(), "running");
    s.apply(pl.id, pl.lock_version, &ended("t-1"), 2000)
        .await
        .expect("applied");
    let j = s.job(id).await.expect("job");
    assert_eq!(j.status.as_str(), "success");
    assert_eq!(contact("t-1", 5000).await, None, "a job that ended");
}

/// An assignment whose job rows' update fails after its pipelines' `lock_version` moved
/// (a token already in use: the column is unique) changes nothing, and the writer stays
/// usable (on SQLite the transaction is sent in one round trip and rolled back on its
/// connection).
async fn an_assignment_that_fails_halfway_changes_nothing(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let (pl, created) = create(
        &s,
        &pipeline(p.id),
        &[job("a", "pending"), job("b", "pending")],
        1,
    )
    .await
    .expect("pipeline");
    let r = s.create_runner(&runner("runner"), 1).await.expect("runner");
    s.assign_job(created[0].id, r.id, "t-same", 600, 10)
        .await
        .expect("assign")
        .expect("won");
    let before = s.pipeline(pl.id).await.expect("pipeline").lock_version;
    assert!(
        s.assign_job(created[1].id, r.id, "t-same", 600, 11)
            .await
            .is_err(),
        "a token in use"
    );
    assert_eq!(
        s.pipeline(pl.id).await.expect("pipeline").lock_version,
        before
    );
    let b = s.job(created[1].id).await.expect("b");
    assert_eq!((b.status.as_str(), b.runner_id), ("pending", None));
    assert!(
        s.assign_job(created[1].id, r.id, "t-other", 600, 12)
            .await
            .expect("assign")
            .is_some()
    );
    assert_eq!(
        s.pipeline(pl.id).await.expect("pipeline").lock_version,
        before + 1
    );
}

/// A job goes only to a runner that is still there and not paused (one read before it
/// was deleted or paused, by a held request or a cache, gets nothing): the job stays
/// pending, its pipeline untouched, and the rest of the batch is assigned.
async fn a_job_goes_only_to_a_runner_there_and_not_paused(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let jobs = vec![
        job("a", "pending"),
        job("b", "pending"),
        job("c", "pending"),
    ];
    let (pl, created) = create(&s, &pipeline(p.id), &jobs, 1)
        .await
        .expect("pipeline");
    let (a, b, c) = (created[0].id, created[1].id, created[2].id);
    let paused = s.create_runner(&runner("paused"), 1).await.expect("runner");
    s.update_runner(
        paused.id,
        &RunnerChanges {
            paused: Some(true),
            ..RunnerChanges::default()
        },
    )
    .await
    .expect("pause");
    let gone = s.create_runner(&runner("gone"), 1).await.expect("runner");
    assert!(s.delete_runner(gone.id).await.expect("delete"));
    let here = s.create_runner(&runner("here"), 1).await.expect("runner");
    let assign = |job_id: i64, runner_id: i64, token: &str| Assignment {
        job_id,
        runner_id,
        runner_manager_id: None,
        token_hash: token.to_owned(),
        timeout_secs: 600,
    };
    let before = s.pipeline(pl.id).await.expect("pipeline").lock_version;
    // Only refused runners: nothing moves, not even the pipeline's version.
    let won = s
        .assign_jobs(
            &[assign(a, paused.id, "t-a"), assign(b, gone.id, "t-b")],
            10,
        )
        .await
        .expect("assign");
    assert!(won.is_empty(), "{won:?}");
    assert_eq!(
        s.pipeline(pl.id).await.expect("pipeline").lock_version,
        before
    );
    let won = s
        .assign_jobs(
            &[
                assign(a, paused.id, "t-a"),
                assign(b, gone.id, "t-b"),
                assign(c, here.id, "t-c"),
            ],
            11,
        )
        .await
        .expect("assign");
    assert_eq!(won.keys().copied().collect::<Vec<_>>(), vec![c]);
    assert_eq!(won[&c].lock_version, before + 1);
    for id in [a, b] {
        let j = s.job(id).await.expect("job");
        assert_eq!(
            (j.status.as_str(), j.runner_id),
            ("pending", None),
            "job {id}"
        );
    }
    let j = s.job(c).await.expect("job");
    assert_eq!((j.status.as_str(), j.runner_id), ("running", Some(here.id)));
}

/// A job its runner never acknowledged goes back to the queue once, by compare-and-set,
/// whatever the number of coordinators asking at once; an acknowledged one stays.
async fn unacknowledged_jobs_go_back_to_the_queue_once(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let jobs = vec![
        job("lost", "pending"),
        job("heard", "pending"),
        job("late", "pending"),
    ];
    let (pl, created) = create(&s, &pipeline(p.id), &jobs, 1)
        .await
        .expect("pipeline");
    let (lost, heard, late) = (created[0].id, created[1].id, created[2].id);
    let r = s.create_runner(&runner("runner"), 1).await.expect("runner");
    for (id, token, at) in [
        (lost, "t-lost", 10),
        (heard, "t-heard", 10),
        (late, "t-late", 50),
    ] {
        s.assign_job(id, r.id, token, 600, at)
            .await
            .expect("assign")
            .expect("won");
    }
    assert_eq!(s.job(lost).await.expect("lost").last_contact_at, None);
    // Only the token the job was handed with acknowledges it, once.
    assert!(!s.acknowledge_job(heard, "t-lost", 11).await.expect("ack"));
    assert!(s.acknowledge_job(heard, "t-heard", 11).await.expect("ack"));
    assert!(!s.acknowledge_job(heard, "t-heard", 12).await.expect("ack"));
    let before = s.pipeline(pl.id).await.expect("pipeline").lock_version;

    // Four coordinators at once: `lost` goes back once; `late` is within the bound.
    let s = Arc::new(s);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let s = Arc::clone(&s);
        tasks.push(tokio::spawn(async move {
            s.requeue_unacknowledged(20).await.expect("requeue")
        }));
    }
    let mut requeued = Vec::new();
    for t in tasks {
        requeued.extend(t.await.expect("task"));
    }
    assert_eq!(
        requeued,
        vec![RequeuedJob {
            id: lost,
            pipeline_id: pl.id,
            runner_id: r.id,
            assigned_at: 10,
        }]
    );
    let j = s.job(lost).await.expect("lost");
    assert_eq!(
        (
            j.status.as_str(),
            j.runner_id,
            j.started_at,
            j.timeout_secs,
            j.attempt
        ),
        ("pending", None, None, None, 1)
    );
    assert!(
        s.job_by_token_hash("t-lost")
            .await
            .expect("lookup")
            .is_none()
    );
    assert_eq!(
        s.job_status(heard).await.expect("heard").as_str(),
        "running"
    );
    assert_eq!(s.job_status(late).await.expect("late").as_str(), "running");
    assert_eq!(
        s.pipeline(pl.id).await.expect("pipeline").lock_version,
        before + 1,
        "decisions taken on the old state are stale"
    );

    // Put back at once by its token (an answer that never left); not twice, and not a
    // job handed out again since.
    let back = s.requeue_job(late, "t-late").await.expect("requeue");
    assert_eq!(back.map(|j| j.id), Some(late));
    assert_eq!(s.requeue_job(late, "t-late").await.expect("again"), None);
    s.assign_job(late, r.id, "t-late-2", 600, 60)
        .await
        .expect("assign")
        .expect("won again");
    assert_eq!(
        s.requeue_job(late, "t-late").await.expect("old token"),
        None
    );
    assert_eq!(s.job_status(late).await.expect("late").as_str(), "running");
}

/// The web UI's sessions (migration 0027): found by their hash until they expire or are
/// deleted; making one deletes the expired ones.
async fn ui_sessions_expire_and_end(db: Db) {
    let (_d, s) = open(db).await;
    s.create_ui_session("old", 1_000, 2_000).await.unwrap();
    s.create_ui_session("live", 1_500, 9_000).await.unwrap();
    assert_eq!(s.ui_session_expiry("live").await.unwrap(), Some(9_000));
    assert_eq!(s.ui_session_expiry("old").await.unwrap(), Some(2_000));
    // A later sign-in sweeps the expired session.
    s.create_ui_session("next", 3_000, 10_000).await.unwrap();
    assert_eq!(s.ui_session_expiry("old").await.unwrap(), None);
    assert!(s.delete_ui_session("live").await.unwrap());
    assert!(!s.delete_ui_session("live").await.unwrap());
    assert_eq!(s.ui_session_expiry("live").await.unwrap(), None);
    assert_eq!(s.ui_session_expiry("next").await.unwrap(), Some(10_000));
}

/// What a runner said about itself (migration 0034) is written with its contact; the
/// jobs each runner runs now are counted.
async fn runners_keep_their_info_and_count_running_jobs(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let (_, created) = create(
        &s,
        &pipeline(p.id),
        &[
            job("a", "pending"),
            job("b", "pending"),
            job("c", "pending"),
        ],
        1,
    )
    .await
    .expect("pipeline");
    let r = s.create_runner(&runner("busy"), 1).await.expect("runner");
    let idle = s.create_runner(&runner("idle"), 1).await.expect("runner");
    assert_eq!(
        s.runner_infos().await.unwrap().get(&r.id),
        Some(&RunnerInfo::default())
    );
    let info = RunnerInfo {
        version: "18.5.0".into(),
        revision: "abc123".into(),
        platform: "linux".into(),
        architecture: "amd64".into(),
        executor: "docker".into(),
        ip_address: "10.0.0.7".into(),
    };
    let manager = s
        .runner_heartbeat(r.id, "s_0123456789ab", 77, &info)
        .await
        .unwrap();
    assert_eq!(s.runner_infos().await.unwrap().get(&r.id), Some(&info));
    assert_eq!(s.runner(r.id).await.unwrap().contacted_at, Some(77));
    // The same process again: the same manager, its info and contact moved on.
    let newer = RunnerInfo {
        version: "18.6.0".into(),
        ..info.clone()
    };
    assert_eq!(
        s.runner_heartbeat(r.id, "s_0123456789ab", 90, &newer)
            .await
            .unwrap(),
        manager
    );
    // Another process of the runner (an old one, without a system id), and a verify
    // that leaves an existing manager as it is.
    let legacy = s
        .runner_heartbeat(r.id, LEGACY_SYSTEM_ID, 91, &RunnerInfo::default())
        .await
        .unwrap();
    assert_ne!(legacy, manager);
    s.ensure_runner_manager(r.id, "s_0123456789ab", 95, &RunnerInfo::default())
        .await
        .unwrap();
    let mut assignments = Vec::new();
    for (id, token) in [(created[0].id, "t-a"), (created[1].id, "t-b")] {
        assignments.push(Assignment {
            job_id: id,
            runner_id: r.id,
            runner_manager_id: Some(manager),
            token_hash: token.into(),
            timeout_secs: 600,
        });
    }
    let won = s.assign_jobs(&assignments, 10).await.expect("assign");
    assert_eq!(won.len(), 2);
    assert_eq!(
        s.job(created[0].id).await.unwrap().runner_manager_id,
        Some(manager)
    );
    let managers = s.runner_managers(r.id).await.unwrap();
    assert_eq!(
        managers
            .iter()
            .map(|m| (
                m.id,
                m.system_id.as_str(),
                m.info.version.as_str(),
                m.contacted_at,
                m.busy
            ))
            .collect::<Vec<_>>(),
        [
            (manager, "s_0123456789ab", "18.6.0", Some(90), true),
            (legacy, LEGACY_SYSTEM_ID, "", Some(91), false),
        ]
    );
    assert_eq!(managers[0].created_at, 77);
    assert_eq!(managers[0].info.ip_address, "10.0.0.7");
    let by_id = s
        .runner_managers_by_id(&[legacy, manager, 999])
        .await
        .unwrap();
    assert_eq!(by_id.len(), 2);
    assert!(by_id[&manager].busy);
    // A deleted manager is gone; the jobs it took keep their runner.
    assert!(
        s.delete_runner_manager(r.id, LEGACY_SYSTEM_ID)
            .await
            .unwrap()
    );
    assert!(
        !s.delete_runner_manager(r.id, LEGACY_SYSTEM_ID)
            .await
            .unwrap()
    );
    assert!(
        !s.delete_runner_manager(idle.id, "s_0123456789ab")
            .await
            .unwrap()
    );
    assert_eq!(s.runner_managers(r.id).await.unwrap().len(), 1);
    // A deleted runner takes its managers with it.
    let short = s.create_runner(&runner("short"), 1).await.expect("runner");
    let its = s
        .runner_heartbeat(short.id, "r_short0000000", 100, &info)
        .await
        .unwrap();
    assert!(s.delete_runner(short.id).await.unwrap());
    assert!(s.runner_managers_by_id(&[its]).await.unwrap().is_empty());
    let running = s.running_jobs_by_runner().await.unwrap();
    assert_eq!(running.get(&r.id), Some(&2));
    assert_eq!(running.get(&idle.id), None);
    assert_eq!(
        s.executing_jobs_of_runner(r.id).await.unwrap(),
        [created[0].id, created[1].id]
    );
    assert!(
        s.executing_jobs_of_runner(idle.id)
            .await
            .unwrap()
            .is_empty()
    );
    // The metrics' counts: every runner, and the unfinished pipelines by status.
    assert_eq!(s.runner_count().await.unwrap(), 2);
    let (second, _) = create(&s, &pipeline(p.id), &[job("z", "created")], 2)
        .await
        .expect("second pipeline");
    let status = second.status;
    let counts = s.active_pipeline_counts().await.unwrap();
    let total: i64 = counts
        .iter()
        .filter(|(pid, _, _)| *pid == p.id)
        .map(|c| c.2)
        .sum();
    assert_eq!(total, 2, "{counts:?}");
    assert!(
        counts.iter().any(|(_, st, _)| *st == status.as_str()),
        "{counts:?}"
    );
}

async fn access_tokens_are_kept_as_hashes_and_revoked_once(db: Db) {
    let (_d, s) = open(db).await;
    let scopes = vec!["read_api".to_owned()];
    let made = s
        .create_access_token(
            &NewAccessToken {
                user_id: 1,
                name: "dashboards",
                token_hash: "h1",
                scopes: &scopes,
                expires_at: Some("2999-01-01"),
            },
            5,
        )
        .await
        .unwrap();
    assert_eq!(made.scopes, scopes);
    assert_eq!(made.expires_at.as_deref(), Some("2999-01-01"));
    assert!(!made.revoked);
    assert_eq!(
        s.access_token_by_hash("h1").await.unwrap(),
        Some(made.clone())
    );
    assert_eq!(s.access_token_by_hash("h2").await.unwrap(), None);
    s.revoke_access_token(made.id).await.unwrap();
    assert!(s.access_token(made.id).await.unwrap().revoked);
    assert!(matches!(
        s.revoke_access_token(made.id).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(s.access_tokens().await.unwrap().len(), 1);
}

async fn project_runners_are_enabled_for_more_projects(db: Db) {
    let (_d, s) = open(db).await;
    let first = s.create_project(&project("first"), 1).await.unwrap();
    let second = s.create_project(&project("second"), 1).await.unwrap();
    let own = s
        .create_runner(
            &NewRunner {
                project_id: Some(first.id),
                ..runner("own")
            },
            1,
        )
        .await
        .unwrap();
    assert!(s.enable_runner_project(own.id, second.id, 2).await.unwrap());
    assert!(!s.enable_runner_project(own.id, second.id, 3).await.unwrap());
    assert_eq!(
        s.runner(own.id).await.unwrap().enabled_projects,
        [second.id]
    );
    let by_token = s.runner_by_token_hash("own").await.unwrap().unwrap();
    assert_eq!(by_token.enabled_projects, [second.id]);
    assert_eq!(s.runners().await.unwrap()[0].enabled_projects, [second.id]);
    assert!(s.disable_runner_project(own.id, second.id).await.unwrap());
    assert!(!s.disable_runner_project(own.id, second.id).await.unwrap());
    assert!(s.runner(own.id).await.unwrap().enabled_projects.is_empty());
    // Deleting the other project drops the link; deleting the owner drops the runner.
    assert!(s.enable_runner_project(own.id, second.id, 4).await.unwrap());
    s.delete_project(second.id).await.unwrap();
    assert!(s.runner(own.id).await.unwrap().enabled_projects.is_empty());
    let third = s.create_project(&project("third"), 1).await.unwrap();
    assert!(s.enable_runner_project(own.id, third.id, 5).await.unwrap());
    s.delete_project(first.id).await.unwrap();
    assert!(matches!(
        s.runner(own.id).await,
        Err(StoreError::NotFound(_))
    ));
    s.delete_project(third.id).await.unwrap();
}

/// A project's job token allowlist (migration 0026): new projects limit access, entries
/// are unique and limited, and go with either project.
async fn job_token_allowlists_are_limited_and_go_with_their_projects(db: Db) {
    let (_d, s) = open(db).await;
    let lib = s.create_project(&project("acme/lib"), 1).await.unwrap();
    let app = s.create_project(&project("acme/app"), 1).await.unwrap();
    let cli = s.create_project(&project("tools/cli"), 1).await.unwrap();
    assert!(
        lib.ci_inbound_job_token_scope_enabled,
        "new projects limit access"
    );
    let off = s
        .update_project(
            lib.id,
            &ProjectChanges {
                ci_inbound_job_token_scope_enabled: Some(false),
                ..ProjectChanges::default()
            },
        )
        .await
        .unwrap();
    assert!(!off.ci_inbound_job_token_scope_enabled);
    assert_eq!(
        off.keep_latest_artifact, lib.keep_latest_artifact,
        "nothing else changed"
    );

    assert_eq!(
        s.add_job_token_project(lib.id, cli.id, 2, 5).await.unwrap(),
        LinkAdded::Added
    );
    assert_eq!(
        s.add_job_token_project(lib.id, app.id, 2, 5).await.unwrap(),
        LinkAdded::Added
    );
    // The limit is checked before the entry: a third is refused, a duplicate too.
    assert_eq!(
        s.add_job_token_project(lib.id, app.id, 3, 6).await.unwrap(),
        LinkAdded::AlreadyThere
    );
    assert_eq!(
        s.add_job_token_project(lib.id, app.id, 2, 6).await.unwrap(),
        LinkAdded::Full
    );
    let groups = s
        .group_ids(&["acme".to_owned(), "tools".to_owned()], 1)
        .await
        .unwrap();
    let (acme, tools) = (groups[0].1, groups[1].1);
    assert_eq!(
        s.add_job_token_group(lib.id, tools, 200, 7).await.unwrap(),
        LinkAdded::Added
    );
    assert_eq!(
        s.add_job_token_group(lib.id, acme, 1, 7).await.unwrap(),
        LinkAdded::Full
    );
    assert_eq!(
        s.job_token_allowlist(lib.id).await.unwrap(),
        JobTokenAllowlist {
            projects: vec![app.id, cli.id],
            groups: vec![(tools, "tools".to_owned())],
        }
    );
    assert_eq!(
        s.job_token_allowlist(app.id).await.unwrap(),
        JobTokenAllowlist::default(),
        "one project's entries are its own"
    );
    assert!(s.remove_job_token_group(lib.id, tools).await.unwrap());
    assert!(!s.remove_job_token_group(lib.id, tools).await.unwrap());
    assert!(s.remove_job_token_project(lib.id, cli.id).await.unwrap());
    assert!(!s.remove_job_token_project(lib.id, cli.id).await.unwrap());

    // Deleting a project removes the entries naming it and its own.
    s.add_job_token_project(app.id, lib.id, 200, 8)
        .await
        .unwrap();
    s.add_job_token_group(app.id, acme, 200, 8).await.unwrap();
    s.delete_project(app.id).await.unwrap();
    assert_eq!(
        s.job_token_allowlist(lib.id).await.unwrap(),
        JobTokenAllowlist::default()
    );
    s.delete_project(lib.id).await.unwrap();
}

fn merge_request(project_id: i64, iid: i64, branch: &str) -> NewMergeRequest {
    NewMergeRequest {
        project_id,
        iid,
        forge: "github".into(),
        state: "opened".into(),
        title: format!("Change {iid}"),
        description: "Body".into(),
        source_branch: branch.into(),
        target_branch: "main".into(),
        source_sha: "a".repeat(40),
        target_sha: "b".repeat(40),
        source_repository: "acme/app".into(),
        target_repository: "acme/app".into(),
        draft: false,
        labels: vec!["bug".into(), "ui".into()],
        author: "octocat".into(),
        web_url: format!("https://github.com/acme/app/pull/{iid}"),
    }
}

/// Merge requests are one row per `(project, iid)`, updated by later events; a merge
/// request pipeline's link is written with it and read back; a branch's open requests
/// are the newest few; everything goes with the pipeline or the project.
async fn merge_requests_are_upserted_linked_and_deleted(db: Db) {
    let (_dir, s) = open(db).await;
    let p = s.create_project(&project("demo"), 1).await.unwrap();
    let first = s
        .upsert_merge_request(&merge_request(p.id, 7, "feature"), 10)
        .await
        .unwrap();
    assert_eq!(first.labels, ["bug", "ui"]);
    assert_eq!(s.next_merge_request_iid(p.id).await.unwrap(), 8);
    let moved = NewMergeRequest {
        source_sha: "c".repeat(40),
        title: "Renamed".into(),
        labels: Vec::new(),
        ..merge_request(p.id, 7, "feature")
    };
    let again = s.upsert_merge_request(&moved, 20).await.unwrap();
    assert_eq!(again.id, first.id, "the same request");
    assert_eq!(
        (again.title.as_str(), again.created_at, again.updated_at),
        ("Renamed", 10, 20)
    );
    assert!(again.labels.is_empty());
    let other = s
        .upsert_merge_request(&merge_request(p.id, 9, "feature"), 30)
        .await
        .unwrap();
    s.upsert_merge_request(
        &NewMergeRequest {
            state: "closed".into(),
            ..merge_request(p.id, 3, "feature")
        },
        30,
    )
    .await
    .unwrap();
    let open: Vec<i64> = s
        .open_merge_requests_from(p.id, "feature", 4)
        .await
        .unwrap()
        .iter()
        .map(|m| m.iid)
        .collect();
    assert_eq!(open, [9, 7], "open ones, newest first");
    assert_eq!(
        s.open_merge_requests_from(p.id, "feature", 1)
            .await
            .unwrap()[0]
            .id,
        other.id
    );
    assert!(
        s.open_merge_requests_from(p.id, "main", 4)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.merge_requests(p.id, None).await.unwrap().len(), 3);
    assert_eq!(
        s.merge_requests(p.id, Some("closed")).await.unwrap().len(),
        1
    );
    assert_eq!(s.merge_request_by_iid(p.id, 7).await.unwrap().id, first.id);

    let link = MergeRequestLink {
        merge_request_id: first.id,
        event_type: "detached".into(),
        source_sha: "c".repeat(40),
        target_sha: "b".repeat(40),
        base_sha: Some("d".repeat(40)),
    };
    let (mr_pipeline, _) = create(
        &s,
        &NewPipeline {
            ref_name: "refs/merge-requests/7/head".into(),
            source: "merge_request_event".into(),
            merge_request: Some(link.clone()),
            ..pipeline(p.id)
        },
        &[job("test", "created")],
        40,
    )
    .await
    .unwrap();
    let (branch_pipeline, _) = create(&s, &pipeline(p.id), &[job("test", "created")], 40)
        .await
        .unwrap();
    let (got, mr) = s
        .pipeline_merge_request(mr_pipeline.id)
        .await
        .unwrap()
        .expect("a merge request pipeline");
    assert_eq!((got, mr.id), (link, first.id));
    assert!(
        s.pipeline_merge_request(branch_pipeline.id)
            .await
            .unwrap()
            .is_none()
    );
    let ids: Vec<i64> = s
        .merge_request_pipelines(first.id)
        .await
        .unwrap()
        .iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, [mr_pipeline.id]);
    assert!(
        s.merge_request_pipeline_exists(first.id, "detached", &"c".repeat(40))
            .await
            .unwrap()
    );
    assert!(
        !s.merge_request_pipeline_exists(first.id, "merged_result", &"c".repeat(40))
            .await
            .unwrap()
    );

    assert_eq!(s.forge_hook_secret(p.id).await.unwrap(), None);
    s.set_forge_hook_secret(p.id, Some("sealed")).await.unwrap();
    assert_eq!(
        s.forge_hook_secret(p.id).await.unwrap().as_deref(),
        Some("sealed")
    );

    s.delete_pipeline(mr_pipeline.id).await.unwrap();
    assert!(
        s.merge_request_pipelines(first.id)
            .await
            .unwrap()
            .is_empty()
    );
    create(
        &s,
        &NewPipeline {
            merge_request: Some(MergeRequestLink {
                merge_request_id: other.id,
                event_type: "merged_result".into(),
                source_sha: "a".repeat(40),
                target_sha: "b".repeat(40),
                base_sha: None,
            }),
            ..pipeline(p.id)
        },
        &[job("test", "created")],
        50,
    )
    .await
    .unwrap();
    s.delete_project(p.id).await.unwrap();
    assert!(matches!(
        s.merge_request(first.id).await,
        Err(StoreError::NotFound(_))
    ));
}

/// Pages deployments: the newest of a project and prefix is served, a new one deactivates
/// the older of its prefix only (their blobs handed back), expiry hides one; releases are
/// one per tag; both go with their project.
async fn pages_deployments_and_releases_per_project(db: Db) {
    let (_dir, s) = open(db).await;
    let p = s.create_project(&project("site"), 1).await.unwrap();
    let (pipeline, _) = create(&s, &pipeline(p.id), &[job("pages", "success")], 1)
        .await
        .unwrap();
    let deployment = |job_id: i64, prefix: &str, expires_at: Option<i64>| NewPagesDeployment {
        project_id: p.id,
        job_id,
        pipeline_id: pipeline.id,
        sha: "abc".into(),
        path_prefix: prefix.into(),
        blob_key: format!("pages/{}/{job_id}.zip", p.id),
        file_count: 2,
        size: 10,
        expires_at,
    };
    let (first, older) = s
        .add_pages_deployment(&deployment(1, "", None), 10)
        .await
        .unwrap();
    assert!(older.is_empty());
    let (review, older) = s
        .add_pages_deployment(&deployment(2, "review", Some(100)), 11)
        .await
        .unwrap();
    assert!(older.is_empty(), "another prefix stays: {older:?}");
    let (second, older) = s
        .add_pages_deployment(&deployment(3, "", None), 12)
        .await
        .unwrap();
    assert_eq!(older, std::slice::from_ref(&first.blob_key));
    assert_eq!(
        s.active_pages_deployment(p.id, "", 50).await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        s.active_pages_deployment(p.id, "review", 50).await.unwrap(),
        Some(review.clone())
    );
    assert_eq!(
        s.active_pages_deployment(p.id, "review", 100)
            .await
            .unwrap(),
        None
    );
    assert_eq!(s.pages_deployments(p.id).await.unwrap(), [second, review]);
    assert_eq!(s.pages_blob_keys(p.id).await.unwrap().len(), 3);

    let release = |tag: &str, at: i64| NewRelease {
        project_id: p.id,
        tag_name: tag.into(),
        name: tag.into(),
        description: "notes".into(),
        tag_message: None,
        sha: "abc".into(),
        job_id: Some(1),
        pipeline_id: Some(pipeline.id),
        milestones: "[]".into(),
        links: "[]".into(),
        released_at: at,
    };
    s.add_release(&release("v1", 5), 5).await.unwrap();
    s.add_release(&release("v2", 9), 9).await.unwrap();
    assert!(matches!(
        s.add_release(&release("v1", 20), 20).await,
        Err(StoreError::Conflict(m)) if m == "Release already exists"
    ));
    let tags: Vec<String> = s
        .releases(p.id)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.tag_name)
        .collect();
    assert_eq!(tags, ["v2", "v1"]);
    assert_eq!(s.release(p.id, "v1").await.unwrap().released_at, 5);
    assert!(matches!(
        s.release(p.id, "v3").await,
        Err(StoreError::NotFound(_))
    ));

    s.delete_project(p.id).await.unwrap();
    assert!(s.pages_blob_keys(p.id).await.unwrap().is_empty());
    assert!(s.releases(p.id).await.unwrap().is_empty());
}

on_both_backends!(
    pages_deployments_and_releases_per_project,
    merge_requests_are_upserted_linked_and_deleted,
    job_token_allowlists_are_limited_and_go_with_their_projects,
    access_tokens_are_kept_as_hashes_and_revoked_once,
    ui_sessions_expire_and_end,
    runners_keep_their_info_and_count_running_jobs,
    project_runners_are_enabled_for_more_projects,
    unacknowledged_jobs_go_back_to_the_queue_once,
    a_runners_writes_check_its_token,
    an_assignment_that_fails_halfway_changes_nothing,
    a_job_goes_only_to_a_runner_there_and_not_paused,
    protected_refs_are_kept_per_kind,
    group_variables_are_kept_per_group,
    schedules_are_limited_and_run_once,
    hidden_project_variables_stay_hidden,
    lists_page_in_the_database,
    projects_are_unique_by_name,
    pipelines_get_per_project_iids_and_their_jobs,
    a_large_pipeline_keeps_each_jobs_row_environment_and_resource_group,
    a_trigger_job_creates_one_downstream_pipeline_at_most,
    apply_is_atomic_and_optimistically_locked,
    a_change_to_many_jobs_updates_each_row,
    every_pending_job_goes_to_exactly_one_runner,
    assignments_in_one_statement,
    trace_sizes_move_by_compare_and_set,
    runners_tokens_and_artifacts,
    artifacts_of_jobs_reads_the_jobs_named_in_chunks,
    instance_variables_are_unique_by_key,
    the_latest_pipelines_of_a_ref_keep_their_artifacts,
    the_pipelines_of_a_ref_are_found_without_reading_its_history,
    project_settings_change_one_at_a_time,
    runner_settings_change_and_leave_it_able_to_run_something,
    environments_follow_their_jobs,
    environments_list_change_and_delete,
);

/// `gantry run`'s store: the first run makes a template of the empty migrated database in
/// the cache directory, later runs copy it; each store starts empty (the template never
/// holds a run's rows), and a damaged template is replaced, not an error.
#[tokio::test]
async fn a_run_store_starts_from_a_template_of_the_migrated_database() {
    let cache = tempfile::tempdir().expect("temp dir");
    let templates = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(cache.path())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let runs = tempfile::tempdir().expect("temp dir");
    let new_store = |n: usize| {
        let path = runs.path().join(format!("run{n}.db"));
        let cache = cache.path().to_owned();
        async move {
            Store::create_sqlite_from_template(&path, 1, &cache.join("gantry"))
                .await
                .expect("store opens")
        }
    };
    let first = new_store(1).await;
    assert!(first.init_setting("db_key", "run one").await.unwrap());
    // Thrown away with its run, so its commits never wait for the disk.
    assert!(!first.syncs_to_disk().await.unwrap());
    let made: Vec<_> = std::fs::read_dir(cache.path().join("gantry"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        made[0].starts_with("store-sqlite-") && made[0].ends_with(".db"),
        "{made:?}"
    );
    assert_eq!(templates().len(), 1);
    // In WAL mode already (bytes 18 and 19 of the header), so no copy has to switch.
    let template = cache.path().join("gantry").join(&made[0]);
    let header = std::fs::read(&template).unwrap();
    assert_eq!(&header[18..20], &[2, 2], "the template is in WAL mode");

    // A copy: migrated (a setting can be written), and empty.
    let second = new_store(2).await;
    assert_eq!(second.setting("db_key").await.unwrap(), None);
    assert!(!second.syncs_to_disk().await.unwrap());
    assert!(second.init_setting("db_key", "run two").await.unwrap());
    assert_eq!(
        first.setting("db_key").await.unwrap().as_deref(),
        Some("run one")
    );

    // A template in rollback-journal mode (made by an earlier version): made again.
    let mut rollback = header.clone();
    rollback[18..20].copy_from_slice(&[1, 1]);
    std::fs::write(&template, &rollback).unwrap();
    let copied = new_store(6).await;
    assert_eq!(copied.setting("db_key").await.unwrap(), None);
    assert_eq!(&std::fs::read(&template).unwrap()[18..20], &[2, 2]);

    // A damaged template: the run still gets a good store, and the template is made again.
    std::fs::write(&template, b"not a database").unwrap();
    let third = new_store(3).await;
    assert_eq!(third.setting("db_key").await.unwrap(), None);
    assert!(third.init_setting("db_key", "run three").await.unwrap());
    assert_ne!(std::fs::read(&template).unwrap(), b"not a database");
    let fourth = new_store(4).await;
    assert_eq!(fourth.setting("db_key").await.unwrap(), None);

    // A cache directory that cannot be written: no template, the store all the same.
    let blocked = cache.path().join("file");
    std::fs::write(&blocked, b"").unwrap();
    let path = runs.path().join("run5.db");
    let fifth = Store::create_sqlite_from_template(&path, 1, &blocked.join("gantry"))
        .await
        .expect("store opens");
    assert!(fifth.init_setting("db_key", "run five").await.unwrap());
    assert!(!fifth.syncs_to_disk().await.unwrap());

    // A server's store keeps what it committed.
    let kept = Store::open(&format!(
        "sqlite://{}",
        runs.path().join("kept.db").display()
    ))
    .await
    .expect("store opens");
    assert!(kept.syncs_to_disk().await.unwrap());
}

/// What a new pipeline's auto-cancel reads (its ref's older pipelines in a cancelable
/// status, no child pipeline), `needs:project`'s job (the newest successful latest attempt
/// of the ref, branch or tag) and the artifacts by ref (in the ref's newest successful
/// pipeline and its children), each by an index and one statement: GitLab's answers beside
/// ten times a usual history, 1,000 finished pipelines of the ref.
async fn the_pipelines_of_a_ref_are_found_without_reading_its_history(db: Db) {
    let (_d, s) = open(db).await;
    let a = s.create_project(&project("a"), 1).await.expect("a");
    let b = s.create_project(&project("b"), 1).await.expect("b");
    let of = |ref_name: &str, tag: bool, status: &str| NewPipeline {
        ref_name: ref_name.into(),
        tag,
        status: st(status),
        ..pipeline(a.id)
    };
    let mut history = Vec::new();
    for i in 0..1000 {
        let status = if i % 2 == 0 { "success" } else { "failed" };
        // The last one's `build` failed, then its second attempt succeeded.
        let mut jobs = vec![job("build", status), job("test", "success")];
        if i == 999 {
            jobs.push(job("build", "success"));
        }
        history.push(
            create(&s, &of("main", false, status), &jobs, i)
                .await
                .expect("history"),
        );
    }
    let (last, last_jobs) = history.last().expect("a history").clone();
    let running_jobs = [job("build", "running")];
    let running = create(&s, &of("main", false, "running"), &running_jobs, 2000)
        .await
        .expect("running")
        .0;
    let pending = create(&s, &of("main", false, "pending"), &[], 2001)
        .await
        .expect("pending")
        .0;
    for (ref_name, tag, status) in [
        ("main", false, "manual"),
        ("main", false, "canceling"),
        ("main", true, "running"),
        ("other", false, "running"),
    ] {
        create(&s, &of(ref_name, tag, status), &[], 2002)
            .await
            .expect("not cancelable");
    }
    let child = NewPipeline {
        parent_job_id: Some(last_jobs[0].id),
        ..of("main", false, "running")
    };
    create(&s, &child, &[], 2003).await.expect("child");
    create(&s, &NewPipeline { ..pipeline(b.id) }, &[], 2004)
        .await
        .expect("b");
    let newest = create(&s, &of("main", false, "created"), &[], 2005)
        .await
        .expect("new")
        .0;

    let older = s
        .cancelable_pipelines_of_ref(a.id, "main", false, newest.id)
        .await
        .expect("cancelable");
    let ids: Vec<i64> = older.iter().map(|p| p.id).collect();
    assert_eq!(ids, [running.id, pending.id]);
    let before_running = s
        .cancelable_pipelines_of_ref(a.id, "main", false, running.id)
        .await
        .expect("none older");
    assert!(before_running.is_empty());
    let tags = s
        .cancelable_pipelines_of_ref(a.id, "main", true, newest.id)
        .await;
    assert_eq!(tags.expect("tag").len(), 1);

    // `needs:project`: the newest successful `build` of any pipeline of the ref — the
    // second attempt in the last of the history (its pipeline failed; newer ones have none).
    let retried = &last_jobs[2];
    let found = s.latest_successful_job_of_ref(a.id, "main", "build").await;
    assert_eq!(found.expect("found"), Some((retried.id, last.id)));
    let elsewhere = s.latest_successful_job_of_ref(a.id, "other", "build").await;
    assert_eq!(elsewhere.expect("other"), None);
    let in_b = s.latest_successful_job_of_ref(b.id, "main", "build").await;
    assert_eq!(in_b.expect("b"), None);
    // A newer successful `build` of another ref is that ref's, and hides nothing of
    // `main`'s (a job row carries its pipeline's ref: migration 0041).
    let (feature, feature_jobs) = create(
        &s,
        &of("feature", false, "success"),
        &[job("build", "success")],
        2006,
    )
    .await
    .expect("feature");
    let found = s.latest_successful_job_of_ref(a.id, "main", "build").await;
    assert_eq!(found.expect("found"), Some((retried.id, last.id)));
    let of_feature = s
        .latest_successful_job_of_ref(a.id, "feature", "build")
        .await;
    assert_eq!(
        of_feature.expect("feature"),
        Some((feature_jobs[0].id, feature.id))
    );
    // Retried, it is no longer the job (GitLab's `latest` scope): the next newest is.
    let retry = PipelineChange {
        status: st("failed"),
        jobs: vec![JobUpdate {
            id: retried.id,
            status: st("success"),
            retried: true,
            ..JobUpdate::default()
        }],
        ..PipelineChange::default()
    };
    s.apply(last.id, last.lock_version, &retry, 2500)
        .await
        .expect("retried");
    let (older, older_jobs) = &history[998];
    let found = s.latest_successful_job_of_ref(a.id, "main", "build").await;
    assert_eq!(found.expect("found"), Some((older_jobs[0].id, older.id)));

    // The artifacts by ref: in the newest *successful pipeline* (the history's 999th), the
    // `build` with an archive, or nothing; a child pipeline of it is searched after it and is
    // never the newest successful pipeline itself.
    let archive = |job_id: i64| NewArtifact {
        job_id,
        file_type: "archive".into(),
        file_format: "zip".into(),
        filename: "artifacts.zip".into(),
        size: 10,
        sha256: "ab".into(),
        blob_key: format!("artifacts/{job_id}/archive"),
        expire_at: None,
    };
    let latest_archive = async |job: &str| {
        s.latest_artifacts_job_of_ref(a.id, "main", job)
            .await
            .expect("latest archive")
    };
    s.put_artifact(&archive(retried.id), 3000)
        .await
        .expect("put");
    assert_eq!(latest_archive("build").await, None, "its pipeline failed");
    let (successful, successful_jobs) = &history[998];
    s.put_artifact(&archive(successful_jobs[0].id), 3001)
        .await
        .expect("put");
    assert_eq!(latest_archive("build").await, Some(successful_jobs[0].id));
    let child = NewPipeline {
        parent_job_id: Some(successful_jobs[0].id),
        source: "parent_pipeline".into(),
        ..of("main", false, "success")
    };
    let child_jobs = [job("build", "success"), job("pack", "success")];
    let (_, child_jobs) = create(&s, &child, &child_jobs, 3002).await.expect("child");
    for j in &child_jobs {
        s.put_artifact(&archive(j.id), 3003).await.expect("put");
    }
    assert_eq!(
        latest_archive("build").await,
        Some(successful_jobs[0].id),
        "parent first"
    );
    assert_eq!(latest_archive("pack").await, Some(child_jobs[1].id));
    assert_eq!(latest_archive("test").await, None, "no archive");
    assert!(successful.id < last.id);
    // A newer successful pipeline (a tag of the same name counts) without an archive of
    // `build`: nothing, as on GitLab; with one, that one.
    let tagged_jobs = [job("build", "success")];
    let tagged = create(&s, &of("main", true, "success"), &tagged_jobs, 3004).await;
    let (_, tagged_jobs) = tagged.expect("tagged");
    assert_eq!(latest_archive("build").await, None);
    s.put_artifact(&archive(tagged_jobs[0].id), 3005)
        .await
        .expect("put");
    assert_eq!(latest_archive("build").await, Some(tagged_jobs[0].id));
}

/// GitLab's "keep artifacts from the most recent successful jobs" (migration 0015): a
/// pipeline is created locked; when one ends, the older families of its ref are unlocked
/// but for the newest successful one; a child pipeline goes with its family; deleting the
/// ref unlocks the rest. Expiry removal takes only unlocked artifacts.
async fn the_latest_pipelines_of_a_ref_keep_their_artifacts(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    // Each pipeline: one job with an archive that expired at 5.
    let run = |ref_name: &'static str, parent_job: Option<i64>| {
        let s = &s;
        async move {
            let new = NewPipeline {
                ref_name: ref_name.into(),
                parent_job_id: parent_job,
                ..pipeline(p.id)
            };
            let (pl, jobs) = create(s, &new, &[job("build", "success")], 1)
                .await
                .expect("pipeline");
            s.put_artifact(
                &NewArtifact {
                    job_id: jobs[0].id,
                    file_type: "archive".into(),
                    file_format: "zip".into(),
                    filename: "artifacts.zip".into(),
                    size: 10,
                    sha256: "ab".into(),
                    blob_key: format!("artifacts/{}/archive", jobs[0].id),
                    expire_at: Some(5),
                },
                2,
            )
            .await
            .expect("artifact");
            (pl.id, jobs[0].id)
        }
    };
    let end = |pipeline: i64, status: &'static str| {
        let s = &s;
        async move {
            let pl = s.pipeline(pipeline).await.expect("pipeline");
            let change = PipelineChange {
                status: st(status),
                finished_at: Some(9),
                ended: true,
                ..PipelineChange::default()
            };
            s.apply(pipeline, pl.lock_version, &change, 9)
                .await
                .expect("ended");
        }
    };
    let locked = |job: i64| {
        let s = &s;
        async move {
            let a = &s.artifacts(job).await.expect("artifacts")[0];
            assert_eq!(a.expired(10), !a.locked);
            a.locked
        }
    };

    let (first, first_job) = run("main", None).await;
    assert!(locked(first_job).await, "a new pipeline is locked");
    end(first, "success").await;
    assert!(
        locked(first_job).await,
        "the newest, and the newest successful"
    );

    // A child pipeline of a newer pipeline belongs to that family.
    let (second, second_job) = run("main", None).await;
    let (child, child_job) = run("main", Some(second_job)).await;
    let (other_ref, other_job) = run("feature", None).await;
    end(child, "failed").await;
    end(second, "failed").await;
    assert!(
        locked(second_job).await && locked(child_job).await,
        "the newest family"
    );
    assert!(locked(first_job).await, "the newest successful one stays");
    end(other_ref, "success").await;

    let (third, third_job) = run("main", None).await;
    end(third, "success").await;
    assert!(!locked(first_job).await && !locked(second_job).await && !locked(child_job).await);
    assert!(
        locked(third_job).await && locked(other_job).await,
        "another ref is its own"
    );

    // Only unlocked expired artifacts are removed.
    let mut taken: Vec<i64> = s
        .take_artifacts(ArtifactSelection::ExpiredBy(10), 100)
        .await
        .expect("removal")
        .into_iter()
        .map(|(job, _, _)| job)
        .collect();
    taken.sort_unstable();
    assert_eq!(taken, [first_job, second_job, child_job]);

    // Deleting a ref unlocks its pipelines.
    let deleted = RefChange {
        ref_name: "refs/heads/feature".into(),
        from: Some("a".repeat(40)),
        to: None,
    };
    s.record_refs(
        p.id,
        &[("refs/heads/feature".to_owned(), "a".repeat(40))],
        1,
    )
    .await
    .expect("refs");
    assert!(s.move_ref(p.id, &deleted).await.expect("deleted"));
    assert!(!locked(other_job).await);
    assert!(locked(third_job).await);

    // With `keep_latest_artifact` off (migration 0016) a new pipeline is not locked, and
    // those locked before stay so until a newer pipeline of their ref ends.
    let off = s
        .update_project(
            p.id,
            &ProjectChanges {
                keep_latest_artifact: Some(false),
                ..ProjectChanges::default()
            },
        )
        .await
        .expect("setting");
    assert!(!off.keep_latest_artifact);
    let (fourth, fourth_job) = run("main", None).await;
    assert!(!locked(fourth_job).await, "created unlocked");
    assert!(locked(third_job).await);
    end(fourth, "success").await;
    assert!(!locked(fourth_job).await && !locked(third_job).await);
}

/// `update_project` changes the settings it names, and only those; an unknown project is
/// `NotFound`.
async fn project_settings_change_one_at_a_time(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    assert!(p.keep_latest_artifact, "on by default");
    assert_eq!(
        (
            p.build_git_strategy.as_str(),
            p.ci_default_git_depth,
            p.auto_cancel_pending_pipelines,
            p.ci_separated_caches,
            p.ci_forward_deployment_enabled
        ),
        ("fetch", None, true, true, true),
        "GitLab's defaults"
    );
    let changed = s
        .update_project(
            p.id,
            &ProjectChanges {
                default_branch: Some("stable".into()),
                timeout_secs: Some(900),
                ..ProjectChanges::default()
            },
        )
        .await
        .expect("update");
    assert_eq!(
        changed,
        Project {
            default_branch: "stable".into(),
            timeout_secs: 900,
            ..p.clone()
        }
    );
    assert_eq!(s.project(p.id).await.expect("read"), changed);
    let changed = s
        .update_project(
            p.id,
            &ProjectChanges {
                ci_config_path: Some("ci/main.yml".into()),
                keep_latest_artifact: Some(false),
                build_git_strategy: Some("clone".into()),
                ci_default_git_depth: Some(Some(20)),
                auto_cancel_pending_pipelines: Some(false),
                ci_separated_caches: Some(false),
                ci_forward_deployment_enabled: Some(false),
                ..ProjectChanges::default()
            },
        )
        .await
        .expect("update");
    assert_eq!(
        changed,
        Project {
            default_branch: "stable".into(),
            timeout_secs: 900,
            ci_config_path: "ci/main.yml".into(),
            keep_latest_artifact: false,
            build_git_strategy: "clone".into(),
            ci_default_git_depth: Some(20),
            auto_cancel_pending_pipelines: false,
            ci_separated_caches: false,
            ci_forward_deployment_enabled: false,
            ..p.clone()
        }
    );
    let unset = s
        .update_project(
            p.id,
            &ProjectChanges {
                ci_default_git_depth: Some(None),
                ..ProjectChanges::default()
            },
        )
        .await
        .expect("update");
    assert_eq!(unset.ci_default_git_depth, None);
    assert_eq!(unset.build_git_strategy, "clone", "the others stay");
    assert!(matches!(
        s.update_project(p.id + 100, &ProjectChanges::default())
            .await,
        Err(StoreError::NotFound("project"))
    ));
}

/// A status change of job `id`, with what it does to the job's environment.
fn status_change(id: i64, status: &str, event: Option<EnvironmentEvent>) -> JobUpdate {
    JobUpdate {
        id,
        status: st(status),
        environment_event: event,
        ..JobUpdate::default()
    }
}

async fn apply_jobs(s: &Store, pipeline_id: i64, jobs: Vec<JobUpdate>, now: i64) {
    let lock = s
        .pipeline(pipeline_id)
        .await
        .expect("pipeline")
        .lock_version;
    let change = PipelineChange {
        status: st("running"),
        jobs,
        ..PipelineChange::default()
    };
    s.apply(pipeline_id, lock, &change, now)
        .await
        .expect("apply");
}

async fn environments_follow_their_jobs(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let jobs = [
        env_job("deploy", "review/a", "start", Some("stop")),
        env_job("stop", "review/a", "stop", None),
        env_job("prepare", "review/b", "prepare", None),
        job("test", "created"),
    ];
    let (pl, rows) = create(&s, &pipeline(p.id), &jobs, 1_000)
        .await
        .expect("pipeline");
    // Both environments exist, available, with the job's tier and auto-stop time.
    let (envs, total) = s
        .environments_page(p.id, &EnvironmentFilter::default(), 0, 10)
        .await
        .expect("list");
    assert_eq!(total, 2);
    assert_eq!(envs[0].name, "review/a");
    assert_eq!(envs[0].state, "available");
    assert_eq!(envs[0].tier, "development");
    assert_eq!(envs[0].auto_stop_at, Some(61_000));
    assert_eq!(
        envs[0].external_url, None,
        "the URL comes with a successful deployment"
    );
    assert_eq!(rows[0].environment_id, Some(envs[0].id));
    assert_eq!(rows[1].environment_action.as_deref(), Some("stop"));
    assert_eq!(rows[3].environment_id, None);
    // Only the `start` job is a deployment; its status is its job's.
    let d = s
        .job_deployment(rows[0].id)
        .await
        .expect("read")
        .expect("deployment");
    assert_eq!((d.iid, d.status.as_str()), (1, "created"));
    assert_eq!(d.ref_name, "main");
    assert!(s.job_deployment(rows[1].id).await.expect("read").is_none());
    for (status, shown) in [
        ("manual", "blocked"),
        ("running", "running"),
        ("canceling", "running"),
    ] {
        apply_jobs(
            &s,
            pl.id,
            vec![status_change(rows[0].id, status, None)],
            2_000,
        )
        .await;
        let d = s
            .job_deployment(rows[0].id)
            .await
            .expect("read")
            .expect("deployment");
        assert_eq!(d.status, shown, "job {status}");
    }
    assert_eq!(s.last_deployment(envs[0].id).await.expect("read"), None);
    assert!(
        s.last_finished_deployment_group(envs[0].id)
            .await
            .expect("read")
            .is_empty()
    );
    // Success: the environment takes the job's URL and a new auto-stop time.
    let deployed = JobUpdate {
        finished_at: Some(5_000),
        ..status_change(rows[0].id, "success", Some(EnvironmentEvent::Deployed))
    };
    apply_jobs(&s, pl.id, vec![deployed], 5_000).await;
    let e = s.environment(p.id, envs[0].id).await.expect("env");
    assert_eq!(
        e.external_url.as_deref(),
        Some("https://review-a.example.com")
    );
    assert_eq!(e.auto_stop_at, Some(65_000));
    let last = s.last_deployment(e.id).await.expect("read").expect("last");
    assert_eq!(
        (last.status.as_str(), last.finished_at),
        ("success", Some(5_000))
    );
    let group = s.last_finished_deployment_group(e.id).await.expect("group");
    assert_eq!(group.len(), 1);
    assert_eq!(group[0].on_stop.as_deref(), Some("stop"));
    // Stopping waits for the stop job: its failure gives the environment back, its
    // success stops it.
    assert!(
        s.move_environment(e.id, &["available"], "stopping", 6_000)
            .await
            .expect("move")
    );
    assert!(
        !s.move_environment(e.id, &["available"], "stopped", 6_000)
            .await
            .expect("move")
    );
    apply_jobs(
        &s,
        pl.id,
        vec![status_change(
            rows[1].id,
            "failed",
            Some(EnvironmentEvent::StopFailed),
        )],
        7_000,
    )
    .await;
    assert_eq!(
        s.environment(p.id, e.id).await.expect("env").state,
        "available"
    );
    assert!(
        s.move_environment(e.id, &["available"], "stopping", 8_000)
            .await
            .expect("move")
    );
    apply_jobs(
        &s,
        pl.id,
        vec![status_change(
            rows[1].id,
            "success",
            Some(EnvironmentEvent::StopComplete),
        )],
        9_000,
    )
    .await;
    let e = s.environment(p.id, e.id).await.expect("env");
    assert_eq!((e.state.as_str(), e.auto_stop_at), ("stopped", None));
    // A retry is a new deployment to the same environment, with the next iid; a new
    // successful deployment makes the stopped environment available again.
    let lock = s.pipeline(pl.id).await.expect("pipeline").lock_version;
    let retry = PipelineChange {
        status: st("running"),
        jobs: vec![JobUpdate {
            retried: true,
            ..status_change(rows[0].id, "success", None)
        }],
        new_jobs: vec![NewJob {
            attempt: 2,
            ..env_job("deploy", "review/a", "start", Some("stop"))
        }],
        ..PipelineChange::default()
    };
    s.apply(pl.id, lock, &retry, 10_000).await.expect("retry");
    let second = s
        .pipeline_jobs(pl.id)
        .await
        .expect("jobs")
        .into_iter()
        .last()
        .expect("new attempt");
    let d2 = s
        .job_deployment(second.id)
        .await
        .expect("read")
        .expect("deployment");
    assert_eq!(d2.iid, 2);
    apply_jobs(
        &s,
        pl.id,
        vec![status_change(
            second.id,
            "success",
            Some(EnvironmentEvent::Deployed),
        )],
        11_000,
    )
    .await;
    assert_eq!(
        s.environment(p.id, e.id).await.expect("env").state,
        "available"
    );
    // Only the due, available environments are auto-stoppable, the longest due first.
    let due = s
        .auto_stoppable_environments(200_000, 10)
        .await
        .expect("due");
    assert_eq!(
        due.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["review/b", "review/a"]
    );
    assert!(
        s.auto_stoppable_environments(1_000, 10)
            .await
            .expect("due")
            .is_empty()
    );
    // Stale: neither changed nor deployed to since.
    let stale = |before| {
        let s = &s;
        async move {
            s.stale_environments(p.id, before, 10)
                .await
                .expect("stale")
                .into_iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(stale(10_500).await, ["review/b"]);
    assert_eq!(stale(20_000).await, ["review/b", "review/a"]);
    assert_eq!(stale(500).await, Vec::<String>::new());
    // Deleting the pipeline keeps its deployments, with the status they had.
    s.delete_pipeline(pl.id).await.expect("delete");
    let kept = s.deployment(p.id, d2.id).await.expect("kept");
    assert_eq!((kept.job_id, kept.status.as_str()), (None, "success"));
    let filter = DeploymentFilter {
        environment: Some("review/a".into()),
        order_by: "iid".into(),
        ..DeploymentFilter::default()
    };
    let (all, total) = s
        .deployments_page(p.id, &filter, 0, 10)
        .await
        .expect("page");
    assert_eq!(total, 2);
    assert_eq!(all.iter().map(|d| d.iid).collect::<Vec<_>>(), [2, 1]);
}

async fn environments_list_change_and_delete(db: Db) {
    let (_d, s) = open(db).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let new = |name: &str| NewEnvironment {
        name: name.into(),
        slug: name.into(),
        external_url: None,
        tier: "other".into(),
    };
    for name in ["production", "staging", "review_1", "review%2"] {
        s.create_environment(p.id, &new(name), 1)
            .await
            .expect("create");
    }
    assert!(matches!(
        s.create_environment(p.id, &new("staging"), 2).await,
        Err(StoreError::Conflict(_))
    ));
    let names = |envs: Vec<Environment>| envs.into_iter().map(|e| e.name).collect::<Vec<_>>();
    let search = |text: &str| EnvironmentFilter {
        search: Some(text.into()),
        ..EnvironmentFilter::default()
    };
    let (found, _) = s
        .environments_page(p.id, &search("REVIEW"), 0, 10)
        .await
        .expect("search");
    assert_eq!(names(found), ["review%2", "review_1"]);
    // `%` and `_` match themselves.
    let (found, _) = s
        .environments_page(p.id, &search("w%"), 0, 10)
        .await
        .expect("search");
    assert_eq!(names(found), ["review%2"]);
    let (found, total) = s
        .environments_page(p.id, &EnvironmentFilter::default(), 1, 2)
        .await
        .expect("page");
    assert_eq!(
        (names(found), total),
        (vec!["review%2".to_owned(), "review_1".to_owned()], 4)
    );
    let prod = s
        .environments_page(
            p.id,
            &EnvironmentFilter {
                name: Some("production".into()),
                ..EnvironmentFilter::default()
            },
            0,
            10,
        )
        .await
        .expect("by name")
        .0
        .remove(0);
    let changed = s
        .update_environment(
            p.id,
            prod.id,
            &EnvironmentChanges {
                external_url: Some(Some("https://example.com".into())),
                tier: Some("production".into()),
            },
            5,
        )
        .await
        .expect("update");
    assert_eq!(
        (
            changed.external_url.as_deref(),
            changed.tier.as_str(),
            changed.updated_at
        ),
        (Some("https://example.com"), "production", 5)
    );
    let cleared = s
        .update_environment(
            p.id,
            prod.id,
            &EnvironmentChanges {
                external_url: Some(None),
                tier: None,
            },
            6,
        )
        .await
        .expect("update");
    assert_eq!(
        (cleared.external_url, cleared.tier.as_str()),
        (None, "production")
    );
    assert_eq!(
        s.delete_environment(p.id, prod.id).await.expect("delete"),
        DeleteEnvironment::NotStopped
    );
    assert!(
        s.move_environment(prod.id, &["available", "stopping"], "stopped", 7)
            .await
            .expect("stop")
    );
    assert_eq!(
        s.delete_environment(p.id, prod.id).await.expect("delete"),
        DeleteEnvironment::Deleted
    );
    assert!(matches!(
        s.environment(p.id, prod.id).await,
        Err(StoreError::NotFound("environment"))
    ));
    assert!(matches!(
        s.delete_environment(p.id, prod.id).await,
        Err(StoreError::NotFound("environment"))
    ));
}

async fn runner_settings_change_and_leave_it_able_to_run_something(db: Db) {
    let (_d, s) = open(db).await;
    let r = s
        .create_runner(
            &NewRunner {
                tags: vec!["docker".into()],
                run_untagged: false,
                paused: true,
                ..runner("hash")
            },
            1,
        )
        .await
        .expect("runner");
    assert!(r.paused, "created paused");
    let changed = s
        .update_runner(
            r.id,
            &RunnerChanges {
                paused: Some(false),
                description: Some("renamed".into()),
                maximum_timeout: Some(3600),
                ..RunnerChanges::default()
            },
        )
        .await
        .expect("update");
    assert_eq!(
        changed,
        Runner {
            paused: false,
            description: "renamed".into(),
            maximum_timeout: Some(3600),
            ..r.clone()
        }
    );
    assert_eq!(s.runner(r.id).await.expect("read"), changed);
    // No tags and no untagged jobs: refused, and nothing of the change is kept.
    let refused = s
        .update_runner(
            r.id,
            &RunnerChanges {
                tags: Some(vec![]),
                locked: Some(true),
                ..RunnerChanges::default()
            },
        )
        .await;
    assert!(
        matches!(&refused, Err(StoreError::Conflict(m)) if m.contains("tags_list can not be empty")),
        "{refused:?}"
    );
    assert_eq!(s.runner(r.id).await.expect("read"), changed);
    let changed = s
        .update_runner(
            r.id,
            &RunnerChanges {
                tags: Some(vec![]),
                run_untagged: Some(true),
                protected_only: Some(true),
                ..RunnerChanges::default()
            },
        )
        .await
        .expect("update");
    assert!(changed.tags.is_empty() && changed.run_untagged && changed.protected_only);
    assert!(matches!(
        s.update_runner(r.id + 100, &RunnerChanges::default()).await,
        Err(StoreError::NotFound("runner"))
    ));
}

/// Runs a migration's backfill (its text from `from` on) on the SQLite store in `dir`,
/// after `before` (which undoes what the migration did to the rows made since).
async fn backfill(
    dir: &std::path::Path,
    before: &str,
    migration: &str,
    from: &str,
) -> sqlx::AnyPool {
    let url = format!("sqlite://{}", dir.join("gantry.db").display());
    let pool = sqlx::AnyPool::connect(&url).await.expect("pool");
    sqlx::query(before)
        .execute(&pool)
        .await
        .expect("as before the migration");
    sqlx::query(&migration[migration.find(from).expect("backfill")..])
        .execute(&pool)
        .await
        .expect("backfill");
    pool
}

/// Migration 0015's backfill locks the newest family and the newest successful family of
/// each ref among the pipelines made before it, and gives children their root.
#[tokio::test]
async fn the_artifact_locks_migration_locks_the_latest_families_of_each_ref() {
    let (dir, s) = open(Db::Sqlite).await;
    let p = s
        .create_project(&project("demo"), 1)
        .await
        .expect("project");
    let mut made = Vec::new();
    for (ref_name, status) in [
        ("main", "success"),
        ("main", "success"),
        ("main", "failed"),
        ("feature", "failed"),
    ] {
        let new = NewPipeline {
            ref_name: ref_name.into(),
            status: st(status),
            ..pipeline(p.id)
        };
        let (pl, jobs) = create(&s, &new, &[job("trigger", "success")], 1)
            .await
            .expect("pipeline");
        made.push((pl.id, jobs[0].id));
    }
    let child = NewPipeline {
        parent_job_id: Some(made[1].1),
        status: st("success"),
        ..pipeline(p.id)
    };
    let (child, _) = create(&s, &child, &[], 1).await.expect("child");
    let migration = include_str!("../migrations/sqlite/0015_artifact_locks.sql");
    let pool = backfill(
        dir.path(),
        "UPDATE pipelines SET root_id = NULL, locked = 1",
        migration,
        "UPDATE pipelines",
    )
    .await;
    let rows: Vec<(i64, Option<i64>, i64)> =
        sqlx::query("SELECT id, root_id, locked FROM pipelines ORDER BY id")
            .fetch_all(&pool)
            .await
            .expect("read")
            .iter()
            .map(|r| {
                use sqlx::Row as _;
                (r.get(0), r.get(1), r.get(2))
            })
            .collect();
    assert_eq!(
        rows,
        [
            (made[0].0, None, 0),
            (made[1].0, None, 1),
            (made[2].0, None, 1),
            (made[3].0, None, 1),
            (child.id, Some(made[1].0), 1),
        ]
    );
    let postgres = include_str!("../migrations/postgres/0015_artifact_locks.sql");
    assert_eq!(postgres, migration, "both databases migrate alike");
}

/// Migration 0026 leaves the projects made before it without the job token limit (their
/// `needs:project` reads go on), while every project made after it has the limit on.
#[tokio::test]
async fn the_job_token_scope_migration_limits_only_new_projects() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = database_before(
        &dir,
        26,
        25,
        "INSERT INTO projects (id, name, repo_url, default_branch, timeout_secs, created_at) VALUES (1, 'old', '/r', 'main', 60, 1)",
    )
    .await;
    let s = Store::open(&url).await.expect("open and migrate");
    assert!(
        !s.project(1)
            .await
            .unwrap()
            .ci_inbound_job_token_scope_enabled
    );
    let new = s.create_project(&project("new"), 2).await.unwrap();
    assert!(new.ci_inbound_job_token_scope_enabled);
    assert_eq!(
        include_str!("../migrations/postgres/0026_job_token_scope.sql"),
        include_str!("../migrations/sqlite/0026_job_token_scope.sql"),
        "both databases migrate alike"
    );
}

/// Migration 0037 gives the jobs made before it that are not done their resource group
/// from their spec, so the ones waiting for a resource still get it after an upgrade.
#[tokio::test]
async fn the_resource_group_migration_keys_the_jobs_not_done() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = database_before(
        &dir,
        37,
        35,
        r#"INSERT INTO projects (id, name, repo_url, default_branch, timeout_secs, created_at) VALUES (1, 'old', '/r', 'main', 60, 1);
         INSERT INTO pipelines (id, project_id, iid, ref_name, tag, sha, before_sha, source, status, variables, protected, created_at, updated_at)
           VALUES (1, 1, 1, 'main', 0, 'abc', '000', 'push', 'running', '[]', 0, 1, 1);
         INSERT INTO jobs (id, pipeline_id, project_id, name, stage, stage_idx, status, attempt, allow_failure, spec, tags, protected, created_at, trace_size)
           VALUES (1, 1, 1, 'deployed', 'deploy', 0, 'success', 1, 0, '{"job":{"resource_group":"production"}}', '[]', 0, 1, 0),
                  (2, 1, 1, 'waits', 'deploy', 0, 'waiting_for_resource', 1, 0, '{"job":{"name":"waits","resource_group":"production"}}', '[]', 0, 1, 0),
                  (3, 1, 1, 'holds', 'deploy', 0, 'running', 1, 0, '{"job":{"resource_group":"staging"}}', '[]', 0, 1, 0),
                  (4, 1, 1, 'free', 'test', 0, 'created', 1, 0, '{"job":{"resource_group":null}}', '[]', 0, 1, 0),
                  (5, 1, 1, 'empty', 'test', 0, 'created', 1, 0, '', '[]', 0, 1, 0);"#,
    )
    .await;
    let s = Store::open(&url).await.expect("open and migrate");
    let jobs = s.resource_jobs(1).await.expect("resource jobs");
    assert_eq!(
        jobs.iter()
            .map(|j| (j.id, j.group.as_str(), j.status.as_str()))
            .collect::<Vec<_>>(),
        [
            (2, "production", "waiting_for_resource"),
            (3, "staging", "running")
        ]
    );
}

/// Migration 0014 protects the default branch of every project made before it, as new
/// projects get it: its backfill statement, run on projects without protections.
#[tokio::test]
async fn the_protected_refs_migration_protects_existing_default_branches() {
    let (dir, s) = open(Db::Sqlite).await;
    let mut develop = project("develop-first");
    develop.default_branch = "develop".into();
    let a = s.create_project(&develop, 7).await.expect("project");
    let b = s
        .create_project(&project("other"), 8)
        .await
        .expect("project");
    let migration = include_str!("../migrations/sqlite/0014_protected_refs.sql");
    backfill(
        dir.path(),
        "DELETE FROM protected_refs",
        migration,
        "INSERT INTO",
    )
    .await;
    let backfill = &migration[migration.find("INSERT INTO").expect("backfill")..];
    let got = |refs: Vec<ProtectedRef>| -> Vec<(RefKind, String, i64)> {
        refs.into_iter()
            .map(|r| (r.kind, r.name, r.created_at))
            .collect()
    };
    assert_eq!(
        got(s.protected_refs(a.id).await.expect("list")),
        [(RefKind::Branch, "develop".to_owned(), 7)]
    );
    assert_eq!(
        got(s.protected_refs(b.id).await.expect("list")),
        [(RefKind::Branch, "main".to_owned(), 8)]
    );
    let postgres = include_str!("../migrations/postgres/0014_protected_refs.sql");
    assert_eq!(
        &postgres[postgres.find("INSERT INTO").expect("backfill")..],
        backfill,
        "both databases backfill alike"
    );
}

/// The status named `name`.
fn st(name: &str) -> gantry_store::JobStatus {
    gantry_store::JobStatus::parse(name).expect("a status")
}
