//! Migration figures for docs/BENCHMARKS.md (issue 7), run by hand — they take minutes and
//! measure rather than assert:
//!
//! ```sh
//! cargo test --release -p vigil-tests --test migration_bench -- --ignored --nocapture --test-threads 1
//! ```
//!
//! * a live viewer's handoff gap over 100 moves between the camera's holder and an edge,
//!   per source mode;
//! * handoff gap over 100 moves per source mode: the server's (last frame sent by the old
//!   sender → first by the new) and the client's (inter-arrival of the two packets around the
//!   move, and its excess over the media spacing of the two frames), lost and duplicated
//!   packets;
//! * REM: decision → move committed;
//! * drain of 200 UDP playbacks: time, and the drained node's CPU while it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vigil_tests::handoff::{ctl_gap, moves, report};
use vigil_tests::secure_cluster::{self, migrate, playback_session, spawn_viewer, FRAME_TICKS};
use vigil_tests::{ctl, poll_until, rfc3339, Node};

/// CPU seconds (user + system) of a process.
fn cpu_secs(pid: u32) -> f64 {
    vigil_server::procfs::process(pid).map_or(0.0, |s| s.cpu_seconds)
}

fn gaps(mode: &str) {
    let c = secure_cluster::start(3, "", |_| String::new());
    let first = c.recorded_for(10_000);
    let a = c.node(0);
    let url = secure_cluster::placed(&format!(
        "{}?start={}&end={}",
        a.url("playback/demo"),
        rfc3339(first),
        rfc3339(first + 75_000)
    ));
    let (seen, viewer) = spawn_viewer(url, None);
    let id = playback_session(a);
    poll_until(Duration::from_secs(5), "media", || {
        (seen.lock().unwrap().len() > 50).then_some(())
    });
    let (server, moved_at) = moves(&seen, 100, |k| {
        ctl_gap(&migrate(a, &id, &c.members[(k + 1) % 3].id, mode))
    });
    drop(viewer);
    report(
        &format!(
            "{mode} mode: 100 moves of one 1× playback (25 fps, frame interval {} ms)",
            FRAME_TICKS / 90
        ),
        server,
        &moved_at,
        &seen.lock().unwrap().clone(),
    );
}

/// A live UDP viewer of the demo camera on node 1 (its holder) moved 100 times between
/// node 1 and node 2 (an edge relaying the camera from node 1), in `mode`.
fn live_gaps(mode: &str) {
    let c = secure_cluster::start(2, "", |_| String::new());
    let a = c.node(0);
    a.wait_live("live/demo");
    secure_cluster::holder_known(&c);
    let stop = Arc::new(AtomicBool::new(false));
    let (seen, viewer) = secure_cluster::spawn_live_viewer(
        secure_cluster::placed(&a.url("live/demo")),
        stop.clone(),
    );
    let id = secure_cluster::live_session(a);
    poll_until(Duration::from_secs(5), "media", || {
        (seen.lock().unwrap().len() > 50).then_some(())
    });
    let (server, moved_at) = moves(&seen, 100, |k| {
        ctl_gap(&migrate(a, &id, &c.members[(k + 1) % 2].id, mode))
    });
    stop.store(true, Ordering::Relaxed);
    viewer.join().expect("viewer");
    let log = format!("{}{}", a.log(), c.node(1).log());
    let joins = |how: &str| {
        log.lines()
            .filter(|l| l.contains("live viewer continued here") && l.contains(how))
            .count()
    };
    let seen = seen.lock().unwrap().clone();
    let sources: std::collections::BTreeSet<_> = seen.iter().filter_map(|s| s.from).collect();
    println!(
        "joins: {} right after the last packet sent, {} at a keyframe; {} source addresses seen",
        joins("Exact"),
        joins("Keyframe"),
        sources.len()
    );
    report(
        &format!("live viewer, {mode} mode: 100 moves between the holder and an edge (25 fps)"),
        server,
        &moved_at,
        &seen,
    );
}

#[test]
#[ignore]
fn bench_live_handoff_gap_own() {
    live_gaps("own");
}

#[test]
#[ignore]
fn bench_live_handoff_gap_preserve() {
    live_gaps("preserve");
}

#[test]
#[ignore]
fn bench_handoff_gap_own() {
    gaps("own");
}

#[test]
#[ignore]
fn bench_handoff_gap_preserve() {
    gaps("preserve");
}

#[test]
#[ignore]
fn bench_rem_decision_to_commit() {
    let (c, viewers) = secure_cluster::rem_scenario();
    let took: Vec<f64> = secure_cluster::rem_moves(&c, 2)
        .iter()
        .filter_map(|m| m["took_ms"].as_f64())
        .collect();
    println!("\n### REM: decision → move committed (ms): {took:?}");
    println!("{}", ctl(c.node(0), &["scheduler"]));
    for (_, h) in viewers {
        let _ = h.join();
    }
}

#[test]
#[ignore]
fn bench_drain_200_udp_sessions() {
    let c = secure_cluster::start_with_ports(
        3,
        "",
        |_| "[limits]\nmax_sessions = 1000\n".into(),
        Some(998),
    );
    let first = c.recorded_for(10_000);
    let n2: &Node = c.node(1);
    let viewers: Vec<_> = (0..200)
        .map(|k| {
            let url = secure_cluster::placed(&format!(
                "{}?start={}&end={}",
                n2.url("playback/demo"),
                rfc3339(first + 20 * k),
                rfc3339(first + 60_000)
            ));
            spawn_viewer(url, None)
        })
        .collect();
    poll_until(Duration::from_secs(60), "200 playbacks on node 2", || {
        (n2.api_json("/api/sessions").as_array()?.len() >= 200).then_some(())
    });
    let pid = n2.pid().expect("pid");
    let cpu0 = cpu_secs(pid);
    let t0 = Instant::now();
    let out = ctl(c.node(0), &["drain", &c.members[1].id]);
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs(pid) - cpu0;
    println!("\n### drain of 200 UDP playbacks off node 2\n{out}");
    println!(
        "drain took {wall:.2} s; node 2 used {cpu:.2} CPU-s meanwhile ({:.0} % of a core)",
        100.0 * cpu / wall
    );
    drop(viewers);
}
