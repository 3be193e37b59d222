//! Project variable values at rest: encrypted in the database with the data directory's
//! key (or `CoordinatorConfig::db_key`), plain text only to jobs and the API; values
//! stored before encryption are encrypted at start; another key cannot read them.
//! Instance variable values the same way, with the same key. Pipeline variables (API,
//! trigger, `gantry run --var`) are stored encrypted the same way.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::coordinator_support;

use coordinator_support::*;
use gantry_pipeline::Source;
use gantry_server::coordinator::secrets::{DbKey, KEY_FILE, PREFIX};
use gantry_server::coordinator::{Coordinator, CoordinatorConfig};
use gantry_store::{InstanceVariable, ProjectVariable, Store, VariableOwner};

async fn raw_values(dir: &std::path::Path, project: i64) -> Vec<String> {
    let store = Store::open(&test_database(dir).await).await.unwrap();
    store
        .variables(&VariableOwner::Project(project))
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.value)
        .collect()
}

#[tokio::test]
async fn values_are_encrypted_at_rest_and_read_back_with_the_same_key_only() {
    let e = env("job:\n  script: [echo]\n").await;
    let project = e.project().await;
    e.coord
        .settings()
        .create_variable(
            &VariableOwner::Project(project),
            &ProjectVariable::new("API_TOKEN", "tok-s3cr3t-1"),
        )
        .await
        .unwrap();
    let stored = raw_values(e.dir.path(), project).await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].starts_with(PREFIX), "{stored:?}");
    assert!(!stored[0].contains("s3cr3t"), "{stored:?}");
    assert!(e.dir.path().join("data").join(KEY_FILE).is_file());

    // Jobs and the API get the value.
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert!(
        job.variables
            .iter()
            .any(|v| v.key == "API_TOKEN" && v.value == "tok-s3cr3t-1"),
        "{:?}",
        job.variables
    );
    let listed = e
        .coord
        .settings()
        .variables(&VariableOwner::Project(project))
        .await
        .unwrap();
    assert_eq!(listed[0].value, "tok-s3cr3t-1");

    // An update is encrypted too.
    let mut changed = ProjectVariable::new("API_TOKEN", "tok-s3cr3t-2");
    changed.masked = true;
    e.coord
        .settings()
        .update_variable(&VariableOwner::Project(project), "API_TOKEN", "*", &changed)
        .await
        .unwrap();
    assert!(!raw_values(e.dir.path(), project).await[0].contains("s3cr3t"));

    // The same data directory (its key file) reads them after a restart.
    let again = open_coordinator(e.dir.path()).await;
    assert_eq!(
        again
            .settings()
            .variables(&VariableOwner::Project(project))
            .await
            .unwrap()[0]
            .value,
        "tok-s3cr3t-2"
    );

    // Another key cannot, and says what to do.
    let store = Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    let mut cfg = CoordinatorConfig::new(e.dir.path().join("data"), "http://127.0.0.1:8080");
    cfg.db_key = Some(DbKey::random());
    let stranger = Coordinator::open(store, cfg).await.unwrap();
    let refused = stranger
        .settings()
        .variables(&VariableOwner::Project(project))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("project variable `API_TOKEN`") && refused.contains("restore the key"),
        "{refused}"
    );
    // Nor create a pipeline (its rules may need them) …
    let not_created = stranger
        .create_pipeline(project, "main", Vec::new(), gantry_pipeline::Source::Api)
        .await
        .unwrap_err()
        .to_string();
    assert!(not_created.contains("restore the key"), "{not_created}");
    // … and a job created before the key changed fails rather than running without
    // them, its log saying why.
    let pipeline = again
        .create_pipeline(project, "main", Vec::new(), gantry_pipeline::Source::Api)
        .await
        .unwrap();
    let (runner, _) = stranger
        .create_runner(gantry_server::coordinator::RunnerOptions {
            description: "any".into(),
            run_untagged: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        stranger
            .request_job(&runner, None, std::time::Duration::ZERO)
            .await
            .is_err()
    );
    let job = stranger.pipeline_jobs(pipeline.id).await.unwrap().remove(0);
    assert_eq!(
        (job.status.as_str(), job.failure_reason.as_deref()),
        ("failed", Some("data_integrity_failure"))
    );
    let log = String::from_utf8(stranger.traces().trace(job.id).await.unwrap()).unwrap();
    assert!(log.contains("restore the key"), "{log}");
}

