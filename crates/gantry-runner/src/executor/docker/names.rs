//! Names and labels of what the executor creates, and the service aliases GitLab
//! derives from an image name.

use std::collections::HashMap;

/// Label: the runner's short token. [`super::remove_leftovers`] looks for it.
pub const LABEL_RUNNER: &str = "com.gantry.runner";
/// Label: the job id.
pub const LABEL_JOB: &str = "com.gantry.job";
/// Label: this run of the job (a nonce), so the end of a job removes exactly what it
/// created even when two runs share a job id (two `gantry run`s).
pub const LABEL_INSTANCE: &str = "com.gantry.job.instance";
/// Label: what a container is for (`build`, `service`).
pub const LABEL_ROLE: &str = "com.gantry.role";

/// The labels every object of one job run carries.
pub(crate) fn job_labels(
    short_token: &str,
    job_id: i64,
    instance: &str,
) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_RUNNER.to_owned(), short_token.to_owned()),
        (LABEL_JOB.to_owned(), job_id.to_string()),
        (LABEL_INSTANCE.to_owned(), instance.to_owned()),
    ])
}

/// A short random-enough nonce (time, process, counter) for names and the instance
/// label.
pub(crate) fn nonce() -> String {
    use sha2::{Digest, Sha256};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let seed = format!(
        "{now}:{}:{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    Sha256::digest(seed.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The aliases GitLab gives a service from its image name: the name without tag,
/// digest and registry port, with `/` replaced by `__` and by `-` (duplicates
/// removed).
///
/// `postgres:16` → `postgres`; `registry.example.com:5000/group/tool:1` →
/// `registry.example.com__group__tool`, `registry.example.com-group-tool`.
pub fn service_aliases(image: &str) -> Vec<String> {
    let name = image_without_tag(image);
    // The registry port: `host:port/...`.
    let name = match name.split_once('/') {
        Some((first, rest)) if first.contains(':') => {
            let host = first.split(':').next().unwrap_or(first);
            format!("{host}/{rest}")
        }
        _ => name.to_owned(),
    };
    let mut aliases = vec![name.replace('/', "__"), name.replace('/', "-")];
    aliases.dedup();
    aliases.retain(|alias| !alias.is_empty());
    aliases
}

/// The image name without `:tag` and `@digest`.
pub fn image_without_tag(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(colon) => &image[..last_slash + colon],
        None => image,
    }
}

/// The reference to pull: a name without tag or digest gets `:latest` (the engine
/// would otherwise pull every tag).
pub(crate) fn pull_reference(image: &str) -> String {
    if image.contains('@') || image_without_tag(image).len() != image.len() {
        image.to_owned()
    } else {
        format!("{image}:latest")
    }
}

/// A name Docker accepts for a container, network or volume: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
pub(crate) fn sanitize(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    cleaned.trim_start_matches(['_', '.', '-']).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_follow_gitlab() {
        assert_eq!(service_aliases("postgres:16"), ["postgres"]);
        assert_eq!(service_aliases("postgres"), ["postgres"]);
        assert_eq!(
            service_aliases("registry.example.com/group/tool:1"),
            [
                "registry.example.com__group__tool",
                "registry.example.com-group-tool"
            ]
        );
        assert_eq!(
            service_aliases("registry.example.com:5000/group/tool:1"),
            [
                "registry.example.com__group__tool",
                "registry.example.com-group-tool"
            ]
        );
        assert_eq!(
            service_aliases("tutum/wordpress@sha256:abcd"),
            ["tutum__wordpress", "tutum-wordpress"]
        );
    }

    #[test]
    fn pull_references_have_a_tag() {
        assert_eq!(pull_reference("alpine"), "alpine:latest");
        assert_eq!(pull_reference("alpine:3"), "alpine:3");
        assert_eq!(
            pull_reference("host:5000/alpine"),
            "host:5000/alpine:latest"
        );
        assert_eq!(pull_reference("alpine@sha256:ab"), "alpine@sha256:ab");
    }

    #[test]
    fn names_are_docker_names() {
        assert_eq!(
            sanitize("gantry-abc-12-step_script"),
            "gantry-abc-12-step_script"
        );
        assert_eq!(sanitize("-x y/z"), "x-y-z");
    }
}
