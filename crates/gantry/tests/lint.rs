//! `gantry lint` end to end: a real git repository in a temp dir, the real binary, the
//! output a user sees (snapshotted) and the exit status.

#![allow(clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = Self { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        repo.git(&["config", "user.email", "dev@example.com"]);
        repo.git(&["config", "user.name", "Dev Eloper"]);
        for (path, text) in files {
            repo.write(path, text);
        }
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "initial commit\n\nbody text"]);
        repo
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn write(&self, path: &str, text: &str) {
        let p = self.path().join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(p, text).expect("write");
    }
    fn git(&self, args: &[&str]) {
        let st = Command::new("git")
            .current_dir(self.path())
            .args(args)
            .status()
            .expect("git runs");
        assert!(st.success(), "git {args:?} failed");
    }
    fn lint(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_gantry"))
            .current_dir(self.path())
            .arg("lint")
            .args(args)
            // Your own ~/.config/gantry/variables.yml stays out of the tests.
            .env("XDG_CONFIG_HOME", self.path().join(".git/no-config"))
            .output()
            .expect("gantry runs")
    }
}

impl Repo {
    /// The names of the jobs `gantry lint --format json ARGS` finds.
    fn job_names(&self, args: &[&str]) -> Vec<String> {
        let out = self.lint(&[&["--format", "json"], args].concat());
        json_names(&json(&out))
            .into_iter()
            .map(str::to_owned)
            .collect()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is JSON ({e}): {}", stdout(o)))
}

const PIPELINE: &str = r#"
variables:
  GLOBAL: value
  OCTAL: 012

.base:
  before_script: [echo base]
  tags: [linux]

build:
  extends: .base
  stage: build
  parallel: 2
  script: make
  variables:
    JOB: value

test:
  stage: test
  needs: [build]
  script:
    - !reference [.base, before_script]
    - make test
  rules:
    - if: $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH
    - if: $CI_COMMIT_TAG
      when: manual

deploy:
  stage: deploy
  script: ./deploy
  rules:
    - if: $CI_COMMIT_TAG =~ /^v\d+/
      when: delayed
      start_in: 5 minutes
"#;

#[test]
fn valid_pipeline_json_on_default_branch() {
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    insta::assert_json_snapshot!(json(&out));
}

#[test]
fn tag_pipeline_applies_rules() {
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let out = repo.lint(&["--tag", "v1.2", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let j = json(&out);
    let jobs: Vec<(String, String, bool)> = j["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            (
                j["name"].as_str().unwrap_or_default().to_owned(),
                j["when"].as_str().unwrap_or_default().to_owned(),
                j["allow_failure"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        jobs,
        vec![
            ("build 1/2".into(), "on_success".into(), false),
            ("build 2/2".into(), "on_success".into(), false),
            ("test".into(), "manual".into(), false),
            ("deploy".into(), "delayed".into(), false),
        ]
    );
    assert_eq!(j["jobs"][3]["start_in"], "5 minutes");
}

#[test]
fn text_output_lists_stages_and_jobs() {
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let out = repo.lint(&["--ref", "feature"]);
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!(stdout(&out));
}

/// `--format merged`: the configuration after includes, `extends` and `!reference`, as
/// YAML (GitLab's `merged_yaml`); an invalid one gets its errors, as with `text`.
#[test]
fn merged_output_is_the_configuration_after_extends_and_references() {
    let repo = Repo::new(&[(".gitlab-ci.yml", PIPELINE)]);
    let out = repo.lint(&["--format", "merged"]);
    assert_eq!(out.status.code(), Some(0));
    insta::assert_snapshot!(stdout(&out));
    let broken = Repo::new(&[(
        ".gitlab-ci.yml",
        "build:
  script: make
  when: sometimes
",
    )]);
    let out = broken.lint(&["--format", "merged"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("error: "), "{}", stdout(&out));
}

#[test]
fn invalid_pipeline_names_the_place() {
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "build:\n  script: make\n  when: sometimes\n\ntest:\n  script: [make test]\n  artifacts:\n    expire_in: forever\n  needs: [nope]\n",
    )]);
    let out = repo.lint(&[]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(stdout(&out));
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_json_snapshot!(json(&out));
}

#[test]
fn yaml_syntax_error_has_location() {
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "build:\n  script: [make\n  stage: build\n",
    )]);
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_json_snapshot!(json(&out));
}

