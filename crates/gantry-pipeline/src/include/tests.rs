//! `include:remote` and `include:project` through a test [`Loader`] that holds remote
//! files and other projects in memory.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use super::*;
use crate::loader::*;
use crate::{Compiled, Options, PipelineInfo, compile};

/// The pipeline's files, remote URLs (body or error), and other projects' files by
/// `(project, ref)`; `None` as a ref is the default branch.
#[derive(Default)]
struct TestLoader {
    files: BTreeMap<String, String>,
    remote: BTreeMap<String, Result<String, RemoteError>>,
    projects: BTreeMap<(String, Option<String>), BTreeMap<String, String>>,
}

impl TestLoader {
    fn new(root: &str) -> Self {
        let mut l = TestLoader::default();
        l.files.insert(".gitlab-ci.yml".into(), root.into());
        l
    }
    fn remote(mut self, url: &str, body: Result<&str, RemoteError>) -> Self {
        self.remote.insert(url.into(), body.map(str::to_owned));
        self
    }
    fn file(mut self, path: &str, text: &str) -> Self {
        self.files.insert(path.into(), text.into());
        self
    }
    fn project(mut self, project: &str, ref_name: Option<&str>, files: &[(&str, &str)]) -> Self {
        let files = files
            .iter()
            .map(|(p, t)| ((*p).to_owned(), (*t).to_owned()))
            .collect();
        self.projects
            .insert((project.into(), ref_name.map(str::to_owned)), files);
        self
    }
}

impl Loader for TestLoader {
    fn read(&self, path: &str) -> Result<Option<String>, crate::ReadError> {
        Ok(self.files.get(path).cloned())
    }
    fn files(&self) -> std::result::Result<Vec<String>, crate::loader::ReadError> {
        Ok(self.files.keys().cloned().collect())
    }
    fn remote(&self, url: &str) -> Result<String, RemoteError> {
        self.remote
            .get(url)
            .cloned()
            .unwrap_or(Err(RemoteError::Status(404)))
    }
    fn reads_projects(&self) -> bool {
        true
    }
    fn project_file(
        &self,
        project: &str,
        ref_name: Option<&str>,
        path: &str,
    ) -> Result<Option<String>, ProjectError> {
        if !self.projects.keys().any(|(p, _)| p == project) {
            return Err(ProjectError::NotFound);
        }
        let files = self
            .projects
            .get(&(project.to_owned(), ref_name.map(str::to_owned)))
            .ok_or(ProjectError::NoRef)?;
        Ok(files.get(path).cloned())
    }
    fn project_commit(&self, project: &str, ref_name: Option<&str>) -> Option<String> {
        self.projects
            .contains_key(&(project.to_owned(), ref_name.map(str::to_owned)))
            .then(|| format!("sha-of-{project}@{}", ref_name.unwrap_or("HEAD")))
    }
    fn template_url(&self, name: &str) -> Option<String> {
        Some(format!("https://templates.test/{name}"))
    }
    fn project_files(
        &self,
        project: &str,
        ref_name: Option<&str>,
    ) -> Result<Vec<String>, crate::loader::ReadError> {
        Ok(self
            .projects
            .get(&(project.to_owned(), ref_name.map(str::to_owned)))
            .map(|f| f.keys().cloned().collect())
            .unwrap_or_default())
    }
}

fn run(loader: &dyn Loader) -> Compiled {
    let info = PipelineInfo {
        ref_name: "main".into(),
        default_branch: "main".into(),
        ..PipelineInfo::default()
    };
    let ctx = Context::new(
        &info,
        &[("HOST".to_owned(), "example.com".to_owned())],
        None,
    );
    compile(&Options::default(), &ctx, loader)
}

fn jobs(loader: &dyn Loader) -> Vec<String> {
    let c = run(loader);
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    c.pipeline
        .unwrap()
        .jobs
        .iter()
        .map(|j| j.name.clone())
        .collect()
}

fn scripts(loader: &dyn Loader, job: &str) -> Vec<String> {
    let c = run(loader);
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    c.pipeline
        .unwrap()
        .jobs
        .iter()
        .find(|j| j.name == job)
        .unwrap()
        .script
        .clone()
}

