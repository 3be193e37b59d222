//! Having an image on the engine, per gitlab-runner's pull policies: `always` pulls,
//! `if-not-present` pulls only when the engine lacks it, `never` only looks. With
//! several policies the next is tried when one fails ("Attempt #2: Trying …"). A pull
//! sends the registry's credentials found by [`super::auth`].
//!
//! When every policy failed and one of them pulled (`always`, gitlab-runner's default)
//! while the engine has the image (built or loaded on this machine, the usual case
//! without a registry), the failure says so and names the fix — `pull_policy =
//! ["if-not-present"]` under `[runners.docker]`, or `--docker-pull-policy
//! if-not-present` at registration — in the job's log (a warning line) and in the error
//! that ends the job, which the runner's own log prints. gitlab-runner says nothing
//! here; the check is one `inspect_image` on a job that fails anyway.

use bollard::Docker;
use bollard::models::ImageInspect;
use bollard::query_parameters::CreateImageOptions;
use futures_util::StreamExt;

use super::auth::Registries;
use super::error::{DockerError, describe};
use super::names::pull_reference;
use crate::config::PullPolicy;
use crate::trace::Trace;

/// Makes `image` available per `policies` and returns what the engine knows of it.
pub(crate) async fn ensure_image(
    docker: &Docker,
    image: &str,
    policies: &[PullPolicy],
    platform: Option<&str>,
    registries: &Registries,
    trace: &Trace,
) -> Result<ImageInspect, DockerError> {
    let mut reason = String::from("no pull policy to try");
    for (attempt, policy) in policies.iter().enumerate() {
        if attempt > 0 {
            trace.runner_line(&format!(
                "Attempt #{}: Trying \"{}\" pull policy",
                attempt + 1,
                policy.as_str()
            ));
        }
        match try_policy(docker, image, *policy, platform, registries, trace).await {
            Ok(inspect) => {
                let id = inspect.id.as_deref().unwrap_or("?");
                trace.runner_line(&format!("Using docker image {id} for {image} ..."));
                return Ok(inspect);
            }
            Err(why) => {
                if policies.len() > 1 {
                    trace.warning(&format!(
                        "Failed to pull image with policy \"{}\": {why}",
                        policy.as_str()
                    ));
                }
                reason = why;
            }
        }
    }
    if policies.contains(&PullPolicy::Always) && docker.inspect_image(image).await.is_ok() {
        let hint = local_image_hint(image);
        trace.warning(&hint);
        reason = format!("{reason}\n{hint}");
    }
    Err(DockerError::Pull {
        image: image.to_owned(),
        policies: policies.iter().map(|p| p.as_str().to_owned()).collect(),
        reason,
    })
}

/// What to do when `image` is on this machine and the pull policy pulled it anyway.
fn local_image_hint(image: &str) -> String {
    format!(
        "the image {image:?} is on this machine, but pull policy \"always\" pulls it from its registry first; \
         to use the local image, set pull_policy = [\"if-not-present\"] under [runners.docker] in the runner's config.toml \
         (or register with --docker-pull-policy if-not-present)"
    )
}

async fn try_policy(
    docker: &Docker,
    image: &str,
    policy: PullPolicy,
    platform: Option<&str>,
    registries: &Registries,
    trace: &Trace,
) -> Result<ImageInspect, String> {
    if policy != PullPolicy::Always {
        match docker.inspect_image(image).await {
            Ok(inspect) => {
                trace.runner_line(&format!(
                    "Using locally found image version due to \"{}\" pull policy",
                    policy.as_str()
                ));
                return Ok(inspect);
            }
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            Err(error) => return Err(describe(&error)),
        }
        if policy == PullPolicy::Never {
            return Err(format!(
                "the image is not on this machine and the policy does not allow pulling; \
                 build or load it first (`docker image ls {image}`), or allow `if-not-present`"
            ));
        }
    }
    pull(docker, image, platform, registries, trace).await?;
    docker
        .inspect_image(image)
        .await
        .map_err(|error| describe(&error))
}

async fn pull(
    docker: &Docker,
    image: &str,
    platform: Option<&str>,
    registries: &Registries,
    trace: &Trace,
) -> Result<(), String> {
    let credentials = registries.for_image(image).map(|found| {
        trace.runner_line(&format!(
            "Authenticating with credentials from {}",
            found.source
        ));
        found.credentials.clone()
    });
    let reference = pull_reference(image);
    trace.runner_line(&format!("Pulling docker image {reference} ..."));
    let options = CreateImageOptions {
        from_image: Some(reference),
        platform: platform.unwrap_or_default().to_owned(),
        ..CreateImageOptions::default()
    };
    let mut progress = docker.create_image(Some(options), None, credentials);
    while let Some(item) = progress.next().await {
        match item {
            Ok(info) => {
                if let Some(message) = info.error_detail.and_then(|detail| detail.message) {
                    return Err(message);
                }
            }
            Err(error) => return Err(describe(&error)),
        }
    }
    Ok(())
}
