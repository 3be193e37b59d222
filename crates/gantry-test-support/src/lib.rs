//! What the crates' integration tests share, written once: real git repositories
//! ([`git`], [`Repo`]), the conformance corpora nobody on the team wrote
//! (`../shared/conformance`, [`corpus`]), the check that keeps each crate's tests in one
//! binary ([`assert_every_test_file_is_a_module`]) and the one that keeps a crate's
//! top-level modules free of cycles ([`assert_no_module_cycle`]).
//!
//! A dev-dependency only. Each crate's integration tests are one test binary,
//! `tests/it.rs` (`autotests = false` and one `[[test]]` in its `Cargo.toml`): a file of
//! `tests/` is a module of it, and the harnesses of a crate (`tests/*_support/`) are
//! modules its files reach as `crate::…_support`. One binary links the workspace once
//! instead of once per file; nextest still runs every test in its own process, so tests
//! keep their process-wide state (environment, signals, limits) to themselves.
//!
//! Helpers here panic with what failed: they are for tests.
#![allow(clippy::panic, clippy::unwrap_used)]

pub mod corpus;
mod git;
pub mod modules;

pub use git::{Repo, commit, git};
pub use modules::{assert_no_module_cycle, assert_only_through_the_top_of};

use std::collections::BTreeSet;
use std::path::Path;

/// Fails when a file of `<manifest_dir>/tests/` (`x.rs`, or a directory `x/` with a
/// `mod.rs` that no file declares as its child with `#[path = "x/mod.rs"]`) is not declared
/// `mod x;` in `tests/it.rs`, or when `tests/it.rs` declares a module without its file: with
/// `autotests = false`, Cargo would otherwise never build a new test file, and its tests
/// would silently not run.
pub fn assert_every_test_file_is_a_module(manifest_dir: &str) {
    let tests = Path::new(manifest_dir).join("tests");
    let root = std::fs::read_to_string(tests.join("it.rs"))
        .unwrap_or_else(|e| panic!("{}/it.rs unreadable: {e}", tests.display()));
    let mut files = BTreeSet::new();
    let entries =
        std::fs::read_dir(&tests).unwrap_or_else(|e| panic!("{} unreadable: {e}", tests.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if path.is_dir() {
            // A directory module is the binary's, or the child of the one file naming it in
            // a `#[path]` (a file's own harness).
            let child = format!("#[path = \"{name}/mod.rs\"]");
            if path.join("mod.rs").is_file() && !any_file_contains(&tests, &child) {
                files.insert(name.to_owned());
            }
        } else if let Some(module) = name.strip_suffix(".rs") {
            if module != "it" {
                files.insert(module.to_owned());
            }
        }
    }
    let declared: BTreeSet<String> = root
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect();
    let missing: Vec<_> = files.difference(&declared).collect();
    let stale: Vec<_> = declared.difference(&files).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "tests/it.rs and the files of {} disagree:\n  \
         files without `mod NAME;` in tests/it.rs (their tests never run): {missing:?}\n  \
         `mod NAME;` without a file: {stale:?}",
        tests.display()
    );
}

fn any_file_contains(dir: &Path, text: &str) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| {
            let path = entry.path();
            path.extension().is_some_and(|e| e == "rs")
                && std::fs::read_to_string(&path).is_ok_and(|t| t.contains(text))
        })
}

/// The checks every crate's test binary runs, as `#[test]`s: each file of `tests/` is a
/// module of it ([`assert_every_test_file_is_a_module`]); with `no_module_cycle`, also
/// that `src/`'s top-level modules form no cycle ([`assert_no_module_cycle`]).
#[macro_export]
macro_rules! binary_checks {
    () => {
        #[test]
        fn every_test_file_is_a_module_of_this_binary() {
            $crate::assert_every_test_file_is_a_module(env!("CARGO_MANIFEST_DIR"));
        }
    };
    (no_module_cycle) => {
        $crate::binary_checks!();

        /// No cycle among `src/`'s top-level modules (read from its `crate::` paths).
        #[test]
        fn the_top_level_modules_form_no_cycle() {
            $crate::assert_no_module_cycle(env!("CARGO_MANIFEST_DIR"));
        }
    };
}
