//! Pipelines end to end through the coordinator API: creation from a ref of a real git
//! repository, a simulated runner driving jobs stage by stage, configuration errors, user
//! actions (retry, manual play, cancel), timers, and a restart.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use std::time::Duration;

use coordinator_support::*;
use gantry_pipeline::Source;
use gantry_protocol::JobState;
use gantry_server::coordinator::CoordinatorError;

const STAGES: &str = r"
stages: [build, test, deploy]
variables:
  GLOBAL: g
build:
  stage: build
  script: [make]
  variables: {OWN: o}
unit:
  stage: test
  script: [make test]
lint:
  stage: test
  script: [make lint]
  timeout: 15 minutes
deploy:
  stage: deploy
  script: [make deploy]
";

#[tokio::test]
async fn stages_run_in_order_through_a_runner() {
    let e = env(STAGES).await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    assert_eq!(
        (p.iid, p.ref_name.as_str(), p.status.as_str(), p.tag),
        (1, "main", "pending", false)
    );
    assert_eq!(p.sha, git(&e.repo, &["rev-parse", "HEAD"]));
    assert_eq!(
        e.statuses(p.id).await,
        map(&[
            ("build", "pending"),
            ("unit", "created"),
            ("lint", "created"),
            ("deploy", "created")
        ])
    );
    let runner = e.any_runner().await;

    let build = e.take_some(&runner).await;
    assert_eq!(build.job_info.name, "build");
    assert!(e.take(&runner).await.is_none(), "later stages wait");
    assert_eq!(e.status(p.id).await, "running");
    // The payload is complete enough for gitlab-runner.
    assert!(build.token.starts_with("glcbt-") && build.token.len() >= 6 + 32);
    assert_eq!(
        var(&build, "CI_JOB_ID"),
        Some(build.id.to_string().as_str())
    );
    assert_eq!(var(&build, "CI_JOB_TOKEN"), Some(build.token.as_str()));
    assert!(
        build
            .variable("CI_JOB_TOKEN")
            .is_some_and(|v| v.masked && !v.public)
    );
    assert_eq!(
        var(&build, "CI_PIPELINE_ID"),
        Some(p.id.to_string().as_str())
    );
    assert_eq!(var(&build, "CI_PIPELINE_IID"), Some("1"));
    assert_eq!(
        var(&build, "CI_JOB_URL").unwrap(),
        format!("http://127.0.0.1:8080/gantry/demo/-/jobs/{}", build.id)
    );
    assert_eq!(var(&build, "CI_PROJECT_PATH"), Some("gantry/demo"));
    assert_eq!(var(&build, "CI_COMMIT_SHA"), Some(p.sha.as_str()));
    assert_eq!(var(&build, "CI_COMMIT_BRANCH"), Some("main"));
    assert_eq!(var(&build, "CI_COMMIT_REF_PROTECTED"), Some("true"));
    assert_eq!(var(&build, "CI_COMMIT_TITLE"), Some("first commit"));
    assert_eq!(
        var(&build, "CI_COMMIT_AUTHOR"),
        Some("Ada <ada@example.com>")
    );
    assert_eq!(var(&build, "CI_PIPELINE_SOURCE"), Some("api"));
    assert_eq!(
        var(&build, "CI_RUNNER_ID"),
        Some(runner.id.to_string().as_str())
    );
    assert_eq!(
        (var(&build, "GLOBAL"), var(&build, "OWN")),
        (Some("g"), Some("o"))
    );
    assert_eq!(
        var(&build, "CI_PROJECT_DIR"),
        None,
        "set by the runner, never by the server"
    );
    assert_eq!(build.git_info.sha, p.sha);
    assert_eq!(
        build.git_info.repo_url,
        format!(
            "http://gitlab-ci-token:{}@127.0.0.1:8080/gantry/demo.git",
            build.token
        )
    );
    assert_eq!(
        build.git_info.refspecs[0],
        format!("+refs/pipelines/{0}:refs/pipelines/{0}", p.id)
    );
    let repo_path = e.coord.git_repo_path("gantry/demo.git").await;
    assert_eq!(
        git(
            &repo_path,
            &["rev-parse", &format!("refs/pipelines/{}", p.id)]
        ),
        p.sha
    );
    assert_eq!(build.runner_info.timeout, 3600, "the project's default");
    let steps = build.steps.as_ref().unwrap();
    assert_eq!(steps[0].script, ["make"]);
    assert_eq!(steps[0].timeout, 3600);
    assert!(
        build
            .features
            .failure_reasons
            .iter()
            .any(|r| r == "script_failure")
    );

    assert!(e.run(&build, true).await.accepted);
    assert_eq!(
        e.coord.traces().trace(build.id).await.unwrap(),
        b"running build\n"
    );
    let a = e.take_some(&runner).await;
    let b = e.take_some(&runner).await;
    let mut names = [a.job_info.name.clone(), b.job_info.name.clone()];
    names.sort();
    assert_eq!(names, ["lint", "unit"], "a stage's jobs run in parallel");
    let lint = if a.job_info.name == "lint" { &a } else { &b };
    assert_eq!(lint.runner_info.timeout, 900, "the job's own timeout");
    e.run(&a, true).await;
    assert!(e.take(&runner).await.is_none());
    e.run(&b, true).await;
    let deploy = e.take_some(&runner).await;
    let done = e.run(&deploy, true).await;
    assert_eq!(done.job_status.as_str(), "success");
    let p = e.coord.pipeline(p.id).await.unwrap();
    assert_eq!(p.status.as_str(), "success");
    assert!(p.finished_at.is_some() && p.started_at.is_some());
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["ref"], "main");
    assert!(json["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(json["yaml_errors"], serde_json::Value::Null);
}

#[tokio::test]
async fn a_failure_skips_later_stages_and_retry_recovers() {
    let e = env(STAGES).await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let build = e.take_some(&runner).await;
    let done = e.run(&build, false).await;
    assert_eq!(done.job_status.as_str(), "failed");
    assert_eq!(e.status(p.id).await, "failed");
    assert_eq!(
        e.statuses(p.id).await,
        map(&[
            ("build", "failed"),
            ("unit", "skipped"),
            ("lint", "skipped"),
            ("deploy", "skipped")
        ])
    );
    let failed = e.coord.job(build.id).await.unwrap();
    assert_eq!(
        (failed.failure_reason.as_deref(), failed.exit_code),
        (Some("script_failure"), Some(1))
    );
    // The job token died with the job.
    assert!(e.coord.job_by_token(&build.token).await.unwrap().is_none());
    assert_eq!(
        e.coord.job_status_for_token(&build.token).await.unwrap(),
        Some((build.id, gantry_server::Status::Failed))
    );
    let err = e
        .coord
        .append_trace(build.id, 14, b"more")
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::Forbidden(_)), "{err}");

    let again = e.coord.retry_job(build.id).await.unwrap();
    assert_ne!(again.id, build.id);
    assert_eq!((again.attempt, again.status.as_str()), (2, "pending"));
    assert!(e.coord.job(build.id).await.unwrap().retried);
    // A failed pipeline that runs again is `running`, not `pending` (GitLab's pipeline
    // state machine: `enqueue` from `failed`).
    assert_eq!(e.status(p.id).await, "running");
    let retried = e.take_some(&runner).await;
    assert_eq!(retried.id, again.id);
    e.run(&retried, true).await;
    assert_eq!(
        e.statuses(p.id).await["unit"],
        "pending",
        "skipped dependents are re-evaluated"
    );
    // A running job cannot be retried (GitLab's 403).
    let unit = e.take_some(&runner).await;
    assert!(matches!(
        e.coord.retry_job(unit.id).await,
        Err(CoordinatorError::Forbidden(_))
    ));
    assert_eq!(
        e.coord.pipeline_jobs(p.id).await.unwrap().len(),
        5,
        "retried rows are kept"
    );
}

