//! The job's variables as the script sees them: the runner's own, the entry's
//! `environment`, the payload's, and the directory variables, with runner-side
//! expansion of every non-`raw` value.
//!
//! Order (a later definition of a name wins, as in gitlab-runner's `JobVariables.Get`):
//!
//! 1. runner facts: `CI_RUNNER_VERSION`, `CI_RUNNER_REVISION`,
//!    `CI_RUNNER_EXECUTABLE_ARCH`, `CI_RUNNER_SHORT_TOKEN`, `CI_SERVER=yes`,
//!    `CI_SHARED_ENVIRONMENT=true` where the executor shares the machine with other
//!    jobs (shell, custom, instance), `CI_DISPOSABLE_ENVIRONMENT=true` where the job
//!    has it alone (docker, docker-autoscaler), as gitlab-runner's
//!    `Build.GetSharedEnvVariable`,
//!    `CI_JOB_TIMEOUT`;
//! 2. `[[runners]] environment` entries;
//! 3. the payload's `variables`;
//! 4. `CI_BUILDS_DIR`, `CI_PROJECT_DIR`, `CI_CONCURRENT_ID`,
//!    `CI_CONCURRENT_PROJECT_ID`: last, because the runner alone decides where the job
//!    runs.
//!
//! `CI_JOB_STATUS` is added per stage by the script generator. Expansion is
//! gitlab-runner's `JobVariables.Expand`: each non-raw value is expanded once with Go's
//! `os.Expand` rules ([`gantry_pipeline::expand::expand_runner`]) against the
//! unexpanded values (last definition wins); `raw: true` values are kept as they are.

use gantry_protocol::JobVariable;

use crate::config::EnvVar;

pub(crate) use crate::executor::{variable as get, variable_flag as get_bool};

/// Runner facts for the first group.
#[derive(Debug, Clone)]
pub(crate) struct RunnerFacts<'a> {
    pub(crate) version: &'a str,
    pub(crate) revision: &'a str,
    pub(crate) arch: &'a str,
    pub(crate) short_token: &'a str,
    pub(crate) job_timeout_secs: u64,
    /// The executor shares the machine ([`crate::config::ExecutorKind::is_shared`]).
    pub(crate) shared: bool,
    /// `[runners.feature_flags]`: each wins over the job's variable of that name.
    pub(crate) feature_flags: &'a std::collections::BTreeMap<String, bool>,
}

/// Where the job runs, for the last group.
#[derive(Debug, Clone)]
pub(crate) struct DirFacts<'a> {
    pub(crate) builds_dir: &'a str,
    pub(crate) project_dir: &'a str,
    pub(crate) concurrent_id: usize,
    pub(crate) concurrent_project_id: usize,
}

fn public(key: &str, value: impl Into<String>) -> JobVariable {
    JobVariable {
        key: key.to_owned(),
        value: value.into(),
        public: true,
        ..JobVariable::default()
    }
}

/// The full, expanded list.
pub(crate) fn job_variables(
    facts: &RunnerFacts<'_>,
    environment: &[EnvVar],
    payload: &[JobVariable],
    dirs: &DirFacts<'_>,
) -> Vec<JobVariable> {
    let mut all = vec![
        public("CI_RUNNER_VERSION", facts.version),
        public("CI_RUNNER_REVISION", facts.revision),
        public("CI_RUNNER_EXECUTABLE_ARCH", facts.arch),
        public("CI_RUNNER_SHORT_TOKEN", facts.short_token),
        public("CI_SERVER", "yes"),
        public(
            if facts.shared {
                "CI_SHARED_ENVIRONMENT"
            } else {
                "CI_DISPOSABLE_ENVIRONMENT"
            },
            "true",
        ),
        public("CI_JOB_TIMEOUT", facts.job_timeout_secs.to_string()),
    ];
    all.extend(
        environment
            .iter()
            .map(|env| public(&env.name, env.value.clone())),
    );
    all.extend(payload.iter().cloned());
    // A feature flag set in the runner's configuration takes precedence over the job's
    // variables (gitlab-runner's `IsFeatureFlagOn`), and the job sees it once, with the
    // value in force.
    if !facts.feature_flags.is_empty() {
        all.retain(|variable| !facts.feature_flags.contains_key(&variable.key));
        all.extend(
            facts
                .feature_flags
                .iter()
                .map(|(name, on)| public(name, on.to_string())),
        );
    }
    all.push(public("CI_BUILDS_DIR", dirs.builds_dir));
    all.push(public("CI_PROJECT_DIR", dirs.project_dir));
    all.push(public("CI_CONCURRENT_ID", dirs.concurrent_id.to_string()));
    all.push(public(
        "CI_CONCURRENT_PROJECT_ID",
        dirs.concurrent_project_id.to_string(),
    ));
    expand_all(all)
}

