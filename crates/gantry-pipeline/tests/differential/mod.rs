//! The differential test against libyaml itself: every document of a corpus is read by
//! Gantry (`yaml::libyaml_events`, `yaml::parse_documents`) and by Ruby's Psych over the
//! system's libyaml (GitLab's own parser stack; `psych_events.rb`), and the two must agree
//! on accept/reject, every event (kind, position, anchor, tag, style, value), Psych's error
//! message and position, and the loaded value of each document.
//!
//! The corpus: every YAML file of `../shared/conformance` and of this crate's test cases,
//! and generated variants of each (an indentation shifted, a line broken inside a quoted
//! scalar or flow collection, tabs, comments, anchors and aliases, document markers, a
//! closing bracket moved), at least [`MIN_DOCUMENTS`] in all, made by a seeded generator
//! so every run reads the same documents.
//!
//! Where the loaded values may differ by design (each counted and printed): Gantry keeps
//! dates and times as strings where GitLab's safe loader refuses the `Date` class; Psych
//! makes `:name` a Symbol, Gantry a string; Gantry refuses a collection as a mapping key
//! and tags other than `!reference` and the core ones, which Psych loads. Any other
//! difference fails the test, naming the document.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gantry_pipeline::yaml::{self, FileId, Limits, YamlErrorKind};

/// The corpus is at least this large (the floor).
const MIN_DOCUMENTS: usize = 10_000;

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "yml" || e == "yaml") {
            out.push(p);
        }
    }
}

/// xorshift64*: a seeded, dependency-free generator (the corpus must be the same each run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// A char boundary of `line` chosen at random.
fn boundary(rng: &mut Rng, line: &str) -> usize {
    let bounds: Vec<usize> = line
        .char_indices()
        .map(|(i, _)| i)
        .chain([line.len()])
        .collect();
    bounds[rng.below(bounds.len())]
}

/// One variant of `text`: a mutation a person (or a bad editor) makes.
fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    if lines.is_empty() {
        lines.push(String::new());
    }
    let i = rng.below(lines.len());
    let indent = lines[i].len() - lines[i].trim_start_matches(' ').len();
    match rng.below(12) {
        // An indentation shifted by one or two columns, either way.
        0 => {
            let by = 1 + rng.below(2);
            if rng.below(2) == 0 {
                lines[i].insert_str(0, &" ".repeat(by));
            } else {
                lines[i].drain(..by.min(indent));
            }
        }
        // A line broken in two, the rest indented like the line, less or more: inside a
        // quoted scalar or a flow collection this is a multi-line scalar or collection.
        1 => {
            let at = boundary(rng, &lines[i]);
            let rest = lines[i].split_off(at);
            let pad = match rng.below(3) {
                0 => indent,
                1 => indent.saturating_sub(2),
                _ => indent + 2,
            };
            lines.insert(i + 1, format!("{}{}", " ".repeat(pad), rest.trim_start()));
        }
        // A tab: in the indentation, or after a key or item indicator.
        2 => {
            let at = if rng.below(2) == 0 {
                indent.min(1)
            } else {
                boundary(rng, &lines[i])
            };
            lines[i].insert(at, '\t');
        }
        // A comment: on its own line at some indentation, or after a value.
        3 => {
            if rng.below(2) == 0 {
                let pad = " ".repeat(rng.below(indent + 3));
                lines.insert(i, format!("{pad}# a comment: [x, 'y'"));
            } else {
                let at = boundary(rng, &lines[i]);
                lines[i].insert_str(at, " # note");
            }
        }
        // An anchor after a key's colon, and an alias to it further down.
        4 => {
            if let Some(at) = lines[i].find(": ") {
                lines[i].insert_str(at + 2, "&anc ");
                let j = i + 1 + rng.below(lines.len() - i);
                let pad = " ".repeat(indent);
                lines.insert(j.min(lines.len()), format!("{pad}alias_key: *anc"));
            } else {
                lines[i].push_str(" *anc");
            }
        }
        // Document markers.
        5 => {
            let marker = ["---", "...", "--- |", "--- # doc", "---\t"][rng.below(5)];
            lines.insert(i, marker.to_owned());
        }
        // A closing bracket on its own line, indented less than its key (or more).
        6 => {
            if let Some(at) = lines[i].rfind([']', '}']) {
                let close = lines[i][at..at + 1].to_owned();
                lines[i].remove(at);
                let pad = " ".repeat(rng.below(indent + 2));
                lines.insert(i + 1, format!("{pad}{close}"));
            } else {
                lines[i].push_str(" [a,\nb]");
            }
        }
        // A quote or bracket out of place.
        7 => {
            let c = ['\'', '"', '[', ']', '{', '}', ',', ':', '-', '?', '|', '>'][rng.below(12)];
            let at = boundary(rng, &lines[i]);
            lines[i].insert(at, c);
        }
        // A character dropped.
        8 => {
            let at = boundary(rng, &lines[i]);
            if at < lines[i].len() {
                lines[i].remove(at);
            }
        }
        // A line doubled (duplicate keys) or dropped.
        9 => {
            if rng.below(2) == 0 {
                let l = lines[i].clone();
                lines.insert(i, l);
            } else {
                lines.remove(i);
            }
        }
        // A value turned into a multi-line double-quoted scalar with escapes.
        10 => {
            if let Some(at) = lines[i].find(": ") {
                let pad = " ".repeat(indent + rng.below(3));
                lines[i].truncate(at + 2);
                lines[i].push_str("\"a \\t b \\\n");
                lines[i].push_str(&pad);
                lines[i].push_str("c\\x41 \\u00e9\"");
            }
        }
        // A block scalar header with an indentation indicator or chomping.
        _ => {
            if let Some(at) = lines[i].find(": ") {
                let header = ["|", "|-", ">+", "|2", ">1-"][rng.below(5)];
                lines[i].truncate(at + 2);
                lines[i].push_str(header);
                lines.insert(
                    i + 1,
                    format!(
                        "{}  text\n{}\n{}   more",
                        " ".repeat(indent),
                        "",
                        " ".repeat(indent)
                    ),
                );
            }
        }
    }
    let mut out = lines.join("\n");
    if rng.below(4) != 0 {
        out.push('\n');
    }
    out
}