#[test]
fn local_includes_come_from_the_working_tree() {
    let repo = Repo::new(&[
        (
            ".gitlab-ci.yml",
            "include:\n  - local: ci/*.yml\n  - ci/extra.yaml\nfrom-root:\n  script: echo root\n",
        ),
        (
            "ci/a.yml",
            ".tmpl:\n  script: echo a\nfrom-a:\n  extends: .tmpl\n",
        ),
        ("ci/extra.yaml", "from-extra:\n  script: echo extra\n"),
    ]);
    // An uncommitted change in the working tree is what lint sees.
    repo.write("ci/b.yml", "from-b:\n  script: echo b\n");
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let j = json(&out);
    assert_eq!(
        json_names(&j),
        ["from-a", "from-b", "from-extra", "from-root"]
    );
}

fn json_names(j: &serde_json::Value) -> Vec<&str> {
    j["jobs"]
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["name"].as_str()).collect())
        .unwrap_or_default()
}

/// `include:remote` and `include:project` are resolved (tests/remote_include.rs);
/// templates are not.
#[test]
fn template_includes_come_from_the_include_cache_offline() {
    // gitlab-ci-local's layout: the template's URL under the cache folder.
    let cached = ".gantry/includes/gitlab.com/gitlab-org/gitlab/-/raw/HEAD/lib/gitlab/ci/templates/Jobs/Build.gitlab-ci.yml";
    let repo = Repo::new(&[
        (
            ".gitlab-ci.yml",
            "include: {template: Jobs/Build.gitlab-ci.yml}\njob:\n  script: x\n",
        ),
        (cached, "build:\n  script: make\n"),
    ]);
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(json_names(&json(&out)), ["build", "job"]);

    let repo = Repo::new(&[
        (
            ".gitlab-ci.yml",
            "include: {template: Jobs/Build.yml}\njob:\n  script: x\n",
        ),
        (cached, "build:\n  script: make\n"),
    ]);
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        json(&out)["errors"][0]["message"],
        "Template file `Jobs/Build.yml` is not a valid location!"
    );
}

#[test]
fn a_variables_file_feeds_rules_below_pipeline_variables() {
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "deploy:\n  script: deploy\n  rules:\n    - if: $TARGET == \"prod\" && $TOKEN\n",
    )]);
    let vars = repo.path().join("vars.yml");
    std::fs::write(&vars, "TARGET: prod\nTOKEN: {value: t, protected: true}\n").expect("write");
    let file = vars.to_str().expect("utf-8 path");
    let lint_names = |args: &[&str]| repo.job_names(args);
    let names = |args: &[&str]| lint_names(&[&["--variables-file", file], args].concat());
    assert_eq!(names(&[]), ["deploy"]);
    assert_eq!(names(&["--var", "TARGET=staging"]), Vec::<String>::new());
    // Protected variables are for the default branch only.
    assert_eq!(names(&["--ref", "feature"]), Vec::<String>::new());
    // The checkout's .gantry/variables.yml is read without being named, before the files
    // given.
    assert_eq!(lint_names(&[]), Vec::<String>::new());
    std::fs::create_dir_all(repo.path().join(".gantry")).expect("mkdir");
    std::fs::write(
        repo.path().join(".gantry/variables.yml"),
        "TARGET: prod\nTOKEN: t\n",
    )
    .expect("write");
    assert_eq!(lint_names(&[]), ["deploy"]);
    std::fs::write(&vars, "TARGET: staging\n").expect("write");
    assert_eq!(names(&[]), Vec::<String>::new());

    std::fs::write(&vars, "TARGET: [prod\n").expect("write");
    let out = repo.lint(&["--variables-file", file]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{file}:")), "{err}");
}

