//! Data-driven snapshot tests of the YAML processor, in the style of rust-analyzer: every
//! folder of `tests/cases/` is one case, fed through the single function [`check`], whose
//! output (the `gantry lint` JSON report, errors with their `file:line:column`) is pinned
//! by an insta snapshot `tests/snapshots/cases__<case-name>.snap`.
//!
//! A case folder holds `.gitlab-ci.yml`, any included files (at any relative path) and an
//! optional `args.json`, every key optional:
//!
//! ```json
//! {"ref": "main", "tag": null, "source": "push", "variables": {"K": "V"},
//!  "changed": ["a.txt"], "fragment": false}
//! ```
//!
//! - `ref`: branch name (default `main`, the default branch); `tag`: a tag name instead.
//! - `source`: `CI_PIPELINE_SOURCE` (default `push`).
//! - `variables`: pipeline variables (`--var`).
//! - `changed`: the changed files; absent means unknown (`rules:changes` then matches).
//! - `fragment`: lint as an included fragment.
//! - `merge_request`: `{"source_branch": "feature", "target_branch": "main",
//!   "diff_base_sha": "…", "source_branch_protected": false, "target_branch_protected":
//!   true}` makes it a detached merge request pipeline (`ref` is then the source branch
//!   and `source` defaults to `merge_request_event`).
//!
//! Add a case: create the folder, run
//! `INSTA_UPDATE=always cargo nextest run -p gantry-pipeline cases::` (or `cargo insta test`
//! then `cargo insta review`), and read the new `.snap` file against the spec before
//! committing it. `CASE=<substring>` runs only the matching cases.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use gantry_pipeline::report::LintReport;
use gantry_pipeline::{
    Context, Loader, MergeRequestDiff, MergeRequestEventType, MergeRequestInfo, Options,
    PipelineInfo, Source, compile,
};

/// Fixed commit of every case.
const SHA: &str = "5f2d1c0e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e";

/// A case's files, held in memory (paths relative to the case folder, `/`-separated).
struct Memory(BTreeMap<String, String>);

impl Loader for Memory {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        Ok(self.0.get(path).cloned())
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        Ok(self.0.keys().cloned().collect())
    }
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("cases")
}

fn read_tree(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("case folder readable")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            read_tree(base, &p, out);
        } else {
            let rel = p
                .strip_prefix(base)
                .expect("inside the case")
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&p)
                .map_err(|e| format!("{}: {e}", p.display()))
                .expect("case file readable");
            out.insert(rel, text);
        }
    }
}

/// Load the case folder, compile it in its context and render the lint report as JSON.
fn check(dir: &Path) -> String {
    let mut files = BTreeMap::new();
    read_tree(dir, dir, &mut files);
    let args: serde_json::Value = match files.remove("args.json") {
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| format!("{}/args.json: {e}", dir.display()))
            .expect("valid args.json"),
        None => serde_json::Value::Null,
    };
    let str_arg = |k: &str| {
        args.get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let (ref_name, is_tag) = match str_arg("tag") {
        Some(tag) => (tag, true),
        None => (str_arg("ref").unwrap_or_else(|| "main".into()), false),
    };
    let merge_request = args.get("merge_request").map(|mr| {
        let text = |k: &str, default: &str| {
            mr.get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or(default)
                .to_owned()
        };
        let flag = |k: &str| {
            mr.get(k)
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false)
        };
        MergeRequestInfo {
            id: 1,
            iid: 1,
            title: text("title", "Draft: a change"),
            description: String::new(),
            source_branch: text("source_branch", "feature"),
            target_branch: text("target_branch", "main"),
            source_branch_protected: flag("source_branch_protected"),
            target_branch_protected: flag("target_branch_protected"),
            event_type: MergeRequestEventType::Detached,
            source_sha: None,
            target_sha: None,
            diff: Some(MergeRequestDiff {
                id: 1,
                base_sha: text("diff_base_sha", SHA),
            }),
            labels: Vec::new(),
            assignees: Vec::new(),
            milestone: None,
            squash_on_merge: false,
            draft: false,
            external: None,
        }
    });
    let (ref_name, is_tag) = match &merge_request {
        Some(mr) => (mr.source_branch.clone(), false),
        None => (ref_name, is_tag),
    };
    let source = match str_arg("source") {
        Some(s) => Source::parse(&s)
            .ok_or_else(|| format!("{}: unknown source {s}", dir.display()))
            .expect("known source"),
        None if merge_request.is_some() => Source::MergeRequestEvent,
        None => Source::Push,
    };
    let variables: Vec<(String, String)> = args
        .get("variables")
        .and_then(serde_json::Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let changed: Option<Vec<String>> = args
        .get("changed")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        });
    let fragment = args
        .get("fragment")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);

    let info = PipelineInfo {
        ref_name,
        is_tag,
        source,
        sha: SHA.into(),
        default_branch: "main".into(),
        project_namespace: "gantry".into(),
        project_name: "demo".into(),
        // A merge request pipeline's own request is open (`CI_OPEN_MERGE_REQUESTS`).
        open_merge_requests: merge_request
            .iter()
            .map(|m| format!("gantry/demo!{}", m.iid))
            .collect(),
        merge_request,
        ..PipelineInfo::default()
    };
    let ctx = Context::new(&info, &variables, changed);
    let opts = Options {
        fragment,
        ..Options::default()
    };
    let compiled = compile(&opts, &ctx, &Memory(files));
    let report = LintReport::new(&compiled);
    serde_json::to_string_pretty(&report).expect("report serializes")
}

/// Every case folder (sorted), filtered by the `CASE` environment variable.
fn case_dirs() -> Vec<PathBuf> {
    let filter = std::env::var("CASE").ok();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("tests/cases exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            filter.as_deref().is_none_or(|f| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(f))
            })
        })
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn cases() {
    let dirs = case_dirs();
    assert!(
        !dirs.is_empty(),
        "no case found in {}",
        cases_dir().display()
    );
    let mut failed = Vec::new();
    for dir in &dirs {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let root = std::fs::read_to_string(dir.join(".gitlab-ci.yml")).unwrap_or_default();
        let result = catch_unwind(AssertUnwindSafe(|| {
            let output = check(dir);
            insta::with_settings!({
                description => root.trim_end().to_owned(),
                omit_expression => true,
                prepend_module_to_snapshot => true,
            }, {
                insta::assert_snapshot!(name.clone(), output);
            });
        }));
        if result.is_err() {
            failed.push(name);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases failed: {}",
        failed.len(),
        dirs.len(),
        failed.join(", ")
    );
}
