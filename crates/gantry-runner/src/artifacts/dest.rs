//! `Destination`: writes archive entries under a root directory and nowhere else, and
//! creates only symbolic links that cannot lead out of it.
//!
//! Every entry name is checked before anything is written ([`entry_path`]): relative,
//! no `..`, `\` treated as a separator.
//!
//! # Writing beneath the root
//!
//! An entry's parent directory is opened with `openat2(RESOLVE_BENEATH)` from a
//! descriptor of the root, so the kernel resolves every component and every link on
//! the way and refuses any that leaves the root (`..` above it, an absolute link).
//! Missing parents are created one component at a time by a walk over descriptors
//! ([`Destination::walk`]: each component opened `O_PATH | O_NOFOLLOW` relative to the
//! previous one, a link's target read and resolved the same way, `..` taken from the
//! walk's own stack, at most 40 links as the kernel's `ELOOP`), then the directory is
//! opened again with `openat2`, so the kernel has the last word. Where `openat2` does not
//! exist (Linux before 5.6: `ENOSYS`; an old seccomp profile: `EPERM`) the walk alone
//! does the same. The entry's last component is then created relative to that
//! descriptor by name only (`openat(O_CREAT | O_EXCL | O_NOFOLLOW)`, `mkdirat`,
//! `symlinkat`), after removing a file or link already there — never writing through
//! it. A directory in the way is an error; a link to a directory beneath the root
//! stands for the directory.
//!
//! # Which symbolic links are created
//!
//! A link's target is resolved the way the kernel will resolve it: from the link's own
//! directory, through the files and links already on disk, component by component
//! (links followed, at most 40), and the link is refused when the target
//!
//! * is absolute (also one pointing into the root: a moved build directory would
//!   change its meaning), or empty;
//! * leaves the root: a `..` above it, or a link on the way that leads out (one from the
//!   repository or an earlier job as well);
//! * has a `..` after a symbolic link or after a name that does not exist (or is not a
//!   directory) — in the entry's own path or in the target. What such a `..` climbs out
//!   of is decided by a link, and a later entry or archive may create or replace that
//!   link: a chain `u1 → d/l/..`, `u2 → u1/..`, … each fine on its own when written,
//!   would end at `/`. A `..` may climb only out of real directories reached from the
//!   root by real directories, which extraction never removes or replaces.
//!
//! So every link an extraction creates resolves beneath the root, and still does after
//! any later extraction: its `..`s land in a fixed real directory, and everything after
//! them goes down by names, through links that obey the same rule. The one way out is
//! a link extraction did not make — the repository's or a job's — that already leads
//! out (then the new link is refused when it goes through it as things stand, but a
//! later entry can route a path onto it; the new link is then only another name for
//! that link), or whose own `..` follows a name a later entry makes a link. Those are
//! the project's own, as are a job's commands, which can create any link.
//!
//! gitlab-runner checks entry paths lexically and creates links after the files of an
//! archive, with any target; Gantry keeps the stricter rule above, and like
//! gitlab-runner stops the extraction at an entry that would leave the directory.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, open, openat, openat2, readlinkat};
use nix::sys::stat::{Mode, SFlag, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use super::ArtifactError;
use super::error::shown;

/// Symbolic links followed in one resolution at most (the kernel's `MAXSYMLINKS`).
const MAX_LINK_HOPS: u32 = 40;

/// The extraction root.
#[derive(Debug)]
pub(crate) struct Destination {
    /// The root, resolved (for messages and I/O errors).
    root: PathBuf,
    /// The root, opened `O_PATH`: every operation starts here.
    root_fd: OwnedFd,
    /// Whether `openat2` is there to use (cleared at its first `ENOSYS` or `EPERM`).
    openat2: AtomicBool,
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

/// What a name in a directory is.
enum Found {
    /// A directory, opened `O_PATH`.
    Dir(OwnedFd),
    /// A symbolic link, with its target.
    Link(OsString),
    /// Anything else (a file, a fifo, …).
    Other,
    /// Nothing.
    Missing,
}

/// Looks `name` up in `dir` without following it.
fn lookup(dir: &OwnedFd, name: &OsStr) -> nix::Result<Found> {
    let fd = match openat(
        dir,
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Found::Missing),
        Err(errno) => return Err(errno),
    };
    let kind = SFlag::from_bits_truncate(fstat(&fd)?.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFDIR {
        Ok(Found::Dir(fd))
    } else if kind == SFlag::S_IFLNK {
        // An empty path reads the link the `O_PATH` descriptor stands for.
        Ok(Found::Link(readlinkat(&fd, "")?))
    } else {
        Ok(Found::Other)
    }
}

/// Where a component of a walk comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The entry's path, or the new link's target.
    Own,
    /// The target of a link found on disk on the way.
    Link,
}

/// What a walk does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WalkMode {
    /// Open a directory, creating missing components of the entry's path if `create`.
    Open { create: bool },
    /// Check a new link's target: go on lexically past what does not exist.
    Check,
}

