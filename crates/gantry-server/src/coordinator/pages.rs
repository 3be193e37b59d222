//! GitLab Pages: a Pages job's site deployed when the job succeeds, and served.
//!
//! Which jobs deploy is the YAML processor's (`gantry_pipeline::Pages`: GitLab's
//! `Entry::Job#pages_job?`, with the publish folder added to `artifacts:paths`). At
//! creation the coordinator expands `pages:publish` and `pages:path_prefix` with the job's
//! variables ([`expand_pages`]; the prefix slugified as `Gitlab::Utils.slugify(allow_dots:
//! true)`), as GitLab's `Ci::Build#pages` does.
//!
//! When the job succeeds ([`Coordinator::deploy_pages`], GitLab's `Projects::UpdatePagesService`),
//! the files under the publish folder of its artifacts archive are copied, still compressed,
//! into a zip of their own whose root is the site (`pages/<project id>/<job id>.zip`), and a
//! `pages_deployments` row records it; the older deployments of the same project and prefix
//! are deactivated and their zips removed. So expiring artifacts never take a site down. A
//! deployment is refused, with GitLab's messages, when the folder holds no file (`You need to
//! either include a public/ folder…`) or a newer pipeline deployed already (`build SHA is
//! outdated for this ref`). GitLab records a refused deployment as a failed `pages:deploy`
//! job; Gantry logs it (warning) and leaves the job as it ended. Cost: one pass over the
//! archive's entries per deployment, once per successful Pages job.
//!
//! Serving ([`Coordinator::pages_file`]): `<pages base>/<project full path>/[<prefix>/]<file>`,
//! GitLab's `namespace_in_path` URL shape. The base is `<external URL>/-/pages` unless
//! `CoordinatorConfig::pages_url` names another (a domain of its own). The project is the
//! shortest leading run of segments naming one (at most [`MAX_PROJECT_DEPTH`] lookups), then
//! a first segment naming an active prefix deployment picks that one, else the main site.
//! Files as GitLab Pages resolves them: `dir/` → `dir/index.html`; `name` → `name`, then
//! `name.html`, then a redirect to `name/` when `name/index.html` exists; else the site's
//! `404.html` with status 404. Cost per request: O(depth) indexed lookups and reading the zip's
//! central directory (O(files of the site)).
//!
//! `CI_PAGES_URL` (every job; with its prefix for a prefixed Pages job), `CI_PAGES_DOMAIN`
//! and `CI_PAGES_HOSTNAME` (the base's host) are set in the payload ([`PagesUrls`]).

use std::io::{Read as _, Seek as _};
use std::sync::Arc;

use gantry_store::{NewPagesDeployment, PagesDeployment};

use super::Coordinator;
use super::error::{CoordinatorError, Result};
use super::spec::StoredSpec;
use super::time::now_ms;

/// Most path segments tried as a project's full path (GitLab nests groups 20 deep).
pub(crate) const MAX_PROJECT_DEPTH: usize = 21;

/// The Pages URLs of a deployment: `base/<full path>[/<prefix>]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PagesUrls {
    /// The site's URL (`CI_PAGES_URL`).
    pub url: String,
    /// The base's host (`CI_PAGES_DOMAIN`, `CI_PAGES_HOSTNAME`).
    pub domain: String,
}

/// Why a deployment was refused (GitLab's messages).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeployError {
    #[error("missing pages artifacts")]
    NoArtifacts,
    #[error(
        "Error: You need to either include a `{0}/` folder in your artifacts, or specify which one to use for Pages using `publish` in `.gitlab-ci.yml`"
    )]
    EmptyFolder(String),
    #[error("build SHA is outdated for this ref")]
    Outdated,
    #[error("the artifacts archive is not a zip archive that can be read: {0}")]
    Archive(String),
    #[error(transparent)]
    Coordinator(#[from] CoordinatorError),
}

/// `Gitlab::Utils.slugify(s, allow_dots: true)`: lower case, anything but `[a-z0-9.]`
/// becomes `-`, at most 63 bytes, no leading or trailing `-`/`.`.
pub(crate) fn slugify_prefix(s: &str) -> String {
    let mapped: String = s
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped.trim_matches(['-', '.']).to_owned()
}

