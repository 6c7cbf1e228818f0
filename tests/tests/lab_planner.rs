//! `vigil lab` on a planner scenario (§D.2) scaled down to seconds: two real nodes capped
//! at two sessions each, one live camera held by each, Poisson requests (half live views,
//! half playbacks) for 10 s, without and with the migration planner. The report folder
//! must be complete, its acceptance figures must be the sessions CSV's, and the sessions
//! the report counts as accepted and refused, and the migrations its clients saw, must
//! equal the nodes' own counters.

use vigil_tests::report::{run_lab, table};

const SCENARIO: &str = r#"
name = "planner-tiny"
kind = "planner"
description = "two nodes capped at two sessions"
paper = "none: a test of the runner"
scaling = "a test: 2 nodes × cap 2, 2 live cameras, Poisson 90/min for 10 s"
seed = 5
policies = ["no-planner", "planner"]

[nodes]
count = 2
bord_mbps = 1000.0
max_sessions = 2

[storage]
latency_ms = 0.0
bandwidth_mbps = 4000.0

[workload]
cameras = 2
recording_secs = 30.0
segment_secs = 2.0
bitrate_mbps = 0.61
choice = { kind = "zipf", s = 0.6 }
session_mean_secs = 4.0

[sweep]
lambdas_per_min = [90.0]
duration_min = 0.17
replicas_per_node = 1
layouts = ["mismatched"]
playback_share = 0.5

[cluster.planner]
period_ms = 500
window_ms = 10000
horizon_ms = 5000
"#;

#[test]
fn a_tiny_planner_lab_run_agrees_with_the_nodes_counters() {
    let lab = run_lab(
        "planner-tiny",
        SCENARIO,
        &["acceptance.png", "migrations.png"],
    );
    let (md, rows) = (&lab.md, &lab.rows);
    assert!(md.contains("lab run, seed 5"), "{md}");
    let fig = table(md, "Acceptance and migrations");
    let own = table(md, "Nodes' own counters");
    let mut requests = Vec::new();
    for arm in ["no-planner", "planner"] {
        let mine: Vec<_> = rows.iter().filter(|r| r["policy"] == arm).collect();
        // Poisson(90/min) over 10 s: 15 expected; the seed fixes the draw for both arms.
        assert!((5..=40).contains(&mine.len()), "{arm}: {}", mine.len());
        requests.push(mine.len());
        let live = mine.iter().filter(|r| r["time_ms"] == "0").count();
        assert!(live > 0 && live < mine.len(), "{arm}: {live} live views");
        let accepted: Vec<_> = mine.iter().filter(|r| r["rejected"] == "false").collect();
        let refused = mine.iter().filter(|r| r["rejected"] == "true").count();
        for r in &accepted {
            let ms: f64 = r["response_ms"]
                .parse()
                .unwrap_or_else(|_| panic!("no first keyframe: {r:?}"));
            assert!(ms > 0.0 && ms < 10_000.0, "{r:?}");
            assert!(r["node"] == "lab-n0" || r["node"] == "lab-n1", "{r:?}");
        }
        // The acceptance figures: the requests after the first session mean (4 s).
        let measured: Vec<_> = mine
            .iter()
            .filter(|r| r["requested_s"].parse::<f64>().expect("seconds") >= 4.0)
            .collect();
        let ok = measured.iter().filter(|r| r["rejected"] == "false").count();
        let row = fig
            .iter()
            .find(|c| c[0] == arm)
            .unwrap_or_else(|| panic!("no figures of {arm}"));
        assert_eq!(row[2], measured.len().to_string(), "{row:?}");
        assert_eq!(row[3], ok.to_string(), "{row:?}");
        let pct = 100.0 * ok as f64 / measured.len().max(1) as f64;
        assert_eq!(row[4], format!("{pct:.2} %"), "{row:?}");
        // Whole run: sessions opened by SETUP, 503s (session cap or placement) and moved
        // sessions, by the nodes and by the clients.
        let all = own
            .iter()
            .find(|c| c[0] == arm)
            .unwrap_or_else(|| panic!("no counters of {arm}"));
        assert_eq!(all[2], mine.len().to_string(), "{all:?}");
        let a = accepted.len().to_string();
        assert_eq!(all[3], format!("{a} / {a}"), "sessions opened: {all:?}");
        assert_eq!(all[4], format!("{refused} / {refused}"), "503s: {all:?}");
        let seen: u32 = mine
            .iter()
            .map(|r| r["migrations"].parse::<u32>().expect("count"))
            .sum();
        assert_eq!(all[5], format!("{seen} / {seen}"), "migrations: {all:?}");
        if arm == "no-planner" {
            assert_eq!(
                seen, 0,
                "nothing moves sessions without the planner (REM off)"
            );
        }
    }
    assert_eq!(requests[0], requests[1], "both arms get the same arrivals");
    let runs = md
        .lines()
        .find(|l| l.starts_with("**Runs.**"))
        .expect("the runs note");
    assert_eq!(runs.matches(" 0 failed").count(), 2, "{runs}");
}