#[test]
fn variables_source_and_changes_feed_rules() {
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "docs:\n  script: make docs\n  rules:\n    - changes: [docs/**/*]\nnightly:\n  script: make nightly\n  rules:\n    - if: $CI_PIPELINE_SOURCE == \"schedule\" && $FLAVOUR == \"full\"\n",
    )]);
    let names = |args: &[&str]| repo.job_names(args);
    assert_eq!(names(&[]), ["docs"]);
    assert_eq!(names(&["--changed", "src/main.rs"]), Vec::<String>::new());
    assert_eq!(names(&["--changed", "docs/guide/intro.md"]), ["docs"]);
    assert_eq!(
        names(&[
            "--source",
            "schedule",
            "--var",
            "FLAVOUR=full",
            "--changed",
            "x"
        ]),
        ["nightly"]
    );
}

#[test]
fn workflow_rules_filter_the_pipeline() {
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "workflow:\n  rules:\n    - if: $CI_COMMIT_TAG\njob:\n  script: x\n",
    )]);
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let j = json(&out);
    assert_eq!(j["valid"], true);
    assert_eq!(j["pipeline_created"], false);
    let out = repo.lint(&[]);
    insta::assert_snapshot!(stdout(&out));
}

#[test]
fn fragment_mode_checks_structure_only() {
    let repo = Repo::new(&[
        (".gitlab-ci.yml", "include: templates/t.yml\n"),
        (
            "templates/t.yml",
            ".t:\n  stage: custom\n  extends: .elsewhere\n  script: !reference [.other, script]\n  needs: [somewhere]\n",
        ),
    ]);
    let out = repo.lint(&["templates/t.yml", "--fragment", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    repo.write(
        "templates/bad.yml",
        "job:\n  stage: custom\n  cache:\n    policy: sometimes\n",
    );
    let out = repo.lint(&["templates/bad.yml", "--fragment", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_json_snapshot!(json(&out)["errors"]);
}

#[test]
fn usage_errors_exit_2() {
    let repo = Repo::new(&[("README", "no pipeline here\n")]);
    let out = repo.lint(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(".gitlab-ci.yml does not exist"));
    let out = repo.lint(&["--source", "carrier-pigeon"]);
    assert_eq!(out.status.code(), Some(2));
    let out = repo.lint(&["--ref", "a", "--tag", "b"]);
    assert_eq!(out.status.code(), Some(2));
    let out = repo.lint(&["--var", "NOEQUALS"]);
    assert_eq!(out.status.code(), Some(2));
    let outside = tempfile::tempdir().expect("temp");
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .current_dir(outside.path())
        .arg("lint")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not inside a git checkout"));
}

#[test]
fn predefined_variables_come_from_git() {
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "job:\n  script: x\n  rules:\n    - if: $CI_COMMIT_TITLE == \"initial commit\" && $CI_DEFAULT_BRANCH == \"main\" && $CI_COMMIT_REF_SLUG == \"main\" && $GITLAB_USER_EMAIL == \"dev@example.com\" && $CI_COMMIT_SHA =~ /^[0-9a-f]{40}$/\n",
    )]);
    let out = repo.lint(&["--format", "json"]);
    let j = json(&out);
    assert_eq!(json_names(&j), ["job"], "{}", stdout(&out));
}

#[test]
fn components_of_the_checkout_s_own_project_resolve() {
    let repo = Repo::new(&[
        (
            ".gitlab-ci.yml",
            "include:\n  - component: $CI_SERVER_FQDN/$CI_PROJECT_PATH/my-component@$CI_COMMIT_SHA\n    inputs:\n      stage: build\nstages: [build]\n",
        ),
        (
            "templates/my-component.yml",
            "spec:\n  inputs:\n    stage:\n      default: test\n---\ncomponent-job:\n  stage: $[[ inputs.stage ]]\n  script: echo component\n",
        ),
    ]);
    repo.git(&[
        "remote",
        "add",
        "origin",
        "https://gitlab.com/group/tools.git",
    ]);
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(json_names(&json(&out)), ["component-job"]);

    // Another version of the same project that does not have it.
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "include:\n  - component: gitlab.com/group/tools/my-component@main\n",
    )]);
    repo.git(&[
        "remote",
        "add",
        "origin",
        "https://gitlab.com/group/tools.git",
    ]);
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        json(&out)["errors"][0]["message"],
        "component 'gitlab.com/group/tools/my-component@main' - content not found"
    );
}

