//! Reading a `vigil lab` / `vigil sim` report folder in tests: the sessions CSV as rows and
//! a Markdown table of `report.md` as cells.

use std::collections::BTreeMap;

/// The CSV's rows as maps column → value (no field of these reports holds a comma).
pub fn rows(csv: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(cells.len(), head.len(), "row {l:?}");
            head.iter()
                .zip(cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        })
        .collect()
}

/// The Markdown table under `## title`: its rows as cells.
pub fn table(md: &str, title: &str) -> Vec<Vec<String>> {
    let start = md
        .find(&format!("## {title}"))
        .unwrap_or_else(|| panic!("no table {title:?} in:\n{md}"));
    md[start..]
        .lines()
        .skip(4)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The files a report folder must hold, each a real file (over 100 bytes; PNGs with the
/// PNG signature).
pub fn assert_files(dir: &std::path::Path, files: &[&str]) {
    for f in files {
        let data = std::fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(data.len() > 100, "{f} is {} bytes", data.len());
        if f.ends_with(".png") {
            assert_eq!(&data[..8], b"\x89PNG\r\n\x1a\n", "{f}");
        }
    }
}

/// A finished `vigil lab` run of a scenario file: its report folder read back.
pub struct LabRun {
    /// Holds the scenario file and the report folder until dropped.
    pub dir: tempfile::TempDir,
    pub out: std::path::PathBuf,
    /// `report.md`.
    pub md: String,
    /// `sessions.csv`'s rows.
    pub rows: Vec<BTreeMap<String, String>>,
}

/// Runs `vigil-lab lab` (the `vigil` under test as its nodes) on `scenario` (TOML text) within 120 s, asserts it succeeded and that
/// the folder holds `files` besides report.md, sessions.csv and summary.csv.
pub fn run_lab(name: &str, scenario: &str, files: &[&str]) -> LabRun {
    run_lab_with(name, scenario, files, &[])
}

/// [`run_lab`] with more arguments to `vigil lab` (e.g. `--no-emulation`).
pub fn run_lab_with(name: &str, scenario: &str, files: &[&str], args: &[&str]) -> LabRun {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, scenario).expect("write the scenario");
    let out = dir.path().join("report");
    let run = crate::run_with_timeout(
        std::process::Command::new(crate::vigil_lab_bin())
            .env("VIGIL_BIN", crate::vigil_bin())
            .arg("lab")
            .arg(&path)
            .arg("--out")
            .arg(&out)
            .args(args)
            .current_dir(dir.path()),
        std::time::Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "vigil lab failed:\n{stderr}");
    let mut all = vec!["report.md", "sessions.csv", "summary.csv"];
    all.extend(files);
    assert_files(&out, &all);
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    let csv = std::fs::read_to_string(out.join("sessions.csv")).expect("sessions.csv");
    LabRun {
        rows: rows(&csv),
        dir,
        out,
        md,
    }
}

/// The "all" row of the nodes' own counters table for `policy`, once its RTSP connections
/// ("node / clients", third column) are checked: the clients made one per request and one
/// more after each 302, and the nodes counted exactly those.
pub fn connections_match(
    own: &[Vec<String>],
    policy: &str,
    mine: &[&BTreeMap<String, String>],
) -> Vec<String> {
    let all = own
        .iter()
        .find(|c| c[0] == policy && c[1] == "all")
        .unwrap_or_else(|| panic!("no totals of {policy}"))
        .clone();
    let (node, clients) = all[2].split_once(" / ").expect("node / clients");
    let redirects = mine.iter().filter(|r| r["redirected"] == "true").count();
    assert_eq!(clients, (mine.len() + redirects).to_string(), "{all:?}");
    assert_eq!(
        node, clients,
        "connections by the nodes vs the clients: {all:?}"
    );
    all
}

/// A session row that started: a first keyframe within 10 s, from one of the two nodes
/// of the tiny runs.
pub fn assert_started(r: &BTreeMap<String, String>) {
    let ms: f64 = r["response_ms"]
        .parse()
        .unwrap_or_else(|_| panic!("no first keyframe: {r:?}"));
    assert!(ms > 0.0 && ms < 10_000.0, "{r:?}");
    assert!(
        r["node"] == "lab-n0" || r["node"] == "lab-n1",
        "served by {:?}",
        r["node"]
    );
}
