//! `gantry run` end to end: the real binary in real git checkouts, jobs in the shell
//! executor, the report read back. Each test states the GitLab behaviour it checks.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

/// A git checkout in a temp dir, with its own HOME and cache directory.
struct Checkout {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    cache: tempfile::TempDir,
}

use gantry_test_support::git;

impl Checkout {
    /// A repository on branch `main` with `.gitlab-ci.yml` committed.
    fn new(ci: &str) -> Self {
        let c = Checkout {
            dir: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            cache: tempfile::tempdir().unwrap(),
        };
        git(c.path(), &["init", "-q", "-b", "main"]);
        git(c.path(), &["config", "user.email", "tester@example.com"]);
        git(c.path(), &["config", "user.name", "Tester"]);
        git(
            c.path(),
            &[
                "remote",
                "add",
                "origin",
                "git@gitlab.example.com:acme/widget.git",
            ],
        );
        c.write(".gitlab-ci.yml", ci);
        c.commit();
        c
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, file: &str, text: &str) {
        let path = self.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Mode 755, as `chmod +x`.
    fn make_executable(&self, file: &str) {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                self.path().join(file),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        }
    }

    fn commit(&self) {
        git(self.path(), &["add", "-A"]);
        git(self.path(), &["commit", "-qm", "change", "--allow-empty"]);
    }

    fn command(&self, args: &[&str]) -> (Command, PathBuf) {
        self.command_with("shell", args)
    }

    /// [`Checkout::command`] with `--executor executor`.
    fn command_with(&self, executor: &str, args: &[&str]) -> (Command, PathBuf) {
        let report = self
            .home
            .path()
            .join(format!("report-{}.json", std::process::id()));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gantry"));
        cmd.arg("run")
            .args(["--executor", executor, "--no-color", "--json-report"])
            .arg(&report)
            .args(args)
            .current_dir(self.path())
            .env("HOME", self.home.path())
            .env("GANTRY_CACHE_DIR", self.cache.path())
            .env_remove("XDG_CACHE_HOME")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("CI")
            .env_remove("GITLAB_CI")
            .stdin(Stdio::null());
        (cmd, report)
    }

    /// [`Checkout::run`] on a terminal (`script(1)` gives the run one): its live view.
    fn run_on_terminal(&self, args: &[&str]) -> Run {
        let (cmd, report) = self.command(args);
        let _ = std::fs::remove_file(&report);
        let quote =
            |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', "'\\''"));
        let line = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(quote)
            .collect::<Vec<_>>()
            .join(" ");
        let mut tty = Command::new("script");
        tty.args(["-q", "-e", "-c", &line, "/dev/null"])
            .current_dir(self.path())
            .stdin(Stdio::null());
        for (key, value) in cmd.get_envs() {
            match value {
                Some(value) => tty.env(key, value),
                None => tty.env_remove(key),
            };
        }
        Run::new(tty.output().unwrap(), &report)
    }

    fn run(&self, args: &[&str]) -> Run {
        let (mut cmd, report) = self.command(args);
        let _ = std::fs::remove_file(&report);
        let output = cmd.output().unwrap();
        Run::new(output, &report)
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    report: Value,
}

impl Run {
    fn new(output: Output, report: &Path) -> Self {
        let report = std::fs::read_to_string(report)
            .ok()
            .map(|t| serde_json::from_str(&t).unwrap())
            .unwrap_or(Value::Null);
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            report,
        }
    }

    /// Pipeline status from the JSON report.
    fn status(&self) -> &str {
        self.report["status"].as_str().unwrap_or("<no report>")
    }

    /// Latest attempt's status of each job.
    fn jobs(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for j in self.report["jobs"].as_array().into_iter().flatten() {
            out.insert(
                j["name"].as_str().unwrap().to_owned(),
                j["status"].as_str().unwrap().to_owned(),
            );
        }
        out
    }

    fn job(&self, name: &str) -> String {
        self.jobs()
            .get(name)
            .cloned()
            .unwrap_or_else(|| format!("<{name} not in the report>"))
    }

    /// The log lines of one job, without the prefix.
    fn log(&self, job: &str) -> Vec<String> {
        self.stdout
            .lines()
            .filter_map(|l| {
                let (name, text) = l.split_once(" | ")?;
                (name.trim_end() == job).then(|| text.to_owned())
            })
            .collect()
    }

    fn logged(&self, job: &str, text: &str) -> bool {
        self.log(job).iter().any(|l| l.contains(text))
    }

