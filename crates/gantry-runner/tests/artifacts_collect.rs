//! Which files an artifact collects: gitlab-runner's path, glob, exclude, untracked and
//! symlink rules, on real directories (and a real git repository for `untracked`).

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use gantry_runner::artifacts::{CollectSpec, Collected, EntryKind, collect};

fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

/// A build directory with a bit of everything.
fn build_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    write(root, "coverage/index.html", "<html/>");
    write(root, "coverage/lcov.info", "TN:");
    write(root, "coverage/cache/blob.bin", "cached");
    write(root, "coverage/cache/deep/more.bin", "cached");
    write(root, "reports/a/junit.xml", "<testsuite/>");
    write(root, "reports/b/c/junit.xml", "<testsuite/>");
    write(root, "reports/readme.md", "# hi");
    write(root, ".hidden/file", "dot");
    write(root, "bin/tool", "#!/bin/sh\n");
    fs::set_permissions(root.join("bin/tool"), fs::Permissions::from_mode(0o755)).expect("chmod");
    symlink("index.html", root.join("coverage/latest.html")).expect("symlink");
    dir
}

fn paths(collected: &Collected) -> Vec<String> {
    collected
        .entries
        .iter()
        .map(|entry| match &entry.kind {
            EntryKind::Dir => format!("{}/", entry.path),
            EntryKind::File { .. } => entry.path.clone(),
            EntryKind::Symlink { target } => format!("{} -> {target}", entry.path),
        })
        .collect()
}

