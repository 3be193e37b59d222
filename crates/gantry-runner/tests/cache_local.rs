//! The local cache: save and restore through real directories — hit, miss, fallback
//! keys, `CACHE_FALLBACK_KEY`, policies (also from a variable), `when`, `untracked`,
//! atomic replacement, corrupt and hostile archives.

#![allow(clippy::panic)]

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use gantry_protocol::{Cache, When};
use gantry_runner::cache::{
    CacheContext, CacheError, CacheSpec, LocalCache, RestoreOutcome, SaveOutcome, SkipReason,
};

fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

struct Vars(HashMap<String, String>);

impl Vars {
    fn new(pairs: &[(&str, &str)]) -> Self {
        Self(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
        |name| self.0.get(name).cloned()
    }
}

fn spec(key: &str, paths: &[&str]) -> CacheSpec {
    CacheSpec {
        key: key.to_owned(),
        paths: paths.iter().map(|p| (*p).to_owned()).collect(),
        ..CacheSpec::default()
    }
}

fn notes(notes: &[gantry_runner::artifacts::Note]) -> Vec<String> {
    notes.iter().map(ToString::to_string).collect()
}

struct World {
    _root: tempfile::TempDir,
    cache: LocalCache,
    cache_dir: std::path::PathBuf,
    build: std::path::PathBuf,
}

fn world() -> World {
    let root = tempfile::tempdir().expect("temp dir");
    let cache_dir = root.path().join("cache");
    let build = root.path().join("build");
    fs::create_dir_all(&build).expect("mkdir");
    let cache = LocalCache::new(&cache_dir, "gitlab.example.com/acme/widget").expect("cache");
    World {
        cache,
        cache_dir,
        build,
        _root: root,
    }
}

impl World {
    /// A fresh build directory, as the next job would see it.
    fn next_job(&self) {
        fs::remove_dir_all(&self.build).expect("rm");
        fs::create_dir_all(&self.build).expect("mkdir");
    }
}

#[test]
fn save_then_restore_hits_and_documents_the_layout() {
    let w = world();
    write(&w.build, "vendor/bundle/gems/rake.rb", "puts :rake");
    write(&w.build, "vendor/bundle/bin/rake", "#!/bin/sh");
    symlink("gems/rake.rb", w.build.join("vendor/bundle/current")).expect("symlink");
    let vars = Vars::new(&[]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "rspec",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };
    let cache = spec("gems-main-1-protected", &["vendor/bundle"]);

    let report = w.cache.save(&cache, &cx, &w.build, true).expect("saves");
    let archive = w
        .cache_dir
        .join("gitlab.example.com/acme/widget/gems-main-1-protected/cache.tar.zst");
    assert_eq!(
        report.outcome,
        SaveOutcome::Saved {
            key: "gems-main-1-protected".to_owned(),
            path: archive.clone(),
            files: 3,
            content_bytes: 10 + 9,
            archive_bytes: fs::metadata(&archive).expect("archive exists").len(),
        }
    );
    assert_eq!(
        notes(&report.notes),
        [
            "Creating cache gems-main-1-protected...",
            "vendor/bundle: found 6 matching artifact files and directories",
            "Created cache",
        ]
    );
    // Only the archive in the key folder: the temporary file was renamed away.
    let names: Vec<_> = fs::read_dir(archive.parent().expect("key dir"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names, ["cache.tar.zst"]);

    w.next_job();
    let report = w.cache.restore(&cache, &cx, &w.build).expect("restores");
    let RestoreOutcome::Hit { key, summary } = &report.outcome else {
        panic!("expected a hit, got {:?}", report.outcome);
    };
    assert_eq!(key, "gems-main-1-protected");
    assert_eq!((summary.files, summary.symlinks), (2, 1));
    assert_eq!(
        notes(&report.notes),
        [
            "Checking cache for gems-main-1-protected...",
            "Successfully extracted cache"
        ]
    );
    assert_eq!(
        fs::read_to_string(w.build.join("vendor/bundle/gems/rake.rb")).expect("read"),
        "puts :rake"
    );
    assert_eq!(
        fs::read_link(w.build.join("vendor/bundle/current"))
            .expect("link")
            .to_str(),
        Some("gems/rake.rb")
    );
}

#[test]
fn a_miss_then_fallback_keys_in_order_then_cache_fallback_key() {
    let w = world();
    write(&w.build, "deps/a.txt", "from default");
    let vars = Vars::new(&[
        ("CACHE_FALLBACK_KEY", "global-$FLAVOUR"),
        ("FLAVOUR", "x"),
        ("BRANCH", "main"),
    ]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "feature",
        lookup: &lookup,
        seen_dir: None,
    };
    w.cache
        .save(&spec("deps-default", &["deps"]), &cx, &w.build, true)
        .expect("saves");
    w.cache
        .save(&spec("global-x", &["deps"]), &cx, &w.build, true)
        .expect("saves");

    w.next_job();
    let mut cache = spec("deps-feature", &["deps"]);
    cache.fallback_keys = vec!["deps-$BRANCH".to_owned(), "deps-default".to_owned()];
    let report = w.cache.restore(&cache, &cx, &w.build).expect("restores");
    assert!(
        matches!(&report.outcome, RestoreOutcome::FallbackHit { key, .. } if key == "deps-default"),
        "{:?}",
        report.outcome
    );
    assert_eq!(report.key.as_deref(), Some("deps-feature"));
    assert_eq!(
        notes(&report.notes),
        [
            "Checking cache for deps-feature...",
            "WARNING: Cache not found for deps-feature",
            "Checking cache for deps-main...",
            "WARNING: Cache not found for deps-main",
            "Checking cache for deps-default...",
            "Successfully extracted cache",
        ]
    );
    assert_eq!(
        fs::read_to_string(w.build.join("deps/a.txt")).expect("read"),
        "from default"
    );

    // Without matching fallback keys, CACHE_FALLBACK_KEY (expanded) is tried last.
    w.next_job();
    let report = w
        .cache
        .restore(&spec("deps-feature", &["deps"]), &cx, &w.build)
        .expect("restores");
    assert!(
        matches!(&report.outcome, RestoreOutcome::FallbackHit { key, .. } if key == "global-x"),
        "{:?}",
        report.outcome
    );

    // A miss everywhere.
    let nothing = Vars::new(&[]);
    let lookup = nothing.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "feature",
        lookup: &lookup,
        seen_dir: None,
    };
    let report = w
        .cache
        .restore(&spec("other", &["deps"]), &cx, &w.build)
        .expect("restores");
    assert_eq!(report.outcome, RestoreOutcome::Miss);
    assert_eq!(
        notes(&report.notes),
        [
            "Checking cache for other...",
            "WARNING: Cache not found for other"
        ]
    );
}

#[test]
fn cache_fallback_key_may_not_use_the_protected_suffix() {
    let w = world();
    write(&w.build, "deps/a.txt", "protected content");
    let vars = Vars::new(&[("CACHE_FALLBACK_KEY", "main-protected")]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };
    w.cache
        .save(&spec("main-protected", &["deps"]), &cx, &w.build, true)
        .expect("saves");
    w.next_job();
    let report = w
        .cache
        .restore(&spec("mr-non_protected", &["deps"]), &cx, &w.build)
        .expect("restores");
    assert_eq!(report.outcome, RestoreOutcome::Miss);
    assert_eq!(
        notes(&report.notes),
        [
            "WARNING: CACHE_FALLBACK_KEY \"main-protected\" not allowed to end in \"-protected\"",
            "Checking cache for mr-non_protected...",
            "WARNING: Cache not found for mr-non_protected",
        ]
    );
}

#[test]
fn policies_including_one_from_a_variable() {
    let w = world();
    write(&w.build, "deps/a.txt", "a");
    let vars = Vars::new(&[("CACHE_POLICY", "pull"), ("BAD", "pull-only")]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };

    let mut pull = spec("k", &["deps"]);
    pull.policy = "$CACHE_POLICY".to_owned();
    let report = w.cache.save(&pull, &cx, &w.build, true).expect("no error");
    assert_eq!(report.outcome, SaveOutcome::Skipped(SkipReason::Policy));
    assert_eq!(
        notes(&report.notes),
        ["Not uploading cache k due to policy"]
    );
    assert!(!w.cache.archive_path("k").exists());

    let mut push = spec("k", &["deps"]);
    push.policy = "push".to_owned();
    assert!(matches!(
        w.cache
            .save(&push, &cx, &w.build, true)
            .expect("saves")
            .outcome,
        SaveOutcome::Saved { .. }
    ));
    let report = w.cache.restore(&push, &cx, &w.build).expect("no error");
    assert_eq!(report.outcome, RestoreOutcome::Skipped(SkipReason::Policy));
    assert_eq!(
        notes(&report.notes),
        ["Not downloading cache k due to policy"]
    );
    assert_eq!(
        w.cache
            .restore(&pull, &cx, &w.build)
            .expect("restores")
            .outcome,
        RestoreOutcome::Hit {
            key: "k".to_owned(),
            summary: gantry_runner::artifacts::ExtractSummary {
                files: 1,
                dirs: 1,
                symlinks: 0,
                bytes: 1,
                notes: Vec::new(),
            }
        }
    );

    let mut bad = spec("k", &["deps"]);
    bad.policy = "$BAD".to_owned();
    let error = w
        .cache
        .restore(&bad, &cx, &w.build)
        .expect_err("unknown policy");
    assert!(matches!(error, CacheError::UnknownPolicy { .. }));
    assert_eq!(
        error.to_string(),
        "use cache k: unknown cache policy \"pull-only\" (expected pull, push or pull-push)"
    );
}

#[test]
fn when_decides_saving_for_the_job_result() {
    let w = world();
    write(&w.build, "deps/a.txt", "a");
    let vars = Vars::new(&[]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };
    for (when, succeeded, saved) in [
        (When::OnSuccess, true, true),
        (When::OnSuccess, false, false),
        (When::OnFailure, true, false),
        (When::OnFailure, false, true),
        (When::Always, true, true),
        (When::Always, false, true),
    ] {
        let mut cache = spec(&format!("{when}-{succeeded}"), &["deps"]);
        cache.when = when;
        let report = w
            .cache
            .save(&cache, &cx, &w.build, succeeded)
            .expect("no error");
        assert_eq!(
            matches!(report.outcome, SaveOutcome::Saved { .. }),
            saved,
            "{when} {succeeded}: {:?}",
            report.outcome
        );
        if !saved {
            assert_eq!(report.outcome, SaveOutcome::Skipped(SkipReason::When));
        }
    }
}

#[test]
fn default_key_untracked_and_nothing_to_cache() {
    let w = world();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(&w.build)
            .status()
            .expect("git");
        assert!(status.success());
    };
    git(&["init", "-q"]);
    write(&w.build, "node_modules/x/index.js", "x");
    let vars = Vars::new(&[]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "rspec 1/2",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };

