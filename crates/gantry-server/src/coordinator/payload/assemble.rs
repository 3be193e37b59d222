//! The assembly step of a job's payload: [`assemble`] puts the job's rows, its runner and
//! what the read step found ([`PayloadFacts`]) together into the runner's
//! [`JobResponse`], without I/O. Everything GitLab decides about a payload is here — the
//! variables and their precedence, dependencies and their expiry, steps, cache keys,
//! refspecs, ID tokens, secrets — so it is tested with plain values (snapshots below),
//! no database.

use std::collections::HashMap;

use gantry_pipeline::expand::{Unknown, expand_server, ref_slug};
use gantry_protocol::{
    ArtifactsFile, Cache, CachePolicy, Dependency, GitInfo, Hook, HookName, JobFeatures, JobInfo,
    JobResponse, JobVariable, ObjectFormat, RefType, RunnerInfo, Step, StepName,
};

use crate::processor::FailureReason;

use super::super::environment::{self, JobEnvironment};
use super::super::error::Result;
use super::super::projects::{full_path, project_path};
use super::super::variables::PipelineVariables;
use super::super::{id_tokens, instance_variables, job_inputs, job_secrets, variables};
use super::{
    Assigned, PayloadFacts, PayloadRunner, Refusal, Vars, artifacts, artifacts_when,
    creation_variables, image, service,
};

/// Variables a payload is expected to have room for at first: GitLab's predefined ones
/// and a few dozen of the job's own; more only grow the map.
const PAYLOAD_VARIABLES: usize = 128;

/// A time as GitLab's variables give it: Ruby's `Time#iso8601`, whole seconds in UTC
/// (`2026-01-31T10:00:00Z`; the API's times have milliseconds).
fn variable_time(ms: i64) -> String {
    gantry_protocol::time::rfc3339_secs(ms.div_euclid(1000))
}

/// The clone URL with the job token under `external_url`:
/// `{scheme}://gitlab-ci-token:TOKEN@{host}/{path}.git`.
fn clone_url(external_url: &str, project_name: &str, job_token: &str) -> String {
    let (scheme, rest) = external_url
        .split_once("://")
        .unwrap_or(("http", external_url));
    format!(
        "{scheme}://gitlab-ci-token:{job_token}@{rest}/{}.git",
        full_path(project_name)
    )
}