/// A directory a walk stands in.
struct Frame {
    /// The directory, `None` past a name that does not exist or is not a directory.
    fd: Option<OwnedFd>,
    /// Its path under the root, as resolved.
    path: PathBuf,
}

/// Why a `..` of a new link may not climb: what came before it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unfixed {
    /// A symbolic link (its path).
    Link(PathBuf),
    /// A name that does not exist yet.
    Missing(PathBuf),
    /// A name that is not a directory.
    NotDir(PathBuf),
}

/// Why a walk stopped.
#[derive(Debug)]
enum Stop {
    /// The link at this path leads outside the root (`..` above it, or absolute).
    Outside { link: PathBuf },
    /// A `..` of the new link's own target climbs above the root.
    Above,
    /// A `..` of the new link's own target comes after something that can change.
    Unfixed(Unfixed),
    /// More than [`MAX_LINK_HOPS`] links, the last at this path.
    TooManyLinks { link: PathBuf },
    /// The link at this path leads to nothing.
    Dangling { link: PathBuf },
    /// This path is not a directory (or the link at it does not lead to one).
    NotDirectory { path: PathBuf },
    /// A component is missing and was not to be created.
    Missing { path: PathBuf },
    /// A system call failed.
    Io { path: PathBuf, errno: Errno },
}

fn components(path: &Path) -> VecDeque<(OsString, Origin)> {
    path.iter()
        .map(|part| (part.to_owned(), Origin::Own))
        .collect()
}

fn link_components(target: &OsStr) -> impl DoubleEndedIterator<Item = &OsStr> {
    target
        .as_bytes()
        .split(|byte| *byte == b'/')
        .map(OsStr::from_bytes)
}

impl Destination {
    /// Creates `root` if needed, resolves and opens it.
    pub(crate) fn new(root: &Path) -> Result<Self, ArtifactError> {
        fs::create_dir_all(root).map_err(|e| ArtifactError::io("create directory", root, e))?;
        let root = fs::canonicalize(root).map_err(|e| ArtifactError::io("resolve", root, e))?;
        let root_fd = open(
            &root,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| ArtifactError::io("open", &root, errno.into()))?;
        Ok(Self {
            root,
            root_fd,
            openat2: AtomicBool::new(true),
        })
    }

    /// Resolves without `openat2`, as on a kernel without it.
    #[cfg(test)]
    fn without_openat2(self) -> Self {
        self.openat2.store(false, Ordering::Relaxed);
        self
    }

