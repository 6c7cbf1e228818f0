//! The 50-node run of issue 13: 50 `vigil` processes on 127.0.0.1–50 gossiping; membership
//! converges, one scheduler is elected and agreed by all, and after its `kill -9` the 49
//! survivors agree on the next one. Ignored by default (50 processes on the test machine);
//! run it, with its figures printed, by
//! `cargo test -p vigil-tests --test cluster_fifty -- --ignored --nocapture`.
//! The figures are printed, not asserted (the deadlines only bound the test).
//!
//! `VIGIL_FIFTY_CLUSTER="failure_timeout_ms = 0"` adds keys to every node's `[cluster]` (that
//! one: the phi-accrual detector of before issue 13, for comparison); `VIGIL_BIN` runs another
//! build (a release one).
//!
//! Each node is watched by its own thread polling its API every 200 ms, so a figure is when
//! the last node got there (within a poll), not the length of a sweep over 50 APIs.
//!
//! The big node: the last node started carries, once the cluster has elected, the state of
//! issue 13's busy node — 5000 playback streams, 500 live cameras, 1000 cached ranges — and
//! the run measures when every other node's view shows it whole (stream count, live cameras
//! and cached ranges equal to the big node's view of itself) and the gossip bytes meanwhile.
//! That state is **synthetic**: the node is started with the test-only hook
//! `VIGIL_FAULT_SYNTHETIC_REPORT` (`server/src/cluster/synthetic.rs`), which pads its report
//! with made-up entries (5000 real RTSP sessions beside 49 other nodes exceed the machine);
//! `VIGIL_FIFTY_PADDING` changes the amounts (`streams=N live=N cached=N`).
//! `VIGIL_FIFTY_NODES` runs another member count (5, 20).

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use vigil_tests::{
    alive_ids, node_id, nodes_view, poll_every, scheduler_of, start_member_env, Node,
};

const NODES: usize = 50;
const PADDING: &str = "streams=5000 live=500 cached=1000";
const KEY: &str = "fifty-node-cluster-key-0123456789";
const POLL: Duration = Duration::from_millis(200);

fn gossip_sent(n: &Node) -> Option<u64> {
    nodes_view(n)?["gossip"]["bytes_sent"].as_u64()
}

/// How long after `since` each node first met `cond` (one polling thread per node).
fn first_times(
    nodes: &[Node],
    since: Instant,
    timeout: Duration,
    what: &str,
    cond: impl Fn(&Node) -> bool + Sync,
) -> Vec<Duration> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| {
                let cond = &cond;
                s.spawn(move || {
                    poll_every(POLL, timeout, what, || cond(n).then(|| since.elapsed()))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("poller"))
            .collect()
    })
}

/// "median / slowest node" of per-node times.
fn spread(mut t: Vec<Duration>) -> String {
    t.sort();
    format!("{:.1?} / {:.1?}", t[t.len() / 2], t[t.len() - 1])
}

/// Gossip bytes sent so far by every node, in node order.
fn gossip_sent_all(nodes: &[Node]) -> Vec<u64> {
    let v: Vec<u64> = nodes.iter().filter_map(gossip_sent).collect();
    assert_eq!(v.len(), nodes.len(), "a node's gossip counters");
    v
}

/// Mean bytes per second sent per node between two samples `secs` apart.
fn per_node_rate(before: &[u64], after: &[u64], secs: f64) -> f64 {
    after.iter().zip(before).map(|(a, b)| a - b).sum::<u64>() as f64 / before.len() as f64 / secs
}

/// Node `id` as `n` sees it: (streams, live cameras, cached ranges).
fn state_of(n: &Node, id: &str) -> Option<(u64, usize, u64)> {
    let v = nodes_view(n)?;
    let e = v["nodes"].as_array()?.iter().find(|e| e["id"] == id)?;
    Some((
        e["streams"].as_u64()?,
        e["live"].as_array()?.len(),
        e["cached_ranges"].as_u64()?,
    ))
}

fn scheduler_changes(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| n.log().matches("scheduler changed").count())
        .sum()
}