#[test]
fn input_options_give_the_root_files_spec_inputs() {
    let repo = Repo::new(&[(
        ".gitlab-ci.yml",
        "spec:\n  inputs:\n    deploy:\n      type: boolean\n---\nbuild:\n  script: make\ndeploy:\n  script: deploy\n  rules:\n    - if: '\"$[[ inputs.deploy ]]\" == \"true\"'\n",
    )]);
    let names = |args: &[&str]| repo.job_names(args);
    assert_eq!(names(&["--input", "deploy=true"]), ["build", "deploy"]);
    assert_eq!(names(&["--input", "deploy=false"]), ["build"]);
    let out = repo.lint(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("`deploy` input: required value has not been provided"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn unknown_keys_carry_a_did_you_mean_hint() {
    let repo = Repo::new(&[(".gitlab-ci.yml", "build:\n  scirpt: make\n  script: make\n")]);
    let out = repo.lint(&[]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(stdout(&out));
    let out = repo.lint(&["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    // GitLab's message unchanged; the hint is a field of its own.
    insta::assert_json_snapshot!(json(&out)["errors"]);
}

/// Jobs that show which protection and merge request variables the pipeline has.
const REF_FACTS: &str = r#"
protected:
  script: x
  rules:
    - if: $CI_COMMIT_REF_PROTECTED == "true"
branch:
  script: x
  rules:
    - if: $CI_COMMIT_BRANCH
merge_request:
  script: x
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event" && $CI_MERGE_REQUEST_EVENT_TYPE == "detached" && $CI_MERGE_REQUEST_IID == "1" && $CI_MERGE_REQUEST_REF_PATH == "refs/merge-requests/1/head"
target_protected:
  script: x
  rules:
    - if: $CI_MERGE_REQUEST_TARGET_BRANCH_PROTECTED == "true" && $CI_MERGE_REQUEST_SOURCE_BRANCH_PROTECTED == "false"
detached_shas_empty:
  script: x
  rules:
    - if: $CI_MERGE_REQUEST_SOURCE_BRANCH_SHA == "" && $CI_MERGE_REQUEST_TARGET_BRANCH_SHA == "" && $CI_MERGE_REQUEST_DIFF_BASE_SHA =~ /^[0-9a-f]{40}$/
docs:
  script: x
  rules:
    - changes: [docs/*]
src:
  script: x
  rules:
    - changes: [src/*]
"#;

#[test]
fn the_default_branch_is_protected_unless_unprotected() {
    let repo = Repo::new(&[(".gitlab-ci.yml", REF_FACTS)]);
    repo.git(&["checkout", "-q", "-b", "feature"]);
    let push = |args: &[&str]| {
        let names = repo.job_names(&[&["--changed", "none"], args].concat());
        names.contains(&"protected".to_owned())
    };
    assert!(push(&["--ref", "main"]));
    assert!(!push(&["--ref", "main", "--unprotected"]));
    assert!(!push(&[]), "feature is not protected");
    assert!(!push(&["--tag", "v1"]), "tags are not protected by default");
}

#[test]
fn a_merge_request_pipeline_has_gitlabs_variables_and_diff() {
    let repo = Repo::new(&[(".gitlab-ci.yml", REF_FACTS), ("src/a.rs", "a\n")]);
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("docs/guide.md", "guide\n");
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "docs"]);
    // main moves on after the branch: its changes are not the merge request's.
    repo.git(&["checkout", "-q", "main"]);
    repo.write("src/a.rs", "b\n");
    repo.git(&["commit", "-q", "-am", "src"]);
    repo.git(&["checkout", "-q", "feature"]);

    let mr = ["--source", "merge_request_event"];
    assert_eq!(
        repo.job_names(&mr),
        [
            "merge_request",
            "target_protected",
            "detached_shas_empty",
            "docs"
        ],
        "no CI_COMMIT_BRANCH, no protected ref, the diff from the merge base"
    );
    // The source branch named from another checkout, and the protection switched off.
    repo.git(&["checkout", "-q", "main"]);
    assert_eq!(
        repo.job_names(&[&mr[..], &["--source-branch", "feature", "--unprotected"]].concat()),
        ["merge_request", "detached_shas_empty", "docs"]
    );
    // An explicit --changed still wins.
    assert_eq!(
        repo.job_names(
            &[
                &mr[..],
                &["--source-branch", "feature", "--changed", "src/a.rs"]
            ]
            .concat()
        ),
        [
            "merge_request",
            "target_protected",
            "detached_shas_empty",
            "src"
        ]
    );
}

/// `--merged-result`: GitLab's merged results pipeline, with both heads' SHAs; branches
/// that do not merge lint as detached, as GitLab falls back.
#[test]
fn a_merged_result_pipeline_has_both_heads() {
    const MERGED: &str = r#"
merged:
  script: x
  rules:
    - if: $CI_MERGE_REQUEST_EVENT_TYPE == "merged_result" && $CI_MERGE_REQUEST_SOURCE_BRANCH_SHA =~ /^[0-9a-f]{40}$/ && $CI_MERGE_REQUEST_TARGET_BRANCH_SHA =~ /^[0-9a-f]{40}$/ && $CI_COMMIT_SHA != $CI_MERGE_REQUEST_SOURCE_BRANCH_SHA
detached:
  script: x
  rules:
    - if: $CI_MERGE_REQUEST_EVENT_TYPE == "detached"
"#;
    let repo = Repo::new(&[(".gitlab-ci.yml", MERGED), ("a.txt", "a\n")]);
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("b.txt", "b\n");
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "b"]);
    repo.git(&["checkout", "-q", "main"]);
    repo.write("c.txt", "c\n");
    repo.git(&["add", "-A"]);
    repo.git(&["commit", "-q", "-m", "c"]);
    repo.git(&["checkout", "-q", "feature"]);
    let mr = ["--source", "merge_request_event"];
    assert_eq!(repo.job_names(&mr), ["detached"]);
    assert_eq!(
        repo.job_names(&[&mr[..], &["--merged-result"]].concat()),
        ["merged"]
    );
    // A conflict: detached, as GitLab runs it.
    repo.write("a.txt", "feature\n");
    repo.git(&["commit", "-q", "-am", "a on feature"]);
    repo.git(&["checkout", "-q", "main"]);
    repo.write("a.txt", "main\n");
    repo.git(&["commit", "-q", "-am", "a on main"]);
    repo.git(&["checkout", "-q", "feature"]);
    assert_eq!(
        repo.job_names(&[&mr[..], &["--merged-result"]].concat()),
        ["detached"]
    );
}

#[test]
fn merge_request_flags_are_checked() {
    let repo = Repo::new(&[(".gitlab-ci.yml", REF_FACTS)]);
    let err = |args: &[&str]| {
        let out = repo.lint(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(err(&["--source-branch", "feature"]).contains("--source merge_request_event"));
    assert!(err(&["--merged-result"]).contains("--source merge_request_event"));
    assert!(
        err(&["--source", "merge_request_event", "--target-branch", "nope"])
            .contains("the target branch `nope` does not exist")
    );
    assert!(
        err(&["--source", "merge_request_event", "--source-branch", "nope"])
            .contains("the source branch `nope` does not exist")
    );
    assert!(err(&["--source", "merge_request_event", "--tag", "v1"]).contains("not a tag"));
}