    let mut untracked = spec("", &[]);
    untracked.untracked = true;
    let report = w
        .cache
        .save(&untracked, &cx, &w.build, true)
        .expect("saves");
    assert_eq!(report.key.as_deref(), Some("rspec 1/2/main"));
    assert!(
        w.cache_dir
            .join("gitlab.example.com/acme/widget/rspec 1/2/main/cache.tar.zst")
            .is_file()
    );
    assert!(notes(&report.notes).contains(&"untracked: found 1 files".to_owned()));

    // No paths, no untracked: nothing to do at all.
    let none = spec("k", &[]);
    assert_eq!(
        w.cache.restore(&none, &cx, &w.build).expect("ok").outcome,
        RestoreOutcome::Skipped(SkipReason::NothingToCache)
    );
    assert_eq!(
        w.cache
            .save(&none, &cx, &w.build, true)
            .expect("ok")
            .outcome,
        SaveOutcome::Skipped(SkipReason::NothingToCache)
    );

    // Paths that match nothing keep the previous archive.
    let before = fs::read(w.cache.archive_path("rspec 1/2/main")).expect("archive");
    let mut gone = spec("", &["missing/"]);
    gone.untracked = false;
    let report = w.cache.save(&gone, &cx, &w.build, true).expect("ok");
    assert_eq!(report.outcome, SaveOutcome::Skipped(SkipReason::NoFiles));
    assert_eq!(
        fs::read(w.cache.archive_path("rspec 1/2/main")).expect("archive"),
        before
    );
}