fn errors(loader: &dyn Loader) -> Vec<String> {
    run(loader).errors.into_iter().map(|d| d.message).collect()
}

const JOB: &str = "job:\n  script: echo\n";

#[test]
fn remote_includes_in_both_forms_are_merged() {
    let l = TestLoader::new("include:\n  - remote: https://$HOST/a.yml\n  - https://example.com/b.yml\nown:\n  script: x\n")
        .remote("https://example.com/a.yml", Ok("a:\n  script: a\n"))
        .remote("https://example.com/b.yml", Ok("b:\n  script: b\n"));
    assert_eq!(jobs(&l), ["a", "b", "own"]);
}

#[test]
fn remote_failures_have_gitlab_messages() {
    let cases = [
        (
            RemoteError::Status(404),
            "Remote file `https://h/a.yml` could not be fetched because of HTTP code `404` error!",
        ),
        (
            RemoteError::Timeout,
            "Remote file `https://h/a.yml` could not be fetched because of a timeout error!",
        ),
        (
            RemoteError::Socket("connection refused".into()),
            "Remote file `https://h/a.yml` could not be fetched because of a socket error! (connection refused)",
        ),
        (
            RemoteError::TooLarge(2 * 1024 * 1024),
            "Remote file `https://h/a.yml` could not be fetched because it is larger than 2 MiB!",
        ),
    ];
    for (e, msg) in cases {
        let l = TestLoader::new(&format!("include:\n  - remote: https://h/a.yml\n{JOB}"))
            .remote("https://h/a.yml", Err(e));
        assert_eq!(errors(&l), [msg]);
    }
}

#[test]
fn remote_address_extension_and_content_are_checked() {
    let l = TestLoader::new(&format!("include:\n  - remote: ftp://h/a.yml\n{JOB}"));
    assert_eq!(
        errors(&l),
        ["Remote file `ftp://h/a.yml` does not have a valid address!"]
    );
    let l = TestLoader::new(&format!("include:\n  - remote: https://h/a.txt\n{JOB}"));
    assert_eq!(
        errors(&l),
        ["Included file `https://h/a.txt` does not have YAML extension!"]
    );
    let l = TestLoader::new(&format!("include:\n  - remote: https://h/a.yml\n{JOB}"))
        .remote("https://h/a.yml", Ok("  \n"));
    assert_eq!(
        errors(&l),
        ["Included file `https://h/a.yml` is empty or does not exist!"]
    );
}

#[test]
fn a_loader_without_network_says_so() {
    let l = MemoryLoader::new().with(".gitlab-ci.yml", format!("include: https://h/a.yml\n{JOB}"));
    let e = errors(&l);
    assert!(
        e[0].starts_with("Remote file `https://h/a.yml` cannot be resolved offline"),
        "{e:?}"
    );
}

#[test]
fn include_artifact_is_only_for_child_pipelines_and_says_why_a_file_is_missing() {
    let l = MemoryLoader::new().with(
        ".gitlab-ci.yml",
        format!("include:\n  - artifact: gen.yml\n    job: build\n{JOB}"),
    );
    assert_eq!(
        errors(&l),
        ["Including configs from artifacts is only allowed when triggering child pipelines"]
    );
    for (e, want) in [
        (
            ArtifactError::NoJob,
            "Job `build` not found in parent pipeline or does not have artifacts!",
        ),
        (
            ArtifactError::NoFile,
            "Path `gen.yml` does not exist inside the `build` artifacts archive!",
        ),
        (
            ArtifactError::TooLarge(5 * 1024 * 1024),
            "Artifacts archive for job `build` is too large: max 5 MB",
        ),
    ] {
        assert_eq!(e.message("build", "gen.yml"), want);
    }
    let l = MemoryLoader::new().with(
        ".gitlab-ci.yml",
        format!("include:\n  - artifact: gen.txt\n    job: build\n{JOB}"),
    );
    assert_eq!(
        errors(&l),
        ["Included file `gen.txt` does not have YAML extension!"]
    );
}

