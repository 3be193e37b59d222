//! The repository as GitLab's repository API reads it, from the project's mirror (fetched
//! first, as the CI Lint API does, so a remote repository answers as it is now): a file
//! at a ref (`repository/files/:file_path`, with its raw bytes), one commit
//! (`repository/commits/:sha`, with the newest pipeline of it), a ref's history a page at
//! a time (`repository/commits`), the branches (`repository/branches[/:branch]`) and the
//! tags (`repository/tags[/:tag]`, with their releases). Read-only: Gantry hosts no
//! repository, it mirrors one, so nothing here writes.
//!
//! A ref is a branch, a tag or a commit, a branch winning over a tag of the same name
//! (GitLab's order). A file is read whole, at most [`MAX_FILE_BYTES`].

use serde::Serialize;
use sha2::Digest as _;

use super::Coordinator;
use super::error::CoordinatorError;
use super::git::{Mirror, ResolvedRef};
use super::projects::full_path;
use super::views::{CommitView, JobPipeline};

/// The largest file the files API reads (larger: a `400` naming the limit).
pub const MAX_FILE_BYTES: u64 = 10 << 20;

/// GitLab's `GET …/repository/files/:file_path` answer (its content base64-encoded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RepositoryFile {
    pub file_name: String,
    pub file_path: String,
    pub size: u64,
    pub encoding: &'static str,
    pub content: String,
    pub content_sha256: String,
    #[serde(rename = "ref")]
    pub ref_name: String,
    pub blob_id: String,
    pub commit_id: String,
    pub last_commit_id: String,
    pub execute_filemode: bool,
}

/// GitLab's `GET …/repository/commits/:sha` answer: the commit, its project, and the
/// newest pipeline of it and that pipeline's status (`null` without one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CommitDetail {
    #[serde(flatten)]
    pub commit: CommitView,
    pub project_id: i64,
    pub status: Option<crate::processor::Status>,
    pub last_pipeline: Option<JobPipeline>,
}

/// A branch as GitLab's branches API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Branch {
    pub name: String,
    pub commit: CommitView,
    /// Whether a protected-branch rule matches it.
    pub protected: bool,
    /// Whether it is the project's default branch.
    pub default: bool,
    /// Gantry's one user may push anywhere.
    pub can_push: bool,
    pub web_url: String,
}

/// A tag as GitLab's tags API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tag {
    pub name: String,
    /// An annotated tag's message; empty for a lightweight one.
    pub message: String,
    /// What the tag names: the tag object of an annotated tag, else the commit.
    pub target: String,
    pub commit: CommitView,
    /// The tag's release (`tag_name`, `description`), `null` without one.
    pub release: Option<TagRelease>,
    /// Whether a protected-tag rule matches it.
    pub protected: bool,
}

/// `release` of a [`Tag`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TagRelease {
    pub tag_name: String,
    pub description: String,
}

/// What [`Coordinator::repository_commits`] lists: a ref's history, optionally of one
/// path.
#[derive(Clone, Debug, Default)]
pub struct CommitsQuery {
    /// A branch, tag or commit; the default branch when `None`.
    pub ref_name: Option<String>,
    /// Only commits that touched this path.
    pub path: Option<String>,
}

impl Coordinator {
    /// The project's mirror, fetched now.
    async fn fresh_mirror(
        &self,
        project_id: i64,
    ) -> Result<(gantry_store::Project, Mirror), CoordinatorError> {
        let project = self.inner.store.project(project_id).await?;
        let mirror = self.sources().sync_mirror(&project).await?;
        Ok((project, mirror))
    }

    /// `rev` (a branch, a tag or a commit) → its commit and the commit's facts.
    async fn commit_of(
        mirror: &Mirror,
        rev: &str,
    ) -> Result<Option<(ResolvedRef, super::git::CommitInfo)>, CoordinatorError> {
        if let Some(found) = mirror.resolve(rev).await? {
            return Ok(Some(found));
        }
        let is_hex =
            !rev.is_empty() && rev.len() <= 64 && rev.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_hex {
            return Ok(None);
        }
        let r = ResolvedRef {
            name: rev.to_owned(),
            tag: false,
            sha: rev.to_owned(),
        };
        match mirror.commit_info(&r).await {
            Ok(info) => Ok(Some((r, info))),
            Err(CoordinatorError::Git(_)) => Ok(None),
            Err(other) => Err(other),
        }
    }

    fn commit_url(&self, project: &gantry_store::Project, sha: &str) -> String {
        format!(
            "{}/{}/-/commit/{sha}",
            self.external_url(),
            full_path(&project.name)
        )
    }

