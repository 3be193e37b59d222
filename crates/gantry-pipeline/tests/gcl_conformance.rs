//! The gitlab-ci-local corpus (`../shared/conformance/gitlab-ci-local/`), lint-only records.
//!
//! gitlab-ci-local ("gcl") runs pipelines on a developer machine; its integration tests were
//! turned into neutral records (`expectations.yaml`, one per upstream test, and
//! `cases/<case>/`). This harness runs the records that stop before any job runs — merged
//! configuration previews, job listings, dependency-chain validation and configuration
//! errors — against [`compile`], in GitLab's terms:
//!
//! - selection: scope `gitlab` or `mixed`, and `run.preview`/`list`/`list_csv`/
//!   `validate_dependency_chain`/`parse_only`, or `expect_list_*`/`expect_jobs_config`, or an
//!   `expect_error` that aborts before any job runs (three records whose error comes from a
//!   running job are left out: see [`RUNTIME_ERRORS`]);
//! - [`OUT_OF_SCOPE`] records need the network or a gcl-only mechanism; they are listed with
//!   the reason and not run;
//! - an error record passes when compilation fails and, where GitLab's wording is known, one
//!   of our messages contains GitLab's key phrase ([`gitlab_phrases`]); gcl's own texts are
//!   never required;
//! - a success record passes when the configuration is valid and the compiled pipeline shows
//!   the expected facts: for previews, every key of the merged dump (stages, global
//!   variables, jobs with stage, scripts, variables, image, artifacts, cache, environment,
//!   ...); for listings, job names, stage, `when`, `allow_failure`, environment and needs.
//!
//! In-scope records that do not pass are listed in `tests/gcl-exceptions.txt` with a reason
//! (`<id> — <reason>`); the test fails on an unlisted failure or a listed record that passes.
//! It prints `gitlab-ci-local lint records: N/M passed`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gantry_pipeline::expand::{Unknown, expand_server};
use gantry_pipeline::yaml::{self, FileId, Limits};
use gantry_pipeline::{
    CacheKey, Compiled, Context, Job, Loader, Options, Pipeline, PipelineInfo, Source, compile,
};
use gantry_test_support::corpus::{self, gcl, gcl::REMOTE, gcl::scalar, gcl::str_list};
use serde_json::Value as J;

/// The corpus' git fixture (README, "Running a record").
const SHA: &str = "02618988a1864b3d06cfee3bd79f8baa2dd21407";

/// `expect_error` records whose error comes from running a job, not from the configuration.
const RUNTIME_ERRORS: [&str; 3] = ["dependency-proxy#1", "dependency-proxy#2", "image#9"];

/// Selected records that cannot be checked by a local, offline lint.
const OUT_OF_SCOPE: &[(&str, &str)] = &[
    (
        "include-component#1",
        "include:component fetched from gitlab.com (network)",
    ),
    (
        "include-component#2",
        "include:component fetched from gitlab.com (network)",
    ),
    (
        "include-component#3",
        "include:component fetched from gitlab.com (network)",
    ),
    (
        "include-component#4",
        "include:component fetched from gitlab.com (network)",
    ),
    (
        "include-component#5",
        "include:component fetched from gitlab.com (network)",
    ),
    (
        "include-component#6",
        "include:component of the same project at the real HEAD commit: components are not resolved offline",
    ),
    (
        "include-component#7",
        "include:component fetched from gitlab.com (network)",
    ),
    (
        "include-invalid-project-file-ref#1",
        "include:project fetched from gitlab.com (network)",
    ),
    (
        "include-invalid-remote#1",
        "include:remote answered by gcl's HTTP stub (404); remote includes are not resolved offline",
    ),
    (
        "component-inputs-cli#1",
        "inputs from gcl's inputs file for a component include",
    ),
    (
        "component-inputs-cli#2",
        "inputs from gcl's --input option for a component include",
    ),
    (
        "component-inputs-cli#3",
        "gcl's --input/inputs-file precedence for a component include",
    ),
    (
        "component-inputs-edge-cases#1",
        "gcl's --input precedence for a component include",
    ),
    (
        "component-inputs-edge-cases#2",
        "gcl's inputs-file/--input precedence for a component include",
    ),
    (
        "component-inputs-multiple#1",
        "gcl's --input option for component includes",
    ),
    (
        "component-inputs-multiple#2",
        "gcl's --input/inputs-file precedence for component includes",
    ),
    (
        "component-inputs-multiple#3",
        "gcl's inputs file for component includes",
    ),
    (
        "component-inputs-multiple#4",
        "gcl's --input/inputs-file precedence for component includes",
    ),
    (
        "component-inputs-multiple#5",
        "gcl's --input/inputs-file precedence for component includes",
    ),
    (
        "include-nested#5",
        "include limit lowered by gcl's --maximum-includes option (GitLab: instance setting)",
    ),
    (
        "include-project-file#3",
        "include:project fetched from gitlab.com (network)",
    ),
    (
        "include-project-file-wildcard#1",
        "include:project fetched from gitlab.com (network)",
    ),
];

