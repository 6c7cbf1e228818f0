//! The module layering ARCHITECTURE.md states, checked on the source: the node and what it
//! stands on name no module above them (the cluster, recording, migration, playback, HLS,
//! RTSP and the API reach the node, not the other way round), and live HLS does not reach
//! into recording (both consume frames through `live::frames`). A rule only a reviewer
//! keeps regresses with the first convenient import; this test fails instead.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The modules at the bottom of the crate: the node and everything it may import. The set
/// is closed: none of them names a module outside it, so nothing below the node imports,
/// even indirectly, a module that uses the node.
const BELOW_THE_NODE: &[&str] = &[
    "node", "live", "net", "procfs", "auth", "limits", "library", "audit",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The source files of top-level module `module` with each one's module depth (`x.rs` and
/// `x/mod.rs`: 1, `x/y.rs`: 2, …).
fn files_of(module: &str) -> Vec<(PathBuf, usize)> {
    let file = src().join(format!("{module}.rs"));
    if file.is_file() {
        return vec![(file, 1)];
    }
    let mut out = Vec::new();
    let mut dirs = vec![(src().join(module), 1)];
    while let Some((dir, depth)) = dirs.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("module {module}: cannot read {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push((path, depth + 1));
            } else if path.extension().is_some_and(|x| x == "rs") {
                let is_root = path.file_name().is_some_and(|n| n == "mod.rs");
                out.push((path, if is_root { depth } else { depth + 1 }));
            }
        }
    }
    assert!(!out.is_empty(), "module {module} has no source files");
    out
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules a file names: `crate::x`, `crate::{x::…, y}`, and `super::` chains
/// long enough to reach the crate root from a file at `depth`. Comments are skipped (a doc
/// link is not a dependency).
fn named_modules(text: &str, depth: usize) -> BTreeSet<String> {
    names_after(text, &["crate::", &"super::".repeat(depth)])
}

/// The first name after each of `prefixes` in `text`'s code, groups (`{a::…, b}`) read.
fn names_after(text: &str, prefixes: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for &prefix in prefixes {
            for (at, _) in code.match_indices(prefix) {
                let rest = &code[at + prefix.len()..];
                if let Some(group) = rest.strip_prefix('{') {
                    // The first name of each item at the group's top level (a group spread
                    // over lines is read as far as its first line goes).
                    let mut level = 0;
                    let mut item_start = true;
                    for (i, c) in group.char_indices() {
                        match c {
                            '{' => level += 1,
                            '}' if level == 0 => break,
                            '}' => level -= 1,
                            ',' if level == 0 => item_start = true,
                            c if item_start && !c.is_whitespace() => {
                                out.insert(ident(&group[i..]).to_string());
                                item_start = false;
                            }
                            _ => {}
                        }
                    }
                } else {
                    out.insert(ident(rest).to_string());
                }
            }
        }
    }
    out.retain(|m| !m.is_empty() && m != "super" && m != "self");
    out
}

/// `(file, module it names)` for every file of `module` that names one of `forbidden`.
fn violations(module: &str, forbidden: impl Fn(&str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for (path, depth) in files_of(module) {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for m in named_modules(&text, depth) {
            if forbidden(&m) {
                out.push(format!("{} names crate::{m}", path.display()));
            }
        }
    }
    out
}

#[test]
fn the_node_and_what_it_stands_on_name_nothing_above_them() {
    let mut bad = Vec::new();
    for module in BELOW_THE_NODE {
        bad.extend(violations(module, |m| !BELOW_THE_NODE.contains(&m)));
    }
    assert!(
        bad.is_empty(),
        "modules below the node name modules above it (move the shared piece down, or let \
         the higher module own it):\n{}",
        bad.join("\n")
    );
}

#[test]
fn hls_does_not_reach_into_recording() {
    let bad = violations("hls", |m| m == "record");
    assert!(
        bad.is_empty(),
        "HLS names recording (frame consumption is `live::frames`):\n{}",
        bad.join("\n")
    );
}

/// The crate's top-level modules (files and directories under `src/`, less the roots).
fn top_level_modules() -> Vec<String> {
    let entries = std::fs::read_dir(src()).expect("read src/");
    let mut out: Vec<String> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_stem()?.to_str()?.to_string();
            (path.is_dir() || path.extension().is_some_and(|x| x == "rs")).then_some(name)
        })
        .filter(|m| m != "lib" && m != "main")
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The modules `module` names that also name `module` back.
fn mutual(module: &str) -> Vec<String> {
    let names = |m: &str| -> BTreeSet<String> {
        files_of(m)
            .into_iter()
            .flat_map(|(path, depth)| {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                named_modules(&text, depth)
            })
            .collect()
    };
    let named = names(module);
    top_level_modules()
        .into_iter()
        .filter(|m| m != module && named.contains(m) && names(m).contains(module))
        .collect()
}

