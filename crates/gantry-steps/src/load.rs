//! Finding and reading step files: local directories, and git repositories fetched with the
//! `git` CLI into a cache (one bare mirror per URL, one extracted tree per commit, reused).
//!
//! Paths come in two spaces: where this process reads files (the host) and where the
//! job's programs see them (a container mounts the build directory elsewhere).
//! [`PathMap`] translates; with no mapping both are the same.
//!
//! Limits: a step file of at most [`MAX_STEP_FILE_BYTES`]; YAML limits as `.gitlab-ci.yml`'s.

use std::path::{Path, PathBuf};

use gantry_pipeline::yaml::{FileId, Limits, Node, Pos, Value as Yaml, parse_documents};
use tokio::process::Command;

use crate::definition::{Definition, Problem, Spec, parse_definition, parse_spec};
use crate::reference::Reference;
use crate::result::ResultReference;

/// Largest step file read.
pub const MAX_STEP_FILE_BYTES: u64 = 1024 * 1024;

/// Pairs of directories: `(host, seen)`. A path under a host directory is seen under
/// its partner, and back.
#[derive(Debug, Clone, Default)]
pub struct PathMap {
    pairs: Vec<(PathBuf, PathBuf)>,
}

impl PathMap {
    /// Host and seen paths are the same.
    pub fn identity() -> Self {
        Self::default()
    }

    /// Adds a mapped directory.
    pub fn with(mut self, host: impl Into<PathBuf>, seen: impl Into<PathBuf>) -> Self {
        self.pairs.push((host.into(), seen.into()));
        self
    }

    /// Where the job sees `host`.
    pub fn to_seen(&self, host: &Path) -> PathBuf {
        for (h, s) in &self.pairs {
            if let Ok(rest) = host.strip_prefix(h) {
                return s.join(rest);
            }
        }
        host.to_owned()
    }

    /// Where this process reads `seen`; `None` when a mapping exists and `seen` is outside
    /// every mapped directory (a path only the job's container has).
    pub fn to_host(&self, seen: &Path) -> Option<PathBuf> {
        if self.pairs.is_empty() {
            return Some(seen.to_owned());
        }
        self.pairs
            .iter()
            .find_map(|(h, s)| seen.strip_prefix(s).ok().map(|rest| h.join(rest)))
    }
}

/// A step file read and checked.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The directory holding the file (host).
    pub dir: PathBuf,
    /// The file (host), for messages.
    pub file: PathBuf,
    pub spec: Spec,
    pub definition: Definition,
    pub reference: ResultReference,
}

/// Why a step could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

/// Reads step files.
#[derive(Debug, Clone)]
pub struct Loader {
    pub paths: PathMap,
    /// Where git references are fetched (host).
    pub cache_dir: PathBuf,
}

impl Loader {
    /// Loads `reference`; a relative local path is relative to `base` (host).
    pub async fn load(&self, reference: &Reference, base: &Path) -> Result<Loaded, LoadError> {
        match reference {
            Reference::Local { path } => {
                let (dir, file) = split_file(path);
                let dir = if Path::new(&dir).is_absolute() {
                    self.paths.to_host(Path::new(&dir)).ok_or_else(|| {
                        LoadError(format!(
                            "{path}: the runner cannot read this path (it is inside the job's container only); keep steps in the project, or use a git reference"
                        ))
                    })?
                } else {
                    normalize(&base.join(&dir))
                };
                let mut loaded = read_step(&dir, file.as_deref())?;
                loaded.reference = ResultReference {
                    protocol: "local".to_owned(),
                    path: Some(path.clone()),
                    filename: file_name(&loaded.file),
                    ..ResultReference::default()
                };
                Ok(loaded)
            }
            Reference::Git {
                url,
                rev,
                dir,
                file,
            } => {
                let (tree, commit) = self.fetch(url, rev).await?;
                let step_dir = match dir {
                    Some(d) => {
                        if Path::new(d)
                            .components()
                            .any(|c| !matches!(c, std::path::Component::Normal(_)))
                        {
                            return Err(LoadError(format!(
                                "{url}@{rev}: the directory {d:?} must stay inside the repository"
                            )));
                        }
                        tree.join(d)
                    }
                    None => tree.clone(),
                };
                let mut loaded = read_step(&step_dir, file.as_deref())
                    .map_err(|e| LoadError(format!("{url}@{rev}: {}", e.0)))?;
                loaded.reference = ResultReference {
                    protocol: "git".to_owned(),
                    url: Some(url.clone()),
                    path: dir.clone(),
                    filename: file_name(&loaded.file),
                    version: Some(rev.clone()),
                    commit: Some(commit),
                };
                Ok(loaded)
            }
        }
    }