    /// The root opened again (`O_PATH`).
    fn reopen_root(&self) -> nix::Result<OwnedFd> {
        openat(
            &self.root_fd,
            ".",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
    }

    /// `openat2(root, rel, O_PATH | O_DIRECTORY, RESOLVE_BENEATH)`; `None` when the
    /// kernel has no `openat2`.
    fn open_beneath(&self, rel: &Path) -> Option<nix::Result<OwnedFd>> {
        if !self.openat2.load(Ordering::Relaxed) {
            return None;
        }
        let path = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        match openat2(&self.root_fd, path, how) {
            Err(Errno::ENOSYS | Errno::EPERM) => {
                self.openat2.store(false, Ordering::Relaxed);
                None
            }
            result => Some(result),
        }
    }

    /// Resolves `queue` from the root (rules in the module docs). Returns the frame it
    /// ends in.
    fn walk(&self, mut queue: VecDeque<(OsString, Origin)>, mode: WalkMode) -> Result<Frame, Stop> {
        let root = self.reopen_root().map_err(|errno| Stop::Io {
            path: PathBuf::new(),
            errno,
        })?;
        let mut stack = vec![Frame {
            fd: Some(root),
            path: PathBuf::new(),
        }];
        let mut hops = 0;
        // The link of the entry's own path (or target) being resolved, for messages.
        let mut outer: Option<PathBuf> = None;
        // Set at the first link or missing name: no `..` of our own after it.
        let mut unfixed: Option<Unfixed> = None;
        while let Some((part, origin)) = queue.pop_front() {
            if origin == Origin::Own {
                outer = None;
            }
            match part.as_bytes() {
                b"" | b"." => continue,
                b".." => {
                    if origin == Origin::Own {
                        if let Some(why) = &unfixed {
                            return Err(Stop::Unfixed(why.clone()));
                        }
                        if stack.len() <= 1 {
                            return Err(Stop::Above);
                        }
                    } else if stack.len() <= 1 {
                        return Err(Stop::Outside {
                            link: outer.clone().unwrap_or_default(),
                        });
                    }
                    stack.pop();
                    continue;
                }
                _ => {}
            }
            let Some(top) = stack.last() else {
                return Err(Stop::Above);
            };
            let path = top.path.join(&part);
            let found = match &top.fd {
                Some(dir) => lookup(dir, &part).map_err(|errno| Stop::Io {
                    path: path.clone(),
                    errno,
                })?,
                None => Found::Missing,
            };
            match found {
                Found::Dir(fd) => stack.push(Frame { fd: Some(fd), path }),
                Found::Link(target) => {
                    let link = outer.get_or_insert_with(|| path.clone()).clone();
                    unfixed.get_or_insert_with(|| Unfixed::Link(link.clone()));
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(Stop::TooManyLinks { link });
                    }
                    if target.as_bytes().first() == Some(&b'/') {
                        return Err(Stop::Outside { link });
                    }
                    if target.is_empty() {
                        match mode {
                            WalkMode::Check => stack.push(Frame { fd: None, path }),
                            WalkMode::Open { .. } => return Err(Stop::Dangling { link }),
                        }
                        continue;
                    }
                    for component in link_components(&target).rev() {
                        queue.push_front((component.to_owned(), Origin::Link));
                    }
                }
                Found::Missing | Found::Other => {
                    let missing = matches!(found, Found::Missing);
                    match mode {
                        WalkMode::Check => {
                            unfixed.get_or_insert_with(|| {
                                if missing {
                                    Unfixed::Missing(path.clone())
                                } else {
                                    Unfixed::NotDir(path.clone())
                                }
                            });
                            stack.push(Frame { fd: None, path });
                        }
                        WalkMode::Open { create } => {
                            if let Some(link) = outer.clone() {
                                return Err(if missing {
                                    Stop::Dangling { link }
                                } else {
                                    Stop::NotDirectory { path: link }
                                });
                            }
                            if !missing {
                                return Err(Stop::NotDirectory { path });
                            }
                            let (Some(dir), true) = (&top.fd, create) else {
                                return Err(Stop::Missing { path });
                            };
                            let fd = make_dir_in(dir, &part, &path)?;
                            stack.push(Frame { fd: Some(fd), path });
                        }
                    }
                }
            }
        }
        stack.pop().ok_or(Stop::Above)
    }

