//! The step runner end to end: real step files in a temporary project, real processes
//! (bash), real git repositories for git references.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use gantry_steps::result::Status;
use gantry_steps::{
    Engine, JobContext, Loader, LocalLauncher, PathMap, StepResult, parse_run_list,
};
use serde_json::{Value, json};

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn job(dir: &Path) -> JobContext {
    let vars = json!({"CI_PROJECT_NAME": "widget"});
    JobContext {
        work_dir: dir.join("project"),
        vars: vars.as_object().unwrap().clone(),
        env: [("BASE".to_owned(), "base".to_owned())]
            .into_iter()
            .collect(),
        files_dir: dir.join("files"),
    }
}

async fn run(dir: &Path, steps: Value) -> (StepResult, String) {
    let steps = parse_run_list(&steps, "").unwrap();
    let launcher = LocalLauncher::new(false);
    let loader = Loader {
        paths: PathMap::identity(),
        cache_dir: dir.join("cache"),
    };
    let engine = Engine::new(&launcher, loader, job(dir));
    let result = engine.run(&steps).await;
    (result, launcher.output())
}

/// The semver example of the spec: an exec step writing an output, a script step reading
/// it, an export reaching later steps.
#[tokio::test]
async fn outputs_exports_and_env_flow_between_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("project");
    write(
        &p,
        "tools/semver/func.yml",
        "spec:\n  inputs:\n    current: {type: string}\n    part: {type: string, default: patch}\n  outputs:\n    next: {type: string}\n    parts: {type: array}\n---\nenv:\n  PART: ${{ inputs.part }}\nexec:\n  command: [\"${{ func_dir }}/bump.sh\", \"${{ inputs.current }}\", \"${{ output_file }}\", \"${{ export_file }}\"]\n",
    );
    write(
        &p,
        "tools/semver/bump.sh",
        "#!/bin/sh\nset -e\nIFS=. read -r a b c <<EOF\n$1\nEOF\necho \"bumping $PART of $1 in $(pwd)\"\nprintf '{\"name\":\"next\",\"value\":\"%s.%s.%s\"}\\n' \"$a\" \"$b\" \"$((c+1))\" >> \"$2\"\nprintf '{\"name\":\"parts\",\"value\":[%s,%s,%s]}\\n' \"$a\" \"$b\" \"$c\" >> \"$2\"\nprintf '{\"name\":\"VERSION\",\"value\":\"%s.%s.%s\"}\\n' \"$a\" \"$b\" \"$((c+1))\" >> \"$3\"\n",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        p.join("tools/semver/bump.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let (result, output) = run(
        tmp.path(),
        json!([
            {"name": "bump", "func": "./tools/semver", "inputs": {"current": "1.4.0"}},
            {"name": "show", "script": "echo \"next is ${{ steps.bump.outputs.next }}, minor ${{ steps.bump.outputs.parts[1] }}, VERSION=$VERSION, GREETING=$GREETING, BASE via env ${{ env.BASE }}, project ${{ vars.CI_PROJECT_NAME }}\"", "env": {"GREETING": "hi ${{ steps.bump.outputs.next }}"}},
        ]),
    )
    .await;
    assert_eq!(result.status, Status::Success, "{output}");
    assert!(output.contains("Running step name=bump\n"), "{output}");
    assert!(
        output.contains(&format!("bumping patch of 1.4.0 in {}", p.display())),
        "{output}"
    );
    assert!(
        output.contains("next is 1.4.1, minor 4, VERSION=1.4.1, GREETING=hi 1.4.1, BASE via env base, project widget"),
        "{output}"
    );
    let bump = &result.sub_step_results[0];
    assert_eq!(
        Value::Object(bump.outputs.clone()),
        json!({"next": "1.4.1", "parts": [1, 4, 0]})
    );
    assert_eq!(bump.exports["VERSION"], "1.4.1");
    assert_eq!(result.exports["VERSION"], "1.4.1");
    assert_eq!(bump.step.step.protocol, "local");
    assert_eq!(
        bump.step.inputs["part"],
        json!("patch"),
        "the default is recorded"
    );
    assert_eq!(bump.exec_result.as_ref().unwrap().exit_code, 0);
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(
        json["subStepResults"][0]["execResult"]["exitCode"],
        json!(0)
    );
    assert!(
        json["subStepResults"][1]["startedAt"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
}

#[tokio::test]
async fn run_definitions_nest_with_outputs_and_delegate() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("project");
    write(
        &p,
        "steps/echo/func.yml",
        "spec:\n  inputs:\n    v: {type: number}\n  outputs:\n    doubled: {type: number}\n---\nexec:\n  command: [sh, -c, \"echo '{\\\"name\\\":\\\"doubled\\\",\\\"value\\\":${{ inputs.v * 2 }}}' > ${{ output_file }}\"]\n",
    );
    write(
        &p,
        "steps/pair/func.yml",
        "spec:\n  outputs:\n    total: {type: number}\n    label: {type: string, default: none}\n---\nrun:\n  - name: one\n    func: ../echo\n    inputs: {v: 2}\n  - name: two\n    func: ../echo\n    inputs: {v: \"${{ steps.one.outputs.doubled }}\"}\noutputs:\n  total: ${{ steps.one.outputs.doubled + steps.two.outputs.doubled }}\n",
    );
    write(
        &p,
        "steps/wrap/func.yml",
        "spec:\n  outputs: delegate\n---\nrun:\n  - name: inner\n    func: ../pair\ndelegate: inner\n",
    );
    let (result, output) = run(tmp.path(), json!([{"name": "w", "func": "./steps/wrap"}, {"name": "check", "script": "test \"${{ steps.w.outputs.total }}\" = 12"}])).await;
    assert_eq!(result.status, Status::Success, "{output}");
    assert!(
        output.contains("Running step name=w.inner.two\n"),
        "{output}"
    );
    assert_eq!(
        Value::Object(result.sub_step_results[0].outputs.clone()),
        json!({"total": 12.0, "label": "none"})
    );
}

#[tokio::test]
async fn failures_stop_the_sequence_and_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("project");
    write(
        &p,
        "s/func.yml",
        "spec:\n  inputs:\n    n: {type: number}\n  outputs:\n    o: {type: string}\n---\nexec:\n  command: [sh, -c, \"echo '{\\\"name\\\":\\\"o\\\",\\\"value\\\":1}' > ${{ output_file }}\"]\n",
    );
    write(
        &p,
        "loop/func.yml",
        "spec:\n---\nrun:\n  - name: again\n    func: .\n",
    );
    let cases = [
        (
            json!([{"name": "a", "script": "exit 3"}, {"name": "b", "script": "echo never"}]),
            "exit status 3",
            Some(3),
        ),
        (
            json!([{"name": "a", "func": "./s", "inputs": {"n": "x"}}]),
            "input `n` must be a number, not a string (\"x\")",
            None,
        ),
        (
            json!([{"name": "a", "func": "./s"}]),
            "input `n` (number) is required",
            None,
        ),
        (
            json!([{"name": "a", "func": "./s", "inputs": {"n": 1, "m": 2}}]),
            "the step does not accept input `m` (it takes: n)",
            None,
        ),
        (
            json!([{"name": "a", "func": "./s", "inputs": {"n": 1}}]),
            "output `o` must be a string, not a number (1)",
            None,
        ),
        (
            json!([{"name": "a", "func": "./nope"}]),
            "no func.yml or step.yml there",
            None,
        ),
        (
            json!([{"name": "a", "func": "./loop"}]),
            "steps are nested more than 32 deep",
            None,
        ),
        (
            json!([{"name": "a", "script": "echo '{\"name\":\"X\"}' >> ${{ export_file }}"}]),
            "export file line 1: `name` (text) and `value` are required",
            None,
        ),
        (
            json!([{"name": "a", "script": "echo ${{ inputs.missing }}"}]),
            "script: `inputs` has no `missing`",
            None,
        ),
        (
            json!([{"name": "a", "func": "registry.example.com/x/echo:1"}]),
            "OCI function images are not supported",
            None,
        ),
    ];
    for (steps, expected, code) in cases {
        let (result, output) = run(tmp.path(), steps.clone()).await;
        assert_eq!(result.status, Status::Failure, "{steps}: {output}");
        let error = result.error.clone().unwrap_or_default();
        assert!(error.contains(expected), "{steps}: {error}");
        assert!(output.contains(expected), "the log says why: {output}");
        assert!(!output.contains("never"));
        assert_eq!(result.failed_exit_code(), code, "{steps}");
    }
}