#[tokio::test]
async fn manual_jobs_are_played_with_variables_and_pipelines_canceled() {
    let e = env(r"
build: {stage: build, script: [make]}
deploy:
  stage: deploy
  script: [deploy]
  when: manual
  allow_failure: false
after: {stage: .post, script: [notify]}
")
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let build = e.take_some(&runner).await;
    e.run(&build, true).await;
    assert_eq!(
        e.status(p.id).await,
        "manual",
        "a blocking manual job blocks the pipeline"
    );
    assert!(e.take(&runner).await.is_none());
    let deploy_id = e
        .coord
        .pipeline_jobs(p.id)
        .await
        .unwrap()
        .iter()
        .find(|j| j.name == "deploy")
        .unwrap()
        .id;
    let err = e.coord.play_job(build.id, vec![]).await.unwrap_err();
    assert!(matches!(err, CoordinatorError::Invalid(_)), "{err}");
    let played = e
        .coord
        .play_job(deploy_id, vec![("TARGET".into(), "prod".into())])
        .await
        .unwrap();
    assert_eq!((played.id, played.status.as_str()), (deploy_id, "pending"));
    let deploy = e.take_some(&runner).await;
    assert_eq!(var(&deploy, "TARGET"), Some("prod"));
    assert_eq!(var(&deploy, "CI_JOB_MANUAL"), Some("true"));

    // Cancel while it runs: no graceful-cancel runner, so canceled at once; the runner's
    // next update is refused and the skipped .post job never runs.
    let canceled = e.coord.cancel_pipeline(p.id).await.unwrap();
    assert_eq!(canceled.status.as_str(), "canceled");
    assert_eq!(e.statuses(p.id).await["deploy"], "canceled");
    assert_eq!(e.statuses(p.id).await["after"], "canceled");
    let refused = e
        .coord
        .update_job(
            deploy.id,
            gantry_protocol::UpdateJobRequest::new(
                deploy.token.clone(),
                JobState::Running,
                Default::default(),
            ),
        )
        .await;
    assert!(matches!(refused, Err(CoordinatorError::Forbidden(_))));
    assert_eq!(
        e.coord
            .job_status_for_token(&deploy.token)
            .await
            .unwrap()
            .map(|s| s.1),
        Some(gantry_server::Status::Canceled)
    );
    // Canceling a finished pipeline changes nothing.
    assert_eq!(
        e.coord.cancel_pipeline(p.id).await.unwrap().status.as_str(),
        "canceled"
    );
    // Retrying the pipeline brings back canceled jobs.
    let retried = e.coord.retry_pipeline(p.id).await.unwrap();
    assert_eq!(retried.status.as_str(), "manual");
}

#[tokio::test]
async fn graceful_cancel_goes_through_canceling() {
    let e = env("job: {script: [sleep 100], after_script: [cleanup]}\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let info = gantry_server::coordinator::RequestInfo {
        cancel_gracefully: true,
        ..Default::default()
    };
    let job = e
        .coord
        .request_job_with(&runner, None, Duration::ZERO, &info)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.steps.as_ref().unwrap()[1].script, ["cleanup"]);
    e.update(&job, JobState::Running, None).await;
    e.coord.cancel_job(job.id).await.unwrap();
    let r = e.update(&job, JobState::Running, None).await;
    assert_eq!(
        r.job_status.as_str(),
        "canceling",
        "the runner learns about the cancel on its next update"
    );
    assert!(
        e.coord.job_by_token(&job.token).await.unwrap().is_some(),
        "a canceling job still reports"
    );
    let r = e.update(&job, JobState::Failed, None).await;
    assert_eq!(r.job_status.as_str(), "canceled");
    assert_eq!(e.status(p.id).await, "canceled");
}

