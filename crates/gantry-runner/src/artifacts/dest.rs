//! `Destination`: writes archive entries under a root directory and nowhere else.
//!
//! Every entry name is checked before anything is written ([`entry_path`]): relative,
//! no `..`, `\` treated as a separator. Parent directories are created one component
//! at a time; an existing component that is a symlink is accepted only when it
//! resolves (canonically) inside the root. The final component is replaced when it
//! exists (a symlink is removed, never written through). Symlinks to be created must
//! be relative and resolve lexically inside the root.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::ArtifactError;

/// The extraction root.
#[derive(Debug)]
pub(crate) struct Destination {
    root: PathBuf,
}

/// Splits an archive entry name into safe relative components, or says why not.
/// `Ok(empty)` means the root itself (`./`).
pub(crate) fn entry_path(name: &str) -> Result<PathBuf, String> {
    if name.is_empty() {
        return Err("the entry has an empty name".to_owned());
    }
    if name.contains('\0') {
        return Err("the name contains a NUL byte".to_owned());
    }
    if name.starts_with('/') || name.starts_with('\\') || has_drive_prefix(name) {
        return Err("absolute paths are not allowed".to_owned());
    }
    let mut path = PathBuf::new();
    for part in name.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => return Err("the path leaves the build directory (`..`)".to_owned()),
            part => path.push(part),
        }
    }
    Ok(path)
}

fn has_drive_prefix(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':'
}