/// Modules that name no module naming them back: migration builds on the cluster and on the
/// playback and live senders, and the API on HLS and export, never the other way round.
const ONE_WAY: &[&str] = &[
    "cluster",
    "playback",
    "live_sender",
    "sender",
    "steering",
    "hls",
    "export",
];

#[test]
fn the_cluster_the_senders_hls_and_export_name_no_module_that_uses_them() {
    // Migration and ingest serve the cluster through traits it defines
    // (`MigrationService`, `CameraHost`); the messages they exchange live in `handoff`; the
    // playback sender's preserve-mode socket is `net::raw`; the recorded ranges' gap is
    // `library::GAP_MS`.
    for module in ONE_WAY {
        let both_ways = mutual(module);
        assert!(
            both_ways.is_empty(),
            "{module} and these modules name each other (let {module} define a trait the \
             other implements, or move the shared piece below both): {both_ways:?}"
        );
    }
    assert!(
        top_level_modules().contains(&"migrate".to_string()),
        "the module list misses migrate: {:?}",
        top_level_modules()
    );
}

/// `file:line` of every line of `module` that names `target`.
fn lines_naming(module: &str, target: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (path, depth) in files_of(module) {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for (n, line) in text.lines().enumerate() {
            if named_modules(line, depth).contains(target) {
                out.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    out
}

#[test]
fn rtsp_and_migration_do_not_name_each_other() {
    // A session's senders after a move are trait objects `playback::sender` and
    // `live_sender` define; moves and take-backs reach migration through the handler it
    // registers in `node::extensions` (`steering::CommandHandler`), which gets the session
    // as the `steering::Steered` view the connection lends it.
    for (from, to) in [("rtsp", "migrate"), ("migrate", "rtsp")] {
        let bad = lines_naming(from, to);
        assert!(
            bad.is_empty(),
            "{from} names {to} (let a module below both define what they share):\n{}",
            bad.join("\n")
        );
    }
}

#[test]
fn the_scanner_sees_every_form_of_path() {
    let text = "use crate::migrate::SessionCommand;\n\
                use crate::{hls::{Registry, live::Live}, live::stream::Stream};\n\
                let x: Option<crate::playback::X> = None; // crate::rtsp in a comment\n\
                use super::super::cluster::Cluster;\n\
                use super::writer_pool::Lane;\n";
    let named: Vec<String> = named_modules(text, 2).into_iter().collect();
    assert_eq!(
        named,
        ["cluster", "hls", "live", "migrate", "playback"].map(String::from)
    );
    // From a module root (depth 1), one `super::` is the crate root.
    assert_eq!(
        named_modules("use super::record::FrameSink;", 1),
        BTreeSet::from(["record".to_string()])
    );
}

/// Pairs of submodules of `module` (a directory module) that name each other: a file
/// reaches a sibling by as many `super::` as it is deep, or by `crate::<module>::`.
fn mutual_submodules(module: &str) -> Vec<(String, String)> {
    let root = src().join(module);
    let mut names: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for (path, depth) in files_of(module) {
        let rel = path.strip_prefix(&root).expect("a file of the module");
        let Some(first) = rel.components().next() else {
            continue;
        };
        let sub = Path::new(first.as_os_str())
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_string();
        if sub == "mod" {
            continue; // the module's root declares every submodule
        }
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let up = "super::".repeat(depth - 1);
        let inside = format!("crate::{module}::");
        names
            .entry(sub)
            .or_default()
            .extend(names_after(&text, &[&up, &inside]));
    }
    let mut out = Vec::new();
    for (a, named) in &names {
        for b in named {
            if a < b && names.get(b).is_some_and(|n| n.contains(a)) {
                out.push((a.clone(), b.clone()));
            }
        }
    }
    out
}

#[test]
fn no_two_parts_of_the_cluster_shell_name_each_other() {
    // `shell` is the hub and exempt: it holds each part's state and runs its task, and each
    // part acts on the shell's `Cluster`. Between the parts every dependency is one way:
    // the report record and its padding (`report`, `synthetic`) are published by
    // `publish`; the wire records (`rpc`) are a leaf (below).
    let both_ways: Vec<_> = mutual_submodules("cluster")
        .into_iter()
        .filter(|(a, b)| a != "shell" && b != "shell")
        .collect();
    assert!(
        both_ways.is_empty(),
        "submodules of cluster name each other (move the shared piece into one of them, or \
         below both): {both_ways:?}"
    );
}

/// The cluster's wire records (`cluster::rpc`) name none of the cluster's other modules:
/// every side of a call builds on them, so a record that reached into `camera_move` or the
/// shell closed a circle.
#[test]
fn the_cluster_wire_records_are_a_leaf() {
    let path = src().join("cluster").join("rpc.rs");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        assert!(
            !code.contains("super::") && !code.contains("crate::cluster::"),
            "cluster/rpc.rs names a sibling (move the shared type into rpc): {line}"
        );
    }
}
