//! The handoff-gap figures of the migration benchmarks (`migration_bench` on loopback, the
//! bed's `hosts::bench` across hosts), computed once: a series of moves of one session
//! while the project's client records every video packet, then the server's gaps, the
//! client's inter-arrival around each move and its excess over the media spacing, and the
//! packets lost or duplicated.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::poll_until;
use crate::secure_cluster::Seen;

/// The `p` quantile of `v` (sorted in place); NaN when empty.
pub fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A Markdown row: name, count, p50, p99, max.
pub fn row(name: &str, v: &mut [f64]) {
    println!(
        "| {name} | {} | {:.1} | {:.1} | {:.1} |",
        v.len(),
        pct(v, 0.5),
        pct(v, 0.99),
        pct(v, 1.0)
    );
}

/// Lost (never seen) and duplicated sequence numbers of one stream.
pub fn lost_and_dup(seen: &[Seen]) -> (usize, usize) {
    let Some(first) = seen.first() else {
        return (0, 0);
    };
    let lo = first.seq;
    let mut count: BTreeMap<u16, usize> = BTreeMap::new();
    for s in seen {
        *count.entry(s.seq.wrapping_sub(lo)).or_default() += 1;
    }
    let span = count.keys().next_back().copied().unwrap_or(0) as usize + 1;
    let dup = count.values().filter(|&&c| c > 1).map(|c| c - 1).sum();
    (span - count.len(), dup)
}

/// The server's gap in a `vigil ctl migrate` answer ("… gap 40.1 ms …").
pub fn ctl_gap(out: &str) -> Option<f64> {
    out.split("gap ")
        .nth(1)
        .and_then(|r| r.split(" ms").next())
        .and_then(|g| g.parse::<f64>().ok())
}

/// `n` moves made by `mv(k)` (the server's gap it reported, if any), each after ~0.5 s of
/// media from the previous sender: the server's gaps and when each move answered.
pub fn moves(
    seen: &Mutex<Vec<Seen>>,
    n: usize,
    mut mv: impl FnMut(usize) -> Option<f64>,
) -> (Vec<f64>, Vec<Instant>) {
    let mut server = Vec::new();
    let mut moved_at = Vec::new();
    for k in 0..n {
        let gap = mv(k);
        moved_at.push(Instant::now());
        server.extend(gap);
        // Let the new sender run ~0.5 s (a dozen frames) before the next move.
        let n = seen.lock().unwrap().len();
        poll_until(Duration::from_secs(5), "media after the move", || {
            (seen.lock().unwrap().len() > n + 35).then_some(())
        });
    }
    (server, moved_at)
}

/// Prints the table of one run: the server's gaps, and the client's around each move.
pub fn report(title: &str, mut server: Vec<f64>, moved_at: &[Instant], seen: &[Seen]) {
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
