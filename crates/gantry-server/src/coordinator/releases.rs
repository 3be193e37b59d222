//! Releases (`release:`): GitLab runs a `release:` job's release through `release-cli
//! create` on the runner, after the script, calling `POST /projects/:id/releases` with the
//! job token. Gantry creates the release on the coordinator when the job succeeds
//! ([`Coordinator::create_release_of`]), with what `release-cli` would have sent: the
//! values expanded with the job's variables as the coordinator knows them (predefined, YAML,
//! pipeline and the dotenv variables of its dependencies; not variables its script
//! exported), `name` defaulting to `tag_name`, `released_at` to now, the commit to `ref`
//! when that is a full SHA, else the pipeline's. No runner needs `release-cli`.
//!
//! Differences, written down: Gantry's repositories are mirrors, so a release whose tag
//! does not exist is recorded without creating the tag (a mirror's tags are the
//! upstream's: a fetch prunes the others); a `description` naming a file of the project
//! is that file's text as committed (`release-cli` reads the job's workspace, so a file
//! the script wrote is not found and the text stays as written); milestones are kept as
//! titles (Gantry has no milestones, so the API shows none); `assets:sources` is empty
//! (no archive downloads). A second release of a tag is refused (GitLab's `Release
//! already exists`) and logged. Cost: one pass over the job's dependencies' dotenv blobs
//! per successful `release:` job.
//!
//! The API shape (`GET /projects/:id/releases[/:tag_name]`) is GitLab's
//! `API::Entities::Release` ([`ReleaseView`]).

use serde::Serialize;

use gantry_store::{NewRelease, Release};

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::payload::{creation_variables, dependency_rows};
use super::spec::StoredSpec;
use super::time::{iso8601, now_ms};

/// GitLab's `API::Entities::Release`.
#[derive(Clone, Debug, Serialize)]
pub struct ReleaseView {
    pub name: String,
    pub tag_name: String,
    pub description: String,
    pub created_at: String,
    pub released_at: String,
    pub upcoming_release: bool,
    /// Who made it: Gantry's one user.
    pub author: super::views::UserBasic,
    pub commit: ReleaseCommit,
    pub commit_path: String,
    pub tag_path: String,
    pub assets: ReleaseAssets,
    pub evidences: Vec<serde_json::Value>,
    pub _links: ReleaseLinks,
}

/// The part of `API::Entities::Commit` Gantry knows without reading the repository.
#[derive(Clone, Debug, Serialize)]
pub struct ReleaseCommit {
    pub id: String,
    pub short_id: String,
    pub web_url: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReleaseAssets {
    pub count: usize,
    pub sources: Vec<serde_json::Value>,
    pub links: Vec<ReleaseLink>,
}

/// `API::Entities::Releases::Link`.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct ReleaseLink {
    pub id: i64,
    pub name: String,
    pub url: String,
    pub direct_asset_url: String,
    pub link_type: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReleaseLinks {
    #[serde(rename = "self")]
    pub self_: String,
}

/// Why a release was not created.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReleaseError {
    #[error("release:tag_name is empty once expanded")]
    NoTag,
    #[error("release:released_at `{0}` is not a UTC ISO 8601 time (`2026-01-31T10:00:00Z`)")]
    ReleasedAt(String),
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
}

/// A string field of the release configuration.
fn field<'a>(config: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    config.get(key).and_then(serde_json::Value::as_str)
}

impl Coordinator {
    /// Job `job_id`'s runner reported success: create its release when it has
    /// `release:`, before the job is recorded finished (as `release-cli` does in the job).
    /// A release that cannot be made is the job's failure, as `release-cli`'s exit is on
    /// GitLab: the reason goes to the end of the job's log, and the caller fails the job
    /// (`script_failure`).
    pub(crate) async fn release_of_succeeded_job(
        &self,
        job_id: i64,
        spec: &StoredSpec,
    ) -> std::result::Result<(), ReleaseError> {
        let Some(config) = &spec.job.release else {
            return Ok(());
        };
        let made = self.create_release_of(job_id, spec, config).await;
        if let Err(e) = &made {
            // gitlab-runner's error style (bold red), on a line of its own.
            let line = format!("\x1b[31;1mERROR: release not created: {e}\x1b[0;m\n");
            self.note_at_end_of_log(job_id, &line).await;
        }
        made.map(drop)
    }

    /// `release-cli`'s `--description`: a path (relative to the project directory) of a
    /// file is replaced by the file's text. The coordinator reads the file from the
    /// pipeline's commit (`sha`), so a committed changelog works; a file the job's script
    /// wrote does not exist there, and the text stays as written.
    async fn description_file(&self, project_id: i64, sha: &str, description: String) -> String {
        let path = description.trim().trim_start_matches("./").to_owned();
        let plausible = !path.is_empty()
            && path.len() <= 1024
            && !path.contains('\n')
            && !path.starts_with('/')
            && !path.split('/').any(|part| part == "..");
        if !plausible {
            return description;
        }
        let loader =
            super::git::CommitLoader::of(&self.sources().mirror(project_id), sha.to_owned());
        let read =
            tokio::task::spawn_blocking(move || gantry_pipeline::Loader::read(&loader, &path))
                .await;
        match read {
            Ok(Ok(Some(text))) => text,
            _ => description,
        }
    }

