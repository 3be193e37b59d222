//! Every input in `tests/fuzz_regressions/` (found by the fuzzer in `fuzz/`, minimised)
//! compiles in normal and `fragment` mode without panicking and within a time bound: the
//! crate's "no panics on any input" invariant, pinned on the inputs that once broke it.
//!
//! The file format is the fuzz target's (`fuzz/fuzz_targets/compile.rs`): the text is
//! `.gitlab-ci.yml`, and when it contains [`SEPARATOR`] the rest is `inc.yml`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use gantry_pipeline::{Context, Loader, Options, PipelineInfo, compile, report};

const SEPARATOR: &[u8] = b"\n#--inc--\n";
/// A hang shows up as a failure naming the file, not as a test that never ends.
const TIMEOUT: Duration = Duration::from_secs(20);

struct Memory(BTreeMap<String, String>);

impl Loader for Memory {
    fn read(&self, path: &str) -> Result<Option<String>, gantry_pipeline::ReadError> {
        Ok(self.0.get(path).cloned())
    }
    fn files(&self) -> std::result::Result<Vec<String>, gantry_pipeline::ReadError> {
        Ok(self.0.keys().cloned().collect())
    }
}

fn loader(data: &[u8]) -> Memory {
    let (root, inc) = match data.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
        Some(i) => (&data[..i], Some(&data[i + SEPARATOR.len()..])),
        None => (data, None),
    };
    let mut files = BTreeMap::new();
    files.insert(
        ".gitlab-ci.yml".to_owned(),
        String::from_utf8_lossy(root).into_owned(),
    );
    if let Some(inc) = inc {
        files.insert(
            "inc.yml".to_owned(),
            String::from_utf8_lossy(inc).into_owned(),
        );
    }
    Memory(files)
}

/// Compile in both modes and render the report, as the fuzz target does.
fn compile_both(data: &[u8]) {
    let loader = loader(data);
    let info = PipelineInfo {
        ref_name: "main".into(),
        ..PipelineInfo::default()
    };
    let ctx = Context::new(&info, &[("VAR".to_owned(), "value".to_owned())], None);
    for fragment in [false, true] {
        let opts = Options {
            fragment,
            ..Options::default()
        };
        let c = compile(&opts, &ctx, &loader);
        let _ = report::LintReport::new(&c);
        let _ = report::render_text(&c);
    }
}

fn inputs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fuzz_regressions exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n != "README.md" && !n.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn fuzz_regressions_compile_without_panic_or_hang() {
    let mut failures = Vec::new();
    let files = inputs();
    for path in &files {
        let data = std::fs::read(path).expect("readable input");
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            compile_both(&data);
            let _ = tx.send(());
        });
        match rx.recv_timeout(TIMEOUT) {
            Ok(()) => {
                let _ = handle.join();
            }
            // The sender was dropped without sending: the thread panicked.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let msg = match handle.join() {
                    Err(e) => e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_default(),
                    Ok(()) => String::new(),
                };
                failures.push(format!("{}: panicked: {msg}", path.display()));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => failures.push(format!(
                "{}: did not return within {TIMEOUT:?}",
                path.display()
            )),
        }
    }
    println!(
        "fuzz regressions: {} inputs, {} failures",
        files.len(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