/// A Pages job's `publish` and `path_prefix` expanded with its creation variables.
pub(crate) fn expand_pages(
    pages: &gantry_pipeline::Pages,
    variables: &std::collections::HashMap<String, String>,
) -> gantry_pipeline::Pages {
    // `ExpandVariables.expand`: an unknown variable expands to nothing.
    let lookup = |k: &str| variables.get(k).cloned();
    let expand = |s: &str| {
        gantry_pipeline::expand::expand_server(s, &lookup, gantry_pipeline::expand::Unknown::Empty)
    };
    gantry_pipeline::Pages {
        publish: expand(&pages.publish),
        path_prefix: pages
            .path_prefix
            .as_deref()
            .map(|p| slugify_prefix(&expand(p)))
            .filter(|p| !p.is_empty()),
        expire_in: pages.expire_in.as_deref().map(expand),
    }
}

impl Coordinator {
    /// The Pages base URL: `CoordinatorConfig::pages_url`, else `<external URL>/-/pages`.
    pub(crate) fn pages_base(&self) -> &str {
        self.facts().pages_base()
    }

    /// The host Pages requests arrive for when `pages_url` names a domain of its own
    /// (`pages.example.com[:port]`); `None` for the default `<external URL>/-/pages`.
    pub(crate) fn pages_host(&self) -> Option<String> {
        let url = self.inner.cfg.pages_url.as_deref()?;
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        // A base with a path of its own is served under that path on the server's host.
        (path.trim_matches('/').is_empty() && !host.is_empty()).then(|| host.to_owned())
    }