#[test]
fn keys_are_sanitized_and_unusable_keys_skip() {
    let w = world();
    write(&w.build, "deps/a.txt", "a");
    let vars = Vars::new(&[("EVIL", "../../../../etc")]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };
    let report = w
        .cache
        .save(&spec("$EVIL", &["deps"]), &cx, &w.build, true)
        .expect("saves");
    assert_eq!(report.key.as_deref(), Some("etc"));
    assert_eq!(
        report.notes[0].to_string(),
        "WARNING: cache key \"../../../../etc\" sanitized to \"etc\""
    );
    assert!(w.cache.archive_path("etc").starts_with(w.cache.dir()));
    assert!(w.cache.archive_path("etc").is_file());

    let report = w
        .cache
        .restore(&spec("%2e%2E", &["deps"]), &cx, &w.build)
        .expect("no error");
    assert_eq!(
        report.outcome,
        RestoreOutcome::Skipped(SkipReason::InvalidKey)
    );
    assert_eq!(
        notes(&report.notes),
        [
            "Skipping cache extraction due to: failed to sanitize cache key \"%2e%2E\": nothing usable is left"
        ]
    );
    assert!(LocalCache::new(&w.cache_dir, "../other").is_err());
}

#[test]
fn a_corrupt_archive_is_a_warning_and_the_next_key_is_tried() {
    let w = world();
    write(&w.build, "deps/a.txt", "good");
    let vars = Vars::new(&[]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };
    w.cache
        .save(&spec("good", &["deps"]), &cx, &w.build, true)
        .expect("saves");
    let corrupt = w.cache.archive_path("corrupt");
    fs::create_dir_all(corrupt.parent().expect("dir")).expect("mkdir");
    fs::write(&corrupt, b"\x28\xb5\x2f\xfd garbage that is not zstd").expect("write");

    w.next_job();
    let mut cache = spec("corrupt", &["deps"]);
    cache.fallback_keys = vec!["good".to_owned()];
    let report = w.cache.restore(&cache, &cx, &w.build).expect("no error");
    assert!(matches!(&report.outcome, RestoreOutcome::FallbackHit { key, .. } if key == "good"));
    let lines = notes(&report.notes);
    assert!(
        lines[1].starts_with("WARNING: Failed to extract cache: failed to read archive "),
        "{lines:#?}"
    );
    assert_eq!(
        fs::read_to_string(w.build.join("deps/a.txt")).expect("read"),
        "good"
    );
}