/// Key phrases of GitLab's message for the error each record expects (its `expect_error`
/// is gcl's wording, or GitLab's with gcl decorations). Every phrase must occur in one of
/// our error messages. Records absent here only need the compilation to fail.
fn gitlab_phrases(id: &str) -> &'static [&'static str] {
    match id {
        "cache-key-invalid-files#1" => {
            &["cache:key:files config has too many items (maximum is 2)"]
        }
        "cache-key-invalid-files#2" => &["cache:key:files config requires at least 1 item"],
        // `cache` is a composable array: its item is located `cache:cache`.
        "cache-paths-not-array#1" => {
            &["jobs:test-job:cache:cache:paths config should be an array of strings"]
        }
        "dependencies-not-found#1" => &["test-job job: undefined dependency: invalid"],
        "include-invalid-local#1" => &["Local file `.gitlab-ci-invalid.yml` does not exist!"],
        "include-local#4" => &["Local file `../include-local/.gitlab-ci.yml` does not exist!"],
        "include-local#5" => &["Local file `./.gitlab-ci.yml` does not exist!"],
        "invalid-stages#1" => &["stages config should be an array of strings"],
        "needs-contains-dependencies#1" => {
            &["jobs:test-job dependencies the two should be part of needs"]
        }
        "needs-invalid-stage#1" => {
            &["build-job job: need test-job is not defined in current or prior stages"]
        }
        "needs-not-array#1" => &["jobs:dev-job:needs config can only be a hash or an array"],
        // The expectation of the record (gcl's wording); GitLab keeps the plain need, see
        // gcl-exceptions.txt.
        "needs-parallel-matrix-error#1" => &["test-job job: undefined need: build-job: [foo]"],
        "needs-parallel-matrix-error#2" => {
            &["test-plain-parallel job: undefined need: build-int: [foo]"]
        }
        "needs-parallel-matrix-error#3" => {
            &["test-zero-match job: undefined need: build-foo: [nope]"]
        }
        "needs-parallel-matrix-expressions-unknown-identifier#1" => {
            &["linux:test job: 'NOPE' does not exist in matrix configuration"]
        }
        "needs-unspecified-job#1" => &["test-job job: undefined need: invalid"],
        "never-needs#1" => &[
            "'test-job' job needs 'never-job' job, but 'never-job' does not exist in the pipeline.",
        ],
        "no-script#1" => {
            &["jobs test-job config should implement the script:, run:, or trigger: keyword"]
        }
        "reference#6" | "script-multidimension#2" => {
            &["script config should be a string or a nested array of strings up to 10 levels deep"]
        }
        "reference-circular-chain#1" => {
            &["!reference [\"test-job\", \"script\"] is part of a circular chain"]
        }
        "rules-blank#1" => &["jobs:job:rules config can't be blank"],
        "rules-curly-bracket-if#1" => &["jobs:job:rules:rule if invalid expression syntax"],
        "schema-validation#1" => &[
            "jobs:test script can't be blank",
            "jobs:test when should be one of: on_success, on_failure, always, manual, delayed",
            "jobs:test:artifacts:reports junit should be an array of strings or a string",
            "jobs:test config contains unknown keys: data",
        ],
        "schema-validation#3" => &[
            "jobs:error1:variables config should be a hash",
            "jobs:error4:variables config should be a hash",
        ],
        "schema-validation#4" => &[
            "jobs:error1:variables config should be a hash",
            "jobs:error5:variables config should be a hash",
        ],
        "schema-validation#5" => &[
            "jobs:error1:variables config should be a hash",
            "jobs:error6:variables config should be a hash",
        ],
        "script-blank#1" => &["jobs:test-job script can't be blank"],
        "self-dependency#1" => &["The pipeline has circular dependencies"],
        "stage-not-found#1" => &[
            "test-job job: chosen stage invalid does not exist; available stages are .pre, build, test, deploy, .post",
        ],
        "when#1" => &[
            "jobs:test-job when should be one of: on_success, on_failure, always, manual, delayed",
        ],
        "include-inputs#2" => &["`required_inputs` input: required value has not been provided"],
        "include-inputs#3" | "include-inputs#4" => &["unknown interpolation key: `foo`"],
        "include-inputs#8" => &["`array_input` input: provided value is not an array"],
        "include-inputs#9" => &["`string_input` input: provided value is not a string"],
        "include-inputs#10" => &["`number_input` input: provided value is not a number"],
        "include-inputs#14" => &["`boolean_input` input: provided value is not a boolean"],
        "include-inputs#15" => {
            &["header:spec:inputs:unsupported_type_input input type unknown value: foo"]
        }
        "include-inputs#16" => &[
            "`options_input` input: `fizz` cannot be used because it is not in the list of allowed options",
        ],
        "include-inputs#18" => {
            &["`options_input` input: Options can only be used with string and number inputs"]
        }
        "include-inputs#19" => &["too many functions in interpolation block"],
        "include-inputs#21" => {
            &["`version` input: provided value does not match required RegEx pattern"]
        }
        "include-inputs#23" => &["`version` input: invalid regular expression"],
        "include-nested#2" | "include-nested#4" => &["Maximum of 150 nested includes are allowed!"],
        "validate-dependency-chain#2" => &[
            "'alpine-root' job needs 'kaniko-root' job, but 'kaniko-root' does not exist in the pipeline.",
        ],
        "validate-dependency-chain#3" => &[
            "'alpine-guest' job needs 'alpine-root' job, but 'alpine-root' does not exist in the pipeline.",
        ],
        _ => &[],
    }
}