    /// Opens the directory `rel` (`O_PATH`) beneath the root, creating what is missing
    /// when `create`.
    fn open_dir(&self, rel: &Path, create: bool) -> Result<OwnedFd, Stop> {
        if let Some(Ok(fd)) = self.open_beneath(rel) {
            return Ok(fd);
        }
        let frame = self.walk(components(rel), WalkMode::Open { create })?;
        let walked = frame.fd.ok_or_else(|| Stop::Missing {
            path: rel.to_owned(),
        })?;
        // The kernel has the last word where it can say it.
        match self.open_beneath(rel) {
            None => Ok(walked),
            Some(Ok(fd)) => Ok(fd),
            Some(Err(errno)) => Err(Stop::Io {
                path: rel.to_owned(),
                errno,
            }),
        }
    }

    /// The directory that receives `rel`, and `rel`'s last component.
    fn parent_of<'a>(
        &self,
        entry: &str,
        rel: &'a Path,
    ) -> Result<(OwnedFd, &'a OsStr), ArtifactError> {
        let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
            return Err(ArtifactError::unsafe_entry(
                entry,
                "the entry names the build directory itself",
            ));
        };
        let dir = self
            .open_dir(parent, true)
            .map_err(|stop| self.refusal(entry, stop))?;
        Ok((dir, name))
    }

    /// The error for a walk that stopped while writing `entry`.
    fn refusal(&self, entry: &str, stop: Stop) -> ArtifactError {
        let at = |path: &Path| shown(&path.to_string_lossy());
        let reason = match stop {
            Stop::Outside { link } => format!(
                "`{}` is a symbolic link leading outside the build directory",
                at(&link)
            ),
            Stop::TooManyLinks { link } => {
                format!("`{}`: too many levels of symbolic links", at(&link))
            }
            Stop::Dangling { link } => {
                format!("`{}` is a dangling symbolic link", at(&link))
            }
            Stop::NotDirectory { path } => {
                format!("`{}` exists and is not a directory", at(&path))
            }
            Stop::Io { path, errno } => {
                return ArtifactError::io("open", self.root.join(path), errno.into());
            }
            Stop::Missing { path } => format!("`{}` does not exist", at(&path)),
            Stop::Above | Stop::Unfixed(_) => {
                "the path leaves the build directory (`..`)".to_owned()
            }
        };
        ArtifactError::unsafe_entry(entry, reason)
    }

    /// Removes whatever non-directory is at `name` in `dir`.
    fn clear(
        &self,
        entry: &str,
        dir: &OwnedFd,
        name: &OsStr,
        rel: &Path,
    ) -> Result<(), ArtifactError> {
        match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat)
                if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR =>
            {
                Err(ArtifactError::unsafe_entry(
                    entry,
                    format!(
                        "a directory `{}` is in the way",
                        shown(&rel.to_string_lossy())
                    ),
                ))
            }
            Ok(_) => unlinkat(dir, name, UnlinkatFlags::NoRemoveDir)
                .map_err(|errno| ArtifactError::io("replace", self.root.join(rel), errno.into())),
            Err(Errno::ENOENT) => Ok(()),
            Err(errno) => Err(ArtifactError::io(
                "inspect",
                self.root.join(rel),
                errno.into(),
            )),
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
        let (dir, name) = self.parent_of(entry, rel)?;
        let found = lookup(&dir, name)
            .map_err(|errno| ArtifactError::io("inspect", self.root.join(rel), errno.into()))?;
        match found {
            Found::Dir(_) => return Ok(()),
            // A link to a directory beneath the root stands for it; any other is replaced.
            Found::Link(_) if self.open_dir(rel, false).is_ok() => return Ok(()),
            Found::Link(_) | Found::Other => self.clear(entry, &dir, name, rel)?,
            Found::Missing => {}
        }
        let path = self.root.join(rel);
        mkdirat(&dir, name, Mode::from_bits_truncate(0o777))
            .map_err(|errno| ArtifactError::io("create directory", &path, errno.into()))?;
        if let Some(mode) = mode {
            let fd = openat(
                &dir,
                name,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|errno| ArtifactError::io("open", &path, errno.into()))?;
            // Keep the owner able to write into it, or later entries could not land.
            fchmod(&fd, Mode::from_bits_truncate((mode & 0o777) | 0o700))
                .map_err(|errno| ArtifactError::io("set permissions of", &path, errno.into()))?;
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
        let (dir, name) = self.parent_of(entry, rel)?;
        self.clear(entry, &dir, name, rel)?;
        let path = self.root.join(rel);
        let fd = openat(
            &dir,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode.map_or(0o644, |mode| mode & 0o777)),
        )
        .map_err(|errno| ArtifactError::io("create", &path, errno.into()))?;
        Ok((File::from(fd), path))
    }

    /// Creates the symlink `rel` → `target` (replacing what is there), when the target
    /// obeys the rules of the module docs.
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
        let refuse = |reason: String| ArtifactError::unsafe_entry(entry, reason);
        let quoted = shown(target);
        if target.is_empty() {
            return Err(refuse("the symbolic link has an empty target".to_owned()));
        }
        if target.contains('\0') {
            return Err(refuse(format!(
                "the symbolic link's target `{quoted}` contains a NUL byte"
            )));
        }
        if target.starts_with('/') {
            return Err(refuse(format!(
                "the symbolic link points to the absolute path `{quoted}`"
            )));
        }
        let (dir, name) = self.parent_of(entry, rel)?;
        let mut queue = components(rel.parent().unwrap_or(Path::new("")));
        queue
            .extend(link_components(OsStr::new(target)).map(|part| (part.to_owned(), Origin::Own)));
        let at = |path: &Path| shown(&path.to_string_lossy());
        match self.walk(queue, WalkMode::Check) {
            Ok(_) => {}
            Err(Stop::Above) => {
                return Err(refuse(format!(
                    "the symbolic link points outside the build directory (`{quoted}`)"
                )));
            }
            Err(Stop::Outside { link }) => {
                return Err(refuse(format!(
                    "the symbolic link points outside the build directory through the link `{}` (`{quoted}`)",
                    at(&link)
                )));
            }
            Err(Stop::Unfixed(why)) => {
                let after = match why {
                    Unfixed::Link(link) => format!("the symbolic link `{}`", at(&link)),
                    Unfixed::Missing(path) => format!("`{}`, which does not exist", at(&path)),
                    Unfixed::NotDir(path) => format!("`{}`, which is not a directory", at(&path)),
                };
                return Err(refuse(format!(
                    "the symbolic link's target `{quoted}` has a `..` after {after}: where it leads could change with a later entry (a `..` may follow only real directories)"
                )));
            }
            Err(Stop::TooManyLinks { link }) => {
                return Err(refuse(format!(
                    "the symbolic link's target `{quoted}` passes too many levels of symbolic links (at `{}`)",
                    at(&link)
                )));
            }
            Err(stop) => return Err(self.refusal(entry, stop)),
        }
        self.clear(entry, &dir, name, rel)?;
        symlinkat(target, &dir, name).map_err(|errno| {
            ArtifactError::io("create symbolic link", self.root.join(rel), errno.into())
        })
    }
}