    fn explain(&self) -> String {
        format!(
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

fn jobs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn a_failed_stage_skips_later_ones_and_runs_on_failure_and_always_jobs() {
    let c = Checkout::new(
        "stages: [build, test, deploy, cleanup]
build: {stage: build, script: [echo built]}
test: {stage: test, script: [echo testing, exit 1]}
deploy: {stage: deploy, script: [echo deploying]}
report: {stage: cleanup, script: [echo reporting], when: on_failure}
tidy: {stage: cleanup, script: [echo tidy], when: always}
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.status(), "failed");
    assert_eq!(
        r.jobs(),
        jobs(&[
            ("build", "success"),
            ("test", "failed"),
            ("deploy", "skipped"),
            ("report", "success"),
            ("tidy", "success")
        ])
    );
    assert!(
        r.logged("test", "ERROR: Job failed: exit code 1"),
        "{}",
        r.explain()
    );
    assert!(r.log("deploy").is_empty());
    assert!(
        r.stdout.contains("a job it waits for failed"),
        "{}",
        r.explain()
    );
}

#[test]
fn allow_failure_and_exit_codes_decide_whether_the_pipeline_fails() {
    let c = Checkout::new(
        "allowed: {script: [exit 1], allow_failure: true}
soft: {script: [exit 42], allow_failure: {exit_codes: [42]}}
hard: {script: [exit 43], allow_failure: {exit_codes: [42]}}
",
    );
    let r = c.run(&["allowed", "soft"]);
    assert_eq!((r.code, r.status()), (0, "success"), "{}", r.explain());
    let soft = &r.report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "soft")
        .unwrap()
        .clone();
    assert_eq!(soft["exit_code"], 42);
    assert_eq!(soft["allow_failure"], true);
    let r = c.run(&[]);
    assert_eq!((r.code, r.status()), (1, "failed"), "{}", r.explain());
    assert_eq!(r.job("hard"), "failed");
}

#[test]
fn needs_let_a_job_overtake_its_stage() {
    // `fast` needs only `quick`, so it finishes while `slow` (same stage as `quick`)
    // still runs; `after` waits for the whole build stage.
    let c = Checkout::new(
        "stages: [build, test]
quick: {stage: build, script: [echo quick]}
slow: {stage: build, script: ['sleep 2', echo slow]}
fast: {stage: test, needs: [quick], script: [echo fast]}
after: {stage: test, script: [echo after]}
",
    );
    let r = c.run(&["--concurrency", "3"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let at = |name: &str, key: &str| -> String {
        r.report["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap()[key]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        at("fast", "finished_at") < at("slow", "finished_at"),
        "{}",
        r.explain()
    );
    assert!(
        at("after", "started_at") >= at("slow", "finished_at"),
        "{}",
        r.explain()
    );
}

#[test]
fn artifacts_flow_to_later_jobs_and_dependencies_empty_isolates() {
    let c = Checkout::new(
        "stages: [build, test]
build:
  stage: build
  script: [mkdir -p out, echo payload > out/file.txt]
  artifacts: {paths: [out/]}
uses:
  stage: test
  script: [cat out/file.txt]
isolated:
  stage: test
  dependencies: []
  script: ['test ! -e out/file.txt && echo isolated-ok']
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.logged("uses", "payload"), "{}", r.explain());
    assert!(r.logged("isolated", "isolated-ok"), "{}", r.explain());
}

#[test]
fn dotenv_reports_become_variables_of_later_jobs() {
    let c = Checkout::new(
        "stages: [build, deploy]
build:
  stage: build
  script: ['echo VERSION=3.1.4 > build.env', 'echo URL=https://x.example > build.env2', 'cat build.env2 >> build.env']
  artifacts: {reports: {dotenv: build.env}}
deploy:
  stage: deploy
  script: ['echo \"deploying $VERSION to $URL\"']
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.logged("deploy", "deploying 3.1.4 to https://x.example"),
        "{}",
        r.explain()
    );
}

#[test]
fn after_script_runs_with_ci_job_status() {
    let c = Checkout::new(
        "ok: {script: [echo main], after_script: ['echo \"after: $CI_JOB_STATUS\"']}
bad: {script: [exit 1], after_script: ['echo \"after: $CI_JOB_STATUS\"'], allow_failure: true}
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.logged("ok", "after: success"), "{}", r.explain());
    assert!(r.logged("bad", "after: failed"), "{}", r.explain());
}

#[test]
fn retry_creates_attempts_that_appear_in_the_report_in_order() {
    // `retry: 2` = up to 3 attempts; `retry:when` limits it to the listed failures.
    let c = Checkout::new(
        "flaky:
  retry: 2
  script: ['echo \"attempt of job $CI_JOB_ID\"', exit 1]
always-fails:
  retry: {max: 1, when: [script_failure]}
  script: [exit 2]
  allow_failure: true
",
    );
    let r = c.run(&[]);
    let attempts: Vec<(String, String)> = r.report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["name"].as_str().unwrap().to_owned(),
                j["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let flaky: Vec<&str> = attempts
        .iter()
        .filter(|(n, _)| n == "flaky")
        .map(|(_, s)| s.as_str())
        .collect();
    assert_eq!(flaky, ["failed", "failed", "failed"], "{}", r.explain());
    let other: Vec<&str> = attempts
        .iter()
        .filter(|(n, _)| n == "always-fails")
        .map(|(_, s)| s.as_str())
        .collect();
    assert_eq!(other, ["failed", "failed"], "{}", r.explain());
    assert_eq!((r.code, r.status()), (1, "failed"));
}

#[test]
fn parallel_and_matrix_jobs_get_their_node_variables() {
    let c = Checkout::new(
        "shard:
  parallel: 3
  script: ['echo \"node $CI_NODE_INDEX of $CI_NODE_TOTAL\"']
build:
  parallel:
    matrix:
      - {OS: [linux, mac], ARCH: amd64}
  script: ['echo \"os=$OS arch=$ARCH\"']
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    for i in 1..=3 {
        assert!(
            r.logged(&format!("shard {i}/3"), &format!("node {i} of 3")),
            "{}",
            r.explain()
        );
    }
    assert!(
        r.logged("build: [linux, amd64]", "os=linux arch=amd64"),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("build: [mac, amd64]", "os=mac arch=amd64"),
        "{}",
        r.explain()
    );
}

#[test]
fn variables_follow_gitlabs_precedence() {
    // Pipeline variables (--var, like a triggered pipeline's) > job YAML > global YAML.
    let c = Checkout::new(
        "variables: {A: global, B: global, C: global}
job:
  variables: {B: job, C: job}
  script: ['echo \"A=$A B=$B C=$C\"']
",
    );
    let r = c.run(&["--var", "C=cli"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.logged("job", "A=global B=job C=cli"), "{}", r.explain());
}

#[test]
fn job_inputs_are_interpolated_by_the_runner_with_their_defaults() {
    // A job's `inputs:` (GitLab 18.10): the runner expands `${{ job.inputs.* }}` in its
    // scripts and artifact paths before the job runs; a job without inputs keeps `${{`.
    let c = Checkout::new(
        "deploy:
  inputs:
    target: {default: staging, options: [staging, production]}
    replicas: {type: number, default: '2'}
    flags: {type: array, default: [a, b]}
  script:
    - echo \"to ${{ job.inputs.target }} x${{ job.inputs.replicas }} ${{ job.inputs.flags[1] }}\" | tee out-${{ job.inputs.target }}.txt
  artifacts:
    paths: ['out-${{ job.inputs.target }}.txt']
plain:
  script: ['echo \"kept: \\${{ job.inputs.target }}\"']
broken:
  stage: deploy
  inputs:
    a: {default: x}
  script: ['echo ${{ job.inputs.nope }}']
  allow_failure: true
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.logged("deploy", "to staging x2 b"), "{}", r.explain());
    assert!(
        r.logged("plain", "kept: ${{ job.inputs.target }}"),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("broken", "failed to interpolate job inputs"),
        "{}",
        r.explain()
    );
}

#[test]
fn input_options_give_the_pipelines_inputs_read_as_their_declared_types() {
    // GitLab's pipeline inputs (the `inputs` of the pipeline API): values for the root
    // file's `spec:inputs`, checked against each declaration before any job runs.
    let c = Checkout::new(
        "spec:
  inputs:
    environment: {options: [staging, production], default: staging}
    replicas: {type: number}
    targets: {type: array, default: [linux]}
---
deploy:
  script: ['echo \"env=$[[ inputs.environment ]] n=$[[ inputs.replicas ]] t=$[[ inputs.targets ]]\"']
",
    );
    let r = c.run(&[
        "--input",
        "replicas=3",
        "--input",
        "targets=[linux, mac]",
        "--input",
        "environment=production",
    ]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.logged("deploy", "env=production n=3 t=[linux,mac]"),
        "{}",
        r.explain()
    );
    // A missing or mistyped input is a configuration error: exit 2, the input named.
    let r = c.run(&[]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr
            .contains("`replicas` input: required value has not been provided"),
        "{}",
        r.explain()
    );
    let r = c.run(&["--input", "replicas=lots", "--input", "colour=red"]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr.contains(
            "unknown input arguments: colour, `replicas` input: provided value is not a number"
        ),
        "{}",
        r.explain()
    );
    let r = c.run(&["--input", "novalue"]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(r.stderr.contains("is not NAME=VALUE"), "{}", r.explain());
}

#[test]
fn a_variables_file_gives_the_project_ci_cd_variables() {
    // GitLab's project variables: above YAML, below --var; rules see them; file, masked,
    // raw, protected (default branch only) and environment scopes as on the server.
    let c = Checkout::new(
        "variables: {GREETING: yaml, LEVEL: yaml}
job:
  rules:
    - if: $ENABLE == \"yes\"
  script:
    - echo \"greeting=$GREETING level=$LEVEL secret=$SECRET raw=$RAW prot=${PROT:-unset}\"
    - echo \"file=$(cat \"$KEY_FILE\" | tr '\\n' ' ')\"
deploy:
  environment: production
  script: ['echo \"url=$URL\"']
",
    );
    let vars = c.home.path().join("vars.yml");
    std::fs::write(
        &vars,
        "ENABLE: \"yes\"
GREETING: project
LEVEL: project
SECRET: {value: s3cr3t-value-42, masked: true}
RAW: {value: $GREETING, raw: true}
PROT: {value: p, protected: true}
KEY_FILE: {value: \"line1\\nline2\", type: file}
URL:
  - {value: anywhere}
  - {value: prod-url, environment_scope: production}
",
    )
    .unwrap();
    let file = vars.to_str().unwrap();
    let r = c.run(&["--variables-file", file, "--var", "LEVEL=cli"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.logged(
            "job",
            "greeting=project level=cli secret=[MASKED] raw=$GREETING prot=p"
        ),
        "{}",
        r.explain()
    );
    assert!(r.logged("job", "file=line1 line2"), "{}", r.explain());
    assert!(!r.stdout.contains("s3cr3t-value-42"), "{}", r.explain());
    assert!(r.logged("deploy", "url=prod-url"), "{}", r.explain());
    // A second file replaces the first one's variables of the same key and scope.
    let mine = c.home.path().join("mine.yml");
    std::fs::write(&mine, "GREETING: mine\n").unwrap();
    let r = c.run(&[
        "--variables-file",
        file,
        "--variables-file",
        mine.to_str().unwrap(),
    ]);
    assert!(
        r.logged("job", "greeting=mine level=project"),
        "{}",
        r.explain()
    );

    // Another branch is not protected; without the file, the rule drops the job.
    git(c.path(), &["checkout", "-qb", "feature"]);
    let r = c.run(&["--variables-file", file]);
    assert!(r.logged("job", "prot=unset"), "{}", r.explain());
    let r = c.run(&[]);
    assert_eq!(r.jobs(), jobs(&[("deploy", "success")]), "{}", r.explain());

    // A bad file stops the run before anything runs, naming the place.
    std::fs::write(&vars, "A: 1\nSECRET: {value: short, masked: true}\n").unwrap();
    let r = c.run(&["--variables-file", file]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr
            .contains(&format!("{file}:2:9: value of `SECRET`: cannot be masked")),
        "{}",
        r.explain()
    );
    let r = c.run(&["--variables-file", "/nonexistent/vars.yml"]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr.contains("cannot read the variables file"),
        "{}",
        r.explain()
    );
}

#[test]
fn your_variables_file_and_the_checkouts_are_read_without_being_named() {
    // ~/.config/gantry/variables.yml, then .gantry/variables.yml, then --variables-file,
    // then --var: each later one wins for the same key.
    let c = Checkout::new(
        "job:
  script:
    - echo \"a=$A b=$B c=$C d=$D\"
    - ls -a
",
    );
    c.commit();
    let user = c.home.path().join(".config/gantry/variables.yml");
    std::fs::create_dir_all(user.parent().unwrap()).unwrap();
    std::fs::write(&user, "A: user\nB: user\nC: user\nD: user\n").unwrap();
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.logged("job", "a=user b=user c=user d=user"),
        "{}",
        r.explain()
    );
    assert!(
        r.stdout
            .contains(&format!("project variables from {}", user.display())),
        "{}",
        r.explain()
    );

    // The checkout's file is not part of the job's copy of the tree.
    c.write(
        ".gantry/variables.yml",
        "B: project\nC: project\nD: project\n",
    );
    let mine = c.home.path().join("mine.yml");
    std::fs::write(&mine, "C: given\nD: given\n").unwrap();
    let r = c.run(&["--variables-file", mine.to_str().unwrap(), "--var", "D=cli"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.logged("job", "a=user b=project c=given d=cli"),
        "{}",
        r.explain()
    );
    assert!(!r.logged("job", ".gantry"), "{}", r.explain());

    // A mistake in a default file stops the run and names it.
    c.write(".gantry/variables.yml", "B: {value: x, colour: red}\n");
    let r = c.run(&[]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr.contains(".gantry/variables.yml:1:"),
        "{}",
        r.explain()
    );
}

#[test]
fn a_needs_project_the_run_cannot_resolve_fails_the_job_with_the_reason() {
    // The run's store holds only this run's pipeline: another project's job is not there.
    let c = Checkout::new(
        "uses:
  needs:
    - {project: other/thing, job: build, ref: main}
  script: [echo never]
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.job("uses"), "failed", "{}", r.explain());
    assert!(
        r.logged(
            "uses",
            "ERROR: the job could not start: needs:project `other/thing`: no such project on this server"
        ),
        "{}",
        r.explain()
    );
    assert_eq!(
        r.report["jobs"][0]["failure_reason"],
        "missing_dependency_failure",
        "{}",
        r.explain()
    );
}

#[test]
fn the_cache_persists_between_runs() {
    let c = Checkout::new(
        "job:
  cache: {key: deps, paths: [vendor/]}
  script:
    - 'if [ -f vendor/marker ]; then echo \"cache hit: $(cat vendor/marker)\"; else echo cache miss; fi'
    - mkdir -p vendor && echo first-run > vendor/marker
",
    );
    let first = c.run(&[]);
    assert_eq!(first.code, 0, "{}", first.explain());
    assert!(first.logged("job", "cache miss"), "{}", first.explain());
    let second = c.run(&[]);
    assert_eq!(second.code, 0, "{}", second.explain());
    assert!(
        second.logged("job", "cache hit: first-run"),
        "{}",
        second.explain()
    );
}

#[test]
fn predefined_variables_describe_the_checkout() {
    let c = Checkout::new(
        "job:
  script:
    - echo \"branch=$CI_COMMIT_BRANCH ref=$CI_COMMIT_REF_NAME source=$CI_PIPELINE_SOURCE\"
    - echo \"project=$CI_PROJECT_PATH name=$CI_PROJECT_NAME default=$CI_DEFAULT_BRANCH\"
    - echo \"sha=$CI_COMMIT_SHA short=$CI_COMMIT_SHORT_SHA\"
    - echo \"user=$GITLAB_USER_EMAIL job=$CI_JOB_NAME stage=$CI_JOB_STAGE ci=$CI gitlab=$GITLAB_CI\"
    - echo \"dir-ok=$(test \"$PWD\" = \"$CI_PROJECT_DIR\" && echo yes)\"
",
    );
    let sha = git(c.path(), &["rev-parse", "HEAD"]);
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.logged("job", "branch=main ref=main source=push"),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("job", "project=acme/widget name=widget default=main"),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("job", &format!("sha={sha} short={}", &sha[..8])),
        "{}",
        r.explain()
    );
    assert!(
        r.logged(
            "job",
            "user=tester@example.com job=job stage=test ci=true gitlab=true"
        ),
        "{}",
        r.explain()
    );
    assert!(r.logged("job", "dir-ok=yes"), "{}", r.explain());
}

#[test]
fn jobs_see_the_working_tree_with_uncommitted_changes_and_modes_but_not_ignored_files() {
    let c = Checkout::new(
        "job: {script: [cat tracked.txt, cat new.txt, ./tool.sh, 'test ! -e secret.txt && echo no-secret', git status --porcelain]}\n",
    );
    c.write(".gitignore", "secret.txt\n");
    c.write("tracked.txt", "committed\n");
    c.commit();
    c.write("tracked.txt", "edited but not committed\n");
    c.write("new.txt", "untracked file\n");
    c.write("secret.txt", "ignored\n");
    c.write("tool.sh", "#!/bin/sh\necho tool-ran\n");
    c.make_executable("tool.sh");
    let status_before = git(c.path(), &["status", "--porcelain"]);
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    for text in [
        "edited but not committed",
        "untracked file",
        "tool-ran",
        "no-secret",
    ] {
        assert!(r.logged("job", text), "{text}: {}", r.explain());
    }
    // The checkout is untouched.
    assert_eq!(git(c.path(), &["status", "--porcelain"]), status_before);
    // --committed uses HEAD.
    let r = c.run(&["--committed", "job"]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert!(r.logged("job", "committed"), "{}", r.explain());
}

/// Jobs share a slot's directory one after the other (`--concurrency 1`): what a job
/// leaves there — new files and directories, edits, a changed mode, a read-only
/// directory — is gone for the next job, which sees the snapshot exactly.
#[test]
fn each_job_gets_a_clean_copy_even_in_a_reused_build_directory() {
    let c = Checkout::new(concat!(
        "stages: [dirty, check]\n",
        "dirty:\n",
        "  stage: dirty\n",
        "  script:\n",
        "    - echo changed > tracked.txt\n",
        "    - echo left > leftover.txt\n",
        "    - mkdir -p out/ro && touch out/ro/obj && chmod 555 out/ro\n",
        "    - chmod 600 tool.sh\n",
        "    - rm README.md\n",
        "check:\n",
        "  stage: check\n",
        "  script:\n",
        "    - cat tracked.txt\n",
        "    - 'test ! -e leftover.txt && test ! -e out && echo no-leftovers'\n",
        "    - ./tool.sh\n",
        "    - cat README.md\n",
        "    - git status --porcelain\n",
    ));
    c.write("tracked.txt", "original\n");
    c.write("README.md", "readme\n");
    c.write("tool.sh", "#!/bin/sh\necho tool-ran\n");
    c.make_executable("tool.sh");
    c.commit();
    let r = c.run(&["--concurrency", "1"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    for text in ["original", "no-leftovers", "tool-ran", "readme"] {
        assert!(r.logged("check", text), "{text}: {}", r.explain());
    }
    assert!(!r.logged("check", "changed"), "{}", r.explain());
}

/// A run's job directories (and its snapshot and emptied log files) are kept beside the
/// checkout's cache and taken over by the next run: the same files (inodes) serve it, and
/// each job still starts from a clean copy of the working tree as it is now.
#[test]
fn the_next_run_reuses_the_job_directories_of_the_last_one() {
    let c = Checkout::new(concat!(
        "job:\n",
        "  script:\n",
        "    - 'test ! -e leftover.txt && echo no-leftovers'\n",
        "    - echo left > leftover.txt\n",
        "    - echo \"inode $(stat -c %i README.md)\"\n",
        "    - echo \"dir $CI_PROJECT_DIR\"\n",
        "    - echo \"readme $(cat README.md)\"\n",
    ));
    c.write("README.md", "readme\n");
    c.commit();
    let inode = |r: &Run| {
        r.log("job")
            .iter()
            .find_map(|l| l.strip_prefix("inode ").map(str::to_owned))
            .unwrap_or_else(|| panic!("no inode line: {}", r.explain()))
    };
    let first = c.run(&["--concurrency", "1"]);
    assert_eq!(first.code, 0, "{}", first.explain());
    assert!(first.logged("job", "no-leftovers"), "{}", first.explain());
    // Kept under $HOME/.cache/gantry/run/<hash>/builds (XDG_CACHE_HOME is unset).
    let run_dir = c.home.path().join(".cache/gantry/run");
    let kept: Vec<PathBuf> = std::fs::read_dir(&run_dir)
        .unwrap()
        .map(|e| e.unwrap().path().join("builds"))
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    // The log files are kept too, emptied: no log outlives its run.
    let logs: Vec<u64> = std::fs::read_dir(kept[0].with_file_name("traces"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect();
    assert_eq!(logs, [0], "one emptied log file");
    // The kept snapshot is brought to the working tree as it is now.
    c.write("README.md", "changed\n");
    let second = c.run(&["--concurrency", "1"]);
    assert_eq!(second.code, 0, "{}", second.explain());
    assert!(second.logged("job", "no-leftovers"), "{}", second.explain());
    assert!(first.logged("job", "readme readme"), "{}", first.explain());
    assert!(
        second.logged("job", "readme changed"),
        "{}",
        second.explain()
    );
    assert_eq!(inode(&first), inode(&second), "{}", second.explain());
    // The job ran in the run's temporary directory, not in the kept one.
    let dir = second
        .log("job")
        .iter()
        .find_map(|l| l.strip_prefix("dir ").map(str::to_owned))
        .unwrap();
    assert!(!Path::new(&dir).starts_with(&run_dir), "{dir}");
    assert!(kept[0].is_dir(), "kept again after the second run");
}

/// `--artifacts-dir`: each job's archive extracted under its name after the run,
/// replacing what an earlier run left there; jobs without artifacts get nothing.
#[test]
fn artifacts_dir_receives_each_jobs_artifacts() {
    let c = Checkout::new(concat!(
        "build:\n",
        "  script: ['mkdir -p out/sub', 'echo one > out/a.txt', 'echo two > out/sub/b.txt', 'echo no > skip.txt']\n",
        "  artifacts: {paths: [out/]}\n",
        "lint:\n",
        "  script: [echo lint]\n",
    ));
    let dir = c.home.path().join("artifacts");
    std::fs::create_dir_all(dir.join("build")).unwrap();
    std::fs::write(dir.join("build/stale.txt"), "old run").unwrap();
    let dir_arg = dir.to_string_lossy().into_owned();
    let r = c.run(&["--artifacts-dir", &dir_arg]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(
        std::fs::read_to_string(dir.join("build/out/a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("build/out/sub/b.txt")).unwrap(),
        "two\n"
    );
    assert!(!dir.join("build/skip.txt").exists());
    assert!(!dir.join("build/stale.txt").exists());
    assert!(!dir.join("lint").exists());
}

/// `gantry run | head`: a closed standard output ends nothing early and is no panic.
#[test]
fn trigger_jobs_run_child_pipelines_whose_jobs_are_named_after_the_trigger() {
    let c = Checkout::new(
        "variables: {GLOBAL: global}
stages: [build, test, deploy]
generate:
  stage: build
  script: ['printf \"generated: {script: [echo from the artifact]}\\n\" > gen.yml']
  artifacts: {paths: [gen.yml]}
static:
  stage: test
  variables: {FROM_TRIGGER: trigger-value}
  trigger:
    include: child.yml
dynamic:
  stage: test
  trigger:
    include:
      - artifact: gen.yml
        job: generate
    strategy: depend
after:
  stage: deploy
  script: [echo after]
",
    );
    c.write(
        "child.yml",
        "child-job:\n  script: ['echo \"$GLOBAL $FROM_TRIGGER $CI_PIPELINE_SOURCE\"']\nnested:\n  trigger:\n    include: grandchild.yml\n",
    );
    c.write("grandchild.yml", "deep: {script: [echo deep down]}\n");
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.logged(
            "static -> child-job",
            "global trigger-value parent_pipeline"
        ),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("dynamic -> generated", "from the artifact"),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("static -> nested -> deep", "deep down"),
        "{}",
        r.explain()
    );
    assert_eq!(
        r.jobs(),
        jobs(&[
            ("generate", "success"),
            ("static", "success"),
            ("dynamic", "success"),
            ("after", "success"),
            ("static -> child-job", "success"),
            ("static -> nested", "success"),
            ("dynamic -> generated", "success"),
            ("static -> nested -> deep", "success"),
        ]),
        "{}",
        r.explain()
    );

    // `strategy: depend`: a failing child fails its trigger job, and so the run.
    c.write(
        ".gitlab-ci.yml",
        "parent:\n  trigger:\n    include: child.yml\n    strategy: depend\n",
    );
    c.write("child.yml", "child-job: {script: [echo failing, exit 3]}\n");
    let r = c.run(&[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert_eq!(r.status(), "failed", "{}", r.explain());
    assert_eq!(r.job("parent"), "failed", "{}", r.explain());
    assert_eq!(r.job("parent -> child-job"), "failed", "{}", r.explain());

    // A child configuration that does not compile: the trigger job's log says why.
    c.write("child.yml", "child-job: {script: [a], needs: [nowhere]}\n");
    let r = c.run(&[]);
    assert_eq!(r.code, 1, "{}", r.explain());
    assert!(
        r.logged("parent", "child-job job: undefined need: nowhere"),
        "{}",
        r.explain()
    );

    // A child blocked at a manual job: its trigger job waits, and the run ends blocked
    // instead of waiting for ever; named with --manual, the job runs.
    c.write(
        "child.yml",
        "gate: {script: [echo through the gate], when: manual, allow_failure: false}\n",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.status(), "manual", "{}", r.explain());
    assert_eq!(r.job("parent"), "running", "{}", r.explain());
    assert_eq!(r.job("parent -> gate"), "manual", "{}", r.explain());
    let r = c.run(&["--manual", "gate"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.status(), "success", "{}", r.explain());
    assert!(
        r.logged("parent -> gate", "through the gate"),
        "{}",
        r.explain()
    );
}

#[test]
fn a_closed_stdout_does_not_fail_the_run() {
    let c = Checkout::new("a:\n  script: [echo one]\nb:\n  script: [echo two]\n");
    let (mut cmd, report) = c.command(&[]);
    // A pipe whose reading end is closed before the run starts.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = cmd.stdout(writer).stderr(Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    assert_eq!(report["status"], "success");
}

/// `--executor auto` asks the Docker engine only when a job may use an image: a
/// socket standing in for the engine counts who connects.
#[test]
fn auto_asks_the_docker_engine_only_when_a_job_may_use_an_image() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let home = tempfile::tempdir().unwrap();
    let socket = home.path().join("docker.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    {
        let connections = Arc::clone(&connections);
        // Accepts and hangs up: not an engine.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                connections.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
    }
    let run = |c: &Checkout| {
        let (mut cmd, report) = c.command_with("auto", &[]);
        let output = cmd
            .env("DOCKER_HOST", format!("unix://{}", socket.display()))
            .output()
            .unwrap();
        Run::new(output, &report)
    };

    let c = Checkout::new("a:\n  script: [echo plain]\n");
    let r = run(&c);
    assert_eq!(r.status(), "success", "{}", r.explain());
    assert_eq!(connections.load(Ordering::SeqCst), 0, "{}", r.explain());

    let c = Checkout::new("a:\n  image: busybox\n  script: [echo in the shell]\n");
    let r = run(&c);
    assert_eq!(r.status(), "success", "{}", r.explain());
    assert!(r.logged("a", "in the shell"), "{}", r.explain());
    let asked = connections.load(Ordering::SeqCst);
    assert!(asked > 0, "{}", r.explain());
    assert!(
        r.stderr
            .contains("jobs with an image run in the shell on this machine")
            || r.stdout
                .contains("jobs with an image run in the shell on this machine"),
        "{}",
        r.explain()
    );

    // A child pipeline's jobs are not known up front: a trigger job is asked for too.
    let c = Checkout::new("up:\n  trigger: {include: child.yml}\n");
    c.write("child.yml", "down:\n  script: [echo child]\n");
    c.commit();
    let r = run(&c);
    assert_eq!(r.status(), "success", "{}", r.explain());
    assert!(
        connections.load(Ordering::SeqCst) > asked,
        "{}",
        r.explain()
    );
}

#[test]
fn manual_jobs_are_not_run_unless_named() {
    let c = Checkout::new(
        "build: {script: [echo build]}
deploy: {script: [echo deploying], when: manual}
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(
        r.jobs(),
        jobs(&[("build", "success"), ("deploy", "manual")])
    );
    assert!(r.stdout.contains("--manual 'deploy'"), "{}", r.explain());
    let r = c.run(&["--manual", "deploy"]);
    assert_eq!(
        r.jobs(),
        jobs(&[("build", "success"), ("deploy", "success")]),
        "{}",
        r.explain()
    );
    assert!(r.logged("deploy", "deploying"));
    let r = c.run(&["deploy"]);
    assert_eq!(r.jobs(), jobs(&[("deploy", "success")]), "{}", r.explain());
}

/// `tags:` (most real pipelines tag their jobs): the run's runner takes every job
/// whatever its tags, as gitlab-ci-local does; `--tags a,b` makes it a runner with exactly
/// those tags (and untagged jobs, gitlab-runner's default), and a job whose tags it lacks
/// ends the run at once — exit 2 and GitLab's reason, never a silent wait.
#[test]
fn tagged_jobs_run_unless_tags_says_the_runner_lacks_theirs() {
    let c = Checkout::new(
        "build: {tags: [docker, linux], script: [echo built]}
plain: {script: [echo plain]}
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(
        r.jobs(),
        jobs(&[("build", "success"), ("plain", "success")])
    );
    let r = c.run(&["--tags", "linux,docker,gpu"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(
        r.jobs(),
        jobs(&[("build", "success"), ("plain", "success")])
    );

    let started = std::time::Instant::now();
    let r = c.run(&["build"]);
    let runs = started.elapsed();
    assert_eq!(r.code, 0, "{}", r.explain());
    let started = std::time::Instant::now();
    let r = c.run(&["--tags", "docker", "build"]);
    let stuck = started.elapsed();
    assert_eq!(r.code, 2, "{}", r.explain());
    // The job would have run in `runs`: the run ends within 2 s of that.
    assert!(
        stuck < runs + std::time::Duration::from_secs(2),
        "{stuck:?} against {runs:?} for a run that runs it\n{}",
        r.explain()
    );
    let reason = "This job is stuck because you don't have any active runners online or available with any of these tags assigned to them: docker linux";
    assert!(
        r.logged("build", &format!("cannot run: {reason}")),
        "{}",
        r.explain()
    );
    assert!(
        r.stdout.contains(&format!("can never run: {reason}")),
        "the summary says it: {}",
        r.explain()
    );
    assert!(
        r.stderr
            .contains(&format!("job `build` can never run: {reason}"))
            && r.stderr
                .contains("this run's runner has the tags docker (--tags)"),
        "{}",
        r.explain()
    );
    assert_eq!(r.status(), "canceled", "{}", r.explain());
    assert_eq!(r.job("build"), "canceled");
}

/// A job waiting for its `resource_group` says so (the coordinator's pending reason, in
/// GitLab's words): once, as a line of the job, without a terminal; under the stages of
/// the live view on one.
#[test]
fn a_job_waiting_for_its_resource_group_says_why() {
    let c = Checkout::new(
        "first: {resource_group: production, script: [sleep 2]}
second: {resource_group: production, script: [echo second]}
",
    );
    let why = "This job is waiting for resource: production";
    let r = c.run(&["--concurrency", "2"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(
        r.stdout.matches(&format!(" | waiting: {why}\n")).count(),
        1,
        "{}",
        r.explain()
    );
    let r = c.run_on_terminal(&["--concurrency", "2"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(
        r.stdout.contains(&format!(" waits: {why}")),
        "{}",
        r.explain()
    );
}

/// On a terminal (`script(1)` gives the run one): each job's lines with its name, a live
/// view of the stages below them, redrawn as jobs change, and gone before the summary.
#[test]
fn on_a_terminal_a_live_view_follows_the_log_and_leaves_before_the_summary() {
    let c = Checkout::new(
        "stages: [build, test]
compile: {stage: build, script: ['for i in $(seq 1 200); do echo \"line $i\"; done']}
check: {stage: test, script: [echo checked]}
",
    );
    let r = c.run_on_terminal(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(
        r.jobs(),
        jobs(&[("compile", "success"), ("check", "success")])
    );
    // The terminal turns each line break into CR LF.
    let screen = r.stdout.replace("\r\n", "\n");
    let mut last = 0;
    for i in 1..=200 {
        let at = screen
            .find(&format!("compile | line {i}\n"))
            .unwrap_or_else(|| panic!("line {i} missing: {}", r.explain()));
        assert!(at > last, "line {i} out of order");
        last = at;
    }
    assert!(screen.contains("check   | checked\n"), "{}", r.explain());
    // The view: a line per stage with its jobs, and the time since the start.
    assert!(screen.contains("✔ compile"), "{}", r.explain());
    assert!(screen.contains("elapsed"), "{}", r.explain());
    // Erased (cursor up over its lines, clear to the end) before the summary.
    let erased = screen.rfind("\x1b[0J").expect("the view is erased");
    let summary = screen.find("pipeline: success").expect("the summary");
    assert!(erased < summary, "{}", r.explain());
    assert!(!screen[summary..].contains("elapsed"), "{}", r.explain());
}

#[test]
fn named_jobs_run_alone_or_with_what_they_need() {
    let c = Checkout::new(
        "stages: [build, test, deploy]
lib: {stage: build, script: [echo lib]}
docs: {stage: build, script: [echo docs]}
unit: {stage: test, needs: [lib], script: [echo unit]}
ship: {stage: deploy, script: [echo ship]}
",
    );
    let r = c.run(&["unit"]);
    assert_eq!(r.jobs(), jobs(&[("unit", "success")]), "{}", r.explain());
    let r = c.run(&["unit", "--needs"]);
    assert_eq!(
        r.jobs(),
        jobs(&[("lib", "success"), ("unit", "success")]),
        "{}",
        r.explain()
    );
    let r = c.run(&["ship", "--needs"]);
    assert_eq!(r.jobs().len(), 4, "{}", r.explain());
    let r = c.run(&["nope"]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(r.stderr.contains("no job named `nope`"), "{}", r.explain());
}

#[test]
fn a_configuration_error_exits_2_with_its_location() {
    let c = Checkout::new("job:\n  script: [echo]\n  when: sometimes\n");
    let r = c.run(&[]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(r.stderr.contains(".gitlab-ci.yml:3:"), "{}", r.explain());
    assert!(r.stderr.contains("when"), "{}", r.explain());
    assert_eq!(
        r.report,
        Value::Null,
        "no report for a run that did not start"
    );
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("run")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not inside a git checkout"));
    let c = Checkout::new("job: {script: [echo]}\n");
    let r = c.run(&["--file", "missing.yml"]);
    assert_eq!(r.code, 2, "{}", r.explain());
}

#[test]
fn the_json_report_has_the_documented_shape() {
    let c = Checkout::new(
        "stages: [build, test]
build: {stage: build, script: [echo ok]}
test: {stage: test, script: [exit 7], allow_failure: true}
",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let mut report = r.report.clone();
    for job in report["jobs"].as_array_mut().unwrap() {
        for key in ["started_at", "finished_at"] {
            let t = job[key].as_str().unwrap();
            // RFC 3339 with milliseconds, UTC.
            assert_eq!(t.len(), 24, "{t}");
            assert!(t.ends_with('Z') && t.as_bytes()[19] == b'.', "{t}");
            job[key] = Value::String("<time>".into());
        }
        // The shell executor measures every job: its figures vary, their shape does not.
        let resources = job["resources"].as_object_mut().expect("resources");
        for (key, value) in resources.iter_mut() {
            assert!(value.is_number(), "{key}: {value}");
            *value = Value::String("<n>".into());
        }
    }
    insta::assert_json_snapshot!(report);
}

/// `--timeline`: after the summary, a row per job over the run's time axis and a row per
/// section of its log; the summary and the timeline show each job's CPU time and memory.
#[test]
fn the_timeline_and_the_summary_show_each_jobs_run_and_resource_use() {
    let c = Checkout::new(
        "stages: [build, test]
build: {stage: build, script: [echo ok]}
test: {stage: test, script: [sleep 1]}
",
    );
    let r = c.run(&["--timeline"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let out = &r.stdout;
    let header = out
        .lines()
        .find(|l| l.starts_with("job "))
        .unwrap_or_else(|| panic!("no summary: {}", r.explain()));
    assert!(
        header.contains("cpu") && header.contains("memory"),
        "{header}"
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("test ") && l.contains("success"))
        .unwrap();
    assert!(row.contains("MiB") || row.contains("KiB"), "{row}");
    let timeline = &out[out
        .find("timeline: ")
        .unwrap_or_else(|| panic!("{}", r.explain()))..];
    let rows: Vec<&str> = timeline.lines().collect();
    let build = rows.iter().position(|l| l.starts_with("build ")).unwrap();
    let test = rows.iter().position(|l| l.starts_with("test ")).unwrap();
    assert!(build < test, "{timeline}");
    // build ran before test: its bar starts further left.
    let first_run = |line: &str| line.find('█').unwrap_or(usize::MAX);
    assert!(
        first_run(rows[build]) <= first_run(rows[test]),
        "{timeline}"
    );
    assert!(
        rows[test].contains("cpu ") && rows[test].contains("memory "),
        "{timeline}"
    );
    // Each job's sections beneath it.
    assert!(
        rows[test + 1..]
            .iter()
            .any(|l| l.starts_with("  step_script")),
        "{timeline}"
    );
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_running_jobs_after_script_runs_and_the_exit_is_non_zero() {
    use std::io::BufRead as _;
    let c = Checkout::new(
        "slow:
  script: [echo started-slow, sleep 30]
  after_script: ['echo \"after: $CI_JOB_STATUS\"']
",
    );
    let (mut cmd, report) = c.command(&[]);
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let _ = tx.send(line.clone());
            lines.push(line);
        }
        lines
    });
    // Signal once the script runs.
    loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the job never started");
        if line.ends_with("| started-slow") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let stdout = reader.join().unwrap().join("\n");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(status.code(), Some(1), "{stdout}");
    assert_eq!(report["status"], "canceled", "{stdout}");
    assert_eq!(report["jobs"][0]["status"], "canceled", "{stdout}");
    assert!(stdout.contains("after: canceled"), "{stdout}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "cancel took too long: {stdout}"
    );
}

#[test]
fn junit_reports_are_summed_up_after_the_summary_and_in_the_json_report() {
    let c = Checkout::new(
        r#"unit:
  parallel: 2
  allow_failure: true
  script:
    - |
      if [ "$CI_NODE_INDEX" = 1 ]; then
        echo '<testsuites><testsuite name="math"><testcase classname="math" name="adds" time="0.5"/><testcase classname="math" name="divides" time="0.25"><failure message="expected 1, got 2">at math.rs:3</failure></testcase></testsuite></testsuites>' > report.xml
      else
        echo '<testsuite name="io"><testcase classname="io" name="reads" time="1"/><testcase classname="io" name="writes"><skipped/></testcase></testsuite>' > report.xml
      fi
    - test "$CI_NODE_INDEX" = 2
  artifacts:
    when: always
    reports:
      junit: report.xml
lint:
  script:
    - echo 'not xml <' > lint.xml
  artifacts:
    reports:
      junit: lint.xml
"#,
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    let tail: Vec<&str> = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("pipeline: "))
        .collect();
    assert_eq!(
        tail[1],
        "tests: 4 total, 2 passed, 1 failed, 0 errors, 1 skipped (1.75s)",
        "{}",
        r.explain()
    );
    assert_eq!(tail[2], "  failed  unit  math divides: expected 1, got 2");
    assert!(
        tail[3].starts_with("  error   lint: JUnit XML parsing failed: "),
        "{}",
        r.explain()
    );
    let tests = &r.report["tests"];
    assert_eq!(
        (
            &tests["total"],
            &tests["success"],
            &tests["failed"],
            &tests["skipped"]
        ),
        (
            &Value::from(4),
            &Value::from(2),
            &Value::from(1),
            &Value::from(1)
        )
    );
    assert_eq!(
        tests["failures"],
        serde_json::json!([{"suite": "unit", "classname": "math", "name": "divides", "status": "failed", "file": null}])
    );
    assert_eq!(tests["suite_errors"][0]["suite"], "lint");
}

/// `run:` (GitLab Functions): a local step with typed inputs, outputs and an export, a
/// script step reading them, the job's variables in `${{ vars.X }}`; the step results
/// in `step-results.json` with `CI_STEPS_DEBUG`, uploaded as an artifact; a failing
/// step's exit code decides `allow_failure:exit_codes`.
#[test]
fn run_steps_pass_outputs_and_exports_and_fail_with_their_exit_code() {
    let c = Checkout::new(
        "steps:
  variables: {CI_STEPS_DEBUG: \"true\", GREETING: hello}
  run:
    - name: bump
      func: ./tools/semver
      inputs: {current: \"1.4.0\"}
    - name: show
      script: echo \"next=${{ steps.bump.outputs.next }} VERSION=$VERSION greeting=${{ vars.GREETING }} in $PWD\"
    - name: login
      func: ./tools/login
      inputs: {token: s3cr3t-value}
  artifacts: {paths: [step-results.json]}
failing:
  allow_failure: {exit_codes: [4]}
  run:
    - name: first
      script: exit 4
    - name: second
      script: echo never printed
",
    );
    c.write(
        "tools/semver/func.yml",
        "spec:
  inputs:
    current: {type: string}
  outputs:
    next: {type: string}
---
exec:
  command: [\"${{ func_dir }}/bump.sh\", \"${{ inputs.current }}\", \"${{ output_file }}\", \"${{ export_file }}\"]
",
    );
    c.write(
        "tools/semver/bump.sh",
        "#!/bin/sh\nset -e\nnext=\"${1%.*}.$(( ${1##*.} + 1 ))\"\necho \"bumped $1\"\necho \"{\\\"name\\\":\\\"next\\\",\\\"value\\\":\\\"$next\\\"}\" >> \"$2\"\necho \"{\\\"name\\\":\\\"VERSION\\\",\\\"value\\\":\\\"$next\\\"}\" >> \"$3\"\n",
    );
    c.make_executable("tools/semver/bump.sh");
    c.write(
        "tools/login/func.yml",
        "spec:\n  inputs:\n    token: {type: string, sensitive: true}\n---\nexec:\n  command: [sh, -c, 'echo \"logging in with $0\"', '${{ inputs.token }}']\n",
    );
    c.commit();
    let artifacts = c.home.path().join("artifacts");
    let r = c.run(&["--artifacts-dir", artifacts.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.job("steps"), "success", "{}", r.explain());
    assert!(
        r.logged("steps", "Running step name=bump"),
        "{}",
        r.explain()
    );
    assert!(r.logged("steps", "bumped 1.4.0"), "{}", r.explain());
    assert!(
        r.log("steps")
            .iter()
            .any(|l| l.starts_with("next=1.4.1 VERSION=1.4.1 greeting=hello in /")),
        "{}",
        r.explain()
    );
    assert!(
        r.logged("steps", "logging in with [MASKED]"),
        "a sensitive input is masked: {}",
        r.explain()
    );
    assert!(!r.stdout.contains("s3cr3t-value"), "{}", r.explain());
    let results = std::fs::read_to_string(artifacts.join("steps/step-results.json"))
        .unwrap_or_else(|e| panic!("{e}: {}", r.explain()));
    let results: Value = serde_json::from_str(&results).unwrap();
    assert_eq!(results["status"], "success");
    assert_eq!(results["subStepResults"][0]["outputs"]["next"], "1.4.1");
    assert_eq!(results["subStepResults"][0]["exports"]["VERSION"], "1.4.1");
    assert_eq!(results["subStepResults"][1]["execResult"]["exitCode"], 0);
    assert_eq!(
        results["subStepResults"][2]["step"]["inputs"]["token"], "[MASKED]",
        "the results file is masked as the log is"
    );

    assert_eq!(r.job("failing"), "failed", "{}", r.explain());
    assert!(
        r.logged("failing", "step first failed: exit status 4"),
        "{}",
        r.explain()
    );
    assert!(!r.logged("failing", "never printed"), "{}", r.explain());
    assert!(
        r.logged("failing", "ERROR: Job failed: exit code 4"),
        "{}",
        r.explain()
    );
    assert_eq!(r.status(), "success", "exit code 4 is allowed to fail");
}

/// `rules:changes:compare_to` names the checkout's branches: the paths changed on this
/// branch since it left `main`, uncommitted changes included (`--committed`: without them).
#[test]
fn compare_to_selects_jobs_by_what_the_branch_changed_since_main() {
    let c = Checkout::new(
        "
docs:
  script: [echo docs]
  rules:
    - changes: {paths: ['docs/**/*'], compare_to: main}
code:
  script: [echo code]
  rules:
    - changes: {paths: ['src/**/*'], compare_to: refs/heads/main}
tests:
  script: [echo tests]
  rules:
    - changes: {paths: ['tests/**/*'], compare_to: main}
",
    );
    git(c.path(), &["checkout", "-q", "-b", "feature"]);
    c.write("docs/guide.md", "guide\n");
    c.commit();
    // main moves on: its change is not the branch's.
    git(c.path(), &["checkout", "-q", "main"]);
    c.write("tests/t.sh", "true\n");
    c.commit();
    git(c.path(), &["checkout", "-q", "feature"]);
    c.write("src/lib.rs", "// not committed\n");

    let r = c.run(&[]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.jobs(), jobs(&[("code", "success"), ("docs", "success")]));
    let r = c.run(&["--committed"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert_eq!(r.jobs(), jobs(&[("docs", "success")]));

    // A ref the checkout does not have: GitLab's error, with the job's place.
    c.write(
        ".gitlab-ci.yml",
        "job:\n  script: [echo]\n  rules:\n    - changes: {paths: [a], compare_to: nowhere}\n",
    );
    let r = c.run(&[]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr
            .contains("Failed to parse rule for job: rules:changes:compare_to is not a valid ref"),
        "{}",
        r.explain()
    );
}

/// `gantry run --merge-request`: GitLab's merge request pipeline of the current branch
/// (no `CI_COMMIT_BRANCH`, the `CI_MERGE_REQUEST_*` variables, `rules:changes` from the
/// merge base), and `--merged-result`, whose jobs get the merge of the two branches.
#[test]
fn merge_request_pipelines_run_the_branch_as_gitlab_would() {
    let c = Checkout::new(
        r#"workflow:
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
    - if: $CI_COMMIT_BRANCH
mr:
  rules: [{if: $CI_PIPELINE_SOURCE == "merge_request_event"}]
  script:
    - echo "branch=${CI_COMMIT_BRANCH-unset} ref=$CI_COMMIT_REF_NAME source=$CI_PIPELINE_SOURCE"
    - echo "mr=$CI_MERGE_REQUEST_IID src=$CI_MERGE_REQUEST_SOURCE_BRANCH_NAME dst=$CI_MERGE_REQUEST_TARGET_BRANCH_NAME type=$CI_MERGE_REQUEST_EVENT_TYPE"
    - echo "base=$CI_MERGE_REQUEST_DIFF_BASE_SHA srcsha=$CI_MERGE_REQUEST_SOURCE_BRANCH_SHA dstsha=$CI_MERGE_REQUEST_TARGET_BRANCH_SHA"
    - echo "open=$CI_OPEN_MERGE_REQUESTS sha=$CI_COMMIT_SHA"
    - echo "files=$(ls | tr '\n' ' ')"
docs:
  rules: [{changes: ['docs/**/*']}]
  script: [echo docs]
branch:
  rules: [{if: $CI_PIPELINE_SOURCE == "push"}]
  script: [echo branch]
"#,
    );
    let base = git(c.path(), &["rev-parse", "HEAD"]);
    git(c.path(), &["checkout", "-q", "-b", "feature"]);
    c.write("feature.txt", "feature");
    c.commit();
    let head = git(c.path(), &["rev-parse", "HEAD"]);
    git(c.path(), &["checkout", "-q", "main"]);
    c.write("main.txt", "main");
    c.write("docs/guide.md", "guide");
    c.commit();
    let main = git(c.path(), &["rev-parse", "HEAD"]);
    git(c.path(), &["checkout", "-q", "feature"]);

    let r = c.run(&["--merge-request"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    // main's docs change is not the merge request's: no `docs` job.
    assert_eq!(r.jobs(), jobs(&[("mr", "success")]), "{}", r.explain());
    for line in [
        "branch=unset ref=feature source=merge_request_event".to_owned(),
        "mr=1 src=feature dst=main type=detached".to_owned(),
        format!("base={base} srcsha= dstsha="),
        format!("open=acme/widget!1 sha={head}"),
        "files=feature.txt".to_owned(),
    ] {
        assert!(r.logged("mr", &line), "{line}\n{}", r.explain());
    }

    let r = c.run(&["--merge-request=main", "--merged-result"]);
    assert_eq!(r.code, 0, "{}", r.explain());
    assert!(r.logged("mr", "type=merged_result"), "{}", r.explain());
    assert!(
        r.logged("mr", &format!("srcsha={head} dstsha={main}")),
        "{}",
        r.explain()
    );
    // The jobs run the merge: main's files are there too.
    assert!(
        r.logged("mr", "files=docs feature.txt main.txt"),
        "{}",
        r.explain()
    );

    let r = c.run(&["--merge-request=nope"]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr.contains("the target branch `nope` does not exist"),
        "{}",
        r.explain()
    );
    git(c.path(), &["checkout", "-q", "main"]);
    let r = c.run(&["--merge-request"]);
    assert_eq!(r.code, 2, "{}", r.explain());
    assert!(
        r.stderr.contains("both its source and its target"),
        "{}",
        r.explain()
    );
}
