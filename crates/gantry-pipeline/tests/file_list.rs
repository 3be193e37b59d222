//! The project's file list (`Loader::files`), read for `rules:exists` and `include:local`
//! wildcards: when it cannot be had (git failed), what needs it is an error naming the
//! reason, never a quiet "no such file" over an empty project.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use gantry_pipeline::{
    Compiled, Context, Loader, MemoryLoader, Options, PipelineInfo, ReadError, compile,
};

/// Files that read, but whose list cannot be had.
struct Unlisted(MemoryLoader);

impl Loader for Unlisted {
    fn read(&self, path: &str) -> Result<Option<String>, ReadError> {
        self.0.read(path)
    }
    fn files(&self) -> Result<Vec<String>, ReadError> {
        Err(ReadError::Io(
            "git ls-tree: fatal: not a tree object".into(),
        ))
    }
}

fn run(config: &str) -> Compiled {
    let loader = Unlisted(
        MemoryLoader::new()
            .with(".gitlab-ci.yml", config)
            .with("ci/a.yml", "a:\n  script: echo a\n"),
    );
    let info = PipelineInfo::default();
    let ctx = Context::new(&info, &[], None);
    compile(&Options::default(), &ctx, &loader)
}

fn errors(c: &Compiled) -> Vec<String> {
    c.errors.iter().map(|e| e.message.clone()).collect()
}

#[test]
fn rules_exists_over_an_unlisted_project_is_an_error_naming_why() {
    let c = run("build:\n  script: make\n  rules:\n    - exists: [Makefile]\n");
    let errors = errors(&c);
    assert!(
        errors.iter().any(
            |e| e.contains("rules:exists: the project's files could not be listed")
                && e.contains("not a tree object")
        ),
        "{errors:?}"
    );
}

#[test]
fn a_wildcard_include_over_an_unlisted_project_is_an_error_naming_why() {
    let c = run("include: 'ci/*.yml'\nbuild:\n  script: make\n");
    let errors = errors(&c);
    assert!(
        errors.iter().any(|e| e.contains("Included file `ci/*.yml`")
            && e.contains("could not be listed")
            && e.contains("not a tree object")),
        "{errors:?}"
    );
}

#[test]
fn a_listed_project_is_read_as_before() {
    let loader = MemoryLoader::new()
        .with(
            ".gitlab-ci.yml",
            "include: 'ci/*.yml'\nbuild:\n  script: make\n  rules:\n    - exists: [ci/a.yml]\n",
        )
        .with("ci/a.yml", "a:\n  script: echo a\n");
    let info = PipelineInfo::default();
    let ctx = Context::new(&info, &[], None);
    let c = compile(&Options::default(), &ctx, &loader);
    assert!(c.errors.is_empty(), "{:?}", errors(&c));
    let names: Vec<_> = c
        .pipeline
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.name.clone())
        .collect();
    assert_eq!(names, ["a", "build"]);
}
