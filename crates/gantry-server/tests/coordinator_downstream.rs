//! Trigger jobs and downstream pipelines (`ci-yaml.md` §5.12) through the coordinator: real
//! git, real SQLite, a simulated runner for the jobs of every pipeline.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::coordinator_support;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::{Duration, Instant};

use coordinator_support::{Env, commit, env, var};
use gantry_pipeline::Source;
use gantry_protocol::{ArtifactFormat, ArtifactType, ArtifactUploadParams};
use gantry_server::coordinator::{CoordinatorError, JobView, PipelineView};

/// Polls until `f` holds (downstream pipelines are created in the background).
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn job(e: &Env, pipeline: i64, name: &str) -> JobView {
    e.coord
        .pipeline_jobs(pipeline)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .find(|j| j.name == name)
        .unwrap_or_else(|| panic!("no job {name}"))
}

/// The one downstream pipeline of `pipeline`, once it exists and was processed (it is
/// stored `created`, then its jobs are queued).
async fn child_of(e: &Env, pipeline: i64) -> PipelineView {
    eventually("the downstream pipeline", || async {
        e.coord
            .downstream_pipelines(pipeline)
            .await
            .unwrap()
            .iter()
            .any(|p| p.status.as_str() != "created")
    })
    .await;
    let mut list = e.coord.downstream_pipelines(pipeline).await.unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    list.remove(0)
}

async fn wait_status(e: &Env, pipeline: i64, want: &str) {
    eventually(&format!("pipeline {pipeline} to be {want}"), || async {
        e.status(pipeline).await == want
    })
    .await;
}

async fn wait_job(e: &Env, pipeline: i64, name: &str, want: &str) -> JobView {
    let jobs = format!("{:?}", e.statuses(pipeline).await);
    eventually(
        &format!("job {name} to be {want} ({jobs} at the start)"),
        || async { job(e, pipeline, name).await.status.as_str() == want },
    )
    .await;
    job(e, pipeline, name).await
}

/// Another project of the same coordinator: a repository on `main` holding `ci`.
async fn second_project(e: &Env, name: &str, ci: &str) -> gantry_server::coordinator::Project {
    let repo = e.dir.path().join(name);
    std::fs::create_dir_all(&repo).unwrap();
    coordinator_support::git(&repo, &["init", "-q", "-b", "main"]);
    commit(&repo, &[(".gitlab-ci.yml", ci)], "ci");
    e.coord
        .create_project(name, repo.to_str().unwrap())
        .await
        .unwrap()
}

fn zip_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut out);
        for (name, text) in files {
            zip.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            zip.write_all(text.as_bytes()).unwrap();
        }
        zip.finish().unwrap();
    }
    out.into_inner()
}

