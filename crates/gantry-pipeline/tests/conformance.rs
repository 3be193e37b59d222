//! Conformance corpora nobody on the team wrote (`../shared/conformance/`):
//!
//! - `gitlab-schema/`: GitLab's own schema fixtures, run with GitLab's protocol (each
//!   top-level key is a separate snippet `{key: value}`, linted as a fragment; the two
//!   "global" files hold whole documents). Every positive snippet must be valid and every
//!   negative one invalid, except the cases listed in `tests/schema-exceptions.txt`: the
//!   ones where GitLab's backend (its `Entry` classes) disagrees with the editor's schema,
//!   each with the backend's reason. A listed case that Gantry no longer disagrees on, or
//!   that no fixture has, fails the test, so the list stays true.
//! - `real-world/`: every pipeline must be valid, or fail only with a clear missing-include
//!   error: an include that "cannot be resolved offline" (remote, project, template,
//!   component), or a local include the corpus did not store ("Local file `x` does not
//!   exist!"; the corpus README lists those files as NOT stored).
//!
//! The tests print their counts.

#[path = "differential/mod.rs"]
mod differential;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gantry_pipeline::yaml::{self, FileId, Limits, Node, Value};
use gantry_pipeline::{Context, Loader, MemoryLoader, Options, PipelineInfo, compile};
use gantry_test_support::corpus;

/// A real-world entry: the root file plus the folder holding its stored includes.
struct Dir {
    root_file: PathBuf,
    dir: PathBuf,
}

impl Loader for Dir {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        let p = if path == ".gitlab-ci.yml" {
            self.root_file.clone()
        } else {
            self.dir.join(path)
        };
        match std::fs::read_to_string(&p) {
            Ok(s) => Ok(Some(s)),
            Err(_) => Ok(None),
        }
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        Ok({
            let mut out = Vec::new();
            walk(&self.dir, &self.dir, &mut out);
            out.push(".gitlab-ci.yml".into());
            out
        })
    }
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(base, &p, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

fn ctx() -> Context {
    let info = PipelineInfo {
        ref_name: "main".into(),
        ..PipelineInfo::default()
    };
    Context::new(&info, &[], None)
}

/// Render a JSON value as YAML flow text (JSON is valid YAML 1.2 flow syntax).
fn json_to_yaml(v: &serde_json::Value) -> String {
    v.to_string()
}

/// The snippets of one fixture file: `(case name, document text)`.
fn snippets(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).expect("fixture readable");
    let global = path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("workflow__auto_cancel__"));
    let top: Vec<(String, serde_json::Value)> = if path.extension().is_some_and(|e| e == "json") {
        let v: serde_json::Value = serde_json::from_str(&text).expect("json fixture");
        v.as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    } else {
        let docs =
            yaml::parse_documents(&text, FileId(0), Limits::default()).expect("fixture parses");
        let Some(root) = docs.into_iter().next() else {
            return Vec::new();
        };
        let Some(m) = root.as_map() else {
            return Vec::new();
        };
        m.iter()
            .map(|(k, v)| (k.to_owned(), node_json(v)))
            .collect()
    };
    top.into_iter()
        .map(|(k, v)| {
            if global {
                (k, json_to_yaml(&v))
            } else {
                let mut o = serde_json::Map::new();
                o.insert(k.clone(), v);
                (k, json_to_yaml(&serde_json::Value::Object(o)))
            }
        })
        .collect()
}

/// JSON of a node, keeping `!reference` as a tag (re-rendered as YAML below).
fn node_json(n: &Node) -> serde_json::Value {
    match &n.value {
        Value::Reference(_) => n.to_json(),
        _ => n.to_json(),
    }
}

fn lint_fragment(doc: &str) -> Vec<String> {
    let opts = Options {
        fragment: true,
        ..Options::default()
    };
    let c = compile(
        &opts,
        &ctx(),
        &MemoryLoader::new().with(".gitlab-ci.yml", doc),
    );
    c.errors.into_iter().map(|e| e.message).collect()
}

