//! Forges' webhooks (`POST /api/v4/projects/:id/forge_hook`): GitHub's `pull_request`,
//! Gitea's and Forgejo's `pull_request`, GitLab's `Merge Request Hook` become merge
//! requests of the project and `merge_request_event` pipelines (`merge_requests.rs`);
//! their push events fetch the repository as `POST /projects/:id/mirror/pull` does
//! (`pushes.rs`).
//!
//! Each delivery proves itself with the project's shared secret, as each forge signs:
//! GitHub `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`; Gitea
//! `X-Gitea-Signature` (Forgejo `X-Forgejo-Signature`): the same digest, bare hex;
//! GitLab `X-Gitlab-Token: <the secret>`. The digests are compared in constant time
//! (`hmac`'s `verify_slice`). Gitea also sends `X-GitHub-Event`, so its own headers are
//! looked at first.
//!
//! What happens, by action (GitLab's `ExternalPullRequests::ProcessGithubEventService`
//! and `MergeRequests::RefreshService` for the choice of actions):
//! - opened, reopened, new commits (GitHub `synchronize`, Gitea `synchronized`, GitLab
//!   `open`, `reopen`, and `update` with `oldrev`): the repository is fetched (its
//!   branches, then the forge's ref of the request: `refs/pull/<n>/head` on GitHub and
//!   Gitea, `refs/merge-requests/<iid>/head` on GitLab, into the mirror's
//!   `refs/merge-requests/<n>/head`), the request is recorded and a pipeline created for
//!   its head (`?merged_result=true` on the hook's URL asks for merged results);
//! - closed or merged: the request is recorded as such (no more pipelines, and it leaves
//!   `CI_OPEN_MERGE_REQUESTS`);
//! - other actions (edited, labeled, ready for review, …): the request's title,
//!   description, labels and draft flag are updated, nothing runs;
//! - requests from forks are refused, as GitLab refuses them for external pull requests
//!   (their code would run with the project's variables).
//!
//! Pushed projects: a project's code comes only from its repository URL (the mirror is
//! fetched from it), so a request's head must be reachable there: its source branch, or
//! the forge's request ref. A head that is not is a `400` naming both.
//!
//! Cost: one delivery is one JSON parse, one HMAC over the body, two `git fetch`es and a
//! pipeline creation.

use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::Value;
use sha2::Sha256;

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::git::{ResolvedRef, git};
use super::merge_requests::MergeRequestPipelineRequest;
use gantry_store::NewMergeRequest;

/// A forge's webhook delivery, as it arrived: the headers that matter and the body.
#[derive(Clone, Copy, Debug, Default)]
pub struct ForgeHook<'a> {
    /// `X-GitHub-Event`.
    pub github_event: Option<&'a str>,
    /// `X-Hub-Signature-256`.
    pub github_signature: Option<&'a str>,
    /// `X-Gitea-Event` or `X-Forgejo-Event`.
    pub gitea_event: Option<&'a str>,
    /// `X-Gitea-Signature` or `X-Forgejo-Signature`.
    pub gitea_signature: Option<&'a str>,
    /// `X-Gitlab-Event`.
    pub gitlab_event: Option<&'a str>,
    /// `X-Gitlab-Token`.
    pub gitlab_token: Option<&'a str>,
    /// `?merged_result=true`: merged results pipelines.
    pub merged_result: bool,
    pub body: &'a [u8],
}

/// What a delivery did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HookOutcome {
    /// `github`, `gitea` or `gitlab`.
    pub forge: &'static str,
    /// The forge's event name.
    pub event: String,
    /// The request's action, for a pull or merge request event.
    pub action: Option<String>,
    /// The merge request recorded (the forge's number).
    pub merge_request_iid: Option<i64>,
    /// The pipeline created.
    pub pipeline_id: Option<i64>,
    /// Why there is none, when one could have been.
    pub reason: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forge {
    GitHub,
    Gitea,
    GitLab,
}