/// gitlab-runner's `JobVariables.Expand`.
pub(crate) fn expand_all(variables: Vec<JobVariable>) -> Vec<JobVariable> {
    let lookup = |name: &str| get(&variables, name).map(str::to_owned);
    let expanded: Vec<JobVariable> = variables
        .iter()
        .map(|variable| {
            if variable.raw || !variable.value.contains('$') {
                variable.clone()
            } else {
                JobVariable {
                    value: gantry_pipeline::expand::expand_runner(&variable.value, &lookup),
                    ..variable.clone()
                }
            }
        })
        .collect();
    expanded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(key: &str, value: &str, raw: bool) -> JobVariable {
        JobVariable {
            key: key.to_owned(),
            value: value.to_owned(),
            raw,
            ..JobVariable::default()
        }
    }

    #[test]
    fn non_raw_values_are_expanded_once_and_the_runner_decides_directories() {
        let facts = RunnerFacts {
            version: "0.1.0",
            revision: "abc",
            arch: "linux/amd64",
            short_token: "short",
            job_timeout_secs: 3600,
            shared: true,
            feature_flags: &Default::default(),
        };
        let environment = [EnvVar {
            name: "FROM_CONFIG".to_owned(),
            value: "config".to_owned(),
        }];
        let payload = [
            var("A", "a", false),
            var("B", "$A-${FROM_CONFIG}-$CI_PROJECT_DIR", false),
            var("RAW", "$A stays", true),
            var("NESTED", "$B", false),
            var("CI_PROJECT_DIR", "/elsewhere", false),
            var("MONEY", "$$5", false),
        ];
        let dirs = DirFacts {
            builds_dir: "/builds",
            project_dir: "/builds/short/0/p",
            concurrent_id: 0,
            concurrent_project_id: 0,
        };
        let all = job_variables(&facts, &environment, &payload, &dirs);
        assert_eq!(get(&all, "B"), Some("a-config-/builds/short/0/p"));
        assert_eq!(get(&all, "RAW"), Some("$A stays"));
        // Single pass: `$B` gets B's unexpanded value.
        assert_eq!(
            get(&all, "NESTED"),
            Some("$A-${FROM_CONFIG}-$CI_PROJECT_DIR")
        );
        assert_eq!(get(&all, "CI_PROJECT_DIR"), Some("/builds/short/0/p"));
        assert_eq!(get(&all, "MONEY"), Some("$5"));
        assert_eq!(get(&all, "CI_SERVER"), Some("yes"));
        assert_eq!(get(&all, "CI_SHARED_ENVIRONMENT"), Some("true"));
        assert_eq!(get(&all, "CI_DISPOSABLE_ENVIRONMENT"), None);
    }

    #[test]
    fn feature_flags_of_the_configuration_win_and_appear_once() {
        let flags = std::collections::BTreeMap::from([
            ("FF_TIMESTAMPS".to_owned(), false),
            ("FF_NETWORK_PER_BUILD".to_owned(), true),
        ]);
        let facts = RunnerFacts {
            version: "0.1.0",
            revision: "abc",
            arch: "linux/amd64",
            short_token: "short",
            job_timeout_secs: 3600,
            shared: false,
            feature_flags: &flags,
        };
        let environment = [EnvVar {
            name: "FF_TIMESTAMPS".to_owned(),
            value: "true".to_owned(),
        }];
        let payload = [
            var("FF_TIMESTAMPS", "true", false),
            var("FF_USE_FASTZIP", "true", false),
        ];
        let dirs = DirFacts {
            builds_dir: "/builds",
            project_dir: "/builds/short/0/p",
            concurrent_id: 0,
            concurrent_project_id: 0,
        };
        let all = job_variables(&facts, &environment, &payload, &dirs);
        assert_eq!(get_bool(&all, "FF_TIMESTAMPS"), Some(false));
        assert_eq!(get_bool(&all, "FF_NETWORK_PER_BUILD"), Some(true));
        // A disposable executor's job (docker): GitLab's other variable.
        assert_eq!(get(&all, "CI_DISPOSABLE_ENVIRONMENT"), Some("true"));
        assert_eq!(get(&all, "CI_SHARED_ENVIRONMENT"), None);
        // Flags the configuration does not set stay the job's.
        assert_eq!(get_bool(&all, "FF_USE_FASTZIP"), Some(true));
        assert_eq!(
            all.iter().filter(|v| v.key == "FF_TIMESTAMPS").count(),
            1,
            "{all:?}"
        );
    }
}