    /// The file at `path` of `rev` in project `project_id`, and its bytes.
    pub async fn repository_file(
        &self,
        project_id: i64,
        path: &str,
        rev: &str,
    ) -> Result<(RepositoryFile, Vec<u8>), CoordinatorError> {
        use base64::Engine as _;
        let (_, mirror) = self.fresh_mirror(project_id).await?;
        let Some((r, _)) = Self::commit_of(&mirror, rev).await? else {
            return Err(CoordinatorError::NotFound("Commit"));
        };
        let Some((blob_id, executable, content)) =
            mirror.file_at(&r.sha, path, MAX_FILE_BYTES).await?
        else {
            return Err(CoordinatorError::NotFound("File"));
        };
        let last_commit_id = mirror
            .last_commit_for(&r.sha, path)
            .await
            .unwrap_or_else(|| r.sha.clone());
        let file = RepositoryFile {
            file_name: path.rsplit('/').next().unwrap_or(path).to_owned(),
            file_path: path.to_owned(),
            size: content.len() as u64,
            encoding: "base64",
            content: base64::engine::general_purpose::STANDARD.encode(&content),
            content_sha256: format!("{:x}", sha2::Sha256::digest(&content)),
            ref_name: rev.to_owned(),
            blob_id,
            commit_id: r.sha.clone(),
            last_commit_id,
            execute_filemode: executable,
        };
        Ok((file, content))
    }

    /// Commit `rev` of project `project_id`, with its newest pipeline.
    pub async fn repository_commit(
        &self,
        project_id: i64,
        rev: &str,
    ) -> Result<CommitDetail, CoordinatorError> {
        let (project, mirror) = self.fresh_mirror(project_id).await?;
        let Some((r, info)) = Self::commit_of(&mirror, rev).await? else {
            return Err(CoordinatorError::NotFound("Commit"));
        };
        let of_commit = gantry_store::PipelineFilter {
            sha: Some(r.sha.clone()),
            ..gantry_store::PipelineFilter::default()
        };
        let (newest, _) = self
            .inner
            .store
            .pipelines_page(project_id, &of_commit, 0, 1)
            .await?;
        let last_pipeline = newest
            .first()
            .map(|p| self.pipeline_basic(p, &project.name));
        Ok(CommitDetail {
            commit: CommitView::from_info(&r.sha, &info, self.commit_url(&project, &r.sha)),
            project_id,
            status: last_pipeline.as_ref().map(|p| p.status),
            last_pipeline,
        })
    }

