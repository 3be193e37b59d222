//! Compile time of real-world pipelines: every root file of
//! `../shared/conformance/real-world/` with its folder of stored includes (as in
//! `tests/conformance.rs`), compiled many times from memory (the files are read once, so
//! only `compile` is timed).
//!
//! ```sh
//! cargo bench -p gantry-pipeline --bench lint_corpus            # all files
//! cargo bench -p gantry-pipeline --bench lint_corpus -- CMake   # names containing "CMake"
//! ```
//!
//! Per file: bytes of the root file, files loaded and their total bytes (root plus
//! includes, repeated includes counted), jobs produced, status (`valid`; `not created`
//! when `workflow:rules` or job rules leave no pipeline on `main`; `offline include` when an
//! include cannot be resolved offline, which ends the compile early; `INVALID`, with the
//! first error printed below the table), mean and minimum time per compile; largest
//! first, then the total. `BENCH_SECONDS` (default 0.5) is the time spent on each file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gantry_pipeline::yaml::{self, FileId, KeyKind, Limits, Map, Node, Value};
use gantry_pipeline::{Compiled, Context, Loader, Options, PipelineInfo, compile};

/// The files of one project, held in memory (the root file is `.gitlab-ci.yml`).
struct Memory(BTreeMap<String, String>);

impl Loader for Memory {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        Ok(self.0.get(path).cloned())
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        Ok(self.0.keys().cloned().collect())
    }
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(base, &p, out);
        } else if let (Ok(rel), Ok(text)) = (p.strip_prefix(base), std::fs::read_to_string(&p)) {
            out.insert(rel.to_string_lossy().into_owned(), text);
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

struct Row {
    name: String,
    root_bytes: usize,
    files: usize,
    loaded_bytes: usize,
    jobs: usize,
    status: &'static str,
    first_error: Option<String>,
    iterations: u32,
    mean: Duration,
    min: Duration,
}

fn status_of(c: &Compiled) -> &'static str {
    if c.errors.is_empty() {
        match &c.pipeline {
            Some(p) if !p.created => "not created",
            _ => "valid",
        }
    } else if c
        .errors
        .iter()
        .all(|e| e.message.contains("cannot be resolved offline"))
    {
        "offline include"
    } else {
        "INVALID"
    }
}

// ---------------------------------------------------------------------------------------
// The "offline includes dropped" variant: a pipeline that includes a template, a project
// file, a remote file or a component stops at that include (Gantry cannot fetch it), so its
// jobs are never compiled. To time the whole compile of such a pipeline, every file is
// re-emitted without those include items (and without local includes of files that were not
// stored), as flow-style YAML with `!reference` tags kept.

fn is_local_present(item: &Node, files: &BTreeMap<String, String>) -> bool {
    let local = match &item.value {
        Value::Str(s) if !s.starts_with("http://") && !s.starts_with("https://") => {
            Some(s.as_str())
        }
        Value::Map(m) => m.get("local").and_then(Node::as_str),
        _ => None,
    };
    local.is_some_and(|l| {
        let l = l.trim_start_matches('/');
        l.contains('*') || l.contains('$') || files.contains_key(l)
    })
}

fn drop_offline_includes(doc: &mut Node, files: &BTreeMap<String, String>) {
    let Some(m) = doc.as_map_mut() else { return };
    let Some(inc) = m.get_mut("include") else {
        return;
    };
    match &mut inc.value {
        Value::Seq(items) => std::rc::Rc::make_mut(items).retain(|i| is_local_present(i, files)),
        _ => {
            if !is_local_present(inc, files) {
                m.remove("include");
            }
        }
    }
}

fn emit(n: &Node, out: &mut String) {
    match &n.value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Float(_) => out.push_str(&n.to_json().to_string()),
        // A JSON string is a valid YAML double-quoted scalar.
        Value::Str(s) => out.push_str(&serde_json::Value::String(s.clone()).to_string()),
        Value::Seq(items) | Value::Reference(items) => {
            if matches!(n.value, Value::Reference(_)) {
                out.push_str("!reference ");
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                emit(item, out);
            }
            out.push(']');
        }
        Value::Map(m) => emit_map(m, out),
    }
}

fn emit_map(m: &Map, out: &mut String) {
    out.push('{');
    for (i, (k, e)) in m.entries().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match e.key_kind {
            KeyKind::Str => out.push_str(&serde_json::Value::String(k.to_owned()).to_string()),
            KeyKind::Other => out.push_str(k),
        }
        out.push_str(": ");
        emit(&e.value, out);
    }
    out.push('}');
}