/// A case folder seen as a git checkout: paths are tree paths, so a `.` or `..` component
/// (or an empty one) names nothing, as in a repository lookup.
struct CaseDir {
    root: PathBuf,
}

fn tree_path(p: &str) -> bool {
    !p.is_empty() && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

impl Loader for CaseDir {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        if !tree_path(path) {
            return Ok(None);
        }
        match std::fs::read_to_string(self.root.join(path)) {
            Ok(s) => Ok(Some(s)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::IsADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(gantry_pipeline::ReadError::Io(e.to_string())),
        }
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        Ok({
            let mut out = Vec::new();
            walk(&self.root, &self.root, &mut out);
            out.sort();
            out
        })
    }
}

/// Every file below `dir`, dot-files included.
fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(base, &p, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

/// `git@host:ns/name.git` or `https://host/ns/name.git` → (server URL, namespace, name).
fn parse_remote(remote: &str) -> (String, String, String) {
    let (host, path) = if let Some(rest) = remote.strip_prefix("git@") {
        rest.split_once(':').unwrap_or((rest, ""))
    } else {
        let rest = remote.split_once("://").map_or(remote, |(_, r)| r);
        rest.split_once('/').unwrap_or((rest, ""))
    };
    let path = path.trim_end_matches(".git");
    let (ns, name) = path.rsplit_once('/').unwrap_or(("", path));
    (format!("https://{host}"), ns.to_owned(), name.to_owned())
}

/// The pipeline context of a record: the corpus' git fixture (with the record's
/// `git_fixture` overrides), a push pipeline, `run.variables` as pipeline variables.
fn context(rec: &J, config_path: &str) -> Context {
    let fixture = rec.get("git_fixture").and_then(J::as_object);
    let remote = fixture
        .and_then(|f| f.get("remote"))
        .and_then(J::as_str)
        .unwrap_or(REMOTE);
    let (server_url, project_namespace, project_name) = parse_remote(remote);
    let info = PipelineInfo {
        ref_name: "master".into(),
        is_tag: false,
        source: Source::Push,
        sha: SHA.into(),
        default_branch: "main".into(),
        project_name,
        project_namespace,
        server_url,
        config_path: config_path.into(),
        user_login: "test".into(),
        user_name: "Testersen".into(),
        user_email: "test@test.com".into(),
        user_id: 990,
        ..PipelineInfo::default()
    };
    let changed = fixture
        .and_then(|f| f.get("changed_files_vs_default_branch"))
        .map(|v| str_list(Some(v)));
    let vars: Vec<(String, String)> = rec
        .pointer("/run/variables")
        .and_then(J::as_object)
        .map(|o| o.iter().map(|(k, v)| (k.clone(), scalar(v))).collect())
        .unwrap_or_default();
    Context::new(&info, &vars, changed)
}

fn is_selected(rec: &J) -> bool {
    let scope = rec.get("scope").and_then(J::as_str).unwrap_or_default();
    if scope != "gitlab" && scope != "mixed" {
        return false;
    }
    let id = rec.get("id").and_then(J::as_str).unwrap_or_default();
    let run = |k: &str| {
        rec.get("run")
            .and_then(|r| r.get(k))
            .is_some_and(|v| v != &J::Bool(false) && !v.is_null())
    };
    let kind = [
        "preview",
        "list",
        "list_csv",
        "validate_dependency_chain",
        "parse_only",
    ]
    .iter()
    .any(|k| run(k))
        || [
            "expect_list_descriptions",
            "expect_list_job_names_include",
            "expect_jobs_config",
        ]
        .iter()
        .any(|k| rec.get(*k).is_some());
    kind || (rec.get("expect_error").is_some() && !RUNTIME_ERRORS.contains(&id))
}

fn run_record(rec: &J) -> (Compiled, Context) {
    let case = rec
        .get("case")
        .and_then(J::as_str)
        .expect("record has a case");
    let mut root = gcl::dir().join("cases").join(case);
    if let Some(dir) = rec.pointer("/run/project_dir").and_then(J::as_str) {
        root = root.join(dir);
    }
    let file = rec
        .pointer("/run/file")
        .and_then(J::as_str)
        .unwrap_or(".gitlab-ci.yml")
        .to_owned();
    let ctx = context(rec, &file);
    let opts = Options {
        config_path: file,
        ..Options::default()
    };
    (compile(&opts, &ctx, &CaseDir { root }), ctx)
}

fn error_messages(c: &Compiled) -> Vec<String> {
    c.errors.iter().map(|e| e.message.clone()).collect()
}

/// Check one record; `Err` says what differs.
fn check(rec: &J, c: &Compiled, ctx: &Context) -> Result<(), String> {
    let id = rec.get("id").and_then(J::as_str).unwrap_or_default();
    let errors = error_messages(c);
    let expects_error = rec.get("expect_error").is_some()
        || rec.get("expect_exit").and_then(J::as_str) == Some("failure");
    if expects_error {
        if errors.is_empty() {
            return Err(format!(
                "expected an error ({}), the configuration is valid",
                rec.get("expect_error")
                    .map(J::to_string)
                    .unwrap_or_default()
            ));
        }
        for phrase in gitlab_phrases(id) {
            if !errors.iter().any(|e| e.contains(phrase)) {
                return Err(format!("no error contains `{phrase}`; errors: {errors:?}"));
            }
        }
        // An optional need on the excluded job is no error.
        if id == "never-needs#1" && errors.iter().any(|e| e.contains("test-job-optional")) {
            return Err(format!(
                "the optional need of test-job-optional is reported: {errors:?}"
            ));
        }
        return Ok(());
    }
    if !errors.is_empty() {
        return Err(format!(
            "expected a valid configuration, got errors: {errors:?}"
        ));
    }
    let p = c.pipeline.as_ref().ok_or("valid, but no pipeline")?;
    let run = rec.get("run").cloned().unwrap_or(J::Null);
    let dump = rec.get("expect_stdout_equals").and_then(J::as_str);
    if run.get("preview").is_some_and(|v| v == &J::Bool(true)) {
        if let Some(text) = dump {
            check_dump(text, p)?;
        }
    }
    if run.get("list").is_some_and(|v| v == &J::Bool(true)) {
        check_list(rec, p, ctx, false)?;
    }
    if run.get("list_csv").is_some_and(|v| v == &J::Bool(true)) {
        check_list(rec, p, ctx, true)?;
    }
    if let Some(cfg) = rec.get("expect_jobs_config").and_then(J::as_object) {
        check_jobs_config(cfg, p, ctx)?;
    }
    extra_facts(id, p)?;
    if !p.created && !NOT_CREATED.contains(&id) {
        return Err(format!(
            "pipeline not created: {}",
            p.not_created_reason.as_deref().unwrap_or("?")
        ));
    }
    Ok(())
}

/// Success records after which GitLab creates no pipeline (their preview is the merged YAML,
/// taken before rules).
const NOT_CREATED: [&str; 1] = ["include-inputs#11"];

/// Facts a record states in prose or that follow from rules (the preview dump is taken
/// before rules apply).
fn extra_facts(id: &str, p: &Pipeline) -> Result<(), String> {
    let job = |name: &str| {
        p.jobs
            .iter()
            .find(|j| j.name == name)
            .ok_or_else(|| format!("job `{name}` missing"))
    };
    let eq = |what: &str, got: String, want: &str| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what}: expected `{want}`, got `{got}`"))
        }
    };
    match id {
        // Under a push pipeline neither rule of test_job matches.
        "include-inputs#11" if p.created || !p.jobs.is_empty() => {
            return Err(format!(
                "expected no pipeline (no rule of test_job matches a push), got jobs {:?}",
                names(p)
            ));
        }
        "include-nested#1" => {
            eq("jobs", names(p).join(","), "job")?;
            eq("stages", p.stages.join(","), ".pre,test,.post")?;
            eq("job script", job("job")?.script.join("\n"), "echo 1")?;
        }
        "include-nested#3" => {
            eq("jobs", names(p).join(","), "job")?;
            eq("stages", p.stages.join(","), ".pre,build,test,deploy,.post")?;
        }
        "reference#9" => eq(
            "test-job when (rule matched)",
            job("test-job")?.when.as_str().to_owned(),
            "always",
        )?,
        "schema-validation#2" => {
            let j = job("my-job")?;
            eq(
                "my-job when (rule matched)",
                j.when.as_str().to_owned(),
                "on_success",
            )?;
            if j.artifacts.is_some() {
                return Err("my-job: `artifacts:` null must count as unspecified".into());
            }
        }
        "validate-dependency-chain#1" => {
            eq(
                "jobs",
                names(p).join(","),
                "alpine-guest,alpine-root,kaniko-root,kaniko-guest,build-job-1,test-job,build-job-2",
            )?;
            eq(
                "alpine-guest needs",
                needs(job("alpine-guest")?).unwrap_or_default(),
                "alpine-root",
            )?;
            eq(
                "alpine-root needs",
                needs(job("alpine-root")?).unwrap_or_default(),
                "kaniko-root",
            )?;
        }
        "manual#8" => {
            let pre = job("pre-job")?;
            eq("pre-job when", pre.when.as_str().to_owned(), "manual")?;
            eq(
                "pre-job allow_failure",
                pre.allow_failure.to_string(),
                "false",
            )?;
            eq(
                "pre-job VAL",
                pre.variables
                    .get("VAL")
                    .map(|v| v.value.clone())
                    .unwrap_or_default(),
                "im a rules variable",
            )?;
            eq(
                "test-job needs",
                needs(job("test-job")?).unwrap_or_default(),
                "pre-job",
            )?;
        }
        _ => {}
    }
    Ok(())
}

