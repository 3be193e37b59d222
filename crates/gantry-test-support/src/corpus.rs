//! The conformance corpora of `../shared/conformance` (beside the repository) and the
//! exception lists the conformance tests keep beside them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gantry_pipeline::yaml::{self, FileId, Limits};
use serde_json::Value as J;

/// `shared/conformance/<sub>` beside the repository; panics, saying where it looked, when
/// it is not there (a clone must sit beside `shared/`).
pub fn shared(sub: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance");
    let dir = if sub.is_empty() { root } else { root.join(sub) };
    assert!(
        dir.is_dir(),
        "conformance corpus not found at {}: the shared/ folder must sit beside the repository",
        dir.display()
    );
    dir
}

/// An exception list (`<id> — <reason>` per line; blank lines and `#` comments skipped):
/// the reason of each listed id. A missing file is an empty list.
pub fn exceptions(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            l.split_once(" — ")
                .map(|(k, r)| (k.trim().to_owned(), r.trim().to_owned()))
        })
        .collect()
}

/// The gitlab-ci-local corpus: gitlab-ci-local's integration tests turned into neutral
/// records (`expectations.yaml`, one entry per upstream test, and `cases/<case>/`).
pub mod gcl {
    use super::*;

    /// The corpus' git remote (its README, "Running a record").
    pub const REMOTE: &str = "git@gitlab.com:gcl/test-project.git";

    pub fn dir() -> PathBuf {
        shared("gitlab-ci-local")
    }

    /// The entries of `expectations.yaml`, read with Gantry's own YAML reader.
    pub fn records() -> Vec<J> {
        let path = dir().join("expectations.yaml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display()));
        let docs = yaml::parse_documents(&text, FileId(0), Limits::default())
            .unwrap_or_else(|e| panic!("{} does not parse: {e:?}", path.display()));
        let root = docs.first().map(|d| d.to_json()).expect("one document");
        match root.get("entries") {
            Some(J::Array(entries)) => entries.clone(),
            _ => panic!("{}: no `entries` list", path.display()),
        }
    }

    /// A YAML scalar of a record as text (`1` → "1", `true` → "true", null → "").
    pub fn scalar(v: &J) -> String {
        match v {
            J::String(s) => s.clone(),
            J::Null => String::new(),
            other => other.to_string(),
        }
    }

    /// A record's list (or single value, or nothing) as texts.
    pub fn str_list(v: Option<&J>) -> Vec<String> {
        match v {
            Some(J::Array(a)) => a.iter().map(scalar).collect(),
            Some(J::Null) | None => Vec::new(),
            Some(other) => vec![scalar(other)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exception_list_keeps_ids_and_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.txt");
        std::fs::write(
            &file,
            "# comment\n\na#1 — why\nno dash here\n b#2  —  other \n",
        )
        .unwrap();
        let list = exceptions(&file);
        assert_eq!(list.len(), 2);
        assert_eq!(list["a#1"], "why");
        assert_eq!(list["b#2"], "other");
        assert!(exceptions(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn record_values_read_as_text() {
        assert_eq!(gcl::scalar(&serde_json::json!(1)), "1");
        assert_eq!(gcl::scalar(&serde_json::json!(null)), "");
        assert_eq!(
            gcl::str_list(Some(&serde_json::json!(["a", true]))),
            ["a", "true"]
        );
        assert_eq!(gcl::str_list(Some(&serde_json::json!("x"))), ["x"]);
        assert!(gcl::str_list(None).is_empty());
    }
}