/// Checks that a symlink stored at `link` (relative to the root) with `target` stays
/// inside the root, lexically.
pub(crate) fn check_link_target(link: &Path, target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err("the symbolic link has an empty target".to_owned());
    }
    if target.starts_with('/') || target.starts_with('\\') || has_drive_prefix(target) {
        return Err(format!(
            "the symbolic link points to the absolute path `{target}`"
        ));
    }
    let mut depth: Vec<&std::ffi::OsStr> = link
        .parent()
        .map(|parent| {
            parent
                .components()
                .filter_map(|c| match c {
                    Component::Normal(part) => Some(part),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    for part in target.split(['/', '\\']) {
        match part {
            "" | "." => {}
            ".." => {
                if depth.pop().is_none() {
                    return Err(format!(
                        "the symbolic link points outside the build directory (`{target}`)"
                    ));
                }
            }
            part => depth.push(std::ffi::OsStr::new(part)),
        }
    }
    Ok(())
}

impl Destination {
    /// Creates `root` if needed and resolves it.
    pub(crate) fn new(root: &Path) -> Result<Self, ArtifactError> {
        fs::create_dir_all(root).map_err(|e| ArtifactError::io("create directory", root, e))?;
        let root = fs::canonicalize(root).map_err(|e| ArtifactError::io("resolve", root, e))?;
        Ok(Self { root })
    }

    /// Creates the parents of `rel` safely; returns the absolute path of `rel`.
    fn prepare(&self, entry: &str, rel: &Path) -> Result<PathBuf, ArtifactError> {
        let mut current = self.root.clone();
        if let Some(parent) = rel.parent() {
            for component in parent.components() {
                current.push(component);
                match fs::symlink_metadata(&current) {
                    Ok(meta) if meta.is_dir() => {}
                    Ok(meta) if meta.file_type().is_symlink() => {
                        let resolved = fs::canonicalize(&current).map_err(|_| {
                            ArtifactError::unsafe_entry(
                                entry,
                                format!("`{}` is a dangling symbolic link", self.display(&current)),
                            )
                        })?;
                        if !resolved.starts_with(&self.root) {
                            return Err(ArtifactError::unsafe_entry(
                                entry,
                                format!(
                                    "`{}` is a symbolic link leading outside the build directory",
                                    self.display(&current)
                                ),
                            ));
                        }
                        if !resolved.is_dir() {
                            return Err(ArtifactError::unsafe_entry(
                                entry,
                                format!("`{}` is not a directory", self.display(&current)),
                            ));
                        }
                    }
                    Ok(_) => {
                        return Err(ArtifactError::unsafe_entry(
                            entry,
                            format!("`{}` exists and is not a directory", self.display(&current)),
                        ));
                    }
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {
                        fs::create_dir(&current)
                            .map_err(|e| ArtifactError::io("create directory", &current, e))?;
                    }
                    Err(error) => return Err(ArtifactError::io("inspect", &current, error)),
                }
            }
        }
        Ok(self.root.join(rel))
    }

    fn display(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Removes whatever non-directory is at `path`.
    fn clear(&self, entry: &str, path: &Path) -> Result<(), ArtifactError> {
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => Err(ArtifactError::unsafe_entry(
                entry,
                format!("a directory `{}` is in the way", self.display(path)),
            )),
            Ok(_) => fs::remove_file(path).map_err(|e| ArtifactError::io("replace", path, e)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(ArtifactError::io("inspect", path, error)),
        }
    }

    /// Creates (or keeps) the directory `rel`.
    pub(crate) fn create_dir(
        &self,
        entry: &str,
        rel: &Path,
        mode: Option<u32>,
    ) -> Result<(), ArtifactError> {
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        let path = self.prepare(entry, rel)?;
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(meta) if meta.file_type().is_symlink() => {
                // Accept a link to a directory inside the root; anything else is replaced.
                match fs::canonicalize(&path) {
                    Ok(resolved) if resolved.starts_with(&self.root) && resolved.is_dir() => Ok(()),
                    _ => {
                        fs::remove_file(&path)
                            .map_err(|e| ArtifactError::io("replace", &path, e))?;
                        self.make_dir(&path, mode)
                    }
                }
            }
            Ok(_) => {
                fs::remove_file(&path).map_err(|e| ArtifactError::io("replace", &path, e))?;
                self.make_dir(&path, mode)
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => self.make_dir(&path, mode),
            Err(error) => Err(ArtifactError::io("inspect", &path, error)),
        }
    }

    fn make_dir(&self, path: &Path, mode: Option<u32>) -> Result<(), ArtifactError> {
        fs::create_dir(path).map_err(|e| ArtifactError::io("create directory", path, e))?;
        if let Some(mode) = mode {
            // Keep the owner able to write into it, or later entries could not land.
            let permissions = fs::Permissions::from_mode((mode & 0o777) | 0o700);
            fs::set_permissions(path, permissions)
                .map_err(|e| ArtifactError::io("set permissions of", path, e))?;
        }
        Ok(())
    }

    /// Creates the regular file `rel` (replacing what is there) for writing.
    pub(crate) fn create_file(
        &self,
        entry: &str,
        rel: &Path,
        mode: Option<u32>,
    ) -> Result<(File, PathBuf), ArtifactError> {
        if rel.as_os_str().is_empty() {
            return Err(ArtifactError::unsafe_entry(
                entry,
                "a file entry names the build directory itself",
            ));
        }
        let path = self.prepare(entry, rel)?;
        self.clear(entry, &path)?;
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        options.mode(mode.map_or(0o644, |mode| mode & 0o777));
        let file = options
            .open(&path)
            .map_err(|e| ArtifactError::io("create", &path, e))?;
        Ok((file, path))
    }

    /// Creates the symlink `rel` → `target` (replacing what is there).
    pub(crate) fn create_symlink(
        &self,
        entry: &str,
        rel: &Path,
        target: &str,
    ) -> Result<(), ArtifactError> {
        if rel.as_os_str().is_empty() {
            return Err(ArtifactError::unsafe_entry(
                entry,
                "a symbolic link names the build directory itself",
            ));
        }
        check_link_target(rel, target)
            .map_err(|reason| ArtifactError::unsafe_entry(entry, reason))?;
        let path = self.prepare(entry, rel)?;
        self.clear(entry, &path)?;
        std::os::unix::fs::symlink(target, &path)
            .map_err(|e| ArtifactError::io("create symbolic link", &path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names() {
        assert_eq!(entry_path("a/b/c.txt"), Ok(PathBuf::from("a/b/c.txt")));
        assert_eq!(entry_path("./a//b/"), Ok(PathBuf::from("a/b")));
        assert_eq!(entry_path("a\\b"), Ok(PathBuf::from("a/b")));
        assert!(entry_path("../x").is_err());
        assert!(entry_path("a/../../x").is_err());
        assert!(entry_path("a\\..\\x").is_err());
        assert!(entry_path("/etc/passwd").is_err());
        assert!(entry_path("C:/x").is_err());
        assert!(entry_path("").is_err());
    }

    #[test]
    fn link_targets() {
        assert!(check_link_target(Path::new("a/l"), "../b").is_ok());
        assert!(check_link_target(Path::new("a/l"), "../../b").is_err());
        assert!(check_link_target(Path::new("l"), "./x/../y").is_ok());
        assert!(check_link_target(Path::new("l"), "/etc").is_err());
        assert!(check_link_target(Path::new("l"), "..").is_err());
    }
}
