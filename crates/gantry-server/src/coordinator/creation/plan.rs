//! The planning step of a pipeline's creation: from a compiled pipeline and what its
//! creation read (predefined variables, the variables environments are expanded with,
//! `cache:key:files` keys), the job rows to store — without I/O, so what GitLab decides
//! when it creates a pipeline's jobs is tested with plain values (snapshots below): the
//! deployments limit, each job's environment, Pages prefix and resource group expanded
//! with the job's variables, a job whose environment cannot be created made `failed`
//! (`environment_creation_failure`), what each row's spec stores.
//!
//! Cost: O(jobs); a job's variables are made only for a job with an environment, a
//! resource group or Pages (making them for each of 2,000 jobs took about 90 ms).

use std::collections::HashMap;

use gantry_store::NewJob;
use indexmap::IndexMap;

use crate::processor::{FailureReason, Status};

use super::super::environment::JobEnvironment;
use super::super::payload::creation_variables;
use super::super::spec::{StoredAutoCancel, StoredSpec};

/// The most jobs of one pipeline that deploy (`environment:` with action `start`): GitLab's
/// `ci_pipeline_deployments` plan limit, 500 by default. A pipeline with more fails
/// `deployments_limit_exceeded`.
pub const MAX_DEPLOYMENTS_PER_PIPELINE: usize = 500;

/// What a pipeline's job rows are planned from.
pub(crate) struct Scope<'a> {
    pub pipeline: &'a gantry_pipeline::Pipeline,
    /// The pipeline's predefined variables ([`gantry_pipeline::PipelineInfo::predefined`]).
    pub predefined: &'a IndexMap<String, String>,
    /// What environment names are expanded with besides a job's own variables: the
    /// instance variables, the group and project variables of scope `*` (as the job's
    /// rules saw them), then the pipeline variables, lowest first.
    pub environment_variables: &'a [(String, String)],
    /// Each job's cache keys, in the order of its `cache:` entries (one list per job of
    /// `pipeline.jobs`; a missing list is no keys).
    pub cache_keys: Vec<Vec<String>>,
    /// Whether the pipeline's ref is protected (its jobs are).
    pub protected: bool,
}

/// The rows of a pipeline's jobs.
#[derive(Debug)]
pub(crate) struct Planned {
    pub jobs: Vec<NewJob>,
    /// Jobs created `failed` because their environment cannot be created: their names
    /// and why, for their logs.
    pub refused_environments: Vec<(String, String)>,
}

/// GitLab's error when a pipeline deploys to more environments than
/// [`MAX_DEPLOYMENTS_PER_PIPELINE`]; `None` within the limit.
pub(crate) fn deployments_refusal(pipeline: &gantry_pipeline::Pipeline) -> Option<String> {
    let deployments = pipeline
        .jobs
        .iter()
        .filter_map(|j| j.environment.as_ref())
        .filter(|e| e.action.is_empty() || e.action == "start")
        .count();
    (deployments > MAX_DEPLOYMENTS_PER_PIPELINE).then(|| {
        format!(
            "Pipeline has too many deployments! Requested {deployments}, but the limit is {MAX_DEPLOYMENTS_PER_PIPELINE}."
        )
    })
}

