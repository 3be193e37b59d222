//! Arbitrary bytes as `.gitlab-ci.yml` through `gantry_pipeline::compile`, in normal and
//! `fragment` mode. When the input holds [`SEPARATOR`], the text before it is the root file
//! and the text after it is `inc.yml`, which the root may `include: local` (directly, with
//! a wildcard, or from itself again: the include limits bound the recursion).
//!
//! The invariant under test is the crate's "no panics on any input" (and, with `-timeout`,
//! no hangs).

#![no_main]

use std::collections::BTreeMap;

use gantry_pipeline::{Context, Loader, Options, PipelineInfo, compile, report};
use libfuzzer_sys::fuzz_target;

/// Splits the input into `.gitlab-ci.yml` and `inc.yml`.
const SEPARATOR: &[u8] = b"\n#--inc--\n";

struct Memory(BTreeMap<String, String>);

impl Loader for Memory {
    fn read(&self, path: &str) -> Result<Option<String>, String> {
        Ok(self.0.get(path).cloned())
    }
    fn files(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
}

fn split(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.windows(SEPARATOR.len()).position(|w| w == SEPARATOR) {
        Some(i) => (&data[..i], Some(&data[i + SEPARATOR.len()..])),
        None => (data, None),
    }
}

fuzz_target!(|data: &[u8]| {
    let (root, inc) = split(data);
    let mut files = BTreeMap::new();
    files.insert(".gitlab-ci.yml".to_owned(), String::from_utf8_lossy(root).into_owned());
    if let Some(inc) = inc {
        files.insert("inc.yml".to_owned(), String::from_utf8_lossy(inc).into_owned());
    }
    let loader = Memory(files);
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
        let compiled = compile(&opts, &ctx, &loader);
        // Rendering the result (`gantry lint` output, locations included) must not panic either.
        std::hint::black_box(report::LintReport::new(&compiled));
        std::hint::black_box(report::render_text(&compiled));
    }
});