/// The project's files with unresolvable include items dropped, and the hidden jobs those
/// includes would have provided (the `extends` bases and `!reference` targets compile
/// reports missing, and the `script` of jobs that only override a template's job) stubbed
/// with `script: [":"]` in the root file, so that the rest of the pipeline compiles. `None` if a
/// file does not parse (then there is nothing to compare).
fn without_offline_includes(
    files: &BTreeMap<String, String>,
    opts: &Options,
    ctx: &Context,
) -> Option<Memory> {
    let mut docs: BTreeMap<String, Vec<Node>> = BTreeMap::new();
    for (name, text) in files {
        if name.ends_with(".yml") || name.ends_with(".yaml") {
            let mut d = yaml::parse_documents(text, FileId(0), Limits::default()).ok()?;
            if let Some(last) = d.last_mut() {
                drop_offline_includes(last, files);
            }
            docs.insert(name.clone(), d);
        }
    }
    let render = |docs: &BTreeMap<String, Vec<Node>>| {
        let mut out = files.clone();
        for (name, d) in docs {
            let mut text = String::new();
            for (i, doc) in d.iter().enumerate() {
                if i > 0 {
                    text.push_str("\n---\n");
                }
                emit(doc, &mut text);
            }
            text.push('\n');
            out.insert(name.clone(), text);
        }
        Memory(out)
    };
    // Stub the missing bases, a few rounds (a stub can reveal the next missing base).
    for _ in 0..20 {
        let loader = render(&docs);
        let c = compile(opts, ctx, &loader);
        // `extends` bases, and `!reference [base, key]` targets.
        let missing: Vec<(String, Option<String>)> = c
            .errors
            .iter()
            .filter_map(|e| {
                if let Some((_, rest)) = e.message.split_once("unknown keys in `extends` (") {
                    return Some((rest.strip_suffix(')')?.to_owned(), None));
                }
                // A job that only overrides a template's job of the same name.
                if let Some(job) = e.message.strip_prefix("jobs ").and_then(|m| {
                    m.strip_suffix(
                        " config should implement the script:, run:, or trigger: keyword",
                    )
                }) {
                    return Some((job.to_owned(), Some("script".to_owned())));
                }
                let path = e
                    .message
                    .strip_prefix("!reference ")?
                    .strip_suffix(" could not be found")?;
                let path: Vec<String> = serde_json::from_str(path).ok()?;
                Some((path.first()?.clone(), path.get(1).cloned()))
            })
            .collect();
        let Some(root) = docs
            .get_mut(".gitlab-ci.yml")
            .and_then(|d| d.last_mut())
            .and_then(Node::as_map_mut)
        else {
            return Some(loader);
        };
        let pos = gantry_pipeline::yaml::Pos::default();
        let script = || Node::new(Value::Seq(vec![Node::str(":", pos)].into()), pos);
        let mut added = false;
        for (base, key) in missing {
            if !root.contains_key(&base) {
                let mut m = Map::new();
                m.insert_node("script", script());
                root.insert_node(base.clone(), Node::new(Value::Map(m), pos));
                added = true;
            }
            if let (Some(key), Some(m)) = (key, root.get_mut(&base).and_then(Node::as_map_mut)) {
                if !m.contains_key(&key) {
                    m.insert_node(key, script());
                    added = true;
                }
            }
        }
        if !added {
            return Some(loader);
        }
    }
    Some(render(&docs))
}

