//! `collect`: which files an artifact or cache entry contains (gitlab-runner's
//! `file_archiver.go`; rules in the [module docs](crate::artifacts)).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use globset::{GlobBuilder, GlobMatcher};

use super::Note;

/// What to collect, paths already variable-expanded.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectSpec<'a> {
    /// Paths and globs relative to the build directory.
    pub paths: &'a [String],
    /// Globs of paths to leave out.
    pub exclude: &'a [String],
    /// Add git-untracked (and ignored) files.
    pub untracked: bool,
    /// The build directory as the job sees it, when that is another path (a container's
    /// `/builds/<project>`): absolute paths under it name files under the build
    /// directory, and messages name it.
    pub seen_dir: Option<&'a Path>,
}

/// One collected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Relative to the build directory, `/`-separated, no trailing slash.
    pub path: String,
    /// File, directory or symlink.
    pub kind: EntryKind,
    /// Unix permission bits (`0o755`, …).
    pub mode: u32,
    /// Last modification time.
    pub modified: SystemTime,
}

/// The kind of a collected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file of this many bytes.
    File {
        /// Size in bytes.
        size: u64,
    },
    /// A directory (stored as an entry of its own).
    Dir,
    /// A symbolic link, stored as such.
    Symlink {
        /// The link's target text.
        target: String,
    },
}

/// The result of [`collect`]: entries sorted by path, and log lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Sorted by path, no duplicates.
    pub entries: Vec<Entry>,
    /// Log lines in the order gitlab-runner prints them.
    pub notes: Vec<Note>,
}

impl Collected {
    /// Number of files and symlinks (directories not counted).
    pub fn file_count(&self) -> usize {
        self.entries
            .iter()
            .filter(|entry| !matches!(entry.kind, EntryKind::Dir))
            .count()
    }

    /// Total size of the regular files.
    pub fn total_bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|entry| match entry.kind {
                EntryKind::File { size } => size,
                _ => 0,
            })
            .sum()
    }

    /// Whether nothing was collected.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

const GLOB_CHARS: &[char] = &['*', '?', '[', '{'];

/// Collects the files `spec` names under `build_dir`. Never fails: problems (no
/// match, a path outside the build directory, an unreadable directory) become
/// warnings in [`Collected::notes`].
pub fn collect(build_dir: &Path, spec: &CollectSpec<'_>) -> Collected {
    let root = fs::canonicalize(build_dir).unwrap_or_else(|_| build_dir.to_path_buf());
    let mut collector = Collector {
        root,
        display_root: spec.seen_dir.unwrap_or(build_dir).display().to_string(),
        excludes: Vec::new(),
        files: BTreeMap::new(),
        excluded: BTreeMap::new(),
        notes: Vec::new(),
    };
    for pattern in spec.exclude {
        match relative_pattern(build_dir, spec.seen_dir, pattern)
            .and_then(|rel| glob(&rel).map_err(|error| format!("{pattern}: {error}")))
        {
            Ok(matcher) => collector.excludes.push((pattern.clone(), matcher)),
            Err(reason) => collector.warn(format!("exclude {reason}")),
        }
    }
    for path in spec.paths {
        collector.process_path(build_dir, spec.seen_dir, path);
    }
    if spec.untracked {
        collector.process_untracked();
    }
    let excluded = std::mem::take(&mut collector.excluded);
    for (pattern, count) in excluded {
        collector.info(format!("{pattern}: excluded {count} files"));
    }
    Collected {
        entries: collector.files.into_values().collect(),
        notes: collector.notes,
    }
}

struct Collector {
    /// Canonical build directory.
    root: PathBuf,
    /// The build directory as given, for messages.
    display_root: String,
    excludes: Vec<(String, GlobMatcher)>,
    files: BTreeMap<String, Entry>,
    excluded: BTreeMap<String, usize>,
    notes: Vec<Note>,
}

/// Makes `pattern` relative to the build directory and lexically clean, or says why
/// it is not inside it. An absolute pattern may name the build directory as it is here
/// or as the job sees it (`seen_dir`).
fn relative_pattern(
    build_dir: &Path,
    seen_dir: Option<&Path>,
    pattern: &str,
) -> Result<String, String> {
    let not_inside = || format!("artifact path is not a subpath of project directory: {pattern}");
    let under = |root: &Path| {
        let root = root.to_string_lossy();
        let root = root.trim_end_matches('/');
        match pattern.strip_prefix(root) {
            Some("") => Some(String::new()),
            Some(rest) if rest.starts_with('/') => Some(rest.to_owned()),
            _ => None,
        }
    };
    let stripped;
    let relative = if pattern.starts_with('/') {
        stripped = under(build_dir)
            .or_else(|| seen_dir.and_then(under))
            .ok_or_else(not_inside)?;
        stripped.as_str()
    } else {
        pattern
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(not_inside());
                }
            }
            part => parts.push(part),
        }
    }
    Ok(parts.join("/"))
}

