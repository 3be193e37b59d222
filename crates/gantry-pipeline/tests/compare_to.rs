//! `rules:changes:compare_to`: the changed paths come from the loader
//! (`Loader::changed_since`, a `git diff` from the merge base in the server and in
//! `gantry run`), once per ref; an unknown ref is GitLab's error in the place GitLab
//! reports it (a job, `include:rules`), and filters the pipeline out in `workflow:rules`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::BTreeMap;

use gantry_pipeline::{
    CompareError, Compiled, Context, Loader, MemoryLoader, Options, PipelineInfo, compile,
};

/// Files in memory, and the paths changed since each known ref.
struct Repo {
    files: MemoryLoader,
    changed: BTreeMap<&'static str, Vec<&'static str>>,
    asked: RefCell<Vec<String>>,
    compares: bool,
}

impl Loader for Repo {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        self.files.read(path)
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        self.files.files()
    }
    fn changed_since(&self, compare_to: &str) -> Result<Vec<String>, CompareError> {
        if !self.compares {
            return Err(CompareError::Unsupported);
        }
        self.asked.borrow_mut().push(compare_to.to_owned());
        self.changed
            .get(compare_to)
            .map(|paths| paths.iter().map(|p| (*p).to_owned()).collect())
            .ok_or(CompareError::InvalidRef)
    }
}

fn repo(config: &str) -> Repo {
    Repo {
        files: MemoryLoader::new()
            .with(".gitlab-ci.yml", config)
            .with("docs.yml", "docs-extra:\n  script: echo docs\n"),
        changed: BTreeMap::from([
            ("main", vec!["src/lib.rs", "README.md"]),
            ("refs/heads/release", vec!["docs/index.md"]),
        ]),
        asked: RefCell::default(),
        compares: true,
    }
}

fn run(loader: &Repo, changed_files: Option<Vec<String>>) -> Compiled {
    let info = PipelineInfo {
        ref_name: "feature".into(),
        ..PipelineInfo::default()
    };
    let vars = [("BASE".to_owned(), "main".to_owned())];
    let ctx = Context::new(&info, &vars, changed_files);
    compile(&Options::default(), &ctx, loader)
}

fn job_names(c: &Compiled) -> Vec<String> {
    let p = c.pipeline.as_ref().expect("a valid configuration");
    p.jobs.iter().map(|j| j.name.clone()).collect()
}

fn errors(c: &Compiled) -> Vec<String> {
    c.errors.iter().map(|e| e.message.clone()).collect()
}

const JOBS: &str = "
code:
  script: echo code
  rules:
    - changes:
        paths: ['src/**/*']
        compare_to: $BASE
docs:
  script: echo docs
  rules:
    - changes:
        paths: ['docs/**/*']
        compare_to: main
docs-since-release:
  script: echo docs
  rules:
    - changes:
        paths: ['docs/**/*']
        compare_to: refs/heads/release
plain:
  script: echo plain
  rules:
    - changes: ['docs/**/*']
";

#[test]
fn jobs_match_the_paths_changed_since_the_ref() {
    let loader = repo(JOBS);
    let c = run(&loader, Some(vec!["docs/a.md".to_owned()]));
    assert_eq!(errors(&c), Vec::<String>::new());
    // `code`: src/ changed since main ($BASE expanded); `docs`: nothing under docs/ since
    // main, although the pipeline's own changed files have one; `plain` reads those.
    assert_eq!(job_names(&c), ["code", "docs-since-release", "plain"]);
    // Each ref is compared once, however many rules name it.
    assert_eq!(*loader.asked.borrow(), ["main", "refs/heads/release"]);
}

#[test]
fn a_loader_that_cannot_compare_falls_back_to_the_pipelines_changes() {
    let mut loader = repo(JOBS);
    loader.compares = false;
    let c = run(&loader, None);
    assert_eq!(
        job_names(&c),
        ["code", "docs", "docs-since-release", "plain"]
    );
    let c = run(&loader, Some(vec!["src/main.rs".to_owned()]));
    assert_eq!(job_names(&c), ["code"]);
}

#[test]
fn an_unknown_ref_is_gitlabs_error_for_the_job() {
    let loader = repo(
        "
build:
  script: echo
  rules:
    - if: $BASE
      changes:
        paths: [README.md]
        compare_to: no-such-branch
other:
  script: echo
",
    );
    let c = run(&loader, None);
    assert_eq!(
        errors(&c),
        ["Failed to parse rule for build: rules:changes:compare_to is not a valid ref"]
    );
    let pos = c.errors[0].pos.expect("a position");
    let at = c.sources.location(pos).expect("a location");
    assert_eq!((at.file.as_str(), at.line), (".gitlab-ci.yml", 3));
}

#[test]
fn an_unknown_ref_in_workflow_rules_filters_the_pipeline_out() {
    let loader = repo(
        "
workflow:
  rules:
    - changes:
        paths: [README.md]
        compare_to: no-such-branch
build:
  script: echo
",
    );
    let c = run(&loader, None);
    assert_eq!(errors(&c), Vec::<String>::new());
    let p = c.pipeline.expect("a valid configuration");
    assert!(!p.created);
    assert_eq!(
        p.not_created_reason.as_deref(),
        Some("Pipeline filtered out by workflow rules.")
    );
}

#[test]
fn include_rules_compare_too() {
    let loader = repo(
        "
include:
  - local: docs.yml
    rules:
      - changes:
          paths: ['docs/**']
          compare_to: refs/heads/release
build:
  script: echo
",
    );
    let c = run(&loader, None);
    assert_eq!(job_names(&c), ["docs-extra", "build"]);

    let loader = repo(
        "
include:
  - local: docs.yml
    rules:
      - changes:
          paths: ['docs/**']
          compare_to: gone
build:
  script: echo
",
    );
    let c = run(&loader, None);
    assert_eq!(
        errors(&c),
        ["include:rules:changes:compare_to is not a valid ref"]
    );
}
