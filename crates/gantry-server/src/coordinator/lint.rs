//! The CI Lint API (`GET`/`POST /projects/:id/ci/lint`): a configuration checked in the
//! project's context — its files for `include:local`, the projects and templates it may
//! include, its instance, group and project variables — by the compiler that creates
//! pipelines. A static check evaluates the configuration as a push pipeline of the
//! default branch would; a dry run as one of the branch or tag asked for, and fails when
//! that pipeline would not be created (workflow rules, no jobs).
//!
//! Pipeline creation and the lint build their facts, variables and include sources in one
//! place (`Coordinator::compile_scope`); `ChildFiles` puts the given `content` in place of
//! the configuration file. Nothing is persisted.

use serde::Serialize;

use gantry_pipeline::{Compiled, Options, Source};

use super::creation::{ChildConfig, ChildFiles};
use super::error::CoordinatorError;
use super::git::{CommitInfo, ResolvedRef};
use super::{Coordinator, git::CommitLoader};

/// What to check.
#[derive(Clone, Debug, Default)]
pub struct LintRequest {
    /// The configuration (`POST`'s `content`); `None`: the project's configuration file
    /// at `content_ref`.
    pub content: Option<String>,
    /// The branch, tag or commit SHA the project's files are read at (default: the
    /// default branch). With `content`, only its `include:local` files come from there.
    pub content_ref: Option<String>,
    /// Simulate creating the pipeline of `dry_run_ref`.
    pub dry_run: bool,
    /// The branch or tag a dry run is for (default: the default branch).
    pub dry_run_ref: Option<String>,
    /// Answer with the jobs.
    pub include_jobs: bool,
}

/// GitLab's answer (`Entities::Ci::Lint::Result`), plus `error_details` with each
/// error's place.
#[derive(Debug, Serialize)]
pub struct LintResult {
    pub valid: bool,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
    /// The configuration after `include:`, `extends:` and `!reference` (`null` when those
    /// did not resolve).
    pub merged_yaml: Option<String>,
    pub includes: Vec<LintInclude>,
    /// With `include_jobs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<Vec<LintJob>>,
    /// Each error with its `file:line:column`, when known.
    pub error_details: Vec<gantry_pipeline::report::Message>,
}

/// A file an `include:` read.
#[derive(Clone, Debug, Serialize)]
pub struct LintInclude {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub location: String,
}

/// A job as the lint lists it.
#[derive(Clone, Debug, Serialize)]
pub struct LintJob {
    pub name: String,
    pub stage: String,
    pub before_script: Vec<String>,
    pub script: Vec<String>,
    pub after_script: Vec<String>,
    pub tag_list: Vec<String>,
    pub environment: Option<String>,
    pub when: &'static str,
    pub allow_failure: bool,
    pub needs: Option<Vec<LintNeed>>,
}

/// One entry of a job's `needs`.
#[derive(Clone, Debug, Serialize)]
pub struct LintNeed {
    pub name: String,
}

