//! The modes of a checkout as gitlab-runner's Docker executor leaves it.
//!
//! Its helper container runs git with `umask 0000`: files are 666, executables and
//! directories 777, so a job whose image runs as another user (`image:docker:user`, an
//! image with a non-root `USER`) can still write its checkout. Gantry fetches on the
//! host with the runner's own umask; [`share_owner_bits`] then gives group and others the
//! owner's permission bits on everything in the checkout. That is exactly what umask 0000
//! gives whatever git creates, since git asks for the same bits for all three (666 for
//! files, 777 for executables and directories, 444 for objects).

use std::fs;
use std::io;
use std::path::Path;

/// Gives group and others the owner's read, write and execute bits on `dir` and
/// everything below it (644 → 666, 755 → 777, 444 stays). Symbolic links are not
/// followed.
#[cfg(unix)]
pub(crate) fn share_owner_bits(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut pending = vec![dir.to_owned()];
    while let Some(path) = pending.pop() {
        let meta = fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode();
        let owner = mode & 0o700;
        let shared = mode | (owner >> 3) | (owner >> 6);
        if shared != mode {
            fs::set_permissions(&path, fs::Permissions::from_mode(shared))?;
        }
        if meta.is_dir() {
            for entry in fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        }
    }
    Ok(())
}

#[cfg(not(unix))]
pub(crate) fn share_owner_bits(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn modes_are_those_of_umask_0000() {
        let mode = |path: &Path| fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777;
        let set = |path: &Path, mode: u32| {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        };
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        fs::write(&outside, "not in the checkout").unwrap();
        set(&outside, 0o600);
        let root = tmp.path().join("project");
        fs::create_dir_all(root.join("sub/deeper")).unwrap();
        for (path, m) in [
            ("file", 0o644),
            ("run.sh", 0o755),
            ("object", 0o444),
            ("private", 0o600),
            ("sub/deeper/file", 0o640),
        ] {
            fs::write(root.join(path), path).unwrap();
            set(&root.join(path), m);
        }
        set(&root.join("sub"), 0o755);
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();

        share_owner_bits(&root).unwrap();

        for (path, m) in [
            ("", 0o777),
            ("file", 0o666),
            ("run.sh", 0o777),
            ("object", 0o444),
            ("private", 0o666),
            ("sub", 0o777),
            ("sub/deeper", 0o777),
            ("sub/deeper/file", 0o666),
        ] {
            assert_eq!(mode(&root.join(path)), m, "{path}");
        }
        assert_eq!(mode(&outside), 0o600, "a link's target is left alone");
    }
}
