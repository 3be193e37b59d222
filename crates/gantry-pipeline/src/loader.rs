//! Where configuration files come from: the [`Loader`] trait (the project's files at the
//! pipeline's commit, remote files, other projects' files, artifacts, diffs), why a file
//! could not be had (its error types), [`MemoryLoader`], and the lazily read file list
//! the rules and includes share (`Files`).

/// Where configuration files come from: the project's files at the pipeline's commit,
/// and (when the implementation can reach them) remote files and other projects' files.
pub trait Loader {
    /// Read a project file by its path relative to the project root (no leading `/`).
    /// `Ok(None)` when it does not exist; `Err` when it exists but cannot be read.
    fn read(&self, path: &str) -> Result<Option<String>, ReadError>;
    /// Every file path in the project, relative to its root (for `include:local`
    /// wildcards and `rules:exists`). `Err` when the list cannot be had (git failed):
    /// what needs it fails with the reason, never sees an empty project.
    fn files(&self) -> std::result::Result<Vec<String>, crate::loader::ReadError>;
    /// The body of an `include:remote` URL (`http`/`https`, already validated). The
    /// default reaches no network: [`RemoteError::Unsupported`].
    fn remote(&self, url: &str) -> Result<String, RemoteError> {
        let _ = url;
        Err(RemoteError::Unsupported)
    }
    /// A file of another project (`include:project`; `project` is a full path such as
    /// `group/sub/name`, `ref_name` a branch, tag or commit, `None` for the project's
    /// default branch; `path` has no leading `/`). `Ok(None)` when the project and ref
    /// exist but the file does not. The default knows no other project:
    /// [`ProjectError::Unsupported`].
    fn project_file(
        &self,
        project: &str,
        ref_name: Option<&str>,
        path: &str,
    ) -> Result<Option<String>, ProjectError> {
        let _ = (project, ref_name, path);
        Err(ProjectError::Unsupported)
    }
    /// The commit `ref_name` (`None`: the default branch) names in `project`, for
    /// `$[[ component.sha ]]`; `None` when unknown (the default).
    fn project_commit(&self, project: &str, ref_name: Option<&str>) -> Option<String> {
        let _ = (project, ref_name);
        None
    }
    /// Whether [`Loader::project_file`] reads other projects; `false` (the default) when it
    /// answers [`ProjectError::Unsupported`], as the default does. Implement both together.
    fn reads_projects(&self) -> bool {
        false
    }
    /// Every file path of another project at a ref (for `include:local` wildcards and
    /// `rules:exists` inside a file included with `include:project`). Default: none.
    /// `Err` as for [`Loader::files`].
    fn project_files(
        &self,
        project: &str,
        ref_name: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let _ = (project, ref_name);
        Ok(Vec::new())
    }
    /// What would make `include:remote` `url` readable after [`Loader::remote`] failed —
    /// where the offline include cache would hold it, which setting names a mirror — for
    /// the error's hint. Default: nothing to say (`None`).
    fn remote_hint(&self, url: &str) -> Option<String> {
        let _ = url;
        None
    }
    /// The same for file `path` of project `project` at `ref_name` (`include:project`)
    /// after [`Loader::project_file`] found no project, ref or file. Default: `None`.
    fn project_hint(&self, project: &str, ref_name: Option<&str>, path: &str) -> Option<String> {
        let _ = (project, ref_name, path);
        None
    }
    /// Where GitLab's CI template `name` (`Jobs/Build.gitlab-ci.yml`, already checked to
    /// be a template name) is read from: a URL fetched with [`Loader::remote`]. The
    /// default has no templates (`None`: `include:template` is an error).
    fn template_url(&self, name: &str) -> Option<String> {
        let _ = name;
        None
    }
    /// A file of a job's artifacts archive in the parent pipeline (`include:artifact` of a
    /// child pipeline; `path` has no leading `/`). The default is a pipeline that is no
    /// child: [`ArtifactError::NotChild`].
    fn artifact(&self, job: &str, path: &str) -> Result<String, ArtifactError> {
        let _ = (job, path);
        Err(ArtifactError::NotChild)
    }
    /// The paths that differ between the merge base of `compare_to` (a branch, tag or
    /// commit of the pipeline's project; variables already expanded) and the pipeline's
    /// commit, for `rules:changes:compare_to` (GitLab's `modified_paths_since`: a renamed
    /// file counts under both names). The default cannot compare
    /// ([`CompareError::Unsupported`]): the clause then reads the pipeline's own changed
    /// files, [`crate::Context::changed_files`].
    fn changed_since(&self, compare_to: &str) -> Result<Vec<String>, CompareError> {
        let _ = compare_to;
        Err(CompareError::Unsupported)
    }
}

/// Why [`Loader::changed_since`] gave no paths.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompareError {
    /// This reader of the configuration has no repository to compare in.
    #[error("no repository to compare in")]
    Unsupported,
    /// `compare_to` names no commit of the project (GitLab's message).
    #[error("rules:changes:compare_to is not a valid ref")]
    InvalidRef,
    /// Comparing failed; the description.
    #[error("rules:changes:compare_to could not be compared: {0}")]
    Io(String),
}

/// Why `include:artifact` gave no file (GitLab's `File::Artifact` and
/// `ArtifactFileReader` messages: [`ArtifactError::message`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// The configuration is not a child pipeline's.
    #[error("not a child pipeline")]
    NotChild,
    /// No job of that name in the parent pipeline, or it has no artifacts archive.
    #[error("no such job with artifacts")]
    NoJob,
    /// The archive holds no such file.
    #[error("no such file")]
    NoFile,
    /// The archive is larger than the limit (bytes).
    #[error("archive larger than {0} bytes")]
    TooLarge(u64),
    /// Reading failed; the description.
    #[error("{0}")]
    Io(String),
}