impl Coordinator {
    /// Check a configuration in project `project_id`'s context (see the module).
    pub async fn lint(
        &self,
        project_id: i64,
        request: &LintRequest,
    ) -> std::result::Result<LintResult, CoordinatorError> {
        let project = self.inner.store.project(project_id).await?;
        let mirror = self.sources().sync_mirror(&project).await?;
        let not_found = |what: &str, name: &str| {
            CoordinatorError::Invalid(format!(
                "lint: Reference not found: `{name}` is no {what} of {}",
                project.name
            ))
        };
        let content_ref = request
            .content_ref
            .clone()
            .unwrap_or_else(|| project.default_branch.clone());
        let (files_at, files_commit) = match mirror.resolve(&content_ref).await? {
            Some(found) => found,
            None if is_full_sha(&content_ref) => {
                let r = ResolvedRef {
                    name: content_ref.clone(),
                    tag: false,
                    sha: content_ref.to_ascii_lowercase(),
                };
                let info = mirror
                    .commit_info(&r)
                    .await
                    .map_err(|_| not_found("branch, tag or commit", &content_ref))?;
                (r, info)
            }
            None => return Err(not_found("branch, tag or commit", &content_ref)),
        };
        // The pipeline the configuration is evaluated as.
        let (r, commit): (ResolvedRef, CommitInfo) = if request.dry_run {
            let name = request
                .dry_run_ref
                .clone()
                .unwrap_or_else(|| project.default_branch.clone());
            mirror
                .resolve(&name)
                .await?
                .ok_or_else(|| not_found("branch or tag", &name))?
        } else if content_ref == project.default_branch {
            (files_at.clone(), files_commit.clone())
        } else {
            match mirror.resolve(&project.default_branch).await? {
                Some(found) => found,
                // A project whose default branch is not pushed yet: its files' commit.
                None => (files_at.clone(), files_commit.clone()),
            }
        };
        let protected = self.settings().ref_protected(project_id, &r).await?;
        let mut scope = self
            .compile_scope(&project, &r, commit, protected, Source::Push, None, None)
            .await?;
        self.facts()
            .complete_info(&mut scope.info, &project, None, None)
            .await;
        let config_path = project.ci_config_path.clone();
        let files = ChildFiles {
            commit: CommitLoader::of(&mirror, files_at.sha.clone())
                .comparing_in(self.inner.cfg.compare_refs()),
            child: request.content.clone().map(|text| ChildConfig {
                root: (config_path.clone(), text),
                artifacts: Default::default(),
            }),
        };
        let (dry_run, include_jobs) = (request.dry_run, request.include_jobs);
        tokio::task::spawn_blocking(move || {
            let opts = Options {
                config_path,
                keep_merged: true,
                ..Options::default()
            };
            let compiled = scope.compile(&opts, &[], None, &files);
            result(&compiled, dry_run, include_jobs)
        })
        .await
        .map_err(|e| CoordinatorError::Io(std::io::Error::other(format!("lint: {e}"))))
    }
}

fn is_full_sha(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn result(c: &Compiled, dry_run: bool, include_jobs: bool) -> LintResult {
    let report = gantry_pipeline::report::LintReport::new(c);
    let mut errors: Vec<String> = report.errors.iter().map(|m| m.message.clone()).collect();
    let mut error_details = report.errors;
    if dry_run && errors.is_empty() {
        if let Some(p) = c
            .pipeline
            .as_ref()
            .filter(|p| !p.created || p.jobs.is_empty())
        {
            let why = p
                .not_created_reason
                .clone()
                .unwrap_or_else(|| "No stages / jobs for this pipeline.".to_owned());
            errors.push(why.clone());
            error_details.push(gantry_pipeline::report::Message {
                message: why,
                location: None,
                hint: None,
            });
        }
    }
    let jobs = include_jobs.then(|| {
        c.pipeline
            .iter()
            .flat_map(|p| &p.jobs)
            .map(|j| LintJob {
                name: j.name.clone(),
                stage: j.stage.clone(),
                before_script: j.before_script.clone(),
                script: j.script.clone(),
                after_script: j.after_script.clone(),
                tag_list: j.tags.clone(),
                environment: j.environment.as_ref().map(|e| e.name.clone()),
                when: j.when.as_str(),
                allow_failure: j.allow_failure,
                needs: j.needs.as_ref().map(|needs| {
                    needs
                        .iter()
                        .map(|n| LintNeed {
                            name: n.job.clone(),
                        })
                        .collect()
                }),
            })
            .collect()
    });
    LintResult {
        valid: errors.is_empty(),
        errors,
        warnings: report.warnings.into_iter().map(|m| m.message).collect(),
        merged_yaml: c.merged.as_ref().map(gantry_pipeline::emit::to_yaml),
        includes: c
            .includes
            .iter()
            .map(|i| LintInclude {
                kind: i.kind,
                location: i.location.clone(),
            })
            .collect(),
        jobs,
        error_details,
    }
}