#[tokio::test]
async fn values_stored_before_encryption_are_encrypted_at_start() {
    let e = env("job:\n  script: [echo]\n").await;
    let project = e.project().await;
    // As an older Gantry wrote it: straight into the table, in plain text.
    let store = Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    store
        .create_variable(
            &VariableOwner::Project(project),
            &ProjectVariable::new("OLD", "plain-old-value"),
            0,
        )
        .await
        .unwrap();
    assert_eq!(raw_values(e.dir.path(), project).await, ["plain-old-value"]);
    // Readable at once, encrypted at the next start.
    assert_eq!(
        e.coord
            .settings()
            .variables(&VariableOwner::Project(project))
            .await
            .unwrap()[0]
            .value,
        "plain-old-value"
    );
    // A group's too (the project `demo` is in the default namespace `gantry`).
    let group = VariableOwner::Group("gantry".to_owned());
    store
        .create_variable(
            &group,
            &ProjectVariable::new("GROUP_OLD", "plain-group-value"),
            0,
        )
        .await
        .unwrap();
    let restarted = open_coordinator(e.dir.path()).await;
    let stored = raw_values(e.dir.path(), project).await;
    assert!(stored[0].starts_with(PREFIX), "{stored:?}");
    assert_eq!(
        restarted
            .settings()
            .variables(&VariableOwner::Project(project))
            .await
            .unwrap()[0]
            .value,
        "plain-old-value"
    );
    let stored = store.variables(&group).await.unwrap();
    assert!(stored[0].value.starts_with(PREFIX), "{stored:?}");
    assert_eq!(
        restarted.settings().variables(&group).await.unwrap()[0].value,
        "plain-group-value"
    );
}

#[tokio::test]
async fn pipeline_variables_are_encrypted_at_rest_too() {
    let e = env("job:\n  script: [echo]\n").await;
    let project = e.project().await;
    let view = e
        .coord
        .create_pipeline(
            project,
            "main",
            vec![("DEPLOY_TOKEN".to_owned(), "pipe-s3cr3t-9".to_owned())],
            Source::Api,
        )
        .await
        .unwrap();
    assert_eq!(
        view.variables,
        [("DEPLOY_TOKEN".to_owned(), "pipe-s3cr3t-9".to_owned())]
    );
    let store = Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    let row = store.pipeline(view.id).await.unwrap();
    assert!(row.variables.starts_with(PREFIX), "{}", row.variables);
    assert!(!row.variables.contains("s3cr3t"), "{}", row.variables);

    // The job gets the value; a pipeline without variables stores none to hide.
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert!(
        job.variables
            .iter()
            .any(|v| v.key == "DEPLOY_TOKEN" && v.value == "pipe-s3cr3t-9"),
        "{:?}",
        job.variables
    );
    let plain = e.pipeline(project, "main").await;
    assert_eq!(store.pipeline(plain.id).await.unwrap().variables, "{}");

    // Another key cannot read them, and says which pipeline.
    let mut cfg = CoordinatorConfig::new(e.dir.path().join("data"), "http://127.0.0.1:8080");
    cfg.db_key = Some(DbKey::random());
    let stranger = Coordinator::open(store, cfg).await.unwrap();
    let error = stranger.pipeline(view.id).await.unwrap_err().to_string();
    assert!(
        error.contains(&format!("the variables of pipeline {}", view.id)),
        "{error}"
    );
}

