//! What the coordinator stores per job row (`jobs.spec`): the compiled
//! [`gantry_pipeline::Job`] as JSON, read back as the same type (no mirror, no JSON round
//! trip at creation), plus what the pipeline row has no column for: the stage list and
//! `workflow:auto_cancel` of the pipeline the job belongs to, resolved cache keys,
//! GitLab's "enqueue immediately" flag of a retried or played actionable job, and the
//! variables a user gave when playing a finished manual job again (a new row).
//!
//! The format is the coordinator's alone; the store treats it as text.

use serde::{Deserialize, Serialize};

use super::environment::JobEnvironment;

use crate::processor::{
    AutoCancel, JobId, JobState, OnJobFailure, OnNewCommit, RetryPolicy, Status,
};

use super::error::{CoordinatorError, Result};

/// One `jobs.spec` value.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StoredSpec {
    /// The compiled job, as `gantry_pipeline::Job` serializes it.
    pub job: gantry_pipeline::Job,
    /// Declared stages of the pipeline, in order.
    pub stages: Vec<String>,
    pub auto_cancel: StoredAutoCancel,
    /// `workflow:name`, expanded.
    #[serde(default)]
    pub pipeline_name: Option<String>,
    /// Cache keys resolved at creation (`key:files` digests), one per `caches` entry.
    #[serde(default)]
    pub cache_keys: Vec<String>,
    /// Skip the manual/delayed gate when next processed (a retried actionable job).
    #[serde(default)]
    pub enqueue_immediately: bool,
    /// Variables given when this attempt was started by a play of a finished manual job,
    /// as an older Gantry stored them (plain); see `manual_variables_sealed`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manual_variables: Vec<(String, String)>,
    /// The same, sealed (`Settings::seal_variables`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_variables_sealed: Option<String>,
    /// `environment:` name and URL expanded at creation (GitLab persists the name).
    #[serde(default)]
    pub environment: Option<JobEnvironment>,
    /// This attempt's job input values that differ from their defaults (`job_inputs.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_values: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct StoredAutoCancel {
    pub on_new_commit: String,
    pub on_job_failure: String,
}

impl StoredAutoCancel {
    pub fn to_processor(&self) -> AutoCancel {
        AutoCancel {
            on_new_commit: match self.on_new_commit.as_str() {
                "interruptible" => OnNewCommit::Interruptible,
                "none" => OnNewCommit::None,
                _ => OnNewCommit::Conservative,
            },
            on_job_failure: match self.on_job_failure.as_str() {
                "all" => OnJobFailure::All,
                _ => OnJobFailure::None,
            },
        }
    }
}

impl StoredSpec {
    /// The environment the store keeps for a new attempt of this job, as at creation.
    pub fn new_job_environment(&self) -> Option<gantry_store::NewJobEnvironment> {
        let model = self.job.environment.as_ref()?;
        self.environment.as_ref()?.to_new(model).ok()
    }

    pub fn parse(text: &str) -> Result<StoredSpec> {
        serde_json::from_str(text).map_err(|e| CoordinatorError::corrupt(format!("job spec: {e}")))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }

    /// A trigger (bridge) job: no runner ever runs it.
    pub fn is_bridge(&self) -> bool {
        self.job.trigger.is_some()
    }