/// The job rows of `scope.pipeline`, in its job order.
pub(crate) fn jobs(scope: &Scope<'_>) -> Planned {
    let pipeline = scope.pipeline;
    let auto_cancel = StoredAutoCancel {
        on_new_commit: pipeline.auto_cancel.on_new_commit.clone(),
        on_job_failure: pipeline.auto_cancel.on_job_failure.clone(),
    };
    let mut jobs = Vec::with_capacity(pipeline.jobs.len());
    let mut refused_environments: Vec<(String, String)> = Vec::new();
    let mut cache_keys = scope.cache_keys.iter();
    for job in &pipeline.jobs {
        let mut model = job.clone();
        // What the job's environment and resource group are expanded with: every
        // variable of the job, expanded.
        let mut variables = if model.environment.is_some()
            || model.resource_group.is_some()
            || model.pages.is_some()
        {
            creation_variables(&model, scope.predefined, scope.environment_variables)
        } else {
            HashMap::new()
        };
        let environment = model
            .environment
            .as_ref()
            .map(|env| JobEnvironment::expand(env, &variables));
        // The resource group's key, expanded as GitLab expands it (the environment's
        // name among the variables).
        if let Some(env) = &environment {
            variables.insert("CI_ENVIRONMENT_NAME".to_owned(), env.name.clone());
        }
        if let Some(pages) = &model.pages {
            model.pages = Some(super::super::pages::expand_pages(pages, &variables));
        }
        model.resource_group = model
            .resource_group
            .take()
            .and_then(|key| super::super::resource_groups::expand_key(&key, &variables));
        // GitLab creates a job whose environment cannot be created as failed.
        let persisted = match (&model.environment, &environment) {
            (Some(model), Some(expanded)) => Some(expanded.to_new(model)),
            _ => None,
        };
        let (status, failure_reason, persisted) = match persisted {
            Some(Err(why)) => {
                refused_environments.push((job.name.clone(), why));
                (
                    Status::Failed,
                    Some(
                        FailureReason::EnvironmentCreationFailure
                            .as_str()
                            .to_owned(),
                    ),
                    None,
                )
            }
            Some(Ok(e)) => (Status::Created, None, Some(e)),
            None => (Status::Created, None, None),
        };
        let spec = StoredSpec {
            environment,
            job: model,
            stages: pipeline.stages.clone(),
            auto_cancel: auto_cancel.clone(),
            pipeline_name: pipeline.name.clone(),
            cache_keys: cache_keys.next().cloned().unwrap_or_default(),
            enqueue_immediately: false,
            manual_variables: Vec::new(),
            manual_variables_sealed: None,
            input_values: None,
        };
        jobs.push(NewJob {
            name: job.name.clone(),
            stage: job.stage.clone(),
            stage_idx: i64::try_from(job.stage_idx).unwrap_or(0),
            status,
            attempt: 1,
            allow_failure: job.allow_failure,
            spec: spec.to_json(),
            tags: job.tags.clone(),
            protected: scope.protected,
            bridge: job.trigger.is_some(),
            failure_reason,
            environment: persisted,
            resource_group: spec.job.resource_group.clone(),
        });
    }
    Planned {
        jobs,
        refused_environments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> gantry_pipeline::PipelineInfo {
        gantry_pipeline::PipelineInfo {
            ref_name: "feature/x".into(),
            sha: "3b1c4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d".into(),
            before_sha: Some("0".repeat(40)),
            commit_message: "Deploy it".into(),
            project_name: "app".into(),
            project_namespace: "group".into(),
            project_id: 3,
            server_url: "https://ci.example.com".into(),
            pipeline_iid: 2,
            ..Default::default()
        }
    }

    fn compiled(yaml: &str) -> gantry_pipeline::Pipeline {
        let loader = gantry_pipeline::MemoryLoader::new().with(".gitlab-ci.yml", yaml);
        let ctx = gantry_pipeline::Context::new(&info(), &[], None);
        let out = gantry_pipeline::compile(&gantry_pipeline::Options::default(), &ctx, &loader);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        out.pipeline.expect("a valid pipeline")
    }

    /// The rows as a reader checks them: each row's columns, and of its spec what
    /// creation decided (not the compiled job, which the YAML processor's tests hold).
    fn shown(planned: &Planned) -> serde_json::Value {
        let jobs: Vec<serde_json::Value> = planned
            .jobs
            .iter()
            .map(|j| {
                let spec = StoredSpec::parse(&j.spec).expect("a stored spec");
                serde_json::json!({
                    "name": j.name,
                    "stage": [j.stage_idx, j.stage],
                    "status": j.status.as_str(),
                    "failure_reason": j.failure_reason,
                    "protected": j.protected,
                    "bridge": j.bridge,
                    "tags": j.tags,
                    "allow_failure": j.allow_failure,
                    "environment": j.environment.as_ref().map(|e| format!("{e:?}")),
                    "resource_group": j.resource_group,
                    "spec": {
                        "environment": spec.environment.as_ref().map(|e| format!("{e:?}")),
                        "pages": spec.job.pages.as_ref().map(|p| format!("{p:?}")),
                        "cache_keys": spec.cache_keys,
                        "stages": spec.stages,
                        "auto_cancel": [spec.auto_cancel.on_new_commit, spec.auto_cancel.on_job_failure],
                        "pipeline_name": spec.pipeline_name,
                    },
                })
            })
            .collect();
        serde_json::json!({
            "jobs": jobs,
            "refused_environments": planned.refused_environments,
        })
    }

    const CI: &str = r#"
workflow:
  name: "Deploy $CI_COMMIT_REF_NAME"
  auto_cancel: {on_new_commit: interruptible, on_job_failure: all}
variables:
  REGION: eu
stages: [build, deploy, trigger]
build:
  stage: build
  tags: [docker, linux]
  cache:
    - {key: {files: [Cargo.lock], prefix: rust}, paths: [target]}
    - {key: plain, paths: [vendor]}
  script: [make]
review:
  stage: deploy
  variables: {APP: shop}
  environment: {name: "review/$CI_COMMIT_REF_SLUG", url: "https://$APP.$REGION.example.com", auto_stop_in: 1 day}
  resource_group: "deploy-$CI_ENVIRONMENT_NAME"
  allow_failure: true
  script: [deploy]
broken:
  stage: deploy
  environment: {name: "review/$UNDEFINED"}
  script: [deploy]
pages:
  stage: deploy
  pages: {path_prefix: "$CI_COMMIT_REF_SLUG"}
  script: [build-site]
  artifacts: {paths: [public]}
stop:
  stage: deploy
  environment: {name: production, action: stop}
  when: manual
  script: [stop]
downstream:
  stage: trigger
  trigger: {include: child.yml}
"#;

    #[test]
    fn a_pipeline_s_rows_carry_what_its_creation_decided() {
        let pipeline = compiled(CI);
        let predefined = info().predefined();
        let environment_variables = vec![
            ("INSTANCE".to_owned(), "i".to_owned()),
            ("REGION".to_owned(), "us".to_owned()),
        ];
        let planned = jobs(&Scope {
            pipeline: &pipeline,
            predefined: &predefined,
            environment_variables: &environment_variables,
            cache_keys: vec![vec!["rust-0123".to_owned(), "plain".to_owned()]],
            protected: true,
        });
        assert_eq!(planned.jobs.len(), pipeline.jobs.len());
        insta::assert_json_snapshot!(shown(&planned));
    }

    #[test]
    fn a_pipeline_deploying_past_the_limit_is_refused_with_gitlab_s_message() {
        let mut yaml = String::from("stages: [deploy]\n");
        for n in 0..=MAX_DEPLOYMENTS_PER_PIPELINE {
            yaml.push_str(&format!(
                "d{n}:\n  stage: deploy\n  environment: env{n}\n  script: [x]\n"
            ));
        }
        // Stopping an environment is no deployment.
        yaml.push_str("halt:\n  stage: deploy\n  environment: {name: env0, action: stop}\n  when: manual\n  script: [x]\n");
        let pipeline = compiled(&yaml);
        assert_eq!(
            deployments_refusal(&pipeline).as_deref(),
            Some("Pipeline has too many deployments! Requested 501, but the limit is 500.")
        );
        let within = compiled(
            "d:\n  environment: a\n  script: [x]\nhalt:\n  environment: {name: a, action: stop}\n  when: manual\n  script: [x]\n",
        );
        assert_eq!(deployments_refusal(&within), None);
    }
}