    /// The project's branches, by name (one read of each branch's commit).
    pub async fn branches(&self, project_id: i64) -> Result<Vec<Branch>, CoordinatorError> {
        let (project, mirror) = self.fresh_mirror(project_id).await?;
        let listed = super::git::git(
            Some(&mirror.path),
            &["for-each-ref", "--format=%(refname:strip=2)", "refs/heads/"],
        )
        .await?;
        let mut out = Vec::new();
        for name in String::from_utf8_lossy(&listed).lines() {
            if let Some(branch) = self.branch_of(&project, &mirror, name).await? {
                out.push(branch);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Branch `name` of project `project_id`.
    pub async fn branch(&self, project_id: i64, name: &str) -> Result<Branch, CoordinatorError> {
        let (project, mirror) = self.fresh_mirror(project_id).await?;
        self.branch_of(&project, &mirror, name)
            .await?
            .ok_or(CoordinatorError::NotFound("Branch"))
    }

    async fn branch_of(
        &self,
        project: &gantry_store::Project,
        mirror: &Mirror,
        name: &str,
    ) -> Result<Option<Branch>, CoordinatorError> {
        let Some((r, info)) = mirror.resolve(&format!("refs/heads/{name}")).await? else {
            return Ok(None);
        };
        let protected = self.settings().ref_protected(project.id, &r).await?;
        Ok(Some(Branch {
            commit: CommitView::from_info(&r.sha, &info, self.commit_url(project, &r.sha)),
            protected,
            default: name == project.default_branch,
            can_push: true,
            web_url: format!(
                "{}/{}/-/tree/{name}",
                self.external_url(),
                full_path(&project.name)
            ),
            name: name.to_owned(),
        }))
    }

    /// Commits of a ref's history, newest first (`git log`'s order), `limit` from
    /// `offset`, and how many there are: one `rev-list --count`, one `log` of the window
    /// and a `cat-file` read a commit shown (O(window), not O(history)).
    pub async fn repository_commits(
        &self,
        project_id: i64,
        query: &CommitsQuery,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<CommitView>, i64), CoordinatorError> {
        let (project, mirror) = self.fresh_mirror(project_id).await?;
        let rev = query
            .ref_name
            .clone()
            .unwrap_or_else(|| project.default_branch.clone());
        let Some((r, _)) = Self::commit_of(&mirror, &rev).await? else {
            return Err(CoordinatorError::NotFound("Commit"));
        };
        let mut count = vec!["rev-list".to_owned(), "--count".to_owned(), r.sha.clone()];
        let mut log = vec![
            "log".to_owned(),
            "--format=%H".to_owned(),
            format!("--skip={}", offset.max(0)),
            format!("--max-count={}", limit.max(0)),
            r.sha.clone(),
        ];
        if let Some(path) = query.path.as_deref().filter(|p| !p.is_empty()) {
            for args in [&mut count, &mut log] {
                args.push("--".to_owned());
                args.push(path.to_owned());
            }
        }
        fn args(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        let total =
            String::from_utf8_lossy(&super::git::git(Some(&mirror.path), &args(&count)).await?)
                .trim()
                .parse::<i64>()
                .unwrap_or(0);
        let listed = super::git::git(Some(&mirror.path), &args(&log)).await?;
        let mut out = Vec::new();
        for sha in String::from_utf8_lossy(&listed).lines() {
            let r = ResolvedRef {
                name: sha.to_owned(),
                tag: false,
                sha: sha.to_owned(),
            };
            let info = mirror.commit_info(&r).await?;
            out.push(CommitView::from_info(
                sha,
                &info,
                self.commit_url(&project, sha),
            ));
        }
        Ok((out, total))
    }

    /// The project's tags, by name: one `for-each-ref` for their names and targets, one
    /// read of the project's releases, the tags' commits through the mirror's
    /// `cat-file` (O(tags) reads, no process per tag).
    pub async fn tags(&self, project_id: i64) -> Result<Vec<Tag>, CoordinatorError> {
        let (project, mirror) = self.fresh_mirror(project_id).await?;
        let mut releases: std::collections::HashMap<String, TagRelease> = self
            .inner
            .store
            .releases(project_id)
            .await?
            .into_iter()
            .map(|r| {
                let release = TagRelease {
                    tag_name: r.tag_name.clone(),
                    description: r.description,
                };
                (r.tag_name, release)
            })
            .collect();
        let mut out = Vec::new();
        for (name, target) in Self::tag_targets(&mirror, "refs/tags/").await? {
            let release = releases.remove(&name);
            if let Some(tag) = self
                .tag_of(&project, &mirror, &name, target, release)
                .await?
            {
                out.push(tag);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Tag `name` of project `project_id`.
    pub async fn tag(&self, project_id: i64, name: &str) -> Result<Tag, CoordinatorError> {
        let (project, mirror) = self.fresh_mirror(project_id).await?;
        let full = format!("refs/tags/{name}");
        let target = Self::tag_targets(&mirror, &full)
            .await?
            .into_iter()
            .find(|(listed, _)| listed == name)
            .map(|(_, target)| target)
            .ok_or(CoordinatorError::NotFound("Tag"))?;
        let release = match self.inner.store.release(project.id, name).await {
            Ok(release) => Some(TagRelease {
                tag_name: release.tag_name,
                description: release.description,
            }),
            Err(gantry_store::StoreError::NotFound(_)) => None,
            Err(other) => return Err(other.into()),
        };
        self.tag_of(&project, &mirror, name, target, release)
            .await?
            .ok_or(CoordinatorError::NotFound("Tag"))
    }

    /// `(name, target)` of the tags under `pattern` (`for-each-ref`'s: a prefix of whole
    /// path components): the tag object of an annotated tag, else the commit.
    async fn tag_targets(
        mirror: &Mirror,
        pattern: &str,
    ) -> Result<Vec<(String, String)>, CoordinatorError> {
        let listed = super::git::git(
            Some(&mirror.path),
            &[
                "for-each-ref",
                "--format=%(refname:strip=2)%00%(objectname)",
                "--",
                pattern,
            ],
        )
        .await?;
        Ok(String::from_utf8_lossy(&listed)
            .lines()
            .filter_map(|line| line.split_once('\0'))
            .map(|(name, target)| (name.to_owned(), target.to_owned()))
            .collect())
    }

    async fn tag_of(
        &self,
        project: &gantry_store::Project,
        mirror: &Mirror,
        name: &str,
        target: String,
        release: Option<TagRelease>,
    ) -> Result<Option<Tag>, CoordinatorError> {
        let Some((r, info)) = mirror.resolve(&format!("refs/tags/{name}")).await? else {
            return Ok(None);
        };
        let protected = self.settings().ref_protected(project.id, &r).await?;
        // A lightweight tag's "message" is its commit's (what `resolve` reads for it);
        // GitLab's is empty: only a tag object has one.
        let message = if target == r.sha {
            String::new()
        } else {
            info.tag_message.clone().unwrap_or_default()
        };
        Ok(Some(Tag {
            commit: CommitView::from_info(&r.sha, &info, self.commit_url(project, &r.sha)),
            message,
            target,
            release,
            protected,
            name: name.to_owned(),
        }))
    }
}
