//! `vigil-lab lab` end to end on a scenario scaled down to seconds: two real nodes, four
//! cameras, two policies, six closed-loop clients for 12 s each. The report folder must be
//! complete, its sessions CSV must hold one row per request of each policy, every request
//! must have got a first keyframe or a counted 503, and the nodes' own counters must agree
//! with what the clients recorded; the report says the storage emulation the nodes ran with.
//! Also that `vigil lab|bench|sim` hand over to `vigil-lab`.

use vigil_tests::report::{assert_started, connections_match, run_lab, run_lab_with, table};

const SCENARIO: &str = r#"
name = "lab-tiny"
kind = "vod"
description = "two nodes, four cameras, six clients"
paper = "none: a test of the runner"
scaling = "a test: 2 nodes, 4 cameras × 2 recordings of 20 s, 6 clients for 12 s"
seed = 7
policies = ["least-load", "similarity+rem"]

[nodes]
count = 2
bord_mbps = 20.0
cache_mb = 16.0

[storage]
latency_ms = 10.0
bandwidth_mbps = 4000.0

[workload]
cameras = 4
recordings_per_camera = 2
recording_secs = 20.0
segment_secs = 4.0
bitrate_mbps = 0.61
choice = { kind = "uniform" }
session_mean_secs = 4.0
think_mean_secs = 1.0
vcr = [{ scale = 2.0, share = 0.5 }]
vcr_after_mean_secs = 2.0

[ramp]
steps = [6]
step_secs = 12.0
settle_secs = 2.0
"#;

#[test]
fn a_tiny_lab_run_writes_a_complete_consistent_report() {
    let report = run_lab(
        "lab-tiny",
        SCENARIO,
        &[
            "response_mean.png",
            "variance.png",
            "calibration_response.png",
        ],
    );
    let (md, rows) = (&report.md, &report.rows);
    assert!(md.contains("lab run, seed 7"), "{md}");

    for policy in ["least-load", "similarity+rem"] {
        let mine: Vec<_> = rows.iter().filter(|r| r["policy"] == policy).collect();
        // Six clients for 12 s with sessions of exp(4 s) and pauses of exp(1 s).
        assert!(
            (6..=200).contains(&mine.len()),
            "{policy}: {} requests",
            mine.len()
        );
        for r in &mine {
            if r["rejected"] == "true" {
                assert!(r["response_ms"].is_empty(), "{r:?}");
                continue;
            }
            assert_started(r);
            assert!(r["camera"].starts_with("cam-00000"), "{r:?}");
        }
        // The measured figures count the requests made after the settle time.
        let measured: Vec<_> = mine
            .iter()
            .filter(|r| r["requested_s"].parse::<f64>().expect("seconds") >= 2.0)
            .collect();
        let measured_rejected = measured.iter().filter(|r| r["rejected"] == "true").count();
        let fig = table(md, "Figures per step");
        let row = fig
            .iter()
            .find(|c| c[1] == policy)
            .unwrap_or_else(|| panic!("no figures of {policy}"));
        assert_eq!(
            row[2],
            measured.len().to_string(),
            "requests of {policy}: {row:?}"
        );
        assert_eq!(row[3], measured_rejected.to_string(), "rejections: {row:?}");
        let mean: f64 = row[4].parse().expect("mean ms");
        assert!(mean > 0.0, "{row:?}");
        // First-segment hits, counted by the nodes at each playback open: a ratio.
        let first: f64 = row[10].parse().expect("first-segment hits");
        assert!((0.0..=1.0).contains(&first), "first-segment hits: {row:?}");
        // Every RTSP connection a client made was counted by the node it reached: the
        // entry node's, plus the target's after a 302; a 503 ends at the entry.
        let own = table(md, "Nodes' own counters");
        let all = connections_match(&own, policy, &mine);
        assert!(all[4].parse::<u64>().expect("storage reads") > 0, "{all:?}");
    }
    let runs = md
        .lines()
        .find(|l| l.starts_with("**Runs.**"))
        .expect("the runs note");
    assert!(
        runs.matches(" 0 failed").count() == 2,
        "every request got a keyframe or a 503: {runs}"
    );
    // The storage emulation is said: the scenario's 4000 Mb/s LUN shared by the 2 nodes.
    let emulation = md
        .lines()
        .find(|l| l.starts_with("**Storage emulation (lab).**"))
        .expect("the storage emulation note");
    assert!(
        emulation.contains("read_latency_ms = 10, read_mbps = 2000"),
        "{emulation}"
    );
    let cal = table(md, "Calibration");
    assert_eq!(cal.len(), 2, "one calibration row per policy: {cal:?}");
    // Response time, λ and storage reads, each as ratios sim / lab, and first-segment hits.
    for row in &cal {
        assert_eq!(row.len(), 12, "{row:?}");
        let hits: Vec<f64> = row[11]
            .split(" / ")
            .map(|x| x.parse().expect("a ratio"))
            .collect();
        assert!(hits.iter().all(|h| (0.0..=1.0).contains(h)), "{row:?}");
    }
}