    /// The tree of `url` at `rev` (fetched once per commit) and the commit.
    async fn fetch(&self, url: &str, rev: &str) -> Result<(PathBuf, String), LoadError> {
        let key: String = url
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mirror = self.cache_dir.join("git").join(key);
        if !mirror.join("HEAD").exists() {
            std::fs::create_dir_all(&mirror)
                .map_err(|e| LoadError(format!("create {}: {e}", mirror.display())))?;
            git(&mirror, &["init", "--bare", "--quiet"]).await?;
        }
        // A tag, a branch or a commit: a shallow fetch of the revision first; a full
        // fetch when the server refuses it (a short SHA, a commit it does not advertise).
        let commit = match git(&mirror, &["fetch", "--quiet", "--depth", "1", url, rev]).await {
            Ok(_) => git(&mirror, &["rev-parse", "--verify", "FETCH_HEAD^{commit}"]).await?,
            Err(_) => {
                let fetched = git(
                    &mirror,
                    &[
                        "fetch",
                        "--quiet",
                        url,
                        "+refs/heads/*:refs/remotes/origin/*",
                        "+refs/tags/*:refs/tags/*",
                    ],
                )
                .await;
                let mut found = None;
                for candidate in [
                    format!("refs/tags/{rev}"),
                    format!("refs/remotes/origin/{rev}"),
                    rev.to_owned(),
                ] {
                    if let Ok(c) = git(
                        &mirror,
                        &[
                            "rev-parse",
                            "--verify",
                            "--quiet",
                            &format!("{candidate}^{{commit}}"),
                        ],
                    )
                    .await
                    {
                        found = Some(c);
                        break;
                    }
                }
                match (found, fetched) {
                    (Some(c), _) => c,
                    (None, Err(e)) => return Err(LoadError(format!("fetch {url}: {}", e.0))),
                    (None, Ok(_)) => {
                        return Err(LoadError(format!(
                            "{url} has no tag, branch or commit {rev:?}"
                        )));
                    }
                }
            }
        };
        let commit = commit.trim().to_owned();
        let tree = self.cache_dir.join("trees").join(&commit);
        if !tree.exists() {
            let staging = self
                .cache_dir
                .join("trees")
                .join(format!("{commit}.{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&staging);
            std::fs::create_dir_all(&staging)
                .map_err(|e| LoadError(format!("create {}: {e}", staging.display())))?;
            let index = staging.with_extension("index");
            let out = Command::new("git")
                .arg("--git-dir")
                .arg(&mirror)
                .arg("--work-tree")
                .arg(&staging)
                .args(["checkout", "--quiet", "--force", &commit, "--", "."])
                .env("GIT_INDEX_FILE", &index)
                .output()
                .await
                .map_err(|e| LoadError(format!("run git: {e}")))?;
            let _ = std::fs::remove_file(&index);
            if !out.status.success() {
                return Err(LoadError(format!(
                    "extract {url} at {commit}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            if let Err(e) = std::fs::rename(&staging, &tree) {
                let _ = std::fs::remove_dir_all(&staging);
                if !tree.exists() {
                    return Err(LoadError(format!("store {}: {e}", tree.display())));
                }
            }
        }
        Ok((tree, commit))
    }
}

async fn git(dir: &Path, args: &[&str]) -> Result<String, LoadError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .await
        .map_err(|e| LoadError(format!("run git: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(LoadError(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))
    }
}

fn file_name(p: &Path) -> Option<String> {
    p.file_name().map(|f| f.to_string_lossy().into_owned())
}

/// `dir/file.yml` → (`dir`, `file.yml`); anything else is a directory.
fn split_file(path: &str) -> (String, Option<String>) {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((dir, file)) if file.ends_with(".yml") || file.ends_with(".yaml") => (
            if dir.is_empty() {
                "/".to_owned()
            } else {
                dir.to_owned()
            },
            Some(file.to_owned()),
        ),
        _ => (trimmed.to_owned(), None),
    }
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Reads `dir/file` (or `func.yml`, then `step.yml`).
pub fn read_step(dir: &Path, file: Option<&str>) -> Result<Loaded, LoadError> {
    let path = match file {
        Some(f) => dir.join(f),
        None => {
            let func = dir.join("func.yml");
            if func.exists() {
                func
            } else {
                dir.join("step.yml")
            }
        }
    };
    let shown = path.display().to_string();
    let meta = std::fs::metadata(&path).map_err(|e| {
        LoadError(
            if e.kind() == std::io::ErrorKind::NotFound && file.is_none() {
                format!("{}: no func.yml or step.yml there", dir.display())
            } else {
                format!("{shown}: {e}")
            },
        )
    })?;
    if meta.len() > MAX_STEP_FILE_BYTES {
        return Err(LoadError(format!(
            "{shown}: a step file may hold at most {MAX_STEP_FILE_BYTES} bytes"
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| LoadError(format!("{shown}: {e}")))?;
    let (spec, definition) = parse_step_file(&text).map_err(|(pos, message)| match pos {
        Some(pos) => LoadError(format!("{shown}:{}:{}: {message}", pos.line, pos.col)),
        None => LoadError(format!("{shown}: {message}")),
    })?;
    Ok(Loaded {
        dir: dir.to_owned(),
        file: path,
        spec,
        definition,
        reference: ResultReference::default(),
    })
}

/// The two documents of a step file, checked; an error with its position when it has one.
pub fn parse_step_file(text: &str) -> Result<(Spec, Definition), (Option<Pos>, String)> {
    let docs = parse_documents(text, FileId(0), Limits::default())
        .map_err(|e| (Some(e.pos), e.message))?;
    let [spec_doc, def_doc] = docs.as_slice() else {
        return Err((
            None,
            format!(
                "a step file holds two YAML documents, the spec then the definition, separated by `---` (found {})",
                docs.len()
            ),
        ));
    };
    let at = |node: &Node, problems: Vec<Problem>| {
        let first = &problems[0];
        let more = if problems.len() > 1 {
            format!(
                " (and {} more: {})",
                problems.len() - 1,
                problems[1..]
                    .iter()
                    .map(|p| p.message.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        } else {
            String::new()
        };
        (
            Some(position(node, &first.pointer)),
            format!("{}{more}", first.message),
        )
    };
    let spec_json = spec_doc.to_json();
    if spec_json.to_string().contains("${{") {
        return Err((
            Some(spec_doc.pos),
            "the spec is static: `${{ }}` is allowed in the definition only".to_owned(),
        ));
    }
    let spec = parse_spec(&spec_json).map_err(|p| at(spec_doc, p))?;
    let definition = parse_definition(&def_doc.to_json(), &spec).map_err(|p| at(def_doc, p))?;
    Ok((spec, definition))
}

/// The position of the node at a JSON pointer (the deepest one that exists).
pub fn position(node: &Node, pointer: &str) -> Pos {
    let mut current = node;
    for segment in pointer.split('/').skip(1) {
        let key = segment.replace("~1", "/").replace("~0", "~");
        let next = match &current.value {
            Yaml::Map(m) => m.entry(&key).map(|e| &e.value),
            Yaml::Seq(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        };
        match next {
            Some(n) => current = n,
            None => break,
        }
    }
    current.pos
}

/// A `run:` list given as JSON (a job's), for messages with a pointer.
pub fn describe_pointer(pointer: &str) -> String {
    if pointer.is_empty() {
        "run".to_owned()
    } else {
        format!("run{}", pointer.replace('/', ":"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_file_errors_have_positions() {
        let e = parse_step_file(
            "spec:\n  inputs:\n    who:\n      type: text\n---\nexec:\n  command: [echo]\n",
        )
        .unwrap_err();
        assert_eq!(
            (e.0.map(|p| (p.line, p.col)), e.1.as_str()),
            (
                Some((4, 13)),
                "unknown type \"text\"; expected string, number, boolean, array or struct"
            )
        );
        let e =
            parse_step_file("spec:\n---\nexec:\n  command: [echo]\n  shell: bash\n").unwrap_err();
        assert_eq!(
            (e.0.map(|p| (p.line, p.col)), e.1.as_str()),
            (
                Some((5, 10)),
                "unknown key `shell`; exec has command and work_dir"
            )
        );
        let e = parse_step_file("spec:\n").unwrap_err();
        assert!(e.1.contains("found 1"), "{}", e.1);
        let e = parse_step_file("spec:\n  inputs:\n    a: {type: string, default: \"${{ env.X }}\"}\n---\nexec: {command: [x]}\n").unwrap_err();
        assert!(e.1.starts_with("the spec is static"));
        assert!(parse_step_file("spec: [\n").is_err());
    }

    #[test]
    fn path_map_both_ways() {
        let map = PathMap::identity().with("/host/slot", "/builds");
        assert_eq!(
            map.to_seen(Path::new("/host/slot/p/x")),
            PathBuf::from("/builds/p/x")
        );
        assert_eq!(
            map.to_host(Path::new("/builds/p")),
            Some(PathBuf::from("/host/slot/p"))
        );
        assert_eq!(map.to_host(Path::new("/opt/steps")), None);
        assert_eq!(
            PathMap::identity().to_host(Path::new("/opt")),
            Some(PathBuf::from("/opt"))
        );
        assert_eq!(
            split_file("./a/b/echo.yml"),
            ("./a/b".to_owned(), Some("echo.yml".to_owned()))
        );
        assert_eq!(split_file("./a/b/"), ("./a/b".to_owned(), None));
        assert_eq!(normalize(Path::new("/w/./a/../b")), PathBuf::from("/w/b"));
    }
}
