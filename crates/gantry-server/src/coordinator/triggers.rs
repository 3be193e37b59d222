//! Pipeline trigger tokens (GitLab's `Ci::Trigger`): a project's tokens that start a
//! pipeline of a ref with variables, without a user token (`POST
//! /projects/:id/trigger/pipeline`, from another system's CI or a webhook). The pipeline's
//! source is `trigger` (`CI_PIPELINE_SOURCE=trigger`, `CI_PIPELINE_TRIGGERED=true`) and its
//! variables are pipeline variables (stored encrypted). Tokens are `glptt-` + 40 hex
//! digits and kept only as SHA-256 hashes.
//!
//! The service ([`Triggers`], `Coordinator::triggers()`) keeps the tokens (create, list,
//! revoke, use); it calls the store only. Starting the pipeline stays the coordinator's
//! (`trigger_pipeline`).
//!
//! The pipeline is created through the same `create_pipeline_with` as the API's, and
//! remembers the token's `CI_TRIGGER_SHORT_TOKEN` (GitLab's `Ci::Trigger#short_token`, the 4
//! characters after `glptt-`), which its jobs get.

use gantry_pipeline::Source;

use super::creation::PipelineRequest;
use super::error::Result;
use super::time::now_ms;
use super::token;
use super::views::{PipelineView, TriggerView};
use super::{Coordinator, CoordinatorError};

/// What starts a trigger token (GitLab's).
pub const TRIGGER_TOKEN_PREFIX: &str = "glptt-";
/// How much of a token lists show.
const SHOWN: usize = TRIGGER_TOKEN_PREFIX.len() + 4;
/// The longest description.
const MAX_DESCRIPTION: usize = 255;

fn view(t: &gantry_store::PipelineTrigger, token: String) -> TriggerView {
    TriggerView {
        id: t.id,
        description: t.description.clone(),
        token,
        created_at: t.created_at,
        updated_at: t.last_used_at.unwrap_or(t.created_at),
        last_used: t.last_used_at,
    }
}

/// GitLab's `Ci::Trigger#short_token` (`CI_TRIGGER_SHORT_TOKEN`): the token's first 4
/// characters after `glptt-`, read from the stored beginning of the token (`glptt-abcd…`).
fn short_token(shown: &str) -> String {
    shown
        .strip_prefix(TRIGGER_TOKEN_PREFIX)
        .unwrap_or(shown)
        .chars()
        .take(4)
        .collect()
}

/// A description a trigger may have: 1 to [`MAX_DESCRIPTION`] characters, not blank.
fn check_description(description: &str) -> std::result::Result<(), CoordinatorError> {
    if description.trim().is_empty() || description.chars().count() > MAX_DESCRIPTION {
        return Err(CoordinatorError::Invalid(format!(
            "description: give the trigger a description of 1 to {MAX_DESCRIPTION} characters"
        )));
    }
    Ok(())
}

/// The trigger tokens service (see the module docs).
pub struct Triggers<'a> {
    store: &'a gantry_store::Store,
}

impl Triggers<'_> {
    /// A new trigger token for the project; the answer holds the whole token (the only
    /// time it is shown).
    pub async fn create(
        &self,
        project_id: i64,
        description: &str,
    ) -> std::result::Result<TriggerView, CoordinatorError> {
        check_description(description)?;
        self.store.project(project_id).await?;
        let secret = token::new_token(TRIGGER_TOKEN_PREFIX);
        let shown = format!("{}…", &secret[..SHOWN]);
        let trigger = self
            .store
            .create_pipeline_trigger(
                project_id,
                &token::hash(&secret),
                &shown,
                description.trim(),
                now_ms(),
            )
            .await?;
        Ok(view(&trigger, secret))
    }

    /// The project's trigger tokens (their first characters), oldest first.
    pub async fn list(
        &self,
        project_id: i64,
    ) -> std::result::Result<Vec<TriggerView>, CoordinatorError> {
        self.store.project(project_id).await?;
        Ok(self
            .store
            .pipeline_triggers(project_id)
            .await?
            .iter()
            .map(|t| view(t, t.token_prefix.clone()))
            .collect())
    }

    /// One trigger token of the project (its first characters; `NotFound` when the
    /// project has no trigger `id`).
    pub async fn get(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<TriggerView, CoordinatorError> {
        let t = self.store.pipeline_trigger(project_id, id).await?;
        Ok(view(&t, t.token_prefix.clone()))
    }

    /// A new description for a trigger token (`NotFound` when the project has no trigger
    /// `id`); the token stays.
    pub async fn describe(
        &self,
        project_id: i64,
        id: i64,
        description: &str,
    ) -> std::result::Result<TriggerView, CoordinatorError> {
        check_description(description)?;
        let t = self
            .store
            .describe_pipeline_trigger(project_id, id, description.trim())
            .await?;
        Ok(view(&t, t.token_prefix.clone()))
    }

    /// Revokes a trigger token (`NotFound` when the project has no trigger `id`).
    pub async fn delete(
        &self,
        project_id: i64,
        id: i64,
    ) -> std::result::Result<(), CoordinatorError> {
        Ok(self.store.delete_pipeline_trigger(project_id, id).await?)
    }

    /// The trigger whose token is `secret`, its use recorded (`NotFound` for no token of
    /// any project).
    pub(crate) async fn use_token(&self, secret: &str) -> Result<gantry_store::PipelineTrigger> {
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(CoordinatorError::NotFound("pipeline trigger"));
        }
        self.store
            .use_pipeline_trigger(&token::hash(secret), now_ms())
            .await?
            .ok_or(CoordinatorError::NotFound("pipeline trigger"))
    }
}

impl Coordinator {
    /// The trigger tokens service (see the module docs).
    pub fn triggers(&self) -> Triggers<'_> {
        Triggers {
            store: &self.inner.store,
        }
    }

    /// Starts a pipeline of `request.ref_name` with `token`, which must be one of the
    /// project's trigger tokens (else `NotFound`, as GitLab answers 404). The request's
    /// source is replaced by `trigger`.
    pub async fn trigger_pipeline(
        &self,
        project_id: i64,
        secret: &str,
        request: PipelineRequest,
    ) -> std::result::Result<PipelineView, CoordinatorError> {
        let trigger = self.triggers().use_token(secret).await?;
        if trigger.project_id != project_id {
            return Err(CoordinatorError::NotFound("pipeline trigger"));
        }
        self.create_pipeline_of(
            project_id,
            PipelineRequest {
                source: Source::Trigger,
                ..request
            },
            Some(short_token(&trigger.token_prefix)),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_short_token_is_four_characters_after_the_prefix() {
        assert_eq!(super::short_token("glptt-1a2b…"), "1a2b");
        assert_eq!(super::short_token("glptt-1a2b3c4d"), "1a2b");
    }
}