#[tokio::test]
async fn configuration_errors_fail_the_pipeline_with_the_errors() {
    let e = env("build:\n  script: 12\n  stage: nope\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    assert_eq!(p.status.as_str(), "failed");
    assert_eq!(p.failure_reason.as_deref(), Some("config_error"));
    assert!(!p.yaml_errors.is_empty());
    assert!(
        p.yaml_errors.iter().any(|m| m.contains("jobs:build")),
        "{:?}",
        p.yaml_errors
    );
    assert!(p.finished_at.is_some());
    assert!(e.coord.pipeline_jobs(p.id).await.unwrap().is_empty());
    let json = serde_json::to_value(&p).unwrap();
    assert!(json["yaml_errors"].as_str().unwrap().contains("jobs:build"));
    // It is listed like any pipeline.
    assert_eq!(e.coord.pipelines(project).await.unwrap()[0].id, p.id);
}

/// `workflow:name`, expanded, names the pipeline in its view and in the project's list;
/// a pipeline without it, or without jobs, has no name.
#[tokio::test]
async fn workflow_name_names_the_pipeline() {
    let e = env("workflow:\n  name: 'Nightly $CI_COMMIT_BRANCH'\nbuild: {script: [make]}\ntest: {script: [make test]}\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    assert_eq!(p.name.as_deref(), Some("Nightly main"));
    assert_eq!(
        e.coord.pipeline(p.id).await.unwrap().name.as_deref(),
        Some("Nightly main")
    );
    assert_eq!(
        serde_json::to_value(&p).unwrap()["name"],
        serde_json::json!("Nightly main")
    );
    assert_eq!(
        e.coord.pipelines(project).await.unwrap()[0].name.as_deref(),
        Some("Nightly main")
    );
    let unnamed = env("build: {script: [make]}\n").await;
    let project = unnamed.project().await;
    let p = unnamed.pipeline(project, "main").await;
    assert_eq!(p.name, None);
    let broken = env("build:\n  script: 12\n").await;
    let project = broken.project().await;
    let p = broken.pipeline(project, "main").await;
    assert_eq!((p.status.as_str(), p.name), ("failed", None));
}

#[tokio::test]
async fn filtered_or_empty_pipelines_and_bad_refs_are_not_created() {
    let e = env("workflow:\n  rules:\n    - if: $CI_COMMIT_TAG\nbuild: {script: [make]}\n").await;
    let project = e.project().await;
    let err = e
        .coord
        .create_pipeline(project, "main", vec![], Source::Api)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CoordinatorError::Invalid(m) if m == "Pipeline filtered out by workflow rules."),
        "{err}"
    );
    let err = e
        .coord
        .create_pipeline(project, "nope", vec![], Source::Api)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CoordinatorError::Invalid(m) if m.contains("Reference not found")),
        "{err}"
    );
    assert!(e.coord.pipelines(project).await.unwrap().is_empty());

    // A tag pipeline passes the workflow rule; tags are not protected by default.
    git(&e.repo, &["tag", "-a", "v1.0", "-m", "release one"]);
    let p = e.pipeline(project, "v1.0").await;
    assert!(p.tag);
    assert!(!p.protected);
    // The pipelines that were not created gave their iid back.
    assert_eq!(p.iid, 1);
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert_eq!(var(&job, "CI_PIPELINE_IID"), Some("1"));
    assert_eq!(var(&job, "CI_COMMIT_TAG"), Some("v1.0"));
    assert_eq!(var(&job, "CI_COMMIT_TAG_MESSAGE"), Some("release one"));
    assert_eq!(job.git_info.ref_type, gantry_protocol::RefType::Tag);

    // Pipeline variables reach rules and jobs, above YAML variables.
    commit(
        &e.repo,
        &[(
            ".gitlab-ci.yml",
            "variables: {X: yaml}\nbuild:\n  script: [make]\n  rules: [{if: $RUN == \"yes\"}]\n",
        )],
        "rules",
    );
    let err = e
        .coord
        .create_pipeline(project, "main", vec![], Source::Web)
        .await
        .unwrap_err();
    assert!(matches!(err, CoordinatorError::Invalid(_)), "{err}");
    let p = e
        .coord
        .create_pipeline(
            project,
            "main",
            vec![("RUN".into(), "yes".into()), ("X".into(), "api".into())],
            Source::Web,
        )
        .await
        .unwrap();
    assert_eq!(
        p.variables,
        [
            ("RUN".to_owned(), "yes".to_owned()),
            ("X".to_owned(), "api".to_owned())
        ]
    );
    let job = e.take_some(&runner).await;
    assert_eq!(
        (var(&job, "X"), var(&job, "CI_PIPELINE_SOURCE")),
        (Some("api"), Some("web"))
    );
    assert!(job.variable("X").is_some_and(|v| !v.public));
    e.run(&job, true).await;

    // Rules see the pipeline's own CI_PIPELINE_IID, the one it is stored with.
    commit(
        &e.repo,
        &[(
            ".gitlab-ci.yml",
            "odd:\n  script: [make]\n  rules:\n    - if: $CI_PIPELINE_IID =~ /[13579]$/\n\
             even:\n  script: [make]\n  rules:\n    - if: $CI_PIPELINE_IID =~ /[02468]$/\n",
        )],
        "iid rules",
    );
    for iid in [3, 4] {
        let p = e.pipeline(project, "main").await;
        assert_eq!(p.iid, iid);
        let job = e.take_some(&runner).await;
        assert_eq!(job.job_info.name, if iid == 3 { "odd" } else { "even" });
        assert_eq!(var(&job, "CI_PIPELINE_IID"), Some(iid.to_string().as_str()));
        e.run(&job, true).await;
    }
}