/// The payload of the job `a`, assigned to `runner` at `now` (ms), from `facts`. The
/// inner `Err` says why the job cannot start: a dependency's artifacts expired
/// (`missing_dependency_failure`, §3.4) or its `secrets:` have no provider. The outer
/// one is a signing failure of an ID token.
pub(crate) fn assemble(
    a: &Assigned<'_>,
    runner: &PayloadRunner<'_>,
    facts: &PayloadFacts,
    now: i64,
) -> Result<std::result::Result<JobResponse, Refusal>> {
    let (job, spec, pipeline, project, job_token, queue) =
        (a.job, a.spec, a.pipeline, a.project, a.token, a.queue);
    let m = &spec.job;
    let timeout = job.timeout_secs.unwrap_or(project.timeout_secs);
    let base = facts.external_url.as_str();
    let path = full_path(&project.name);
    let repo_url = clone_url(base, &project.name, job_token);

    // Dependencies: artifacts to download, dotenv variables to inherit.
    let mut dependencies = Vec::with_capacity(facts.dependencies.len());
    let mut dotenv: Vec<(String, String)> = Vec::new();
    for d in &facts.dependencies {
        let arts = &d.artifacts;
        if arts
            .iter()
            .any(|a| a.file_type == "archive" && a.expired(now))
        {
            return Ok(Err(Refusal::MissingDependency(format!(
                "the artifacts of `{}` expired",
                d.name
            ))));
        }
        let archive = arts
            .iter()
            .find(|a| a.file_type == "archive" && !a.expired(now));
        dependencies.push(Dependency {
            id: d.id,
            name: d.name.clone(),
            token: job_token.to_owned(),
            artifacts_file: archive.map(|a| ArtifactsFile {
                filename: a.filename.clone(),
                size: u64::try_from(a.size).unwrap_or(0),
            }),
        });
        if arts
            .iter()
            .any(|a| a.file_type == "dotenv" && !a.expired(now))
        {
            dotenv.extend(d.dotenv.iter().cloned());
        }
    }

    // Variables, lowest precedence first.
    let info = &facts.info;
    let mut vars = Vars::with_capacity(PAYLOAD_VARIABLES);
    vars.public("CI_JOB_ID", job.id.to_string());
    vars.public("CI_JOB_URL", format!("{base}/{path}/-/jobs/{}", job.id));
    // GitLab's `Project#pages_variables` (Pages is always on) and
    // `Ci::Build#pages_variables`: a prefixed Pages job's URL names its prefix.
    let pages = &facts.pages;
    vars.public("CI_PAGES_DOMAIN", pages.domain.clone());
    vars.public("CI_PAGES_HOSTNAME", pages.domain.clone());
    vars.public("CI_PAGES_URL", pages.url.clone());
    // GitLab's `Ci::Variables::Builder#predefined_variables`: a trigger token's pipeline.
    if let Some(short) = &pipeline.trigger_short_token {
        vars.public("CI_TRIGGER_SHORT_TOKEN", short.clone());
    }
    vars.set("CI_JOB_TOKEN", job_token, false, true, false);
    // The job span's W3C context (`telemetry.rs`): the runner's spans and the job's
    // own tools continue the pipeline's trace. Only while the coordinator traces.
    if let Some(traceparent) = &facts.traceparent {
        vars.public("TRACEPARENT", traceparent.clone());
    }
    if let Some(started) = job.started_at {
        vars.public("CI_JOB_STARTED_AT", variable_time(started));
        // `Gitlab::Utils.slugify(started_at.iso8601)` (GitLab 18.7).
        vars.public("CI_JOB_STARTED_AT_SLUG", ref_slug(&variable_time(started)));
    }
    // GitLab's `Ci::Build#persisted_variables` sets both whether or not a registry is
    // configured: the job token is the registry password, `gitlab-ci-token` its user.
    // (Gantry hands out no registry tokens itself; a job logging in to `--registry-url`
    // with them needs a registry that accepts the job token — else project variables of
    // these names replace them, as on GitLab with an external registry.)
    vars.public("CI_REGISTRY_USER", "gitlab-ci-token");
    vars.set("CI_REGISTRY_PASSWORD", job_token, false, true, false);
    vars.set("CI_REPOSITORY_URL", repo_url.clone(), false, false, false);
    vars.public("CI_PIPELINE_ID", pipeline.id.to_string());
    vars.public(
        "CI_PIPELINE_URL",
        format!("{base}/{path}/-/pipelines/{}", pipeline.id),
    );
    vars.public("CI_PIPELINE_CREATED_AT", variable_time(pipeline.created_at));
    vars.public("CI_JOB_NAME", job.name.clone());
    vars.public("CI_JOB_NAME_SLUG", ref_slug(&job.name));
    vars.public("CI_JOB_STAGE", job.stage.clone());
    vars.public(
        "CI_JOB_GROUP_NAME",
        if m.group_name.is_empty() {
            job.name.clone()
        } else {
            m.group_name.clone()
        },
    );
    if matches!(
        m.when,
        gantry_pipeline::When::Manual | gantry_pipeline::When::Delayed
    ) {
        vars.public("CI_JOB_MANUAL", "true");
    }
    if let Some(i) = m.node_index {
        vars.public("CI_NODE_INDEX", i.to_string());
    }
    vars.public("CI_NODE_TOTAL", m.node_total.unwrap_or(1).to_string());
    vars.public("CI_JOB_TIMEOUT", timeout.to_string());
    // GitLab's `image_name`: the name as written (the runner expands it), so a
    // custom executor's driver can pick the environment (`CUSTOM_ENV_CI_JOB_IMAGE`).
    if let Some(image) = m.image.as_ref().filter(|i| !i.name.is_empty()) {
        vars.public("CI_JOB_IMAGE", image.name.clone());
    }
    // GitLab's `Builder::Pipeline` appends it whether or not `workflow:name` gave the
    // pipeline a name (`null` then, which the runner exports as an empty value).
    vars.public(
        "CI_PIPELINE_NAME",
        spec.pipeline_name.clone().unwrap_or_default(),
    );
    let predefined = info.predefined();
    let mut user_vars = Vec::new();
    for (k, v) in &predefined {
        if k.starts_with("GITLAB_USER_") {
            user_vars.push((k.clone(), v.clone()));
        } else {
            vars.public(k, v.clone());
        }
    }
    // The project's "Git shallow clone" setting, below the job's own `GIT_DEPTH`.
    if let Some(depth) = project.ci_default_git_depth {
        vars.public("GIT_DEPTH", depth.to_string());
    }
    let PipelineVariables {
        values: pipeline_vars,
        files: pipeline_files,
        raw: pipeline_raw,
    } = &facts.pipeline_variables;
    let mut environment_name = None;
    let mut environment_url = None;
    // The environment row (GitLab's `persisted_environment`): its id, slug and tier,
    // and its URL when the job gives none.
    let persisted = &facts.environment;
    if let Some(env) = &m.environment {
        // Expanded when the pipeline was created (older rows: now, the same way).
        let expanded = spec.environment.clone().unwrap_or_else(|| {
            let scope = creation_variables(m, &predefined, pipeline_vars);
            JobEnvironment::expand(env, &scope)
        });
        environment_name = Some(expanded.name.clone());
        vars.public("CI_ENVIRONMENT_NAME", expanded.name.clone());
        vars.public("CI_ENVIRONMENT_SLUG", environment::slug(&expanded.name));
        vars.public("CI_ENVIRONMENT_ACTION", env.action().to_owned());
        // (Rows created before the tier was expanded have the declared one only.)
        let declared = || env.deployment_tier.clone().filter(|t| !t.contains('$'));
        let tier = expanded.tier.clone().or_else(declared).unwrap_or_else(|| {
            persisted.as_ref().map_or_else(
                || environment::guess_tier(&expanded.name).to_owned(),
                |p| p.tier.clone(),
            )
        });
        vars.public("CI_ENVIRONMENT_TIER", tier);
        if let Some(p) = &persisted {
            vars.public("CI_ENVIRONMENT_ID", p.id.to_string());
        }
        // GitLab's `environment_url`: the URL as written (expanded below with the job's
        // final variables, CI/CD and dotenv ones too), else the stored one.
        environment_url = env
            .url
            .clone()
            .or_else(|| persisted.as_ref()?.external_url.clone());
        if let Some(url) = &environment_url {
            vars.public("CI_ENVIRONMENT_URL", url.clone());
        }
    }
    vars.public("CI_RUNNER_ID", runner.id.to_string());
    vars.public("CI_RUNNER_DESCRIPTION", runner.description);
    vars.public(
        "CI_RUNNER_TAGS",
        serde_json::to_string(runner.tags).unwrap_or_else(|_| "[]".into()),
    );
    vars.yaml(&m.inherited_variables);
    vars.yaml(&m.variables);
    for (k, v) in user_vars {
        vars.public(&k, v);
    }
    for (k, v) in &dotenv {
        vars.public(k, v.clone());
    }
    for v in instance_variables::for_job(&facts.instance_variables, pipeline.protected) {
        let file = v.variable_type == variables::FILE;
        vars.setting(&v.key, &v.value, v.masked, file, v.raw);
    }
    for v in variables::for_job(
        &facts.settings_variables,
        pipeline.protected,
        environment_name.as_deref(),
    ) {
        let file = v.variable_type == variables::FILE;
        vars.setting(&v.key, &v.value, v.masked, file, v.raw);
    }
    for (k, v) in pipeline_vars {
        let raw = pipeline_raw.contains(k);
        vars.set(k, v.clone(), false, false, raw);
        if pipeline_files.contains(k) {
            if let Some(var) = vars.map.get_mut(k) {
                var.file = true;
            }
        }
    }
    for (k, v) in &facts.manual_variables {
        vars.set(k, v.clone(), false, false, false);
    }
    // GitLab's `Builder::Release`, after every source above: a tag's release, raw.
    if let Some(description) = info.release_description.as_ref().filter(|_| pipeline.tag) {
        vars.set(
            "CI_RELEASE_DESCRIPTION",
            description.clone(),
            true,
            false,
            true,
        );
    }
    // GitLab's `persisted_environment_variables`, after every other source: a job whose
    // environment is stored gets its slug and URL whatever a variable of that name says.
    if let Some(row) = persisted.as_ref().filter(|_| m.environment.is_some()) {
        vars.public("CI_ENVIRONMENT_SLUG", row.slug.clone());
        if let Some(url) = environment_url {
            vars.public("CI_ENVIRONMENT_URL", url);
        }
    }
    let git_depth = vars
        .map
        .get("GIT_DEPTH")
        .and_then(|v| v.value.trim().parse::<i64>().ok())
        .unwrap_or(0)
        .max(0);
    let mut variables = vars.expand();
    // `id_tokens:` (GitLab adds them last, masked): JWTs signed with the instance's key.
    if let (Some(tokens), Some(key)) = (&m.id_tokens, &facts.id_token_key) {
        let values: HashMap<String, String> = variables
            .iter()
            .map(|v| (v.key.clone(), v.value.clone()))
            .collect();
        let expand =
            |text: &str| expand_server(text, &|n: &str| values.get(n).cloned(), Unknown::Empty);
        let (namespace, _) = project_path(&project.name);
        let env = m.environment.as_ref().zip(environment_name.as_deref());
        let tier = values
            .get("CI_ENVIRONMENT_TIER")
            .cloned()
            .unwrap_or_default();
        let claims = id_tokens::JobClaims {
            namespace_path: &namespace,
            project_path: &path,
            project_id: project.id,
            pipeline_id: pipeline.id,
            pipeline_source: &pipeline.source,
            job_id: job.id,
            // A merge request pipeline's token names its source branch (GitLab's
            // `source_ref`), as `CI_COMMIT_REF_NAME` does.
            ref_name: &info.ref_name,
            tag: pipeline.tag,
            ref_protected: pipeline.protected,
            sha: &pipeline.sha,
            runner_id: runner.id,
            ci_config_path: &project.ci_config_path,
            environment: env.map(|(e, name)| (name, e.action(), tier.as_str())),
            timeout_secs: timeout,
            now_secs: now.div_euclid(1000),
        };
        let issuer = id_tokens::issuer(&facts.external_url);
        for (key, token) in id_tokens::sign(key, &issuer, tokens, &claims, &expand)? {
            variables.retain(|v| v.key != key);
            variables.push(JobVariable {
                key,
                value: token,
                public: false,
                masked: true,
                file: false,
                raw: true,
            });
        }
    }

    // `secrets:` with their providers' servers (EE `secrets_configuration`).
    let secrets = match &m.secrets {
        None => None,
        Some(declared) => {
            let values: job_secrets::Values<'_> = variables
                .iter()
                .map(|v| (v.key.as_str(), v.value.as_str()))
                .collect();
            let first_id_token = m
                .id_tokens
                .as_ref()
                .and_then(|t| t.as_object()?.keys().next().cloned());
            match job_secrets::configuration(declared, &values, first_id_token.as_deref()) {
                Ok(config) => Some(config).filter(|c| !c.is_empty()),
                Err(why) => return Ok(Err(Refusal::SecretsProviderNotFound(why))),
            }
        }
    };

    // Steps and hooks.
    // A `run:` job has no script step: the runner runs its steps instead.
    let mut steps = Vec::new();
    if m.run.is_none() {
        let mut script = m.before_script.clone();
        script.extend(m.script.iter().cloned());
        steps.push(Step {
            name: StepName::Script,
            script,
            timeout,
            when: gantry_protocol::When::OnSuccess,
            allow_failure: false,
        });
    }
    if !m.after_script.is_empty() {
        steps.push(Step {
            name: StepName::AfterScript,
            script: m.after_script.clone(),
            timeout,
            when: gantry_protocol::When::Always,
            allow_failure: true,
        });
    }
    let hooks = if m.pre_get_sources_script.is_empty() {
        Vec::new()
    } else {
        vec![Hook {
            name: HookName::PreGetSourcesScript,
            script: m.pre_get_sources_script.clone(),
        }]
    };

    // Cache keys and fallback keys: `-protected` / `-non_protected` unless
    // `unprotect` or the project's `ci_separated_caches` is off (GitLab's
    // `Ci::Build#cache`).
    let suffix = if !project.ci_separated_caches {
        ""
    } else if pipeline.protected {
        "protected"
    } else {
        "non_protected"
    };
    let cache = m
        .caches
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let key = spec
                .cache_keys
                .get(i)
                .cloned()
                .unwrap_or_else(|| "default".to_owned());
            let suffixed = |key: &str| {
                if c.unprotect || suffix.is_empty() {
                    key.to_owned()
                } else {
                    format!("{key}-{suffix}")
                }
            };
            Cache {
                key: suffixed(&key),
                untracked: c.untracked,
                paths: c.paths.clone(),
                // A `$VARIABLE` policy goes as is; the runner expands it (GitLab).
                policy: c.policy.parse().unwrap_or(CachePolicy::PullPush),
                when: artifacts_when(c.when),
                fallback_keys: c.fallback_keys.iter().map(|k| suffixed(k)).collect(),
            }
        })
        .collect();

    let refspecs = {
        let mut r = vec![format!(
            "+refs/pipelines/{0}:refs/pipelines/{0}",
            pipeline.id
        )];
        // A merge request pipeline's ref is no branch: the pipeline ref alone, as
        // GitLab's `BuildRunnerPresenter#refspecs` gives it.
        let merge_request = pipeline.ref_name.starts_with("refs/merge-requests/");
        if git_depth > 0 {
            if pipeline.tag {
                r.push(format!("+refs/tags/{0}:refs/tags/{0}", pipeline.ref_name));
            } else if !merge_request {
                r.push(format!(
                    "+refs/heads/{0}:refs/remotes/origin/{0}",
                    pipeline.ref_name
                ));
            }
        } else {
            r.push("+refs/heads/*:refs/remotes/origin/*".to_owned());
            r.push("+refs/tags/*:refs/tags/*".to_owned());
        }
        r
    };
    let (_, project_short) = project_path(&project.name);
    Ok(Ok(JobResponse {
        id: job.id,
        token: job_token.to_owned(),
        allow_git_fetch: project.build_git_strategy != "clone",
        job_info: JobInfo {
            id: job.id,
            name: job.name.clone(),
            stage: job.stage.clone(),
            pipeline_id: pipeline.id,
            project_id: project.id,
            project_name: project_short,
            project_full_path: path.clone(),
            namespace_id: 1,
            root_namespace_id: 1,
            organization_id: 1,
            instance_id: String::new(),
            instance_uuid: String::new(),
            user_id: 1,
            scoped_user_id: None,
            time_in_queue_seconds: job
                .queued_at
                .map_or(0.0, |q| (now - q).max(0) as f64 / 1000.0),
            project_jobs_running_on_instance_runners_count: if runner.project_runner {
                "+Inf".to_owned()
            } else {
                "0".to_owned()
            },
            queue_size: queue.size,
            queue_depth: queue.depth,
        },
        git_info: GitInfo {
            repo_url,
            git_ref: pipeline.ref_name.clone(),
            sha: pipeline.sha.clone(),
            before_sha: pipeline.before_sha.clone(),
            ref_type: if pipeline.tag {
                RefType::Tag
            } else {
                RefType::Branch
            },
            refspecs,
            depth: git_depth,
            repo_object_format: if pipeline.sha.len() == 64 {
                ObjectFormat::Sha256
            } else {
                ObjectFormat::Sha1
            },
            protected: Some(pipeline.protected),
        },
        runner_info: RunnerInfo {
            uuid: None,
            timeout,
            runner_session_url: None,
        },
        variables,
        steps: Some(steps),
        hooks,
        image: m.image.as_ref().map(image),
        services: m.services.iter().map(service).collect(),
        artifacts: m.artifacts.as_ref().map(artifacts),
        cache,
        credentials: Vec::new(),
        features: JobFeatures {
            trace_sections: true,
            failure_reasons: FailureReason::ALL
                .iter()
                .filter(|r| r.is_stored_by_server())
                .map(|r| r.as_str().to_owned())
                .collect(),
            token_mask_prefixes: None,
            tracing: None,
        },
        dependencies,
        run: m.run.as_ref().map(|run| run.to_string()),
        secrets,
        policy_options: None,
        inputs: m.inputs.as_deref().filter(|i| !i.is_empty()).map(|i| {
            // A played job's values are on its row; a retry's in its spec.
            let played = job.input_values.as_deref().and_then(|text| {
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text).ok()
            });
            job_inputs::payload(i, played.as_ref().or(spec.input_values.as_ref()))
        }),
        suspend_options: None,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gantry_protocol::JobStatus;
    use gantry_store::{Artifact, InstanceVariable, ProjectVariable};
    use serde_json::Value;

    use super::super::super::id_tokens::SigningKey;
    use super::super::super::spec::{StoredAutoCancel, StoredSpec};
    use super::super::{DependencyFacts, QueueFacts};
    use super::*;

    const CI: &str = r#"
variables:
  GLOBAL: g
  OVERRIDDEN: global
stages: [build, deploy]
build:
  stage: build
  script: [make]
  artifacts: {paths: [out], reports: {dotenv: build.env}}
deploy:
  stage: deploy
  image: {name: "ruby:3.3", entrypoint: [""], docker: {user: app}}
  services: [{name: "postgres:16", alias: db, variables: {POSTGRES_DB: app}}]
  needs: [build]
  before_script: [bundle]
  script: ["deploy $TARGET"]
  after_script: [cleanup]
  hooks: {pre_get_sources_script: [echo hi]}
  cache: {key: gems, paths: [vendor], fallback_keys: [gems-main]}
  environment: {name: "review/$CI_COMMIT_REF_SLUG", url: "https://$CI_COMMIT_REF_SLUG.example.com"}
  variables:
    TARGET: "$GLOBAL-$FROM_DOTENV-$INSTANCE"
    RAW: {value: "$GLOBAL", expand: false}
    OVERRIDDEN: yaml
  timeout: 10m
"#;

    /// The job `name` of `yaml`, compiled for a push to `feature/x` of `group/app`.
    fn compiled(yaml: &str, name: &str) -> gantry_pipeline::Job {
        let loader = gantry_pipeline::MemoryLoader::new().with(".gitlab-ci.yml", yaml);
        let ctx = gantry_pipeline::Context::new(&info(), &[], None);
        let out = gantry_pipeline::compile(&gantry_pipeline::Options::default(), &ctx, &loader);
        let pipeline = out.pipeline.expect("a valid pipeline");
        pipeline
            .jobs
            .into_iter()
            .find(|j| j.name == name)
            .expect("the job")
    }

    fn info() -> gantry_pipeline::PipelineInfo {
        gantry_pipeline::PipelineInfo {
            ref_name: "feature/x".into(),
            sha: "3b1c4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d".into(),
            before_sha: Some("0".repeat(40)),
            commit_message: "Deploy it".into(),
            commit_author: "Ada <ada@example.com>".into(),
            commit_timestamp: "2026-12-01T10:00:00+00:00".into(),
            project_name: "app".into(),
            project_namespace: "group".into(),
            project_id: 3,
            server_url: "https://ci.example.com".into(),
            pipeline_iid: 2,
            ..Default::default()
        }
    }

    fn spec(job: gantry_pipeline::Job, cache_keys: &[&str]) -> StoredSpec {
        StoredSpec {
            job,
            stages: vec!["build".into(), "deploy".into()],
            auto_cancel: StoredAutoCancel {
                on_new_commit: "conservative".into(),
                on_job_failure: "none".into(),
            },
            pipeline_name: None,
            cache_keys: cache_keys.iter().map(|k| (*k).to_owned()).collect(),
            enqueue_immediately: false,
            manual_variables: Vec::new(),
            manual_variables_sealed: None,
            environment: None,
            input_values: None,
        }
    }

    /// The rows of job 42 (`deploy`) of pipeline 7 of project 3, running since a minute.
    struct Rows {
        job: gantry_store::Job,
        pipeline: gantry_store::Pipeline,
        project: gantry_store::Project,
    }

    const NOW: i64 = 1_796_000_000_000;

    fn rows() -> Rows {
        Rows {
            job: gantry_store::Job {
                id: 42,
                pipeline_id: 7,
                project_id: 3,
                name: "deploy".into(),
                stage: "deploy".into(),
                stage_idx: 1,
                status: JobStatus::Running,
                attempt: 1,
                queued_at: Some(NOW - 61_500),
                started_at: Some(NOW - 60_000),
                timeout_secs: Some(600),
                environment_id: Some(9),
                ..Default::default()
            },
            pipeline: gantry_store::Pipeline {
                id: 7,
                project_id: 3,
                iid: 2,
                ref_name: "feature/x".into(),
                sha: "3b1c4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d".into(),
                before_sha: "0".repeat(40),
                source: "push".into(),
                status: JobStatus::Running,
                created_at: NOW - 120_000,
                ..Default::default()
            },
            project: gantry_store::Project {
                id: 3,
                name: "group/app".into(),
                default_branch: "main".into(),
                timeout_secs: 3600,
                ci_config_path: ".gitlab-ci.yml".into(),
                build_git_strategy: "fetch".into(),
                ci_default_git_depth: Some(20),
                ci_separated_caches: true,
                ..Default::default()
            },
        }
    }

    fn artifact(job_id: i64, file_type: &str, filename: &str, expire_at: Option<i64>) -> Artifact {
        Artifact {
            job_id,
            file_type: file_type.into(),
            file_format: "zip".into(),
            filename: filename.into(),
            size: 1234,
            expire_at,
            ..Default::default()
        }
    }

    /// What the read step finds for `deploy`: `build`'s archive and dotenv report, an
    /// environment row, instance, group and project variables (a protected one and one
    /// scoped to another environment among them), pipeline and manual variables.
    fn facts() -> PayloadFacts {
        let protected = |mut v: ProjectVariable| {
            v.protected = true;
            v
        };
        let scoped = |mut v: ProjectVariable, scope: &str| {
            v.environment_scope = scope.into();
            v
        };
        PayloadFacts {
            external_url: "https://ci.example.com".into(),
            pages: super::super::super::pages::PagesUrls {
                url: "https://group.pages.example.com/app".into(),
                domain: "pages.example.com".into(),
            },
            traceparent: None,
            info: info(),
            dependencies: vec![DependencyFacts {
                id: 41,
                name: "build".into(),
                artifacts: vec![
                    artifact(41, "archive", "artifacts.zip", Some(NOW + 1)),
                    artifact(41, "dotenv", "build.env.gz", None),
                ],
                dotenv: vec![("FROM_DOTENV".into(), "d".into())],
            }],
            pipeline_variables: PipelineVariables {
                values: vec![
                    ("OVERRIDDEN".into(), "pipeline".into()),
                    ("CONFIG".into(), "a=1".into()),
                ],
                files: vec!["CONFIG".into()],
                raw: Vec::new(),
            },
            environment: Some(gantry_store::Environment {
                id: 9,
                project_id: 3,
                name: "review/feature-x".into(),
                slug: "review-feature-x-bjrazc".into(),
                tier: "development".into(),
                ..Default::default()
            }),
            instance_variables: Arc::new(vec![
                InstanceVariable::new("INSTANCE", "i"),
                InstanceVariable {
                    protected: true,
                    ..InstanceVariable::new("INSTANCE_PROTECTED", "never on an unprotected ref")
                },
            ]),
            settings_variables: Arc::new(vec![
                (0, ProjectVariable::new("GROUP_VAR", "grp")),
                (1, ProjectVariable::new("OVERRIDDEN", "project")),
                (
                    1,
                    protected(ProjectVariable::new("DEPLOY_KEY", "never here")),
                ),
                (
                    1,
                    scoped(
                        ProjectVariable::new("PROD_ONLY", "never here"),
                        "production",
                    ),
                ),
                (
                    1,
                    ProjectVariable {
                        masked: true,
                        ..ProjectVariable::new("API_TOKEN", "s3cr3t-t0ken")
                    },
                ),
                // Below the stored environment's (GitLab's `persisted_environment_variables`).
                (
                    1,
                    ProjectVariable::new("CI_ENVIRONMENT_URL", "https://not.it"),
                ),
                (1, ProjectVariable::new("CI_ENVIRONMENT_SLUG", "not-it")),
            ]),
            manual_variables: vec![("PLAYED_WITH".into(), "yes".into())],
            id_token_key: None,
        }
    }

    fn runner() -> PayloadRunner<'static> {
        static TAGS: std::sync::LazyLock<Vec<String>> =
            std::sync::LazyLock::new(|| vec!["docker".to_owned()]);
        PayloadRunner {
            id: 5,
            description: "docker-1",
            tags: &TAGS,
            project_runner: false,
        }
    }

    fn assembled(
        spec: &StoredSpec,
        rows: &Rows,
        facts: &PayloadFacts,
    ) -> std::result::Result<JobResponse, Refusal> {
        let a = Assigned {
            job: &rows.job,
            spec,
            pipeline: &rows.pipeline,
            project: &rows.project,
            token: "glcbt-job-token",
            queue: QueueFacts { size: 3, depth: 1 },
        };
        assemble(&a, &runner(), facts, NOW).expect("no signing")
    }

    fn value(p: &JobResponse, key: &str) -> Option<String> {
        gantry_protocol::variable(&p.variables, key).map(str::to_owned)
    }

    /// The payload as JSON, with what changes with Gantry's version left out.
    fn shown(p: &JobResponse) -> Value {
        let mut v = serde_json::to_value(p).expect("serializable");
        if let Some(vars) = v["variables"].as_array_mut() {
            for var in vars {
                if var["key"] == "CI_SERVER_REVISION" {
                    var["value"] = Value::from("[gantry version]");
                }
            }
        }
        v
    }

    #[test]
    fn a_deploy_job_s_payload() {
        let rows = rows();
        let spec = spec(compiled(CI, "deploy"), &["gems"]);
        let p = assembled(&spec, &rows, &facts()).expect("not refused");
        insta::assert_json_snapshot!(shown(&p));
    }

    #[test]
    fn later_sources_win_and_values_are_pre_expanded() {
        let rows = rows();
        let spec = spec(compiled(CI, "deploy"), &["gems"]);
        let p = assembled(&spec, &rows, &facts()).expect("not refused");
        // YAML < project setting < pipeline variable.
        assert_eq!(value(&p, "OVERRIDDEN").as_deref(), Some("pipeline"));
        // A YAML value refers to a dotenv and an instance variable, both above it.
        assert_eq!(value(&p, "TARGET").as_deref(), Some("g-d-i"));
        assert_eq!(value(&p, "RAW").as_deref(), Some("$GLOBAL"));
        assert_eq!(value(&p, "PLAYED_WITH").as_deref(), Some("yes"));
        assert_eq!(value(&p, "GROUP_VAR").as_deref(), Some("grp"));
        for absent in ["INSTANCE_PROTECTED", "DEPLOY_KEY", "PROD_ONLY"] {
            assert_eq!(value(&p, absent), None, "{absent}");
        }
        let attributes = |key: &str| {
            p.variables
                .iter()
                .rfind(|v| v.key == key)
                .expect("the variable")
        };
        let config = attributes("CONFIG");
        assert!(config.file && !config.public);
        let token = attributes("API_TOKEN");
        assert!(token.masked && !token.public);
        assert_eq!(
            value(&p, "CI_ENVIRONMENT_NAME").as_deref(),
            Some("review/feature-x")
        );
        assert_eq!(value(&p, "CI_ENVIRONMENT_ID").as_deref(), Some("9"));
        // The stored environment's slug and URL win over variables of those names.
        assert_eq!(
            value(&p, "CI_ENVIRONMENT_SLUG").as_deref(),
            Some("review-feature-x-bjrazc")
        );
        assert_eq!(
            value(&p, "CI_ENVIRONMENT_URL").as_deref(),
            Some("https://feature-x.example.com")
        );
        assert_eq!(
            value(&p, "CI_ENVIRONMENT_TIER").as_deref(),
            Some("development")
        );
        // Times as GitLab's `Time#iso8601` writes them: whole seconds.
        assert_eq!(
            value(&p, "CI_JOB_STARTED_AT").as_deref(),
            Some("2026-11-30T00:52:20Z")
        );
        assert_eq!(
            value(&p, "CI_JOB_STARTED_AT_SLUG").as_deref(),
            Some("2026-11-30t00-52-20z")
        );
        assert_eq!(
            value(&p, "CI_PIPELINE_CREATED_AT").as_deref(),
            Some("2026-11-30T00:51:20Z")
        );
    }

    /// GitLab's `Ci::Build#persisted_variables`: the registry's user and password are
    /// set in every job, registry or not — after `CI_JOB_STARTED_AT`, before
    /// `CI_REPOSITORY_URL` — the password being the job token, masked.
    #[test]
    fn every_job_has_gitlab_s_registry_user_and_password() {
        let rows = rows();
        let spec = spec(compiled(CI, "deploy"), &["gems"]);
        let p = assembled(&spec, &rows, &facts()).expect("not refused");
        let at = |key: &str| {
            p.variables
                .iter()
                .position(|v| v.key == key)
                .unwrap_or_else(|| panic!("{key} is set"))
        };
        let user = &p.variables[at("CI_REGISTRY_USER")];
        assert_eq!(user.value, "gitlab-ci-token");
        assert!(user.public && !user.masked);
        let password = &p.variables[at("CI_REGISTRY_PASSWORD")];
        assert_eq!(password.value, "glcbt-job-token");
        assert!(password.masked && !password.public);
        assert!(at("CI_JOB_STARTED_AT") < at("CI_REGISTRY_USER"));
        assert!(at("CI_REGISTRY_PASSWORD") < at("CI_REPOSITORY_URL"));
    }

    /// GitLab's `Builder::Pipeline` sets `CI_PIPELINE_NAME` in every job: the
    /// `workflow:name`, or no value (the runner exports it empty).
    #[test]
    fn ci_pipeline_name_is_set_with_or_without_a_name() {
        let rows = rows();
        let mut spec = spec(compiled(CI, "deploy"), &["gems"]);
        spec.pipeline_name = None;
        let p = assembled(&spec, &rows, &facts()).expect("not refused");
        assert_eq!(value(&p, "CI_PIPELINE_NAME").as_deref(), Some(""));
        spec.pipeline_name = Some("Nightly".into());
        let p = assembled(&spec, &rows, &facts()).expect("not refused");
        assert_eq!(value(&p, "CI_PIPELINE_NAME").as_deref(), Some("Nightly"));
    }

    #[test]
    fn the_environment_url_is_expanded_with_the_job_s_final_variables() {
        let yaml = "review:\n  script: [x]\n  environment:\n    name: review/$CI_COMMIT_REF_SLUG\n    url: https://$REVIEW_DOMAIN/$CI_ENVIRONMENT_SLUG\n";
        let rows = rows();
        let spec = spec(compiled(yaml, "review"), &[]);
        let mut facts = facts();
        facts.settings_variables = Arc::new(vec![(
            1,
            ProjectVariable::new("REVIEW_DOMAIN", "review.example.com"),
        )]);
        let p = assembled(&spec, &rows, &facts).expect("not refused");
        assert_eq!(
            value(&p, "CI_ENVIRONMENT_URL").as_deref(),
            Some("https://review.example.com/review-feature-x-bjrazc")
        );
    }

    #[test]
    fn an_expired_dependency_refuses_the_job() {
        let rows = rows();
        let spec = spec(compiled(CI, "deploy"), &["gems"]);
        let mut facts = facts();
        facts.dependencies[0].artifacts[0].expire_at = Some(NOW);
        let refusal = assembled(&spec, &rows, &facts).expect_err("refused");
        assert_eq!(refusal.reason(), FailureReason::MissingDependencyFailure);
        assert_eq!(refusal.to_string(), "the artifacts of `build` expired");
        // Kept by a locked pipeline: not expired.
        facts.dependencies[0].artifacts[0].locked = true;
        assert!(assembled(&spec, &rows, &facts).is_ok());
    }

    #[test]
    fn an_expired_dotenv_report_passes_no_variables() {
        let rows = rows();
        let spec = spec(compiled(CI, "deploy"), &["gems"]);
        let mut facts = facts();
        facts.dependencies[0].artifacts[1].expire_at = Some(NOW - 1);
        let p = assembled(&spec, &rows, &facts).expect("not refused");
        assert_eq!(value(&p, "FROM_DOTENV"), None);
        assert_eq!(value(&p, "TARGET").as_deref(), Some("g-$FROM_DOTENV-i"));
        assert_eq!(p.dependencies[0].name, "build");
    }

    #[test]
    fn a_tag_pipeline_fetches_its_tag_only_when_shallow() {
        let mut rows = rows();
        rows.pipeline.tag = true;
        rows.pipeline.ref_name = "v1.0".into();
        let spec = spec(compiled(CI, "deploy"), &["gems"]);
        let p = assembled(&spec, &rows, &facts()).expect("not refused");
        assert_eq!(
            p.git_info.refspecs,
            [
                "+refs/pipelines/7:refs/pipelines/7",
                "+refs/tags/v1.0:refs/tags/v1.0"
            ]
        );
        assert_eq!(p.git_info.depth, 20);
        rows.project.ci_default_git_depth = None;
        let p = assembled(&spec, &rows, &facts()).expect("not refused");
        assert_eq!(p.git_info.depth, 0);
        assert_eq!(
            p.git_info.refspecs,
            [
                "+refs/pipelines/7:refs/pipelines/7",
                "+refs/heads/*:refs/remotes/origin/*",
                "+refs/tags/*:refs/tags/*"
            ]
        );
    }

    #[test]
    fn secrets_without_a_provider_refuse_the_job() {
        let yaml = "job:\n  script: [x]\n  secrets:\n    DB: {vault: db/password@ops}\n";
        let rows = rows();
        let spec = spec(compiled(yaml, "job"), &[]);
        let mut facts = facts();
        facts.environment = None;
        let refusal = assembled(&spec, &rows, &facts).expect_err("refused");
        assert_eq!(refusal.reason(), FailureReason::SecretsProviderNotFound);
        // With the provider's server among the job's variables, the job starts.
        facts.pipeline_variables.values.push((
            "VAULT_SERVER_URL".into(),
            "https://vault.example.com".into(),
        ));
        let p = assembled(&spec, &rows, &facts).expect("not refused");
        let secrets = p.secrets.expect("secrets");
        assert_eq!(
            secrets["DB"]["vault"]["server"]["url"],
            "https://vault.example.com"
        );
    }

    #[test]
    fn id_tokens_are_signed_last_with_the_job_s_claims() {
        let yaml = "variables: {AUD: https://sts.example.com}\njob:\n  script: [x]\n  id_tokens:\n    MY_TOKEN: {aud: $AUD}\n";
        let rows = rows();
        let spec = spec(compiled(yaml, "job"), &[]);
        let mut facts = facts();
        facts.environment = None;
        facts.id_token_key = Some(Arc::new(SigningKey::generate()));
        let p = assembled(&spec, &rows, &facts).expect("not refused");
        let last = p.variables.last().expect("variables");
        assert_eq!(last.key, "MY_TOKEN");
        assert!(last.masked && !last.public && last.raw);
        let claims = last.value.split('.').nth(1).expect("a JWT");
        let claims: Value = serde_json::from_slice(
            &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, claims)
                .expect("base64url"),
        )
        .expect("JSON claims");
        assert_eq!(claims["aud"], "https://sts.example.com");
        assert_eq!(claims["iss"], "https://ci.example.com");
        assert_eq!(claims["project_path"], "group/app");
        assert_eq!(claims["ref"], "feature/x");
        assert_eq!(claims["job_id"], "42");
        assert_eq!(claims["runner_id"], 5);
        assert_eq!(
            claims["sub"],
            "project_path:group/app:ref_type:branch:ref:feature/x"
        );
        assert_eq!(claims["exp"], NOW / 1000 + 600 + 300);
    }
}
