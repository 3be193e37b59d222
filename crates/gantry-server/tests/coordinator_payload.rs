//! The job payload (runner API §3.5) for the keywords that shape it: image, services,
//! cache, hooks, after_script, environment, parallel, raw variables; and what happens to
//! a job whose dependency's artifacts expired.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::coordinator_support;

use std::time::Duration;

use coordinator_support::*;
use gantry_protocol::{ArtifactFormat, ArtifactType, ArtifactUploadParams, CachePolicy, HookName};
use gantry_server::coordinator::SettingsError;
use gantry_store::{ProjectVariable, VariableOwner};

/// `environment:` is expanded when the pipeline is created, with the job's own variables
/// and job-level predefined ones (GitLab's `expanded_environment_name`); the job view shows
/// the result.
#[tokio::test]
async fn environments_expand_with_the_jobs_variables() {
    let e = env(r#"
deploy:
  stage: deploy
  script: [x]
  variables: {APP: Web-App}
  environment: {name: "$CI_JOB_STAGE/$APP", url: "https://$APP.example.com"}
"#)
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert_eq!(var(&job, "CI_ENVIRONMENT_NAME"), Some("deploy/Web-App"));
    assert_eq!(
        var(&job, "CI_ENVIRONMENT_SLUG"),
        Some("deploy-web-app-yrmm97")
    );
    assert_eq!(
        var(&job, "CI_ENVIRONMENT_URL"),
        Some("https://Web-App.example.com")
    );
    let views = e.coord.pipeline_jobs(p.id).await.unwrap();
    let environment = views[0].environment.as_ref().unwrap();
    assert_eq!(
        (environment.name.as_str(), environment.url.as_deref()),
        ("deploy/Web-App", Some("https://Web-App.example.com"))
    );
}

/// GitLab's dynamic environment URL: the deploy job's own dotenv report names the URL's
/// host, and its environment has that URL once the job succeeds
/// (`Deployments::UpdateEnvironmentService#expanded_environment_url`).
#[tokio::test]
async fn a_deploy_job_s_dotenv_report_gives_its_environment_its_url() {
    let e = env(r#"
deploy:
  script: [deploy]
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    url: https://$DYNAMIC_HOST/$CI_ENVIRONMENT_SLUG
  artifacts:
    reports: {dotenv: deploy.env}
review:
  script: [deploy]
  environment:
    name: other/$CI_COMMIT_REF_SLUG
    url: https://$REVIEW_DOMAIN/
"#)
    .await;
    let project = e.project().await;
    // A URL naming a project CI/CD variable: GitLab expands it with the job's variables.
    e.coord
        .settings()
        .create_variable(
            &gantry_store::VariableOwner::Project(project),
            &gantry_store::ProjectVariable::new("REVIEW_DOMAIN", "review.example.com"),
        )
        .await
        .unwrap();
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let first = e.take_some(&runner).await;
    let second = e.take_some(&runner).await;
    let (job, review) = if first.job_info.name == "deploy" {
        (first, second)
    } else {
        (second, first)
    };
    e.run(&review, true).await;
    let slug = var(&job, "CI_ENVIRONMENT_SLUG").unwrap().to_owned();
    // In the job itself the host is not known yet: the reference is left to the runner
    // (GitLab's `keep_undefined`).
    assert_eq!(
        var(&job, "CI_ENVIRONMENT_URL"),
        Some(format!("https://$DYNAMIC_HOST/{slug}").as_str())
    );
    e.coord
        .upload_artifact(
            job.id,
            ArtifactUploadParams {
                artifact_type: Some(ArtifactType::Dotenv),
                artifact_format: Some(ArtifactFormat::Gzip),
                expire_in: None,
            },
            "deploy.env.gz",
            &gzip("DYNAMIC_HOST=app-42.example.com\n"),
        )
        .await
        .unwrap();
    e.run(&job, true).await;
    let (environments, _) = e
        .coord
        .environments()
        .page(project, &gantry_store::EnvironmentFilter::default(), 0, 10)
        .await
        .unwrap();
    let url_of = |name: &str| {
        environments
            .iter()
            .find(|v| v.name.starts_with(name))
            .and_then(|v| v.external_url.clone())
    };
    assert_eq!(
        url_of("review/"),
        Some(format!("https://app-42.example.com/{slug}"))
    );
    assert_eq!(
        url_of("other/"),
        Some("https://review.example.com/".to_owned())
    );
}

/// GitLab's dynamic-environments example (`url: https://$CI_ENVIRONMENT_SLUG…`), a tier
/// from a variable, and the predefined variables GitLab 18 added: its version, the
/// project's group, the job's start as a slug, a disposable-or-shared flag left to the
/// runner.
#[tokio::test]
async fn the_environment_url_reads_its_slug_and_gitlab_18_variables_are_set() {
    let e = env(r#"
variables: {TIER: staging}
review:
  script: [x]
  environment:
    name: review/$CI_COMMIT_REF_SLUG
    url: https://$CI_ENVIRONMENT_SLUG.example.com
    deployment_tier: $TIER
"#)
    .await;
    let project = e.project().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    let slug = var(&job, "CI_ENVIRONMENT_SLUG").unwrap();
    assert!(slug.starts_with("review-main-"), "{slug}");
    assert_eq!(
        var(&job, "CI_ENVIRONMENT_URL"),
        Some(format!("https://{slug}.example.com").as_str())
    );
    assert_eq!(var(&job, "CI_ENVIRONMENT_TIER"), Some("staging"));
    assert_eq!(
        var(&job, "CI_SERVER_VERSION"),
        Some(gantry_pipeline::GITLAB_VERSION)
    );
    let major = gantry_pipeline::GITLAB_VERSION.split('.').next();
    assert_eq!(var(&job, "CI_SERVER_VERSION_MAJOR"), major);
    assert!(var(&job, "CI_SERVER_REVISION").is_some_and(|r| r.starts_with("gantry-")));
    let namespace = var(&job, "CI_PROJECT_NAMESPACE").unwrap().to_owned();
    assert_eq!(
        var(&job, "CI_PROJECT_NAMESPACE_SLUG"),
        Some(gantry_pipeline::expand::ref_slug(&namespace).as_str())
    );
    let namespace_id: i64 = var(&job, "CI_PROJECT_NAMESPACE_ID")
        .unwrap()
        .parse()
        .unwrap();
    assert!(namespace_id > 0);
    assert_eq!(var(&job, "CI_COMMIT_MESSAGE_IS_TRUNCATED"), Some("false"));
    assert_eq!(var(&job, "GITLAB_FEATURES"), Some(""));
    assert_eq!(
        var(&job, "CI_TEMPLATE_REGISTRY_HOST"),
        Some("registry.gitlab.com")
    );
    let started = var(&job, "CI_JOB_STARTED_AT").unwrap();
    assert_eq!(
        var(&job, "CI_JOB_STARTED_AT_SLUG"),
        Some(gantry_pipeline::expand::ref_slug(started).as_str())
    );
    // A tier that names none fails the job as GitLab's environment validation does.
    let e = env(r#"
deploy:
  script: [x]
  environment: {name: production, deployment_tier: $TIER}
  variables: {TIER: prod}
"#)
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let views = e.coord.pipeline_jobs(p.id).await.unwrap();
    assert_eq!(views[0].status.as_str(), "failed");
    assert_eq!(
        views[0].failure_reason.as_deref(),
        Some("environment_creation_failure")
    );
}

#[tokio::test]
async fn keywords_shape_the_payload() {
    let e = env(r#"
variables:
  GIT_DEPTH: "5"
  BASE: /opt
job:
  image:
    name: ruby:3.3
    entrypoint: [""]
    docker: {user: "1000", platform: linux/arm64}
    pull_policy: [if-not-present]
  services:
    - name: postgres:16
      alias: db
      variables: {POSTGRES_PASSWORD: secret}
  before_script: [bundle install]
  script: [bundle exec rspec]
  after_script: [echo done]
  hooks: {pre_get_sources_script: [git config --global x y]}
  cache:
    - key: gems
      paths: [vendor/bundle]
      policy: $CACHE_POLICY
    - key: {files: [Gemfile.lock], prefix: lock}
      paths: [.bundle]
      unprotect: true
  variables:
    PATH_IN: $BASE/bin
    LITERAL: {value: $BASE/raw, expand: false}
  environment: {name: review/$CI_COMMIT_REF_SLUG, url: https://$CI_COMMIT_REF_SLUG.example.com}
  parallel: 2
"#)
    .await;
    commit(&e.repo, &[("Gemfile.lock", "GEM\n")], "lock file");
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert_eq!(job.job_info.name, "job 1/2");
    assert_eq!(
        (var(&job, "CI_NODE_INDEX"), var(&job, "CI_NODE_TOTAL")),
        (Some("1"), Some("2"))
    );
    assert_eq!(var(&job, "CI_JOB_GROUP_NAME"), Some("job"));
    assert_eq!(var(&job, "CI_JOB_IMAGE"), Some("ruby:3.3"));

    let image = job.image.as_ref().unwrap();
    assert_eq!(image.name, "ruby:3.3");
    assert_eq!(image.entrypoint, Some(vec![String::new()]));
    let docker = image.executor_opts.docker.as_ref().unwrap();
    assert_eq!(docker.platform.as_deref(), Some("linux/arm64"));
    assert_eq!(
        image.pull_policy,
        Some(vec![gantry_protocol::PullPolicy::IfNotPresent])
    );
    assert_eq!(job.services[0].alias.as_deref(), Some("db"));
    assert_eq!(job.services[0].variables[0].key, "POSTGRES_PASSWORD");

    let steps = job.steps.as_ref().unwrap();
    assert_eq!(steps[0].script, ["bundle install", "bundle exec rspec"]);
    assert_eq!(
        (steps[1].script.as_slice(), steps[1].allow_failure),
        (&["echo done".to_owned()][..], true)
    );
    assert_eq!(job.hooks[0].name, HookName::PreGetSourcesScript);

    assert_eq!(job.cache[0].key, "gems-protected");
    assert_eq!(
        job.cache[0].policy,
        CachePolicy::Variable("$CACHE_POLICY".into()),
        "the runner expands it"
    );
    assert!(
        job.cache[1].key.starts_with("lock-") && !job.cache[1].key.ends_with("protected"),
        "{}",
        job.cache[1].key
    );
    assert_ne!(
        job.cache[1].key, "lock-default",
        "digest of the lock file's last commit"
    );

    assert_eq!(var(&job, "PATH_IN"), Some("/opt/bin"), "pre-expanded");
    let literal = job.variable("LITERAL").unwrap();
    assert!(literal.raw);
    assert_eq!(literal.value, "$BASE/raw");
    assert_eq!(var(&job, "CI_ENVIRONMENT_NAME"), Some("review/main"));
    // GitLab's environment slug: the name changed, so a suffix from its SHA-256 is added.
    assert_eq!(var(&job, "CI_ENVIRONMENT_SLUG"), Some("review-main-yi2y9f"));
    assert_eq!(
        var(&job, "CI_ENVIRONMENT_URL"),
        Some("https://main.example.com")
    );

    // GIT_DEPTH: a shallow fetch of the one ref, after the pipeline ref.
    assert_eq!(job.git_info.depth, 5);
    assert_eq!(
        job.git_info.refspecs,
        [
            format!("+refs/pipelines/{0}:refs/pipelines/{0}", p.id),
            "+refs/heads/main:refs/remotes/origin/main".to_owned()
        ]
    );
    assert!(job.artifacts.is_none());
    assert!(job.dependencies.is_empty());
    // The JSON the http layer sends keeps GitLab's shape.
    let json = serde_json::to_value(&job).unwrap();
    assert_eq!(json["git_info"]["ref"], "main");
    assert_eq!(json["artifacts"], serde_json::Value::Null);
}

/// A pipeline of `build` (which uploads an archive that expires in a second, and
/// succeeds) and `test`, which needs it: the env, project, pipeline, runner and `build`.
async fn built_with_an_expiring_archive() -> (
    Env,
    i64,
    gantry_server::coordinator::PipelineView,
    gantry_server::coordinator::Runner,
    gantry_protocol::JobResponse,
) {
    let e = env(r"
build: {stage: build, script: [make], artifacts: {paths: [out]}}
test: {stage: test, script: [make test]}
")
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let build = e.take_some(&runner).await;
    let params = ArtifactUploadParams {
        artifact_type: Some(ArtifactType::Archive),
        artifact_format: Some(ArtifactFormat::Zip),
        expire_in: Some("1 second".into()),
    };
    e.coord
        .upload_artifact(build.id, params, "artifacts.zip", b"PK zip")
        .await
        .unwrap();
    e.run(&build, true).await;
    (e, project, p, runner, build)
}

#[tokio::test]
async fn a_job_whose_dependency_expired_fails_missing_dependency() {
    let (e, project, p, runner, build) = built_with_an_expiring_archive().await;
    // A newer pipeline of the ref ended (canceled): this one, neither the newest nor a
    // successful one, no longer keeps its artifacts past their expiry.
    let newer = e.pipeline(project, "main").await;
    e.coord.cancel_pipeline(newer.id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(
        e.take(&runner).await.is_none(),
        "the job is dropped, not handed out"
    );
    let test = e
        .coord
        .pipeline_jobs(p.id)
        .await
        .unwrap()
        .into_iter()
        .find(|j| j.name == "test")
        .unwrap();
    assert_eq!(
        (test.status.as_str(), test.failure_reason.as_deref()),
        ("failed", Some("missing_dependency_failure"))
    );
    assert!(matches!(
        e.coord.artifacts().job_artifact(build.id).await,
        Err(gantry_server::coordinator::CoordinatorError::NotFound(_))
    ));
}

/// GitLab's "keep artifacts from the most recent successful jobs": the newest pipeline of
/// a ref keeps its artifacts past `expire_in`, as dependencies and for download.
#[tokio::test]
async fn the_newest_pipeline_of_a_ref_keeps_expired_artifacts() {
    let (e, _, _, runner, build) = built_with_an_expiring_archive().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let test = e.take(&runner).await.expect("the job is handed out");
    assert_eq!(test.job_info.name, "test");
    let dependency = &test.dependencies[0];
    assert_eq!(dependency.name, "build");
    assert_eq!(
        dependency
            .artifacts_file
            .as_ref()
            .map(|f| f.filename.as_str()),
        Some("artifacts.zip")
    );
    let (artifact, _) = e.coord.artifacts().job_artifact(build.id).await.unwrap();
    assert!(artifact.expire_at.is_some() && artifact.locked);
    let view = e.coord.job(build.id).await.unwrap();
    assert!(view.artifacts_file.is_some(), "{view:?}");
}

#[tokio::test]
async fn resource_groups_run_one_job_at_a_time() {
    let e = env("workflow: {auto_cancel: {on_new_commit: none}}\ndeploy: {script: [deploy], resource_group: production}\n").await;
    let project = e.project().await;
    let first = e.pipeline(project, "main").await;
    commit(&e.repo, &[("README", "x")], "second");
    let second = e.pipeline(project, "main").await;
    assert_eq!(e.statuses(first.id).await["deploy"], "pending");
    assert_eq!(
        e.statuses(second.id).await["deploy"],
        "waiting_for_resource"
    );
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert!(e.take(&runner).await.is_none(), "the resource is held");
    e.run(&job, true).await;
    assert_eq!(
        e.statuses(second.id).await["deploy"],
        "pending",
        "freed when the holder finished"
    );
}

#[tokio::test]
async fn a_new_commit_cancels_older_pipelines_that_did_not_start() {
    let e = env("build: {stage: build, script: [make]}\ntest: {stage: test, script: [t], interruptible: true}\n").await;
    let project = e.project().await;
    let old = e.pipeline(project, "main").await;
    commit(&e.repo, &[("README", "x")], "newer");
    let new = e.pipeline(project, "main").await;
    assert_eq!(
        e.status(old.id).await,
        "canceled",
        "nothing had started: conservative auto-cancel"
    );
    assert_eq!(e.status(new.id).await, "pending");
    // Once a non-interruptible job started, a newer commit leaves the pipeline alone.
    let runner = e.any_runner().await;
    let _build = e.take_some(&runner).await;
    commit(&e.repo, &[("README", "y")], "newest");
    let newest = e.pipeline(project, "main").await;
    assert_eq!(e.status(new.id).await, "running");
    assert_eq!(e.status(newest.id).await, "pending");
}

/// Instance CI/CD variables in the payload and at creation (`ci-yaml.md` §6.1): above
/// YAML (global and job) and dotenv variables, below project and pipeline variables;
/// protected ones only on protected refs; masked, file and raw reach the runner; rules
/// and environment names see them when the pipeline is created.
#[tokio::test]
async fn instance_variables_rank_between_dotenv_and_project_variables() {
    use gantry_store::InstanceVariable;
    let e = env(r#"
variables:
  GLOBAL_SHADOW: from-global-yaml
stages: [build, test]
build:
  stage: build
  rules:
    - if: $INSTANCE_GATE == "x"
  variables: {JOB_SHADOW: from-job-yaml}
  script: [make]
  artifacts:
    reports: {dotenv: build.env}
gated_off:
  stage: build
  rules:
    - if: $INSTANCE_GATE == "y"
  script: [never]
protected_only:
  stage: build
  rules:
    - if: $PROTECTED_TOKEN
  script: [deploy]
project_gate:
  stage: build
  rules:
    - if: $GATE == "project"
  environment: $TARGET_ENV
  script: [echo]
test:
  stage: test
  dependencies: [build]
  script: [make test]
"#)
    .await;
    git(&e.repo, &["branch", "feature"]);
    let project = e.project().await;
    let instance = |key: &str, value: &str| InstanceVariable::new(key, value);
    for v in [
        instance("INSTANCE_GATE", "x"),
        instance("PLAIN", "instance-plain"),
        instance("GLOBAL_SHADOW", "from-instance"),
        instance("JOB_SHADOW", "from-instance"),
        instance("DOTENV_SHADOW", "from-instance"),
        instance("PROJECT_SHADOW", "from-instance"),
        instance("PIPELINE_SHADOW", "from-instance"),
        instance("GATE", "instance"),
        instance("TARGET_ENV", "staging"),
        InstanceVariable {
            masked: true,
            ..instance("SECRET", "s3cr3t-instance")
        },
        InstanceVariable {
            variable_type: "file".into(),
            ..instance("CERT", "-----BEGIN CERT-----\nabc\n")
        },
        InstanceVariable {
            raw: true,
            ..instance("RAW", "$PLAIN")
        },
        InstanceVariable {
            protected: true,
            ..instance("PROTECTED_TOKEN", "pr0tected")
        },
    ] {
        e.coord
            .settings()
            .create_instance_variable(&v)
            .await
            .unwrap();
    }
    for (key, value) in [("PROJECT_SHADOW", "from-project"), ("GATE", "project")] {
        e.coord
            .settings()
            .create_variable(
                &VariableOwner::Project(project),
                &ProjectVariable::new(key, value),
            )
            .await
            .unwrap();
    }

    // main: the protected default branch.
    let p = e
        .coord
        .create_pipeline(
            project,
            "main",
            vec![("PIPELINE_SHADOW".into(), "from-pipeline".into())],
            gantry_pipeline::Source::Api,
        )
        .await
        .unwrap();
    let names: Vec<String> = e.statuses(p.id).await.into_keys().collect();
    assert_eq!(
        names,
        ["build", "project_gate", "protected_only", "test"],
        "rules saw the instance variables, below the project's"
    );
    let runner = e.any_runner().await;
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(e.take_some(&runner).await);
    }
    let job = |name: &str| jobs.iter().find(|j| j.job_info.name == name).unwrap();
    let build = job("build");
    assert_eq!(var(build, "PLAIN"), Some("instance-plain"));
    assert_eq!(var(build, "GLOBAL_SHADOW"), Some("from-instance"));
    assert_eq!(var(build, "JOB_SHADOW"), Some("from-instance"));
    assert_eq!(var(build, "PROJECT_SHADOW"), Some("from-project"));
    assert_eq!(var(build, "PIPELINE_SHADOW"), Some("from-pipeline"));
    assert_eq!(var(build, "PROTECTED_TOKEN"), Some("pr0tected"));
    let secret = build.variable("SECRET").unwrap();
    assert!(
        secret.masked && !secret.public && !secret.file,
        "{secret:?}"
    );
    let cert = build.variable("CERT").unwrap();
    assert!(cert.file && !cert.masked, "{cert:?}");
    assert_eq!(cert.value, "-----BEGIN CERT-----\nabc\n");
    let raw = build.variable("RAW").unwrap();
    assert!(raw.raw, "{raw:?}");
    assert_eq!(raw.value, "$PLAIN", "a raw value is not expanded");
    assert_eq!(
        var(job("project_gate"), "CI_ENVIRONMENT_NAME"),
        Some("staging"),
        "the environment name expands with instance variables"
    );

    // A dependency's dotenv variable loses to the instance variable of its key.
    e.coord
        .upload_artifact(
            build.id,
            ArtifactUploadParams {
                artifact_type: Some(ArtifactType::Dotenv),
                artifact_format: Some(ArtifactFormat::Gzip),
                expire_in: None,
            },
            "build.env.gz",
            &gzip("DOTENV_SHADOW=from-dotenv\nDOTENV_ONLY=yes\n"),
        )
        .await
        .unwrap();
    for j in &jobs {
        e.run(j, true).await;
    }
    let test = e.take_some(&runner).await;
    assert_eq!(test.job_info.name, "test");
    assert_eq!(var(&test, "DOTENV_ONLY"), Some("yes"));
    assert_eq!(var(&test, "DOTENV_SHADOW"), Some("from-instance"));
    e.run(&test, true).await;

    // feature: unprotected, so no protected instance variable, at creation nor in jobs.
    let p = e.pipeline(project, "feature").await;
    let names: Vec<String> = e.statuses(p.id).await.into_keys().collect();
    assert_eq!(names, ["build", "project_gate", "test"]);
    let job = e.take_some(&runner).await;
    assert_eq!(var(&job, "PROTECTED_TOKEN"), None, "{:?}", job.variables);
    assert_eq!(var(&job, "PLAIN"), Some("instance-plain"));
}

#[tokio::test]
async fn group_variables_rank_below_the_project_the_nearest_group_first() {
    let e = env(r#"
deploy:
  rules:
    - if: $GROUP_GATE == "subgroup"
  environment: production
  script: [deploy]
review:
  rules:
    - if: $GROUP_GATE == "root"
  script: [never]
check:
  rules:
    - if: $ROOT_ONLY == null
  script: [check]
"#)
    .await;
    let project = e
        .coord
        .create_project("acme/platform/widget", e.repo.to_str().unwrap())
        .await
        .unwrap()
        .id;
    let other = e
        .coord
        .create_project("other/app", e.repo.to_str().unwrap())
        .await
        .unwrap()
        .id;
    let group = |path: &str| VariableOwner::Group(path.to_owned());
    let scoped = |key: &str, value: &str, scope: &str| ProjectVariable {
        environment_scope: scope.to_owned(),
        ..ProjectVariable::new(key, value)
    };
    for (owner, v) in [
        (group("acme"), ProjectVariable::new("GROUP_GATE", "root")),
        (
            group("acme/platform"),
            ProjectVariable::new("GROUP_GATE", "subgroup"),
        ),
        (group("acme"), ProjectVariable::new("ROOT_ONLY", "root")),
        (
            group("acme"),
            scoped("URL", "root-production", "production"),
        ),
        (
            group("acme/platform"),
            scoped("URL", "subgroup-prod", "prod*"),
        ),
        (
            group("acme/platform"),
            ProjectVariable::new("SHADOW", "subgroup"),
        ),
        (
            VariableOwner::Project(project),
            ProjectVariable::new("SHADOW", "project"),
        ),
        (
            group("acme"),
            ProjectVariable {
                protected: true,
                ..ProjectVariable::new("DEPLOY_KEY", "k3y-for-main")
            },
        ),
    ] {
        e.coord
            .settings()
            .create_variable(&owner, &v)
            .await
            .unwrap();
    }
    // A group no project is in does not exist.
    let missing = e
        .coord
        .settings()
        .create_variable(&group("nobody"), &ProjectVariable::new("A", "b"))
        .await
        .unwrap_err();
    assert!(
        matches!(missing, SettingsError::NotFound("group")),
        "{missing:?}"
    );
    let taken = e
        .coord
        .settings()
        .create_variable(&group("acme"), &ProjectVariable::new("ROOT_ONLY", "again"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        taken.contains("the group has a variable `ROOT_ONLY`"),
        "{taken}"
    );

    let p = e.pipeline(project, "main").await;
    let names: Vec<String> = e.statuses(p.id).await.into_keys().collect();
    assert_eq!(
        names,
        ["deploy"],
        "rules saw the nearest group's GROUP_GATE"
    );
    let runner = e.any_runner().await;
    let deploy = e.take_some(&runner).await;
    assert_eq!(var(&deploy, "ROOT_ONLY"), Some("root"));
    assert_eq!(var(&deploy, "SHADOW"), Some("project"));
    assert_eq!(
        var(&deploy, "URL"),
        Some("subgroup-prod"),
        "the subgroup's pattern beats the root group's exact scope"
    );
    assert_eq!(var(&deploy, "DEPLOY_KEY"), Some("k3y-for-main"));
    e.run(&deploy, true).await;

    // Another namespace sees none of them.
    let p = e.pipeline(other, "main").await;
    let names: Vec<String> = e.statuses(p.id).await.into_keys().collect();
    assert_eq!(names, ["check"]);
    let check = e.take_some(&runner).await;
    assert_eq!(var(&check, "SHADOW"), None);
    assert_eq!(var(&check, "URL"), None);
}

fn gzip(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap()
}

/// `secrets:` (GitLab EE): a job whose variables enable no secrets provider fails
/// `secrets_provider_not_found` before a runner gets it, its log saying what to set; with
/// `VAULT_SERVER_URL` (or `AWS_REGION`) the payload carries the secrets as GitLab's
/// presenter sends them: normalized, each with its provider's server.
#[tokio::test]
async fn secrets_need_a_configured_provider_and_reach_the_payload_normalized() {
    let e = env(r#"
no_provider:
  script: [x]
  secrets:
    DB: {vault: app/db/password@secret}
vault:
  script: [x]
  variables: {VAULT_SERVER_URL: "http://vault.example:8200", VAULT_AUTH_ROLE: ci, AWS_REGION: eu-west-1}
  id_tokens: {VAULT_ID_TOKEN: {aud: "https://vault.example"}}
  secrets:
    DB: {vault: app/db/password@secret, file: false}
    KEY:
      aws_secrets_manager: "ci/key#value"
      token: $VAULT_ID_TOKEN
"#)
    .await;
    let project = e.project().await;
    let p = e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let job = e.take_some(&runner).await;
    assert_eq!(job.job_info.name, "vault");
    let secrets = job.secrets.as_ref().expect("secrets in the payload");
    assert_eq!(
        secrets["DB"],
        serde_json::json!({
            "vault": {
                "engine": {"name": "kv-v2", "path": "secret"},
                "path": "app/db",
                "field": "password",
                "server": {
                    "url": "http://vault.example:8200",
                    "namespace": null,
                    "auth": {"name": "jwt", "path": "jwt", "data": {"jwt": "$VAULT_ID_TOKEN", "role": "ci"}},
                },
            },
            "file": false,
        })
    );
    assert_eq!(
        secrets["KEY"]["aws_secrets_manager"],
        serde_json::json!({
            "secret_id": "ci/key",
            "field": "value",
            "server": {"region": "eu-west-1", "jwt": "$VAULT_ID_TOKEN", "role_arn": null, "role_session_name": null},
        })
    );
    assert!(
        e.take(&runner).await.is_none(),
        "the other job never starts"
    );
    let jobs = e.coord.pipeline_jobs(p.id).await.unwrap();
    let refused = jobs.iter().find(|j| j.name == "no_provider").unwrap();
    assert_eq!(
        (refused.status.as_str(), refused.failure_reason.as_deref()),
        ("failed", Some("secrets_provider_not_found"))
    );
    let log = String::from_utf8(e.coord.traces().trace(refused.id).await.unwrap()).unwrap();
    assert!(
        log.contains("no secrets provider is configured: set `VAULT_SERVER_URL`"),
        "{log}"
    );
}

/// A project `acme/app` whose pipelines run one job per stage, `first` to `third`.
async fn three_stages_of_acme_app() -> (Env, i64) {
    let e = env(r#"
first:
  stage: build
  script: [a]
second:
  stage: test
  script: [b]
third:
  stage: deploy
  script: [c]
"#)
    .await;
    let project = e
        .coord
        .create_project("acme/app", e.repo.to_str().unwrap())
        .await
        .unwrap()
        .id;
    (e, project)
}

/// Settings variables are read once and kept (`variables::SettingsCache`): a change made
/// through the coordinator — an instance, group or project variable updated, created or
/// deleted — reaches the very next job's payload, as GitLab reads them per job.
#[tokio::test]
async fn a_changed_variable_reaches_the_next_job_at_once() {
    let (e, project) = three_stages_of_acme_app().await;
    let owner = VariableOwner::Project(project);
    let group = VariableOwner::Group("acme".to_owned());
    let instance = |value: &str| gantry_store::InstanceVariable::new("FROM_INSTANCE", value);
    e.coord
        .settings()
        .create_instance_variable(&instance("one"))
        .await
        .unwrap();
    e.coord
        .settings()
        .create_variable(&owner, &ProjectVariable::new("FROM_PROJECT", "one"))
        .await
        .unwrap();
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let first = e.take_some(&runner).await;
    assert_eq!(var(&first, "FROM_INSTANCE"), Some("one"));
    assert_eq!(var(&first, "FROM_PROJECT"), Some("one"));
    assert_eq!(var(&first, "FROM_GROUP"), None);

    e.coord
        .settings()
        .update_instance_variable("FROM_INSTANCE", &instance("two"))
        .await
        .unwrap();
    e.coord
        .settings()
        .update_variable(
            &owner,
            "FROM_PROJECT",
            "*",
            &ProjectVariable::new("FROM_PROJECT", "two"),
        )
        .await
        .unwrap();
    e.coord
        .settings()
        .create_variable(&group, &ProjectVariable::new("FROM_GROUP", "new"))
        .await
        .unwrap();
    e.run(&first, true).await;
    let second = e.take_some(&runner).await;
    assert_eq!(var(&second, "FROM_INSTANCE"), Some("two"));
    assert_eq!(var(&second, "FROM_PROJECT"), Some("two"));
    assert_eq!(var(&second, "FROM_GROUP"), Some("new"));

    e.coord
        .settings()
        .delete_variable(&owner, "FROM_PROJECT", "*")
        .await
        .unwrap();
    e.coord
        .settings()
        .delete_instance_variable("FROM_INSTANCE")
        .await
        .unwrap();
    e.run(&second, true).await;
    let third = e.take_some(&runner).await;
    assert_eq!(var(&third, "FROM_INSTANCE"), None);
    assert_eq!(var(&third, "FROM_PROJECT"), None);
    assert_eq!(var(&third, "FROM_GROUP"), Some("new"));
}

/// What a pipeline's jobs take from merge requests (`CI_OPEN_MERGE_REQUESTS`, and the
/// `CI_MERGE_REQUEST_*` of a merge request pipeline) is read once per pipeline and kept;
/// a merge request opened or changed through the coordinator reaches the pipeline's next
/// job at once, as GitLab computes these per job.
#[tokio::test]
async fn a_merge_request_opened_mid_pipeline_reaches_its_next_job() {
    let (e, project) = three_stages_of_acme_app().await;
    e.pipeline(project, "main").await;
    let runner = e.any_runner().await;
    let first = e.take_some(&runner).await;
    assert_eq!(var(&first, "CI_OPEN_MERGE_REQUESTS"), None);

    let mut request = gantry_store::NewMergeRequest {
        project_id: project,
        iid: 0,
        forge: "gitlab".to_owned(),
        state: "opened".to_owned(),
        title: "Ship it".to_owned(),
        source_branch: "main".to_owned(),
        target_branch: "release".to_owned(),
        ..gantry_store::NewMergeRequest::default()
    };
    let opened = e.coord.upsert_merge_request(&request).await.unwrap();
    e.run(&first, true).await;
    let second = e.take_some(&runner).await;
    assert_eq!(
        var(&second, "CI_OPEN_MERGE_REQUESTS"),
        Some(format!("acme/app!{}", opened.iid).as_str())
    );

    request.iid = opened.iid;
    request.state = "merged".to_owned();
    e.coord.upsert_merge_request(&request).await.unwrap();
    e.run(&second, true).await;
    let third = e.take_some(&runner).await;
    assert_eq!(var(&third, "CI_OPEN_MERGE_REQUESTS"), None);
}

/// GitLab's `Builder::Release`: a tag pipeline's jobs see their tag's release's description
/// as `CI_RELEASE_DESCRIPTION`, above every other variable — the jobs after the job that
/// made the release too (GitLab reads it per job) — and a job's rules see it, but not
/// `workflow:rules` (GitLab's `config_variables` have no release).
#[tokio::test]
async fn a_tag_s_release_reaches_its_jobs_and_their_rules() {
    let e = env(r#"
workflow:
  rules:
    - if: $CI_RELEASE_DESCRIPTION
      when: never
    - when: always
stages: [build, release, after]
build: {stage: build, script: [make]}
publish:
  stage: release
  script: [make]
  release: {tag_name: $CI_COMMIT_TAG, description: First notes}
notes:
  stage: after
  script: [make]
  variables: {CI_RELEASE_DESCRIPTION: from yaml}
with_release:
  stage: after
  script: [make]
  rules:
    - if: $CI_RELEASE_DESCRIPTION == "First notes"
"#)
    .await;
    let project = e.project().await;
    git(&e.repo, &["tag", "-a", "v1.0", "-m", "release one"]);
    let first = e.pipeline(project, "v1.0").await;
    // No release yet: the rule is false.
    assert!(!e.statuses(first.id).await.contains_key("with_release"));
    let runner = e.any_runner().await;
    let build = e.take_some(&runner).await;
    assert_eq!(var(&build, "CI_RELEASE_DESCRIPTION"), None);
    e.run(&build, true).await;
    let publish = e.take_some(&runner).await;
    // A runner already waits for the next stage's job as the release job succeeds: the
    // release exists before that job is handed out (it is made before the job ends).
    let waiting = tokio::spawn({
        let (coord, runner) = (e.coord.clone(), runner.clone());
        async move {
            coord
                .request_job(&runner, None, Duration::from_secs(10))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    e.run(&publish, true).await;
    let notes = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("the next stage's job");
    assert_eq!(notes.job_info.name, "notes");
    let description = notes
        .variables
        .iter()
        .rfind(|v| v.key == "CI_RELEASE_DESCRIPTION")
        .expect("the release's description");
    // Above the job's own variable of that name, raw, public.
    assert_eq!(description.value, "First notes");
    assert!(description.raw && description.public && !description.masked);
    e.run(&notes, true).await;

    // The next pipeline of the tag: the job's rule sees the release, the workflow's not.
    let second = e.pipeline(project, "v1.0").await;
    assert!(e.statuses(second.id).await.contains_key("with_release"));
    // A branch pipeline has none.
    let branch = e.pipeline(project, "main").await;
    assert!(!e.statuses(branch.id).await.contains_key("with_release"));
}

/// A release that cannot be made fails its job, as `release-cli`'s exit does on GitLab:
/// a branch pipeline's `tag_name: $CI_COMMIT_TAG` is empty, and a tag's second release
/// already exists. The job is `failed` (`script_failure`), the runner's log kept and
/// the reason at its end; the first release of the tag stands.
#[tokio::test]
async fn a_release_that_cannot_be_made_fails_its_job() {
    let e = env(r#"
publish:
  script: [make]
  release: {tag_name: $CI_COMMIT_TAG, description: Notes}
"#)
    .await;
    let project = e.project().await;
    let runner = e.any_runner().await;
    let publish = async |r: &str| {
        let pipeline = e.pipeline(project, r).await;
        let job = e.take_some(&runner).await;
        let answer = e.run(&job, true).await;
        (pipeline.id, job.id, answer.job_status.to_string())
    };
    let log_of =
        async |job: i64| String::from_utf8(e.coord.traces().trace(job).await.unwrap()).unwrap();
    let failure = async |pipeline: i64| {
        let jobs = e.coord.pipeline_jobs(pipeline).await.unwrap();
        (jobs[0].failure_reason.clone(), jobs[0].exit_code)
    };

    let (branch, job, status) = publish("main").await;
    assert_eq!(status, "failed", "the runner is told");
    assert_eq!(e.status(branch).await, "failed");
    assert_eq!(
        failure(branch).await,
        (Some("script_failure".to_owned()), Some(1))
    );
    assert_eq!(
        log_of(job).await,
        "running publish\n\u{1b}[31;1mERROR: release not created: release:tag_name is empty once expanded\u{1b}[0;m\n"
    );

    git(&e.repo, &["tag", "v1.0"]);
    let (first, _, status) = publish("v1.0").await;
    assert_eq!(
        (status.as_str(), e.status(first).await.as_str()),
        ("success", "success")
    );
    let (second, job, status) = publish("v1.0").await;
    assert_eq!(status, "failed");
    assert_eq!(failure(second).await.0.as_deref(), Some("script_failure"));
    let log = log_of(job).await;
    assert!(log.starts_with("running publish\n"), "{log}");
    assert!(
        log.contains("release not created") && log.contains("Release already exists"),
        "{log}"
    );
    let releases = e.coord.releases(project).await.unwrap();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].description, "Notes");
}