fn glob(pattern: &str) -> Result<GlobMatcher, globset::Error> {
    Ok(GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .empty_alternates(true)
        .build()?
        .compile_matcher())
}

impl Collector {
    fn warn(&mut self, text: String) {
        self.notes.push(Note::Warning(text));
    }

    fn info(&mut self, text: String) {
        self.notes.push(Note::Info(text));
    }

    fn process_path(&mut self, build_dir: &Path, seen_dir: Option<&Path>, path: &str) {
        if path.is_empty() {
            self.warn("No matching files. Path is empty.".to_owned());
            return;
        }
        let rel = match relative_pattern(build_dir, seen_dir, path) {
            Ok(rel) => rel,
            Err(reason) => {
                self.warn(reason);
                return;
            }
        };
        let found = if rel.contains(GLOB_CHARS) {
            match glob(&rel) {
                Ok(matcher) => self.process_glob(path, &rel, &matcher),
                Err(error) => {
                    self.warn(format!("{path}: {error}"));
                    return;
                }
            }
        } else {
            self.process_literal(path, &rel)
        };
        if found == 0 {
            self.warn(format!(
                "{path}: no matching files. Ensure that the artifact path is relative to the working directory ({})",
                self.display_root
            ));
        } else {
            self.info(format!(
                "{path}: found {found} matching artifact files and directories"
            ));
        }
    }