impl Forge {
    fn as_str(self) -> &'static str {
        match self {
            Forge::GitHub => "github",
            Forge::Gitea => "gitea",
            Forge::GitLab => "gitlab",
        }
    }
}

/// What an action does to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    /// New commits, or (re)opened: a pipeline.
    Run,
    /// Recorded, nothing runs.
    Record,
}

/// A pull or merge request event, normalised.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RequestEvent {
    action: String,
    effect: Effect,
    request: NewMergeRequest,
    /// The forge's ref of the request's head.
    head_ref: String,
    from_fork: bool,
}

/// Which forge sent the delivery, by its event header (Gitea's own first: it sends
/// GitHub's too), and whether its secret holds.
fn authenticate(hook: &ForgeHook<'_>, secret: &str) -> Result<(Forge, String)> {
    let refused = |why: &str| CoordinatorError::Forbidden(why.to_owned());
    if let Some(event) = hook.gitea_event {
        let given = hook.gitea_signature.ok_or_else(|| {
            refused(
                "the Gitea webhook has no X-Gitea-Signature: give the webhook the project's secret",
            )
        })?;
        verify_hmac(secret, hook.body, given.trim())?;
        return Ok((Forge::Gitea, event.to_owned()));
    }
    if let Some(event) = hook.gitlab_event {
        let given = hook.gitlab_token.ok_or_else(|| {
            refused("the GitLab webhook has no X-Gitlab-Token: give the webhook the project's secret as its secret token")
        })?;
        let equal = given.len() == secret.len()
            && given
                .bytes()
                .zip(secret.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if !equal {
            return Err(refused(
                "the webhook's X-Gitlab-Token is not the project's secret",
            ));
        }
        return Ok((Forge::GitLab, event.to_owned()));
    }
    if let Some(event) = hook.github_event {
        let given = hook
            .github_signature
            .and_then(|s| s.trim().strip_prefix("sha256="))
            .ok_or_else(|| {
                refused("the GitHub webhook has no X-Hub-Signature-256: give the webhook the project's secret")
            })?;
        verify_hmac(secret, hook.body, given)?;
        return Ok((Forge::GitHub, event.to_owned()));
    }
    Err(CoordinatorError::Invalid(
        "the request is no forge's webhook: it has no X-GitHub-Event, X-Gitea-Event or X-Gitlab-Event header".to_owned(),
    ))
}

/// `hex` is the HMAC-SHA256 of `body` under `secret` (constant-time).
fn verify_hmac(secret: &str, body: &[u8], hex: &str) -> Result<()> {
    let refused = || {
        CoordinatorError::Forbidden(
            "the webhook's signature does not match the project's secret".to_owned(),
        )
    };
    let given = unhex(hex).ok_or_else(refused)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| refused())?;
    mac.update(body);
    mac.verify_slice(&given).map_err(|_| refused())
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The hex HMAC-SHA256 of `body` under `secret`: what GitHub and Gitea sign with.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(body);
    super::token::hex(&mac.finalize().into_bytes())
}

fn text(v: &Value, path: &[&str]) -> String {
    let mut at = v;
    for key in path {
        match at.get(key) {
            Some(next) => at = next,
            None => return String::new(),
        }
    }
    at.as_str().unwrap_or_default().to_owned()
}

fn number(v: &Value, path: &[&str]) -> Option<i64> {
    let mut at = v;
    for key in path {
        at = at.get(key)?;
    }
    at.as_i64()
}

fn missing(forge: Forge, what: &str) -> CoordinatorError {
    CoordinatorError::Invalid(format!(
        "the {} webhook's payload has no {what}",
        forge.as_str()
    ))
}