    /// The absolute path redirects below the Pages base start with: `""` on a domain of
    /// its own, else `/-/pages`.
    pub(crate) fn pages_path_base(&self) -> &'static str {
        if self.pages_host().is_some() {
            ""
        } else {
            "/-/pages"
        }
    }

    /// After job `job_id` succeeded: deploy its site when it is a Pages job. A refused
    /// deployment is logged, not returned: the job's own result stands.
    pub(crate) async fn after_success_pages(&self, job_id: i64, spec: &StoredSpec) {
        let Some(pages) = &spec.job.pages else {
            return;
        };
        if let Err(e) = self.deploy_pages(job_id, pages).await {
            eprintln!("gantry server: job {job_id}: pages:deploy failed: {e}");
        }
    }

    /// GitLab's `Projects::UpdatePagesService` for job `job_id` (see the module docs).
    pub(crate) async fn deploy_pages(
        &self,
        job_id: i64,
        pages: &gantry_pipeline::Pages,
    ) -> std::result::Result<PagesDeployment, DeployError> {
        let store = &self.inner.store;
        let job = store
            .job_without_spec(job_id)
            .await
            .map_err(CoordinatorError::from)?;
        let pipeline = store
            .pipeline(job.pipeline_id)
            .await
            .map_err(CoordinatorError::from)?;
        let prefix = pages.path_prefix.clone().unwrap_or_default();
        let now = now_ms();
        if let Some(current) = store
            .active_pages_deployment(job.project_id, &prefix, now)
            .await
            .map_err(CoordinatorError::from)?
        {
            if current.pipeline_id > job.pipeline_id {
                return Err(DeployError::Outdated);
            }
        }
        let (_, blob) = match self.artifacts().job_artifact(job_id).await {
            Ok(found) => found,
            Err(CoordinatorError::NotFound(_)) => return Err(DeployError::NoArtifacts),
            Err(e) => return Err(e.into()),
        };
        let folder = pages.publish.trim_matches('/').to_owned();
        let staging = self.inner.blobs.staging_dir().to_owned();
        let (path, file_count, size) = {
            let folder = folder.clone();
            tokio::task::spawn_blocking(move || site_zip(blob.file, &folder, &staging))
                .await
                .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??
        };
        let key = format!("pages/{}/{job_id}.zip", job.project_id);
        {
            let (blobs, key) = (Arc::clone(&self.inner.blobs), key.clone());
            tokio::task::spawn_blocking(move || blobs.put_file(&key, &path))
                .await
                .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))?
                .map_err(CoordinatorError::Io)?;
        }
        let expires_at = pages
            .expire_in
            .as_deref()
            .and_then(gantry_pipeline::duration::parse_expire_in)
            .and_then(|e| e.seconds())
            .map(|s| {
                now.saturating_add(
                    i64::try_from(s)
                        .unwrap_or(i64::MAX / 2)
                        .saturating_mul(1000),
                )
            });
        let (row, older) = store
            .add_pages_deployment(
                &NewPagesDeployment {
                    project_id: job.project_id,
                    job_id,
                    pipeline_id: job.pipeline_id,
                    sha: pipeline.sha.clone(),
                    path_prefix: prefix,
                    blob_key: key,
                    file_count,
                    size,
                    expires_at,
                },
                now,
            )
            .await
            .map_err(CoordinatorError::from)?;
        let _ = self.artifacts().blob_delete(older).await;
        Ok(row)
    }

    /// The file `path` (below the pages base) resolves to; see the module docs.
    pub async fn pages_file(
        &self,
        path: &str,
    ) -> std::result::Result<PagesAnswer, CoordinatorError> {
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let mut project = None;
        for depth in 2..=segments.len().min(MAX_PROJECT_DEPTH) {
            match self.project_by_path(&segments[..depth].join("/")).await {
                Ok(p) => {
                    project = Some((p, depth));
                    break;
                }
                Err(CoordinatorError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let Some((project, depth)) = project else {
            return Err(CoordinatorError::NotFound("pages site"));
        };
        let full = segments[..depth].join("/");
        let now = now_ms();
        let store = &self.inner.store;
        let mut rest: Vec<&str> = segments[depth..].to_vec();
        let mut site = format!("{full}/");
        let mut deployment = None;
        if let Some(first) = rest.first() {
            if let Some(d) = store
                .active_pages_deployment(project.id, first, now)
                .await?
            {
                site = format!("{full}/{first}/");
                deployment = Some(d);
                rest.remove(0);
            }
        }
        let deployment = match deployment {
            Some(d) => d,
            None => store
                .active_pages_deployment(project.id, "", now)
                .await?
                .ok_or(CoordinatorError::NotFound("pages site"))?,
        };
        let mut wanted = rest.join("/");
        let at_root = rest.is_empty();
        // `/-/pages/group/project` → `/-/pages/group/project/` so relative links work.
        if at_root && !path.ends_with('/') {
            return Ok(PagesAnswer::Redirect(site));
        }
        if path.ends_with('/') && !at_root {
            wanted.push('/');
        }
        let blobs = Arc::clone(&self.inner.blobs);
        let key = deployment.blob_key.clone();
        let file = tokio::task::spawn_blocking(move || blobs.open(&key))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??
            .ok_or(CoordinatorError::NotFound("pages site"))?
            .0;
        let staging = self.inner.blobs.staging_dir().to_owned();
        let answer = tokio::task::spawn_blocking(move || resolve(file, &wanted, &staging))
            .await
            .map_err(|e| CoordinatorError::Io(std::io::Error::other(e.to_string())))??;
        Ok(match answer {
            Resolved::Redirect(to) => PagesAnswer::Redirect(format!("{site}{to}")),
            Resolved::File {
                name,
                file,
                len,
                status,
            } => PagesAnswer::File {
                name,
                file,
                len,
                status,
            },
            Resolved::Missing => PagesAnswer::Missing,
        })
    }
}

/// GitLab's `API::Entities::Pages::ProjectSettings` (`GET /projects/:id/pages`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct PagesSettings {
    pub url: String,
    pub deployments: Vec<PagesDeploymentView>,
    pub is_unique_domain_enabled: bool,
    pub force_https: bool,
    pub pages_primary_domain: Option<String>,
}

/// GitLab's `API::Entities::Pages::Deployments`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PagesDeploymentView {
    pub created_at: String,
    pub url: String,
    pub path_prefix: Option<String>,
    pub root_directory: Option<String>,
}

impl Coordinator {
    /// A project's Pages settings and active deployments.
    pub async fn pages_settings(&self, project_id: i64) -> Result<PagesSettings> {
        let project = self.inner.store.project(project_id).await?;
        let rows = self.inner.store.pages_deployments(project_id).await?;
        let now = now_ms();
        let deployments = rows
            .into_iter()
            .filter(|d| d.expires_at.is_none_or(|at| at > now))
            .map(|d| {
                let prefix = Some(d.path_prefix.clone()).filter(|p| !p.is_empty());
                PagesDeploymentView {
                    created_at: super::time::iso8601(d.created_at),
                    url: format!(
                        "{}/",
                        self.facts()
                            .pages_urls(&project.name, prefix.as_deref())
                            .url
                    ),
                    path_prefix: prefix,
                    // The deployment's zip holds the publish folder's files at its root.
                    root_directory: None,
                }
            })
            .collect();
        Ok(PagesSettings {
            url: format!("{}/", self.facts().pages_urls(&project.name, None).url),
            deployments,
            is_unique_domain_enabled: false,
            force_https: self.pages_base().starts_with("https://"),
            pages_primary_domain: None,
        })
    }
}

