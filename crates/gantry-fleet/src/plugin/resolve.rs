//! Finding a plugin binary from `[runners.autoscaler] plugin` (spec `fleet.md` §2.1).

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::constants::ENV_PLUGIN_PATH;
use super::error::PluginError;

/// The binary `reference` names.
///
/// * A reference with a `/` that exists is a path and used as is; one starting with
///   `/`, `./` or `../` must exist.
/// * A bare `<name>` is looked up as `$FLEETING_PLUGIN_PATH/<name>`,
///   `$FLEETING_PLUGIN_PATH/fleeting-plugin-<name>`, then `fleeting-plugin-<name>` and
///   `<name>` on `PATH`.
/// * Anything else (`<name>:<constraint>`, `<repository>/<name>`,
///   `<registry>/<repository>/<name>:<constraint>`) is an OCI reference, which Gantry
///   cannot install yet.
pub fn resolve(reference: &str) -> Result<PathBuf, PluginError> {
    resolve_in(
        reference,
        std::env::var_os(ENV_PLUGIN_PATH),
        std::env::var_os("PATH"),
    )
}

pub(crate) fn resolve_in(
    reference: &str,
    plugin_path: Option<OsString>,
    path: Option<OsString>,
) -> Result<PathBuf, PluginError> {
    let explicit = ["/", "./", "../"]
        .iter()
        .any(|prefix| reference.starts_with(prefix));
    if reference.contains('/') {
        let candidate = PathBuf::from(reference);
        if candidate.is_file() {
            return Ok(candidate);
        }
        if explicit {
            return Err(PluginError::NotFound {
                reference: reference.into(),
                looked: vec![candidate],
            });
        }
        return Err(PluginError::OciNotSupported {
            reference: reference.into(),
        });
    }
    if reference.contains(':') {
        return Err(PluginError::OciNotSupported {
            reference: reference.into(),
        });
    }
    let prefixed = format!("fleeting-plugin-{reference}");
    let mut looked = Vec::new();
    if let Some(dir) = plugin_path.filter(|dir| !dir.is_empty()) {
        let dir = PathBuf::from(dir);
        looked.push(dir.join(reference));
        looked.push(dir.join(&prefixed));
    }
    let dirs: Vec<PathBuf> = path
        .map(|path| {
            std::env::split_paths(&path)
                .filter(|dir| !dir.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    looked.extend(dirs.iter().map(|dir| dir.join(&prefixed)));
    looked.extend(dirs.iter().map(|dir| dir.join(reference)));
    match looked.iter().find(|candidate| is_executable(candidate)) {
        Some(found) => Ok(found.clone()),
        None => Err(PluginError::NotFound {
            reference: reference.into(),
            looked,
        }),
    }
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn executable(path: &Path) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_plugin_path_comes_before_path_and_the_prefixed_name_before_the_bare_one() {
        let temp = tempfile::tempdir().unwrap();
        let (plugins, bin) = (temp.path().join("plugins"), temp.path().join("bin"));
        fs::create_dir_all(&plugins).unwrap();
        fs::create_dir_all(&bin).unwrap();
        executable(&bin.join("fleeting-plugin-aws"));
        executable(&bin.join("aws"));
        let path = Some(bin.clone().into_os_string());
        let dir = Some(plugins.clone().into_os_string());
        assert_eq!(
            resolve_in("aws", dir.clone(), path.clone()).unwrap(),
            bin.join("fleeting-plugin-aws")
        );
        executable(&plugins.join("fleeting-plugin-aws"));
        assert_eq!(
            resolve_in("aws", dir.clone(), path.clone()).unwrap(),
            plugins.join("fleeting-plugin-aws")
        );
        executable(&plugins.join("aws"));
        assert_eq!(resolve_in("aws", dir, path).unwrap(), plugins.join("aws"));
    }

    #[test]
    fn the_full_executable_name_works_on_path_and_files_that_are_not_executable_do_not() {
        let temp = tempfile::tempdir().unwrap();
        executable(&temp.path().join("fleeting-plugin-hetzner"));
        fs::write(temp.path().join("fleeting-plugin-aws"), "").unwrap();
        let path = Some(temp.path().as_os_str().to_owned());
        assert_eq!(
            resolve_in("fleeting-plugin-hetzner", None, path.clone()).unwrap(),
            temp.path().join("fleeting-plugin-hetzner")
        );
        assert!(resolve_in("aws", None, path).is_err());
    }

    #[test]
    fn paths_are_used_as_is_and_missing_ones_say_where_they_looked() {
        let temp = tempfile::tempdir().unwrap();
        let plugin = temp.path().join("my-plugin");
        executable(&plugin);
        assert_eq!(
            resolve_in(plugin.to_str().unwrap(), None, None).unwrap(),
            plugin
        );
        let missing = temp.path().join("missing");
        let error = resolve_in(missing.to_str().unwrap(), None, None).unwrap_err();
        assert!(
            error.to_string().contains(missing.to_str().unwrap()),
            "{error}"
        );
        let error = resolve_in("aws", None, Some(temp.path().as_os_str().to_owned()))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("{}/fleeting-plugin-aws", temp.path().display())),
            "{error}"
        );
        assert!(
            error.contains(&format!("{}/aws\n", temp.path().display())),
            "{error}"
        );
    }

    #[test]
    fn oci_references_are_not_installed_yet() {
        for reference in [
            "aws:1.2",
            "gitlab-org/fleeting/plugins/aws",
            "registry.gitlab.com/gitlab-org/fleeting/plugins/aws:latest",
        ] {
            let error = resolve_in(reference, None, None).unwrap_err();
            assert!(
                matches!(error, PluginError::OciNotSupported { .. }),
                "{reference}: {error}"
            );
            assert!(error.to_string().contains("on PATH"), "{error}");
        }
    }
}