#[tokio::test]
async fn a_child_pipeline_runs_the_trigger_include_with_the_trigger_jobs_variables() {
    let e = env(r"
variables:
  GLOBAL: global value
  REF: from $CI_COMMIT_REF_NAME
build: {stage: build, script: [make]}
parent:
  stage: test
  variables:
    PARENT_VAR: parent value
    SHARED: from the trigger
  trigger:
    include:
      - local: child.yml
after: {stage: deploy, script: [echo done]}
")
    .await;
    commit(
        &e.repo,
        &[(
            "child.yml",
            r#"
child-job:
  variables:
    SHARED: from the child job
  script: [env]
only-for-children:
  rules:
    - if: $CI_PIPELINE_SOURCE == "parent_pipeline"
  script: [echo child]
"#,
        )],
        "child config",
    );
    let project = e.project().await;
    let p = e
        .coord
        .create_pipeline(
            project,
            "main",
            vec![("UPSTREAM".into(), "pipeline var".into())],
            Source::Web,
        )
        .await
        .unwrap();
    let runner = e.any_runner().await;
    let build = e.take_some(&runner).await;
    assert_eq!(build.job_info.name, "build");
    assert!(e.coord.downstream_pipelines(p.id).await.unwrap().is_empty());
    e.run(&build, true).await;

    // Without `strategy` the trigger job succeeds once the child exists.
    let child = child_of(&e, p.id).await;
    let bridge = wait_job(&e, p.id, "parent", "success").await;
    assert_eq!(bridge.runner_id, None, "no runner ran the trigger job");
    assert_eq!(
        bridge.downstream_pipeline.as_ref().map(|d| d.id),
        Some(child.id)
    );
    assert_eq!(child.source, "parent_pipeline");
    assert_eq!(child.sha, p.sha);
    assert_eq!(child.ref_name, "main");
    assert_eq!(child.parent_job_id, Some(bridge.id));
    // The trigger job's YAML variables (globals included, expanded) are the child's
    // pipeline variables; the parent's pipeline variables stay up there by default.
    let vars: BTreeMap<String, String> = child.variables.iter().cloned().collect();
    assert_eq!(vars.get("GLOBAL").map(String::as_str), Some("global value"));
    assert_eq!(vars.get("REF").map(String::as_str), Some("from main"));
    assert_eq!(
        vars.get("PARENT_VAR").map(String::as_str),
        Some("parent value")
    );
    assert_eq!(vars.get("UPSTREAM"), None);

    let mut names: Vec<String> = e.statuses(child.id).await.into_keys().collect();
    names.sort();
    assert_eq!(names, ["child-job", "only-for-children"]);
    // The parent goes on meanwhile: `after` and the child's jobs are both pending.
    let mut taken = BTreeMap::new();
    for _ in 0..3 {
        let j = e.take_some(&runner).await;
        taken.insert(j.job_info.name.clone(), j);
    }
    let child_job = &taken["child-job"];
    assert_eq!(
        var(child_job, "CI_PIPELINE_SOURCE"),
        Some("parent_pipeline")
    );
    assert_eq!(
        var(child_job, "CI_PIPELINE_ID"),
        Some(child.id.to_string().as_str())
    );
    // GitLab 18.9's `CI_UPSTREAM_*`: the trigger job, its pipeline and project.
    assert_eq!(
        var(child_job, "CI_UPSTREAM_JOB_ID"),
        Some(bridge.id.to_string().as_str())
    );
    assert_eq!(
        var(child_job, "CI_UPSTREAM_PIPELINE_ID"),
        Some(p.id.to_string().as_str())
    );
    assert_eq!(
        var(child_job, "CI_UPSTREAM_PROJECT_ID"),
        var(child_job, "CI_PROJECT_ID")
    );
    assert_eq!(var(&build, "CI_UPSTREAM_JOB_ID"), None);
    assert_eq!(var(child_job, "GLOBAL"), Some("global value"));
    // Variables from the trigger are pipeline variables: they beat the job's own.
    assert_eq!(var(child_job, "SHARED"), Some("from the trigger"));
    for j in taken.values() {
        e.run(j, true).await;
    }
    wait_status(&e, child.id, "success").await;
    wait_status(&e, p.id, "success").await;
}

#[tokio::test]
async fn forward_pipeline_variables_sends_the_parents_pipeline_variables_down() {
    let e = env(r"
parent:
  variables: {OWN: own}
  trigger:
    include: child.yml
    forward:
      yaml_variables: false
      pipeline_variables: true
")
    .await;
    commit(&e.repo, &[("child.yml", "c: {script: [env]}\n")], "child");
    let project = e.project().await;
    let p = e
        .coord
        .create_pipeline(
            project,
            "main",
            vec![("UPSTREAM".into(), "up".into())],
            Source::Web,
        )
        .await
        .unwrap();
    let child = child_of(&e, p.id).await;
    let vars: BTreeMap<String, String> = child.variables.iter().cloned().collect();
    assert_eq!(vars.get("UPSTREAM").map(String::as_str), Some("up"));
    assert_eq!(vars.get("OWN"), None, "yaml_variables: false");
}

#[tokio::test]
async fn strategy_depend_makes_the_trigger_job_wait_for_the_child_and_take_its_status() {
    let e = env(r"
parent:
  stage: test
  trigger:
    include: [{local: child.yml}]
    strategy: depend
after: {stage: deploy, script: [echo]}
")
    .await;
    commit(&e.repo, &[("child.yml", "c1: {script: [a]}\n")], "child");
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let child = child_of(&e, p.id).await;
    let runner = e.any_runner().await;
    let c1 = e.take_some(&runner).await;
    assert_eq!(job(&e, p.id, "parent").await.status.as_str(), "running");
    assert_eq!(e.status(p.id).await, "running");
    e.run(&c1, false).await;
    wait_status(&e, child.id, "failed").await;
    let bridge = wait_job(&e, p.id, "parent", "failed").await;
    assert_eq!(bridge.failure_reason.as_deref(), Some("unknown_failure"));
    wait_status(&e, p.id, "failed").await;
    assert_eq!(job(&e, p.id, "after").await.status.as_str(), "skipped");

    // Retrying the trigger job creates a new child pipeline; its success is the job's.
    e.coord.retry_job(bridge.id).await.unwrap();
    eventually("a second child", || async {
        let list = e.coord.downstream_pipelines(p.id).await.unwrap();
        list.len() == 2 && list[1].status.as_str() != "created"
    })
    .await;
    let second = e.coord.downstream_pipelines(p.id).await.unwrap().remove(1);
    let c1 = e.take_some(&runner).await;
    assert_eq!(c1.job_info.pipeline_id, second.id);
    e.run(&c1, true).await;
    wait_job(&e, p.id, "parent", "success").await;
    let after = e.take_some(&runner).await;
    assert_eq!(after.job_info.name, "after");
    e.run(&after, true).await;
    wait_status(&e, p.id, "success").await;
}

#[tokio::test]
async fn a_dynamic_child_pipeline_reads_its_configuration_from_a_job_artifact() {
    let e = env(r"
generate: {stage: build, script: [gen], artifacts: {paths: [generated.yml]}}
dynamic:
  stage: test
  trigger:
    include:
      - artifact: generated.yml
        job: generate
    strategy: depend
missing-job:
  stage: test
  trigger:
    include:
      - artifact: generated.yml
        job: no-such-job
missing-file:
  stage: test
  trigger:
    include:
      - artifact: other.yml
        job: generate
")
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let generate = e.take_some(&runner).await;
    let params = ArtifactUploadParams {
        artifact_type: Some(ArtifactType::Archive),
        artifact_format: Some(ArtifactFormat::Zip),
        expire_in: None,
    };
    let archive = zip_of(&[(
        "generated.yml",
        "generated-job: {script: [echo generated]}\n",
    )]);
    e.coord
        .upload_artifact(generate.id, params, "artifacts.zip", &archive)
        .await
        .unwrap();
    e.run(&generate, true).await;

    let dynamic = job(&e, p.id, "dynamic").await;
    eventually("the dynamic child", || async {
        job(&e, p.id, "dynamic")
            .await
            .downstream_pipeline
            .is_some_and(|d| d.status.as_str() != "created")
    })
    .await;
    let child_id = job(&e, p.id, "dynamic")
        .await
        .downstream_pipeline
        .unwrap()
        .id;
    assert_eq!(
        e.statuses(child_id).await.into_keys().collect::<Vec<_>>(),
        ["generated-job"]
    );
    let generated = e.take_some(&runner).await;
    assert_eq!(generated.job_info.name, "generated-job");
    e.run(&generated, true).await;
    wait_job(&e, p.id, "dynamic", "success").await;

    // No such job, no such file: the trigger job fails and its log says why.
    for (name, message) in [
        (
            "missing-job",
            "Job `no-such-job` not found in parent pipeline or does not have artifacts!",
        ),
        (
            "missing-file",
            "Path `other.yml` does not exist inside the `generate` artifacts archive!",
        ),
    ] {
        let j = wait_job(&e, p.id, name, "failed").await;
        assert_eq!(
            j.failure_reason.as_deref(),
            Some("downstream_pipeline_creation_failed"),
            "{name}"
        );
        let log = String::from_utf8(e.coord.traces().trace(j.id).await.unwrap()).unwrap();
        assert!(log.contains(message), "{name}: {log}");
    }
    assert_eq!(dynamic.runner_id, None);
    // GitLab keeps a child pipeline whose configuration has errors (failed, with them).
    assert_eq!(e.coord.downstream_pipelines(p.id).await.unwrap().len(), 3);
}

#[tokio::test]
async fn an_invalid_child_configuration_fails_the_trigger_job_with_the_errors_in_its_log() {
    let e = env("parent:\n  trigger:\n    include: child.yml\n").await;
    commit(
        &e.repo,
        &[("child.yml", "bad-job:\n  script: [a]\n  needs: [nowhere]\n")],
        "child",
    );
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let bridge = wait_job(&e, p.id, "parent", "failed").await;
    assert_eq!(
        bridge.failure_reason.as_deref(),
        Some("downstream_pipeline_creation_failed")
    );
    let log = String::from_utf8(e.coord.traces().trace(bridge.id).await.unwrap()).unwrap();
    assert!(
        log.contains("bad-job job: undefined need: nowhere"),
        "{log}"
    );
    wait_status(&e, p.id, "failed").await;
    // The child was created as GitLab does with a configuration error: failed, with them.
    let child = child_of(&e, p.id).await;
    assert_eq!(child.status.as_str(), "failed");
    assert!(!child.yaml_errors.is_empty());

    // A file that does not exist: same reason, GitLab's message.
    let e = env("parent:\n  trigger:\n    include: nothing.yml\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let bridge = wait_job(&e, p.id, "parent", "failed").await;
    let log = String::from_utf8(e.coord.traces().trace(bridge.id).await.unwrap()).unwrap();
    assert!(
        log.contains("Local file `nothing.yml` does not exist!"),
        "{log}"
    );
}

#[tokio::test]
async fn child_pipelines_nest_two_levels_deep_and_no_deeper() {
    let e = env("level0:\n  trigger:\n    include: l1.yml\n").await;
    commit(
        &e.repo,
        &[
            ("l1.yml", "level1:\n  trigger:\n    include: l2.yml\n"),
            ("l2.yml", "level2:\n  trigger:\n    include: l3.yml\n"),
            ("l3.yml", "too-deep: {script: [a]}\n"),
        ],
        "levels",
    );
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let child = child_of(&e, p.id).await;
    let grandchild = child_of(&e, child.id).await;
    let bridge = wait_job(&e, grandchild.id, "level2", "failed").await;
    assert_eq!(
        bridge.failure_reason.as_deref(),
        Some("reached_max_descendant_pipelines_depth")
    );
    assert!(
        e.coord
            .downstream_pipelines(grandchild.id)
            .await
            .unwrap()
            .is_empty()
    );
    wait_job(&e, p.id, "level0", "success").await;
}

#[tokio::test]
async fn canceling_a_pipeline_cancels_its_child_pipelines() {
    let e = env("parent:\n  trigger:\n    include: child.yml\n    strategy: depend\n").await;
    commit(
        &e.repo,
        &[("child.yml", "slow: {script: [sleep 100]}\n")],
        "child",
    );
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let child = child_of(&e, p.id).await;
    let runner = e.any_runner().await;
    let slow = e.take_some(&runner).await;
    e.update(&slow, gantry_protocol::JobState::Running, None)
        .await;
    e.coord.cancel_pipeline(p.id).await.unwrap();
    wait_status(&e, child.id, "canceled").await;
    assert_eq!(job(&e, child.id, "slow").await.status.as_str(), "canceled");
    assert_eq!(job(&e, p.id, "parent").await.status.as_str(), "canceled");
    wait_status(&e, p.id, "canceled").await;
}

#[tokio::test]
async fn a_multi_project_trigger_runs_the_other_projects_pipeline() {
    let e = env(r"
up:
  variables: {FROM_UP: up-value}
  trigger:
    project: gantry/downstream
    strategy: depend
nowhere:
  trigger: group/missing
")
    .await;
    let project = e.project().await;
    let downstream = second_project(&e, "downstream", "down: {script: [echo]}\n").await;
    let p = e.pipeline(project, "main").await;
    let missing = wait_job(&e, p.id, "nowhere", "failed").await;
    assert_eq!(
        missing.failure_reason.as_deref(),
        Some("downstream_bridge_project_not_found")
    );
    let child = child_of(&e, p.id).await;
    assert_eq!(child.project_id, downstream.id);
    assert_eq!(child.source, "pipeline");
    let runner = e.any_runner().await;
    let down = e.take_some(&runner).await;
    assert_eq!(var(&down, "FROM_UP"), Some("up-value"));
    assert_eq!(var(&down, "CI_PIPELINE_SOURCE"), Some("pipeline"));
    e.run(&down, true).await;
    wait_job(&e, p.id, "up", "success").await;
}

#[tokio::test]
async fn trigger_inputs_are_the_downstream_pipelines_inputs() {
    let e = env(r"
spec:
  inputs:
    target: {default: staging}
---
deploy:
  trigger:
    project: gantry/downstream
    inputs:
      environment: $[[ inputs.target ]]
      replicas: 3
wrong:
  trigger:
    project: gantry/downstream
    inputs:
      environment: qa
      replicas: 3
")
    .await;
    let project = e.project().await;
    second_project(
        &e,
        "downstream",
        "spec:\n  inputs:\n    environment: {options: [staging, production]}\n    replicas: {type: number}\n---\nrollout:\n  script: [\"echo $[[ inputs.environment ]] x$[[ inputs.replicas ]]\"]\n",
    )
    .await;
    let p = e.pipeline(project, "main").await;
    // A value the downstream configuration refuses fails that trigger job, saying why.
    let wrong = wait_job(&e, p.id, "wrong", "failed").await;
    assert_eq!(
        wrong.failure_reason.as_deref(),
        Some("downstream_pipeline_creation_failed")
    );
    let log = String::from_utf8(e.coord.traces().trace(wrong.id).await.unwrap()).unwrap();
    assert!(
        log.contains("`environment` input: `qa` cannot be used because it is not in the list of allowed options"),
        "{log}"
    );
    let runner = e.any_runner().await;
    let down = e.take_some(&runner).await;
    let steps = down.steps.as_ref().unwrap();
    assert_eq!(steps[0].script, ["echo staging x3"]);
}

#[tokio::test]
async fn after_a_restart_a_running_trigger_job_creates_the_pipeline_it_had_not_stored() {
    let e = env("parent:\n  trigger:\n    include: child.yml\n    strategy: depend\n").await;
    commit(&e.repo, &[("child.yml", "inner: {script: [a]}\n")], "child");
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let child = child_of(&e, p.id).await;
    // The process died between starting the trigger job and storing its pipeline (two
    // transactions): the state the database is left in.
    let url = coordinator_support::test_database(e.dir.path()).await;
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    for q in [
        "DELETE FROM jobs WHERE pipeline_id = $1",
        "DELETE FROM pipelines WHERE id = $1",
    ] {
        sqlx::query(q).bind(child.id).execute(&pool).await.unwrap();
    }
    pool.close().await;
    assert_eq!(job(&e, p.id, "parent").await.status.as_str(), "running");
    assert!(e.coord.downstream_pipelines(p.id).await.unwrap().is_empty());

    let restarted = coordinator_support::open_coordinator(e.dir.path()).await;
    restarted.resume().await.unwrap();
    let e = Env {
        coord: restarted,
        ..e
    };
    let again = child_of(&e, p.id).await;
    assert_ne!(again.id, child.id);
    let runner = e.any_runner().await;
    let inner = e.take_some(&runner).await;
    assert_eq!(inner.job_info.pipeline_id, again.id);
    e.run(&inner, true).await;
    wait_job(&e, p.id, "parent", "success").await;
    wait_status(&e, p.id, "success").await;
    // Resuming again finds the pipeline and creates no second one.
    e.coord.resume().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(e.coord.downstream_pipelines(p.id).await.unwrap().len(), 1);
}

fn gzip(text: &str) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

#[tokio::test]
async fn child_jobs_take_artifacts_and_dotenv_from_the_parent_with_needs_pipeline_job() {
    let e = env(r"
generate: {stage: build, script: [gen], artifacts: {paths: [out.txt], reports: {dotenv: build.env}}}
child:
  stage: test
  variables: {PARENT_PIPELINE_ID: $CI_PIPELINE_ID}
  trigger: {include: child.yml}
")
    .await;
    commit(
        &e.repo,
        &[(
            "child.yml",
            r"
uses:
  script: [cat out.txt]
  needs:
    - pipeline: $PARENT_PIPELINE_ID
      job: generate
wrong:
  script: [cat out.txt]
  needs:
    - pipeline: $PARENT_PIPELINE_ID
      job: nothing
",
        )],
        "child",
    );
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let generate = e.take_some(&runner).await;
    let params = |t, f| ArtifactUploadParams {
        artifact_type: Some(t),
        artifact_format: Some(f),
        expire_in: None,
    };
    e.coord
        .upload_artifact(
            generate.id,
            params(ArtifactType::Archive, ArtifactFormat::Zip),
            "artifacts.zip",
            &zip_of(&[("out.txt", "made upstairs\n")]),
        )
        .await
        .unwrap();
    e.coord
        .upload_artifact(
            generate.id,
            params(ArtifactType::Dotenv, ArtifactFormat::Gzip),
            "build.env.gz",
            &gzip("BUILT_BY=generate\n"),
        )
        .await
        .unwrap();
    e.run(&generate, true).await;
    let child = child_of(&e, p.id).await;
    // `wrong` needs a job the parent does not have: it is dropped, not handed out.
    let Some(uses) = e.take(&runner).await else {
        panic!(
            "no job; the child's: {:?}",
            e.coord
                .pipeline_jobs(child.id)
                .await
                .unwrap()
                .iter()
                .map(|j| (&j.name, &j.status, &j.failure_reason))
                .collect::<Vec<_>>()
        );
    };
    assert_eq!(uses.job_info.name, "uses");
    assert!(e.take(&runner).await.is_none());
    let dep: Vec<_> = uses
        .dependencies
        .iter()
        .map(|d| (d.id, d.name.as_str()))
        .collect();
    assert_eq!(dep, [(generate.id, "generate")]);
    assert!(uses.dependencies[0].artifacts_file.is_some());
    assert_eq!(var(&uses, "BUILT_BY"), Some("generate"));
    // The job token of the child's job downloads the parent job's archive.
    let (_, blob) = e
        .coord
        .download_artifact(generate.id, &uses.token)
        .await
        .unwrap();
    assert!(!blob.into_bytes().unwrap().is_empty());
    let wrong = wait_job(&e, child.id, "wrong", "failed").await;
    assert_eq!(
        wrong.failure_reason.as_deref(),
        Some("missing_dependency_failure")
    );
}

#[tokio::test]
async fn projects_that_trigger_each_other_stop_at_the_third_round() {
    let e = env("ping:\n  trigger: gantry/other\n").await;
    let project = e.project().await;
    let other = second_project(&e, "other", "pong:\n  trigger: gantry/demo\n").await;
    let first = e.pipeline(project, "main").await;
    // demo → other → demo → other → demo → other, whose trigger job is refused.
    let mut chain = vec![first.id];
    for _ in 0..5 {
        let last = *chain.last().unwrap();
        chain.push(child_of(&e, last).await.id);
    }
    let last = *chain.last().unwrap();
    let pong = wait_job(&e, last, "pong", "failed").await;
    assert_eq!(
        pong.failure_reason.as_deref(),
        Some("pipeline_loop_detected")
    );
    let projects: Vec<i64> = {
        let mut v = Vec::new();
        for id in &chain {
            v.push(e.coord.pipeline(*id).await.unwrap().project_id);
        }
        v
    };
    assert_eq!(
        projects,
        [project, other.id, project, other.id, project, other.id]
    );
}

#[tokio::test]
async fn needs_project_takes_artifacts_and_dotenv_from_another_projects_latest_successful_job() {
    let e = env(
        "build: {script: [make], artifacts: {paths: [out.txt], reports: {dotenv: build.env}}}\n",
    )
    .await;
    let project = e.project().await;
    let runner = e.any_runner().await;
    let params = |t, f| ArtifactUploadParams {
        artifact_type: Some(t),
        artifact_format: Some(f),
        expire_in: None,
    };
    // Two pipelines of `main`: the newer one's build is the dependency.
    let mut builds = Vec::new();
    for text in ["old\n", "new\n"] {
        e.pipeline(project, "main").await;
        let build = e.take_some(&runner).await;
        e.coord
            .upload_artifact(
                build.id,
                params(ArtifactType::Archive, ArtifactFormat::Zip),
                "artifacts.zip",
                &zip_of(&[("out.txt", text)]),
            )
            .await
            .unwrap();
        e.coord
            .upload_artifact(
                build.id,
                params(ArtifactType::Dotenv, ArtifactFormat::Gzip),
                "build.env.gz",
                &gzip(&format!("BUILT={}", text.trim())),
            )
            .await
            .unwrap();
        e.run(&build, true).await;
        builds.push(build.id);
    }
    // A failed build on top does not count: the latest *successful* one does.
    e.pipeline(project, "main").await;
    let failed = e.take_some(&runner).await;
    e.run(&failed, false).await;

    let consumer = second_project(
        &e,
        "consumer",
        r"
uses:
  script: [cat out.txt]
  needs:
    - project: gantry/demo
      job: build
      ref: $UPSTREAM_REF
      artifacts: true
  variables: {UPSTREAM_REF: main}
missing:
  script: [x]
  needs:
    - {project: gantry/demo, job: build, ref: nope}
stranger:
  script: [x]
",
    )
    .await;
    // `gantry/demo`, new, limits job token access to its allowlist: it names the consumer.
    e.coord
        .allow_job_token_project(project, consumer.id)
        .await
        .unwrap();
    let p = e.pipeline(consumer.id, "main").await;
    let mut taken = Vec::new();
    while let Some(job) = e.take(&runner).await {
        taken.push(job);
    }
    let names: Vec<&str> = taken.iter().map(|j| j.job_info.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let uses = taken.iter().find(|j| j.job_info.name == "uses").unwrap();
    let stranger = taken
        .iter()
        .find(|j| j.job_info.name == "stranger")
        .unwrap();
    let deps: Vec<_> = uses
        .dependencies
        .iter()
        .map(|d| (d.id, d.name.as_str()))
        .collect();
    assert_eq!(deps, [(builds[1], "build")]);
    assert!(uses.dependencies[0].artifacts_file.is_some());
    assert_eq!(var(uses, "BUILT"), Some("new"));
    assert!(stranger.dependencies.is_empty());

    // The needing job's token downloads the other project's archive; another job's
    // token of that project does not.
    let (_, blob) = e
        .coord
        .download_artifact(builds[1], &uses.token)
        .await
        .unwrap();
    assert!(!blob.into_bytes().unwrap().is_empty());
    let refused = e.coord.download_artifact(builds[1], &stranger.token).await;
    assert!(
        matches!(&refused, Err(CoordinatorError::Forbidden(m)) if m.contains("needs:project")),
        "{refused:?}"
    );
    let missing = wait_job(&e, p.id, "missing", "failed").await;
    assert_eq!(
        missing.failure_reason.as_deref(),
        Some("missing_dependency_failure")
    );
}
