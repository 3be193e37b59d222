//! What the runner's configuration allows: images and services (`allowed_images`,
//! `allowed_services`, glob patterns where `*` stays within a path segment and `**`
//! crosses them, as gitlab-runner's doublestar matching), and pull policies
//! (`pull_policy`, `allowed_pull_policies`).

use globset::GlobBuilder;

use super::DockerError;
use crate::config::{DockerConfig, PullPolicy};

/// Checks `image` against `patterns` (an empty list allows everything). `kind` is
/// `image` or `service`, for the message.
pub fn check_allowed(
    kind: &'static str,
    image: &str,
    patterns: &[String],
) -> Result<(), DockerError> {
    if patterns.is_empty() {
        return Ok(());
    }
    let allowed = patterns.iter().any(|pattern| {
        GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .is_ok_and(|glob| glob.compile_matcher().is_match(image))
    });
    if allowed {
        Ok(())
    } else {
        Err(DockerError::NotAllowed {
            kind,
            image: image.to_owned(),
            patterns: patterns.to_vec(),
        })
    }
}

fn from_wire(policy: gantry_protocol::PullPolicy) -> PullPolicy {
    match policy {
        gantry_protocol::PullPolicy::Always => PullPolicy::Always,
        gantry_protocol::PullPolicy::IfNotPresent => PullPolicy::IfNotPresent,
        gantry_protocol::PullPolicy::Never => PullPolicy::Never,
    }
}

fn names(policies: &[PullPolicy]) -> Vec<String> {
    policies.iter().map(|p| p.as_str().to_owned()).collect()
}

/// The pull policies to try, in order, for `image`: the job's (`image:pull_policy`)
/// when it names some, else `[runners.docker] pull_policy`, else `always`; each must
/// be in `allowed_pull_policies` (which defaults to the configured `pull_policy`).
pub fn pull_policies(
    config: &DockerConfig,
    image: &str,
    asked: Option<&[gantry_protocol::PullPolicy]>,
) -> Result<Vec<PullPolicy>, DockerError> {
    let configured = if config.pull_policy.is_empty() {
        vec![PullPolicy::Always]
    } else {
        config.pull_policy.clone()
    };
    let (policies, source_name) = match asked {
        Some(asked) if !asked.is_empty() => (
            asked.iter().copied().map(from_wire).collect(),
            "GitLab pipeline config",
        ),
        _ => (configured.clone(), "Runner config"),
    };
    let allowed = if config.allowed_pull_policies.is_empty() {
        configured
    } else {
        config.allowed_pull_policies.clone()
    };
    if policies.iter().all(|policy| allowed.contains(policy)) {
        Ok(policies)
    } else {
        Err(DockerError::PullPolicyNotAllowed {
            image: image.to_owned(),
            asked: names(&policies),
            source_name,
            allowed: names(&allowed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_stay_within_segments() {
        let patterns = [
            "gantry-test/*".to_owned(),
            "docker.io/library/**".to_owned(),
        ];
        assert!(check_allowed("image", "gantry-test/busybox:latest", &patterns).is_ok());
        assert!(check_allowed("image", "docker.io/library/a/b:1", &patterns).is_ok());
        let error = check_allowed("image", "gantry-test/a/b", &patterns).unwrap_err();
        assert_eq!(
            error.to_string(),
            "use the image \"gantry-test/a/b\": it is not on the list of allowed images:\n- gantry-test/*\n- docker.io/library/**\nPlease check the runner's configuration ([runners.docker] allowed_images)"
        );
        assert!(check_allowed("image", "anything", &[]).is_ok());
    }

    #[test]
    fn job_policies_must_be_allowed() {
        let mut config = DockerConfig::default();
        assert_eq!(
            pull_policies(&config, "a", None).unwrap(),
            [PullPolicy::Always]
        );
        let never = [gantry_protocol::PullPolicy::Never];
        let error = pull_policies(&config, "a", Some(&never)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "use image \"a\": pull_policy ([never]) defined in GitLab pipeline config is not one of the allowed_pull_policies ([always])"
        );
        config.pull_policy = vec![PullPolicy::IfNotPresent];
        config.allowed_pull_policies = vec![PullPolicy::Never, PullPolicy::IfNotPresent];
        assert_eq!(
            pull_policies(&config, "a", Some(&never)).unwrap(),
            [PullPolicy::Never]
        );
        assert_eq!(
            pull_policies(&config, "a", None).unwrap(),
            [PullPolicy::IfNotPresent]
        );
    }
}