/// Time `compile` over `loader` for `budget` (at least 10 runs): (runs, mean, min).
fn time(
    opts: &Options,
    ctx: &Context,
    loader: &Memory,
    budget: Duration,
) -> (u32, Duration, Duration) {
    let mut times = Vec::new();
    let start = Instant::now();
    while (start.elapsed() < budget || times.len() < 10) && times.len() < 100_000 {
        let t = Instant::now();
        let c = compile(opts, ctx, loader);
        times.push(t.elapsed());
        std::hint::black_box(c);
    }
    let total: Duration = times.iter().sum();
    let runs = u32::try_from(times.len()).unwrap_or(u32::MAX);
    (
        runs,
        total / runs,
        times.iter().copied().min().unwrap_or_default(),
    )
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let budget = Duration::from_secs_f64(
        std::env::var("BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.5),
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/real-world");
    let entries = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) => {
            eprintln!("real-world corpus not found at {}: {e}", dir.display());
            std::process::exit(2);
        }
    };
    let mut roots: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yml"))
        .filter(|p| {
            filter.is_empty()
                || filter
                    .iter()
                    .any(|f| p.to_string_lossy().contains(f.as_str()))
        })
        .collect();
    roots.sort();
    let ctx = ctx();
    let opts = Options::default();
    let mut rows = Vec::new();
    let mut dropped = Vec::new();
    for root in &roots {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let short = name.trim_end_matches(".gitlab-ci.yml").to_owned();
        let mut files = BTreeMap::new();
        walk(&dir.join(&short), &dir.join(&short), &mut files);
        let Ok(text) = std::fs::read_to_string(root) else {
            continue;
        };
        let root_bytes = text.len();
        files.insert(".gitlab-ci.yml".to_owned(), text);
        let loader = Memory(files);

        // Warm up, and take the facts from one compile.
        let c = compile(&opts, &ctx, &loader);
        let (files, loaded_bytes, jobs, status) = (
            c.sources.len(),
            c.sources.total_bytes(),
            c.pipeline.as_ref().map_or(0, |p| p.jobs.len()),
            status_of(&c),
        );
        let first_error = c
            .errors
            .iter()
            .find(|e| !e.message.contains("cannot be resolved offline"))
            .map(|e| e.message.clone());
        drop(c);

        let (iterations, mean, min) = time(&opts, &ctx, &loader, budget);
        // Pipelines stopped by an include Gantry cannot resolve: time them again without it.
        if status != "valid" && status != "not created" {
            if let Some(stubbed) = without_offline_includes(&loader.0, &opts, &ctx) {
                let c = compile(&opts, &ctx, &stubbed);
                let facts = (
                    c.sources.len(),
                    c.sources.total_bytes(),
                    c.pipeline.as_ref().map_or(0, |p| p.jobs.len()),
                    status_of(&c),
                );
                let first_error = c
                    .errors
                    .iter()
                    .find(|e| !e.message.contains("cannot be resolved offline"))
                    .map(|e| e.message.clone());
                drop(c);
                let (iterations, mean, min) = time(&opts, &ctx, &stubbed, budget);
                dropped.push(Row {
                    name: short.clone(),
                    root_bytes,
                    files: facts.0,
                    loaded_bytes: facts.1,
                    jobs: facts.2,
                    status: facts.3,
                    first_error,
                    iterations,
                    mean,
                    min,
                });
            }
        }
        rows.push(Row {
            name: short,
            root_bytes,
            files,
            loaded_bytes,
            jobs,
            status,
            first_error,
            iterations,
            mean,
            min,
        });
    }
    rows.sort_by(|a, b| {
        b.loaded_bytes
            .cmp(&a.loaded_bytes)
            .then(a.name.cmp(&b.name))
    });
    dropped.sort_by(|a, b| {
        b.loaded_bytes
            .cmp(&a.loaded_bytes)
            .then(a.name.cmp(&b.name))
    });
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(4).max(22);
    println!("As stored (a pipeline with an include Gantry cannot resolve stops there):");
    print_table(&rows, w);
    if !dropped.is_empty() {
        println!();
        println!(
            "The pipelines that stopped, without their unresolvable includes (files re-emitted as flow YAML,"
        );
        println!(
            "`extends`/`!reference` targets those includes would define stubbed as `{{script: [\":\"]}}`):"
        );
        print_table(&dropped, w);
    }
    if let Some(slowest) = rows.iter().chain(&dropped).max_by_key(|r| r.mean) {
        println!();
        println!(
            "slowest: {} at {} ms mean, {} ms min (target: under 10 ms per file)",
            slowest.name,
            ms(slowest.mean),
            ms(slowest.min)
        );
    }
}

fn print_table(rows: &[Row], w: usize) {
    let line = |name: &str,
                root: String,
                files: String,
                loaded: String,
                jobs: String,
                status: &str,
                runs: String,
                mean: String,
                min: String| {
        println!(
            "{name:<w$} {root:>8} {files:>5} {loaded:>9} {jobs:>5} {status:>15} {runs:>7} {mean:>9} {min:>9}"
        );
    };
    line(
        "file",
        "root B".into(),
        "files".into(),
        "loaded B".into(),
        "jobs".into(),
        "status",
        "runs".into(),
        "mean ms".into(),
        "min ms".into(),
    );
    for r in rows {
        line(
            &r.name,
            r.root_bytes.to_string(),
            r.files.to_string(),
            r.loaded_bytes.to_string(),
            r.jobs.to_string(),
            r.status,
            r.iterations.to_string(),
            ms(r.mean),
            ms(r.min),
        );
    }
    line(
        &format!("total ({} pipelines)", rows.len()),
        rows.iter().map(|r| r.root_bytes).sum::<usize>().to_string(),
        rows.iter().map(|r| r.files).sum::<usize>().to_string(),
        rows.iter()
            .map(|r| r.loaded_bytes)
            .sum::<usize>()
            .to_string(),
        rows.iter().map(|r| r.jobs).sum::<usize>().to_string(),
        "",
        String::new(),
        ms(rows.iter().map(|r| r.mean).sum()),
        ms(rows.iter().map(|r| r.min).sum()),
    );
    for r in rows.iter().filter(|r| r.first_error.is_some()) {
        println!(
            "  {}: {}",
            r.name,
            r.first_error.as_deref().unwrap_or_default()
        );
    }
}