#[test]
fn local_include_inside_a_remote_file_has_no_project() {
    let l = TestLoader::new(&format!("include: https://h/a.yml\n{JOB}")).remote(
        "https://h/a.yml",
        Ok("include: /ci/b.yml\na:\n  script: a\n"),
    );
    assert_eq!(errors(&l), ["Local file `ci/b.yml` does not have project!"]);
}

#[test]
fn remote_and_project_includes_nest_inside_a_remote_file() {
    let l = TestLoader::new(&format!("include: https://h/a.yml\n{JOB}"))
        .remote(
            "https://h/a.yml",
            Ok("include:\n  - https://h/b.yml\n  - {project: g/p, file: c.yml}\na:\n  script: a\n"),
        )
        .remote("https://h/b.yml", Ok("b:\n  script: b\n"))
        .project("g/p", None, &[("c.yml", "c:\n  script: c\n")]);
    assert_eq!(jobs(&l), ["b", "c", "a", "job"]);
}

#[test]
fn integrity_is_checked() {
    let body = "a:\n  script: a\n";
    let good = sha256_base64(body.as_bytes());
    let l = TestLoader::new(&format!(
        "include:\n  - remote: https://h/a.yml\n    integrity: sha256-{good}\n{JOB}"
    ))
    .remote("https://h/a.yml", Ok(body));
    assert_eq!(jobs(&l), ["a", "job"]);
    let l = TestLoader::new(&format!(
        "include:\n  - remote: https://h/a.yml\n    integrity: sha256-{good}\n{JOB}"
    ))
    .remote("https://h/a.yml", Ok("a:\n  script: tampered\n"));
    assert_eq!(
        errors(&l),
        ["Remote file `https://h/a.yml` failed integrity check"]
    );
    let l = TestLoader::new(&format!(
        "include:\n  - remote: https://h/a.yml\n    integrity: md5-abc\n{JOB}"
    ));
    assert_eq!(
        errors(&l),
        ["include:0 config integrity hash must start with 'sha256-'"]
    );
    // GitLab's `BaseInclude`: any strict base64 after the prefix is a hash (this one
    // then fails the check); a local include has none.
    let l = TestLoader::new(&format!(
        "include:\n  - remote: https://h/a.yml\n    integrity: sha256-abc123def456\n{JOB}"
    ))
    .remote("https://h/a.yml", Ok(body));
    assert_eq!(
        errors(&l),
        ["Remote file `https://h/a.yml` failed integrity check"]
    );
    let l = TestLoader::new(&format!(
        "include:\n  - local: a.yml\n    integrity: sha256-not!valid@base64\n{JOB}"
    ));
    assert_eq!(
        errors(&l),
        [
            "include:0 config integrity can only be specified for remote includes",
            "include:0 config integrity hash must be base64 encoded"
        ]
    );
}

#[test]
fn remote_cache_is_a_boolean_or_a_duration_of_a_minute_or_more() {
    let body = "a:\n  script: a\n";
    for ok in ["true", "'1 day'", "1 minute", "false", "null", "''"] {
        let l = TestLoader::new(&format!(
            "include:\n  - remote: https://h/a.yml\n    cache: {ok}\n{JOB}"
        ))
        .remote("https://h/a.yml", Ok(body));
        assert_eq!(jobs(&l), ["a", "job"], "cache: {ok}");
    }
    for (bad, message) in [
        (
            "123",
            "include:0 config cache must be a boolean or a duration string",
        ),
        (
            "invalid",
            "include:0 config cache contains an invalid duration",
        ),
        (
            "30 seconds",
            "include:0 config cache duration must be at least 1 minute",
        ),
    ] {
        let l = TestLoader::new(&format!(
            "include:\n  - remote: https://h/a.yml\n    cache: {bad}\n{JOB}"
        ))
        .remote("https://h/a.yml", Ok(body));
        assert_eq!(errors(&l), [message], "cache: {bad}");
    }
}

