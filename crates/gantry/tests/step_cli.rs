//! `gantry step run`: one step on this machine with the real engine and processes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn step(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gantry"))
        .arg("step")
        .arg("run")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env_remove("XDG_CACHE_HOME")
        .output()
        .unwrap();
    let text = format!(
        "--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .replace(&dir.display().to_string(), "[DIR]");
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_step_runs_with_typed_inputs_and_reports_its_outputs_or_why_it_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write(
        dir,
        "tools/add/func.yml",
        "spec:
  inputs:
    a: {type: number}
    b: {type: number, default: 10}
    label: {type: string, default: sum}
  outputs:
    total: {type: number}
---
exec:
  command: [sh, -c, 'echo \"$0 in $PWD\"; echo \"{\\\"name\\\":\\\"total\\\",\\\"value\\\":$1}\" > \"$2\"', '${{ inputs.label }}', '${{ inputs.a + inputs.b }}', '${{ output_file }}']
",
    );
    let (code, text) = step(
        dir,
        &[
            "./tools/add",
            "--input",
            "a=2",
            "--input",
            "label=\"the sum\"",
            "--results",
            "r.json",
        ],
    );
    assert_eq!(code, 0, "{text}");
    insta::assert_snapshot!("step_run_success", text);
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    assert_eq!(results["subStepResults"][0]["outputs"]["total"], 12.0);

    let (code, text) = step(dir, &["./tools/add", "--input", "a=x"]);
    assert_eq!(code, 1, "{text}");
    insta::assert_snapshot!("step_run_bad_input", text);

    write(
        dir,
        "broken/func.yml",
        "spec:\n---\nexec:\n  command: [true]\n  shell: bash\n",
    );
    let (code, text) = step(dir, &["./broken"]);
    assert_eq!(code, 1, "{text}");
    insta::assert_snapshot!("step_run_bad_definition", text);

    let (code, text) = step(dir, &["./tools/add", "--input", "1a=2"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("input name \"1a\" must match"), "{text}");
}
