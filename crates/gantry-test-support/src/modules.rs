//! A crate's top-level modules and which of them each one uses, read from its source: the
//! check that keeps a crate's module graph free of cycles ([`assert_no_module_cycle`]).
//!
//! A top-level module is `src/x.rs` with everything under `src/x/`. Module `a` uses `b`
//! when code of `a` names `crate::b` (a path, or an item of a `use crate::{…}` group).
//! Comment lines (`//`, `//!`, `///`, so intra-doc links) and the unit tests (from a
//! `#[cfg(test)]` line on) are not read: a dependency is what the compiled code needs.
//!
//! The same reading checks a seam: [`assert_only_through_the_top_of`] fails when a
//! module names another's submodules (the runner's job lifecycle and its executors).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `src` and the top-level modules it uses.
pub fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let entries =
        std::fs::read_dir(src).unwrap_or_else(|e| panic!("{} unreadable: {e}", src.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        if path.is_dir() {
            let mut all = Vec::new();
            rust_files(&path, &mut all);
            files.entry(name).or_default().extend(all);
        } else if let Some(module) = name.strip_suffix(".rs") {
            if !matches!(module, "lib" | "main") {
                files.entry(module.to_owned()).or_default().push(path);
            }
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(module, paths)| {
            let mut uses = BTreeSet::new();
            for path in paths {
                let text = std::fs::read_to_string(path)
                    .unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display()));
                for used in crate_paths(&text) {
                    if used != *module && modules.contains(&used) {
                        uses.insert(used);
                    }
                }
            }
            (module.clone(), uses)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        // A module's unit tests (`tests.rs`, `tests/`) are not what it needs.
        if path.file_stem().is_some_and(|s| s == "tests") {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file: its lines up to its unit tests (a `#[cfg(test)]` line followed by
/// `mod …`), comment lines left out.
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tests = (0..lines.len())
        .find(|&i| {
            lines[i].trim() == "#[cfg(test)]"
                && lines
                    .get(i + 1)
                    .is_some_and(|next| next.trim_start().starts_with("mod "))
        })
        .unwrap_or(lines.len());
    lines[..tests]
        .iter()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| format!("{}\n", without_trailing_comment(l)))
        .collect()
}

/// `line` up to a trailing ` // comment` outside string literals (an even number of `"`
/// before it).
fn without_trailing_comment(line: &str) -> &str {
    let mut from = 0;
    while let Some(at) = line[from..].find(" //").map(|i| i + from) {
        if line[..at].matches('"').count() % 2 == 0 {
            return &line[..at];
        }
        from = at + 3;
    }
    line
}

/// The first segment after each `prefix` (such as `crate::`) of the code (not the
/// comments, not the unit tests), including each item of `prefix{a, b::c}`.
fn segments_after(text: &str, prefix: &str) -> Vec<String> {
    let code = code(text);
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::`, `my_crate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Items at the group's top level: the text after `{` or a `,`, up to the `}`
            // that closes the group.
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && (c.is_alphabetic() || c == '_') => {
                        out.push(ident(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out
}

/// The first segment after each `crate::` of the code.
fn crate_paths(text: &str) -> Vec<String> {
    segments_after(text, "crate::")
}

/// Fails, naming the files and paths, when the code of top-level module `from` names a
/// visible submodule of top-level module `to` (`crate::to::sub…`, where `src/to.rs`
/// declares `pub mod sub;` or `pub(crate) mod sub;`): `from` reaches `to` only through
/// what `to` offers at its top, its seam. (Private submodules the compiler keeps out.)
pub fn assert_only_through_the_top_of(manifest_dir: &str, from: &str, to: &str) {
    let src = Path::new(manifest_dir).join("src");
    let top = src.join(format!("{to}.rs"));
    let text = std::fs::read_to_string(&top)
        .unwrap_or_else(|e| panic!("{} unreadable: {e}", top.display()));
    let submodules: BTreeSet<String> = code(&text)
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let rest = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("pub(crate) mod "))
                .or_else(|| line.strip_prefix("pub(super) mod "))?;
            Some(ident(rest))
        })
        .collect();
    assert!(
        !submodules.is_empty(),
        "{} declares no visible submodule: the check has nothing to check",
        top.display()
    );
    let mut files = vec![src.join(format!("{from}.rs"))];
    rust_files(&src.join(from), &mut files);
    let mut found = Vec::new();
    for path in files.iter().filter(|p| p.exists()) {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display()));
        for item in segments_after(&text, &format!("crate::{to}::")) {
            if submodules.contains(&item) {
                found.push(format!("  {}: crate::{to}::{item}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "`{from}` reaches into `{to}`'s submodules; use (or add) what `{to}` offers at its top:\n{}",
        found.join("\n")
    );
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The cycles of `graph`: each strongly connected component of more than one module.
pub fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm.
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// Fails, naming the cycles and each module's uses, when the top-level modules of
/// `<manifest_dir>/src` form a cycle.
pub fn assert_no_module_cycle(manifest_dir: &str) {
    let graph = module_graph(&Path::new(manifest_dir).join("src"));
    let found = cycles(&graph);
    let uses: Vec<String> = graph
        .iter()
        .map(|(m, u)| {
            format!(
                "  {m} → {}",
                u.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        found.is_empty(),
        "the top-level modules of {manifest_dir}/src form cycles: {found:?}\n\
         (a module uses another when its code names `crate::other`; move what both need \
         below both)\n{}",
        uses.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_groups_and_not_comments_or_tests() {
        let text = "//! [`crate::docs`]\nuse crate::{a, b::{C, D}, c as e};\nfn f() { crate::d::g(); $crate::no; my_crate::no; }\n/// crate::doc\n#[cfg(test)]\nmod tests { use crate::t; }\n";
        assert_eq!(crate_paths(text), ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_seam_is_crossed_only_at_its_top() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("to")).unwrap();
        std::fs::create_dir_all(src.join("from")).unwrap();
        std::fs::write(
            src.join("to.rs"),
            "pub mod inner;\nmod private;\npub use inner::Seam;\npub use private::private;",
        )
        .unwrap();
        std::fs::write(src.join("to/inner.rs"), "pub struct Seam;").unwrap();
        std::fs::write(
            src.join("from.rs"),
            "use crate::to::{private, Seam}; // crate::to::inner\nconst URL: &str = \"a // b\"; fn f() { crate::to::private(); }",
        )
        .unwrap();
        let manifest = dir.path().to_str().unwrap();
        assert_only_through_the_top_of(manifest, "from", "to");
        std::fs::write(
            src.join("from/deep.rs"),
            "use crate::to::{Seam, inner::Seam as S};",
        )
        .unwrap();
        let refused =
            std::panic::catch_unwind(|| assert_only_through_the_top_of(manifest, "from", "to"));
        let message = *refused.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.contains("from/deep.rs: crate::to::inner"),
            "{message}"
        );
    }

    #[test]
    fn cycles_are_the_components_of_more_than_one_module() {
        let graph = |edges: &[(&str, &[&str])]| -> BTreeMap<String, BTreeSet<String>> {
            edges
                .iter()
                .map(|(m, u)| (m.to_string(), u.iter().map(|s| s.to_string()).collect()))
                .collect()
        };
        let acyclic = graph(&[("a", &["b", "c"]), ("b", &["c"]), ("c", &[])]);
        assert!(cycles(&acyclic).is_empty());
        let cyclic = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
        assert_eq!(cycles(&cyclic), [vec!["a", "b", "c"]]);
    }

    #[test]
    fn a_tree_in_a_temp_dir_is_read_by_files_and_folders() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("x")).unwrap();
        std::fs::write(src.join("lib.rs"), "pub mod x; pub mod y;").unwrap();
        std::fs::write(src.join("x.rs"), "mod inner;").unwrap();
        std::fs::write(src.join("x/inner.rs"), "use crate::y::Y;").unwrap();
        std::fs::write(src.join("y.rs"), "pub struct Y; fn f() { crate::x::g() }").unwrap();
        let graph = module_graph(&src);
        assert_eq!(cycles(&graph), [vec!["x", "y"]]);
    }
}