#[tokio::test]
async fn manual_job_variables_are_encrypted_at_rest_on_every_attempt() {
    let e = env("deploy:\n  when: manual\n  script: [echo]\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let deploy = e.coord.pipeline_jobs(p.id).await.unwrap()[0].id;
    e.coord
        .play_job(deploy, vec![("TARGET_KEY".into(), "m4nual-s3cr3t".into())])
        .await
        .unwrap();
    let store = Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    let row = store.job(deploy).await.unwrap();
    let stored = row.manual_variables.clone().unwrap();
    assert!(
        stored.starts_with(PREFIX) && !stored.contains("s3cr3t"),
        "{stored}"
    );
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert_eq!(var(&job, "TARGET_KEY"), Some("m4nual-s3cr3t"));
    e.run(&job, true).await;

    // Played again once finished: a new attempt, whose variables are sealed too.
    let again = e
        .coord
        .play_job(deploy, vec![("TARGET_KEY".into(), "s3cond-s3cr3t".into())])
        .await
        .unwrap();
    assert_ne!(again.id, deploy);
    let row = store.job(again.id).await.unwrap();
    let raw = format!("{:?} {}", row.manual_variables, row.spec);
    assert!(!raw.contains("s3cr3t"), "{raw}");
    let job = e.take_some(&runner).await;
    assert_eq!(var(&job, "TARGET_KEY"), Some("s3cond-s3cr3t"));
}

async fn raw_instance_values(dir: &std::path::Path) -> Vec<String> {
    let store = Store::open(&test_database(dir).await).await.unwrap();
    store
        .instance_variables()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.value)
        .collect()
}

#[tokio::test]
async fn instance_variable_values_are_encrypted_at_rest_with_the_same_key() {
    let e = env("job:\n  script: [echo]\n").await;
    let project = e.project().await;
    e.coord
        .settings()
        .create_instance_variable(&InstanceVariable::new("SHARED_TOKEN", "inst-s3cr3t-1"))
        .await
        .unwrap();
    let stored = raw_instance_values(e.dir.path()).await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].starts_with(PREFIX), "{stored:?}");
    assert!(!stored[0].contains("s3cr3t"), "{stored:?}");

    // Jobs and the API get the value.
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert_eq!(var(&job, "SHARED_TOKEN"), Some("inst-s3cr3t-1"));
    assert_eq!(
        e.coord.settings().instance_variables().await.unwrap()[0].value,
        "inst-s3cr3t-1"
    );

    // An update is encrypted too, and read back after a restart.
    e.coord
        .settings()
        .update_instance_variable(
            "SHARED_TOKEN",
            &InstanceVariable::new("SHARED_TOKEN", "inst-s3cr3t-2"),
        )
        .await
        .unwrap();
    let stored = raw_instance_values(e.dir.path()).await;
    assert!(
        stored[0].starts_with(PREFIX) && !stored[0].contains("s3cr3t"),
        "{stored:?}"
    );
    let again = open_coordinator(e.dir.path()).await;
    assert_eq!(
        again.settings().instance_variables().await.unwrap()[0].value,
        "inst-s3cr3t-2"
    );

    // Another key cannot read them, nor create a pipeline, and says which variable.
    let store = Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    let mut cfg = CoordinatorConfig::new(e.dir.path().join("data"), "http://127.0.0.1:8080");
    cfg.db_key = Some(DbKey::random());
    let stranger = Coordinator::open(store, cfg).await.unwrap();
    let refused = stranger
        .settings()
        .instance_variables()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("instance variable `SHARED_TOKEN`") && refused.contains("restore the key"),
        "{refused}"
    );
    let not_created = stranger
        .create_pipeline(project, "main", Vec::new(), Source::Api)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        not_created.contains("instance variable `SHARED_TOKEN`"),
        "{not_created}"
    );
}

#[tokio::test]
async fn instance_variable_values_stored_in_plain_text_are_encrypted_at_start() {
    let e = env("job:\n  script: [echo]\n").await;
    // Straight into the table, in plain text (as a restore from elsewhere might).
    let store = Store::open(&test_database(e.dir.path()).await)
        .await
        .unwrap();
    store
        .create_instance_variable(&InstanceVariable::new("OLD", "plain-old-value"), 0)
        .await
        .unwrap();
    assert_eq!(raw_instance_values(e.dir.path()).await, ["plain-old-value"]);
    assert_eq!(
        e.coord.settings().instance_variables().await.unwrap()[0].value,
        "plain-old-value"
    );
    let restarted = open_coordinator(e.dir.path()).await;
    let stored = raw_instance_values(e.dir.path()).await;
    assert!(stored[0].starts_with(PREFIX), "{stored:?}");
    assert_eq!(
        restarted.settings().instance_variables().await.unwrap()[0].value,
        "plain-old-value"
    );
}
