//! Protected branches and tags (GitLab's `ProtectedBranch`/`ProtectedTag`, as far as CI
//! sees them): a pipeline of a ref one of its project's patterns matches is protected. It
//! then sees protected variables (project, group, instance), `CI_COMMIT_REF_PROTECTED` is
//! `true`, and runners with `access_level = ref_protected` take its jobs. The decision is
//! made once, when the pipeline is created (`Settings::ref_protected`), for every
//! source: API, web, push, schedule, trigger, downstream.
//!
//! A pattern is a name, or has `*` wildcards that match any characters, `/` included
//! (`release/*`, `*-stable`), as GitLab's `RefMatcher`. A new project's default branch
//! is protected (GitLab's default branch protection); unprotect it to have none. Who may
//! push or merge (GitLab's access levels) is not modelled: Gantry has one user.

use gantry_pipeline::context::scope_matches;
use gantry_store::{ProtectedRef, RefKind};

use super::git::ResolvedRef;
use super::settings::Settings;
use super::settings::SettingsError;
use super::time::now_ms;

/// The longest name or pattern (GitLab's ref names are at most 255 bytes in its API).
pub const MAX_PATTERN_CHARS: usize = 255;

/// Whether `name`, a branch or tag as `kind` says, is protected by one of `refs`.
pub fn is_protected(refs: &[ProtectedRef], kind: RefKind, name: &str) -> bool {
    refs.iter()
        .any(|p| p.kind == kind && scope_matches(&p.name, name))
}

/// Checks a name or pattern before it is stored; the message names the fix.
fn validate(kind: RefKind, name: &str) -> Result<(), SettingsError> {
    let what = kind.as_str();
    if name.trim().is_empty() {
        return Err(SettingsError::Invalid(format!(
            "name: is missing: give the {what} name or a pattern with `*`"
        )));
    }
    if name.chars().count() > MAX_PATTERN_CHARS {
        return Err(SettingsError::Invalid(format!(
            "name: is too long (maximum is {MAX_PATTERN_CHARS} characters)"
        )));
    }
    if name.starts_with("refs/") {
        return Err(SettingsError::Invalid(format!(
            "name: `{name}`: give the {what} name without `refs/…` (e.g. `main`, `release/*`)"
        )));
    }
    Ok(())
}

impl Settings {
    /// A project's protected branches (or tags), by name.
    pub async fn protected_refs(
        &self,
        project_id: i64,
        kind: RefKind,
    ) -> Result<Vec<ProtectedRef>, SettingsError> {
        self.store.project(project_id).await?;
        Ok(self
            .store
            .protected_refs(project_id)
            .await?
            .into_iter()
            .filter(|p| p.kind == kind)
            .collect())
    }

    /// Protects a branch (or tag) name or pattern (`Conflict` when it is already).
    pub async fn protect_ref(
        &self,
        project_id: i64,
        kind: RefKind,
        name: &str,
    ) -> Result<ProtectedRef, SettingsError> {
        validate(kind, name)?;
        self.store.project(project_id).await?;
        Ok(self
            .store
            .protect_ref(project_id, kind, name, now_ms())
            .await?)
    }

    /// Removes a protection (`NotFound` when there is none of that name).
    pub async fn unprotect_ref(
        &self,
        project_id: i64,
        kind: RefKind,
        name: &str,
    ) -> Result<(), SettingsError> {
        Ok(self.store.unprotect_ref(project_id, kind, name).await?)
    }

    /// Whether a pipeline of `r` in project `project_id` is protected.
    pub(crate) async fn ref_protected(
        &self,
        project_id: i64,
        r: &ResolvedRef,
    ) -> Result<bool, SettingsError> {
        let kind = if r.tag { RefKind::Tag } else { RefKind::Branch };
        let refs = self.store.protected_refs(project_id).await?;
        Ok(is_protected(&refs, kind, &r.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(kind: RefKind, name: &str) -> ProtectedRef {
        ProtectedRef {
            id: 1,
            kind,
            name: name.to_owned(),
            created_at: 0,
        }
    }

    #[test]
    fn names_and_wildcards_match_their_kind_only() {
        let refs = [
            protected(RefKind::Branch, "main"),
            protected(RefKind::Branch, "release/*"),
            protected(RefKind::Branch, "*-stable"),
            protected(RefKind::Tag, "v*"),
        ];
        let branch = |n: &str| is_protected(&refs, RefKind::Branch, n);
        let tag = |n: &str| is_protected(&refs, RefKind::Tag, n);
        assert!(branch("main"));
        assert!(!branch("main2"));
        assert!(branch("release/1.0"));
        assert!(branch("release/1.0/hotfix"), "`*` matches `/` too");
        assert!(branch("16-5-stable"));
        assert!(!branch("v1.0"), "a tag pattern protects no branch");
        assert!(tag("v1.0"));
        assert!(!tag("main"));
    }

    #[test]
    fn names_are_checked() {
        for (name, fix) in [("", "is missing"), ("refs/heads/main", "without `refs/…`")] {
            match validate(RefKind::Branch, name) {
                Err(SettingsError::Invalid(m)) => assert!(m.contains(fix), "{m}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(validate(RefKind::Tag, &"v".repeat(256)).is_err());
        assert!(validate(RefKind::Tag, "v*").is_ok());
    }
}