#[tokio::test]
async fn local_includes_are_read_at_the_pipeline_commit() {
    let e = env("include: [{local: ci/jobs.yml}]\n").await;
    commit(
        &e.repo,
        &[("ci/jobs.yml", "from-include: {script: [echo one]}\n")],
        "include",
    );
    let project = e.project().await;
    let first = git(&e.repo, &["rev-parse", "HEAD"]);
    // A later commit on another branch changes the include; main still sees its own.
    git(&e.repo, &["checkout", "-q", "-b", "feature"]);
    commit(
        &e.repo,
        &[("ci/jobs.yml", "changed: {script: [echo two]}\n")],
        "change include",
    );
    git(&e.repo, &["checkout", "-q", "main"]);
    let p = e.pipeline(project, "main").await;
    assert_eq!(p.sha, first);
    assert_eq!(e.statuses(p.id).await, map(&[("from-include", "pending")]));
    let p = e.pipeline(project, "feature").await;
    assert_eq!(e.statuses(p.id).await, map(&[("changed", "pending")]));
    assert!(!p.protected, "only the default branch is protected");
}

#[tokio::test]
async fn project_includes_are_read_from_the_servers_other_projects() {
    let e = env(concat!(
        "include:\n",
        "  - {project: CI/Templates, ref: v1, file: [/build.yml]}\n",
        "  - {project: ci/templates, file: latest.yml}\n",
    ))
    .await;
    let templates = e.dir.path().join("templates");
    std::fs::create_dir_all(&templates).unwrap();
    git(&templates, &["init", "-q", "-b", "main"]);
    commit(
        &templates,
        &[
            // Its include:local is read in the templates project, at v1.
            (
                "build.yml",
                "include: /inner.yml\nbuild: {script: [make]}\n",
            ),
            ("inner.yml", "inner-v1: {script: [echo]}\n"),
        ],
        "templates",
    );
    git(&templates, &["tag", "v1"]);
    let project = e.project().await;
    e.coord
        .create_project("ci/templates", templates.to_str().unwrap())
        .await
        .unwrap();
    // Pushed after the project was created: the server fetches before reading.
    commit(
        &templates,
        &[
            ("inner.yml", "inner-later: {script: [echo]}\n"),
            ("latest.yml", "latest: {script: [echo]}\n"),
        ],
        "later",
    );
    let p = e.pipeline(project, "main").await;
    assert_eq!(
        e.statuses(p.id).await,
        map(&[
            ("inner-v1", "pending"),
            ("build", "pending"),
            ("latest", "pending")
        ])
    );

    // A project the server does not hold: GitLab's message, the pipeline fails.
    commit(
        &e.repo,
        &[(
            ".gitlab-ci.yml",
            "include: [{project: ci/missing, file: a.yml}]\n",
        )],
        "missing",
    );
    let p = e.pipeline(project, "main").await;
    assert_eq!(p.status.as_str(), "failed");
    let errors = p.yaml_errors.clone();
    assert_eq!(
        errors,
        [
            "Project `ci/missing` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined."
        ]
    );
}

