//! Recording affinity: which node a playback of `(camera, T)` belongs on, so that every
//! viewer of one stretch of one recording starts on the same node and finds its first
//! segment in that node's cache (beyond the papers; measured in docs/EVALUATION.md).
//!
//! Why it exists: §A.4 steers a request to a node *playing* the camera near T, which only
//! helps while such a session runs; when none does, the request goes to the lightest node,
//! so the starts of one recording end up cached on every node, each copy evicted before it
//! is asked for again. Here the stretch `(camera, ⌊T / bucket⌋)` is ranked against the nodes
//! by rendezvous (highest-random-weight) hashing — Thaler & Ravishankar 1998: each node's
//! score is a hash of (key, node id) and the highest score wins — so a stretch keeps its node
//! while the membership is unchanged and only the stretches of a node that leaves move.
//! The load bound is that of consistent hashing with bounded loads (Mirrokni, Thorup,
//! Zadimoghaddam 2018): a node may take the request while its estimate stays within
//! (1 + ε) × the cluster's mean load after the request, plus one request's worth (their
//! ⌈·⌉, so the lightest node always qualifies); otherwise the next node in rank order.

use std::hash::Hasher;

/// The rendezvous score of `node` for the stretch `(camera, bucket)`.
///
/// FNV-1a (the `fnv` crate) keeps the score identical across processes and Rust releases
/// (std's `DefaultHasher` promises neither), which matters because a node deciding from its
/// own view when the scheduler is unreachable must rank as the scheduler does. FNV's low
/// bits mix poorly on short keys, so the result goes through SplitMix64's finaliser.
pub fn score(camera: &str, bucket: i64, node: &str) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(camera.as_bytes());
    h.write_u8(0xff);
    h.write(&bucket.to_le_bytes());
    h.write(node.as_bytes());
    mix(h.finish())
}

/// SplitMix64's finaliser (Steele, Lea, Flood 2014): every input bit flips about half the
/// output bits, so the scores of one key over different nodes are independent enough for
/// rendezvous hashing to split stretches evenly.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The stretch T falls in: `⌊T / bucket_ms⌋` (T before the epoch rounds down too).
pub fn bucket(time_ms: i64, bucket_ms: i64) -> i64 {
    time_ms.div_euclid(bucket_ms.max(1))
}

/// Node indexes in rendezvous order for `(camera, bucket)`: highest score first, ties (a
/// 64-bit collision) by node order.
pub fn rank<'a>(
    camera: &str,
    bucket: i64,
    nodes: impl Iterator<Item = (usize, &'a str)>,
) -> Vec<usize> {
    let mut scored: Vec<(u64, usize)> = nodes
        .map(|(i, id)| (score(camera, bucket, id), i))
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// The bounded-load limit on a candidate's estimated load: `(1 + ε) · mean_after + Δ`, with
/// `mean_after` the mean over the `n` eligible nodes once the request's `delta` is added.
/// The lightest node always fits: its estimate is at most `mean_before + Δ`.
pub fn load_bound(loads_sum: f64, n: usize, delta: f64, slack: f64) -> f64 {
    if n == 0 {
        return f64::NEG_INFINITY;
    }
    let mean_after = (loads_sum + delta) / n as f64;
    (1.0 + slack) * mean_after + delta
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_score_is_a_fixed_function_of_its_inputs() {
        // Pinned: a change of hash would move every stretch of a running cluster.
        assert_eq!(score("cam1", 0, "n0"), score("cam1", 0, "n0"));
        assert_ne!(score("cam1", 0, "n0"), score("cam1", 1, "n0"));
        assert_ne!(score("cam1", 0, "n0"), score("cam2", 0, "n0"));
        assert_ne!(score("cam1", 0, "n0"), score("cam1", 0, "n1"));
        // The separator keeps ("cam1", …) and ("cam", "1…") apart.
        assert_ne!(score("ab", 0, "c"), score("a", 0, "bc"));
        assert_eq!(mix(0), 0);
        assert_eq!(mix(1), 0x5692_161d_100b_05e5);
    }

    #[test]
    fn buckets_round_down_on_both_sides_of_zero() {
        assert_eq!(bucket(0, 600_000), 0);
        assert_eq!(bucket(599_999, 600_000), 0);
        assert_eq!(bucket(600_000, 600_000), 1);
        assert_eq!(bucket(-1, 600_000), -1);
        assert_eq!(bucket(5, 0), 5, "a zero bucket is treated as 1 ms");
    }

    #[test]
    fn stretches_spread_evenly_and_a_leaving_node_moves_only_its_own() {
        let ids: Vec<String> = (0..5).map(|i| format!("node-{i}")).collect();
        let all = || ids.iter().enumerate().map(|(i, s)| (i, s.as_str()));
        let mut owners = vec![0usize; 5];
        let mut first = Vec::new();
        for cam in 0..80 {
            for b in 0..5 {
                let r = rank(&format!("cam{cam}"), b, all());
                assert_eq!(r.len(), 5);
                owners[r[0]] += 1;
                first.push(r);
            }
        }
        // 400 stretches over 5 nodes: 80 expected each; binomial sd ≈ 8.
        for &o in &owners {
            assert!((50..=110).contains(&o), "owners {owners:?}");
        }
        // Node 2 leaves: a stretch whose first choice was not node 2 keeps its node, and one
        // that was node 2's goes to its second choice.
        let mut i = 0;
        for cam in 0..80 {
            for b in 0..5 {
                let without: Vec<usize> =
                    rank(&format!("cam{cam}"), b, all().filter(|&(n, _)| n != 2));
                let before = &first[i];
                let expect = if before[0] == 2 { before[1] } else { before[0] };
                assert_eq!(without[0], expect);
                i += 1;
            }
        }
    }

    #[test]
    fn the_bound_admits_the_lightest_node_and_scales_with_the_slack() {
        // Loads 10, 20, 30; Δ = 3: mean after = 63/3 = 21.
        assert!((load_bound(60.0, 3, 3.0, 0.1) - (1.1 * 21.0 + 3.0)).abs() < 1e-9);
        // The lightest (10 + 3 = 13) fits; the heaviest (30 + 3 = 33 > 26.1) does not.
        let b = load_bound(60.0, 3, 3.0, 0.1);
        assert!((13.0..33.0).contains(&b));
        // An idle cluster: Δ alone still fits.
        assert!(load_bound(0.0, 5, 2.0, 0.0) >= 2.0);
        assert_eq!(load_bound(0.0, 0, 2.0, 0.1), f64::NEG_INFINITY);
    }
}