/// The corpus: the files as they are, then variants until there are enough.
fn corpus() -> Vec<(String, String)> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    yaml_files(&gantry_test_support::corpus::shared(""), &mut files);
    let shared = files.len();
    assert!(
        shared > 100,
        "the conformance corpus was not found beside the repository ({} files)",
        shared
    );
    yaml_files(&here.join("tests/cases"), &mut files);
    let mut docs: Vec<(String, String)> = Vec::new();
    for f in &files {
        // The differential is over text: a file that is not UTF-8 is not a GitLab config.
        if let Ok(text) = std::fs::read_to_string(f) {
            let name = f.strip_prefix(here).unwrap_or(f).display().to_string();
            docs.push((name, text));
        }
    }
    let bases = docs.len();
    let mut rng = Rng(0x6A09_E667_F3BC_C909);
    let per_base = MIN_DOCUMENTS.div_ceil(bases) + 1;
    for b in 0..bases {
        let (name, text) = docs[b].clone();
        // Large files: mutate a prefix of them (their variants are about the lines touched).
        let text = if text.len() > 16_384 {
            let cut = text[..16_384].rfind('\n').unwrap_or(0);
            text[..cut].to_owned()
        } else {
            text
        };
        for v in 0..per_base {
            let mut t = mutate(&text, &mut rng);
            if v % 3 == 2 {
                t = mutate(&t, &mut rng);
            }
            docs.push((format!("{name}~{v}"), t));
        }
    }
    docs
}

/// Why a loaded value may differ by design, or `None` for a real difference.
fn expected_difference(ruby: &str, events: &str) -> Option<&'static str> {
    if ruby.contains("Tried to load unspecified class: Date") || ruby.contains("class: DateTime") {
        Some("date")
    } else if ruby.contains("SYM:") {
        Some("symbol")
    } else if events.contains(" <") {
        Some("tag")
    } else {
        None
    }
}