impl ArtifactError {
    /// GitLab's message for `path` of `job`'s artifacts.
    pub fn message(&self, job: &str, path: &str) -> String {
        match self {
            ArtifactError::NotChild => {
                "Including configs from artifacts is only allowed when triggering child pipelines"
                    .to_owned()
            }
            ArtifactError::NoJob => {
                format!("Job `{job}` not found in parent pipeline or does not have artifacts!")
            }
            ArtifactError::NoFile => {
                format!("Path `{path}` does not exist inside the `{job}` artifacts archive!")
            }
            ArtifactError::TooLarge(max) => format!(
                "Artifacts archive for job `{job}` is too large: max {} MB",
                max / (1024 * 1024)
            ),
            ArtifactError::Io(e) => {
                format!("Artifact `{path}` of job `{job}` could not be read: {e}")
            }
        }
    }
}

/// Why an `include:remote` URL gave no file. `remote_message` turns it into GitLab's
/// message (`File::Remote#fetch_remote_content`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The loader reaches no network (tests, tools that read a checkout only).
    #[error("include:remote is not supported by this loader")]
    Unsupported,
    /// The server answered with this HTTP status (400 or more).
    #[error("HTTP status {0}")]
    Status(u16),
    /// No answer in time.
    #[error("timeout")]
    Timeout,
    /// The connection could not be made (name resolution, refused, TLS); the detail.
    #[error("socket error: {0}")]
    Socket(String),
    /// Any other HTTP failure (a broken answer, too many redirects); the detail.
    #[error("HTTP error: {0}")]
    Http(String),
    /// The body is larger than the limit (bytes).
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    /// The body is not UTF-8 text.
    #[error("not UTF-8 text")]
    NotText,
}

/// Why a project file that exists could not be read ([`Loader::read`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The file is not UTF-8 text.
    #[error("{path} is not valid UTF-8")]
    NotText { path: String },
    /// The file is larger than the loader reads.
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: String, limit: u64 },
    /// Reading failed (the file system, git); the description.
    #[error("{0}")]
    Io(String),
}

/// Why a file of another project could not be read (`include:project`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProjectError {
    /// The loader knows no other project.
    #[error("include:project is not supported by this loader")]
    Unsupported,
    /// No such project (or not readable): GitLab's "not found or access denied".
    #[error("project not found")]
    NotFound,
    /// The project has no such branch, tag or commit.
    #[error("reference not found")]
    NoRef,
    /// Reading failed; the description.
    #[error("{0}")]
    Io(String),
}

/// Files held in memory: for tests, tools, and callers that already have the files.
#[derive(Clone, Debug, Default)]
pub struct MemoryLoader {
    files: std::collections::BTreeMap<String, String>,
}

impl MemoryLoader {
    pub fn new() -> Self {
        Self::default()
    }
    /// Add a file (path relative to the project root).
    pub fn with(mut self, path: impl Into<String>, text: impl Into<String>) -> Self {
        self.insert(path, text);
        self
    }
    pub fn insert(&mut self, path: impl Into<String>, text: impl Into<String>) {
        self.files.insert(path.into(), text.into());
    }
}

impl Loader for MemoryLoader {
    fn read(&self, path: &str) -> Result<Option<String>, ReadError> {
        Ok(self.files.get(path).cloned())
    }
    fn files(&self) -> std::result::Result<Vec<String>, crate::loader::ReadError> {
        Ok(self.files.keys().cloned().collect())
    }
}

/// The project's file list, read from the loader the first time something needs it
/// (`include:local` wildcards, `include:rules` and `rules:exists`), sorted.
pub(crate) struct Files<'a> {
    loader: &'a dyn Loader,
    list: std::cell::OnceCell<Result<Vec<String>, ReadError>>,
    /// `rules:changes:compare_to` diffs already asked for, by expanded ref.
    compared: std::cell::RefCell<Vec<(String, Compared)>>,
}

/// One [`Loader::changed_since`] answer: the paths (sorted), or why there are none.
type Compared = Result<std::rc::Rc<[String]>, CompareError>;

impl<'a> Files<'a> {
    pub fn new(loader: &'a dyn Loader) -> Self {
        Files {
            loader,
            list: std::cell::OnceCell::new(),
            compared: std::cell::RefCell::default(),
        }
    }

    /// Files already listed (sorted here), or why they could not be.
    pub fn with_list(loader: &'a dyn Loader, list: Result<Vec<String>, ReadError>) -> Self {
        let list = list.map(|mut list| {
            list.sort();
            list
        });
        Files {
            loader,
            list: std::cell::OnceCell::from(list),
            compared: std::cell::RefCell::default(),
        }
    }

    /// The list, read once; the loader's error (the same each time) when it has none.
    pub fn get(&self) -> Result<&[String], ReadError> {
        self.list
            .get_or_init(|| {
                self.loader.files().map(|mut files| {
                    files.sort();
                    files
                })
            })
            .as_deref()
            .map_err(Clone::clone)
    }

    /// The paths changed since `compare_to` ([`Loader::changed_since`]), asked once per
    /// ref and configuration.
    pub fn changed_since(&self, compare_to: &str) -> Compared {
        if let Some((_, known)) = self
            .compared
            .borrow()
            .iter()
            .find(|(to, _)| to == compare_to)
        {
            return known.clone();
        }
        let answer = self.loader.changed_since(compare_to).map(|mut paths| {
            paths.sort();
            paths.dedup();
            std::rc::Rc::from(paths)
        });
        self.compared
            .borrow_mut()
            .push((compare_to.to_owned(), answer.clone()));
        answer
    }
}