/// `--no-emulation`: the same scenario, one policy, on nodes without `[storage.emulate]`
/// (their segments are read from this machine's disk): the run completes, the nodes still
/// read storage and count it, and the report says how it ran and how to run it again.
#[test]
fn a_tiny_lab_run_without_the_storage_emulation_says_so() {
    let scenario = SCENARIO
        .replace(
            r#"policies = ["least-load", "similarity+rem"]"#,
            r#"policies = ["least-load"]"#,
        )
        .replace("step_secs = 12.0", "step_secs = 8.0");
    let report = run_lab_with("lab-plain", &scenario, &[], &["--no-emulation"]);
    let (md, rows) = (&report.md, &report.rows);
    assert!(md.contains("--no-emulation"), "the command says it: {md}");
    let emulation = md
        .lines()
        .find(|l| l.starts_with("**Storage emulation (lab).**"))
        .expect("the storage emulation note");
    assert!(
        emulation.contains("None (`--no-emulation`)") && !emulation.contains("read_mbps ="),
        "{emulation}"
    );
    let mine: Vec<_> = rows.iter().collect();
    assert!(!mine.is_empty(), "requests were made");
    for r in &mine {
        if r["rejected"] != "true" {
            assert_started(r);
        }
    }
    let own = table(md, "Nodes' own counters");
    let all = connections_match(&own, "least-load", &mine);
    assert!(all[4].parse::<u64>().expect("storage reads") > 0, "{all:?}");
}

/// `vigil bench|sim|lab` are the `vigil-lab` binary's: `vigil` runs the one beside it with
/// the same arguments (here `--help`, which `vigil` itself must not swallow); `vigil lab
/// chaos` runs `vigil-lab chaos`.
#[test]
fn vigil_hands_the_dev_tools_to_the_vigil_lab_binary_beside_it() {
    if std::env::var_os("VIGIL_BIN").is_some() || std::env::var_os("VIGIL_LAB_BIN").is_some() {
        eprintln!("skipped: VIGIL_BIN / VIGIL_LAB_BIN name binaries that need not sit together");
        return;
    }
    let (vigil, lab) = (vigil_tests::vigil_bin(), vigil_tests::vigil_lab_bin());
    assert_eq!(
        vigil.parent(),
        lab.parent(),
        "both built into one directory"
    );
    for (tool, says) in [("bench", "live"), ("sim", "scenario"), ("lab", "scenario")] {
        let out = vigil_tests::run_with_timeout(
            std::process::Command::new(&vigil).args([tool, "--help"]),
            std::time::Duration::from_secs(10),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "vigil {tool} --help: {out:?}");
        assert!(
            stdout.contains(&format!("vigil-lab {tool}")) && stdout.contains(says),
            "vigil {tool} --help is not vigil-lab's: {stdout}"
        );
    }
    // `vigil lab chaos` is the chaos run, not a scenario named "chaos".
    let out = vigil_tests::run_with_timeout(
        std::process::Command::new(&vigil).args(["lab", "chaos", "--help"]),
        std::time::Duration::from_secs(10),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "vigil lab chaos --help: {out:?}");
    assert!(
        stdout.contains("vigil-lab chaos") && stdout.contains("--minutes"),
        "vigil lab chaos --help is not vigil-lab chaos's: {stdout}"
    );
}

/// A `vigil` without `vigil-lab` beside it says how to build it instead of failing vaguely.
#[test]
fn vigil_without_the_lab_binary_names_the_build_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let alone = dir.path().join("vigil");
    std::fs::copy(vigil_tests::vigil_bin(), &alone).expect("copy vigil");
    let out = vigil_tests::run_with_timeout(
        std::process::Command::new(&alone).args(["sim", "seed-vod"]),
        std::time::Duration::from_secs(10),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("cargo build --bin vigil-lab"),
        "vigil sim without vigil-lab: {stderr}"
    );
}

/// `vigil-lab bench floor` (issue 29 §3) relays a node's camera to `vigil bench live`'s
/// viewers over TCP and UDP: every viewer plays, starts on a keyframe and loses nothing, and
/// the report has the floor's CPU (`--pid`). Only that it works: what it costs is
/// docs/BENCHMARKS.md's ("Fan-out at the kernel's floor").
#[test]
fn the_floor_relays_a_camera_to_bench_live_viewers() {
    use std::time::Duration;
    let node = vigil_tests::NodeBuilder::new()
        .extra("[[camera]]\nid = \"demo\"\nsource = \"demo\"")
        .start();
    node.wait_live("live/demo");
    let listen = format!("127.0.0.1:{}", vigil_testkit::ports::free_port("127.0.0.1"));
    // An even port pair free a moment ago, released for the floor to bind.
    let udp = vigil_testkit::ports::udp_port_pair().2;
    let floor = vigil_tests::spawn_background(
        std::process::Command::new(vigil_tests::vigil_lab_bin()).args([
            "bench",
            "floor",
            "--source",
            &node.url("live/demo"),
            "--listen",
            &listen,
            "--udp-port",
            &udp.to_string(),
        ]),
    );
    vigil_tests::poll_until(Duration::from_secs(20), "the floor listening", || {
        std::net::TcpStream::connect(&listen).ok()
    });
    for transport in ["tcp", "udp"] {
        let out = vigil_tests::run_with_timeout(
            std::process::Command::new(vigil_tests::vigil_lab_bin()).args([
                "bench",
                "live",
                "--url",
                &format!("rtsp://{listen}/live/floor"),
                "--readers",
                "3",
                "--transport",
                transport,
                "--warmup",
                "1",
                "--duration",
                "2",
                "--json",
                "--pid",
                &floor.0.id().to_string(),
            ]),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "bench live over {transport}: {out:?}");
        let r: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("bench live's JSON ({e}): {out:?}"));
        assert_eq!(r["connected"], 3, "{transport}: {r:#}");
        assert_eq!(r["steady_readers"], 3, "{transport}: {r:#}");
        assert_eq!(r["lost_packets"], 0, "{transport}: {r:#}");
        assert_eq!(r["first_video_packet_keyframe"], 3, "{transport}: {r:#}");
        assert!(r["total_packets"].as_u64().unwrap_or(0) > 0, "{r:#}");
        assert!(r["node_cpu_pct"].is_number(), "the floor's CPU: {r:#}");
    }
}