use gantry_test_support::git;

#[tokio::test]
async fn git_references_are_fetched_pinned_and_reused() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("steps-repo");
    write(
        &repo,
        "steps/greet/func.yml",
        "spec:\n  inputs:\n    who: {type: string}\n---\nexec:\n  command: [\"${{ func_dir }}/greet.sh\", \"${{ inputs.who }}\"]\n",
    );
    write(
        &repo,
        "steps/greet/greet.sh",
        "#!/bin/sh\necho \"hello $1 from v1\"\n",
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        repo.join("steps/greet/greet.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "v1"]);
    git(&repo, &["tag", "v1"]);
    write(
        &repo,
        "steps/greet/greet.sh",
        "#!/bin/sh\necho \"hello $1 from main\"\n",
    );
    git(&repo, &["commit", "-qam", "main"]);
    std::fs::create_dir_all(tmp.path().join("project")).unwrap();
    let url = format!("file://{}", repo.display());
    let (result, output) = run(
        tmp.path(),
        json!([
            {"name": "tagged", "func": {"git": {"url": url, "rev": "v1", "dir": "steps/greet"}}, "inputs": {"who": "tag"}},
            {"name": "branch", "func": {"git": {"url": url, "rev": "main", "dir": "steps/greet"}}, "inputs": {"who": "branch"}},
            {"name": "again", "func": {"git": {"url": url, "rev": "v1", "dir": "steps/greet"}}, "inputs": {"who": "cache"}},
        ]),
    )
    .await;
    assert_eq!(result.status, Status::Success, "{output}");
    assert!(output.contains("hello tag from v1"), "{output}");
    assert!(output.contains("hello branch from main"), "{output}");
    assert!(output.contains("hello cache from v1"), "{output}");
    let tagged = &result.sub_step_results[0].step.step;
    assert_eq!(tagged.protocol, "git");
    assert_eq!(tagged.version.as_deref(), Some("v1"));
    assert_eq!(
        tagged.commit.as_ref().map(String::len),
        Some(40),
        "the resolved commit is recorded"
    );
    assert_ne!(tagged.commit, result.sub_step_results[1].step.step.commit);
    let (missing, output) = run(
        tmp.path(),
        json!([{"name": "x", "func": {"git": {"url": url, "rev": "v9"}}}]),
    )
    .await;
    assert_eq!(missing.status, Status::Failure);
    assert!(
        output.contains("has no tag, branch or commit \"v9\""),
        "{output}"
    );
}