#[test]
#[ignore = "50 vigil processes: run by hand (see the module doc)"]
fn fifty_nodes_converge_elect_and_survive_the_schedulers_kill() {
    let count: usize = std::env::var("VIGIL_FIFTY_NODES").ok().map_or(NODES, |v| {
        v.parse().expect("VIGIL_FIFTY_NODES: a member count")
    });
    assert!(
        count >= 3,
        "at least 3 members (the scheduler, its successor, the big node)"
    );
    let padding_dir = tempfile::tempdir().expect("padding dir");
    let padding_file = padding_dir.path().join("padding");
    let padding_env = padding_file.to_str().expect("utf-8 temp path").to_string();
    let mut nodes = Vec::with_capacity(count);
    let mut seed: Option<SocketAddr> = None;
    let started = Instant::now();
    // Keys before the first table header land in `[cluster]` (start_member's last table).
    let extra = format!(
        "{}\n[storage]\nenabled = false\n",
        std::env::var("VIGIL_FIFTY_CLUSTER").unwrap_or_default()
    );
    for i in 0..count {
        let priority = 10 * (i as u32 + 1);
        // The last node carries the big (synthetic) state later.
        let env: &[(&str, &str)] = if i == count - 1 {
            &[("VIGIL_FAULT_SYNTHETIC_REPORT", &padding_env)]
        } else {
            &[]
        };
        let (node, gossip) = start_member_env(i, seed, KEY, priority, &extra, env);
        seed.get_or_insert(gossip);
        nodes.push(node);
    }
    let all_up = Instant::now();
    let mut want: Vec<String> = nodes.iter().map(node_id).collect();
    want.sort();
    let converged = first_times(
        &nodes,
        all_up,
        Duration::from_secs(120),
        "all members alive in every view",
        |n| alive_ids(n).as_ref() == Some(&want),
    );
    let first = node_id(&nodes[0]);
    let elected = first_times(
        &nodes,
        all_up,
        Duration::from_secs(60),
        "node 1 agreed as scheduler",
        |n| scheduler_of(n).as_deref() == Some(&first),
    );
    let changes_at_election = scheduler_changes(&nodes);

    // Gossip volume and stability of the idle cluster over 10 s.
    let before = gossip_sent_all(&nodes);
    std::thread::sleep(Duration::from_secs(10));
    let per_node = per_node_rate(&before, &gossip_sent_all(&nodes), 10.0);
    let changes_idle = scheduler_changes(&nodes) - changes_at_election;

    // The big node: its report padded (synthetic) from now on; when does every other node's
    // view show it whole, and what does the gossip send meanwhile and after?
    let padding = std::env::var("VIGIL_FIFTY_PADDING").unwrap_or_else(|_| PADDING.into());
    let big = &nodes[count - 1];
    let big_id = node_id(big);
    let before = gossip_sent_all(&nodes);
    let big_before = gossip_sent(big).expect("big node's counters");
    std::fs::write(&padding_file, &padding).expect("write the padding file");
    let armed = Instant::now();
    let want = poll_every(
        POLL,
        Duration::from_secs(60),
        "the big node's own report",
        || state_of(big, &big_id).filter(|s| s.0 > 0 && s.1 > 0 && s.2 > 0),
    );
    let own = armed.elapsed();
    let seen = first_times(
        &nodes[..count - 1],
        armed,
        Duration::from_secs(180),
        "the big node's state whole in every view",
        |n| state_of(n, &big_id) == Some(want),
    );
    let whole_after = armed.elapsed();
    let during = per_node_rate(&before, &gossip_sent_all(&nodes), whole_after.as_secs_f64());
    let big_during = (gossip_sent(big).expect("big node's counters") - big_before) as f64
        / whole_after.as_secs_f64();
    // Steady state with the big node (its positions advance, so each report changes).
    let before = gossip_sent_all(&nodes);
    std::thread::sleep(Duration::from_secs(10));
    let with_big = per_node_rate(&before, &gossip_sent_all(&nodes), 10.0);
    let still_whole = nodes[..count - 1]
        .iter()
        .filter(|n| state_of(n, &big_id) == Some(want))
        .count();
    let changes_big = scheduler_changes(&nodes) - changes_at_election - changes_idle;

    // kill -9 of the scheduler: the 49 survivors agree on node 2.
    let second = node_id(&nodes[1]);
    nodes[0].kill();
    let killed = Instant::now();
    let failover = first_times(
        &nodes[1..],
        killed,
        Duration::from_secs(60),
        "node 2 agreed by the survivors",
        |n| scheduler_of(n).as_deref() == Some(&second),
    );
    println!(
        "{count}-node run: {count} nodes started in {:.1?}",
        all_up - started
    );
    println!(
        "  membership converged (all alive with a report), median / slowest node, after the \
         last start: {}",
        spread(converged)
    );
    println!(
        "  node 1 agreed as scheduler, median / slowest node: {}",
        spread(elected)
    );
    println!("  scheduler changes logged by all nodes until then: {changes_at_election}");
    println!("  gossip {per_node:.0} bytes/s sent per node (idle, 10 s)");
    println!("  scheduler changes logged by all nodes in those idle 10 s: {changes_idle}");
    println!(
        "  big node ({padding}, synthetic): its own view showed it after {own:.1?} \
         ({} streams, {} live, {} cached ranges)",
        want.0, want.1, want.2
    );
    println!(
        "  big node's state whole in every other view, median / slowest node: {} (all {:.1?})",
        spread(seen),
        whole_after
    );
    println!(
        "  gossip while it spread: {during:.0} bytes/s sent per node, {big_during:.0} by the \
         big node"
    );
    println!(
        "  gossip with the big node (10 s after): {with_big:.0} bytes/s sent per node; \
         {still_whole} of {} views still had its state whole at the end",
        count - 1
    );
    println!("  scheduler changes logged meanwhile: {changes_big}");
    println!(
        "  node 2 agreed after kill -9 of node 1, median / slowest survivor: {}",
        spread(failover)
    );
}