fn notes(collected: &Collected, root: &Path) -> Vec<String> {
    collected
        .notes
        .iter()
        .map(|note| {
            note.to_string()
                .replace(&root.display().to_string(), "[BUILD_DIR]")
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[test]
fn a_directory_path_includes_everything_below_it_and_symlinks_stay_links() {
    let dir = build_dir();
    let spec_paths = strings(&["coverage/"]);
    let collected = collect(
        dir.path(),
        &CollectSpec {
            paths: &spec_paths,
            ..CollectSpec::default()
        },
    );
    assert_eq!(
        paths(&collected),
        [
            "coverage/",
            "coverage/cache/",
            "coverage/cache/blob.bin",
            "coverage/cache/deep/",
            "coverage/cache/deep/more.bin",
            "coverage/index.html",
            "coverage/latest.html -> index.html",
            "coverage/lcov.info",
        ]
    );
    assert_eq!(
        notes(&collected, dir.path()),
        ["coverage/: found 8 matching artifact files and directories"]
    );
    assert_eq!(collected.file_count(), 5);
    assert_eq!(collected.total_bytes(), 7 + 3 + 6 + 6);
}

#[test]
fn doublestar_globs_and_excludes_follow_gitlab_runner() {
    let dir = build_dir();
    let spec_paths = strings(&["reports/**/junit.xml", "coverage", "*.md", "bin/*"]);
    let exclude = strings(&["coverage/cache/**/*", "**/*.info"]);
    let collected = collect(
        dir.path(),
        &CollectSpec {
            paths: &spec_paths,
            exclude: &exclude,
            untracked: false,
            seen_dir: None,
        },
    );
    assert_eq!(
        paths(&collected),
        [
            "bin/tool",
            "coverage/",
            // The directory entry itself is not matched by `coverage/cache/**/*`.
            "coverage/cache/",
            "coverage/index.html",
            "coverage/latest.html -> index.html",
            "reports/a/junit.xml",
            "reports/b/c/junit.xml",
        ]
    );
    let tool = collected
        .entries
        .iter()
        .find(|entry| entry.path == "bin/tool")
        .expect("collected");
    assert_eq!(tool.mode & 0o777, 0o755);
    assert_eq!(
        notes(&collected, dir.path()),
        [
            "reports/**/junit.xml: found 2 matching artifact files and directories",
            "coverage: found 4 matching artifact files and directories",
            "WARNING: *.md: no matching files. Ensure that the artifact path is relative to the working directory ([BUILD_DIR])",
            "bin/*: found 1 matching artifact files and directories",
            "**/*.info: excluded 1 files",
            "coverage/cache/**/*: excluded 3 files",
        ]
    );
}

#[test]
fn paths_outside_the_build_dir_and_empty_paths_are_refused_with_warnings() {
    let dir = build_dir();
    let outside = tempfile::tempdir().expect("temp dir");
    write(outside.path(), "secret.txt", "secret");
    let absolute_inside = format!("{}/reports/readme.md", dir.path().display());
    let spec_paths = vec![
        "../secret.txt".to_owned(),
        outside.path().join("secret.txt").display().to_string(),
        String::new(),
        absolute_inside,
        "missing/".to_owned(),
    ];
    let collected = collect(
        dir.path(),
        &CollectSpec {
            paths: &spec_paths,
            ..CollectSpec::default()
        },
    );
    assert_eq!(paths(&collected), ["reports/readme.md"]);
    let notes = notes(&collected, dir.path());
    assert_eq!(
        notes[0],
        "WARNING: artifact path is not a subpath of project directory: ../secret.txt"
    );
    assert!(
        notes[1].starts_with("WARNING: artifact path is not a subpath of project directory: /")
    );
    assert_eq!(notes[2], "WARNING: No matching files. Path is empty.");
    assert!(
        notes[3].ends_with("reports/readme.md: found 1 matching artifact files and directories")
    );
    assert_eq!(
        notes[4],
        "WARNING: missing/: no matching files. Ensure that the artifact path is relative to the working directory ([BUILD_DIR])"
    );
}

#[test]
fn links_to_the_outside_are_stored_as_links_and_never_followed() {
    let dir = build_dir();
    let outside = tempfile::tempdir().expect("temp dir");
    write(outside.path(), "secret.txt", "secret");
    symlink(outside.path(), dir.path().join("escape")).expect("symlink");
    symlink(dir.path().join("reports"), dir.path().join("inside")).expect("symlink");

    let spec_paths = strings(&[
        "escape",
        "escape/*",
        "escape/secret.txt",
        "inside/a/*",
        "**/secret.txt",
    ]);
    let collected = collect(
        dir.path(),
        &CollectSpec {
            paths: &spec_paths,
            ..CollectSpec::default()
        },
    );
    assert_eq!(
        paths(&collected),
        [
            format!("escape -> {}", outside.path().display()),
            "inside/a/junit.xml".to_owned(),
        ]
    );
    let notes = notes(&collected, dir.path());
    assert!(
        notes.iter().any(|n| n.contains(
            "escape/*: not following symbolic link `escape` outside the build directory"
        )),
        "{notes:#?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("escape/secret.txt: not following symbolic link")),
        "{notes:#?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("WARNING: **/secret.txt: no matching files")),
        "{notes:#?}"
    );
}

use gantry_test_support::git;

#[test]
fn untracked_adds_files_git_does_not_track_including_ignored_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    git(root, &["init", "-q"]);
    write(root, "tracked.txt", "t");
    write(root, ".gitignore", "build/\n");
    git(root, &["add", "tracked.txt", ".gitignore"]);
    git(root, &["commit", "-q", "-m", "init"]);
    write(root, "new.txt", "n");
    write(root, "build/out.o", "o");
    write(root, "build/skip.log", "l");

    let exclude = strings(&["**/*.log"]);
    let collected = collect(
        root,
        &CollectSpec {
            paths: &[],
            exclude: &exclude,
            untracked: true,
            seen_dir: None,
        },
    );
    assert_eq!(paths(&collected), ["build/out.o", "new.txt"]);
    assert_eq!(
        notes(&collected, root),
        ["untracked: found 2 files", "**/*.log: excluded 1 files"]
    );

    let not_a_repo = tempfile::tempdir().expect("temp dir");
    let collected = collect(
        not_a_repo.path(),
        &CollectSpec {
            untracked: true,
            ..CollectSpec::default()
        },
    );
    assert!(collected.is_empty());
    assert!(collected.notes[0].is_warning());
    assert!(
        collected.notes[0].text().starts_with("untracked: "),
        "{:?}",
        collected.notes
    );
}
