//! `vigil lab` on a feedback scenario (§C) scaled down to seconds: three real nodes of
//! unequal Bord with a cap of two sessions each, two policies, 4 then 10 closed-loop
//! clients for 5 s each, so that the top step must refuse some. The report folder must be
//! complete, its figures must be the sessions CSV's, and what the clients counted
//! (connections, sessions served, 503s) must equal the nodes' own counters.

use vigil_tests::report::{run_lab, table};

const SCENARIO: &str = r#"
name = "feedback-tiny"
kind = "feedback"
description = "three nodes, ten clients"
paper = "none: a test of the runner"
scaling = "a test: 3 nodes of unequal Bord and 2 sessions each, 6 cameras, 4 then 10 clients for 5 s each"
seed = 3
policies = ["least-connections", "knn-class"]

[nodes]
count = 3
bord_mbps = 10.0
capacity = [1.0, 1.0, 0.5]
max_sessions = 2

[storage]
latency_ms = 0.0
bandwidth_mbps = 4000.0

[workload]
cameras = 6
recording_secs = 30.0
segment_secs = 2.0
bitrate_mbps = 0.61
choice = { kind = "uniform" }
session_mean_secs = 20.0
think_mean_secs = 0.5

[ramp]
steps = [4, 10]
step_secs = 5.0
settle_secs = 1.0
"#;

const POLICIES: [&str; 2] = ["least-connections", "knn-class"];

#[test]
fn a_tiny_feedback_lab_run_agrees_with_the_nodes_counters() {
    let lab = run_lab(
        "feedback-tiny",
        SCENARIO,
        &[
            "response_mean.png",
            "response_p95.png",
            "node_load_least-connections.png",
            "node_load_knn-class.png",
        ],
    );
    let (md, rows) = (&lab.md, &lab.rows);
    assert!(md.contains("lab run, seed 3"), "{md}");
    let fig = table(md, "Figures per step");
    let own = table(md, "Nodes' own counters");
    for policy in POLICIES {
        let mine: Vec<_> = rows.iter().filter(|r| r["policy"] == policy).collect();
        let accepted: Vec<_> = mine.iter().filter(|r| r["rejected"] == "false").collect();
        let rejected = mine.len() - accepted.len();
        // Six slots for ten clients whose sessions last exp(20 s): the second step refuses.
        assert!(rejected >= 1, "{policy}: no 503 in {} requests", mine.len());
        assert!(accepted.len() >= 6, "{policy}: {} served", accepted.len());
        for r in &accepted {
            let ms: f64 = r["response_ms"]
                .parse()
                .unwrap_or_else(|_| panic!("no first keyframe: {r:?}"));
            assert!(ms > 0.0 && ms < 10_000.0, "{r:?}");
            assert!(
                ["lab-n0", "lab-n1", "lab-n2"].contains(&r["node"].as_str()),
                "{r:?}"
            );
        }
        // Each step's figures are the CSV's requests made in its measured window.
        for (step, level) in [(0.0, "4"), (5.0, "10")] {
            let window: Vec<_> = mine
                .iter()
                .filter(|r| {
                    let t: f64 = r["requested_s"].parse().expect("seconds");
                    t >= step + 1.0 && t < step + 5.0
                })
                .collect();
            let row = fig
                .iter()
                .find(|c| c[0] == level && c[1] == policy)
                .unwrap_or_else(|| panic!("no figures of {policy} at {level}"));
            assert_eq!(row[2], window.len().to_string(), "requests: {row:?}");
            let refused = window.iter().filter(|r| r["rejected"] == "true").count();
            assert_eq!(row[3], refused.to_string(), "rejections: {row:?}");
            let l: f64 = row[6].parse().expect("mean L");
            assert!(l > 0.0 && l <= 1.0, "mean L: {row:?}");
            let kib: f64 = row[10].parse().expect("gossip KiB");
            assert!(kib > 0.0, "report traffic: {row:?}");
        }
        // The nodes' own counters: connections (entry + 302 target), sessions opened by
        // SETUP, 503s (placement or session cap), each equal to the clients' count.
        let all = own
            .iter()
            .find(|c| c[0] == policy && c[1] == "all")
            .unwrap_or_else(|| panic!("no totals of {policy}"));
        let redirects = mine.iter().filter(|r| r["redirected"] == "true").count();
        let pair = |cell: &str| -> (String, String) {
            let (a, b) = cell.split_once(" / ").expect("node / clients");
            (a.to_string(), b.to_string())
        };
        assert_eq!(
            pair(&all[2]),
            (
                (mine.len() + redirects).to_string(),
                (mine.len() + redirects).to_string()
            ),
            "connections: {all:?}"
        );
        let n = accepted.len().to_string();
        assert_eq!(pair(&all[3]), (n.clone(), n), "sessions opened: {all:?}");
        let r = rejected.to_string();
        assert_eq!(pair(&all[4]), (r.clone(), r), "503s: {all:?}");
        for node in own.iter().filter(|c| c[0] == policy && c[1] != "all") {
            let (by_node, by_clients) = pair(&node[3]);
            assert_eq!(by_node, by_clients, "sessions of {node:?}");
            assert!(by_node.parse::<u64>().expect("count") <= 20, "{node:?}");
        }
    }
    let runs = md
        .lines()
        .find(|l| l.starts_with("**Runs.**"))
        .expect("the runs note");
    assert_eq!(runs.matches(" 0 failed").count(), 2, "{runs}");
    let beside = table(md, "Simulation beside");
    assert_eq!(beside.len(), 4, "two steps × two policies: {beside:?}");
}