    /// Checks that every component of `rel` but the last is a real directory, or a
    /// link resolving inside the root. Returns false (with a warning) otherwise.
    fn parents_stay_inside(&mut self, path: &str, rel: &str) -> bool {
        let mut current = self.root.clone();
        let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
        let Some((_, parents)) = parts.split_last() else {
            return true;
        };
        for part in parents {
            current.push(part);
            match fs::symlink_metadata(&current) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    match fs::canonicalize(&current) {
                        Ok(resolved) if resolved.starts_with(&self.root) => {}
                        _ => {
                            self.warn(format!(
                            "{path}: not following symbolic link `{}` outside the build directory",
                            current.strip_prefix(&self.root).unwrap_or(&current).display()
                        ));
                            return false;
                        }
                    }
                }
                Ok(_) => {}
                // Missing: the caller finds no match.
                Err(_) => return true,
            }
        }
        true
    }

    fn process_literal(&mut self, path: &str, rel: &str) -> usize {
        if rel.is_empty() {
            // The build directory itself: everything in it.
            let root = self.root.clone();
            return self.walk_tree(&root, "");
        }
        if !self.parents_stay_inside(path, rel) {
            return 0;
        }
        let absolute = self.root.join(rel);
        match fs::symlink_metadata(&absolute) {
            Ok(meta) => self.process_tree(&absolute, rel, &meta),
            Err(_) => 0,
        }
    }

    fn process_glob(&mut self, path: &str, rel: &str, matcher: &GlobMatcher) -> usize {
        let parts: Vec<&str> = rel.split('/').collect();
        let literal = parts
            .iter()
            .take_while(|part| !part.contains(GLOB_CHARS))
            .count();
        let base = parts[..literal].join("/");
        let rest = &parts[literal..];
        let max_depth = if rest.iter().any(|part| part.contains("**")) {
            usize::MAX
        } else {
            rest.len()
        };
        let base_abs = self.root.join(&base);
        if !base.is_empty() {
            // The base must itself be reachable without leaving the root.
            let probe = format!("{base}/x");
            if !self.parents_stay_inside(path, &probe) {
                return 0;
            }
            match fs::metadata(&base_abs) {
                Ok(meta) if meta.is_dir() => {}
                _ => return 0,
            }
        }
        let mut found = 0;
        self.walk_glob(&base_abs, &base, matcher, 1, max_depth, &mut found);
        found
    }

    fn walk_glob(
        &mut self,
        dir: &Path,
        rel_dir: &str,
        matcher: &GlobMatcher,
        depth: usize,
        max_depth: usize,
        found: &mut usize,
    ) {
        for (name, absolute, meta) in self.read_dir(dir) {
            let rel = join(rel_dir, &name);
            if matcher.is_match(&rel) {
                *found += self.process_tree(&absolute, &rel, &meta);
            } else if meta.is_dir() && depth < max_depth {
                self.walk_glob(&absolute, &rel, matcher, depth + 1, max_depth, found);
            }
        }
    }

    /// Adds `rel` and, when it is a real directory, everything below it.
    fn process_tree(&mut self, absolute: &Path, rel: &str, meta: &Metadata) -> usize {
        let mut found = usize::from(self.process(absolute, rel, meta));
        if meta.is_dir() {
            found += self.walk_tree(absolute, rel);
        }
        found
    }

    fn walk_tree(&mut self, dir: &Path, rel_dir: &str) -> usize {
        let mut found = 0;
        for (name, absolute, meta) in self.read_dir(dir) {
            let rel = join(rel_dir, &name);
            found += self.process_tree(&absolute, &rel, &meta);
        }
        found
    }

    /// Sorted directory entries with their `lstat`; unreadable ones become warnings.
    fn read_dir(&mut self, dir: &Path) -> Vec<(String, PathBuf, Metadata)> {
        let reader = match fs::read_dir(dir) {
            Ok(reader) => reader,
            Err(error) => {
                self.warn(format!("{}: {error}", self.relative_display(dir)));
                return Vec::new();
            }
        };
        let mut entries = Vec::new();
        for entry in reader {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    self.warn(format!("{}: {error}", self.relative_display(dir)));
                    continue;
                }
            };
            let absolute = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                self.warn(format!(
                    "{}: skipped, the name is not valid UTF-8",
                    self.relative_display(&absolute)
                ));
                continue;
            };
            match fs::symlink_metadata(&absolute) {
                Ok(meta) => entries.push((name, absolute, meta)),
                Err(error) => self.warn(format!("{}: {error}", self.relative_display(&absolute))),
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    fn relative_display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Adds one path unless excluded. Returns whether it counts as found.
    fn process(&mut self, absolute: &Path, rel: &str, meta: &Metadata) -> bool {
        if let Some(pattern) = self
            .excludes
            .iter()
            .find(|(_, matcher)| matcher.is_match(rel))
            .map(|(pattern, _)| pattern.clone())
        {
            *self.excluded.entry(pattern).or_default() += 1;
            return false;
        }
        let file_type = meta.file_type();
        let kind = if file_type.is_symlink() {
            match fs::read_link(absolute) {
                Ok(target) => match target.to_str() {
                    Some(target) => EntryKind::Symlink {
                        target: target.to_owned(),
                    },
                    None => {
                        self.warn(format!(
                            "{rel}: skipped, the link target is not valid UTF-8"
                        ));
                        return false;
                    }
                },
                Err(error) => {
                    self.warn(format!("{rel}: {error}"));
                    return false;
                }
            }
        } else if file_type.is_dir() {
            EntryKind::Dir
        } else if file_type.is_file() {
            EntryKind::File { size: meta.len() }
        } else {
            self.warn(format!(
                "{rel}: skipped, only files, directories and symbolic links can be archived"
            ));
            return false;
        };
        self.files.insert(
            rel.to_owned(),
            Entry {
                path: rel.to_owned(),
                kind,
                mode: meta.permissions().mode() & 0o7777,
                modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            },
        );
        true
    }

    fn process_untracked(&mut self) {
        let output = Command::new("git")
            .args(["ls-files", "--others", "-z"])
            .current_dir(&self.root)
            .output();
        let stdout = match output {
            Ok(output) if output.status.success() => output.stdout,
            Ok(output) => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                self.warn(format!("untracked: {}", stderr.trim()));
                return;
            }
            Err(error) => {
                self.warn(format!("untracked: cannot run git: {error}"));
                return;
            }
        };
        let mut found = 0;
        for raw in stdout
            .split(|byte| *byte == 0)
            .filter(|raw| !raw.is_empty())
        {
            let Ok(rel) = std::str::from_utf8(raw) else {
                self.warn(format!(
                    "untracked: {} skipped, the name is not valid UTF-8",
                    Path::new(OsStr::from_bytes(raw)).display()
                ));
                continue;
            };
            let rel = rel.trim_end_matches('/');
            if rel
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..")
            {
                continue;
            }
            let absolute = self.root.join(rel);
            if let Ok(meta) = fs::symlink_metadata(&absolute) {
                if self.process(&absolute, rel, &meta) {
                    found += 1;
                }
            }
        }
        if found == 0 {
            self.warn("untracked: no files".to_owned());
        } else {
            self.info(format!("untracked: found {found} files"));
        }
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_made_relative() {
        let dir = Path::new("/builds/acme/widget");
        assert_eq!(relative_pattern(dir, None, "./a/b/"), Ok("a/b".to_owned()));
        assert_eq!(relative_pattern(dir, None, "a/../b"), Ok("b".to_owned()));
        assert_eq!(
            relative_pattern(dir, None, "/builds/acme/widget/x"),
            Ok("x".to_owned())
        );
        assert_eq!(
            relative_pattern(dir, None, "/builds/acme/widget"),
            Ok(String::new())
        );
        assert!(relative_pattern(dir, None, "/builds/acme/widgetx").is_err());
        assert!(relative_pattern(dir, None, "../x").is_err());
        assert!(relative_pattern(dir, None, "/etc").is_err());
    }

    #[test]
    fn absolute_patterns_may_name_the_directory_the_job_sees() {
        let dir = Path::new("/srv/b/tok/0/acme/widget");
        let seen = Some(Path::new("/builds/acme/widget"));
        assert_eq!(
            relative_pattern(dir, seen, "/builds/acme/widget/out/x"),
            Ok("out/x".to_owned())
        );
        assert_eq!(
            relative_pattern(dir, seen, "/srv/b/tok/0/acme/widget/out"),
            Ok("out".to_owned())
        );
        assert!(relative_pattern(dir, seen, "/builds/acme/other").is_err());
        assert!(relative_pattern(dir, None, "/builds/acme/widget/out").is_err());
    }
}