fn names(p: &Pipeline) -> Vec<&str> {
    p.jobs.iter().map(|j| j.name.as_str()).collect()
}

fn needs(j: &Job) -> Option<String> {
    j.needs.as_ref().map(|n| {
        n.iter()
            .map(|n| n.job.as_str())
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// Compare gcl's merged-configuration dump (`--preview`) with the compiled pipeline.
fn check_dump(text: &str, p: &Pipeline) -> Result<(), String> {
    let docs = yaml::parse_documents(text, FileId(0), Limits::default())
        .map_err(|e| format!("expected dump does not parse: {e}"))?;
    let dump = docs.first().map(|d| d.to_json()).unwrap_or(J::Null);
    let dump = dump.as_object().ok_or("expected dump is not a mapping")?;
    let mut problems = Vec::new();
    let mut want_jobs = Vec::new();
    for (key, value) in dump {
        match key.as_str() {
            "stages" => {
                let want = str_list(Some(value));
                if want != p.stages {
                    problems.push(format!("stages: expected {want:?}, got {:?}", p.stages));
                }
            }
            "variables" => {
                let want: BTreeMap<String, String> = value
                    .as_object()
                    .map(|o| o.iter().map(|(k, v)| (k.clone(), scalar(v))).collect())
                    .unwrap_or_default();
                let got: BTreeMap<String, String> = p
                    .variables
                    .iter()
                    .map(|(k, v)| (k.clone(), v.value.clone()))
                    .collect();
                if want != got {
                    problems.push(format!("global variables: expected {want:?}, got {got:?}"));
                }
            }
            _ => want_jobs.push((key.as_str(), value)),
        }
    }
    // Jobs: the dump is taken before rules, so a job with `rules` may be absent.
    for (name, value) in &want_jobs {
        match p.jobs.iter().find(|j| j.name == *name) {
            Some(job) => problems.extend(compare_job(name, value, job)),
            None if value.get("rules").is_some() => {}
            None => problems.push(format!("job `{name}` missing")),
        }
    }
    for j in &p.jobs {
        if !want_jobs.iter().any(|(n, _)| *n == j.name) {
            problems.push(format!("unexpected job `{}`", j.name));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn compare_job(name: &str, want: &J, job: &Job) -> Vec<String> {
    let mut problems = Vec::new();
    let mut diff = |what: &str, want: String, got: String| {
        if want != got {
            problems.push(format!("{name}.{what}: expected {want}, got {got}"));
        }
    };
    let obj = want.as_object().cloned().unwrap_or_default();
    diff(
        "stage",
        obj.get("stage").map_or("test".into(), scalar),
        job.stage.clone(),
    );
    diff(
        "script",
        format!("{:?}", str_list(obj.get("script"))),
        format!("{:?}", job.script),
    );
    diff(
        "before_script",
        format!("{:?}", str_list(obj.get("before_script"))),
        format!("{:?}", job.before_script),
    );
    diff(
        "after_script",
        format!("{:?}", str_list(obj.get("after_script"))),
        format!("{:?}", job.after_script),
    );
    let want_vars: BTreeMap<String, String> = obj
        .get("variables")
        .and_then(J::as_object)
        .map(|o| o.iter().map(|(k, v)| (k.clone(), scalar(v))).collect())
        .unwrap_or_default();
    let got_vars: BTreeMap<String, String> = job
        .variables
        .iter()
        .map(|(k, v)| (k.clone(), v.value.clone()))
        .collect();
    diff(
        "variables",
        format!("{want_vars:?}"),
        format!("{got_vars:?}"),
    );
    let want_image = obj
        .get("image")
        .map(|i| i.get("name").map_or_else(|| scalar(i), scalar));
    diff(
        "image",
        format!("{want_image:?}"),
        format!("{:?}", job.image.as_ref().map(|i| i.name.clone())),
    );
    for (key, value) in &obj {
        match key.as_str() {
            "stage" | "script" | "before_script" | "after_script" | "variables" | "image" => {}
            // Shown as written; their effects are the other keys (inherit) and the job's
            // presence and `when` (rules, checked in `extra_facts`).
            "inherit" | "rules" => {}
            "artifacts" => {
                let want = str_list(value.get("paths"));
                let got = job
                    .artifacts
                    .as_ref()
                    .map(|a| a.paths.clone())
                    .unwrap_or_default();
                diff("artifacts.paths", format!("{want:?}"), format!("{got:?}"));
            }
            "environment" => {
                let want = value.get("name").map_or_else(|| scalar(value), scalar);
                diff(
                    "environment.name",
                    want,
                    job.environment
                        .as_ref()
                        .map(|e| e.name.clone())
                        .unwrap_or_default(),
                );
            }
            "cache" => {
                let want: Vec<String> = value
                    .as_array()
                    .cloned()
                    .unwrap_or_else(|| vec![value.clone()])
                    .iter()
                    .map(cache_text)
                    .collect();
                let got: Vec<String> = job
                    .caches
                    .iter()
                    .map(|c| {
                        let key = match &c.key {
                            CacheKey::Literal(k) => k.clone(),
                            other => format!("{other:?}"),
                        };
                        format!(
                            "key={key} paths={:?} policy={} when={}",
                            c.paths,
                            c.policy,
                            serde_json::to_value(c.when)
                                .map(|v| scalar(&v))
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                diff("cache", format!("{want:?}"), format!("{got:?}"));
            }
            "when" => diff("when", scalar(value), job.when.as_str().to_owned()),
            "allow_failure" => diff(
                "allow_failure",
                scalar(value),
                job.allow_failure.to_string(),
            ),
            "tags" => diff(
                "tags",
                format!("{:?}", str_list(Some(value))),
                format!("{:?}", job.tags),
            ),
            "needs" => {
                let want: Vec<String> = value
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|n| n.get("job").map_or_else(|| scalar(n), scalar))
                            .collect()
                    })
                    .unwrap_or_default();
                let got: Vec<String> = job.needs.iter().flatten().map(|n| n.job.clone()).collect();
                diff("needs", format!("{want:?}"), format!("{got:?}"));
            }
            other => diff(
                other,
                "(checked)".into(),
                "key not checked by the harness".into(),
            ),
        }
    }
    problems
}

fn cache_text(c: &J) -> String {
    let key = c.get("key").map_or_else(|| "default".into(), scalar);
    format!(
        "key={key} paths={:?} policy={} when={}",
        str_list(c.get("paths")),
        c.get("policy").map_or_else(|| "pull-push".into(), scalar),
        c.get("when").map_or_else(|| "on_success".into(), scalar)
    )
}

/// A job's environment name as the job sees it: expanded with its variables (matrix and
/// rules variables included), the global and pipeline variables.
fn environment_name(j: &Job, p: &Pipeline, ctx: &Context) -> String {
    let Some(env) = &j.environment else {
        return String::new();
    };
    let lookup = |n: &str| -> Option<String> {
        ctx.pipeline
            .get(n)
            .cloned()
            .or_else(|| j.variables.get(n).map(|v| v.value.clone()))
            .or_else(|| j.inherited_variables.get(n).map(|v| v.value.clone()))
            .or_else(|| p.variables.get(n).map(|v| v.value.clone()))
            .or_else(|| ctx.predefined.get(n).cloned())
    };
    expand_server(&env.name, &lookup, Unknown::Empty)
}

/// gcl's job listing (`--list` table or `--list-csv`): every expected row must match a job.
fn check_list(rec: &J, p: &Pipeline, ctx: &Context, csv: bool) -> Result<(), String> {
    let lines: Vec<String> = rec
        .get("expect_stdout_contains")
        .and_then(J::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|l| l.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let Some((header, rows)) = lines.split_first() else {
        return Err("no listing lines in the record".into());
    };
    let columns: Vec<(String, usize)> = if csv {
        header.split(';').map(|c| (c.to_owned(), 0)).collect()
    } else {
        // Columns start where the header words start.
        let mut cols = Vec::new();
        let mut prev_space = true;
        let mut word_start = 0;
        let chars: Vec<char> = header.chars().collect();
        for (i, ch) in chars.iter().enumerate() {
            if !ch.is_whitespace() && prev_space {
                word_start = i;
            }
            if ch.is_whitespace() && !prev_space {
                cols.push((chars[word_start..i].iter().collect::<String>(), word_start));
            }
            prev_space = ch.is_whitespace();
        }
        if !prev_space {
            cols.push((chars[word_start..].iter().collect::<String>(), word_start));
        }
        cols
    };
    let mut problems = Vec::new();
    for row in rows {
        let cells: Vec<String> = if csv {
            row.split(';').map(str::to_owned).collect()
        } else {
            let chars: Vec<char> = row.chars().collect();
            columns
                .iter()
                .enumerate()
                .map(|(i, (_, start))| {
                    let end = columns
                        .get(i + 1)
                        .map_or(chars.len(), |c| c.1)
                        .min(chars.len());
                    chars
                        .get((*start).min(chars.len())..end)
                        .map(|s| s.iter().collect::<String>().trim().to_owned())
                        .unwrap_or_default()
                })
                .collect()
        };
        let cell = |name: &str| {
            columns
                .iter()
                .position(|(c, _)| c == name)
                .and_then(|i| cells.get(i))
                .cloned()
                .unwrap_or_default()
        };
        let name = cell("name");
        let Some(j) = p.jobs.iter().find(|j| j.name == name) else {
            problems.push(format!("listed job `{name}` missing"));
            continue;
        };
        let mut diff = |what: &str, want: String, got: String| {
            if want != got {
                problems.push(format!("{name}.{what}: expected `{want}`, got `{got}`"));
            }
        };
        diff("stage", cell("stage"), j.stage.clone());
        diff("when", cell("when"), j.when.as_str().to_owned());
        let af = if csv {
            cell("allowFailure")
        } else {
            cell("allow_failure")
        };
        diff("allow_failure", af, j.allow_failure.to_string());
        diff(
            "environment",
            cell("environment"),
            environment_name(j, p, ctx),
        );
        let want_needs = cell("needs");
        let got_needs = needs(j).map(|n| format!("[{n}]")).unwrap_or_default();
        diff("needs", want_needs, got_needs);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// gcl's parsed jobs (`expect_jobs_config`): the exact job set and the given keys.
fn check_jobs_config(
    cfg: &serde_json::Map<String, J>,
    p: &Pipeline,
    ctx: &Context,
) -> Result<(), String> {
    let mut problems = Vec::new();
    let want: Vec<&str> = cfg.keys().map(String::as_str).collect();
    let got = names(p);
    let (mut w, mut g) = (want.clone(), got.clone());
    w.sort_unstable();
    g.sort_unstable();
    if w != g {
        problems.push(format!("jobs: expected {want:?}, got {got:?}"));
    }
    for (name, facts) in cfg {
        let Some(j) = p.jobs.iter().find(|j| j.name == *name) else {
            continue;
        };
        for (key, value) in facts.as_object().cloned().unwrap_or_default() {
            match key.as_str() {
                "environment" => {
                    let want = value.get("name").map_or_else(|| scalar(&value), scalar);
                    let got = environment_name(j, p, ctx);
                    if want != got {
                        problems.push(format!(
                            "{name}.environment.name: expected `{want}`, got `{got}`"
                        ));
                    }
                }
                other => problems.push(format!("{name}.{other}: key not checked by the harness")),
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[test]
fn gitlab_ci_local_lint_records() {
    let entries = &gcl::records();
    let exceptions =
        corpus::exceptions(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gcl-exceptions.txt"));
    let mut selected = Vec::new();
    for rec in entries {
        if is_selected(rec) {
            selected.push(rec);
        }
    }
    let mut out_of_scope = Vec::new();
    let (mut passed, mut total) = (0, 0);
    let mut unexpected = Vec::new();
    let mut stale = Vec::new();
    let mut excepted = Vec::new();
    for rec in &selected {
        let id = rec.get("id").and_then(J::as_str).unwrap_or_default();
        if let Some((_, why)) = OUT_OF_SCOPE.iter().find(|(o, _)| *o == id) {
            out_of_scope.push(format!("  {id}: {why}"));
            continue;
        }
        total += 1;
        let (compiled, ctx) = run_record(rec);
        if std::env::var("GCL_RECORD").is_ok_and(|r| r == id) {
            let p = compiled.pipeline.as_ref();
            println!(
                "{id}: errors {:?}\n  stages {:?}\n  jobs {:#?}",
                error_messages(&compiled),
                p.map(|p| &p.stages),
                p.map(|p| &p.jobs)
            );
        }
        match check(rec, &compiled, &ctx) {
            Ok(()) => {
                passed += 1;
                if exceptions.contains_key(id) {
                    stale.push(id.to_owned());
                }
            }
            Err(why) => match exceptions.get(id) {
                Some(reason) => excepted.push(format!("  {id}: {reason}\n      ({why})")),
                None => unexpected.push(format!("{id}: {why}")),
            },
        }
    }
    let listed_unknown: Vec<&String> = exceptions
        .keys()
        .filter(|k| {
            !selected
                .iter()
                .any(|r| r.get("id").and_then(J::as_str) == Some(k.as_str()))
        })
        .collect();
    println!(
        "gitlab-ci-local: {} records selected, {} out of scope (not run):",
        selected.len(),
        out_of_scope.len()
    );
    println!("{}", out_of_scope.join("\n"));
    println!(
        "gitlab-ci-local: {} listed exceptions (tests/gcl-exceptions.txt):",
        excepted.len()
    );
    println!("{}", excepted.join("\n"));
    println!("gitlab-ci-local lint records: {passed}/{total} passed");
    assert!(
        OUT_OF_SCOPE.iter().all(|(o, _)| selected
            .iter()
            .any(|r| r.get("id").and_then(J::as_str) == Some(*o))),
        "an OUT_OF_SCOPE id is not a selected record"
    );
    assert!(
        listed_unknown.is_empty(),
        "gcl-exceptions.txt lists records that are not in scope: {listed_unknown:?}"
    );
    assert!(
        stale.is_empty(),
        "gcl-exceptions.txt lists records that now pass (remove them): {stale:?}"
    );
    assert!(
        unexpected.is_empty(),
        "{} gitlab-ci-local records fail and are not listed in gcl-exceptions.txt:\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
}