    /// The release job `job_id`'s `release:` (`config`, as written) describes.
    pub(crate) async fn create_release_of(
        &self,
        job_id: i64,
        spec: &StoredSpec,
        config: &serde_json::Value,
    ) -> std::result::Result<Release, ReleaseError> {
        let store = &self.inner.store;
        let job = store
            .job_without_spec(job_id)
            .await
            .map_err(CoordinatorError::from)?;
        let pipeline = store
            .pipeline(job.pipeline_id)
            .await
            .map_err(CoordinatorError::from)?;
        let project = store
            .project(job.project_id)
            .await
            .map_err(CoordinatorError::from)?;
        let info = self
            .facts()
            .pipeline_info(self.sources(), self.settings(), &project, &pipeline)
            .await;
        let values = self
            .settings()
            .pipeline_variables(&pipeline)
            .map_err(CoordinatorError::from)?
            .values;
        let mut scope = creation_variables(&spec.job, &info.predefined(), &values);
        scope.insert("CI_JOB_ID".to_owned(), job_id.to_string());
        let rows = self.dep_rows(pipeline.id).await?;
        for dep in dependency_rows(spec, &job, &rows) {
            for (k, v) in self.artifacts().dotenv_variables(dep.id).await? {
                scope.insert(k, v);
            }
        }
        let lookup = |k: &str| scope.get(k).cloned();
        let expand = |s: &str| {
            gantry_pipeline::expand::expand_server(
                s,
                &lookup,
                gantry_pipeline::expand::Unknown::Empty,
            )
        };
        let tag_name = expand(field(config, "tag_name").unwrap_or_default());
        if tag_name.trim().is_empty() {
            return Err(ReleaseError::NoTag);
        }
        let name = field(config, "name")
            .map(&expand)
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| tag_name.clone());
        let description = expand(field(config, "description").unwrap_or_default());
        let description = self
            .description_file(job.project_id, &pipeline.sha, description)
            .await;
        let tag_message = field(config, "tag_message").map(&expand);
        let reference = field(config, "ref").map(&expand).unwrap_or_default();
        let sha = if reference.len() == 40 && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
            reference
        } else {
            pipeline.sha.clone()
        };
        let now = now_ms();
        let released_at = match field(config, "released_at").map(&expand) {
            Some(text) if !text.is_empty() => gantry_protocol::time::parse_rfc3339_utc(&text)
                .ok_or(ReleaseError::ReleasedAt(text))?,
            _ => now,
        };
        let milestones: Vec<String> = match config.get("milestones") {
            Some(serde_json::Value::String(s)) => vec![expand(s)],
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .filter_map(serde_json::Value::as_str)
                .map(&expand)
                .collect(),
            _ => Vec::new(),
        };
        let base = self.external_url().to_owned();
        let full = super::projects::full_path(&project.name);
        let links: Vec<ReleaseLink> = config
            .pointer("/assets/links")
            .and_then(serde_json::Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .enumerate()
                    .map(|(i, l)| {
                        let path = field(l, "direct_asset_path")
                            .or_else(|| field(l, "filepath"))
                            .map(&expand);
                        let url = expand(field(l, "url").unwrap_or_default());
                        ReleaseLink {
                            id: i64::try_from(i + 1).unwrap_or(i64::MAX),
                            name: expand(field(l, "name").unwrap_or_default()),
                            direct_asset_url: match path {
                                Some(p) => format!(
                                    "{base}/{full}/-/releases/{tag_name}/downloads/{}",
                                    p.trim_start_matches('/')
                                ),
                                None => url.clone(),
                            },
                            url,
                            link_type: field(l, "link_type").unwrap_or("other").to_owned(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        let release = store
            .add_release(
                &NewRelease {
                    project_id: project.id,
                    tag_name,
                    name,
                    description,
                    tag_message,
                    sha,
                    job_id: Some(job_id),
                    pipeline_id: Some(pipeline.id),
                    milestones: serde_json::to_string(&milestones)
                        .unwrap_or_else(|_| "[]".to_owned()),
                    links: serde_json::to_string(&links).unwrap_or_else(|_| "[]".to_owned()),
                    released_at,
                },
                now,
            )
            .await
            .map_err(CoordinatorError::from)?;
        Ok(release)
    }

    /// A project's releases as the API shows them.
    pub async fn releases(&self, project_id: i64) -> Result<Vec<ReleaseView>> {
        let project = self.inner.store.project(project_id).await?;
        let rows = self.inner.store.releases(project_id).await?;
        Ok(rows
            .iter()
            .map(|r| self.release_view(&project, r))
            .collect())
    }

    /// A project's release of `tag_name`.
    pub async fn release(&self, project_id: i64, tag_name: &str) -> Result<ReleaseView> {
        let project = self.inner.store.project(project_id).await?;
        let row = self.inner.store.release(project_id, tag_name).await?;
        Ok(self.release_view(&project, &row))
    }

    fn release_view(&self, project: &gantry_store::Project, r: &Release) -> ReleaseView {
        let base = self.external_url();
        let full = super::projects::full_path(&project.name);
        let links: Vec<ReleaseLink> = serde_json::from_str(&r.links).unwrap_or_default();
        ReleaseView {
            name: r.name.clone(),
            tag_name: r.tag_name.clone(),
            description: r.description.clone(),
            created_at: iso8601(r.created_at),
            released_at: iso8601(r.released_at),
            upcoming_release: r.released_at > now_ms(),
            author: self.user_basic(),
            commit: ReleaseCommit {
                id: r.sha.clone(),
                short_id: r.sha.chars().take(8).collect(),
                web_url: format!("{base}/{full}/-/commit/{}", r.sha),
            },
            commit_path: format!("/{full}/-/commit/{}", r.sha),
            tag_path: format!("/{full}/-/tags/{}", r.tag_name),
            assets: ReleaseAssets {
                count: links.len(),
                sources: Vec::new(),
                links,
            },
            evidences: Vec::new(),
            _links: ReleaseLinks {
                self_: format!("{base}/{full}/-/releases/{}", r.tag_name),
            },
        }
    }
}
