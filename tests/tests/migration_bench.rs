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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vigil_tests::secure_cluster::{
    self, migrate, playback_session, spawn_viewer, Seen, FRAME_TICKS,
};
use vigil_tests::{ctl, poll_until, rfc3339, Node};

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn row(name: &str, v: &mut [f64]) {
    println!(
        "| {name} | {} | {:.1} | {:.1} | {:.1} |",
        v.len(),
        pct(v, 0.5),
        pct(v, 0.99),
        pct(v, 1.0)
    );
}

/// CPU seconds (user + system) of a process.
fn cpu_secs(pid: u32) -> f64 {
    vigil_server::procfs::process(pid).map_or(0.0, |s| s.cpu_seconds)
}

/// Lost (never seen) and duplicated sequence numbers of one stream.
fn lost_and_dup(seen: &[Seen]) -> (usize, usize) {
    let lo = seen[0].seq;
    let mut count: BTreeMap<u16, usize> = BTreeMap::new();
    for s in seen {
        *count.entry(s.seq.wrapping_sub(lo)).or_default() += 1;
    }
    let span = count.keys().next_back().copied().unwrap_or(0) as usize + 1;
    let dup = count.values().filter(|&&c| c > 1).map(|c| c - 1).sum();
    (span - count.len(), dup)
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
        migrate(a, &id, &c.members[(k + 1) % 3].id, mode)
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

/// `n` moves made by `mv(k)` (its `vigil ctl migrate` output), each after ~0.5 s of media
/// from the previous sender: the server's gaps and when each move answered.
fn moves(
    seen: &Mutex<Vec<Seen>>,
    n: usize,
    mut mv: impl FnMut(usize) -> String,
) -> (Vec<f64>, Vec<Instant>) {
    let mut server = Vec::new();
    let mut moved_at = Vec::new();
    for k in 0..n {
        let out = mv(k);
        moved_at.push(Instant::now());
        if let Some(g) = out
            .split("gap ")
            .nth(1)
            .and_then(|r| r.split(" ms").next())
            .and_then(|g| g.parse::<f64>().ok())
        {
            server.push(g);
        }
        // Let the new sender run ~0.5 s (a dozen frames) before the next move.
        let n = seen.lock().unwrap().len();
        poll_until(Duration::from_secs(5), "media after the move", || {
            (seen.lock().unwrap().len() > n + 35).then_some(())
        });
    }
    (server, moved_at)
}

/// Prints the table of one run: the server's gaps, and the client's around each move.
fn report(title: &str, mut server: Vec<f64>, moved_at: &[Instant], seen: &[Seen]) {
    // Client side: the largest inter-arrival among the packets just before each move's
    // answer (the new sender's first frame goes out before the answer), and its excess
    // over the media spacing of the two packets.
    let (mut arrival, mut excess) = (Vec::new(), Vec::new());
    for &t in moved_at {
        let Some(i) = seen.iter().rposition(|s| s.at <= t) else {
            continue;
        };
        let window = seen[i.saturating_sub(12)..=i].windows(2);
        if let Some((gap, media)) = window
            .map(|w| {
                let gap = w[1].at.duration_since(w[0].at).as_secs_f64() * 1000.0;
                let media = w[1].ts.wrapping_sub(w[0].ts) as f64 / 90.0;
                (gap, media)
            })
            .max_by(|x, y| x.0.total_cmp(&y.0))
        {
            arrival.push(gap);
            excess.push(gap - media);
        }
    }
    let (lost, dup) = lost_and_dup(seen);
    println!("\n### {title}");
    println!("| figure (ms) | n | p50 | p99 | max |\n|---|---|---|---|---|");
    row(
        "server: last packet sent by old → first by new",
        &mut server,
    );
    row("client: inter-arrival around the move", &mut arrival);
    row(
        "client: that gap − media spacing of the two packets",
        &mut excess,
    );
    println!(
        "packets: {} received, {lost} lost, {dup} duplicated",
        seen.len()
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
        migrate(a, &id, &c.members[(k + 1) % 2].id, mode)
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
