//! [`DockerError`]: what can go wrong between the runner and the Docker engine.

/// Why the Docker executor could not do something. Messages read after "failed to".
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// No engine answered.
    #[error("reach the Docker engine at {host}: {reason}\n{hint}")]
    Unavailable {
        /// `DOCKER_HOST`, or the default socket.
        host: String,
        /// What happened.
        reason: String,
        /// What to do about it.
        hint: String,
    },
    /// The engine refused or failed a request.
    #[error("{action}: {reason}")]
    Api {
        /// What we asked (`create the job container`, `start service postgres:16`).
        action: String,
        /// The engine's answer.
        reason: String,
        /// The HTTP status, when the engine answered.
        status: Option<u16>,
    },
    /// The job names an image (or service) `allowed_images` (or `allowed_services`)
    /// does not allow.
    #[error(
        "use the {kind} {image:?}: it is not on the list of allowed {kind}s:\n{}\nPlease check the runner's configuration ([runners.docker] allowed_{kind}s)",
        patterns.iter().map(|p| format!("- {p}")).collect::<Vec<_>>().join("\n")
    )]
    NotAllowed {
        /// `image` or `service`.
        kind: &'static str,
        /// The image.
        image: String,
        /// The patterns.
        patterns: Vec<String>,
    },
    /// The job asks for pull policies the runner does not allow.
    #[error(
        "use image {image:?}: pull_policy ([{}]) defined in {source_name} is not one of the allowed_pull_policies ([{}])",
        asked.join(", "), allowed.join(", ")
    )]
    PullPolicyNotAllowed {
        /// The image.
        image: String,
        /// The policies asked for.
        asked: Vec<String>,
        /// Where they come from (`GitLab pipeline config`, `Runner config`).
        source_name: &'static str,
        /// The policies allowed.
        allowed: Vec<String>,
    },
    /// The image could not be had with any of the pull policies.
    #[error("pull image {image:?} with pull policy [{}]: {reason}", policies.join(", "))]
    Pull {
        /// The image.
        image: String,
        /// The policies tried.
        policies: Vec<String>,
        /// Why the last one failed.
        reason: String,
    },
    /// Neither the job nor the configuration names an image.
    #[error(
        "choose an image: the job has no `image:` and [runners.docker] image is not set\nset `image:` in .gitlab-ci.yml or `image = \"…\"` under [runners.docker]"
    )]
    NoImage,
    /// The job's `image:docker` or a service's options have keys this runner does not
    /// support.
    #[error("use the executor options of {what}: {reason}")]
    ExecutorOptions {
        /// `image` or `service postgres:16`.
        what: String,
        /// Which keys.
        reason: String,
    },
    /// `prepare` was not called (or failed) before a stage.
    #[error("run a stage: the Docker executor was not prepared")]
    NotPrepared,
}

impl DockerError {
    pub(crate) fn api(action: impl Into<String>, error: &bollard::errors::Error) -> Self {
        let status = match error {
            bollard::errors::Error::DockerResponseServerError { status_code, .. } => {
                Some(*status_code)
            }
            _ => None,
        };
        Self::Api {
            action: action.into(),
            reason: describe(error),
            status,
        }
    }

    /// Whether the engine said the thing asked about does not exist (HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Self::Api {
                status: Some(404),
                ..
            }
        )
    }

    /// Whether this is a pull failure (`image_pull_failure`).
    pub fn is_pull_failure(&self) -> bool {
        matches!(self, Self::Pull { .. })
    }

    /// Whether this is the runner's configuration refusing the job
    /// (`runner_configuration_error`).
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            Self::NotAllowed { .. } | Self::PullPolicyNotAllowed { .. } | Self::NoImage
        )
    }
}

/// A bollard error with its causes (hyper's errors say little on their own).
pub(crate) fn describe(error: &bollard::errors::Error) -> String {
    if let bollard::errors::Error::DockerResponseServerError { message, .. } = error {
        return message.trim().to_owned();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