#[test]
fn a_hostile_cache_archive_cannot_write_outside_the_build_dir() {
    let w = world();
    let vars = Vars::new(&[]);
    let lookup = vars.lookup();
    let cx = CacheContext {
        job_name: "build",
        git_ref: "main",
        lookup: &lookup,
        seen_dir: None,
    };
    let archive = w.cache.archive_path("hostile");
    fs::create_dir_all(archive.parent().expect("dir")).expect("mkdir");
    let encoder = zstd::stream::write::Encoder::new(File::create(&archive).expect("create"), 1)
        .expect("zstd");
    let mut tar = tar::Builder::new(encoder);
    let mut link = tar::Header::new_gnu();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_size(0);
    tar.append_link(&mut link, "deps", "../..").expect("link");
    tar.into_inner().expect("tar").finish().expect("zstd");

    let report = w
        .cache
        .restore(&spec("hostile", &["deps"]), &cx, &w.build)
        .expect("no error");
    assert_eq!(report.outcome, RestoreOutcome::Miss);
    assert_eq!(
        report.notes[1].to_string(),
        "WARNING: Failed to extract cache: failed to extract `deps`: the symbolic link points outside the build directory (`../..`)"
    );
    assert!(fs::symlink_metadata(w.build.join("deps")).is_err());
}

#[test]
fn payload_entries_convert_with_their_policy_text() {
    let cache: Cache = serde_json::from_str(
        r#"{"key": "gems-main-1-protected", "untracked": false, "paths": ["vendor/bundle"],
            "policy": "pull", "when": "on_failure", "fallback_keys": ["gems-default-1-protected"]}"#,
    )
    .expect("payload cache");
    let spec = CacheSpec::from(&cache);
    assert_eq!(spec.policy, "pull");
    assert_eq!(spec.when, When::OnFailure);
    assert_eq!(spec.fallback_keys, ["gems-default-1-protected"]);
}
