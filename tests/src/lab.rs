//! Reading a `vigil lab` / `vigil sim` report folder: its sessions CSV and its Markdown
//! tables.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::{run_with_timeout, vigil_bin};

/// A report folder `vigil lab` wrote, read back.
pub struct LabReport {
    /// Holds the folder: dropped, it is deleted.
    pub dir: tempfile::TempDir,
    pub out: PathBuf,
    /// `report.md`.
    pub md: String,
    /// `sessions.csv`'s rows.
    pub rows: Vec<BTreeMap<String, String>>,
}

/// Runs `vigil lab` on the scenario `toml` (within 120 s) and checks that the report folder
/// holds `report.md`, both CSVs and the `plots`, each of some substance, and that the report
/// names the seed.
pub fn run_lab(toml: &str, seed: u64, plots: &[&str]) -> LabReport {
    let dir = tempfile::tempdir().expect("temp dir");
    let scenario = dir.path().join("scenario.toml");
    std::fs::write(&scenario, toml).expect("write the scenario");
    let out = dir.path().join("report");
    let run = run_with_timeout(
        Command::new(vigil_bin())
            .arg("lab")
            .arg(&scenario)
            .arg("--out")
            .arg(&out)
            .current_dir(dir.path()),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "vigil lab failed:\n{stderr}");
    for f in ["report.md", "sessions.csv", "summary.csv"]
        .iter()
        .chain(plots)
    {
        let meta = std::fs::metadata(out.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        assert!(meta.len() > 100, "{f} is {} bytes", meta.len());
        if f.ends_with(".png") {
            let png = std::fs::read(out.join(f)).expect("plot");
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{f}");
        }
    }
    let md = std::fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains(&format!("lab run, seed {seed}")), "{md}");
    let csv = std::fs::read_to_string(out.join("sessions.csv")).expect("sessions.csv");
    LabReport {
        dir,
        out,
        md,
        rows: rows(&csv),
    }
}

/// The CSV's rows as maps column → value (no field of this report holds a comma).
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