#[tokio::test]
async fn timers_time_out_jobs_and_start_delayed_ones() {
    let e = env(
        r"
slow: {stage: build, script: [sleep 10000], timeout: 10 minutes, retry: {max: 1, when: [script_failure]}}
later: {script: [echo], when: delayed, start_in: 30 seconds, stage: test}
",
    )
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let slow = e.take_some(&runner).await;
    assert_eq!(slow.runner_info.timeout, 600);
    let started = e.coord.job(slow.id).await.unwrap().started_at.unwrap();
    // Not yet: within the timeout plus the 5-minute grace.
    e.coord.tick(started + 600_000).await.unwrap();
    assert_eq!(
        e.coord.job(slow.id).await.unwrap().status.as_str(),
        "running"
    );
    e.coord.tick(started + 901_000).await.unwrap();
    let timed_out = e.coord.job(slow.id).await.unwrap();
    assert_eq!(
        (
            timed_out.status.as_str(),
            timed_out.failure_reason.as_deref()
        ),
        ("failed", Some("job_execution_timeout"))
    );
    assert!(e.coord.job_by_token(&slow.token).await.unwrap().is_none());
    // A timeout is not a script failure: no automatic retry; the delayed job waits for
    // its stage and is skipped after a failure.
    assert_eq!(
        e.statuses(p.id).await,
        map(&[("later", "skipped"), ("slow", "failed")])
    );
}