#[test]
fn gitlab_schema_fixtures() {
    let dir = corpus::shared("").join("gitlab-schema");
    let exceptions = corpus::exceptions(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schema-exceptions.txt"),
    );
    let mut failures = Vec::new();
    let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut excepted = 0;
    let mut seen = std::collections::BTreeSet::new();
    for folder in ["positive", "negative", "json-positive", "json-negative"] {
        let expect_valid = folder.ends_with("positive");
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(folder))
            .expect("fixture folder")
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let file = format!(
                "{folder}/{}",
                path.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            );
            for (case, doc) in snippets(&path) {
                let id = format!("{file}#{case}");
                seen.insert(id.clone());
                let errors = lint_fragment(&doc);
                let ok = errors.is_empty() == expect_valid;
                let c = counts.entry(folder).or_default();
                c.1 += 1;
                if ok {
                    c.0 += 1;
                    if exceptions.contains_key(&id) {
                        // A recorded decision must still describe what Gantry does.
                        failures.push(format!(
                            "{id}: listed in schema-exceptions.txt, but Gantry now agrees with the schema: remove the line"
                        ));
                    }
                } else if exceptions.contains_key(&id) {
                    excepted += 1;
                } else {
                    failures.push(format!(
                        "{id}: expected {}, got {:?}",
                        if expect_valid { "valid" } else { "invalid" },
                        errors
                    ));
                }
            }
        }
    }
    for id in exceptions.keys().filter(|id| !seen.contains(*id)) {
        failures.push(format!(
            "{id}: listed in schema-exceptions.txt, but no fixture has that case"
        ));
    }
    for (folder, (ok, total)) in &counts {
        println!("gitlab-schema {folder}: {ok}/{total} agree with the schema");
    }
    println!("gitlab-schema: {excepted} listed exceptions (tests/schema-exceptions.txt)");
    assert!(
        failures.is_empty(),
        "{} schema fixture cases disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn real_world_pipelines() {
    let dir = corpus::shared("").join("real-world");
    let mut roots: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("real-world folder")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yml"))
        .collect();
    roots.sort();
    let mut failures = Vec::new();
    let (mut valid, mut offline, mut not_stored) = (0, 0, 0);
    for root in &roots {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let folder = dir.join(name.trim_end_matches(".gitlab-ci.yml"));
        let loader = Dir {
            root_file: root.clone(),
            dir: folder,
        };
        let c = compile(&Options::default(), &ctx(), &loader);
        if c.errors.is_empty() {
            valid += 1;
        } else if c
            .errors
            .iter()
            .all(|e| e.message.contains("cannot be resolved offline"))
        {
            offline += 1;
        } else if c.errors.iter().all(|e| {
            e.message.starts_with("Local file `") && e.message.ends_with("` does not exist!")
        }) {
            not_stored += 1;
        } else {
            failures.push(format!(
                "{name}: {:?}",
                c.errors.iter().map(|e| &e.message).collect::<Vec<_>>()
            ));
        }
    }
    println!(
        "real-world: {valid} valid, {offline} need an include that cannot be resolved offline, {not_stored} need a local include the corpus did not store, {} other failures, of {}",
        failures.len(),
        roots.len()
    );
    assert!(
        failures.is_empty(),
        "real-world pipelines failed:\n{}",
        failures.join("\n")
    );
}

/// GitLab's own configuration (`tests/gitlab-config`, README there): its local files, the
/// three CI templates and the remote file it includes, served as an offline cache would.
struct GitLabConfig {
    project: PathBuf,
    includes: PathBuf,
}

impl Loader for GitLabConfig {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        Ok(std::fs::read_to_string(self.project.join(path)).ok())
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        Ok({
            let mut out = Vec::new();
            walk(&self.project, &self.project, &mut out);
            out
        })
    }
    fn remote(&self, url: &str) -> Result<String, gantry_pipeline::RemoteError> {
        let local = match url.rsplit_once("/lib/gitlab/ci/templates/") {
            Some((_, name)) => self.includes.join("templates").join(name),
            None => match url.rsplit_once("/untamper-my-lockfile/-/raw/main/templates/") {
                Some((_, name)) => self.includes.join("untamper-my-lockfile").join(name),
                None => return Err(gantry_pipeline::RemoteError::Unsupported),
            },
        };
        std::fs::read_to_string(local).map_err(|_| gantry_pipeline::RemoteError::Unsupported)
    }
    fn template_url(&self, name: &str) -> Option<String> {
        Some(format!(
            "https://gitlab.com/gitlab-org/gitlab/-/raw/HEAD/lib/gitlab/ci/templates/{name}"
        ))
    }
}

#[test]
fn gitlabs_own_configuration_is_valid() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gitlab-config");
    let loader = GitLabConfig {
        project: here.join("project"),
        includes: here.join("includes"),
    };
    // A push to the default branch of gitlab-org/gitlab on a server that is not
    // gitlab.com (the `gitlab-com` includes and their component stay out, as they would
    // on any other instance).
    let info = PipelineInfo {
        ref_name: "master".into(),
        default_branch: "master".into(),
        ref_protected: true,
        project_name: "gitlab".into(),
        project_namespace: "gitlab-org".into(),
        server_url: "https://gitlab.example.com".into(),
        sha: "6714c9136".into(),
        ..PipelineInfo::default()
    };
    let c = compile(
        &Options::default(),
        &Context::new(&info, &[], None),
        &loader,
    );
    let errors: Vec<String> = c.errors.iter().map(|d| d.message.clone()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let pipeline = c.pipeline.expect("a pipeline");
    println!("GitLab's own configuration: {} jobs", pipeline.jobs.len());
    // Pinned: what Gantry creates today (not yet compared with a GitLab instance's count
    // for the same push; a change here must be explained).
    let names: Vec<&str> = pipeline.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(pipeline.jobs.len(), 332, "{names:?}");
    for name in [
        "rspec unit pg17 44/44",
        "ruby_syntax: [${RUBY_VERSION_DEFAULT}]",
        "jest 11/11",
    ] {
        assert!(names.contains(&name), "{name} missing: {names:?}");
    }
}