#[test]
fn gantry_reads_yaml_as_libyaml_does() {
    let ruby = Command::new("ruby").arg("--version").output();
    assert!(
        ruby.is_ok_and(|o| o.status.success()),
        "ruby (with its psych over libyaml) is needed for the differential YAML test: \
         scripts/test installs it (apt-get install ruby)"
    );
    let docs = corpus();
    assert!(docs.len() >= MIN_DOCUMENTS, "{} documents", docs.len());
    // `YAML_DIFFERENTIAL_DIR=path` keeps the documents there (to rerun psych by hand:
    // `ls path/*.yml | ruby tests/differential/psych_events.rb`).
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = match std::env::var_os("YAML_DIFFERENTIAL_DIR") {
        Some(d) => {
            std::fs::create_dir_all(&d).expect("YAML_DIFFERENTIAL_DIR");
            PathBuf::from(d)
        }
        None => temp.path().to_owned(),
    };
    let mut list = String::new();
    let mut by_path = HashMap::new();
    for (i, (name, text)) in docs.iter().enumerate() {
        let p = dir.join(format!("{i:05}.yml"));
        std::fs::write(&p, text).expect("write a document");
        let _ = writeln!(list, "{}", p.display());
        by_path.insert(p.display().to_string(), (name, text));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential/psych_events.rb");
    let mut child = Command::new("ruby")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start ruby");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(list.as_bytes()));
    let out = child.wait_with_output().expect("ruby runs");
    writer.join().expect("writer").expect("paths written");
    assert!(out.status.success(), "ruby failed: {:?}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);

    let (mut accepted, mut rejected, mut checked) = (0, 0, 0);
    let mut by_design: HashMap<&str, usize> = HashMap::new();
    let mut failures = Vec::new();
    for block in text.split("\0### ").filter(|b| !b.is_empty()) {
        let (path, body) = block.split_once('\n').unwrap_or((block, ""));
        let Some((name, doc)) = by_path.get(path) else {
            failures.push(format!("ruby named an unknown file {path}"));
            continue;
        };
        checked += 1;
        let (events, value_line) = match body.rfind("\nVAL") {
            Some(at) => (&body[..=at], Some(body[at + 1..].trim_end())),
            None => (body, None),
        };
        let ours = yaml::libyaml_events(doc);
        if ours != events {
            failures.push(format!(
                "{name}: events differ\n--- document\n{doc}\n--- libyaml (psych)\n{events}--- gantry\n{ours}"
            ));
            continue;
        }
        if events.contains("\nERR ") || events.starts_with("ERR ") {
            rejected += 1;
            match yaml::parse_documents(doc, FileId(0), Limits::default()) {
                Err(e) if e.kind == YamlErrorKind::Syntax => {}
                other => failures.push(format!("{name}: libyaml rejects it, gantry: {other:?}")),
            }
            continue;
        }
        accepted += 1;
        let value_line = value_line.unwrap_or("");
        let ours = yaml::parse_documents(doc, FileId(0), Limits::default());
        let agree = match (&ours, value_line.strip_prefix("VAL ")) {
            (Ok(nodes), Some(json)) => {
                let theirs: serde_json::Value = serde_json::from_str(json).expect("ruby's JSON");
                let ours = serde_json::Value::Array(nodes.iter().map(|n| n.to_json()).collect());
                ours == theirs
            }
            // Both refuse to build it (an alias to an unknown anchor, …).
            (Err(e), None) => e.kind != YamlErrorKind::Syntax,
            _ => false,
        };
        if !agree {
            match expected_difference(value_line, events) {
                Some(why) => *by_design.entry(why).or_default() += 1,
                None if matches!(&ours, Err(e) if e.message == "mapping keys must be scalars") => {
                    *by_design.entry("collection key").or_default() += 1;
                }
                None => failures.push(format!(
                    "{name}: loaded values differ\n--- document\n{doc}\n--- psych\n{value_line}\n--- gantry\n{:?}",
                    ours.map(|n| n.iter().map(|n| n.to_json()).collect::<Vec<_>>())
                )),
            }
        }
    }
    let mut design: Vec<_> = by_design.into_iter().collect();
    design.sort();
    println!(
        "libyaml differential: {} documents ({checked} read by psych), {accepted} accepted, \
         {rejected} rejected, {} disagreements; loaded values differing by design: {design:?}",
        docs.len(),
        failures.len()
    );
    if let Some(d) = std::env::var_os("YAML_DIFFERENTIAL_DIR") {
        let _ = std::fs::write(Path::new(&d).join("failures.txt"), failures.join("\n\n"));
    }
    assert_eq!(checked, docs.len(), "psych did not report every document");
    assert!(
        failures.is_empty(),
        "{} disagreements with libyaml; the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}