#[tokio::test]
async fn delayed_jobs_start_when_due() {
    let e = env("later: {script: [echo], when: delayed, start_in: 30 seconds}\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let job = e.coord.pipeline_jobs(p.id).await.unwrap().remove(0);
    assert_eq!(
        (job.status.as_str(), p.status.as_str()),
        ("scheduled", "scheduled")
    );
    let due = job.scheduled_at.unwrap();
    e.coord.tick(due - 5_000).await.unwrap();
    assert_eq!(e.statuses(p.id).await["later"], "scheduled");
    e.coord.tick(due + 1_000).await.unwrap();
    assert_eq!(e.statuses(p.id).await["later"], "pending");
    let runner = e.any_runner().await;
    assert_eq!(e.take_some(&runner).await.id, job.id);
}

#[tokio::test]
async fn a_restart_resumes_without_handing_out_twice() {
    let e = env("a: {stage: build, script: [x]}\nb: {stage: build, script: [y]}\nc: {stage: test, script: [z]}\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let a = e.take_some(&runner).await;
    drop(e.coord);
    // A new process over the same database and data directory.
    let coord = open_coordinator(e.dir.path()).await;
    coord.resume().await.unwrap();
    let e = Env { coord, ..e };
    let b = e.take_some(&runner).await;
    assert_ne!(a.id, b.id);
    assert!(
        e.take(&runner).await.is_none(),
        "a is still running, never handed out twice"
    );
    // The job that ran across the restart finishes normally with its token.
    assert!(e.coord.job_by_token(&a.token).await.unwrap().is_some());
    e.run(&a, true).await;
    e.run(&b, true).await;
    let c = e.take_some(&runner).await;
    e.run(&c, true).await;
    assert_eq!(e.status(p.id).await, "success");
}

#[tokio::test]
async fn jobs_without_updates_are_dropped_as_stuck() {
    let e = env("job: {script: [sleep 100000], timeout: 1 day}\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    let started = e.coord.job(job.id).await.unwrap().started_at.unwrap();
    e.coord.append_trace(job.id, 0, b"alive\n").await.unwrap();
    e.coord.tick(started + 30 * 60_000).await.unwrap();
    assert_eq!(
        e.coord.job(job.id).await.unwrap().status.as_str(),
        "running"
    );
    // An hour without a trace patch or keep-alive: the runner is gone.
    e.coord.tick(started + 62 * 60_000).await.unwrap();
    let j = e.coord.job(job.id).await.unwrap();
    assert_eq!(
        (j.status.as_str(), j.failure_reason.as_deref()),
        ("failed", Some("stuck_or_timeout_failure"))
    );
    assert_eq!(e.status(p.id).await, "failed");
}

/// A pipeline's decisions take the copy kept in memory, not its rows: eight runners
/// taking and finishing the jobs of a 120-job DAG at once, so that assignments commit
/// while decisions hold the copy, leave it current — the pipeline is read whole when it is
/// first decided over, and again only for what another replica did (none here). (Before
/// this was kept, an assignment committed after a decision read the pipeline's row was
/// dropped, and the next decision read every row: ~5 % of decisions.) Nor is a decision
/// refused as stale: this process's assignments wait while one reads and stores its
/// pipeline (before, most job ends of a busy pipeline were decided twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_pipeline_is_read_whole_once() {
    let mut ci = String::from("stages: [s0, s1, s2, s3, s4, s5]\n");
    for stage in 0..6 {
        for job in 0..20 {
            ci.push_str(&format!(
                "j{stage}_{job}:\n  stage: s{stage}\n  script: [x]\n"
            ));
            if stage > 0 {
                let (a, b) = (job, (job + 1) % 20);
                ci.push_str(&format!(
                    "  needs: [j{}_{a}, j{}_{b}]\n",
                    stage - 1,
                    stage - 1
                ));
            }
        }
    }
    let e = std::sync::Arc::new(env(&ci).await);
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let before = e.coord.pipelines_read_whole();
    let stale_before = e.coord.stale_decisions();
    let mut runners = Vec::new();
    for _ in 0..8 {
        let e = std::sync::Arc::clone(&e);
        let runner = e.any_runner().await;
        runners.push(tokio::spawn(async move {
            let mut ran = 0;
            loop {
                match e.take(&runner).await {
                    Some(job) => {
                        e.run(&job, true).await;
                        ran += 1;
                    }
                    None if e.status(p.id).await == "success" => return ran,
                    None => tokio::time::sleep(Duration::from_millis(2)).await,
                }
            }
        }));
    }
    let mut ran = 0;
    for runner in runners {
        ran += tokio::time::timeout(Duration::from_secs(120), runner)
            .await
            .expect("the pipeline ends")
            .unwrap();
    }
    assert_eq!(ran, 120);
    let read = e.coord.pipelines_read_whole() - before;
    // (A timer tick may mark it to be read fresh once more.)
    assert!(read <= 3, "the pipeline was read whole {read} times");
    let stale = e.coord.stale_decisions() - stale_before;
    assert_eq!(stale, 0, "{stale} decisions were refused as stale");
}

/// A decision first takes the pipeline's copy kept in memory as it is, without reading
/// the pipeline's row: another replica's change is caught by the store's lock check at
/// apply, and the decision is made again over the rows as stored. Here the other replica
/// cancels one of two running jobs; the end of the other, reported to this one, leaves
/// the pipeline `canceled`, as over the stored rows.
#[tokio::test]
async fn a_decision_over_a_copy_another_replica_changed_is_made_again() {
    let e = env("a:\n  script: [x]\nb:\n  script: [y]\n").await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let first = e.take_some(&runner).await;
    let second = e.take_some(&runner).await;
    e.update(&first, JobState::Running, None).await;
    e.update(&second, JobState::Running, None).await;
    let other = second_coordinator(&e).await;
    other.cancel_job(second.id).await.unwrap();
    let stale_before = e.coord.stale_decisions();
    e.run(&first, true).await;
    assert_eq!(e.status(p.id).await, "canceled");
    assert_eq!(
        e.coord.job(first.id).await.unwrap().status.as_str(),
        "success"
    );
    assert_eq!(
        e.coord.stale_decisions() - stale_before,
        1,
        "the copy's decision was refused once, then made over the stored rows"
    );
}