/// `mkdir name` in `dir` (an existing one is fine when it is a directory), opened.
fn make_dir_in(dir: &OwnedFd, name: &OsStr, path: &Path) -> Result<OwnedFd, Stop> {
    match mkdirat(dir, name, Mode::from_bits_truncate(0o777)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => {
            return Err(Stop::Io {
                path: path.to_owned(),
                errno,
            });
        }
    }
    match lookup(dir, name) {
        Ok(Found::Dir(fd)) => Ok(fd),
        Ok(_) => Err(Stop::NotDirectory {
            path: path.to_owned(),
        }),
        Err(errno) => Err(Stop::Io {
            path: path.to_owned(),
            errno,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use proptest::prelude::*;

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
        assert!(entry_path("a\0b").is_err());
    }

    /// How a resolution ended, in the kernel's terms.
    #[derive(Debug, PartialEq, Eq)]
    enum Outcome {
        Dir(u64, u64),
        Errno(Errno),
    }

    fn outcome_of(result: Result<OwnedFd, Errno>) -> Outcome {
        match result {
            Ok(fd) => {
                let stat = fstat(&fd).expect("fstat");
                Outcome::Dir(stat.st_dev, stat.st_ino)
            }
            Err(errno) => Outcome::Errno(errno),
        }
    }

    fn stop_errno(stop: &Stop) -> Errno {
        match stop {
            Stop::Outside { .. } | Stop::Above | Stop::Unfixed(_) => Errno::EXDEV,
            Stop::TooManyLinks { .. } => Errno::ELOOP,
            Stop::Dangling { .. } | Stop::Missing { .. } => Errno::ENOENT,
            Stop::NotDirectory { .. } => Errno::ENOTDIR,
            Stop::Io { errno, .. } => *errno,
        }
    }

    /// A tree with every kind of link: inside, outside, absolute, chains, loops.
    fn hostile_tree() -> (tempfile::TempDir, PathBuf) {
        let scratch = tempfile::tempdir().expect("temp dir");
        let root = scratch.path().join("root");
        fs::create_dir_all(root.join("d/e/f")).expect("mkdir");
        fs::create_dir_all(scratch.path().join("outside/x")).expect("mkdir");
        fs::write(root.join("file"), "x").expect("write");
        let abs_in = root.join("d").to_string_lossy().into_owned();
        let links = [
            ("in", "d/e"),
            ("d/up", ".."),
            ("d/e/up2", "../.."),
            ("d/e/out", "../../.."),
            ("abs_in", abs_in.as_str()),
            ("abs_out", "/"),
            ("chain1", "in/up2"),
            ("chain2", "chain1/d/e/out"),
            ("dot", "."),
            ("dotdot_via_link", "dot/.."),
            ("loop1", "loop2"),
            ("loop2", "loop1"),
            ("dangling", "nothing/here"),
            ("to_file", "file"),
            ("deep", "d/e/f/../../e/f"),
            ("u1", "d/up/.."),
            ("u2", "u1/.."),
        ];
        for (link, target) in links {
            symlink(target, root.join(link)).expect("symlink");
        }
        (scratch, root)
    }

    /// `openat2(RESOLVE_BENEATH)` and the walk decide alike on every path of a tree
    /// full of hostile links: the same directory, or the same error.
    #[test]
    fn the_walk_resolves_as_the_kernel_does() {
        let (_scratch, root) = hostile_tree();
        let dest = Destination::new(&root).expect("destination");
        assert!(
            dest.open_beneath(Path::new(".")).is_some(),
            "this kernel has openat2; the comparison needs it"
        );
        let names = [
            "d",
            "e",
            "f",
            "in",
            "up",
            "up2",
            "out",
            "abs_in",
            "abs_out",
            "chain1",
            "chain2",
            "dot",
            "dotdot_via_link",
            "loop1",
            "dangling",
            "to_file",
            "deep",
            "u1",
            "u2",
            "file",
            "missing",
        ];
        let mut paths: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        for a in names {
            for b in names {
                paths.push(Path::new(a).join(b));
                for c in ["e", "up", "up2", "out", "f"] {
                    paths.push(Path::new(a).join(b).join(c));
                }
            }
        }
        for path in &paths {
            let kernel = outcome_of(dest.open_beneath(path).expect("openat2"));
            let walked = outcome_of(
                dest.walk(components(path), WalkMode::Open { create: false })
                    .map_err(|stop| stop_errno(&stop))
                    .and_then(|frame| frame.fd.ok_or(Errno::ENOENT)),
            );
            assert_eq!(walked, kernel, "resolving `{}`", path.display());
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Dir(String),
        File(String),
        Link(String, String),
    }

    // Few names, so that entries meet: links replace links, paths cross links.
    fn name() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "l"]).prop_map(str::to_owned)
    }

    fn entry() -> impl Strategy<Value = String> {
        prop::collection::vec(name(), 1..=2).prop_map(|parts| parts.join("/"))
    }

    fn target() -> impl Strategy<Value = String> {
        let part = prop::sample::select(vec!["..", "..", ".", "a", "l", "escape"]);
        prop::collection::vec(part, 1..=3).prop_map(|parts| parts.join("/"))
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => entry().prop_map(Op::Dir),
            1 => entry().prop_map(Op::File),
            7 => (entry(), target()).prop_map(|(path, target)| Op::Link(path, target)),
        ]
    }

    fn links_under(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).expect("list").flatten() {
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).expect("stat");
            if meta.file_type().is_symlink() {
                out.push(path);
            } else if meta.is_dir() {
                links_under(&path, out);
            }
        }
    }

    /// Any sequence of entries, in one archive or several: every link extraction made
    /// resolves inside the root (or not at all) unless it goes through the link out
    /// that the repository left, and nothing lands outside.
    fn check_invariant(ops: &[Op], walk_only: bool) -> Result<(), TestCaseError> {
        let scratch = tempfile::tempdir().expect("temp dir");
        let root = scratch.path().join("root");
        let outside = scratch.path().join("outside");
        fs::create_dir_all(&root).expect("mkdir");
        fs::create_dir_all(&outside).expect("mkdir");
        let mut dest = Destination::new(&root).expect("destination");
        if walk_only {
            dest = dest.without_openat2();
        }
        let root = fs::canonicalize(&root).expect("resolve");
        // Left by the repository: a link out.
        let planted = root.join("escape");
        let parked = scratch.path().join("parked");
        symlink("../outside", &planted).expect("symlink");
        let escapes = |links: &[PathBuf]| -> Vec<(PathBuf, PathBuf)> {
            links
                .iter()
                .filter(|link| **link != planted)
                .filter_map(|link| {
                    let resolved = fs::canonicalize(link).ok()?;
                    (!resolved.starts_with(&root)).then(|| (link.clone(), resolved))
                })
                .collect()
        };
        for op in ops {
            let result = match op {
                Op::Dir(path) => dest.create_dir(path, Path::new(path), None),
                Op::File(path) => dest.create_file(path, Path::new(path), None).map(drop),
                Op::Link(path, target) => dest.create_symlink(path, Path::new(path), target),
            };
            // Refusals are expected; I/O errors would be a bug.
            if let Err(error @ ArtifactError::Io { .. }) = result {
                return Err(TestCaseError::fail(format!("{op:?}: {error}")));
            }
            prop_assert_eq!(fs::read_dir(&outside).expect("list").count(), 0);
            let mut links = Vec::new();
            links_under(&root, &mut links);
            if escapes(&links).is_empty() {
                continue;
            }
            // Only through the repository's link: without it, none leads out.
            fs::rename(&planted, &parked).expect("park");
            let without = escapes(&links);
            fs::rename(&parked, &planted).expect("unpark");
            prop_assert!(
                without.is_empty(),
                "after {:?}: {:?} resolve outside",
                op,
                without
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

        #[test]
        fn links_made_by_extraction_stay_inside(ops in prop::collection::vec(op(), 1..20)) {
            check_invariant(&ops, false)?;
        }

        #[test]
        fn links_made_without_openat2_stay_inside(ops in prop::collection::vec(op(), 1..20)) {
            check_invariant(&ops, true)?;
        }
    }

    #[test]
    fn the_chain_from_the_report_is_refused_at_its_first_unsafe_link() {
        let scratch = tempfile::tempdir().expect("temp dir");
        let root = scratch.path().join("root");
        let dest = Destination::new(&root).expect("destination");
        dest.create_dir("d", Path::new("d"), None).expect("dir");
        dest.create_symlink("d/l", Path::new("d/l"), ".")
            .expect("d/l -> .");
        // `d/l/..` is `d/..` = the root today, but goes through the link `d/l`.
        let refused = dest
            .create_symlink("u1", Path::new("u1"), "d/l/..")
            .expect_err("refused");
        assert_eq!(
            refused.to_string(),
            "extract `u1`: the symbolic link's target `d/l/..` has a `..` after the symbolic link `d/l`: where it leads could change with a later entry (a `..` may follow only real directories)"
        );
        assert!(fs::symlink_metadata(root.join("u1")).is_err());
    }
}