/// What a Pages request gets, the HTTP layer's to send.
#[derive(Debug)]
pub enum PagesAnswer {
    /// A file: its name (for the content type), contents, length and status (200, or
    /// 404 for the site's `404.html`).
    File {
        name: String,
        file: std::fs::File,
        len: u64,
        status: u16,
    },
    /// A redirect to this path below the pages base.
    Redirect(String),
    /// No such file and no `404.html`.
    Missing,
}

enum Resolved {
    File {
        name: String,
        file: std::fs::File,
        len: u64,
        status: u16,
    },
    Redirect(String),
    Missing,
}

/// Largest file served, unpacked (GitLab's default Pages size limit).
const MAX_PAGES_FILE: u64 = 1024 * 1024 * 1024;

fn resolve(
    file: std::fs::File,
    wanted: &str,
    staging: &std::path::Path,
) -> std::result::Result<Resolved, CoordinatorError> {
    let corrupt = |e: zip::result::ZipError| {
        CoordinatorError::corrupt(format!("a pages deployment cannot be read: {e}"))
    };
    let mut zip = zip::ZipArchive::new(file).map_err(corrupt)?;
    let is_file = |zip: &zip::ZipArchive<std::fs::File>, name: &str| {
        !name.is_empty() && !name.ends_with('/') && zip.index_for_name(name).is_some()
    };
    let (name, status) = if wanted.is_empty() || wanted.ends_with('/') {
        let index = format!("{wanted}index.html");
        if is_file(&zip, &index) {
            (index, 200)
        } else {
            ("404.html".to_owned(), 404)
        }
    } else if is_file(&zip, wanted) {
        (wanted.to_owned(), 200)
    } else if is_file(&zip, &format!("{wanted}.html")) {
        (format!("{wanted}.html"), 200)
    } else if is_file(&zip, &format!("{wanted}/index.html")) {
        return Ok(Resolved::Redirect(format!("{wanted}/")));
    } else {
        ("404.html".to_owned(), 404)
    };
    if !is_file(&zip, &name) {
        return Ok(Resolved::Missing);
    }
    let mut entry = zip.by_name(&name).map_err(corrupt)?;
    std::fs::create_dir_all(staging)?;
    let mut out = super::artifacts::tempfile_in(staging)?;
    let len = std::io::copy(&mut (&mut entry).take(MAX_PAGES_FILE), &mut out)?;
    out.rewind()?;
    Ok(Resolved::File {
        name,
        file: out,
        len,
        status,
    })
}

/// The files of `archive` under `folder/`, renamed to the zip's root and copied without
/// recompressing, into a staging file: `(its path, file count, unpacked bytes)`.
fn site_zip(
    archive: std::fs::File,
    folder: &str,
    staging: &std::path::Path,
) -> std::result::Result<(std::path::PathBuf, i64, i64), DeployError> {
    let bad = |e: zip::result::ZipError| DeployError::Archive(e.to_string());
    let mut zip = zip::ZipArchive::new(archive).map_err(bad)?;
    let prefix = format!("{folder}/");
    std::fs::create_dir_all(staging).map_err(CoordinatorError::Io)?;
    let path = staging.join(format!("pages-{}", super::token::new_token("")));
    let out = std::fs::File::create(&path).map_err(CoordinatorError::Io)?;
    let mut writer = zip::ZipWriter::new(out);
    let (mut files, mut size) = (0_i64, 0_i64);
    let written = (|| -> std::result::Result<(), DeployError> {
        for i in 0..zip.len() {
            let entry = zip.by_index_raw(i).map_err(bad)?;
            let Some(rest) = entry.name().strip_prefix(&prefix) else {
                continue;
            };
            if rest.is_empty() || entry.is_dir() {
                continue;
            }
            let rest = rest.to_owned();
            files += 1;
            size = size.saturating_add(i64::try_from(entry.size()).unwrap_or(i64::MAX));
            writer.raw_copy_file_rename(entry, rest).map_err(bad)?;
        }
        writer.finish().map_err(bad)?;
        Ok(())
    })();
    let result = written.and_then(|()| {
        if files == 0 {
            Err(DeployError::EmptyFolder(folder.to_owned()))
        } else {
            Ok((path.clone(), files, size))
        }
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&path);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_slugified_as_gitlab_does() {
        assert_eq!(slugify_prefix("Feature/Login_Page"), "feature-login-page");
        assert_eq!(slugify_prefix("-v1.2-"), "v1.2");
        assert_eq!(slugify_prefix(&"a".repeat(80)).len(), 63);
    }
}
