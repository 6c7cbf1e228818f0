//! `vigil lab` of a gateway scenario (§B) end to end, scaled down to seconds: a camera farm,
//! two real gateways pulling eight cameras from it, three tours of two cameras switching
//! every 2 s for 10 s, manual binding and the balanced gateway (sleep after 3 s idle, a
//! sampling period of 1 s). The report folder must be complete; every live start must have
//! got a keyframe; the figures must count the sessions CSV's starts; and the nodes' own
//! counters must agree with the tours': every live start is one RTSP connection to its
//! entry node plus one to the holder after a 302, the cameras moved are the scheduler's.

use vigil_tests::report::{assert_started, connections_match, run_lab, table};

const SCENARIO: &str = r#"
name = "lab-gw-tiny"
kind = "gateway"
description = "two gateways, eight cameras, three tours"
paper = "none: a test of the runner"
scaling = "a test: 2 gateways, 8 cameras, tours 2/1 × 2 cameras switching every 2 s, 10 s"
seed = 3
policies = ["manual", "balanced"]

[nodes]
count = 2
bord_mbps = 100.0

[workload]
cameras = 8
recording_secs = 60.0
bitrate_mbps = 0.61
choice = { kind = "uniform" }
session_mean_secs = 2.0
think_mean_secs = 0.0

[ramp]
steps = [2, 3]
step_secs = 5.0
settle_secs = 0.0
spread_secs = 4.0

[gateway]
tours_per_node = [2, 1]
cameras_per_tour = 2
switch_secs = 2.0
cpu_per_camera = 0.004
cpu_per_viewer = 0.03
start_ms = 60.0
wake_ms = 800.0
x_mbytes_per_stream = 34.6

[cluster.gateway]
ts_max_ms = 3000
sample_period_ms = 1000
"#;

#[test]
fn a_tiny_gateway_lab_run_writes_a_complete_consistent_report() {
    let report = run_lab(
        "lab-gateway-tiny",
        SCENARIO,
        &[
            "live_start_mean.png",
            "gateway_load_manual.png",
            "gateway_load_balanced.png",
        ],
    );
    let (md, rows) = (&report.md, &report.rows);
    assert!(md.contains("lab run, seed 3"), "{md}");
    let figures = table(md, "Live-start response time per step");
    let own = table(md, "Nodes' own counters");
    for arm in ["manual", "balanced"] {
        let mine: Vec<_> = rows.iter().filter(|r| r["policy"] == arm).collect();
        // Tours of 2 s switches over 10 s: 2 tours from 0–4 s, a third from 5–9 s.
        assert!(
            (8..=16).contains(&mine.len()),
            "{arm}: {} starts",
            mine.len()
        );
        for r in &mine {
            assert_started(r);
        }
        // The figures count every start of the CSV (no settle time), step by step.
        let counted: usize = figures
            .iter()
            .filter(|c| c[1] == arm)
            .map(|c| c[2].parse::<usize>().expect("starts"))
            .sum();
        assert_eq!(counted, mine.len(), "{arm}: {figures:?}");
        // The nodes counted one connection per start and one per redirect.
        let all = connections_match(&own, arm, &mine);
        assert_eq!(all[3], mine.len().to_string(), "starts served: {all:?}");
        assert_eq!(all[4], "8", "every camera bound at the end: {all:?}");
        let served: usize = own
            .iter()
            .filter(|c| c[0] == arm && c[1] != "all")
            .map(|c| c[3].parse::<usize>().expect("served"))
            .sum();
        assert_eq!(served, mine.len(), "{own:?}");
    }
    // Manual binding: nothing moves or sleeps. Balanced: the moves table is the scheduler's.
    let manual = own
        .iter()
        .find(|c| c[0] == "manual" && c[1] == "all")
        .expect("manual totals");
    assert_eq!(
        (manual[5].as_str(), manual[6].as_str()),
        ("0", "0"),
        "{manual:?}"
    );
    let balanced = own
        .iter()
        .find(|c| c[0] == "balanced" && c[1] == "all")
        .expect("balanced totals");
    let moves: u64 = table(md, "Cameras moved and put to sleep")
        .iter()
        .filter(|c| c[0] != "(asleep)")
        .map(|c| c[2].parse::<u64>().expect("moves"))
        .sum();
    assert_eq!(moves.to_string(), balanced[6], "{balanced:?}");
    for arm in ["manual", "balanced"] {
        let note = md
            .lines()
            .find(|l| l.starts_with(&format!("**{arm}.**")))
            .unwrap_or_else(|| panic!("no note of {arm}"));
        assert!(note.contains(" live starts, 0 failed"), "{note}");
    }
}
