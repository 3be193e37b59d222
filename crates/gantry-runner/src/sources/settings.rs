//! `GitSettings`: the `GIT_*` variables of a job, resolved once.

use super::SourcesError;
use crate::artifacts::Lookup;

/// `GIT_STRATEGY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitStrategy {
    /// Remove the project directory, then fetch into a fresh repository.
    Clone,
    /// Reuse the repository in the project directory.
    Fetch,
    /// Leave the project directory as it is (create it when missing).
    None,
    /// Empty the project directory.
    Empty,
}

/// `GIT_SUBMODULE_STRATEGY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmoduleStrategy {
    /// Do nothing with submodules.
    None,
    /// Top-level submodules only.
    Normal,
    /// Submodules of submodules too.
    Recursive,
}

/// How to get the sources, from the job's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSettings {
    /// `GIT_STRATEGY`; default `fetch` when the project allows it
    /// (`allow_git_fetch`), else `clone`.
    pub strategy: GitStrategy,
    /// `GIT_CHECKOUT` (Go boolean syntax); default true.
    pub checkout: bool,
    /// `GIT_CLEAN_FLAGS`; default `-ffdx`; `none` = no clean.
    pub clean_flags: Vec<String>,
    /// `GIT_FETCH_EXTRA_FLAGS`; default `--prune --quiet`; `none` = no flags.
    pub fetch_flags: Vec<String>,
    /// `GIT_SUBMODULE_STRATEGY`; default none.
    pub submodule_strategy: SubmoduleStrategy,
    /// `GIT_SUBMODULE_DEPTH`; defaults to the payload's depth; 0 = full.
    pub submodule_depth: i64,
    /// `GIT_SUBMODULE_PATHS`: only these submodules (space separated).
    pub submodule_paths: Vec<String>,
    /// `GIT_SUBMODULE_UPDATE_FLAGS`: extra `git submodule update` flags.
    pub submodule_update_flags: Vec<String>,
    /// `GIT_LFS_SKIP_SMUDGE` set by the job: no `git lfs pull`.
    pub lfs_disabled: bool,
}

impl GitSettings {
    /// Reads the `GIT_*` variables. `allow_git_fetch` is the payload's flag and
    /// `depth` its `git_info.depth`. Unknown strategies are errors; an unparsable
    /// `GIT_CHECKOUT` or `GIT_SUBMODULE_DEPTH` falls back to the default with a warning.
    pub fn from_variables(
        lookup: Lookup<'_>,
        allow_git_fetch: bool,
        depth: i64,
    ) -> Result<(Self, Vec<String>), SourcesError> {
        let get = |name: &str| lookup(name).unwrap_or_default();
        let mut warnings = Vec::new();

        let strategy = match get("GIT_STRATEGY").as_str() {
            "" if allow_git_fetch => GitStrategy::Fetch,
            "" => GitStrategy::Clone,
            "clone" => GitStrategy::Clone,
            "fetch" => GitStrategy::Fetch,
            "none" => GitStrategy::None,
            "empty" => GitStrategy::Empty,
            other => {
                return Err(SourcesError::UnknownStrategy {
                    variable: "GIT_STRATEGY",
                    value: other.to_owned(),
                    expected: "clone, fetch, none or empty",
                });
            }
        };
        let checkout = match get("GIT_CHECKOUT").as_str() {
            "" => true,
            value => parse_go_bool(value).unwrap_or_else(|| {
                warnings.push(format!(
                    "GIT_CHECKOUT={value:?} is not a boolean; checking out anyway"
                ));
                true
            }),
        };
        let submodule_strategy = match get("GIT_SUBMODULE_STRATEGY").as_str() {
            "" | "none" => SubmoduleStrategy::None,
            "normal" => SubmoduleStrategy::Normal,
            "recursive" => SubmoduleStrategy::Recursive,
            other => {
                return Err(SourcesError::UnknownStrategy {
                    variable: "GIT_SUBMODULE_STRATEGY",
                    value: other.to_owned(),
                    expected: "none, normal or recursive",
                });
            }
        };
        let submodule_depth = match get("GIT_SUBMODULE_DEPTH").as_str() {
            "" => depth,
            value => value.trim().parse::<i64>().unwrap_or_else(|_| {
                warnings.push(format!(
                    "GIT_SUBMODULE_DEPTH={value:?} is not a number; using the job's depth ({depth})"
                ));
                depth
            }),
        };
        let lfs_disabled = parse_go_bool(&get("GIT_LFS_SKIP_SMUDGE")).unwrap_or(false);
        Ok((
            Self {
                strategy,
                checkout,
                clean_flags: flags(&get("GIT_CLEAN_FLAGS"), &["-ffdx"]),
                fetch_flags: flags(&get("GIT_FETCH_EXTRA_FLAGS"), &["--prune", "--quiet"]),
                submodule_strategy,
                submodule_depth,
                submodule_paths: split(&get("GIT_SUBMODULE_PATHS")),
                submodule_update_flags: split(&get("GIT_SUBMODULE_UPDATE_FLAGS")),
                lfs_disabled,
            },
            warnings,
        ))
    }
}

/// Empty → `default`, `none` → nothing, else the whitespace-separated words.
fn flags(value: &str, default: &[&str]) -> Vec<String> {
    match value.trim() {
        "" => default.iter().map(|flag| (*flag).to_owned()).collect(),
        "none" => Vec::new(),
        value => split(value),
    }
}

fn split(value: &str) -> Vec<String> {
    value.split_whitespace().map(str::to_owned).collect()
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)], allow_fetch: bool) -> Result<GitSettings, SourcesError> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        GitSettings::from_variables(&lookup, allow_fetch, 20).map(|(settings, _)| settings)
    }

    #[test]
    fn defaults() {
        let s = settings(&[], true).expect("valid");
        assert_eq!(s.strategy, GitStrategy::Fetch);
        assert!(s.checkout);
        assert_eq!(s.clean_flags, ["-ffdx"]);
        assert_eq!(s.fetch_flags, ["--prune", "--quiet"]);
        assert_eq!(s.submodule_strategy, SubmoduleStrategy::None);
        assert_eq!(s.submodule_depth, 20);
        assert_eq!(
            settings(&[], false).expect("valid").strategy,
            GitStrategy::Clone
        );
    }

    #[test]
    fn overrides_and_errors() {
        let s = settings(
            &[
                ("GIT_STRATEGY", "none"),
                ("GIT_CHECKOUT", "false"),
                ("GIT_CLEAN_FLAGS", "none"),
                ("GIT_FETCH_EXTRA_FLAGS", "--no-tags"),
                ("GIT_SUBMODULE_STRATEGY", "recursive"),
                ("GIT_SUBMODULE_DEPTH", "1"),
            ],
            true,
        )
        .expect("valid");
        assert_eq!(s.strategy, GitStrategy::None);
        assert!(!s.checkout);
        assert!(s.clean_flags.is_empty());
        assert_eq!(s.fetch_flags, ["--no-tags"]);
        assert_eq!(s.submodule_strategy, SubmoduleStrategy::Recursive);
        assert_eq!(s.submodule_depth, 1);
        let error = settings(&[("GIT_STRATEGY", "rsync")], true).expect_err("invalid");
        assert_eq!(
            error.to_string(),
            "get sources: unknown GIT_STRATEGY \"rsync\" (expected clone, fetch, none or empty)"
        );
        assert!(settings(&[("GIT_SUBMODULE_STRATEGY", "deep")], true).is_err());
    }
}