    /// The configuration part of a processor job row; runtime fields are the caller's.
    pub fn job_state(&self, id: JobId, status: Status) -> JobState {
        let job = &self.job;
        JobState {
            id,
            name: job.name.clone(),
            stage_idx: job.stage_idx,
            status,
            when: job.when,
            allow_failure: job.allow_failure,
            allow_failure_exit_codes: if job.allow_failure {
                Vec::new()
            } else {
                job.allow_failure_exit_codes.clone()
            },
            needs: job
                .needs
                .as_ref()
                .map(|ns| ns.iter().map(|n| n.job.clone()).collect()),
            retry: RetryPolicy::from_model(&job.retry),
            start_in: job
                .start_in
                .as_deref()
                .and_then(gantry_pipeline::duration::parse_duration),
            timeout: job.timeout,
            interruptible: job.interruptible.unwrap_or(false),
            resource_group: job.resource_group.clone(),
            attempt: 1,
            retried: false,
            enqueue_immediately: false,
            exit_code: None,
            failure_reason: None,
            graceful_cancel: false,
            effective_timeout: None,
            queued_at: None,
            scheduled_at: None,
            started_at: None,
            finished_at: None,
            updated_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_compiled_job_back() {
        struct One;
        impl gantry_pipeline::Loader for One {
            fn read(
                &self,
                _: &str,
            ) -> std::result::Result<Option<String>, gantry_pipeline::ReadError> {
                Ok(Some(
                    "variables: {G: g}\nbuild:\n  image: {name: ruby, entrypoint: ['']}\n  script: [make]\n  needs: []\n  cache: {key: {files: [Gemfile.lock]}, paths: [vendor]}\n  artifacts: {paths: [out], reports: {dotenv: build.env}, expire_in: 1 week}\n  retry: {max: 2, when: [script_failure]}\n  timeout: 10m\n  variables: {A: {value: x, expand: false}}\n"
                        .to_owned(),
                ))
            }
            fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
                Ok(vec![".gitlab-ci.yml".into(), "Gemfile.lock".into()])
            }
        }
        let ctx =
            gantry_pipeline::Context::new(&gantry_pipeline::PipelineInfo::default(), &[], None);
        let compiled = gantry_pipeline::compile(&gantry_pipeline::Options::default(), &ctx, &One);
        let job = &compiled.pipeline.as_ref().expect("valid").jobs[0];
        let text = StoredSpec {
            job: job.clone(),
            stages: Vec::new(),
            auto_cancel: StoredAutoCancel {
                on_new_commit: "conservative".into(),
                on_job_failure: "none".into(),
            },
            pipeline_name: None,
            cache_keys: Vec::new(),
            enqueue_immediately: false,
            manual_variables: Vec::new(),
            manual_variables_sealed: None,
            environment: None,
            input_values: None,
        }
        .to_json();
        let back = StoredSpec::parse(&text).expect("readable");
        let m = &back.job;
        assert_eq!(&back.job, &{
            let mut j = job.clone();
            j.pos = Default::default();
            j
        });
        assert_eq!(m.name, "build");
        assert_eq!(m.script, ["make"]);
        assert_eq!(m.timeout, Some(600));
        assert!(m.needs.as_ref().is_some_and(Vec::is_empty));
        assert!(!m.variables["A"].expand);
        assert_eq!(m.inherited_variables["G"].value, "g");
        assert!(
            matches!(&m.caches[0].key, gantry_pipeline::CacheKey::Files { files, .. } if files == &["Gemfile.lock"])
        );
        let a = m.artifacts.as_ref().expect("artifacts");
        assert_eq!(a.reports["dotenv"], ["build.env"]);
        assert_eq!(a.expire_in.as_deref(), Some("1 week"));
        assert_eq!(m.retry.max, 2);
        assert_eq!(
            m.image.as_ref().and_then(|i| i.entrypoint.clone()),
            Some(vec![String::new()])
        );
    }

    #[test]
    fn reads_a_row_an_older_gantry_wrote() {
        // Fields added since are missing; `expand` and a need's `artifacts` default to
        // true, as the YAML does.
        let text = r#"{"job":{"name":"deploy","stage":"test","stage_idx":1,"when":"manual",
            "variables":{"A":{"value":"x"}},"needs":[{"job":"build"}],
            "trigger":{"include":[{"local":"child.yml"}],"strategy":"depend"},
            "artifacts":{"paths":["out"],"when":"always"},"retry":{"max":1}},
            "stages":["build","test"],
            "auto_cancel":{"on_new_commit":"conservative","on_job_failure":"none"}}"#;
        let spec = StoredSpec::parse(text).expect("readable");
        let job = &spec.job;
        assert_eq!(job.when, gantry_pipeline::When::Manual);
        assert!(job.variables["A"].expand);
        let needs = job.needs.as_ref().expect("needs");
        assert!(needs[0].artifacts && !needs[0].optional);
        let trigger = job.trigger.as_ref().expect("a bridge");
        assert_eq!(trigger.strategy.as_deref(), Some("depend"));
        assert!(!trigger.forward_pipeline_variables);
        let artifacts = job.artifacts.as_ref().expect("artifacts");
        assert_eq!(artifacts.when, gantry_pipeline::ArtifactsWhen::Always);
        assert!(artifacts.exclude.is_empty());
        assert_eq!(job.retry.max, 1);
        assert!(job.caches.is_empty() && job.manual_confirmation.is_none());
        assert!(spec.is_bridge());
    }
}