/// A GitHub or Gitea `pull_request` payload (the two share its shape).
fn pull_request_event(forge: Forge, v: &Value, project_id: i64) -> Result<RequestEvent> {
    let action = text(v, &["action"]);
    let pr = v
        .get("pull_request")
        .ok_or_else(|| missing(forge, "pull_request"))?;
    let iid = number(v, &["number"])
        .or_else(|| number(pr, &["number"]))
        .ok_or_else(|| missing(forge, "number"))?;
    let source_branch = text(pr, &["head", "ref"]);
    let target_branch = text(pr, &["base", "ref"]);
    let source_sha = text(pr, &["head", "sha"]);
    if source_branch.is_empty() || target_branch.is_empty() || source_sha.is_empty() {
        return Err(missing(
            forge,
            "pull_request.head.ref, head.sha or base.ref",
        ));
    }
    let repository = text(v, &["repository", "full_name"]);
    let repo_of = |side: &str| {
        let name = text(pr, &[side, "repo", "full_name"]);
        if name.is_empty() {
            repository.clone()
        } else {
            name
        }
    };
    let (source_repository, target_repository) = (repo_of("head"), repo_of("base"));
    // Gitea names the repositories by id when it leaves their objects out.
    let from_fork = source_repository != target_repository
        || matches!(
            (number(pr, &["head", "repo_id"]), number(pr, &["base", "repo_id"])),
            (Some(a), Some(b)) if a != b
        );
    let merged = pr.get("merged").and_then(Value::as_bool).unwrap_or(false)
        || !text(pr, &["merged_at"]).is_empty();
    let state = match text(pr, &["state"]).as_str() {
        "closed" if merged => "merged",
        "closed" => "closed",
        _ => "opened",
    };
    let effect = match (forge, action.as_str()) {
        (_, "opened" | "reopened")
        | (Forge::GitHub, "synchronize")
        | (Forge::Gitea, "synchronized") => Effect::Run,
        _ => Effect::Record,
    };
    let labels = pr
        .get("labels")
        .and_then(Value::as_array)
        .map(|ls| {
            ls.iter()
                .filter_map(|l| l.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let author = {
        let login = text(pr, &["user", "login"]);
        if login.is_empty() {
            text(pr, &["user", "username"])
        } else {
            login
        }
    };
    Ok(RequestEvent {
        action,
        effect,
        head_ref: format!("refs/pull/{iid}/head"),
        from_fork,
        request: NewMergeRequest {
            project_id,
            iid,
            forge: forge.as_str().to_owned(),
            state: state.to_owned(),
            title: text(pr, &["title"]),
            description: text(pr, &["body"]),
            source_branch,
            target_branch,
            source_sha,
            target_sha: text(pr, &["base", "sha"]),
            source_repository,
            target_repository,
            draft: pr.get("draft").and_then(Value::as_bool).unwrap_or(false),
            labels,
            author,
            web_url: text(pr, &["html_url"]),
        },
    })
}

/// A GitLab `Merge Request Hook` payload.
fn merge_request_event(v: &Value, project_id: i64) -> Result<RequestEvent> {
    let forge = Forge::GitLab;
    let a = v
        .get("object_attributes")
        .ok_or_else(|| missing(forge, "object_attributes"))?;
    let action = text(a, &["action"]);
    let iid = number(a, &["iid"]).ok_or_else(|| missing(forge, "object_attributes.iid"))?;
    let source_branch = text(a, &["source_branch"]);
    let target_branch = text(a, &["target_branch"]);
    let source_sha = text(a, &["last_commit", "id"]);
    if source_branch.is_empty() || target_branch.is_empty() || source_sha.is_empty() {
        return Err(missing(
            forge,
            "object_attributes.source_branch, target_branch or last_commit.id",
        ));
    }
    let from_fork = matches!(
        (number(a, &["source_project_id"]), number(a, &["target_project_id"])),
        (Some(s), Some(t)) if s != t
    );
    let effect = match action.as_str() {
        "open" | "reopen" => Effect::Run,
        "update" if a.get("oldrev").is_some_and(|r| !r.is_null()) => Effect::Run,
        _ => Effect::Record,
    };
    let state = match text(a, &["state"]).as_str() {
        "merged" => "merged",
        "closed" | "locked" => "closed",
        _ => "opened",
    };
    let labels = v
        .get("labels")
        .or_else(|| a.get("labels"))
        .and_then(Value::as_array)
        .map(|ls| {
            ls.iter()
                .filter_map(|l| l.get("title").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let draft = a
        .get("draft")
        .or_else(|| a.get("work_in_progress"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(RequestEvent {
        action,
        effect,
        head_ref: format!("refs/merge-requests/{iid}/head"),
        from_fork,
        request: NewMergeRequest {
            project_id,
            iid,
            forge: forge.as_str().to_owned(),
            state: state.to_owned(),
            title: text(a, &["title"]),
            description: text(a, &["description"]),
            source_branch,
            target_branch,
            source_sha,
            // GitLab's hook names no target head: the repository's is read.
            target_sha: String::new(),
            source_repository: text(a, &["source", "path_with_namespace"]),
            target_repository: text(a, &["target", "path_with_namespace"]),
            draft,
            labels,
            author: text(v, &["user", "username"]),
            web_url: text(a, &["url"]),
        },
    })
}

impl Coordinator {
    /// Sets the project's forge webhook secret (sealed at rest); `None` removes it, and
    /// deliveries are refused again.
    pub async fn set_forge_hook_secret(
        &self,
        project_id: i64,
        secret: Option<&str>,
    ) -> std::result::Result<(), CoordinatorError> {
        if secret.is_some_and(|s| s.len() < 8) {
            return Err(CoordinatorError::Invalid(
                "the webhook secret must be at least 8 characters long".to_owned(),
            ));
        }
        let sealed = secret.map(|s| self.settings().seal(s));
        Ok(self
            .inner
            .store
            .set_forge_hook_secret(project_id, sealed.as_deref())
            .await?)
    }

    /// Takes a forge's webhook delivery for project `project_id` (see the module's
    /// notes): `Forbidden` when it does not prove the project's secret.
    pub async fn receive_forge_hook(
        &self,
        project_id: i64,
        hook: &ForgeHook<'_>,
    ) -> std::result::Result<HookOutcome, CoordinatorError> {
        let store = &self.inner.store;
        let sealed = store.forge_hook_secret(project_id).await?.ok_or_else(|| {
            CoordinatorError::Forbidden(
                "the project has no webhook secret: set one with PUT /api/v4/projects/:id/forge_hook".to_owned(),
            )
        })?;
        let secret = self
            .settings()
            .open(&sealed)
            .map_err(CoordinatorError::corrupt)?;
        let (forge, event) = authenticate(hook, &secret)?;
        let mut outcome = HookOutcome {
            forge: forge.as_str(),
            event: event.clone(),
            action: None,
            merge_request_iid: None,
            pipeline_id: None,
            reason: None,
        };
        let is_push = matches!(
            (forge, event.as_str()),
            (Forge::GitHub | Forge::Gitea, "push") | (Forge::GitLab, "Push Hook" | "Tag Push Hook")
        );
        if is_push {
            let pushed = self.pull_mirror(project_id).await?;
            outcome.pipeline_id = pushed.iter().find_map(|p| p.pipeline_id);
            return Ok(outcome);
        }
        let is_request = matches!(
            (forge, event.as_str()),
            (Forge::GitHub | Forge::Gitea, "pull_request") | (Forge::GitLab, "Merge Request Hook")
        );
        if !is_request {
            outcome.reason = Some(format!(
                "`{event}` events are not used: send pull request (merge request) and push events"
            ));
            return Ok(outcome);
        }
        let payload: Value = serde_json::from_slice(hook.body).map_err(|e| {
            CoordinatorError::Invalid(format!(
                "the {} webhook's body is not JSON: {e} (set the webhook's content type to application/json)",
                forge.as_str()
            ))
        })?;
        let e = match forge {
            Forge::GitLab => merge_request_event(&payload, project_id)?,
            Forge::GitHub | Forge::Gitea => pull_request_event(forge, &payload, project_id)?,
        };
        outcome.action = Some(e.action.clone());
        outcome.merge_request_iid = Some(e.request.iid);
        if e.from_fork {
            outcome.reason = Some(
                "requests from forks are not supported (GitLab refuses them for external pull requests too)"
                    .to_owned(),
            );
            return Ok(outcome);
        }
        let mut request = e.request.clone();
        if e.effect == Effect::Record || request.state != "opened" {
            // Keep the heads the last pipeline ran for, when the request is known.
            if let Ok(known) = store.merge_request_by_iid(project_id, request.iid).await {
                request.source_sha = known.source_sha;
                request.target_sha = known.target_sha;
            }
            self.upsert_merge_request(&request).await?;
            return Ok(outcome);
        }
        self.fetch_request_head(project_id, &e).await?;
        let row = self.upsert_merge_request(&request).await?;
        match self
            .create_merge_request_pipeline(
                row.id,
                MergeRequestPipelineRequest {
                    merged_result: hook.merged_result,
                    ..MergeRequestPipelineRequest::default()
                },
            )
            .await
        {
            Ok(p) => outcome.pipeline_id = Some(p.id),
            Err(CoordinatorError::Conflict(why)) | Err(CoordinatorError::Invalid(why)) => {
                outcome.reason = Some(why);
            }
            Err(other) => return Err(other),
        }
        Ok(outcome)
    }

    /// Brings the request's head into the project's mirror: its branches from the
    /// repository URL, then the forge's ref of the request (which a repository that is
    /// not the forge's may lack: then the source branch must hold the head).
    async fn fetch_request_head(&self, project_id: i64, e: &RequestEvent) -> Result<()> {
        let project = self.inner.store.project(project_id).await?;
        let mirror = self.sources().sync_mirror(&project).await?;
        let iid = e.request.iid;
        let fetched = git(
            Some(&mirror.path),
            &[
                "fetch",
                "--quiet",
                "--force",
                "--no-write-fetch-head",
                "--",
                &project.repo_url,
                &format!("+{}:refs/merge-requests/{iid}/head", e.head_ref),
            ],
        )
        .await;
        let head = ResolvedRef {
            name: e.request.source_branch.clone(),
            tag: false,
            sha: e.request.source_sha.clone(),
        };
        if mirror.commit_info(&head).await.is_err() {
            let why = match fetched {
                Ok(_) => String::new(),
                Err(e) => format!(" ({e})"),
            };
            return Err(CoordinatorError::Invalid(format!(
                "the request's head {} is neither on its branch `{}` nor at {} in {}{why}: the project's code comes from that repository",
                e.request.source_sha, e.request.source_branch, e.head_ref, project.repo_url
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GitHub's documented example: the secret `It's a Secret to Everybody` and the body
    /// `Hello, World!` give this signature ("Validating webhook deliveries").
    #[test]
    fn github_documented_signature_verifies() {
        let secret = "It's a Secret to Everybody";
        let body = b"Hello, World!";
        let expected = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(sign(secret, body), expected);
        assert!(verify_hmac(secret, body, expected).is_ok());
        assert!(verify_hmac(secret, b"Hello, World?", expected).is_err());
        assert!(verify_hmac("another", body, expected).is_err());
        assert!(verify_hmac(secret, body, "zz").is_err());
    }

    #[test]
    fn gitea_is_told_from_github_by_its_own_header() {
        let body = br#"{"action":"opened"}"#;
        let sig = sign("s3cr3t-value", body);
        let github_sig = format!("sha256={sig}");
        let hook = ForgeHook {
            github_event: Some("pull_request"),
            github_signature: Some(&github_sig),
            gitea_event: Some("pull_request"),
            gitea_signature: Some(&sig),
            body,
            ..ForgeHook::default()
        };
        let (forge, event) = authenticate(&hook, "s3cr3t-value").expect("verified");
        assert_eq!((forge, event.as_str()), (Forge::Gitea, "pull_request"));
        let gitlab = ForgeHook {
            gitlab_event: Some("Merge Request Hook"),
            gitlab_token: Some("wrong-secret"),
            body,
            ..ForgeHook::default()
        };
        assert!(matches!(
            authenticate(&gitlab, "s3cr3t-value"),
            Err(CoordinatorError::Forbidden(_))
        ));
    }
}
