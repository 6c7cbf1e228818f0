//! The crate's modules depend on each other one way (issue 24 §4): the config and the
//! reported records (`config`, `records`) are leaves every policy builds on, the formulas
//! over one node (`load`) sit below the indexed view (`view`), and no two modules name each
//! other. A circle only a reviewer would catch comes back with the first convenient import;
//! this test names it instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The crate modules each top-level module names (`crate::x`, `crate::{x, y::…}`), comments
/// skipped.
fn names() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    let mut dirs = vec![src()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                files.push(path);
            }
        }
    }
    for path in files {
        let rel = path.strip_prefix(src()).expect("under src/");
        let first = rel.components().next().expect("a file name");
        let module = Path::new(first.as_os_str())
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_string();
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read a source file");
        let named = out.entry(module).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let items: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group.split(',').collect(),
                    None => vec![rest],
                };
                for item in items {
                    let item = item.trim_start();
                    let end = item
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(item.len());
                    if end > 0 {
                        named.insert(item[..end].to_string());
                    }
                }
            }
        }
    }
    out
}

#[test]
fn no_two_modules_name_each_other() {
    let names = names();
    let mut both_ways = Vec::new();
    for (a, named) in &names {
        for b in named {
            if a < b && names.get(b).is_some_and(|n| n.contains(a)) {
                both_ways.push(format!("{a} <-> {b}"));
            }
        }
    }
    assert!(
        both_ways.is_empty(),
        "modules that name each other (move the shared piece below both): {both_ways:?}"
    );
}

#[test]
fn config_and_the_records_are_leaves() {
    let names = names();
    for (leaf, may) in [("config", &[][..]), ("records", &["knn"][..])] {
        let named = names.get(leaf).cloned().unwrap_or_default();
        let extra: Vec<_> = named
            .iter()
            .filter(|m| *m != leaf && !may.contains(&m.as_str()) && *m != "ClusterError")
            .collect();
        assert!(extra.is_empty(), "{leaf} names {extra:?}");
    }
    assert!(names.contains_key("view") && names.contains_key("load"));
}