#[test]
fn spec_include_adds_the_inputs_of_its_files() {
    let root = "spec:\n  include:\n    - local: inputs.yml\n  inputs:\n    b:\n      default: two\n---\njob:\n  script: echo $[[ inputs.a ]] $[[ inputs.b ]]\n";
    let l = TestLoader::new(root).file("inputs.yml", "inputs:\n  a:\n    default: one\n");
    assert_eq!(scripts(&l, "job"), ["echo one two"]);
    // A name declared in the file and inline.
    let l = TestLoader::new(root).file("inputs.yml", "inputs:\n  b:\n    default: one\n");
    assert_eq!(
        errors(&l),
        [
            "Duplicate input keys found: b. Input keys must be unique across all included files and inline specifications."
        ]
    );
    // A file with more than inputs.
    let l = TestLoader::new(root).file(
        "inputs.yml",
        "inputs:\n  a:\n    default: one\nx:\n  script: y\n",
    );
    assert_eq!(
        errors(&l),
        ["Header include file `inputs.yml` contains unknown keys: [:x]"]
    );
    // A missing file is the include's usual error.
    let l = TestLoader::new(root);
    assert_eq!(errors(&l).len(), 1);
}

#[test]
fn sha256_base64_matches_known_digests() {
    // `printf '' | openssl dgst -sha256 -binary | base64`
    assert_eq!(
        sha256_base64(b""),
        "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    );
    assert_eq!(
        sha256_base64(b"abc"),
        "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0="
    );
}

#[test]
fn project_files_and_their_local_includes_come_from_that_project() {
    let l = TestLoader::new(
        "include:\n  - project: g/p\n    ref: v1\n    file: [/a.yml, b.yml]\nown:\n  script: x\n",
    )
    .project(
        "g/p",
        Some("v1"),
        &[
            ("a.yml", "include: /ci/inner.yml\na:\n  script: a\n"),
            ("b.yml", "include:\n  - local: ci/*.yml\nb:\n  script: b\n"),
            ("ci/inner.yml", "inner:\n  script: i\n"),
        ],
    )
    // The pipeline's own project has a file of the same name: it is not the one used.
    .project("g/p", None, &[]);
    let mut l = l;
    l.files
        .insert("ci/inner.yml".into(), "wrong:\n  script: w\n".into());
    assert_eq!(jobs(&l), ["inner", "a", "b", "own"]);
}

#[test]
fn project_failures_have_gitlab_messages() {
    let base =
        |file: &str| format!("include:\n  - project: G/P\n    ref: v1\n    file: {file}\n{JOB}");
    let l = TestLoader::new(&base("a.yml"));
    assert_eq!(
        errors(&l),
        [
            "Project `g/p` not found or access denied! Make sure any includes in the pipeline configuration are correctly defined."
        ]
    );
    let l = TestLoader::new(&base("a.yml")).project("G/P", Some("main"), &[]);
    assert_eq!(errors(&l), ["Project `g/p` reference `v1` does not exist!"]);
    let l = TestLoader::new(&base("a.yml")).project("G/P", Some("v1"), &[]);
    assert_eq!(errors(&l), ["Project `g/p` file `a.yml` does not exist!"]);
    let l = TestLoader::new(&base("a.yml")).project("G/P", Some("v1"), &[("a.yml", "  \n")]);
    assert_eq!(errors(&l), ["Project `g/p` file `a.yml` is empty!"]);
    let l = TestLoader::new(&base("/x/a.yml")).project(
        "G/P",
        Some("v1"),
        &[("x/a.yml", "a:\n  script: [x\n")],
    );
    let e = errors(&l);
    assert_eq!(
        e,
        [
            "`x/a.yml`: (<unknown>): did not find expected ',' or ']' while parsing a flow \
          sequence at line 2 column 11"
        ]
    );
}

#[test]
fn a_loader_without_other_projects_says_so() {
    let l = MemoryLoader::new().with(
        ".gitlab-ci.yml",
        format!("include:\n  - project: g/p\n    file: a.yml\n{JOB}"),
    );
    let e = errors(&l);
    assert!(
        e[0].starts_with("Project `g/p` file `a.yml` cannot be resolved offline"),
        "{e:?}"
    );
}

#[test]
fn templates_are_read_through_the_loader_and_have_no_project() {
    let l =
        TestLoader::new("include:\n  - template: Jobs/Build.gitlab-ci.yml\nown:\n  script: x\n")
            .remote(
                "https://templates.test/Jobs/Build.gitlab-ci.yml",
                Ok("include:\n  - template: Jobs/Deps.gitlab-ci.yml\nbuild:\n  script: make\n"),
            )
            .remote(
                "https://templates.test/Jobs/Deps.gitlab-ci.yml",
                Ok("deps:\n  script: fetch\n"),
            );
    assert_eq!(jobs(&l), ["deps", "build", "own"]);
    // Like a remote file, a template has no project for include:local.
    let local = TestLoader::new("include:\n  - template: Local.gitlab-ci.yml\n").remote(
        "https://templates.test/Local.gitlab-ci.yml",
        Ok("include: /ci/x.yml\nx:\n  script: x\n"),
    );
    assert_eq!(
        errors(&local),
        ["Local file `ci/x.yml` does not have project!"]
    );
}

#[test]
fn template_names_and_missing_templates_have_gitlab_messages() {
    let missing = TestLoader::new("include:\n  template: Nope.gitlab-ci.yml\n");
    assert_eq!(
        errors(&missing),
        ["Included file `Nope.gitlab-ci.yml` is empty or does not exist!"]
    );
    let not_a_template = TestLoader::new("include:\n  template: Nope.yml\n");
    assert_eq!(
        errors(&not_a_template),
        ["Template file `Nope.yml` is not a valid location!"]
    );
    let escaping = TestLoader::new("include:\n  template: ../../x.gitlab-ci.yml\n");
    assert_eq!(
        errors(&escaping),
        ["Template file `../../x.gitlab-ci.yml` is not a valid location!"]
    );
    let extension = TestLoader::new("include:\n  template: Nope.txt\n");
    assert_eq!(
        errors(&extension),
        ["Included file `Nope.txt` does not have YAML extension!"]
    );
    let down = TestLoader::new("include:\n  template: Down.gitlab-ci.yml\n").remote(
        "https://templates.test/Down.gitlab-ci.yml",
        Err(RemoteError::Timeout),
    );
    let message = &errors(&down)[0];
    assert!(
        message.starts_with("Template file `Down.gitlab-ci.yml` could not be read: Remote file `https://templates.test/Down.gitlab-ci.yml`"),
        "{message}"
    );
}

#[test]
fn components_are_project_files_at_a_version_with_their_inputs() {
    let component = "spec:\n  inputs:\n    stage:\n      default: test\n---\ninclude: /ci/extra.yml\ncomponent-job:\n  stage: $[[ inputs.stage ]]\n  script: echo component\n";
    let l = TestLoader::new(
        "stages: [build, test]\ninclude:\n  - component: $CI_SERVER_FQDN/group/tools/lint@v1\n    inputs:\n      stage: build\n  - component: $CI_SERVER_FQDN/group/tools/deploy@v1\nown:\n  script: x\n",
    )
    .project(
        "group/tools",
        Some("v1"),
        &[
            ("templates/lint.yml", component),
            ("templates/deploy/template.yml", "deploy-job:\n  script: deploy\n"),
            // The component's own include:local reads its project.
            ("ci/extra.yml", "extra-job:\n  script: extra\n"),
        ],
    );
    let c = run(&l);
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    let p = c.pipeline.unwrap();
    let stage = |name: &str| {
        p.jobs
            .iter()
            .find(|j| j.name == name)
            .map(|j| j.stage.clone())
    };
    assert_eq!(stage("component-job").as_deref(), Some("build"));
    assert!(stage("extra-job").is_some());
    assert!(stage("deploy-job").is_some());
}

#[test]
fn component_failures_have_gitlab_messages() {
    let tools = |root: &str| {
        TestLoader::new(root).project(
            "group/tools",
            Some("v1"),
            &[("templates/lint.yml", "j:\n  script: x\n")],
        )
    };
    let one = |root: &str| {
        let e = errors(&tools(root));
        assert_eq!(e.len(), 1, "{e:?}");
        e[0].clone()
    };
    let fqdn = {
        let c = run(&tools("j:\n  script: x\n"));
        assert!(c.errors.is_empty());
        // The host the tests' context gives.
        let info = PipelineInfo::default();
        let ctx = Context::new(&info, &[], None);
        ctx.var("CI_SERVER_FQDN").unwrap()
    };
    assert_eq!(
        one("include:\n  component: elsewhere.example/group/tools/lint@v1\n"),
        "component 'elsewhere.example/group/tools/lint@v1' - the component path is not supported"
    );
    assert_eq!(
        one(&format!(
            "include:\n  component: {fqdn}/group/tools/lint@~latest\n"
        )),
        format!(
            "component '{fqdn}/group/tools/lint@~latest' - The ~latest version reference is not supported for non-catalog resources. Use a tag, branch, or SHA instead."
        )
    );
    assert_eq!(
        one(&format!(
            "include:\n  component: {fqdn}/group/nope/lint@v1\n"
        )),
        format!(
            "component '{fqdn}/group/nope/lint@v1' - project does not exist or you don't have sufficient permissions"
        )
    );
    assert_eq!(
        one(&format!(
            "include:\n  component: {fqdn}/group/tools/nope@v1\n"
        )),
        format!("component '{fqdn}/group/tools/nope@v1' - content not found")
    );
    assert_eq!(
        one(&format!(
            "include:\n  component: {fqdn}/group/tools/lint@v9\n"
        )),
        format!("component '{fqdn}/group/tools/lint@v9' - content not found")
    );
}

#[test]
fn component_templates_interpolate_the_context_they_declare() {
    let template = "spec:\n  component: [name, sha, version, reference]\n---\n$[[ component.name ]]-job:\n  script:\n    - echo '$[[ component.name ]] $[[ component.sha ]] $[[ component.reference ]] [$[[ component.version ]]]'\n";
    let l = TestLoader::new(
        "include:\n  - component: $CI_SERVER_FQDN/group/tools/lint@v1\n  - component: $CI_SERVER_FQDN/group/tools/sub/check@v1\n",
    )
    .project(
        "group/tools",
        Some("v1"),
        &[
            ("templates/lint.yml", template),
            ("templates/sub/check/template.yml", template),
        ],
    );
    let c = run(&l);
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    let p = c.pipeline.unwrap();
    let script = |name: &str| {
        p.jobs
            .iter()
            .find(|j| j.name == name)
            .map(|j| j.script.clone())
            .unwrap_or_else(|| panic!("no job {name}"))
    };
    // No CI/CD catalog: `version` is null, as GitLab's for a project that is not a
    // catalog resource.
    assert_eq!(
        script("lint-job"),
        ["echo 'lint sha-of-group/tools@v1 v1 []'"]
    );
    assert_eq!(
        script("sub/check-job"),
        ["echo 'sub/check sha-of-group/tools@v1 v1 []'"]
    );

    let fails = |template: &str| {
        let l = TestLoader::new("include:\n  - component: $CI_SERVER_FQDN/group/tools/lint@v1\n")
            .project(
                "group/tools",
                Some("v1"),
                &[("templates/lint.yml", template)],
            );
        let e = errors(&l);
        assert_eq!(e.len(), 1, "{e:?}");
        e[0].clone()
    };
    let undeclared =
        fails("spec:\n  component: [name]\n---\nj:\n  script: echo $[[ component.sha ]]\n");
    assert!(
        undeclared.ends_with(
            "unknown interpolation key: `component.sha`: list `sha` in the file's `spec:component`"
        ),
        "{undeclared}"
    );
    let unknown =
        fails("spec:\n  component: [name]\n---\nj:\n  script: echo $[[ component.path ]]\n");
    assert!(
        unknown.contains("unknown interpolation key: `component.path`"),
        "{unknown}"
    );
    let bad_header = fails("spec:\n  component: [name, path]\n---\nj:\n  script: x\n");
    assert!(
        bad_header.ends_with(
            "header:spec:component config should be an array of: name, sha, version, reference"
        ),
        "{bad_header}"
    );
    // A file that is not included as a component has no component context.
    let mut local = TestLoader::new("include: /ci/t.yml\n");
    local.files.insert(
        "ci/t.yml".into(),
        "spec:\n  component: [name]\n---\nj:\n  script: echo $[[ component.name ]]\n".into(),
    );
    let e = errors(&local);
    assert!(
        e.len() == 1
            && e[0].ends_with(
                "`component.name` is only known in a file included with `include:component`"
            ),
        "{e:?}"
    );
}
